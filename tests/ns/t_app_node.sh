#!/usr/bin/env bash
# t_app_node: Node.js under emp-run --strict (libuv closes every descriptor with syscall(SYS_close), its cluster module hands connections to workers with SCM_RIGHTS). One process: 1500 connt connections one after the other echo intact over EMP, and the server's engine holds at most one connection's receive records afterwards and its address space grows less than 512 MB (Node's own heap moves it by tens of MB; each kept connection held 8 MB) (on fbe9816 the closes never reached the library: it refused connection 475, "out of EMP descriptors"). The cluster module (2 workers, round robin): 600 connections echo intact over EMP, the primary hands each one over before its first use and the workers negotiate them; a client without the library is refused by the strict cluster for its unmarked SYN, not after a negotiation bound.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v node >/dev/null || fail "node is not installed (scripts/deps installs nodejs)"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
JS=$ROOT/tests/ns/progs/nodeecho.js
usage() { # usage PID FIELD: the engine's usage of that process (empstat --json)
	on 2 "$BIN/empstat" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
print([e for e in d['endpoints'] if e['pid'] == $1][0]['usage'].get('$2', -1))"
}
vmsize() { awk '/^VmSize/ { print $2 }' "/proc/$1/status"; }
bg 2 "$T/one.log" "$ER" --strict node "$JS" 7370
wait_port 2 7370
npid=$(pgrep -f "nodeecho.js 7370" | tail -1)
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7370 100 2000 > "$T/warm.log" 2>&1 || { cat "$T/warm.log"; fail "100 connections to Node"; }
sleep 0.3
v0=$(vmsize "$npid")
f0=$(emp_rx 2)
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7370 1500 2000 > "$T/c1.log" 2>&1 || true
cat "$T/c1.log"
expect "1500 connections to a Node.js server echoed intact over EMP" grep -q "^ok 1500 conns" "$T/c1.log"
at_least "EMP frames into the server host" $(( $(emp_rx 2) - f0 )) 3000
sleep 0.3
rec=$(usage "$npid" records); v1=$(vmsize "$npid")
echo "Node server: receive records in use $rec, address space ${v0} -> ${v1} kB"
at_most "receive records the server's engine holds after the clients closed (one connection's: 35)" "$rec" 35
at_most "server address space growth over 1500 connections (kB; each kept connection held 8 MB before)" $(( v1 - v0 )) 524288
expect "the server kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/one.log'"
bg 2 "$T/cluster.log" "$ER" --strict node "$JS" 7371 2
for i in $(seq 100); do grep -q "^listening" "$T/cluster.log" && break; sleep 0.05; done
wait_port 2 7371
f0=$(emp_rx 2)
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7371 600 2000 > "$T/c2.log" 2>&1 || true
cat "$T/c2.log"
expect "600 connections to a Node.js cluster (2 workers) echoed intact over EMP" grep -q "^ok 600 conns" "$T/c2.log"
at_least "EMP frames into the server host" $(( $(emp_rx 2) - f0 )) 1200
expect "the cluster kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/cluster.log'"
t0=$(date +%s%N)
if on 1 "$CONNT" client 10.77.0.2 7371 1 100 > "$T/plain.log" 2>&1; then fail "the strict cluster served a client without the library"; fi
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
expect "the strict cluster refused the plain client for its SYN (no EMP mark)" grep -q "no EMP mark" "$T/cluster.log"
echo "the plain client was refused after $ms ms (figure; a negotiation bound would be 500)"
