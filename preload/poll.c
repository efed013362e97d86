/* poll.c: poll, ppoll, select, pselect and __poll_chk over a mix of EMP and kernel fds. */
/*
 * An EMP socket's readiness is its event mask (kept current by the completion
 * hook, ready.c); the thread registers one wake on every EMP socket in the
 * array and waits with libemp's primitive: it spins driving the engine, then
 * sleeps in ONE ppoll on the application's kernel fds, the device, the
 * liveness set (an EMP peer's kernel socket saw EOF/RST) and its eventfd,
 * which is written only if an EMP socket of ours changed while we slept.
 * Sockets still connecting are polled as the kernel sockets they are; when
 * one reports, it is negotiated and the call starts over.
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

/* fill revents of the EMP entries from their event masks; count them */
static int emp_ready(struct pollfd *fds, struct es_sock **ss, nfds_t n)
{
	int k = 0;
	for (nfds_t i = 0; i < n; i++) {
		if (!ss[i])
			continue;
		fds[i].revents = es__st_undecided(ss[i]) ? 0 :
				 (short)es__ready_for(ss[i], (unsigned short)fds[i].events);
		if (fds[i].revents)
			k++;
	}
	return k;
}

/* Fairness look at the kernel fds of a call that EMP sockets already answer:
 * one system call each, so a loop whose EMP sockets are always ready (a bulk
 * reader's select) looks only every KLOOK_EVERY-th time, and every time while
 * the last look found one ready. A ready kernel fd is reported at the latest
 * KLOOK_EVERY calls later (a sleep looks at them every time). */
#define KLOOK_EVERY 16
static __thread unsigned klook_n;
static __thread int klook_busy;
static int klook_due(void) { return klook_busy || ++klook_n % KLOOK_EVERY == 0; }

/* one es__poll call: the application's array, our wake on its EMP sockets,
 * the kernel fds (t[0..nk), then the liveness set and our eventfd) */
struct pcall {
	struct pollfd *fds, *t;
	nfds_t n;
	int nk;
	int *map;                        /* t[j] is fds[map[j]] */
	struct es_waiter *w;
	struct es_sock **ss;             /* fds[i]'s EMP socket, or NULL (in t) */
	struct es_wake wk;
	int64_t dl;
	const sigset_t *mask;
	int npend;                       /* accepted sockets still negotiating (stepped, in ss; their times are in timeq.c) */
};

/* a socket still negotiating after its step (accepted, or a connect that
 * finished): no events, waited on like an EMP socket (the other side's
 * HELLO, its OFFER wakes the call), looked at again when the call starts over */
static int stepping(const struct es_sock *s)
{
	return s->state == ES_PENDING && (s->server || s->ng.cl_stepped);
}

/* settle what is undecided (an accepted socket one step, without waiting:
 * its client may never answer), put a waiter on each EMP socket, the rest
 * in t */
static void pc_arm(struct pcall *pc)
{
	pc->nk = 0;
	pc->npend = 0;
	for (nfds_t i = 0; i < pc->n; i++) {
		struct es_sock *s = es__sock_get(pc->fds[i].fd);   /* held until the call returns */
		if (s && (stepping(s) || (es__st_undecided(s) && !s->server)))
			es__settle_step(pc->fds[i].fd, s);   /* a connect's: its server may be slow */
		else if (s && es__st_undecided(s))
			es__settle(pc->fds[i].fd, s);
		int pend = s && stepping(s) && es__sock(pc->fds[i].fd) == s;
		pc->npend += pend;
		pc->ss[i] = s && (pend || es__st_ours(s)) && es__sock(pc->fds[i].fd) == s ? s : NULL;
		if (s && !pc->ss[i])
			es__sock_put(s);
		pc->fds[i].revents = 0;
		if (pc->ss[i]) {
			es__sock_lock(pc->ss[i]);
			es__waiter_add(pc->ss[i], &pc->w[i], &pc->wk);
			/* woken when what it asks for is ready (emp_ready's look),
			 * not by every change (a send's completion, for a poll
			 * that waits for the reply: a wake and a sleep again) */
			pc->w[i].want = pend ? 0 : (unsigned short)pc->fds[i].events | POLLERR | POLLHUP;
			es__sock_unlock(pc->ss[i]);
		} else {
			pc->map[pc->nk] = (int)i;
			pc->t[pc->nk++] = pc->fds[i];
		}
	}
	pc->t[pc->nk] = (struct pollfd){ es__live_fd(), POLLIN, 0 };
	pc->t[pc->nk + 1] = (struct pollfd){ pc->wk.efd, POLLIN, 0 };
}

static void pc_disarm(struct pcall *pc)
{
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->ss[i]) {
			es__sock_lock(pc->ss[i]);
			es__waiter_del(pc->ss[i], &pc->w[i]);
			es__sock_unlock(pc->ss[i]);
			es__sock_put(pc->ss[i]);
			pc->ss[i] = NULL;
		}
}

