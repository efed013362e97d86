#!/usr/bin/env python3
# negcap.py: records the EMP negotiation datagrams seen on an interface (root: AF_PACKET), one
# "dst_ip dst_port payload_hex" line each, for negspray.py to replay.
#   negcap.py IFNAME OUTFILE SECONDS
import os, socket, struct, sys, time

MAGIC = b"EMPs"
ifname, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
s.bind((ifname, 0))
s.settimeout(0.2)
out = open(path, "w", buffering=1)
os.chmod(path, 0o644)
end, n = time.time() + seconds, 0
while time.time() < end:
    try:
        pkt = s.recv(65535)
    except socket.timeout:
        continue
    if len(pkt) < 28 or pkt[9] != 17:
        continue
    ihl = (pkt[0] & 15) * 4
    udp = pkt[ihl:]
    payload = udp[8:]
    if payload[:4] != MAGIC:
        continue
    dport = struct.unpack(">H", udp[2:4])[0]
    out.write("%s %d %s\n" % (socket.inet_ntoa(pkt[16:20]), dport, payload.hex()))
    n += 1
print("captured", n)
