/* epoll.c: epoll_create/ctl/wait/pwait: EMP sockets on in-memory ready lists beside the application's real kernel epoll set. */
/*
 * The application's epoll fd stays a real kernel epoll. Kernel fds (and
 * tracked sockets that are still plain kernel sockets) are registered in it
 * directly. EMP sockets (and non-blocking connects being negotiated) are kept
 * in the set's own bookkeeping instead: when a socket's readiness changes
 * (es__sock_update, called from the completion hook in whichever thread drove
 * the engine, or from the application's own read/write), each of its
 * registrations goes on its set's in-memory ready list. Three entries of ours
 * sit in the kernel set, registered once, with data = cookie + 0/1/2:
 *
 *   DEV   the engine's device fd (EPOLLEXCLUSIVE): frames wake one sleeper,
 *         which drives the engine itself;
 *   LIVE  the liveness set (ready.c): an EMP peer's kernel socket saw EOF/RST,
 *         or a connect finished;
 *   WAKE  the set's eventfd, written only when a socket became ready for a set
 *         one of whose threads sleeps (and nobody wrote it since), or when the
 *         set is itself inside another epoll set.
 *
 * epoll_wait: drive the engine (the replies the last round deferred leave
 * now, arriving frames are processed), take the ready list (level-triggered:
 * a registration stays while its socket is ready; EPOLLET: reported once per
 * edge; EPOLLONESHOT: disarmed until EPOLL_CTL_MOD), and look at the kernel
 * fds now and then; with nothing ready, wait with libemp's primitive: spin,
 * then sleep in the real epoll_wait, which returns kernel events as they are.
 * Computing readiness costs no system call; a request costs none but the
 * batched send (and the sleep, when there is nothing to do).
 *
 * Locks (order: fork.c): ep_lock guards the structure (sets, registrations,
 * s->epregs), set->lock a set's ready list. The completion path takes only
 * s->lock and set->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "es.h"

struct es_epset;
struct es_epreg {
	struct es_epset *set;
	struct es_sock *s;
	int fd;
	uint32_t events;
	epoll_data_t data;
	int emulated;                     /* on our ready lists, not in the kernel set */
	int disabled;                     /* EPOLLONESHOT reported; until EPOLL_CTL_MOD */
	int pending;                      /* an edge since the last report (EPOLLET) */
	int queued;                       /* on set->ready (set->lock) */
	struct es_epreg *snext;           /* in s->epregs */
	struct es_epreg *next;            /* in set->regs */
	struct es_epreg *rnext, *rprev;   /* in the ready list */
};

struct es_epset {
	int kind;                         /* ES_KIND_EPSET */
	unsigned gen;                     /* inherited across fork: the parent's, hands off */
	int epfd;
	int efd;                          /* WAKE */
	int armed;                        /* DEV, LIVE, WAKE are in the kernel set */
	int dev_in;                       /* DEV is (the engine may come later) */
	int nemu;                         /* emulated registrations */
	int nested;                       /* this epoll fd sits in other epoll sets */
	int refs, dead;                   /* ep_lock: waits in progress; closed */
	struct es_epreg *regs;
	pthread_mutex_t lock;             /* the ready list */
	struct es_epreg *rhead, *rtail;
	atomic_int nready;
	atomic_int sleepers;              /* threads about to sleep or asleep on it */
	atomic_int signaled;              /* efd written, not yet drained */
	unsigned kskip;                   /* epoll_waits answered from the ready list alone */
	int64_t klook_ns;                 /* the kernel fds' last look */
};

static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_ep = &ep_lock;   /* held across fork (fork.c) */
static uint64_t cookie;
static atomic_int raw_sleepers[64];       /* by epfd % 64: threads in the kernel's epoll_wait on a set with no EMP socket yet */
#define C_DEV 0
#define C_LIVE 1
#define C_WAKE 2
#define KLOOK_EVERY 8                     /* kernel fds looked at every 8th answer ... */
#define KLOOK_NS 1000000                  /* ... or after 1 ms */
#define SPIN_KLOOK_NS 20000               /* a wait's spin looks at the kernel fds this often */

static int internal(uint64_t data) { return data - cookie < 3; }

