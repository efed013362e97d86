#!/usr/bin/env bash
# t_app_redis: redis-server and redis-benchmark (-c 50, and -P 16) and redis-cli under emp-run --strict: no errors, every request counted by the server, values written and read back intact, EMP carried them; replication between the hosts (a forked child hands each full resync to the parent through a pipe while the parent holds EMP connections): 20000 keys loaded, a later write replicated, a second full resync.
# timeout: 120
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || fail "redis not installed (make deps)"
N=${APP_REDIS_N:-20000}          # requests per command (SET, GET) per benchmark run
K=${APP_REDIS_KEYS:-800}         # keys redis-cli writes and reads back
cluster_up
bg 2 "$T/srv.log" "$ER" --strict redis-server --bind 10.77.0.2 --port 6380 --save '' --appendonly no \
	--protected-mode no --daemonize no --loglevel warning --dir "$T"
srv=${PIDS[-1]}
wait_port 2 6380
RC=(on 1 "$ER" --strict redis-cli -h 10.77.0.2 -p 6380)
# calls CMD: how often the server ran CMD (asked over kernel TCP from h2 itself)
calls() {
	on 2 redis-cli -h 10.77.0.2 -p 6380 info commandstats | tr -d '\r' |
		sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p" | grep . || echo 0
}
frames2() { emp_rx 2; }
[ "$("${RC[@]}" PING)" = PONG ] || fail "PING over EMP"

# 1. redis-benchmark: 50 connections, then 50 connections pipelining 16
for P in 1 16; do
	f0=$(frames2); b0=$(rxb 2); b1=$(rxb 1); s0=$(calls set); g0=$(calls get)
	on 1 "$ER" --strict redis-benchmark -h 10.77.0.2 -p 6380 -t set,get -n "$N" -c 50 -P "$P" -r 100000 --csv \
		> "$T/bench$P.csv" 2> "$T/bench$P.err" || { cat "$T/bench$P.csv" "$T/bench$P.err"; fail "redis-benchmark -P $P exited $?"; }
	cat "$T/bench$P.csv"
	! grep -qiE 'error|could not|refused|reset' "$T/bench$P.csv" "$T/bench$P.err" || { cat "$T/bench$P.err"; fail "redis-benchmark -P $P reported errors"; }
	[ "$(grep -c '^"\(SET\|GET\)",' "$T/bench$P.csv")" = 2 ] || fail "redis-benchmark -P $P: no SET and GET results"
	s=$(( $(calls set) - s0 )); g=$(( $(calls get) - g0 ))
	[ "$s" = "$N" ] && [ "$g" = "$N" ] || fail "the server ran $s SETs and $g GETs for -P $P, not $N each"
	echo "ok: -P $P: the server ran $N SETs and $N GETs"
	if [ "$P" = 1 ]; then   # each request is its own message: at least one frame each
		at_least "EMP frames into h2, -P 1" $(( $(frames2) - f0 )) $(( 2 * N ))
	fi
	at_least "EMP bytes into h2, -P $P (requests of >= 30 bytes)" $(( $(rxb 2) - b0 )) $(( 2 * N * 30 ))
	at_least "EMP bytes into h1, -P $P (replies of >= 5 bytes)" $(( $(rxb 1) - b1 )) $(( 2 * N * 5 ))
done

