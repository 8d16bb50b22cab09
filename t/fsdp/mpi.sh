#!/bin/sh
# ZeRO-3 (FSDP) on mpi under mpirun (PHX_COMM=mpi, --oversubscribe):
# t/fsdp/mpi in worlds 2, 3 and 4 (t/fsdp/equiv's MLP, BatchNorm CNN, GPT
# and forward-only MLP under FULL_SHARD with and without prefetch and
# SHARD_GRAD_OP, against DDP within 1e-6 after 10 AdamW steps, uneven
# shards; in world 4 also hybrid sharding, 2 groups of 2); each world's
# checks renumbered into this stream, plus one line per world for
# mpirun's status. Skips without mpirun or the mpi plugin.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
export PHX_COMM=mpi PHX_TIMEOUT=${PHX_TIMEOUT:-60}
for n in 2 3 4; do
    out=$(mpi_run "$n" "$b/t/fsdp/mpi" 2>&1); rc=$?
    # 4 models x 3 modes; world 4 also 4 hybrid checks
    want=12; [ "$n" -eq 4 ] && want=16
    got=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ - mpi, ')
    tap_add "$out"
    [ $rc -eq 0 ] && [ "$got" -eq "$want" ]
    tap_ok $? "mpirun -np $n t/fsdp/mpi: exit 0, $got of $want checks passed"
    [ $rc -eq 0 ] || printf '%s\n' "$out" | grep -v '^\(not \)\?ok \|^#\|^1\.\.' | sed 's/^/# /' | tail -20
done
tap_end
