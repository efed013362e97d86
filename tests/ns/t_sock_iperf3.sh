#!/usr/bin/env bash
# t_sock_iperf3: iperf3 client and server under emp-run --strict: -t 3, -P 4, -R, --bidir; EMP carried the bytes. A writer that never waits keeps its process's progress thread at most at its 4 ms tick.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
bg 2 "$T/srv.log" "$ER" --strict iperf3 -s -p 5201
wait_port 2 5201
run() { # run NAME RXHOST ARGS...
	local name=$1 h=$2; shift 2
	local b0; b0=$(rxb "$h")
	on 1 "$ER" --strict iperf3 -c 10.77.0.2 -p 5201 -J "$@" > "$T/$name.json" || { cat "$T/$name.json"; fail "iperf3 $name"; }
	local bytes; bytes=$(python3 -c "import json; e=json.load(open('$T/$name.json'))['end']; print(int(e['sum_received']['bytes'] if 'sum_received' in e else e['sum']['bytes']))")
	local gbps; gbps=$(python3 -c "import json; e=json.load(open('$T/$name.json'))['end']; print(round(e['sum_received']['bits_per_second']/1e9,2))")
	echo "iperf3 $name: $bytes bytes, $gbps Gbit/s"
	[ "$bytes" -gt 1000000 ] || fail "iperf3 $name moved only $bytes bytes"
	at_least "EMP bytes into h$h for $name" $(( $(rxb "$h") - b0 )) "$bytes"
}
run fwd 2 -t 3
run p4 2 -t 3 -P 4
run rev 1 -t 3 -R
run bidir 2 -t 3 --bidir
# A sender that writes without waiting (-l 128K): the client process's system
# calls per MB (a count, not a time). The progress thread used to take the
# device over during the sender's long drives and spin on the readable device
# fd: 440-1300 per MB; now about 20 (sendmmsg batches), kernel TCP about 10.
if perf stat -x, -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null; then
	on 1 perf stat -x, -e raw_syscalls:sys_enter -o "$T/sc.txt" "$ER" --strict iperf3 -c 10.77.0.2 -p 5201 -J -t 2 -l 128K > "$T/sc.json" ||
		fail "iperf3 under perf stat"
	bytes=$(python3 -c "import json; print(int(json.load(open('$T/sc.json'))['end']['sum_sent']['bytes']))")
	sc=$(awk -F, '/raw_syscalls/ { print int($1) }' "$T/sc.txt")
	echo "client: $sc system calls for $bytes bytes"
	at_least "bytes moved under perf" "$bytes" 10000000
	at_most "client system calls per MB, -l 128K" $(( sc * 1000000 / bytes )) 150
else
	echo "skip: perf stat with raw_syscalls:sys_enter unavailable: no system call count"
fi
# The client's progress thread while its main thread writes without waiting
# (each drive is a look at the device, so the device is not the progress
# thread's business): it ticks at most every 4 ms, about 250 wake-ups a
# second. Its tick used to grow past 4 ms and the next drive kicked it back:
# 560-750 a second. Counted from /proc over one second of the stream.
on 1 "$ER" --strict iperf3 -c 10.77.0.2 -p 5201 -J -t 3 -l 128K > "$T/pt.json" &
ipid=$!
sleep 1
rate=$(python3 - <<'PY'
import os, time
pid = None
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            cmd = open('/proc/%s/cmdline' % p, 'rb').read().split(b'\0')
        except OSError:
            continue
        if cmd[0].endswith(b'iperf3') and b'-l' in cmd and b'-c' in cmd:
            pid = p
tid = None
for t in os.listdir('/proc/%s/task' % pid):
    if open('/proc/%s/task/%s/comm' % (pid, t)).read().strip() == 'emp-progress':
        tid = t
def cs():
    n = 0
    for l in open('/proc/%s/task/%s/status' % (pid, tid)):
        if 'ctxt_switches' in l:
            n += int(l.split()[1])
    return n, time.monotonic()
a, t0 = cs(); time.sleep(1); b, t1 = cs()
print(int((b - a) / (t1 - t0)))
PY
) || fail "no progress thread found in the iperf3 client"
wait "$ipid" || { cat "$T/pt.json"; fail "iperf3 -l 128K (progress thread count)"; }
echo "client progress thread: $rate wake-ups a second during the stream"
at_most "client progress thread wake-ups a second while its writer drives" "$rate" 450

