/* fork.c: the shim's one pthread_atfork: the process-wide locks in their order, what is held across fork(2), and the child's fix-ups in a stated order. */
/*
 * Lock order (outer first: a thread holding one lock takes only locks below
 * it; es__fork_locks[] below lists the process-wide ones in this order):
 *
 *   ep_lock        epoll.c      sets, registrations, s->epregs      -> s->lock, live_mu
 *   neg_lock       negclient.c  known servers, responder registry   -> s->lock
 *   zlock          linger.c     the linger (zombie) list            -> s->lock
 *   s->lock        per socket   its state and stream                -> tq mu, set->lock, libemp
 *   tq mu          timeq.c      sockets due for a look at a time     -> set->lock (and s->lock
 *                                                                      by trylock only)
 *   set->lock      per epoll set  its ready list
 *   es__g.lock     init.c       settings, opening the endpoint      -> libemp (emp_open)
 *   then short ones, none held while another shim lock is taken but for
 *   lid_lock -> rand_mu: settle_mu (negotiate.c), tab_lock (fdtable.c),
 *   live_mu (ready.c), lid_lock (connsetup.c), guard_mu (neglisten.c),
 *   zwlock (linger.c), rand_mu (rand.c), resolve_lock (init.c), reg_mu
 *   (hold.c: -> a thread's held-list mutex, by trylock; s->lock -> that mutex)
 *   libemp's own locks come after all of these (the shim calls libemp with
 *   s->lock or es__g.lock held; libemp calls back into the shim only through
 *   the completion hook, which takes s->lock with trylock and set->lock).
 *
 * fork(2), from any thread (pthread_atfork, so daemon() and other libc-internal
 * forks are covered too):
 *   prepare  takes, in table order, the locks whose data the child goes on
 *            using: ep_lock, tab_lock, lid_lock, guard_mu. Every other lock is
 *            left alone (a thread may hold it across the fork) because the
 *            child rebuilds or drops what it guards.
 *   parent   lets them go, in reverse.
 *   child    re-initialises every lock in the table (those held at prepare and
 *            those a parent thread may have held), then, in this order:
 *            settings and endpoint (init.c: no endpoint, generation + 1),
 *            sockets (fdtable.c: per-socket locks; EMP connections become
 *            FOREIGN), lingering connections (linger.c: the parent's),
 *            epoll sets (epoll.c: per-set locks), settles in progress
 *            (negotiate.c: their threads stayed in the parent), sockets
 *            due at a time (timeq.c: the list is dropped), the OFFER
 *            responder (negclient.c: it stayed in the parent), empstat's
 *            connection rows (connsetup.c: the child publishes its own),
 *            randomness (rand.c: the parent's unread bytes are dropped),
 *            held writes (hold.c: the parent's threads' lists are dropped).
 *
 * es__g.lock is not taken at prepare: it is held across emp_open, which takes
 * libemp's statistics lock, and libemp's own fork handler (libemp/stats.c:
 * libemp is a library of its own, used without the shim, and the shim may
 * only call its public API) is registered at the first emp_open, after ours,
 * so glibc runs its prepare before ours; taking es__g.lock after it would
 * invert the order. The child re-initialises es__g.lock and opens an
 * endpoint of its own on demand, so nothing it guards is used half-made.
 */
#include "es.h"

const struct es_fork_lock es__fork_locks[] = {
	{ "ep_lock", &es__lk_ep, 1 },
	{ "neg_lock", &es__lk_neg, 0 },
	{ "zlock", &es__lk_zombies, 0 },
	{ "tq mu", &es__lk_tq, 0 },
	{ "es__g.lock", &es__lk_global, 0 },
	{ "settle_mu", &es__lk_settle, 0 },
	{ "tab_lock", &es__lk_fdtab, 1 },
	{ "live_mu", &es__lk_live, 0 },
	{ "lid_lock", &es__lk_lids, 1 },
	{ "guard_mu", &es__lk_guard, 1 },
	{ "zwlock", &es__lk_zwait, 0 },
	{ "rand_mu", &es__lk_rand, 0 },
	{ "resolve_lock", &es__lk_resolve, 0 },
	{ "held reg_mu", &es__lk_hold, 0 },
};
const int es__fork_nlocks = (int)(sizeof es__fork_locks / sizeof es__fork_locks[0]);

static void prepare(void)
{
	for (int i = 0; i < es__fork_nlocks; i++)
		if (es__fork_locks[i].at_prepare)
			pthread_mutex_lock(*es__fork_locks[i].mu);
}

static void parent(void)
{
	for (int i = es__fork_nlocks - 1; i >= 0; i--)
		if (es__fork_locks[i].at_prepare)
			pthread_mutex_unlock(*es__fork_locks[i].mu);
}

static void child(void)
{
	for (int i = 0; i < es__fork_nlocks; i++)
		pthread_mutex_init(*es__fork_locks[i].mu, NULL);
	es__init_atfork_child();
	es__fd_atfork_child();
	es__conn_atfork_child();
	es__ep_atfork_child();
	es__settle_atfork_child();
	es__tq_atfork_child();
	es__negc_atfork_child();
	es__conn_rows_atfork_child();
	es__rand_atfork_child();
	es__hold_atfork_child();
}

__attribute__((constructor)) static void fork_init(void)
{
	pthread_atfork(prepare, parent, child);
}
