#!/usr/bin/env bash
# t_sock_fdedge: fd-table edges: dup2/dup3/F_DUPFD of an EMP socket onto an fd beyond the shim's fd table: refused with an error, or the bytes go over EMP; the peer gets every byte taken and a clean EOF.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
FDEDGE=$ROOT/build/tests/sock/fdedge
N=200000
# dup PORT BASE RAISE [ENV...]: the client duplicates onto BASE.. (fdedge.c); checks the peer's view
dup() {
	local port=$1 base=$2 raise=$3 b0 w rc=0; shift 3
	b0=$(rxb 2)
	bg 2 "$T/s$port.log" "$ER" --strict "$SOCKT" sink-server "$port"
	local srv=${PIDS[-1]}
	wait_port 2 "$port"
	on 1 env "$@" "$ER" --strict "$FDEDGE" dup-high 10.77.0.2 "$port" $N "$base" "$raise" > "$T/c$port.log" 2>&1 || rc=$?
	if [ $rc = 3 ]; then
		cat "$T/c$port.log"; echo "skip: raising RLIMIT_NOFILE needs CAP_SYS_RESOURCE"
		kill "$srv" 2>/dev/null || true; return 0
	fi
	[ $rc = 0 ] || { cat "$T/c$port.log"; fail "client"; }
	wait "$srv" || true
	cat "$T/c$port.log" "$T/s$port.log"
	w=$(awk '/^wrote/ { print $2 }' "$T/c$port.log")
	expect "the peer got every byte taken ($w), then a clean EOF" grep -q "^end EOF after $w bytes" "$T/s$port.log"
	at_least "bytes taken (the original and every duplicate given)" "$w" \
		$(( N * (1 + $(grep -c -- '-> [0-9]' "$T/c$port.log")) ))
	at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) "$w"
}
# the table smaller than the fds (EMP_FD_TABLE lowers it: what a NOFILE limit raised after
# the table's first use does): each duplicate is refused
dup 7950 5000 0 EMP_FD_TABLE=4096
for d in dup2 dup3 F_DUPFD; do expect "$d beyond the table refused" grep -q "^$d -> -1" "$T/c7950.log"; done
# the limit really raised after the first socket (root with CAP_SYS_RESOURCE only): each duplicate works
dup 7951 100000 1
