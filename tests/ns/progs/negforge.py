#!/usr/bin/env python3
# negforge.py: an unprivileged client that answers the server's OFFER with an ACCEPT naming another
# process's EMP endpoint (and, if given, its connection id), the way a local user could try to steer the
# server's stream into a victim's. It marks its SYN as a preloaded client would and binds its UDP twin.
#   negforge.py SERVER_IP PORT VICTIM_EP [VICTIM_CONN]     prints "offer seen", "accept sent", then
#   what became of its own connection ("kernel" if the server kept it on kernel TCP, "closed")
#   With FORGE_CLOSE=1 in the environment it closes its connection right after the ACCEPT instead
#   (a client killed between its ACCEPT and its HELLO) and prints "closed after accept".
import os, random, socket, struct, sys, time

MAGIC, TTL_MARK = 0x454D5073, 105
server, port, vep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
vconn = int(sys.argv[4]) if len(sys.argv) > 4 else random.randrange(1, 1 << 31)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.bind(("0.0.0.0", 0))
lport = t.getsockname()[1]
u.bind(("0.0.0.0", lport))
u.connect((server, port))
t.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, TTL_MARK)
t.connect((server, port))
u.settimeout(3)
m = u.recv(100)
magic, ver, mtype, sep, sconn, nb, bs = struct.unpack(">IBBHIII", m[:20])
skey = m[32:40]
assert magic == MAGIC and mtype == 1, "no OFFER"
print("offer seen", flush=True)
lip = t.getsockname()[0]
acc = struct.pack(">IBBHIII", MAGIC, ver, 2, vep, vconn, 32, 131072) + socket.inet_aton(lip) + \
    socket.inet_aton(server) + struct.pack(">HH", lport, port) + skey + random.getrandbits(64).to_bytes(8, "big")
for _ in range(3):
    u.send(acc)
    time.sleep(0.01)
print("accept sent (endpoint %d, conn %d)" % (vep, vconn), flush=True)
if os.environ.get("FORGE_CLOSE") == "1":
    t.close()
    print("closed after accept", flush=True)
    sys.exit(0)
# the server waits for that endpoint to prove itself, refuses, and keeps this connection on kernel TCP
t.settimeout(3)
try:
    t.sendall(b"x" * 100)
    got = b""
    while len(got) < 100:
        d = t.recv(100)
        if not d:
            break
        got += d
    print("kernel" if got == b"x" * 100 else "closed", flush=True)
except OSError as e:
    print("closed", e, flush=True)
