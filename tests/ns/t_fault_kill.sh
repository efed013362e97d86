#!/usr/bin/env bash
# t_fault_kill: a peer process killed mid-stream (reader or writer, server or client side) is noticed within 2 s by the surviving process (EPIPE/ECONNRESET for a writer, EOF/ECONNRESET for a reader), whose other EMP connection keeps echoing and verifying.
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

# 1. survivor = client with two connections; its reader peer (server, h2) is killed
bg 2 "$T/k1.log" "$ER" --strict "$SOCKT" sink-server 7601; victim=${PIDS[-1]}
bg 2 "$T/e1.log" "$ER" --strict "$SOCKT" echo-server 7602 0 1
wait_port 2 7601; wait_port 2 7602
bg 1 "$T/s1.log" "$ER" --strict "$FT" two 10.77.0.2 7601 write 7602; surv=${PIDS[-1]}
wait_for "$T/s1.log" "^connected"
sleep 1
at=$(kill9 "$victim")
noticed "$T/s1.log" "A " "$at" "Broken pipe|Connection reset by peer" "writer, its reader killed"
wait "$surv" || { cat "$T/s1.log"; fail "the other connection failed after the peer was killed"; }
expect "other connection kept echoing ($(grep '^B ok' "$T/s1.log"))" grep -q "^B ok" "$T/s1.log"

# 2. survivor = client; its writer peer (server, h2) is killed
PIDS=()
bg 2 "$T/k2.log" "$ER" --strict "$FT" stream-server 7603; victim=${PIDS[-1]}
bg 2 "$T/e2.log" "$ER" --strict "$SOCKT" echo-server 7604 0 1
wait_port 2 7603; wait_port 2 7604
bg 1 "$T/s2.log" "$ER" --strict "$FT" two 10.77.0.2 7603 read 7604; surv=${PIDS[-1]}
wait_for "$T/s2.log" "^connected"
sleep 1
at=$(kill9 "$victim")
noticed "$T/s2.log" "A " "$at" "EOF|Connection reset by peer" "reader, its writer killed"
wait "$surv" || { cat "$T/s2.log"; fail "the other connection failed after the peer was killed"; }
expect "other connection kept echoing ($(grep '^B ok' "$T/s2.log"))" grep -q "^B ok" "$T/s2.log"

# 3. survivor = server with two accepted connections; the writing client (h1) is killed
PIDS=()
bg 2 "$T/s3.log" "$ER" --strict "$FT" two-server 7605 read; surv=${PIDS[-1]}
wait_port 2 7605
bg 1 "$T/k3.log" "$ER" --strict "$SOCKT" stream-client 10.77.0.2 7605; victim=${PIDS[-1]}
wait_for "$T/s3.log" "^accepted A"
bg 1 "$T/e3.log" "$ER" --strict "$FT" echo-for 10.77.0.2 7605 3; echoer=${PIDS[-1]}
wait_for "$T/s3.log" "^accepted B"
sleep 1
at=$(kill9 "$victim")
noticed "$T/s3.log" "A " "$at" "EOF|Connection reset by peer" "server reader, its writer killed"
wait "$echoer" || { cat "$T/e3.log"; fail "the server's other connection failed"; }
wait "$surv" || fail "server exited with an error"
expect "server's other connection kept echoing ($(cat "$T/e3.log"))" grep -q "^echo ok" "$T/e3.log"

# 4. survivor = server; the reading client (h1) is killed
PIDS=()
bg 2 "$T/s4.log" "$ER" --strict "$FT" two-server 7606 write; surv=${PIDS[-1]}
wait_port 2 7606
bg 1 "$T/k4.log" "$ER" --strict "$FT" sink-client 10.77.0.2 7606; victim=${PIDS[-1]}
wait_for "$T/s4.log" "^accepted A"
bg 1 "$T/e4.log" "$ER" --strict "$FT" echo-for 10.77.0.2 7606 3; echoer=${PIDS[-1]}
wait_for "$T/s4.log" "^accepted B"
sleep 1
at=$(kill9 "$victim")
noticed "$T/s4.log" "A " "$at" "Broken pipe|Connection reset by peer" "server writer, its reader killed"
wait "$echoer" || { cat "$T/e4.log"; fail "the server's other connection failed"; }
wait "$surv" || fail "server exited with an error"
expect "server's other connection kept echoing ($(cat "$T/e4.log"))" grep -q "^echo ok" "$T/e4.log"

# every connection was on EMP: the killed ones and the echoes
for h in 1 2; do at_least "EMP frames into h$h" "$(emp_rx $h)" 1000; done
printf 'detection: %s\n' "${TIMES[@]}"
