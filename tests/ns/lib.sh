# lib.sh: shared helpers for namespace tests: cluster up/down with cleanup, run on a host, EMP frame counters.
# usage in a test:  . "$(dirname "$0")/lib.sh"; cluster_up [--hosts N] [--loss P] ...
set -euo pipefail
ROOT=${EMP_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
PREFIX=${EMP_NS_PREFIX:-et$$}
export EMP_CLUSTER_DIR=${EMP_CLUSTER_DIR:-/tmp/emp-cluster-$PREFIX}
export EMP_CONF=$EMP_CLUSTER_DIR/emp.conf
BIN=$ROOT/build/bin
PIDS=()
BGLOG=()   # pid -> its log (bg)

cleanup() {
	local p left=0
	for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null && left=1 || true; done
	# what ignores SIGTERM (unshare --fork waiting for its child) goes with SIGKILL
	[ "$left" = 1 ] && sleep 0.2
	for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
	bash "$ROOT/scripts/cluster" down --prefix "$PREFIX" >/dev/null 2>&1 || true
}
trap cleanup EXIT

cluster_up() { bash "$ROOT/scripts/cluster" up --prefix "$PREFIX" "$@" >/dev/null; }
cluster_loss() { bash "$ROOT/scripts/cluster" loss "$1" --prefix "$PREFIX" >/dev/null; }
# on N CMD...: run CMD in host N's namespace
on() { local h=$1; shift; ip netns exec "${PREFIX}${h}" "$@"; }
# bg N LOG CMD...: run in the background on host N, output to LOG
bg() { local h=$1 log=$2; shift 2; ip netns exec "${PREFIX}${h}" "$@" >"$log" 2>&1 & PIDS+=($!); BGLOG[$!]=$log; }
# mac_of N: host N's eth0 MAC address
mac_of() { on "$1" cat /sys/class/net/eth0/address; }
# emp_rx N: EtherType 0x88b5 frames that arrived at host N so far
emp_rx() { on "$1" nft list counter netdev emp emp_rx | awk '/packets/ { print $2 }'; }
emp_rx_bytes() { on "$1" nft list counter netdev emp emp_rx | awk '/packets/ { print $4 }'; }
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() { # expect "what" COND...
	local what=$1; shift
	if "$@"; then echo "ok: $what"; else fail "$what"; fi
}
