/* hold.c: write coalescing: a connection's last, partly filled send slot held back while its thread is still writing (TCP_CORK, MSG_MORE, an event-loop round), posted at the thread's next wait, the uncork, or the progress thread's bound. */
/*
 * A server that answers with two writes (nginx: the header with writev, the
 * body with sendfile, between TCP_CORK and its removal) would send two EMP
 * messages per response, each with its own frame, completion and ack. While
 * the writing thread may write again soon, the slot it appended to is not
 * posted: es__send lists the socket on the thread's held list (one mutex
 * that only the progress thread's bound ever contends for) and the next
 * write appends to the same slot. The slot leaves:
 *   - when it is full, or the connection sends FIN (es__flush ignores the hold);
 *   - at the uncork (TCP_CORK cleared, TCP_NODELAY set) or a write without
 *     MSG_MORE outside an event-loop round;
 *   - at the thread's next wait (epoll_wait, poll, select, a blocking call:
 *     es__held_flush, before the wait drives the engine, so the round's
 *     replies still leave in one system call);
 *   - EMP_HOLD_NS after it was held: at the end of the thread's next data
 *     call (a loop busy between its waits), else from the progress thread's
 *     tick (a thread that does not come back to its loop), and at exec/exit.
 * Sending earlier than a kernel would is always allowed (TCP promises no
 * segment boundaries), so each of these is only a matter of efficiency.
 */
#include <stdlib.h>

#include "conn.h"

#define HOLD_MAX 64                  /* sockets per thread; more are posted at once */
#define EMP_HOLD_NS 200000ll         /* the progress thread posts what was held longer */

