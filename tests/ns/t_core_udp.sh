#!/usr/bin/env bash
# t_core_udp: the UDP transport (option transport udp): checksummed messages and a 20 MB socat stream under emp-run --strict arrive intact as UDP datagrams (GSO/GRO: several frames per datagram, no raw EMP frame on the wire), forged and garbage datagrams are counted drops, and 5 % datagram loss still delivers every byte.
# timeout: 180
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up --offloads on
cp "$EMP_CONF" "$T/conf"
printf 'option transport udp\noption checksum on\n' >>"$T/conf"
export EMP_CONF=$T/conf
# UDP bytes into host N (the cluster's nft counter on IPv4 UDP), and its kernel's UDP InDatagrams
udp_bytes() { on "$1" nft list counter netdev emp emp_udp | awk '/packets/ { print $4 }'; }
in_dgrams() { on "$1" awk '/^Udp: [0-9]/ { print $2 }' /proc/net/snmp; }
frames_rx() { sed -n 's/^emp: frames tx [0-9]* rx \([0-9]*\),.*/\1/p' "$1" | tail -1; }

# 1. emp-verify both ways (endpoint ids 1 and 2 are UDP ports 1 and 2)
raw0=$(emp_rx 2); d0=$(in_dgrams 2)
PIDS=()
bg 2 "$T/v.srv" "$BIN/emp-verify" -s -n 400 -t 60
sleep 0.3
on 1 "$BIN/emp-verify" -c h2 -n 400 -m 1000000,4,64,70000 -t 60 >"$T/v.cli" 2>&1 || { cat "$T/v.cli" "$T/v.srv"; fail "emp-verify client failed"; }
wait "${PIDS[0]}" || { cat "$T/v.srv"; fail "emp-verify server failed"; }
cat "$T/v.cli" "$T/v.srv"
expect "400 messages verified intact" grep -q "400 messages, .* 0 bad" "$T/v.srv"
if grep -q "drop csum" "$T/v.srv" "$T/v.cli"; then fail "frames failed their checksum"; fi
dg=$(( $(in_dgrams 2) - d0 )); fr=$(frames_rx "$T/v.srv")
at_most "raw EMP frames (EtherType 0x88b5) into h2" $(( $(emp_rx 2) - raw0 )) 0
at_least "UDP datagrams into h2" "$dg" 1000
at_least "frames per datagram x4 (GSO/GRO: $fr frames in $dg datagrams)" $(( fr * 4 / dg )) 8

# 2. 20 MB through socat, both ends under emp-run --strict (TCP carried by EMP over UDP)
head -c 20000000 /dev/urandom >"$T/in"
want=$(sha256sum <"$T/in")
u0=$(udp_bytes 2); raw0=$(emp_rx 2)
bg 2 "$T/s1.log" "$ER" --strict socat -u TCP-LISTEN:7100,reuseaddr "OPEN:$T/out1,creat,trunc"
wait_port 2 7100
on 1 "$ER" --strict socat -u "OPEN:$T/in" TCP:10.77.0.2:7100
wait "${PIDS[-1]}"
expect "socat client->server checksum" [ "$(sha256sum <"$T/out1")" = "$want" ]
at_least "UDP bytes into h2" $(( $(udp_bytes 2) - u0 )) 20000000
at_most "raw EMP frames into h2 during socat" $(( $(emp_rx 2) - raw0 )) 0

# 3. forged and garbage datagrams to the server's port while a transfer runs:
# counted drops (drop device), the transfer intact (they start first and
# overlap its start; all 200 are counted before the server's last look)
PIDS=()
bg 2 "$T/h.srv" "$BIN/emp-verify" -s -n 100 -t 60
sleep 0.3
on 1 python3 - "$(sed -n 's/^peer h1 [0-9.]* \([0-9a-f:]*\).*/\1/p' "$T/conf")" <<'PY' &
import socket, sys, time
mac = bytes.fromhex(sys.argv[1].replace(':', ''))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('10.77.0.1', 0))            # any port but 2: the frames claim endpoint 2
fr = bytearray(200)
fr[6:12] = mac; fr[12:14] = b'\x88\xb5'; fr[14 + 6:14 + 8] = (1).to_bytes(2, 'big'); fr[14 + 8:14 + 10] = (2).to_bytes(2, 'big')
for i in range(100):
    s.sendto(b'xyz', ('10.77.0.2', 1))
    s.sendto(bytes(fr), ('10.77.0.2', 1))
    time.sleep(0.001)
PY
py=$!
sleep 0.1
on 1 "$BIN/emp-verify" -c h2 -n 100 -m 1000000,4 -t 60 >"$T/h.cli" 2>&1 || { cat "$T/h.cli"; fail "client failed beside forged datagrams"; }
wait "$py"
wait "${PIDS[0]}" || { cat "$T/h.srv"; fail "server failed beside forged datagrams"; }
cat "$T/h.srv"
expect "100 messages intact beside forged datagrams" grep -q "100 messages, .* 0 bad" "$T/h.srv"
drops=$(sed -n 's/^emp:   drop device \([0-9]*\).*/\1/p' "$T/h.srv" | tail -1)
at_least "forged and garbage datagrams counted as drops" "${drops:-0}" 200

# 4. 5 % loss on the EMP ports (each datagram a GSO batch or one frame)
for h in 1 2; do
	on $h nft add rule netdev emp loss meta protocol ip ip protocol udp udp dport 1-2 numgen random mod 100 '<' 5 counter name emp_loss drop
done
PIDS=()
bg 2 "$T/l.srv" "$BIN/emp-verify" -s -n 100 -t 120
sleep 0.3
on 1 "$BIN/emp-verify" -c h2 -n 100 -m 1000000,4,70000 -t 120 >"$T/l.cli" 2>&1 || { cat "$T/l.cli"; fail "client failed under loss"; }
wait "${PIDS[0]}" || { cat "$T/l.srv"; fail "server failed under loss"; }
cat "$T/l.cli" "$T/l.srv"
expect "100 messages intact under 5 % loss" grep -q "100 messages, .* 0 bad" "$T/l.srv"
lost=$(on 2 nft list counter netdev emp emp_loss | awk '/packets/ { print $2 }')
at_least "datagrams dropped by the loss rule on h2" "${lost:-0}" 1
