#!/usr/bin/env bash
# t_core_txring: the AF_PACKET driver's transmit ring (afp_txring.c, EMP_AFP_TX=ring: linear frames behind a virtio_net_hdr; ringfrags: page fragments): bulk messages and a ping-pong go through it intact (checksummed frames), and EMP_AFP_TX=mmsg keeps sendmmsg.
# timeout: 120
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
trap 'rm -rf "$T"; cleanup' EXIT
cp "$EMP_CONF" "$T/conf"
echo "option checksum on" >>"$T/conf"     # a frame built wrong in the ring is dropped and counted
# MODE [-m SIZES]: emp-verify both ways, the sender's sendto/sendmmsg calls counted by strace
run() {
	local mode=$1; shift
	PIDS=()
	EMP_AFP_TX=$mode bg 2 "$T/srv.$mode" "$BIN/emp-verify" --conf "$T/conf" -s -n 400 -t 60
	sleep 0.3
	EMP_AFP_TX=$mode on 1 strace -f -qq -c -e trace=sendto,sendmmsg -o "$T/st.$mode" \
		"$BIN/emp-verify" --conf "$T/conf" -c h2 -n 400 "$@" -t 60 >"$T/cli.$mode" 2>&1 || { cat "$T/cli.$mode"; fail "$mode: client failed"; }
	wait "${PIDS[0]}" || { cat "$T/srv.$mode"; fail "$mode: server failed"; }
	cat "$T/cli.$mode" "$T/srv.$mode" "$T/st.$mode"
	grep -q "400 messages, .* 0 bad" "$T/srv.$mode" || fail "$mode: server did not verify 400 messages"
	if grep -q "drop csum" "$T/srv.$mode" "$T/cli.$mode"; then fail "$mode: frames failed their checksum"; fi
}
calls() { awk -v c="$2" '$NF == c { print $4 }' "$T/st.$1"; }
run ring -m 1000000,4,64,70000
ring_sendto=$(calls ring sendto); ring_mmsg=$(calls ring sendmmsg)
expect "ring: the bulk sender flushed its ring with sendto (${ring_sendto:-0} calls, sendmmsg ${ring_mmsg:-0})" \
	[ "${ring_sendto:-0}" -gt "$(( ${ring_mmsg:-0} * 2 ))" ]
# the same ring with the slots' pages attached as fragments (no virtio_net_hdr)
run ringfrags -m 1000000,4,64,70000
frag_sendto=$(calls ringfrags sendto)
expect "ringfrags: the bulk sender flushed its ring with sendto (${frag_sendto:-0} calls)" [ "${frag_sendto:-0}" -gt 100 ]
run mmsg -m 1000000,4,64,70000
mmsg_sendto=$(calls mmsg sendto); mmsg_mmsg=$(calls mmsg sendmmsg)
expect "mmsg: sendmmsg only (${mmsg_mmsg:-0} calls, sendto ${mmsg_sendto:-0})" \
	[ "${mmsg_mmsg:-0}" -gt 100 -a "${mmsg_sendto:-0}" -lt 10 ]
# a small ping-pong after the ring is up: single frames leave at once
PIDS=()
EMP_AFP_TX=ring bg 2 "$T/pp.srv" "$BIN/emp-pingpong" -s --once
sleep 0.3
EMP_AFP_TX=ring on 1 "$BIN/emp-pingpong" -c h2 -m 64 -n 3000 >"$T/pp" 2>&1 || { cat "$T/pp"; fail "ping-pong failed"; }
wait "${PIDS[0]}" || fail "ping-pong server failed"
cat "$T/pp"
expect "ping-pong over the ring completed" grep -q "64 bytes" "$T/pp"
