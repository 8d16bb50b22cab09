#!/bin/sh
# mpirun across nodes (t/multinode/lib.sh), its rsh agent running each
# node's daemon in that node's namespace: examples/ddp with PHX_COMM=mpi,
# and with gloo (MASTER_ADDR exported to the ranks), prints the lines of
# phxrun --standalone --nproc-per-node 2; gloo with no MASTER_ADDR fails at
# once naming it (it waited PHX_TIMEOUT for a store on 127.0.0.1).
b=${top_builddir:-.}
b=$(cd "$b" && pwd)
. "${top_srcdir:-.}/t/multinode/lib.sh"
why=$(mn_skip)
[ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
command -v mpirun >/dev/null 2>&1 || { echo "1..0 # SKIP mpirun not found (Debian: openmpi-bin)"; exit 0; }
[ -e "$b/plugins/comm/mpi/.libs/phx-comm-mpi.so" ] || { echo "1..0 # SKIP built without the mpi plugin"; exit 0; }
[ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
d=$(mktemp -d)
chmod 755 "$d"
trap 'mn_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
note() { sed 's/^/# /' "$1" | tail -6; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_COMM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PHX_TIMEOUT=30 PHX_STORE_TOKEN=mn-mpirun-$$
# Under --enable-sanitizers Open MPI keeps what MPI_Init allocates past
# MPI_Finalize (t/mpi-util.sh says why): leak detection off for the ranks.
if [ -n "${PHX_SAN_FLAGS:-}" ]; then
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export ASAN_OPTIONS
fi
prog="$b/examples/ddp"
echo "1..4"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }
mn_agent "$d/agent"
mpi() { # output file, mpirun options...
    out=$1
    shift
    mn_exec 0 timeout 120 mpirun --mca plm_rsh_agent "$d/agent" --mca btl_tcp_if_include eth0 \
        --mca oob_tcp_if_include eth0 -np 2 --host "$(mn_addr 0):1,$(mn_addr 1):1" "$@" "$prog" >"$out" 2>&1
}
"$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" >"$d/ref" 2>&1

mpi "$d/mpi" -x PHX_COMM=mpi
rc=$?
[ $rc = 0 ] && cmp -s "$d/ref" "$d/mpi" && echo "ok 1 - PHX_COMM=mpi on 2 nodes: the lines of phxrun --standalone" ||
    { echo "not ok 1 - PHX_COMM=mpi (exit $rc)"; note "$d/mpi"; }

mpi "$d/gloo" -x PHX_COMM=gloo -x MASTER_ADDR="$(mn_addr 0)" -x MASTER_PORT=29500
rc=$?
[ $rc = 0 ] && cmp -s "$d/ref" "$d/gloo" && echo "ok 2 - PHX_COMM=gloo on 2 nodes under mpirun: the same lines" ||
    { echo "not ok 2 - PHX_COMM=gloo (exit $rc)"; note "$d/gloo"; }

start=$(mn_now)
mpi "$d/nomaster" -x PHX_COMM=gloo
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -q "spans nodes but MASTER_ADDR is not set" "$d/nomaster" && mn_le "$took" 10 &&
    echo "ok 3 - gloo without MASTER_ADDR: an error naming it in $took s (PHX_TIMEOUT 30)" ||
    { echo "not ok 3 - gloo without MASTER_ADDR: exit $rc after $took s"; note "$d/nomaster"; }
left=$(mn_leftovers)
[ -z "$left" ] && echo "ok 4 - no process left" || { echo "not ok 4 - processes left"; echo "$left" | sed 's/^/# /'; }
