#!/usr/bin/env bash
# t_core_4host: four hosts through a bridge namespace: three senders to one receiver at once, every byte checked; each host receiving on its own CPU (cluster --rx-cpu, RPS).
# timeout: 120
. "$(dirname "$0")/lib.sh"
cluster_up --hosts 4 --rx-cpu
ncpu=$(nproc)
for h in 1 2 3 4; do
	c=$(((h - 1) % ncpu))
	want=$(printf '%x' $((1 << (c % 32))))
	for ((w = 0; w < c / 32; w++)); do want="$want,00000000"; done
	got=$(ip netns exec "${PREFIX}$h" cat /sys/class/net/eth0/queues/rx-0/rps_cpus | sed 's/^[0,]*//')
	[ "$got" = "$want" ] || fail "h$h receives on CPU mask '$got', not CPU $c ('$want')"
done
T=$(mktemp -d)
bg 1 "$T/srv" "$BIN/emp-verify" -s -n 100 -k 3 -t 40
srv=${PIDS[0]}
sleep 0.3
for h in 2 3 4; do bg "$h" "$T/cli$h" "$BIN/emp-verify" -c h1 -n 100 -t 40; done
for i in 1 2 3; do wait "${PIDS[$i]}" || { cat "$T"/cli*; fail "a sender failed"; }; done
wait "$srv" || { cat "$T/srv"; fail "server failed"; }
cat "$T/srv"
grep -q "300 messages, .* 0 bad" "$T/srv" || fail "receiver did not verify 300 messages from 3 hosts"
expect "EMP frames arrived at h1" [ "$(emp_rx 1)" -gt 10000 ]
