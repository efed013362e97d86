/* asyncconn.c: an event-loop client is never frozen by a pending EMP negotiation: a single-threaded client (epoll, poll or select, a 20 ms timerfd in its set) connects N non-blocking sockets to a server that first uses each accepted socket DELAY_MS after its accept; every echo must come back intact and no gap between the wait call's returns may exceed MAXGAP_MS. */
/*
 *   asyncconn server PORT N DELAY_MS
 *          accepts N connections (blocking accept); each accepted socket is
 *          left alone (no call on it at all: its first use starts the
 *          negotiation) until DELAY_MS after its accept, then a thread of its
 *          own echoes it (blocking read, write back) until EOF
 *   asyncconn client IP PORT N BYTES MAXGAP_MS [epoll|poll|select]
 *          one thread, one wait call (epoll_wait on an epoll set, poll on a
 *          pollfd array or select on fd_sets; epoll if not named): a timerfd
 *          firing every 20 ms and N non-blocking sockets connecting
 *          (writable). A writable socket (SO_ERROR 0) writes BYTES bytes of
 *          its own pattern, reads the echo and compares every byte, then
 *          closes. The wall-clock gap between consecutive returns of the
 *          wait call (timeout 1000 ms) is measured while a connection is
 *          unfinished; exit 0 only if every byte matched and the largest gap
 *          is at most MAXGAP_MS.
 *
 * The server's OFFER for a connection leaves only when it first uses the
 * socket, so a client whose wait call settles a connected socket
 * synchronously returns after about DELAY_MS instead of at its next timer
 * tick.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
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

enum { EPOLL, POLL, SELECT };
static const char *const waitname[] = { "epoll_wait", "poll", "select" };
enum { EV_R = 1, EV_W = 2, EV_E = 4 };  /* a readiness report, whichever call made it */

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

/* what a connection waits for: writable while it connects, both while it
 * writes (the echo is read while the rest goes), readable after */
static int want(const struct conn *s)
{
	return s->st == 0 ? EV_W : s->st == 1 ? EV_R | EV_W : s->st == 2 ? EV_R : 0;
}

/* connection i reported EV at time T: the state machine, the same for every
 * mode; 0, or 1 on a failure (said on stderr) */
static int step(struct conn *s, int i, int ev, size_t bytes, double t)
{
	static char rb[65536];
	if (s->st == 0) {
		if (!(ev & (EV_W | EV_E)))
			return 0;
		int err = 0;
		socklen_t el = sizeof err;
		if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			die("getsockopt SO_ERROR");
		s->t_out = t;
		if (err) {
			fprintf(stderr, "asyncconn: connection %d: SO_ERROR %s\n", i, strerror(err));
			return 1;
		}
		s->st = 1;
	}
	if (s->st == 1 && (ev & (EV_W | EV_E))) {
		while (s->wr < bytes) {
			ssize_t w = write(s->fd, s->pat + s->wr, bytes - s->wr);
			if (w < 0) {
				if (errno == EAGAIN || errno == EINTR)
					break;
				fprintf(stderr, "asyncconn: connection %d: write after %zu bytes: %s\n", i, s->wr,
					strerror(errno));
				return 1;
			}
			s->wr += (size_t)w;
		}
		if (s->wr == bytes)
			s->st = 2;
	}
	if (s->st == 1 || s->st == 2) {
		for (;;) {
			ssize_t r = read(s->fd, rb, sizeof rb);
			if (r < 0) {
				if (errno == EAGAIN || errno == EINTR)
					break;
				fprintf(stderr, "asyncconn: connection %d: read after %zu bytes: %s\n", i, s->rd,
					strerror(errno));
				return 1;
			}
			if (r == 0) {
				fprintf(stderr, "asyncconn: connection %d: EOF after %zu of %zu echoed bytes\n", i, s->rd,
					bytes);
				return 1;
			}
			if (s->rd + (size_t)r > bytes) {
				fprintf(stderr, "asyncconn: connection %d: %zu bytes echoed, %zu sent\n", i, s->rd + (size_t)r,
					bytes);
				return 1;
			}
			for (ssize_t q = 0; q < r; q++)
				s->bad += (uint8_t)rb[q] != s->pat[s->rd + (size_t)q];
			s->rd += (size_t)r;
		}
		if (s->st == 2 && s->rd == bytes)
			s->st = 3;
	}
	return 0;
}

static uint32_t epoll_mask(int w)
{
	return (w & EV_R ? EPOLLIN : 0) | (w & EV_W ? EPOLLOUT : 0);
}

