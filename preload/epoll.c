/* epoll.c: epoll_create/ctl/wait/pwait with EMP sockets inside real kernel epoll sets. */
/*
 * The application's epoll fd stays a real kernel epoll. Kernel fds (and
 * tracked sockets that are still plain kernel sockets) are registered in it
 * directly. For EMP sockets (and non-blocking connects being negotiated) each
 * application epoll set gets one private inner epoll (iep), registered in the
 * application's set with a random 64-bit cookie as its data. The inner set
 * holds, per registration, the socket's eventfd (written on every stream state
 * change; never drained, always EPOLLET, so every change is one edge in every
 * set that holds it) and the socket's kernel fd (EOF/RST = peer died).
 * epoll_wait: harvest edges from the inner set, compute each registration's
 * readiness from stream state (level-triggered: every call; EPOLLET: only after
 * an edge; EPOLLONESHOT: disarmed until EPOLL_CTL_MOD), merge with the kernel
 * events, and drop the cookie. The inner set is readable only while an edge is
 * unharvested, so an application blocked in the real epoll_wait (or in an
 * outer epoll holding this one) wakes exactly when an EMP socket changed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "es.h"

struct es_epset;
struct es_epreg {
	struct es_epset *set;
	struct es_sock *s;
	int fd;
	uint32_t events;
	epoll_data_t data;
	int emulated, pending, disabled;
	int xfd;                          /* dup of the socket's eventfd if needed */
	struct es_epreg *snext;           /* in s->epregs */
	struct es_epreg *next;            /* in set->regs */
};

struct es_epset {
	int kind;                         /* ES_KIND_EPSET */
	unsigned gen;                     /* inherited across fork: the inner set is shared, hands off */
	int epfd, iep;
	struct es_epreg *regs;
};

static pthread_mutex_t ep_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t cookie;

static int emu_state(struct es_sock *s)
{
	return s->kind == ES_KIND_SOCK && (s->state == ES_CONNECTING || s->state == ES_EMP ||
					  s->state == ES_FAILED || s->state == ES_FOREIGN);
}

static struct es_epset *set_get(int epfd, int create)
{
	struct es_epset *set = es__fd_get(epfd);
	if (set && set->kind == ES_KIND_EPSET)
		return set;
	if (set || !create)
		return NULL;
	if (!cookie)
		cookie = es__random64() | 1;   /* getrandom: rand() would shift the application's sequence */
	set = calloc(1, sizeof *set);
	if (!set)
		return NULL;
	set->kind = ES_KIND_EPSET;
	set->gen = es__g.gen;
	set->epfd = epfd;
	set->iep = R_(epoll_create1)(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = cookie };
	if (set->iep < 0 || R_(epoll_ctl)(epfd, EPOLL_CTL_ADD, set->iep, &ev) < 0) {
		int e = errno;
		if (set->iep >= 0)
			R_(close)(set->iep);
		free(set);
		errno = e;
		return NULL;
	}
	es__fd_set(epfd, set);
	return set;
}

static struct es_epreg *reg_find(struct es_epset *set, int fd)
{
	for (struct es_epreg *r = set->regs; r; r = r->next)
		if (r->fd == fd)
			return r;
	return NULL;
}

/* put r's watch fds into the inner set for the socket's current state */
static int emu_add(struct es_epreg *r)
{
	struct es_sock *s = r->s;
	struct epoll_event ev;
	if (s->state == ES_EMP && s->nfd >= 0) {
		ev.events = EPOLLIN | EPOLLET;
		ev.data.u64 = (uintptr_t)r;
		int nfd = s->nfd;
		if (R_(epoll_ctl)(r->set->iep, EPOLL_CTL_ADD, nfd, &ev) < 0) {
			if (errno != EEXIST)
				return -1;
			r->xfd = R_(fcntl)(nfd, F_DUPFD_CLOEXEC, 0);
			if (r->xfd < 0 || R_(epoll_ctl)(r->set->iep, EPOLL_CTL_ADD, r->xfd, &ev) < 0)
				return -1;
		}
	}
	if (s->state == ES_EMP || s->state == ES_CONNECTING) {
		ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET | (s->state == ES_CONNECTING ? EPOLLOUT : 0);
		ev.data.u64 = (uintptr_t)r | 1;
		R_(epoll_ctl)(r->set->iep, EPOLL_CTL_ADD, r->fd, &ev);
	}
	r->emulated = 1;
	r->pending = 1;
	return 0;
}

