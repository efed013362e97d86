#!/usr/bin/env bash
# t_sock_lent: an event-loop reader (non-blocking reads of 128K, 3000, 64K, 2048, 100000 bytes after epoll) of a 40 MB stream, both under emp-run --strict: the bytes arrive intact (SHA-256) and its engine leaves most frames in the device's ring until the read copies them out (rx_lent: one copy, not two); with EMP_LEND=0 none is; a reader asleep 60 ms after every 2 MB lets the ring come round to lent frames, which its engine then copies into the receive slots (lent_placed), still intact.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
PY=/usr/bin/python3
PROG=$ROOT/tests/ns/progs/blockread.py
BYTES=40000000
counters() {   # pid: device drops, rx_lent, lent_placed, bytes_received, once the bytes are counted
	local c
	for i in $(seq 30); do
		on 2 "$BIN/empstat" --json > "$T/stat.json"
		c=$(python3 -c "
import json
d = json.load(open('$T/stat.json'))
x = [x for x in d['endpoints'] if x['pid'] == $1][0]
e = x['counters']
print(x['drops'].get('device', 0), e.get('rx_lent', 0), e.get('lent_placed', 0), e.get('bytes_received', 0))")
		[ "${c##* }" -ge $BYTES ] && break
		sleep 0.1
	done
	echo "$c"
}
run() {   # port, label, env for the reader, pause ms
	bg 2 "$T/server$1.log" env $3 "$ER" --strict "$PY" "$PROG" serve-epoll "$1" $4
	local spid=${PIDS[-1]}
	wait_port 2 "$1"
	on 1 "$ER" --strict "$PY" "$PROG" send 10.77.0.2 "$1" $BYTES > "$T/client$1.log" 2>&1 || { cat "$T/client$1.log"; fail "sender failed"; }
	for i in $(seq 200); do grep -q "^got" "$T/server$1.log" && break; sleep 0.1; done
	local sent got
	sent=$(awk '/^sent/ { print $2, $3 }' "$T/client$1.log")
	got=$(awk '/^got/ { print $2, $3 }' "$T/server$1.log")
	expect "$2: 40 MB intact (SHA-256)" [ -n "$sent" -a "$sent" = "$got" ]
	read -r ddrops lent placed bytes < <(counters $spid)
	echo "$2: frames lent $lent, placed $placed, bytes $bytes, dropped by the device (its ring full) $ddrops"
	at_least "$2: bytes the reader's engine received (EMP carried the stream)" "$bytes" $BYTES
}
run 7410 "EMP_LEND=0" "EMP_LEND=0" ""
expect "EMP_LEND=0: no frame lent" [ "$lent" = 0 ]
run 7411 "lending" "" ""
# a 1460-byte payload per frame: about 27,400 frames; all but each message's first may be lent
at_least "lending: frames left in the ring until read (half of the stream's at least)" "$lent" $(( BYTES / 1460 / 2 ))
run 7412 "a reader that sleeps" "" 60
at_least "a reader that sleeps: frames lent" "$lent" $(( BYTES / 1460 / 4 ))
at_least "a reader that sleeps: lent frames copied into the slots when the ring came round" "$placed" 1
expect "no connection fell back" bash -c "! grep -qhE 'kernel TCP|strict mode' '$T'/*.log"
