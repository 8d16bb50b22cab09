#!/bin/sh
# examples/resnet (forward-only blocks) and examples/two_input on the first
# Fashion-MNIST images: one process (the loss falls; after 16 steps the
# test accuracy in eval mode is still near chance in torch too, the
# BatchNorm running statistics lagging, so the loss is what is checked),
# save and --epochs 0 --load (the same accuracy), --dp (DataParallel
# replicas the core cloned), phxrun with 2 processes, --sync-bn and bf16,
# --help, --augment (the loader collate's flips and crops: the losses still
# fall, and differ from the same seed's unaugmented run; a padding out of
# range refused); two_input's test accuracy above 0.6. Skips without Debian's
# dataset-fashion-mnist.
b=${top_builddir:-.}
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
losses() { echo "$1" | awk '/^Epoch \[/{sub(",", "", $4); printf "%s ", $4}'; }
falls() { echo "$1" | awk '{exit !(NF == 2 && $2 < $1 && $2 < 2.0)}'; }
above() { awk -v a="$1" -v m="$2" 'BEGIN{exit !(a != "" && a > m)}'; }
prog="$b/examples/resnet"
small="--train-rows 2048 --epochs 2"
echo "1..9"

out=$("$prog" $small --save "$tmp/r.safetensors" 2>&1); rc=$?
l=$(losses "$out"); a1=$(acc "$out"); l1=$l
if [ $rc -eq 0 ] && falls "$l" && [ -n "$a1" ]; then pass "resnet, one process: epoch losses $l fall below 2.0"
else fail "resnet, one process (status $rc, losses '$l')" "$out"; fi

out=$("$prog" --epochs 0 --load "$tmp/r.safetensors" 2>&1); rc=$?
a2=$(acc "$out")
if [ $rc -eq 0 ] && [ "$a1" = "$a2" ]; then pass "resnet --epochs 0 --load: the saved model's accuracy ($a2)"
else fail "resnet --load gives '$a2', expected '$a1' (status $rc)" "$out"; fi

out=$(PHX_NUM_THREADS=2 "$prog" $small --dp 2>&1); rc=$?
l=$(losses "$out")
if [ $rc -eq 0 ] && falls "$l" && echo "$out" | grep -q 'DataParallel, 2 CPU replicas'; then
    pass "resnet --dp: 2 replicas of the forward-only model, losses $l"
else fail "resnet --dp (status $rc, losses '$l')" "$out"; fi

if [ -e "$b/plugins/comm/gloo/.libs/phx-comm-gloo.so" ] && [ -x "$b/tools/phxrun" ]; then
    out=$(PHX_PRECISION=bf16 PHX_PLUGIN_PATH=$(find "$b/plugins" -type d -name .libs | sort | tr '\n' ':') \
        "$b/tools/phxrun" --standalone --nproc-per-node 2 "$prog" $small --sync-bn 2>&1); rc=$?
    l=$(losses "$out")
    if [ $rc -eq 0 ] && falls "$l" && echo "$out" | grep -q 'DDP over gloo, SyncBatchNorm), bf16 on'; then
        pass "resnet under phxrun, 2 processes, --sync-bn, bf16: losses $l"
    else fail "resnet under phxrun (status $rc, losses '$l')" "$out"; fi
else
    n=$((n + 1)); echo "ok $n # SKIP built without gloo or phxrun"
fi

out=$("$prog" --help 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q '^usage: resnet'; then pass "resnet --help: the usage, status 0"
else fail "resnet --help (status $rc)" "$out"; fi

out=$("$prog" $small --augment 2 2>&1); rc=$?
l=$(losses "$out")
if [ $rc -eq 0 ] && falls "$l" && [ "$l" != "$l1" ]; then
    pass "resnet --augment 2: losses $l fall, and differ from the unaugmented run's ($l1)"
else fail "resnet --augment 2 (status $rc, losses '$l', unaugmented '$l1')" "$out"; fi

out=$("$prog" $small --augment 15 2>&1); rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'resnet: --augment: 15, expected an integer in 0..14'; then
    pass "resnet --augment 15: refused, status 2"
else fail "resnet --augment 15 (status $rc)" "$out"; fi

out=$("$b/examples/two_input" --train-rows 8192 2>&1); rc=$?
a=$(acc "$out")
if [ $rc -eq 0 ] && above "$a" 0.6; then pass "two_input: two inputs, two losses, one backward: test accuracy $a > 0.6"
else fail "two_input (status $rc, accuracy '$a')" "$out"; fi

out=$("$b/examples/two_input" --frobnicate 1 2>&1); rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'unknown option'; then pass "two_input: an unknown option is a usage error"
else fail "two_input --frobnicate (status $rc)" "$out"; fi
