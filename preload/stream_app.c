/* stream_app.c: the application side of an EMP stream: blocking/non-blocking recv and send, waiting, shutdown, FIONREAD, SO_ERROR. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"

/* Wait for a change on s: this thread drives the engine (spinning, then
 * asleep in one ppoll on its eventfd, the kernel socket and the device); a
 * completion for s, processed by whichever thread drove the engine, hits the
 * wake; EOF/RST on the kernel socket means the peer died. Lock held on entry
 * and exit. */
int es__wait(struct es_sock *s, int64_t deadline)
{
	struct es_conn *c = s->c;
	struct es_wake wk = { .efd = es__tl_efd(), .sig_intr = 1 };
	struct es_waiter w;
	es__waiter_add(s, &w, &wk);
	int kdead = c->kdead;
	es__sock_unlock(s);      /* completions marked while we held it are processed first */
	int64_t left = -1;
	if (deadline) {
		left = deadline - es__now_ns();
		if (left < 0)
			left = 0;
	}
	struct pollfd p[4] = { { wk.efd, POLLIN, 0 }, { s->kfd, POLLIN | POLLRDHUP, 0 } };   /* + the device's two */
	int np = kdead ? 1 : 2;
	int r = es__wait_fds(&wk, p, np, left, NULL);
	pthread_mutex_lock(&s->lock);
	es__waiter_del(s, &w);
	es__wake_reset(&wk);
	if (np == 2 && p[1].revents)
		es__kernel_check(s, 1);
	es__process(s);
	return r == -EINTR ? -EINTR : r == 0 ? 0 : 1;
}

/* copy up to want bytes into iov starting at byte offset at; consume unless
 * peek. iov NULL (MSG_TRUNC): the bytes are counted, and consumed unless
 * peek, but copied nowhere, as the kernel's TCP does (HAProxy drains a
 * connection with recv(fd, NULL, INT_MAX, MSG_TRUNC)) */
static size_t copy_out(struct es_conn *c, struct iovec *iov, int iovcnt, size_t at, size_t want, int peek)
{
	struct iovec none = { NULL, at + want };
	int discard = !iov;
	if (discard) {
		iov = &none;
		iovcnt = 1;
	}
	int vi = 0;
	size_t vo = at, n = 0;
	while (vi < iovcnt && vo >= iov[vi].iov_len) {
		vo -= iov[vi].iov_len;
		vi++;
	}
	uint64_t q = c->rx_read;
	uint32_t off = q < c->rx_done ? c->roff[q % c->rx_slots] : 0;
	while (n < want && q < c->rx_done && vi < iovcnt) {
		unsigned i = q % c->rx_slots;
		uint32_t avail = c->rlen[i] - off;
		if (!avail) {
			q++;
			off = 0;
			continue;
		}
		size_t k = iov[vi].iov_len - vo;
		if (k > avail)
			k = avail;
		if (k > want - n)
			k = want - n;
		if (!discard && emp_recv_lent(c->rreq[i]))   /* frames still in the device's ring */
			emp_recv_copy(c->ep, c->rreq[i], ES_HDR + off, (char *)iov[vi].iov_base + vo, k);
		else if (!discard)
			memcpy((char *)iov[vi].iov_base + vo, rslot(c, q) + ES_HDR + off, k);
		n += k; vo += k; off += (uint32_t)k;
		if (vo == iov[vi].iov_len) {
			vi++;
			vo = 0;
		}
	}
	if (!peek) {
		while (c->rx_read < q)
			es__retire_head(c);
		if (q < c->rx_done) {
			if (off == c->rlen[q % c->rx_slots]) {
				es__retire_head(c);
			} else {
				c->roff[q % c->rx_slots] = off;
				emp_recv_return(c->ep, c->rreq[q % c->rx_slots], ES_HDR + off);   /* the frames read */
			}
		}
		c->rbytes -= n;
	}
	return n;
}

