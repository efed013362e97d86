#!/usr/bin/env bash
# t_sock_inetd: a preloaded server that hands each accepted connection to a new program before using it (inetd's way, git daemon's; here socat TCP-LISTEN,fork with EXEC:cat,nofork: the forked child execs cat on the socket). An EMP connection cannot cross exec, so the server's exec settles it on kernel TCP and tells the client at once (an OFFER, then its REJECT): 20 preloaded connt connections echo intact, each client hears "server gave up on EMP" and none waits out its bound ("no EMP offer", on fbe9816 every one did: 500 ms each); its first write, sent over EMP behind its HELLO, goes again on kernel TCP; under --strict the client is refused with that reason.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
bg 2 "$T/server.log" "$ER" socat TCP-LISTEN:7380,fork,reuseaddr EXEC:cat,nofork
wait_port 2 7380
on 1 "$ER" --debug "$CONNT" client 10.77.0.2 7380 20 2000 > "$T/c.log" 2>&1 || { cat "$T/c.log"; fail "20 connections to an inetd-style server"; }
grep "^ok" "$T/c.log"
expect "20 connections echoed intact by cat, exec'd on each" grep -q "^ok 20 conns" "$T/c.log"
told=$(grep -c "server gave up on EMP" "$T/c.log" || true)
bound=$(grep -c "no EMP offer" "$T/c.log" || true)
replayed=$(grep -c "sent again on kernel TCP" "$T/c.log" || true)
at_least "connections told at once that the server gave up EMP (an OFFER and its REJECT)" "$told" 20
at_most "connections that waited out the negotiation bound" "$bound" 0
at_least "first writes sent again on kernel TCP" "$replayed" 20
if on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7380 1 100 > "$T/strict.log" 2>&1; then fail "a strict client was served on kernel TCP"; fi
expect "a strict client is refused, and says why" grep -q "server gave up on EMP; strict mode refuses kernel TCP" "$T/strict.log"
