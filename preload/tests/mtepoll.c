/* mtepoll.c: a multi-threaded epoll echo server (one epoll set and loop per thread, LT or ET) and a multi-threaded client; checksummed records of random sizes, every byte verified at both ends. */
/*
 *   mtepoll server PORT THREADS CONNS lt|et handoff|reuseport
 *   mtepoll client HOST PORT THREADS CONNS BYTES lt|et SEED
 *
 * The client's connections each send records { le32 len, le32 fnv1a(payload),
 * payload } of random sizes (half 1..64 bytes, half 1..16 KiB) from a
 * per-connection generator until BYTES are out, then SHUT_WR; the server
 * checks every record's length and checksum as the bytes stream through and
 * echoes them back; the client compares every echoed byte with a second copy
 * of its generator and expects EOF right after the last one.
 *
 * Server threads each own an epoll set. handoff: the main thread accepts and
 * adds each connection to the next thread's set (round-robin) while that
 * thread sleeps in epoll_wait on it; reuseport: every thread has its own
 * SO_REUSEPORT listener in its set and accepts there. lt: interest follows
 * the buffer (EPOLL_CTL_MOD: EPOLLIN while there is room, EPOLLOUT while
 * there is something to send), one read and one write per event; et: one
 * registration, each event drains until EAGAIN. An event whose data is not
 * one of ours (the shim's own entries leaking out) is an error.
 * Exit 0 when every byte checked out; the last line sums it up.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SOCKLIB_PROG "mtepoll"
#include "socklib.h"

#define RMAX 16384
#define MAGIC 0x6d7465ull               /* upper bits of our epoll data */
#define MAXT 16
#define RING (256 * 1024)

static int et;
static atomic_int errors;

static void quit_all(void);
#define ERR(...) do { fprintf(stderr, "mtepoll: " __VA_ARGS__); fputc('\n', stderr); atomic_fetch_add(&errors, 1); quit_all(); } while (0)

static uint64_t xs(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13; x ^= x >> 7; x ^= x << 17;
	return *s = x;
}

static uint32_t fnv(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* ---- the record stream: the same seed gives the same bytes ---- */

struct gen {
	uint64_t s, limit, made;            /* bytes produced so far */
	uint8_t rec[8 + RMAX];
	uint32_t len, pos;
	uint64_t records;
};

static void gen_init(struct gen *g, uint64_t seed, uint64_t limit)
{
	memset(g, 0, sizeof *g);
	g->s = seed * 0x9e3779b97f4a7c15ull + 1;
	g->limit = limit;
}

/* up to max bytes of the stream into out; 0 at its end */
static size_t gen_take(struct gen *g, uint8_t *out, size_t max)
{
	size_t n = 0;
	while (n < max) {
		if (g->pos == g->len) {
			if (g->made >= g->limit)
				break;
			uint64_t r = xs(&g->s);
			uint32_t len = 1 + (uint32_t)((r >> 8) % ((r & 1) ? 64 : RMAX));
			for (uint32_t i = 0; i < len; i += 8) {
				uint64_t v = xs(&g->s);
				memcpy(g->rec + 8 + i, &v, len - i < 8 ? len - i : 8);
			}
			uint32_t h = fnv(g->rec + 8, len);
			memcpy(g->rec, &len, 4);
			memcpy(g->rec + 4, &h, 4);
			g->len = 8 + len;
			g->pos = 0;
			g->records++;
		}
		size_t k = g->len - g->pos;
		if (k > max - n)
			k = max - n;
		memcpy(out + n, g->rec + g->pos, k);
		g->pos += k;
		n += k;
		g->made += k;
	}
	return n;
}

/* ---- server ---- */

struct sconn {
	int fd, id, rd_eof;
	uint32_t want;                      /* interest registered (lt) */
	uint8_t *ring;
	size_t head, len;                   /* ring: bytes to echo */
	uint8_t hdr[8];
	uint32_t hgot, plen, pgot, phash, pwant;
	uint64_t bytes, records;
};

struct sthread {
	pthread_t t;
	int idx, ep, lfd, quit;             /* quit: an eventfd in the set, written when all is done */
	int conns;
	uint64_t bytes, records;
};

static struct sthread st[MAXT];
static int nthreads, nconns, port;
static atomic_int done_conns, next_id;
static struct sconn **conns_by_id;

/* every server thread leaves its loop (the client process has no quit fds) */
static void quit_all(void)
{
	uint64_t one = 1;
	for (int i = 0; i < nthreads; i++)
		if (st[i].quit > 0 && write(st[i].quit, &one, 8) != 8)
			die("write quit");
}

/* check the record structure of n newly read bytes */
static void parse(struct sconn *c, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n;) {
		if (c->hgot < 8) {
			c->hdr[c->hgot++] = p[i++];
			if (c->hgot == 8) {
				memcpy(&c->plen, c->hdr, 4);
				memcpy(&c->pwant, c->hdr + 4, 4);
				if (c->plen < 1 || c->plen > RMAX) {
					ERR("conn %d: record %llu has length %u", c->id, (unsigned long long)c->records, c->plen);
					c->plen = 1;
				}
				c->pgot = 0;
				c->phash = 2166136261u;
			}
			continue;
		}
		size_t k = c->plen - c->pgot;
		if (k > n - i)
			k = n - i;
		for (size_t j = 0; j < k; j++)
			c->phash = (c->phash ^ p[i + j]) * 16777619u;
		c->pgot += k;
		i += k;
		if (c->pgot == c->plen) {
			if (c->phash != c->pwant)
				ERR("conn %d: record %llu (%u bytes): checksum %08x, want %08x", c->id,
				    (unsigned long long)c->records, c->plen, c->phash, c->pwant);
			c->records++;
			c->hgot = 0;
		}
	}
	c->bytes += n;
}

