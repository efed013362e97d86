/* asyncconn.c: an event-loop client is never frozen by a pending EMP negotiation: a single-threaded epoll client (a 20 ms timerfd in its set) connects N non-blocking sockets to a server that first uses each accepted socket DELAY_MS after its accept; every echo must come back intact and no gap between epoll_wait returns may exceed MAXGAP_MS. */
/*
 *   asyncconn server PORT N DELAY_MS
 *          accepts N connections (blocking accept); each accepted socket is
 *          left alone (no call on it at all: its first use starts the
 *          negotiation) until DELAY_MS after its accept, then a thread of its
 *          own echoes it (blocking read, write back) until EOF
 *   asyncconn client IP PORT N BYTES MAXGAP_MS
 *          one thread, one epoll set: a timerfd firing every 20 ms and N
 *          non-blocking sockets connecting (EPOLLOUT). A writable socket
 *          (SO_ERROR 0) writes BYTES bytes of its own pattern, reads the echo
 *          and compares every byte, then closes. The wall-clock gap between
 *          consecutive epoll_wait returns (timeout 1000 ms) is measured while
 *          a connection is unfinished; exit 0 only if every byte matched and
 *          the largest gap is at most MAXGAP_MS.
 *
 * The server's OFFER for a connection leaves only when it first uses the
 * socket, so a client whose epoll_wait settles a connected socket
 * synchronously returns after about DELAY_MS instead of at its next timer
 * tick.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "asyncconn"
#include "socklib.h"

#define MAXC 64
#define TICK_MS 20
#define TOTAL 20.0              /* s: the whole client run */

/* ---- server ---- */

struct served {
	int fd;
	double t_acc;           /* mono() at its accept */
	int delay_ms;
	unsigned long long bytes;
	int err;
};

static void *serve(void *arg)
{
	struct served *c = arg;
	double wait = c->t_acc + c->delay_ms / 1000.0 - mono();
	if (wait > 0) {
		struct timespec ts = { (time_t)wait, (long)((wait - (time_t)wait) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	char b[65536];
	for (;;) {
		ssize_t r = read(c->fd, b, sizeof b);   /* the first use: the OFFER goes */
		if (r == 0)
			break;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			c->err = errno;
			break;
		}
		if (write_all(c->fd, b, (size_t)r) < 0) {
			c->err = errno;
			break;
		}
		c->bytes += (unsigned long long)r;
	}
	close(c->fd);
	return NULL;
}

static int server(int port, int n, int delay_ms)
{
	int l = listener(port);
	static struct served c[MAXC];
	pthread_t t[MAXC];
	for (int i = 0; i < n; i++) {
		c[i].fd = accept(l, NULL, NULL);
		c[i].t_acc = mono();
		if (c[i].fd < 0)
			die("accept");
		c[i].delay_ms = delay_ms;
		if (pthread_create(&t[i], NULL, serve, &c[i]))
			die("pthread_create");
	}
	unsigned long long total = 0;
	int bad = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		total += c[i].bytes;
		if (c[i].err) {
			fprintf(stderr, "asyncconn server: connection %d: %s after %llu bytes\n", i, strerror(c[i].err),
				c[i].bytes);
			bad++;
		}
	}
	close(l);
	printf("asyncconn server: %d connections, first used %d ms after each accept, %llu bytes echoed, %d errors\n", n,
	       delay_ms, total, bad);
	return bad != 0;
}

/* ---- client ---- */

struct conn {
	int fd;
	int st;                 /* 0 connecting, 1 writing, 2 reading, 3 done */
	size_t wr, rd;
	size_t bad;             /* echoed bytes that differ */
	double t_out;           /* when it was first reported writable (s since start) */
	uint8_t *pat;
};

static uint64_t xs(uint64_t *r)
{
	*r ^= *r << 13;
	*r ^= *r >> 7;
	*r ^= *r << 17;
	return *r;
}

static void fill(uint8_t *p, size_t n, int conn)
{
	uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(conn + 1) + 12345;
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(xs(&r) >> 24);
}

static int interest(int ep, struct conn *c, int i, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.u32 = (uint32_t)i };
	return epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
}

