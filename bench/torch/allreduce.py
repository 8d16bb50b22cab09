#!/usr/bin/python3
"""torch.distributed gloo all-reduce timings, the counterpart of
bench/allreduce: f32 sum from 4 B to --max bytes (x2 steps), --world
processes on 127.0.0.1, same protocol (warm-up, then the fastest of three
loops of `iters` blocking all-reduces between two barriers, rank 0's wall
time / iters).
Prints "bytes microseconds" per size."""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


REPS = 3  # timed loops per point; the fastest counts (shared machines)


def iters_for(nbytes):
    return max(2, min(300, (128 << 20) // max(nbytes, 1)))


def run(rank, world, port, max_bytes, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    buf = torch.ones(max_bytes // 4, dtype=torch.float32)
    nbytes = 4
    while nbytes <= max_bytes:
        t = buf[: nbytes // 4]
        it = iters_for(nbytes)
        dist.all_reduce(t)
        if nbytes < (16 << 20):
            dist.all_reduce(t)
        dt = 1e30
        for _ in range(REPS):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(it):
                dist.all_reduce(t)
            dist.barrier()
            dt = min(dt, time.perf_counter() - t0)
        if rank == 0:
            q.put((nbytes, dt / it * 1e6))
        nbytes *= 2
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--max", type=int, default=256 << 20)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, a.world, port, a.max, q)) for r in range(a.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    while not q.empty():
        nbytes, us = q.get()
        print(nbytes, "%.3f" % us)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
