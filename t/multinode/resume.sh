#!/bin/sh
# Restarts and checkpoints across nodes (t/multinode/lib.sh), gloo, 2
# nodes x 1 rank of examples/fashion_mnist --epochs 3 --resume on a path
# both nodes share (a cluster's shared file system):
#   --max-restarts 2, and in attempt 0 rank 0 (node 0), then in another
#     job rank 1 (node 1), killed by SIGKILL once epoch 1's checkpoint
#     exists: each node restarts once, the ranks resume from epoch 1, and
#     the last epoch's loss line and the test accuracy equal the
#     uninterrupted run's exactly (the resume is bit-exact: the weights,
#     AdamW's state and step count come from the checkpoint, the data
#     order from the epoch number); the same on 2 nodes x 2 ranks with
#     rank 1 (node 0) and rank 3 (node 1), each a node's second rank;
#   node 1's cable pulled for 3 s the moment epoch 1's save begins
#     (t/multinode/cut_at_save.py), PHX_TIMEOUT=30: the job goes on and
#     ends with the same lines;
#   the cable pulled for good when epoch 2's save begins, PHX_TIMEOUT=5,
#     no restarts: both nodes fail (exit != 0) within PHX_TIMEOUT + 2 s;
#     the checkpoint on disk is epoch 1's or epoch 2's and loads; the job
#     started again on it (network back) ends with the same lines.
# No process is left after each.
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
src=$(cd "${top_srcdir:-.}" && pwd)
. "$src/t/multinode/lib.sh"
why=$(mn_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
data=${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "1..0 # SKIP no Fashion-MNIST in $data"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_STORE_TOKEN=mn-resume-$$ PHX_FASHION_MNIST="$data"
prog="$b/examples/fashion_mnist"
echo "1..23"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
tn=0 # (mn_exec uses n)
result() { tn=$((tn + 1)); if [ "$1" = 0 ]; then echo "ok $tn - $2"; else echo "not ok $tn - $2"; fi; return "$1"; }
note() { sed 's/^/# /' "$1" | tail -8; }
cat >"$d/rank.sh" <<RANK
#!/bin/sh
# rank.sh NAME VICTIM ARGS...: fashion_mnist ARGS; in attempt 0 the rank
# VICTIM dies by SIGKILL once NAME's epoch-1 checkpoint exists
name=\$1 victim=\$2
shift 2
[ "\$PHX_RESTART_COUNT" = 0 ] && [ "\$RANK" = "\$victim" ] || exec "$prog" "\$@"
"$prog" "\$@" & pid=\$!
while [ ! -e "$d/\$name.st" ] && kill -0 \$pid 2>/dev/null; do sleep 0.02; done
kill -9 \$pid
wait \$pid
RANK
chmod +x "$d/rank.sh"
# job NAME VICTIM TIMEOUT RESTARTS [NPROC]: both nodes' phxrun (NPROC
# ranks each, default 1) in the background ($run0, $run1); each writes
# "EXIT SECONDS" to NAME.end<node> when its phxrun ends (the time taken on
# the node, not by a poll here)
job() {
    for i in 0 1; do
        mn_bg $i sh -c "PHX_TIMEOUT=$3 \"$b/tools/phxrun\" --nnodes 2 --node-rank $i --nproc-per-node ${5:-1} \
            --max-restarts $4 --master-addr $(mn_addr 0) --master-port 29500 --grace 2 \"$d/rank.sh\" $1 $2 \
            --epochs 3 --resume \"$d/$1.st\" >\"$d/$1.out$i\" 2>&1; echo \$? \$(date +%s.%N) >\"$d/$1.end$i\""
        eval "run$i=\$MN_PID"
    done
}
finish() { wait $run0; wait $run1; }
# the lines a run must end with: its last epoch's loss, the test accuracy
lines() { sed -n 's/^\(Epoch \[3\/3\], Loss: [0-9.]*\),.*/\1/p; s/^\(Test accuracy: .*\)/\1/p' "$1" | tr '\n' ' '; }
rc_of() { cut -d' ' -f1 "$1" 2>/dev/null; }
nothing_left() {
    left=$(mn_leftovers)
    [ -z "$left" ]
    result $? "$1: no process left" || echo "$left" | sed 's/^/#   /'
}

# ---- uninterrupted
job ref none 30 2
finish
ref=$(lines "$d/ref.out0")
[ "$(rc_of "$d/ref.end0")" = 0 ] && [ "$(rc_of "$d/ref.end1")" = 0 ] && [ -n "$ref" ]
result $? "uninterrupted, 2 nodes x 1: $ref" || { note "$d/ref.out0"; note "$d/ref.out1"; }

# ---- each rank killed in turn
for v in 0 1; do
    job kill$v $v 30 2
    finish
    got=$(lines "$d/kill$v.out0")
    [ "$(rc_of "$d/kill$v.end0")" = 0 ] && [ "$(rc_of "$d/kill$v.end1")" = 0 ] &&
        [ "$(grep -c "restarting the ranks" "$d/kill$v.out0")" = 1 ] &&
        [ "$(grep -c "restarting the ranks" "$d/kill$v.out1")" = 1 ]
    result $? "rank $v killed on node $v: each node restarts once, the job ends with exit 0" ||
        { note "$d/kill$v.out0"; note "$d/kill$v.out1"; }
    grep -q "^loaded $d/kill$v.st (epoch 1," "$d/kill$v.out0"
    result $? "rank $v killed: the new ranks resume from the epoch-1 checkpoint"
    [ -n "$ref" ] && [ "$got" = "$ref" ]
    result $? "rank $v killed: the uninterrupted run's lines, exactly ($got)"
    nothing_left "rank $v killed"
done

# ---- 2 nodes x 2 ranks: the second rank of each node killed in turn
job ref4 none 30 2 2
finish
ref4=$(lines "$d/ref4.out0")
[ "$(rc_of "$d/ref4.end0")" = 0 ] && [ "$(rc_of "$d/ref4.end1")" = 0 ] && [ -n "$ref4" ]
result $? "uninterrupted, 2 nodes x 2: $ref4" || { note "$d/ref4.out0"; note "$d/ref4.out1"; }
for v in 1 3; do
    job kill4r$v $v 30 2 2
    finish
    got=$(lines "$d/kill4r$v.out0")
    [ "$(rc_of "$d/kill4r$v.end0")" = 0 ] && [ "$(rc_of "$d/kill4r$v.end1")" = 0 ] &&
        [ "$(grep -c "restarting the ranks" "$d/kill4r$v.out0")" = 1 ] &&
        [ "$(grep -c "restarting the ranks" "$d/kill4r$v.out1")" = 1 ] &&
        grep -q "^loaded $d/kill4r$v.st (epoch 1," "$d/kill4r$v.out0" && [ -n "$ref4" ] && [ "$got" = "$ref4" ]
    result $? "2 x 2, rank $v (node $((v / 2)), local rank 1) killed: one restart per node, resumed from epoch 1, the uninterrupted lines ($got)" ||
        { note "$d/kill4r$v.out0"; note "$d/kill4r$v.out1"; }
    nothing_left "2 x 2, rank $v killed"
done

# ---- a 3 s blip as epoch 1's save begins
job blip none 30 0
python3 "$src/t/multinode/cut_at_save.py" "$d" blip.st "$MN-sw" p1 3 120 >"$d/blip.cut" 2>&1
finish
got=$(lines "$d/blip.out0")
[ "$(rc_of "$d/blip.end0")" = 0 ] && [ "$(rc_of "$d/blip.end1")" = 0 ] && [ "$got" = "$ref" ] &&
    grep -q "^cut" "$d/blip.cut"
result $? "cable out 3 s at epoch 1's save ($(cat "$d/blip.cut")), PHX_TIMEOUT=30: the job goes on, same lines" ||
    { note "$d/blip.out0"; note "$d/blip.out1"; }
"$prog" --epochs 0 --load "$d/blip.st" >"$d/blip.load" 2>&1
grep -q "^loaded $d/blip.st (epoch 3," "$d/blip.load"
result $? "... its last checkpoint loads ($(head -1 "$d/blip.load"))"
nothing_left "blip at a save"

# ---- a partition as epoch 2's save begins
job cut none 5 0
i=0
while [ $i -lt 1200 ] && ! [ -e "$d/cut.st" ]; do sleep 0.05; i=$((i + 1)); done
python3 "$src/t/multinode/cut_at_save.py" "$d" cut.st "$MN-sw" p1 0 120 >"$d/cut.cut" 2>&1
from=$(mn_now)
finish
mn_link 1 up
end0=$(mn_secs "$from" "$(cut -d' ' -f2 "$d/cut.end0" | cut -c1-14)")
end1=$(mn_secs "$from" "$(cut -d' ' -f2 "$d/cut.end1" | cut -c1-14)")
[ "$(rc_of "$d/cut.end0")" != 0 ] && [ "$(rc_of "$d/cut.end1")" != 0 ] && mn_le "$end0" 7 && mn_le "$end1" 7
result $? "cable out for good at epoch 2's save ($(cat "$d/cut.cut")), PHX_TIMEOUT=5: both nodes fail, in $end0 s and $end1 s (exit $(rc_of "$d/cut.end0"), $(rc_of "$d/cut.end1"))"
grep "^rank\|Error\|error" "$d/cut.out0" | head -2 | cut -c1-200 | sed 's/^/#   node 0: /'
"$prog" --epochs 0 --load "$d/cut.st" >"$d/cut.load" 2>&1
rc=$?
ep=$(sed -n "s|^loaded $d/cut.st (epoch \([0-9]*\),.*|\1|p" "$d/cut.load")
[ $rc = 0 ] && { [ "$ep" = 1 ] || [ "$ep" = 2 ]; }
result $? "the checkpoint on disk is epoch 1's or 2's and loads (epoch $ep, exit $rc)" || note "$d/cut.load"
ls "$d" | grep -q "^cut.st.tmp" && result 1 "no temporary file is left beside it" || result 0 "no temporary file is left beside it"
nothing_left "partition at a save"
job cut none 30 0
finish
got=$(lines "$d/cut.out0")
[ "$(rc_of "$d/cut.end0")" = 0 ] && [ "$(rc_of "$d/cut.end1")" = 0 ] &&
    grep -q "^loaded $d/cut.st (epoch $ep," "$d/cut.out0" && [ "$got" = "$ref" ]
result $? "started again on it: resumes from epoch $ep and ends with the uninterrupted run's lines ($got)" ||
    { note "$d/cut.out0"; note "$d/cut.out1"; }
nothing_left "the resumed job"
