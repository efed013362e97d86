/* linger.c: ending EMP streams: teardown, lingering (zombie) connections until both sides' last message is through, SO_LINGER, the exit flush (then the packet sockets go to a child: handoff.c). */
/*
 * close() returns at once (unless SO_LINGER asks it to wait for our FIN); the
 * connection lingers as a zombie holding a private dup of the kernel socket
 * while our data and FIN go out and the peer answers with its FIN (our FIN
 * carries ES_CLOSE, or CT_CLOSE follows a FIN sent before, so the peer's side
 * sends its FIN without its application). Neither FIN is followed by
 * anything (ES_LAST: after CLOSE the peer needs no credits, after the peer's
 * FIN none go back), so the exchange is two messages; a side whose FIN could
 * not carry LAST (a control message was on its way, or its FIN went out
 * before the close) ends with BYE (stream_engine.c, conn.h). A zombie whose last message is
 * acknowledged and whose peer has sent its last is torn down: no message can
 * be on its way to a receive we cancel.
 * A peer whose kernel connection ended (its process died, or its zombie is
 * gone) or an error ends the wait too. The reaper thread (below) tears
 * zombies down when they are through, without waiting for another close().
 *
 * Send buffers are freed only when the engine has returned every send
 * posted from them: a connection given up with sends in flight (an abandoned
 * negotiation, SO_LINGER 0, an error) lingers, detached from its socket,
 * until the engine returns them (at most its retry bound).
 *
 * Waiting (SO_LINGER, the exit flush) drives the engine and sleeps in one
 * poll on the device and the zombies' kernel sockets: it costs the round
 * trips of the FIN/BYE exchange, not sleeps.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "conn.h"
#include "sys.h"

static void free_conn(struct es_conn *c)
{
	es__conn_row_free(c);
	es__conn_lid_release(c->lid);
	if (c->leak)
		return;   /* the engine may still own a buffer */
	es__ring_put(c->rbuf); free(c->rreq); free(c->rlen); free(c->roff);
	es__ring_put(c->sbuf); free(c->sreq); free(c->slen); free(c->sdone); free(c->sfin);
	free(c->smap); free(c->sfree);
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

/* hooks let go, requests cancelled, memory freed; lock held, released here */
/* set at exit (es__flush_all): other threads may still be inside calls on
 * the connections it closes */
static int exiting;
int es__exiting(void) { return __atomic_load_n(&exiting, __ATOMIC_ACQUIRE); }

static void teardown_locked(struct es_sock *s)
{
	struct es_conn *c = s->c;
	es__unlend(c);               /* a reader's buffers never outlive its call */
	c->rd_active = 0;
	/* no completion hook may find c from here on: its requests stop naming
	 * it, and a hook that read one before finishes first */
	for (unsigned i = 0; c->rreq && i < c->rx_slots; i++)
		unown(c->rreq[i]);
	for (int i = 0; i < NCTRL; i++)
		unown(c->creq[i]);
	for (unsigned i = 0; c->sreq && i < c->tx_slots; i++)
		unown(c->sreq[i]);
	unown(c->csend);
	es__hooks_quiesce();
	es__live_del(s);
	es__tl_in++;
	for (uint64_t q = c->tx_done; q < c->tx_posted; q++) {
		struct emp_status st;
		if (!c->sdone[q % c->tx_slots] && emp_wait(c->ep, sreq_of(c, q), &st, 0) == 0)
			c->leak = 1;
	}
	emp_cancel_many(c->ep, c->rreq, (int)c->rx_slots);    /* one look at the engine for all */
	emp_cancel_many(c->ep, c->creq, NCTRL);
	for (unsigned i = 0; i < c->rx_slots; i++)
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
	for (unsigned i = 0; c->sreq && i < c->tx_slots; i++)
		if (c->sreq[i])
			emp_req_free(c->ep, c->sreq[i]);
	if (c->csend)
		emp_req_free(c->ep, c->csend);
	if (c->held)
		emp_peer_release(c->ep, c->peer);
	es__tl_in--;
	if (c->forged)
		es__dbg("conn %u: %u messages without its key were dropped", c->lid, c->forged);
	s->c = NULL;
	pthread_mutex_unlock(&s->lock);
	free_conn(c);
}

static struct es_conn *zlist;
static pthread_mutex_t zlock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_zombies = &zlock;

static int sends_idle(const struct es_conn *c)
{
	return c->tx_done == c->tx_posted && !c->cbusy;
}

static int zombie_done(struct es_conn *c, int64_t now)
{
	if (!sends_idle(c))
		return 0;          /* the engine still reads a send buffer */
	if (c->dying)
		return now >= c->zdl;
	if (c->err || c->kdead || now >= c->zdl)
		return 1;
	return c->rfin && c->fin_done && c->peer_quiet && (c->fin_last || c->bye_done);
}

