/* epwait.c: epoll_wait/epoll_pwait: taking a set's ready list, looking at its kernel fds, and waiting with libemp's primitive (registration and the ready list: epoll.c). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "epoll_int.h"


/* ---- waiting ---- */

/* sockets a wait negotiates (unlocked, after the harvest): a burst of
 * accepted connections whose OFFERs are out is settled in one round (most
 * have their answer by then), not one per round */
#define SETTLE_MAX 32
struct settles { int n; int fd[SETTLE_MAX]; };

static void settle_all(struct settles *st)
{
	for (int i = 0; i < st->n; i++) {
		struct es_sock *s = es__sock(st->fd[i]);
		if (!s)
			continue;
		/* negotiated: its readiness comes next round. Looked at without
		 * waiting, accepted or connected: the other side may be slow or
		 * never answer, and the loop serves everything else meanwhile */
		es__settle_step(st->fd[i], s);
	}
	st->n = 0;
}

/* ready registrations into out (set->lock taken here); st gets the fds
 * whose non-blocking connect finished, or accepted ones whose OFFER is out
 * (negotiated by the caller, unlocked) */
static int harvest(struct es_epset *set, struct epoll_event *out, int max, struct settles *st)
{
	int k = 0;
	pthread_mutex_lock(&set->lock);
	int left = atomic_load(&set->nready);
	for (struct es_epreg *r = set->rhead, *nx; r && k < max && left-- > 0; r = nx) {
		nx = r->rnext;
		struct es_sock *s = r->s;
		if (!r->emulated || r->disabled) {
			es__ep_rq_del(set, r);
			continue;
		}
		if (es__st_undecided(s)) {
			if (s->state == ES_CONNECTING && !s->connected) {
				es__ep_rq_del(set, r);
			} else if (st->n < SETTLE_MAX) {
				st->fd[st->n++] = r->fd; /* the caller negotiates it (unlocked) */
				es__ep_rq_del(set, r);
			}
			continue;
		}
		uint32_t ev = es__ready_for(s, es__ep_want_of(r));
		if (!ev || ((r->events & EPOLLET) && !r->pending)) {
			es__ep_rq_del(set, r);          /* no longer ready (a read took it), or no new edge */
			continue;
		}
		out[k].events = ev;
		out[k].data = r->data;
		k++;
		r->pending = 0;
		es__ep_rq_del(set, r);
		if (r->events & EPOLLONESHOT)
			r->disabled = 1;
		else if (!(r->events & EPOLLET))
			es__ep_rq_add(set, r);          /* level-triggered: stays while ready, behind the others */
	}
	pthread_mutex_unlock(&set->lock);
	return k;
}

/* keep the application's events of a kernel answer, act on ours */
static int filter(struct epoll_event *evs, int k)
{
	int m = 0;
	for (int j = 0; j < k; j++) {
		uint64_t d = evs[j].data.u64;
		if (!es__ep_internal(d))
			evs[m++] = evs[j];
		else if (d == es__ep_cookie + C_LIVE)
			es__live_harvest();
		/* DEV: the caller drives the engine; WAKE: drained by the caller */
	}
	return m;
}

struct epw {
	struct es_epset *set;
	struct epoll_event *evs;
	int max;
	const sigset_t *mask;
	int nk;                          /* kernel events the sleep (or the spin's look) returned */
	int armed;                       /* between epw_arm and epw_disarm: no look */
	int intr;                        /* a handler without SA_RESTART ran (sigcatch.c) */
	struct es_klook kl;              /* the spin's looks at the kernel fds */
};

/* EMP sockets ready, or (now and then in the spin: es__klook_due) the set's kernel
 * fds: a listener or a plain socket that became ready while the thread spins
 * for EMP is answered within 20 us, not when the spin gives up (up to 8 x
 * spin_us: a connt server's accept came 270 us after the client's connect
 * had finished). Events the sleep took are kept (nk): no second look. The
 * look keeps the application's events and leaves ours alone (DEV, LIVE and
 * WAKE are level-triggered: the sleep or the next round sees them again):
 * draining WAKE here could take another sleeper's wakeup, and a liveness
 * harvest run inside the spin reset connections under load (t_fault_load:
 * ECONNRESET in 3 of 8 processes, where its kernel check waits for a closing
 * peer's EMP FIN). Only the spin looks, never once armed. */
