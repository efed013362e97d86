#!/usr/bin/env bash
# t_fault_descriptors: more connections than the engine has descriptors for: each connection takes all it needs at setup, the ones that do not fit use kernel TCP (said once, with the fix), and every connection, EMP or kernel, delivers its bytes intact.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
LT=$ROOT/build/tests/sock/loadt
N=12 B=1048576
cluster_up
# 256 descriptors: room for 6 connections of 37 (16 + 4 receives, 16 + 1 sends) per process
echo "option descriptors 256" >> "$EMP_CONF"
export EMP_SOCK_BUFS=16
bg 2 "$T/s.log" env EMP_SOCK_DEBUG=1 "$ER" "$LT" server 7800 "$N" "$B" 60
wait_port 2 7800
rx0=$(emp_rx 2)
on 1 env EMP_SOCK_DEBUG=1 "$ER" "$LT" client 1 "$N" "$B" 60 10.77.0.2:7800 > "$T/c.log" 2>&1 || { tail -20 "$T/c.log"; fail "client failed"; }
wait "${PIDS[-1]}" || { tail -20 "$T/s.log"; fail "server failed"; }
grep -E "connections, " "$T/c.log" "$T/s.log"
grep -h "out of EMP descriptors" "$T/c.log" "$T/s.log" | head -2
emp=$(grep -c ": EMP with" "$T/c.log" || true)
kern=$(grep -c ": kernel TCP with" "$T/c.log" || true)
echo "client: $emp connections over EMP, $kern over kernel TCP"
expect "client verified all $N" grep -q "^client .* $N connections, $N ok, 0 bad" "$T/c.log"
expect "server verified all $N" grep -q "^server: .*$N connections, $N ok, 0 bad" "$T/s.log"
at_least "connections over EMP" "$emp" 1
at_most "connections over EMP (6 fit)" "$emp" 6
expect "every other connection on kernel TCP" [ $((emp + kern)) -eq "$N" ]
expect "the shortage was said, with the option to raise" grep -q "out of EMP descriptors.*option descriptors" "$T/c.log" "$T/s.log"
at_least "EMP carried bytes" $(( $(emp_rx 2) - rx0 )) $(( emp * B / 1500 ))
