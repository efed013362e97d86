#!/usr/bin/env bash
# t_sock_nbconnect: non-blocking connect + poll or epoll (EPOLLOUT) + SO_ERROR, then echo over EMP; server speaks first and client speaks first.
# timeout: 30
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
b0=$(rxb 1)
bg 2 "$T/s.log" "$ER" --strict "$SOCKT" echo-server 7600 0 1
wait_port 2 7600
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7600 1 0 2000000
bg 2 "$T/s2.log" "$ER" --strict "$SOCKT" echo-server 7601 1 1
wait_port 2 7601
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7601 1 1 2000000
bg 2 "$T/s3.log" "$ER" --strict "$SOCKT" echo-server 7602 0 1
wait_port 2 7602
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7602 2 0 2000000   # epoll waits for the connect
at_least "EMP bytes into h1 (echoes)" $(( $(rxb 1) - b0 )) 6000000
# a refused non-blocking connect reports ECONNREFUSED through SO_ERROR
if on 1 "$ER" "$SOCKT" echo-client 10.77.0.2 7699 1 0 10 2>"$T/e.log"; then fail "connect to a closed port"; fi
cat "$T/e.log"
expect "refused nb connect reported" grep -q "refused" "$T/e.log"
