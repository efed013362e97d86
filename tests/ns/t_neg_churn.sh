#!/usr/bin/env bash
# t_neg_churn: 3,000 short-lived client processes (8 lanes of 375, one after the other in each; 8 x 40 more first, to warm up) against one long-lived preloaded server, all under emp-run --strict: every one echoes intact over EMP; the server's engine reclaims the peers of the clients that are gone (more clients than its 1024-peer table, faster than 512 a second, the most it took while a peer had to be quiet 2 s: each client's exit says BYE, and the server takes it) and its memory stays flat. CHURN_PROCS resizes it (the benchmark runs 10,000).
# timeout: 120
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
N=${CHURN_PROCS:-3000}
LANES=8
per=$(( N / LANES ))
bg 2 "$T/server.log" env EMP_SOCK_DEBUG=1 "$ER" --strict "$CONNT" server 7320   # its last events, should it die
spid=${PIDS[-1]}
wait_port 2 7320
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$spid/status"; }
lane() { # lane LOG COUNT
	on 1 bash -c "for i in \$(seq $2); do '$ER' --strict '$CONNT' client 10.77.0.2 7320 1 1000 || echo FAILED; done" > "$1" 2>&1
}
# the allocator and tables reach their working size, at the run's concurrency
# (one lane of 100 left 8 lanes 4-10 MB to grow into)
wp=()
for l in $(seq $LANES); do lane "$T/warm$l.log" 40 & wp+=($!); done
for p in "${wp[@]}"; do wait "$p"; done
r0=$(rss)
pids=()
for l in $(seq $LANES); do lane "$T/lane$l.log" "$per" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
r1=$(rss)
ok=$(cat "$T"/lane*.log | grep -c "^ok 1 conns" || true)
{ cat "$T"/lane*.log | grep -v "^ok" | sort | uniq -c | head -5; } || true
expect "$((per * LANES)) client processes, every one echoed intact over EMP ($ok)" [ "$ok" = $((per * LANES)) ]
on 2 "$BIN/empstat" --json > "$T/stat.json"
read -r reclaimed inuse departed < <(python3 -c "
import json, sys
d = json.load(open('$T/stat.json'))
e = [x for x in d['endpoints'] if x['pid'] == $spid][0]
print(e['counters'].get('peers_reclaimed', 0), e['usage'].get('peers', -1), e['counters'].get('peers_departed', 0))")
echo "server: rss ${r0} kB after warm-up, ${r1} kB after; peers reclaimed $reclaimed, in use $inuse, departed (BYE) $departed"
at_least "peers reclaimed by the server's engine" "$reclaimed" $(( N > 1100 ? 1 : 0 ))
at_least "client lives that said BYE at exit, taken by the server's engine" "$departed" $(( N / 2 ))
at_most "peers the server's engine holds" "$inuse" 1024
at_most "server memory growth over $N client processes (kB)" $(( r1 - r0 )) 8192
expect "the server kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/server.log'"
