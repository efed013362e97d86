#!/usr/bin/env bash
# t_core_rxsocket: EMP_AFP_RX=socket (afp_lazy.c: no rx ring ever; recvmmsg on the receiver's own CPU, a spinner's looks at most every 8-32 us): 300 checksummed messages (1 MB, 4 B, 64 B, 70 KB) arrive intact, the receiver never sets PACKET_RX_RING but still builds its tx ring, and its looks bring several frames each (at most one recvmmsg call per 16 frames); by default the rx ring is built; an emp-run echo over the shim in this mode is intact.
# timeout: 120
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
cp "$EMP_CONF" "$T/conf"
echo "option checksum on" >>"$T/conf"     # a frame copied out wrong is dropped and counted
# MODE: emp-verify, the receiver's setsockopt calls (strace) and recvmmsg calls (perf) recorded
run() {
	local mode=$1
	PIDS=()
	EMP_AFP_RX=$mode bg 2 "$T/srv.$mode" perf stat -x, -e syscalls:sys_enter_recvmmsg -o "$T/ps.$mode" \
		strace -f --seccomp-bpf -qq -e trace=setsockopt -o "$T/st.$mode" \
		"$BIN/emp-verify" --conf "$T/conf" -s -n 300 -t 60
	sleep 0.5
	on 1 "$BIN/emp-verify" --conf "$T/conf" -c h2 -n 300 -m 1000000,4,64,70000 -t 60 >"$T/cli.$mode" 2>&1 ||
		{ cat "$T/cli.$mode" "$T/srv.$mode"; fail "$mode: client failed"; }
	wait "${PIDS[0]}" || { cat "$T/srv.$mode"; fail "$mode: server failed"; }
	cat "$T/srv.$mode"
	grep -q "300 messages, .* 0 bad" "$T/srv.$mode" || fail "$mode: the receiver did not verify 300 messages"
	if grep -q "drop csum" "$T/srv.$mode"; then fail "$mode: frames failed their checksum"; fi
}
run socket
frames=$(sed -n 's/^emp: frames tx [0-9]* rx \([0-9]*\),.*/\1/p' "$T/srv.socket")
looks=$(awk -F, '/recvmmsg/ { print $1 }' "$T/ps.socket")
echo "socket mode: $frames frames received in $looks recvmmsg calls"
expect "socket: no rx ring" bash -c "! grep -q PACKET_RX_RING '$T/st.socket'"
expect "socket: the tx ring is still built" grep -q PACKET_TX_RING "$T/st.socket"
at_least "socket: frames received" "${frames:-0}" 50000
at_most "socket: recvmmsg calls, at most one per 16 frames (22-26 each here; 12 when a look that found the socket drained did not stop the next)" "${looks:-999999}" $(( ${frames:-0} / 16 ))
run ring
expect "default: the rx ring is built" grep -q PACKET_RX_RING "$T/st.ring"
# the shim in this mode: 20 connections echo 200 kB each over EMP
PIDS=()
EMP_AFP_RX=socket bg 2 "$T/echo.srv" "$ER" --strict "$ROOT/build/tests/sock/connt" server 7330
wait_port 2 7330
rx0=$(rxb 2)
EMP_AFP_RX=socket on 1 "$ER" --strict "$ROOT/build/tests/sock/connt" client 10.77.0.2 7330 20 200000 >"$T/echo.cli" 2>&1 ||
	{ cat "$T/echo.cli"; fail "connt client failed"; }
cat "$T/echo.cli"
expect "every connection echoed intact over EMP" grep -q "^ok 20 conns" "$T/echo.cli"
at_least "EMP bytes into the server's host" $(( $(rxb 2) - rx0 )) 4000000
