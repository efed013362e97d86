#!/usr/bin/env bash
# t_app_nginx: nginx (2 workers, sendfile) under emp-run --strict serves curl (1 KiB, 100 KiB, 5 MiB: sha256 intact) and wrk -c 64 (no errors, only 2xx), all under --strict; EMP carried the bytes.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v nginx >/dev/null && command -v wrk >/dev/null && command -v curl >/dev/null || fail "nginx, wrk or curl not installed (make deps)"
cluster_up
W=$T/www
mkdir -p "$W" "$T/tmp"
head -c 1024 /dev/urandom > "$W/f1k"
head -c 102400 /dev/urandom > "$W/f100k"
head -c 5242880 /dev/urandom > "$W/f5m"
# root: the workers open their own EMP endpoints (an AF_PACKET socket needs CAP_NET_RAW)
cat > "$T/nginx.conf" <<EOF
worker_processes 2;
daemon off;
master_process on;
user root;
pid $T/nginx.pid;
error_log $T/error.log warn;
events { worker_connections 1024; }
http {
$(nginx_http_common "$T")
	tcp_nopush on;
	keepalive_requests 100000;
	server {
		listen 10.77.0.2:8081;
		root $W;
	}
}
EOF
bg 2 "$T/srv.log" "$ER" --strict nginx -p "$T" -c "$T/nginx.conf"
srv=${PIDS[-1]}
wait_port 2 8081

# 1. curl, each size twice (a fresh process and connection each time)
for f in f1k f100k f5m; do
	for i in 1 2; do
		b1=$(rxb 1)
		on 1 "$ER" --strict curl -sS --fail -o "$T/$f.got" "http://10.77.0.2:8081/$f" || fail "curl $f ($i)"
		[ "$(sha256sum < "$T/$f.got")" = "$(sha256sum < "$W/$f")" ] || fail "curl $f ($i): sha256 differs"
		at_least "curl $f ($i) intact; EMP bytes into h1" $(( $(rxb 1) - b1 )) "$(stat -c %s "$W/$f")"
	done
done
# and all three in one connection (keep-alive)
b1=$(rxb 1)
on 1 "$ER" --strict curl -sS --fail -o "$T/k1" "http://10.77.0.2:8081/f1k" -o "$T/k2" "http://10.77.0.2:8081/f5m" \
	-o "$T/k3" "http://10.77.0.2:8081/f100k" || fail "curl keep-alive"
cmp "$T/k1" "$W/f1k" && cmp "$T/k2" "$W/f5m" && cmp "$T/k3" "$W/f100k" || fail "curl keep-alive: bodies differ"
at_least "three files in one connection intact; EMP bytes into h1" $(( $(rxb 1) - b1 )) $(( 1024 + 102400 + 5242880 ))

# 2. wrk: 64 connections for 2 s on the 1 KiB file
b1=$(rxb 1); b2=$(rxb 2)
on 1 "$ER" --strict wrk -t 2 -c 64 -d 2s "http://10.77.0.2:8081/f1k" > "$T/wrk.log" 2>&1 || { cat "$T/wrk.log"; fail "wrk exited $?"; }
cat "$T/wrk.log"
! grep -q "Socket errors" "$T/wrk.log" || fail "wrk: socket errors"
! grep -q "Non-2xx" "$T/wrk.log" || fail "wrk: non-2xx responses"
req=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$T/wrk.log")
at_least "wrk requests" "${req:-0}" 1000
at_least "EMP bytes into h1 (each response >= 1 KiB)" $(( $(rxb 1) - b1 )) $(( req * 1024 ))
at_least "EMP bytes into h2 (each request >= 40 bytes)" $(( $(rxb 2) - b2 )) $(( req * 40 ))

# 3. both workers served over EMP (each has an engine of its own)
sleep 0.3                        # one statistics update
n=0 min=0 mout=0
for w in $(pgrep -P "$srv" -x nginx); do
	"$BIN/empstat" --json "$w" > "$T/w$w.json" 2>/dev/null || continue
	python3 -c "import json,sys; c=json.load(open('$T/w$w.json'))['endpoints'][0]['counters']; print('worker $w engine:', c['msgs_received'], 'messages in,', c['msgs_sent'], 'out,', c['bytes_sent'], 'bytes out'); sys.exit(c['bytes_sent'] < 1000000)" \
		&& n=$((n + 1))
	min=$(( min + $(python3 -c "import json; print(json.load(open('$T/w$w.json'))['endpoints'][0]['counters']['msgs_received'])") ))
	mout=$(( mout + $(python3 -c "import json; print(json.load(open('$T/w$w.json'))['endpoints'][0]['counters']['msgs_sent'])") ))
done
at_least "nginx workers whose engine sent > 1 MB" "$n" 2
# nginx corks each response (tcp_nopush: header by writev, body by sendfile,
# then uncork): the two writes leave as one EMP message (hold.c), so the
# workers send about one message per request they receive (two before)
at_least "requests the workers received as EMP messages" "$min" "$req"
(( mout * 4 <= min * 5 )) || fail "workers sent $mout EMP messages for $min received: a corked response's writes were not coalesced"
echo "workers: $min EMP messages in, $mout out"
! grep -E '\[(alert|emerg|crit)\]' "$T/error.log" || fail "nginx logged alerts"
