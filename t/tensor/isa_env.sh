#!/bin/sh
# The compute-bound CPU kernels on every instruction set this CPU has
# (PHX_CPU_ISA=generic, avx2, avx512): the activation, cross-entropy and
# PyTorch-reference tests pass on each, so every path gives results within
# the same bounds (bit for bit against kernels/math.h where those tests
# ask for it). A value that is not a known set, or one the CPU lacks, is
# an error naming it (read from the library's log: PHX_LOG=debug prints
# every error as it is set).
b=${top_builddir:-.}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
sets="generic"
has avx2 && sets="$sets avx2"
has avx512f && sets="$sets avx512"
n=0
echo "1..$((3 * $(echo $sets | wc -w) + 2))"
for isa in $sets; do
    for t in tensor/act tensor/nn tensor/torch; do
        n=$((n + 1))
        out=$(PHX_CPU_ISA=$isa "$b/t/$t" 2>&1); rc=$?
        bad=$(printf '%s\n' "$out" | grep -c '^not ok')
        if [ $rc = 0 ] && [ "$bad" = 0 ] && printf '%s\n' "$out" | grep -q '^ok'; then
            echo "ok $n - PHX_CPU_ISA=$isa: t/$t passes"
        else
            echo "not ok $n - PHX_CPU_ISA=$isa: t/$t (status $rc, $bad failed)"
            printf '%s\n' "$out" | grep -A3 '^not ok' | head -20 | sed 's/^/# /'
        fi
    done
done
n=$((n + 1))
out=$(PHX_LOG=debug PHX_CPU_ISA=sse9 "$b/t/tensor/act" 2>&1)
if printf '%s\n' "$out" | grep -q "PHX_CPU_ISA='sse9': expected generic, avx2 or avx512"; then
    echo "ok $n - PHX_CPU_ISA=sse9 is an error naming the value and the choices"
else
    echo "not ok $n - PHX_CPU_ISA=sse9"; printf '%s\n' "$out" | head -5 | sed 's/^/# /'
fi
n=$((n + 1))
if has avx512f; then
    echo "ok $n # SKIP this CPU has AVX-512: no set to ask for that it lacks"
else
    out=$(PHX_LOG=debug PHX_CPU_ISA=avx512 "$b/t/tensor/act" 2>&1)
    printf '%s\n' "$out" | grep -q "PHX_CPU_ISA='avx512'" && echo "ok $n - PHX_CPU_ISA=avx512 without AVX-512 is an error" ||
        { echo "not ok $n - PHX_CPU_ISA=avx512 on a CPU without it"; printf '%s\n' "$out" | head -5 | sed 's/^/# /'; }
fi
