#!/usr/bin/env bash
# t_fault_frames: hostile input on a real wire: unknown MACs and malformed frames are dropped and counted by reason; the engine keeps serving; frames the kernel dropped at a stopped receiver's full socket are counted (drop device).
# timeout: 60
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
M1=$(mac_of 1); M2=$(mac_of 2)
bg 2 "$T/srv" env EMP_TOOL_COUNTERS=1 "$BIN/emp-pingpong" -s --once
sleep 0.3
INJ="python3 $ROOT/tests/ns/progs/inject.py eth0 $M2"
on 1 $INJ 02:de:ad:be:ef:01 50 hello          # a MAC that is not in the config
on 1 $INJ "$M1" 20 truncated
on 1 $INJ "$M1" 20 version
on 1 $INJ "$M1" 20 type
on 1 $INJ "$M1" 20 index
on 1 $INJ "$M1" 20 length
on 1 $INJ "$M1" 20 ack
# the engine still serves: a normal ping-pong afterwards
on 1 "$BIN/emp-pingpong" -c h2 -m 4,4096 -n 100 > "$T/cli" || fail "ping-pong after hostile frames"
cat "$T/cli"
wait "${PIDS[0]}" || fail "server exited with an error"
cat "$T/srv"
count() { awk -v r="$1" '$2 == "drop" && $3 == r { print $4 }' "$T/srv"; }
expect "unknown MAC dropped and counted ($(count unknown_mac))" [ "$(count unknown_mac)" -ge 50 ]
expect "truncated frames counted ($(count short))" [ "$(count short)" -ge 20 ]
expect "wrong version counted ($(count version))" [ "$(count version)" -ge 20 ]
expect "unknown type counted ($(count type))" [ "$(count type)" -ge 20 ]
expect "impossible index counted ($(count bad_index))" [ "$(count bad_index)" -ge 20 ]
expect "impossible length counted ($(count bad_len))" [ "$(count bad_len)" -ge 20 ]
expect "forged ack counted ($(count unknown_msg))" [ "$(count unknown_msg)" -ge 20 ]
# a receiver that does not run (stopped) while frames keep coming: its socket overflows; the
# frames the kernel dropped there are counted (drop device), and the engine serves afterwards
bg 2 "$T/srv2" env EMP_TOOL_COUNTERS=1 "$BIN/emp-pingpong" -s --once
sleep 0.3
kill -STOP "${PIDS[-1]}"
on 1 $INJ "$M1" 30000 ack
kill -CONT "${PIDS[-1]}"
on 1 "$BIN/emp-pingpong" -c h2 -m 4 -n 100 > "$T/cli2" || fail "ping-pong after the overflow"
wait "${PIDS[-1]}" || fail "second server exited with an error"
count2() { awk -v r="$1" '$2 == "drop" && $3 == r { print $4 }' "$T/srv2"; }
expect "frames the device dropped counted ($(count2 device))" [ "$(count2 device)" -ge 1 ]
