# Sourced by bench/run.sh (doc/maint/bench.md, "Fair peers"); expects
# TORCH_PY (the Python with torch), bench_src (this folder), bench_build
# (the build's top folder, holding bench/cpu) and PHX_BENCH_TSV. Sets and
# exports OPENBLAS_CORETYPE where it must, defines table TITLE, and
# appends the env rows to $PHX_BENCH_TSV.

# Fair peers (doc/maint/bench.md): both sides' OpenBLAS picks its kernels from
# the CPU's model numbers when it loads; on a CPU it does not know (a
# masked model name) it falls back to its Prescott (SSE3) kernels, 3-7x
# slower. Unless OPENBLAS_CORETYPE is given, set it to the core the CPU's
# flags call for when either side's OpenBLAS runs a narrower one, for
# both sides, and say so above every table and in results.tsv.
kv() { sed -n "s/^$1=//p"; }
cpu_info=$("$bench_build/bench/cpu")
peer_info=$("$TORCH_PY" "$bench_src/torch/peer.py" 2>/dev/null || true)
want=$(echo "$cpu_info" | kv blas_core_for_cpu)
core_note="given"
if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
    core_note="unset"
    ours=$(echo "$cpu_info" | kv blas_core)
    theirs=$(echo "$peer_info" | kv torch_blas_core)
    if [ -n "$want" ] && [ "$want" != "-" ]; then
        lw=$("$bench_build/bench/cpu" --level "$want")
        lo=$("$bench_build/bench/cpu" --level "$ours")
        lt=$lw
        case $theirs in "" | - | mkl) ;; *) lt=$("$bench_build/bench/cpu" --level "$theirs") ;; esac
        if [ "$(echo "$cpu_info" | kv blas)" != OpenBLAS ]; then lo=$lw; fi
        if [ "$lo" -lt "$lw" ] || [ "$lt" -lt "$lw" ]; then
            OPENBLAS_CORETYPE=$want
            export OPENBLAS_CORETYPE
            core_note="set by bench/run.sh: OpenBLAS detected $ours (Phalanx) and ${theirs:--} (PyTorch) on this CPU, whose flags call for $want"
            cpu_info=$("$bench_build/bench/cpu")
            peer_info=$("$TORCH_PY" "$bench_src/torch/peer.py" 2>/dev/null || true)
        fi
    fi
fi
cpu_name=$(echo "$cpu_info" | kv cpu_name)
header_cpu="cpu: $cpu_name ($(echo "$cpu_info" | kv cpu_vendor) family $(echo "$cpu_info" | kv cpu_family) model $(echo "$cpu_info" | kv cpu_model); $(echo "$cpu_info" | kv cpu_flags); Phalanx kernels $(echo "$cpu_info" | kv kernels_isa)), $(nproc) CPUs"
header_blas="blas: Phalanx $(echo "$cpu_info" | kv blas) core $(echo "$cpu_info" | kv blas_core); PyTorch $(echo "$peer_info" | kv torch_version) $(basename "$(echo "$peer_info" | kv torch_blas_lib)") core $(echo "$peer_info" | kv torch_blas_core), oneDNN $(echo "$peer_info" | kv torch_onednn), ATen $(echo "$peer_info" | kv torch_cpu_capability)"
header_env="env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:--} ($core_note); threads: Phalanx budget $(echo "$cpu_info" | kv threads), PyTorch $(echo "$peer_info" | kv torch_threads) (each table sets its own where it says)"
for v in PHX_NUM_THREADS OMP_NUM_THREADS OPENBLAS_NUM_THREADS PHX_CPU_ISA PHX_CPU_GEMM PHX_CPU_CONV PHX_TUNE PHX_TUNE_CACHE; do
    eval "val=\${$v:-}"
    [ -n "$val" ] && header_env="$header_env $v=$val"
done
table() {
    echo "== $1"
    echo "   $header_cpu"
    echo "   $header_blas"
    echo "   $header_env"
}
# The same in results.tsv (numeric values): the CPU's numbers, each side's
# core (value: its vector level, 2 AVX-512, 1 AVX2, 0 older), and whether
# run.sh set OPENBLAS_CORETYPE (1) or not (0).
tsv() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$PHX_BENCH_TSV"; }
tsv env cpu "$cpu_name" family "$(echo "$cpu_info" | kv cpu_family)"
tsv env cpu "$cpu_name" model "$(echo "$cpu_info" | kv cpu_model)"
for side in phalanx torch; do
    if [ $side = phalanx ]; then c=$(echo "$cpu_info" | kv blas_core); else c=$(echo "$peer_info" | kv torch_blas_core); fi
    [ -n "$c" ] && tsv env "blas core" $side "$c" "$("$bench_build/bench/cpu" --level "$c")"
done
case $core_note in set*) set_by=1 ;; *) set_by=0 ;; esac
tsv env OPENBLAS_CORETYPE "${OPENBLAS_CORETYPE:--}" "set by run.sh" $set_by
