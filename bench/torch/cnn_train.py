#!/usr/bin/python3
"""examples/cnn in PyTorch, for comparing test accuracy (and speed):
the same model (bench/torch/cnn.py's cnn_model), AdamW lr 1e-3, batch
128, shuffled each epoch, Fashion-MNIST scaled to [0, 1].

    bench/torch/cnn_train.py [--epochs N] [--dropout P] [--threads T]"""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn import cnn_model  # noqa: E402


def idx(name):
    d = os.environ.get("PHX_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    with gzip.open(os.path.join(d, name)) as f:
        raw = f.read()
    if raw[2] != 8:
        raise SystemExit("%s: not u8" % name)
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    t = torch.frombuffer(bytearray(raw[4 + 4 * len(dims):]), dtype=torch.uint8).view(*dims)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr = idx("train-images-idx3-ubyte.gz").float().div(255).view(-1, 1, 28, 28)
    ytr = idx("train-labels-idx1-ubyte.gz").long()
    xte = idx("t10k-images-idx3-ubyte.gz").float().div(255).view(-1, 1, 28, 28)
    yte = idx("t10k-labels-idx1-ubyte.gz").long()
    m = cnn_model()
    m[11].p = a.dropout
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    for e in range(a.epochs):
        t0, tot, n = time.perf_counter(), 0.0, 0
        perm = torch.randperm(len(xtr))
        m.train()
        for i in range(0, len(xtr), 128):
            idx_ = perm[i:i + 128]
            opt.zero_grad()
            loss = crit(m(xtr[idx_]), ytr[idx_])
            loss.backward()
            opt.step()
            tot += loss.item()
            n += 1
        dt = time.perf_counter() - t0
        print("Epoch [%d/%d], Loss: %.4f, %.0f samples/s (%.1f s)" % (e + 1, a.epochs, tot / n, len(xtr) / dt, dt),
              flush=True)
    m.eval()
    with torch.no_grad():
        acc = (m(xte).argmax(1) == yte).float().mean().item()
    print("Test accuracy: %.4f" % acc)


if __name__ == "__main__":
    main()
