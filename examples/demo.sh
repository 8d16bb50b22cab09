#!/bin/sh
# make demo: runs each example in turn (areas append their lines).
set -e
# phx-info: every plugin built in this tree, ok or why not (doc/guide/plugins.md).
echo "== phx-info"
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') ./tools/phx-info
# ddp: the seed's DDP program (doc/guide/ddp.md) over 2 processes (gloo), as 2
# threads, and under phxrun.
ddp_plugins=$(find plugins -type d -name .libs | sort | tr '\n' ':')
if [ -e plugins/comm/gloo/.libs/phx-comm-gloo.so ]; then
    echo "== examples/ddp (PHX_COMM=gloo: 2 processes through phx_spawn)"
    PHX_PLUGIN_PATH=$ddp_plugins PHX_COMM=gloo ./examples/ddp --world 2
fi
echo "== examples/ddp (PHX_COMM=threads: 2 threads through phx_spawn)"
PHX_PLUGIN_PATH=$ddp_plugins PHX_COMM=threads ./examples/ddp --world 2
if [ -x tools/phxrun ] && [ -e plugins/comm/gloo/.libs/phx-comm-gloo.so ]; then
    echo "== phxrun --nproc-per-node 2 examples/ddp"
    PHX_PLUGIN_PATH=$ddp_plugins ./tools/phxrun --nproc-per-node 2 ./examples/ddp
fi
# Mixed precision (doc/guide/precision.md): the seed's AMP program, fp16 by default, then bf16 and fp32.
for p in fp16 bf16 fp32; do
    echo "== examples/amp (PHX_PRECISION=$p)"
    PHX_PRECISION=$p PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') ./examples/amp
done
# DataParallel (doc/guide/dp.md): the seed's program, wrapped when more than one
# device is available -- on the CPU a replica per thread.
echo "== examples/data_parallel (PHX_NUM_THREADS=2: 2 CPU replicas)"
PHX_NUM_THREADS=2 ./examples/data_parallel
# train: the seed program, a custom module, and Fashion-MNIST on one process
# (5 epochs, ~30-60 s on 2 cores; doc/guide/training.md).
echo "== examples/linear_regression"
./examples/linear_regression
echo "== examples/custom_module"
./examples/custom_module
if [ -r "${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}/train-images-idx3-ubyte.gz" ]; then
    echo "== examples/fashion_mnist --epochs 5 --save fashion_mnist.safetensors"
    ./examples/fashion_mnist --epochs 5 --save fashion_mnist.safetensors
    echo "== examples/fashion_mnist --epochs 0 --load fashion_mnist.safetensors"
    ./examples/fashion_mnist --epochs 0 --load fashion_mnist.safetensors
    rm -f fashion_mnist.safetensors
    # A CNN with BatchNorm (doc/guide/cnn.md): one epoch, ~20-40 s on 2 cores.
    echo "== examples/cnn --epochs 1"
    ./examples/cnn --epochs 1
    # Forward-only modules (doc/guide/autograd.md): the ResNet on a tenth of the
    # data (~15 s), and the two-input model with two losses (~5 s).
    echo "== examples/resnet --epochs 1 --train-rows 6000"
    ./examples/resnet --epochs 1 --train-rows 6000
    echo "== examples/two_input"
    ./examples/two_input
else
    echo "== examples/fashion_mnist: skipped (apt-get install dataset-fashion-mnist)"
fi
# Fashion-MNIST under DDP: two processes, each on its DistributedSampler shard
# (doc/guide/ddp.md); rank 0 prints progress, the test accuracy, saves.
if [ -x tools/phxrun ] && [ -e plugins/comm/gloo/.libs/phx-comm-gloo.so ] &&
   [ -r "${PHX_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}/train-images-idx3-ubyte.gz" ]; then
    echo "== phxrun --nproc-per-node 2 examples/fashion_mnist --epochs 2 --save fashion_mnist_ddp.safetensors"
    PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') PHX_COMM=gloo \
        ./tools/phxrun --nproc-per-node 2 ./examples/fashion_mnist --epochs 2 --save fashion_mnist_ddp.safetensors
    rm -f fashion_mnist_ddp.safetensors
fi
# A character-level GPT (doc/guide/transformer.md) on Debian's fortunes (the
# project's docs when the package is missing): 60 steps of a 2-layer model
# with a validation loss and a short sample, then the same under phxrun.
gpt_data=/usr/share/games/fortunes
if [ ! -d "$gpt_data" ]; then
    echo "== $gpt_data is missing (./bootstrap installs Debian's fortunes): examples/gpt trains on the docs instead"
    cat doc/*.md README.md > gpt-demo.txt
    gpt_data=gpt-demo.txt
fi
gpt_small="--layers 2 --context 64 --batch 8 --eval-every 0 --print-every 20 --sample 120 --data $gpt_data"
echo "== examples/gpt --steps 60 $gpt_small"
./examples/gpt --steps 60 $gpt_small
if [ -x tools/phxrun ] && [ -e plugins/comm/gloo/.libs/phx-comm-gloo.so ]; then
    echo "== phxrun --nproc-per-node 2 examples/gpt --steps 60 $gpt_small"
    PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
        ./tools/phxrun --nproc-per-node 2 ./examples/gpt --steps 60 $gpt_small
fi
rm -f gpt-demo.txt
