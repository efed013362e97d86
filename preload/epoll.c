/* epoll.c: epoll_create/ctl: EMP sockets on in-memory ready lists beside the application's real kernel epoll set (the waiting half: epwait.c). */
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

#include "epoll_int.h"
#include "sys.h"

pthread_mutex_t es__ep_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_ep = &es__ep_lock;   /* held across fork (fork.c) */
uint64_t es__ep_cookie;
atomic_int es__ep_raw_sleepers[64];       /* by epfd % 64: threads in the kernel's epoll_wait on a set with no EMP socket yet */

int es__ep_internal(uint64_t data) { return data - es__ep_cookie < 4; }

static int emu_state(struct es_sock *s)
{
	return s->kind == ES_KIND_SOCK && (es__st_ours(s) || s->state == ES_CONNECTING ||
					  es__st_stepped(s));
}

uint32_t es__ep_want_of(const struct es_epreg *r)
{
	/* a socket still to negotiate is taken by the wait whatever the interest */
	int neg = es__st_undecided(r->s);
	return (r->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI)) | EPOLLERR | EPOLLHUP |
	       (neg ? EPOLLOUT : 0);
}

/* ---- the ready list (set->lock) ---- */

void es__ep_rq_add(struct es_epset *set, struct es_epreg *r)
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

void es__ep_rq_del(struct es_epset *set, struct es_epreg *r)
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

void es__ep_set_drain(struct es_epset *set)
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
void es__ep_set_quiet(struct es_epset *set)
{
	if (!set->nested || atomic_load(&set->nready))
		return;
	es__ep_set_drain(set);
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
	es__ep_rq_add(set, r);
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
		if (!set->nested || (ev & es__ep_want_of(r)))
			continue;
		pthread_mutex_lock(&set->lock);
		es__ep_rq_del(set, r);
		pthread_mutex_unlock(&set->lock);
		es__ep_set_quiet(set);
	}
}

void es__ep_ready(struct es_sock *s, unsigned ev, int edge)
{
	for (struct es_epreg *r = s->epregs; r; r = r->snext)
		if (r->emulated && !r->disabled && (ev & es__ep_want_of(r)))
			push(r, 1);
	(void)edge;   /* new bits or an edge: either is an edge for EPOLLET */
}

/* ---- sets ---- */

struct es_epset *es__ep_set_get(int epfd, int create)
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

/* a device fd into a kernel set: frames wake one sleeping set, not all
 * (EPOLLEXCLUSIVE where the kernel has it) */
static void dev_add(int epfd, int fd, int which)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = es__ep_cookie + which };
	if (R_(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		ev.events = EPOLLIN;
		R_(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &ev);
	}
}

/* our entries into the kernel set, once (DEV again when the engine came later) */
int es__ep_set_arm(struct es_epset *set)
{
	if (!es__ep_cookie) {
		uint64_t c = 0;
		while (getrandom(&c, sizeof c, 0) != sizeof c || c > UINT64_MAX - 3)
			;
		es__ep_cookie = c;
	}
	struct epoll_event ev = { .events = EPOLLIN };
	if (!set->armed) {
		set->efd = emp__sys_fd_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
		ev.data.u64 = es__ep_cookie + C_WAKE;
		if (set->efd < 0 || R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, set->efd, &ev) < 0) {
			int e = errno;
			if (set->efd >= 0)
				R_(close)(set->efd);
			set->efd = -1;
			errno = e;
			return -1;
		}
		int lfd = es__live_fd();
		ev.data.u64 = es__ep_cookie + C_LIVE;
		if (lfd >= 0)
			R_(epoll_ctl)(set->epfd, EPOLL_CTL_ADD, lfd, &ev);
		set->armed = 1;
		/* a thread may already sleep in the kernel on this set (epoll_any,
		 * unarmed): wake it, so that it waits again on the ready list */
		if (!set->nested && atomic_load(&es__ep_raw_sleepers[set->epfd & 63]))
			set_signal(set);
	}
	emp_endpoint_t *ep = __atomic_load_n(&es__g.ep, __ATOMIC_ACQUIRE);
	if (!set->dev_in && ep && emp_wait_fd(ep) >= 0) {
		dev_add(set->epfd, emp_wait_fd(ep), C_DEV);
		if (emp_wait_fd2(ep) >= 0)
			dev_add(set->epfd, emp_wait_fd2(ep), C_DEV2);
		set->dev_in = 1;
	}
	return 0;
}

