#!/usr/bin/env bash
# t_fault_load: 4 hosts, every host a server and a client process under emp-run --strict, all pairs: 1000 concurrent connections in all, each carrying 1 MiB each way with every byte checked at both ends; all complete. Prints engine usage and memory per process.
# timeout: 240
# FAULT_LOAD_CONNS (default 1000, a multiple of 4) and FAULT_LOAD_BYTES (default 1048576) scale it,
# FAULT_LOAD_LIMIT (180 s) bounds the processes.
# Clients issue every non-blocking connect at once (the shim negotiates them concurrently), then
# run them all at once; FAULT_LOAD_BURST=0 sets them up one after the other instead.
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
LT=$ROOT/build/tests/sock/loadt
[ -x "$LT" ] || fail "build first (make)"
H=4
N=${FAULT_LOAD_CONNS:-1000}
B=${FAULT_LOAD_BYTES:-1048576}
LIMIT=${FAULT_LOAD_LIMIT:-180}        # seconds the client and server processes may run
# The negotiation bounds are the defaults: a connection may wait in the listen backlog of a server
# busy with 250 others, which is fine once that server has offered EMP to this client process
# before (EMP_NEG_TIMEOUT_KNOWN_MS, preload/README.md). FAULT_LOAD_NEG_MS sets EMP_NEG_TIMEOUT_MS.
[ -z "${FAULT_LOAD_NEG_MS:-}" ] || export EMP_NEG_TIMEOUT_MS=$FAULT_LOAD_NEG_MS
PER=$((N / H))
cluster_up --hosts $H
# Each connection holds 69 engine descriptors (32 data + 4 control receives, 32 + 1 sends):
# 250 connections per process take 17250 of the default 32768. FAULT_LOAD_DESCRIPTORS=4096
# shows a shortage (most connections then use kernel TCP, which strict mode refuses).
[ -z "${FAULT_LOAD_DESCRIPTORS:-}" ] || echo "option descriptors $FAULT_LOAD_DESCRIPTORS" >> "$EMP_CONF"
"$ER" --check-conf "$EMP_CONF" > /dev/null || fail "config"

# client i opens PER connections, round-robin over the other hosts; servers expect their share
declare -A EXP
for i in $(seq $H); do
	tg=(); for j in $(seq $H); do [ "$j" = "$i" ] || tg+=("$j"); done
	for ((k = 0; k < PER; k++)); do j=${tg[$((k % ${#tg[@]}))]}; EXP[$j]=$(( ${EXP[$j]:-0} + 1 )); done
done
SAMPLE=()
for j in $(seq $H); do
	bg "$j" "$T/s$j.log" "$ER" --strict "$LT" server 7800 "${EXP[$j]:-0}" "$B" "$LIMIT"
	SAMPLE+=("server-h$j=${PIDS[-1]}:${EXP[$j]:-0}")
done
for j in $(seq $H); do wait_port "$j" 7800; done
rx0=0; for j in $(seq $H); do rx0=$((rx0 + $(emp_rx "$j"))); done
t0=$(date +%s%N)
CLI=()
for i in $(seq $H); do
	tg=(); for j in $(seq $H); do [ "$j" = "$i" ] || tg+=("10.77.0.$j:7800"); done
	bg "$i" "$T/c$i.log" "$ER" --strict "$LT" client "$i" "$PER" "$B" "$LIMIT" \
		$([ "${FAULT_LOAD_BURST:-1}" = 1 ] && echo --burst) "${tg[@]}"
	CLI+=("${PIDS[-1]}")
	SAMPLE+=("client-h$i=${PIDS[-1]}:$PER")
done
python3 "$ROOT/tests/ns/progs/memsample.py" "$BIN/empstat" 0.5 "${SAMPLE[@]}" > "$T/mem.txt" & msp=$!
PIDS+=("$msp")
bad=0 k=0
for p in "${PIDS[@]:0:$((2 * H))}"; do
	rc=0; wait "$p" || rc=$?
	[ "$rc" -eq 0 ] || { bad=$((bad + 1)); echo "${SAMPLE[$k]%%=*} exited with status $rc$([ "$rc" -gt 128 ] && echo " (signal $((rc - 128)))")"; }
	k=$((k + 1))
done
t1=$(date +%s%N)
wait "$msp" || true
for f in "$T"/c*.log "$T"/s*.log; do grep -E "^(client [0-9]+|server):? .*connections, |^client [0-9]+: all [0-9]+ connected in " "$f" || true; done
# anything unusual first (a crash message), then the first per-connection errors
{ grep -hvE "^(listening|client [0-9]+:|server:|loadt: (client|server) conn)" "$T"/c*.log "$T"/s*.log || true; } | head -10
{ grep -hE "^loadt: (client|server) conn" "$T"/c*.log "$T"/s*.log || true; } | head -5
cat "$T/mem.txt"
rx=0; for j in $(seq $H); do rx=$((rx + $(emp_rx "$j"))); done
ms=$(( (t1 - t0) / 1000000 ))
echo "load: $N connections x $B bytes each way in $ms ms ($(( 2 * N * (B / 1000) / (ms > 0 ? ms : 1) )) MB/s in all), $((rx - rx0)) EMP frames"
[ "$bad" -eq 0 ] || fail "$bad of $((2 * H)) processes failed"
ok=$(cat "$T"/c*.log | sed -n 's/^client .* connections, \([0-9]*\) ok, 0 bad.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
expect "all $N connections verified at both ends ($ok)" [ "$ok" -eq "$N" ]
sok=$(cat "$T"/s*.log | sed -n 's/^server: .* connections, \([0-9]*\) ok, 0 bad.*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
expect "servers verified all $N ($sok)" [ "$sok" -eq "$N" ]
at_least "EMP carried the bytes (frames)" $((rx - rx0)) $(( 2 * N * (B / 1500) ))
