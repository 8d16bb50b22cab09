#!/bin/sh
# phxrun --max-restarts, --log-dir and --tee with examples/fashion_mnist
# --resume: rank 1 is killed (SIGKILL) in epoch 2 of the first attempt;
# phxrun stops the ranks, starts them again with PHX_RESTART_COUNT=1, they
# resume from the epoch-1 checkpoint and end with the test accuracy of an
# uninterrupted run. Also --nproc-per-node cpu|gpu|auto and --rdzv-endpoint.
b=${top_builddir:-.}
run="$b/tools/phxrun"
prog="$b/examples/fashion_mnist"
data=${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
note() { sed 's/^/# /' "$1" | tail -8; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT CUDA_VISIBLE_DEVICES
export PHX_TIMEOUT=20 PHX_COMM=gloo
echo "1..18"

if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    "$run" --standalone --nproc-per-node 2 "$prog" --epochs 2 --resume "$d/a.st" >"$d/a" 2>&1
    rc=$?
    acc=$(sed -n 's/^Test accuracy: //p' "$d/a")
    [ $rc = 0 ] && [ -n "$acc" ] && echo "ok 1 - uninterrupted: 2 epochs, test accuracy $acc" ||
        { echo "not ok 1 - exit $rc"; note "$d/a"; }

    # rank 1 of attempt 0 dies by SIGKILL once epoch 1's checkpoint exists
    cat >"$d/victim" <<VICTIM
#!/bin/sh
[ "\$PHX_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ] || exec "$prog" "\$@"
"$prog" "\$@" & pid=\$!
while [ ! -e "$d/b.st" ] && kill -0 \$pid 2>/dev/null; do sleep 0.02; done
kill -9 \$pid
wait \$pid
VICTIM
    chmod +x "$d/victim"
    "$run" --standalone --nproc-per-node 2 --max-restarts 1 --log-dir "$d/logs" --tee \
        "$d/victim" --epochs 2 --resume "$d/b.st" >"$d/b" 2>"$d/be"
    rc=$?
    [ $rc = 0 ] && grep -Eq "rank 1 \(pid [0-9]+\) (was killed by signal 9|exited with status 137)" "$d/be" &&
        grep -q "restarting the ranks (restart 1 of at most 1, PHX_RESTART_COUNT=1)" "$d/be" &&
        grep -qx "phxrun: succeeded after 1 restart" "$d/be" &&
        echo "ok 2 - a rank killed in attempt 0: phxrun restarts the ranks once and the job succeeds" ||
        { echo "not ok 2 - exit $rc"; note "$d/be"; }
    grep -q "^\[rank0\]: loaded $d/b.st (epoch 1," "$d/b" &&
        echo "ok 3 - the restarted ranks resume from the epoch-1 checkpoint" || { echo "not ok 3"; note "$d/b"; }
    acc2=$(sed -n 's/^\[rank0\]: Test accuracy: //p' "$d/b")
    [ -n "$acc" ] && [ "$acc2" = "$acc" ] &&
        echo "ok 4 - the same final test accuracy as the uninterrupted run ($acc2)" ||
        echo "not ok 4 - $acc2 after the restart, $acc uninterrupted"
    n=0
    for a in 0 1; do for r in 0 1; do for f in stdout stderr; do
        [ -f "$d/logs/attempt_$a/$r/$f.log" ] && n=$((n + 1))
    done; done; done
    [ $n = 8 ] && echo "ok 5 - --log-dir: attempt_{0,1}/{0,1}/{stdout,stderr}.log" ||
        { echo "not ok 5 - $n of 8 files"; find "$d/logs" | sed 's/^/# /'; }
    grep -qx "Test accuracy: $acc2" "$d/logs/attempt_1/0/stdout.log" &&
        ! grep -q "Test accuracy" "$d/logs/attempt_0/0/stdout.log" &&
        echo "ok 6 - the log files hold each attempt's own lines, without the prefix" || echo "not ok 6"
    grep -q "^\[rank0\]: " "$d/b" && ! grep -v "^\[rank[01]\]: " "$d/b" | grep -q . &&
        ! grep -v "^phxrun: " "$d/be" | grep -v "^\[rank[01]\]: " | grep -q . &&
        echo "ok 7 - --tee: every line a rank wrote reaches the terminal behind its rank" ||
        { echo "not ok 7"; note "$d/b"; note "$d/be"; }
else
    for i in 1 2 3 4 5 6 7; do echo "ok $i # SKIP no Fashion-MNIST at $data"; done
fi

"$run" --standalone --nproc-per-node 2 --max-restarts 2 --grace 1 \
    sh -c 'echo "attempt $PHX_RESTART_COUNT rank $RANK"; [ $RANK = 1 ] && exit 3; exec sleep 30' >"$d/c" 2>"$d/ce"
rc=$?
[ $rc = 3 ] && [ "$(grep 'rank 1$' "$d/c" | tr '\n' ' ')" = "attempt 0 rank 1 attempt 1 rank 1 attempt 2 rank 1 " ] &&
    [ "$(grep -c restarting "$d/ce")" = 2 ] &&
    grep -q "^phxrun: attempt 1 of 3 failed: rank 1 " "$d/ce" && grep -q "^phxrun: attempt 3 of 3 failed: " "$d/ce" &&
    grep -qx "phxrun: no restarts left (--max-restarts 2): exit status 3" "$d/ce" &&
    echo "ok 8 - --max-restarts 2: three attempts (each named), no restarts left, then the rank's status (3)" ||
    { echo "not ok 8 - exit $rc"; note "$d/ce"; }

"$run" --standalone --nproc-per-node 2 --max-restarts 3 --grace 1 sh -c 'echo started; exec sleep 30' >"$d/e" 2>&1 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] && [ "$(grep -c started "$d/e")" = 2 ] && ! grep -q restarting "$d/e" &&
    echo "ok 9 - a signal to phxrun ends the job: no restart (exit 143)" || { echo "not ok 9 - exit $rc"; note "$d/e"; }

cores=$(nproc)
n=$("$run" --standalone --nproc-per-node cpu sh -c 'echo $WORLD_SIZE' | sort -u)
[ "$n" = "$cores" ] && echo "ok 10 - --nproc-per-node cpu: one rank per core ($n)" || echo "not ok 10 - $n, $cores cores"
n=$(CUDA_VISIBLE_DEVICES=0,1 "$run" --standalone --nproc-per-node gpu sh -c 'echo $WORLD_SIZE' | sort -u)
[ "$n" = 2 ] && echo "ok 11 - --nproc-per-node gpu: one rank per visible GPU (CUDA_VISIBLE_DEVICES=0,1: $n)" ||
    echo "not ok 11 - $n"
CUDA_VISIBLE_DEVICES= "$run" --standalone --nproc-per-node gpu true 2>"$d/g"
rc=$?
[ $rc = 2 ] && grep -q "nproc-per-node gpu: this node shows no GPU" "$d/g" &&
    echo "ok 12 - --nproc-per-node gpu without a GPU is an error" || { echo "not ok 12 - exit $rc"; note "$d/g"; }
n=$(CUDA_VISIBLE_DEVICES= "$run" --standalone --nproc-per-node auto sh -c 'echo $WORLD_SIZE' | sort -u)
[ "$n" = "$cores" ] && echo "ok 13 - --nproc-per-node auto without a GPU: the cores ($n)" || echo "not ok 13 - $n"
"$run" --nproc-per-node three true 2>"$d/h"
[ $? = 2 ] && grep -q "expected 1..4096, gpu, cpu or auto" "$d/h" &&
    echo "ok 14 - a bad --nproc-per-node names what is accepted" || { echo "not ok 14"; note "$d/h"; }
v=$("$run" --rdzv-endpoint 127.0.0.9:29777 --nproc-per-node 1 sh -c 'echo $MASTER_ADDR:$MASTER_PORT')
w=$("$run" --rdzv_endpoint=localhost --nproc-per-node 1 sh -c 'echo $MASTER_ADDR:$MASTER_PORT')
[ "$v" = 127.0.0.9:29777 ] && [ "$w" = localhost:29400 ] &&
    echo "ok 15 - --rdzv-endpoint HOST:PORT sets MASTER_ADDR and MASTER_PORT (port 29400 when left out)" ||
    echo "not ok 15 - '$v' '$w'"
"$run" --rdzv-endpoint 127.0.0.1:99999 --nproc-per-node 1 true 2>"$d/i"
[ $? = 2 ] && grep -q "port '99999': expected an integer in 1..65535" "$d/i" &&
    echo "ok 16 - a bad --rdzv-endpoint port is an error" || { echo "not ok 16"; note "$d/i"; }

if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    # --workers: batches assembled on threads are the same batches
    "$prog" --epochs 1 --workers 0 | grep -E "^(Epoch|Test)" | sed 's/, [0-9]* samples.*//' >"$d/w0"
    "$prog" --epochs 1 --workers 3 | grep -E "^(Epoch|Test)" | sed 's/, [0-9]* samples.*//' >"$d/w3"
    [ "$(wc -l <"$d/w0")" = 2 ] && cmp -s "$d/w0" "$d/w3" &&
        echo "ok 17 - --workers 3 trains exactly as --workers 0 ($(tr '\n' ' ' <"$d/w3"))" ||
        { echo "not ok 17"; note "$d/w0"; note "$d/w3"; }
    # --uneven: 3 ranks with 1/6, 2/6 and 3/6 of the data train inside a DDP join
    "$run" --standalone --nproc-per-node 3 --grace 1 "$prog" --epochs 1 --uneven >"$d/u" 2>&1
    rc=$?
    [ $rc = 0 ] && grep -q "^Test accuracy: 0\.[5-9]" "$d/u" &&
        echo "ok 18 - --uneven: ranks with 10000, 20000 and 30000 samples finish under a DDP join ($(grep '^Test' "$d/u"))" ||
        { echo "not ok 18 - exit $rc"; note "$d/u"; }
else
    echo "ok 17 # SKIP no Fashion-MNIST at $data"
    echo "ok 18 # SKIP no Fashion-MNIST at $data"
fi
