/* test_simwire.c: the shim's byte stream, close and readiness on the simulated wire in virtual time, with seeded loss, no root. */
/*
 * Both ends of one stream in this process (simwire.h); non-blocking calls,
 * both engines driven in virtual time between them (h_run), so nothing waits
 * on a real clock and the order of events is deterministic for a seed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <linux/close_range.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "simwire.h"
#include "../../libemp/internal.h"

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
		sw_fill(b, n, f->wr, f->from);
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
			CHECK_MSG(b[i] == sw_pat(f->rd + (size_t)i, f->from), "flow from %d: byte %zu differs",
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
		if (f->eof || (!f->fin && f->rd == f->total))
			continue;                /* this one is through */
		if (sw_evmask(b->w, 1 - f->from) & POLLIN)
			return 1;
		if (f->wr < f->total && (sw_evmask(b->w, f->from) & POLLOUT))
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
		CHECK_MSG(sw_run(&w->h, can_move, &b, VT_MAX), "stuck: flow 0 wrote %zu read %zu",
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
		sw_write_all(&w, 0, &wr);
		sw_settle(&w);
	}
	/* each write went at once while credits lasted (4 messages of 700
	 * bytes fill the peer's 4 receives), then W = 4 slots were filled */
	CHECK_EQ(wr, 4 * 700 + 4 * 1024);
	CHECK_EQ(w.s[0]->c->credits, 0);
	CHECK(!(sw_evmask(&w, 0) & POLLOUT));
	CHECK_EQ(sw_poll0(w.fd[0], POLLOUT), 0);
	int n = -1;
	CHECK(ioctl(w.fd[1], FIONREAD, &n) == 0);
	CHECK_EQ(n, 4 * 700);
	CHECK_EQ(h_ctr(&w.h, 1).drops[EMP_DROP_NO_RECV], 0);
	/* part of the first message read: its buffer is not free, still blocked */
	CHECK_EQ(sw_read_some(&w, 1, &rd, 300), 300);
	sw_settle(&w);
	CHECK(!(sw_evmask(&w, 0) & POLLOUT));
	CHECK_EQ(sw_write_all(&w, 0, &wr), 0);
	/* the rest read: credits go back, the staged slots leave, room again */
	CHECK_EQ(sw_read_some(&w, 1, &rd, 1u << 20), 4 * 700 - 300);
	sw_settle(&w);
	CHECK(sw_evmask(&w, 0) & POLLOUT);
	CHECK(sw_poll0(w.fd[0], POLLOUT) & POLLOUT);
	CHECK(sw_write_all(&w, 0, &wr) > 0);
	for (int round = 0; round < 50 && rd < wr; round++) {
		sw_read_some(&w, 1, &rd, 1u << 20);
		sw_settle(&w);
	}
	CHECK_EQ(rd, wr);
	CHECK_EQ(h_ctr(&w.h, 1).drops[EMP_DROP_NO_RECV], 0);
}

