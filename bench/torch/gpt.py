#!/usr/bin/python3
"""Reference data for the transformer tests, from PyTorch 1.13 (CPU, f32):

    bench/torch/gpt.py [--out DIR]        (default: t/ref)

gpt_modules.safetensors  each module's forward and backward on fixed inputs:
    <case>.x, <case>.dy, <case>.y, <case>.dx, <case>.p.<param>, <case>.g.<param>
    cases: emb (Embedding(11, 8) on (2, 5) indices), softmax and logsoftmax
    (on (2, 3, 7)), linear3d (Linear(8, 6) on (2, 5, 8)), layernorm3d
    (LayerNorm(8) on (2, 5, 8)), residual (Residual(Linear(8, 8))), attn
    (CausalSelfAttention(16, 4 heads, bias) on (2, 6, 16)), block (the pre-LN
    block, 16 wide, 2 heads, on (2, 6, 16)).
gpt_train.safetensors    a tiny GPT (vocab 17, block 16, 2 layers, 2 heads,
    d_model 32, GPT-2 init std 0.02) trained 20 steps on batches of 4 x 16:
    AdamW (lr 3e-3, betas 0.9/0.95, wd 0.1 on Linear weights only), linear
    warmup 5 steps + cosine to 3e-4 at step 20 (LambdaLR), clip_grad_norm_
    0.5 every step. init.<param>, x.<step>, y.<step> (i64), loss, norm, lr
    (one value per step), final.<param>.
gpt_sched.safetensors    LambdaLR (warmup 3 + cosine to 0.1 over 12),
    CosineAnnealingLR (T_max 10, eta_min 0.01), StepLR (3, 0.5) learning
    rates for 14 steps from lr 1; clip_grad_norm_ of three gradients
    (grad.<i> before, clipped.<i> after, norm) at max_norm 1."""
