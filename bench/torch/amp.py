#!/usr/bin/python3
"""PyTorch counterpart of bench/amp: training steps/s of the MLP
784-512-256-10 (ReLU, batch 256, cross-entropy, SGD lr 0.01 momentum 0.9)
on the CPU in fp32 and under torch.autocast("cpu", dtype=torch.bfloat16)
(PyTorch 1.13 has no fp16 autocast on the CPU). Same thread count as
Phalanx (--threads). Prints one line per mode:

    torch-amp MODE STEPS_PER_S
usage: amp.py [--seconds S] [--threads N]
"""
import argparse
import time

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.rand(256, 784)
    y = torch.randint(0, 10, (256,))
    for mode in ("fp32", "bf16"):
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()

        def step():
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()

        for _ in range(3):
            step()
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < a.seconds:
            step()
            n += 1
        print("torch-amp %s %.3f" % (mode, n / (time.perf_counter() - t0)), flush=True)


if __name__ == "__main__":
    main()