static int client(const char *ip, int port, int n, size_t bytes, int maxgap_ms)
{
	static struct conn c[MAXC];
	static char rb[65536];
	int ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	struct itimerspec its = { { 0, TICK_MS * 1000000l }, { 0, TICK_MS * 1000000l } };
	if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) < 0)
		die("timerfd");
	struct epoll_event e = { .events = EPOLLIN, .data.u32 = MAXC };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e) < 0)
		die("epoll_ctl timerfd");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "asyncconn: bad address %s\n", ip);
		return 2;
	}
	double t0 = mono();
	for (int i = 0; i < n; i++) {
		c[i].pat = malloc(bytes);
		if (!c[i].pat)
			die("malloc");
		fill(c[i].pat, bytes, i);
		c[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (c[i].fd < 0)
			die("socket");
		if (connect(c[i].fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
			die("connect");
		struct epoll_event ce = { .events = EPOLLOUT, .data.u32 = (uint32_t)i };
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ce) < 0)
			die("epoll_ctl");
	}
	int done = 0, failed = 0;
	long rets = 0;
	unsigned long long ticks = 0;
	double prev = mono(), maxgap = 0, maxgap_at = 0;
	double maxin = 0, maxout = 0;   /* the longest call, the longest work between calls */
	struct epoll_event ev[64];
	while (done < n) {
		if (mono() - t0 > TOTAL) {
			fprintf(stderr, "asyncconn: only %d of %d connections finished in %.0f s\n", done, n, TOTAL);
			failed = 1;
			break;
		}
		double t_call = mono();
		int k = epoll_wait(ep, ev, 64, 1000);
		double now = mono();
		rets++;
		if (now - t_call > maxin)
			maxin = now - t_call;
		if (t_call - prev > maxout)
			maxout = t_call - prev;
		if (now - prev > maxgap) {
			maxgap = now - prev;
			maxgap_at = now - t0;
		}
		prev = now;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int j = 0; j < k; j++) {
			uint32_t i = ev[j].data.u32;
			if (i == MAXC) {
				uint64_t x;
				if (read(tfd, &x, sizeof x) == (ssize_t)sizeof x)
					ticks += x;
				continue;
			}
			struct conn *s = &c[i];
			if (s->st == 3)
				continue;
			if (s->st == 0) {
				if (!(ev[j].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
					continue;
				int err = 0;
				socklen_t el = sizeof err;
				if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
					die("getsockopt SO_ERROR");
				s->t_out = now - t0;
				if (err) {
					fprintf(stderr, "asyncconn: connection %u: SO_ERROR %s\n", i, strerror(err));
					return 1;
				}
				s->st = 1;
			}
			if (s->st == 1 && (ev[j].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
				while (s->wr < bytes) {
					ssize_t w = write(s->fd, s->pat + s->wr, bytes - s->wr);
					if (w < 0) {
						if (errno == EAGAIN || errno == EINTR)
							break;
						fprintf(stderr, "asyncconn: connection %u: write after %zu bytes: %s\n", i,
							s->wr, strerror(errno));
						return 1;
					}
					s->wr += (size_t)w;
				}
				/* the echo is read while the rest goes */
				if (interest(ep, s, (int)i, s->wr < bytes ? EPOLLIN | EPOLLOUT : EPOLLIN) < 0)
					die("epoll_ctl MOD");
				if (s->wr == bytes)
					s->st = 2;
			}
			if (s->st >= 1 && s->st < 3) {
				for (;;) {
					ssize_t r = read(s->fd, rb, sizeof rb);
					if (r < 0) {
						if (errno == EAGAIN || errno == EINTR)
							break;
						fprintf(stderr, "asyncconn: connection %u: read after %zu bytes: %s\n", i, s->rd,
							strerror(errno));
						return 1;
					}
					if (r == 0) {
						fprintf(stderr, "asyncconn: connection %u: EOF after %zu of %zu echoed bytes\n", i,
							s->rd, bytes);
						return 1;
					}
					if (s->rd + (size_t)r > bytes) {
						fprintf(stderr, "asyncconn: connection %u: %zu bytes echoed, %zu sent\n", i,
							s->rd + (size_t)r, bytes);
						return 1;
					}
					for (ssize_t q = 0; q < r; q++)
						s->bad += (uint8_t)rb[q] != s->pat[s->rd + (size_t)q];
					s->rd += (size_t)r;
				}
				if (s->st == 2 && s->rd == bytes) {
					if (epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL) < 0)
						die("epoll_ctl DEL");
					close(s->fd);
					s->st = 3;
					done++;
				}
			}
		}
	}
	size_t bad = 0;
	char when[64 * 12] = "";
	for (int i = 0; i < n; i++) {
		bad += c[i].bad;
		if (c[i].st)
			snprintf(when + strlen(when), sizeof when - strlen(when), "%s%.0f", i ? " " : "", c[i].t_out * 1000);
	}
	printf("asyncconn: %d connections echoed %zu bytes each %s; epoll_wait returned %ld times, %llu timer ticks; "
	       "max gap between returns %.0f ms (bound %d ms)\n",
	       done, bytes, done == n && !bad ? "intact" : "NOT intact", rets, ticks, maxgap * 1000, maxgap_ms);
	printf("asyncconn: writable after (ms): %s; the max gap ended %.0f ms into the run; longest epoll_wait call "
	       "%.0f ms, longest work between calls %.0f ms\n", when, maxgap_at * 1000, maxin * 1000, maxout * 1000);
	if (bad) {
		fprintf(stderr, "asyncconn: %zu echoed bytes differ\n", bad);
		failed = 1;
	}
	if (done < n)
		failed = 1;
	if (maxgap * 1000 > maxgap_ms) {
		fprintf(stderr, "asyncconn: epoll_wait was away %.0f ms (bound %d ms): the loop was frozen\n",
			maxgap * 1000, maxgap_ms);
		failed = 1;
	}
	return failed;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	alarm(50);
	if (argc == 5 && !strcmp(argv[1], "server") && atoi(argv[3]) > 0 && atoi(argv[3]) <= MAXC)
		return server(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (argc == 7 && !strcmp(argv[1], "client") && atoi(argv[4]) > 0 && atoi(argv[4]) <= MAXC &&
	    atol(argv[5]) > 0)
		return client(argv[2], atoi(argv[3]), atoi(argv[4]), (size_t)atol(argv[5]), atoi(argv[6]));
	fprintf(stderr, "usage: asyncconn server PORT N DELAY_MS\n"
			"       asyncconn client IP PORT N BYTES MAXGAP_MS   (N at most %d)\n", MAXC);
	return 2;
}
