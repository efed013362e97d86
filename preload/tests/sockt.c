/* sockt.c: small socket test programs for the namespace tests of the preload (half-close, peer death, nb connect, epoll ET, fork servers, forks under load). */
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "sockt"
#include "socklib.h"

static uint8_t pat(uint64_t i) { return (uint8_t)(i * 131 + (i >> 9)); }

/* half-close: client sends n bytes then SHUT_WR; server counts to EOF, answers, closes */
static int halfclose_server(int port)
{
	int l = listener(port), s = accept(l, NULL, NULL);
	char buf[65536];
	uint64_t n = 0, bad = 0;
	ssize_t r;
	while ((r = read(s, buf, sizeof buf)) > 0)
		for (ssize_t i = 0; i < r; i++, n++)
			bad += buf[i] != (char)pat(n);
	if (r < 0)
		die("server read");
	char msg[128];
	int m = snprintf(msg, sizeof msg, "got %llu bad %llu\n", (unsigned long long)n, (unsigned long long)bad);
	if (write_all(s, msg, m) < 0)
		die("server write after peer's SHUT_WR");
	close(s);
	printf("server: %s", msg);
	return bad != 0;
}

static int halfclose_client(const char *host, int port, uint64_t total)
{
	int s = dial(host, port);
	static char buf[100000];
	uint64_t o = 0;
	while (o < total) {
		size_t k = total - o < sizeof buf ? total - o : sizeof buf;
		k = 1 + (size_t)(rand() % (int)k);       /* odd sizes: boundaries must not leak */
		for (size_t i = 0; i < k; i++)
			buf[i] = pat(o + i);
		if (write_all(s, buf, k) < 0)
			die("client write");
		o += k;
	}
	if (shutdown(s, SHUT_WR) < 0)
		die("shutdown");
	char ans[256];
	size_t got = 0;
	ssize_t r;
	while ((r = read(s, ans + got, sizeof ans - 1 - got)) > 0)
		got += r;
	if (r < 0)
		die("client read answer");
	ans[got] = 0;
	printf("client: answer: %s", ans);
	char want[128];
	snprintf(want, sizeof want, "got %llu bad 0\n", (unsigned long long)total);
	return strcmp(ans, want) != 0;
}

/* sink: read until EOF/error; report how it ended and when */
static int sink_server(int port)
{
	int l = listener(port), s = accept(l, NULL, NULL);
	char buf[65536];
	uint64_t n = 0;
	ssize_t r;
	printf("accepted\n");
	fflush(stdout);
	while ((r = read(s, buf, sizeof buf)) > 0)
		n += r;
	printf("end %s after %llu bytes at %lld\n", r == 0 ? "EOF" : strerror(errno),
	       (unsigned long long)n, now_ms());
	return 0;
}

/* stream: write until error; report the error and when */
static int stream_client(const char *host, int port)
{
	signal(SIGPIPE, SIG_IGN);
	int s = dial(host, port);
	static char buf[65536];
	uint64_t n = 0;
	printf("connected\n");
	fflush(stdout);
	for (;;) {
		ssize_t w = write(s, buf, sizeof buf);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			printf("end %s after %llu bytes at %lld\n", strerror(errno), (unsigned long long)n, now_ms());
			return 0;
		}
		n += w;
	}
}

/* echo server; banner: the server speaks first */
static void echo_conn(int s, int banner)
{
	char buf[65536];
	ssize_t r;
	if (banner && write_all(s, "HELLO\n", 6) < 0)
		die("banner");
	while ((r = read(s, buf, sizeof buf)) > 0)
		if (write_all(s, buf, r) < 0)
			break;
	close(s);
}

static int echo_server(int port, int banner, int count)
{
	int l = listener(port);
	for (int i = 0; count == 0 || i < count; i++) {
		int s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		echo_conn(s, banner);
	}
	return 0;
}

static int echo_check(int s, size_t total);

/* client: optional non-blocking connect + poll, optional banner, echo check */
static int echo_client(const char *host, int port, int nb, int banner, size_t total)
{
	int s;
	if (nb) {
		s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
		inet_pton(AF_INET, host, &a.sin_addr);
		int r = connect(s, (void *)&a, sizeof a);
		if (r < 0 && errno != EINPROGRESS)
			die("nb connect");
		if (nb == 2) {   /* wait with epoll (EPOLLOUT, edge-triggered) */
			int ep = epoll_create1(0);
			struct epoll_event ev = { .events = EPOLLOUT | EPOLLET, .data.u32 = 42 }, o;
			epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
			if (epoll_wait(ep, &o, 1, 5000) != 1 || o.data.u32 != 42 || !(o.events & (EPOLLOUT | EPOLLERR)))
				die("epoll for connect");
			close(ep);
		} else {
			struct pollfd p = { s, POLLOUT, 0 };
			if (poll(&p, 1, 5000) != 1)
				die("poll for connect");
		}
		int err = 0;
		socklen_t l = sizeof err;
		getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l);
		if (err) {
			errno = err;
			die("connect (SO_ERROR)");
		}
		fcntl(s, F_SETFL, 0);
		printf("nb connect ok (%s)\n", r == 0 ? "immediate" : "EINPROGRESS");
	} else {
		s = dial(host, port);
	}
	char in[8];
	if (banner) {
		size_t g = 0;
		while (g < 6) {
			ssize_t r = read(s, in + g, 6 - g);
			if (r <= 0)
				die("banner read");
			g += r;
		}
		if (memcmp(in, "HELLO\n", 6))
			return fprintf(stderr, "bad banner\n"), 1;
	}
	if (echo_check(s, total))
		return 1;
	close(s);
	printf("echo ok %zu bytes\n", total);
	return 0;
}