static int both_hup(void *arg)
{
	struct sw *w = arg;
	return (sw_evmask(w, 0) & POLLHUP) && (sw_evmask(w, 1) & POLLHUP);
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
	CHECK((sw_evmask(&w, 1) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
	char c;
	CHECK_EQ(read(w.fd[1], &c, 1), 0);       /* and again */
	CHECK_EQ(send(w.fd[0], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
	CHECK(!(sw_evmask(&w, 0) & POLLIN));        /* nothing came back yet */
	struct flow f1 = { .from = 1, .total = 30000, .fin = 1 };
	run_flows(&w, &f1, 1);
	CHECK_EQ(f1.rd, 30000);
	CHECK(sw_evmask(&w, 0) & POLLRDHUP);
	CHECK(sw_run(&w.h, both_hup, &w, VT_MAX));   /* both FINs through */
}

/* close() with unread data: the closing side keeps its kernel socket and the
 * connection until the close exchange is through, discarding what arrives;
 * the writer gets the FIN (read 0), one write that goes nowhere (TCP's RST)
 * and then EPIPE; when it closes too, both
 * lingering connections are torn down, no message having met a cancelled
 * receive, and the kernel connection ends */
static void t_sim_close_unread(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 5, .loss_ppm = 50000, .delay_ns = 5000 };
	sw_open(&w, &fa, 4, 1024);
	size_t wr = 0, rd = 0;
	for (int round = 0; round < 5; round++) {
		sw_write_all(&w, 0, &wr);
		sw_settle(&w);
	}
	CHECK_EQ(sw_read_some(&w, 1, &rd, 100), 100);
	int kfd0 = w.s[0]->kfd;
	CHECK(close(w.fd[1]) == 0);
	char c;
	CHECK_EQ(R_(recv)(kfd0, &c, 1, MSG_PEEK | MSG_DONTWAIT), -1);   /* the zombie holds its end */
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(es__zombies_reap(), 1);
	sw_settle_reaping(&w);
	CHECK(sw_evmask(&w, 0) & POLLIN);
	CHECK_EQ(w.s[0]->c->err, 0);
	CHECK_EQ(read(w.fd[0], &c, 1), 0);       /* the peer's FIN: it sent nothing */
	CHECK_EQ(send(w.fd[0], "x", 1, MSG_NOSIGNAL), 1);    /* as over TCP: this one draws the RST */
	CHECK_EQ(send(w.fd[0], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
	CHECK_EQ(es__zombies_reap(), 0);         /* the closed side is through */
	CHECK_EQ(R_(recv)(kfd0, &c, 1, MSG_PEEK | MSG_DONTWAIT), 0);    /* its kernel socket gone */
	CHECK(close(w.fd[0]) == 0);
	sw_settle_reaping(&w);
	CHECK_EQ(es__zombies_reap(), 0);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(h_ctr(&w.h, i).drops[EMP_DROP_NO_RECV], 0);
}

/* Closes that do not go through close(): libuv (Node.js) closes every
 * descriptor with syscall(SYS_close); daemons use close_range or
 * closefrom. Each ends the EMP connection as close() does: the table entry
 * goes, the bytes written before reach the peer, then its clean EOF (an EMP
 * FIN, not a reset), and both lingering connections are torn down. Without
 * the wrappers the entry stayed (the connection's descriptors and buffers
 * with it) and the peer never got a FIN. */
static void t_sim_raw_close(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	CHECK_EQ(write(w.fd[0], "tail!", 5), 5);
	int f0 = w.fd[0], f1 = w.fd[1];
	CHECK_EQ(syscall(SYS_close, f0), 0);
	CHECK(es__fd_get(f0) == NULL);
	errno = 0;
	CHECK_EQ(syscall(SYS_close, f0), -1);     /* closed for the kernel too */
	CHECK_EQ(errno, EBADF);
	sw_settle_reaping(&w);
	char c[8];
	CHECK_EQ(read(f1, c, sizeof c), 5);
	CHECK(memcmp(c, "tail!", 5) == 0);
	CHECK_EQ(read(f1, c, sizeof c), 0);         /* the FIN, not a reset */
	CHECK_EQ(w.s[1]->c->err, 0);
	CHECK_EQ(close_range((unsigned)f1, (unsigned)f1, 0), 0);
	CHECK(es__fd_get(f1) == NULL);
	sw_settle_reaping(&w);
	CHECK_EQ(es__zombies_reap(), 0);
	/* syscall() passes every other call on: a pipe made and used through it */
	int p[2];
	CHECK_EQ(syscall(SYS_pipe2, p, 0), 0);
	CHECK_EQ(syscall(SYS_write, p[1], "ok", 2), 2);
	CHECK_EQ(syscall(SYS_read, p[0], c, 2), 2);
	CHECK(memcmp(c, "ok", 2) == 0);
	CHECK_EQ(syscall(SYS_close, p[0]) | syscall(SYS_close, p[1]), 0);
	h_free(&w.h);
}


/* A program that closes a socket twice (iperf3's server does; over TCP the
 * second close is a harmless EBADF) must not close the shim's private copy
 * of another connection's kernel socket: the copy a close makes for the
 * teardown is numbered high (emp__sys_dup_high), not at the number a close has
 * just freed, and so are the shim's own fds made meanwhile (here the
 * thread's wake-up eventfd). The second connection's bytes and FIN still
 * reach its peer. */
static void t_sim_double_close(void)
{
	struct sw a, b;
	sw_open(&a, NULL, 4, 1024);
	b.h = a.h;
	sw_streams(&b, 4, 1024, 1);
	CHECK_EQ(write(b.fd[0], "tail!", 5), 5);
	int fa = a.fd[0], fb = b.fd[0];
	CHECK(close(fa) == 0);
	CHECK(close(fb) == 0);        /* its copy took fa's number on the old shim */
	errno = 0;
	CHECK_EQ(close(fa), -1);
	CHECK_EQ(errno, EBADF);
	CHECK(b.s[0]->kfd != fa && a.s[0]->kfd != fb);
	char c[8];
	CHECK_EQ(R_(recv)(b.s[0]->kfd, c, 1, MSG_PEEK | MSG_DONTWAIT), -1);   /* still open: no EBADF */
	CHECK_EQ(errno, EAGAIN);
	sw_settle_reaping(&a);
	CHECK_EQ(read(b.fd[1], c, sizeof c), 5);
	CHECK(memcmp(c, "tail!", 5) == 0);
	CHECK_EQ(read(b.fd[1], c, sizeof c), 0);      /* its FIN, not a reset */
	CHECK_EQ(b.s[1]->c->err, 0);
	CHECK_EQ(read(a.fd[1], c, sizeof c), 0);
	CHECK(close(a.fd[1]) == 0 && close(b.fd[1]) == 0);
	sw_settle_reaping(&a);
	CHECK_EQ(es__zombies_reap(), 0);
	h_free(&a.h);
}

/* A close() interrupted between the kernel's close and the table update
 * (es__sock_close), while a signal handler takes the freed number with a
 * dup of a pipe and closes it: the shim finds its socket under that number,
 * but the number is no longer the socket's (a plain close, no reference
 * dropped). The program still holds the socket under its first fd, and its
 * bytes reach the peer with no FIN before them (the stale close took a
 * second reference and ended the connection: t_sock_signal). The handler's
 * write to its pipe lands in the pipe (the table named the closing socket
 * under that number until park(): the bytes went into the connection). */
static int gap_pipe = -1, gap_fd = -1;
static ssize_t gap_wrote = -2;
static void gap_dup_close(int fd)
{
	int x = dup(gap_pipe);               /* the lowest free number: the one just closed */
	gap_fd = x == fd ? x : -1;
	if (x >= 0) {
		gap_wrote = write(x, "gap", 3);  /* the pipe's, not the socket's (park) */
		CHECK(close(x) == 0);
	}
}

static void t_sim_stale_close(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	struct es_sock *s = w.s[0];
	int d = dup(w.fd[0]), p[2];
	CHECK(d > w.fd[0] && s->refs == 2);
	CHECK(pipe2(p, O_NONBLOCK) == 0);
	CHECK(p[0] > d);
	gap_pipe = p[1];
	es__close_gap_hook = gap_dup_close;
	CHECK(close(d) == 0);
	es__close_gap_hook = NULL;
	CHECK_EQ(gap_fd, d);                 /* the handler's dup had the number */
	CHECK_EQ(gap_wrote, 3);
	char g[8];
	CHECK_EQ(read(p[0], g, sizeof g), 3); /* its write reached its pipe */
	CHECK(memcmp(g, "gap", 3) == 0);
	CHECK_EQ(s->refs, 1);
	CHECK(es__sock(w.fd[0]) == s && !es__sock(d));
	CHECK_EQ(write(w.fd[0], "still", 5), 5);
	sw_settle(&w);
	char c[8];
	CHECK_EQ(read(w.fd[1], c, sizeof c), 5);
	CHECK(memcmp(c, "still", 5) == 0);
	CHECK_EQ(w.s[1]->c->err, 0);
	CHECK(!(sw_evmask(&w, 1) & (POLLIN | POLLRDHUP)));   /* no FIN came */
	CHECK(close(p[0]) == 0 && close(p[1]) == 0);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	sw_settle_reaping(&w);
	CHECK_EQ(es__zombies_reap(), 0);
	h_free(&w.h);
}

/* The event mask follows the stream: POLLIN only once data has arrived (not
 * when it was written), gone when it is read; poll and a level-triggered
 * epoll set report it the same way; each change bumps the socket's seq */
static void t_sim_readiness(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	CHECK_EQ(sw_evmask(&w, 1) & (POLLIN | POLLERR | POLLHUP), 0);
	CHECK(sw_evmask(&w, 1) & POLLOUT);
	int ep = epoll_create1(0);
	CHECK(ep >= 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = w.fd[1] }, out[2];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w.fd[1], &ev) == 0);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);
	unsigned seq0 = atomic_load(&w.s[1]->seq);
	CHECK_EQ(write(w.fd[0], "hello", 5), 5);
	CHECK(!(sw_evmask(&w, 1) & POLLIN));        /* written, not yet arrived */
	sw_settle(&w);
	CHECK(sw_evmask(&w, 1) & POLLIN);
	CHECK(atomic_load(&w.s[1]->seq) != seq0);
	CHECK(sw_poll0(w.fd[1], POLLIN) & POLLIN);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);
	CHECK_EQ(out[0].data.fd, w.fd[1]);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);  /* level-triggered: still there */
	char b[16];
	CHECK_EQ(read(w.fd[1], b, 3), 3);
	CHECK(sw_evmask(&w, 1) & POLLIN);           /* two bytes left */
	CHECK_EQ(read(w.fd[1], b, sizeof b), 2);
	CHECK(!memcmp(b, "lo", 2));
	CHECK(!(sw_evmask(&w, 1) & POLLIN));
	CHECK_EQ(sw_poll0(w.fd[1], POLLIN), 0);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);
	CHECK_EQ(read(w.fd[1], b, sizeof b), -1);
	CHECK_EQ(errno, EAGAIN);
	/* the peer's FIN: readable (EOF) and RDHUP */
	CHECK(shutdown(w.fd[0], SHUT_WR) == 0);
	sw_settle(&w);
	CHECK((sw_evmask(&w, 1) & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP));
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);
	CHECK(close(ep) == 0);
}

