#!/usr/bin/env bash
# t_sock_gather: receive coalescing on a 1 Gbit/s link: an iperf3 receiver under emp-run --strict wakes about once per gathered batch, not per few frames; EMP carried the bytes, rx_gathers counted, EMP_GATHER_US=0 turns it off.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up --rate 1gbit
# cs PID: voluntary context switches of all the process's threads (each is a sleep)
cs() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt_switches/ { s += $2 } END { print s + 0 }'; }
# js PID EXPR: a value of the process's engine (empstat --json, d = its endpoint)
js() { "$BIN/empstat" --json "$1" | python3 -c "import json,sys; d=json.load(sys.stdin)['endpoints'][0]; print($2)"; }
# stream NAME [ENV...]: an iperf3 server under emp-run with ENV, one -t 2 -l 128K stream into it;
# prints "BYTES CS GATHERS" (the server's sleeps during the stream)
stream() {
	local name=$1; shift
	bg 2 "$T/$name-srv.log" env "$@" "$ER" --strict iperf3 -s -p 5202
	local srv=${PIDS[-1]}
	wait_port 2 5202
	local b0 c0; b0=$(rxb 2); c0=$(cs "$srv")
	on 1 "$ER" --strict iperf3 -c 10.77.0.2 -p 5202 -J -t 2 -l 128K > "$T/$name.json" || { cat "$T/$name.json"; fail "iperf3 $name"; }
	local c1 g; c1=$(cs "$srv")
	sleep 1.2                                   # one statistics update of the server
	g=$(js "$srv" "d['counters']['rx_gathers']")
	kill "$srv"; wait "$srv" 2>/dev/null || true
	local bytes; bytes=$(python3 -c "import json; print(int(json.load(open('$T/$name.json'))['end']['sum_received']['bytes']))")
	at_least "EMP bytes into h2 ($name)" $(( $(rxb 2) - b0 )) "$bytes"
	echo "$bytes $(( c1 - c0 )) $g" > "$T/$name.res"
}
stream on EMP_SPIN_US=50
read -r bytes sleeps gathers < "$T/on.res"
echo "gathering: $bytes bytes, server slept $sleeps times ($(( sleeps * 1000000 / bytes )) per MB), rx_gathers $gathers"
at_least "bytes moved (per-MB counts need a stream)" "$bytes" 50000000
at_least "waits that let frames gather" "$gathers" 100
# about 25 per MB (kernel TCP's receiver about 20); without gathering 150-160
at_most "server sleeps per MB" $(( sleeps * 1000000 / bytes )) 70
stream off EMP_GATHER_US=0
read -r bytes0 sleeps0 gathers0 < "$T/off.res"
echo "not gathering (EMP_GATHER_US=0): $bytes0 bytes, $(( sleeps0 * 1000000 / bytes0 )) sleeps per MB, rx_gathers $gathers0"
expect "EMP_GATHER_US=0 turns gathering off" [ "$gathers0" = 0 ]
echo "ok: t_sock_gather"
