#!/bin/sh
# Multi-node for real: examples/ddp on 2 and 3 nodes (network namespaces on
# a bridge, t/multinode/lib.sh), one phxrun per node, prints exactly the
# epoch lines of phxrun --standalone with the same world size; gloo finds
# its interface by the route to the store, or by GLOO_SOCKET_IFNAME. And
# examples/cnn --sync-bn (SyncBatchNorm) on 2 nodes: the loss and test
# accuracy of the standalone run.
b=${top_builddir:-.}
. "${top_srcdir:-.}/t/multinode/lib.sh"
mn_begin
note() { sed 's/^/# /' "$1" | tail -8; }
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT PHX_RESTART_COUNT PHX_COMM
export PHX_TIMEOUT=20 PHX_STORE_TOKEN=mn-run-$$
prog="$b/examples/ddp"
echo "1..9"
mn_up 3 || { echo "Bail out! cannot set up the namespaces"; exit 1; }

# job NNODES NPROC OUT [VAR=VALUE...]: one phxrun per node, node 0 first;
# OUT.I is node I's output; returns the worst exit status.
job() {
    nn=$1 np=$2 out=$3
    shift 3
    i=0
    pids=
    while [ $i -lt "$nn" ]; do
        mn_exec $i env "$@" "$b/tools/phxrun" --nnodes "$nn" --node-rank $i --nproc-per-node "$np" \
            --master-addr "$(mn_addr 0)" --master-port 29500 $prog >"$out.$i" 2>&1 &
        pids="$pids $!"
        i=$((i + 1))
    done
    worst=0
    for p in $pids; do wait "$p" || worst=$?; done
    return $worst
}

t=0
same() { # name, nodes, ranks per node, [env...]
    name=$1 nn=$2 np=$3
    shift 3
    t=$((t + 1))
    "$b/tools/phxrun" --standalone --nproc-per-node $((nn * np)) "$prog" >"$d/ref$t" 2>&1
    job "$nn" "$np" "$d/mn$t" "$@"
    rc=$?
    lines=$(grep -c '^Epoch \[[0-9]*/10\], Loss: ' "$d/mn$t.0")
    if [ $rc = 0 ] && [ "$lines" = 10 ] && cmp -s "$d/ref$t" "$d/mn$t.0"; then
        echo "ok $t - $name: the same ten epoch lines as phxrun --standalone --nproc-per-node $((nn * np))"
    else
        echo "not ok $t - $name (exit $rc, $lines epoch lines)"
        note "$d/ref$t"
        note "$d/mn$t.0"
        note "$d/mn$t.1"
    fi
    t=$((t + 1))
    quiet=1
    i=1
    while [ $i -lt "$nn" ]; do [ -s "$d/mn$((t - 1)).$i" ] && quiet=0; i=$((i + 1)); done
    left=$(mn_leftovers)
    [ $quiet = 1 ] && [ -z "$left" ] && echo "ok $t - $name: the other nodes print nothing; no process left" ||
        { echo "not ok $t - $name: other nodes' output or processes left"; echo "$left" | sed 's/^/# /'; }
}

same "2 nodes x 1 rank" 2 1
same "2 nodes x 2 ranks" 2 2
same "3 nodes x 1 rank, GLOO_SOCKET_IFNAME=eth0" 3 1 GLOO_SOCKET_IFNAME=eth0

# SyncBatchNorm across nodes (Fashion-MNIST, 512 training rows, 1 thread a
# rank on both sides so the sums run in the same order)
t=$((t + 1))
data=${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ -r "$data/train-images-idx3-ubyte.gz" ]; then
    cnn="$b/examples/cnn --sync-bn --epochs 1 --train-rows 512"
    keep() { sed -n 's/^\(Epoch \[1\/1\], Loss: [0-9.]*\),.*/\1/p; /^Test accuracy: /p' "$1"; }
    PHX_NUM_THREADS=1 "$b/tools/phxrun" --standalone --nproc-per-node 2 $cnn >"$d/cnnref" 2>&1
    prog_save=$prog
    prog=$cnn
    job 2 1 "$d/cnn" PHX_NUM_THREADS=1
    rc=$?
    prog=$prog_save
    if [ $rc = 0 ] && [ "$(keep "$d/cnn.0" | wc -l)" = 2 ] && [ "$(keep "$d/cnn.0")" = "$(keep "$d/cnnref")" ]; then
        echo "ok $t - cnn --sync-bn on 2 nodes: the loss and accuracy of the standalone run ($(keep "$d/cnn.0" | tr '\n' ' '))"
    else
        echo "not ok $t - cnn --sync-bn on 2 nodes (exit $rc)"
        keep "$d/cnnref" | sed 's/^/# standalone: /'
        note "$d/cnn.0"
    fi
else
    echo "ok $t # SKIP no Fashion-MNIST in $data"
fi

# An interface that does not exist is named, at once.
t=$((t + 1))
start=$(mn_now)
job 2 1 "$d/bad" GLOO_SOCKET_IFNAME=eth9 PHX_TIMEOUT=60
rc=$?
took=$(mn_secs "$start" "$(mn_now)")
[ $rc != 0 ] && grep -q "eth9" "$d/bad.0" && mn_le "$took" 10 &&
    echo "ok $t - GLOO_SOCKET_IFNAME=eth9 (no such interface): an error naming it in $took s" ||
    { echo "not ok $t - GLOO_SOCKET_IFNAME=eth9: exit $rc after $took s"; note "$d/bad.0"; note "$d/bad.1"; }
t=$((t + 1))
left=$(mn_leftovers)
[ -z "$left" ] && echo "ok $t - no process left" || { echo "not ok $t - processes left"; echo "$left" | sed 's/^/# /'; }
