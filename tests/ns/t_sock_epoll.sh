#!/usr/bin/env bash
# t_sock_epoll: an edge-triggered epoll echo server (preloaded) serving EMP, plain and multi-threaded EMP clients at once.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
b0=$(rxb 2)
bg 2 "$T/s.log" "$ER" "$SOCKT" epoll-et-server 7700 9
srv=${PIDS[-1]}
wait_port 2 7700
pids=()
for i in 1 2 3 4; do on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7700 $((i % 2)) 0 3000000 > "$T/c$i.log" 2>&1 & pids+=($!); done
on 1 "$SOCKT" echo-client 10.77.0.2 7700 0 0 3000000 > "$T/c5.log" 2>&1 & pids+=($!)
# four threads of one preloaded process, each with its own EMP connection
on 1 "$ER" --strict "$SOCKT" threads-client 10.77.0.2 7700 4 2000000 > "$T/c6.log" 2>&1 & pids+=($!)
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$T"/c*.log
[ $rc = 0 ] || fail "a client failed"
wait "$srv" || { cat "$T/s.log"; fail "server"; }
cat "$T/s.log"
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 20000000