static int emu_state(struct es_sock *s)
{
	return s->kind == ES_KIND_SOCK && (es__st_ours(s) || s->state == ES_CONNECTING ||
					  (s->state == ES_PENDING && s->ng.sv.begun));
}

static uint32_t want_of(const struct es_epreg *r)
{
	/* a socket still to negotiate is taken by the wait whatever the interest */
	int neg = es__st_undecided(r->s);
	return (r->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI)) | EPOLLERR | EPOLLHUP |
	       (neg ? EPOLLOUT : 0);
}

/* ---- the ready list (set->lock) ---- */

static void rq_add(struct es_epset *set, struct es_epreg *r)
{
	if (r->queued)
		return;
	r->queued = 1;
	r->rnext = NULL;
	r->rprev = set->rtail;
	if (set->rtail)
		set->rtail->rnext = r;
	else
		set->rhead = r;
	set->rtail = r;
	atomic_fetch_add(&set->nready, 1);
}

static void rq_del(struct es_epset *set, struct es_epreg *r)
{
	if (!r->queued)
		return;
	if (r->rprev)
		r->rprev->rnext = r->rnext;
	else
		set->rhead = r->rnext;
	if (r->rnext)
		r->rnext->rprev = r->rprev;
	else
		set->rtail = r->rprev;
	r->queued = 0;
	atomic_fetch_sub(&set->nready, 1);
}

static void set_signal(struct es_epset *set)
{
	if (!atomic_exchange(&set->signaled, 1)) {
		uint64_t one = 1;
		R_(write)(set->efd, &one, 8);
	}
}

static void set_drain(struct es_epset *set)
{
	if (atomic_exchange(&set->signaled, 0)) {
		uint64_t v;
		if (R_(read)(set->efd, &v, 8) < 0)
			v = 0;
	}
}

/* A set inside other sets looks readable to them while its eventfd is: with
 * nothing on its list it must stop. The drain comes first; a push that raced
 * with it (its write may have been drained) is seen by the second look, which
 * writes again. */
static void set_quiet(struct es_epset *set)
{
	if (!set->nested || atomic_load(&set->nready))
		return;
	set_drain(set);
	if (atomic_load(&set->nready)) {
		uint64_t one = 1;
		atomic_store(&set->signaled, 1);
		R_(write)(set->efd, &one, 8);
	}
}

/* r's socket is ready for it (or had an edge): onto the list; the set's
 * sleeper, if any, is woken once. s->lock held. */
static void push(struct es_epreg *r, int edge)
{
	struct es_epset *set = r->set;
	pthread_mutex_lock(&set->lock);
	if (edge)
		r->pending = 1;
	rq_add(set, r);
	int wake = atomic_load(&set->sleepers) > 0 || set->nested;
	pthread_mutex_unlock(&set->lock);
	if (wake)
		set_signal(set);
}

/* s lost readiness bits (a read took its data): registrations in nested
 * sets leave their lists now, so the outer sets stop seeing the inner ones
 * readable (elsewhere harvest drops them lazily). s->lock held. */
void es__ep_cleared(struct es_sock *s, unsigned ev)
{
	for (struct es_epreg *r = s->epregs; r; r = r->snext) {
		struct es_epset *set = r->set;
		if (!set->nested || (ev & want_of(r)))
			continue;
		pthread_mutex_lock(&set->lock);
		rq_del(set, r);
		pthread_mutex_unlock(&set->lock);
		set_quiet(set);
	}
}

void es__ep_ready(struct es_sock *s, unsigned ev, int edge)
{
	for (struct es_epreg *r = s->epregs; r; r = r->snext)
		if (r->emulated && !r->disabled && (ev & want_of(r)))
			push(r, 1);
	(void)edge;   /* new bits or an edge: either is an edge for EPOLLET */
}

/* ---- sets ---- */

static struct es_epset *set_get(int epfd, int create)
{
	struct es_epset *set = es__fd_get(epfd);
	if (set && set->kind == ES_KIND_EPSET)
		return set;
	if (set || !create)
		return NULL;
	set = calloc(1, sizeof *set);
	if (!set)
		return NULL;
	set->kind = ES_KIND_EPSET;
	set->gen = es__g.gen;
	set->epfd = epfd;
	set->efd = -1;
	pthread_mutex_init(&set->lock, NULL);
	es__fd_set(epfd, set);
	return set;
}

