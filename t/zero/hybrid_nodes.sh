#!/bin/sh
# Hybrid sharding across nodes: t/zero/hybrid's jobs (MLP, CNN, GPT;
# ZeRO-1 and ZeRO-2 sharded within a node, replicated across nodes, each
# against DDP within 1e-6 after 10 AdamW steps) in one world of 2 nodes x
# 2 ranks on gloo: network namespaces on a bridge (t/multinode/lib.sh), one
# phxrun per node. Rank 0 (node 0) prints the TAP for all four.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(mn_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
d=$(mktemp -d)
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_TIMEOUT=30 PHX_STORE_TOKEN=zero-hybrid-nodes-$$
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
pids=
for i in 0 1; do
    mn_exec $i timeout -k 5 240 "$b/tools/phxrun" --nnodes 2 --node-rank $i --nproc-per-node 2 \
        --master-addr "$(mn_addr 0)" --master-port 29500 "$b/t/zero/hybrid" >"$d/out.$i" 2>&1 &
    pids="$pids $!"
done
worst=0
for p in $pids; do wait "$p" || worst=$?; done
# node 0's TAP lines (phxrun may prefix nothing: the ranks' stdout as is)
grep -E '^(not )?ok [0-9]+|^1\.\.[0-9]+' "$d/out.0" | grep -v '^1\.\.' >"$d/tap"
n=$(grep -c '^ok ' "$d/tap")
nn=$(grep -c '^not ok ' "$d/tap")
cat "$d/tap"
k=$(wc -l <"$d/tap")
k=$((k + 1))
if [ "$worst" = 0 ] && [ "$n" -ge 6 ] && [ "$nn" = 0 ]; then
    echo "ok $k - 2 nodes x 2 ranks: both phxruns exit 0, $n checks passed on rank 0"
else
    echo "not ok $k - 2 nodes x 2 ranks: exit $worst, $n checks passed, $nn failed"
    for i in 0 1; do sed "s/^/# node $i: /" "$d/out.$i" | grep -v ' ok [0-9]' | tail -15; done
fi
echo "1..$k"
