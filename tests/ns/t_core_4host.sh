#!/usr/bin/env bash
# t_core_4host: four hosts through a bridge namespace: three senders to one receiver at once, every byte checked.
# timeout: 120
. "$(dirname "$0")/lib.sh"
cluster_up --hosts 4
T=$(mktemp -d)
bg 1 "$T/srv" "$BIN/emp-verify" -s -n 100 -k 3 -t 40
srv=${PIDS[0]}
sleep 0.3
for h in 2 3 4; do bg "$h" "$T/cli$h" "$BIN/emp-verify" -c h1 -n 100 -t 40; done
for i in 1 2 3; do wait "${PIDS[$i]}" || { cat "$T"/cli*; fail "a sender failed"; }; done
wait "$srv" || { cat "$T/srv"; fail "server failed"; }
cat "$T/srv"
grep -q "300 messages, .* 0 bad" "$T/srv" || fail "receiver did not verify 300 messages from 3 hosts"
expect "EMP frames arrived at h1" [ "$(emp_rx 1)" -gt 10000 ]
