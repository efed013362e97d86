/* test_hold.c: write coalescing (preload/hold.c) on the simulated wire: corked writes, MSG_MORE, an event-loop round, close, and the progress thread's bound. */
#include <errno.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "simwire.h"

/* messages side 1's engine received (the engines driven for 200 ms of virtual
 * time first, without posting what the shim holds) */
static uint64_t sent(struct sw *w)
{
	h_run(&w->h, NULL, NULL, 200000000);
	return h_ctr(&w->h, 1).msgs_received;
}

/* the same after the libemp posts a round defers (EMP__DEFER_NS) are let go,
 * as any drive of the engine does: what the shim holds still waits */
static uint64_t sent_undeferred(struct sw *w)
{
	emp_flush(es__g.ep);
	return sent(w);
}

static int flush_run(struct sw *w)
{
	return sw_run(&w->h, NULL, NULL, 200000000);   /* the test's drive stands for the thread's next wait */
}

/* read exactly n bytes at side 1 (virtual time: the engines are driven between tries) */
static void read_exact(struct sw *w, const char *want, size_t n)
{
	char b[16384];
	size_t got = 0;
	for (int i = 0; i < 50 && got < n; i++) {
		ssize_t r = read(w->fd[1], b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else
			flush_run(w);
	}
	CHECK_EQ(got, n);
	CHECK(!memcmp(b, want, n));
}

/* TCP_CORK: writes gather in one message until the uncork; a slot that fills
 * leaves at once (as Linux sends full segments while corked); the option
 * reads back */
static void t_hold_cork(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	int on = 1, off = 0, v = 0;
	socklen_t l = sizeof v;
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0);
	CHECK(getsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &v, &l) == 0 && v == 1);
	uint64_t m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], "HTTP/1.1 200 OK\r\n", 17), 17);
	struct iovec iv[2] = { { "Content-Length: 4\r\n", 19 }, { "\r\n", 2 } };
	CHECK_EQ(writev(w.fd[0], iv, 2), 21);
	CHECK_EQ(write(w.fd[0], "body", 4), 4);
	CHECK_EQ(sent(&w), m0);                      /* corked: nothing left */
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &off, sizeof off) == 0);
	CHECK_EQ(sent(&w) - m0, 1);                  /* the uncork: one message */
	read_exact(&w, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", 42);
	CHECK_EQ(sent(&w) - m0, 1);

	/* 10000 bytes corked in 4096-byte slots: two full slots leave, the rest at the uncork */
	static char big[10000];
	for (size_t k = 0; k < sizeof big; k++)
		big[k] = (char)('a' + k % 26);
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0);
	m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], big, sizeof big), (ssize_t)sizeof big);
	CHECK_EQ(sent(&w) - m0, 2);
	/* TCP_NODELAY set pushes what corking held, as on Linux */
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0);
	CHECK_EQ(sent(&w) - m0, 3);
	read_exact(&w, big, sizeof big);
}

/* MSG_MORE: the writes that carry it wait for the one that does not */
static void t_hold_msg_more(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	uint64_t m0 = sent(&w);
	CHECK_EQ(send(w.fd[0], "GET ", 4, MSG_MORE), 4);
	CHECK_EQ(send(w.fd[0], "/ HTTP/1.1", 10, MSG_MORE), 10);
	CHECK_EQ(sent(&w), m0);
	CHECK_EQ(send(w.fd[0], "\r\n\r\n", 4, 0), 4);
	CHECK_EQ(sent(&w) - m0, 1);
	read_exact(&w, "GET / HTTP/1.1\r\n\r\n", 18);
}

/* side 0 in an epoll set (returned) whose wait just returned side 1's
 * request, read: an event-loop round has started, the thread batches */
static int round_start(struct sw *w)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = w->fd[0] }, out[2];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w->fd[0], &ev) == 0);
	CHECK_EQ(write(w->fd[1], "req", 3), 3);
	flush_run(w);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);
	char b[8];
	CHECK_EQ(read(w->fd[0], b, sizeof b), 3);
	return ep;
}

/* An event-loop round: a thread whose epoll_wait returned events answers
 * with three writes; they leave as one message when it waits again */
static void t_hold_round(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	int ep = round_start(&w);
	struct epoll_event out[2];
	char b[8];
	uint64_t m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], "one,", 4), 4);
	CHECK_EQ(write(w.fd[0], "two,", 4), 4);
	CHECK_EQ(write(w.fd[0], "three", 5), 5);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);      /* the next wait: the round's replies leave */
	CHECK_EQ(sent(&w) - m0, 1);
	h_run(&w.h, NULL, NULL, 200000000);
	read_exact(&w, "one,two,three", 13);
	/* a held write and then close(): the data and the FIN get through */
	CHECK_EQ(write(w.fd[0], "last", 4), 4);
	CHECK(close(w.fd[0]) == 0);
	h_run(&w.h, NULL, NULL, 200000000);
	read_exact(&w, "last", 4);
	CHECK_EQ(read(w.fd[1], b, sizeof b), 0);
	CHECK(close(ep) == 0);
}

/* A round longer than the bound: a write after the round's first reply was
 * held for EMP_HOLD_NS (200 us) posts what the thread holds at its own end,
 * from this thread (without the progress thread, which this test has not); a
 * write sooner than that still joins the held slot */
static void t_hold_aged(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	int ep = round_start(&w);
	struct epoll_event out[2];
	uint64_t m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], "one,", 4), 4);
	CHECK_EQ(write(w.fd[0], "two,", 4), 4);       /* at once: joins it */
	CHECK_EQ(sent(&w), m0);                      /* held (the engines ran, the shim's hold stays) */
	usleep(1000);                                /* the handler computes: past the bound */
	CHECK_EQ(write(w.fd[0], "three", 5), 5);
	CHECK_EQ(sent(&w) - m0, 1);                  /* posted at the call's end: one message */
	read_exact(&w, "one,two,three", 13);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);
	CHECK_EQ(sent(&w) - m0, 1);                  /* nothing was left for the wait */
	CHECK(close(ep) == 0);
}