/* Edge-triggered epoll: one report per arrival, even while the socket stays
 * readable (new data is an edge though its bits do not change), none
 * between arrivals; a level-triggered set beside it keeps reporting */
static void t_sim_epoll_edges(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	int et = epoll_create1(0), lt = epoll_create1(0);
	CHECK(et >= 0 && lt >= 0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.fd = w.fd[1] }, out[2];
	CHECK(epoll_ctl(et, EPOLL_CTL_ADD, w.fd[1], &ev) == 0);
	ev.events = EPOLLIN;
	CHECK(epoll_ctl(lt, EPOLL_CTL_ADD, w.fd[1], &ev) == 0);
	for (int round = 0; round < 3; round++) {
		CHECK_EQ(write(w.fd[0], "abc", 3), 3);
		sw_settle(&w);
		CHECK_EQ(epoll_wait(et, out, 2, 0), 1);
		CHECK(out[0].events & EPOLLIN);
		CHECK_EQ(epoll_wait(et, out, 2, 0), 0);   /* no new edge */
		CHECK_EQ(epoll_wait(lt, out, 2, 0), 1);
		CHECK_EQ(epoll_wait(lt, out, 2, 0), 1);
	}
	int n = -1;
	CHECK(ioctl(w.fd[1], FIONREAD, &n) == 0);
	CHECK_EQ(n, 9);                          /* nothing read: readable all along */
	CHECK(close(et) == 0 && close(lt) == 0);
}

