#!/usr/bin/env bash
# t_sock_sockperf: sockperf ping-pong and throughput (epoll server) under emp-run --strict; EMP carried the messages.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
bg 2 "$T/srv.log" "$ER" --strict sockperf sr --tcp -p 11111
wait_port 2 11111
f0=$(emp_rx 2)
on 1 "$ER" --strict sockperf pp --tcp -i 10.77.0.2 -p 11111 -t 2 -m 64 > "$T/pp.log" 2>&1 || { cat "$T/pp.log"; fail "ping-pong"; }
grep -E "Summary|observations" "$T/pp.log"
n=$(sed -n 's/.*Total \([0-9]*\) observations.*/\1/p' "$T/pp.log")
[ -n "$n" ] && [ "$n" -gt 100 ] || fail "ping-pong: too few observations ($n)"
at_least "EMP frames into h2 (one per ping at least)" $(( $(emp_rx 2) - f0 )) "$n"
b0=$(rxb 2)
on 1 "$ER" --strict sockperf tp --tcp -i 10.77.0.2 -p 11111 -t 2 -m 1400 > "$T/tp.log" 2>&1 || { cat "$T/tp.log"; fail "throughput"; }
grep -E "Summary" "$T/tp.log"
mbps=$(sed -n 's/.*BandWidth is [0-9.]* MBps (\([0-9]*\)\..*/\1/p' "$T/tp.log")
[ -n "$mbps" ] && [ "$mbps" -gt 10 ] || fail "throughput: $mbps Mbit/s"
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) $(( mbps * 1000000 / 8 ))
