/* sockapi.c: checks socket call semantics over one connection (run both ends under emp-run): peek, waitall, timeouts, poll/select/epoll, EINTR, vectors, dup, sockopts. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "sockapi"
#include "socklib.h"

static int fails;
#define CHECK(c, ...) do { if (c) printf("ok   " __VA_ARGS__); else { printf("FAIL " __VA_ARGS__); printf("     (%s:%d errno %s)\n", __FILE__, __LINE__, strerror(errno)); fails++; } printf("\n"); } while (0)

static void msleep(int ms) { usleep(ms * 1000); }

static ssize_t read_n(int fd, void *b, size_t n)
{
	size_t g = 0;
	while (g < n) {
		ssize_t r = read(fd, (char *)b + g, n - g);
		if (r <= 0)
			return r < 0 ? r : (ssize_t)g;
		g += r;
	}
	return g;
}

static unsigned char pat(size_t i) { return (unsigned char)(i * 7 + (i >> 8)); }

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) { (void)sig; alarms++; }
static void on_crash(int sig, siginfo_t *si, void *ctx) { (void)si; (void)ctx; signal(sig, SIG_DFL); raise(sig); }

static int server(int port)
{
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(l, (void *)&a, sizeof a) < 0 || listen(l, 4) < 0)
		return perror("listen"), 1;
	int s = accept(l, NULL, NULL);
	char b[256];
	/* 0: the server's first use of an accepted socket settles the EMP negotiation */
	write(s, "S", 1);
	/* 1: peek, FIONREAD, WAITALL, partial reads */
	msleep(150);
	int avail = -1;
	CHECK(ioctl(s, FIONREAD, &avail) == 0 && avail == 10, "FIONREAD counts 10 bytes (got %d)", avail);
	CHECK(recv(s, b, 10, MSG_PEEK) == 10 && !memcmp(b, "0123456789", 10), "MSG_PEEK sees both writes");
	CHECK(recv(s, b, 3, MSG_WAITALL) == 3 && !memcmp(b, "012", 3), "recv 3 after peek");
	CHECK(read(s, b, 100) == 7 && !memcmp(b, "3456789", 7), "partial read keeps the remainder");
	/* 2: timeouts */
	struct timeval tv = { 0, 200000 };
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	double t0 = mono();
	ssize_t r = read(s, b, 1);
	double dt = mono() - t0;
	CHECK(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && dt > 0.15 && dt < 1.0,
	      "SO_RCVTIMEO: EAGAIN after %.0f ms", dt * 1000);
	CHECK(recv(s, b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN, "MSG_DONTWAIT: EAGAIN");
	tv.tv_usec = 0;
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	/* 3: server speaks; client polls */
	write(s, "ping", 4);
	/* 4: epoll LT/oneshot on the client: three bytes after a pause */
	msleep(300);
	write(s, "xyz", 3);
	/* 5: client EINTR test takes ~100 ms, then 6: vectors */
	char v1[10], v2[20];
	struct iovec iv[2] = { { v1, 10 }, { v2, 20 } };
	struct msghdr mh = { .msg_iov = iv, .msg_iovlen = 2 };
	r = recvmsg(s, &mh, MSG_WAITALL);
	CHECK(r == 30 && !memcmp(v1, "aaaaaaaaaa", 10) && !memcmp(v2, "bbbbbbbbbbcccccccccc", 20),
	      "recvmsg MSG_WAITALL into 2 iovecs from a 3-iovec writev (%zd)", r);
	/* 5b: the client blocks in read under a 10 ms SA_RESTART timer meanwhile */
	msleep(200);
	write(s, "R", 1);
	struct iovec ov[2] = { { "hello ", 6 }, { "world", 5 } };
	struct msghdr om = { .msg_iov = ov, .msg_iovlen = 2 };
	CHECK(sendmsg(s, &om, 0) == 11, "sendmsg 2 iovecs");
	/* 7: dup on the client side: "dup!" */
	CHECK(read_n(s, b, 4) == 4 && !memcmp(b, "dup!", 4), "data written through a dup'd fd");
	/* 9: large write split across messages; small reads */
	size_t big = 5 << 20, got = 0;
	int bad = 0;
	while (got < big) {
		r = read(s, b, 1 + (got % 200));
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			bad |= (unsigned char)b[i] != pat(got + i);
		got += r;
	}
	CHECK(got == big && !bad, "5 MiB single write read back in small pieces (%zu bytes)", got);
	/* 10: EPOLLRDHUP after the client's SHUT_WR */
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u32 = 7 }, out;
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	struct timespec ts = { 3, 0 };   /* epoll_pwait2 (glibc 2.35): the shim's wait, with a timespec */
	int n = epoll_pwait2(ep, &out, 1, &ts, NULL);
	CHECK(n == 1 && (out.events & EPOLLRDHUP) && out.data.u32 == 7, "EPOLLRDHUP after peer's SHUT_WR, by epoll_pwait2 (events %#x)", n == 1 ? out.events : 0);
	CHECK(read(s, b, 1) == 0, "read returns EOF");
	CHECK(write(s, "bye", 3) == 3, "write after peer's SHUT_WR");
	close(s);
	/* 11: a second connection the server closes after its last words */
	s = accept(l, NULL, NULL);
	CHECK(s >= 0 && write(s, "bye", 3) == 3, "second connection: last words");
	close(s);
	printf("server: %d failures\n", fails);
	return fails != 0;
}