/* a message from side 1's endpoint (a peer the engine holds) to side 0's
 * stream that does not carry side 0's key; tag: data, or control */
static void forge(struct sw *w, uint32_t tag, const void *m, size_t len)
{
	emp_req_t *r;
	struct emp_status st;
	struct iovec v = { (void *)m, len };
	emp_addr_t to = { 0, 1 };
	CHECK_EQ(emp_post_send(w->h.ep[1], to, tag, &v, 1, &r), 0);
	CHECK(h_wait(&w->h, 1, r, &st, VT_MAX));
	CHECK_EQ(st.result, (long long)len);
}

/* Messages on the stream's tags without its key (a hostile process on the
 * peer host naming the connection id) are dropped and counted: a FIN, a
 * CLOSE, credits, a runt; the stream goes on intact both ways, its receives
 * reposted in ring order */
static void t_sim_forged(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	struct es_conn *c = w.s[0]->c;
	uint32_t bad = (uint32_t)c->key_rx ^ 0x10000u;
	uint8_t fin[ES_HDR + 5] = { 0 };
	uint16_t fl = ES_FIN | ES_CLOSE | ES_LAST, cr = 4;
	memcpy(fin, &cr, 2);
	memcpy(fin + 2, &fl, 2);
	memcpy(fin + 4, &bad, 4);
	memcpy(fin + ES_HDR, "evil!", 5);
	forge(&w, c->lid, fin, sizeof fin);
	uint32_t ctl[4] = { CT_CLOSE, 4, bad, (uint32_t)(c->key_rx >> 32) };
	forge(&w, c->lid | CTRL_TAG, ctl, sizeof ctl);
	forge(&w, c->lid | CTRL_TAG, ctl, 8);    /* short */
	forge(&w, c->lid, fin, 3);               /* runt */
	sw_settle(&w);
	CHECK_EQ(c->forged, 4);
	CHECK(!c->rfin && !c->peer_closed && !c->err);
	CHECK_EQ(c->credits, 4);                 /* no credits from a forger */
	CHECK(!(sw_evmask(&w, 0) & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)));
	struct flow f[2] = { { .from = 0, .total = 30000, .fin = 1 }, { .from = 1, .total = 30000, .fin = 1 } };
	run_flows(&w, f, 2);
	CHECK_EQ(c->forged, 4);
}

