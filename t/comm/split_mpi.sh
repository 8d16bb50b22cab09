#!/bin/sh
# Process groups (phx_comm_split) on the mpi plugin (MPI_Comm_split) under
# mpirun, worlds 2, 3 and 4: the checks of t/comm/split (groups by parity
# and by blocks with reversed keys, every collective on them against
# values computed from the members' world ranks, overlapping groups used
# alternately, UNDEFINED, a split of a group, bad arguments, the parent
# freed first). A dying rank ends an mpirun job: t/comm/mpi_fail covers it.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
export PHX_COMM
for w in 2 3 4; do
    out=$(mpi_run "$w" "$b/t/comm/split" 2>&1); rc=$?
    tap_add "$out"
    n=$(printf '%s\n' "$out" | grep -c "^ok [0-9]* - mpi world $w: ")
    tap_ok $((rc != 0 || n < 20)) "world $w: mpirun exits 0 (got $rc), $n checks passed on mpi"
done
tap_end
