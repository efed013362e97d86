#!/usr/bin/env bash
# t_sock_fork: a socket listened before fork accepts in the children (each with its own endpoint) over EMP; exec keeps the preload.
# timeout: 40
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
b0=$(rxb 1)
bg 2 "$T/s.log" "$ER" --strict "$SOCKT" fork-server 7800 3
srv=${PIDS[-1]}
wait_port 2 7800
for i in 1 2 3; do on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7800 0 0 1000000; done
wait "$srv" || { cat "$T/s.log"; fail "fork server"; }
cat "$T/s.log"
at_least "EMP bytes into h1 (echoes)" $(( $(rxb 1) - b0 )) 3000000
# exec: a shell under emp-run execs socat, which still uses EMP (strict)
bg 2 "$T/s2.log" "$ER" --strict sh -c "exec socat -u TCP-LISTEN:7801,reuseaddr OPEN:$T/out,creat,trunc"
wait_port 2 7801
head -c 1000000 /dev/urandom > "$T/in"
on 1 "$ER" --strict sh -c "exec socat -u OPEN:$T/in TCP:10.77.0.2:7801"
wait "${PIDS[-1]}"
expect "exec'd programs transfer intact" cmp -s "$T/in" "$T/out"
# socat's fork mode: accept, then fork a child per connection (negotiation happens in the child)
bg 2 "$T/s3.log" "$ER" --strict socat TCP-LISTEN:7802,reuseaddr,fork EXEC:cat
wait_port 2 7802
for i in 1 2; do on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7802 0 0 200000; done
# forks while a thread streams over EMP: each child's copy of that connection
# fails with EIO, its own new connection echoes over EMP (strict), nothing hangs;
# the parent's stream stays intact
bg 2 "$T/s4.log" "$ER" --strict socat TCP-LISTEN:7803,reuseaddr,fork EXEC:cat
wait_port 2 7803
b1=$(rxb 1)
on 1 "$ER" --strict "$SOCKT" fork-busy 10.77.0.2 7803 8 1000000 > "$T/fb.log" 2>&1 || { cat "$T/fb.log"; fail "fork-busy"; }
cat "$T/fb.log"
expect "every fork child clean, parent stream intact" grep -q "8 forks, 0 children failed, parent stream intact" "$T/fb.log"
at_least "EMP bytes into h1 (parent and children echoes)" $(( $(rxb 1) - b1 )) 5600000
# a non-blocking connect answered by the parent's responder, then fork: the
# child's wait on its copy returns at once (error), its read fails with EIO
on 1 "$ER" --strict "$SOCKT" fork-nbconnect 10.77.0.2 7803 > "$T/fn.log" 2>&1 || { cat "$T/fn.log"; fail "fork-nbconnect"; }
cat "$T/fn.log"
expect "child's copy of an answered connect fails at once" grep -q "child saw the parent's connection fail" "$T/fn.log"
