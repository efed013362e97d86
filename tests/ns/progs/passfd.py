#!/usr/bin/env python3
"""passfd.py: a master that accepts and hands each connection to a worker process over a UNIX socket (SCM_RIGHTS), for t_sock_passfd.

  passfd.py server PORT MODE   MODE pending: hand the connection over before any I/O;
                               used: read 5 bytes and echo them first, then hand it over.
                               The worker (a new program, subprocess) echoes each connection
                               until EOF and prints "worker: eof" or "worker: error NAME"
  passfd.py client HOST PORT N N lines of 1..4000 bytes, each echoed back and compared;
                               prints "client: ok N lines" or "client: error NAME after K"
                               or "client: eof after K"; exit 0 only for ok
"""
import socket
import subprocess
import sys


def worker(fd):
    u = socket.socket(fileno=fd)
    while True:
        msg, fds, _, _ = socket.recv_fds(u, 16, 1)
        if not fds:
            return
        c = socket.socket(fileno=fds[0])
        c.settimeout(10)
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    print("worker: eof", flush=True)
                    break
                c.sendall(b)
        except OSError as e:
            print("worker: error %s" % type(e).__name__, flush=True)
        c.close()


def server(port, mode):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    subprocess.Popen([sys.executable, sys.argv[0], "worker", str(b.fileno())], pass_fds=[b.fileno()])
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(16)
    print("listening", flush=True)
    while True:
        c, _ = l.accept()
        if mode == "used":
            c.sendall(c.recv(5))
        socket.send_fds(a, [b"c"], [c.fileno()])
        c.close()


def client(host, port, n):
    s = socket.create_connection((host, port))
    s.settimeout(10)
    k = 0
    try:
        for i in range(n):
            m = bytes((i * 31 + j) & 0xFF for j in range(1 + (i * 997) % 4000))
            s.sendall(m)
            got = b""
            while len(got) < len(m):
                r = s.recv(len(m) - len(got))
                if not r:
                    print("client: eof after %d" % k)
                    return 1
                got += r
            if got != m:
                print("client: mismatch at line %d" % i)
                return 1
            k += 1
    except OSError as e:
        print("client: error %s after %d" % (type(e).__name__, k))
        return 1
    print("client: ok %d lines" % k)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(int(sys.argv[2]))
    elif sys.argv[1] == "server":
        server(int(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "client":
        sys.exit(client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
    else:
        sys.exit(__doc__)
