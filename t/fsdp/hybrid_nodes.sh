#!/bin/sh
# ZeRO-3 (FSDP) across nodes: t/fsdp/mpi's jobs (MLP, BatchNorm CNN, GPT,
# forward-only MLP; FULL_SHARD with and without prefetch, SHARD_GRAD_OP,
# and hybrid sharding within a node, replicated across nodes, each with a
# ZeRO-3 AdamW against DDP within 1e-6 after 10 steps) in one world of 2
# nodes x 2 ranks on gloo: network namespaces on a bridge
# (t/multinode/lib.sh), one phxrun per node, so the gathers and
# reduce-scatters between the nodes go over TCP. Rank 0 (node 0) prints
# the TAP for all four.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT
export PHX_COMM=gloo PHX_TIMEOUT=30 PHX_STORE_TOKEN=fsdp-hybrid-nodes-$$
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
mn_tap_2x2 "$b/t/fsdp/mpi" 16 "$d"
