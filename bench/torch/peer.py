#!/usr/bin/python3
"""The peer's side of make bench's header (bench/run.sh, doc/maint/bench.md
"Fair peers"): which PyTorch, the BLAS it loaded and the core that BLAS
runs (openblas_get_corename through ctypes, from the library torch has
mapped), oneDNN's version, ATen's CPU capability and thread count.
Prints one "key=value" line each."""
import ctypes
import re

import torch


def blas_libs():
    """The BLAS/LAPACK shared objects this process has mapped (torch's)."""
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.startswith("/") and re.search(r"blas|mkl_rt|mkl_core", path) and path not in libs:
                libs.append(path)
    return libs


def main():
    torch.zeros(2, 2) @ torch.zeros(2, 2)  # a GEMM: the BLAS is loaded and initialised
    core, lib = "-", "-"
    for path in blas_libs():
        lib = path
        try:
            fn = ctypes.CDLL(path).openblas_get_corename
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_char_p
        core = fn().decode() or "unknown"
        break
    if lib != "-" and core == "-":
        core = "mkl" if "mkl" in lib else "-"
    config = torch.__config__.show()
    dnnl = re.search(r"MKL-DNN v([0-9.]+)", config)
    cap = re.search(r"CPU capability usage: (\S+)", config)
    print("torch_version=%s" % torch.__version__)
    print("torch_blas_lib=%s" % lib)
    print("torch_blas_core=%s" % core)
    print("torch_onednn=%s" % (dnnl.group(1) if dnnl else "-"))
    print("torch_cpu_capability=%s" % (cap.group(1) if cap else "-"))
    print("torch_threads=%d" % torch.get_num_threads())


if __name__ == "__main__":
    main()
