#!/usr/bin/env bash
# t_neg_asyncconn: a pending negotiation never freezes a client's event loop, with each wait call (epoll_wait, poll, select): one thread, a 20 ms timerfd and 4 non-blocking connects (writable) in its set, against a server of its own that first uses each accepted socket 400 ms after its accept (its OFFER leaves only then), both ends --strict: every echo (100000 bytes a connection) comes back intact over EMP (EMP bytes into h1 >= 4 x 100000 each run) and no gap between the wait call's returns exceeds 150 ms (a wait that settles the socket synchronously is away about 400 ms).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
AC=$ROOT/build/tests/sock/asyncconn
N=4 BYTES=100000 DELAY_MS=400 MAXGAP_MS=150 PORT=7930
MODES="epoll poll select"
cluster_up
declare -A srv
p=$PORT
for m in $MODES; do   # a server for each mode, all waiting before the first client
	bg 2 "$T/server-$m.log" "$ER" --strict "$AC" server $p $N $DELAY_MS
	srv[$m]=${PIDS[-1]}
	wait_port 2 $p
	p=$((p + 1))
done
p=$PORT frozen=""
for m in $MODES; do
	echo "--- $m"
	b0=$(rxb 1) rc=0
	on 1 "$ER" --strict "$AC" client 10.77.0.2 $p $N $BYTES $MAXGAP_MS $m >"$T/client-$m.log" 2>&1 || rc=$?
	cat "$T/client-$m.log"
	grep -q "^asyncconn: $N connections echoed $BYTES bytes each intact" "$T/client-$m.log" || fail "$m client: the echoes did not all come back intact (exit $rc)"
	echo "ok: $m: $N connections echoed $BYTES bytes each intact"
	for i in $(seq 100); do kill -0 "${srv[$m]}" 2>/dev/null || break; sleep 0.05; done
	wait "${srv[$m]}" || { cat "$T/server-$m.log"; fail "$m server failed or did not end"; }
	cat "$T/server-$m.log"
	expect "$m: the server echoed every byte, no error" grep -q "first used $DELAY_MS ms after each accept, $((N * BYTES)) bytes echoed, 0 errors" "$T/server-$m.log"
	expect "$m: every connection stayed on EMP (no strict-mode refusal at either end)" bash -c "! grep -q 'strict mode' '$T/server-$m.log' '$T/client-$m.log'"
	at_least "$m: EMP bytes into h1 (the echoes)" $(( $(rxb 1) - b0 )) $((N * BYTES))
	if [ "$rc" = 0 ]; then echo "ok: $m: no gap between returns above $MAXGAP_MS ms"; else frozen="$frozen $m"; fi
	p=$((p + 1))
done
[ -z "$frozen" ] || fail "the client's wait call was away longer than $MAXGAP_MS ms while a negotiation was pending:$frozen"
