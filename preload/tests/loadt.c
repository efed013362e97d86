/* loadt.c: many concurrent verified TCP connections in one epoll loop (the load test t_fault_load):
 * every connection carries BYTES each way at once, both ends check every byte. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "loadt"
#include "socklib.h"

/*
 * usage:
 *   loadt server PORT NCONN BYTES [SECONDS [--accept-gap MS]]
 *       serves NCONN connections (then exits 0 if every one verified); --accept-gap: one
 *       accept, its first use (epoll_ctl), then MS of sleep before the next (a busy server)
 *   loadt client ID NCONN BYTES SECONDS [--burst] HOST:PORT [HOST:PORT...]
 *       opens NCONN connections, round-robin over the targets, then runs them all at once;
 *       exit 0 if all verified. Connections are set up one after the other (a blocking
 *       connect each, then O_NONBLOCK); --burst issues every non-blocking connect at once
 *       instead; prints when the last one got its seed out ("all N connected in S s")
 *
 * Per connection: the client sends an 8-byte seed (ID << 32 | index), then BYTES of the
 * seed's pattern; the server sends BYTES of its own pattern for that seed while receiving,
 * and one status byte ('K': all BYTES arrived intact, 'X' otherwise) once it has them all.
 * The client checks the server's BYTES and the status, then closes; the server closes at EOF.
 * Both stop after SECONDS (default 120) with a count of what was still unfinished.
 */

#define CHUNK 65536
static uint8_t blk[65536];

/* byte off of the stream (seed, dir) */
static void gen(uint64_t seed, int dir, uint64_t off, uint8_t *out, size_t n)
{
	uint64_t rot = seed * 977 + (uint64_t)dir * 31337;
	for (size_t k = 0; k < n; k++) {
		uint64_t i = off + k;
		out[k] = blk[(i + rot) & 0xffff] ^ (uint8_t)(i >> 16);
	}
}

enum { ST_SEED, ST_RUN, ST_DONE };

struct conn {
	int fd, state, target;
	uint64_t seed;
	uint8_t seedbuf[8];
	unsigned seed_got, seed_sent;
	uint64_t sent, got;           /* payload bytes */
	int status_sent, status_got, bad, eof;
	uint8_t status;
	unsigned events;
};

static uint64_t bytes;
static int ep, is_server;
static long nok, nbad, nfinished;
static long nwant, nseeded;          /* client: connections, those whose seed went out (connected) */
static int accept_gap_ms;            /* server: pause after each accept (a busy server) */
static double t_start;
static uint64_t client_id;

static void set_events(struct conn *c, unsigned ev)
{
	if (c->events == ev)
		return;
	struct epoll_event e = { .events = ev, .data.ptr = c };
	if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) < 0)
		perror("loadt: epoll_ctl MOD");
	c->events = ev;
}

static void finish(struct conn *c, int ok, const char *why)
{
	if (c->state == ST_DONE)
		return;
	c->state = ST_DONE;
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	nfinished++;
	if (ok)
		nok++;
	else {
		nbad++;
		fprintf(stderr, "loadt: %s conn seed %llx: %s (sent %llu got %llu)\n", is_server ? "server" : "client",
			(unsigned long long)c->seed, why, (unsigned long long)c->sent, (unsigned long long)c->got);
	}
}

/* what this side still has to send */
static int want_out(const struct conn *c)
{
	if (!is_server && c->seed_sent < 8)
		return 1;
	if (is_server && c->state == ST_SEED)
		return 0;
	if (c->sent < bytes)
		return 1;
	return is_server && !c->status_sent && c->got == bytes;
}

