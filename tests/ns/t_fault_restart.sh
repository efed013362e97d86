#!/usr/bin/env bash
# t_fault_restart: a server restarted on the same MAC, IP, TCP port and EMP endpoint: the surviving client's new connection works (its first write, 4000 bytes right behind its HELLO, echoed once), its engine counts the restart, and frames recorded from the previous life and replayed are all dropped (stale/no_session), never delivered.
# timeout: 60
# The server keeps its endpoint id across lives (EMP_ENDPOINT; the shim otherwise picks a
# random free one): only the incarnation differs, which is the case under test.
# Then the previous life's HELLO is replayed: the client's engine probes the life it knows
# (alive), so it keeps the new incarnation and counts no second restart.
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
FT=$ROOT/build/tests/sock/faultt
FR="python3 $ROOT/tests/ns/progs/frames.py"
BYTES=${FAULT_RESTART_BYTES:-50000000}
cluster_up
M2=$(mac_of 2)

wait_for() {
	local i
	for i in $(seq 200); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	cat "$1"; fail "no '$2' in $(basename "$1") after 10 s"
}
# server LIFE: the echo server as pid 1 of its own pid namespace (stats off: pid 1 is no
# name for a segment outside that namespace)
server() {
	bg 2 "$T/srv$1.log" env EMP_STATS=0 EMP_SOCK_DEBUG=1 EMP_ENDPOINT=4321 unshare --pid --fork --kill-child \
		"$ER" --strict "$SOCKT" echo-server 7700 0 0
	wait_port 2 7700
}
# js PID EXPR: a value from the client's `empstat --json PID` (d = its endpoint)
js() {
	"$BIN/empstat" --json "$1" | python3 -c "import json,sys; d=json.load(sys.stdin)['endpoints'][0]; print($2)"
}
# (endpoint id, life): the life number moves when the engine sees a new incarnation of h2
# (the incarnation itself is never published)
peer_h2() { js "$1" "[(p['endpoint'], p['life']) for p in d['peers'] if p['name'] == 'h2'][0]"; }

# life 1; record the frames it sends to h1 while the client's first connection echoes
server 1
life1=${PIDS[-1]}
on 1 $FR capture eth0 "$M2" 400 "$T/old.frames" 10 > "$T/cap.log" & cap=$!
PIDS+=("$cap")
wait_for "$T/cap.log" "^listening"
bg 1 "$T/cli.log" "$ER" --strict "$FT" phases 10.77.0.2 7700 "$BYTES" "$T/go"
cli=${PIDS[-1]}
wait_for "$T/cli.log" "^phase1 ok"
wait "$cap" || fail "no frames of the first life captured"
cat "$T/cap.log"
ndata=$(sed -n 's/.* data \([0-9]*\).*/\1/p' "$T/cap.log"); nack=$(sed -n 's/.* ack \([0-9]*\).*/\1/p' "$T/cap.log")
at_least "first life's data frames recorded" "${ndata:-0}" 50
at_least "first life's ack frames recorded" "${nack:-0}" 10
sleep 0.3                      # one statistics update
p1=$(peer_h2 "$cli"); r1=$(js "$cli" "d['counters']['peer_restarts']")
echo "life 1: h2 endpoint, life $p1; client peer_restarts $r1"

# kill life 1 (SIGKILL: no goodbye), start life 2 on the same port
kill -KILL "$(pgrep -P "$life1")"
wait "$life1" 2>/dev/null || true
server 2
touch "$T/go"
wait_for "$T/cli.log" "^phase2 connected"
# replay the previous life's data and acks while the new connection streams
s0=$(js "$cli" "d['drops']['stale'] + d['drops']['no_session']")
on 2 $FR replay eth0 "$T/old.frames" 3 data,ack
wait_for "$T/cli.log" "^phase2 ok"
# and once more with the new session idle
on 2 $FR replay eth0 "$T/old.frames" 2 data,ack
sleep 0.3
cat "$T/cli.log"
p2=$(peer_h2 "$cli"); r2=$(js "$cli" "d['counters']['peer_restarts']")
s1=$(js "$cli" "d['drops']['stale'] + d['drops']['no_session']")
js "$cli" "'client drops: ' + ' '.join('%s %d' % kv for kv in d['drops'].items() if kv[1])"
echo "life 2: h2 endpoint, life $p2; client peer_restarts $r2"
grep "endpoint .* open" "$T/srv1.log" "$T/srv2.log"
expect "new connection after the restart echoed and verified" grep -q "^phase2 ok" "$T/cli.log"
expect "same endpoint id in both lives" [ "${p1%%,*}" = "${p2%%,*}" ]
expect "a new incarnation (life $p1 -> $p2)" [ "$p1" != "$p2" ]
at_least "client engine counted the restart (peer_restarts)" "$r2" $((r1 + 1))
at_least "every replayed frame of the previous life dropped as stale/no_session" $((s1 - s0)) $(( (ndata + nack) * 5 ))

on 2 $FR replay eth0 "$T/old.frames" 1 hello
sleep 1.2                      # the statistics of an idle endpoint are rewritten every second
p3=$(peer_h2 "$cli"); r3=$(js "$cli" "d['counters']['peer_restarts']")
pr=$(js "$cli" "d['counters']['probes_sent']")
js "$cli" "'after the replayed HELLO: peer_restarts %d probes_sent %d' % (d['counters']['peer_restarts'], d['counters']['probes_sent'])"
expect "a replayed HELLO of the previous life does not bring it back ($p3)" [ "$p3" = "$p2" ]
expect "no second restart counted" [ "$r3" = "$r2" ]
at_least "the client probed the life it knows" "$pr" 1
touch "$T/go.end"
wait "$cli" || fail "client failed"
