#!/usr/bin/env bash
# t_core_bulksplit: the AF_PACKET driver's two receive sockets (afp_bulk.c; off by default, EMP_AFP_BULK=1 on, auto on a veth without RPS only): frames another host marks with their path reach the bulk socket exactly when they are DATA frames of a message of 32 KiB or more other than its frame 0, its last frame and those asking for an ack (24-bit frame index, the auth version too), the ring otherwise (acks, short messages, frame 0, LAST, ACKREQ, the 32767-byte boundary), none of another endpoint's arrive, and a bulk frame alone wakes a sleeper on the second wait fd; unset and auto-with-RPS open without it; a 20 MB stream through the shim (both ends under emp-run --strict) arrives intact with the reader's bulk socket carrying 90 % of its frames (none with EMP_AFP_BULK=0); sleeping readers (blocking, epoll) take 40 MB in 1 MiB messages within 10 s.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
mac1=$(mac_of 1)
mac2=$(mac_of 2)
cat >"$T/send.py" <<'PY'
import struct, sys, time
sys.path.insert(0, sys.argv[5])
from inject import ETYPE, common, data, mac, open_raw   # the wire format's builders
ifname, dst, src, n = sys.argv[1], mac(sys.argv[2]), mac(sys.argv[3]), int(sys.argv[4])
s = open_raw(ifname)
def frame(k, mark, typ=1, ver=2, ep=4321, fr=1, mlen=131072, pay=1400, fl=0):
    head = common(ep, 9, typ, flags=fl, version=ver, src_inc=0, session=0, msg_id=7) + data(fr, mlen, 5, 1460)
    return dst + src + struct.pack(">H", ETYPE) + head + b"p" * pay + struct.pack(">I", k) + mark
# (mark, kwargs): the path each kind must take
kinds = [("B", {}), ("B", {"fr": 256}), ("B", {"fr": 1 << 16}), ("B", {"mlen": 32768}),
         ("B", {"ver": 10}), ("B", {"fl": 1 | 1 << 8}), ("R", {"fr": 0}), ("R", {"mlen": 32767, "fr": 5}),
         ("R", {"fl": 1 << 4}), ("R", {"fl": 1 << 1}),
         ("R", {"typ": 2}), ("R", {"typ": 3, "pay": 20}), ("R", {"mlen": 100, "pay": 60})]