static uint32_t rnd(uint64_t *x)
{
	*x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
	return (uint32_t)(*x >> 11);
}

/* iov of n pieces of random lengths over buf[0..len) */
static int split(uint64_t *x, uint8_t *buf, size_t len, struct iovec *iov, int n)
{
	size_t at = 0;
	int k = 0;
	for (; k < n - 1 && at < len; k++) {
		size_t l = rnd(x) % (len - at + 1);
		iov[k] = (struct iovec){ buf + at, l };
		at += l;
	}
	iov[k++] = (struct iovec){ buf + at, len - at };
	return k;
}

/* Random application calls on both sides (writev and readv with up to 8
 * pieces, some empty; sizes 0..20000; MSG_PEEK then the same bytes read;
 * MSG_WAITALL that may only take what is there), the wire driven a random
 * while between: each stream arrives intact, in order */
static void t_sim_random_io(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 9, .loss_ppm = 30000, .reorder_ppm = 20000, .reorder_ns = 20000 };
	sw_open(&w, &fa, 4, 3000);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	size_t wr[2] = { 0, 0 }, rd[2] = { 0, 0 };
	static uint8_t b[20000], p[20000];
	struct iovec iov[8];
	for (int step = 0; step < 3000; step++) {
		int side = (int)(rnd(&x) & 1), op = (int)(rnd(&x) % 4);
		size_t len = rnd(&x) % (rnd(&x) & 1 ? 200 : 20001);
		int n = 1 + (int)(rnd(&x) % 8);
		if (op == 0) {                   /* writev */
			sw_fill(b, len, wr[side], side);
			ssize_t r = writev(w.fd[side], iov, split(&x, b, len, iov, n));
			CHECK_MSG(r >= 0 || errno == EAGAIN, "writev: %s", strerror(errno));
			if (r > 0)
				wr[side] += (size_t)r;
		} else if (op == 1 || op == 2) { /* readv, recv(MSG_WAITALL) */
			ssize_t r = op == 1 ? readv(w.fd[side], iov, split(&x, b, len, iov, n))
					    : recv(w.fd[side], b, len, MSG_WAITALL);
			CHECK_MSG(r >= 0 || errno == EAGAIN, "read: %s", strerror(errno));
			for (ssize_t k = 0; k < r; k++)
				CHECK_MSG(b[k] == sw_pat(rd[side] + (size_t)k, 1 - side), "step %d: byte %zu differs",
					  step, rd[side] + (size_t)k);
			if (r > 0)
				rd[side] += (size_t)r;
		} else {                         /* peek, then read what was seen */
			ssize_t r = recv(w.fd[side], p, len, MSG_PEEK);
			if (r > 0) {
				CHECK_EQ(recv(w.fd[side], b, (size_t)r, 0), r);
				CHECK(!memcmp(p, b, (size_t)r));
				for (ssize_t k = 0; k < r; k++)
					CHECK(b[k] == sw_pat(rd[side] + (size_t)k, 1 - side));
				rd[side] += (size_t)r;
			}
		}
		if (rnd(&x) % 3 == 0)
			sw_run(&w.h, NULL, NULL, rnd(&x) % 200000);
	}
	for (int round = 0; round < 100 && (rd[0] < wr[1] || rd[1] < wr[0]); round++) {
		sw_settle(&w);
		for (int side = 0; side < 2; side++)
			sw_read_some(&w, side, &rd[side], 1u << 30);
	}
	CHECK_EQ(rd[1], wr[0]);
	CHECK_EQ(rd[0], wr[1]);
	CHECK(wr[0] > 100000 && wr[1] > 100000);
}

