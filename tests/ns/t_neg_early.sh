#!/usr/bin/env bash
# t_neg_early: a client's first data travels right behind its HELLO, without waiting a round trip for the server's HELLO: with every EMP frame into the client host dropped, a connection's first write (4000 bytes) still reaches the preloaded server (its engine counts them), and once the frames flow again the echo comes back intact; every connection of a connt run sends its first write that way; a server that refuses EMP after the client's ACCEPT (out of descriptors) gets those bytes again on kernel TCP, intact.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
bg 2 "$T/server.log" "$ER" --strict --debug "$CONNT" server 7340
wait_port 2 7340
# server endpoint's bytes received (empstat)
srv_rx() {
	on 2 "$ROOT/build/bin/empstat" --json 2>/dev/null | python3 -c '
import json, sys
e = [x for x in json.load(sys.stdin)["endpoints"] if x["pid"] == int(sys.argv[1])]
print(e[0]["counters"].get("bytes_received", 0) if e else -1)' "$1"
}
spid=$(pgrep -f "connt server 7340" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = connt ] && echo "$p"; done | head -1)
[ -n "$spid" ] || fail "no server process"

# 1. one warm-up exchange (the engines' session), then, with the client host deaf to EMP, a connection
#    whose first write must reach the server before anything of the server's can reach the client
cat >"$T/early.py" <<'EOF'
import os, socket, sys, time
host, port, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def conn(tag):
    s = socket.create_connection((host, port))
    msg = (tag * 4000)[:4000]
    s.sendall(msg)   # one write
    b = b""
    while len(b) < len(msg):
        d = s.recv(4096)
        if not d:
            raise SystemExit("EOF after %d bytes" % len(b))
        b += d
    s.close()
    return b == msg
assert conn(b"warm-up ")
print("warm", flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
print("intact" if conn(b"early bytes ") else "CORRUPT", flush=True)
EOF
bg 1 "$T/early.log" "$ER" --strict --debug python3 "$T/early.py" 10.77.0.2 7340 "$T/go"
for i in $(seq 100); do grep -q '^warm' "$T/early.log" && break; sleep 0.05; done
expect "warm-up exchange over EMP" grep -q '^warm' "$T/early.log"
sleep 0.3   # the warm-up connection's close exchange done (not counted below)
on 1 nft add rule netdev emp loss ether type 0x88b5 drop
r0=$(srv_rx "$spid")
touch "$T/go"
got=0
for i in $(seq 100); do   # bounded look (5 s): the bytes come within a round trip, or never
	r=$(srv_rx "$spid")
	[ $((r - r0)) -ge 4000 ] && { got=$((r - r0)); break; }
	sleep 0.05
done
echo "server bytes received while the client host hears no EMP: $got"
at_least "first data bytes at the server before any server frame reached the client" "$got" 4000
on 1 nft flush chain netdev emp loss
for i in $(seq 100); do grep -qE '^(intact|CORRUPT)' "$T/early.log" && break; sleep 0.05; done
cat "$T/early.log"
expect "the echo came back intact once the frames flowed again" grep -q '^intact' "$T/early.log"
expect "its first write went right behind the HELLO, over EMP" grep -q 'first write (4000 bytes) sent right behind our HELLO' "$T/early.log"

# 2. every connection of a run: the first write goes right behind the HELLO, bytes intact
N=200
on 1 env EMP_SOCK_DEBUG=1 "$ER" --strict "$CONNT" client 10.77.0.2 7340 $N 100 >"$T/c.log" 2>&1 || { tail -5 "$T/c.log"; fail "client failed"; }
expect "$N connections echoed intact over EMP" grep -q "^ok $N conns" "$T/c.log"
early=$(grep -c "sent right behind our HELLO" "$T/c.log" || true)
at_least "connections whose first write went right behind the HELLO" "$early" $N
expect "no message without its key at the server" bash -c "! grep -q 'without its key' '$T/server.log'"
expect "the server kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/server.log'"

# 2c. a client that binds its own port first: its side channel takes that port before the connect
on 1 "$ER" --strict --debug python3 -c '
import socket
s = socket.socket()
s.bind(("0.0.0.0", 40123))
s.connect(("10.77.0.2", 7340))
s.sendall(b"b" * 200)
b = b""
while len(b) < 200:
    b += s.recv(4096)
print("bound intact" if b == b"b" * 200 else "bound CORRUPT")
s.close()' >"$T/bound.log" 2>&1 || { cat "$T/bound.log"; fail "bound client"; }
expect "a client on its own bound port: bytes intact over EMP" grep -q '^bound intact' "$T/bound.log"
expect "... and the connection was EMP" grep -q 'EMP with 10.77.0.2:7340' "$T/bound.log"

# 3. a server that refuses after the client's ACCEPT (its descriptors run out at the proof: 64, 40
#    buffers a connection): the first write goes again on kernel TCP, intact (3 client processes,
#    a second apart: a refused connection keeps its receives for a grace second)
sed '/^option descriptors/d' "$EMP_CONF" >"$T/small.conf"
echo "option descriptors 64" >>"$T/small.conf"
bg 2 "$T/small.log" env EMP_CONF="$T/small.conf" EMP_SOCK_BUFS=40 "$ER" --debug "$CONNT" server 7341
wait_port 2 7341
for i in 1 2 3; do
	on 1 env EMP_SOCK_DEBUG=1 "$ER" "$CONNT" client 10.77.0.2 7341 1 100 >>"$T/r.log" 2>&1 || { cat "$T/r.log"; fail "client against the refusing server"; }
	sleep 1.1
done
cat "$T/r.log"
expect "3 connections echoed intact" test "$(grep -c '^ok 1 conns' "$T/r.log")" = 3
replayed=$(grep -c "sent again on kernel TCP (100 went)" "$T/r.log" || true)
at_least "first writes sent again on kernel TCP after the refusal" "$replayed" 1
expect "the server refused EMP after the ACCEPT" grep -q "cannot set up EMP (descriptors, peers?)" "$T/small.log"
# 4. a client that writes and exits without closing or reading (its socket still open at exit):
#    the server reads the bytes and then a clean end of stream (the exit brings the connection to
#    its outcome and closes it with its FIN exchange), not a reset
cat >"$T/sink.py" <<'EOF'
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("10.77.0.2", 7342)); l.listen(8)
print("listening", flush=True)
for i in range(3):
    c, _ = l.accept()
    got, end = b"", "EOF"
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
    except OSError as e:
        end = "error %s" % e
    print("got %d bytes, %s" % (len(got), end), flush=True)
    c.close()
EOF
bg 2 "$T/sink.log" "$ER" --strict --debug python3 "$T/sink.py"
wait_port 2 7342
for i in 1 2 3; do
	on 1 "$ER" --strict python3 -c '
import os, socket
s = socket.create_connection(("10.77.0.2", 7342))
s.sendall(b"x" * 1000)
os.dup(s.fileno())   # still open at exit
' || fail "fire-and-forget client"
done
for i in $(seq 100); do [ "$(grep -c '^got' "$T/sink.log")" -ge 3 ] && break; sleep 0.05; done
grep '^got' "$T/sink.log"
expect "3 fire-and-forget connections read to a clean EOF with every byte" test "$(grep -c '^got 1000 bytes, EOF' "$T/sink.log")" = 3
echo "PASS"
