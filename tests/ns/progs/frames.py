#!/usr/bin/env python3
# frames.py: records EMP frames that arrive from one MAC, and sends recorded frames again (replay of a peer's previous life).
#   frames.py capture IFNAME SRC_MAC COUNT FILE [SECONDS]   record up to COUNT EMP frames from SRC_MAC
#                                                           (at most SECONDS, default 10); prints "listening"
#                                                           once bound, then a census of the frame types
#   frames.py replay IFNAME FILE [ROUNDS [TYPES]]           send the recorded frames ROUNDS times (default 1),
#                                                           only those of TYPES (e.g. data,ack; default all)
# FILE: 2-byte big-endian length, then the frame, repeated.
import socket, struct, sys, time

ETYPE = 0x88B5
ETH_P_ALL = 3
TYPES = {1: "data", 2: "ack", 3: "hello", 4: "hello_ack", 5: "stale", 6: "probe"}


def ftype(f):
    """the frame type: bits 11..9 of the 16-bit vtf word at offset 4 of the EMP header (wire version 2)"""
    return TYPES.get((struct.unpack(">H", f[14 + 4:14 + 6])[0] >> 9) & 7, "other")


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def capture(ifname, src, count, path, seconds):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.settimeout(0.2)
    print("listening", flush=True)
    want = mac(src)
    got, census = [], {}
    end = time.monotonic() + seconds
    while len(got) < count and time.monotonic() < end:
        try:
            f, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING or len(f) < 14 + 26:
            continue
        if f[6:12] != want or struct.unpack(">H", f[12:14])[0] != ETYPE:
            continue
        got.append(f)
        t = ftype(f)
        census[t] = census.get(t, 0) + 1
    with open(path, "wb") as o:
        for f in got:
            o.write(struct.pack(">H", len(f)) + f)
    print("captured %d frames: %s" % (len(got), " ".join("%s %d" % kv for kv in sorted(census.items()))))
    return 0 if got else 1


def replay(ifname, path, rounds, types):
    data = open(path, "rb").read()
    frames, i = [], 0
    while i + 2 <= len(data):
        n = struct.unpack(">H", data[i:i + 2])[0]
        f = data[i + 2:i + 2 + n]
        if types is None or ftype(f) in types:
            frames.append(f)
        i += 2 + n
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    for _ in range(rounds):
        for f in frames:
            s.send(f)
    print("replayed %d frames" % (len(frames) * rounds))
    return 0


def main():
    a = sys.argv
    if len(a) >= 6 and a[1] == "capture":
        return capture(a[2], a[3], int(a[4]), a[5], float(a[6]) if len(a) > 6 else 10.0)
    if len(a) >= 4 and a[1] == "replay":
        return replay(a[2], a[3], int(a[4]) if len(a) > 4 else 1, a[5].split(",") if len(a) > 5 else None)
    sys.stderr.write("usage: frames.py capture IFNAME SRC_MAC COUNT FILE [SECONDS] | replay IFNAME FILE [ROUNDS [TYPES]]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