/* Lend the next receive slot the caller's buffers for a wait with nothing
 * to read: a message that completes meanwhile lands in them (its header in
 * the slot; what of it had arrived is moved over), one copy instead of two
 * (the ring's frame straight to the caller). Not for a read shorter than
 * ES_LEND_MIN, nor after a message that short. Lock held. 1 if lent. */
static int lend(struct es_conn *c, const struct iovec *iov, int iovcnt, size_t want)
{
	if (c->rd_active || c->rd_done || !c->data_posted || c->rbytes || c->rx_read != c->rx_done ||
	    want < ES_LEND_MIN || c->last_rlen < ES_LEND_MIN || c->err || c->rfin || c->closing || c->shut_rd)
		return 0;            /* short messages (a ping-pong's) cost more to lend for than to copy */
	uint64_t q = c->rx_done;
	uint8_t *b = rslot(c, q);
	unsigned n = 0;
	size_t room = c->rx_slot_sz, ulen = 0;
	c->rd_sg[n++] = (struct iovec){ b, ES_HDR };
	for (int i = 0; i < iovcnt && n < ES_LEND_SG - 1 && ulen < room; i++) {
		size_t k = iov[i].iov_len < room - ulen ? iov[i].iov_len : room - ulen;
		if (k)
			c->rd_sg[n++] = (struct iovec){ iov[i].iov_base, k };
		ulen += k;
	}
	if (ulen < room)
		c->rd_sg[n++] = (struct iovec){ b + ES_HDR + ulen, room - ulen };
	if (emp_recv_redirect(c->ep, c->rreq[q % c->rx_slots], c->rd_sg, (int)n) < 0)
		return 0;
	c->rd_active = 1;
	c->rd_q = q;
	c->rd_len = (uint32_t)ulen;
	c->rd_got = 0;
	return 1;
}

/* After the wait: the slot's own buffers back, and how many bytes landed in
 * the caller's (read now). Lock held. */
static size_t take_back(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (c->rd_active) {
		if (es__unlend(c) == 2 && !c->rd_done)
			es__process(s);  /* a completion into the caller's buffers is counted as such */
		c->rd_active = 0;
	}
	if (!c->rd_done)
		return 0;
	size_t got = c->rd_got;
	c->rd_done = 0;
	c->rd_got = 0;
	unsigned i = c->rd_q % c->rx_slots;
	if (got && c->rx_read == c->rd_q && c->rd_q < c->rx_done && c->roff[i] == c->rlen[i]) {
		es__retire_head(c);
		es__flush(c);        /* credits go back as after any read */
	}
	return got;
}

static int64_t deadline_of(int64_t t) { return t ? es__now_ns() + t : 0; }

static void sigpipe(struct es_conn *c, int flags, ssize_t ret)
{
	es__dbg("conn %u: write after the end (%s%s%s%s): %s%s", c->lid, c->err ? "error" : "",
		c->kdead ? " kernel connection gone" : "", c->shut_wr ? " shut down" : "",
		c->peer_closed ? " peer closed" : "", strerror((int)-ret),
		flags & MSG_NOSIGNAL ? "" : ", SIGPIPE");
	if (!(flags & MSG_NOSIGNAL))
		pthread_kill(pthread_self(), SIGPIPE);
}

/* At the EMP stream's end: bytes on the kernel socket (a program that got
 * it across exec, or the peer not speaking EMP there) were never delivered,
 * so the end is not clean (one system call, at the end only). Lock held. */
