#!/bin/sh
# phxrun: the environment each rank sees, a failing rank stopping the job
# (no process left behind), signals forwarded, SIGKILL after the grace
# period, and option errors.
top_builddir=${top_builddir:-.}
PHXRUN=$top_builddir/tools/phxrun
T=$(mktemp -d "${TMPDIR:-/tmp}/phxrun.XXXXXX")
trap 'rm -rf "$T"' EXIT
n=0
fails=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi; }
check() { if eval "$1"; then ok 0 "$2"; else ok 1 "$2"; fi; }
# 0 when none of the pids in the file is alive (zombies awaiting their
# reaper count as dead; SIGKILL takes a moment: retry for 2 s)
alive() { [ -r /proc/$1/stat ] && [ "$(cut -d' ' -f3 /proc/$1/stat 2>/dev/null)" != Z ]; }
none_alive() {
  i=0
  while [ $i -lt 20 ]; do
    left=""
    for p in $(cat "$1"); do if alive "$p"; then left="$left $p"; fi; done
    [ -z "$left" ] && return 0
    sleep 0.1; i=$((i + 1))
  done
  echo "# still alive:$left"; return 1
}
now() { date +%s.%N; }
elapsed() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.2f", a - b }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

echo "1..31"

# --- the environment of each rank
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_NUM_THREADS OMP_NUM_THREADS
"$PHXRUN" --nproc-per-node 3 --standalone sh -c \
  'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $PHX_NUM_THREADS $OMP_NUM_THREADS" > "$0/env.$RANK"' "$T"
ok $? "three ranks exit 0, so does phxrun"
check '[ "$(cut -d" " -f1-5 "$T/env.0")" = "0 3 0 3 0" ] && [ "$(cut -d" " -f1-5 "$T/env.2")" = "2 3 2 3 0" ]' \
  "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK per rank"
check '[ "$(cut -d" " -f6 "$T/env.1")" = 127.0.0.1 ] && [ "$(cut -d" " -f7 "$T/env.1")" -gt 0 ] && [ "$(cut -d" " -f7 "$T/env.0")" = "$(cut -d" " -f7 "$T/env.2")" ]' \
  "--standalone: MASTER_ADDR 127.0.0.1 and one free MASTER_PORT for all"
cores=$(nproc); per=$((cores / 3)); [ $per -lt 1 ] && per=1
check '[ "$(cut -d" " -f8-9 "$T/env.0")" = "$per $per" ]' "PHX_NUM_THREADS and OMP_NUM_THREADS = cores / 3 = $per"
PHX_NUM_THREADS=7 "$PHXRUN" --nproc-per-node 1 --standalone sh -c 'echo $PHX_NUM_THREADS > "$0/threads"' "$T"
check '[ "$(cat "$T/threads")" = 7 ]' "a PHX_NUM_THREADS already set is kept"

"$PHXRUN" --nproc_per_node=2 --nnodes 3 --node-rank 2 --master-addr 10.1.2.3 --master-port 4321 sh -c \
  'echo "$RANK $WORLD_SIZE $LOCAL_RANK $GROUP_RANK $MASTER_ADDR $MASTER_PORT" > "$0/node.$LOCAL_RANK"' "$T"
check '[ "$(cat "$T/node.0")" = "4 6 0 2 10.1.2.3 4321" ] && [ "$(cat "$T/node.1")" = "5 6 1 2 10.1.2.3 4321" ]' \
  "node 2 of 3: RANK = node_rank * N + local, master from the options"
MASTER_ADDR=h MASTER_PORT=999 "$PHXRUN" --nproc-per-node 1 sh -c 'echo "$MASTER_ADDR:$MASTER_PORT" > "$0/m"' "$T"
check '[ "$(cat "$T/m")" = "h:999" ]' "MASTER_ADDR/MASTER_PORT from the environment when not given"
echo "typed input" | "$PHXRUN" --nproc-per-node 2 --standalone sh -c 'cat > "$0/stdin.$RANK"' "$T"
check '[ ! -s "$T/stdin.0" ] && [ ! -s "$T/stdin.1" ]' "ranks read stdin from /dev/null"

# --- a rank exits 3: the others (and what they started) stop within seconds
: > "$T/pids"
start=$(now)
"$PHXRUN" --nproc-per-node 3 --standalone sh -c '
  sleep 300 & echo $! >> "$0/pids"; echo $$ >> "$0/pids"
  if [ "$RANK" = 1 ]; then sleep 0.5; exit 3; fi; wait' "$T" 2> "$T/err"
rc=$?
took=$(elapsed "$start")
check '[ $rc = 3 ]' "a rank exiting 3 makes phxrun exit 3 (got $rc)"
check 'lt "$took" 4' "... within seconds (${took} s)"
check 'grep -q "rank 1 (pid [0-9]*) exited with status 3" "$T/err"' "... naming the rank and its status"
check '[ $(wc -l < "$T/pids") = 6 ] && none_alive "$T/pids"' "... and no rank or child of a rank is left"

