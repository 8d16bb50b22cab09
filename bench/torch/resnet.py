#!/usr/bin/python3
"""The examples/resnet model in PyTorch 1.13 (CPU): parity data and the
benchmark's other side.

    bench/torch/resnet.py parity [--out DIR]   (default t/ref)
        resnet_parity.safetensors: the model's initial state_dict
        ("p.<name>", parameters and buffers), 10 batches ("x.<s>" (8, 1, 28,
        28) f32, "y.<s>" i64), and torch's per-step training loss of 10
        SGD-momentum steps (lr 0.05, momentum 0.9) in float32 ("loss") and
        in float64 from the same start ("loss64"). t/autograd/resnet_parity
        loads the state_dict into examples/resnet's model and compares.
    bench/torch/resnet.py step [--batch B] [--threads T] [--steps N]
        the training step (forward, cross entropy, backward, SGD momentum)
        at batch B: prints "resnet_step <ms per step> <peak RSS MiB>".
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402


def conv_bn(cin, cout, k, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.proj = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.proj(x) if self.proj is not None else x))


class ResNet(nn.Module):
    """examples/resnet-model.h, child for child."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        h = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(self.flatten(self.pool(h)))


def train_losses(model, batches, dtype):
    model = model.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        loss = F.cross_entropy(model(x.to(dtype)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def parity(out):
    torch.manual_seed(0)
    model = ResNet()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 28, 28, generator=g), torch.randint(0, 10, (8,), generator=g)) for _ in range(10)]
    l32 = train_losses(model, batches, torch.float32)
    m64 = ResNet()
    m64.load_state_dict(state)
    l64 = train_losses(m64, batches, torch.float64)
    res = {"p." + k: v for k, v in state.items()}
    for s, (x, y) in enumerate(batches):
        res["x.%d" % s] = x
        res["y.%d" % s] = y
    res["loss"] = torch.tensor(l32, dtype=torch.float32)
    res["loss64"] = torch.tensor(l64, dtype=torch.float64)
    path = os.path.join(out, "resnet_parity.safetensors")
    st_io.write(path, res)
    print("wrote %s: loss %.6f -> %.6f" % (path, l32[0], l32[-1]))


def step(batch, threads, steps):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    times.sort()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("resnet_step %.3f %.1f" % (1e3 * times[len(times) // 2], rss))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["parity", "step"])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "t", "ref"))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    if a.what == "parity":
        parity(a.out)
    else:
        step(a.batch, a.threads, a.steps)


if __name__ == "__main__":
    main()
