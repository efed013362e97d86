#!/usr/bin/env bash
# t_ops_empstat: while emp-bw streams between two hosts, empstat lists both processes (text, detail, watch, JSON) with counters that grow; a killed process's segment is skipped and cleaned; EMP_DEBUG=1 logs open/close.
# timeout: 90
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
bg 2 "$T/srv" "$BIN/emp-bw" -s
SRV=${PIDS[-1]}
sleep 0.3
bg 1 "$T/cli" "$BIN/emp-bw" -c h2 -m 64k -n 2000000
CLI=${PIDS[-1]}
for i in $(seq 50); do
	[ -e /dev/shm/emp.$SRV.1 ] && [ -e /dev/shm/emp.$CLI.2 ] && break
	sleep 0.1
done
expect "both publish a segment" [ -e /dev/shm/emp.$SRV.1 -a -e /dev/shm/emp.$CLI.2 ]
expect "segment mode 0600, owner only" [ "$(stat -c %a /dev/shm/emp.$SRV.1)" = 600 ]
sleep 0.5
"$BIN/empstat" --json > "$T/a.json"
sleep 1
"$BIN/empstat" --json > "$T/b.json"
python3 - "$T/a.json" "$T/b.json" "$SRV" "$CLI" <<'PY' || fail "empstat --json"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
srv, cli = int(sys.argv[3]), int(sys.argv[4])
def ep(d, pid):
    m = [e for e in d['endpoints'] if e['pid'] == pid]
    assert len(m) == 1, (pid, [e['pid'] for e in d['endpoints']])
    return m[0]
for pid, eid, host, peer in ((srv, 1, 'h2', 'h1'), (cli, 2, 'h1', 'h2')):
    x, y = ep(a, pid), ep(b, pid)
    assert x['program'] == 'emp-bw' and x['endpoint'] == eid and x['host'] == host and x['alive'], x
    assert x['interface'] == 'eth0' and x['driver'] == 'afpacket' and x['mtu'] >= 1500, x
    for k in ('tx_frames', 'rx_frames', 'tx_bytes', 'rx_bytes'):
        assert y['counters'][k] > x['counters'][k] > 0, (pid, k, x['counters'][k], y['counters'][k])
    assert y['updates'] > x['updates'] and y['uptime_s'] > x['uptime_s']
    assert any(p['name'] == peer and p['state'] == 'up' for p in y['peers']), y['peers']
    assert sum(y['drops'].values()) == y['counters']['drops_total'], y['drops']
    assert y['usage']['peers'] >= 1 and y['connections'] == []
print("ok: empstat --json shows both emp-bw processes, counters growing")
PY
"$BIN/empstat" > "$T/list"
cat "$T/list"
grep -Eq "^$SRV +emp-bw +1 +h2 +eth0" "$T/list" || fail "list shows the server"
grep -Eq "^$CLI +emp-bw +2 +h1 +eth0" "$T/list" || fail "list shows the client"
"$BIN/empstat" "$CLI" > "$T/detail"
cat "$T/detail"
grep -q "^pid $CLI  emp-bw  endpoint 2" "$T/detail" || fail "detail header"
grep -q "drops by reason" "$T/detail" || fail "detail drops"
grep -Eq "^ +1 h2 +1 up " "$T/detail" || fail "detail peer row"
"$BIN/empstat" -w 0.2 -c 3 -e 2 > "$T/watch"
expect "watch: 3 refreshes" [ "$(grep -c '^PID' "$T/watch")" = 3 ]
grep -q "TX_B/s" "$T/watch" || fail "watch shows rates"
"$BIN/empstat" -j -w 0.2 -c 2 | python3 -c "import sys, json; d=[json.loads(l) for l in sys.stdin]; assert len(d) == 2" \
	|| fail "watch --json: one document per line"
set +e
"$BIN/empstat" 999999999 >/dev/null 2>&1; rc=$?
set -e
expect "unknown pid: exit 1" [ $rc = 1 ]

# a live writer caught in the middle of an update (odd sequence) for longer than
# the read's own retries (about 20-130 ms): `empstat --json PID` waits for it (up
# to 1 s) instead of reporting no endpoint. The sequence is made odd by hand for
# 0.5 s (the writer's own updates add 2 each: it stays odd until put back).
seqflip() { python3 - "/dev/shm/emp.$SRV.1" <<'PY'
import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 4096)
    (v,) = struct.unpack_from("<I", m, 16)
    struct.pack_into("<I", m, 16, (v + 1) & 0xffffffff)
PY
}
seqflip
"$BIN/empstat" --json "$SRV" > "$T/torn.json" &
tp=$!
sleep 0.5
seqflip
wait "$tp" || true
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert [e['pid'] for e in d['endpoints']] == [int(sys.argv[2])], d['endpoints']" \
	"$T/torn.json" "$SRV" || fail "empstat --json PID during a 0.5 s torn update: no endpoint"
