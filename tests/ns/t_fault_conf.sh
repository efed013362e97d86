#!/usr/bin/env bash
# t_fault_conf: config errors, one per class: `emp-run --check-conf FILE` names file:line and exits nonzero, `emp-run --conf FILE PROG` never starts PROG; a valid config lists peers, reachability and rules.
# timeout: 30
. "$(dirname "$0")/lib.sh"
ER=$BIN/emp-run
T=$(mktemp -d /tmp/emp-conf-XXXX)
trap 'cleanup; rm -rf "$T"' EXIT
cluster_up
GOOD=$(grep '^peer' "$EMP_CONF")

# bad CLASS LINE MESSAGE-REGEX TEXT: TEXT (after the good peer lines) is wrong on line LINE
# (counted in the whole file); both the check and the refusal to run must say so.
n=0
bad() {
	local class=$1 line=$2 re=$3 text=$4 f="$T/$1.conf" rc=0
	{ echo "$GOOD"; printf '%s\n' "$text"; } > "$f"
	"$ER" --check-conf "$f" > "$T/out" 2> "$T/err" || rc=$?
	[ "$rc" -ne 0 ] || fail "$class: --check-conf exited 0"
	grep -q "^emp-run: $f:$line: .*$re" "$T/err" || { cat "$T/err"; fail "$class: no '$f:$line: ...$re' message"; }
	rm -f "$T/marker"; rc=0
	"$ER" --conf "$f" sh -c "touch $T/marker" 2> "$T/err2" || rc=$?
	[ "$rc" -ne 0 ] || fail "$class: emp-run --conf exited 0"
	[ ! -e "$T/marker" ] || fail "$class: the program was started on a broken config"
	grep -q "$f:$line: .*$re" "$T/err2" || { cat "$T/err2"; fail "$class: emp-run did not give the parser's message"; }
	# the same through $EMP_CONF, inside a host of the cluster
	rc=0
	EMP_CONF=$f on 1 "$ER" --strict sh -c "touch $T/marker" 2>/dev/null || rc=$?
	[ "$rc" -ne 0 ] && [ ! -e "$T/marker" ] || fail "$class: started via \$EMP_CONF"
	echo "ok: $class: $(head -1 "$T/err")"
	n=$((n + 1))
}
bad bad-mac            3 "bad MAC address"         "peer h3 10.77.0.3 02:00:00:00:00:zz"
bad multicast-mac      3 "multicast"               "peer h3 10.77.0.3 03:00:00:00:00:01"
bad bad-ip             3 "bad IPv4 address"        "peer h3 10.77.0.300 02:00:00:00:00:03"
bad duplicate-name     3 "duplicate peer name"     "peer h1 10.77.0.9 02:00:00:00:00:09"
bad duplicate-mac      3 "duplicate MAC address"   "peer h3 10.77.0.3 $(awk 'NR==1 {print $4}' <<<"$GOOD")"
bad unknown-option     4 "unknown option"          $'option ack_every 3\noption ack_evry 3'
bad out-of-range       3 "must be 1..64"           "option window 65"
bad not-a-number       3 "expected a decimal"      "option retries 12x"
bad rto-order          4 "rto_max_us"              $'option rto_us 5000\noption rto_max_us 100'
bad unknown-directive  3 "unknown directive"       "peers h3 10.77.0.3 02:00:00:00:00:03"
bad unknown-rule-peer  3 "unknown peer"            "use kernel peer h9"
bad bad-port           3 "bad port"                "use kernel port 9-3"

# missing file: named, nonzero, the program never starts
rc=0; "$ER" --check-conf "$T/none.conf" 2> "$T/err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "$T/none.conf: no such cluster config file" "$T/err" || fail "missing file: check-conf"
rc=0; "$ER" --conf "$T/none.conf" sh -c "touch $T/marker" 2> "$T/err" || rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$T/marker" ] && grep -q "no such cluster config file" "$T/err" || fail "missing file: run"
rc=0; EMP_CONF=$T/none.conf "$ER" sh -c "touch $T/marker" 2>/dev/null || rc=$?
[ "$rc" -ne 0 ] && [ ! -e "$T/marker" ] || fail "missing file via \$EMP_CONF: run"
echo "ok: missing-file: $(head -1 "$T/err")"
# a directory is not a config
rc=0; "$ER" --check-conf "$T" 2> "$T/err" || rc=$?
[ "$rc" -ne 0 ] && grep -q "is a directory" "$T/err" || fail "directory as config"
expect "every error class refused ($n + missing + directory)" [ "$n" -eq 12 ]

# a valid config with rules: exit 0, peers with this host and reachability, the rules
{ cat "$EMP_CONF"; echo "option checksum on"; echo "use kernel port 22"; echo "use emp port 5201-5210 prog iperf3 peer h2"; } > "$T/good.conf"
on 1 "$ER" --check-conf "$T/good.conf" > "$T/out" || { cat "$T/out"; fail "valid config: nonzero exit"; }
cat "$T/out"
expect "valid config reported" grep -q "valid: 2 peers, 2 rules" "$T/out"
expect "h1 is this host" grep -Eq "^[0-9]+ +h1 +10\.77\.0\.1 .* this host \(MAC on eth0\)" "$T/out"
expect "h2 reachable via eth0" grep -Eq "^[0-9]+ +h2 +10\.77\.0\.2 +[0-9a-f:]{17} +eth0 +reachable via eth0 \(up\)" "$T/out"
expect "options shown" grep -q "checksum on" "$T/out"
expect "rules shown with lines" grep -Eq "line 7 +use emp +port 5201-5210 +prog iperf3 +peer h2" "$T/out"
# the default file comes from $EMP_CONF when no FILE is given
EMP_CONF=$T/good.conf on 2 "$ER" --check-conf > "$T/out2" || fail "--check-conf without FILE"
expect "no FILE: \$EMP_CONF, seen from h2" grep -Eq "^[0-9]+ +h2 .* this host" "$T/out2"
# interface down: the peer is reported unreachable (still a valid config)
on 1 ip link set eth0 down
on 1 "$ER" --check-conf "$T/good.conf" > "$T/out3" || fail "valid config with the link down: nonzero exit"
on 1 ip link set eth0 up
grep h2 "$T/out3"
expect "h2 unreachable while eth0 is down" grep -Eq "h2 .* unreachable: eth0 is down" "$T/out3"
# a good config still runs the program
on 1 "$ER" --conf "$T/good.conf" sh -c "touch $T/marker" || fail "valid config: program not run"
expect "program runs on a valid config" [ -e "$T/marker" ]
