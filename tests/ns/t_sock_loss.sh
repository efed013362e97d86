#!/usr/bin/env bash
# t_sock_loss: with 2 % of EMP frames dropped on ingress, a checksummed socat transfer and an echo stay intact over EMP.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up --loss 2
head -c 8000000 /dev/urandom > "$T/in"
b0=$(rxb 2)
bg 2 "$T/s.log" "$ER" --strict socat -u TCP-LISTEN:7950,reuseaddr "OPEN:$T/out,creat,trunc"
wait_port 2 7950
on 1 "$ER" --strict socat -u "OPEN:$T/in" TCP:10.77.0.2:7950
wait "${PIDS[-1]}"
expect "transfer intact under loss" cmp -s "$T/in" "$T/out"
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 8000000
lost=$(on 2 nft list counter netdev emp emp_loss | awk '/packets/ { print $2 }')
at_least "frames dropped by the loss rule" "$lost" 10
bg 2 "$T/e.log" "$ER" --strict "$SOCKT" echo-server 7951 1 1
wait_port 2 7951
on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 7951 0 1 2000000
