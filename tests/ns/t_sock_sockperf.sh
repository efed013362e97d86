#!/usr/bin/env bash
# t_sock_sockperf: sockperf ping-pong and throughput (epoll server) under emp-run --strict; EMP carried the messages; at a paced 500 requests a second the server's other threads (the progress thread) wake less than once per request (they used to tick every millisecond while the application thread came and went).
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
# paced: 500 requests a second; the application thread serves them itself, and the server's other
# threads (progress thread) must not wake for each one (voluntary context switches, /proc)
sp=${PIDS[0]}
[ "$(cat /proc/$sp/comm 2>/dev/null)" = sockperf ] || fail "the server pid ($sp) is not sockperf"
others() { local s=0 t; for t in /proc/$sp/task/*; do [ "${t##*/}" = "$sp" ] && continue; s=$((s + $(awk '/^voluntary_ctxt/ { print $2 }' "$t/status"))); done; echo $s; }
v0=$(others)
on 1 "$ER" --strict sockperf pp --tcp -i 10.77.0.2 -p 11111 -t 3 -m 64 --mps 500 > "$T/paced.log" 2>&1 || { cat "$T/paced.log"; fail "paced ping-pong"; }
v1=$(others)
n=$(sed -n 's/.*Total \([0-9]*\) observations.*/\1/p' "$T/paced.log")
[ -n "$n" ] && [ "$n" -gt 500 ] || fail "paced ping-pong: too few observations ($n)"
at_most "the server's other threads' wake-ups per 100 paced requests" $(( (v1 - v0) * 100 / n )) 100