static int eof_unclean(struct es_sock *s)
{
	struct es_conn *c = s->c;
	char b;
	if (c->kdead || s->kfd < 0 || R_(recv)(s->kfd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
		return 0;
	es__kernel_check(s, 1);
	return c->err && !c->err_told;
}

/* a blocking call's wait: 1 look again (also after a handler installed with
 * SA_RESTART ran, on a socket without a timeout: sigrestart.c), 0 the
 * timeout passed, -EINTR (also when a handler without SA_RESTART ran at any
 * moment since the call began: sigcatch.c) */
static int wait_on(struct es_sock *s, int64_t dl)
{
	int w = es__wait(s, dl);
	return w < 0 && !dl && !es__sig_caught() && es__sig_restarts() ? 1 : w;
}

ssize_t es__recv(struct es_sock *s, struct iovec *iov, int iovcnt, int flags)
{
	size_t want = 0, got = 0;
	for (int i = 0; i < iovcnt; i++)
		want += iov[i].iov_len;
	es__sig_begin();
	emp_progress_due(es__g.ep);   /* a busy event loop keeps the engine serviced */
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int64_t dl = deadline_of(s->rcvtimeo_ns);
	int dontwait = s->nonblock || (flags & MSG_DONTWAIT);
	ssize_t ret;
	es__process(s);
	for (;;) {
		if (c->rbytes && want > got) {
			got += copy_out(c, (flags & MSG_TRUNC) ? NULL : iov, iovcnt, got, want - got, flags & MSG_PEEK);
			if (!(flags & MSG_PEEK))
				es__flush(c);
			if (!(flags & MSG_WAITALL) || got == want || (flags & MSG_PEEK))
				break;
		}
		if (got == want && want)
			break;
		if (c->rfin && !got && want && !(flags & MSG_PEEK) && eof_unclean(s)) {
			c->err_told = 1;
			ret = -c->err;
			goto out;
		}
		if (c->rfin || c->shut_rd)
			break;
		if (c->err || c->kdead) {
			if (got)
				break;
			if (c->err && !c->err_told) {
				c->err_told = 1;
				ret = -c->err;
				goto out;
			}
			break;
		}
		if (!want)
			break;
		if (dontwait) {
			if (got)
				break;
			ret = -EAGAIN;
			goto out;
		}
		int lent = !got && !(flags & (MSG_PEEK | MSG_TRUNC)) && lend(c, iov, iovcnt, want);
		int w = wait_on(s, dl);
		if (lent && (got = take_back(s)) > 0 && (!(flags & MSG_WAITALL) || got == want))
			break;
		if (w <= 0 && !c->rbytes) {
			if (got)
				break;
			ret = w == 0 ? -EAGAIN : -EINTR;
			goto out;
		}
	}
	ret = (ssize_t)got;
out:
	if (ret > 0 && !(flags & MSG_PEEK))
		c->nin += (uint64_t)ret;
	struct emp_conn_info ri;
	int row = es__conn_row(c, &ri);
	es__sock_update(s, 0);   /* bits the read cleared (a level-triggered set drops it) */
	es__sock_unlock(s);
	es__conn_row_put(row, &ri);
	return ret;
}

/* where a send's bytes come from: the caller's vectors, or a file read
 * straight into the send slots (sendfile: one copy, not two) */
struct src {
	const struct iovec *iov;
	int iovcnt, vi;
	size_t vo;
	int fd;                          /* -1: iov */
	off_t *pos;                      /* pread at *pos, else read */
	int err;                         /* the file's read failed (errno) */
};

/* up to n bytes of the caller's vectors into dst: how many (0: no more) */
static size_t src_take(struct src *x, uint8_t *dst, size_t n)
{
	size_t got = 0;
	while (got < n && x->vi < x->iovcnt) {
		if (x->vo == x->iov[x->vi].iov_len) {
			x->vi++;
			x->vo = 0;
			continue;
		}
		size_t k = x->iov[x->vi].iov_len - x->vo;
		if (k > n - got)
			k = n - got;
		memcpy(dst + got, (const char *)x->iov[x->vi].iov_base + x->vo, k);
		x->vo += k;
		got += k;
	}
	return got;
}

static ssize_t send_from(struct es_sock *s, struct src *x, size_t total, int flags);

/* A file source fills every free send slot it can with one read (the open
 * tail's room first, then whole slots, at most ES_FILE_SLOTS): a 1 MiB
 * sendfile was a pread per 128 KiB slot. Bytes read, 0 at the file's end or
 * on its error (x->err). */
#define ES_FILE_SLOTS 16
static size_t stage_file(struct es_conn *c, struct src *x, size_t want)
{
	struct iovec v[ES_FILE_SLOTS];
	int n = 0, tail = tx_tail_open(c);
	size_t room = 0;
	if (tail) {
		unsigned i = (c->tx_staged - 1) % c->tx_slots;
		v[n].iov_base = sslot(c, c->tx_staged - 1) + ES_HDR + c->slen[i];
		v[n].iov_len = c->tx_slot_sz - c->slen[i];
		room += v[n++].iov_len;
	}
	for (uint64_t q = c->tx_staged; n < ES_FILE_SLOTS && room < want && q - c->tx_done < c->tx_slots; q++) {
		tx_map(c, q);
		v[n].iov_base = sslot(c, q) + ES_HDR;
		v[n].iov_len = c->tx_slot_sz;
		room += v[n++].iov_len;
	}
	if (room > want) {
		v[n - 1].iov_len -= room - want;
		room = want;
	}
	ssize_t r;
	do
		r = x->pos ? preadv(x->fd, v, n, *x->pos) : R_(readv)(x->fd, v, n);
	while (r < 0 && errno == EINTR);
	if (r <= 0) {
		if (r < 0)
			x->err = errno;
		return 0;
	}
	if (x->pos)
		*x->pos += r;
	size_t left = (size_t)r;
	for (int k = 0; k < n && left; k++) {
		size_t t = left < v[k].iov_len ? left : v[k].iov_len;
		if (k == 0 && tail) {
			c->slen[(c->tx_staged - 1) % c->tx_slots] += (uint32_t)t;
		} else {
			c->slen[tx_stage_new(c, 0)] = (uint32_t)t;
		}
		left -= t;
	}
	return (size_t)r;
}

ssize_t es__send(struct es_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	struct src x = { .iov = iov, .iovcnt = iovcnt, .fd = -1 };
	return send_from(s, &x, total, flags);
}

/* sendfile: count bytes of in (at *off, else its file offset) into the stream;
 * a read error with nothing sent is returned (-errno) */
ssize_t es__send_file(struct es_sock *s, int in, off_t *off, size_t count)
{
	struct src x = { .fd = in, .pos = off };
	ssize_t r = send_from(s, &x, count, 0);
	if (r == 0 && x.err)
		return -x.err;
	return r;
}

static ssize_t send_from(struct es_sock *s, struct src *x, size_t total, int flags)
{
	size_t sent = 0;
	es__sig_begin();
	emp_progress_due(es__g.ep);
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int64_t dl = deadline_of(s->sndtimeo_ns);
	int dontwait = s->nonblock || (flags & MSG_DONTWAIT);
	ssize_t ret;
	int unheld = 0;
	es__process(s);
	/* coalescing (hold.c): a corked writer, MSG_MORE, or an event-loop round
	 * whose replies leave at its next wait anyway: the tail may grow first */
	int asked = (s->tcpopt & (1u << TCP_CORK)) || (flags & MSG_MORE);   /* the writer asked to hold */
	c->hold_tail = asked || es__tl_defer;
	for (;;) {
		if (c->peer_closed && !c->rst_drawn && !c->err && !c->kdead && !c->shut_wr && !sent && x->fd < 0) {
			/* the peer closed its socket: over TCP the first write after
			 * that succeeds and its bytes draw a RST, and only the writes
			 * after the RST fail, while what the peer sent before its
			 * close stays readable (an HTTP client finds a keep-alive
			 * connection closed by its read, redis-cli prints the
			 * server's last words) */
			c->rst_drawn = 1;
			ret = (ssize_t)total;
			goto out;
		}
		if (c->err || c->kdead || c->shut_wr || c->peer_closed) {
			if (sent)
				break;
			if (c->err && !c->err_told) {
				c->err_told = 1;
				ret = -c->err;
			} else {
				ret = -EPIPE;
			}
			sigpipe(c, flags, ret);
			goto out;
		}
		while (sent < total && es__can_stage(c)) {
			if (x->fd >= 0) {
				size_t k = stage_file(c, x, total - sent);
				if (!k) {        /* the file ended (or failed) early */
					total = sent;
					break;
				}
				sent += k;
				es__flush(c);
				continue;
			}
			int fresh = !tx_tail_open(c);
			if (fresh)
				tx_stage_new(c, 0);
			unsigned i = (c->tx_staged - 1) % c->tx_slots;
			uint8_t *b = sslot(c, c->tx_staged - 1) + ES_HDR;
			size_t room = c->tx_slot_sz - c->slen[i];
			size_t k = src_take(x, b + c->slen[i], total - sent < room ? total - sent : room);
			if (!k) {                /* the file ended (or failed) early */
				if (fresh)
					c->tx_staged--;
				total = sent;
				break;
			}
			c->slen[i] += (uint32_t)k;
			sent += k;
			es__flush(c);
		}
		if (sent == total)
			break;
		if (dontwait) {
			if (sent)
				break;
			ret = -EAGAIN;
			goto out;
		}
		int w = wait_on(s, dl);
		if (w < 0 || (w == 0 && !es__can_stage(c))) {
			if (sent)
				break;
			ret = w == 0 ? -EAGAIN : -EINTR;
			goto out;
		}
	}
	ret = (ssize_t)sent;
	if (c->hold_tail && !asked && c->tail_bulk) {
		c->hold_tail = 0;    /* a bulk write's tail: the round adds nothing to it */
		es__flush(c);
		unheld = es__unhold(s);
	}
	if (c->hold_tail && c->tx_staged > c->tx_posted && tx_tail_open(c))
		es__hold(s);
out:
	if (ret > 0)
		c->nout += (uint64_t)ret;
	struct emp_conn_info ri;
	int row = es__conn_row(c, &ri);
	es__sock_update(s, 0);
	es__sock_unlock(s);
	if (unheld)
		es__sock_put(s);
	es__conn_row_put(row, &ri);
	return ret;
}

/* TCP_CORK cleared or TCP_NODELAY set: what corking held back leaves now
 * (with the thread's other replies at its next wait when it batches, unless
 * it is a bulk stream's tail: nginx's 1 MiB file waited out the round) */
void es__uncork(struct es_sock *s)
{
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int unheld = 0;
	if (c->hold_tail && (!es__tl_defer || c->tail_bulk)) {
		c->hold_tail = 0;
		es__flush(c);
		unheld = es__unhold(s);
	}
	es__sock_unlock(s);
	if (unheld)
		es__sock_put(s);
}

int es__shutdown(struct es_sock *s, int how)
{
	es__sock_lock(s);
	struct es_conn *c = s->c;
	if (how == SHUT_RD || how == SHUT_RDWR)
		c->shut_rd = 1;
	if ((how == SHUT_WR || how == SHUT_RDWR) && !c->shut_wr) {
		c->shut_wr = 1;
		c->fin_want = 1;
		es__flush(c);
	}
	es__sock_update(s, 1);
	es__sock_unlock(s);
	return 0;
}

int es__fionread(struct es_sock *s)
{
	es__sock_lock(s);
	es__process(s);
	int n = (int)s->c->rbytes;
	es__sock_unlock(s);
	return n;
}

/* SIOCOUTQ: bytes written and not yet acknowledged (slots not complete);
 * SIOCOUTQNSD (nsd): of those, the ones not yet handed to the engine */
int es__outq(struct es_sock *s, int nsd)
{
	es__sock_lock(s);
	es__process(s);
	struct es_conn *c = s->c;
	uint64_t n = 0;
	for (uint64_t q = nsd ? c->tx_posted : c->tx_done; q < c->tx_staged; q++)
		n += c->slen[q % c->tx_slots];
	es__sock_unlock(s);
	return n > INT32_MAX ? INT32_MAX : (int)n;
}

int es__so_error(struct es_sock *s)
{
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int e = 0;
	if (c->err && !c->err_told) {
		e = c->err;
		c->err_told = 1;
	}
	es__sock_unlock(s);
	return e;
}