k = 0
while k < n:
    # every fourth batch bulk frames only, after a pause: they alone must wake the reader
    only_bulk = (k // 40) % 4 == 3
    for j in range(40):
        if k >= n:
            break
        mark, kw = kinds[0] if only_bulk else kinds[k % len(kinds)]
        s.send(frame(k, mark.encode(), **kw))
        if k % 7 == 0:   # another endpoint's frame: must reach neither socket
            s.send(frame(n + 1000 + k, b"B", ep=4322))
        k += 1
    time.sleep(0.03)
PY
N=2000
EMP_AFP_BULK=1 bg 1 "$T/rx" "$ROOT/build/tests/ns/bulksplit" eth0 4321 "$N" 30
for i in $(seq 100); do grep -q ready "$T/rx" 2>/dev/null && break; sleep 0.05; done
on 2 python3 "$T/send.py" eth0 "$mac1" "$mac2" "$N" "$ROOT/tests/ns/progs"
rc=0; wait "${PIDS[0]}" || rc=$?
cat "$T/rx"
expect "the driver opened with the bulk socket" grep -q "ready bulk 1" "$T/rx"
expect "every frame arrived, each by its path, no bulk frame twice, a sleeper woken by bulk frames alone" [ "$rc" = 0 ]
expect "no frame of another endpoint arrived" grep -q " 0 bad" "$T/rx"

# EMP_AFP_BULK=0: one socket, no split
EMP_AFP_BULK=0 bg 1 "$T/rx0" "$ROOT/build/tests/ns/bulksplit" eth0 4321 100 2
for i in $(seq 100); do grep -q ready "$T/rx0" 2>/dev/null && break; sleep 0.05; done
wait "${PIDS[-1]}" || true
expect "EMP_AFP_BULK=0 opens without the bulk socket" grep -q "ready bulk 0" "$T/rx0"

# unset, the split is off; auto turns it on only where the receive copy runs
# on the sending CPU (a veth without RPS): with RPS steering h1's frames to a
# CPU, auto leaves it off and EMP_AFP_BULK=1 turns it on
opened() { # opened LOG ENV...: the bulk flag the driver opened with
	env -u EMP_AFP_BULK "${@:2}" ip netns exec "${PREFIX}1" "$ROOT/build/tests/ns/bulksplit" eth0 4321 1 0 > "$1" 2>&1 || true
	sed -n 's/^ready bulk \([01]\)$/\1/p' "$1"
}
unset_=$(opened "$T/def" X=1); auto_=$(opened "$T/auto" EMP_AFP_BULK=auto)
on 1 sh -c 'echo 1 > /sys/class/net/eth0/queues/rx-0/rps_cpus'
rps_auto=$(opened "$T/rps0" EMP_AFP_BULK=auto); rps_forced=$(opened "$T/rps1" EMP_AFP_BULK=1)
on 1 sh -c 'echo 0 > /sys/class/net/eth0/queues/rx-0/rps_cpus'
expect "unset: no bulk socket (${unset_:-?})" [ "$unset_" = 0 ]
expect "auto on a veth without RPS: the bulk socket (${auto_:-?})" [ "$auto_" = 1 ]
expect "auto with RPS on: no bulk socket (${rps_auto:-?})" [ "$rps_auto" = 0 ]
expect "EMP_AFP_BULK=1 with RPS on: the bulk socket (${rps_forced:-?})" [ "$rps_forced" = 1 ]

# A stream through the shim (a plain program, blocking reads, both ends under
# emp-run --strict): with EMP_AFP_BULK=1 on the reader intact, and its engine
# counts most of its frames as read from the bulk socket (rx_bulk); with
# EMP_AFP_BULK=0, none.
PY=/usr/bin/python3
PROG=$ROOT/tests/ns/progs/blockread.py
stream() { # stream PORT ENV: prints "frames-from-bulk frames-received"
	local port=$1 env=$2
	bg 2 "$T/s$port.log" env $env "$ER" --strict "$PY" "$PROG" serve "$port"
	local spid=${PIDS[-1]}
	wait_port 2 "$port"
	on 1 "$ER" --strict "$PY" "$PROG" send 10.77.0.2 "$port" 20000000 > "$T/c$port.log" 2>&1 || { cat "$T/c$port.log"; fail "sender failed"; }
	for i in $(seq 100); do grep -q "^got" "$T/s$port.log" && break; sleep 0.1; done
	local sent got; sent=$(awk '/^sent/ { print $2, $3 }' "$T/c$port.log"); got=$(awk '/^got/ { print $2, $3 }' "$T/s$port.log")
	expect "20 MB intact (SHA-256) with $env" [ -n "$sent" -a "$sent" = "$got" ]
	for i in $(seq 30); do   # the engine publishes its counters now and then
		on 2 "$BIN/empstat" --json > "$T/stat.json"
		read -r bulk frames bytes < <(python3 -c "
import json
d = json.load(open('$T/stat.json'))
e = [x for x in d['endpoints'] if x['pid'] == $spid][0]['counters']
print(e.get('rx_bulk', 0), e.get('rx_data', 0), e.get('bytes_received', 0))")
		[ "$bytes" -ge 20000000 ] && break
		sleep 0.1
	done
	at_least "bytes the reader's engine received with $env" "$bytes" 20000000
	echo "$env: $bulk of $frames data frames from the bulk socket"
}
stream 7410 EMP_AFP_BULK=1
at_least "data frames read from the bulk socket (all but each message's first, last and ack-asking ones: 90 % at least)" "$bulk" $(( frames * 9 / 10 ))
stream 7411 EMP_AFP_BULK=0
expect "EMP_AFP_BULK=0: no frame from the bulk socket" [ "$bulk" = 0 ]

# A reader that sleeps (no spin, no progress thread, gathering off, its
# delayed acks held up to 1 s) gets 1 MiB messages promptly: most of their
# frames reach only the bulk socket, and those that reach the ring (frame 0,
# the frames asking for an ack, the last) are handed to the engine after what
# the bulk socket holds. Before the ack-asking frames went to the ring, a
# sleep that ignored the second fd left 40 MB unarrived after 30 s here (each
# 64-frame window waited for the delayed-ack deadline); now the window's last
# frame wakes it too, and the driver-level check above is what isolates the
# second fd. Both ways of sleeping: blocking reads and epoll_wait.
(cat "$EMP_CONF"; echo "option ack_delay_us 1000000") > "$T/slow.conf"
sleeper() { # sleeper MODE PORT: a reader in MODE (serve: blocking reads, serve-epoll: epoll_wait)
	local mode=$1 port=$2
	bg 2 "$T/slow$port.log" env EMP_AFP_BULK=1 EMP_CONF="$T/slow.conf" EMP_SOCK_BUFSZ=1048576 EMP_SPIN_US=0 EMP_GATHER_US=0 \
		EMP_PROGRESS_THREAD=0 "$ER" --strict "$PY" "$PROG" "$mode" "$port"
	wait_port 2 "$port"
	on 1 env EMP_SOCK_BUFSZ=1048576 timeout 10 "$ER" --strict "$PY" "$PROG" send 10.77.0.2 "$port" 40000000 > "$T/cslow$port.log" 2>&1 &
	PIDS+=($!)
	for i in $(seq 200); do grep -q "^got" "$T/slow$port.log" && break; sleep 0.05; done
	sent=$(awk '/^sent/ { print $2, $3 }' "$T/cslow$port.log"); got=$(awk '/^got/ { print $2, $3 }' "$T/slow$port.log")
	expect "a sleeping reader ($mode) took 40 MB in 1 MiB messages intact within 10 s" \
		[ -n "$sent" -a "$sent" = "$got" ]
}
sleeper serve 7412
sleeper serve-epoll 7413
