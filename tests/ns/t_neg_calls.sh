#!/usr/bin/env bash
# t_neg_calls: the system calls a negotiated connection costs, counted with strace over 200 connections (connt, both ends under emp-run --strict, every byte checked): the server names an accepted connection from its saved SYN (no getsockname or getpeername per connection), and a client's blocking connect that poll reports writable without an error reads no SO_ERROR (no getsockopt per connection), and a client reads its local name once per connection (after connect), not twice.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v strace >/dev/null || { echo "skip: no strace"; exit 0; }
cluster_up
CONNT=$ROOT/build/tests/sock/connt
N=200
bg 2 "$T/server.log" strace -f -qq -c -e trace=getsockname,getpeername,getsockopt -o "$T/srv.st" "$ER" --strict "$CONNT" server 7330
wait_port 2 7330
on 1 "$ER" --strict "$CONNT" client 10.77.0.2 7330 20 100 >/dev/null   # the engines' sessions up
on 1 strace -f -qq -c -e trace=getsockname,getpeername,getsockopt -o "$T/cli.st" \
	"$ER" --strict "$CONNT" client 10.77.0.2 7330 $N 100 >"$T/c.log" 2>&1 || { cat "$T/c.log"; fail "client failed"; }
cat "$T/c.log"
expect "$N connections echoed intact over EMP" grep -q "^ok $N conns" "$T/c.log"
spid=$(pgrep -f "connt server 7330" | grep -v "^$$\$" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = connt ] && echo "$p"; done | head -1)
[ -n "$spid" ] || fail "no server process"
kill "$spid"
for i in $(seq 50); do [ -s "$T/srv.st" ] && break; sleep 0.1; done
echo "server:"; cat "$T/srv.st"; echo "client:"; cat "$T/cli.st"
calls() { awk -v c="$2" '$NF == c { n += $4 } END { print n + 0 }' "$1"; }
names=$(( $(calls "$T/srv.st" getsockname) + $(calls "$T/srv.st" getpeername) ))
at_most "server getsockname + getpeername over $N + 20 accepted connections" "$names" 50
gso=$(calls "$T/cli.st" getsockopt)
# (one SO_ERROR per connection would be 200; connections whose outcome a slow
# scheduler leaves undecided at the first poll still ask, 29-53 seen under load)
at_most "client getsockopt over $N blocking connects" "$gso" 100
# the client reads its local name once per connection, after connect (the port the kernel picked);
# before, once more before connect to see whether the program had bound one
cgn=$(calls "$T/cli.st" getsockname)
at_most "client getsockname over $N connects (no bind by the program)" "$cgn" $((N + N / 4))
expect "the server kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/server.log'"