/* one pass: tear down finished zombies; returns how many are left and, in
 * p[0..*np), the kernel sockets worth waiting on; kernel: look at those
 * sockets too (a system call each: only when the caller waits) */
static int reap_pass(struct pollfd *p, int *np, int max, int kernel, int64_t *next)
{
	struct es_conn *done = NULL, **pp;
	int left = 0;
	*np = 0;
	*next = INT64_MAX;
	pthread_mutex_lock(&zlock);
	for (pp = &zlist; *pp;) {
		struct es_conn *c = *pp;
		struct es_sock *s = c->s;
		es__sock_lock(s);
		es__process(s);
		/* a kernel FIN whose EMP FIN has not come yet starts a grace:
		 * its socket stays readable, so it is not polled, and the grace
		 * is waited out asleep (1 ms looks), not in a yield loop (eight
		 * processes whose peers had died spun that way for 0.5 s each
		 * at exit, taking both CPUs from the next test) */
		if (kernel && s->kfd >= 0 && !c->kdead) {
			if (c->kgrace)
				es__kernel_grace_end(s, es__now_ns());
			else
				es__kernel_check(s, 0);
		}
		int d = zombie_done(c, es__now_ns());
		if (!d && s->kfd >= 0 && !c->kdead && !c->kgrace && *np < max)
			p[(*np)++] = (struct pollfd){ s->kfd, POLLIN | POLLRDHUP, 0 };
		es__sock_unlock(s);
		if (d) {
			*pp = c->znext;
			c->znext = done;
			done = c;
		} else {
			pp = &c->znext;
			/* at exit an aborted one (a negotiation given up, an
			 * SO_LINGER 0 close) is not waited for: its sends are
			 * moot and its receives would land in a process that
			 * is ending (git clone waited out a REJECTed early
			 * write's retransmissions, 2 s); it is left as it is */
			if (!(__atomic_load_n(&exiting, __ATOMIC_ACQUIRE) && c->dying))
				left++;
			if (c->zdl < *next)
				*next = c->zdl;
		}
	}
	pthread_mutex_unlock(&zlock);
	while (done) {
		struct es_conn *c = done;
		struct es_sock *s = c->s;
		done = c->znext;
		if (exiting && !s->orphan && atomic_load(&s->users) > 1)
			continue;    /* exit() while another thread is inside a call on it: its exchange is through, its memory stays for that call */
		es__dbg("conn %u: closed%s", c->lid, c->err ? " (with error)" : "");
		int zfd = s->kfd;
		es__sock_lock(s);
		teardown_locked(s);
		if (zfd >= 0)
			R_(close)(zfd);
		if (s->orphan)
			free(s);
	}
	return left;
}

#define REAP_FDS 64

/* threads waiting in reap_until: a closing connection that changed wakes them */
struct zwaiter { struct es_wake *wk; struct zwaiter *next; };
static struct zwaiter *zwaiters;
static pthread_mutex_t zwlock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_zwait = &zwlock;

/* ---- the reaper: a thread that tears lingering connections down when they
 * are through, so that an idle process (no close() to come, no exit) lets go
 * of their kernel sockets, buffers and peer holds on time. It drives nothing
 * (the application's waits and the progress thread do): it sleeps in one poll
 * on its eventfd (written when a closing connection becomes ready to go) and
 * the zombies' kernel sockets (a peer that died), at most until the earliest
 * zombie deadline, and at most 1 s while any is left. */
static int reaper_efd = -1;
static pthread_t reaper_tid;
static pthread_mutex_t reaper_mu = PTHREAD_MUTEX_INITIALIZER;

static void *reaper(void *arg)
{
	(void)arg;
	struct pollfd p[REAP_FDS + 1];
	pthread_setname_np(pthread_self(), "emp-reaper");
	for (;;) {
		int np;
		int64_t next;
		int left = reap_pass(p, &np, REAP_FDS, 1, &next);
		int ms = -1;
		if (left) {
			int64_t now = es__now_ns(), w = next > now ? next - now : 0;
			ms = w > 1000000000ll ? 1000 : (int)((w + 999999) / 1000000);
		}
		p[np] = (struct pollfd){ reaper_efd, POLLIN, 0 };
		if (R_(poll)(p, (nfds_t)np + 1, ms) > 0 && p[np].revents) {
			uint64_t v;
			while (R_(read)(reaper_efd, &v, sizeof v) < 0 && errno == EINTR)
				;
		}
	}
	return NULL;
}

/* tests only (tests/shim, virtual time): no reaper thread; the test reaps
 * with es__zombies_reap when its clock says so */
