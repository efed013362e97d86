/* test_simwire.c: the shim's byte stream, close and readiness on the simulated wire (virtual time, seeded loss), no root. */
/*
 * Two shim sockets in this process are the two ends of one EMP stream: each
 * was set up as a negotiation would have (es__conn_create, es__conn_set_peer,
 * state EMP) on its own endpoint of one simulated wire (tests/unit/harness.c:
 * virtual time, no progress thread), the kernel TCP connection being one
 * AF_UNIX socket pair. The test calls the application's API (read, write,
 * shutdown, close, poll, epoll: the shim's own wrappers, linked in) on
 * non-blocking sockets and drives both engines in virtual time between calls
 * (h_run), so nothing waits on a real clock and the order of events is
 * deterministic for a seed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runner.h"
#include "unit/harness.h"
#include "conn.h"

#define VT_MAX 5000000000ull            /* virtual ns a step may take at most */

struct sw {
	struct harness h;
	int fd[2];                       /* the shim's sockets: side 0 on host 0, side 1 on host 1 */
	struct es_sock *s[2];
};

/* A failed CHECK exits: the shim's exit flush (registered before us, so run
 * after us) must not wait on engines whose virtual clock nobody moves. */
static void no_exit_flush(void)
{
	es__g.ep = NULL;
}

/* the two sockets of one stream over w->h's endpoints: R receive buffers of
 * S bytes per side; as a negotiation leaves them (state EMP, the kernel
 * socket in the liveness set) */
static void sw_streams(struct sw *w, unsigned R, unsigned S, int nonblock)
{
	es__g.nbufs = R;
	es__g.bufsz = S;
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	uint32_t lid[2] = { es__conn_new_lid(), es__conn_new_lid() };
	uint64_t key[2] = { es__random64() | 1, es__random64() | 1 };
	for (int i = 0; i < 2; i++) {
		es__engine_set(w->h.ep[i]);      /* side i's connection lives on endpoint i */
		struct es_sock *s = es__sock_new(sv[i], ES_PENDING);
		CHECK(s);
		s->nonblock = nonblock;
		CHECK(es__conn_create(s, (uint16_t)(1 - i), 1, lid[i], key[i]) == 0);
		es__sock_lock(s);
		CHECK(es__conn_set_peer(s, 1, lid[1 - i], R, S, key[1 - i]) == 0);
		s->state = ES_EMP;
		es__live_add(s);
		es__sock_update(s, 1);
		es__sock_unlock(s);
		w->fd[i] = sv[i];
		w->s[i] = s;
	}
	es__engine_set(w->h.ep[0]);
	atexit(no_exit_flush);
}

/* virtual time: nobody drives the engines but the test (h_run); every call
 * must be non-blocking (a wait in the shim spins on a clock nobody moves) */
static void sw_open(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S)
{
	h_init(&w->h, 2, f, NULL);
	sw_streams(w, R, S, 1);
}

static unsigned evmask(struct sw *w, int i) { return atomic_load(&w->s[i]->evmask); }

static uint8_t pat(uint64_t off, int dir) { return (uint8_t)(((off + 1) * 2654435761u) >> 11) ^ (uint8_t)(dir * 0x5a); }

/* one direction of a transfer: bytes written from side `from`, read at the other */
struct flow {
	int from;
	size_t total, wr, rd;
	int fin;                         /* shut down after the last byte */
	int eof;                         /* the reader saw 0 */
};

static void flow_write(struct sw *w, struct flow *f)
{
	uint8_t b[3000];
	while (f->wr < f->total) {
		size_t n = f->total - f->wr < sizeof b ? f->total - f->wr : sizeof b;
		for (size_t i = 0; i < n; i++)
			b[i] = pat(f->wr + i, f->from);
		ssize_t r = write(w->fd[f->from], b, n);
		if (r < 0) {
			CHECK_MSG(errno == EAGAIN, "write: %s", strerror(errno));
			return;
		}
		CHECK(r > 0 && (size_t)r <= n);
		f->wr += (size_t)r;
	}
	if (f->fin && f->fin++ == 1)
		CHECK(shutdown(w->fd[f->from], SHUT_WR) == 0);
}