import argparse
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, C, H, p=0.0, bias=True):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = nn.Linear(C, C, bias=bias)
        self.attn_dropout = nn.Dropout(p)
        self.resid_dropout = nn.Dropout(p)
        self.H = H

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.H, hs).transpose(1, 2)
        k = k.view(B, T, self.H, hs).transpose(1, 2)
        v = v.view(B, T, self.H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


def block(C, H, p=0.0, bias=True):
    mlp = nn.Sequential(nn.Linear(C, 4 * C, bias=bias), nn.GELU(), nn.Linear(4 * C, C, bias=bias))
    return nn.Sequential(Residual(nn.Sequential(nn.LayerNorm(C), CausalSelfAttention(C, H, p, bias))),
                         Residual(nn.Sequential(nn.LayerNorm(C), mlp)))


class GPT(nn.Module):
    """phx_gpt_new's model: same children, names and computation."""

    def __init__(self, vocab, block_size, n_layer, n_head, C, p=0.0, bias=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(block_size, C)
        self.drop = nn.Dropout(p)
        self.h = nn.Sequential(*[block(C, n_head, p, bias) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        return self.lm_head(self.ln_f(self.h(x)))


def gpt2_init(model, std, n_layer):
    for name, p in model.named_parameters():
        owner = model.get_submodule(name.rsplit(".", 1)[0])
        if not isinstance(owner, (nn.Linear, nn.Embedding)):
            continue
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif name.endswith("c_proj.weight") or name.endswith(".fn.1.2.weight"):
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * n_layer))
        else:
            nn.init.normal_(p, 0.0, std)


def module_cases():
    torch.manual_seed(1)
    cases = {
        "emb": (nn.Embedding(11, 8), torch.tensor([[1, 4, 4, 10, 0], [3, 1, 7, 4, 9]])),
        "softmax": (nn.Softmax(dim=-1), torch.randn(2, 3, 7) * 3),
        "logsoftmax": (nn.LogSoftmax(dim=-1), torch.randn(2, 3, 7) * 3),
        "linear3d": (nn.Linear(8, 6), torch.randn(2, 5, 8)),
        "layernorm3d": (nn.LayerNorm(8), torch.randn(2, 5, 8) + 1),
        "residual": (Residual(nn.Linear(8, 8)), torch.randn(2, 5, 8)),
        "attn": (CausalSelfAttention(16, 4), torch.randn(2, 6, 16)),
        "block": (block(16, 2), torch.randn(2, 6, 16)),
    }
    out = {}
    for name, (m, x) in cases.items():
        with torch.no_grad():
            for n, p in m.named_parameters():  # LayerNorm's 1/0 would hide mistakes
                if "LayerNorm" in type(m.get_submodule(n.rsplit(".", 1)[0]) if "." in n else m).__name__:
                    p.add_(torch.randn_like(p) * 0.1)
        xf = x.clone().requires_grad_(x.is_floating_point())
        y = m(xf)
        dy = torch.randn_like(y)
        y.backward(dy)
        out[name + ".x"] = x
        out[name + ".dy"] = dy
        out[name + ".y"] = y.detach()
        if xf.grad is not None:
            out[name + ".dx"] = xf.grad
        for n, p in m.named_parameters():
            out[name + ".p." + n] = p.detach().clone()
            out[name + ".g." + n] = p.grad.clone()
    return out


def train_case():
    torch.manual_seed(2)
    V, BS, L, H, C, B, T, STEPS = 17, 16, 2, 2, 32, 4, 16, 20
    model = GPT(V, BS, L, H, C)
    gpt2_init(model, 0.02, L)
    out = {"init." + n: p.detach().clone() for n, p in model.named_parameters()}
    decay = [p for n, p in model.named_parameters()
             if p.dim() >= 2 and not isinstance(model.get_submodule(n.rsplit(".", 1)[0]), nn.Embedding)]
    ids = {id(p) for p in decay}
    rest = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    warm, total, min_lr = 5, 20, 3e-4

    def lam(s):
        if s < warm:
            return (s + 1) / warm
        p = min(1.0, (s - warm) / (total - warm))
        return (min_lr + (3e-3 - min_lr) * 0.5 * (1 + math.cos(math.pi * p))) / 3e-3
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    losses, norms, lrs = [], [], []
    for s in range(STEPS):
        x = torch.randint(0, V, (B, T))
        y = (x * 3 + torch.roll(x, 1, dims=1)) % V   # learnable from the context
        out["x.%d" % s], out["y.%d" % s] = x, y
        opt.zero_grad()
        loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss.item())
    out["loss"] = torch.tensor(losses, dtype=torch.float32)
    out["norm"] = torch.tensor(norms, dtype=torch.float32)
    out["lr"] = torch.tensor(lrs, dtype=torch.float32)
    out.update({"final." + n: p.detach().clone() for n, p in model.named_parameters()})
    print("gpt_train: losses %.4f .. %.4f, norms %.3f .. %.3f" % (losses[0], losses[-1], norms[0], norms[-1]))
    return out


def sched_case():
    def lrs(make):
        p = nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=1.0)
        s = make(opt)
        v = []
        for _ in range(14):
            v.append(opt.param_groups[0]["lr"])
            opt.step()
            s.step()
        return torch.tensor(v, dtype=torch.float32)

    def lam(s):
        if s < 3:
            return (s + 1) / 3
        p = min(1.0, (s - 3) / 9)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
    out = {
        "lambda": lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lam)),
        "cosine": lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.01)),
        "step": lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    }
    torch.manual_seed(3)
    ps = [nn.Parameter(torch.zeros(s)) for s in [(4, 5), (7,), (3, 3)]]
    for i, p in enumerate(ps):
        p.grad = torch.randn_like(p) * 0.7
        out["grad.%d" % i] = p.grad.clone()
    out["norm"] = torch.tensor([float(torch.nn.utils.clip_grad_norm_(ps, 1.0))], dtype=torch.float32)
    for i, p in enumerate(ps):
        out["clipped.%d" % i] = p.grad.clone()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "t", "ref"))
    a = ap.parse_args()
    st_io.write(os.path.join(a.out, "gpt_modules.safetensors"), module_cases(), {"torch": torch.__version__})
    st_io.write(os.path.join(a.out, "gpt_train.safetensors"), train_case(), {"torch": torch.__version__})
    st_io.write(os.path.join(a.out, "gpt_sched.safetensors"), sched_case(), {"torch": torch.__version__})


if __name__ == "__main__":
    main()