static int client(const char *ip, int port, int n, size_t bytes, int maxgap_ms, int mode)
{
	static struct conn c[MAXC];
	const char *wn = waitname[mode];
	int ep = -1;
	if (mode == EPOLL && (ep = epoll_create1(0)) < 0)
		die("epoll_create1");
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	struct itimerspec its = { { 0, TICK_MS * 1000000l }, { 0, TICK_MS * 1000000l } };
	if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL) < 0)
		die("timerfd");
	struct epoll_event e = { .events = EPOLLIN, .data.u32 = MAXC };
	if (mode == EPOLL && epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e) < 0)
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
		if (c[i].fd < 0 || c[i].fd >= FD_SETSIZE)
			die("socket");
		if (connect(c[i].fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS)
			die("connect");
		struct epoll_event ce = { .events = EPOLLOUT, .data.u32 = (uint32_t)i };
		if (mode == EPOLL && epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ce) < 0)
			die("epoll_ctl");
	}
	int done = 0, failed = 0;
	long rets = 0;
	unsigned long long ticks = 0;
	double prev = mono(), maxgap = 0, maxgap_at = 0;
	double maxin = 0, maxout = 0;   /* the longest call, the longest work between calls */
	struct epoll_event ev[MAXC + 1];
	struct pollfd pf[MAXC + 1];
	int pi[MAXC + 1];               /* pf[j] is connection pi[j] (MAXC: the timer) */
	struct { int i, ev; } rep[MAXC + 1];    /* what the call reported */
	while (done < n) {
		if (mono() - t0 > TOTAL) {
			fprintf(stderr, "asyncconn: only %d of %d connections finished in %.0f s\n", done, n, TOTAL);
			failed = 1;
			break;
		}
		/* poll and select: the sets, from each unfinished connection's state */
		int m = 0, maxfd = tfd;
		fd_set rs, ws;
		FD_ZERO(&rs);
		FD_ZERO(&ws);
		FD_SET(tfd, &rs);
		pf[m] = (struct pollfd){ .fd = tfd, .events = POLLIN };
		pi[m++] = MAXC;
		for (int i = 0; i < n && mode != EPOLL; i++) {
			int w = want(&c[i]);
			if (!w)
				continue;
			pf[m] = (struct pollfd){ .fd = c[i].fd, .events = (w & EV_R ? POLLIN : 0) | (w & EV_W ? POLLOUT : 0) };
			pi[m++] = i;
			if (w & EV_R)
				FD_SET(c[i].fd, &rs);
			if (w & EV_W)
				FD_SET(c[i].fd, &ws);
			if (c[i].fd > maxfd)
				maxfd = c[i].fd;
		}
		struct timeval tv = { 1, 0 };
		double t_call = mono();
		int k = mode == EPOLL ? epoll_wait(ep, ev, MAXC + 1, 1000)
			: mode == POLL ? poll(pf, (nfds_t)m, 1000) : select(maxfd + 1, &rs, &ws, NULL, &tv);
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
			die(wn);
		}
		int nr = 0;
		if (mode == EPOLL)
			for (int j = 0; j < k; j++)
				rep[nr++] = (typeof(rep[0])){ (int)ev[j].data.u32,
					(ev[j].events & EPOLLIN ? EV_R : 0) | (ev[j].events & EPOLLOUT ? EV_W : 0) |
					(ev[j].events & (EPOLLERR | EPOLLHUP) ? EV_E : 0) };
		else if (mode == POLL)
			for (int j = 0; j < m; j++) {
				short r = pf[j].revents;
				if (r)
					rep[nr++] = (typeof(rep[0])){ pi[j], (r & POLLIN ? EV_R : 0) | (r & POLLOUT ? EV_W : 0) |
						(r & (POLLERR | POLLHUP | POLLNVAL) ? EV_E : 0) };
			}
		else
			for (int j = 0; j < m; j++) {
				int r = (FD_ISSET(pf[j].fd, &rs) ? EV_R : 0) | (FD_ISSET(pf[j].fd, &ws) ? EV_W : 0);
				if (r)
					rep[nr++] = (typeof(rep[0])){ pi[j], r };
			}
		for (int j = 0; j < nr; j++) {
			int i = rep[j].i;
			if (i == MAXC) {
				uint64_t x;
				if (read(tfd, &x, sizeof x) == (ssize_t)sizeof x)
					ticks += x;
				continue;
			}
			struct conn *s = &c[i];
			int w0 = want(s);
			if (!w0)
				continue;
			if (step(s, i, rep[j].ev, bytes, now - t0))
				return 1;
			int w = want(s);
			struct epoll_event me = { .events = epoll_mask(w), .data.u32 = (uint32_t)i };
			if (mode == EPOLL && w != w0 && epoll_ctl(ep, w ? EPOLL_CTL_MOD : EPOLL_CTL_DEL, s->fd, &me) < 0)
				die("epoll_ctl");
			if (!w) {
				close(s->fd);
				done++;
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
	printf("asyncconn: %d connections echoed %zu bytes each %s; %s returned %ld times, %llu timer ticks; "
	       "max gap between returns %.0f ms (bound %d ms)\n",
	       done, bytes, done == n && !bad ? "intact" : "NOT intact", wn, rets, ticks, maxgap * 1000, maxgap_ms);
	printf("asyncconn: writable after (ms): %s; the max gap ended %.0f ms into the run; longest %s call "
	       "%.0f ms, longest work between calls %.0f ms\n", when, maxgap_at * 1000, wn, maxin * 1000, maxout * 1000);
	if (bad) {
		fprintf(stderr, "asyncconn: %zu echoed bytes differ\n", bad);
		failed = 1;
	}
	if (done < n)
		failed = 1;
	if (maxgap * 1000 > maxgap_ms) {
		fprintf(stderr, "asyncconn: %s was away %.0f ms (bound %d ms): the loop was frozen\n", wn,
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
	int mode = -1;
	for (int m = 0; argc == 8 && m < 3; m++)
		if (!strcmp(argv[7], (const char *[]){ "epoll", "poll", "select" }[m]))
			mode = m;
	if (argc == 7)
		mode = EPOLL;
	if (argc == 5 && !strcmp(argv[1], "server") && atoi(argv[3]) > 0 && atoi(argv[3]) <= MAXC)
		return server(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (mode >= 0 && !strcmp(argv[1], "client") && atoi(argv[4]) > 0 && atoi(argv[4]) <= MAXC && atol(argv[5]) > 0)
		return client(argv[2], atoi(argv[3]), atoi(argv[4]), (size_t)atol(argv[5]), atoi(argv[6]), mode);
	fprintf(stderr, "usage: asyncconn server PORT N DELAY_MS\n"
			"       asyncconn client IP PORT N BYTES MAXGAP_MS [epoll|poll|select]   (N at most %d)\n", MAXC);
	return 2;
}