int es__reaper_off;

/* at the first lingering connection of the process */
static void reaper_start(void)
{
	/* at exit the exiting thread reaps them itself (es__flush_all: reap_until):
	 * a thread started for that cost a short-lived client 0.2-0.3 ms */
	if (__atomic_load_n(&reaper_efd, __ATOMIC_ACQUIRE) >= 0 || es__reaper_off ||
	    __atomic_load_n(&exiting, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&reaper_mu);
	if (reaper_efd < 0) {
		int efd = emp__sys_fd_high(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);   /* the application's signals go to its threads */
		if (efd >= 0 && pthread_create(&reaper_tid, NULL, reaper, NULL) == 0) {
			pthread_detach(reaper_tid);
			__atomic_store_n(&reaper_efd, efd, __ATOMIC_RELEASE);
		} else if (efd >= 0) {
			R_(close)(efd);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	pthread_mutex_unlock(&reaper_mu);
}

static void reaper_wake(void)
{
	int efd = __atomic_load_n(&reaper_efd, __ATOMIC_ACQUIRE);
	uint64_t one = 1;
	if (efd >= 0)
		(void)!R_(write)(efd, &one, sizeof one);
}

/* Inline reaping: a thread inside one of the shim's own waits or settles
 * (es__reap_hold .. es__reap_release; it holds no shim lock at the release)
 * that finds a closing connection through tears it down itself at the
 * release instead of waking the reaper, which cost a context switch, an
 * eventfd write and read, a poll and a look at the kernel socket per
 * connection on each side. Anywhere else (the progress thread, a hook run
 * inside a data call) the reaper is woken as before. */
static __thread int tl_hold __attribute__((tls_model("initial-exec")));
static __thread int tl_due __attribute__((tls_model("initial-exec")));

void es__reap_hold(void)
{
	tl_hold++;
}

/* The hold stays on through the passes: a teardown's own engine work (its
 * cancels drive the device) finishes other closing connections, which the
 * next pass takes; a node server with a connection per request woke the
 * reaper about once every two requests that way. */
void es__reap_release(void)
{
	if (tl_hold > 1 || !tl_due) {
		tl_hold--;
		return;
	}
	struct pollfd p[1];
	int np, e = errno;
	int64_t next;
	for (int i = 0; tl_due && i < 4; i++) {
		tl_due = 0;
		reap_pass(p, &np, 0, 0, &next);
	}
	tl_hold--;
	if (tl_due) {          /* still more: the reaper's */
		tl_due = 0;
		reaper_wake();
	}
	errno = e;
}

/* a closing connection moved (s->lock held): waiters in reap_until look
 * again, and the reaper (or this thread, see above) when it is through */
void es__zombie_changed(struct es_conn *c)
{
	if (zombie_done(c, es__now_ns())) {
		if (tl_hold)
			tl_due = 1;
		else
			reaper_wake();
	}
	if (!__atomic_load_n(&zwaiters, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&zwlock);
	for (struct zwaiter *z = zwaiters; z; z = z->next)
		es__wake(z->wk);
	pthread_mutex_unlock(&zwlock);
}

/* Tear down finished zombies; until the deadline (0: none) wait for the
 * others, or for stop(arg): the thread drives the engine (libemp's wait on
 * the device and the zombies' kernel sockets), woken when one of them moves. */
static void reap_until(int64_t deadline, int (*stop)(void *), void *arg)
{
	struct pollfd p[REAP_FDS + 3];
	int np;
	struct es_wake wk = { .efd = es__tl_efd() };
	struct zwaiter me = { &wk, NULL };
	int listed = 0;
	es__reap_hold();     /* what its passes finish goes at the end, not to the reaper */
	for (;;) {
		es__wake_reset(&wk);
		int64_t next;
		int left = reap_pass(p, &np, REAP_FDS, deadline != 0, &next);
		if (!left || (stop && stop(arg)))
			break;
		int64_t now = es__now_ns();
		if (!deadline || now >= deadline || !es__g.ep)
			break;
		if (!listed) {
			pthread_mutex_lock(&zwlock);
			me.next = zwaiters;
			__atomic_store_n(&zwaiters, &me, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&zwlock);
			listed = 1;
			continue;            /* look once more now that changes wake us */
		}
		int64_t wait = deadline - now;
		if (left > np && wait > 1000000)
			wait = 1000000;      /* sockets not watched: look again soon */
		p[np] = (struct pollfd){ wk.efd, POLLIN, 0 };
		es__wait_fds(&wk, p, np + 1, wait, NULL);
	}
	if (listed) {
		pthread_mutex_lock(&zwlock);
		struct zwaiter **pp = &zwaiters;
		while (*pp && *pp != &me)
			pp = &(*pp)->next;
		if (*pp)
			*pp = me.next;
		pthread_mutex_unlock(&zwlock);
	}
	es__wake_reset(&wk);
	es__reap_release();
}

/* close(): the connection lingers, holding a private dup of the kernel socket,
 * until the close exchange is through (see the top). */
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
	int zfd = s->kfd_own ? s->kfd : emp__sys_dup_high(s->kfd);   /* the shim's already */
	s->kfd_own = 0;
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
	reaper_start();
}

/* A connection given up (an abandoned negotiation, SO_LINGER 0, an error):
 * it waits on the zombie list, detached from s (which its caller frees),
 * until the engine has returned its sends and, for ES_GRACE_NS, with its
 * receives still posted: a message the peer sent before it learned that we
 * gave up lands there (and is dropped) instead of being retried against no
 * receive, which would end the engine's session with that peer process and
 * every other connection in it. */
#define ES_GRACE_NS 1000000000ll
static void detach(struct es_sock *s)
{
	struct es_conn *c = s->c;
	struct es_sock *z = calloc(1, sizeof *z);
	if (!z) {
		c->leak = 1;   /* no memory to wait in: the buffers stay allocated */
		es__sock_lock(s);
		teardown_locked(s);
		return;
	}
	pthread_mutex_init(&z->lock, NULL);
	z->kfd = z->udp = -1;
	z->orphan = 1;
	z->gen = s->gen;
	es__sock_lock(s);
	c->s = z;
	c->closing = 1;
	c->dying = 1;
	c->zdl = es__now_ns() + ES_GRACE_NS;
	if (!c->err)
		c->err = ECONNABORTED;
	z->c = c;
	s->c = NULL;
	es__sock_unlock(s);
	es__hooks_quiesce();         /* a hook that found c under s is done before s goes */
	pthread_mutex_lock(&zlock);
	c->znext = zlist;
	zlist = c;
	pthread_mutex_unlock(&zlock);
	reaper_start();
}

/* SO_LINGER's wait: our FIN through, or the zombie gone (looked up under
 * zlock: a zombie leaves the list before it is freed) */
static int fin_through(void *p)
{
	int r = 1;
	pthread_mutex_lock(&zlock);
	for (struct es_conn *z = zlist; z; z = z->znext)
		if (z == p) {
			r = z->fin_done || z->err || z->kdead;
			break;
		}
	pthread_mutex_unlock(&zlock);
	return r;
}

/* Returns 1 when the connection lingers: the linger list then owns s (an
 * orphan s is freed by the reaper, possibly before this returns). */
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
		int64_t linger = s->linger_ns;
		zombify(s);
		if (linger > 0)      /* SO_LINGER: wait for our data and FIN to be through */
			reap_until(es__now_ns() + linger, fin_through, c);
		else
			reap_until(0, NULL, NULL);
		return 1;
	}
	/* the peer may be sending to our receives (it has been told about them)
	 * unless the connection ended in order or the peer is gone */
	es__sock_lock(s);
	es__process(s);
	int quiet = sends_idle(c) && (c->kdead || (c->peer_quiet && c->rfin));
	es__sock_unlock(s);
	if (!quiet) {
		detach(s);
		return 0;
	}
	es__sock_lock(s);
	teardown_locked(s);
	return 0;
}

/* Tests only (tests/shim): one pass over the lingering connections without
 * waiting (those through are torn down); how many are left. */
int es__zombies_reap(void)
{
	struct pollfd p[1];
	int np;
	int64_t next;
	return reap_pass(p, &np, 0, 0, &next);
}

/* fork.c: the lingering connections are the parent's (locks made fresh there) */
void es__conn_atfork_child(void)
{
	zlist = NULL;
	zwaiters = NULL;
	if (reaper_efd >= 0)
		R_(close)(reaper_efd);   /* the reaper stayed with the parent */
	reaper_efd = -1;
	pthread_mutex_init(&reaper_mu, NULL);
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

/* at exit: every open EMP connection is closed as by close(); the process
 * waits for the close exchanges (a few round trips), at most 2 s, then hands
 * its packet sockets to a child to release */
void es__flush_all(void)
{
	es__negc_settle_pending();   /* connects that returned before the server's HELLO */
	__atomic_store_n(&exiting, 1, __ATOMIC_RELEASE);
	es__held_flush_old(0, 0);   /* every thread's coalesced writes */
	es__fd_foreach(flush_one, NULL);
	reap_until(es__now_ns() + 2000000000ll, NULL, NULL);
	emp_flush(es__g.ep);     /* the ack of the peer's last message must not wait for a reply */
	emp_goodbye(es__g.ep);   /* our peers may give our slots to others at once */
	es__handoff_device();
}