# 2. redis-cli: K distinct keys with values of random length (hex, 1..6000 characters)
#    written in one --pipe, read back with one MGET; four binary values (every byte value,
#    CR LF included) of 1 B .. 1 MiB written with -x and read back with GET
python3 - "$T" "$K" <<'PY'
import os, random, sys
d, k = sys.argv[1], int(sys.argv[2])
rnd = random.Random(12)
with open(d + "/set.resp", "wb") as cmds, open(d + "/expect", "w") as exp, open(d + "/keys", "w") as keys:
    for i in range(k):
        key = "t12:%d:%x" % (i, rnd.getrandbits(32))
        val = rnd.randbytes(rnd.randint(1, 3000)).hex()[: rnd.randint(1, 6000)] or "0"
        parts = [b"SET", key.encode(), val.encode()]
        cmds.write(b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        exp.write(val + "\n")
        keys.write(key + "\n")
for i, n in enumerate((1, 1000, 65536, 1 << 20)):
    with open(d + "/bin%d" % i, "wb") as f:
        f.write(bytes(range(256)) * (n // 256) + os.urandom(n % 256))
PY
b0=$(rxb 2); b1=$(rxb 1); s0=$(calls set)
"${RC[@]}" --pipe < "$T/set.resp" > "$T/pipe.out" 2>&1 || { cat "$T/pipe.out"; fail "redis-cli --pipe"; }
cat "$T/pipe.out"
grep -q "errors: 0, replies: $K" "$T/pipe.out" || fail "redis-cli --pipe: not $K replies without errors"
[ $(( $(calls set) - s0 )) = "$K" ] || fail "the server ran $(( $(calls set) - s0 )) SETs, not $K"
"${RC[@]}" --raw MGET $(cat "$T/keys") > "$T/got" || fail "redis-cli MGET"
cmp "$T/expect" "$T/got" || fail "MGET: $K values not read back as written"
echo "ok: $K values of $(wc -c < "$T/expect") bytes written and read back intact"
vbytes=$(wc -c < "$T/expect")
for i in 0 1 2 3; do
	"${RC[@]}" -x SET "t12:bin$i" < "$T/bin$i" | grep -qx OK || fail "SET -x bin$i"
	"${RC[@]}" --raw GET "t12:bin$i" > "$T/bin$i.got" || fail "GET bin$i"
	# --raw ends the reply with a newline of its own
	[ "$(tail -c 1 "$T/bin$i.got" | od -An -tx1 | tr -d ' ')" = 0a ] && head -c -1 "$T/bin$i.got" | cmp - "$T/bin$i" \
		|| fail "binary value $i ($(wc -c < "$T/bin$i") bytes) not read back intact"
	echo "ok: binary value of $(wc -c < "$T/bin$i") bytes intact"
	vbytes=$(( vbytes + $(wc -c < "$T/bin$i") ))
done
at_least "EMP bytes into h2 (the values went over EMP)" $(( $(rxb 2) - b0 )) "$vbytes"
at_least "EMP bytes into h1 (and came back over EMP)" $(( $(rxb 1) - b1 )) "$vbytes"

# 3. the server's engine counted it all
sleep 0.3                        # one statistics update
"$BIN/empstat" --json "$srv" > "$T/srv.json" || fail "empstat: the server publishes nothing"
python3 - "$T/srv.json" "$N" <<'PY' || fail "server engine counters"
import json, sys
d = json.load(open(sys.argv[1]))["endpoints"][0]
c, n = d["counters"], int(sys.argv[2])
print("server engine: msgs_received %d, msgs_sent %d, bytes_received %d, retransmits %d"
      % (c["msgs_received"], c["msgs_sent"], c["bytes_received"], c["retransmits"]))
assert d["program"] == "redis-server", d["program"]
assert c["msgs_received"] >= 2 * n and c["msgs_sent"] >= 2 * n, "fewer messages than requests"
assert c["bytes_received"] >= 2 * n * 30 + (1 << 20), "fewer bytes than the requests and values"
print("ok: the server's engine received and sent at least one message per request")
PY
kill "$srv"; wait "$srv" 2>/dev/null || true
! grep -qiE 'emp:.*(fail|error)' "$T/srv.log" || { cat "$T/srv.log"; fail "the server's shim complained"; }

# 4. replication between the hosts, both under --strict: the master (h2) forks a
# child for each full resync, which hands the RDB to the parent through a pipe
# while the parent holds EMP connections (the child's exit must leave them alone);
# a replica on h1 loads 20000 keys, takes later writes, and a second full resync
# (the replica asks again) works over the same master
bg 2 "$T/m.log" "$ER" --strict redis-server --bind 10.77.0.2 --port 6381 --save '' --appendonly no \
	--protected-mode no --daemonize no --dir "$T" --repl-diskless-sync yes --repl-diskless-sync-delay 0
msrv=${PIDS[-1]}
wait_port 2 6381
MC=(on 2 "$ER" --strict redis-cli -h 10.77.0.2 -p 6381)
seq 1 20000 | awk '{ printf "SET k%d v%d-%s\n", $1, $1, "0123456789abcdef0123456789abcdef" }' |
	on 2 "$ER" --strict redis-cli -h 10.77.0.2 -p 6381 --pipe > "$T/mpipe.log" 2>&1 || { cat "$T/mpipe.log"; fail "loading the master"; }
mkdir -p "$T/replica"
b1=$(rxb 1)
bg 1 "$T/r.log" "$ER" --strict redis-server --bind 10.77.0.1 --port 6382 --save '' --appendonly no \
	--protected-mode no --daemonize no --dir "$T/replica" --replicaof 10.77.0.2 6381
rsrv=${PIDS[-1]}
wait_port 1 6382
RRC=(on 1 "$ER" --strict redis-cli -h 10.77.0.1 -p 6382)
synced() { # synced N: the replica's link is up and it holds N keys (10 s)
	for i in $(seq 100); do
		[ "$("${RRC[@]}" info replication | tr -d '\r' | sed -n 's/^master_link_status://p')" = up ] &&
			[ "$("${RRC[@]}" dbsize)" = "$1" ] && return 0
		sleep 0.1
	done
	return 1
}
synced 20000 || { tail -5 "$T/r.log" "$T/m.log"; fail "the replica did not load the master's 20000 keys"; }
echo "ok: a full resync over EMP loaded 20000 keys on the replica"
at_least "EMP bytes into the replica's host (the RDB: 20000 keys, LZF-compressed values)" $(( $(rxb 1) - b1 )) 400000
[ "$("${MC[@]}" SET live 42)" = OK ] || fail "SET on the master"
for i in $(seq 50); do [ "$("${RRC[@]}" GET live)" = 42 ] && break; sleep 0.1; done
[ "$("${RRC[@]}" GET live)" = 42 ] || fail "a later write did not reach the replica (the link after the resync child exited)"
echo "ok: a write after the resync reached the replica"
[ "$("${RRC[@]}" GET k12345)" = "v12345-0123456789abcdef0123456789abcdef" ] || fail "a value differs on the replica"
"${RRC[@]}" replicaof no one > /dev/null && "${RRC[@]}" flushall > /dev/null
"${RRC[@]}" replicaof 10.77.0.2 6381 > /dev/null
synced 20001 || { tail -5 "$T/r.log" "$T/m.log"; fail "a second full resync failed"; }
echo "ok: a second full resync (after the replica emptied itself) loaded all 20001 keys"
kill "$rsrv" "$msrv"; wait "$rsrv" "$msrv" 2>/dev/null || true
! grep -qiE 'emp:.*(fail|error)|strict mode' "$T/m.log" "$T/r.log" || { cat "$T/m.log" "$T/r.log"; fail "a shim complained"; }
