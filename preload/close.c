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


static void unown(emp_req_t *q)
{
	if (q)
		emp_req_set_user(q, NULL);
}

/* ---- tombs ----
 * A connection torn down without its peer's BYE (an error, a dead kernel
 * connection, a linger that ran out) may still get messages: the peer's engine
 * retries what it sent for a few seconds. A message for a tag nobody receives
 * is not only lost: the engine matches a peer's messages in order within a
 * window, so it would hold up every later message from that peer, all its
 * connections. A tomb keeps one small receive per tag (data, control) that
 * takes such messages (acked, dropped: they complete as too long) for
 * ES_TOMB_NS, then goes. Two engine descriptors each, abnormal ends only. */
#define ES_TOMB_NS 15000000000ll
struct es_tomb {
	int kind;                        /* ES_KIND_TOMB, like es_conn's first field */
	emp_endpoint_t *ep;
	emp_req_t *rq[2];
	uint8_t buf[2][16];
	int64_t until;
	struct es_tomb *next;
};
static struct es_tomb *tombs;
static pthread_mutex_t tomb_lock = PTHREAD_MUTEX_INITIALIZER;

static void tomb_make(struct es_conn *c)
{
	struct es_tomb *t = calloc(1, sizeof *t);
	if (!t)
		return;
	t->kind = ES_KIND_TOMB;
	t->ep = c->ep;
	t->until = es__now_ns() + ES_TOMB_NS;
	uint32_t tag[2] = { c->lid, c->lid | CTRL_TAG };
	for (int i = 0; i < 2; i++) {
		struct iovec v = { t->buf[i], sizeof t->buf[i] };
		if (emp_recv_init(c->ep, c->peer, tag[i], &v, 1, &t->rq[i]) == 0) {
			emp_req_set_user(t->rq[i], t);
			if (emp_start(c->ep, t->rq[i]) < 0) {
				emp_req_free(c->ep, t->rq[i]);
				t->rq[i] = NULL;
			}
		}
	}
	pthread_mutex_lock(&tomb_lock);
	t->next = tombs;
	tombs = t;
	pthread_mutex_unlock(&tomb_lock);
}

void es__tomb_done(void *tomb, emp_req_t *req)
{
	struct es_tomb *t = tomb;
	struct emp_status st;
	if (emp_reap(t->ep, req, &st) == 1)
		emp_start(t->ep, req);   /* the next late message */
}

/* tombs whose time is up go (all of them at exit) */
static void tombs_expire(int all)
{
	int64_t now = es__now_ns();
	struct es_tomb *gone = NULL, **pp;
	pthread_mutex_lock(&tomb_lock);
	for (pp = &tombs; *pp;) {
		struct es_tomb *t = *pp;
		if (all || now >= t->until) {
			*pp = t->next;
			t->next = gone;
			gone = t;
		} else {
			pp = &t->next;
		}
	}
	pthread_mutex_unlock(&tomb_lock);
	if (!gone)
		return;
	for (struct es_tomb *t = gone; t; t = t->next)
		for (int i = 0; i < 2; i++)
			if (t->rq[i])
				emp_req_set_user(t->rq[i], NULL);
	es__hooks_quiesce();
	while (gone) {
		struct es_tomb *t = gone;
		gone = t->next;
		int leak = 0;
		for (int i = 0; i < 2; i++) {
			struct emp_status st;
			if (!t->rq[i])
				continue;
			int r = emp_reap(t->ep, t->rq[i], &st);
			if (r == 0 && emp_cancel(t->ep, t->rq[i]) == 0)
				r = emp_wait(t->ep, t->rq[i], &st, 20000000);
			if (r == 0)
				leak = 1;               /* the engine still has it */
			else
				emp_req_free(t->ep, t->rq[i]);
		}
		if (!leak)
			free(t);
	}
}

/* hooks let go, requests cancelled, memory freed; lock held, released here */
static void teardown_locked(struct es_sock *s)
{
	struct es_conn *c = s->c;
	/* no completion hook may find c from here on: its requests stop naming
	 * it, and a hook that read one before finishes first */
	for (unsigned i = 0; c->rreq && i < c->R; i++)
		unown(c->rreq[i]);
	for (int i = 0; i < NCTRL; i++)
		unown(c->creq[i]);
	for (unsigned i = 0; c->sreq && i < c->W; i++)
		unown(c->sreq[i]);
	unown(c->csend);
	es__hooks_quiesce();
	es__live_del(s);
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
	if (c->rposted && c->peer_known && !c->bye_seen && c->gen == es__g.gen)
		tomb_make(c);            /* the peer may still be sending */
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
	return c->bye_done && c->bye_seen;   /* both said their last word */
}

/* tear down finished zombies; wait up to wait_ns for the others */
static void reap(int64_t wait_ns)
{
	tombs_expire(0);
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
			es__dbg("conn %u: closed%s", c->lid, c->err ? " (with error)" : !c->bye_seen ? " (no BYE from the peer)" : "");
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
	tombs = NULL;              /* the parent's engine holds their receives */
	pthread_mutex_init(&tomb_lock, NULL);
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
