#!/bin/sh
# Asynchronous collectives on mpi under mpirun (t/comm/async, worlds 2 and
# 3): 48 issued back to back complete in issue order with right results,
# a chain that is only right in issue order, no host allocation in a
# steady loop; every rank's own checks pass (its exit status).
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
export PHX_COMM
for w in 2 3; do
    out=$(mpi_run "$w" "$b/t/comm/async" 2>&1); rc=$?
    tap_add "$(printf '%s\n' "$out" | sed "s/ - launched: / - mpi world $w: /")"
    tap_ok $rc "world $w: every rank's checks pass (mpirun exits $rc)"
    [ $rc -eq 0 ] || printf '%s\n' "$out" | grep -v '^ok' | sed 's/^/# /'
done
# Issue returns at once: rank 1 joins 1 s late; rank 0's issue call must
# not wait for it.
out=$(PHX_COMM=mpi mpi_run 2 "$b/t/comm/mpi_fail" late 2>&1); rc=$?
took=$(printf '%s\n' "$out" | sed -n 's/^rank 0: issue took \([0-9.]*\) s, then pending$/\1/p')
[ $rc -eq 0 ] && [ -n "$took" ] && awk -v t="$took" 'BEGIN { exit !(t < 0.5) }'
tap_ok $? "an all-reduce whose peer is 1 s late: the issue call returns at once (${took:-?} s) and the work is pending"
[ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c 'done, last element 1$')" -eq 2 ]
tap_ok $? "... and it completes with the right values once the peer comes"
tap_end
