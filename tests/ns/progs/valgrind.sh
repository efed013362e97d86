#!/usr/bin/env bash
# valgrind.sh: `make check-valgrind`: namespace transfers with both ends under valgrind memcheck (zero errors, no leaks): emp-verify -s/-c over libemp, and socat under emp-run --strict (the shim).
# usage (root): bash tests/ns/progs/valgrind.sh      VG_MSGS (default 200) scales the emp-verify run
# Prints "N passed, N failed" like the other runners.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
export EMP_NS_PREFIX=${EMP_NS_PREFIX:-vg$$}
export EMP_CLUSTER_DIR=/tmp/emp-cluster-valgrind-$$
if [ "$(id -u)" != 0 ]; then
	echo "check-valgrind: needs root (namespaces, AF_PACKET)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
command -v valgrind >/dev/null || { echo "check-valgrind: valgrind not installed (scripts/deps)" >&2; echo "0 passed, 1 failed"; exit 1; }
# lib.sh: cluster helpers, cleanup on exit; it sets -e, which this runner does not want
. "$ROOT/tests/ns/lib.sh"
set +e
T=$(mktemp -d /tmp/emp-vg-XXXX)
trap 'cleanup; rm -rf "$T"' EXIT
MSGS=${VG_MSGS:-200}
# valgrind slows every process 20-50 times: give the sockets negotiation (500 ms by default)
# room, or a slow first use of the endpoint makes the client give up on EMP.
export EMP_NEG_TIMEOUT_MS=20000
# --error-exitcode: any memcheck error (invalid access, uninitialised use, definite or possible
# leak, fd leaks are not checked) fails the run. The suppressions file names the only noise
# accepted, each with its reason.
VG=(valgrind --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,possible
    --errors-for-leak-kinds=definite,possible --track-origins=yes --trace-children=yes
    --suppressions="$ROOT/tests/ns/progs/valgrind.supp" --log-file="$T/vg.%p.log")
pass=0 failed=0
result() { # result NAME RC: one line per case, the memcheck summaries on failure
	if [ "$2" -eq 0 ]; then
		pass=$((pass + 1)); echo "ok   $1"
		for f in "$T"/vg.*.log; do
			printf '       %s: %s\n' "$(sed -n 's/^==[0-9]*== Command: \([^ ]*\).*/\1/p' "$f" | head -1 | xargs basename)" \
				"$(sed -n 's/^==[0-9]*== \(ERROR SUMMARY: .*\)/\1/p' "$f")"
		done
	else
		failed=$((failed + 1)); echo "FAIL $1 (exit $2)"
		for f in "$T"/vg.*.log; do
			grep -q "ERROR SUMMARY: [1-9]\|definitely lost: [1-9]\|possibly lost: [1-9]" "$f" && sed 's/^/  | /' "$f" | head -60
		done
		tail -20 "$T"/*.out 2>/dev/null | sed 's/^/  | /'
	fi
	rm -f "$T"/vg.*.log "$T"/*.out
}

cluster_up
# 1. libemp directly: emp-verify server and client, every message checked byte for byte
bg 2 "$T/srv.out" "${VG[@]}" "$BIN/emp-verify" -s -n "$MSGS" -t 120
sleep 3                                   # valgrind starts slowly
on 1 "${VG[@]}" "$BIN/emp-verify" -c h2 -n "$MSGS" -m 0,1,1452,1453,65536,300000 -t 120 > "$T/cli.out" 2>&1
rc=$?
wait "${PIDS[-1]}"; rs=$?
grep -q "$MSGS messages, .* 0 bad" "$T/srv.out" || { echo "  emp-verify: server did not verify $MSGS messages" >&2; rs=1; }
result "emp-verify -s/-c under valgrind ($MSGS messages)" $(( rc || rs ))

# 2. the sockets shim: socat under emp-run --strict, both ends, a checksummed file
head -c 3000000 /dev/urandom > "$T/in"
PIDS=()
bg 2 "$T/srv.out" "${VG[@]}" "$BIN/emp-run" --strict socat -u TCP-LISTEN:7900,reuseaddr "OPEN:$T/o,creat,trunc"
for i in $(seq 200); do on 2 ss -ltnH "sport = :7900" | grep -q . && break; sleep 0.05; done
on 1 "${VG[@]}" "$BIN/emp-run" --strict socat -u "OPEN:$T/in" TCP:10.77.0.2:7900 > "$T/cli.out" 2>&1
rc=$?
wait "${PIDS[-1]}"; rs=$?
cmp -s "$T/in" "$T/o" || { echo "  socat: output differs" >&2; rs=1; }
result "socat under emp-run --strict under valgrind (3 MB)" $(( rc || rs ))
echo "$pass passed, $failed failed"
[ "$failed" -eq 0 ]
