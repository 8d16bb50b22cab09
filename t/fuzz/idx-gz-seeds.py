#!/usr/bin/env python3
"""Writes the idx-gz fuzz target's seed corpus (t/fuzz/idx-gz.c) into the
folder given as argv[1]: valid gzip IDX files (one member, two members,
each dtype), gzip files with a defect (bad CRC, cut trailer, trailing
garbage), and mode-byte inputs the target compresses itself."""
import gzip
import os
import struct
import sys
import zlib


def idx(code, dims, payload):
    return struct.pack(">BBBB", 0, 0, code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload


def gz(data, level=9):
    return gzip.compress(data, compresslevel=level, mtime=0)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    ubyte3 = idx(0x08, [2, 2, 3], bytes(range(12)))
    byte1 = idx(0x09, [4], b"\x80\x7f\x00\xff")
    short2 = idx(0x0B, [2, 2], struct.pack(">4h", -1, 2, -3, 4))
    int2 = idx(0x0C, [2, 2], struct.pack(">4i", 1, -2, 3, -4))
    float1 = idx(0x0D, [2], struct.pack(">2f", 1.5, -2.25))
    double1 = idx(0x0E, [2], struct.pack(">2d", 0.5, 3.0))
    zeros = idx(0x08, [64, 64], bytes(64 * 64))
    seeds = {
        "ubyte-3d.gz": gz(ubyte3),
        "byte-1d.gz": gz(byte1),
        "short-2d.gz": gz(short2),
        "int32-2d.gz": gz(int2),
        "float-1d.gz": gz(float1),
        "double-1d.gz": gz(double1),
        "zeros-64x64.gz": gz(zeros),
        "two-members.gz": gz(ubyte3[:7], 1) + gz(ubyte3[7:], 6),
        "bad-crc.gz": gz(ubyte3)[:-8] + struct.pack("<II", zlib.crc32(ubyte3) ^ 1, len(ubyte3)),
        "cut-trailer.gz": gz(ubyte3)[:-3],
        "trailing-garbage.gz": gz(ubyte3) + b"junk",
        "truncated-data.gz": gz(ubyte3[:-2]),
        "mode-level1": bytes([0]) + ubyte3,
        "mode-split": bytes([0x58]) + float1,
        "mode-zeros": bytes([5]) + zeros,
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
