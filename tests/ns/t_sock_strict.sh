#!/usr/bin/env bash
# t_sock_strict: emp-run --strict refuses kernel TCP to a configured peer that does not speak EMP, with an `emp:` message.
# timeout: 30
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
bg 2 "$T/s.log" socat -u TCP-LISTEN:7300,reuseaddr OPEN:/dev/null
wait_port 2 7300
if on 1 "$ER" --strict socat -u OPEN:/etc/hostname TCP:10.77.0.2:7300 2>"$T/c.err"; then
	fail "strict client connected to a plain server"
fi
cat "$T/c.err"
expect "client says emp: ... strict" grep -q "^emp: .*strict" "$T/c.err"
# strict server, plain client: the connection is refused on first use
bg 2 "$T/s2.log" "$ER" --strict "$SOCKT" echo-server 7301 0 1
wait_port 2 7301
if on 1 "$SOCKT" echo-client 10.77.0.2 7301 0 0 1000 2>"$T/c2.err"; then
	fail "plain client got an echo from a strict server"
fi
sleep 0.2
cat "$T/s2.log"
expect "server says emp: ... strict" grep -q "^emp: .*strict" "$T/s2.log"
# and a preloaded pair under strict works
bg 2 "$T/s3.log" "$ER" --strict "$SOCKT" echo-server 7302 0 1
wait_port 2 7302
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7302 0 0 100000
