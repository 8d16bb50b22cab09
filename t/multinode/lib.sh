# Nodes for the multi-node tests: network namespaces on one bridge
# (sourced by t/multinode/*.sh; doc/guide/multinode.md).
#
#   mn_skip           prints why namespaces cannot be made here (empty: they can)
#   mn_up N           nodes 0..N-1: namespace $MN-nI, its interface eth0 at
#                     10.77.0.(I+1)/24, its loopback up; a switch namespace
#                     $MN-sw holds the bridge and the far ends (pI)
#   mn_exec I cmd...  runs cmd on node I
#   mn_bg I cmd...    starts cmd on node I in the background; MN_PID is its
#                     pid (cmd's own, not a subshell's)
#   mn_link I up|down cuts or restores node I's cable (the switch's port)
#   mn_pids I         the processes still running on node I
#   mn_down           kills what is left on the nodes, removes the namespaces
#   mn_agent FILE     writes an rsh agent for mpirun (--mca plm_rsh_agent
#                     FILE): "FILE HOST CMD..." runs CMD on the node whose
#                     address is HOST
#
# Names carry the test's pid, so tests running side by side never meet;
# nothing is added to the host's own namespace (no address, no route).
# A test traps EXIT (mn_down) and turns INT, TERM and HUP into an exit, so
# an interrupted run removes its namespaces too.
MN=phxmn$$
MN_NODES=0

mn_skip() {
    command -v ip >/dev/null 2>&1 || { echo "ip (iproute2) not found"; return; }
    [ "$(id -u)" = 0 ] || { echo "not root: network namespaces need CAP_NET_ADMIN"; return; }
    if ! ip netns add "$MN-probe" 2>/dev/null; then
        echo "cannot create a network namespace here (no CAP_NET_ADMIN or CAP_SYS_ADMIN)"
        return
    fi
    if ! ip -n "$MN-probe" link add mnp0 type veth peer name mnp1 2>/dev/null ||
        ! ip -n "$MN-probe" link add mnbr type bridge 2>/dev/null; then
        ip netns del "$MN-probe" 2>/dev/null
        echo "no veth or bridge support in this kernel"
        return
    fi
    ip netns del "$MN-probe"
}

# mn_begin: the start the namespace tests on gloo share (b is the build
# folder): a TAP skip (exit 0) where namespaces or the gloo plugin are
# missing, else the scratch folder $d, removed with the namespaces at exit.
mn_begin() {
    why=$(mn_skip)
    [ -z "$why" ] || { echo "1..0 # SKIP $why"; exit 0; }
    [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] || { echo "1..0 # SKIP built without Gloo"; exit 0; }
    d=$(mktemp -d)
    trap 'mn_down; rm -rf "$d"' EXIT
    trap 'exit 1' INT TERM HUP # the EXIT trap cleans up then too
}

mn_up() {
    MN_NODES=$1
    ip netns add "$MN-sw" || return 1
    ip -n "$MN-sw" link add br0 type bridge || return 1
    ip -n "$MN-sw" link set br0 up
    i=0
    while [ $i -lt "$MN_NODES" ]; do
        ip netns add "$MN-n$i" || return 1
        ip -n "$MN-sw" link add "p$i" type veth peer name eth0 netns "$MN-n$i" || return 1
        ip -n "$MN-sw" link set "p$i" master br0 up
        ip -n "$MN-n$i" addr add "10.77.0.$((i + 1))/24" dev eth0
        ip -n "$MN-n$i" link set eth0 up
        ip -n "$MN-n$i" link set lo up
        i=$((i + 1))
    done
}

mn_addr() { echo "10.77.0.$(($1 + 1))"; }

mn_exec() {
    n=$1
    shift
    ip netns exec "$MN-n$n" "$@"
}

mn_bg() {
    n=$1
    shift
    ip netns exec "$MN-n$n" "$@" &
    MN_PID=$!
}

mn_agent() {
    {
        echo '#!/bin/sh'
        echo '# rsh agent for mpirun: HOST COMMAND... runs COMMAND on node HOST'
        echo 'h=$1'
        echo 'shift'
        echo 'case $h in'
        i=0
        while [ $i -lt "$MN_NODES" ]; do
            echo "$(mn_addr $i)) n=$i ;;"
            i=$((i + 1))
        done
        echo '*) echo "agent: no node $h" >&2; exit 1 ;;'
        echo 'esac'
        echo "exec ip netns exec $MN-n\$n sh -c \"\$*\""
    } >"$1"
    chmod +x "$1"
}

mn_link() { ip -n "$MN-sw" link set "p$1" "$2"; }

mn_pids() { ip netns pids "$MN-n$1" 2>/dev/null; }

# The processes left on every node, as "node I: pid (name)" lines.
mn_leftovers() {
    i=0
    while [ $i -lt "$MN_NODES" ]; do
        for p in $(mn_pids $i); do echo "node $i: $p ($(cat /proc/$p/comm 2>/dev/null))"; done
        i=$((i + 1))
    done
}

mn_down() {
    i=0
    while [ $i -lt "$MN_NODES" ]; do
        for p in $(mn_pids $i); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$MN-n$i" 2>/dev/null
        i=$((i + 1))
    done
    ip netns del "$MN-sw" 2>/dev/null
}

# Seconds since the epoch, with milliseconds.
mn_now() { date +%s.%N | cut -c1-14; }
mn_secs() { echo "$1 $2" | awk '{ printf "%.1f", $2 - $1 }'; }
# Whether a <= b (decimals).
mn_le() { echo "$1 $2" | awk '{ exit !($1 <= $2) }'; }

# One gloo world of 2 nodes x 2 ranks, one phxrun per node, running the
# TAP program $1 (a path under the build tree) on every rank: node 0's TAP
# lines (rank 0 prints them for all four), then one more line, ok when
# both phxruns exit 0 with at least $2 checks passed and none failed, and
# the plan. Needs the namespaces up (mn_up 2) and a scratch folder $3.
mn_tap_2x2() {
    prog=$1 min=$2 dir=$3
    pids=
    for i in 0 1; do
        mn_exec $i timeout -k 5 240 "$b/tools/phxrun" --nnodes 2 --node-rank $i --nproc-per-node 2 \
            --master-addr "$(mn_addr 0)" --master-port 29500 "$prog" >"$dir/out.$i" 2>&1 &
        pids="$pids $!"
    done
    worst=0
    for p in $pids; do wait "$p" || worst=$?; done
    grep -E '^(not )?ok [0-9]+|^1\.\.[0-9]+' "$dir/out.0" | grep -v '^1\.\.' >"$dir/tap"
    n=$(grep -c '^ok ' "$dir/tap")
    nn=$(grep -c '^not ok ' "$dir/tap")
    cat "$dir/tap"
    k=$(wc -l <"$dir/tap")
    k=$((k + 1))
    if [ "$worst" = 0 ] && [ "$n" -ge "$min" ] && [ "$nn" = 0 ]; then
        echo "ok $k - 2 nodes x 2 ranks: both phxruns exit 0, $n checks passed on rank 0"
    else
        echo "not ok $k - 2 nodes x 2 ranks: exit $worst, $n checks passed, $nn failed"
        for i in 0 1; do sed "s/^/# node $i: /" "$dir/out.$i" | grep -v ' ok [0-9]' | tail -15; done
    fi
    echo "1..$k"
}
