#!/usr/bin/env bash
# t_neg_asyncconn: a pending negotiation never freezes a client's event loop: one thread, one epoll set (a 20 ms timerfd, 4 non-blocking connects, EPOLLOUT) against a server that first uses each accepted socket 400 ms after its accept (its OFFER leaves only then), both ends --strict: every echo (100000 bytes a connection) comes back intact over EMP (EMP bytes into h1 >= 4 x 100000) and no gap between the client's epoll_wait returns exceeds 150 ms (a wait that settles the socket synchronously is away about 400 ms).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
AC=$ROOT/build/tests/sock/asyncconn
N=4 BYTES=100000 DELAY_MS=400 MAXGAP_MS=150 PORT=7930
cluster_up
b0=$(rxb 1)
bg 2 "$T/server.log" "$ER" --strict "$AC" server $PORT $N $DELAY_MS
srv=${PIDS[-1]}
wait_port 2 $PORT
rc=0
on 1 "$ER" --strict "$AC" client 10.77.0.2 $PORT $N $BYTES $MAXGAP_MS >"$T/client.log" 2>&1 || rc=$?
cat "$T/client.log"
grep -q "^asyncconn: $N connections echoed $BYTES bytes each intact" "$T/client.log" || fail "client: the echoes did not all come back intact (exit $rc)"
echo "ok: $N connections echoed $BYTES bytes each intact"
for i in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.05; done
wait "$srv" || { cat "$T/server.log"; fail "server failed or did not end"; }
cat "$T/server.log"
expect "the server echoed every byte, no error" grep -q "first used $DELAY_MS ms after each accept, $((N * BYTES)) bytes echoed, 0 errors" "$T/server.log"
expect "every connection stayed on EMP (no strict-mode refusal at either end)" bash -c "! grep -q 'strict mode' '$T/server.log' '$T/client.log'"
at_least "EMP bytes into h1 (the echoes)" $(( $(rxb 1) - b0 )) $((N * BYTES))
[ "$rc" = 0 ] || fail "the client's epoll_wait was away longer than $MAXGAP_MS ms while a negotiation was pending (exit $rc)"
echo "ok: no gap between epoll_wait returns above $MAXGAP_MS ms"