static void pump(struct conn *c)
{
	static uint8_t buf[CHUNK], ref[CHUNK];
	for (int rounds = 0; rounds < 2 && c->state != ST_DONE; rounds++) {   /* fair: 250 others wait */
		int progress = 0;
		/* receive */
		if (is_server && c->state == ST_SEED) {
			ssize_t r = read(c->fd, c->seedbuf + c->seed_got, 8 - c->seed_got);
			if (r > 0) {
				c->seed_got += (unsigned)r;
				progress = 1;
				if (c->seed_got == 8) {
					memcpy(&c->seed, c->seedbuf, 8);
					c->state = ST_RUN;
				}
			} else if (r == 0 || errno != EAGAIN) {
				finish(c, 0, r == 0 ? "EOF before the seed" : strerror(errno));
				return;
			}
		} else {
			uint64_t room = bytes - c->got + (!is_server && !c->status_got);
			if (room > CHUNK)
				room = CHUNK;
			ssize_t r = room ? read(c->fd, buf, room) : read(c->fd, buf, 1);
			if (r > 0) {
				size_t n = (size_t)r;
				if (c->got + n > bytes) {      /* client: the status byte */
					if (is_server || c->got + n != bytes + 1) {
						finish(c, 0, "more data than expected");
						return;
					}
					c->status = buf[n - 1];
					c->status_got = 1;
					n--;
				}
				gen(c->seed, is_server ? 0 : 1, c->got, ref, n);
				if (memcmp(buf, ref, n))
					c->bad = 1;
				c->got += n;
				progress = 1;
			} else if (r == 0) {
				c->eof = 1;
			} else if (errno != EAGAIN) {
				finish(c, 0, strerror(errno));
				return;
			}
		}
		/* send */
		if (!is_server && c->seed_sent < 8) {
			ssize_t w = write(c->fd, (uint8_t *)&c->seed + c->seed_sent, 8 - c->seed_sent);
			if (w > 0) {
				c->seed_sent += (unsigned)w;
				progress = 1;
				if (c->seed_sent == 8 && ++nseeded == nwant)
					printf("client %llu: all %ld connected in %.2f s\n",
					       (unsigned long long)client_id, nwant, mono() - t_start);
			} else if (w < 0 && errno != EAGAIN) {
				finish(c, 0, strerror(errno));
				return;
			}
		} else if (c->state == ST_RUN && c->sent < bytes) {
			size_t n = bytes - c->sent < CHUNK ? (size_t)(bytes - c->sent) : CHUNK;
			gen(c->seed, is_server ? 1 : 0, c->sent, buf, n);
			ssize_t w = write(c->fd, buf, n);
			if (w > 0) {
				c->sent += (uint64_t)w;
				progress = 1;
			} else if (w < 0 && errno != EAGAIN) {
				finish(c, 0, strerror(errno));
				return;
			}
		} else if (is_server && c->state == ST_RUN && !c->status_sent && c->got == bytes) {
			uint8_t st = c->bad ? 'X' : 'K';
			ssize_t w = write(c->fd, &st, 1);
			if (w == 1) {
				c->status_sent = 1;
				progress = 1;
			} else if (w < 0 && errno != EAGAIN) {
				finish(c, 0, strerror(errno));
				return;
			}
		}
		/* done? */
		if (!is_server && c->sent == bytes && c->status_got) {
			finish(c, !c->bad && c->status == 'K',
			       c->bad ? "server's bytes differ" : c->status != 'K' ? "server saw bad bytes" : "");
			return;
		}
		if (is_server && c->eof) {
			int ok = c->state == ST_RUN && c->status_sent && !c->bad && c->sent == bytes;
			finish(c, ok, c->bad ? "client's bytes differ" : "EOF before the end");
			return;
		}
		if (c->eof) {
			finish(c, 0, "EOF before the end");
			return;
		}
		if (!progress)
			break;
	}
	if (c->state != ST_DONE)
		set_events(c, EPOLLIN | EPOLLRDHUP | (want_out(c) ? EPOLLOUT : 0));
}

