#!/bin/sh
# Failures under mpirun (t/comm/mpi_fail, 3 ranks, 16 MiB all-reduces):
# a rank killed in the middle of a collective ends the job within seconds;
# a rank that stops issuing collectives ends it within PHX_TIMEOUT (3 s)
# plus a few seconds, through the watchdog's PHX_ETIMEOUT and MPI_Abort;
# no rank is left behind either way.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
PHX_TIMEOUT=3
export PHX_COMM PHX_TIMEOUT
prog="$b/t/comm/mpi_fail"
tag="phx-fail-$$"
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
within() { awk -v t="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(t >= lo && t < hi) }'; }
left() { ps -eo args= | grep -c "[c]omm_mpi_fail .* $tag"; }

s=$(now); out=$(mpi_run 3 "$prog" ok "$tag" 2>&1); rc=$?; e=$(now)
tap_ok $rc "no failure: mpirun exits 0 (got $rc)"
[ "$(echo "$out" | grep -c '^rank [0-2]: done, last element 1$')" -eq 3 ]
tap_ok $? "no failure: every rank finished its 40 all-reduces (avg of ones: 1)"

s=$(now); out=$(mpi_run 3 "$prog" kill "$tag" 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
[ $rc -ne 0 ] && [ $rc -ne 124 ]
tap_ok $? "a rank killed mid-all-reduce: mpirun fails (got $rc)"
within "$t" 0 10
tap_ok $? "... within 10 s (took $t s)"
echo "$out" | grep -q "rank 1 .*exited on signal 9"
tap_ok $? "... and mpirun names the rank and the signal"
! echo "$out" | grep -q ': done'
tap_ok $? "... no rank finished its loop"
sleep 0.2
[ "$(left)" -eq 0 ]
tap_ok $? "... no rank is left running"
[ $rc -ne 0 ] || echo "$out" | sed 's/^/# /'

s=$(now); out=$(mpi_run 3 "$prog" stall "$tag" 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
tap_ok $((rc != 124)) "a rank that stops issuing: the job ends with MPI_Abort's errorcode 124 (got $rc)"
within "$t" 3 18
tap_ok $? "... after PHX_TIMEOUT (3 s) and within 15 s more (took $t s)"
echo "$out" | grep -q "rank [02]: allreduce 5: PHX_ETIMEOUT: mpi: rank [02]: allreduce(count=4194304, f32) #5 did not complete within 3 s (PHX_TIMEOUT)"
tap_ok $? "... the waiting rank gets PHX_ETIMEOUT naming the collective, its count and dtype"
echo "$out" | grep -q "ERROR: mpi: rank [02]: .*ending the job with MPI_Abort"
tap_ok $? "... and the watchdog's line says it ends the job"
sleep 0.2
[ "$(left)" -eq 0 ]
tap_ok $? "... no rank is left running (the stalled one included)"
[ $rc -eq 124 ] || echo "$out" | sed 's/^/# /'
tap_end