static void emu_del(struct es_epreg *r)
{
	struct es_sock *s = r->s;
	if (r->set->gen != es__g.gen) {   /* forked child: the parent still uses this inner set */
		if (r->xfd >= 0)
			R_(close)(r->xfd);
		r->xfd = -1;
		r->emulated = 0;
		return;
	}
	if (r->xfd >= 0) {
		R_(epoll_ctl)(r->set->iep, EPOLL_CTL_DEL, r->xfd, NULL);
		R_(close)(r->xfd);
		r->xfd = -1;
	} else if (s->nfd >= 0) {
		R_(epoll_ctl)(r->set->iep, EPOLL_CTL_DEL, s->nfd, NULL);
	}
	R_(epoll_ctl)(r->set->iep, EPOLL_CTL_DEL, r->fd, NULL);
	r->emulated = 0;
}

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
	r->s->nepregs--;
	free(r);
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (es__tl_in)
		return R_(epoll_ctl)(epfd, op, fd, ev);
	struct es_sock *s = es__sock(fd);
	if (!s)
		return R_(epoll_ctl)(epfd, op, fd, ev);
	if (s->state == ES_PENDING) {
		es__settle(fd, s, 1);
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
	switch (op) {
	case EPOLL_CTL_ADD:
		if (r) {
			e = EEXIST;
			ret = -1;
			break;
		}
		r = calloc(1, sizeof *r);
		if (!r) {
			e = ENOMEM;
			ret = -1;
			break;
		}
		r->set = set;
		r->s = s;
		r->fd = fd;
		r->xfd = -1;
		r->events = ev->events;
		r->data = ev->data;
		if (emu_state(s)) {
			if (emu_add(r) < 0) {
				e = errno;
				emu_del(r);
				free(r);
				ret = -1;
				break;
			}
		} else if ((ret = R_(epoll_ctl)(epfd, op, fd, ev)) < 0) {
			e = errno;
			free(r);
			break;
		}
		r->next = set->regs;
		set->regs = r;
		r->snext = s->epregs;
		s->epregs = r;
		s->nepregs++;
		break;
	case EPOLL_CTL_MOD:
		if (!r->emulated) {
			ret = R_(epoll_ctl)(epfd, op, fd, ev);
			e = errno;
		}
		if (ret == 0) {
			r->events = ev->events;
			r->data = ev->data;
			r->disabled = 0;
			r->pending = 1;
		}
		break;
	case EPOLL_CTL_DEL:
		if (r->emulated)
			emu_del(r);
		else
			ret = R_(epoll_ctl)(epfd, op, fd, ev), e = errno;
		reg_unlink(r);
		r = NULL;   /* freed */
		break;
	default:
		e = EINVAL;
		ret = -1;
	}
	int kick = ret == 0 && r && r->emulated;   /* r may go once ep_lock is released */
	pthread_mutex_unlock(&ep_lock);
	if (kick) {
		uint64_t one = 1;
		if (s->nfd >= 0)
			R_(write)(s->nfd, &one, 8);   /* make the new state an edge */
	}
	errno = e;
	return ret;
}

/* state of s changed: move its registrations between direct and emulated */
void es__ep_sock_switched(struct es_sock *s)
{
	pthread_mutex_lock(&ep_lock);
	int final = s->state == ES_CAND;
	struct es_epreg *r = s->epregs, *nx;
	for (; r; r = nx) {
		nx = r->snext;
		int want = !final && emu_state(s);
		struct epoll_event ev = { .events = r->events, .data = r->data };
		if (r->emulated) {
			emu_del(r);
			if (want)
				emu_add(r);
			else if (!r->disabled)
				R_(epoll_ctl)(r->set->epfd, EPOLL_CTL_ADD, r->fd, &ev);
		} else if (want) {
			R_(epoll_ctl)(r->set->epfd, EPOLL_CTL_DEL, r->fd, NULL);
			emu_add(r);
		}
		if (final)
			reg_unlink(r);
	}
	pthread_mutex_unlock(&ep_lock);
	if (!final && s->nfd >= 0) {
		uint64_t one = 1;
		R_(write)(s->nfd, &one, 8);
	}
}

void es__ep_sock_gone(struct es_sock *s)
{
	if (!s->epregs)
		return;
	pthread_mutex_lock(&ep_lock);
	while (s->epregs) {
		struct es_epreg *r = s->epregs;
		if (r->emulated)
			emu_del(r);
		reg_unlink(r);
	}
	pthread_mutex_unlock(&ep_lock);
}

void es__epset_close(int fd, void *o)
{
	struct es_epset *set = o;
	pthread_mutex_lock(&ep_lock);
	es__fd_set(fd, NULL);
	while (set->regs) {
		struct es_epreg *r = set->regs;
		if (r->emulated)
			emu_del(r);
		reg_unlink(r);
	}
	R_(close)(set->iep);
	free(set);
	pthread_mutex_unlock(&ep_lock);
}

