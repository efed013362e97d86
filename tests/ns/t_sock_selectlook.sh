#!/usr/bin/env bash
# t_sock_selectlook: select() over a readable EMP socket and a kernel pipe looks at the kernel fd with a system call only every 16th call (poll.c, klook_due), and a pipe that becomes readable is still reported within 16 calls.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
cat >"$T/srv.py" <<'PY'
import socket
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("0.0.0.0", 7320)); l.listen(1)
c, _ = l.accept()
c.sendall(b"x" * 65536)
c.recv(1)                       # until the client closes
PY
cat >"$T/cli.py" <<'PY'
import os, select, socket, sys
s = socket.create_connection(("10.77.0.2", 7320))
select.select([s], [], [], 10)  # the data has arrived: s stays readable (never read)
r, w = os.pipe()
n = 3200
for i in range(n):
    rd, _, _ = select.select([s, r], [], [], 0)
    if s not in rd or r in rd:
        print("call %d: wrong answer %s" % (i, rd)); sys.exit(1)
os.write(w, b"k")
calls = 0
while True:
    calls += 1
    rd, _, _ = select.select([s, r], [], [], 0)
    if r in rd:
        break
    if calls > 1000:
        print("the pipe was never reported"); sys.exit(1)
print("selects %d, pipe reported after %d calls" % (n, calls))
s.close()
PY
bg 2 "$T/s.log" "$ER" --strict python3 "$T/srv.py"
wait_port 2 7320
on 1 strace -f -qq -c -e trace=poll,ppoll -o "$T/st" "$ER" --strict python3 "$T/cli.py" >"$T/c.log" 2>&1 || { cat "$T/c.log"; fail "client failed"; }
cat "$T/c.log" "$T/st"
polls=$(awk '$NF == "poll" || $NF == "ppoll" { n += $4 } END { print n + 0 }' "$T/st")
calls=$(awk '/pipe reported after/ { print $6 }' "$T/c.log")
expect "3200 selects answered by EMP made at most 400 poll calls ($polls)" [ "$polls" -le 400 ]
expect "a readable pipe was reported within 16 calls (${calls:-none})" [ "${calls:-999}" -le 16 ]