/* our entries into the kernel set, once (DEV again when the engine came later) */
static int set_arm(struct es_epset *set)
{
	if (!cookie) {
		uint64_t c = 0;
		while (getrandom(&c, sizeof c, 0) != sizeof c || c > UINT64_MAX - 3)
			;
		cookie = c;
	}
	struct epoll_event ev = { .events = EPOLLIN };
	if (!set->armed) {
		set->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ev.data.u64 = cookie + C_WAKE;
		if (set->efd < 0 || R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, set->efd, &ev) < 0) {
			int e = errno;
			if (set->efd >= 0)
				R_(close)(set->efd);
			set->efd = -1;
			errno = e;
			return -1;
		}
		int lfd = es__live_fd();
		ev.data.u64 = cookie + C_LIVE;
		if (lfd >= 0)
			R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, lfd, &ev);
		set->armed = 1;
		/* a thread may already sleep in the kernel on this set (epoll_any,
		 * unarmed): wake it, so that it waits again on the ready list */
		if (!set->nested && atomic_load(&raw_sleepers[set->epfd & 63]))
			set_signal(set);
	}
	emp_endpoint_t *ep = __atomic_load_n(&es__g.ep, __ATOMIC_ACQUIRE);
	if (!set->dev_in && ep && emp_wait_fd(ep) >= 0) {
		ev.events = EPOLLIN | EPOLLEXCLUSIVE;   /* frames wake one sleeping set, not all */
		ev.data.u64 = cookie + C_DEV;
		if (R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, emp_wait_fd(ep), &ev) < 0) {
			ev.events = EPOLLIN;
			R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, emp_wait_fd(ep), &ev);
		}
		set->dev_in = 1;
	}
	return 0;
}

static void set_free(struct es_epset *set)
{
	if (set->efd >= 0)
		R_(close)(set->efd);
	pthread_mutex_destroy(&set->lock);
	free(set);
}

static struct es_epreg *reg_find(struct es_epset *set, int fd)
{
	for (struct es_epreg *r = set->regs; r; r = r->next)
		if (r->fd == fd)
			return r;
	return NULL;
}

