#!/usr/bin/env bash
# t_core_errors: clear one-line errors: peer not in the config, missing config, interface down, no CAP_NET_RAW.
# timeout: 60
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
set +e
on 1 "$BIN/emp-pingpong" -c nosuchhost -n 1 2> "$T/e1"; rc1=$?
EMP_CONF=/nonexistent/emp.conf on 1 "$BIN/emp-pingpong" -c h2 -n 1 2> "$T/e2"; rc2=$?
on 1 ip link set eth0 down
on 1 "$BIN/emp-pingpong" -c h2 -n 1 -i eth0 2> "$T/e3"; rc3=$?
on 1 ip link set eth0 up
on 1 setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/emp-pingpong" -c h2 -n 1 2> "$T/e4"; rc4=$?
set -e
cat "$T"/e1 "$T"/e2 "$T"/e3 "$T"/e4
expect "unknown peer: error" [ $rc1 -ne 0 ]
grep -q "not in the config" "$T/e1" || fail "unknown peer message"
expect "missing config: error" [ $rc2 -ne 0 ]
grep -q "/nonexistent/emp.conf" "$T/e2" || fail "missing config message names the path"
expect "interface down: error" [ $rc3 -ne 0 ]
grep -qi "down" "$T/e3" || fail "interface down message"
expect "no CAP_NET_RAW: error" [ $rc4 -ne 0 ]
grep -q "CAP_NET_RAW" "$T/e4" || fail "CAP_NET_RAW message"