/* total bytes of a pattern through an echo server on s, checked; 0 or 1 */
static int echo_check(int s, size_t total)
{
	char buf[65536], in[65536];
	size_t sent = 0, got = 0;
	while (sent < total) {
		size_t k = 1 + rand() % (sizeof buf - 1);
		if (k > total - sent)
			k = total - sent;
		for (size_t i = 0; i < k; i++)
			buf[i] = pat(sent + i);
		if (write_all(s, buf, k) < 0)
			die("write");
		sent += k;
		while (got < sent) {
			struct pollfd p = { s, POLLIN, 0 };
			if (poll(&p, 1, 5000) != 1)
				die("poll for echo");
			ssize_t r = recv(s, in, sizeof in, 0);
			if (r <= 0)
				die("echo read");
			for (ssize_t i = 0; i < r; i++)
				if (in[i] != (char)pat(got + i))
					return fprintf(stderr, "echo mismatch at %zu\n", got + i), 1;
			got += r;
		}
	}
	return 0;
}

/* epoll edge-triggered echo server for n connections (non-blocking, read to EAGAIN) */
struct conn { int fd, eof; char buf[256 * 1024]; size_t len; };

static int epoll_et_server(int port, int n)
{
	int l = listener(port), ep = epoll_create1(0), done = 0;
	fcntl(l, F_SETFL, O_NONBLOCK);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = NULL };
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	while (done < n) {
		struct epoll_event evs[16];
		int k = epoll_wait(ep, evs, 16, 10000);
		if (k == 0)
			return fprintf(stderr, "epoll: 10 s without events\n"), 1;
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				int s;
				while ((s = accept4(l, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
					c = calloc(1, sizeof *c);
					c->fd = s;
					struct epoll_event e2 = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
								  .data.ptr = c };
					epoll_ctl(ep, EPOLL_CTL_ADD, s, &e2);
				}
				continue;
			}
			for (;;) {   /* ET: read until EAGAIN (or full), write until EAGAIN (or empty) */
				int progress = 0;
				while (!c->eof && c->len < sizeof c->buf) {
					ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
					if (r > 0) { c->len += r; progress = 1; continue; }
					if (r == 0 || errno != EAGAIN) c->eof = 1;
					break;
				}
				while (c->len) {
					ssize_t w = write(c->fd, c->buf, c->len);
					if (w <= 0) break;
					memmove(c->buf, c->buf + w, c->len - w);
					c->len -= w;
					progress = 1;
				}
				if (!progress || (c->eof && !c->len))
					break;
			}
			if (c->eof && !c->len) {
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				free(c);
				done++;
			}
		}
	}
	printf("epoll server: %d connections done\n", done);
	return 0;
}

/* listen, then fork children that each accept one connection and echo */
static int fork_server(int port, int kids)
{
	int l = listener(port);
	for (int i = 0; i < kids; i++) {
		pid_t p = fork();
		if (p < 0)
			die("fork");
		if (p == 0) {
			int s = accept(l, NULL, NULL);
			if (s < 0)
				die("child accept");
			echo_conn(s, 0);
			_exit(0);
		}
	}
	int bad = 0, st;
	for (int i = 0; i < kids; i++) {
		wait(&st);
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	}
	printf("fork server: %d children, %d failed\n", kids, bad);
	return bad != 0;
}

#include <pthread.h>
struct targ { const char *host; int port; size_t bytes; int rc; };
static void *tmain(void *p)
{
	struct targ *a = p;
	a->rc = echo_client(a->host, a->port, 0, 0, a->bytes);
	return NULL;
}

/* n threads, each its own connection, echoing at once */
static int threads_client(const char *host, int port, int n, size_t bytes)
{
	pthread_t t[64];
	struct targ a[64];
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++) {
		a[i] = (struct targ){ host, port, bytes, 0 };
		pthread_create(&t[i], NULL, tmain, &a[i]);
	}
	int bad = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		bad += a[i].rc != 0;
	}
	printf("threads: %d of %d failed\n", bad, n);
	return bad != 0;
}

