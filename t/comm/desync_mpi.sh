#!/bin/sh
# mpi: ranks out of step are named within 2 s, PHX_TIMEOUT being 600 s
# (the cases of t/comm/desync-cases.h, run by t/comm/desync_mpi under
# mpirun with 2 and 3 ranks): every rank's message names its collective
# #2 and the other one (an in-step rank names the rank that differs);
# the job ends within seconds (MPI_Abort where an MPI call is stuck). A
# rank's message is its PHX_EDESYNC line, or the line its watchdog logs
# first, which is all mpirun forwards when the abort comes before the
# rank's own print. A rank 5 s late with the same all-reduce
# (PHX_TIMEOUT=30) is not reported and the sums are right.
. "${top_srcdir:-.}/t/mpi-util.sh"
mpi_need
PHX_COMM=mpi
export PHX_COMM
unset PHX_DESYNC_CHECK_MS
prog="$b/t/comm/desync_mpi"
now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
below() { awk -v t="$1" -v hi="$2" 'BEGIN { exit !(t < hi) }'; }
N=100000
texts() {
    others="allreduce(count=$N, f32, sum)"
    case $1 in
    kinds) odd="broadcast(count=$N, f32, root 0)" ;;
    counts) odd="allreduce(count=$((N / 2)), f32, sum)" ;;
    dtypes) odd="allreduce(count=$N, i32, sum)" ;;
    roots) others="broadcast(count=$N, f32, root 0)"; odd="broadcast(count=$N, f32, root 1)" ;;
    esac
}

for np in 2 3; do
    last=$((np - 1))
    for c in kinds counts dtypes roots; do
        texts $c
        PHX_TIMEOUT=600 MPI_TEST_LIMIT=60
        export PHX_TIMEOUT MPI_TEST_LIMIT
        s=$(now); out=$(mpi_run $np "$prog" $c 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
        below "$t" 15
        tap_ok $? "$c, $np ranks: the job ends within 15 s, PHX_TIMEOUT=600 (took $t s, mpirun exit $rc)"
        bad=0
        for r in $(seq 0 $last); do
            if [ $r -eq $last ]; then mine=$odd theirs=$others; else mine=$others theirs=$odd; fi
            lines=$(echo "$out" | grep -F "rank $r issued $mine as collective #2 but rank " | grep -F " issued $theirs")
            who=""
            if [ $r -ne $last ]; then
                lines=$(echo "$lines" | grep -F "but rank $last issued")
                who=" and rank $last"
            fi
            [ -n "$lines" ]
            tap_ok $? "$c, $np ranks: rank $r's message names both collectives$who"
            [ -n "$lines" ] || bad=1
            secs=$(echo "$out" | sed -n "s/^rank $r: case $c: PHX_EDESYNC at #[23] after \([0-9.]*\) s .*/\1/p")
            if [ -n "$secs" ]; then
                below "$secs" 2
                tap_ok $? "$c, $np ranks: rank $r's PHX_EDESYNC came within 2 s ($secs s)"
            else
                echo "# $c, $np ranks: rank $r's own line did not reach mpirun (its watchdog's did)"
            fi
        done
        [ $bad -eq 0 ] || echo "$out" | sed 's/^/# /'
    done
    PHX_TIMEOUT=30
    export PHX_TIMEOUT
    s=$(now); out=$(mpi_run $np "$prog" late 2>&1); rc=$?; e=$(now); t=$(took "$s" "$e")
    tap_ok $rc "late, $np ranks: a rank 5 s late with the same op: mpirun exits 0 (took $t s)"
    [ "$(echo "$out" | grep -c "^rank [0-9]: case late: PHX_OK at #2 after .* (last element $np): ok$")" -eq $np ]
    tap_ok $? "late, $np ranks: every rank's all-reduce succeeds with the right sum ($np)"
    ! echo "$out" | grep -q "EDESYNC\|out of step"
    tap_ok $? "late, $np ranks: nobody reports a desync"
    [ $rc -eq 0 ] || echo "$out" | sed 's/^/# /'
done
tap_end
