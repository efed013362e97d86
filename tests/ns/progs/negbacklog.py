#!/usr/bin/env python3
"""negbacklog.py: a server with a small listen backlog that accepts only once told to, and a client that connects non-blocking, for t_neg_backlog.

  negbacklog.py server PORT BACKLOG GATE   listen(BACKLOG); print "listening"; accept
                                            nothing until the file GATE exists, then
                                            echo every connection (a thread each) until EOF
  negbacklog.py nbclient HOST PORT BYTES   connect non-blocking (poll for POLLOUT), write
                                            BYTES of a pattern, read them back; "ok" and exit 0
                                            only if every byte came back intact
  negbacklog.py twice HOST PORT GATE       echo 100 bytes over one connection ("first ok"),
                                            then, once the file GATE exists, connect again
                                            (blocking) and echo; prints how the second ended
                                            and after how many ms; exit 0 either way
  negbacklog.py gone HOST PORT N            N connections, non-blocking: wait until the
                                            kernel finished each handshake (POLLOUT), then
                                            exit without using them (wrk at the end of a run)
  negbacklog.py pollserver PORT            a single-threaded echo server over poll(2):
                                            non-blocking sockets, one poll for all
  negbacklog.py readnow PORT               accept, add the socket to an epoll set and
                                            look at the set (non-blocking), then read at
                                            once, blocking (nginx's deferred accept);
                                            prints "read after MS ms: WHAT" per connection
  negbacklog.py mute HOST PORT N SECONDS   N connections whose SYNs carry the EMP mark
                                            (IP TTL 105), each with its UDP twin bound
                                            and connected as a preloaded client's is,
                                            so the server's OFFERs arrive and draw no
                                            ICMP, but nothing ever answers them (a
                                            hostile client, or one stopped in a
                                            debugger); "N connected" once all are,
                                            then holds them SECONDS and exits
  negbacklog.py acceptmute HOST PORT N SECONDS [EP]   as mute, but each
                                            answers its OFFER with a well-formed
                                            ACCEPT naming endpoint EP (default: one
                                            nobody has) and never sends the HELLO
                                            that would prove it; "N accepted" once
                                            all are, then holds them SECONDS
"""
import os
import select
import socket
import struct
import sys
import threading
import time


def echo(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                return
            c.sendall(b)


def server(port, backlog, gate):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(backlog)
    print("listening", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.01)
    while True:
        c, _ = l.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def nbclient(host, port, n):
    s = socket.socket()
    s.setblocking(False)
    t0 = time.monotonic()
    s.connect_ex((host, port))
    p = select.poll()
    p.register(s, select.POLLOUT)
    if not p.poll(10000):
        sys.exit("negbacklog: connect did not finish in 10 s")
    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        sys.exit("negbacklog: connect: %s" % os.strerror(err))
    s.setblocking(True)
    s.settimeout(10)
    data = bytes((i * 7 + (i >> 8)) & 0xFF for i in range(n))
    s.sendall(data)
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            break
        got += b
    if got != data:
        sys.exit("negbacklog: %d of %d bytes came back intact" % (len(got), n))
    print("ok %d bytes, %.0f ms" % (n, (time.monotonic() - t0) * 1000))


def twice(host, port, gate):
    data = bytes(range(100))
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while len(got) < len(data):
            b = s.recv(len(data) - len(got))
            if not b:
                break
            got += b
    if got != data:
        sys.exit("negbacklog: the first echo came back short or wrong")
    print("first ok", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.01)
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=20) as s:
            s.sendall(data)
            b = s.recv(100)
            how = "ok" if b else "EOF"
    except OSError as e:
        how = e.__class__.__name__ + " " + (os.strerror(e.errno) if e.errno else str(e))
    print("second: %s after %.0f ms" % (how, (time.monotonic() - t0) * 1000), flush=True)


