#!/bin/sh
# gloo's same-host segment is for ranks that share a host, not just a
# kernel: t/multinode/loop (small and 256 KiB all-reduces, each result
# checked) on 2 "nodes" of 2 ranks, network namespaces on one kernel
# (t/multinode/lib.sh): every rank's PHX_LOG=info line says TCP only and
# names a rank in the other namespace, and none takes the segment; the
# same 4 ranks in one namespace (phxrun --standalone) take it.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
note() { sed 's/^/# /' "$1" | tail -6; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_GLOO_SHM
export PHX_TIMEOUT=20 PHX_STORE_TOKEN=shm-netns-$$ PHX_COMM=gloo PHX_LOG=info MN_SECONDS=1
prog="$b/t/multinode/loop"
tcp='all-reduces over TCP only, no shared memory: rank [0-9] runs on another host or network namespace'
shm='all-reduces above [0-9]* bytes.* go through shared memory'
echo "1..5"
mn_up 2 || { echo "Bail out! cannot set up the namespaces"; exit 1; }

pids=
for i in 0 1; do
    mn_exec $i timeout -k 5 120 "$b/tools/phxrun" --nnodes 2 --node-rank $i --nproc-per-node 2 \
        --master-addr "$(mn_addr 0)" --master-port 29500 "$prog" >"$d/ns.$i" 2>&1 &
    pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=$?; done
if [ $rc = 0 ] && grep -q 'all right' "$d/ns.0"; then
    echo "ok 1 - 2 namespaces x 2 ranks: the all-reduces are right"
else
    echo "not ok 1 - 2 namespaces x 2 ranks: the all-reduces are right (exit $rc)"
    note "$d/ns.0"
    note "$d/ns.1"
fi
n=$(cat "$d/ns.0" "$d/ns.1" | grep -c "$tcp")
if [ "$n" = 4 ]; then
    echo "ok 2 - 2 namespaces: every rank logs TCP only, naming a rank in the other namespace"
else
    echo "not ok 2 - 2 namespaces: every rank logs TCP only, naming a rank in the other namespace ($n of 4 lines)"
    grep 'gloo:' "$d/ns.0" "$d/ns.1" | sed 's/^/# /'
fi
n=$(cat "$d/ns.0" "$d/ns.1" | grep -c "$shm")
if [ "$n" = 0 ]; then echo "ok 3 - 2 namespaces: no rank takes the segment"; else echo "not ok 3 - 2 namespaces: no rank takes the segment ($n did)"; fi

timeout -k 5 120 "$b/tools/phxrun" --standalone --nproc-per-node 4 "$prog" >"$d/one" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q 'all right' "$d/one"; then
    echo "ok 4 - one namespace, 4 ranks: the all-reduces are right"
else
    echo "not ok 4 - one namespace, 4 ranks: the all-reduces are right (exit $rc)"
    note "$d/one"
fi
n=$(grep -c "$shm" "$d/one")
if [ "$n" = 4 ]; then
    echo "ok 5 - one namespace: every rank takes the segment"
else
    echo "not ok 5 - one namespace: every rank takes the segment ($n of 4 lines)"
    grep 'gloo:' "$d/one" | sed 's/^/# /'
fi
