#!/usr/bin/env bash
# t_sock_wakeup: no lost wakeups: a server that truly sleeps (EMP_SPIN_US=0) in epoll_wait, poll or a blocking read, alone or while another thread drives the engine, answers every one of 2000 rounds sent at random moments within 1 s; a pipe ends an epoll_wait/poll that holds idle EMP sockets at once; an EMP socket with data added to a set another thread sleeps on wakes it. WAKEUP_SPIN_US=N runs the rounds with an N us spin instead (the spin's looks at kernel fds then take part). A sleeping server sends one frame a round (its ack rides in the echo).
# timeout: 120
# The rounds' bound (1 s) is far above a round's normal time (tens of us): only a wakeup that
# never comes (the round waits for a frame that will not arrive) exceeds it.
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
WK=$ROOT/build/tests/sock/wakeup
ROUNDS=${WAKEUP_ROUNDS:-2000}
cluster_up
port=7840
ONLY=${WAKEUP_ONLY:-.}           # a regular expression on "MODE HOW" / "kfd": run only those
run() { # run single|cross epoll|poll|read
	port=$((port + 1))
	[[ "$1 $2" =~ $ONLY ]] || return 0
	local f0 h0; f0=$(emp_rx 2); h0=$(emp_rx 1)
	bg 2 "$T/s-$1-$2.log" env EMP_SPIN_US=${WAKEUP_SPIN_US:-0} "$ER" --strict "$WK" server $port "$1" "$2"
	local srv=${PIDS[-1]}
	wait_port 2 $port
	on 1 env WAKEUP_EMPSTAT="$ROOT/build/bin/empstat" "$ER" --strict "$WK" client 10.77.0.2 $port "$1" "$ROUNDS" > "$T/c-$1-$2.log" 2>&1 \
		|| { cat "$T/c-$1-$2.log" "$T/s-$1-$2.log"; fail "$1 $2: a round was stuck (a lost wakeup) or failed"; }
	wait "$srv" || { cat "$T/s-$1-$2.log"; fail "$1 $2: server"; }
	echo "== $1 $2"; cat "$T/c-$1-$2.log" "$T/s-$1-$2.log"
	local want=$ROUNDS; [ "$1" = cross ] && want=$((2 * ROUNDS))
	at_least "EMP frames into h2 ($1 $2: one message a round)" $(( $(emp_rx 2) - f0 )) "$want"
	# the sleeping server's ack of each message rides in its echo (libemp
	# wait.c: the look after its sleep), not in a frame of its own (2 a round before)
	[ "$1" = single ] && at_most "EMP frames into h1 ($1 $2: the echo carries the ack)" \
		$(( $(emp_rx 1) - h0 )) $(( ROUNDS * 5 / 4 ))
	return 0
}
# (a) the server's only thread sleeps; (b) thread A sleeps while thread B drives the engine
for mode in single cross; do
	for how in epoll poll read; do run $mode $how; done
done
# (c) kernel fds beside idle EMP sockets; a late registration
port=$((port + 1))
[[ kfd =~ $ONLY ]] || exit 0
bg 2 "$T/s-kfd.log" env EMP_SPIN_US=0 "$ER" --strict "$WK" server $port kfd
srv=${PIDS[-1]}
wait_port 2 $port
on 1 "$ER" --strict "$WK" client 10.77.0.2 $port kfd > "$T/c-kfd.log" 2>&1 || { cat "$T/c-kfd.log"; fail "kfd client"; }
wait "$srv" || { cat "$T/s-kfd.log"; fail "kfd: a wait did not end when it should"; }
cat "$T/s-kfd.log"
