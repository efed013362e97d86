#!/usr/bin/env bash
# t_core_verify: the core suite's end-to-end case over AF_PACKET between two namespaces: every size, every byte checked.
# timeout: 90
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
before=$(emp_rx 2)
bg 2 "$T/srv" "$BIN/emp-verify" -s -n 200 -t 30
sleep 0.3
on 1 "$BIN/emp-verify" -c h2 -n 200 -t 30 | tee "$T/cli"
wait "${PIDS[0]}" || { cat "$T/srv"; fail "server failed"; }
cat "$T/srv"
grep -q "200 messages, .* 0 bad" "$T/srv" || fail "server did not verify 200 messages"
after=$(emp_rx 2)
frames=$((after - before))
# 200 messages of the default sizes are about 31 MB: at least 21000 full frames
expect "EMP frames carried the data ($frames frames at h2)" [ "$frames" -gt 21000 ]
