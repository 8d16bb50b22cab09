#!/bin/sh
# The mpi watchdog names the rank that stopped answering (3 ranks under
# mpirun, PHX_TIMEOUT=3, 16 MiB all-reduces):
#   - rank 1 stops itself (SIGSTOP) in its 6th all-reduce (t/comm/mpi_stop):
#     each survivor's message names rank 1 as the rank that stopped
#     answering (no answer, or an answer after a gap: mpirun's SIGCONT
#     before its kill can wake rank 1 while a survivor still asks), and
#     neither names the other;
#   - rank 1 stops issuing after its 5th and sleeps (t/comm/mpi_fail
#     stall): each survivor names rank 1 as in no collective, its last op
#     #4;
# (a survivor's message: its PHX_ETIMEOUT, or the line its watchdog logs
# first, which is all mpirun forwards when the job ends before the waiting
# thread prints); each time the job ends with MPI_Abort's 124 within PHX_TIMEOUT + 15 s
# and no rank is left running;
#   - the same stall with Open MPI's MPI_Abort held up for 60 s
#     (mpi_abort_delay): a survivor's main thread returns while its
#     watchdog's MPI_Abort waits, and there Open MPI's MPI_Abort returns at
#     once; the process must still end (not wait in MPI_Finalize for the
#     stalled rank), so the job ends within the same bound.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
PHX_TIMEOUT=3
export PHX_COMM PHX_TIMEOUT
tag="phx-stop-$$"
# Every survivor must name rank 1: the job ends only after each rank in
# the op has reported (the watchdog that ends it waits for their word,
# and a rank whose main thread returns first does not abort before).
note() { echo "# $1"; }
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
within() { awk -v t="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(t >= lo && t < hi) }'; }
left() { ps -eo args= | grep -c "[c]omm_mpi_.* $tag"; }

s=$(now); out=$(mpi_run 3 "$b/t/comm/mpi_stop" "$tag" 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
tap_ok $((rc != 124)) "rank 1 stopped: the job ends with MPI_Abort's errorcode 124 (got $rc)"
within "$t" 3 18
tap_ok $? "... after PHX_TIMEOUT (3 s) and within 15 s more (took $t s)"
n=$(echo "$out" | sed -n 's/.*mpi: rank \([02]\): allreduce(count=4194304, f32) #5 did not complete within [^:]*: rank 1 stopped answering (.*this rank is in \(op \)*#5); ending the job with MPI_Abort$/\1/p' | sort -u | wc -l)
[ "$n" -eq 2 ]
tap_ok $? "... each survivor's message (its PHX_ETIMEOUT or its watchdog's logged line) names rank 1 as the rank that stopped answering ($n of 2)"
note "survivors naming rank 1: $n of 2"
! echo "$out" | grep -q "rank [02] stopped answering"
tap_ok $? "... and neither blames the other survivor"
sleep 0.2
[ "$(left)" -eq 0 ]
tap_ok $? "... no rank is left running (the stopped one included)"
[ "$n" -eq 2 ] || echo "$out" | sed 's/^/# /'

s=$(now); out=$(mpi_run 3 "$b/t/comm/mpi_fail" stall "$tag" 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
tap_ok $((rc != 124)) "rank 1 stops issuing: the job ends with errorcode 124 (got $rc)"
within "$t" 3 18
tap_ok $? "... after PHX_TIMEOUT (3 s) and within 15 s more (took $t s)"
n=$(echo "$out" | sed -n 's/.*mpi: rank \([02]\): allreduce(count=4194304, f32) #5 did not complete within [^:]*: rank 1 is in no collective (its last was op #4, this rank is in #5); ending the job with MPI_Abort$/\1/p' | sort -u | wc -l)
[ "$n" -eq 2 ]
tap_ok $? "... each survivor names rank 1 as in no collective, its last op #4 ($n of 2)"
note "survivors naming rank 1: $n of 2"
sleep 0.2
[ "$(left)" -eq 0 ]
tap_ok $? "... no rank is left running"
[ "$n" -eq 2 ] || echo "$out" | sed 's/^/# /'

s=$(now); out=$(OMPI_MCA_mpi_abort_delay=60 mpi_run 3 "$b/t/comm/mpi_fail" stall "$tag" 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
tap_ok $((rc != 124)) "MPI_Abort held up 60 s: the job ends with errorcode 124 (got $rc)"
within "$t" 3 18
tap_ok $? "... after PHX_TIMEOUT (3 s) and within 15 s more, not after the 60 s (took $t s)"
n=$(echo "$out" | grep -c "rank [02]: allreduce 5: PHX_ETIMEOUT: .*rank 1 is in no collective")
[ "$n" -eq 2 ]
tap_ok $? "... each survivor's own error line is out before its process ends ($n of 2)"
sleep 0.2
[ "$(left)" -eq 0 ]
tap_ok $? "... no rank is left running"
[ "$n" -eq 2 ] || echo "$out" | sed 's/^/# /'
tap_end
