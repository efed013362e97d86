#!/usr/bin/env bash
# t_sock_unprivileged: a server run as an unprivileged user (nobody) over EMP: emp-run installed with the file capability cap_net_raw+p passes CAP_NET_RAW on as an ambient capability, the shim loads, and a --strict echo carries every byte over EMP (nft counter, the server's engine counters); without the file capability the same server cannot use EMP; set-user-ID programs are refused.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v setcap >/dev/null && command -v setpriv >/dev/null || fail "needs setcap (libcap2-bin) and setpriv (util-linux)"
cluster_up
# an installation nobody can read: emp-run with the capability, the shim beside it
I=$(mktemp -d /tmp/emp-unpriv-XXXX)
trap 'cleanup; rm -rf "$T" "$I"' EXIT
chmod 755 "$I"
mkdir -p "$I/cap/bin" "$I/cap/lib" "$I/plain/bin" "$I/plain/lib" "$I/tests"
for d in cap plain; do
	install -m 755 "$BIN/emp-run" "$I/$d/bin/emp-run"
	install -m 755 "$ROOT/build/lib/libempsock.so" "$I/$d/lib/libempsock.so"
done
install -m 755 "$SOCKT" "$I/tests/sockt"
install -m 644 "$EMP_CONF" "$I/emp.conf"
setcap cap_net_raw+p "$I/cap/bin/emp-run"
getcap "$I/cap/bin/emp-run"
export EMP_CONF=$I/emp.conf
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)

# the server as nobody through the capable emp-run
bg 2 "$T/srv.log" "${NOBODY[@]}" "$I/cap/bin/emp-run" --strict --debug "$I/tests/sockt" echo-server 7901 0 0
SRV=${PIDS[-1]}
wait_port 2 7901
expect "the server runs as nobody" [ "$(ps -o uid= -p "$SRV" | tr -d ' ')" = 65534 ]
caps=$(awk '/^CapEff/ { print $2 }' "/proc/$SRV/status")
expect "... with CAP_NET_RAW (CapEff $caps) and nothing else" [ "$((16#$caps))" = $((1 << 13)) ]
rx0=$(rxb 2)
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7901 0 0 4000000 > "$T/cli.log" 2>&1 || {
	cat "$T/cli.log" "$T/srv.log"; fail "strict echo with the unprivileged server"; }
rx1=$(rxb 2)
cat "$T/cli.log"
grep "emp-run: .* gets CAP_NET_RAW" "$T/srv.log"
at_least "EMP bytes into the server's host" $((rx1 - rx0)) 4000000
sleep 1.2                      # one statistics update of an idle endpoint
seg=$(ls /dev/shm/emp."$SRV".* | head -1)
expect "its statistics segment belongs to nobody, mode 0600" [ "$(stat -c '%u %a' "$seg")" = "65534 600" ]
"$BIN/empstat" --json "$SRV" | python3 -c '
import json, sys
e = json.load(sys.stdin)["endpoints"][0]
c = e["counters"]
assert e["uid"] == 65534 and c["msgs_received"] > 0 and c["bytes_received"] >= 4000000, c
print("ok: the server engine received %d messages, %d bytes" % (c["msgs_received"], c["bytes_received"]))
' || fail "server engine counters"
kill "$SRV"; wait "$SRV" 2>/dev/null || true

# the same without the file capability: no EMP for nobody (what the capability is for)
bg 2 "$T/srv2.log" "${NOBODY[@]}" "$I/plain/bin/emp-run" --strict "$I/tests/sockt" echo-server 7902 0 0
wait_port 2 7902
if on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7902 0 0 1000 > "$T/cli2.log" 2>&1; then
	fail "a strict echo worked with a server that has no CAP_NET_RAW"
fi
sleep 0.2
cat "$T/srv2.log"
expect "without the capability the server says AF_PACKET needs CAP_NET_RAW" grep -q "CAP_NET_RAW" "$T/srv2.log"

# set-user-ID programs: refused, not run with the capability
install -m 4755 /bin/true "$I/tests/suid-true"
rc=0; on 2 "${NOBODY[@]}" "$I/cap/bin/emp-run" "$I/tests/suid-true" 2> "$T/suid.err" || rc=$?
cat "$T/suid.err"
expect "a set-user-ID program is refused (exit 126)" [ $rc = 126 ]
grep -q "refusing to run .*set-user-ID" "$T/suid.err" || fail "refusal message"
