#!/usr/bin/python3
"""safetensors by hand (torch 1.13 has no safetensors support): 8-byte
little-endian header length, JSON header, raw little-endian data. Used by
parity.py and ckpt_interop.py; where the `safetensors` package is
importable, files written here are re-read with it as a check."""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.float64: "F64", torch.int32: "I32", torch.int64: "I64"}
BACK = {v: k for k, v in DTYPES.items()}


def write(path, tensors, metadata=None):
    """tensors: dict name -> tensor (insertion order kept)."""
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    check_with_package(path, tensors)


def read(path):
    """Returns (dict name -> tensor, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = buf[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = BACK[e["dtype"]]
        t = torch.frombuffer(bytearray(data[b:end]), dtype=torch.uint8) if end > b else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dt).reshape(e["shape"]).clone()
    return out, meta


def read_any(path):
    """With the safetensors package when importable, else by hand."""
    try:
        from safetensors.torch import load_file
        from safetensors import safe_open
    except ImportError:
        return read(path) + ("by-hand reader",)
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    return load_file(path), meta, "safetensors package"


def check_with_package(path, tensors):
    try:
        from safetensors.torch import load_file
    except ImportError:
        return
    back = load_file(path)
    assert list(back) and set(back) == set(tensors), "safetensors package sees other keys"
    for k, v in tensors.items():
        assert torch.equal(back[k], v.detach().cpu()), "safetensors package reads other data for " + k
