#!/usr/bin/python3
"""PyTorch's side of bench/gpu, on cuda:0 of the same machine:
  copy_gbs    device-to-device copy of 64 Mi f32 (bytes read + written / s)
  gemm_f32    torch.matmul 8192^3 f32, TF32 off
  gemm_tf32   the same with torch.backends.cuda.matmul.allow_tf32 = True
  gemm_bf16   8192^3 bf16
  mlp_steps   784-1024-1024-10 ReLU MLP, batch 256, cross entropy, SGD
              lr 0.01, eager: zero_grad, forward, loss, backward, step
Timed with CUDA events (median of repeats after warm-up; random data).
Prints "RESULT <name> <value>"; --quick uses smaller sizes, as bench/gpu."""
import argparse
import time

import torch
import torch.nn as nn


def timed(fn, iters, repeats):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / iters)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench/torch/gpu.py: no CUDA device")
        return
    dev = torch.device("cuda:0")
    print("torch %s on %s" % (torch.__version__, torch.cuda.get_device_name(0)))
    n = (16 if a.quick else 64) << 20
    x, y = torch.rand(n, device=dev), torch.empty(n, device=dev)
    t = timed(lambda: y.copy_(x), 10 if a.quick else 50, a.repeats)
    print("RESULT copy_gbs %.1f" % (2 * 4 * n / t / 1e9))
    del x, y

    g = 4096 if a.quick else 8192
    for name, dt, tf32 in (("gemm_f32", torch.float32, False), ("gemm_tf32", torch.float32, True),
                           ("gemm_bf16", torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        A = torch.rand(g, g, device=dev, dtype=dt) * 2 - 1
        B = torch.rand(g, g, device=dev, dtype=dt) * 2 - 1
        iters = (5 if a.quick else 30) if dt == torch.bfloat16 else (3 if a.quick else 10)
        t = timed(lambda: torch.matmul(A, B), iters, a.repeats)
        print("RESULT %s %.2f" % (name, 2 * g ** 3 / t / 1e12))
        del A, B
    torch.backends.cuda.matmul.allow_tf32 = False

    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                      nn.Linear(1024, 10)).to(dev)
    xb, yb = torch.rand(256, 784, device=dev), torch.randint(0, 10, (256,), device=dev)
    crit, opt = nn.CrossEntropyLoss(), torch.optim.SGD(m.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        crit(m(xb), yb).backward()
        opt.step()

    seconds = 0.5 if a.quick else 2.0
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    best = 0.0
    for _ in range(a.repeats):
        k, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step()
            k += 1
        torch.cuda.synchronize()
        best = max(best, k / (time.perf_counter() - t0))
    print("RESULT mlp_steps %.1f" % best)


if __name__ == "__main__":
    main()
