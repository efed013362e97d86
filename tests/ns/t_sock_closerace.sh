#!/usr/bin/env bash
# t_sock_closerace: close() while other threads read, write, poll and ioctl the same EMP socket, the shim under AddressSanitizer: no use after free, every thread ends, the server sees every connection end.
# timeout: 120
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
FDEDGE=$ROOT/build/tests/sock/fdedge
ALIB=$ROOT/build/lib/libempsock-asan.so
[ -f "$ALIB" ] || fail "build first (make: $ALIB)"
R=${ROUNDS:-150}
b0=$(rxb 2)
bg 2 "$T/s.log" env ${DBG:-} "$ER" --strict "$FDEDGE" echo-threads 7960 $((R + 1))
srv=${PIDS[-1]}
wait_port 2 7960
rc=0
on 1 env EMP_SOCK_LIB="${SHIM:-$ALIB}" ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:abort_on_error=1 ${DBG:-} \
	"$ER" --strict "$FDEDGE" close-race 10.77.0.2 7960 $R > "$T/c.log" 2>&1 || rc=$?
grep -m1 -A30 "ERROR: AddressSanitizer" "$T/c.log" && fail "AddressSanitizer"
cat "$T/c.log"
[ $rc = 0 ] || { kill "$srv" 2>/dev/null; cat "$T/s.log"; fail "client exit $rc"; }
expect "$R rounds ran" grep -q "^rounds $R " "$T/c.log"
wait "$srv" || { cat "$T/s.log"; fail "echo server"; }
expect "the server saw all $((R + 1)) connections end" grep -q "^served $((R + 1))" "$T/s.log"
at_least "EMP bytes into h2" $(( $(rxb 2) - b0 )) 1