/* ep_lock held: harvest edges, then report ready registrations. *settle gets an
 * fd whose non-blocking connect finished (to negotiate without the lock). */
static int collect(struct es_epset *set, struct epoll_event *out, int max, int *settle)
{
	struct epoll_event h[64];
	int n;
	while ((n = R_(epoll_wait)(set->iep, h, 64, 0)) > 0) {
		for (int i = 0; i < n; i++) {
			struct es_epreg *r = (void *)(uintptr_t)(h[i].data.u64 & ~(uint64_t)1);
			r->pending = 1;
			if ((h[i].data.u64 & 1) && r->s->state == ES_EMP) {
				es__sock_lock(r->s);
				es__kernel_check(r->s);
				es__sock_unlock(r->s);
			}
		}
		if (n < 64)
			break;
	}
	int k = 0;
	for (struct es_epreg *r = set->regs; r && k < max; r = r->next) {
		if (!r->emulated || r->disabled)
			continue;
		struct es_sock *s = r->s;
		unsigned ev;
		if (s->state == ES_CONNECTING) {
			if (r->pending && *settle < 0)
				*settle = r->fd;
			continue;
		} else if (s->state == ES_EMP) {
			es__sock_lock(s);
			es__process(s);
			ev = es__events(s);
			es__sock_unlock(s);
		} else {
			ev = EPOLLERR | EPOLLHUP | EPOLLIN | EPOLLOUT;
		}
		uint32_t want = (r->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI)) |
				EPOLLERR | EPOLLHUP;
		uint32_t got = ev & want;
		int report = got && (!(r->events & EPOLLET) || r->pending);
		r->pending = 0;
		if (!report)
			continue;
		out[k].events = got;
		out[k].data = r->data;
		k++;
		if (r->events & EPOLLONESHOT)
			r->disabled = 1;
	}
	return k;
}

static int ewait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	struct es_epset *set = es__tl_in ? NULL : set_get(epfd, 0);
	if (!set || max <= 0)
		return mask ? R_(epoll_pwait)(epfd, evs, max, timeout, mask)
			    : R_(epoll_wait)(epfd, evs, max, timeout);
	int64_t dl = timeout < 0 ? -1 : es__now_ns() + timeout * 1000000ll;
	int spun = timeout == 0;
	for (;;) {
		int settle = -1, n;
		unsigned seq0 = atomic_load(&es__changes);
		pthread_mutex_lock(&ep_lock);
		n = collect(set, evs, max, &settle);
		pthread_mutex_unlock(&ep_lock);
		if (!n && settle < 0 && !spun) {
			/* latency path: drive the engine here for a bounded time rather
			 * than wait for the progress thread to wake us */
			spun = 1;
			if (es__spin(seq0))
				continue;
		}
		if (settle >= 0) {
			struct es_sock *s = es__sock(settle);
			if (s)
				es__settle(settle, s, 0);
			continue;
		}
		if (n == max)
			return n;
		int left = n ? 0 : dl < 0 ? -1 : (int)((dl - es__now_ns() + 999999) / 1000000);
		if (left < -1)
			left = 0;
		if (left)
			emp_progress_resume(es__g.ep);   /* frames while we sleep: the progress thread's */
		int k = mask ? R_(epoll_pwait)(epfd, evs + n, max - n, left, mask)
			     : R_(epoll_wait)(epfd, evs + n, max - n, left);
		if (k < 0)
			return n ? n : -1;
		int m = 0, woke = 0;
		for (int j = 0; j < k; j++) {
			if (evs[n + j].data.u64 == cookie)
				woke = 1;
			else
				evs[n + m++] = evs[n + j];
		}
		n += m;
		if (woke && n == m && n < max) {
			pthread_mutex_lock(&ep_lock);
			n += collect(set, evs + n, max - n, &settle);
			pthread_mutex_unlock(&ep_lock);
			if (settle >= 0 && !n)
				continue;
		}
		if (n > 0)
			return n;
		if (dl >= 0 && es__now_ns() >= dl)
			return 0;
	}
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	int r = ewait(epfd, evs, max, timeout, NULL);
	es__spin_end();
	return r;
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout, const sigset_t *mask)
{
	int r = ewait(epfd, evs, max, timeout, mask);
	es__spin_end();
	return r;
}

static void fork_prepare(void) { pthread_mutex_lock(&ep_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&ep_lock); }
static void fork_child(void) { pthread_mutex_init(&ep_lock, NULL); }

__attribute__((constructor)) static void ep_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int epoll_create(int size)
{
	return R_(epoll_create)(size);
}

int epoll_create1(int flags)
{
	return R_(epoll_create1)(flags);
}
