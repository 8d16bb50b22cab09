#!/bin/sh
# Process groups across nodes: t/comm/split (groups by parity and by
# blocks of 2, which are the nodes here; hybrid shard-in-node /
# replicate-across-nodes groups used alternately; UNDEFINED, a split of a
# group, bad arguments, a parent freed first) in one world of 2 nodes x 2
# ranks on gloo: network namespaces on a bridge (t/multinode/lib.sh), one
# phxrun per node. Rank 0 (node 0) prints the TAP for all four.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_TIMEOUT=30 PHX_STORE_TOKEN=split-nodes-$$
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
mn_tap_2x2 "$b/t/comm/split" 20 "$d"
