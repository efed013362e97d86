# socklib.sh: helpers for the t_sock_* namespace tests (sourced after tests/ns/lib.sh).
SOCKT=$ROOT/build/tests/sock/sockt
ER=$BIN/emp-run
T=$(mktemp -d /tmp/emp-sock-XXXX)
[ -x "$SOCKT" ] && [ -x "$ER" ] && [ -f "$ROOT/build/lib/libempsock.so" ] || fail "build first (make)"
# wait_port N PORT: until something listens on TCP PORT on host N (5 s)
wait_port() {
	local i
	for i in $(seq 100); do
		on "$1" ss -ltnH "sport = :$2" | grep -q . && return 0
		sleep 0.05
	done
	fail "nothing listens on port $2 on host $1"
}
# rxb N: EMP bytes that arrived at host N so far
rxb() { emp_rx_bytes "$1"; }
# at_least WHAT GOT MIN
at_least() { [ "$2" -ge "$3" ] || fail "$1: $2 < $3"; echo "ok: $1 ($2 >= $3)"; }
at_most() { [ "$2" -le "$3" ] || fail "$1: $2 > $3"; echo "ok: $1 ($2 <= $3)"; }
# on failure: the library's own lines from every log (why a connection left
# EMP, what a server refused) at the end of the output, where the runner's
# tail shows them, and the temp dir kept beside the runner's log
sock_exit() {
	local rc=$? keep=$ROOT/build/ns-logs/$(basename "$0" .sh).keep p
	if [ "$rc" != 0 ]; then   # what the programs still running were doing (a hang shows as futex waits)
		for p in "${PIDS[@]:-}"; do
			[ -n "$p" ] || continue
			if ! [ -d "/proc/$p/task" ]; then   # gone: how (a status over 128 is a signal)
				local st=0
				wait "$p" 2>/dev/null || st=$?
				echo "pid $p exited, status $st$([ "$st" -gt 128 ] && echo " (signal $((st - 128)))")" >&2
				[ -n "${BGLOG[$p]:-}" ] && tail -n 4 "${BGLOG[$p]}" 2>/dev/null | sed "s|^|  $(basename "${BGLOG[$p]}"): |" >&2
				continue
			fi
			echo "pid $p $(cat "/proc/$p/comm" 2>/dev/null), its threads' waits: $(for t in /proc/"$p"/task/*; do
				echo "$(cat "$t/wchan" 2>/dev/null)"; done | sort | uniq -c | tr -s ' \n' ' ')" >&2
		done
	fi
	cleanup
	[ "$rc" = 0 ] && rm -rf "$keep"
	if [ "$rc" != 0 ] && [ -d "$T" ]; then
		grep -H "emp[:\[]" "$T"/*.log 2>/dev/null | sed "s|^$T/||" | sort | uniq -c | sort -rn | head -8 >&2 || true
		if [ "$(du -sm "$T" | cut -f1)" -le 64 ]; then
			rm -rf "$keep"; mkdir -p "$ROOT/build/ns-logs"; cp -r "$T" "$keep" && echo "kept: $keep" >&2
		fi
	fi
	rm -rf "$T"
	return "$rc"
}
trap sock_exit EXIT
# nginx_http_common DIR: the lines of an nginx http block every test config shares (no access
# log, sendfile, a default type, the temporary paths under DIR/tmp)
nginx_http_common() {
	printf '\taccess_log off;\n\tsendfile on;\n\tdefault_type application/octet-stream;\n'
	local k
	for k in client_body:body proxy:proxy fastcgi:fcgi uwsgi:uwsgi scgi:scgi; do
		printf '\t%s_temp_path %s/tmp/%s;\n' "${k%%:*}" "$1" "${k#*:}"
	done
}
