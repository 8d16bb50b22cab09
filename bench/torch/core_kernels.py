#!/usr/bin/python3
"""Reference values for the core CPU kernels from PyTorch 1.13 (CPU, f32).

Writes t/ref/core_kernels.txt: sections "name count" followed by count
values (%.9g: f32 values round-trip exactly). Inputs are written too, so
t/tensor/torch.c reads them instead of regenerating them.

    /usr/bin/python3 bench/torch/core_kernels.py > t/ref/core_kernels.txt
"""
import math
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
out = sys.stdout


def emit(name, t):
    vals = t.detach().reshape(-1).tolist()
    out.write("%s %d\n" % (name, len(vals)))
    out.write(" ".join("%.9g" % v for v in vals) + "\n")


def grad_of(fn, x, dy):
    x = x.clone().requires_grad_(True)
    y = fn(x)
    y.backward(dy)
    return y, x.grad


# activations on a grid over [-6, 6]
n = 49
x = torch.tensor([-6 + 12 * i / (n - 1) for i in range(n)], dtype=torch.float32)
dy = torch.tensor([1 + 0.5 * math.sin(i) for i in range(n)], dtype=torch.float32)
emit("act.x", x)
emit("act.dy", dy)
acts = [("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
        ("tanh", torch.tanh), ("sigmoid", torch.sigmoid)]
for name, fn in acts:
    y, dx = grad_of(fn, x, dy)
    emit("act.%s.y" % name, y)
    emit("act.%s.dx" % name, dx)

# layernorm (4, 10) with affine, eps 1e-5; one row far from 0
x = torch.randn(4, 10)
x[2] += 50
w = 1 + 0.1 * torch.randn(10)
b = 0.1 * torch.randn(10)
dy = torch.randn(4, 10)
xr, wr, br = (t.clone().requires_grad_(True) for t in (x, w, b))
y = F.layer_norm(xr, (10,), wr, br, 1e-5)
y.backward(dy)
for k, t in (("x", x), ("w", w), ("b", b), ("dy", dy), ("y", y), ("dx", xr.grad), ("dw", wr.grad), ("db", br.grad)):
    emit("ln." + k, t)

# cross entropy (5, 7), one row of large logits; nll on log_softmax
logits = 3 * torch.randn(5, 7)
logits[3] += 1000
labels = torch.tensor([0, 6, 3, 2, 5])
lr_ = logits.clone().requires_grad_(True)
loss = F.cross_entropy(lr_, labels)
loss.backward()
emit("ce.logits", logits)
emit("ce.labels", labels.float())
emit("ce.loss", loss)
emit("ce.grad", lr_.grad)
lp = F.log_softmax(logits, dim=1)
lpr = lp.clone().requires_grad_(True)
loss = F.nll_loss(lpr, labels)
loss.backward()
emit("nll.logp", lp)
emit("nll.loss", loss)
emit("nll.grad", lpr.grad)

# mse, sum and mean
yv = torch.randn(13)
tv = torch.randn(13)
emit("mse.y", yv)
emit("mse.t", tv)
for red in ("sum", "mean"):
    yr = yv.clone().requires_grad_(True)
    loss = F.mse_loss(yr, tv, reduction=red)
    loss.backward()
    emit("mse.%s.loss" % red, loss)
    emit("mse.%s.grad" % red, yr.grad)

# optimizers: 16 parameters, 5 steps of given gradients (foreach=False:
# the _single_tensor_* code paths)
p0 = torch.randn(16)
grads = torch.randn(5, 16)
emit("opt.p0", p0)
emit("opt.grads", grads)
configs = [
    ("sgd_nesterov", lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=False)),
    ("sgd_dampening", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, dampening=0.25, foreach=False)),
    ("adam_l2", lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01, foreach=False)),
    ("adamw_amsgrad", lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05, amsgrad=True, foreach=False)),
]
for name, make in configs:
    p = torch.nn.Parameter(p0.clone())
    opt = make([p])
    for s in range(5):
        p.grad = grads[s].clone()
        opt.step()
    emit("opt.%s" % name, p)
