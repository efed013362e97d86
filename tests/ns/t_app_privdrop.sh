#!/usr/bin/env bash
# t_app_privdrop: servers as distributions ship them: nginx whose workers drop root (`user nobody;`) and listen `deferred` (TCP_DEFER_ACCEPT), and a Python server that calls setuid itself, under emp-run --strict at both ends: every connection over EMP, bytes intact.
# timeout: 60
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v nginx >/dev/null && command -v curl >/dev/null || fail "nginx or curl not installed (make deps)"
cluster_up
W=$T/www
mkdir -p "$W" "$T/tmp"
chmod 755 "$T" "$W"                   # the workers read the files as nobody
head -c 1048576 /dev/urandom > "$W/f1m"
echo hello > "$W/hello"
chmod 644 "$W/f1m" "$W/hello"
cat > "$T/nginx.conf" <<NGINX
worker_processes 2;
daemon off;
master_process on;
user nobody nogroup;
pid $T/nginx.pid;
error_log $T/error.log warn;
events { worker_connections 1024; }
http {
$(nginx_http_common "$T")
	server {
		listen 10.77.0.2:8085 deferred;
		root $W;
	}
}
NGINX
bg 2 "$T/srv.log" "$ER" --strict nginx -p "$T" -c "$T/nginx.conf"
wait_port 2 8085
sleep 0.3
users=$(ps -o user= --ppid "$(cat "$T/nginx.pid")" | sort -u | tr '\n' ' ')
expect "nginx workers run as nobody ($users)" [ "$users" = "nobody " ]
for i in 1 2 3 4; do
	b1=$(rxb 1)
	on 1 "$ER" --strict curl -sS --fail -o "$T/got" "http://10.77.0.2:8085/f1m" 2>"$T/c.err" ||
		{ cat "$T/c.err" "$T/srv.log" "$T/error.log"; fail "curl $i"; }
	cmp -s "$T/got" "$W/f1m" || fail "curl $i: 1 MiB differs"
	at_least "curl $i: 1 MiB intact from a worker that gave up root; EMP bytes into h1" $(( $(rxb 1) - b1 )) 1048576
done
on 1 "$ER" --strict curl -sS --fail "http://10.77.0.2:8085/hello" -o "$T/h" "http://10.77.0.2:8085/hello" -o "$T/h2" ||
	fail "curl keep-alive"
expect "keep-alive: both answers" sh -c "grep -q hello '$T/h' && grep -q hello '$T/h2'"
if grep -q "CAP_NET_RAW\|refuses" "$T/srv.log"; then cat "$T/srv.log"; fail "the server logged a refusal"; fi
# a program that drops root itself (setuid after listen, TCP_DEFER_ACCEPT set) and then serves
printf '%s\n' \
	'import os, socket' \
	'l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)' \
	'l.bind(("10.77.0.2", 8086)); l.listen(16)' \
	'l.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)' \
	'os.setgid(65534); os.setuid(65534)' \
	'for _ in range(3):' \
	'    c, _ = l.accept(); n = 0' \
	'    while True:' \
	'        d = c.recv(65536)' \
	'        if not d: break' \
	'        c.sendall(d); n += len(d)' \
	'    c.close()' \
	'    print("echoed", n, "as uid", os.getuid(), flush=True)' > "$T/drop.py"
bg 2 "$T/py.log" "$ER" --strict python3 "$T/drop.py"
wait_port 2 8086
for i in 1 2 3; do
	on 1 "$ER" --strict "$SOCKT" echo-client 10.77.0.2 8086 0 0 300000 2>"$T/e.err" ||
		{ cat "$T/e.err" "$T/py.log"; fail "echo $i"; }
done
sleep 0.3
cat "$T/py.log"
expect "python dropped root and echoed 3 connections over EMP" sh -c "[ \$(grep -c 'echoed 300000 as uid 65534' '$T/py.log') = 3 ]"
