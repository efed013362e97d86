#!/usr/bin/env bash
# t_sock_peerkill: a peer killed mid-stream gives ECONNRESET (reader) or EPIPE/ECONNRESET (writer) within 2 s, never a hang.
# timeout: 40
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
# 1: writer killed; the reader must see an error (not a clean EOF) soon
bg 2 "$T/r.log" "$ER" --strict "$SOCKT" sink-server 7500
wait_port 2 7500
on 1 "$ER" --strict "$SOCKT" stream-client 10.77.0.2 7500 > "$T/w.log" 2>&1 &
wpid=$!
sleep 1
grep -q connected "$T/w.log" || fail "writer did not connect"
pkill -KILL -P "$wpid" 2>/dev/null || true; kill -KILL "$wpid" 2>/dev/null || true
killed=$(date +%s%3N)
for i in $(seq 60); do grep -q "^end" "$T/r.log" && break; sleep 0.05; done
cat "$T/r.log"
line=$(grep "^end" "$T/r.log") || fail "reader still blocked 3 s after the writer died"
expect "reader sees a reset" grep -q "^end Connection reset by peer" "$T/r.log"
at=${line##* }
at_most "reader noticed within (ms)" $(( at - killed )) 2000
# 2: reader killed; the writer must see EPIPE or ECONNRESET soon
PIDS=()
on 2 "$ER" --strict "$SOCKT" sink-server 7501 > "$T/r2.log" 2>&1 &
rpid=$!
wait_port 2 7501
bg 1 "$T/w2.log" "$ER" --strict "$SOCKT" stream-client 10.77.0.2 7501
sleep 1
grep -q accepted "$T/r2.log" || fail "reader did not accept"
pkill -KILL -P "$rpid" 2>/dev/null || true; kill -KILL "$rpid" 2>/dev/null || true
killed=$(date +%s%3N)
for i in $(seq 60); do grep -q "^end" "$T/w2.log" && break; sleep 0.05; done
cat "$T/w2.log"
line=$(grep "^end" "$T/w2.log") || fail "writer still blocked 3 s after the reader died"
expect "writer sees EPIPE or ECONNRESET" grep -Eq "^end (Broken pipe|Connection reset by peer)" "$T/w2.log"
at=${line##* }
at_most "writer noticed within (ms)" $(( at - killed )) 2000