/* Random endings on a lossy wire: both sides write a random amount and
 * read some of it, then each side shuts down its sending half, closes, or
 * both, in a random order, with the wire driven a random while between:
 * whatever the order, every lingering connection is torn down, no message
 * meets a cancelled receive, and a side still open sees the other's end as
 * end of file (never ECONNRESET) */
static void t_sim_random_close(void)
{
	for (unsigned seed = 1; seed <= 40; seed++) {
		struct sw w;
		struct emp_sim_faults fa = { .seed = seed, .loss_ppm = 100000, .dup_ppm = 20000,
					     .reorder_ppm = 30000, .reorder_ns = 20000, .delay_ns = 3000 };
		uint64_t x = seed * 0x9e3779b97f4a7c15ull;
		sw_open(&w, &fa, 2 + rnd(&x) % 3, 1024 + rnd(&x) % 4000);
		size_t wr[2] = { 0, 0 }, rd[2] = { 0, 0 };
		int open_[2] = { 1, 1 };
		for (int step = 0; step < 12; step++) {
			int side = (int)(rnd(&x) & 1), op = (int)(rnd(&x) % 6);
			if (!open_[side])
				continue;
			if (op <= 1) {
				uint8_t b[1000];
				sw_fill(b, sizeof b, wr[side], side);
				ssize_t r;
				while ((r = send(w.fd[side], b, sizeof b, MSG_NOSIGNAL)) > 0) {
					wr[side] += (size_t)r;
					sw_fill(b, sizeof b, wr[side], side);
				}
				CHECK_MSG(errno == EAGAIN || errno == EPIPE, "seed %u: send: %s", seed, strerror(errno));
			} else if (op <= 3) {
				uint8_t b[3000];
				ssize_t r = read(w.fd[side], b, rnd(&x) % sizeof b);
				CHECK_MSG(r >= 0 || errno == EAGAIN, "seed %u: read: %s", seed, strerror(errno));
				for (ssize_t k = 0; k < r; k++)
					CHECK(b[k] == sw_pat(rd[side] + (size_t)k, 1 - side));
				if (r > 0)
					rd[side] += (size_t)r;
			} else if (op == 4) {
				CHECK(shutdown(w.fd[side], SHUT_WR) == 0);
			} else {
				CHECK(close(w.fd[side]) == 0);
				open_[side] = 0;
			}
			sw_run(&w.h, NULL, NULL, rnd(&x) % 3000000);
		}
		for (int side = 0; side < 2; side++) {
			if (!open_[side])
				continue;
			sw_settle_reaping(&w);
			struct es_conn *c = w.s[side]->c;
			CHECK_MSG(!c->err || c->err_told, "seed %u: side %d error %d", seed, side, c->err);
			CHECK(close(w.fd[side]) == 0);
		}
		sw_run(&w.h, sw_reap_each_round, NULL, VT_MAX);
		CHECK_MSG(es__zombies_reap() == 0, "seed %u: a closed connection still lingers", seed);
		for (int i = 0; i < 2; i++)
			CHECK_MSG(h_ctr(&w.h, i).drops[EMP_DROP_NO_RECV] == 0, "seed %u: a message met no receive", seed);
		h_free(&w.h);
	}
}

/* Many seeds of a harsh wire (20% loss, 3% duplicated, 5% reordered) and
 * windows from 2 x 1 KiB to 3 x 9000 bytes: both ways at once with a FIN
 * each, every byte checked, then both sides close and both lingering
 * connections are torn down with no message sent to a cancelled receive */
static void t_sim_faults_sweep(void)
{
	static const unsigned win[][2] = { { 2, 1024 }, { 2, 1500 }, { 3, 9000 }, { 8, 4096 } };
	for (unsigned seed = 1; seed <= 12; seed++) {
		struct sw w;
		struct emp_sim_faults fa = { .seed = seed, .loss_ppm = 200000, .dup_ppm = 30000,
					     .reorder_ppm = 50000, .reorder_ns = 30000, .delay_ns = 5000 };
		sw_open(&w, &fa, win[seed % 4][0], win[seed % 4][1]);
		struct flow f[2] = { { .from = 0, .total = 100000, .fin = 1 },
				     { .from = 1, .total = 70000, .fin = 1 } };
		run_flows(&w, f, 2);
		CHECK(close(w.fd[0]) == 0);
		CHECK(close(w.fd[1]) == 0);
		sw_settle_reaping(&w);
		CHECK_MSG(es__zombies_reap() == 0, "seed %u: a closed connection still lingers", seed);
		for (int i = 0; i < 2; i++)
			CHECK_EQ(h_ctr(&w.h, i).drops[EMP_DROP_NO_RECV], 0);
		h_free(&w.h);
	}
}