/* ep_lock and r->s->lock held */
static void reg_unlink(struct es_epreg *r)
{
	struct es_epreg **pp;
	for (pp = &r->set->regs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	for (pp = &r->s->epregs; *pp; pp = &(*pp)->snext)
		if (*pp == r) {
			*pp = r->snext;
			break;
		}
	pthread_mutex_lock(&r->set->lock);
	rq_del(r->set, r);
	pthread_mutex_unlock(&r->set->lock);
	if (r->emulated)
		r->set->nemu--;
	free(r);
}

/* the socket's current readiness as an edge for r (just added, modified or
 * moved onto our lists); ep_lock and s->lock held */
static void reg_kick(struct es_epreg *r)
{
	if (r->emulated && !r->disabled && (atomic_load(&r->s->evmask) & want_of(r)))
		push(r, 1);
}

/* epoll_ctl on an fd that is not a socket of ours (an epoll set of ours inside another included) */
static int ctl_kernel(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = R_(epoll_ctl)(epfd, op, fd, ev);
	struct es_epset *inner;
	if (r == 0 && op == EPOLL_CTL_ADD && (inner = set_get(fd, 0))) {
		/* an epoll set inside another: its ready list must make its fd
		 * readable, so the outer wait sees it */
		pthread_mutex_lock(&ep_lock);
		inner->nested = 1;
		if (set_arm(inner) == 0) {
			if (atomic_load(&inner->nready))
				set_signal(inner);
			else
				set_quiet(inner);    /* a wake left from before it was nested */
		}
		pthread_mutex_unlock(&ep_lock);
	}
	return r;
}

/* EPOLL_CTL_ADD of s (no registration in set yet): on our lists when its
 * state is emulated, else in the kernel set too; 0 or -errno; ep_lock and
 * s->lock held */
static int reg_add(struct es_epset *set, int epfd, struct es_sock *s, int fd, struct epoll_event *ev)
{
	if (emu_state(s) && set_arm(set) < 0)
		return -errno;
	struct es_epreg *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->set = set;
	r->s = s;
	r->fd = fd;
	r->events = ev->events;
	r->data = ev->data;
	r->emulated = emu_state(s);
	if (!r->emulated && R_(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, ev) < 0) {
		int e = errno;
		free(r);
		return -e;
	}
	set->nemu += r->emulated;
	r->next = set->regs;
	set->regs = r;
	r->snext = s->epregs;
	s->epregs = r;
	reg_kick(r);
	return 0;
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (es__tl_in)
		return R_(epoll_ctl)(epfd, op, fd, ev);
	struct es_sock *s = es__sock_cand(fd);   /* a candidate's registration moves with it */
	if (!s)
		return ctl_kernel(epfd, op, fd, ev);
	if (s->state == ES_PENDING) {
		if (s->server && op == EPOLL_CTL_ADD)
			es__settle_begin(fd, s);   /* the OFFER goes; a wait on the set settles it */
		else
			es__settle(fd, s);
		if (!(s = es__sock(fd)))
			return R_(epoll_ctl)(epfd, op, fd, ev);
	}
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev) {
		errno = EFAULT;
		return -1;
	}
	int ret = 0, e = errno;
	pthread_mutex_lock(&ep_lock);
	struct es_epset *set = set_get(epfd, op == EPOLL_CTL_ADD);
	struct es_epreg *r = set ? reg_find(set, fd) : NULL;
	if (!set || (!r && op != EPOLL_CTL_ADD)) {
		pthread_mutex_unlock(&ep_lock);
		return R_(epoll_ctl)(epfd, op, fd, ev);   /* the kernel says why */
	}
	es__sock_lock(s);
	switch (op) {
	case EPOLL_CTL_ADD: {
		int rc = r ? -EEXIST : reg_add(set, epfd, s, fd, ev);
		if (rc < 0)
			e = -rc, ret = -1;
		break;
	}
	case EPOLL_CTL_MOD:
		if (!r->emulated) {
			ret = R_(epoll_ctl)(epfd, op, fd, ev);
			e = errno;
		}
		if (ret == 0) {
			r->events = ev->events;
			r->data = ev->data;
			r->disabled = 0;
			reg_kick(r);
		}
		break;
	case EPOLL_CTL_DEL:
		if (!r->emulated)
			ret = R_(epoll_ctl)(epfd, op, fd, ev), e = errno;
		reg_unlink(r);
		break;
	default:
		e = EINVAL;
		ret = -1;
	}
	es__sock_unlock(s);
	pthread_mutex_unlock(&ep_lock);
	errno = e;
	return ret;
}

/* s's state changed: its registrations move between the kernel set and our
 * lists (or, for a socket that went to the kernel for good, back to the
 * kernel set, and the shim forgets them) */
void es__ep_sock_switched(struct es_sock *s)
{
	if (!s->epregs)
		return;
	pthread_mutex_lock(&ep_lock);
	es__sock_lock(s);
	int final = s->state == ES_CAND;
	struct es_epreg *r = s->epregs, *nx;
	for (; r; r = nx) {
		nx = r->snext;
		int want = !final && emu_state(s);
		struct epoll_event ev = { .events = r->events, .data = r->data };
		if (r->emulated && !want) {
			pthread_mutex_lock(&r->set->lock);
			rq_del(r->set, r);
			pthread_mutex_unlock(&r->set->lock);
			r->emulated = 0;
			r->set->nemu--;
			if (!r->disabled)
				R_(epoll_ctl)(r->set->epfd, EPOLL_CTL_ADD, r->fd, &ev);
		} else if (!r->emulated && want && set_arm(r->set) == 0) {
			R_(epoll_ctl)(r->set->epfd, EPOLL_CTL_DEL, r->fd, NULL);
			r->emulated = 1;
			r->set->nemu++;
		}
		if (final)
			reg_unlink(r);
		else
			reg_kick(r);
	}
	es__sock_unlock(s);
	pthread_mutex_unlock(&ep_lock);
}

