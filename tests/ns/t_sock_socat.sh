#!/usr/bin/env bash
# t_sock_socat: a 20 MB checksummed socat transfer each way under emp-run --strict; EMP carried the bytes.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
head -c 20000000 /dev/urandom > "$T/in"
want=$(sha256sum < "$T/in")
# client -> server
b0=$(rxb 2)
bg 2 "$T/s1.log" "$ER" --strict socat -u TCP-LISTEN:7100,reuseaddr "OPEN:$T/out1,creat,trunc"
wait_port 2 7100
on 1 "$ER" --strict socat -u "OPEN:$T/in" TCP:10.77.0.2:7100
wait "${PIDS[-1]}"
expect "client->server checksum" [ "$(sha256sum < "$T/out1")" = "$want" ]
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 20000000
# server -> client (the server speaks first and sends everything)
b0=$(rxb 1)
bg 2 "$T/s2.log" "$ER" --strict socat -u "OPEN:$T/in" TCP-LISTEN:7101,reuseaddr
wait_port 2 7101
on 1 "$ER" --strict socat -u TCP:10.77.0.2:7101 "OPEN:$T/out2,creat,trunc"
expect "server->client checksum" [ "$(sha256sum < "$T/out2")" = "$want" ]
at_least "EMP bytes into h1" $(( $(rxb 1) - b0 )) 20000000
