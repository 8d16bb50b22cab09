#!/usr/bin/python3
"""Reference for t/zero/torch: ZeRO-1 as torch 1.13 builds it,
ZeroRedundancyOptimizer(AdamW) under DDP, gloo, 2 processes. Model
Linear(5, 8) - Tanh - Linear(8, 3) from torch.manual_seed(0) (75
parameter elements: uneven over 2 ranks), MSE, AdamW lr 1e-2, betas (0.9,
0.999), eps 1e-8, two groups: weight decay 0.1 on the matrices, 0 on the
biases. Rank r trains on batches (x.<r>.<i>, y.<r>.<i>) of (4, 5) -> (4,
3) for STEPS steps. Writes t/ref/zero1.safetensors: the initial
parameters (init.<name>), every batch and the parameters every rank holds
at the end (final.<name>; checked equal across ranks here), and the
consolidated optimizer state rank 0 gathers (state.<name>.exp_avg,
state.<name>.exp_avg_sq). Run from the top of the tree: bench/torch/zero1.py"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

WORLD = 2
STEPS = 10
OUT = "t/ref/zero1.safetensors"


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def batch(rank, i):
    g = torch.Generator().manual_seed(1000 * rank + i)
    return torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g)


def run(rank, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    m = DDP(model())
    decay = [p for p in m.parameters() if p.dim() >= 2]
    other = [p for p in m.parameters() if p.dim() < 2]
    opt = ZeroRedundancyOptimizer(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        optimizer_class=torch.optim.AdamW,
        lr=1e-2,
    )
    for i in range(STEPS):
        x, y = batch(rank, i)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    opt.consolidate_state_dict(to=0)
    state = {}
    if rank == 0:
        sd = opt.state_dict()
        names = [n for n, _ in m.module.named_parameters()]
        # the consolidated state is indexed in parameter-group order
        order = [n for n, p in m.module.named_parameters() if p.dim() >= 2] + [
            n for n, p in m.module.named_parameters() if p.dim() < 2
        ]
        assert sorted(order) == sorted(names)
        for idx, n in enumerate(order):
            for k in ("exp_avg", "exp_avg_sq"):
                state["state.%s.%s" % (n, k)] = sd["state"][idx][k].tolist()
    q.put((rank, {k: v.detach().tolist() for k, v in m.module.state_dict().items()}, state))
    dist.destroy_process_group()


def main():
    out = {}
    for k, v in model().state_dict().items():
        out["init." + k] = v
    for r in range(WORLD):
        for i in range(STEPS):
            x, y = batch(r, i)
            out["x.%d.%d" % (r, i)] = x
            out["y.%d.%d" % (r, i)] = y
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=run, args=(r, 29741, q)) for r in range(WORLD)]
    for p in ps:
        p.start()
    got = {}
    for _ in ps:
        r, sd, st = q.get()
        got[r] = ({k: torch.tensor(v) for k, v in sd.items()}, st)
    for p in ps:
        p.join()
    for k in got[0][0]:
        assert torch.equal(got[0][0][k], got[1][0][k]), k
        out["final." + k] = got[0][0][k]
    for k, v in got[0][1].items():
        out[k] = torch.tensor(v)
    st_io.write(OUT, out, {"generator": "bench/torch/zero1.py", "torch": torch.__version__})
    print("wrote", OUT, len(out), "tensors")


if __name__ == "__main__":
    main()
