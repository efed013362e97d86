#!/usr/bin/env bash
# t_core_mtu: peers with different MTUs (9000 and 1500): both ends use the smaller one, say so in one line, and deliver intact.
# timeout: 60
. "$(dirname "$0")/lib.sh"
cluster_up --mtu 9000
on 2 ip link set eth0 mtu 1500
T=$(mktemp -d)
bg 2 "$T/srv" "$BIN/emp-verify" -s -n 60 -t 20
sleep 0.3
on 1 "$BIN/emp-verify" -c h2 -n 60 -t 20 > "$T/cli" 2>&1 || { cat "$T/cli"; fail "client"; }
wait "${PIDS[0]}" || { cat "$T/srv"; fail "server"; }
cat "$T/cli" "$T/srv"
grep -q "60 messages, .* 0 bad" "$T/srv" || fail "not verified"
grep -q "emp: MTU mismatch" "$T/cli" || fail "no MTU mismatch message on the 9000-MTU side"
