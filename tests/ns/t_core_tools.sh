#!/usr/bin/env bash
# t_core_tools: emp-pingpong and emp-bw run over AF_PACKET, with their receive ring mapped from the start (unless EMP_AFP_RING_AFTER says otherwise), and print well-formed JSON with positive numbers.
# timeout: 90
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
bg 2 "$T/pp" "$BIN/emp-pingpong" -s --once
sleep 0.3
# a tool's endpoint has its receive ring mapped from the start (ring_at_open),
# before any frame came; EMP_AFP_RING_AFTER, when set, decides instead (lazy:
# nothing mapped until that many frames were read)
maps=$(grep -c 'socket:\[' "/proc/${PIDS[0]}/maps" || true)
expect "emp-pingpong's receive ring mapped at open ($maps socket mappings)" [ "$maps" -ge 1 ]
EMP_AFP_RING_AFTER=1000000 bg 2 "$T/lazy" "$BIN/emp-pingpong" -s --once -e 7
sleep 0.3
maps=$(grep -c 'socket:\[' "/proc/${PIDS[1]}/maps" || true)
expect "with EMP_AFP_RING_AFTER set, no ring before frames ($maps socket mappings)" [ "$maps" = 0 ]
kill "${PIDS[1]}" 2>/dev/null || true
on 1 "$BIN/emp-pingpong" -c h2 -m 4,1500,65536 -n 200 --json > "$T/pp.json"
cat "$T/pp.json"
python3 -c "import json,sys; r=json.load(open('$T/pp.json'))['results']; assert [x['size'] for x in r]==[4,1500,65536]; assert all(x['half_rtt_us']>0 for x in r)" \
	|| fail "emp-pingpong JSON"
PIDS=()
bg 2 "$T/bw" "$BIN/emp-bw" -s
sleep 0.3
on 1 "$BIN/emp-bw" -c h2 -m 65536,1M -n 64 --json > "$T/bw.json"
on 1 "$BIN/emp-bw" -c h2 -m 1M -n 32 --bidir
cat "$T/bw.json"
python3 -c "import json; r=json.load(open('$T/bw.json'))['results']; assert len(r)==2 and all(x['mbps']>0 for x in r)" \
	|| fail "emp-bw JSON"
echo ok
