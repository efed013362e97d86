/* xfer.c: the application side of an EMP stream: blocking/non-blocking recv and send, waiting, shutdown, FIONREAD, SO_ERROR. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"

struct woke_arg { struct es_sock *s; struct es_conn *c; unsigned seq0; };

/* the connection changed, or has work for whoever holds its lock */
static int woke(void *arg)
{
	const struct woke_arg *a = arg;
	return atomic_load(&a->c->seq) != a->seq0 || atomic_load(&a->s->dirty);
}

/* Sleep until our eventfd or the kernel socket wakes us, or the deadline.
 * The engine's device fd is in the set too: this thread processes arriving
 * frames itself (no hand-off to the progress thread, which stands back), and
 * its sleep is bounded by the engine's next deadline at ns precision. */
static int block(struct woke_arg *wa, struct pollfd *p, int np, int ms, int64_t deadline)
{
	emp_endpoint_t *ep = es__g.ep;
	int dfd = ep ? emp_wait_fd(ep) : -1;
	if (dfd < 0) {
		int n = R_(poll)(p, np, ms);
		if (n < 0 && errno == EINTR)
			return -EINTR;
		return (n == 0 && deadline && es__now_ns() >= deadline) ? 0 : 1;
	}
	struct pollfd q[3];
	memcpy(q, p, sizeof(*p) * (size_t)np);
	q[np].fd = dfd;
	q[np].events = POLLIN;
	int rc = 1;
	emp_drive_begin(ep);
	for (;;) {
		int64_t wait = ms < 0 ? -1 : deadline ? deadline - es__now_ns() : (int64_t)ms * 1000000;
		int64_t ed = emp_next_deadline_ns(ep);
		if (ed >= 0 && (wait < 0 || ed < wait))
			wait = ed;
		if (wait < 0 && ms >= 0)
			wait = 0;
		struct timespec ts = { (time_t)(wait / 1000000000), (long)(wait % 1000000000) };
		for (int i = 0; i <= np; i++)
			q[i].revents = 0;
		int n = R_(ppoll)(q, (nfds_t)np + 1, wait < 0 ? NULL : &ts, NULL);
		if (n < 0 && errno == EINTR) {
			rc = -EINTR;
			break;
		}
		emp_progress(ep);
		if (woke(wa))
			break;
		int other = 0;
		for (int i = 0; i < np; i++)
			other |= q[i].revents;
		if (other)
			break;
		if (deadline && es__now_ns() >= deadline) {
			rc = 0;
			break;
		}
		if (ms == 0)
			break;
	}
	emp_drive_end(ep);
	for (int i = 0; i < np; i++)
		p[i].revents = q[i].revents;
	return rc;
}

/* lock held on entry and exit */
int es__wait(struct es_sock *s, int64_t deadline)
{
	struct es_conn *c = s->c;
	int efd = es__tl_efd();
	struct es_waiter w;
	unsigned seq0 = atomic_load(&c->seq);
	es__waiter_add(s, &w, efd);
	pthread_mutex_unlock(&s->lock);
	int rc = 1;
	int64_t budget = es__spin_begin();
	struct woke_arg wa = { s, c, seq0 };
	if (budget)
		es__spin_until(budget, woke, &wa);
	if (!woke(&wa)) {
		struct pollfd p[2] = { { efd, POLLIN, 0 }, { s->kfd, POLLIN | POLLRDHUP, 0 } };
		int np = c->kdead ? 1 : 2;
		int ms = -1;
		if (deadline) {
			int64_t left = deadline - es__now_ns();
			if (left <= 0)
				rc = 0;
			ms = left <= 0 ? 0 : (int)((left + 999999) / 1000000);
		}
		if (rc)
			rc = block(&wa, p, np, ms, deadline);
		pthread_mutex_lock(&s->lock);
		if (np == 2 && p[1].revents)
			es__kernel_check(s);
	} else {
		pthread_mutex_lock(&s->lock);
	}
	es__waiter_del(s, &w);
	uint64_t v;
	R_(read)(efd, &v, 8);
	es__process(s);
	es__spin_end();
	return rc;
}

