#!/usr/bin/env bash
# t_sock_reach: programs the EMP library cannot reach (statically linked: no preload; Go: socket calls past libc) are named before they run, by emp-run and by the shim in a child a script starts; --strict does not run them.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
FAKEGO=$ROOT/build/tests/ns/fakego    # a C program carrying Go's build-ID note
cat >"$T/st.c" <<'C'
#include <stdio.h>
int main(void) { puts("static ran"); return 0; }
C
cc -static -o "$T/st" "$T/st.c" || fail "cc -static failed (libc.a missing?)"
cc -static-pie -o "$T/stp" "$T/st.c" 2>/dev/null || cp "$T/st" "$T/stp"
runs() { # OUT ERR CMD...: exit status of CMD in host 1, its output and stderr in files
	local o=$1 e=$2; shift 2
	on 1 "$@" >"$o" 2>"$e"
}
for p in "$T/st" "$T/stp"; do
	rc=0; runs "$T/o" "$T/e" "$ER" --strict "$p" || rc=$?
	cat "$T/e"
	expect "--strict $(basename "$p"): exit 1" [ "$rc" = 1 ]
	expect "--strict $(basename "$p"): not run" [ ! -s "$T/o" ]
	expect "--strict $(basename "$p"): says statically linked, not starting" \
		sh -c "grep -q 'is statically linked' '$T/e' && grep -q 'not starting it' '$T/e'"
	rc=0; runs "$T/o" "$T/e" "$ER" "$p" || rc=$?
	expect "$(basename "$p") without --strict: runs (rc $rc)" sh -c "[ $rc = 0 ] && grep -q 'static ran' '$T/o'"
	expect "$(basename "$p") without --strict: warned" grep -q "is statically linked" "$T/e"
done
# the Go note, as emp-run's direct program
rc=0; runs "$T/o" "$T/e" "$ER" --strict "$FAKEGO" || rc=$?
cat "$T/e"
expect "--strict go: exit 1, not run" sh -c "[ $rc = 1 ] && [ ! -s '$T/o' ]"
expect "--strict go: says Go, not starting" sh -c "grep -q 'is a Go program' '$T/e' && grep -q 'not starting it' '$T/e'"
rc=0; runs "$T/o" "$T/e" "$ER" "$FAKEGO" || rc=$?
cat "$T/e"
expect "go without --strict: runs" sh -c "[ $rc = 0 ] && grep -q 'fakego ran' '$T/o'"
expect "go without --strict: emp-run warned once, the shim not again" \
	sh -c "[ \$(grep -c 'Go program' '$T/e') = 1 ] && grep -q '^emp-run: .*Go program' '$T/e'"
# ... and started by a script under emp-run: the shim in it says so; --strict ends it
rc=0; runs "$T/o" "$T/e" "$ER" --strict sh -c "$FAKEGO; echo after \$?" || rc=$?
cat "$T/e" "$T/o"
expect "--strict script: the Go child exits 1 without running" sh -c "grep -q '^after 1' '$T/o' && ! grep -q 'fakego ran' '$T/o'"
expect "--strict script: the shim says why" grep -q "^emp: this is a Go program.*strict mode: exiting" "$T/e"
rc=0; runs "$T/o" "$T/e" "$ER" sh -c "$FAKEGO; echo after \$?" || rc=$?
expect "script: the Go child runs" sh -c "grep -q 'fakego ran' '$T/o' && grep -q '^after 0' '$T/o'"
expect "script: the shim warns" grep -q "^emp: this is a Go program" "$T/e"
# no false alarm on ordinary programs
for p in /bin/true "$SOCKT" python3; do
	rc=0; runs "$T/o" "$T/e" "$ER" --strict $p $([ "$p" = python3 ] && echo -c pass) || rc=$?
	expect "$(basename "$p") under --strict: no warning" sh -c "! grep -q 'Go program\|statically linked' '$T/e'"
done
# a real Go server, where a Go toolchain is installed (not in CI)
if command -v go >/dev/null; then
	mkdir -p "$T/goe"
	cat >"$T/goe/main.go" <<'GO'
package main

import (
	"io"
	"net"
	"os"
)

func main() {
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		panic(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			panic(err)
		}
		go func(c net.Conn) { io.Copy(c, c); c.Close() }(c)
	}
}
GO
	printf 'module goe\ngo 1.19\n' >"$T/goe/go.mod"
	(cd "$T/goe" && HOME=$T GOCACHE=$T/gocache GOFLAGS=-mod=mod go build -o goe .) || fail "go build failed"
	rc=0; on 2 "$ER" --strict "$T/goe/goe" 10.77.0.2:7400 >"$T/o" 2>"$T/e" || rc=$?
	cat "$T/e"
	expect "--strict Go server: not started" sh -c "[ $rc = 1 ] && grep -q 'is a Go program' '$T/e'"
else
	echo "no Go toolchain: the real Go server part is skipped"
fi
