#!/usr/bin/env bash
# t_fault_auth: option auth on both hosts: emp-verify (every byte checked) and iperf3 under emp-run --strict stream while the sender's namespace forges frames with every id right (wrong tag, no tag, STALE, HELLO): all counted as auth drops, bytes intact, no reset; an auth-off client fails against an auth-on server with counted drops.
# timeout: 120
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
AF="python3 $ROOT/tests/ns/progs/authforge.py"
cluster_up
M2=$(mac_of 2)
# the cluster secret: 32 random bytes, mode 0600, owned by root (we are root)
KEY=$EMP_CLUSTER_DIR/auth.key
head -c 32 /dev/urandom > "$KEY"
chmod 600 "$KEY"
cp "$EMP_CONF" "$T/noauth.conf"
# qdisc_bypass off: the forger watches the frames its own host sends (a packet
# socket does not see frames sent with the bypass; an attacker on the wire would)
printf 'option auth on\noption auth_key %s\noption qdisc_bypass off\n' "$KEY" >> "$EMP_CONF"

wait_for() {
	local i
	for i in $(seq 200); do grep -Eq "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
	cat "$1"; fail "no '$2' in $(basename "$1") after 10 s"
}
drop() { sed -n "s/^emp:   drop $2 \([0-9]*\)$/\1/p" "$1" | tail -1; }

# a key file others may read is refused with a clear error
chmod 640 "$KEY"
if on 1 "$BIN/emp-verify" -c h2 -n 1 -t 1 > "$T/mode.log" 2>&1; then fail "a 0640 key file was accepted"; fi
cat "$T/mode.log"
expect "a group-readable key file is refused, and says why" grep -q "auth_key .*mode 0640 lets others read it" "$T/mode.log"
chmod 600 "$KEY"

# 1. emp-verify: 3000 messages (about 470 MB), the forger on the sender's own namespace
bg 2 "$T/srv.log" "$BIN/emp-verify" -s -n 3000 -t 60
srv=${PIDS[-1]}
sleep 0.3
on 1 $AF eth0 "$M2" 1500 20 > "$T/forge.log" & forger=$!
PIDS+=("$forger")
wait_for "$T/forge.log" "^listening"
on 1 "$BIN/emp-verify" -c h2 -n 3000 -t 60 > "$T/cli.log" 2>&1 || { cat "$T/cli.log"; fail "client failed"; }
wait "$forger" || fail "forger failed"
wait "$srv" || { cat "$T/srv.log"; fail "server failed"; }
cat "$T/forge.log" "$T/srv.log"
forged=$(sed -n 's/^forged //p' "$T/forge.log")
auth=$(drop "$T/srv.log" auth); auth=${auth:-0}
at_least "frames forged while the stream ran" "$forged" 100
expect "3000 messages, every byte intact" grep -q "3000 messages, .* 0 bad" "$T/srv.log"
at_least "forged frames counted as auth drops at the receiver" "$auth" $(( forged * 9 / 10 ))
# (a frame may count twice: while the driver switches to its rx ring it reads
# some frames on two sockets, afp_lazy.c; real frames seen twice are dup drops)
at_most "auth drops are the forged frames only" "$auth" $(( forged * 2 ))

