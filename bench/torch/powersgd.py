#!/usr/bin/python3
"""Reference for t/ddp/comm_hook_powersgd: DDP communication hooks in torch
1.13 on gloo, 2 processes. Model Linear(6, 16) - Tanh - Linear(16, 8) -
Tanh - Linear(8, 3) from torch.manual_seed(0), MSE, SGD lr 0.1, STEPS
steps of (4, 6) -> (4, 3) batches per rank, with
  powerSGD_hook, PowerSGDState(matrix_approximation_rank=R,
      start_powerSGD_iter=2) (min_compression_rate 2, error feedback and
      warm start on), R = 1 and 2;
  fp16_compress_hook (torch 1.13 refuses bf16_compress_hook without
      NCCL, so bf16 has no torch reference here).
PowerSGD draws its first Q with torch.randn from a per-state seed; torch's
generator is not reproduced in C, so this script replaces the randn call
the hook makes (the only one without a generator) by the value
    q[j, c] = ((k * 7 + cols * 3 + r * 5 + 1) % 13 - 6) / 4,  k = j * r + c
for a (1, cols, r) request, exact in f32; the C test feeds the same
values through phx_powersgd_opts.init_q.
Writes t/ref/powersgd.safetensors: the initial parameters (init.<name>),
every batch (x.<rank>.<step>, y.<rank>.<step>) and the parameters after
every step (<run>.<step>.<name>, run = psgd1, psgd2, fp16; both
ranks hold the same, checked here); for fp16 also each rank's own step-0
gradients before the hook (fp16.local.<rank>.<name>, from an undistributed
copy in the same process) and the gradients the hook left
(fp16.hooked.<name>), so the test can check its 16-bit formula against
torch's fp16_compress_hook bit for bit.
Run from the top of the tree: bench/torch/powersgd.py"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

STEPS = 6
WORLD = 2
OUT = "t/ref/powersgd.safetensors"
RUNS = ("psgd1", "psgd2", "fp16")


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3))


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)


def q_init(shape):
    _, cols, r = shape
    k = torch.arange(cols * r, dtype=torch.int64)
    return (((k * 7 + cols * 3 + r * 5 + 1) % 13 - 6).float() / 4).reshape(1, cols, r)


def run(rank, name, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    orig = torch.randn
    fed = []

    def randn(*shape, **kw):
        if "generator" in kw:
            return orig(*shape, **kw)
        fed.append(shape)
        return q_init(shape)

    torch.randn = randn
    local = None
    if name == "fp16":
        # This rank's own gradients of step 0, before any hook.
        ref = model()
        x, y = batch(rank, 0)
        nn.functional.mse_loss(ref(x), y).backward()
        local = {k: p.grad.detach().tolist() for k, p in ref.named_parameters()}
    m = DDP(model())
    if name.startswith("psgd"):
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(name[4:]),
                                   start_powerSGD_iter=2)
        m.register_comm_hook(state, psgd.powerSGD_hook)
    else:
        m.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    after, hooked = [], None
    for s in range(STEPS):
        x, y = batch(rank, s)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        if s == 0:
            hooked = {k: p.grad.detach().tolist() for k, p in m.module.named_parameters()}
        opt.step()
        after.append({k: v.detach().tolist() for k, v in m.module.state_dict().items()})
    # PowerSGD drew its Qs through q_init (once per matrix: warm start).
    assert not name.startswith("psgd") or fed, "the hook did not call torch.randn"
    q.put((rank, (after, local, hooked)))
    dist.destroy_process_group()


def trajectory(name, port):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=run, args=(r, name, port, q)) for r in range(WORLD)]
    for p in ps:
        p.start()
    got = dict(q.get() for _ in ps)
    for p in ps:
        p.join()
    for s in range(STEPS):
        for k in got[0][0][s]:
            assert got[0][0][s][k] == got[1][0][s][k], (name, s, k)
    return got[0][0], [got[r][1] for r in range(WORLD)], got[0][2]


def main():
    out = {}
    for k, v in model().state_dict().items():
        out["init." + k] = v
    for r in range(WORLD):
        for s in range(STEPS):
            x, y = batch(r, s)
            out["x.%d.%d" % (r, s)] = x
            out["y.%d.%d" % (r, s)] = y
    for i, name in enumerate(RUNS):
        after, local, hooked = trajectory(name, 29741 + i)
        print(name, "done", flush=True)
        for s, sd in enumerate(after):
            for k, v in sd.items():
                out["%s.%d.%s" % (name, s, k)] = torch.tensor(v)
        if name == "fp16":
            for r in range(WORLD):
                for k, v in local[r].items():
                    out["fp16.local.%d.%s" % (r, k)] = torch.tensor(v)
            for k, v in hooked.items():
                out["fp16.hooked.%s" % k] = torch.tensor(v)
    st_io.write(OUT, out, {"generator": "bench/torch/powersgd.py", "torch": torch.__version__})


if __name__ == "__main__":
    main()
