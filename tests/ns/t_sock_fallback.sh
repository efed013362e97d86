#!/usr/bin/env bash
# t_sock_fallback: preloaded client + plain server and plain client + preloaded server stay on kernel TCP, data intact.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
head -c 5000000 /dev/urandom > "$T/in"
want=$(sha256sum < "$T/in")
f0=$(emp_rx 2)
# plain server, preloaded client (the client falls back after the negotiation bound)
bg 2 "$T/s1.log" socat -u TCP-LISTEN:7200,reuseaddr "OPEN:$T/out1,creat,trunc"
wait_port 2 7200
on 1 "$ER" socat -u "OPEN:$T/in" TCP:10.77.0.2:7200
wait "${PIDS[-1]}"
expect "preloaded client -> plain server" [ "$(sha256sum < "$T/out1")" = "$want" ]
# preloaded server, plain client (fast fallback: the client host refuses the offer)
bg 2 "$T/s2.log" "$ER" socat -u TCP-LISTEN:7201,reuseaddr "OPEN:$T/out2,creat,trunc"
wait_port 2 7201
start=$(date +%s%N)
on 1 socat -u "OPEN:$T/in" TCP:10.77.0.2:7201
wait "${PIDS[-1]}"
expect "plain client -> preloaded server" [ "$(sha256sum < "$T/out2")" = "$want" ]
# both directions with a speaking-first server: preloaded server echo, plain client
bg 2 "$T/s3.log" "$ER" "$SOCKT" echo-server 7202 1 1
wait_port 2 7202
on 1 "$SOCKT" echo-client 10.77.0.2 7202 0 1 300000
bg 2 "$T/s4.log" "$SOCKT" echo-server 7203 1 1
wait_port 2 7203
on 1 "$ER" "$SOCKT" echo-client 10.77.0.2 7203 0 1 300000
at_most "EMP frames into h2 (fallback must not use EMP data)" $(( $(emp_rx 2) - f0 )) 50
# a `use kernel port N` rule keeps that port on the kernel even in strict mode (emp-run --conf)
{ cat "$EMP_CONF"; echo "use kernel port 7204"; } > "$T/rules.conf"
f0=$(emp_rx 2)
bg 2 "$T/s5.log" "$ER" --conf "$T/rules.conf" --strict socat -u TCP-LISTEN:7204,reuseaddr "OPEN:$T/out5,creat,trunc"
wait_port 2 7204
on 1 "$ER" --conf "$T/rules.conf" --strict socat -u "OPEN:$T/in" TCP:10.77.0.2:7204
wait "${PIDS[-1]}"
expect "rule 'use kernel port' transfer intact" [ "$(sha256sum < "$T/out5")" = "$want" ]
at_most "EMP frames into h2 under a kernel rule" $(( $(emp_rx 2) - f0 )) 20
