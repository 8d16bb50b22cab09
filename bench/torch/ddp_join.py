#!/usr/bin/python3
"""Reference for t/ddp/join: DDP with uneven inputs under torch's join
(torch 1.13, gloo, 3 processes). Ranks 0, 1, 2 train on 10, 7 and 4
batches of (4, 5) -> (4, 3), MSE, SGD lr 0.1, model Linear(5, 8) - Tanh -
Linear(8, 3) from torch.manual_seed(0), inside
`with model.join(divide_by_initial_world_size=D)` for D True and False.
Writes t/ref/ddp_join.safetensors: the initial parameters (init.<name>),
every batch (x.<rank>.<i>, y.<rank>.<i>) and the final parameters rank 0
holds after the join (div1.<name>, div0.<name>; every rank holds the same).
Run from the top of the tree: bench/torch/ddp_join.py"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

BATCHES = [10, 7, 4]
OUT = "t/ref/ddp_join.safetensors"


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def batch(rank, i):
    g = torch.Generator().manual_seed(1000 * rank + i)
    return torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g)


def run(rank, world, div, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    m = DDP(model())
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with m.join(divide_by_initial_world_size=div):
        for i in range(BATCHES[rank]):
            x, y = batch(rank, i)
            opt.zero_grad()
            nn.functional.mse_loss(m(x), y).backward()
            opt.step()
    q.put((rank, {k: v.detach().tolist() for k, v in m.module.state_dict().items()}))
    dist.destroy_process_group()


def final(div, port):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=run, args=(r, 3, div, port, q)) for r in range(3)]
    for p in ps:
        p.start()
    got = {r: {k: torch.tensor(v) for k, v in sd.items()} for r, sd in (q.get() for _ in ps)}
    for p in ps:
        p.join()
    for r in (1, 2):
        for k in got[0]:
            assert torch.equal(got[0][k], got[r][k]), (div, r, k)
    return got[0]


def main():
    out = {}
    for k, v in model().state_dict().items():
        out["init." + k] = v
    for r, n in enumerate(BATCHES):
        for i in range(n):
            x, y = batch(r, i)
            out["x.%d.%d" % (r, i)] = x
            out["y.%d.%d" % (r, i)] = y
    for div, port in ((True, 29731), (False, 29732)):
        for k, v in final(div, port).items():
            out["div%d.%s" % (int(div), k)] = v
    st_io.write(OUT, out, {"generator": "bench/torch/ddp_join.py", "torch": torch.__version__})
    print("wrote", OUT, len(out), "tensors")


if __name__ == "__main__":
    main()