/* A closed connection's rings go to the next one (bufcache.c): two streams
 * one after the other on the same endpoints; the second takes all four rings
 * of the first (receive and send, both sides) and malloc's none, and its
 * bytes are its own (checked both ways) */
static void t_sim_rings_reused(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 2048);
	for (int round = 0; round < 2; round++) {
		unsigned fresh0 = atomic_load(&es__bufstats.fresh), reused0 = atomic_load(&es__bufstats.reused);
		if (round)
			sw_streams(&w, 4, 2048, 1);
		struct flow f[2] = { { .from = 0, .total = 20000 }, { .from = 1, .total = 9000 } };
		run_flows(&w, f, 2);
		CHECK(close(w.fd[0]) == 0);
		CHECK(close(w.fd[1]) == 0);
		sw_settle_reaping(&w);
		CHECK_EQ(es__zombies_reap(), 0);
		if (round) {
			CHECK_EQ(atomic_load(&es__bufstats.reused) - reused0, 4);
			CHECK_EQ(atomic_load(&es__bufstats.fresh) - fresh0, 0);
		}
	}
	h_free(&w.h);
}

/* writes a byte into the pipe after 20 ms (real time) */
static void *pipe_later(void *arg)
{
	usleep(20000);
	CHECK_EQ(write(*(int *)arg, "k", 1), 1);
	return NULL;
}

/* A kernel fd of an epoll set that becomes ready while the waiting thread
 * spins for EMP is answered by the spin itself (epoll.c, epw_done), not when
 * the spin gives up. In virtual time nobody moves the engines' clock, so the
 * spin would never give up: the pipe is seen only if the spin looks. */
static void t_sim_epoll_spin_kernel(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	int p[2], ep = epoll_create1(0);
	CHECK(pipe(p) == 0 && ep >= 0);
	struct epoll_event e = { .events = EPOLLIN, .data.u32 = 1 }, out[4];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w.fd[0], &e) == 0);
	e.data.u32 = 2;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e) == 0);
	CHECK_EQ(epoll_wait(ep, out, 4, 0), 0);       /* nothing yet (the kernel fds looked at) */
	pthread_t t;
	CHECK(pthread_create(&t, NULL, pipe_later, &p[1]) == 0);
	int n = epoll_wait(ep, out, 4, 10000);
	pthread_join(t, NULL);
	CHECK_EQ(n, 1);
	CHECK_EQ(out[0].data.u32, 2);
	CHECK(close(ep) == 0 && close(p[0]) == 0 && close(p[1]) == 0);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	sw_settle_reaping(&w);
	h_free(&w.h);
}

/* The same for poll (ready.c, fw_done): a pipe written while poll spins for
 * an EMP socket ends it; and the spin's looks back off while they find
 * nothing: 20 ms of spin look a few dozen times (20 us apart doubling to
 * 1 ms), not every 20 us (about 1000) */
static void t_sim_poll_spin_kernel(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	int p[2];
	CHECK(pipe(p) == 0);
	struct pollfd f[2] = { { w.fd[0], POLLIN, 0 }, { p[0], POLLIN, 0 } };
	CHECK_EQ(poll(f, 2, 0), 0);
	unsigned long l0 = __atomic_load_n(&es__klooks, __ATOMIC_RELAXED);
	unsigned long c0 = __atomic_load_n(&emp__crowd_skips, __ATOMIC_RELAXED);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, pipe_later, &p[1]) == 0);
	int n = poll(f, 2, 10000);
	pthread_join(t, NULL);
	unsigned long looks = __atomic_load_n(&es__klooks, __ATOMIC_RELAXED) - l0;
	unsigned long skips = __atomic_load_n(&emp__crowd_skips, __ATOMIC_RELAXED) - c0;
	CHECK_EQ(n, 1);
	CHECK_EQ(f[0].revents, 0);
	CHECK_EQ(f[1].revents, POLLIN);
	/* a machine with more threads runnable than CPUs plus one does not spin
	 * (wait.c): the sleep took the pipe, no look was made. What the wait
	 * decided is counted then: the machine's state at this line may differ
	 * (it failed once beside the namespace suite, 0 looks and not crowded) */
	CHECK_MSG((looks >= 1 || skips >= 1) && looks <= 100, "%lu looks in a 20 ms spin (%lu crowded skips)", looks, skips);
	CHECK(close(p[0]) == 0 && close(p[1]) == 0);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	sw_settle_reaping(&w);
	h_free(&w.h);
}

