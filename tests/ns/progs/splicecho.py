#!/usr/bin/env python3
"""splicecho.py PORT: accept connections one after another and echo each with os.splice through a pipe (socket -> pipe -> socket); prints "spliced N" per connection. For t_sock_splice."""
import os, socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); l.bind(("0.0.0.0", int(sys.argv[1]))); l.listen(4)
print("listening", flush=True)
while True:
    c, _ = l.accept()
    r, w = os.pipe()
    total = 0
    while True:
        n = os.splice(c.fileno(), w, 65536)
        if n == 0: break
        left = n
        while left:
            left -= os.splice(r, c.fileno(), left)
        total += n
    print("spliced", total, flush=True)
    c.close(); os.close(r); os.close(w)