struct held {
	pthread_mutex_t mu;
	int n;
	int64_t t0;                      /* when the oldest entry was held */
	struct es_sock *s[HOLD_MAX];     /* each with a reference (s->users) */
	struct held *next;               /* the registry */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_hold = &reg_mu;
static struct held *reg;
static atomic_int nheld;             /* entries over all threads */
static __thread struct held *tl_held __attribute__((tls_model("initial-exec")));
static pthread_key_t held_key;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;

static void thread_gone(void *p);

static void key_init(void)
{
	pthread_key_create(&held_key, thread_gone);
}

static struct held *mine(void)
{
	if (tl_held)
		return tl_held;
	pthread_once(&held_once, key_init);
	struct held *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	pthread_mutex_init(&h->mu, NULL);
	pthread_mutex_lock(&reg_mu);
	h->next = reg;
	reg = h;
	pthread_mutex_unlock(&reg_mu);
	pthread_setspecific(held_key, h);
	tl_held = h;
	return h;
}

/* post what s (locked) held back; unlocked, the list's reference dropped */
static void post_locked(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (c && c->listed) {
		c->listed = 0;
		c->hold_tail = 0;
		es__flush(c);
	}
	es__sock_unlock(s);
	es__sock_put(s);
}

/* take h's entries (h->mu held by the caller); with busy_skip only those
 * whose sockets are free now, returned locked: the others stay listed, their
 * thread is inside them */
static int take(struct held *h, struct es_sock **out, int busy_skip)
{
	int n = 0, k = 0;
	for (int i = 0; i < h->n; i++) {
		if (!busy_skip || !pthread_mutex_trylock(&h->s[i]->lock))
			out[n++] = h->s[i];
		else
			h->s[k++] = h->s[i];
	}
	h->n = k;
	if (!k)
		h->t0 = 0;
	atomic_fetch_sub(&nheld, n);
	return n;
}

/* post what take gave (locked: already holding their locks) */
static void post_all(struct es_sock **v, int n, int locked)
{
	for (int i = 0; i < n; i++) {
		if (!locked)
			es__sock_lock(v[i]);
		post_locked(v[i]);
	}
}

/* s->lock held; s's tail slot is staged with room and c->hold_tail set */
void es__hold(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (c->listed)
		return;
	struct held *h = mine();
	if (h) {
		pthread_mutex_lock(&h->mu);
		if (h->n < HOLD_MAX) {
			atomic_fetch_add(&s->users, 1);
			h->s[h->n++] = s;
			if (!h->t0)
				h->t0 = es__now_ns();
			atomic_fetch_add(&nheld, 1);
			c->listed = 1;
		}
		pthread_mutex_unlock(&h->mu);
	}
	if (!c->listed) {                  /* no room to remember it: it leaves now */
		c->hold_tail = 0;
		es__flush(c);
	}
}

/* s->lock held; what s held was just posted by its own thread (the uncork, a
 * bulk write's tail): s leaves the thread's list now rather than at its next
 * wait, so the progress thread's bound finds nothing held (and ticks slowly
 * instead of every millisecond). 1: the list's reference is the caller's to
 * drop, with es__sock_put after the unlock. */
int es__unhold(struct es_sock *s)
{
	struct held *h = tl_held;
	if (!s->c || !s->c->listed || !h)
		return 0;
	int found = 0;
	pthread_mutex_lock(&h->mu);
	for (int i = 0; i < h->n && !found; i++)
		if (h->s[i] == s) {
			h->s[i] = h->s[--h->n];
			found = 1;
		}
	if (found) {
		if (!h->n)
			h->t0 = 0;
		atomic_fetch_sub(&nheld, 1);
		s->c->listed = 0;
	}
	pthread_mutex_unlock(&h->mu);
	return found;
}

/* the calling thread is about to wait: what it held leaves with this round */
void es__held_flush(void)
{
	struct held *h = tl_held;
	if (!h || !h->n)
		return;
	struct es_sock *v[HOLD_MAX];
	pthread_mutex_lock(&h->mu);
	int n = take(h, v, 0);
	pthread_mutex_unlock(&h->mu);
	post_all(v, n, 0);
}

/* The calling thread is back in the shim, holding no lock (the end of a data
 * call): what it has held for EMP_HOLD_NS or longer leaves now, from here. A
 * loop busy for longer than that between its waits (node under a connection
 * per request: a round of 50 connections' handlers) left half its replies to
 * the progress thread's tick, a wake-up and a send on another CPU each. */
void es__held_flush_aged(void)
{
	struct held *h = tl_held;
	if (!h || !__atomic_load_n(&h->n, __ATOMIC_RELAXED))
		return;
	int64_t t0 = __atomic_load_n(&h->t0, __ATOMIC_RELAXED);
	if (t0 && es__now_ns() - t0 >= EMP_HOLD_NS)
		es__held_flush();
}

/* every thread's held slots older than min_age_ns (0: all); how many are
 * still held after. With busy_skip (the progress thread's tick, libemp's hold
 * hook) a socket whose lock is taken is left for a later look: its thread is
 * writing to it or reading from it now, and the bound is for a thread gone
 * elsewhere, not for one that will post at its wait anyway (nginx's workers
 * serving 1 MiB files met the progress thread on that lock: a futex wait and
 * a context switch each time). exec and exit post everything. */
int es__held_flush_old(int64_t min_age_ns, int busy_skip)
{
	if (!atomic_load(&nheld))
		return 0;
	for (int round = 0; round < 1024; round++) {
		struct es_sock *v[HOLD_MAX];
		int n = 0;
		int64_t now = es__now_ns();
		pthread_mutex_lock(&reg_mu);
		for (struct held *h = reg; h && !n; h = h->next) {
			if (!h->n || pthread_mutex_trylock(&h->mu))
				continue;    /* busy: its owner is adding or posting it now */
			if (h->n && now - h->t0 >= min_age_ns)
				n = take(h, v, busy_skip);
			pthread_mutex_unlock(&h->mu);
		}
		pthread_mutex_unlock(&reg_mu);
		if (!n)
			break;
		post_all(v, n, busy_skip);
	}
	return atomic_load(&nheld);
}

static int hold_hook(void *arg)
{
	(void)arg;
	return es__held_flush_old(EMP_HOLD_NS, 1);
}

void es__hold_attach(emp_endpoint_t *ep)
{
	emp_set_hold_hook(ep, hold_hook, NULL);
}

static void thread_gone(void *p)
{
	struct held *h = p;
	tl_held = h;
	es__held_flush();
	tl_held = NULL;
	pthread_mutex_lock(&reg_mu);
	for (struct held **pp = &reg; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	pthread_mutex_unlock(&reg_mu);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

/* fork: the child has one thread and none of the parent's connections (they
 * became FOREIGN, their references reset): nothing is held */
void es__hold_atfork_child(void)
{
	reg = NULL;
	atomic_store(&nheld, 0);
	if (tl_held) {
		pthread_mutex_init(&tl_held->mu, NULL);
		tl_held->n = 0;
		tl_held->t0 = 0;
		tl_held->next = NULL;
		reg = tl_held;
	}
}
