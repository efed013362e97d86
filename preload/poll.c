/* poll.c: poll, ppoll, select, pselect and __poll_chk over a mix of EMP and kernel fds. */
/*
 * An EMP socket's readiness is computed from its stream state; the kernel fd is
 * still polled for POLLIN|POLLRDHUP (its EOF/RST means the peer died), and the
 * thread's eventfd is added as a waiter on every EMP socket in the set so that
 * a completion (from the progress thread) wakes the real poll.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "es.h"

static int needs_us(int fd)
{
	struct es_sock *s = es__sock(fd);
	return s && s->state != ES_CAND;
}

static int real_wait(struct pollfd *p, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	if (!mask) {
		int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
		return R_(poll)(p, n, ms);
	}
	struct timespec ts, *tp = NULL;
	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tp = &ts;
	}
	return R_(ppoll)(p, n, tp, mask);
}

/* fill revents of the EMP entries from stream state; count them */
static int emp_ready(struct pollfd *fds, struct es_sock **ss, nfds_t n)
{
	int k = 0;
	for (nfds_t i = 0; i < n; i++) {
		struct es_sock *s = ss[i];
		if (!s)
			continue;
		unsigned ev = POLLERR | POLLHUP | POLLIN | POLLOUT;   /* FAILED/FOREIGN */
		if (s->state == ES_EMP) {
			es__sock_lock(s);
			es__process(s);
			ev = es__events(s);
			es__sock_unlock(s);
		}
		fds[i].revents = (short)(ev & ((unsigned)fds[i].events | POLLERR | POLLHUP));
		if (fds[i].revents)
			k++;
	}
	return k;
}

int es__poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	nfds_t i;
	int any = 0;
	for (i = 0; i < n && !any; i++)
		any = needs_us(fds[i].fd);
	if (!any || es__tl_in)
		return real_wait(fds, n, timeout_ns, mask);
	int64_t dl = timeout_ns < 0 ? -1 : es__now_ns() + timeout_ns;
	struct pollfd *t = malloc((n + 1) * sizeof *t);
	struct es_waiter *w = calloc(n, sizeof *w);
	struct es_sock **ss = calloc(n, sizeof *ss);
	if (!t || !w || !ss) {
		free(t); free(w); free(ss);
		errno = ENOMEM;
		return -1;
	}
	int efd = es__tl_efd(), ret;
again:
	for (i = 0; i < n; i++) {
		struct es_sock *s = es__sock(fds[i].fd);
		if (s && (s->state == ES_PENDING || s->state == ES_CONNECTING)) {
			es__settle(fds[i].fd, s, 0);
			s = es__sock(fds[i].fd);
		}
		ss[i] = s && s->state != ES_CAND && s->state != ES_CONNECTING ? s : NULL;
		t[i] = fds[i];
		if (ss[i]) {
			t[i].events = POLLIN | POLLRDHUP;
			if (ss[i]->state != ES_EMP)
				t[i].fd = -1;
			es__sock_lock(ss[i]);
			es__waiter_add(ss[i], &w[i], efd);
			es__sock_unlock(ss[i]);
		}
	}
	t[n].fd = efd;
	t[n].events = POLLIN;
	int spun = timeout_ns == 0;
	for (;;) {
		unsigned seq0 = atomic_load(&es__changes);
		int ready = emp_ready(fds, ss, n), kready = 0, connecting = 0, woke = 0;
		if (!ready && !spun) {
			spun = 1;
			if (es__spin(seq0))
				continue;
		}
		int64_t left = ready ? 0 : dl < 0 ? -1 : dl - es__now_ns();
		if (left < -1)
			left = 0;
		if (left)
			emp_progress_resume(es__g.ep);   /* frames while we sleep: the progress thread's */
		int r = real_wait(t, n + 1, left, mask);
		if (r < 0) {
			ret = ready ? ready : -1;
			goto out;
		}
		if (t[n].revents) {
			uint64_t v;
			R_(read)(efd, &v, 8);
			woke = 1;
		}
		for (i = 0; i < n; i++) {
			if (ss[i]) {
				if (t[i].revents && ss[i]->state == ES_EMP) {
					es__sock_lock(ss[i]);
					es__kernel_check(ss[i]);
					es__sock_unlock(ss[i]);
					woke = 1;
				}
				continue;
			}
			fds[i].revents = t[i].revents;
			if (t[i].revents) {
				struct es_sock *s = es__sock(fds[i].fd);
				if (s && s->state == ES_CONNECTING)
					connecting = 1;
				kready++;
			}
		}
		if (connecting)
			break;
		if (woke)
			ready = emp_ready(fds, ss, n);
		if (ready + kready) {
			ret = ready + kready;
			goto out;
		}
		if (dl >= 0 && es__now_ns() >= dl) {
			ret = 0;
			goto out;
		}
	}
	/* a non-blocking connect finished: negotiate, then start over */
	for (i = 0; i < n; i++)
		if (ss[i]) {
			es__sock_lock(ss[i]);
			es__waiter_del(ss[i], &w[i]);
			es__sock_unlock(ss[i]);
		}
	if (dl >= 0 && es__now_ns() >= dl)
		dl = es__now_ns();
	goto again;
