#!/usr/bin/python3
"""Writes t/ref/dp_chunk.txt: the chunk sizes torch.chunk gives when
DataParallel scatters a batch of B rows over n devices
(torch/nn/parallel/scatter_gather.py -> comm.scatter -> tensor.chunk).

Each line: B n k s_1 ... s_k  (k = number of chunks actually made).
Usage: bench/torch/chunk.py [OUT]   (default t/ref/dp_chunk.txt)"""
import os
import sys

import torch

BATCHES = (1, 2, 5, 10, 64)
DEVICES = (1, 2, 3, 4)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "t", "ref", "dp_chunk.txt")
    lines = ["# B n k sizes... : torch.arange(B).chunk(n) (torch %s)" % torch.__version__]
    for b in BATCHES:
        for n in DEVICES:
            sizes = [len(c) for c in torch.arange(b).chunk(n)]
            lines.append(" ".join(str(v) for v in [b, n, len(sizes)] + sizes))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
