#!/bin/sh
# phxrun's torchrun-style --tee values (0 none, 1 stdout, 2 stderr, 3
# both; bare --tee is 3) and its report of Ctrl-C: SIGINT to phxrun is
# forwarded to the ranks and reported as "stopped by SIGINT", exit 130,
# not as a failure.
b=${top_builddir:-.}
run="$b/tools/phxrun"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
note() { sed 's/^/# /' "$1" | tail -6; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
echo "1..9"
cat >"$d/rank" <<'RANK'
#!/bin/sh
echo "out $RANK"
echo "err $RANK" >&2
RANK
chmod +x "$d/rank"
# go T ARGS...: phxrun with one rank of $d/rank; stdout in $d/o, stderr in $d/e
go() { "$run" --standalone --nproc-per-node 1 "$@" "$d/rank" >"$d/o" 2>"$d/e"; }

go --tee 3; rc=$?
[ $rc = 0 ] && grep -qx "\[rank0\]: out 0" "$d/o" && grep -qx "\[rank0\]: err 0" "$d/e" &&
    echo "ok 1 - --tee 3 (torchrun's form): both streams prefixed, the 3 is not the program" ||
    { echo "not ok 1 - exit $rc"; note "$d/o"; note "$d/e"; }
go --tee; rc=$?
[ $rc = 0 ] && grep -qx "\[rank0\]: out 0" "$d/o" && grep -qx "\[rank0\]: err 0" "$d/e" &&
    echo "ok 2 - bare --tee is 3" || { echo "not ok 2 - exit $rc"; note "$d/e"; }
go --tee=1; rc=$?
[ $rc = 0 ] && grep -qx "\[rank0\]: out 0" "$d/o" && grep -qx "err 0" "$d/e" &&
    echo "ok 3 - --tee=1: stdout prefixed, stderr as without --tee" || { echo "not ok 3 - exit $rc"; note "$d/o"; note "$d/e"; }
go --log-dir "$d/logs" --tee 2; rc=$?
[ $rc = 0 ] && ! grep -q . "$d/o" && grep -qx "\[rank0\]: err 0" "$d/e" &&
    grep -qx "out 0" "$d/logs/attempt_0/0/stdout.log" && grep -qx "err 0" "$d/logs/attempt_0/0/stderr.log" &&
    echo "ok 4 - --log-dir --tee 2: stderr to the file and the terminal, stdout to its file only" ||
    { echo "not ok 4 - exit $rc"; note "$d/o"; note "$d/e"; }
go --tee 0; rc=$?
[ $rc = 0 ] && grep -qx "out 0" "$d/o" && grep -qx "err 0" "$d/e" && echo "ok 5 - --tee 0: no tee" ||
    { echo "not ok 5 - exit $rc"; note "$d/e"; }
go --tee 5; rc=$?
[ $rc = 2 ] && grep -q "^phxrun: --tee '5': expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both)" "$d/e" &&
    echo "ok 6 - --tee 5 explains the values (exit 2)" || { echo "not ok 6 - exit $rc"; note "$d/e"; }

# Ctrl-C: SIGINT to phxrun (what the terminal sends to its process group)
cat >"$d/sleeper" <<SLEEP
#!/bin/sh
touch "$d/started.\$RANK"
exec sleep 30
SLEEP
chmod +x "$d/sleeper"
"$run" --standalone --nproc-per-node 2 "$d/sleeper" >"$d/o" 2>"$d/e" &
pid=$!
i=0
while [ $i -lt 500 ] && ! { [ -e "$d/started.0" ] && [ -e "$d/started.1" ]; }; do sleep 0.02; i=$((i + 1)); done
kill -INT $pid
wait $pid
rc=$?
[ $rc = 130 ] && echo "ok 7 - SIGINT: phxrun exits 130" || { echo "not ok 7 - exit $rc"; note "$d/e"; }
grep -q "^phxrun: stopped by SIGINT (Ctrl-C)" "$d/e" && echo "ok 8 - reported as 'stopped by SIGINT'" ||
    { echo "not ok 8"; note "$d/e"; }
! grep -q "failed" "$d/e" && echo "ok 9 - and not as 'failed'" || { echo "not ok 9"; note "$d/e"; }
