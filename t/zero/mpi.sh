#!/bin/sh
# ZeRO on mpi under mpirun (PHX_COMM=mpi, --oversubscribe): t/zero/mpi in
# worlds 2, 3 and 4 (t/zero/equiv's MLP, BatchNorm CNN and GPT, ZeRO-1 and
# ZeRO-2 against DDP within 1e-6 after 10 AdamW steps, uneven shards; in
# world 4 also hybrid sharding, 2 groups of 2 from phx_comm_split); each
# world's checks renumbered into this stream, plus one line per world for
# mpirun's status. Skips without mpirun or the mpi plugin.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
export PHX_COMM=mpi PHX_TIMEOUT=${PHX_TIMEOUT:-60}
for n in 2 3 4; do
    out=$(mpi_run "$n" "$b/t/zero/mpi" 2>&1); rc=$?
    # world 4: 6 + 2 + 1 + 6 hybrid checks; else 9
    want=9; [ "$n" -eq 4 ] && want=15
    got=$(printf '%s\n' "$out" | grep -cE '^ok [0-9]+ - mpi, ')
    tap_add "$out"
    [ $rc -eq 0 ] && [ "$got" -eq "$want" ]
    tap_ok $? "mpirun -np $n t/zero/mpi: exit 0, $got of $want checks passed"
    [ $rc -eq 0 ] || printf '%s\n' "$out" | grep -v '^\(not \)\?ok \|^#\|^1\.\.' | sed 's/^/# /' | tail -20
done
tap_end