/* wait until something is ready: the count (revents filled), 0 at the
 * deadline, -1 EINTR, -2 a connect in progress finished, or a negotiating
 * socket may have moved (settle, arm again) */
static int pc_wait(struct pcall *pc)
{
	int nk = pc->nk;
	for (;;) {
		es__wake_reset(&pc->wk);
		int ready = emp_ready(pc->fds, pc->ss, pc->n), kready = 0, connecting = 0;
		if (ready && nk && klook_due()) {
			/* EMP has answers: the kernel fds get a look too (fairness) */
			if (real_wait(pc->t, (nfds_t)nk, 0, NULL) > 0)
				kready = 1;
			klook_busy = kready;
		} else if (!ready) {
			int64_t now = es__now_ns();
			/* sockets due for a look (our negotiations' resends and
			 * bounds, a grace for a FIN that may not come): the sleep
			 * ends by then, and the tick's look wakes us for ours */
			int64_t left = es__tq_bound(now, pc->dl < 0 ? -1 : pc->dl > now ? pc->dl - now : 0, NULL);
			int r = es__wait_fds(&pc->wk, pc->t, nk + 2, left, pc->mask);
			if (r == -EINTR) {
				errno = EINTR;
				return -1;
			}
			if (r == 2) {
				if (pc->t[nk].revents)
					es__live_harvest();   /* a peer died, or a connect finished */
				for (int j = 0; j < nk; j++)
					if (pc->t[j].revents)
						kready = 1;
			}
			ready = emp_ready(pc->fds, pc->ss, pc->n);
		}
		if (kready) {
			for (int j = 0; j < nk; j++) {
				pc->fds[pc->map[j]].revents = pc->t[j].revents;
				if (!pc->t[j].revents)
					continue;
				struct es_sock *s = es__sock(pc->fds[pc->map[j]].fd);
				if (s && s->state == ES_CONNECTING)
					connecting = 1;
				ready++;
			}
		}
		if (connecting)
			return -2;
		if (ready)
			return ready;
		if (pc->dl >= 0 && es__now_ns() >= pc->dl)
			return 0;
		if (pc->npend)
			return -2;           /* a HELLO, its client's FIN, a time: one more step */
	}
}

int es__poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	int any = 0;
	for (nfds_t i = 0; i < n && !any; i++)
		any = needs_us(fds[i].fd);
	if (!any || es__tl_in)
		return real_wait(fds, n, timeout_ns, mask);
	es__sig_begin();
	struct pcall pc = {
		.fds = fds, .n = n, .mask = mask,
		.dl = timeout_ns < 0 ? -1 : es__now_ns() + timeout_ns,
		.t = malloc((n + 4) * sizeof *pc.t), .map = malloc((n + 1) * sizeof *pc.map),
		.w = calloc(n, sizeof *pc.w), .ss = calloc(n, sizeof *pc.ss),
		.wk = { .efd = es__tl_efd(), .look_fds = 1, .sig_intr = 1 },
	};
	int ret = -1;
	if (!pc.t || !pc.map || !pc.w || !pc.ss) {
		errno = ENOMEM;
		goto out;
	}
	for (;;) {
		pc_arm(&pc);
		ret = pc_wait(&pc);
		pc_disarm(&pc);
		if (ret != -2)
			break;
		/* a non-blocking connect finished: its negotiation's first step,
		 * then start over (the next arms step it, and an accepted socket
		 * that negotiates) */
		for (nfds_t i = 0; i < n; i++) {
			struct es_sock *s = es__sock_get(fds[i].fd);
			if (s && s->state == ES_CONNECTING)
				es__settle_step(fds[i].fd, s);
			if (s)
				es__sock_put(s);
		}
		if (pc.dl >= 0 && es__now_ns() >= pc.dl)
			pc.dl = es__now_ns();
	}
	es__wake_reset(&pc.wk);
	/* an event loop: its replies leave together at its next wait. Not a
	 * thread that polls one descriptor: it waits for that connection with a
	 * timeout (Apache's workers, sockets with a timeout in Python, libcurl),
	 * and may next block somewhere the shim does not see (Apache's worker
	 * hands the connection back and sleeps on a condition variable): its
	 * reply then waited for the progress thread's tick, up to 4 ms */
	if (ret > 0 && n > 1)
		es__defer_on();
out:
	free(pc.t); free(pc.map); free(pc.w); free(pc.ss);
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
		     const sigset_t *mask)
{
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
	int n = do_select(nfds, r, w, x, t, NULL);
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
	int n = do_select(nfds, r, w, x, t, mask);
	if (n == -2)
		return R_(pselect)(nfds, r, w, x, ts, mask);
	return n;
}
