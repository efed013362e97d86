/* ready.c: readiness carried with completions: the completion hook, each socket's event mask, waking only threads that sleep, the liveness set, the shim's waits. */
/*
 * The engine hands over exactly the requests it completed (libemp's
 * completion hook, in whichever thread drove it); each request's user pointer
 * is its connection. The hook processes those connections (es__process: the
 * stream's cursors move, credits return, staged sends go out) and
 * es__sock_update recomputes each one's event mask: new bits, or an edge
 * (something happened), put the socket on the in-memory ready list of every
 * epoll set it is registered in, and wake the threads that wait on it in
 * poll/select/read/write -- with one eventfd write, and only if such a thread
 * is asleep. Work per completion batch is O(connections completed), not
 * O(connections) and no system call while the waiting thread spins.
 *
 * A connection whose lock is busy is marked dirty; the lock's holder
 * processes it when it lets go (es__sock_unlock).
 *
 * Liveness: an EMP connection keeps its kernel TCP socket, whose EOF/RST
 * without an EMP FIN means the peer's process died. Those sockets (and the
 * kernel sockets of connects in progress) sit in one process-wide epoll set,
 * edge-triggered; that one fd is in every wait (epoll sets, poll arrays), so a
 * dead peer wakes whoever waits, and one harvest checks the sockets it names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "conn.h"
#include "sys.h"

static atomic_int hooks_active;

unsigned es__events(struct es_sock *s)
{
	switch (s->state) {
	case ES_EMP:
		return es__stream_events(s);
	case ES_FAILED:
	case ES_FOREIGN:
		return POLLERR | POLLHUP | POLLIN | POLLOUT;
	case ES_CONNECTING:
		return s->connected ? POLLOUT : 0;    /* the connect finished: negotiate */
	case ES_PENDING:
		return es__st_stepped(s) ? POLLOUT : 0;   /* a wait settles it */
	default:
		return 0;
	}
}

unsigned long es__wake_writes;

void es__wake(struct es_wake *wk)
{
	if (atomic_exchange(&wk->hit, 1))
		return;                      /* already woken, not yet looked */
	if (atomic_load(&wk->asleep)) {
		uint64_t one = 1;
		__atomic_add_fetch(&es__wake_writes, 1, __ATOMIC_RELAXED);
		atomic_store(&wk->written, 1);
		R_(write)(wk->efd, &one, 8);
	}
}

void es__wake_reset(struct es_wake *wk)
{
	atomic_store(&wk->hit, 0);
	if (atomic_exchange(&wk->written, 0)) {
		uint64_t v;
		if (R_(read)(wk->efd, &v, 8) < 0)
			v = 0;
	}
}

void es__sock_update(struct es_sock *s, int edge)
{
	unsigned ev = es__events(s);
	unsigned old = atomic_exchange(&s->evmask, ev);
	if (edge)
		atomic_fetch_add(&s->seq, 1);
	if (!(ev & ~old) && !edge) {
		if ((old & ~ev) && s->epregs)
			es__ep_cleared(s, ev);   /* only bits cleared: nested sets now, others lazily */
		return;
	}
	for (struct es_waiter *w = s->waiters; w; w = w->next)
		if (!w->want || (ev & w->want))
			es__wake(w->wk);   /* a poll that wants none of these would only sleep again */
	if (s->epregs)
		es__ep_ready(s, ev, edge);
}

/* ---- the completion hook ---- */

void es__on_completions(void *arg, emp_req_t *const *reqs, int n)
{
	(void)arg;
	struct es_sock *todo[64];
	int k = 0;
	struct es_conn *last = NULL;
	atomic_fetch_add(&hooks_active, 1);
	for (int i = 0; i < n; i++) {
		struct es_conn *c = emp_req_user(reqs[i]);
		if (!c || c == last)
			continue;
		last = c;
		struct es_sock *s = c->s;
		if (atomic_exchange(&s->dirty, 1))
			continue;                /* marked already: whoever did processes it */
		if (k == 64) {
			for (int j = 0; j < k; j++)
				if (pthread_mutex_trylock(&todo[j]->lock) == 0)
					es__sock_unlock(todo[j]);
			k = 0;
		}
		todo[k++] = s;
	}
	for (int j = 0; j < k; j++)
		if (pthread_mutex_trylock(&todo[j]->lock) == 0)
			es__sock_unlock(todo[j]);   /* processes it (dirty) */
	atomic_fetch_sub(&hooks_active, 1);
}

/* A connection about to be freed has cleared its requests' user pointers;
 * a hook that read one before that has announced itself and finishes first
 * (so does a liveness harvest that found the socket in the fd table). */
