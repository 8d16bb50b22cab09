#!/bin/sh
# A network outage shorter than PHX_TIMEOUT is survived (gloo, 2 nodes,
# t/multinode/lib.sh): node 1's cable is pulled for 8 s while
# t/multinode/loop all-reduces with PHX_TIMEOUT=30; the job goes on with
# every result right and ends within TCP's retransmission backoff of the
# outage's end (no store reply deadline, no connection given up).
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(mn_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
d=$(mktemp -d)
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_TIMEOUT=30 PHX_COMM=gloo PHX_STORE_TOKEN=mn-outage-$$
echo "1..3"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
for i in 0 1; do
    mn_bg $i env MN_SECONDS=2 MN_READY="$d/ready" "$b/tools/phxrun" --nnodes 2 --node-rank $i --nproc-per-node 1 \
        --master-addr "$(mn_addr 0)" --master-port 29500 "$b/t/multinode/loop" >"$d/out$i" 2>&1
    eval "run$i=\$MN_PID"
done
i=0
while [ $i -lt 200 ] && ! [ -s "$d/ready.1" ]; do sleep 0.05; i=$((i + 1)); done
mn_link 1 down
sleep 8
mn_link 1 up
back=$(mn_now)
wait $run0; rc0=$?
wait $run1; rc1=$?
took=$(mn_secs "$back" "$(mn_now)")
[ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "rounds, all right" "$d/out0" && echo "ok 1 - 8 s outage, PHX_TIMEOUT=30: the job goes on, every result right ($(tail -1 "$d/out0"))" ||
    { echo "not ok 1 - 8 s outage: exit $rc0, $rc1"; sed 's/^/# /' "$d/out0" "$d/out1" | tail -6; }
mn_le "$took" 10 && echo "ok 2 - it ends $took s after the cable is back (TCP's retransmission backoff)" ||
    echo "not ok 2 - it ends $took s after the cable is back"
left=$(mn_leftovers)
[ -z "$left" ] && echo "ok 3 - no process left" || { echo "not ok 3 - processes left"; echo "$left" | sed 's/^/# /'; }
