#!/usr/bin/env bash
# t_sock_halfclose: shutdown(SHUT_WR) delivers EOF after all the data; the other direction keeps working; over EMP.
# timeout: 30
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
b0=$(rxb 2)
bg 2 "$T/s.log" "$ER" --strict "$SOCKT" halfclose-server 7400
wait_port 2 7400
on 1 "$ER" --strict "$SOCKT" halfclose-client 10.77.0.2 7400 3000000
wait "${PIDS[-1]}" || { cat "$T/s.log"; fail "server"; }
cat "$T/s.log"
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 3000000
