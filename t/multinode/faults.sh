#!/bin/sh
# Faults across nodes (t/multinode/lib.sh: network namespaces on a bridge),
# gloo, t/multinode/loop under one phxrun per node, PHX_TIMEOUT=5:
#   a rank on node 1 killed (SIGKILL): both nodes end within 3 s, node 0
#     naming the dead rank;
#   node 1's phxrun killed (SIGKILL): its rank and node 0 end within 3 s;
#   node 1's cable pulled for 3 s: the job goes on, every result right;
#   node 1's cable pulled for good: every rank on both sides ends within
#     PHX_TIMEOUT + 2 s with a message naming the peer or the store (the
#     end taken on each node as its phxrun exits).
# After each, no process is left on either node.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
note() { sed 's/^/# /' "$1" | tail -6; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_TIMEOUT=5 PHX_COMM=gloo PHX_STORE_TOKEN=mn-faults-$$
T=5
echo "1..11"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }

t=0
result() { # ok?, text
    t=$((t + 1))
    if [ "$1" = 0 ]; then echo "ok $t - $2"; else echo "not ok $t - $2"; fi
}
# start NAME SECONDS: the loop on both nodes, 1 rank each, each phxrun
# under a shell on its node that writes "EXIT TIME" to NAME.end<node> the
# moment phxrun ends (so a time is the node's own, not a poll's here) and
# phxrun's pid to NAME.pid<node>; waits until both ranks have done a round
# (their pids in $d/NAME.ready.R)
start() {
    rm -f "$d/$1".*
    for i in 0 1; do
        mn_bg $i sh -c "MN_SECONDS=$2 MN_READY=\"$d/$1.ready\" \"$b/tools/phxrun\" --nnodes 2 --node-rank $i \
            --nproc-per-node 1 --master-addr $(mn_addr 0) --master-port 29500 --grace 2 \
            \"$b/t/multinode/loop\" >\"$d/$1.out$i\" 2>&1 & echo \$! >\"$d/$1.pid$i\"; wait \$!; \
            echo \$? \$(date +%s.%N | cut -c1-14) >\"$d/$1.end$i\""
        eval "run$i=\$MN_PID"
    done
    i=0
    while [ $i -lt 200 ] && ! { [ -s "$d/$1.ready.0" ] && [ -s "$d/$1.ready.1" ]; }; do sleep 0.05; i=$((i + 1)); done
    [ -s "$d/$1.ready.1" ] || { note "$d/$1.out0"; note "$d/$1.out1"; }
}
# finish NAME FROM: waits for both nodes; sets rc0 rc1, and end0 end1:
# each node's phxrun's end in seconds since FROM
finish() {
    wait $run0 $run1
    for i in 0 1; do
        read -r rc e <"$d/$1.end$i" || { rc=? e=$2; }
        eval "rc$i=\$rc end$i=\$(mn_secs \"\$2\" \"\$e\")"
    done
}
nothing_left() {
    left=$(mn_leftovers)
    [ -z "$left" ]
    r=$?
    result $r "$1: no process left on either node"
    [ $r = 0 ] || echo "$left" | sed 's/^/# /'
}

# ---- a rank killed
start kill 60
from=$(mn_now)
kill -9 "$(cat "$d/kill.ready.1")"
finish kill "$from"
[ $rc0 != 0 ] && [ $rc1 != 0 ] && mn_le "$end0" 3 && mn_le "$end1" 3 && grep -q "rank 1" "$d/kill.out0"
result $? "rank 1 killed: both nodes end, node 0 in $end0 s naming rank 1, node 1 in $end1 s (exit $rc0, $rc1)"
grep "rank 0" "$d/kill.out0" | head -2 | sed 's/^/#   node 0: /'
nothing_left "rank killed"

# ---- node 1's phxrun killed
start agent 60
from=$(mn_now)
kill -9 "$(cat "$d/agent.pid1")"
finish agent "$from"
[ $rc0 != 0 ] && mn_le "$end0" 3
result $? "node 1's phxrun killed: node 0 ends in $end0 s (exit $rc0)"
grep "rank 0" "$d/agent.out0" | head -2 | sed 's/^/#   node 0: /'
nothing_left "phxrun killed"

# ---- a 3 s outage
start blip 7
mn_link 1 down
sleep 3
mn_link 1 up
finish blip "$(mn_now)"
[ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "rounds, all right" "$d/blip.out0"
result $? "node 1's cable out for 3 s: the job goes on ($(cat "$d/blip.out0" | tail -1))"
[ $rc0 = 0 ] || note "$d/blip.out0"
[ $rc1 = 0 ] || note "$d/blip.out1"
nothing_left "3 s outage"

# ---- a partition
# What this proves: each side ends on its collective's timeout naming the
# peer, with no second PHX_TIMEOUT wait (node 0's store waiting for the
# cut-off client: gap >= T) and no fixed 10 s store deadline (gap 5 s at
# T = 5). The gap over PHX_TIMEOUT is measured on each node from its
# phxrun's own end (start), not by a poll here, so a loaded machine
# stretches only the ranks' exit, which is timer-bound.
start cut 60
from=$(mn_now)
mn_link 1 down
finish cut "$from"
gap0=$(mn_secs $T "$end0") gap1=$(mn_secs $T "$end1")
mn_le "$gap0" 2 && [ $rc0 != 0 ]
result $? "partition: node 0 ends PHX_TIMEOUT + $gap0 s after the cut ($end0 s, PHX_TIMEOUT $T s, exit $rc0)"
mn_le "$gap1" 2 && [ $rc1 != 0 ]
result $? "partition: node 1 ends PHX_TIMEOUT + $gap1 s after the cut ($end1 s, exit $rc1)"
grep -Eq "rank 1|10\.77\.0\.2" "$d/cut.out0"
result $? "node 0's message names rank 1"
grep "^rank 0" "$d/cut.out0" | head -1 | sed 's/^/#   node 0: /'
grep -Eq "rank 0|store|10\.77\.0\.1" "$d/cut.out1"
result $? "node 1's message names rank 0 or the store"
grep "^rank 1" "$d/cut.out1" | head -1 | sed 's/^/#   node 1: /'
nothing_left "partition"
mn_link 1 up
