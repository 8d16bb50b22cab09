# A stranger on a store's port that skips the client's own checks: HELLO,
# then GET and SET of rank 0's communicator count with no AUTH (the wire
# format of src/world/store-proto.h). Prints "flags N" (1: the server
# requires the job token), then "read VALUE" / "wrote" for what the server
# served, or "refused" when it answered otherwise or closed. With "ro"
# after the port it only reads (a control where it should be served).
# Usage: python3 intruder.py HOST PORT [ro]
import os
import socket
import struct
import sys

s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)
s.settimeout(5)


def send(op, body):
    s.sendall(struct.pack("<II", len(body), op) + body)


def recv():
    def exactly(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                return None
            b += c
        return b
    h = exactly(8)
    if h is None:
        return None
    n, st = struct.unpack("<II", h)
    body = exactly(n)
    return None if body is None else (st, body)


def string(b):
    return struct.pack("<I", len(b)) + b


try:
    send(1, struct.pack("<II", 0x53584850, 2) + os.urandom(32))
    r = recv()
    if r is None or r[0] != 0 or len(r[1]) < 8:
        print("refused at hello")
        sys.exit(0)
    print("flags %d" % struct.unpack("<I", r[1][4:8])[0])
    key = b"phx/comm/rank0/count"
    send(3, string(key) + struct.pack("<q", 0))
    r = recv()
    print("read %s" % r[1].decode(errors="replace") if r and r[0] == 0 else "refused")
    if sys.argv[3:] == ["ro"]:
        sys.exit(0)
    send(2, string(key) + string(b"666"))
    r = recv()
    print("wrote" if r and r[0] == 0 else "refused")
except (OSError, socket.timeout):
    print("refused")
