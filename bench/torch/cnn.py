#!/usr/bin/python3
"""Reference data for the CNN tests, from PyTorch 1.13 (CPU):

    bench/torch/cnn.py [--out DIR]        (default: t/ref)
    bench/torch/cnn.py read CKPT IO       (t/modules/cnn_state: a Phalanx checkpoint in torch)

cnn_modules.safetensors  each module's forward and backward on fixed inputs
    (seeded normal x, dy and parameters), in float32 and again in float64:
    <case>.x, <case>.dy, <case>.y, <case>.dx, <case>.p.<param>,
    <case>.g.<param>, <case>.b.<buffer> (buffers after the forward, which
    for a training BatchNorm updates them), <case>.y64, <case>.dx64 (the
    same case computed in float64). BatchNorm cases with two steps also
    hold <case>.x2 and <case>.b2.<buffer> after a second forward.
    The case list, its constructors and its modes are CASES below; the C
    test (t/modules/cnn.c) builds the same modules.
cnn_state.safetensors    state_dict of the examples/cnn model written by
    torch (with its running statistics after three training batches);
cnn_state_io.safetensors an input batch `x` and torch's eval-mode output
    `y` of that model."""
import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

# name: (constructor, input shape, train mode, two steps)
CASES = {
    "conv_basic": (lambda: nn.Conv2d(3, 4, 3), (2, 3, 7, 6), True, False),
    "conv_s2p1": (lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1), (2, 3, 9, 8), True, False),
    "conv_dil2": (lambda: nn.Conv2d(4, 4, 3, padding=2, dilation=2), (2, 4, 8, 8), True, False),
    "conv_g2": (lambda: nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False), (2, 4, 6, 6), True, False),
    "conv_1x1": (lambda: nn.Conv2d(5, 3, 1), (3, 5, 4, 4), True, False),
    "conv_same4": (lambda: nn.Conv2d(3, 4, 4, padding="same"), (2, 3, 7, 7), True, False),
    "conv_rect": (lambda: nn.Conv2d(2, 3, (3, 5), stride=(2, 1), padding=(1, 2)), (2, 2, 7, 6), True, False),
    "bn2d_train": (lambda: nn.BatchNorm2d(4), (3, 4, 5, 5), True, True),
    "bn2d_eval": (lambda: nn.BatchNorm2d(4), (3, 4, 5, 5), False, False),
    "bn2d_cma": (lambda: nn.BatchNorm2d(3, momentum=None), (2, 3, 4, 4), True, True),
    "bn2d_noaffine": (lambda: nn.BatchNorm2d(3, affine=False, track_running_stats=False), (2, 3, 4, 4), True, False),
    "bn1d_2d": (lambda: nn.BatchNorm1d(5), (8, 5), True, True),
    "bn1d_3d": (lambda: nn.BatchNorm1d(5, eps=1e-3, momentum=0.3), (4, 5, 3), True, False),
    "maxpool2": (lambda: nn.MaxPool2d(2), (2, 3, 7, 7), True, False),
    "maxpool3s1p1": (lambda: nn.MaxPool2d(3, 1, 1), (2, 2, 5, 5), True, False),
    "avgpool_pad": (lambda: nn.AvgPool2d(3, 2, 1), (2, 2, 7, 6), True, False),
    "avgpool_nopad": (lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), (2, 2, 7, 6), True, False),
    "adaptive1": (lambda: nn.AdaptiveAvgPool2d(1), (2, 3, 5, 4), True, False),
    "adaptive2": (lambda: nn.AdaptiveAvgPool2d((2, 2)), (2, 3, 6, 4), True, False),
}


def cnn_model():
    """The examples/cnn model."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 5 * 5, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


def run(name, dtype, seed):
    ctor, shape, train, two = CASES[name]
    g = torch.Generator().manual_seed(seed)
    m = ctor().to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(dtype))
        if not train and hasattr(m, "running_mean"):  # eval: fixed, non-trivial statistics
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g).to(dtype))
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g).to(dtype) + 0.5)
    x = torch.randn(shape, generator=g).to(dtype)
    x2 = torch.randn(shape, generator=g).to(dtype) * 2 + 1
    out = {"x": x, "x2": x2}
    out.update({"p." + k: v.detach().clone() for k, v in m.named_parameters()})
    out.update({"b0." + k: v.clone() for k, v in m.named_buffers()})
    m.train(train)
    xr = x.clone().requires_grad_(True)
    y = m(xr)
    dy = torch.randn(y.shape, generator=g).to(dtype)
    y.backward(dy)
    out.update({"dy": dy, "y": y.detach(), "dx": xr.grad})
    out.update({"g." + k: v.grad for k, v in m.named_parameters()})
    out.update({"b." + k: v.clone() for k, v in m.named_buffers()})
    if two:
        with torch.no_grad():
            m(x2)
        out.update({"b2." + k: v.clone() for k, v in m.named_buffers()})
    return out


def module_cases():
    res = {}
    for i, name in enumerate(CASES):
        r32 = run(name, torch.float32, 100 + i)
        r64 = run(name, torch.float64, 100 + i)
        for k, v in r32.items():
            if k == "x2" and not CASES[name][3]:
                continue
            res["%s.%s" % (name, k)] = v
        res[name + ".y64"] = r64["y"]
        res[name + ".dx64"] = r64["dx"]
    return res


def state_case():
    torch.manual_seed(7)
    m = cnn_model()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(3):
        x = torch.randn(16, 1, 28, 28)
        loss = m(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    m.eval()
    x = torch.randn(4, 1, 28, 28)
    with torch.no_grad():
        y = m(x)
    return dict(m.state_dict()), {"x": x, "y": y}


def read(path, io):
    """Loads a Phalanx checkpoint of the examples/cnn model with strict
    keys and prints its eval output on io's x, then num_batches_tracked."""
    tensors = st_io.read(path)[0]
    m = cnn_model()
    m.load_state_dict(tensors, strict=True)
    m.eval()
    with torch.no_grad():
        y = m(st_io.read(io)[0]["x"])
    for v in y.flatten().tolist():
        print("%.9g" % v)
    print("tracked %d" % int(m[1].num_batches_tracked))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "read":
        return read(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "t", "ref"))
    a = ap.parse_args()
    meta = {"torch": torch.__version__}
    st_io.write(os.path.join(a.out, "cnn_modules.safetensors"), module_cases(), meta)
    sd, io = state_case()
    st_io.write(os.path.join(a.out, "cnn_state.safetensors"), sd, meta)
    st_io.write(os.path.join(a.out, "cnn_state_io.safetensors"), io, meta)


if __name__ == "__main__":
    main()