void es__hooks_quiesce(void)
{
	while (atomic_load(&hooks_active))
		sched_yield();
}

/* ---- the liveness set ---- */

static int live_fd = -1;
static unsigned live_gen;
static atomic_uint next_ident;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_live = &live_mu;

int es__live_fd(void)
{
	if (live_fd >= 0 && live_gen == es__g.gen)
		return live_fd;
	pthread_mutex_lock(&live_mu);
	if (live_fd < 0 || live_gen != es__g.gen) {
		/* a forked child gets a set of its own (the parent's still holds
		 * the parent's sockets; closing our copy leaves it alone) */
		if (live_fd >= 0)
			R_(close)(live_fd);
		live_fd = emp__sys_fd_high(R_(epoll_create1)(EPOLL_CLOEXEC));
		live_gen = es__g.gen;
	}
	pthread_mutex_unlock(&live_mu);
	return live_fd;
}

void es__live_add(struct es_sock *s)
{
	int lfd = es__live_fd();
	if (lfd < 0)
		return;
	if (!s->ident)
		s->ident = atomic_fetch_add(&next_ident, 1) + 1;
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (s->state == ES_CONNECTING ? EPOLLOUT : 0),
		.data.u64 = ((uint64_t)(uint32_t)s->kfd << 32) | s->ident,
	};
	if (s->live && s->live_ev == ev.events) {
		/* there already (an accepted socket negotiated by steps, now
		 * EMP): no MOD to re-arm the edge; an event it had meanwhile (its
		 * client's FIN, bytes) is looked at here instead */
		if (atomic_exchange(&s->live_seen, 0) && s->state == ES_EMP)
			es__kernel_check(s, 0);
		return;
	}
	if (R_(epoll_ctl)(lfd, s->live ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->kfd, &ev) == 0) {
		s->live = 1;
		s->live_ev = ev.events;
	}
}

void es__live_del(struct es_sock *s)
{
	if (!s->live)
		return;
	if (live_fd >= 0 && live_gen == es__g.gen)
		R_(epoll_ctl)(live_fd, EPOLL_CTL_DEL, s->kfd, NULL);
	s->live = 0;
}

/* The socket fd names if it is still the one with this ident, locked, for a
 * thread that does not own it: announced like a completion hook (a closer
 * waits for us before it frees it) and never blocking on its lock (a closer
 * holds it while it waits). NULL when it is gone or another socket now, or,
 * with busy, when its lock is taken (*busy set; else this waits for it). */
struct es_sock *es__sock_grab(int fd, uint32_t id, int *busy)
{
	for (;;) {
		atomic_fetch_add(&hooks_active, 1);
		struct es_sock *s = es__sock(fd);
		if (!s || s->ident != id) {
			atomic_fetch_sub(&hooks_active, 1);
			return NULL;
		}
		if (pthread_mutex_trylock(&s->lock) == 0)
			return s;
		atomic_fetch_sub(&hooks_active, 1);
		if (busy) {
			*busy = 1;
			return NULL;
		}
		sched_yield();
	}
}

void es__sock_ungrab(struct es_sock *s)
{
	es__sock_unlock(s);
	atomic_fetch_sub(&hooks_active, 1);
}

/* Sockets the liveness set named: an EMP connection's kernel socket saw
 * EOF/RST (es__kernel_check decides), a connect finished, or an accepted
 * socket whose negotiation an epoll wait runs (es__negs_step) heard from
 * its client's kernel socket: its end, or bytes (a client that went on
 * without EMP) -- the wait looks at it again. */