void es__ep_sock_gone(struct es_sock *s)
{
	if (!s->epregs)
		return;
	pthread_mutex_lock(&ep_lock);
	es__sock_lock(s);
	while (s->epregs)
		reg_unlink(s->epregs);
	es__sock_unlock(s);
	pthread_mutex_unlock(&ep_lock);
}

void es__epset_close(int fd, void *o)
{
	struct es_epset *set = o;
	pthread_mutex_lock(&ep_lock);
	es__fd_set(fd, NULL);
	while (set->regs) {
		struct es_epreg *r = set->regs;
		struct es_sock *s = r->s;
		es__sock_lock(s);
		reg_unlink(r);
		es__sock_unlock(s);
	}
	set->dead = 1;
	int last = set->refs == 0;
	pthread_mutex_unlock(&ep_lock);
	if (last)
		set_free(set);
}

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
		if (s)
			es__settle(st->fd[i], s);   /* negotiated: its readiness comes next round */
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
			rq_del(set, r);
			continue;
		}
		if (es__st_undecided(s)) {
			if (s->state == ES_CONNECTING && !s->connected) {
				rq_del(set, r);
			} else if (st->n < SETTLE_MAX) {
				st->fd[st->n++] = r->fd; /* the caller negotiates it (unlocked) */
				rq_del(set, r);
			}
			continue;
		}
		uint32_t ev = es__ready_for(s, want_of(r));
		if (!ev || ((r->events & EPOLLET) && !r->pending)) {
			rq_del(set, r);          /* no longer ready (a read took it), or no new edge */
			continue;
		}
		out[k].events = ev;
		out[k].data = r->data;
		k++;
		r->pending = 0;
		rq_del(set, r);
		if (r->events & EPOLLONESHOT)
			r->disabled = 1;
		else if (!(r->events & EPOLLET))
			rq_add(set, r);          /* level-triggered: stays while ready, behind the others */
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
		if (!internal(d))
			evs[m++] = evs[j];
		else if (d == cookie + C_LIVE)
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
	unsigned turns;
	int armed;                       /* between epw_arm and epw_disarm: no look */
	int64_t klook_next;              /* the spin's next look at the kernel fds */
};

/* EMP sockets ready, or (every SPIN_KLOOK_NS of the spin) the set's kernel
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
	if (a->nk > 0 || atomic_load(&a->set->nready) > 0)
		return 1;
	if (a->armed || (++a->turns & 7))
		return 0;
	int64_t now = es__now_ns();
	if (now < a->klook_next)
		return 0;
	a->klook_next = now + SPIN_KLOOK_NS;
	int k = R_(epoll_wait)(a->set->epfd, a->evs, a->max, 0), m = 0;
	for (int j = 0; j < k; j++)
		if (!internal(a->evs[j].data.u64))
			a->evs[m++] = a->evs[j];
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
	int k = a->mask ? R_(epoll_pwait)(a->set->epfd, a->evs, a->max, ms, a->mask)
			: R_(epoll_wait)(a->set->epfd, a->evs, a->max, ms);
	if (k < 0)
		return errno == EINTR ? -EINTR : -errno;
	set_drain(a->set);
	a->nk = filter(a->evs, k);
	a->set->klook_ns = es__now_ns();
	a->set->kskip = 0;
	return a->nk;
}

static int ewait(struct es_epset *set, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	emp_endpoint_t *ep = es__g.ep;
	int64_t dl = timeout < 0 ? -1 : es__now_ns() + timeout * 1000000ll;
	for (;;) {
		struct settles st = { 0 };
		int n;
		es__held_flush();            /* the round's coalesced writes are posted */
		if (ep)
			emp_progress(ep);        /* deferred replies leave, arrived frames are taken */
		if (!set->dev_in && ep) {
			pthread_mutex_lock(&ep_lock);
			set_arm(set);
			pthread_mutex_unlock(&ep_lock);
		}
		n = 0;
		int64_t now = es__now_ns();
		if (++set->kskip >= KLOOK_EVERY || now - set->klook_ns >= KLOOK_NS) {
			/* the kernel fds get a look too, now and then (fairness: the
			 * ready list alone could keep answering for ever) */
			int k = R_(epoll_wait)(set->epfd, evs, max, 0);
			set->kskip = 0;
			set->klook_ns = now;
			if (k > 0)
				n = filter(evs, k);
			if (!set->nested)
				set_drain(set);
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
		if (!ep) {
			struct epw a = { set, evs, max, mask, 0, 0, 0, 0 };
			int r = epw_sleep(&a, left);
			if (r < 0) {
				errno = -r;
				return -1;
			}
			if (r > 0 || atomic_load(&set->nready) == 0)
				return r;
			continue;
		}
		struct epw a = { set, evs, max, mask, 0, 0, 0, es__now_ns() + SPIN_KLOOK_NS };
		struct emp_waitfor w = { .done = epw_done, .arm = epw_arm, .sleep = epw_sleep,
					 .disarm = epw_disarm, .arg = &a, .timeout_ns = left };
		int r = emp_wait_for(ep, &w);
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
		if (n || r == 0)
			return n;
		if (dl >= 0 && es__now_ns() >= dl)
			return 0;
	}
}

