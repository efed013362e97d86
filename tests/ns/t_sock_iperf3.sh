#!/usr/bin/env bash
# t_sock_iperf3: iperf3 client and server under emp-run --strict: -t 3, -P 4, -R, --bidir; EMP carried the bytes.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
bg 2 "$T/srv.log" "$ER" --strict iperf3 -s -p 5201
wait_port 2 5201
run() { # run NAME RXHOST ARGS...
	local name=$1 h=$2; shift 2
	local b0; b0=$(rxb "$h")
	on 1 "$ER" --strict iperf3 -c 10.77.0.2 -p 5201 -J "$@" > "$T/$name.json" || { cat "$T/$name.json"; fail "iperf3 $name"; }
	local bytes; bytes=$(python3 -c "import json; e=json.load(open('$T/$name.json'))['end']; print(int(e['sum_received']['bytes'] if 'sum_received' in e else e['sum']['bytes']))")
	local gbps; gbps=$(python3 -c "import json; e=json.load(open('$T/$name.json'))['end']; print(round(e['sum_received']['bits_per_second']/1e9,2))")
	echo "iperf3 $name: $bytes bytes, $gbps Gbit/s"
	[ "$bytes" -gt 1000000 ] || fail "iperf3 $name moved only $bytes bytes"
	at_least "EMP bytes into h$h for $name" $(( $(rxb "$h") - b0 )) "$bytes"
}
run fwd 2 -t 3
run p4 2 -t 3 -P 4
run rev 1 -t 3 -R
run bidir 2 -t 3 --bidir