/* forks while another thread streams on an EMP connection (holding the
 * shim's locks in turn): each child finds its copy of that connection
 * failing with EIO (it belongs to the parent), makes a connection of its own
 * that echoes intact, and exits (a deadlock in the child: SIGALRM); the
 * parent's stream stays intact throughout */
struct busy { int fd; size_t bytes; int rc, rounds; volatile int stop; };
static void *busy_main(void *p)
{
	struct busy *b = p;
	while (!b->rc && (!b->stop || !b->rounds))   /* rounds of bytes until told */
		b->rc = echo_check(b->fd, b->bytes), b->rounds++;
	return NULL;
}

static int fork_busy(const char *host, int port, int forks, size_t bytes)
{
	struct busy b = { dial(host, port), bytes, 0, 0, 0 };
	pthread_t t;
	pthread_create(&t, NULL, busy_main, &b);
	int bad = 0, st;
	for (int i = 0; i < forks; i++) {
		usleep(1000 + rand() % 5000);
		pid_t p = fork();
		if (p < 0)
			die("fork");
		if (p == 0) {
			alarm(20);
			char c = 0;
			errno = 0;
			if (read(b.fd, &c, 1) != -1 || errno != EIO)
				fprintf(stderr, "child: read on the parent's connection: %s\n", strerror(errno)), _exit(3);
			errno = 0;
			if (write(b.fd, &c, 1) != -1 || errno != EIO)
				fprintf(stderr, "child: write on the parent's connection: %s\n", strerror(errno)), _exit(4);
			_exit(echo_client(host, port, 0, 0, 200000));
		}
		if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "fork %d: child %s %d\n", i, WIFEXITED(st) ? "exited" : "killed by signal",
				WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
			bad++;
		}
	}
	b.stop = 1;
	pthread_join(t, NULL);
	printf("fork busy: %d forks, %d children failed, parent stream %s (%d rounds)\n", forks, bad,
	       b.rc ? "BROKEN" : "intact", b.rounds);
	return bad || b.rc;
}

/* a non-blocking connect whose OFFER the parent's responder answered, then
 * fork: the child's copy is the parent's connection, so a wait on it returns
 * at once with an error and reads fail with EIO; the parent uses it over EMP */
static int fork_nbconnect(const char *host, int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(s, (void *)&a, sizeof a) < 0 && errno != EINPROGRESS)
		die("nb connect");
	usleep(300000);   /* the server's OFFER comes and the responder answers it */
	pid_t p = fork();
	if (p < 0)
		die("fork");
	if (p == 0) {
		alarm(10);
		struct pollfd pf = { s, POLLIN, 0 };
		int n = poll(&pf, 1, 3000);
		char c;
		errno = 0;
		ssize_t r = read(s, &c, 1);
		printf("child: poll %d revents 0x%x, read %zd (%s)\n", n, pf.revents, r, strerror(errno));
		_exit(n == 1 && (pf.revents & POLLERR) && r == -1 && errno == EIO ? 0 : 1);
	}
	int st;
	if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
		return fprintf(stderr, "child failed\n"), 1;
	fcntl(s, F_SETFL, 0);
	if (echo_check(s, 300000))
		return 1;
	printf("fork nbconnect: child saw the parent's connection fail, parent echoed\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand(getpid());
	if (argc < 3) {
		fprintf(stderr, "usage: sockt MODE ARGS (see source)\n");
		return 2;
	}
	const char *m = argv[1];
	if (!strcmp(m, "halfclose-server")) return halfclose_server(atoi(argv[2]));
	if (!strcmp(m, "halfclose-client")) return halfclose_client(argv[2], atoi(argv[3]), strtoull(argv[4], 0, 0));
	if (!strcmp(m, "sink-server")) return sink_server(atoi(argv[2]));
	if (!strcmp(m, "stream-client")) return stream_client(argv[2], atoi(argv[3]));
	if (!strcmp(m, "echo-server")) return echo_server(atoi(argv[2]), argc > 3 && atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 0);
	if (!strcmp(m, "echo-client"))
		return echo_client(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), strtoull(argv[6], 0, 0));
	if (!strcmp(m, "epoll-et-server")) return epoll_et_server(atoi(argv[2]), atoi(argv[3]));
	if (!strcmp(m, "threads-client")) return threads_client(argv[2], atoi(argv[3]), atoi(argv[4]), strtoull(argv[5], 0, 0));
	if (!strcmp(m, "fork-server")) return fork_server(atoi(argv[2]), atoi(argv[3]));
	if (!strcmp(m, "fork-nbconnect")) return fork_nbconnect(argv[2], atoi(argv[3]));
	if (!strcmp(m, "fork-busy")) return fork_busy(argv[2], atoi(argv[3]), atoi(argv[4]), strtoull(argv[5], 0, 0));
	fprintf(stderr, "sockt: unknown mode %s\n", m);
	return 2;
}
