#!/usr/bin/python3
"""Writes the seed corpus of t/fuzz/store-frame.c (input format in its
header comment) into t/fuzz/corpus/store-frame/."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz", "corpus", "store-frame")
MAGIC = 0x53584850


def frame(op, body):
    return struct.pack("<II", len(body), op) + body


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<I", len(b)) + b


def hello(version=2):
    body = struct.pack("<II", MAGIC, version)
    if version == 2:
        body += bytes(32)
    return frame(1, body)


SET = lambda k, v: frame(2, s(k) + s(v))
GET = lambda k, ms: frame(3, s(k) + struct.pack("<q", ms))
ADD = lambda k, d: frame(4, s(k) + struct.pack("<q", d))
WAIT = lambda keys, ms: frame(5, struct.pack("<qI", ms, len(keys)) + b"".join(s(k) for k in keys))
CAS = lambda k, e, d: frame(6, s(k) + s(e) + s(d))
DELETE = lambda k: frame(7, s(k))
NUMKEYS = frame(8, b"")


def data(conn, b):
    return struct.pack("<BH", conn, len(b)) + b


def auth(conn):
    return struct.pack("<BH", 0x40 | conn, 0)


def read(conn, n=65535):
    return struct.pack("<BH", 0x80 | conn, n)


def wait_ms(ms):
    return struct.pack("<BH", 0xFF, ms)


seeds = {
    "empty": b"",
    "every-op": bytes([0]) + data(0, hello() + SET("a", "1")) + data(0, GET("a", 100)) + data(0, ADD("ctr", 5))
    + data(0, ADD("a", 1)) + data(0, CAS("a", "1", "2")) + data(0, CAS("a", "x", "3")) + data(0, DELETE("a"))
    + data(0, DELETE("a")) + data(0, NUMKEYS),
    "wait-woken": bytes([0]) + data(0, hello()) + data(0, WAIT(["x", "y"], 5000)) + data(1, hello())
    + data(1, SET("x", "1")) + data(1, SET("y", "2")) + data(2, hello()) + data(2, GET("y", -1)),
    "wait-timeout": bytes([0]) + data(0, hello()) + data(0, WAIT(["x"], 10)) + wait_ms(20)
    + data(1, hello()) + data(1, GET("never", 0)),
    "wait-rewind": bytes([0]) + data(0, hello()) + data(0, WAIT(["a", "b"], 60000)) + data(1, hello())
    + data(1, SET("a", "1")) + data(1, DELETE("a")) + data(1, SET("b", "1")) + data(1, SET("a", "2")),
    "token-auth": bytes([1]) + data(0, hello()) + auth(0) + data(0, SET("k", "v")) + data(0, GET("k", 0)),
    "token-denied": bytes([1]) + data(0, hello()) + data(0, frame(9, bytes(32))),
    "token-skipped": bytes([1]) + data(0, hello()) + data(0, SET("k", "v")),
    "no-hello": bytes([0]) + data(0, SET("k", "v")),
    "hello-v1": bytes([0]) + data(0, hello(1)),
    "hello-v99": bytes([0]) + data(0, hello(99)),
    "bad-magic": bytes([0]) + data(0, frame(1, struct.pack("<II", 0x12345678, 2) + bytes(32))),
    "huge-length": bytes([0]) + data(0, hello()) + data(0, struct.pack("<II", 0xFFFFFFFF, 2)),
    "big-announced": bytes([0]) + data(0, hello()) + data(0, struct.pack("<II", 64 << 20, 2) + b"0123456789"),
    "unknown-op": bytes([0]) + data(0, hello()) + data(0, frame(99, b"abcd")),
    "bad-fields": bytes([0]) + data(0, hello()) + data(0, frame(2, struct.pack("<I", 100) + b"xxxx" + s(""))),
    "second-hello": bytes([0]) + data(0, hello() + hello()),
    "split-frames": bytes([0]) + b"".join(data(0, hello() + SET("key", "value")[i:i + 3])
                                          for i in range(0, 1, 1))
    + b"".join(data(1, (hello() + SET("key", "value") + GET("key", 10))[i:i + 5]) for i in range(0, 90, 5)),
    "stale-budget": bytes([6]) + data(0, hello()) + read(0) + data(0, SET("v", "a" * 2000)) + read(0)
    + data(1, hello()) + read(1) + data(1, GET("v", 0)) + data(0, SET("v", "b" * 2000)) + read(0)
    + data(2, hello()) + read(2) + data(2, GET("v", 0)) + data(0, SET("v", "c" * 2000)) + read(0) + read(2, 100),
    "not-reading": bytes([4]) + data(0, hello()) + data(0, SET("a", "1")) + read(0, 20) + data(0, GET("a", 0)),
}

os.makedirs(OUT, exist_ok=True)
for name, blob in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(blob)
print(f"{len(seeds)} seeds in {OUT}")
