#!/bin/sh
# make bench: each benchmark beside its PyTorch counterpart (areas append their lines).
set -e
# Every benchmark also appends its rows to $PHX_BENCH_TSV (bench/bench-tsv.h,
# doc/bench.md); `make plots` draws them.
PHX_BENCH_TSV=${PHX_BENCH_TSV:-$(pwd)/bench/results.tsv}
export PHX_BENCH_TSV
: >"$PHX_BENCH_TSV"
TORCH_PY=${TORCH_PYTHON:-/usr/bin/python3}

# Fair peers (doc/bench.md): both sides' OpenBLAS picks its kernels from
# the CPU's model numbers when it loads; on a CPU it does not know (a
# masked model name) it falls back to its Prescott (SSE3) kernels, 3-7x
# slower. Unless OPENBLAS_CORETYPE is given, set it to the core the CPU's
# flags call for when either side's OpenBLAS runs a narrower one, for
# both sides, and say so above every table and in results.tsv.
kv() { sed -n "s/^$1=//p"; }
cpu_info=$(./bench/cpu)
peer_info=$("$TORCH_PY" "$(dirname "$0")/torch/peer.py" 2>/dev/null || true)
want=$(echo "$cpu_info" | kv blas_core_for_cpu)
core_note="given"
if [ -z "${OPENBLAS_CORETYPE+set}" ]; then
    core_note="unset"
    ours=$(echo "$cpu_info" | kv blas_core)
    theirs=$(echo "$peer_info" | kv torch_blas_core)
    if [ -n "$want" ] && [ "$want" != "-" ]; then
        lw=$(./bench/cpu --level "$want")
        lo=$(./bench/cpu --level "$ours")
        lt=$lw
        case $theirs in "" | - | mkl) ;; *) lt=$(./bench/cpu --level "$theirs") ;; esac
        if [ "$(echo "$cpu_info" | kv blas)" != OpenBLAS ]; then lo=$lw; fi
        if [ "$lo" -lt "$lw" ] || [ "$lt" -lt "$lw" ]; then
            OPENBLAS_CORETYPE=$want
            export OPENBLAS_CORETYPE
            core_note="set by bench/run.sh: OpenBLAS detected $ours (Phalanx) and ${theirs:--} (PyTorch) on this CPU, whose flags call for $want"
            cpu_info=$(./bench/cpu)
            peer_info=$("$TORCH_PY" "$(dirname "$0")/torch/peer.py" 2>/dev/null || true)
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
    [ -n "$c" ] && tsv env "blas core" $side "$c" "$(./bench/cpu --level "$c")"
done
case $core_note in set*) set_by=1 ;; *) set_by=0 ;; esac
tsv env OPENBLAS_CORETYPE "${OPENBLAS_CORETYPE:--}" "set by run.sh" $set_by
# ddp: DDP at world 2 on gloo and threads beside PyTorch DDP over gloo
# (bench/torch/ddp.py), and the gain from overlap (doc/ddp.md).
table bench/ddp
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/ddp --torch "$(dirname "$0")/torch/ddp.py"
# amp: training steps/s under fp32, fp16, bf16 beside PyTorch fp32 and CPU
# autocast bf16 (bench/torch/amp.py; doc/precision.md).
table bench/amp
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/amp --torch "$(dirname "$0")/torch/amp.py"
# dp: DataParallel over 2 CPU replicas against the unwrapped MLP at 1 BLAS
# thread and PyTorch's single process at 2 threads (bench/torch/dp.py),
# plus the BLAS concurrency check (doc/dp.md).
table bench/dp
./bench/dp --torch "$(dirname "$0")/torch/dp.py"
# train: training steps/s of the seed's Linear(10,1) and an MLP beside
# PyTorch (bench/torch/step.py), at 1 and 2 threads (doc/training.md).
table bench/step
./bench/step --torch "$(dirname "$0")/torch/step.py"
# The ResNet step's peak memory beside PyTorch's (10 steps, batch 128, each
# in its own process: ru_maxrss of the whole process).
table "resnet step, peak RSS"
./bench/step --rss resnet
OPENBLAS_NUM_THREADS=2 "$TORCH_PY" "$(dirname "$0")/torch/resnet.py" step --batch 128 --threads 2 --steps 10 |
    awk '{ printf "torch resnet_step_rss %s MiB (%s ms per step)\n", $3, $2 }'
# core: the CPU kernel table (GEMM, activations, bias, layernorm, cross
# entropy, Adam, casts, RNG) beside the same PyTorch ops, one thread each
# (bench/torch/kernels.py; doc/tensors.md).
table bench/kernels
./bench/kernels --torch "$(dirname "$0")/torch/kernels.py"
# data: the loader's samples/s with 0-2 workers from a dataset whose get
# costs 50 us, and the MLP step fed by it, beside PyTorch's DataLoader
# (bench/torch/loader_speed.py; doc/data.md).
table bench/loader
./bench/loader --torch "$(dirname "$0")/torch/loader_speed.py"
# comm: all-reduce bandwidth like nccl-tests (f32 sum, 4 B..256 MiB) on the
# threads and gloo backends at world 2 and 4, beside torch.distributed gloo
# (bench/torch/allreduce.py) and the memcpy ceiling (doc/comm.md).
table bench/allreduce
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/allreduce --torch "$(dirname "$0")/torch/allreduce.py"
# store: the TCP store server's memory and CPU under attacks from local
# clients (doc/store.md, "Limits").
table bench/store_attack
"$(dirname "$0")/store_attack.sh" ./bench/store_attack
echo "== results: $PHX_BENCH_TSV ($(wc -l <"$PHX_BENCH_TSV") rows; make plots draws them)"