/* one read into the ring's free space; 1 read something, 0 EAGAIN or full, -1 EOF/error */
static int s_read(struct sconn *c)
{
	if (c->rd_eof || c->len == RING)
		return 0;
	size_t tail = (c->head + c->len) % RING;
	size_t room = tail >= c->head ? RING - tail : c->head - tail;
	if (room > RING - c->len)
		room = RING - c->len;
	ssize_t r = read(c->fd, c->ring + tail, room);
	if (r > 0) {
		parse(c, c->ring + tail, (size_t)r);
		c->len += (size_t)r;
		return 1;
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r < 0)
		ERR("conn %d: read: %s", c->id, strerror(errno));
	else if (c->hgot)
		ERR("conn %d: EOF inside a record", c->id);
	c->rd_eof = 1;
	return -1;
}

/* one write from the ring; 1 wrote, 0 EAGAIN or nothing to send, -1 error */
static int s_write(struct sconn *c)
{
	if (!c->len)
		return 0;
	size_t k = c->head + c->len > RING ? RING - c->head : c->len;
	ssize_t w = write(c->fd, c->ring + c->head, k);
	if (w > 0) {
		c->head = (c->head + (size_t)w) % RING;
		c->len -= (size_t)w;
		return 1;
	}
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	ERR("conn %d: write: %s", c->id, strerror(errno));
	c->len = 0;
	c->rd_eof = 1;
	return -1;
}

static uint32_t s_interest(struct sconn *c)
{
	return (!c->rd_eof && c->len < RING ? EPOLLIN : 0) | (c->len ? EPOLLOUT : 0);
}

static void s_finish(struct sthread *t, struct sconn *c)
{
	epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	t->bytes += c->bytes;
	t->records += c->records;
	t->conns++;
	conns_by_id[c->id] = NULL;
	free(c->ring);
	free(c);
	if (atomic_fetch_add(&done_conns, 1) + 1 == nconns)
		quit_all();
}

static struct sconn *s_new(int fd)
{
	struct sconn *c = calloc(1, sizeof *c);
	if (!c || !(c->ring = malloc(RING)))
		die("malloc");
	c->fd = fd;
	c->id = atomic_fetch_add(&next_id, 1);
	if (c->id >= nconns) {
		ERR("more connections than %d", nconns);
		c->id = nconns;
	}
	conns_by_id[c->id] = c;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return c;
}

