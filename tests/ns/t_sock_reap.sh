#!/usr/bin/env bash
# t_sock_reap: a lingering (closed) EMP connection is finished by the reaper while the process stays idle: its kernel socket goes (no CLOSE-WAIT left), not at the next close() or exit.
# timeout: 40
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
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
