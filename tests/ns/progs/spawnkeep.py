#!/usr/bin/env python3
"""spawnkeep.py PORT: accept one connection and echo it; every 10th echo runs a subprocess (close_fds=True: CPython's vfork child closes every descriptor with close_range) while the connection stays open; prints "server done N" at EOF. For t_sock_exec."""
import socket, subprocess, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(("0.0.0.0", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
c, _ = l.accept()
n = 0
while True:
    b = c.recv(65536)
    if not b: break
    c.sendall(b)
    n += 1
    if n % 10 == 0:
        subprocess.run(["true"], close_fds=True)
print("server done", n, flush=True)