static void flow_read(struct sw *w, struct flow *f)
{
	uint8_t b[2500];
	for (;;) {
		ssize_t r = read(w->fd[1 - f->from], b, sizeof b);
		if (r < 0) {
			CHECK_MSG(errno == EAGAIN, "read: %s", strerror(errno));
			return;
		}
		if (r == 0) {
			f->eof = 1;
			return;
		}
		for (ssize_t i = 0; i < r; i++)
			CHECK_MSG(b[i] == pat(f->rd + (size_t)i, f->from), "flow from %d: byte %zu differs",
				  f->from, f->rd + (size_t)i);
		f->rd += (size_t)r;
		CHECK_MSG(f->rd <= f->total, "flow from %d: %zu bytes read of %zu written", f->from, f->rd, f->total);
	}
}

struct both { struct sw *w; struct flow *f; int n; };

/* driving stops when a reader or writer can move */
static int can_move(void *arg)
{
	struct both *b = arg;
	for (int k = 0; k < b->n; k++) {
		struct flow *f = &b->f[k];
		if (evmask(b->w, 1 - f->from) & POLLIN)
			return 1;
		if (f->wr < f->total && (evmask(b->w, f->from) & POLLOUT))
			return 1;
	}
	return 0;
}

static int flows_done(struct both *b)
{
	for (int k = 0; k < b->n; k++)
		if (b->f[k].rd < b->f[k].total || (b->f[k].fin && !b->f[k].eof))
			return 0;
	return 1;
}

/* write and read every flow, driving the wire between, until all are through */
static void run_flows(struct sw *w, struct flow *f, int n)
{
	struct both b = { w, f, n };
	for (int step = 0; step < 100000 && !flows_done(&b); step++) {
		for (int k = 0; k < n; k++) {
			flow_write(w, &f[k]);
			flow_read(w, &f[k]);
			CHECK_MSG(!f[k].eof || f[k].rd == f[k].total,
				  "flow %d: read returned 0 after %zu of %zu bytes", k, f[k].rd, f[k].total);
		}
		if (flows_done(&b))
			break;
		CHECK_MSG(h_run(&w->h, can_move, &b, VT_MAX), "stuck: flow 0 wrote %zu read %zu",
			  f[0].wr, f[0].rd);
	}
	CHECK(flows_done(&b));
}

/* 600 KiB each way at once with 2% of frames lost and 1% reordered: every
 * byte arrives, in order, through the shim's write/read; the engine really
 * retransmitted */
static void t_sim_bytes_both_ways(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 7, .loss_ppm = 20000, .reorder_ppm = 10000,
				     .reorder_ns = 30000, .delay_ns = 5000 };
	sw_open(&w, &fa, 8, 4096);
	struct flow f[2] = { { .from = 0, .total = 600000 }, { .from = 1, .total = 600000 } };
	run_flows(&w, f, 2);
	struct emp_sim_stats st;
	emp_sim_wire_stats(w.h.wire, &st);
	CHECK(st.lost > 0);
	CHECK(h_ctr(&w.h, 0).retransmits + h_ctr(&w.h, 1).retransmits > 0);
	CHECK_EQ(w.s[0]->c->nout, 600000);
	CHECK_EQ(w.s[1]->c->nin, 600000);
	CHECK_EQ(w.s[0]->c->forged + w.s[1]->c->forged, 0);
}

/* write from side i until the shim says EAGAIN; bytes taken */
static size_t write_all(struct sw *w, int i, size_t *off)
{
	uint8_t b[700];
	size_t n = 0;
	for (;;) {
		for (size_t k = 0; k < sizeof b; k++)
			b[k] = pat(*off + k, i);
		ssize_t r = write(w->fd[i], b, sizeof b);
		if (r < 0) {
			CHECK_MSG(errno == EAGAIN, "write: %s", strerror(errno));
			return n;
		}
		*off += (size_t)r;
		n += (size_t)r;
		CHECK_MSG(n <= (1u << 20), "side %d: 1 MiB written and no EAGAIN", i);
	}
}