static int epoll_any(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	struct es_epset *set = NULL;
	int64_t dl = timeout < 0 ? -1 : es__now_ns() + timeout * 1000000ll;
again:;
	int raw = 0;
	if (!es__tl_in && max > 0) {
		pthread_mutex_lock(&ep_lock);
		set = set_get(epfd, 0);
		if (set && (!set->armed || set->dead))
			set = NULL;              /* kernel fds only: the kernel's answer as it is */
		if (set)
			set->refs++;
		else
			raw = 1, atomic_fetch_add(&raw_sleepers[epfd & 63], 1);   /* before set_arm looks (ep_lock) */
		pthread_mutex_unlock(&ep_lock);
	}
	if (!set) {
		int k = mask ? R_(epoll_pwait)(epfd, evs, max, timeout, mask) : R_(epoll_wait)(epfd, evs, max, timeout);
		if (raw)
			atomic_fetch_sub(&raw_sleepers[epfd & 63], 1);
		if (k <= 0 || es__tl_in || !__atomic_load_n(&cookie, __ATOMIC_ACQUIRE))
			return k;
		/* another thread armed the set (an EMP socket added) while this one
		 * slept in the kernel: our entries never reach the application; with
		 * only those, wait again on the set's ready list */
		int m = filter(evs, k);
		if (m)
			return m;
		if (timeout > 0)
			timeout = dl > es__now_ns() ? (int)((dl - es__now_ns() + 999999) / 1000000) : 0;
		goto again;
	}
	int e = errno;
	es__reap_hold();   /* no lock held here: closing connections this wait finished go at its end */
	int n = set->gen == es__g.gen ? ewait(set, evs, max, timeout, mask) : -2;
	es__reap_release();
	if (n >= 0)
		set_quiet(set);              /* nested and nothing left: its outer sets stop seeing it */
	if (n == -2) {   /* inherited across fork: the parent's lists; the kernel's answer only */
		n = mask ? R_(epoll_pwait)(epfd, evs, max, timeout, mask) : R_(epoll_wait)(epfd, evs, max, timeout);
		if (n > 0)
			n = filter(evs, n);
	} else if (n >= 0) {
		errno = e;
	}
	if (n > 0)
		es__defer_on();   /* an event loop: its replies leave together at its next wait */
	pthread_mutex_lock(&ep_lock);
	int last = --set->refs == 0 && set->dead;
	pthread_mutex_unlock(&ep_lock);
	if (last)
		set_free(set);
	return n;
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	return epoll_any(epfd, evs, max, timeout, NULL);
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	return epoll_any(epfd, evs, max, timeout, mask);
}

static void child_fix(int fd, void *o, void *arg)
{
	(void)fd; (void)arg;
	struct es_epset *set = o;
	if (set->kind == ES_KIND_EPSET)
		pthread_mutex_init(&set->lock, NULL);   /* a parent thread may have held it */
}

/* fork.c: inherited sets stay the parent's (gen), but the child may still
 * close them or touch their ready lists through its sockets' registrations */
void es__ep_atfork_child(void)
{
	es__fd_foreach(child_fix, NULL);
}

int epoll_create(int size)
{
	return R_(epoll_create)(size);
}

int epoll_create1(int flags)
{
	return R_(epoll_create1)(flags);
}
