#!/usr/bin/env bash
# t_ops_ids: endpoint ids are unique per network namespace: a second process asking for a held id is refused, a killed holder frees it, random-id clients never collide, and two preloaded servers that are both pid 1 (own pid namespaces, one network namespace) no longer share an endpoint id.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up

# a held id: refused in the same network namespace, free in another
bg 2 "$T/s1" "$BIN/emp-pingpong" -s -e 5
S1=${PIDS[-1]}
sleep 0.3
rc=0; on 2 timeout 5 "$BIN/emp-pingpong" -s -e 5 > "$T/s2" 2>&1 || rc=$?
cat "$T/s2"
expect "a second endpoint 5 on host 2 is refused at once (exit 2, not 124: still serving)" [ $rc = 2 ]
expect "... saying the id is in use" grep -q "endpoint id 5 is in use" "$T/s2"
on 1 "$BIN/emp-pingpong" -c h2 -E 5 -e 5 -n 200 -m 64 > "$T/c1" || fail "endpoint 5 on host 1 talks to endpoint 5 on host 2"
echo "ok: the same id in another network namespace"
# killed without a chance to clean up: the kernel releases the id
kill -KILL "$S1"; wait "$S1" 2>/dev/null || true
bg 2 "$T/s3" "$BIN/emp-pingpong" -s -e 5
sleep 0.3
on 1 "$BIN/emp-pingpong" -c h2 -E 5 -n 200 -m 64 > "$T/c2" || fail "a new server on the id a killed one held"
echo "ok: a killed holder's id is free again"

# random client ids (emp-verify clients): two at once from one host, every byte checked
bg 2 "$T/v" "$BIN/emp-verify" -s -n 300 -k 2 -e 6 -t 30
V=${PIDS[-1]}
sleep 0.3
on 1 "$BIN/emp-verify" -c h2 -E 6 -n 300 -m 100,5000,70000 -t 30 > "$T/v1" 2>&1 & c1=$!
on 1 "$BIN/emp-verify" -c h2 -E 6 -n 300 -m 100,5000,70000 -t 30 > "$T/v2" 2>&1 & c2=$!
wait $c1 || { cat "$T/v1"; fail "client 1"; }
wait $c2 || { cat "$T/v2"; fail "client 2"; }
wait "$V" || { cat "$T/v"; fail "server"; }
cat "$T/v"
echo "ok: two random-id clients on one host, 600 messages verified"

# the shim: two echo servers, each pid 1 of its own pid namespace, one network namespace.
# They used to take the same endpoint id (1024 + pid) and answer each other's frames.
srv() {
	bg 2 "$T/srv$1.log" env EMP_SOCK_DEBUG=1 unshare --pid --fork --kill-child \
		"$ER" --strict "$SOCKT" echo-server "$1" 0 0
	wait_port 2 "$1"
}
srv 7801
srv 7802
rx0=$(rxb 2)
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7801 0 0 3000000 > "$T/e1" 2>&1 & e1=$!
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7802 0 0 3000000 > "$T/e2" 2>&1 & e2=$!
wait $e1 || { cat "$T/e1" "$T/srv7801.log"; fail "echo client to server 1"; }
wait $e2 || { cat "$T/e2" "$T/srv7802.log"; fail "echo client to server 2"; }
rx1=$(rxb 2)
id1=$(sed -n 's/.*endpoint \([0-9]*\) open.*/\1/p' "$T/srv7801.log" | head -1)
id2=$(sed -n 's/.*endpoint \([0-9]*\) open.*/\1/p' "$T/srv7802.log" | head -1)
echo "server endpoint ids: $id1 $id2; EMP bytes into host 2: $((rx1 - rx0))"
# each server is pid 1 of its pid namespace: the cleanup's SIGKILL leaves its
# statistics segment (emp.1.ID), which no process of this pid namespace can
# prove gone (empstat --clean keeps it), so the test removes what it made
trap 'cleanup; rm -f "/dev/shm/emp.1.$id1" "/dev/shm/emp.1.$id2"' EXIT
expect "both servers opened an endpoint" [ -n "$id1" -a -n "$id2" ]
expect "two pid-1 servers in one network namespace have different endpoint ids" [ "$id1" != "$id2" ]
at_least "the echoes went over EMP (bytes into host 2)" $((rx1 - rx0)) 6000000
