/* negqueue.c: accepted sockets an epoll wait negotiates step by step (es__negs_step): their list, and the times they must be looked at again (the OFFER's resends, the bound). */
/*
 * Nothing here sleeps or makes a system call: an epoll wait (epwait.c) reads
 * the earliest time (es__negq_due, one atomic load), sleeps no longer than
 * that, and then puts the sockets that are due on their sets' ready lists
 * (es__negq_tick), where a wait takes them and steps them. Entries are
 * (fd, ident), found again as the liveness harvest finds its sockets (the
 * socket may be closed or decided meanwhile: its entry goes at the next tick).
 */
#include <stdint.h>
#include <stdlib.h>

#include "es.h"

struct negq_ent { int fd; uint32_t id; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_negq = &mu;
static struct negq_ent *ents;
static int nents, cap;
static _Atomic int64_t due = INT64_MAX;

static void lower_due(int64_t t)
{
	int64_t d = atomic_load(&due);
	while (t < d && !atomic_compare_exchange_weak(&due, &d, t))
		;
}

int64_t es__negq_due(void)
{
	return atomic_load_explicit(&due, memory_order_relaxed);
}

void es__negq_later(int fd, struct es_sock *s, int64_t until)
{
	atomic_store(&s->ng.sv.due, until);
	pthread_mutex_lock(&mu);
	if (s->ng.sv.queued != es__g.gen + 1) {   /* not in this process's list */
		if (nents == cap) {
			int nc = cap ? cap * 2 : 64;
			struct negq_ent *ne = realloc(ents, (size_t)nc * sizeof *ne);
			if (!ne) {
				/* no room: looked at by its bound anyway, when a read or a
				 * poll settles it, or when the client speaks */
				pthread_mutex_unlock(&mu);
				return;
			}
			ents = ne;
			cap = nc;
		}
		ents[nents++] = (struct negq_ent){ fd, s->ident };
		s->ng.sv.queued = es__g.gen + 1;
	}
	lower_due(until);
	pthread_mutex_unlock(&mu);
}

void es__negq_tick(int64_t now)
{
	if (now < es__negq_due() || pthread_mutex_trylock(&mu))
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
		if (!s || s->state != ES_PENDING || !s->server) {
			if (s) {
				s->ng.sv.queued = 0;
				es__sock_ungrab(s);
			}
			ents[i] = ents[--nents];   /* closed or decided */
			continue;
		}
		int64_t d = atomic_load(&s->ng.sv.due);
		if (d <= now) {
			/* its next step sets the time after it */
			atomic_store(&s->ng.sv.due, INT64_MAX);
			es__sock_update(s, 1);
		} else if (d < next) {
			next = d;
		}
		es__sock_ungrab(s);
		i++;
	}
	lower_due(next);
	pthread_mutex_unlock(&mu);
}

/* fork.c: the entries name the parent's negotiations (the child settles
 * those it uses with a blocking settle, or queues them again: the process
 * generation in queued tells) */
void es__negq_atfork_child(void)
{
	nents = 0;
	atomic_store(&due, INT64_MAX);
}
