#!/usr/bin/env bash
# t_core_linkdown: an idle EMP process whose interface goes down stays idle (no spinning on the error), says so, and works again once the link is back.
# timeout: 60
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
bg 2 "$T/srv" "$BIN/emp-pingpong" -s
srv=${PIDS[0]}
sleep 0.3
on 1 "$BIN/emp-pingpong" -c h2 -m 4 -n 100 > /dev/null || fail "ping-pong before"
# the server's host loses its link for 2 s
on 2 ip link set eth0 down
ticks0=$(awk '{ print $14 + $15 }' /proc/$srv/stat)
sleep 2
ticks1=$(awk '{ print $14 + $15 }' /proc/$srv/stat)
used=$((ticks1 - ticks0))
echo "server CPU while the link was down: $used ticks in 2 s"
expect "no spinning while the link is down (< 40 of 200 ticks)" [ "$used" -lt 40 ]
on 2 ip link set eth0 up
sleep 1
on 1 "$BIN/emp-pingpong" -c h2 -m 4,4096 -n 100 || fail "ping-pong after the link came back"
