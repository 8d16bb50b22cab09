#!/bin/sh
# make bench: each benchmark beside its PyTorch counterpart (areas append their lines).
set -e
# ddp: DDP at world 2 on gloo and threads beside PyTorch DDP over gloo
# (bench/torch/ddp.py), and the gain from overlap (doc/ddp.md).
echo "== bench/ddp"
PHX_PLUGIN_PATH=$(find plugins -type d -name .libs | sort | tr '\n' ':') \
    ./bench/ddp --torch "$(dirname "$0")/torch/ddp.py"
