#!/usr/bin/env python3
"""blockread.py: a plain blocking (or epoll) socket reader and writer (t_sock_direct, t_core_bulksplit).
  blockread.py serve PORT        accept one connection, read it to its end with
                                 blocking recv_into calls of sizes 128K, 3000,
                                 64K, 2048, 100000 in turn; print "got BYTES
                                 SHA256", then wait to be killed
  blockread.py serve-epoll PORT [PAUSE_MS]
                                 the same, non-blocking, sleeping in
                                 epoll_wait before each read that finds nothing;
                                 with PAUSE_MS, asleep that long (reading
                                 nothing) after every 2 MB
  blockread.py send HOST PORT N  send N bytes of a seeded pattern in writes of
                                 1..300000 bytes; print "sent BYTES SHA256"
"""
import hashlib, random, socket, sys, time

def main():
    if sys.argv[1] in ("serve", "serve-epoll"):
        l = socket.socket()
        l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        l.bind(("0.0.0.0", int(sys.argv[2])))
        l.listen(1)
        print("listening", flush=True)
        c, _ = l.accept()
        ep = None
        if sys.argv[1] == "serve-epoll":
            import select
            c.setblocking(False)
            ep = select.epoll()
            ep.register(c.fileno(), select.EPOLLIN)
        buf = memoryview(bytearray(131072))
        sizes = [131072, 3000, 65536, 2048, 100000]
        h, n, i = hashlib.sha256(), 0, 0
        pause = int(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0
        next_pause = 2000000
        while True:
            if pause and n >= next_pause:
                time.sleep(pause)
                next_pause += 2000000
            try:
                k = c.recv_into(buf[:sizes[i % len(sizes)]])
            except BlockingIOError:
                ep.poll()
                continue
            i += 1
            if k == 0:
                break
            h.update(buf[:k])
            n += k
        print("got %d %s" % (n, h.hexdigest()), flush=True)
        time.sleep(60)
    else:
        s = socket.create_connection((sys.argv[2], int(sys.argv[3])))
        rnd = random.Random(7)
        total, n, h = int(sys.argv[4]), 0, hashlib.sha256()
        while n < total:
            k = min(rnd.randint(1, 300000), total - n)
            b = rnd.randbytes(k)
            s.sendall(b)
            h.update(b)
            n += k
        s.close()
        print("sent %d %s" % (n, h.hexdigest()), flush=True)

main()
