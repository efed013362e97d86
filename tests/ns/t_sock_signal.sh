#!/usr/bin/env bash
# t_sock_signal: a signal handler that makes and closes TCP sockets, writes a pipe and dup()s/closes kernel fds (async-signal-safe calls) while the main thread is inside the shim (EMP writes, dup/close of the EMP socket, completion hooks): no deadlock, every byte arrives; and a blocking read or write that another thread ends the JDK's way (dup2 over the number, a signal without SA_RESTART) returns EINTR or a short count, also when the signal comes 0-100 us in, while the call copies or spins; and Perl's alarm timeout around a blocking sysread ends the read with a 30 us timer.
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
# the JDK's close of a blocking channel another thread reads or writes: dup2()
# of a shut socket pair over its number, then a signal without SA_RESTART to
# that thread; the thread's call ends (EINTR, or a short write) as on kernel
# TCP, and the server sees each connection end (before the fix the reader's
# sleep had seen the replaced number ready, the handler ran outside the
# sleep, and the read slept on for ever)
bg 2 "$T/as.log" "$ER" --strict "$FDEDGE" echo-threads 7981 46
srv=${PIDS[-1]}
wait_port 2 7981
rc=0
on 1 timeout 30 "$ER" --strict "$FDEDGE" async-close 10.77.0.2 7981 3 > "$T/ac.log" 2>&1 || rc=$?
cat "$T/ac.log"
[ $rc = 0 ] || fail "async-close client exit $rc"
expect "6 blocked calls ended by dup2 and a signal" grep -q "^async-close 6 passed, 0 failed" "$T/ac.log"
# the same with the close 0-100 us into the call: while it copies or spins
# before any sleep, where the handler runs in user space (sigcatch.c counts
# it; before, the call went on to sleep for ever)
rc=0
on 1 timeout 30 "$ER" --strict "$FDEDGE" async-close 10.77.0.2 7981 20 100 > "$T/aj.log" 2>&1 || rc=$?
grep -v ": ok$" "$T/aj.log"
[ $rc = 0 ] || fail "async-close (0-100 us) client exit $rc"
expect "40 blocked calls ended by dup2 and a signal 0-100 us in" grep -q "^async-close 40 passed, 0 failed" "$T/aj.log"
wait "$srv" || true
expect "the server saw all 46 connections end" grep -q "^served 46" "$T/as.log"
# Perl's timeout idiom (alarm, a handler that dies, a blocking sysread) with a
# 30 us timer, which comes while the read spins for EMP: each read ends (on
# 389ee80 the first one waited for ever)
bg 2 "$T/ps.log" "$ER" --strict perl "$ROOT/tests/ns/progs/alarmread.pl" server 10.77.0.2 7982
wait_port 2 7982
rc=0
on 1 timeout 20 "$ER" --strict perl "$ROOT/tests/ns/progs/alarmread.pl" client 10.77.0.2 7982 30 20 > "$T/pc.log" 2>&1 || rc=$?
cat "$T/pc.log"
[ $rc = 124 ] && fail "a read the alarm should have ended waited for ever"
expect "20 reads ended by a 30 us alarm" grep -q "^alarm ended 20 of 20 reads" "$T/pc.log"
