# shellcheck shell=bash
# bench_lib.sh: helpers for scripts/bench: progress lines, servers and clients in the
# cluster namespaces (every wait bounded), CPU time of processes, EMP wire counters.
# Sourced by scripts/bench, which sets ROOT, P (namespace prefix), RAW (raw output dir).

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }

# on N CMD...: run CMD in host N's namespace
on() { local h=$1; shift; ip netns exec "${P}${h}" "$@"; }

# pin_cmd N: with PIN=1, the taskset prefix that keeps host N's programs on CPU N-1
# (the two hosts on separate CPUs, like two machines); nothing otherwise
PIN=${PIN:-0}
pin_cmd() {
	[ "$PIN" = 1 ] || return 0
	echo taskset -c $((($1 - 1) % $(nproc)))
}

# ---- servers -------------------------------------------------------------------
# Every server we start is in SERVERS; stop_all kills each by its PID.
SERVERS=()

# srv_start HOST LOG CMD...: start CMD on HOST in the background; sets SRV_PID.
# (bash execs `ip netns exec` directly in the forked child, and ip netns exec and
# emp-run exec the program, so $! is the server program itself.)
srv_start() {
	local h=$1 logf=$2; shift 2
	# shellcheck disable=SC2046
	ip netns exec "${P}${h}" $(pin_cmd "$h") "$@" >"$logf" 2>&1 9>&- &
	SRV_PID=$!
	SERVERS+=("$SRV_PID")
}

# srv_alive PID
srv_alive() { kill -0 "$1" 2>/dev/null; }

# srv_wait_port HOST PORT PID [SECONDS]: wait (bounded) until PID listens on TCP PORT.
srv_wait_port() {
	local h=$1 port=$2 pid=$3 secs=${4:-5} i n
	n=$((secs * 20))
	for ((i = 0; i < n; i++)); do
		srv_alive "$pid" || return 1
		if on "$h" ss -ltnH "sport = :$port" 2>/dev/null | grep -q .; then return 0; fi
		sleep 0.05
	done
	return 1
}

# srv_stop PID: TERM, then KILL after 3 s (bounded); reaps it.
srv_stop() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	if srv_alive "$pid"; then
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 60; i++)); do
			srv_alive "$pid" || break
			# a zombie child of ours counts as gone once reaped below
			[ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
			sleep 0.05
		done
		if srv_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
	fi
	wait "$pid" 2>/dev/null || true
	local s=() p
	for p in "${SERVERS[@]:-}"; do [ -n "$p" ] && [ "$p" != "$pid" ] && s+=("$p"); done
	SERVERS=("${s[@]:-}")
}

stop_all() {
	local p
	for p in "${SERVERS[@]:-}"; do [ -n "$p" ] && srv_stop "$p"; done
	SERVERS=()
}

# ns_sweep: kill (by PID) anything still running in our own host namespaces
# (only processes this script started can be there), so none outlives the cluster.
ns_sweep() {
	local ns pid
	for ns in "${P}1" "${P}2" "${P}sw"; do
		ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx -- "$ns" || continue
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
	done
}

# ---- clients -------------------------------------------------------------------
# cl_run SECONDS HOST OUT ERR CPUFILE CMD...: run CMD on HOST bounded by SECONDS
# (then TERM, KILL 2 s later); writes the user+system CPU seconds of CMD and its
# descendants to CPUFILE; returns CMD's exit status (124: timed out).
cl_run() {
	local secs=$1 h=$2 out=$3 err=$4 cpuf=$5; shift 5
	(
		rc=0
		# shellcheck disable=SC2046
		timeout -k 2 "$secs" ip netns exec "${P}${h}" $(pin_cmd "$h") "$@" >"$out" 2>"$err" </dev/null 9>&- || rc=$?
		# `times` must run in this shell (not in a pipeline's subshell) to see its children
		times >"$cpuf.times"
		awk 'function s(x, a) { split(x, a, "m"); sub(/s$/, "", a[2]); return a[1] * 60 + a[2] }
			NR == 2 { printf "%.3f\n", s($1) + s($2) }' "$cpuf.times" >"$cpuf"
		rm -f "$cpuf.times"
		exit "$rc"
	)
}

# proc_cpu PID: user+system CPU seconds of a running process (all its threads), or "null"
proc_cpu() {
	local tck
	tck=$(getconf CLK_TCK 2>/dev/null || echo 100)
	if [ -r "/proc/$1/stat" ]; then
		sed 's/^.*) //' "/proc/$1/stat" | awk -v t="$tck" '{ printf "%.3f\n", ($12 + $13) / t }'
	else
		echo null
	fi
}

# machine_cpu: busy CPU seconds of the whole machine so far (user+nice+system+irq+softirq
# of every CPU, from /proc/stat): catches the softirq work no process is charged for,
# and everything else running on the machine too
# perf_begin FILE: count system calls and context switches on the whole machine
# (perf stat -a) until perf_end; prints the counter's PID (empty: no perf)
perf_begin() {
	command -v perf >/dev/null || return 0
	perf stat -a -x, -e raw_syscalls:sys_enter,context-switches -o "$1" >/dev/null 2>&1 &
	echo $!
}

# perf_end PID FILE: stop it; prints "SYSCALLS CSWITCHES" (null null when unknown)
perf_end() {
	local pid=$1 f=$2
	if [ -z "$pid" ]; then echo "null null"; return 0; fi
	kill -INT "$pid" 2>/dev/null
	local i=0   # (called in a subshell: perf is not its child to wait for)
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	awk -F, '$3 ~ /^raw_syscalls/ { sc = $1 } $3 ~ /^context-switches/ { cs = $1 }
		END { print (sc ~ /^[0-9]+$/ ? sc : "null"), (cs ~ /^[0-9]+$/ ? cs : "null") }' "$f" 2>/dev/null || echo "null null"
}

machine_cpu() {
	awk -v t="$(getconf CLK_TCK 2>/dev/null || echo 100)" '$1 == "cpu" { printf "%.3f\n", ($2 + $3 + $4 + $7 + $8) / t; exit }' /proc/stat
}

# port_pid HOST PORT: PID of the process listening on TCP PORT on HOST (or empty)
port_pid() {
	on "$1" ss -ltnpH "sport = :$2" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

# wire_ctr: the nft counter (scripts/cluster) of EMP's wire: EtherType 0x88B5 frames, or
# with EMP_TRANSPORT=udp IPv4 UDP datagrams (the EMP endpoints' and the negotiation's: a
# few hundred bytes per connection)
wire_ctr() { if [ "${EMP_TRANSPORT:-}" = udp ]; then echo emp_udp; else echo emp_rx; fi; }

# wire_bytes: EMP bytes that arrived at h1 and h2 so far (wire_ctr)
wire_bytes() {
	local h b t=0 c
	c=$(wire_ctr)
	for h in 1 2; do
		b=$(on "$h" nft list counter netdev emp $c 2>/dev/null | awk '/packets/ { print $4 }')
		t=$((t + ${b:-0}))
	done
	echo "$t"
}

# host_mac N: MAC of host N's eth0
host_mac() { on "$1" cat /sys/class/net/eth0/address; }
