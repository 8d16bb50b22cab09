#!/bin/sh
# Multi-node misconfigurations fail in seconds, not after PHX_TIMEOUT
# (doc/guide/multinode.md):
#   phxrun --nnodes 2 with no master address;
#   a master address that is a name resolving to loopback (phxrun, and a
#     rank started by another launcher: RANK/WORLD_SIZE/LOCAL_WORLD_SIZE),
#     or no MASTER_ADDR at all, on a world that spans nodes;
#   across namespaces (t/multinode/lib.sh), node 0 not started: the
#     message says the attempts were refused; node 0's cable pulled: the
#     message says they got no answer.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
d=$(mktemp -d)
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
note() { sed 's/^/# /' "$1" | tail -4; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_TIMEOUT=60 PHX_STORE_TOKEN=mn-misconfig-$$ PHX_COMM=gloo
prog="$b/examples/ddp"
echo "1..9"
t=0
result() { t=$((t + 1)); if [ "$1" = 0 ]; then echo "ok $t - $2"; else echo "not ok $t - $2"; fi; }

start=$(mn_now)
"$b/tools/phxrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 "$prog" >"$d/a" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc = 2 ] && grep -q "nnodes 2 needs --master-addr" "$d/a" && mn_le "$took" 1
result $? "phxrun --nnodes 2 without --master-addr: an error in $took s (exit $rc)"
[ $rc = 2 ] || note "$d/a"

# localhost: a name every resolver maps to loopback
start=$(mn_now)
"$b/tools/phxrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr localhost "$prog" >"$d/b" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc = 2 ] && grep -q "resolves to .*loopback.*/etc/hosts" "$d/b" && mn_le "$took" 1
result $? "phxrun --nnodes 2 --master-addr localhost: an error naming /etc/hosts in $took s"
[ $rc = 2 ] || note "$d/b"
start=$(mn_now)
RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=localhost MASTER_PORT=29500 "$prog" >"$d/c" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -q "host 'localhost' resolves to .*/etc/hosts" "$d/c" && mn_le "$took" 1
result $? "rank 1 of 2, one per node, MASTER_ADDR=localhost: an error naming /etc/hosts in $took s"
[ $rc != 0 ] || note "$d/c"
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=localhost MASTER_PORT=1 PHX_TIMEOUT=1 \
    "$prog" >"$d/c2" 2>&1
! grep -q "/etc/hosts" "$d/c2"
result $? "... but one node of 2 ranks on localhost is fine (no such error)"
start=$(mn_now)
RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_PORT=29500 "$prog" >"$d/c3" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -q "this world spans nodes but MASTER_ADDR is not set" "$d/c3" && mn_le "$took" 1
result $? "rank 1 of 2, one per node, no MASTER_ADDR: an error naming MASTER_ADDR in $took s"
[ $rc != 0 ] || note "$d/c3"

why=$(mn_skip)
if [ -n "$why" ]; then
    for i in 6 7 8 9; do echo "ok $i # SKIP $why"; done
    exit 0
fi
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
start=$(mn_now)
mn_exec 1 env PHX_TIMEOUT=3 "$b/tools/phxrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
    --master-addr "$(mn_addr 0)" --master-port 29500 "$prog" >"$d/e" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -q "all [0-9]* connection attempts were refused" "$d/e"
result $? "node 0 not started: 'refused' after $took s (PHX_TIMEOUT=3)"
grep -o "no store server.*" "$d/e" | head -1 | sed 's/^/#   /'
mn_le "$took" 5
result $? "... within PHX_TIMEOUT + 2 s"

mn_link 0 down
start=$(mn_now)
mn_exec 1 env PHX_TIMEOUT=3 "$b/tools/phxrun" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
    --master-addr "$(mn_addr 0)" --master-port 29500 "$prog" >"$d/f" 2>&1
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -Eq "timed out \(no answer from|is unreachable" "$d/f" && ! grep -q "refused" "$d/f"
result $? "node 0's cable pulled: 'no answer' or 'unreachable', not 'refused', after $took s"
grep -Eo "(no store server|host ).*" "$d/f" | head -1 | sed 's/^/#   /'
mn_le "$took" 5
result $? "... within PHX_TIMEOUT + 2 s"
