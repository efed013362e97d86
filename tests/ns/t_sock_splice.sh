#!/usr/bin/env bash
# t_sock_splice: splice(2) on EMP sockets, both ends under emp-run --strict: a Python server echoes with os.splice (socket -> pipe -> socket); 200 lines (1..4000 bytes) come back intact over EMP and the server spliced every byte (on fbe9816 splice read the kernel socket: the server never offered EMP and the strict client was refused; on a connection already on EMP it would have waited for ever).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
bg 2 "$T/server.log" "$ER" --strict python3 "$ROOT/tests/ns/progs/splicecho.py" 7399
wait_port 2 7399
f0=$(emp_rx 2)
on 1 "$ER" --strict python3 "$ROOT/tests/ns/progs/passfd.py" client 10.77.0.2 7399 200 > "$T/c.log" 2>&1 || true
cat "$T/c.log"
expect "200 lines echoed intact through the server's splice calls" grep -q "^client: ok 200 lines" "$T/c.log"
want=$(python3 -c "print(sum(1 + (i * 997) % 4000 for i in range(200)))")
for i in $(seq 50); do grep -q "^spliced" "$T/server.log" && break; sleep 0.1; done
expect "the server spliced all $want bytes" grep -q "^spliced $want\$" "$T/server.log"
at_least "EMP frames into the server host" $(( $(emp_rx 2) - f0 )) 200