static int epw_done(void *arg)
{
	struct epw *a = arg;
	if (es__sig_caught())
		return a->intr = 1;
	if (a->nk > 0 || atomic_load(&a->set->nready) > 0)
		return 1;
	int64_t now;
	if (a->armed || !(now = es__klook_due(&a->kl)))
		return 0;
	int k = R_(epoll_wait)(a->set->epfd, a->evs, a->max, 0), m = 0;
	for (int j = 0; j < k; j++)
		if (!es__ep_internal(a->evs[j].data.u64))
			a->evs[m++] = a->evs[j];
	es__klook_found(&a->kl, now, m > 0);
	if (!m)
		return 0;
	a->nk = m;
	a->set->klook_ns = now;
	a->set->kskip = 0;
	return 1;
}

static void epw_arm(void *arg)
{
	((struct epw *)arg)->armed = 1;
	atomic_fetch_add(&((struct epw *)arg)->set->sleepers, 1);
}

static void epw_disarm(void *arg)
{
	((struct epw *)arg)->armed = 0;
	atomic_fetch_sub(&((struct epw *)arg)->set->sleepers, 1);
}

static int epw_sleep(void *arg, int64_t ns)
{
	struct epw *a = arg;
	int ms = ns < 0 ? -1 : (int)((ns + 999999) / 1000000);
	struct es_kick kick = { a->set->efd, &a->set->signaled, 0 };
	if (es__sig_sleep(&kick) < 0)
		return -EINTR;           /* a handler from here on writes the set's eventfd */
	int k = a->mask ? R_(epoll_pwait)(a->set->epfd, a->evs, a->max, ms, a->mask)
			: R_(epoll_wait)(a->set->epfd, a->evs, a->max, ms);
	es__sig_woke();
	if (k < 0) {
		int e = errno;
		if (kick.fired)
			es__ep_set_drain(a->set);   /* the handler's kick: no later sleeper wakes to it */
		return e == EINTR ? -EINTR : -e;
	}
	es__ep_set_drain(a->set);
	a->nk = filter(a->evs, k);
	if (a->nk)
		es__klook_hit();
	a->set->klook_ns = es__now_ns();
	a->set->kskip = 0;
	return a->nk;
}

static int ewait(struct es_epset *set, struct epoll_event *evs, int max, int64_t timeout_ns, const sigset_t *mask)
{
	emp_endpoint_t *ep = es__g.ep;
	es__sig_begin();
	int64_t dl = timeout_ns < 0 ? -1 : es__now_ns() + timeout_ns;
	for (;;) {
		struct settles st = { 0 };
		int n;
		es__held_flush();            /* the round's coalesced writes are posted */
		if (ep)
			emp_progress(ep);        /* deferred replies leave, arrived frames are taken */
		if (!set->dev_in && ep) {
			pthread_mutex_lock(&es__ep_lock);
			es__ep_set_arm(set);
			pthread_mutex_unlock(&es__ep_lock);
		}
		n = 0;
		int64_t now = es__now_ns();
		if (es__tq_due() <= now)
			es__tq_tick(now);        /* sockets due for a look (negotiations, graces) */
		if (++set->kskip >= KLOOK_EVERY || now - set->klook_ns >= KLOOK_NS) {
			/* the kernel fds get a look too, now and then (fairness: the
			 * ready list alone could keep answering for ever) */
			int k = R_(epoll_wait)(set->epfd, evs, max, 0);
			set->kskip = 0;
			set->klook_ns = now;
			if (k > 0 && (n = filter(evs, k)) > 0)
				es__klook_hit();
			if (!set->nested)
				es__ep_set_drain(set);
		}
		n += harvest(set, evs + n, max - n, &st);
		if (st.n) {
			settle_all(&st);
			if (!n)
				continue;
		}
		if (n)
			return n;
		int64_t left = dl < 0 ? -1 : dl - es__now_ns();
		if (left < 0 && dl >= 0)
			left = 0;
		/* a socket due for a look before the caller's timeout ends the
		 * sleep (not the call: the loop goes round) */
		int ntimer;
		left = es__tq_bound(es__now_ns(), left, &ntimer);
		if (!ep) {
			struct epw a = { .set = set, .evs = evs, .max = max, .mask = mask };
			int r = epw_sleep(&a, left);
			if (r < 0) {
				errno = -r;
				return -1;
			}
			if (r > 0 || atomic_load(&set->nready) == 0)
				return r;
			continue;
		}
		struct epw a = { .set = set, .evs = evs, .max = max, .mask = mask };
		es__klook_start(&a.kl);
		struct emp_waitfor w = { .done = epw_done, .arm = epw_arm, .sleep = epw_sleep,
					 .disarm = epw_disarm, .arg = &a, .timeout_ns = left };
		int r = emp_wait_for(ep, &w);
		if (a.intr)
			r = -EINTR;
		if (r == -EINTR) {
			errno = EINTR;
			return -1;
		}
		if (r < 0) {
			errno = -r;
			return -1;
		}
		n = a.nk;                    /* kernel events the last sleep took (even when EMP became ready too) */
		if (n < max)
			n += harvest(set, evs + n, max - n, &st);
		if (st.n) {
			settle_all(&st);
			if (!n)
				continue;
		}
		if (n || (r == 0 && !ntimer))
			return n;
		if (dl >= 0 && es__now_ns() >= dl)
			return 0;
	}
}

