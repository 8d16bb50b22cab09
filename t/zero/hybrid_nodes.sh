#!/bin/sh
# Hybrid sharding across nodes: t/zero/hybrid's jobs (MLP, CNN, GPT;
# ZeRO-1 and ZeRO-2 sharded within a node, replicated across nodes, each
# against DDP within 1e-6 after 10 AdamW steps) in one world of 2 nodes x
# 2 ranks on gloo: network namespaces on a bridge (t/multinode/lib.sh), one
# phxrun per node. Rank 0 (node 0) prints the TAP for all four.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_TIMEOUT=30 PHX_STORE_TOKEN=zero-hybrid-nodes-$$
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
mn_tap_2x2 "$b/t/zero/hybrid" 6 "$d"