/* A bulk write in an event-loop round: its full slots leave and so does its
 * tail (nothing the round adds would join it), and a corked bulk stream's
 * uncork inside the round posts the tail at once; small writes in the same
 * round still wait for the next wait */
static void t_hold_round_bulk(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	int ep = epoll_create1(0), on = 1, off = 0;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = w.fd[0] }, out[2];
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, w.fd[0], &ev) == 0);
	CHECK_EQ(write(w.fd[1], "req", 3), 3);
	flush_run(&w);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 1);      /* the round starts */
	char b[8];
	CHECK_EQ(read(w.fd[0], b, sizeof b), 3);
	static char big[10000];
	for (size_t k = 0; k < sizeof big; k++)
		big[k] = (char)('A' + k % 26);
	uint64_t m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], big, sizeof big), (ssize_t)sizeof big);
	CHECK_EQ(es__held_flush_old(INT64_MAX, 1), 0); /* nothing listed */
	CHECK_EQ(sent_undeferred(&w) - m0, 3);       /* two full slots and the tail, in the round */
	read_exact(&w, big, sizeof big);
	/* corked: the header waits; the body fills slots; the uncork in the round posts the tail */
	m0 = sent(&w);
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0);
	CHECK_EQ(write(w.fd[0], "hdr:", 4), 4);
	CHECK_EQ(write(w.fd[0], big, sizeof big), (ssize_t)sizeof big);
	CHECK_EQ(sent_undeferred(&w) - m0, 2);       /* corked: the tail waits */
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &off, sizeof off) == 0);
	CHECK_EQ(es__held_flush_old(INT64_MAX, 1), 0); /* and left the thread's held list */
	CHECK_EQ(sent_undeferred(&w) - m0, 3);       /* the uncork posted it, still in the round */
	read_exact(&w, "hdr:", 4);
	read_exact(&w, big, sizeof big);
	/* small writes after that: held for the round as before */
	m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], "a,", 2), 2);
	CHECK_EQ(write(w.fd[0], "b", 1), 1);
	CHECK_EQ(sent_undeferred(&w), m0);
	CHECK_EQ(epoll_wait(ep, out, 2, 0), 0);      /* the next wait */
	CHECK_EQ(sent(&w) - m0, 1);
	read_exact(&w, "a,b", 3);
	CHECK(close(ep) == 0);
}

/* The progress thread's bound (busy_skip) leaves a held socket whose lock is
 * taken (its thread is inside it) listed, and posts it once the lock is free */
static void t_hold_bound_busy(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	int on = 1;
	CHECK(setsockopt(w.fd[0], IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0);
	uint64_t m0 = sent(&w);
	CHECK_EQ(write(w.fd[0], "held", 4), 4);
	CHECK_EQ(sent(&w), m0);
	struct es_sock *s = es__sock_get(w.fd[0]);
	CHECK(s != NULL);
	es__sock_lock(s);                            /* "its thread is inside it" */
	CHECK_EQ(es__held_flush_old(0, 1), 1);       /* skipped: still held */
	es__sock_unlock(s);
	CHECK_EQ(sent(&w), m0);
	CHECK_EQ(es__held_flush_old(0, 1), 0);       /* free now: posted */
	CHECK_EQ(sent(&w) - m0, 1);
	es__sock_put(s);
	read_exact(&w, "held", 4);
}

struct corked { struct sw *w; int done; };

static void *cork_and_sleep(void *arg)
{
	struct corked *k = arg;
	int on = 1;
	CHECK(setsockopt(k->w->fd[0], IPPROTO_TCP, TCP_CORK, &on, sizeof on) == 0);
	CHECK_EQ(write(k->w->fd[0], "corked, never uncorked", 22), 22);
	while (!__atomic_load_n(&k->done, __ATOMIC_ACQUIRE))
		usleep(1000);                    /* no call of the shim: no wait, no uncork */
	return NULL;
}

/* Real time: a thread corks, writes and never comes back to the shim; the
 * progress thread's bound posts what it held (the reader's blocking read,
 * 2 s timeout, gets it; it fails with EAGAIN if nothing posts it) */
static void t_hold_bound(void)
{
	struct sw w;
	sw_open_rt(&w, NULL, 8, 4096);
	struct corked k = { &w, 0 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, cork_and_sleep, &k) == 0);
	char b[32];
	size_t got = 0;
	while (got < 22) {
		ssize_t r = read(w.fd[1], b + got, sizeof b - got);
		CHECK_MSG(r > 0, "read: %zd %s after %zu bytes", r, strerror(errno), got);
		got += (size_t)r;
	}
	CHECK(!memcmp(b, "corked, never uncorked", 22));
	__atomic_store_n(&k.done, 1, __ATOMIC_RELEASE);
	pthread_join(t, NULL);
}

static const struct emp_test tests[] = {
	{ "shim_hold_cork", t_hold_cork, 20 },
	{ "shim_hold_msg_more", t_hold_msg_more, 20 },
	{ "shim_hold_round", t_hold_round, 20 },
	{ "shim_hold_aged", t_hold_aged, 20 },
	{ "shim_hold_round_bulk", t_hold_round_bulk, 20 },
	{ "shim_hold_bound_busy", t_hold_bound_busy, 20 },
	{ "shim_hold_bound", t_hold_bound, 20 },
};

const struct emp_test_suite emp_suite_hold = { "hold", tests, sizeof(tests) / sizeof(tests[0]) };
