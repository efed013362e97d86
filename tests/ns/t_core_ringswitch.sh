#!/usr/bin/env bash
# t_core_ringswitch: the AF_PACKET driver builds its rx ring while numbered frames stream in (afp_lazy.c): every frame arrives, the ring is in use after, once a frame has come from the ring no frame comes twice (the helper socket stops at its first frame stamped after the ring went up), and hardly any frame comes twice before that either (the helper's copies of frames the socket gave are dropped unread).
# timeout: 60
. "$(dirname "$0")/lib.sh"
cluster_up
T=$(mktemp -d)
trap 'rm -rf "$T"; cleanup' EXIT
N=20000
mac1=$(mac_of 1)
mac2=$(mac_of 2)
cat >"$T/send.py" <<'PY'
import struct, sys, time
sys.path.insert(0, sys.argv[5])
from inject import ETYPE, common, mac, open_raw   # the wire format's builders
ifname, dst, src, n = sys.argv[1], mac(sys.argv[2]), mac(sys.argv[3]), int(sys.argv[4])
s = open_raw(ifname)
# a DATA frame's common header to endpoint 4321 (all ids 0); the number at 40
head = dst + src + struct.pack(">H", ETYPE) + common(4321, 9, 1, src_inc=0, session=0, msg_id=0)
t0 = time.monotonic()
for k in range(n):
    s.send(head + struct.pack(">I", k) + b"p" * 20)
    if k % 50 == 49:   # about 10000 frames a second: the switch happens mid-stream
        d = t0 + (k + 1) / 10000.0 - time.monotonic()
        if d > 0:
            time.sleep(d)
PY
# the build starts at the first frame read (EMP_AFP_RING_AFTER=1)
EMP_AFP_BULK=0 EMP_AFP_RING_AFTER=1 bg 1 "$T/rx" "$ROOT/build/tests/ns/ringswitch" eth0 4321 "$N" 20
for i in $(seq 100); do grep -q ready "$T/rx" 2>/dev/null && break; sleep 0.05; done
on 2 python3 "$T/send.py" eth0 "$mac1" "$mac2" "$N" "$ROOT/tests/ns/progs"
rc=0; wait "${PIDS[0]}" || rc=$?
cat "$T/rx"
expect "every numbered frame arrived across the ring switch-over" grep -q "got $N of $N distinct" "$T/rx"
expect "the ring took over (mode 3, frames read from it)" [ "$rc" = 0 ]
# the helper socket hears every frame: read after the ring took over, its frames
# are copies (100-200 of them at this rate before the receive-time rule)
late=$(sed -n 's/^late duplicates \([0-9]*\)/\1/p' "$T/rx")
expect "few frames read twice after the ring took over (${late:-?}, at most 50)" [ "${late:-999}" -le 50 ]
expect "the helper socket stopped at a frame the ring had too" grep -q "helper caught up 1" "$T/rx"
# the frames read from the socket in the grace period after the helper was
# bound reach the helper too (50-150 read twice at this rate before they were
# matched and dropped unread)
early=$(sed -n 's/^early duplicates \([0-9]*\)/\1/p' "$T/rx")
expect "few frames read twice before the ring took over (${early:-?}, at most 10)" [ "${early:-999}" -le 10 ]