static void raise_nofile(void)
{
	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

static int loop(long total, double limit, struct conn *conns, long nconns, int lfd)
{
	struct epoll_event evs[256];
	double end = mono() + limit;
	long accepted = 0;
	while (nfinished < total) {
		if (mono() > end) {
			long open = 0;
			for (long i = 0; i < nconns; i++)
				open += conns[i].state != ST_DONE && conns[i].fd > 0;
			fprintf(stderr, "loadt: %s: %.0f s limit: %ld of %ld finished (%ld ok, %ld bad), %ld open, "
				"%ld accepted\n", is_server ? "server" : "client", limit, nfinished, total, nok, nbad, open,
				accepted);
			return 1;
		}
		int k = epoll_wait(ep, evs, 256, 200);
		if (k < 0 && errno != EINTR) {
			perror("loadt: epoll_wait");
			return 1;
		}
		for (int i = 0; i < k; i++) {
			struct conn *c = evs[i].data.ptr;
			if (!c) {
				for (;;) {
					int s = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (s < 0)
						break;
					if (accepted >= nconns) {
						close(s);
						continue;
					}
					struct conn *n = &conns[accepted++];
					memset(n, 0, sizeof *n);
					n->fd = s;
					n->state = ST_SEED;
					n->events = EPOLLIN | EPOLLRDHUP;
					struct epoll_event e = { .events = n->events, .data.ptr = n };
					if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) < 0) {
						perror("loadt: epoll_ctl ADD");
						finish(n, 0, "epoll_ctl");
					}
					if (accept_gap_ms) {
						usleep((useconds_t)accept_gap_ms * 1000);
						break;   /* the rest wait in the backlog */
					}
				}
				continue;
			}
			pump(c);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	uint32_t x = 12345;
	for (size_t i = 0; i < sizeof blk; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		blk[i] = (uint8_t)x;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	double t0 = mono();
	if (argc >= 5 && !strcmp(argv[1], "server")) {
		is_server = 1;
		int port = atoi(argv[2]);
		long n = atol(argv[3]);
		bytes = strtoull(argv[4], NULL, 0);
		double limit = argc > 5 ? atof(argv[5]) : 120;
		if (argc > 7 && !strcmp(argv[6], "--accept-gap"))
			accept_gap_ms = atoi(argv[7]);
		struct conn *conns = calloc((size_t)n + 1, sizeof *conns);
		int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
		if (bind(l, (void *)&a, sizeof a) < 0 || listen(l, 4096) < 0) {
			perror("loadt: listen");
			return 1;
		}
		struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };
		epoll_ctl(ep, EPOLL_CTL_ADD, l, &e);
		printf("listening on %d for %ld connections\n", port, n);
		int rc = loop(n, limit, conns, n, l);
		printf("server: %ld connections, %ld ok, %ld bad, %.2f s\n", nfinished, nok, nbad, mono() - t0);
		return rc || nbad || nok != n;
	}
	if (argc >= 7 && !strcmp(argv[1], "client")) {
		uint64_t id = strtoull(argv[2], NULL, 0);
		long n = atol(argv[3]);
		client_id = id;
		nwant = n;
		t_start = t0;
		bytes = strtoull(argv[4], NULL, 0);
		double limit = atof(argv[5]);
		int first = 6, burst = 0;
		if (!strcmp(argv[first], "--burst")) {
			burst = 1;
			first++;
		}
		int ntargets = argc - first;
		if (ntargets < 1) {
			fprintf(stderr, "loadt: no HOST:PORT\n");
			return 2;
		}
		struct sockaddr_in *tg = calloc((size_t)ntargets, sizeof *tg);
		for (int i = 0; i < ntargets; i++) {
			char h[64];
			snprintf(h, sizeof h, "%s", argv[first + i]);
			char *colon = strchr(h, ':');
			if (!colon) {
				fprintf(stderr, "loadt: target %s: expected HOST:PORT\n", argv[first + i]);
				return 2;
			}
			*colon = 0;
			tg[i].sin_family = AF_INET;
			tg[i].sin_port = htons((uint16_t)atoi(colon + 1));
			inet_pton(AF_INET, h, &tg[i].sin_addr);
		}
		struct conn *conns = calloc((size_t)n, sizeof *conns);
		for (long i = 0; i < n; i++) {
			struct conn *c = &conns[i];
			c->target = (int)(i % ntargets);
			c->seed = id << 32 | (uint64_t)i;
			c->state = ST_RUN;
			c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (burst ? SOCK_NONBLOCK : 0), 0);
			if (c->fd < 0) {
				perror("loadt: socket");
				return 1;
			}
			int r = connect(c->fd, (void *)&tg[c->target], sizeof tg[0]);
			if (r < 0 && errno != EINPROGRESS) {
				finish(c, 0, strerror(errno));
				continue;
			}
			if (!burst)
				fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
			c->events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
			struct epoll_event e = { .events = c->events, .data.ptr = c };
			if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e) < 0) {
				perror("loadt: epoll_ctl ADD");
				finish(c, 0, "epoll_ctl");
			}
		}
		printf("client %llu: %ld connections opened in %.2f s\n", (unsigned long long)id, n, mono() - t0);
		int rc = loop(n, limit, conns, n, -1);
		printf("client %llu: %ld connections, %ld ok, %ld bad, %llu bytes each way each, %.2f s\n",
		       (unsigned long long)id, nfinished, nok, nbad, (unsigned long long)bytes, mono() - t0);
		return rc || nbad || nok != n;
	}
	fprintf(stderr, "usage: loadt server PORT NCONN BYTES [SECONDS [--accept-gap MS]] | "
			"loadt client ID NCONN BYTES SECONDS [--burst] HOST:PORT...\n");
	return 2;
}