/* read up to max bytes at side i (from side 1-i), checking them; bytes read */
static size_t read_some(struct sw *w, int i, size_t *off, size_t max)
{
	uint8_t b[900];
	size_t n = 0;
	while (n < max) {
		ssize_t r = read(w->fd[i], b, max - n < sizeof b ? max - n : sizeof b);
		if (r <= 0) {
			CHECK_MSG(r < 0 && errno == EAGAIN, "read: %zd %s", r, strerror(errno));
			break;
		}
		for (ssize_t k = 0; k < r; k++)
			CHECK_MSG(b[k] == pat(*off + (size_t)k, 1 - i), "byte %zu differs", *off + (size_t)k);
		*off += (size_t)r;
		n += (size_t)r;
	}
	return n;
}

static void settle(struct sw *w) { h_run(&w->h, NULL, NULL, 200000000); }   /* 200 ms virtual */

/* drive the wire, tearing down lingering connections the moment they are
 * through (a reap pass after every round of the engines) */
static int reap_each_round(void *arg)
{
	(void)arg;
	es__zombies_reap();
	return 0;
}

static void settle_reaping(struct sw *w) { h_run(&w->h, reap_each_round, NULL, 200000000); }

static int pollfd_ms(int fd, short ev, int ms)
{
	struct pollfd p = { fd, ev, 0 };
	int r = poll(&p, 1, ms);
	CHECK(r >= 0);
	return r ? p.revents : 0;
}

static int pollfd1(int fd, short ev) { return pollfd_ms(fd, ev, 0); }

/* A reader that does not read stops the writer once its R buffers are full
 * and the writer's W send slots are staged: write says EAGAIN, POLLOUT goes,
 * no message is sent without a receive; reading whole buffers returns their
 * credits and the writer goes on where it stopped */
static void t_sim_flow_control(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	size_t wr = 0, rd = 0;
	for (int round = 0; round < 20; round++) {
		write_all(&w, 0, &wr);
		settle(&w);
	}
	/* each write went at once while credits lasted (4 messages of 700
	 * bytes fill the peer's 4 receives), then W = 4 slots were filled */
	CHECK_EQ(wr, 4 * 700 + 4 * 1024);
	CHECK_EQ(w.s[0]->c->credits, 0);
	CHECK(!(evmask(&w, 0) & POLLOUT));
	CHECK_EQ(pollfd1(w.fd[0], POLLOUT), 0);
	int n = -1;
	CHECK(ioctl(w.fd[1], FIONREAD, &n) == 0);
	CHECK_EQ(n, 4 * 700);
	CHECK_EQ(h_ctr(&w.h, 1).drops[EMP_DROP_NO_RECV], 0);
	/* part of the first message read: its buffer is not free, still blocked */
	CHECK_EQ(read_some(&w, 1, &rd, 300), 300);
	settle(&w);
	CHECK(!(evmask(&w, 0) & POLLOUT));
	CHECK_EQ(write_all(&w, 0, &wr), 0);
	/* the rest read: credits go back, the staged slots leave, room again */
	CHECK_EQ(read_some(&w, 1, &rd, 1u << 20), 4 * 700 - 300);
	settle(&w);
	CHECK(evmask(&w, 0) & POLLOUT);
	CHECK(pollfd1(w.fd[0], POLLOUT) & POLLOUT);
	CHECK(write_all(&w, 0, &wr) > 0);
	for (int round = 0; round < 50 && rd < wr; round++) {
		read_some(&w, 1, &rd, 1u << 20);
		settle(&w);
	}
	CHECK_EQ(rd, wr);
	CHECK_EQ(h_ctr(&w.h, 1).drops[EMP_DROP_NO_RECV], 0);
}

static int both_hup(void *arg)
{
	struct sw *w = arg;
	return (evmask(w, 0) & POLLHUP) && (evmask(w, 1) & POLLHUP);
}

/* Half close with 2% loss: side 0 writes and shuts down its sending half;
 * side 1 reads every byte and then 0 (never before), its readiness says
 * POLLIN|POLLRDHUP; side 0 can no longer write (EPIPE) but still reads what
 * side 1 then sends, and 0 after side 1 shuts down too */