/* copy up to want bytes into iov starting at byte offset at; consume unless peek */
static size_t copy_out(struct es_conn *c, struct iovec *iov, int iovcnt, size_t at, size_t want, int peek)
{
	int vi = 0;
	size_t vo = at, n = 0;
	while (vi < iovcnt && vo >= iov[vi].iov_len) {
		vo -= iov[vi].iov_len;
		vi++;
	}
	uint64_t q = c->rh;
	uint32_t off = q < c->rc ? c->roff[q % c->R] : 0;
	while (n < want && q < c->rc && vi < iovcnt) {
		unsigned i = q % c->R;
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
		memcpy((char *)iov[vi].iov_base + vo, rslot(c, q) + ES_HDR + off, k);
		n += k; vo += k; off += (uint32_t)k;
		if (vo == iov[vi].iov_len) {
			vi++;
			vo = 0;
		}
	}
	if (!peek) {
		while (c->rh < q)
			es__retire_head(c);
		if (q < c->rc) {
			if (off == c->rlen[q % c->R])
				es__retire_head(c);
			else
				c->roff[q % c->R] = off;
		}
		c->rbytes -= n;
	}
	return n;
}

static int64_t deadline_of(int64_t t) { return t ? es__now_ns() + t : 0; }

static void sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		pthread_kill(pthread_self(), SIGPIPE);
}

ssize_t es__recv(struct es_sock *s, struct iovec *iov, int iovcnt, int flags)
{
	size_t want = 0, got = 0;
	for (int i = 0; i < iovcnt; i++)
		want += iov[i].iov_len;
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int64_t dl = deadline_of(s->rcvtimeo_ns);
	int dontwait = s->nonblock || (flags & MSG_DONTWAIT);
	ssize_t ret;
	es__process(s);
	for (;;) {
		if (c->rbytes && want > got) {
			got += copy_out(c, iov, iovcnt, got, want - got, flags & MSG_PEEK);
			if (!(flags & MSG_PEEK))
				es__flush(c);
			if (!(flags & MSG_WAITALL) || got == want || (flags & MSG_PEEK))
				break;
		}
		if (got == want && want)
			break;
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
		int w = es__wait(s, dl);
		if (w <= 0 && !c->rbytes) {
			if (got)
				break;
			ret = w == 0 ? -EAGAIN : -EINTR;
			goto out;
		}
	}
	ret = (ssize_t)got;
out:
	es__sock_unlock(s);
	return ret;
}

ssize_t es__send(struct es_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	size_t total = 0, sent = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	es__sock_lock(s);
	struct es_conn *c = s->c;
	int64_t dl = deadline_of(s->sndtimeo_ns);
	int dontwait = s->nonblock || (flags & MSG_DONTWAIT);
	int vi = 0;
	size_t vo = 0;
	ssize_t ret;
	es__process(s);
	for (;;) {
		if (c->err || c->kdead || c->shut_wr || c->peer_closed) {
			if (sent)
				break;
			if (c->err && !c->err_told) {
				c->err_told = 1;
				ret = -c->err;
			} else {
				ret = -EPIPE;
			}
			sigpipe(flags);
			goto out;
		}
		while (sent < total && es__can_stage(c)) {
			if (!(c->st > c->sp && c->slen[(c->st - 1) % c->W] < c->PS &&
			      !c->sfin[(c->st - 1) % c->W])) {
				c->slen[c->st % c->W] = 0;
				c->sfin[c->st % c->W] = 0;
				c->st++;
			}
			unsigned i = (c->st - 1) % c->W;
			uint8_t *b = sslot(c, c->st - 1) + ES_HDR;
			while (sent < total && c->slen[i] < c->PS) {
				while (vi < iovcnt && vo == iov[vi].iov_len) { vi++; vo = 0; }
				size_t k = iov[vi].iov_len - vo;
				if (k > c->PS - c->slen[i])
					k = c->PS - c->slen[i];
				memcpy(b + c->slen[i], (const char *)iov[vi].iov_base + vo, k);
				c->slen[i] += k; vo += k; sent += k;
			}
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
		int w = es__wait(s, dl);
		if (w <= 0 && !es__can_stage(c)) {
			if (sent)
				break;
			ret = w == 0 ? -EAGAIN : -EINTR;
			goto out;
		}
	}
	ret = (ssize_t)sent;
out:
	es__sock_unlock(s);
	return ret;
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
	es__signal(s);
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