# 2. iperf3 under emp-run --strict (the sockets shim), forged frames again
bg 2 "$T/ip.log" "$ER" --strict iperf3 -s -p 5201
ipsrv=${PIDS[-1]}
wait_port 2 5201
on 1 $AF eth0 "$M2" 600 20 > "$T/forge2.log" & forger=$!
PIDS+=("$forger")
wait_for "$T/forge2.log" "^listening"
b0=$(rxb 2)
on 1 "$ER" --strict iperf3 -c 10.77.0.2 -p 5201 -J -t 3 > "$T/ip.json" || { cat "$T/ip.json"; fail "iperf3"; }
wait "$forger" || fail "forger failed"
bytes=$(python3 -c "import json; print(int(json.load(open('$T/ip.json'))['end']['sum_received']['bytes']))")
forged2=$(sed -n 's/^forged //p' "$T/forge2.log")
sleep 1.2                                       # one statistics update of the idle server
js() { "$BIN/empstat" --json "$ipsrv" | python3 -c "import json,sys; d=json.load(sys.stdin)['endpoints'][0]; print($1)"; }
auth2=$(js "d['drops'].get('auth', 0)"); restarts=$(js "d['counters']['peer_restarts']")
echo "iperf3 --strict: $bytes bytes; forged $forged2, server auth drops $auth2, peer_restarts $restarts"
echo "iperf3 server's drops by reason: $(js "d['drops']")"   # (a short count: were forged frames lost before the engine, 'device'?)
at_least "iperf3 moved its bytes over EMP" $(( $(rxb 2) - b0 )) "$bytes"
at_least "iperf3 forged frames counted as auth drops" "$auth2" $(( forged2 * 9 / 10 ))
expect "no session reset by a forged STALE or HELLO" [ "$restarts" = 0 ]

# 3. a client with auth off against a server with auth on: refused with counted drops, a clear error
bg 2 "$T/srv3.log" "$BIN/emp-verify" -s -n 1 -t 4
srv3=${PIDS[-1]}
sleep 0.3
if on 1 "$BIN/emp-verify" --conf "$T/noauth.conf" -c h2 -n 1 -t 3 > "$T/cli3.log" 2>&1; then fail "auth-off client got through"; fi
wait "$srv3" && fail "the auth-on server received a message from an auth-off client"
cat "$T/cli3.log" "$T/srv3.log"
expect "the auth-off client fails with an error" grep -q "emp-verify: send failed" "$T/cli3.log"
at_least "its untagged frames are auth drops at the server" "$(drop "$T/srv3.log" auth)" 1
# and the other way round: an auth-on client, an auth-off server (version drops there)
bg 2 "$T/srv4.log" "$BIN/emp-verify" --conf "$T/noauth.conf" -s -n 1 -t 4
srv4=${PIDS[-1]}
sleep 0.3
if on 1 "$BIN/emp-verify" -c h2 -n 1 -t 3 > "$T/cli4.log" 2>&1; then fail "auth-on client got through to an auth-off server"; fi
wait "$srv4" && fail "the auth-off server received a message from an auth-on client"
cat "$T/cli4.log" "$T/srv4.log"
expect "the auth-on client fails with an error" grep -q "emp-verify: send failed" "$T/cli4.log"
at_least "its tagged frames are version drops at the auth-off server" "$(drop "$T/srv4.log" version)" 1

# 4. the sockets shim with mixed settings: the server (auth on) gives up on EMP; a plain
# client goes on over kernel TCP, a strict one is refused with a clear error
bg 2 "$T/ip4.log" "$ER" iperf3 -s -p 5202
wait_port 2 5202
on 1 env EMP_CONF="$T/noauth.conf" EMP_SOCK_DEBUG=1 "$ER" iperf3 -c 10.77.0.2 -p 5202 -t 1 > "$T/mix.log" 2>&1 ||
	{ cat "$T/mix.log"; fail "auth-off client of an auth-on server did not fall back"; }
expect "auth-off client falls back to kernel TCP" grep -q "kernel TCP with 10.77.0.2:5202: server gave up on EMP" "$T/mix.log"
if on 1 env EMP_CONF="$T/noauth.conf" "$ER" --strict iperf3 -c 10.77.0.2 -p 5202 -t 1 > "$T/mix2.log" 2>&1; then
	fail "a strict auth-off client connected to an auth-on server"
fi
cat "$T/mix2.log"
expect "a strict auth-off client is refused with a clear error" grep -q "server gave up on EMP; strict mode refuses kernel TCP" "$T/mix2.log"
