#!/usr/bin/env bash
# t_core_verify: the core suite's end-to-end case over AF_PACKET between two namespaces: every size, every byte checked; a receiver whose acks are all lost closes, and its BYE completes the sends it got.
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

# Every ack from h2 lost (nft on h1 drops EMP frames of type 2, ACK: bits
# 36-38 of the EMP header). The server gets all 16 one-frame messages, lingers
# and closes; nobody can answer for it then. Its BYE says which messages it
# got, so each of the client's sends completes with its length at once
# instead of failing with ETIMEDOUT after its retries (about 3.5 s).
on 1 nft add rule netdev emp loss ether type 0x88b5 @nh,36,3 2 counter drop
bg 2 "$T/srv2" "$BIN/emp-verify" -s -n 16 -t 30
sleep 0.3
rc=0
on 1 "$BIN/emp-verify" -c h2 -n 16 -m 100,1400 -t 30 > "$T/cli2" 2>&1 || rc=$?
on 1 nft flush chain netdev emp loss
cat "$T/cli2"
wait "${PIDS[1]}" || { cat "$T/srv2"; fail "server (acks lost) failed"; }
grep -q "16 messages, .* 0 bad" "$T/srv2" || fail "server (acks lost) did not verify 16 messages"
[ "$rc" = 0 ] || fail "client with every ack lost: exit $rc"
grep -q "sent 16 messages" "$T/cli2" || fail "client with every ack lost did not complete 16 sends"
done_by_bye=$(awk '/completed by a closing peer.s BYE/ { print $NF }' "$T/cli2")
rtx=$(awk '/retransmits/ { gsub(",", ""); print $8 }' "$T/cli2")
expect "the client retransmitted for want of acks ($rtx)" [ "${rtx:-0}" -gt 0 ]
expect "the server's BYE completed the client's sends (${done_by_bye:-0} of 16)" [ "${done_by_bye:-0}" -eq 16 ]

