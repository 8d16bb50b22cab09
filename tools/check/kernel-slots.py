#!/usr/bin/env python3
"""Kernel-slot coverage: every slot of include/phalanx/plugin/kernels_v1.def
has a CPU kernel (a definition of px_cpu_<slot> in kernels/cpu/*.c), a
CUDA kernel (px_cuda_<slot> in plugins/device/cuda/kernels/*.c or *.cu;
the tables fill every slot by macro, so a missing one shows only when
the plugin is linked or loaded) and a GPU test in t/cuda/kernels.c. That file maps each slot to its test
with a line "#define COVER_<slot> test_<x>" and builds a table from the
.def, so a slot without a line does not compile; this check reads the same
lines without a compiler or a GPU and also requires the test named to call
the slot on both tables (KG-><slot>( and KC-><slot>(), no COVER_ line for
a slot the .def does not have, and a reason beside every
"COVER_<slot> NULL" (a slot exempted for now). TAP on stdout.
Run alone: tools/check/kernel-slots.py"""
import glob
import os
import re
import sys

SRC = os.environ.get("top_srcdir") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEF = "include/phalanx/plugin/kernels_v1.def"
TEST = "t/cuda/kernels.c"
KERNELS = (("cpu", ("kernels/cpu/*.c",)),
           ("cuda", ("plugins/device/cuda/kernels/*.c", "plugins/device/cuda/kernels/*.cu")))


def read(path):
    with open(os.path.join(SRC, path), encoding="utf-8") as f:
        return f.read()


def defined(prefix, patterns):
    """The names px_<prefix>_<x> that a line of the files starts to define
    (a return type, then the name and its parenthesis)."""
    names = set()
    for pat in patterns:
        for path in sorted(glob.glob(os.path.join(SRC, pat))):
            with open(path, encoding="utf-8") as f:
                names.update(re.findall(r'^(?:extern "C"\s+)?\w[\w \t*]*?\bpx_%s_(\w+)\(' % prefix, f.read(), re.M))
    return names


def main():
    slots = re.findall(r"^PHX_KERNEL_SLOT\((\w+),", read(DEF), re.M)
    kernels = {dev: defined(dev, pats) for dev, pats in KERNELS}
    src = read(TEST)
    cover = {m.group(1): (m.group(2), m.group(3)) for m in
             re.finditer(r"^#define COVER_(\w+)\s+(\w+)[ \t]*(/\*.*)?$", src, re.M)}
    bodies = {m.group(1): m.group(2) for m in
              re.finditer(r"^static void (\w+)\(void\)\n\{\n(.*?)^\}", src, re.M | re.S)}
    points = []
    for s in slots:
        missing = [f"px_{dev}_{s}" for dev, _ in KERNELS if s not in kernels[dev]]
        points.append((not missing, f"{s}: px_cpu_{s} and px_cuda_{s} are defined" if not missing else
                       f"{s}: no definition of {' or '.join(missing)}"))
    for s in slots:
        test, why = cover.get(s, (None, None))
        if test is None:
            points.append((False, f"{s}: no '#define COVER_{s} <test>' in {TEST}"))
        elif test == "NULL":
            points.append((bool(why), f"{s}: exempt ({why})" if why else f"{s}: COVER_{s} NULL without a reason"))
        elif test not in bodies:
            points.append((False, f"{s}: COVER_{s} names {test}, not a 'static void {test}(void)' of {TEST}"))
        else:
            calls = [t for t in ("KG", "KC") if f"{t}->{s}(" not in bodies[test]]
            points.append((not calls, f"{s}: {test} calls it on both tables" if not calls else
                           f"{s}: {test} has no {' or '.join(c + '->' + s + '(' for c in calls)}"))
    for s in sorted(set(cover) - set(slots)):
        points.append((False, f"COVER_{s}: {DEF} has no slot {s}"))
    if not slots:
        points.append((False, f"no PHX_KERNEL_SLOT lines in {DEF}"))
    print(f"1..{len(points)}")
    for i, (good, what) in enumerate(points, 1):
        print(f"{'ok' if good else 'not ok'} {i} - {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
