#!/usr/bin/python3
"""Expected training trajectories for t/train/parity: for each case, the
initial weights, the data, the 50 per-step losses and the final
parameters, as t/ref/parity_<case>.safetensors.

    bench/torch/parity.py [--seed N] [--out DIR]

Cases (20-32-16-4 MLPs, 64 rows, step s uses rows 16*(s%4) .. +16):
  sgd       ReLU MLP, cross entropy, SGD lr 0.05 momentum 0.9 nesterov wd 1e-3
  adamw     ReLU MLP, cross entropy, AdamW lr 5e-3 (betas, eps, wd defaults)
  adam_ams  ReLU MLP, cross entropy, Adam lr 5e-3 wd 1e-3 amsgrad
  gelu_ln   Linear-LayerNorm-GELU-Dropout(0.2, eval)-Linear-GELU(tanh)-Linear,
            MSE, SGD lr 0.05 momentum 0.5 dampening 0.1
The gelu_ln file also records the order in which autograd produces the
parameter gradients (metadata "hook_order")."""
import argparse
import os

import torch
import torch.nn as nn

import st_io

STEPS, ROWS, BATCH = 50, 64, 16


def mlp():
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))


def gelu_ln():
    return nn.Sequential(nn.Linear(20, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(0.2),
                         nn.Linear(32, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 4))


CASES = {
    "sgd": (mlp, "ce", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    "adamw": (mlp, "ce", lambda p: torch.optim.AdamW(p, lr=5e-3)),
    "adam_ams": (mlp, "ce", lambda p: torch.optim.Adam(p, lr=5e-3, weight_decay=1e-3, amsgrad=True)),
    "gelu_ln": (gelu_ln, "mse", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.1)),
}


def hook_order(model, x):
    order = []
    hs = [p.register_hook(lambda g, n=n: order.append(n)) for n, p in model.named_parameters()]
    model(x).sum().backward()
    for h in hs:
        h.remove()
    model.zero_grad()
    return order


def run(name, seed, out):
    make, loss_kind, make_opt = CASES[name]
    torch.manual_seed(seed)
    model = make()
    model.eval()  # only Dropout cares: the trajectory must be deterministic
    x = torch.randn(ROWS, 20)
    if loss_kind == "ce":
        y = torch.randint(0, 4, (ROWS,))
        crit = nn.CrossEntropyLoss()
    else:
        y = torch.randn(ROWS, 4)
        crit = nn.MSELoss()
    tensors = {"init." + n: p.detach().clone() for n, p in model.named_parameters()}
    meta = {"case": name, "seed": seed, "steps": STEPS, "batch": BATCH}
    if name == "gelu_ln":
        meta["hook_order"] = ",".join(hook_order(model, x[:BATCH]))
    opt = make_opt(model.parameters())
    losses = []
    for s in range(STEPS):
        rows = slice(BATCH * (s % (ROWS // BATCH)), BATCH * (s % (ROWS // BATCH) + 1))
        opt.zero_grad()
        loss = crit(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    tensors.update({"final." + n: p.detach().clone() for n, p in model.named_parameters()})
    tensors["x"] = x
    tensors["y"] = y
    tensors["losses"] = torch.tensor(losses, dtype=torch.float32)
    path = os.path.join(out, "parity_%s.safetensors" % name)
    st_io.write(path, tensors, meta)
    print("%-9s loss %.6f -> %.6f  %s" % (name, losses[0], losses[-1], path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "t", "ref"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name in CASES:
        run(name, a.seed, a.out)


if __name__ == "__main__":
    main()
