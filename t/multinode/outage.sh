#!/bin/sh
# A network outage shorter than PHX_TIMEOUT is survived (2 nodes,
# t/multinode/lib.sh): node 1's cable is pulled for 8 s while
# t/multinode/loop all-reduces with PHX_TIMEOUT=30, on gloo (one phxrun
# per node) and on mpi (mpirun across the nodes, its rsh agent entering
# each node's namespace); the job goes on with every result right and ends
# within TCP's retransmission backoff of the outage's end (no store reply
# deadline, no connection given up).
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(mn_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_COMM
export PHX_TIMEOUT=30 PHX_STORE_TOKEN=mn-outage-$$
echo "1..6"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
tn=0 # (mn_exec uses n)
result() { tn=$((tn + 1)); if [ "$1" = 0 ]; then echo "ok $tn - $2"; else echo "not ok $tn - $2"; fi; return "$1"; }
skip3() { for i in 1 2 3; do tn=$((tn + 1)); echo "ok $tn # SKIP $1"; done; }
# outage NAME: once node 1's rank has done a round, its cable out for 8 s;
# then waits for $run0 and $run1 (the two launchers, or one and "")
outage() {
    i=0
    while [ $i -lt 400 ] && ! [ -s "$d/$1.ready.1" ]; do sleep 0.05; i=$((i + 1)); done
    mn_link 1 down
    sleep 8
    mn_link 1 up
    back=$(mn_now)
    wait $run0; rc0=$?
    rc1=0
    [ -z "$run1" ] || { wait $run1; rc1=$?; }
    took=$(mn_secs "$back" "$(mn_now)")
}
report() { # NAME what
    [ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "rounds, all right" "$d/$1.out0"
    result $? "$2: 8 s outage, PHX_TIMEOUT=30: the job goes on, every result right ($(grep rounds "$d/$1.out0"))" ||
        sed 's/^/# /' "$d/$1".out* | tail -8
    mn_le "$took" 10
    result $? "$2: it ends $took s after the cable is back (TCP's retransmission backoff)"
    left=$(mn_leftovers)
    [ -z "$left" ]
    result $? "$2: no process left" || echo "$left" | sed 's/^/# /'
}

# ---- gloo: one phxrun per node
if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ]; then
    for i in 0 1; do
        mn_bg $i env PHX_COMM=gloo MN_SECONDS=2 MN_READY="$d/gloo.ready" "$b/tools/phxrun" --nnodes 2 --node-rank $i \
            --nproc-per-node 1 --master-addr "$(mn_addr 0)" --master-port 29500 "$b/t/multinode/loop" >"$d/gloo.out$i" 2>&1
        eval "run$i=\$MN_PID"
    done
    outage gloo
    report gloo gloo
else
    skip3 "built without Gloo"
fi

# ---- mpi: mpirun across the nodes (as t/multinode/mpirun.sh)
if ! command -v mpirun >/dev/null 2>&1; then
    skip3 "mpirun not found (Debian: openmpi-bin)"
elif ! [ -e "$b/plugins/comm/mpi/.libs/phx-comm-mpi.so" ]; then
    skip3 "built without the mpi plugin"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Under --enable-sanitizers Open MPI keeps what MPI_Init allocates past
    # MPI_Finalize (t/mpi-util.sh says why): leak detection off for the ranks.
    if [ -n "${PHX_SAN_FLAGS:-}" ]; then
        ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
        export ASAN_OPTIONS
    fi
    mn_agent "$d/agent"
    mn_bg 0 timeout 120 mpirun --mca plm_rsh_agent "$d/agent" --mca btl_tcp_if_include eth0 \
        --mca oob_tcp_if_include eth0 -np 2 --host "$(mn_addr 0):1,$(mn_addr 1):1" -x PHX_COMM=mpi -x PHX_TIMEOUT \
        -x MN_SECONDS=2 -x MN_READY="$d/mpi.ready" "$b/t/multinode/loop" >"$d/mpi.out0" 2>&1
    run0=$MN_PID run1=
    outage mpi
    report mpi "mpi (mpirun)"
fi