/* one full slot's worth of side 0's stream written; the buffer it went into marked in *used */
static void write_slot(struct sw *w, size_t *wr, unsigned *used)
{
	uint8_t b[4096];
	struct es_conn *c = w->s[0]->c;
	sw_fill(b, sizeof b, *wr, 0);
	CHECK_EQ(write(w->fd[0], b, sizeof b), (ssize_t)sizeof b);
	*wr += sizeof b;
	*used |= 1u << sbuf_of(c, c->tx_staged - 1);
}

/* A stream whose messages come back acked before the next ones are written
 * reuses the same warm send buffers (conn.h, smap): one message in flight at
 * a time writes into one buffer, three at a time into at most four; the
 * ring's order walked through all eight. Every byte arrives intact, and once
 * all is acked every buffer is free again. */
static void t_sim_warm_slots(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	struct es_conn *c = w.s[0]->c;
	size_t wr = 0, rd = 0;
	unsigned used = 0;                      /* buffers written into, one bit each */
	for (int round = 0; round < 20; round++) {
		write_slot(&w, &wr, &used);
		sw_settle(&w);
		CHECK_EQ(sw_read_some(&w, 1, &rd, 1u << 20), 4096);
		sw_settle(&w);
		CHECK_EQ(c->tx_done, c->tx_staged);
	}
	CHECK_MSG(used == 1, "one message at a time wrote into buffers %#x", used);
	used = 0;
	for (int round = 0; round < 20; round++) {
		for (int k = 0; k < 3; k++)
			write_slot(&w, &wr, &used);
		sw_settle(&w);
		CHECK_EQ(sw_read_some(&w, 1, &rd, 1u << 20), 3 * 4096);
		sw_settle(&w);
	}
	CHECK_MSG(__builtin_popcount(used) <= 4, "three at a time wrote into buffers %#x", used);
	CHECK_EQ(rd, wr);
	CHECK_EQ(c->tx_done, c->tx_staged);
	CHECK_EQ(c->nfree, c->tx_slots);
	unsigned seen = 0;                      /* each buffer once on the free stack */
	for (unsigned k = 0; k < c->nfree; k++)
		seen |= 1u << c->sfree[k];
	CHECK_EQ(seen, 0xffu);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	sw_settle_reaping(&w);
	h_free(&w.h);
}

static const struct emp_test tests[] = {
	{ "shim_sim_bytes_both_ways", t_sim_bytes_both_ways, 20 },
	{ "shim_sim_flow_control", t_sim_flow_control, 20 },
	{ "shim_sim_half_close", t_sim_half_close, 20 },
	{ "shim_sim_close_unread", t_sim_close_unread, 20 },
	{ "shim_sim_double_close", t_sim_double_close, 20 },
	{ "shim_sim_raw_close", t_sim_raw_close, 20 },
	{ "shim_sim_stale_close", t_sim_stale_close, 20 },
	{ "shim_sim_readiness", t_sim_readiness, 20 },
	{ "shim_sim_epoll_edges", t_sim_epoll_edges, 20 },
	{ "shim_sim_forged", t_sim_forged, 20 },
	{ "shim_sim_random_io", t_sim_random_io, 20 },
	{ "shim_sim_random_close", t_sim_random_close, 20 },
	{ "shim_sim_faults_sweep", t_sim_faults_sweep, 20 },
	{ "shim_sim_rings_reused", t_sim_rings_reused, 20 },
	{ "shim_sim_warm_slots", t_sim_warm_slots, 20 },
	{ "shim_sim_epoll_spin_kernel", t_sim_epoll_spin_kernel, 10 },
	{ "shim_sim_poll_spin_kernel", t_sim_poll_spin_kernel, 10 },
};

const struct emp_test_suite emp_suite_simwire = { "simwire", tests, sizeof(tests) / sizeof(tests[0]) };
