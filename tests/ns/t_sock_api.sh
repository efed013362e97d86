#!/usr/bin/env bash
# t_sock_api: socket call semantics (peek, waitall, FIONREAD, timeouts, poll/select/epoll LT/ET/oneshot+MOD/RDHUP/nested/one fd in three sets, EINTR, vectors, dup, sockopts) match kernel TCP.
# timeout: 40
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
API=$ROOT/build/tests/sock/sockapi
cluster_up
for mode in kernel emp; do
	pre=(); [ $mode = emp ] && pre=("$ER" --strict)
	b0=$(rxb 2)
	bg 2 "$T/s-$mode.log" "${pre[@]}" "$API" server 7900
	wait_port 2 7900
	on 1 "${pre[@]}" "$API" client 10.77.0.2 7900 > "$T/c-$mode.log" 2>&1 || { cat "$T/c-$mode.log"; fail "client ($mode)"; }
	wait "${PIDS[-1]}" || { cat "$T/s-$mode.log"; fail "server ($mode)"; }
	echo "== $mode"; cat "$T/c-$mode.log" "$T/s-$mode.log"
	if [ $mode = emp ]; then at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 5000000; fi
done
