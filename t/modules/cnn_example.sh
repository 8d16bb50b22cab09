#!/bin/sh
# examples/cnn on the first 2048 Fashion-MNIST images, 2 epochs, on each
# path the issue names: one process (prints its epochs and a test
# accuracy above 0.6, saves), --epochs 0 --load (the same accuracy),
# --dp (DataParallel over 2 CPU replicas), phxrun with 2 processes and
# --sync-bn, PHX_PRECISION=bf16; a bad option is a usage error. Skips
# without Debian's dataset-fashion-mnist.
b=${top_builddir:-.}
prog="$b/examples/cnn"
dir=${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [ ! -r "$dir/train-images-idx3-ubyte.gz" ]; then
    echo "1..0 # SKIP no Fashion-MNIST in $dir (apt-get install dataset-fashion-mnist)"
    exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0
pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() { n=$((n + 1)); echo "not ok $n - $1"; echo "$2" | sed 's/^/# /'; }
acc() { echo "$1" | awk '/^Test accuracy: /{print $3}'; }
above() { awk -v a="$1" -v m="$2" 'BEGIN{exit !(a != "" && a > m)}'; }
small="--train-rows 2048 --epochs 2"
echo "1..6"

out=$("$prog" $small --save "$tmp/cnn.safetensors" 2>&1); rc=$?
a1=$(acc "$out")
if [ $rc -eq 0 ] && above "$a1" 0.6 && [ "$(echo "$out" | grep -c '^Epoch \[')" = 2 ]; then
    pass "one process: 2 epoch lines, test accuracy $a1 > 0.6"
else fail "one process (status $rc, accuracy '$a1')" "$out"; fi

out=$("$prog" --epochs 0 --load "$tmp/cnn.safetensors" 2>&1); rc=$?
a2=$(acc "$out")
if [ $rc -eq 0 ] && [ "$a1" = "$a2" ]; then pass "--epochs 0 --load: the saved model's accuracy ($a2, buffers included)"
else fail "--epochs 0 --load gives $a2, expected $a1 (status $rc)" "$out"; fi

out=$(PHX_NUM_THREADS=2 "$prog" $small --dp 2>&1); rc=$?
a=$(acc "$out")
if [ $rc -eq 0 ] && above "$a" 0.6 && echo "$out" | grep -q 'DataParallel, 2 CPU replicas'; then
    pass "--dp: DataParallel over 2 CPU replicas, accuracy $a"
else fail "--dp (status $rc, accuracy '$a')" "$out"; fi

if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] && [ -x "$b/tools/phxrun" ]; then
    out=$(PHX_PLUGIN_PATH=$(find "$b/plugins" -type d -name .libs | sort | tr '\n' ':') \
        "$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" $small --sync-bn 2>&1); rc=$?
    a=$(acc "$out")
    if [ $rc -eq 0 ] && above "$a" 0.6 && echo "$out" | grep -q 'DDP over gloo, SyncBatchNorm'; then
        pass "phxrun, 2 processes, --sync-bn: DDP over gloo with SyncBatchNorm, accuracy $a"
    else fail "phxrun --sync-bn (status $rc, accuracy '$a')" "$out"; fi
else
    n=$((n + 1)); echo "ok $n # SKIP built without gloo or phxrun"
fi

out=$(PHX_PRECISION=bf16 "$prog" $small 2>&1); rc=$?
a=$(acc "$out")
if [ $rc -eq 0 ] && above "$a" 0.6 && echo "$out" | grep -q ', bf16 on '; then pass "PHX_PRECISION=bf16: accuracy $a"
else fail "PHX_PRECISION=bf16 (status $rc, accuracy '$a')" "$out"; fi

out=$("$prog" --frobnicate 1 2>&1); rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q '^usage: cnn'; then pass "an unknown option: status 2 and the usage"
else fail "an unknown option (status $rc)" "$out"; fi