void es__ep_set_free(struct es_epset *set)
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

/* es__ep_lock and r->s->lock held */
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
	es__ep_rq_del(r->set, r);
	pthread_mutex_unlock(&r->set->lock);
	if (r->emulated)
		r->set->nemu--;
	free(r);
}

/* the socket's current readiness as an edge for r (just added, modified or
 * moved onto our lists); es__ep_lock and s->lock held */
static void reg_kick(struct es_epreg *r)
{
	if (r->emulated && !r->disabled && (atomic_load(&r->s->evmask) & es__ep_want_of(r)))
		push(r, 1);
}

/* epoll_ctl on an fd that is not a socket of ours (an epoll set of ours inside another included) */
static int ctl_kernel(int epfd, int op, int fd, struct epoll_event *ev)
{
	int r = R_(epoll_ctl)(epfd, op, fd, ev);
	struct es_epset *inner;
	if (r == 0 && op == EPOLL_CTL_ADD && (inner = es__ep_set_get(fd, 0))) {
		/* an epoll set inside another: its ready list must make its fd
		 * readable, so the outer wait sees it */
		pthread_mutex_lock(&es__ep_lock);
		inner->nested = 1;
		if (es__ep_set_arm(inner) == 0) {
			if (atomic_load(&inner->nready))
				set_signal(inner);
			else
				es__ep_set_quiet(inner);    /* a wake left from before it was nested */
		}
		pthread_mutex_unlock(&es__ep_lock);
	}
	return r;
}

/* EPOLL_CTL_ADD of s (no registration in set yet): on our lists when its
 * state is emulated, else in the kernel set too; 0 or -errno; es__ep_lock and
 * s->lock held */
static int reg_add(struct es_epset *set, int epfd, struct es_sock *s, int fd, struct epoll_event *ev)
{
	if (emu_state(s) && es__ep_set_arm(set) < 0)
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
	pthread_mutex_lock(&es__ep_lock);
	struct es_epset *set = es__ep_set_get(epfd, op == EPOLL_CTL_ADD);
	struct es_epreg *r = set ? reg_find(set, fd) : NULL;
	if (!set || (!r && op != EPOLL_CTL_ADD)) {
		pthread_mutex_unlock(&es__ep_lock);
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
	pthread_mutex_unlock(&es__ep_lock);
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
	pthread_mutex_lock(&es__ep_lock);
	es__sock_lock(s);
	int final = s->state == ES_CAND;
	struct es_epreg *r = s->epregs, *nx;
	for (; r; r = nx) {
		nx = r->snext;
		int want = !final && emu_state(s);
		struct epoll_event ev = { .events = r->events, .data = r->data };
		if (r->emulated && !want) {
			pthread_mutex_lock(&r->set->lock);
			es__ep_rq_del(r->set, r);
			pthread_mutex_unlock(&r->set->lock);
			r->emulated = 0;
			r->set->nemu--;
			if (!r->disabled)
				R_(epoll_ctl)(r->set->epfd, EPOLL_CTL_ADD, r->fd, &ev);
		} else if (!r->emulated && want && es__ep_set_arm(r->set) == 0) {
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
	pthread_mutex_unlock(&es__ep_lock);
}

void es__ep_sock_gone(struct es_sock *s)
{
	if (!s->epregs)
		return;
	pthread_mutex_lock(&es__ep_lock);
	es__sock_lock(s);
	while (s->epregs)
		reg_unlink(s->epregs);
	es__sock_unlock(s);
	pthread_mutex_unlock(&es__ep_lock);
}

void es__epset_close(int fd, void *o)
{
	struct es_epset *set = o;
	pthread_mutex_lock(&es__ep_lock);
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
	pthread_mutex_unlock(&es__ep_lock);
	if (last)
		es__ep_set_free(set);
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
