#!/bin/sh
# The collectives suite (t/comm/collectives: every collective x dtype x op
# x count, results checked against float64 / exact references computed
# from the same inputs, ranks bitwise equal) on the mpi plugin under
# mpirun, worlds 1 to 4, with no MASTER_ADDR to reach; world 2 adds the
# >= 16M-element all-reduce, and world 3 runs once more with the shared
# window off (PHX_MPI_SHM_BYTES=0: MPI's own all-reduce for every size).
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
export PHX_COMM
for w in 1 2 3 4; do
    big=0; [ "$w" -eq 2 ] && big=1
    out=$(COMM_BIG=$big mpi_run "$w" "$b/t/comm/collectives" 2>&1); rc=$?
    tap_add "$out"
    n=$(printf '%s\n' "$out" | grep -c "^ok [0-9]* - mpi world $w: ")
    tap_ok $((rc != 0 || n < 201)) "world $w: mpirun exits 0 (got $rc), $n checks passed on mpi"
done
out=$(PHX_MPI_SHM_BYTES=0 COMM_BIG=0 COMM_SUITE=allreduce mpi_run 3 "$b/t/comm/collectives" 2>&1); rc=$?
tap_add "$out"
tap_ok $rc "world 3 without the shared window: mpirun exits 0 (got $rc)"
tap_end
