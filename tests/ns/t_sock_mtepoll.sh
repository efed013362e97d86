#!/usr/bin/env bash
# t_sock_mtepoll: a 4-thread epoll echo server (one set and loop per thread; LT and ET; connections handed to sleeping threads' sets, or SO_REUSEPORT listeners) and a 4-thread client, 128 connections of checksummed records, all under --strict: every byte verified at both ends, EMP carried them.
# timeout: 120
# handoff: the main thread adds each accepted connection to a set whose thread already sleeps
# in epoll_wait; the shim's own entries (device, wake, liveness) then join that sleep and
# must never reach the application (before the fix they did: events with foreign data).
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
MT=$ROOT/build/tests/sock/mtepoll
THREADS=4 CONNS=128 BYTES=${MTEPOLL_BYTES:-100000}
cluster_up
port=7810
for mode in "lt handoff" "et handoff" "lt reuseport" "et reuseport"; do
	set -- $mode
	port=$((port + 1))
	b1=$(rxb 1); b2=$(rxb 2)
	bg 2 "$T/s-$1-$2.log" "$ER" --strict "$MT" server $port $THREADS $CONNS "$1" "$2"
	srv=${PIDS[-1]}
	wait_port 2 $port
	on 1 "$ER" --strict "$MT" client 10.77.0.2 $port $THREADS $CONNS "$BYTES" "$1" $port > "$T/c-$1-$2.log" 2>&1 \
		|| { tail -5 "$T/c-$1-$2.log"; cat "$T/s-$1-$2.log"; fail "$1 $2: client"; }
	wait "$srv" || { tail -20 "$T/s-$1-$2.log"; fail "$1 $2: server"; }
	echo "== $1 $2"; cat "$T/c-$1-$2.log" "$T/s-$1-$2.log"
	cl=$(sed -n 's/^client: \([0-9]*\) connections, \([0-9]*\) records, \([0-9]*\) bytes, 0 errors$/\1 \2 \3/p' "$T/c-$1-$2.log")
	sv=$(sed -n 's/^server: \([0-9]*\) connections, \([0-9]*\) records, \([0-9]*\) bytes, 0 errors$/\1 \2 \3/p' "$T/s-$1-$2.log")
	[ -n "$cl" ] && [ "$cl" = "$sv" ] || fail "$1 $2: client ($cl) and server ($sv) disagree"
	set -- $cl
	[ "$1" = $CONNS ] && [ "$3" -ge $((CONNS * BYTES)) ] || fail "$mode: $1 connections, $3 bytes"
	echo "ok: $mode: $1 connections, $2 records, $3 bytes checked by the server and echoed intact"
	at_least "EMP bytes into h2 ($mode)" $(( $(rxb 2) - b2 )) "$3"
	at_least "EMP bytes into h1 ($mode)" $(( $(rxb 1) - b1 )) "$3"
done