echo "ok: empstat --json PID waited out a 0.5 s torn update"

# EMP_DEBUG=1: open and close lines, "emp: " prefix; silent without it
bg 2 "$T/srv3" "$BIN/emp-pingpong" -s -e 3
sleep 0.3
on 1 env EMP_DEBUG=1 "$BIN/emp-pingpong" -c h2 -E 3 -e 4 -n 10 > /dev/null 2> "$T/dbg"
on 1 "$BIN/emp-pingpong" -c h2 -E 3 -e 4 -n 10 > /dev/null 2> "$T/nodbg"
cat "$T/dbg"
grep -q "^emp: pid [0-9]* endpoint 4 open: afpacket eth0 mtu" "$T/dbg" || fail "EMP_DEBUG=1 open line"
grep -q "^emp: pid [0-9]* endpoint 4 closed after" "$T/dbg" || fail "EMP_DEBUG=1 close line"
expect "no log without EMP_DEBUG" [ ! -s "$T/nodbg" ]

# a process killed without emp_close leaves its segment: skipped, then cleaned
kill -9 "$CLI"
wait "$CLI" 2>/dev/null || true
if [ -e /dev/shm/emp.$CLI.2 ]; then    # (another EMP program starting may tidy it first)
	"$BIN/empstat" --json > "$T/c.json" 2>/dev/null
	"$BIN/empstat" -a --json > "$T/d.json"
	python3 - "$T/c.json" "$T/d.json" "$CLI" <<'PY' || fail "stale segment handling"
import json, sys
c, d = (json.load(open(f)) for f in sys.argv[1:3])
cli = int(sys.argv[3])
assert all(e['pid'] != cli for e in c['endpoints']) and c['stale'] >= 1, c
assert any(e['pid'] == cli and not e['alive'] for e in d['endpoints']), d
print("ok: a dead process's segment is skipped, shown with -a")
PY
	"$BIN/empstat" --clean | tee "$T/clean"
	grep -q "emp.$CLI.2" "$T/clean" || [ ! -e /dev/shm/emp.$CLI.2 ] || fail "--clean names the segment"
fi
expect "stale segment removed" [ ! -e /dev/shm/emp.$CLI.2 ]

# the sockets shim lists its EMP connections: one row each, bytes growing
. "$ROOT/preload/tests/socklib.sh"
bg 2 "$T/sink" "$ER" --strict "$SOCKT" sink-server 7900
SK=${PIDS[-1]}
wait_port 2 7900
bg 1 "$T/stream" "$ER" --strict "$SOCKT" stream-client 10.77.0.2 7900
SC=${PIDS[-1]}
for i in $(seq 50); do grep -q connected "$T/stream" && break; sleep 0.1; done
sleep 0.3
"$BIN/empstat" --json > "$T/e.json"
sleep 0.5
"$BIN/empstat" --json > "$T/f.json"
"$BIN/empstat" "$SC" > "$T/sc"
cat "$T/sc"
grep -Eq "^ +[0-9]+ +10\.77\.0\.1:[0-9]+ +10\.77\.0\.2:7900 +emp +1:[0-9]+ " "$T/sc" || fail "empstat PID lists the shim's connection"
python3 - "$T/e.json" "$T/f.json" "$SC" "$SK" <<'PY' || fail "empstat --json: the shim's connection rows"
import json, sys
e, f = (json.load(open(x)) for x in sys.argv[1:3])
sc, sk = int(sys.argv[3]), int(sys.argv[4])
def conns(d, pid):
    m = [x for x in d['endpoints'] if x['pid'] == pid]
    assert len(m) == 1, (pid, [x['pid'] for x in d['endpoints']])
    return m[0]['connections']
for d in (e, f):
    for pid, remote, k in ((sc, '10.77.0.2:7900', 'bytes_out'), (sk, '10.77.0.1:', 'bytes_in')):
        c = conns(d, pid)
        assert len(c) == 1 and c[0]['remote'].startswith(remote) and c[0]['state'] == 'emp', c
        assert c[0]['peer_host'] is not None and c[0][k] > 0, c
a, b = conns(e, sc)[0], conns(f, sc)[0]
assert b['bytes_out'] > a['bytes_out'], (a, b)
a, b = conns(e, sk)[0], conns(f, sk)[0]
assert b['bytes_in'] > a['bytes_in'], (a, b)
print("ok: both ends list their EMP connection, bytes growing (%d -> %d out)" % (conns(e, sc)[0]['bytes_out'], conns(f, sc)[0]['bytes_out']))
PY
kill "$SC"
wait "$SK" 2>/dev/null || true
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
PIDS=()
"$BIN/empstat" --clean > /dev/null
expect "nothing left in /dev/shm" [ ! -e /dev/shm/emp.$SRV.1 ]
echo ok
