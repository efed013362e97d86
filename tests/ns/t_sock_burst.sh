#!/usr/bin/env bash
# t_sock_burst: one client process issues 200 non-blocking connects at once to one server (both emp-run --strict): all negotiate EMP and verify their bytes, within a bound; a burst to a plain server falls back just as fast; a busy server that accepts late (3 s) still gets EMP.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
LT=$ROOT/build/tests/sock/loadt
[ -x "$LT" ] || fail "build first (make)"
N=${SOCK_BURST_CONNS:-200}
B=100000
cluster_up
# strict, both sides preloaded: every connection must agree on EMP (a fallback is an error)
r1=$(emp_rx 1) r2=$(emp_rx 2)
bg 2 "$T/s.log" "$ER" --strict "$LT" server 7900 "$N" "$B" 60
srv=${PIDS[-1]}
wait_port 2 7900
t0=$(date +%s%N)
on 1 "$ER" --strict "$LT" client 1 "$N" "$B" 60 --burst 10.77.0.2:7900 > "$T/c.log" 2>&1 || { cat "$T/c.log"; tail -5 "$T/s.log"; fail "burst client"; }
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$srv" || { cat "$T/s.log"; fail "burst server"; }
cat "$T/c.log" "$T/s.log"
expect "client verified all $N" grep -q "^client 1: $N connections, $N ok, 0 bad" "$T/c.log"
expect "server verified all $N" grep -q "^server: $N connections, $N ok, 0 bad" "$T/s.log"
at_least "EMP frames into h1" $(( $(emp_rx 1) - r1 )) $(( N * B / 1500 ))
at_least "EMP frames into h2" $(( $(emp_rx 2) - r2 )) $(( N * B / 1500 ))
# one negotiation per round trip, not one per EMP_NEG_TIMEOUT_MS (500 ms; 1 of 200 made it before)
cms=$(sed -n "s/^client 1: all $N connected in \([0-9.]*\) s/\1/p" "$T/c.log" | awk '{ print int($1 * 1000) }')
at_most "burst of $N connected over EMP (ms)" "${cms:-999999}" 5000
at_most "burst of $N connected and verified (ms)" "$ms" 15000
# a burst of preloaded (not strict) connects to a plain server: every connection falls back after
# the short bound from its own connect, all at once, and the bytes stay intact on kernel TCP
r2=$(emp_rx 2)
bg 2 "$T/p.log" "$LT" server 7901 50 "$B" 60
srv=${PIDS[-1]}
wait_port 2 7901
t0=$(date +%s%N)
on 1 "$ER" "$LT" client 2 50 "$B" 60 --burst 10.77.0.2:7901 > "$T/pc.log" 2>&1 || { cat "$T/pc.log"; fail "burst client to a plain server"; }
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$srv" || { cat "$T/p.log"; fail "plain server"; }
cat "$T/pc.log"
expect "plain server verified all 50" grep -q "^server: 50 connections, 50 ok, 0 bad" "$T/p.log"
at_most "EMP frames into h2 (plain server)" $(( $(emp_rx 2) - r2 )) 50
at_most "burst of 50 to a plain server (ms)" "$ms" 5000
# a busy server (strict): it accepts one connection per 150 ms, so the last of a burst of 20 waits
# about 3 s in its listen backlog before the server first uses it and offers EMP. The server has
# offered this client EMP before (the first connection), so the client waits for it up to
# EMP_NEG_TIMEOUT_KNOWN_MS (5 s) rather than refusing after EMP_NEG_TIMEOUT_MS (500 ms)
r1=$(emp_rx 1)
bg 2 "$T/b.log" "$ER" --strict "$LT" server 7902 20 "$B" 60 --accept-gap 150
srv=${PIDS[-1]}
wait_port 2 7902
on 1 "$ER" --strict "$LT" client 3 20 "$B" 60 --burst 10.77.0.2:7902 > "$T/bc.log" 2>&1 || { cat "$T/bc.log"; tail -5 "$T/b.log"; fail "burst client to a busy server"; }
wait "$srv" || { cat "$T/b.log"; fail "busy server"; }
cat "$T/bc.log"
expect "busy server verified all 20" grep -q "^server: 20 connections, 20 ok, 0 bad" "$T/b.log"
cms=$(sed -n "s/^client 3: all 20 connected in \([0-9.]*\) s/\1/p" "$T/bc.log" | awk '{ print int($1 * 1000) }')
at_least "the last connection waited in the backlog (ms)" "${cms:-0}" 2000
at_least "EMP frames into h1 (busy server)" $(( $(emp_rx 1) - r1 )) $(( 20 * B / 1500 ))
