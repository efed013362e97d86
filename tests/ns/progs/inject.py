#!/usr/bin/env python3
# inject.py: sends hand-made EMP frames (good and malformed) from a raw socket, for the hostile-input tests.
import socket, struct, sys, zlib

ETYPE = 0x88B5

def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))

# wire format version 2 (firmware/proto.h): 26-byte common header, 14-byte DATA header
def common(dst_ep, src_ep, ftype, flags=0, version=2, dst_inc=0, src_inc=7, session=1, credits=0, msg_id=1):
    vtf = (version & 15) << 12 | (ftype & 7) << 9 | (flags & 0x1FF)
    return struct.pack(">IHHHIIHHI", 0, vtf, dst_ep, src_ep, dst_inc, src_inc, session, credits, msg_id)

def data(frame, msg_len, tag, frag, prev_back=0):
    # the payload length is not on the wire: frag bytes, the last frame the rest
    return struct.pack(">I", frame)[1:] + struct.pack(">IIHB", msg_len, tag, frag, prev_back)

def open_raw(ifname):
    """a raw socket that sends frames out of ifname as they are"""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    return s

def ack(cum, nframes, sack):
    return struct.pack(">IIQ", cum, nframes, sack)

def main():
    ifname, dst, src, count = sys.argv[1], mac(sys.argv[2]), mac(sys.argv[3]), int(sys.argv[4])
    kind = sys.argv[5]
    s = open_raw(ifname)
    eth = dst + src + struct.pack(">H", ETYPE)
    frames = {
        # a well-formed HELLO (used with an unknown source MAC)
        "hello": eth + common(1, 9, 3) + struct.pack(">II", 1500, 0),
        "truncated": eth + common(1, 9, 1)[:20],
        "version": eth + common(1, 9, 1, version=9) + data(0, 10, 1, 1460) + b"x" * 10,
        "type": eth + common(1, 9, 0) + b"\0" * 16,   # 0: no frame type (7 is BYE)
        # frame index beyond the message, and a frame shorter than its payload share
        "index": eth + common(1, 9, 1) + data(5, 10, 1, 1460) + b"x" * 10,
        "length": eth + common(1, 9, 1) + data(0, 100000, 1, 1460),
        # an ack for a message nobody sent (to an incarnation that may even be right)
        "ack": eth + common(1, 9, 2, msg_id=12345) + ack(3, 5, 0),
    }
    f = frames[kind]
    for _ in range(count):
        s.send(f)

if __name__ == "__main__":
    main()
