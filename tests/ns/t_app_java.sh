#!/usr/bin/env bash
# t_app_java: the JDK's networking under emp-run --strict at both ends (tests/ns/progs/JavaNet.java): an NIO selector echo server and 200 blocking-socket connections from 8 threads (200 kB each, written by one thread while another reads) echo intact; com.sun.net.httpserver answers 300 concurrent java.net.http POSTs (1 B .. 256 KiB) with the same body and its SHA-256; and a SocketChannel read, a Socket read, a SocketChannel write and a ServerSocketChannel accept that another thread closes end at once with the JDK's exception (the JDK dup2()s a shut socket pair over the number and signals the blocked thread; on 389ee80 the channel read slept for ever). EMP frames and bytes into each host at least the data moved.
# timeout: 90
. "$(dirname "$0")/lib.sh"; . "$ROOT/preload/tests/socklib.sh"
command -v javac >/dev/null || fail "javac is not installed (scripts/deps installs openjdk-17-jdk-headless)"
javac -d "$T" "$ROOT/tests/ns/progs/JavaNet.java" || fail "javac"
cluster_up
J=(java -cp "$T" JavaNet)
bg 2 "$T/echo.log" "$ER" --strict "${J[@]}" echo-server 10.77.0.2 7390
bg 2 "$T/http.log" "$ER" --strict "${J[@]}" http-server 10.77.0.2 7391
wait_port 2 7390
wait_port 2 7391
b1=$(rxb 1); b2=$(rxb 2)
on 1 timeout 60 "$ER" --strict "${J[@]}" echo-client 10.77.0.2 7390 8 200 200000 > "$T/c1.log" 2>&1 || true
cat "$T/c1.log"
expect "200 blocking-socket connections echoed 200 kB each intact through the NIO server" \
	grep -q "^echo-client connections 200 bytes 40000000 failed 0" "$T/c1.log"
at_least "EMP bytes into the server host" $(( $(rxb 2) - b2 )) 40000000
at_least "EMP bytes into the client host" $(( $(rxb 1) - b1 )) 40000000
b1=$(rxb 1); b2=$(rxb 2)
on 1 timeout 60 "$ER" --strict "${J[@]}" http-client 10.77.0.2 7391 300 > "$T/c2.log" 2>&1 || true
cat "$T/c2.log"
expect "300 concurrent HTTP POSTs answered intact (body and SHA-256)" grep -q "^http-client requests 300 intact 300 " "$T/c2.log"
sent=$(awk '/^http-client/ { print $NF }' "$T/c2.log")
at_least "EMP bytes into the server host" $(( $(rxb 2) - b2 )) "${sent:-1}"
at_least "EMP bytes into the client host" $(( $(rxb 1) - b1 )) "${sent:-1}"
on 1 timeout 60 "$ER" --strict "${J[@]}" async-close 10.77.0.2 7390 3 > "$T/c3.log" 2>&1 || true
cat "$T/c3.log"
expect "12 blocked calls ended by another thread's close" grep -q "^async-close passed 12 failed 0" "$T/c3.log"
expect "the servers kept every connection on EMP" bash -c "! grep -q 'strict mode' '$T/echo.log' '$T/http.log'"
