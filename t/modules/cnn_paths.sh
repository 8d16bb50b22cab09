#!/bin/sh
# t/modules/cnn on each CPU convolution path: PHX_CPU_CONV=im2col (the
# path of a build without oneDNN, and of f16/bf16), oneDNN with AVX2 only
# (ONEDNN_MAX_CPU_ISA=AVX2, as on a CPU without AVX-512), oneDNN over 3
# threads (uneven parts of the batch), and, where the kernels use AVX-512,
# the implicit GEMM, Winograd and the direct kernel (t/tensor/conv checks them shape by
# shape), the kernels held to AVX2 (auto; a forced AVX-512 path is then
# refused naming both variables); a bad PHX_CPU_CONV is an error naming
# the variable.
b=${top_builddir:-.}
echo "1..9"
i=0
run() {
    i=$((i + 1))
    what=$1
    shift
    out=$(env "$@" "$b/t/modules/cnn" 2>&1)
    rc=$?
    if [ $rc = 0 ] && ! echo "$out" | grep -q '^not ok'; then
        echo "ok $i - t/modules/cnn with $what: every case matches torch"
    else
        echo "not ok $i - t/modules/cnn with $what: exit $rc"
        echo "$out" | grep -E '^not ok|^#' | sed 's/^/# /' | head -20
    fi
}
run "PHX_CPU_CONV=im2col" PHX_CPU_CONV=im2col
if grep -q '^#define HAVE_DNNL 1' "$b/config.h" 2>/dev/null; then
    run "oneDNN capped at AVX2" PHX_CPU_CONV=dnnl ONEDNN_MAX_CPU_ISA=AVX2
    run "oneDNN over 3 threads" PHX_CPU_CONV=dnnl PHX_NUM_THREADS=3
else
    echo "ok 2 # SKIP built without oneDNN"
    echo "ok 3 # SKIP built without oneDNN"
    i=3
fi
if grep -q '^flags.* avx512f' /proc/cpuinfo 2>/dev/null && { [ -z "$PHX_CPU_ISA" ] || [ "$PHX_CPU_ISA" = avx512 ]; }; then
    run "PHX_CPU_CONV=avx512" PHX_CPU_CONV=avx512
    run "PHX_CPU_CONV=winograd over 3 threads" PHX_CPU_CONV=winograd PHX_NUM_THREADS=3
    run "PHX_CPU_CONV=direct" PHX_CPU_CONV=direct
    run "the kernels held to AVX2 (auto)" PHX_CPU_ISA=avx2
    out=$(PHX_CPU_ISA=avx2 PHX_CPU_CONV=winograd "$b/t/modules/cnn" 2>&1)
    if echo "$out" | grep -q "PHX_CPU_CONV=winograd but the kernels use avx2 (PHX_CPU_ISA)"; then
        echo "ok 8 - PHX_CPU_CONV=winograd with PHX_CPU_ISA=avx2: refused naming both"
    else
        echo "not ok 8 - PHX_CPU_CONV=winograd with PHX_CPU_ISA=avx2 was not refused as expected"
    fi
else
    for i in 4 5 6 7 8; do echo "ok $i # SKIP the kernels do not use AVX-512"; done
fi
out=$(PHX_CPU_CONV=fast "$b/t/modules/cnn" 2>&1)
if echo "$out" | grep -q "PHX_CPU_CONV='fast', expected auto, im2col, dnnl, avx512, winograd or direct"; then
    echo "ok 9 - PHX_CPU_CONV=fast: the convolutions fail naming the variable and the choices"
else
    echo "not ok 9 - PHX_CPU_CONV=fast was not refused"
fi