void es__live_harvest(void)
{
	int lfd = es__live_fd();
	struct epoll_event h[64];
	int n;
	while (lfd >= 0 && (n = R_(epoll_wait)(lfd, h, 64, 0)) > 0) {
		for (int i = 0; i < n; i++) {
			struct es_sock *s = es__sock_grab((int)(h[i].data.u64 >> 32), (uint32_t)h[i].data.u64, NULL);
			if (!s)
				continue;            /* closed since, or another socket now */
			if (s->state == ES_EMP) {
				es__kernel_check(s, 0);   /* an event loop's thread: the grace runs on */
			} else if (s->state == ES_CONNECTING && (h[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
				s->connected = 1;
				es__sock_update(s, 1);
			} else if (s->state == ES_PENDING) {
				if (h[i].events & (EPOLLRDHUP | EPOLLERR | EPOLLHUP))
					atomic_store(&s->ng.kgone, 1);
				atomic_store(&s->live_seen, 1);   /* es__live_add looks again at EMP */
				es__sock_update(s, 1);
			}
			es__sock_ungrab(s);
		}
		if (n < 64)
			break;
	}
}

/* ---- waiting on kernel fds beside the engine ---- */

/* One eventfd per thread: sleeping waits include it, wakers write it. */
static __thread int tl_efd = -1;
static __thread unsigned tl_gen;
static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;

static void tl_gone(void *p)
{
	int fd = (int)(intptr_t)p - 1;
	if (fd >= 0)
		R_(close)(fd);
}

static void tl_key_init(void)
{
	pthread_key_create(&tl_key, tl_gone);
}

int es__tl_efd(void)
{
	if (tl_efd >= 0 && tl_gen == es__g.gen)
		return tl_efd;
	if (tl_efd >= 0)
		R_(close)(tl_efd);
	tl_efd = emp__sys_fd_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	tl_gen = es__g.gen;
	pthread_once(&tl_once, tl_key_init);
	pthread_setspecific(tl_key, (void *)(intptr_t)(tl_efd + 1));   /* closed at thread exit */
	return tl_efd;
}

struct fdwait {
	struct es_wake *wk;
	struct pollfd *p;        /* caller's n entries, then the device's one or two */
	int n;
	const sigset_t *mask;
	int dev_err;
	int k;                   /* the caller's fds the last sleep (or look) found ready */
	int intr;                /* a blocking call's: a handler without SA_RESTART ran (sigcatch.c) */
	struct es_klook kl;      /* the spin's looks at the caller's fds */
};

/* The spin's looks at a wait's kernel fds (here and epwait.c): asked on
 * every 8th turn, 20 us apart while they find something, doubling up to 1 ms
 * per thread while they find nothing (a stream's reader spinning in select
 * for EMP data, with no kernel fd that ever answers, paid a ppoll per 20 us:
 * 90 calls per MB). A wait that starts within KLOOK_RECENT_NS of the last
 * time this thread's kernel fds answered (a look or a sleep found them)
 * starts at 20 us again: an accept loop's listener answers once per
 * connection, and the looks of the connection's own waits in between (which
 * find nothing) had doubled the gap, so the next accept waited up to
 * 320 us in the spin (connt server, perf sched trace). */
#define KLOOK_MIN_NS 20000
#define KLOOK_MAX_NS 1000000
#define KLOOK_RECENT_NS 2000000
static __thread int64_t klook_gap = KLOOK_MIN_NS;
static __thread int64_t klook_hit = -KLOOK_RECENT_NS;   /* when the kernel fds last answered */
unsigned long es__klooks;           /* looks made, all threads (tests) */

void es__klook_start(struct es_klook *l)
{
	int64_t now = es__now_ns();
	if (now - klook_hit < KLOOK_RECENT_NS)
		klook_gap = KLOOK_MIN_NS;
	l->turns = 0;
	l->next = now + klook_gap;
}

void es__klook_hit(void)
{
	klook_hit = es__now_ns();
}

int64_t es__klook_due(struct es_klook *l)
{
	if (++l->turns & 7)
		return 0;
	int64_t now = es__now_ns();
	return now >= l->next ? now : 0;
}

void es__klook_found(struct es_klook *l, int64_t now, int found)
{
	__atomic_add_fetch(&es__klooks, 1, __ATOMIC_RELAXED);
	klook_gap = found ? KLOOK_MIN_NS : klook_gap * 2 > KLOOK_MAX_NS ? KLOOK_MAX_NS : klook_gap * 2;
	if (found)
		klook_hit = now;
	l->next = now + klook_gap;
}

/* A wait whose kernel fds are the application's (poll, select: wk->look_fds)
 * has its spin look at them now and then (one ppoll, es__klook_due): one
 * that became ready is answered then, not when the spin gives up (up to 8 x
 * spin_us). Only the spin looks (not between arming and the sleep), and
 * other waits (a read's liveness set) do not. */
static int fw_done(void *arg)
{
	struct fdwait *a = arg;
	if (a->wk->sig_intr && es__sig_caught())
		return a->intr = 1;      /* before the hit: a handler's kick sets it too */
	if (atomic_load(&a->wk->hit))
		return 1;
	int64_t now;
	if (!a->wk->look_fds || a->k || atomic_load(&a->wk->asleep) || !(now = es__klook_due(&a->kl)))
		return 0;
	struct timespec z = { 0, 0 };
	int r = R_(ppoll)(a->p, (nfds_t)a->n, &z, NULL);
	es__klook_found(&a->kl, now, r > 0);
	if (r <= 0)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (a->p[i].revents)
			a->k++;
	return a->k > 0;
}

static void fw_arm(void *arg)
{
	atomic_store(&((struct fdwait *)arg)->wk->asleep, 1);
}

static void fw_disarm(void *arg)
{
	struct es_wake *wk = ((struct fdwait *)arg)->wk;
	atomic_store(&wk->asleep, 0);
}

static int fw_sleep(void *arg, int64_t ns)
{
	struct fdwait *a = arg;
	int use_dev = a->p[a->n].fd >= 0 && !a->dev_err && emp_wait_device();   /* another sleeper may hold it */
	if (a->dev_err && (ns < 0 || ns > 100000000))
		ns = 100000000;          /* the device failed: look at it again in 100 ms */
	a->dev_err = 0;
	int n = a->n + (use_dev ? 1 + (a->p[a->n + 1].fd >= 0) : 0);
	for (int i = 0; i < n; i++)
		a->p[i].revents = 0;
	struct timespec ts, *tp = NULL;
	if (ns >= 0) {
		ts.tv_sec = ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		tp = &ts;
	}
	struct es_kick kick = { a->wk->efd, &a->wk->written, 0 };
	if (a->wk->sig_intr && es__sig_sleep(&kick) < 0)
		return -EINTR;           /* a handler from here on writes the wake eventfd */
	int r = R_(ppoll)(a->p, (nfds_t)n, tp, a->mask);
	es__sig_woke();
	if (r < 0)
		return errno == EINTR ? -EINTR : -errno;
	if (use_dev && (a->p[a->n].revents & (POLLERR | POLLHUP | POLLNVAL))) {
		emp_wait_fd_error(es__g.ep);
		a->dev_err = 1;
	}
	int k = 0;
	for (int i = 0; i < a->n; i++)
		if (a->p[i].revents)
			k++;
	a->k = k;
	if (k && a->wk->look_fds)
		es__klook_hit();
	return k;
}

/* p has room for n + 2 entries: the device's fds go last */
static int wait_fds(struct es_wake *wk, struct pollfd *p, int n, int64_t timeout_ns, const sigset_t *mask);

/* callers hold no shim lock: closing connections this wait finished are torn down here */
int es__wait_fds(struct es_wake *wk, struct pollfd *p, int n, int64_t timeout_ns, const sigset_t *mask)
{
	es__reap_hold();
	int r = wait_fds(wk, p, n, timeout_ns, mask);
	es__reap_release();
	return r;
}

static int wait_fds(struct es_wake *wk, struct pollfd *p, int n, int64_t timeout_ns, const sigset_t *mask)
{
	emp_endpoint_t *ep = es__g.ep;
	if (!ep) {
		struct timespec ts, *tp = NULL;
		if (timeout_ns >= 0) {
			ts.tv_sec = timeout_ns / 1000000000;
			ts.tv_nsec = timeout_ns % 1000000000;
			tp = &ts;
		}
		int r = R_(ppoll)(p, (nfds_t)n, tp, mask);
		return r < 0 ? (errno == EINTR ? -EINTR : -errno) : r > 0 ? 2 : 0;
	}
	es__held_flush();        /* the writes this thread coalesced leave before it waits */
	struct fdwait a = { .wk = wk, .p = p, .n = n, .mask = mask };
	es__klook_start(&a.kl);
	p[n].fd = emp_wait_fd(ep);
	p[n].events = POLLIN;
	p[n].revents = 0;
	p[n + 1].fd = emp_wait_fd2(ep);    /* -1: none (fw_sleep leaves it out) */
	p[n + 1].events = POLLIN;
	p[n + 1].revents = 0;
	/* done() is the wake (or a kernel fd): whichever thread takes a frame
	 * that matters here hits it, so the device may be another sleeper's */
	struct emp_waitfor w = { .done = fw_done, .arm = fw_arm, .sleep = fw_sleep, .disarm = fw_disarm,
				 .arg = &a, .timeout_ns = timeout_ns, .share_device = 1,
				 /* the exit's wait for close exchanges (a peer that died
				  * never answers: up to 2 s) must not take CPUs from others */
				 .no_spin = es__exiting() };
	int r = emp_wait_for(ep, &w);
	if (a.intr)
		return -EINTR;
	if (!a.k)
		for (int i = 0; i < n; i++)
			p[i].revents = 0;    /* no sleep found any */
	else if (r == 1)
		r = 2;                   /* both: the caller's fds too */
	return r;
}

/* ---- transmit batching ---- */

__thread int es__tl_defer __attribute__((tls_model("initial-exec")));

void es__defer_on(void)
{
	if (es__tl_defer || !es__g.ep)
		return;
	es__tl_defer = 1;
	emp_defer(es__g.ep, 1);
}
