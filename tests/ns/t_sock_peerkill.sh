#!/usr/bin/env bash
# t_sock_peerkill: a peer killed mid-stream gives ECONNRESET (reader) or EPIPE/ECONNRESET (writer) within 2 s, never a hang.
# timeout: 40
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
# peerkill VICTIM PORT N READY ERRORS WHAT: a reader (sink-server, h2) and a writer (stream-client, h1) on PORT,
# logs $T/rN.log and $T/wN.log; 1 s in, the VICTIM (reader or writer; READY must be in its log by then) is
# killed; the survivor must end with one of ERRORS (not a clean EOF) soon: "SURVIVOR sees WHAT"
peerkill() {
	local victim=$1 port=$2 n=$3 ready=$4 errors=$5 what=$6 surv vlog slog vpid killed line at i
	local rcmd=("$ER" --strict "$SOCKT" sink-server "$port") wcmd=("$ER" --strict "$SOCKT" stream-client 10.77.0.2 "$port")
	PIDS=()
	if [ "$victim" = writer ]; then
		surv=reader vlog=$T/w$n.log slog=$T/r$n.log
		bg 2 "$slog" "${rcmd[@]}"
		wait_port 2 "$port"
		on 1 "${wcmd[@]}" > "$vlog" 2>&1 &
		vpid=$!
	else
		surv=writer vlog=$T/r$n.log slog=$T/w$n.log
		on 2 "${rcmd[@]}" > "$vlog" 2>&1 &
		vpid=$!
		wait_port 2 "$port"
		bg 1 "$slog" "${wcmd[@]}"
	fi
	sleep 1
	grep -q "$ready" "$vlog" || fail "$victim did not ${ready%ed}"
	pkill -KILL -P "$vpid" 2>/dev/null || true; kill -KILL "$vpid" 2>/dev/null || true
	killed=$(date +%s%3N)
	for i in $(seq 60); do grep -q "^end" "$slog" && break; sleep 0.05; done
	cat "$slog"
	line=$(grep "^end" "$slog") || fail "$surv still blocked 3 s after the $victim died"
	expect "$surv sees $what" grep -Eq "^end ($errors)" "$slog"
	at=${line##* }
	at_most "$surv noticed within (ms)" $(( at - killed )) 2000
}
# 1: writer killed; the reader must see an error (not a clean EOF) soon
peerkill writer 7500 "" connected "Connection reset by peer" "a reset"
# 2: reader killed; the writer must see EPIPE or ECONNRESET soon
peerkill reader 7501 2 accepted "Broken pipe|Connection reset by peer" "EPIPE or ECONNRESET"
