#!/usr/bin/env python3
# negspray.py: a hostile local process (run it unprivileged) against the EMP negotiation side channel:
# forged and malformed OFFER/ACCEPT/REJECT messages at every client port it can see and at the server's
# port, replays of captured negotiation datagrams, and attempts to take the server's UDP port.
#   negspray.py spray SERVER_IP PORT SECONDS     forge for SECONDS; prints "sent N"
#   negspray.py replay FILE SECONDS              resend captured datagrams (negcap.py); prints "sent N"
#   negspray.py squat IP PORT                    try to bind UDP IP:PORT every way; prints "squat ..."
import os, random, socket, struct, sys, time

MAGIC = 0x454D5073

def msg(mtype, ep, conn, nbufs, bufsz, sip, dip, sport, dport, skey, ckey, version=3, magic=MAGIC):
    return struct.pack(">IBBHIII", magic, version, mtype, ep, conn, nbufs, bufsz) + \
        socket.inet_aton(sip) + socket.inet_aton(dip) + struct.pack(">HH", sport, dport) + skey + ckey

def conns(port):
    """(local ip, local port, remote ip, remote port) of TCP connections with `port` at either end"""
    out = []
    for f in ("/proc/net/tcp",):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            p = l.split()
            la, lp = p[1].split(":"); ra, rp = p[2].split(":")
            ip = lambda h: socket.inet_ntoa(struct.pack("<I", int(h, 16)))
            t = (ip(la), int(lp, 16), ip(ra), int(rp, 16))
            if t[1] == port or t[3] == port:
                out.append(t)
    return out

def forged(c, rnd):
    lip, lp, rip, rp = c
    key = lambda: rnd.getrandbits(64).to_bytes(8, "big")
    kinds = [
        # to the client (its port is lp when the server is rp): "the server's" OFFER and REJECT
        (rip, rp, lip, lp, lambda: msg(1, rnd.randrange(1, 65535), rnd.randrange(1, 1 << 31), 32, 131072, rip, lip, rp, lp, key(), bytes(8))),
        (rip, rp, lip, lp, lambda: msg(1, rnd.randrange(1, 65535), rnd.randrange(1, 1 << 31), 0, 0, rip, lip, rp, lp, key(), bytes(8))),
        (rip, rp, lip, lp, lambda: msg(3, 0, 0, 0, 0, rip, lip, rp, lp, key(), key())),
        # to the server (at rp): "the client's" ACCEPT and REJECT
        (lip, lp, rip, rp, lambda: msg(2, rnd.randrange(1, 65535), rnd.randrange(1, 1 << 31), 32, 131072, lip, rip, lp, rp, key(), key())),
        (lip, lp, rip, rp, lambda: msg(3, 0, 0, 0, 0, lip, rip, lp, rp, key(), key())),
        # malformed
        (lip, lp, rip, rp, lambda: msg(2, 1, 1, 32, 131072, lip, rip, lp, rp, key(), key(), version=1)),
        (rip, rp, lip, lp, lambda: msg(1, 1, 1, 32, 131072, rip, lip, rp, lp, key(), key())[:20]),
        (rip, rp, lip, lp, lambda: bytes(rnd.getrandbits(8) for _ in range(48))),
    ]
    return kinds

def own_socket():
    """a UDP socket on a port below the ephemeral range: a real client's UDP twin takes its TCP
    port's number, which another user's socket on that number would keep from it (a real limit,
    preload/README.md; not what this test is about)"""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for p in random.sample(range(20000, 30000), 50):
        try:
            s.bind(("0.0.0.0", p))
            break
        except OSError:
            pass
    s.setblocking(False)
    return s

def spray(server, port, seconds):
    rnd = random.Random(os.getpid())
    s = own_socket()
    sent, end, cs, seen = 0, time.time() + seconds, [], 0
    while time.time() < end:
        if time.time() - seen > 0.02:          # the connections as any user sees them
            cs, seen = conns(port)[-64:], time.time()
        for c in cs:
            for _, _, dip, dp, make in forged(c, rnd):
                try:
                    s.sendto(make(), (dip, dp)); sent += 1
                except OSError:
                    pass
        # the server's port itself, with made-up tuples
        for _ in range(4):
            try:
                s.sendto(msg(2, 7, 7, 32, 131072, "10.77.0.1", server, rnd.randrange(1024, 65535), port,
                             rnd.getrandbits(64).to_bytes(8, "big"), rnd.getrandbits(64).to_bytes(8, "big")),
                         (server, port)); sent += 1
            except OSError:
                pass
        time.sleep(0.002)
    print("sent", sent)

def replay(path, seconds):
    s = own_socket()
    sent, end = 0, time.time() + seconds
    while time.time() < end:
        try:
            text = open(path).read()
        except OSError:
            text = ""
        # the capture is appended while we read: its last line may be half written
        caps = [l.split() for l in text[:text.rfind("\n") + 1].splitlines() if l.strip()]
        for cap in caps[-400:]:
            try:
                dip, dp, hexdata = cap
                s.sendto(bytes.fromhex(hexdata), (dip, int(dp))); sent += 1
            except (OSError, ValueError):
                pass
        time.sleep(0.004)
    print("sent", sent)

def squat(ip, port):
    res = []
    for addr in (ip, "0.0.0.0"):
        for opts in ((), (socket.SO_REUSEADDR,), (socket.SO_REUSEPORT,), (socket.SO_REUSEADDR, socket.SO_REUSEPORT)):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for o in opts:
                s.setsockopt(socket.SOL_SOCKET, o, 1)
            try:
                s.bind((addr, port)); res.append("bound")
            except OSError as e:
                res.append(e.errno == 98 and "inuse" or "err%d" % e.errno)
            s.close()
    print("squat", " ".join(res))

if __name__ == "__main__":
    m = sys.argv[1]
    if m == "spray":
        spray(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif m == "replay":
        replay(sys.argv[2], float(sys.argv[3]))
    elif m == "squat":
        squat(sys.argv[2], int(sys.argv[3]))
