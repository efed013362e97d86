#!/usr/bin/env bash
# t_sock_passfd: connections handed to another process over a UNIX socket (SCM_RIGHTS), both ends under emp-run --strict. A master that accepts and hands each connection to a worker program before any I/O (Node's cluster module does this): the worker negotiates at its first use and 200 lines (1..4000 bytes) echo intact over EMP (on fbe9816 the client waited out its bound: "no EMP offer from the server"). A master that talks first and then hands the connection over: an EMP connection cannot leave its process, so it is flushed and reset: the client reads the 5 bytes echoed before, then ECONNRESET, and the worker gets an error, not a clean EOF (on fbe9816: the client read a clean EOF, the rest of its line lost without a word).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
PF=$ROOT/tests/ns/progs/passfd.py
bg 2 "$T/pending.log" "$ER" --strict python3 "$PF" server 7350 pending
wait_port 2 7350
f0=$(emp_rx 2)
on 1 "$ER" --strict python3 "$PF" client 10.77.0.2 7350 200 > "$T/c1.log" 2>&1 || true
cat "$T/c1.log"
expect "a connection handed over before any I/O: 200 lines echoed intact by the worker" grep -q "^client: ok 200 lines" "$T/c1.log"
at_least "EMP frames into the server host" $(( $(emp_rx 2) - f0 )) 200
expect "the server side kept it on EMP" bash -c "! grep -q 'strict mode' '$T/pending.log'"
bg 2 "$T/used.log" "$ER" --strict python3 "$PF" server 7351 used
wait_port 2 7351
t0=$(date +%s%N)
on 1 "$ER" --strict python3 "$PF" client 10.77.0.2 7351 20 > "$T/c2.log" 2>&1 || true
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
cat "$T/c2.log"
expect "a connection handed over after I/O: the client gets ECONNRESET, not a clean EOF" grep -q "^client: error ConnectionResetError after" "$T/c2.log"
at_most "the client's time to the error (ms)" "$ms" 5000
expect "the master says why" grep -q "cannot be passed to another process" "$T/used.log"
for i in $(seq 50); do grep -q "^worker:" "$T/used.log" && break; sleep 0.1; done
grep "^worker:" "$T/used.log" || true
expect "the worker gets an error on the connection, not a clean EOF" grep -q "^worker: error" "$T/used.log"
