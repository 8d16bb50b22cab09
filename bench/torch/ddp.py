#!/usr/bin/python3
"""PyTorch DDP over gloo, one process and one thread per rank: steps/s of
the seed model (Linear(10, 1), batch 64, MSE, SGD lr 0.01) and of the MLP
784-1024-1024-10 (ReLU, batch 256 per rank, cross-entropy, SGD lr 0.01),
the counterpart of bench/ddp. Prints one line per model:

    torch-ddp MODEL WORLD STEPS_PER_S
usage: ddp.py [--world N] [--seconds S]
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def models():
    seed = (lambda: nn.Linear(10, 1), 64, 10, None)
    mlp = (lambda: nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 10)), 256, 784, 10)
    return [("seed", seed), ("mlp", mlp)]


def measure(ddp, opt, loss_fn, x, y, seconds):
    def step():
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    # Every rank runs the same number of steps: rank 0 sizes the timed
    # run from a short one and broadcasts the count.
    n = torch.tensor([0])
    dist.barrier()
    t = time.perf_counter()
    k = 200 if x.shape[1] == 10 else 5  # the same count on every rank
    for _ in range(k):
        step()
    per = (time.perf_counter() - t) / k
    n[0] = max(3, int(seconds / per))
    dist.broadcast(n, 0)
    dist.barrier()
    t = time.perf_counter()
    for _ in range(int(n[0])):
        step()
    dist.barrier()
    return int(n[0]) / (time.perf_counter() - t)


def run(rank, world, port, seconds, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    for name, (make, batch, inp, classes) in models():
        model = make()
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x = torch.randn(batch, inp)
        if classes:
            y = torch.randint(0, classes, (batch,))
            loss_fn = nn.CrossEntropyLoss()
        else:
            y = torch.randn(batch, 1)
            loss_fn = nn.MSELoss()
        sps = measure(ddp, opt, loss_fn, x, y, seconds)
        if rank == 0:
            q.put((name, sps))
    dist.destroy_process_group()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(run, args=(a.world, free_port(), a.seconds, q), nprocs=a.world, join=True)
    while not q.empty():
        name, sps = q.get()
        print("torch-ddp %s %d %.2f" % (name, a.world, sps), flush=True)


if __name__ == "__main__":
    main()
