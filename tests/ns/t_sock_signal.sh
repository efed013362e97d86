#!/usr/bin/env bash
# t_sock_signal: a signal handler that makes and closes TCP sockets, writes a pipe and dup()s/closes kernel fds (async-signal-safe calls) while the main thread is inside the shim (EMP writes, dup/close of the EMP socket, completion hooks): no deadlock, every byte arrives.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
FDEDGE=$ROOT/build/tests/sock/fdedge
N=20000
bg 2 "$T/s.log" "$ER" --strict "$SOCKT" sink-server 7980
srv=${PIDS[-1]}
wait_port 2 7980
rc=0
# 30 s: a deadlocked handler never returns (the run takes well under a second)
on 1 timeout 30 "$ER" --strict "$FDEDGE" sig-kernel 10.77.0.2 7980 $N > "$T/c.log" 2>&1 || rc=$?
cat "$T/c.log"
[ $rc = 124 ] && fail "the client hung (a signal handler deadlocked in the shim)"
[ $rc = 0 ] || fail "client exit $rc"
at_least "signals handled" "$(awk '/^signals/ { print $2 }' "$T/c.log")" 100
wait "$srv" || true
expect "the server got all $N bytes and EOF" grep -q "^end EOF after $N bytes" "$T/s.log"