def gone(host, port, n):
    socks = []
    p = select.poll()
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex((host, port))
        p.register(s, select.POLLOUT)
        socks.append(s)
    done = set()
    end = time.monotonic() + 10
    while len(done) < n and time.monotonic() < end:
        for fd, ev in p.poll(100):
            if ev & select.POLLOUT:
                done.add(fd)
                p.unregister(fd)
    if len(done) < n:
        sys.exit("negbacklog: %d of %d connects finished in 10 s" % (len(done), n))
    print("%d connected, leaving" % n, flush=True)


def pollserver(port):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(128)
    l.setblocking(False)
    p = select.poll()
    p.register(l, select.POLLIN)
    conns = {}
    print("listening", flush=True)
    while True:
        for fd, ev in p.poll():
            if fd == l.fileno():
                try:
                    c, _ = l.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                conns[c.fileno()] = c
                p.register(c, select.POLLIN)
                continue
            c = conns[fd]
            try:
                b = c.recv(65536)
            except BlockingIOError:
                continue
            except OSError as e:
                print("conn: %s" % e, flush=True)
                b = b""
            if b:
                c.setblocking(True)
                try:
                    c.sendall(b)
                    c.setblocking(False)
                    continue
                except OSError as e:
                    print("conn: %s" % e, flush=True)
            p.unregister(fd)
            del conns[fd]
            c.close()


def readnow(port):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("0.0.0.0", port))
    l.listen(64)
    ep = select.epoll()
    print("listening", flush=True)
    while True:
        c, _ = l.accept()
        ep.register(c.fileno(), select.EPOLLIN)
        ep.poll(0)
        t0 = time.monotonic()
        try:
            b = c.recv(100)
            what = "%d bytes" % len(b)
            if b:
                c.sendall(b)
        except OSError as e:
            what = e.__class__.__name__
        print("read after %.0f ms: %s" % ((time.monotonic() - t0) * 1000, what), flush=True)
        ep.unregister(c.fileno())
        c.close()


def marked_conn(host, port):
    """a connection whose SYN carries the EMP mark, with its UDP twin bound and connected"""
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 105)
    s.bind(("0.0.0.0", 0))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    u.bind(("0.0.0.0", s.getsockname()[1]))
    u.connect((host, port))
    s.settimeout(10)
    s.connect((host, port))
    return s, u


def mute(host, port, n, secs):
    keep = []
    for _ in range(n):
        keep += marked_conn(host, port)
    print("%d connected" % n, flush=True)
    time.sleep(secs)


def acceptmute(host, port, n, secs, ep=0):
    keep = []
    for i in range(n):
        s, u = marked_conn(host, port)
        keep += [s, u]
        u.settimeout(5)
        o = u.recv(64)
        if len(o) != 48 or o[5] != 1:
            sys.exit("negbacklog: connection %d: no OFFER (%d bytes)" % (i, len(o)))
        lip, lport = s.getsockname()
        # struct neg_msg (preload/neg.h), big-endian: magic, version 3, ACCEPT,
        # the endpoint, connection id, 32 x 128 KiB buffers, the
        # 4-tuple from our side, the OFFER's key echoed, a key of ours
        a = struct.pack(">IBBHIII", 0x454D5073, 3, 2, ep or 40000 + i, 1000 + i, 32, 131072)
        a += socket.inet_aton(lip) + socket.inet_aton(host) + struct.pack(">HH", lport, port)
        a += o[32:40] + os.urandom(7) + b"\x01"
        u.send(a)
    print("%d accepted" % n, flush=True)
    time.sleep(secs)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "twice":
        twice(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "gone":
        gone(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "pollserver":
        pollserver(int(sys.argv[2]))
    elif sys.argv[1] == "readnow":
        readnow(int(sys.argv[2]))
    elif sys.argv[1] == "mute":
        mute(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1] == "acceptmute":
        acceptmute(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                   int(sys.argv[6]) if len(sys.argv) > 6 else 0)
    elif sys.argv[1] == "nbclient":
        nbclient(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(__doc__)