static void s_register(int ep, struct sconn *c)
{
	c->want = et ? EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET : s_interest(c);
	struct epoll_event ev = { .events = c->want, .data.u64 = MAGIC << 32 | (uint32_t)c->id };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die("epoll_ctl ADD");
}

/* 1: the connection is finished */
static int s_event(struct sthread *t, struct sconn *c)
{
	if (et) {
		for (;;) {
			int w = s_write(c), r = s_read(c);
			if (c->rd_eof && !c->len)
				return 1;
			if (w <= 0 && r == 0)
				return 0;   /* EAGAIN (or ring empty/full, or EOF seen) both ways: wait for an edge */
		}
	}
	s_read(c);
	s_write(c);
	if (c->rd_eof && !c->len)
		return 1;
	uint32_t want = s_interest(c);
	if (want != c->want) {
		struct epoll_event ev = { .events = want, .data.u64 = MAGIC << 32 | (uint32_t)c->id };
		if (epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
			die("epoll_ctl MOD");
		c->want = want;
	}
	return 0;
}

static void *s_thread(void *arg)
{
	struct sthread *t = arg;
	struct epoll_event evs[64];
	/* no timeout: a wake that never comes fails the test (the client gives up) */
	while (atomic_load(&done_conns) < nconns && !atomic_load(&errors)) {
		int n = epoll_wait(t->ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			uint64_t d = evs[i].data.u64;
			if (d == (MAGIC << 32 | 0xfffffffeu))             /* quit */
				return NULL;
			if (d == (MAGIC << 32 | 0xffffffffu)) {          /* our listener */
				int fd;
				while ((fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
					s_register(t->ep, s_new(fd));
				continue;
			}
			if (d >> 32 != MAGIC || (uint32_t)d >= (uint32_t)nconns || !conns_by_id[(uint32_t)d]) {
				ERR("thread %d: an event with data %#llx (events %#x) that is not ours", t->idx,
				    (unsigned long long)d, evs[i].events);
				continue;
			}
			struct sconn *c = conns_by_id[(uint32_t)d];
			if (s_event(t, c))
				s_finish(t, c);
		}
	}
	return NULL;
}

static int reuse_listener(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(s, (void *)&a, sizeof a) < 0 || listen(s, 256) < 0)
		die("listen");
	return s;
}

static int server(int handoff)
{
	conns_by_id = calloc(nconns + 1, sizeof *conns_by_id);
	int l = -1;
	if (handoff && listen(l = listener(port), 256) < 0)      /* a longer backlog */
		die("listen");
	for (int i = 0; i < nthreads; i++) {
		st[i].idx = i;
		st[i].ep = epoll_create1(EPOLL_CLOEXEC);
		st[i].lfd = -1;
		st[i].quit = eventfd(0, EFD_CLOEXEC);
		struct epoll_event qev = { .events = EPOLLIN, .data.u64 = MAGIC << 32 | 0xfffffffeu };
		if (st[i].quit < 0 || epoll_ctl(st[i].ep, EPOLL_CTL_ADD, st[i].quit, &qev) < 0)
			die("quit eventfd");
		if (!handoff) {
			st[i].lfd = reuse_listener();
			struct epoll_event ev = { .events = EPOLLIN, .data.u64 = MAGIC << 32 | 0xffffffffu };
			if (epoll_ctl(st[i].ep, EPOLL_CTL_ADD, st[i].lfd, &ev) < 0)
				die("epoll_ctl listener");
		}
	}
	/* the threads sleep in epoll_wait before their first connection */
	for (int i = 0; i < nthreads; i++)
		pthread_create(&st[i].t, NULL, s_thread, &st[i]);
	printf("listening\n");
	fflush(stdout);
	if (handoff)
		for (int k = 0; k < nconns; k++) {
			int fd = accept(l, NULL, NULL);
			if (fd < 0)
				die("accept");
			s_register(st[k % nthreads].ep, s_new(fd));   /* into another thread's set */
		}
	uint64_t bytes = 0, records = 0;
	int ok = 1;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(st[i].t, NULL);
		printf("server thread %d: %d connections, %llu records, %llu bytes\n", i, st[i].conns,
		       (unsigned long long)st[i].records, (unsigned long long)st[i].bytes);
		bytes += st[i].bytes;
		records += st[i].records;
		if (!st[i].conns)
			ok = 0;
	}
	if (!ok)
		ERR("a thread served no connection");
	printf("server: %d connections, %llu records, %llu bytes, %d errors\n", atomic_load(&done_conns),
	       (unsigned long long)records, (unsigned long long)bytes, atomic_load(&errors));
	return atomic_load(&errors) != 0 || atomic_load(&done_conns) != nconns;
}

/* ---- client ---- */

struct cconn {
	int fd, id, shut, eof;
	uint32_t want;
	struct gen tx, rx;
	uint8_t out[65536];
	size_t ooff, olen;
	uint64_t got, rs;                   /* rs: picks read sizes */
};

struct cthread {
	pthread_t t;
	int idx, n, ep;
	const char *host;
	uint64_t bytes, records;
	int finished;
};

static uint64_t c_bytes, c_seed;

/* 1 progress, 0 EAGAIN / nothing to do, -1 error */
static int c_write(struct cconn *c)
{
	if (c->shut)
		return 0;
	if (c->ooff == c->olen) {
		c->olen = gen_take(&c->tx, c->out, sizeof c->out);
		c->ooff = 0;
		if (!c->olen) {
			if (shutdown(c->fd, SHUT_WR) < 0)
				ERR("client conn %d: shutdown: %s", c->id, strerror(errno));
			c->shut = 1;
			return 1;
		}
	}
	ssize_t w = write(c->fd, c->out + c->ooff, c->olen - c->ooff);
	if (w > 0) {
		c->ooff += (size_t)w;
		return 1;
	}
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	ERR("client conn %d: write: %s", c->id, strerror(errno));
	return -1;
}

static int c_read(struct cconn *c)
{
	static __thread uint8_t b[65536], want[65536];
	if (c->eof)
		return 0;
	ssize_t r = read(c->fd, b, 1 + (size_t)(xs(&c->rs) >> 40) % sizeof b);
	if (r > 0) {
		size_t k = 0;
		while (k < (size_t)r) {
			size_t m = gen_take(&c->rx, want, (size_t)r - k);
			if (!m) {
				ERR("client conn %d: %zd bytes more than were sent", c->id, (size_t)r - k);
				return -1;
			}
			if (memcmp(want, b + k, m)) {
				ERR("client conn %d: echoed bytes differ at offset %llu", c->id, (unsigned long long)(c->got + k));
				return -1;
			}
			k += m;
		}
		c->got += (uint64_t)r;
		return 1;
	}
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r < 0) {
		ERR("client conn %d: read: %s", c->id, strerror(errno));
		return -1;
	}
	c->eof = 1;
	if (!c->shut || c->got != c->tx.made) {
		ERR("client conn %d: EOF after %llu of %llu bytes", c->id, (unsigned long long)c->got,
		    (unsigned long long)c->tx.made);
		return -1;
	}
	return 1;
}