static void t_sim_half_close(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 11, .loss_ppm = 20000, .delay_ns = 5000 };
	sw_open(&w, &fa, 4, 2048);
	struct flow f0 = { .from = 0, .total = 50000, .fin = 1 };
	run_flows(&w, &f0, 1);
	CHECK_EQ(f0.rd, 50000);
	CHECK((evmask(&w, 1) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
	char c;
	CHECK_EQ(read(w.fd[1], &c, 1), 0);       /* and again */
	CHECK_EQ(send(w.fd[0], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
	CHECK(!(evmask(&w, 0) & POLLIN));        /* nothing came back yet */
	struct flow f1 = { .from = 1, .total = 30000, .fin = 1 };
	run_flows(&w, &f1, 1);
	CHECK_EQ(f1.rd, 30000);
	CHECK(evmask(&w, 0) & POLLRDHUP);
	CHECK(h_run(&w.h, both_hup, &w, VT_MAX));   /* both FINs through */
}

/* close() with unread data: the closing side keeps its kernel socket and the
 * connection until the close exchange is through, discarding what arrives;
 * the writer gets the FIN (read 0) and EPIPE; when it closes too, both
 * lingering connections are torn down, no message having met a cancelled
 * receive, and the kernel connection ends */
static void t_sim_close_unread(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 5, .loss_ppm = 50000, .delay_ns = 5000 };
	sw_open(&w, &fa, 4, 1024);
	size_t wr = 0, rd = 0;
	for (int round = 0; round < 5; round++) {
		write_all(&w, 0, &wr);
		settle(&w);
	}
	CHECK_EQ(read_some(&w, 1, &rd, 100), 100);
	int kfd0 = w.s[0]->kfd;
	CHECK(close(w.fd[1]) == 0);
	char c;
	CHECK_EQ(R_(recv)(kfd0, &c, 1, MSG_PEEK | MSG_DONTWAIT), -1);   /* the zombie holds its end */
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(es__zombies_reap(), 1);
	settle_reaping(&w);
	CHECK(evmask(&w, 0) & POLLIN);
	CHECK_EQ(w.s[0]->c->err, 0);
	CHECK_EQ(read(w.fd[0], &c, 1), 0);       /* the peer's FIN: it sent nothing */
	CHECK_EQ(send(w.fd[0], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
	CHECK_EQ(es__zombies_reap(), 0);         /* the closed side is through */
	CHECK_EQ(R_(recv)(kfd0, &c, 1, MSG_PEEK | MSG_DONTWAIT), 0);    /* its kernel socket gone */
	CHECK(close(w.fd[0]) == 0);
	settle_reaping(&w);
	CHECK_EQ(es__zombies_reap(), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(h_ctr(&w.h, i).drops[EMP_DROP_NO_RECV], 0);
}

/* The event mask follows the stream: POLLIN only once data has arrived (not
 * when it was written), gone when it is read; poll and a level-triggered
 * epoll set report it the same way; each change bumps the socket's seq */
static void t_sim_readiness(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	CHECK_EQ(evmask(&w, 1) & (POLLIN | POLLERR | POLLHUP), 0);
	CHECK(evmask(&w, 1) & POLLOUT);
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = w.fd[1] }, out[2];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w.fd[1], &ev) == 0);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);
	unsigned seq0 = atomic_load(&w.s[1]->seq);
	CHECK_EQ(write(w.fd[0], "hello", 5), 5);
	CHECK(!(evmask(&w, 1) & POLLIN));        /* written, not yet arrived */
	settle(&w);
	CHECK(evmask(&w, 1) & POLLIN);
	CHECK(atomic_load(&w.s[1]->seq) != seq0);
	CHECK(pollfd1(w.fd[1], POLLIN) & POLLIN);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);
	CHECK_EQ(out[0].data.fd, w.fd[1]);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);  /* level-triggered: still there */
	char b[16];
	CHECK_EQ(read(w.fd[1], b, 3), 3);
	CHECK(evmask(&w, 1) & POLLIN);           /* two bytes left */
	CHECK_EQ(read(w.fd[1], b, sizeof b), 2);
	CHECK(!memcmp(b, "lo", 2));
	CHECK(!(evmask(&w, 1) & POLLIN));
	CHECK_EQ(pollfd1(w.fd[1], POLLIN), 0);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);
	CHECK_EQ(read(w.fd[1], b, sizeof b), -1);
	CHECK_EQ(errno, EAGAIN);
	/* the peer's FIN: readable (EOF) and RDHUP */
	CHECK(shutdown(w.fd[0], SHUT_WR) == 0);
	settle(&w);
	CHECK((evmask(&w, 1) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);
	CHECK(close(ep) == 0);
}

