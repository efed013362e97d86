#!/usr/bin/env python3
"""pingwin.py HOST PORT VICTIM_PID: ping-pong 100-byte messages with an echo server
for 2 s; at 0.5 s SIGKILL VICTIM_PID (another client of the same server, mid-stream).
Prints "window N max_gap_ms G at_ms A total T": N round trips completed between 50
and 400 ms after the kill, G the longest wait for one reply (a server that stalls on
the victim's end makes it as long as the stall), A when that wait began (ms after the
kill), T all round trips. Exit 1 on a wrong echo."""
import os, signal, socket, sys, time

host, port, victim = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection((host, port), timeout=10)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = bytes(range(100))
t0 = time.monotonic()
killed_at = None
done = []
gap, gap_at = 0.0, 0.0
while True:
    now = time.monotonic()
    if killed_at is None and now - t0 >= 0.5:
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
    if now - t0 >= 2.0:
        break
    a = time.monotonic()
    s.sendall(msg)
    got = b""
    while len(got) < len(msg):
        b = s.recv(len(msg) - len(got))
        if not b:
            sys.exit("pingwin: the server closed")
        got += b
    if got != msg:
        sys.exit("pingwin: wrong echo")
    z = time.monotonic()
    if z - a > gap:
        gap, gap_at = z - a, a
    done.append(z)
win = sum(1 for z in done if killed_at + 0.05 <= z <= killed_at + 0.40)
print("window %d max_gap_ms %.0f at_ms %.0f total %d" % (win, gap * 1000, (gap_at - killed_at) * 1000, len(done)), flush=True)