/* the kernel's wait on the set itself: epoll_pwait2 (ns) when the caller
 * asked for it, else epoll_wait/epoll_pwait (ms, rounded up) */
static int kwait(int epfd, struct epoll_event *evs, int max, int64_t tns, const sigset_t *mask, int p2)
{
	if (p2) {
		struct timespec ts = { (time_t)(tns / 1000000000), (long)(tns % 1000000000) };
		return (int)syscall(SYS_epoll_pwait2, epfd, evs, max, tns < 0 ? NULL : &ts, mask, _NSIG / 8);
	}
	int ms = tns < 0 ? -1 : tns / 1000000 >= INT_MAX ? INT_MAX : (int)((tns + 999999) / 1000000);
	return mask ? R_(epoll_pwait)(epfd, evs, max, ms, mask) : R_(epoll_wait)(epfd, evs, max, ms);
}

/* timeout_ns: -1 for ever; p2: the caller's call was epoll_pwait2 */
static int epoll_any(int epfd, struct epoll_event *evs, int max, int64_t timeout_ns, const sigset_t *mask, int p2)
{
	struct es_epset *set = NULL;
	int64_t dl = timeout_ns < 0 ? -1 : es__now_ns() + timeout_ns;
again:;
	int raw = 0;
	if (!es__tl_in && max > 0) {
		pthread_mutex_lock(&es__ep_lock);
		set = es__ep_set_get(epfd, 0);
		if (set && (!set->armed || set->dead))
			set = NULL;              /* kernel fds only: the kernel's answer as it is */
		if (set)
			set->refs++;
		else
			raw = 1, atomic_fetch_add(&es__ep_raw_sleepers[epfd & 63], 1);   /* before set_arm looks (es__ep_lock) */
		pthread_mutex_unlock(&es__ep_lock);
	}
	if (!set) {
		int k = kwait(epfd, evs, max, timeout_ns, mask, p2);
		if (raw)
			atomic_fetch_sub(&es__ep_raw_sleepers[epfd & 63], 1);
		if (k <= 0 || es__tl_in || !__atomic_load_n(&es__ep_cookie, __ATOMIC_ACQUIRE))
			return k;
		/* another thread armed the set (an EMP socket added) while this one
		 * slept in the kernel: our entries never reach the application; with
		 * only those, wait again on the set's ready list */
		int m = filter(evs, k);
		if (m)
			return m;
		if (timeout_ns > 0)
			timeout_ns = dl > es__now_ns() ? dl - es__now_ns() : 0;
		goto again;
	}
	int e = errno;
	es__reap_hold();   /* no lock held here: closing connections this wait finished go at its end */
	int n = set->gen == es__g.gen ? ewait(set, evs, max, timeout_ns, mask) : -2;
	es__reap_release();
	if (n >= 0)
		es__ep_set_quiet(set);              /* nested and nothing left: its outer sets stop seeing it */
	if (n == -2) {   /* inherited across fork: the parent's lists; the kernel's answer only */
		n = kwait(epfd, evs, max, timeout_ns, mask, p2);
		if (n > 0)
			n = filter(evs, n);
	} else if (n >= 0) {
		errno = e;
	}
	if (n > 0)
		es__defer_on();   /* an event loop: its replies leave together at its next wait */
	pthread_mutex_lock(&es__ep_lock);
	int last = --set->refs == 0 && set->dead;
	pthread_mutex_unlock(&es__ep_lock);
	if (last)
		es__ep_set_free(set);
	return n;
}

static int64_t ms_ns(int timeout)
{
	return timeout < 0 ? -1 : timeout * 1000000ll;
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	return epoll_any(epfd, evs, max, ms_ns(timeout), NULL, 0);
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	return epoll_any(epfd, evs, max, ms_ns(timeout), mask, 0);
}

/* glibc 2.35's nanosecond wait (the kernel's since 5.11): the same, with the
 * caller's timeout as it is */
int epoll_pwait2(int epfd, struct epoll_event *evs, int max, const struct timespec *ts, const sigset_t *mask)
{
	if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)) {
		errno = EINVAL;
		return -1;
	}
	int64_t tns = -1;
	if (ts)
		tns = ts->tv_sec >= INT64_MAX / 1000000000 - 1 ? INT64_MAX / 2 : ts->tv_sec * 1000000000ll + ts->tv_nsec;
	return epoll_any(epfd, evs, max, tns, mask, 1);
}

