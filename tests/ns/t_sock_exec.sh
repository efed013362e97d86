#!/usr/bin/env bash
# t_sock_exec: an EMP connection and new programs: after exec (9 forms), posix_spawn(p) (also with a dup2 file action), system, popen, _exit or SIGKILL the peer reads every byte written or an error, never a clean EOF with bytes missing. A Python server that runs subprocesses (close_fds: a vfork child closes every descriptor with close_range on its parent's memory) while its connection stays open: 200 lines echo intact (with the close_range wrapper touching the parent's tables from the vfork child, the connection ended after the first subprocess).
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
cluster_up
EXECT=$ROOT/build/tests/sock/exect
A=100000 B=100000
# one HOW on PORT: the client writes A bytes then HOW (its child writes B into the inherited fd);
# the server reads only once the client is done (the worst case: nothing read before the end)
one() {
	local how=$1 port=$2 kind=$3 res=$T/$1.res flag=$T/$1.flag
	bg 2 "$T/$how.s" "$ER" --strict "$EXECT" server "$port" "$flag"
	local srv=${PIDS[-1]}
	wait_port 2 "$port"
	on 1 env PATH="$(dirname "$EXECT"):$PATH" "$ER" --strict "$EXECT" client 10.77.0.2 "$port" $A "$how" $B "$res" \
		> "$T/$how.c" 2>&1 || true
	touch "$flag"
	wait "$srv" || { cat "$T/$how.s"; fail "$how: server"; }
	local end n acc=0 e=0
	read -r end n rest < "$T/$how.s" || fail "$how: no server verdict"
	[ "$end" = error ] && n=${rest}
	[ -f "$res" ] && read -r acc e < "$res"
	echo "$how: server $(cat "$T/$how.s"), child wrote $acc (errno $e)"
	# the peer sees the bytes or an error
	[ "$end" = error ] || [ "$n" -eq $((A + acc)) ] || fail "$how: clean EOF after $n bytes, $((A + acc)) were written"
	case $kind in
	exec)  [ -f "$res" ] || fail "$how: the new program did not run"
	       [ "$acc" -eq 0 ] || fail "$how: the new program's write into the EMP connection was taken ($acc bytes)"
	       [ "$n" -eq $A ] || fail "$how: $n of the $A bytes written before exec arrived"
	       [ "$end" = error ] || fail "$how: clean EOF";;
	spawn) [ -f "$res" ] || fail "$how: the child did not run"
	       [ "$acc" -eq 0 ] || fail "$how: the child's write into the EMP connection was taken ($acc bytes)"
	       [ "$end" = eof ] && [ "$n" -eq $A ] || fail "$how: the parent's connection did not end cleanly";;
	die)   [ "$end" = error ] || fail "$how: clean EOF from a process that died";;
	any)   [ -f "$res" ] || fail "$how: the child did not run";;
	esac
	echo "ok: $how"
}
port=7900
for how in execve execv execvp execvpe execl execlp execle fexecve execveat; do one $how $port exec; port=$((port + 1)); done
for how in spawn spawnp system popen; do one $how $port spawn; port=$((port + 1)); done
# a file action dup2s it into the child (not seen by the wrappers): the child's bytes
# reach the peer's kernel socket, which must turn the end into an error
one spawn-dup2 $port any; port=$((port + 1))
for how in exit kill; do one $how $port die; port=$((port + 1)); done
# subprocesses beside an open connection: CPython's vfork child closes every
# descriptor (close_range) on its parent's memory; the parent's connection stays
bg 2 "$T/spawnkeep.log" "$ER" --strict python3 "$ROOT/tests/ns/progs/spawnkeep.py" $port
wait_port 2 $port
on 1 "$ER" --strict python3 "$ROOT/tests/ns/progs/passfd.py" client 10.77.0.2 $port 200 > "$T/spawnkeep.c" 2>&1 || true
cat "$T/spawnkeep.c"
expect "200 lines echoed intact while the server ran 20 subprocesses" grep -q "^client: ok 200 lines" "$T/spawnkeep.c"
for i in $(seq 50); do grep -q "server done" "$T/spawnkeep.log" && break; sleep 0.1; done
expect "the server's connection ended only at the client's EOF" grep -q "server done 200" "$T/spawnkeep.log"
