/* test_timeq.c: the shim's time queue (preload/timeq.c): a socket due at a time is looked at by the first tick at or after it, not before; the earliest time is what waits sleep to; entries of closed or decided sockets go; a socket whose lock another thread holds does not block the tick. */
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runner.h"
#include "es.h"

static unsigned seq_of(struct es_sock *s) { return atomic_load(&s->seq); }

/* an accepted socket whose OFFER is out, as an epoll wait steps it */
static struct es_sock *pending_sock(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	struct es_sock *s = es__sock_new(fd, ES_PENDING);
	CHECK(s);
	s->server = 1;
	s->ng.sv.begun = 1;
	es__live_add(s);         /* its ident, as es__negs_step gives it */
	CHECK(s->ident != 0);
	return s;
}

static void drop(struct es_sock *s)
{
	int fd = s->kfd;
	es__sock_lock(s);
	s->state = ES_CAND;      /* decided: kernel TCP */
	atomic_store(&s->tq_due, 0);
	es__sock_unlock(s);
	es__tq_later(s, 0);      /* due: the tick runs, and its entry goes */
	es__tq_tick(es__now_ns());
	es__fd_set(fd, NULL);
	close(fd);
}

static void t_tq_due_and_tick(void)
{
	int64_t now = es__now_ns();
	struct es_sock *a = pending_sock(), *b = pending_sock();
	es__tq_later(b, now + 50000000);
	es__tq_later(a, now + 20000000);
	CHECK_EQ(es__tq_due(), now + 20000000);   /* the earliest */
	unsigned sa = seq_of(a), sb = seq_of(b);
	es__tq_tick(now + 10000000);              /* before either: nothing */
	CHECK_EQ(seq_of(a), sa);
	CHECK_EQ(seq_of(b), sb);
	CHECK_EQ(es__tq_due(), now + 20000000);
	es__tq_tick(now + 20000000);              /* a is due: back on its ready lists (an edge) */
	CHECK(seq_of(a) != sa);
	CHECK_EQ(seq_of(b), sb);
	CHECK_EQ(atomic_load(&a->tq_due), INT64_MAX);   /* its next step sets its time */
	CHECK_EQ(es__tq_due(), now + 50000000);   /* b's is next */
	sa = seq_of(a);
	es__tq_later(a, now + 30000000);          /* a's step: queued once, the earliest again */
	CHECK_EQ(es__tq_due(), now + 30000000);
	es__tq_tick(now + 60000000);              /* both due */
	CHECK(seq_of(a) != sa);
	CHECK(seq_of(b) != sb);
	CHECK_EQ(es__tq_due(), INT64_MAX);        /* both wait for their steps */
	/* a's step sets a time; b is decided meanwhile: the tick at a's time
	 * looks at a and drops b's entry */
	sa = seq_of(a);
	sb = seq_of(b);
	es__tq_later(a, now + 70000000);
	es__sock_lock(b);
	b->state = ES_CAND;
	es__sock_unlock(b);
	es__tq_tick(now + 70000000);
	CHECK(seq_of(a) != sa);
	CHECK_EQ(seq_of(b), sb);
	CHECK_EQ(b->tq_gen, 0u);                  /* out of the list */
	CHECK(a->tq_gen != 0u);                   /* waits for its step */
	/* an entry of a socket that waits for its step goes at the next tick
	 * that runs (another socket's time), once it is decided */
	struct es_sock *c = pending_sock();
	es__tq_later(c, now + 80000000);
	es__sock_lock(a);
	a->state = ES_CAND;
	es__sock_unlock(a);
	es__tq_tick(now + 80000000);
	CHECK_EQ(a->tq_gen, 0u);
	drop(a);
	drop(b);
	drop(c);
	CHECK_EQ(c->tq_gen, 0u);
	CHECK_EQ(es__tq_due(), INT64_MAX);
}

/* a wait's sleep: the caller's, or the queue's earliest time when that is
 * sooner (1 ms when it is past) */
static void t_tq_bound(void)
{
	int64_t now = es__now_ns();
	int cut = 7;
	CHECK_EQ(es__tq_due(), INT64_MAX);
	CHECK_EQ(es__tq_bound(now, -1, &cut), -1);
	CHECK_EQ(cut, 0);
	CHECK_EQ(es__tq_bound(now, 3000000, &cut), 3000000);
	CHECK_EQ(cut, 0);
	struct es_sock *s = pending_sock();
	es__tq_later(s, now + 5000000);
	CHECK_EQ(es__tq_bound(now, -1, &cut), 5000000);
	CHECK_EQ(cut, 1);
	CHECK_EQ(es__tq_bound(now, 3000000, &cut), 3000000);
	CHECK_EQ(cut, 0);
	unsigned q = seq_of(s);
	CHECK_EQ(es__tq_bound(now + 5000000, -1, NULL), -1);   /* due: looked at, then nothing left */
	CHECK(seq_of(s) != q);
	drop(s);
}

/* a decided socket's time passes without a look */
static void t_tq_decided_goes(void)
{
	int64_t now = es__now_ns();
	struct es_sock *s = pending_sock();
	es__tq_later(s, now + 1000000);
	CHECK(s->tq_gen != 0u);
	es__sock_lock(s);
	s->state = ES_CAND;
	es__sock_unlock(s);
	unsigned q = seq_of(s);
	es__tq_tick(now + 2000000);
	CHECK_EQ(seq_of(s), q);
	CHECK_EQ(s->tq_gen, 0u);
	CHECK_EQ(es__tq_due(), INT64_MAX);
	int fd = s->kfd;
	es__fd_set(fd, NULL);
	close(fd);
}

struct holder { struct es_sock *s; atomic_int held, release; };

static void *hold(void *arg)
{
	struct holder *h = arg;
	pthread_mutex_lock(&h->s->lock);
	atomic_store(&h->held, 1);
	while (!atomic_load(&h->release))
		usleep(1000);
	pthread_mutex_unlock(&h->s->lock);
	return NULL;
}

/* another thread holds the socket's lock (its owner is at it): the tick
 * goes on at once and looks again 1 ms later */
static void t_tq_busy_socket(void)
{
	int64_t now = es__now_ns();
	struct es_sock *s = pending_sock();
	es__tq_later(s, now + 1000000);
	struct holder h = { .s = s };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, hold, &h) == 0);
	while (!atomic_load(&h.held))
		usleep(1000);
	unsigned q = seq_of(s);
	es__tq_tick(now + 2000000);
	CHECK_EQ(seq_of(s), q);
	CHECK_EQ(es__tq_due(), now + 3000000);
	atomic_store(&h.release, 1);
	pthread_join(t, NULL);
	es__tq_tick(now + 3000000);
	CHECK(seq_of(s) != q);
	drop(s);
}

static const struct emp_test tests[] = {
	{ "shim_tq_due_and_tick", t_tq_due_and_tick, 10 },
	{ "shim_tq_decided_goes", t_tq_decided_goes, 10 },
	{ "shim_tq_bound", t_tq_bound, 10 },
	{ "shim_tq_busy_socket", t_tq_busy_socket, 10 },
};

const struct emp_test_suite emp_suite_timeq = { "timeq", tests, sizeof(tests) / sizeof(tests[0]) };
