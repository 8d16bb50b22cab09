#!/bin/sh
# phxrun --tee when a rank's tee helper dies: 2 ranks (a shell script, no
# libphalanx) with --log-dir and --tee; once rank 1 has written its first
# lines, the test SIGKILLs rank 1's helper (the child of phxrun that holds
# rank 1's stdout.log), then rank 1 writes 200 more lines to stdout and to
# stderr. phxrun names the helper, not the rank; the job exits 0 and every
# line written after the kill reaches the log files and the terminal.
b=${top_builddir:-.}
run="$b/tools/phxrun"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
note() { sed 's/^/# /' "$1" | tail -8; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
echo "1..5"

cat >"$d/rank" <<RANK
#!/bin/sh
echo "before \$RANK"
echo "before err \$RANK" >&2
i=0
while [ ! -e "$d/killed" ] && [ \$i -lt 500 ]; do sleep 0.02; i=\$((i + 1)); done
i=1
while [ \$i -le 200 ]; do echo "after \$RANK \$i"; echo "after err \$RANK \$i" >&2; i=\$((i + 1)); done
RANK
chmod +x "$d/rank"
"$run" --standalone --nproc-per-node 2 --log-dir "$d/logs" --tee "$d/rank" >"$d/out" 2>"$d/err" &
runner=$!
log="$d/logs/attempt_0/1/stdout.log"
tee_pid=
i=0
while [ $i -lt 500 ] && [ -z "$tee_pid" ]; do
    if grep -q "^before 1" "$log" 2>/dev/null; then
        for p in $(ps -o pid= --ppid "$runner"); do
            ls -l "/proc/$p/fd" 2>/dev/null | grep -q " $log\$" && tee_pid=$p
        done
    fi
    [ -n "$tee_pid" ] || sleep 0.02
    i=$((i + 1))
done
[ -n "$tee_pid" ] && kill -9 "$tee_pid"
touch "$d/killed"
wait $runner
rc=$?
[ -n "$tee_pid" ] && [ $rc = 0 ] && echo "ok 1 - rank 1's tee helper (pid $tee_pid) killed mid-run: the job still exits 0" ||
    { echo "not ok 1 - helper pid '$tee_pid', exit $rc"; note "$d/err"; }
grep -q "^phxrun: the --tee helper of rank 1 (pid $tee_pid) died: killed by signal 9 (Killed); a new helper" "$d/err" &&
    ! grep -q "rank 1 (pid [0-9]*) was killed\|signal 13" "$d/err" &&
    echo "ok 2 - phxrun names the helper, not the rank (no SIGPIPE)" || { echo "not ok 2"; note "$d/err"; }
n=$(grep -c "^after 1 " "$log")
e=$(grep -c "^after err 1 " "$d/logs/attempt_0/1/stderr.log")
[ "$n" = 200 ] && [ "$e" = 200 ] && grep -qx "after 1 200" "$log" &&
    echo "ok 3 - rank 1's log files hold all 200 lines written after the kill (stdout and stderr)" ||
    echo "not ok 3 - $n and $e of 200"
n=$(grep -c "^\[rank1\]: after 1 " "$d/out")
e=$(grep -c "^\[rank1\]: after err 1 " "$d/err")
[ "$n" = 200 ] && [ "$e" = 200 ] && echo "ok 4 - and the terminal got them all behind [rank1]: ($n, $e)" ||
    { echo "not ok 4 - $n and $e of 200"; note "$d/out"; }
[ "$(grep -c "^\[rank0\]: after 0 " "$d/out")" = 200 ] && echo "ok 5 - rank 0's output is untouched" ||
    echo "not ok 5"