/* ---- real time: engines with their progress threads, blocking calls ---- */

static uint64_t rclock(void *arg) { (void)arg; return emp_now_ns(); }

/* the same two sockets, blocking (2 s timeouts: a lost wake fails, it does
 * not hang), over a wire in real time whose engines run progress threads */
static void sw_open_rt(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S)
{
	struct harness *h = &w->h;
	memset(h, 0, sizeof *h);
	h->n = 2;
	CHECK(emp_sim_wire_create(&h->wire, f, rclock, NULL) == 0);
	emp_conf_defaults(&h->conf);
	h->conf.peers = calloc(2, sizeof *h->conf.peers);
	h->conf.npeers = 2;
	for (int i = 0; i < 2; i++) {
		uint8_t m[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(h->mac[i], m, 6);
		memcpy(h->conf.peers[i].mac, m, 6);
		snprintf(h->conf.peers[i].name, sizeof h->conf.peers[i].name, "h%d", i);
		h->conf.peers[i].ip = (uint32_t)(0x0a000001 + i);
	}
	for (int i = 0; i < 2; i++) {
		struct emp_open_opts o = { .conf = &h->conf, .driver = "sim", .endpoint = 1, .wire = h->wire,
					   .mac = h->mac[i] };
		CHECK_MSG(emp_open(&h->ep[i], &o) == 0, "emp_open: %s", emp_last_error());
	}
	sw_streams(w, R, S, 0);
	for (int i = 0; i < 2; i++)
		w->s[i]->rcvtimeo_ns = w->s[i]->sndtimeo_ns = 2000000000;
}

struct rt_flow { struct sw *w; int from; size_t total, done; int eof; };

static void *rt_writer(void *arg)
{
	struct rt_flow *f = arg;
	uint8_t b[65536];
	while (f->done < f->total) {
		size_t n = f->total - f->done < sizeof b ? f->total - f->done : sizeof b;
		for (size_t k = 0; k < n; k++)
			b[k] = pat(f->done + k, f->from);
		ssize_t r = write(f->w->fd[f->from], b, n);
		CHECK_MSG(r > 0, "blocking write: %zd %s", r, strerror(errno));
		f->done += (size_t)r;
	}
	CHECK(shutdown(f->w->fd[f->from], SHUT_WR) == 0);
	return NULL;
}

/* blocking read until end of file; every byte checked */
static void rt_read(struct rt_flow *f)
{
	uint8_t b[50000];
	for (;;) {
		ssize_t r = read(f->w->fd[1 - f->from], b, sizeof b);
		CHECK_MSG(r >= 0, "blocking read after %zu bytes: %s", f->done, strerror(errno));
		if (r == 0)
			break;
		for (ssize_t k = 0; k < r; k++)
			CHECK_MSG(b[k] == pat(f->done + (size_t)k, f->from), "byte %zu differs", f->done + (size_t)k);
		f->done += (size_t)r;
	}
	f->eof = 1;
}

static void *rt_reader(void *arg)
{
	rt_read(arg);
	return NULL;
}

/* Blocking reads and writes (es__wait: the waiter is woken by whichever
 * thread's completion hook saw its stream move) both ways at once, 1% loss:
 * 2 MB each way intact, then end of file */
static void t_simrt_blocking(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 3, .loss_ppm = 10000, .delay_ns = 2000 };
	sw_open_rt(&w, &fa, 8, 16384);
	struct rt_flow wf[2] = { { &w, 0, 2000000, 0, 0 }, { &w, 1, 2000000, 0, 0 } };
	struct rt_flow rf[2] = { { &w, 0, 0, 0, 0 }, { &w, 1, 0, 0, 0 } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, rt_writer, &wf[i]) == 0);
	pthread_t rd;
	CHECK(pthread_create(&rd, NULL, rt_reader, &rf[1]) == 0);
	rt_read(&rf[0]);
	pthread_join(rd, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(rf[0].done, 2000000);
	CHECK_EQ(rf[1].done, 2000000);
	struct emp_sim_stats st;
	emp_sim_wire_stats(w.h.wire, &st);
	CHECK(st.lost > 0);
}

