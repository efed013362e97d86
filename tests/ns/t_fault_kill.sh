#!/usr/bin/env bash
# t_fault_kill: a peer process killed mid-stream (reader or writer, server or client side) is noticed within 2 s by the surviving process (EPIPE/ECONNRESET for a writer, EOF/ECONNRESET for a reader), whose other EMP connection keeps echoing and verifying. A killed client of a single-threaded server, over epoll and over poll, does not stall it: another client's ping-pong waits at most 250 ms for any reply while the server's grace for the killed one's EMP FIN (500 ms) runs, and the killed connection is still decided (the grace was waited for in the application's thread: a 500 ms stall).
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
FT=$ROOT/build/tests/sock/faultt
[ -x "$FT" ] || fail "build first (make)"
cluster_up
TIMES=()

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches (default 5 s)
wait_for() {
	local i n=$(( ${3:-5} * 20 ))
	for i in $(seq "$n"); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	cat "$1"; fail "no '$2' in $(basename "$1") after ${3:-5} s"
}
# killed PID: SIGKILL, the time (ms) it was sent
kill9() { kill -KILL "$1" 2>/dev/null || true; date +%s%3N; }
# noticed LOG PREFIX KILLED_AT ALLOWED-REGEX WHAT: the survivor's "PREFIXend ERR ... at MS" line
noticed() {
	local log=$1 pre=$2 at=$3 re=$4 what=$5 line t
	wait_for "$log" "^${pre}end " 3
	line=$(grep -E "^${pre}end " "$log")
	echo "$what: $line"
	[[ $line =~ ^${pre}end\ ($re)\ after ]] || fail "$what: ended with '$line', expected $re"
	t=${line##* }
	at_most "$what: noticed within (ms)" $(( t - at )) 2000
	TIMES+=("$what $(( t - at )) ms")
}

# client_case N VICTIM... MODE ERRORS WHAT: the survivor is a client (h1) with two connections to h2: A (MODE:
# write or read) to the victim server VICTIM (a command and its first argument) on port 7599+2N, killed after
# 1 s, and B echoing to a one-shot echo server on port 7600+2N; A must end with ERRORS soon, B keep echoing
client_case() {
	local n=$1 vprog=$2 vcmd=$3 mode=$4 errors=$5 what=$6 pa=$((7599 + 2 * $1)) pb=$((7600 + 2 * $1))
	local victim surv at
	PIDS=()
	bg 2 "$T/k$n.log" "$ER" --strict "$vprog" "$vcmd" $pa; victim=${PIDS[-1]}
	bg 2 "$T/e$n.log" "$ER" --strict "$SOCKT" echo-server $pb 0 1
	wait_port 2 $pa; wait_port 2 $pb
	bg 1 "$T/s$n.log" "$ER" --strict "$FT" two 10.77.0.2 $pa "$mode" $pb; surv=${PIDS[-1]}
	wait_for "$T/s$n.log" "^connected"
	sleep 1
	at=$(kill9 "$victim")
	noticed "$T/s$n.log" "A " "$at" "$errors" "$what"
	wait "$surv" || { cat "$T/s$n.log"; fail "the other connection failed after the peer was killed"; }
	expect "other connection kept echoing ($(grep '^B ok' "$T/s$n.log"))" grep -q "^B ok" "$T/s$n.log"
}
# server_case N MODE VICTIM... ERRORS WHAT: the survivor is a server (h2, port 7602+N) with two accepted
# connections: A (MODE: read or write) from the victim client VICTIM (a command and its first argument) on
# h1, killed after 1 s, and B from an echo-for client; A must end with ERRORS soon, B keep echoing
server_case() {
	local n=$1 mode=$2 vprog=$3 vcmd=$4 errors=$5 what=$6 port=$((7602 + $1))
	local victim surv echoer at
	PIDS=()
	bg 2 "$T/s$n.log" "$ER" --strict "$FT" two-server $port "$mode"; surv=${PIDS[-1]}
	wait_port 2 $port
	bg 1 "$T/k$n.log" "$ER" --strict "$vprog" "$vcmd" 10.77.0.2 $port; victim=${PIDS[-1]}
	wait_for "$T/s$n.log" "^accepted A"
	bg 1 "$T/e$n.log" "$ER" --strict "$FT" echo-for 10.77.0.2 $port 3; echoer=${PIDS[-1]}
	wait_for "$T/s$n.log" "^accepted B"
	sleep 1
	at=$(kill9 "$victim")
	noticed "$T/s$n.log" "A " "$at" "$errors" "$what"
	wait "$echoer" || { cat "$T/e$n.log"; fail "the server's other connection failed"; }
	wait "$surv" || fail "server exited with an error"
	expect "server's other connection kept echoing ($(cat "$T/e$n.log"))" grep -q "^echo ok" "$T/e$n.log"
}

# 1. survivor = client with two connections; its reader peer (server, h2) is killed
client_case 1 "$SOCKT" sink-server write "Broken pipe|Connection reset by peer" "writer, its reader killed"
# 2. survivor = client; its writer peer (server, h2) is killed
client_case 2 "$FT" stream-server read "EOF|Connection reset by peer" "reader, its writer killed"
# 3. survivor = server with two accepted connections; the writing client (h1) is killed
server_case 3 read "$SOCKT" stream-client "EOF|Connection reset by peer" "server reader, its writer killed"
# 4. survivor = server; the reading client (h1) is killed
server_case 4 write "$FT" sink-client "Broken pipe|Connection reset by peer" "server writer, its reader killed"

# every connection was on EMP: the killed ones and the echoes
for h in 1 2; do at_least "EMP frames into h$h" "$(emp_rx $h)" 1000; done
printf 'detection: %s\n' "${TIMES[@]}"

# 5. a single-threaded server serves a continuous echo (the victim) and a
# ping-pong client; the ping-pong client kills the victim at 0.5 s; the
# longest wait for one of its replies must stay well below the server's grace
# for the victim's EMP FIN (500 ms), which runs meanwhile; the grace ends
# with the victim's connection reset. Over epoll (connt) and poll (Python).
grace_case() { # grace_case PORT LABEL SERVER...
	local port=$1 label=$2 vpid gap; shift 2
	bg 2 "$T/s$port.log" "$ER" --strict --debug "$@" "$port"
	wait_port 2 "$port"
	bg 1 "$T/v$port.log" "$ER" --strict "$ROOT/build/tests/sock/connt" hold 10.77.0.2 "$port" 20
	vpid=${PIDS[-1]}
	wait_for "$T/s$port.log" "EMP with" 5
	sleep 0.2
	on 1 "$ER" --strict python3 "$ROOT/tests/ns/progs/pingwin.py" 10.77.0.2 "$port" "$vpid" > "$T/p$port.log" 2>&1 || { cat "$T/p$port.log"; fail "$label: ping-pong client"; }
	echo "$label: $(cat "$T/p$port.log")"
	gap=$(awk '/^window/ { print $4 }' "$T/p$port.log")
	at_most "$label: the longest wait for a reply (ms) while the server's grace for the killed client's FIN (500 ms) ran" "${gap:-9999}" 250
	wait_for "$T/s$port.log" "kernel connection closed \(EMP FIN missing\)" 3
}
grace_case 7505 epoll "$ROOT/build/tests/sock/connt" server
grace_case 7506 poll python3 "$ROOT/tests/ns/progs/negbacklog.py" pollserver
