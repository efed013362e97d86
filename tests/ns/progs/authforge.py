#!/usr/bin/env python3
# authforge.py: forges EMP frames with every id right, from this host's live EMP traffic to DST_MAC (frame-authentication test).
#   authforge.py IFNAME DST_MAC MAX SECONDS
# Watches the authenticated (version 10) DATA frames this host sends to DST_MAC and, for each one seen,
# sends (a) the same frame as the next message (msg_id + 1) with a payload byte changed and its old,
# now wrong, tag; (b) that frame untagged as version 2; and every 25th time (c) a STALE saying the
# sender restarted and (d) a HELLO opening a new session, both with a random tag. Every forged frame
# carries the session's real MACs, endpoints, incarnations and session number. Prints "listening"
# once bound, then "forged N" (frames sent) when MAX frames are sent or SECONDS have passed.
import os, socket, struct, sys, time

ETYPE = 0x88B5
ETH_P_ALL = 3
PACKET_OUTGOING = 4
V_AUTH, V_PLAIN = 10, 2
T_DATA, T_HELLO, T_STALE = 1, 3, 5
F_PIGGY = 1 << 8
HDR = 14 + 26


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def data_len(f):
    """bytes of a DATA frame up to its tag: headers, piggybacked ack, payload"""
    b = f[HDR:]
    frame = int.from_bytes(b[0:3], "big")
    msg_len, frag = struct.unpack(">I", b[3:7])[0], struct.unpack(">H", b[11:13])[0]
    at = frame * frag
    plen = 0 if not frag or at >= msg_len else min(frag, msg_len - at)
    flags = struct.unpack(">H", f[18:20])[0] & 0x1FF
    return HDR + 14 + (12 if flags & F_PIGGY else 0) + plen


def common(f, ftype, version, **kw):
    """f's common header with another type/version and some fields replaced"""
    dst_ep, src_ep, dst_inc, src_inc, session, credits, msg_id = struct.unpack(">HHIIHHI", f[20:40])
    v = dict(dst_ep=dst_ep, src_ep=src_ep, dst_inc=dst_inc, src_inc=src_inc, session=session,
             credits=credits, msg_id=msg_id)
    v.update(kw)
    vtf = (version & 15) << 12 | (ftype & 7) << 9
    return f[:14] + struct.pack(">IHHHIIHHI", 0, vtf, v["dst_ep"], v["src_ep"], v["dst_inc"], v["src_inc"],
                                v["session"], v["credits"], v["msg_id"])


def forgeries(f, n):
    out = []
    end = data_len(f)
    if end + 8 > len(f):
        return out
    g = bytearray(f[:end + 8])
    msg_id = struct.unpack(">I", g[36:40])[0]
    g[36:40] = struct.pack(">I", msg_id + 1)
    g[end - 1] ^= 0x5A                                 # the payload's last byte (or the header's)
    out.append(bytes(g))                               # (a) wrong tag
    h = bytearray(g[:end])
    h[18:20] = struct.pack(">H", (struct.unpack(">H", h[18:20])[0] & 0x0FFF) | V_PLAIN << 12)
    out.append(bytes(h))                               # (b) no tag
    if n % 25 == 0:
        src_inc = struct.unpack(">I", f[28:32])[0]
        out.append(common(f, T_STALE, V_AUTH, src_inc=src_inc ^ 0x5A5A5A5A, session=0, msg_id=0)
                   + struct.pack(">I", src_inc) + os.urandom(8))                         # (c)
        session = struct.unpack(">H", f[32:34])[0]
        out.append(common(f, T_HELLO, V_AUTH, session=(session + 1) & 0xFFFF, msg_id=0)
                   + struct.pack(">II", 1500, 0x7FFFFFF0) + os.urandom(8))               # (d)
    return out


def main():
    ifname, dst, most, secs = sys.argv[1], mac(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, 0))
    s.settimeout(0.2)
    print("listening", flush=True)
    mine = set()
    sent = seen = 0
    end = time.time() + secs
    while sent < most and time.time() < end:
        try:
            f, addr = s.recvfrom(65536)
        except socket.timeout:
            continue
        if addr[2] != PACKET_OUTGOING or len(f) < HDR + 14 or f[:6] != dst:
            continue
        if struct.unpack(">H", f[12:14])[0] != ETYPE:
            continue
        vtf = struct.unpack(">H", f[18:20])[0]
        if vtf >> 12 != V_AUTH or (vtf >> 9) & 7 != T_DATA or f in mine:
            continue
        seen += 1
        for g in forgeries(f, seen):
            if sent >= most:
                break
            mine.add(g)
            s.send(g)
            sent += 1
        if len(mine) > 10000:
            mine.clear()
    print("forged %d" % sent, flush=True)


if __name__ == "__main__":
    main()