static void *rt_reader_later(void *arg)
{
	usleep(50000);                   /* the writer is in close() by then */
	rt_read(arg);
	return NULL;
}

/* SO_LINGER with a timeout: close() returns once the data and FIN are
 * through (the peer's engine has every byte, though the last 4 KiB could
 * only go once its reader, 50 ms late, freed buffers); toward a
 * peer that does not read it gives up at the timeout, and the connection
 * lingers on: the peer then reads every byte written before the close, and 0 */
static void t_simrt_linger(void)
{
	uint8_t b[20000];
	for (size_t k = 0; k < sizeof b; k++)
		b[k] = pat(k, 0);
	for (int reads = 1; reads >= 0; reads--) {
		struct sw w;
		sw_open_rt(&w, NULL, 4, 4096);
		struct rt_flow f = { &w, 0, 0, 0, 0 };
		CHECK_EQ(write(w.fd[0], b, sizeof b), (ssize_t)sizeof b);   /* 16 KiB at the peer, 4 KiB staged */
		struct linger lg = { 1, reads ? 10 : 1 };
		CHECK(setsockopt(w.fd[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
		pthread_t t;
		if (reads)
			CHECK(pthread_create(&t, NULL, rt_reader_later, &f) == 0);
		CHECK(close(w.fd[0]) == 0);
		uint64_t at_peer = h_ctr(&w.h, 1).bytes_received;   /* payload and stream headers */
		if (reads) {
			CHECK(at_peer >= sizeof b);
			pthread_join(t, NULL);
		} else {
			CHECK(at_peer < sizeof b);   /* the timeout: 4 KiB and the FIN could not go */
			CHECK_EQ(es__zombies_reap(), 1);
			rt_read(&f);
		}
		CHECK_EQ(f.done, sizeof b);
		for (int i = 0; i < 200 && es__zombies_reap(); i++)
			usleep(10000);
		CHECK_EQ(es__zombies_reap(), 0);
	}
}

/* The peer's process died: its kernel socket ends without an EMP FIN. The
 * survivor's poll is woken by the liveness set and names the error, read
 * hands out the data that had arrived, then ECONNRESET once, then end of file */
static void t_simrt_peer_died(void)
{
	struct sw w;
	sw_open_rt(&w, NULL, 4, 4096);
	uint8_t b[3000];
	for (size_t k = 0; k < sizeof b; k++)
		b[k] = pat(k, 0);
	CHECK_EQ(write(w.fd[0], b, sizeof b), 3000);
	CHECK(pollfd_ms(w.fd[1], POLLIN, 2000) & POLLIN);
	CHECK_EQ(pollfd1(w.fd[1], POLLRDHUP), 0);   /* alive */
	CHECK(R_(close)(w.fd[0]) == 0);          /* side 0 gone, no FIN, its engine silent */
	short re = (short)pollfd_ms(w.fd[1], POLLRDHUP, 2000);
	CHECK_EQ(re & (POLLERR | POLLHUP | POLLRDHUP), POLLERR | POLLHUP | POLLRDHUP);
	size_t off = 0;
	CHECK_EQ(read_some(&w, 1, &off, sizeof b), 3000);
	CHECK_EQ(read(w.fd[1], b, sizeof b), -1);
	CHECK_EQ(errno, ECONNRESET);
	CHECK_EQ(read(w.fd[1], b, sizeof b), 0);
	CHECK_EQ(send(w.fd[1], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
}

static const struct emp_test tests[] = {
	{ "shim_sim_bytes_both_ways", t_sim_bytes_both_ways, 20 },
	{ "shim_sim_flow_control", t_sim_flow_control, 20 },
	{ "shim_sim_half_close", t_sim_half_close, 20 },
	{ "shim_sim_close_unread", t_sim_close_unread, 20 },
	{ "shim_sim_readiness", t_sim_readiness, 20 },
	{ "shim_simrt_peer_died", t_simrt_peer_died, 20 },
	{ "shim_simrt_blocking", t_simrt_blocking, 30 },
	{ "shim_simrt_linger", t_simrt_linger, 30 },
};

const struct emp_test_suite emp_suite_simwire = { "simwire", tests, sizeof(tests) / sizeof(tests[0]) };