out:
	es__spin_end();
	for (i = 0; i < n; i++)
		if (ss[i]) {
			es__sock_lock(ss[i]);
			es__waiter_del(ss[i], &w[i]);
			es__sock_unlock(ss[i]);
		}
	free(t); free(w); free(ss);
	return ret;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return es__poll(fds, n, timeout < 0 ? -1 : timeout * 1000000ll, NULL);
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof *fds < n)
		abort();
	return poll(fds, n, timeout);
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	if (es__tl_in)
		return R_(ppoll)(fds, n, ts, mask);
	int64_t t = ts ? ts->tv_sec * 1000000000ll + ts->tv_nsec : -1;
	return es__poll(fds, n, t, mask);
}

#define IN_SET (POLLIN | POLLHUP | POLLERR | POLLRDHUP)
#define OUT_SET (POLLOUT | POLLERR)

static int do_select(int nfds, fd_set *r, fd_set *w, fd_set *x, int64_t timeout_ns,
		     const sigset_t *mask, int (*real)(void))
{
	(void)real;
	int any = 0, cnt = 0;
	for (int fd = 0; fd < nfds; fd++)
		if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (x && FD_ISSET(fd, x))) {
			cnt++;
			if (needs_us(fd))
				any = 1;
		}
	if (!any)
		return -2;
	struct pollfd *p = calloc(cnt ? cnt : 1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	int k = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		if (r && FD_ISSET(fd, r)) ev |= POLLIN;
		if (w && FD_ISSET(fd, w)) ev |= POLLOUT;
		if (x && FD_ISSET(fd, x)) ev |= POLLPRI;
		if (ev) {
			p[k].fd = fd;
			p[k].events = ev;
			k++;
		}
	}
	int n = es__poll(p, k, timeout_ns, mask);
	if (n < 0) {
		free(p);
		return -1;
	}
	for (int i = 0; i < k; i++)
		if (p[i].revents & POLLNVAL) {
			free(p);
			errno = EBADF;
			return -1;
		}
	if (r) FD_ZERO(r);
	if (w) FD_ZERO(w);
	if (x) FD_ZERO(x);
	int total = 0;
	for (int i = 0; i < k; i++) {
		if (r && (p[i].events & POLLIN) && (p[i].revents & IN_SET)) { FD_SET(p[i].fd, r); total++; }
		if (w && (p[i].events & POLLOUT) && (p[i].revents & OUT_SET)) { FD_SET(p[i].fd, w); total++; }
		if (x && (p[i].events & POLLPRI) && (p[i].revents & POLLPRI)) { FD_SET(p[i].fd, x); total++; }
	}
	free(p);
	return total;
}

int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	if (es__tl_in)
		return R_(select)(nfds, r, w, x, tv);
	int64_t t = tv ? tv->tv_sec * 1000000000ll + tv->tv_usec * 1000ll : -1;
	int64_t start = es__now_ns();
	int n = do_select(nfds, r, w, x, t, NULL, NULL);
	if (n == -2)
		return R_(select)(nfds, r, w, x, tv);
	if (tv && n >= 0) {
		int64_t left = t - (es__now_ns() - start);
		if (left < 0 || n == 0)
			left = n == 0 ? 0 : (left < 0 ? 0 : left);
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return n;
}

int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *ts,
	    const sigset_t *mask)
{
	if (es__tl_in)
		return R_(pselect)(nfds, r, w, x, ts, mask);
	int64_t t = ts ? ts->tv_sec * 1000000000ll + ts->tv_nsec : -1;
	int n = do_select(nfds, r, w, x, t, mask, NULL);
	if (n == -2)
		return R_(pselect)(nfds, r, w, x, ts, mask);
	return n;
}
