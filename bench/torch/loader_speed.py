#!/usr/bin/python3
"""PyTorch's side of bench/loader: the same synthetic dataset (each
__getitem__ spends --cost-us of CPU, then returns a 784-float image and a
label) through DataLoader(batch_size=128, shuffle=True, drop_last=True,
num_workers=w) for w = 0, 1, 2 (workers are processes here, threads in
Phalanx); then the MLP 784-512-256-10 with AdamW lr 1e-3 trained from it
and from an in-memory TensorDataset. Prints
  RESULT load <workers> <samples/s>
  RESULT step_memory 0 <steps/s>
  RESULT step_slow <workers> <steps/s>"""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class Slow(Dataset):
    def __init__(self, n, cost_s):
        self.n, self.cost_s = n, cost_s
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 784, generator=g)
        self.y = torch.arange(n) % 10

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        until = time.perf_counter() + self.cost_s
        img, lab = self.x[i].clone(), self.y[i]
        while time.perf_counter() < until:
            pass
        return img, lab


def loader(ds, workers):
    return DataLoader(ds, batch_size=128, shuffle=True, drop_last=True, num_workers=workers,
                      persistent_workers=workers > 0)


def load_rate(ds, workers):
    dl = loader(ds, workers)
    it = iter(dl)
    next(it)  # warm-up: workers started
    t0, n = time.perf_counter(), 0
    for _ in it:
        n += 128
    return n / (time.perf_counter() - t0)


def step_rate(ds, workers, steps):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    crit = nn.CrossEntropyLoss()
    dl = loader(ds, workers)
    it = iter(dl)
    t0 = 0.0
    for s in range(steps + 3):
        if s == 3:
            t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(dl)
            x, y = next(it)
        opt.zero_grad()
        crit(m(x), y).backward()
        opt.step()
    return steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cost-us", type=float, default=50)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    slow = Slow(a.samples, a.cost_us * 1e-6)
    for w in range(3):
        print("RESULT load %d %.1f" % (w, load_rate(slow, w)), flush=True)
    mem = TensorDataset(slow.x, slow.y)
    print("RESULT step_memory 0 %.2f" % step_rate(mem, 0, a.steps), flush=True)
    for w in range(3):
        print("RESULT step_slow %d %.2f" % (w, step_rate(slow, w, a.steps)), flush=True)


if __name__ == "__main__":
    main()
