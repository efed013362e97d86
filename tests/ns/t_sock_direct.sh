#!/usr/bin/env bash
# t_sock_direct: a plain program reading with blocking calls (Python's socket.recv_into, sizes 128K, 3000, 64K, 2048, 100000 in turn) from one writing 1..300000-byte pieces, both under emp-run --strict: 40 MB arrive intact (SHA-256), and the reader's engine counts most messages as landed straight in the waiting reader's buffer (rx_direct: one copy, not two), the rest read from the receive slots as before.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
PY=/usr/bin/python3
PROG=$ROOT/tests/ns/progs/blockread.py
bg 2 "$T/server.log" "$ER" --strict "$PY" "$PROG" serve 7400
spid=${PIDS[-1]}
wait_port 2 7400
on 1 "$ER" --strict "$PY" "$PROG" send 10.77.0.2 7400 40000000 > "$T/client.log" 2>&1 || { cat "$T/client.log"; fail "sender failed"; }
for i in $(seq 100); do grep -q "^got" "$T/server.log" && break; sleep 0.1; done
cat "$T/client.log" "$T/server.log"
sent=$(awk '/^sent/ { print $2, $3 }' "$T/client.log")
got=$(awk '/^got/ { print $2, $3 }' "$T/server.log")
expect "40 MB in blocking reads of five sizes, intact (SHA-256)" [ -n "$sent" -a "$sent" = "$got" ]
counters() {
	on 2 "$BIN/empstat" --json > "$T/stat.json"
	python3 -c "
import json
d = json.load(open('$T/stat.json'))
e = [x for x in d['endpoints'] if x['pid'] == $spid][0]['counters']
print(e.get('rx_direct', 0), e.get('msgs_received', 0), e.get('bytes_received', 0))"
}
for i in $(seq 30); do   # the engine publishes its counters now and then
	read -r direct msgs bytes < <(counters)
	[ "$bytes" -ge 40000000 ] && break
	sleep 0.1
done
echo "reader: $direct of $msgs messages straight into its buffer"
at_least "bytes the reader's engine received (EMP carried the stream)" "$bytes" 40000000
at_least "messages landed straight in the waiting reader's buffer (one in eight at least; 51-60 % measured, 0 without the lending)" "$direct" $(( msgs / 8 ))
expect "no connection fell back" bash -c "! grep -qhE 'kernel TCP|strict mode' '$T'/*.log"