static int client(const char *host, int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(s, (void *)&a, sizeof a) < 0)
		return perror("connect"), 1;
	char b[256];
	CHECK(read(s, b, 1) == 1 && b[0] == 'S', "first byte from the server");
	/* 1 */
	write(s, "0123", 4);
	msleep(30);
	write(s, "456789", 6);
	/* 3: poll/select mixing an EMP socket and an idle pipe */
	int pp[2];
	pipe(pp);
	struct pollfd p[2] = { { pp[0], POLLIN, 0 }, { s, POLLIN, 0 } };
	int n = poll(p, 2, 3000);
	CHECK(n == 1 && !p[0].revents && (p[1].revents & POLLIN), "poll: only the socket is readable");
	fd_set rs, ws;
	FD_ZERO(&rs); FD_ZERO(&ws);
	FD_SET(pp[0], &rs); FD_SET(s, &rs); FD_SET(s, &ws);
	struct timeval tv = { 1, 0 };
	n = select((s > pp[0] ? s : pp[0]) + 1, &rs, &ws, NULL, &tv);
	CHECK(n == 2 && FD_ISSET(s, &rs) && FD_ISSET(s, &ws) && !FD_ISSET(pp[0], &rs), "select: socket readable+writable, pipe not");
	CHECK(read_n(s, b, 4) == 4 && !memcmp(b, "ping", 4), "read what the server sent first");
	/* 4: epoll level-triggered and oneshot */
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0x1234 }, out[2];
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &(struct epoll_event){ .events = EPOLLIN, .data.u64 = 99 });
	n = epoll_wait(ep, out, 2, 100);
	CHECK(n == 0, "epoll: nothing ready yet (%d)", n);
	/* nested: the socket in an inner set, the inner set in an outer one */
	int inner = epoll_create1(0), outer = epoll_create1(0);
	CHECK(epoll_ctl(inner, EPOLL_CTL_ADD, s, &(struct epoll_event){ .events = EPOLLIN, .data.u64 = 0x77 }) == 0,
	      "the socket in an inner epoll set too");
	CHECK(epoll_ctl(outer, EPOLL_CTL_ADD, inner, &(struct epoll_event){ .events = EPOLLIN, .data.u64 = 0x88 }) == 0 &&
	      epoll_ctl(outer, EPOLL_CTL_ADD, pp[0], &(struct epoll_event){ .events = EPOLLIN, .data.u64 = 99 }) == 0,
	      "the inner set and a pipe in an outer set");
	n = epoll_wait(outer, out, 2, 100);
	CHECK(n == 0, "nested: nothing ready yet (%d)", n);
	n = epoll_wait(outer, out, 2, 3000);
	CHECK(n == 1 && out[0].data.u64 == 0x88 && (out[0].events & EPOLLIN),
	      "nested: data on the socket makes the outer set report the inner set (%d, data %#llx)", n,
	      n > 0 ? (unsigned long long)out[0].data.u64 : 0ull);
	/* the outer set may have reported the inner one for a frame that brought
	 * no data for it yet (an ack: the inner set's kernel set holds the
	 * device, README Limits), so the inner set gets a bounded wait */
	n = epoll_wait(inner, out, 2, 3000);
	CHECK(n == 1 && out[0].data.u64 == 0x77 && (out[0].events & EPOLLIN), "nested: the inner set returns the socket");
	n = epoll_wait(ep, out, 2, 3000);
	CHECK(n == 1 && out[0].data.u64 == 0x1234 && (out[0].events & EPOLLIN), "epoll LT: socket readable");
	n = epoll_wait(ep, out, 2, 100);
	CHECK(n == 1 && out[0].data.u64 == 0x1234, "epoll LT: still readable while unread");
	ev.events = EPOLLIN | EPOLLONESHOT;
	epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev);
	n = epoll_wait(ep, out, 2, 100);
	CHECK(n == 1, "epoll ONESHOT: reported once");
	n = epoll_wait(ep, out, 2, 100);
	CHECK(n == 0, "epoll ONESHOT: then disarmed (%d)", n);
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) == 0, "EPOLL_CTL_MOD re-arms the ONESHOT registration");
	n = epoll_wait(ep, out, 2, 100);
	CHECK(n == 1 && out[0].data.u64 == 0x1234, "epoll ONESHOT: the unread data reported once more (%d)", n);
	n = epoll_wait(ep, out, 2, 50);
	CHECK(n == 0, "epoll ONESHOT: and disarmed again (%d)", n);
	int e2 = epoll_create1(0);
	ev.events = EPOLLIN | EPOLLET;
	ev.data.u64 = 5;
	CHECK(epoll_ctl(e2, EPOLL_CTL_ADD, s, &ev) == 0, "same socket in a second epoll set");
	n = epoll_wait(e2, out, 2, 100);
	CHECK(n == 1 && out[0].data.u64 == 5, "second set (ET) reports the pending data once");
	n = epoll_wait(e2, out, 2, 50);
	CHECK(n == 0, "second set (ET): no new edge");
	CHECK(read_n(s, b, 3) == 3 && !memcmp(b, "xyz", 3), "read the 3 bytes");
	n = epoll_wait(outer, out, 2, 100);
	CHECK(n == 0, "nested: once read, the outer set reports nothing (%d, data %#llx)", n,
	      n > 0 ? (unsigned long long)out[0].data.u64 : 0ull);
	n = epoll_wait(inner, out, 2, 0);
	CHECK(n == 0, "nested: nor does the inner set (%d)", n);
	close(outer);
	close(inner);
	/* 5: EINTR */
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 0 }, { 0, 100000 } };
	setitimer(ITIMER_REAL, &it, NULL);
	double t0 = mono();
	ssize_t r = read(s, b, 1);
	CHECK(r < 0 && errno == EINTR && mono() - t0 < 1, "blocking read interrupted by a signal: EINTR");
	/* 6 */
	struct iovec v[3] = { { "aaaaaaaaaa", 10 }, { "bbbbbbbbbb", 10 }, { "cccccccccc", 10 } };
	CHECK(writev(s, v, 3) == 30, "writev 3 iovecs");
	/* 5b: a handler installed with SA_RESTART: the blocking read goes on
	 * (signal(7)); the server writes one byte after 200 ms. A crash
	 * reporter's SIGSEGV/SIGBUS handlers (no SA_RESTART, as sanitizers and
	 * Python's faulthandler install them) change nothing: a fault comes to
	 * the thread that makes it */
	struct sigaction crash = { .sa_sigaction = on_crash, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER }, old_segv, old_bus;
	sigaction(SIGSEGV, &crash, &old_segv);
	sigaction(SIGBUS, &crash, &old_bus);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	alarms = 0;
	struct itimerval every = { { 0, 10000 }, { 0, 10000 } }, off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &every, NULL);
	r = read(s, b, 1);
	int e = errno, seen = alarms;
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	CHECK(r == 1 && b[0] == 'R' && seen >= 3,
	      "SA_RESTART (beside fault handlers without it): a blocking read goes on through %d signals (%zd, %s)",
	      seen, r, r < 0 ? strerror(e) : "ok");
	char r1[5], r2[6];
	struct iovec iv[2] = { { r1, 5 }, { r2, 6 } };
	struct msghdr mh = { .msg_iov = iv, .msg_iovlen = 2 };
	/* the error queue, with stream data waiting: nothing there, and the data stays */
	struct pollfd ep1 = { s, POLLIN, 0 };
	char eq[64], cb[256];
	struct iovec ev1 = { eq, sizeof eq };
	struct msghdr em = { .msg_iov = &ev1, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof cb };
	CHECK(poll(&ep1, 1, 2000) == 1, "stream data waiting");
	r = recvmsg(s, &em, MSG_ERRQUEUE | MSG_DONTWAIT);
	CHECK(r < 0 && errno == EAGAIN, "recvmsg(MSG_ERRQUEUE): nothing queued, EAGAIN (never stream data)");
	r = recvmsg(s, &mh, MSG_WAITALL);
	CHECK(r == 11 && !memcmp(r1, "hello", 5) && !memcmp(r2, " world", 6), "recvmsg into 2 iovecs");
	/* 7: dup, close the original, use the copy; dup2 to a chosen number */
	int d = dup(s);
	close(s);
	CHECK(write(d, "du", 2) == 2, "write through dup after closing the original");
	int d2 = dup2(d, 100);
	CHECK(d2 == 100 && write(d2, "p!", 2) == 2, "write through dup2 copy");
	close(d2);
	s = d;
	/* 8: socket options */
	int err = -1, nd = 1;
	socklen_t l = sizeof err;
	CHECK(getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err == 0, "SO_ERROR is 0");
	CHECK(setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &nd, sizeof nd) == 0, "TCP_NODELAY set");
	nd = 0; l = sizeof nd;
	CHECK(getsockopt(s, IPPROTO_TCP, TCP_NODELAY, &nd, &l) == 0 && nd == 1, "TCP_NODELAY reads back");
	struct tcp_info ti;
	l = sizeof ti;
	CHECK(getsockopt(s, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 && l > 0, "TCP_INFO");
	int sb = 0;
	l = sizeof sb;
	CHECK(getsockopt(s, SOL_SOCKET, SO_SNDBUF, &sb, &l) == 0 && sb > 0, "SO_SNDBUF %d", sb);
	struct sockaddr_in pa;
	l = sizeof pa;
	CHECK(getpeername(s, (void *)&pa, &l) == 0 && pa.sin_port == htons(port), "getpeername");
	/* 9: one 5 MiB write */
	size_t big = 5 << 20;
	unsigned char *buf = malloc(big);
	for (size_t i = 0; i < big; i++)
		buf[i] = pat(i);
	CHECK(write(s, buf, big) == (ssize_t)big, "one 5 MiB write");
	/* 10 */
	CHECK(shutdown(s, SHUT_WR) == 0, "shutdown(SHUT_WR)");
	CHECK(read_n(s, b, 3) == 3 && !memcmp(b, "bye", 3), "read after own SHUT_WR");
	CHECK(read(s, b, 1) == 0, "EOF after the server closed");
	CHECK(write(s, "x", 1) < 0 && errno == EPIPE, "write after SHUT_WR: EPIPE");
	close(s);
	/* 11: the server closes its socket: as over TCP, the first write after
	 * that succeeds (its bytes draw a RST), the server's last words are still
	 * read, then EOF, and a later write gets EPIPE */
	s = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(connect(s, (void *)&a, sizeof a) == 0, "second connection");
	msleep(200);
	CHECK(write(s, "ping", 4) == 4, "first write after the peer closed succeeds");
	CHECK(read_n(s, b, 3) == 3 && !memcmp(b, "bye", 3), "the peer's last words read after that write");
	CHECK(read(s, b, 1) == 0, "then EOF");
	msleep(100);
	errno = 0;
	CHECK(write(s, "ping", 4) < 0 && errno == EPIPE, "a later write: EPIPE (%s)", strerror(errno));
	close(s);
	printf("client: %d failures\n", fails);
	return fails != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]));
	if (argc >= 4 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: sockapi server PORT | client HOST PORT\n");
	return 2;
}
