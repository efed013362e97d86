/* close.c: ending EMP streams: teardown, lingering (zombie) connections until both FINs are through, exit flush. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"

static void free_conn(struct es_conn *c)
{
	if (c->leak)
		return;   /* the engine may still own a buffer */
	free(c->rbuf); free(c->rreq); free(c->rlen); free(c->roff);
	free(c->sbuf); free(c->sreq); free(c->slen); free(c->sdone); free(c->sfin);
	free(c);
}

static void req_done(struct es_conn *c, emp_req_t *q, int persistent)
{
	struct emp_status st;
	if (!q)
		return;
	int r = emp_test(c->ep, q, &st);
	if (r == 0 && emp_cancel(c->ep, q) == 0)
		r = emp_wait(c->ep, q, &st, 20000000);
	if (r == 0) {
		c->leak = 1;
		return;
	}
	if (persistent)
		emp_req_free(c->ep, q);
}

/* registry out, requests cancelled, memory freed; lock held, released here */
static void teardown_locked(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (c->slot >= 0) {
		atomic_store(&es__reg[c->slot], NULL);
		while (atomic_load(&es__hook_active))
			sched_yield();
	}
	es__tl_in++;
	for (uint64_t q = c->sh; q < c->sp; q++) {
		struct emp_status st;
		unsigned i = q % c->W;
		if (!c->sdone[i] && emp_wait(c->ep, c->sreq[i], &st, 0) == 0)
			c->leak = 1;
	}
	for (unsigned i = 0; i < c->R; i++)
		req_done(c, c->rreq[i], 1);
	for (int i = 0; i < NCTRL; i++)
		req_done(c, c->creq[i], 1);
	if (c->cbusy) {
		struct emp_status st;
		if (emp_wait(c->ep, c->csend, &st, 0) == 0)
			c->leak = 1;
		else
			c->cbusy = 0;
	}
	/* the send slots' descriptors go back to the engine's pool (those still
	 * in flight, -EBUSY, stay with the leaked connection) */
	for (unsigned i = 0; c->sreq && i < c->W; i++)
		if (c->sreq[i])
			emp_req_free(c->ep, c->sreq[i]);
	if (c->csend)
		emp_req_free(c->ep, c->csend);
	es__tl_in--;
	s->c = NULL;
	pthread_mutex_unlock(&s->lock);
	free_conn(c);
}

static struct es_conn *zlist;
static pthread_mutex_t zlock = PTHREAD_MUTEX_INITIALIZER;

static int zombie_done(struct es_conn *c, int64_t now)
{
	if (c->err || now >= c->zdl)
		return 1;
	return c->sh == c->st && c->fin_done && !c->cbusy && c->rfin &&
	       now - c->rfin_ns >= 50000000 && now - c->last_ctrl_ns >= 50000000;
}

/* tear down finished zombies; wait up to wait_ns for the others */
static void reap(int64_t wait_ns)
{
	int64_t end = es__now_ns() + wait_ns;
	for (;;) {
		struct es_conn *done = NULL, **pp;
		int left = 0;
		pthread_mutex_lock(&zlock);
		for (pp = &zlist; *pp;) {
			struct es_conn *c = *pp;
			struct es_sock *s = c->s;
			int d;
			es__sock_lock(s);
			es__process(s);
			d = zombie_done(c, es__now_ns());
			es__sock_unlock(s);
			if (d) {
				*pp = c->znext;
				c->znext = done;
				done = c;
			} else {
				pp = &c->znext;
				left++;
			}
		}
		pthread_mutex_unlock(&zlock);
		while (done) {
			struct es_conn *c = done;
			struct es_sock *s = c->s;
			done = c->znext;
			es__dbg("conn %u: closed%s", c->lid, c->err ? " (with error)" : "");
			int zfd = s->kfd;
			es__sock_lock(s);
			teardown_locked(s);
			R_(close)(zfd);
			if (s->orphan)
				free(s);
		}
		if (!left || es__now_ns() >= end)
			return;
		usleep(1000);
	}
}

/* close(): the connection lingers, holding a private dup of the kernel socket,
 * until our data and FIN are through and the peer has answered with its FIN. */
static void zombify(struct es_sock *s)
{
	struct es_conn *c = s->c;
	es__sock_lock(s);
	int64_t now = es__now_ns();
	c->closing = 1;
	c->shut_rd = 1;
	c->fin_want = 1;
	c->close_want = !c->rfin && !c->peer_closed;
	c->zdl = now + 10000000000ll;
	if (!c->last_ctrl_ns)
		c->last_ctrl_ns = now;
	int zfd = R_(fcntl)(s->kfd, F_DUPFD_CLOEXEC, 3);
	if (zfd >= 0)
		s->kfd = zfd;
	else
		c->zdl = now;
	es__process(s);
	es__sock_unlock(s);
	pthread_mutex_lock(&zlock);
	c->znext = zlist;
	zlist = c;
	pthread_mutex_unlock(&zlock);
}

/* Returns 1 when the connection lingers: the linger list then owns s (an
 * orphan s is freed by reap(), possibly before this returns). */
int es__conn_destroy(struct es_sock *s, int flushit)
{
	struct es_conn *c = s->c;
	if (!c)
		return 0;
	if (c->gen != es__g.gen) {   /* inherited across fork: the parent's */
		s->c = NULL;
		return 0;
	}
	if (flushit && c->peer_known && !c->err && !c->kdead) {
		zombify(s);
		reap(0);
		return 1;
	}
	es__sock_lock(s);
	teardown_locked(s);
	return 0;
}

void es__conn_atfork_child(void)
{
	zlist = NULL;
	pthread_mutex_init(&zlock, NULL);
	pthread_mutex_init(&es__reg_lock, NULL);
	for (int i = 0; i < ES_MAX_CONNS; i++)
		atomic_store(&es__reg[i], NULL);
	atomic_store(&es__reg_n, 0);
	atomic_store(&es__hook_active, 0);
}

static void flush_one(int fd, void *o, void *arg)
{
	(void)arg; (void)fd;
	struct es_sock *s = o;
	if (s->kind != ES_KIND_SOCK || s->state != ES_EMP || !s->c || s->linger0 ||
	    s->c->gen != es__g.gen || s->c->closing || s->c->err || s->c->kdead)
		return;
	zombify(s);
}

/* at exit: every open EMP connection is closed as by close(), bounded */
void es__flush_all(void)
{
	es__fd_foreach(flush_one, NULL);
	reap(2000000000ll);
}
