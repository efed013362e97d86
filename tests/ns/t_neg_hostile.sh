#!/usr/bin/env bash
# t_neg_hostile: unprivileged processes on both hosts flood the negotiation side channel with forged and malformed OFFER/ACCEPT/REJECT messages, replay captured ones and try to take the server's UDP port, while real connections are set up: every connection goes over EMP (strict), none hangs or falls back, every byte comes back intact (patterns per connection: nothing crosses).
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
CONNT=$ROOT/build/tests/sock/connt
PROGS=$ROOT/tests/ns/progs
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
PY=/usr/bin/python3
chmod 755 "$T"
bg 2 "$T/server.log" env EMP_SOCK_DEBUG=1 "$ER" --strict "$CONNT" server 7300   # its last events, should it die
wait_port 2 7300
# the side channel's traffic on the client host, for the replays
bg 1 "$T/cap.log" "$PY" "$PROGS/negcap.py" eth0 "$T/cap" 20
# its file appears once its socket is bound (a fixed pause missed the first datagrams on a loaded machine)
for i in $(seq 100); do [ -e "$T/cap" ] && break; sleep 0.05; done
[ -e "$T/cap" ] || fail "the capture did not start"
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7300 30 100 > "$T/warm.log" 2>&1 || { cat "$T/warm.log"; fail "warm-up connections"; }
at_least "negotiation datagrams captured for replay" "$(wc -l < "$T/cap")" 20
# another user may not take the server's UDP port while it listens (the listener's guard holds it)
sq=$(on 2 $NOBODY "$PY" "$PROGS/negspray.py" squat 10.77.0.2 7300)
echo "$sq"
expect "the server's negotiation port cannot be taken by another user" [ "$(echo "$sq" | grep -c bound)" = 0 ]
f0=$(emp_rx 2)
# the hostile processes (unprivileged), on the client host and on the server host
sp=${#PIDS[@]}
bg 1 "$T/spray1.log" $NOBODY "$PY" "$PROGS/negspray.py" spray 10.77.0.2 7300 7
bg 2 "$T/spray2.log" $NOBODY "$PY" "$PROGS/negspray.py" spray 10.77.0.2 7300 7
bg 1 "$T/replay1.log" $NOBODY "$PY" "$PROGS/negspray.py" replay "$T/cap" 7
sleep 0.5
# real connections meanwhile: 200 in one process, and 3 x 25 short-lived processes
pids=()
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7300 200 3000 > "$T/many.log" 2>&1 & pids+=($!)
for lane in 1 2 3; do
	on 1 bash -c "for i in \$(seq 25); do '$ER' --strict '$CONNT' client 10.77.0.2 7300 1 2000 || echo FAILED; done" > "$T/lane$lane.log" 2>&1 & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$T/many.log"
expect "200 connections in one process, bytes intact" grep -q "^ok 200 conns" "$T/many.log"
for lane in 1 2 3; do
	ok=$(grep -c "^ok 1 conns" "$T/lane$lane.log" || true)
	[ "$ok" = 25 ] || grep -v "^ok" "$T/lane$lane.log" | head -5
	expect "lane $lane: 25 client processes, bytes intact ($ok)" [ "$ok" = 25 ]
done
expect "no client failed" [ "$rc" = 0 ]
for p in "${PIDS[@]:$sp:3}"; do wait "$p" 2>/dev/null || true; done
cat "$T/spray1.log" "$T/spray2.log" "$T/replay1.log"
at_least "forged messages sent from the client host" "$(awk '/^sent/ { print $2 }' "$T/spray1.log")" 1000
at_least "forged messages sent from the server host" "$(awk '/^sent/ { print $2 }' "$T/spray2.log")" 1000
at_least "captured messages replayed" "$(awk '/^sent/ { print $2 }' "$T/replay1.log")" 1000
at_least "EMP frames into the server" $(( $(emp_rx 2) - f0 )) 1000
expect "no connection fell back or was refused" bash -c "! grep -hE 'kernel TCP|refus|strict mode' '$T'/*.log"
