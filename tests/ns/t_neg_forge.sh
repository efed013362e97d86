#!/usr/bin/env bash
# t_neg_forge: an unprivileged client answers the server's OFFER with an ACCEPT naming a victim process's EMP endpoint (once with a made-up connection id, once with the victim's own): that endpoint never proves itself, so the server sends it nothing, refuses and counts the ACCEPT, and keeps the forger on kernel TCP; the victim's connection keeps echoing intact. A forger that closes its connection right after its ACCEPT ends the server's wait for the proof at once (its FIN), not at the bound.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
bg 2 "$T/server.log" "$ER" --debug "$CONNT" server 7310
wait_port 2 7310
bg 1 "$T/victim.log" "$ER" --strict --debug "$CONNT" hold 10.77.0.2 7310 6
vpid=${PIDS[-1]}
for i in $(seq 100); do grep -q "EMP with" "$T/victim.log" && break; sleep 0.05; done
ep=$(sed -n 's/.*endpoint \([0-9]*\) open.*/\1/p' "$T/victim.log" | head -1)
conn=$(sed -n 's/.*EMP with .*(conn \([0-9]*\)).*/\1/p' "$T/victim.log" | head -1)
[ -n "$ep" ] && [ -n "$conn" ] || { cat "$T/victim.log"; fail "victim not on EMP"; }
echo "victim: endpoint $ep, connection $conn"
# the victim's endpoint is visible to any user, its connection id is not (the test gives it away)
on 1 $NOBODY /usr/bin/python3 "$ROOT/tests/ns/progs/negforge.py" 10.77.0.2 7310 "$ep" > "$T/forge1.log" 2>&1
on 1 $NOBODY /usr/bin/python3 "$ROOT/tests/ns/progs/negforge.py" 10.77.0.2 7310 "$ep" "$conn" > "$T/forge2.log" 2>&1
cat "$T/forge1.log" "$T/forge2.log"
expect "the server offered to the forger" [ "$(grep -c "offer seen" "$T/forge1.log" "$T/forge2.log" | awk -F: '{ s += $2 } END { print s }')" = 2 ]
expect "the forger's own connection stayed on kernel TCP" [ "$(cat "$T/forge1.log" "$T/forge2.log" | grep -c '^kernel')" = 2 ]
grep "refused" "$T/server.log"
expect "both forged ACCEPTs refused and counted" grep -q "never proved itself: refused (2 so far)" "$T/server.log"
wait "$vpid" || { cat "$T/victim.log" "$T/server.log"; fail "victim failed"; }
cat "$T/victim.log" | grep -v "EMP with"
expect "the victim's connection echoed intact all along" grep -q "^ok [0-9]* bytes" "$T/victim.log"
expect "the server sent the victim's endpoint nothing for the forger (no message without its key there)" \
	bash -c "! grep -q 'without its key' '$T/victim.log'"
# a client that ends its connection after its ACCEPT, before any HELLO (killed
# between the two): the server ends the wait for the proof on the FIN, at
# once, instead of waiting out its bound, and counts no refusal
on 1 env FORGE_CLOSE=1 $NOBODY /usr/bin/python3 "$ROOT/tests/ns/progs/negforge.py" 10.77.0.2 7310 "$ep" > "$T/forge3.log" 2>&1
cat "$T/forge3.log"
expect "the third forger sent its ACCEPT and closed" grep -q "closed after accept" "$T/forge3.log"
for i in $(seq 50); do grep -q "before its EMP endpoint confirmed" "$T/server.log" && break; sleep 0.02; done
grep "before its EMP endpoint confirmed\|never proved" "$T/server.log" | tail -2
expect "the server saw the connection end before the proof" grep -q "before its EMP endpoint confirmed" "$T/server.log"
expect "and did not wait for it to be refused" bash -c "! grep -q 'refused (3 so far)' '$T/server.log'"
