#!/usr/bin/python3
"""PyTorch's side of bench/step: training steps per second for
  linear: Linear(10, 1), batch 64, MSE, SGD lr 0.01 (the seed program)
  mlp:    784-1024-1024-10 ReLU MLP, batch 256, cross entropy, SGD lr 0.01
  gpt:    the GPT of bench/torch/gpt.py (vocab 65, 4 layers, 4 heads, d_model
          128) on 16 x 128 tokens, cross entropy, AdamW lr 3e-4; gpt_bf16 the
          same under torch.autocast("cpu", dtype=torch.bfloat16)
  cnn:    examples/cnn's model (bench/torch/cnn.py) on 128 28x28 images,
          cross entropy, AdamW lr 1e-3
at the thread counts given. A step is zero_grad, forward, loss, backward,
optimizer step (no .item(), which would only add to torch's time).
Prints "RESULT <name> <threads> <steps/s> <steps per CPU-second>" (each
the best of --repeats runs; the second counts the process's CPU time, all
threads, which a shared machine does not inflate).
--rss NAME: 10 steps of that model only, then "torch NAME_step_rss <MiB>":
the process's peak resident set (ru_maxrss), beside bench/step --rss NAME."""
import argparse
import resource
import time

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, gpt2_init  # noqa: E402
from cnn import cnn_model  # noqa: E402
from resnet import ResNet  # noqa: E402


def make(name):
    torch.manual_seed(0)
    if name == "linear":
        m = nn.Linear(10, 1)
        x, y = torch.randn(64, 10), torch.randn(64, 1)
        crit = nn.MSELoss()
    elif name.startswith("gpt"):
        # phx_gpt_defaults(): the model of bench/torch/gpt.py (GPT-2 init)
        m = GPT(65, 128, 4, 4, 128)
        gpt2_init(m, 0.02, 4)
        i = torch.arange(16 * 128)
        x, y = ((i * 37 + 5) % 65).view(16, 128), ((i * 53 + 11) % 65).view(16, 128)

        def crit(logits, target):
            return F.cross_entropy(logits.view(-1, 65), target.view(-1))

        return m, x, y, crit, torch.optim.AdamW(m.parameters(), lr=3e-4)
    elif name == "resnet":
        # examples/resnet's model (bench/torch/resnet.py), SGD momentum
        m = ResNet()
        x, y = torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,))
        return m, x, y, nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    elif name == "cnn":
        m = cnn_model()
        x, y = torch.rand(128, 1, 28, 28), torch.randint(0, 10, (128,))
        return m, x, y, nn.CrossEntropyLoss(), torch.optim.AdamW(m.parameters(), lr=1e-3)
    else:
        m = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        x, y = torch.rand(256, 784), torch.randint(0, 10, (256,))
        crit = nn.CrossEntropyLoss()
    return m, x, y, crit, torch.optim.SGD(m.parameters(), lr=0.01)


def rate(name, seconds, repeats):
    m, x, y, crit, opt = make(name)
    bf16 = name == "gpt_bf16"  # CPU autocast: bf16 matmuls, f32 weights

    def step():
        opt.zero_grad()
        crit(m(x), y).backward()
        opt.step()

    def step_bf16():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = crit(m(x), y)
        loss.backward()
        opt.step()

    if bf16:
        step = step_bf16  # noqa: F811

    for _ in range(20 if name == "linear" else 3):
        step()
    best, best_cpu = 0.0, 0.0
    for _ in range(repeats):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            step()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= seconds:
                break
        best = max(best, n / dt)
        best_cpu = max(best_cpu, n / max(time.process_time() - c0, 1e-9))
    return best, best_cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="linear,mlp,gpt,gpt_bf16,cnn")
    ap.add_argument("--rss", default=None)
    a = ap.parse_args()
    if a.rss:
        torch.set_num_threads(int(a.threads.split(",")[-1]))
        m, x, y, crit, opt = make(a.rss)
        for _ in range(10):
            opt.zero_grad()
            crit(m(x), y).backward()
            opt.step()
        print("torch %s_step_rss %.1f MiB" % (a.rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))
        return
    for name in a.only.split(","):
        for t in [int(v) for v in a.threads.split(",")]:
            torch.set_num_threads(t)
            print("RESULT %s %d %.3f %.3f" % ((name, t) + rate(name, a.seconds, a.repeats)), flush=True)


if __name__ == "__main__":
    main()
