#!/usr/bin/env bash
# t_core_loss: end-to-end over AF_PACKET with 5 % of EMP frames dropped on ingress (nft), both directions.
# timeout: 120
. "$(dirname "$0")/lib.sh"
cluster_up --loss 5
T=$(mktemp -d)
for dir in "1 2" "2 1"; do
	set -- $dir
	PIDS=()
	bg "$2" "$T/srv$2" "$BIN/emp-verify" -s -n 150 -t 40
	sleep 0.3
	on "$1" "$BIN/emp-verify" -c "h$2" -n 150 -t 40 > "$T/cli$1"
	wait "${PIDS[0]}" || { cat "$T/srv$2"; fail "server on h$2 failed"; }
	cat "$T/cli$1" "$T/srv$2"
	grep -q "150 messages, .* 0 bad" "$T/srv$2" || fail "h$2 did not verify 150 messages"
	rtx=$(awk '/retransmits/ { gsub(",", ""); print $8 }' "$T/cli$1")
	expect "h$1 retransmitted lost frames ($rtx)" [ "${rtx:-0}" -gt 0 ]
done
lost=$(on 2 nft list counter netdev emp emp_loss | awk '/packets/ { print $2 }')
expect "nft dropped EMP frames ($lost)" [ "${lost:-0}" -gt 100 ]
