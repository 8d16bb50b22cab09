#!/usr/bin/python3
"""Checkpoint interop between PyTorch and Phalanx (t/data/ckpt_interop).

    ckpt_interop.py write [DIR]   writes DIR/torch_ckpt.safetensors: the
        state_dict of DataParallel(Sequential(Linear(10, 8), Tanh(),
        Linear(8, 3))) -- keys "module.0.weight" ... -- (by hand, and as
        DIR/torch_ckpt_pkg.safetensors through the safetensors package
        when it is importable) and
        DIR/torch_ckpt_io.safetensors: an input x (5, 10) and torch's
        output y for it.
    ckpt_interop.py read PATH IO  loads a Phalanx checkpoint of that model
        (strictly: every key present, no extra key apart from "optim.*")
        into torch, prints the reader used, the metadata, and the model's
        output for IO's x, one number per line.
    ckpt_interop.py read-strict PATH IO  the same without dropping
        "optim.*" keys first: what a model-only export must pass.

    write also stores the plain model's state_dict in float16, bfloat16 and
    float64 (DIR/torch_ckpt_{f16,bf16,f64}.safetensors) and, in the IO file,
    "y_f16", "y_bf16", "y_f64": the float32 model's output for x after
    load_state_dict of that file (which converts the dtypes)."""
import os
import sys

import torch
import torch.nn as nn

import st_io


def model():
    return nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3))


def write(out):
    torch.manual_seed(7)
    m = nn.DataParallel(model())
    x = torch.randn(5, 10)
    with torch.no_grad():
        y = m(x)
    st_io.write(os.path.join(out, "torch_ckpt.safetensors"), dict(m.state_dict()), {"written_by": "torch " + torch.__version__})
    io = {"x": x, "y": y}
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16), ("f64", torch.float64)):
        sd = {k: v.to(dt) for k, v in m.module.state_dict().items()}
        st_io.write(os.path.join(out, "torch_ckpt_%s.safetensors" % name), sd, {"dtype": str(dt)})
        conv = model()
        conv.load_state_dict(sd, strict=True)
        with torch.no_grad():
            io["y_" + name] = conv(x)
    st_io.write(os.path.join(out, "torch_ckpt_io.safetensors"), io)
    print("wrote", ", ".join(m.state_dict()))
    try:  # the same state_dict through the safetensors package's own writer
        from safetensors.torch import save_file
    except ImportError:
        print("safetensors not importable: torch_ckpt_pkg.safetensors not written")
        return
    save_file(dict(m.state_dict()), os.path.join(out, "torch_ckpt_pkg.safetensors"), {"written_by": "safetensors"})
    print("wrote torch_ckpt_pkg.safetensors with the safetensors package")


def read(path, io, keep_optim=False):
    tensors, meta, how = st_io.read_any(path)
    m = model()
    state = {k: v for k, v in tensors.items() if keep_optim or not k.startswith("optim.")}
    m.load_state_dict(state, strict=True)
    x = st_io.read(io)[0]["x"]
    with torch.no_grad():
        y = m(x)
    print("reader:", how)
    for k in sorted(meta):
        print("meta:", k, meta[k])
    for v in y.flatten().tolist():
        print("%.9g" % v)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "write":
        write(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "t", "ref"))
    elif len(sys.argv) == 4 and sys.argv[1] in ("read", "read-strict"):
        read(sys.argv[2], sys.argv[3], sys.argv[1] == "read-strict")
    else:
        sys.exit(__doc__)
