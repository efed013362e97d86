#!/usr/bin/env bash
# t_sock_reap: a lingering (closed) EMP connection is finished by the reaper while the process stays idle: its kernel socket goes (no CLOSE-WAIT left), not at the next close() or exit. A busy server's closing connections are torn down by its own thread, not the reaper's: 8 connt clients of 100 connections each at once, all intact over EMP, and the server's reaper thread woke at most once per 16 connections (6-24 times for 800, also beside a CPU hog; on e1da29c 89-105: a teardown's own engine work finished the next closing connection and woke it).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
FDEDGE=$ROOT/build/tests/sock/fdedge
# held N PORT PID: TCP sockets to PORT on host N that process PID still holds (TIME-WAIT is the kernel's)
held() { on "$1" ss -tanpH "dport = :$2" | grep -c "pid=$3," || true; }
for round in 1 2; do
	port=$((7970 + round))
	bg 2 "$T/s$round.log" "$ER" --strict "$SOCKT" sink-server $port
	srv=${PIDS[-1]}
	wait_port 2 $port
	bg 1 "$T/c$round.log" "$ER" --strict "$FDEDGE" close-idle 10.77.0.2 $port 300000 "$T/flag$round"
	cli=${PIDS[-1]}
	wait "$srv" || true
	grep -q "^end EOF after 300000 bytes" "$T/s$round.log" || { cat "$T/s$round.log"; fail "server did not get all bytes and EOF"; }
	for i in $(seq 100); do [ "$(held 1 $port $cli)" = 0 ] && break; sleep 0.1; done
	on 1 ss -tanpH "dport = :$port"
	kill -0 "$cli" 2>/dev/null || fail "the client exited (it must stay idle)"
	expect "round $round: the idle client's closed connection is gone (no kernel socket left)" [ "$(held 1 $port $cli)" = 0 ]
	touch "$T/flag$round"
	wait "$cli" || fail "client"
done

# churn: the server's own calls tear its closing connections down
port=7979
bg 2 "$T/churn.log" "$ER" --strict "$CONNT" server $port
srv=${PIDS[-1]}
wait_port 2 $port
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 $port 1 64 > "$T/warm.log" 2>&1 || { cat "$T/warm.log"; fail "first connection"; }
# the reaper thread (named emp-reaper, started at the first closing connection): voluntary switches = its wake-ups
rtid=""
for t in /proc/$srv/task/*; do [ "$(cat "$t/comm")" = emp-reaper ] && rtid=${t##*/}; done
[ -n "$rtid" ] || fail "the server has no thread named emp-reaper"
wakes() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$srv/task/$rtid/status"; }
w0=$(wakes); f0=$(emp_rx 2)
cps=()
for l in $(seq 8); do
	on 1 "$ER" --strict "$CONNT" client 10.77.0.2 $port 100 64 > "$T/churn$l.log" 2>&1 & cps+=($!)
done
for p in "${cps[@]}"; do wait "$p" || true; done
sleep 0.3
w1=$(wakes)
ok=$(cat "$T"/churn*.log | grep -c "^ok 100 conns" || true)
expect "8 clients of 100 connections each echoed intact over EMP ($ok)" [ "$ok" = 8 ]
at_least "EMP frames into the server host" $(( $(emp_rx 2) - f0 )) 1600
echo "the server's reaper thread woke $((w1 - w0)) times for 800 connections"
at_most "reaper wake-ups for 800 closed connections (89-105 when teardowns woke it)" $((w1 - w0)) 50
