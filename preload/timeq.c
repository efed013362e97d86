/* timeq.c: sockets that must be looked at again by a time, with no event to wake anyone then: an accepted socket negotiated step by step (its OFFER's resends, its bound), an EMP connection in its grace for the peer's EMP FIN. */
/*
 * Nothing here sleeps or makes a system call: a wait (epoll_wait, poll) reads
 * the earliest time (es__tq_due, one atomic load), sleeps no longer than
 * that, and then looks at the sockets that are due (es__tq_tick): a
 * negotiation goes on its sets' ready lists, where a wait takes it and steps
 * it (es__negs_step); a grace that ran out is decided (es__kernel_grace_end).
 * Entries are (fd, ident), found again as the liveness harvest finds its
 * sockets (the socket may be closed or decided meanwhile: its entry goes at
 * the next tick).
 */
#include <stdint.h>
#include <stdlib.h>

#include "es.h"

struct tq_ent { int fd; uint32_t id; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_tq = &mu;
static struct tq_ent *ents;
static int nents, cap;
static _Atomic int64_t due = INT64_MAX;

static void lower_due(int64_t t)
{
	int64_t d = atomic_load(&due);
	while (t < d && !atomic_compare_exchange_weak(&due, &d, t))
		;
}

int64_t es__tq_due(void)
{
	return atomic_load_explicit(&due, memory_order_relaxed);
}

void es__tq_later(struct es_sock *s, int64_t until)
{
	atomic_store(&s->tq_due, until);
	pthread_mutex_lock(&mu);
	if (s->tq_gen != es__g.gen + 1) {   /* not in this process's list */
		if (nents == cap) {
			int nc = cap ? cap * 2 : 64;
			struct tq_ent *ne = realloc(ents, (size_t)nc * sizeof *ne);
			if (!ne) {
				/* no room: a negotiation is looked at by its bound anyway
				 * when a read or a poll settles it, or when the client
				 * speaks; a grace when its reader looks */
				pthread_mutex_unlock(&mu);
				return;
			}
			ents = ne;
			cap = nc;
		}
		ents[nents++] = (struct tq_ent){ s->kfd, s->ident };
		s->tq_gen = es__g.gen + 1;
	}
	lower_due(until);
	pthread_mutex_unlock(&mu);
}

/* s is due (its lock held): 1 to keep its entry */
static int due_now(struct es_sock *s, int64_t now)
{
	if (s->state == ES_PENDING) {   /* a negotiation stepped by a wait (es__negs_step, es__negc_step) */
		/* its next step sets the time after it */
		atomic_store(&s->tq_due, INT64_MAX);
		es__sock_update(s, 1);
		return 1;
	}
	if (s->state == ES_EMP && es__kernel_grace_end(s, now))
		return 1;            /* still in its grace (its time moved) */
	return 0;
}

int64_t es__tq_bound(int64_t now, int64_t left, int *cut)
{
	if (es__tq_due() <= now)
		es__tq_tick(now);
	int64_t d = es__tq_due();
	int c = 0;
	if (d != INT64_MAX) {
		int64_t p = d > now ? d - now : 1000000;   /* past: another thread is ticking */
		if (left < 0 || p < left) {
			left = p;
			c = 1;
		}
	}
	if (cut)
		*cut = c;
	return left;
}

void es__tq_tick(int64_t now)
{
	if (now < es__tq_due() || pthread_mutex_trylock(&mu))
		return;              /* another thread ticks */
	int64_t next = INT64_MAX;
	atomic_store(&due, INT64_MAX);   /* a step meanwhile lowers it again */
	for (int i = 0; i < nents; ) {
		int busy = 0;
		struct es_sock *s = es__sock_grab(ents[i].fd, ents[i].id, &busy);
		if (busy) {
			if (now + 1000000 < next)
				next = now + 1000000;   /* its owner is at it: soon again */
			i++;
			continue;
		}
		int keep = s && (s->state == ES_PENDING || s->state == ES_EMP);
		if (keep) {
			int64_t d = atomic_load(&s->tq_due);
			if (d <= now) {
				keep = due_now(s, now);
				d = atomic_load(&s->tq_due);
			}
			if (keep && d > now && d < next)
				next = d;
		}
		if (!keep) {
			if (s) {
				s->tq_gen = 0;
				es__sock_ungrab(s);
			}
			ents[i] = ents[--nents];   /* closed or decided */
			continue;
		}
		es__sock_ungrab(s);
		i++;
	}
	lower_due(next);
	pthread_mutex_unlock(&mu);
}

/* fork.c: the entries name the parent's sockets (the child settles the
 * negotiations it uses with a blocking settle, or queues them again: the
 * process generation in tq_gen tells; its EMP connections are FOREIGN) */
void es__tq_atfork_child(void)
{
	nents = 0;
	atomic_store(&due, INT64_MAX);
}
