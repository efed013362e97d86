#!/usr/bin/env bash
# t_fault_loss: checksummed socat streams under emp-run --strict with 0/1/5/20 % of EMP frames dropped (both directions) and under loss bursts switched on and off mid-transfer: bytes identical, no hang, EMP carried them.
# timeout: 300
# Sizes: 200 MB at 0, 1 and 5 % and in the burst runs, 50 MB at 20 % (FAULT_MB, FAULT_MB_HEAVY
# override). Throughput at 0 % and 1 % is printed (a benchmark figure, not an assertion).
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
MB=${FAULT_MB:-200}
MB_HEAVY=${FAULT_MB_HEAVY:-50}
LIMIT=${FAULT_XFER_LIMIT:-90}          # seconds one transfer may take before it counts as a hang
cluster_up
head -c $((MB * 1000000)) /dev/urandom > "$T/in.big"
head -c $((MB_HEAVY * 1000000)) "$T/in.big" > "$T/in.heavy"
declare -A SUM=([big]=$(sha256sum < "$T/in.big") [heavy]=$(sha256sum < "$T/in.heavy"))
declare -A SIZE=([big]=$((MB * 1000000)) [heavy]=$((MB_HEAVY * 1000000)))
port=7400
RATE=

# xfer FROM TO FILE LABEL: socat FILE from host FROM to host TO over EMP; checks the sha256, the EMP
# frames that arrived at TO, and sets RATE (MB/s over the client's lifetime).
xfer() {
	local from=$1 to=$2 f=$3 label=$4 bytes=${SIZE[$3]} rc=0
	port=$((port + 1))
	rm -f "$T/out"
	local rx0 lost0
	rx0=$(emp_rx "$to")
	lost0=$(on "$to" nft list counter netdev emp emp_loss | awk '/packets/ { print $2 }')
	bg "$to" "$T/srv.log" timeout "$LIMIT" "$ER" --strict socat -u "TCP-LISTEN:$port,reuseaddr" "OPEN:$T/out,creat,trunc"
	local spid=${PIDS[-1]}
	wait_port "$to" "$port"
	local t0 t1
	t0=$(date +%s%N)
	on "$from" timeout "$LIMIT" "$ER" --strict socat -u "OPEN:$T/in.$f" "TCP:10.77.0.$to:$port" 2> "$T/cli.log" || rc=$?
	t1=$(date +%s%N)
	[ "$rc" -eq 0 ] || { cat "$T/cli.log" "$T/srv.log"; fail "$label: client exit $rc$([ "$rc" = 124 ] && echo ' (hang: timeout)')"; }
	wait "$spid" || { cat "$T/srv.log"; fail "$label: server failed"; }
	[ "$(sha256sum < "$T/out")" = "${SUM[$f]}" ] || fail "$label: sha256 differs"
	local frames lost ms
	frames=$(( $(emp_rx "$to") - rx0 ))
	lost=$(( $(on "$to" nft list counter netdev emp emp_loss | awk '/packets/ { print $2 }') - lost0 ))
	ms=$(( (t1 - t0) / 1000000 ))
	RATE=$(( bytes / 1000 / (ms > 0 ? ms : 1) ))
	[ "$frames" -ge $((bytes / 1500)) ] || fail "$label: only $frames EMP frames arrived at h$to (< $((bytes / 1500)))"
	echo "ok: $label: $((bytes / 1000000)) MB h$from->h$to sha256 identical in $ms ms ($RATE MB/s), $frames EMP frames in, $lost dropped by nft"
	LOST=$lost
}

# steady loss, each direction
xfer 1 2 big "0% loss"; rate0=$RATE
for p in 1 5 20; do
	cluster_loss "$p"
	f=big; [ "$p" -ge 20 ] && f=heavy
	for d in "1 2" "2 1"; do
		set -- $d
		xfer "$1" "$2" "$f" "$p% loss"
		[ "$p" = 1 ] && [ "$1" = 1 ] && rate1=$RATE
		at_least "$p% loss: frames dropped by nft" "$LOST" $(( SIZE[$f] / 1500 * p / 200 ))
	done
done
cluster_loss 0
echo "throughput: 0% loss $rate0 MB/s, 1% loss $rate1 MB/s, ratio $(( rate1 * 100 / (rate0 > 0 ? rate0 : 1) ))%"

# bursts: the rule switched on and off during the transfer (30 % for 150 ms, off 150 ms,
# 100 % for 300 ms: a blackout, off 150 ms, ...). The toggler counts the bursts it could set
# (a rule nft refuses stops it, and the count check fails).
burst_loop() {
	local n=0
	set +e
	while :; do
		cluster_loss 30 || return 1; sleep 0.15; cluster_loss 0; n=$((n + 1)); echo "$n" > "$T/bursts.tmp"; mv -f "$T/bursts.tmp" "$T/bursts"; sleep 0.15
		cluster_loss 100 || return 1; sleep 0.3; cluster_loss 0; n=$((n + 1)); echo "$n" > "$T/bursts.tmp"; mv -f "$T/bursts.tmp" "$T/bursts"; sleep 0.15
	done
}
for d in "1 2" "2 1"; do
	set -- $d
	echo 0 > "$T/bursts"
	burst_loop & tog=$!
	PIDS+=("$tog")
	xfer "$1" "$2" big "bursts"
	kill "$tog" 2>/dev/null || true
	wait "$tog" 2>/dev/null || true
	cluster_loss 0
	b=$(cat "$T/bursts" 2>/dev/null); b=${b:-0}   # the toggler writes it atomically (mv)
	at_least "bursts h$1->h$2: loss bursts during the transfer" "$b" 2
	at_least "bursts h$1->h$2: frames dropped by nft" "$LOST" 100
done
