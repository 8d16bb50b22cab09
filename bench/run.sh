#!/bin/sh
# make bench: each benchmark beside its PyTorch counterpart (areas append their lines).
set -e
# Every benchmark also appends its rows to $PHX_BENCH_TSV (bench/bench-tsv.h,
# doc/maint/bench.md); `make plots` draws them.
PHX_BENCH_TSV=${PHX_BENCH_TSV:-$(pwd)/bench/results.tsv}
export PHX_BENCH_TSV
: >"$PHX_BENCH_TSV"
TORCH_PY=${TORCH_PYTHON:-/usr/bin/python3}
# Fair peers: OPENBLAS_CORETYPE for both sides where OpenBLAS misdetects
# the CPU, and table(), which prints the CPU, BLAS and environment lines
# above each table (bench/peers.sh, doc/maint/bench.md).
bench_src=$(dirname "$0")
bench_build=.
. "$bench_src/peers.sh"
# ddp: DDP at world 2 on gloo and threads beside PyTorch DDP over gloo
# (bench/torch/ddp.py), and the gain from overlap (doc/guide/ddp.md).
table bench/ddp
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/ddp --torch "$(dirname "$0")/torch/ddp.py"
# zero: per-rank bytes of parameters, gradients and optimizer state, peak
# RSS and step time of a GPT under DDP, ZeRO-1 and ZeRO-2 (doc/guide/sharding.md),
# then the largest GPT each mode fits in 64 MiB per rank.
table bench/zero
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') ./bench/zero
./bench/zero --max-rank-bytes 67108864
# amp: training steps/s under fp32, fp16, bf16 beside PyTorch fp32 and CPU
# autocast bf16 (bench/torch/amp.py; doc/guide/precision.md).
table bench/amp
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/amp --torch "$(dirname "$0")/torch/amp.py"
# precision: fp16 and bf16 against our own fp32 on the GPT, CNN and ResNet
# of bench/step, alternating rounds (bench/precision.sh; doc/guide/precision.md).
table bench/precision
"$(dirname "$0")/precision.sh"
# dp: DataParallel over 2 CPU replicas against the unwrapped MLP at 1 BLAS
# thread and PyTorch's single process at 2 threads (bench/torch/dp.py),
# plus the BLAS concurrency check (doc/guide/dp.md).
table bench/dp
./bench/dp --torch "$(dirname "$0")/torch/dp.py"
# train: training steps/s of the seed's Linear(10,1) and an MLP beside
# PyTorch (bench/torch/step.py), at 1 and 2 threads (doc/guide/training.md);
# two rounds over every row, each side's best, so that one slow minute of a
# shared host does not decide a ratio.
table bench/step
./bench/step --rounds 2 --torch "$(dirname "$0")/torch/step.py"
# growth: the MLP step across batch sizes and widths at 1 and 2 threads
# (GFLOP/s: where a row stops growing with the batch is the knee).
table "MLP step growth"
./bench/step --growth 0.3
# Peak memory of each step beside PyTorch's (10 steps of bench/step's
# model, each side in its own process: ru_maxrss of the whole process, the
# interpreter and libraries included, since a user pays for them too).
table "steps, peak RSS"
for m in mlp cnn gpt resnet; do
    ./bench/step --rss $m
    OPENBLAS_NUM_THREADS=2 "$TORCH_PY" "$(dirname "$0")/torch/step.py" --rss $m --threads 2
done
# scale: DDP efficiency at 8, 64 and 512 ranks on paper, from the measured
# all-reduce and step times (doc/maint/bench.md, "DDP scaling on paper").
table bench/scale
./bench/scale
# core: the CPU kernel table (GEMM, activations, bias, layernorm, cross
# entropy, Adam, casts, RNG) beside the same PyTorch ops, one thread each
# (bench/torch/kernels.py; doc/reference/tensors.md); 3 alternating passes, each
# side's best.
table bench/kernels
./bench/kernels --passes 3 --torch "$(dirname "$0")/torch/kernels.py"
# data: the loader's samples/s with 0-2 workers from a dataset whose get
# costs 50 us, and the MLP step fed by it, beside PyTorch's DataLoader
# (bench/torch/loader_speed.py; doc/guide/data.md).
table bench/loader
./bench/loader --torch "$(dirname "$0")/torch/loader_speed.py"
# comm: all-reduce bandwidth like nccl-tests (f32 sum, 4 B..256 MiB) on the
# threads and gloo backends at world 2 and 4, beside torch.distributed gloo
# (bench/torch/allreduce.py) and the memcpy ceiling (doc/guide/comm.md).
table bench/allreduce
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/allreduce --torch "$(dirname "$0")/torch/allreduce.py"
# store: the TCP store server's memory and CPU under attacks from local
# clients (doc/reference/store.md, "Limits").
table bench/store_attack
"$(dirname "$0")/store_attack.sh" ./bench/store_attack
echo "== results: $PHX_BENCH_TSV ($(wc -l <"$PHX_BENCH_TSV") rows; make plots draws them)"
