#!/usr/bin/env bash
# t_ops_install: make install into a temporary DESTDIR, build a program against the installed header with pkg-config, run installed tools, make uninstall removes every file.
# timeout: 180
. "$(dirname "$0")/lib.sh"
T=$(mktemp -d)
D=$T/dest
P=/usr/local
V="DESTDIR=$D PREFIX=$P SYSCONFDIR=/etc"
make -C "$ROOT" -s install $V > "$T/install.log" 2>&1 || { cat "$T/install.log"; fail "make install"; }
find "$D" -type f | sort | sed "s|^$D||"
for f in lib/libemp.so lib/libemp.a lib/pkgconfig/libemp.pc include/emp/emp.h include/emp/fw.h \
	 include/emp/proto.h include/emp/conf.h include/emp/stats.h bin/empstat bin/emp-pingpong bin/emp-bw \
	 share/man/man1/empstat.1 share/man/man1/emp-run.1 share/man/man5/emp.conf.5 share/man/man3/libemp.3; do
	[ -e "$D$P/$f" ] || fail "installed $P/$f"
done
[ -e "$D/etc/emp/emp.conf.example" ] || fail "installed /etc/emp/emp.conf.example"
[ -x "$D$P/bin/empstat" ] || fail "empstat executable"
if [ -e "$ROOT/build/lib/libempsock.so" ]; then
	[ -e "$D$P/lib/libempsock.so" ] && [ -x "$D$P/bin/emp-run" ] || fail "libempsock.so and emp-run installed"
fi
echo "ok: files installed"

export PKG_CONFIG_PATH=$D$P/lib/pkgconfig
PC="pkg-config --define-variable=prefix=$D$P"
grep -q "^prefix=$P\$" "$D$P/lib/pkgconfig/libemp.pc" || fail "libemp.pc names the real prefix"
$PC --exists libemp || fail "pkg-config finds libemp"
cat > "$T/hello.c" <<'C'
#include <emp.h>
#include <fw.h>
#include <stats.h>
#include <stdio.h>
int main(void)
{
	struct emp_counters c = { 0 };
	struct emp_stats_id ids[4];
	int n = emp_stats_list(ids, 4);
	printf("hello emp: now %d, counters %zu bytes, %d segment(s), %s\n", emp_now_ns() > 0,
	       sizeof(c), n < 0 ? 0 : n, emp_last_error());
	return emp_now_ns() > 0 ? 0 : 1;
}
C
cc -Wall -Werror $($PC --cflags libemp) "$T/hello.c" -o "$T/hello" $($PC --libs libemp) -Wl,-rpath,"$D$P/lib" \
	|| fail "compile against the installed header"
"$T/hello" | tee "$T/hello.out"
grep -q "^hello emp: now 1" "$T/hello.out" || fail "program linked against installed libemp runs"
ldd "$T/hello" >"$T/ldd.out"   # not piped into grep -q: with pipefail, ldd killed by SIGPIPE fails the test
grep -qF "$D$P/lib/libemp.so" "$T/ldd.out" || fail "linked against the installed libemp.so: $(cat "$T/ldd.out")"
cc $($PC --cflags libemp) "$T/hello.c" -o "$T/hello-static" "$D$P/lib/libemp.a" $($PC --static --libs-only-l libemp | sed 's/-lemp//') \
	|| fail "link against the installed libemp.a"
"$T/hello-static" > /dev/null || fail "static program runs"
grep -q "^usage: empstat" <<<"$("$D$P/bin/empstat" --help)" || fail "installed empstat --help"
"$D$P/bin/empstat" --json | python3 -c "import sys, json; json.load(sys.stdin)" || fail "installed empstat --json"
grep -q "empstat" <<<"$(MANPATH=$D$P/share/man man -P cat empstat 2>/dev/null)" || fail "man empstat"
echo "ok: built and ran against the install"

make -C "$ROOT" -s uninstall $V > "$T/uninstall.log" 2>&1 || { cat "$T/uninstall.log"; fail "make uninstall"; }
left=$(find "$D" \( -type f -o -type l \) | sed "s|^$D||")
[ -z "$left" ] || fail "uninstall left: $left"
[ ! -e "$D$P/include/emp" ] && [ ! -e "$D/etc/emp" ] || fail "uninstall left the emp directories"
rm -rf "$T"
echo ok