# --- a rank killed by a signal
"$PHXRUN" --nproc-per-node 2 --standalone sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; sleep 300' 2> "$T/err"
rc=$?
check '[ $rc = 137 ] && grep -q "rank 0 (pid [0-9]*) was killed by signal 9" "$T/err"' \
  "a rank killed by SIGKILL: phxrun exits 137 and says so (got $rc)"

# --- SIGTERM to phxrun stops every rank
: > "$T/pids"
"$PHXRUN" --nproc-per-node 3 --standalone sh -c 'echo $$ >> "$0/pids"; sleep 300 & echo $! >> "$0/pids"; wait' "$T" 2> "$T/err" &
prun=$!
i=0; while [ $(wc -l < "$T/pids") -lt 6 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
start=$(now)
kill -TERM $prun
wait $prun
rc=$?
took=$(elapsed "$start")
check '[ $rc = 143 ]' "SIGTERM to phxrun: exit status 143 (got $rc)"
check 'lt "$took" 4' "... promptly (${took} s)"
check 'none_alive "$T/pids"' "... every rank and its children are gone"

# --- SIGINT is forwarded; a rank ignoring SIGTERM gets SIGKILL after --grace
: > "$T/pids"
"$PHXRUN" --nproc-per-node 2 --standalone --grace 1 sh -c '
  trap "" TERM; echo $$ >> "$0/pids"
  if [ "$RANK" = 0 ]; then trap "echo INT >> \"$0/int\"; exit 5" INT; else trap "" INT; fi
  while :; do sleep 0.1; done' "$T" 2> "$T/err" &
prun=$!
i=0; while [ $(wc -l < "$T/pids") -lt 2 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 0.3
start=$(now)
kill -INT $prun
wait $prun
rc=$?
took=$(elapsed "$start")
check '[ -f "$T/int" ]' "SIGINT is forwarded to the ranks"
check '[ $rc = 130 ] && lt 0.9 "$took" && lt "$took" 5 && none_alive "$T/pids"' "a rank ignoring it and SIGTERM is killed after the 1 s grace (rc $rc, ${took} s)"
check 'grep -q "still running after 1 s; sending SIGKILL" "$T/err"' "... and phxrun says so"

# --- errors
"$PHXRUN" sh -c true 2> "$T/err"
rc=$?
check '[ $rc = 2 ] && grep -q "nproc-per-node is required" "$T/err"' "no --nproc-per-node: exit 2 with a message"
"$PHXRUN" --nproc-per-node 2 --nnodes 2 --node-rank 2 true 2> "$T/err"
check '[ $? = 2 ] && grep -q "node-rank 2 must be below --nnodes 2" "$T/err"' "node rank >= nnodes is an error"
"$PHXRUN" --nproc-per-node 1 --standalone /no/such/program 2> "$T/err"
rc=$?
check '[ $rc = 127 ] && grep -q "cannot run ./no/such/program." "$T/err"' "a program that cannot run: exit 127, named"
# numbers are digits only, as the environment's; a grace period is bounded
# (--grace inf never escalated to SIGKILL)
for bad in "--nproc-per-node  2" "--nproc-per-node +2" "--master-port  29501" "--grace inf" "--grace 1e30" \
  "--grace 0x3"; do
  opt=${bad%% *} val=${bad#* }
  "$PHXRUN" --standalone "$opt" "$val" sh -c 'touch "$0/started"' "$T" 2> "$T/err"
  rc=$?
  check '[ $rc = 2 ] && grep -q -- "$opt .$val.: expected" "$T/err" && [ ! -e "$T/started" ]' \
    "$opt '$val': exit 2 naming the option, no rank started ($(head -c 120 "$T/err"))"
done
MASTER_PORT=' 29501' "$PHXRUN" --nproc-per-node 1 sh -c 'touch "$0/started"' "$T" 2> "$T/err"
rc=$?
check '[ $rc = 2 ] && grep -q "MASTER_PORT . 29501.: expected" "$T/err" && [ ! -e "$T/started" ]' \
  "MASTER_PORT=' 29501': exit 2 naming it"
"$PHXRUN" --nproc-per-node 1 --standalone --grace 2.5 sh -c 'touch "$0/started"' "$T" 2> "$T/err"
check '[ $? = 0 ] && [ -e "$T/started" ]' "--grace 2.5 is taken"
rm -f "$T/started"

# --- a port another job's store holds: exit 2 before starting any rank
mkdir "$T/busy"
"$PHXRUN" --nproc-per-node 1 --standalone "$top_builddir/t/world/store_client" job "$T/busy" 2> /dev/null &
other=$!
i=0; while [ ! -s "$T/busy/port" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
port=$(cat "$T/busy/port")
"$PHXRUN" --nproc-per-node 1 --master-port "$port" sh -c 'touch "$0/started"' "$T" 2> "$T/err"
rc=$?
check '[ $rc = 2 ] && grep -q "port $port is in use on this node" "$T/err" && [ ! -e "$T/started" ]' \
  "a port another job's store listens on: exit 2 naming it, no rank started"
touch "$T/busy/done"
wait $other

exit $fails