static void *c_thread(void *arg)
{
	struct cthread *t = arg;
	struct cconn **cs = calloc(t->n, sizeof *cs);
	t->ep = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < t->n; i++) {
		struct cconn *c = cs[i] = calloc(1, sizeof *c);
		c->id = t->idx * 10000 + i;
		gen_init(&c->tx, c_seed * 1000003 + (uint64_t)c->id, c_bytes);
		gen_init(&c->rx, c_seed * 1000003 + (uint64_t)c->id, c_bytes);
		c->rs = c->tx.s ^ 0x5555;
		c->fd = dial(t->host, port);
		fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
		c->want = et ? EPOLLIN | EPOLLOUT | EPOLLET : EPOLLIN | EPOLLOUT;
		struct epoll_event ev = { .events = c->want, .data.u64 = MAGIC << 32 | (uint32_t)i };
		if (epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
			die("client epoll_ctl");
	}
	struct epoll_event evs[64];
	int left = t->n;
	double t0 = mono();
	while (left && !atomic_load(&errors)) {
		if (mono() - t0 > 20) {
			ERR("client thread %d: %d connections unfinished after 20 s", t->idx, left);
			break;
		}
		int n = epoll_wait(t->ep, evs, 64, 1000);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("client epoll_wait");
		for (int i = 0; i < n; i++) {
			uint64_t d = evs[i].data.u64;
			if (d >> 32 != MAGIC || (uint32_t)d >= (uint32_t)t->n || !cs[(uint32_t)d]) {
				ERR("client thread %d: an event with data %#llx that is not ours", t->idx, (unsigned long long)d);
				continue;
			}
			struct cconn *c = cs[(uint32_t)d];
			int bad = 0;
			if (et) {
				int r, w;
				do {
					w = c_write(c);
					r = c_read(c);
					bad |= r < 0 || w < 0;
				} while (!bad && (r > 0 || w > 0) && !c->eof);
			} else {
				bad = c_write(c) < 0 || c_read(c) < 0;
				uint32_t want = (c->eof ? 0 : EPOLLIN) | (c->shut ? 0 : EPOLLOUT);
				if (!bad && !c->eof && want != c->want) {
					struct epoll_event ev = { .events = want, .data.u64 = d };
					if (epoll_ctl(t->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
						die("client epoll_ctl MOD");
					c->want = want;
				}
			}
			if (bad || c->eof) {
				epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				if (!bad) {
					t->bytes += c->got;
					t->records += c->tx.records;
					t->finished++;
				}
				free(c);
				cs[(uint32_t)d] = NULL;
				left--;
			}
		}
	}
	free(cs);
	return NULL;
}

static int client(const char *host, int nconn, const char *seed)
{
	struct cthread ct[MAXT];
	c_seed = strtoull(seed, NULL, 0);
	for (int i = 0; i < nthreads; i++) {
		ct[i] = (struct cthread){ .idx = i, .n = nconn / nthreads + (i < nconn % nthreads), .host = host };
		pthread_create(&ct[i].t, NULL, c_thread, &ct[i]);
	}
	uint64_t bytes = 0, records = 0;
	int fin = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(ct[i].t, NULL);
		bytes += ct[i].bytes;
		records += ct[i].records;
		fin += ct[i].finished;
	}
	printf("client: %d connections, %llu records, %llu bytes, %d errors\n", fin, (unsigned long long)records,
	       (unsigned long long)bytes, atomic_load(&errors));
	return atomic_load(&errors) != 0 || fin != nconn;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	alarm(55);                                  /* never outlive the test */
	if (argc == 7 && !strcmp(argv[1], "server")) {
		port = atoi(argv[2]);
		nthreads = atoi(argv[3]);
		nconns = atoi(argv[4]);
		et = !strcmp(argv[5], "et");
		if (nthreads < 1 || nthreads > MAXT || nconns < nthreads)
			return 2;
		return server(!strcmp(argv[6], "handoff"));
	}
	if (argc == 9 && !strcmp(argv[1], "client")) {
		port = atoi(argv[3]);
		nthreads = atoi(argv[4]);
		c_bytes = strtoull(argv[6], NULL, 0);
		et = !strcmp(argv[7], "et");
		if (nthreads < 1 || nthreads > MAXT || atoi(argv[5]) < nthreads || atoi(argv[5]) / nthreads >= 10000)
			return 2;
		return client(argv[2], atoi(argv[5]), argv[8]);
	}
	fprintf(stderr, "usage: mtepoll server PORT THREADS CONNS lt|et handoff|reuseport\n"
			"       mtepoll client HOST PORT THREADS CONNS BYTES lt|et SEED\n");
	return 2;
}
