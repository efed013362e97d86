/* wakeup.c: lost-wakeup hunting: a server that sleeps (epoll, poll, blocking read; alone, or beside a thread that drives the engine) answers rounds sent at random moments; kernel fds and late registrations wake sleepers at once. */
/*
 *   wakeup server PORT single epoll|poll|read   echo on one connection
 *   wakeup server PORT cross epoll|poll|read    thread B echoes connection B in
 *          its epoll set Y; thread A echoes connection A with the method given
 *          (epoll: its own set X, registered after Y)
 *   wakeup server PORT kfd                      the kernel-fd and late-add checks
 *   wakeup client HOST PORT single|cross ROUNDS
 *   wakeup client HOST PORT kfd
 *
 * Run the server with EMP_SPIN_US=0: every wait sleeps in the kernel at once,
 * so the sleeping paths are what is tested. The client sends each round after
 * a random pause of 0..300 us (a message of 1..200 bytes) and waits at most
 * 1 s for its echo: a lost wakeup leaves a round stuck, which fails. In cross
 * mode the rounds alternate between A and B, so A's data arrives while B
 * sleeps: the kernel wakes B (the device sits in Y first, EPOLLEXCLUSIVE), B
 * drives the engine, and A must be woken by the shim.
 *
 * kfd: with an idle EMP socket in the same set (or poll array), a pipe written
 * by another thread after 200 ms must end epoll_wait/poll at once (well
 * before their 5 s timeout); with nothing at all they end at their timeout;
 * and an EMP socket with data already waiting, added to a set another thread
 * already sleeps on, must wake that thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "wakeup"
#include "socklib.h"

#define BOUND 1.0                 /* s: a round (or a wake) slower than this is a lost wakeup */
#define TOTAL 20.0                /* s: all rounds (normally about 1 s for 2000) */

static int fails;
#define CHECK(c, ...) do { if (c) printf("ok   " __VA_ARGS__); else { printf("FAIL " __VA_ARGS__); fails++; } printf("\n"); } while (0)

static int nodelay(int s)
{
	int one = 1;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return s;
}

/* ---- server: echo until EOF with one way of waiting ---- */

struct echo {
	int fd;
	const char *how;        /* epoll, poll, read */
	int ep;                 /* epoll: the set, made by the caller */
	long rounds, waits;
};

static void *echo_loop(void *arg)
{
	struct echo *e = arg;
	char b[4096];
	for (;;) {
		if (!strcmp(e->how, "epoll")) {
			struct epoll_event ev;
			int n = epoll_wait(e->ep, &ev, 1, 10000);
			e->waits++;
			if (n < 0 && errno == EINTR)
				continue;
			if (n != 1)
				die(n ? "epoll_wait" : "epoll_wait: no data for 10 s");
		} else if (!strcmp(e->how, "poll")) {
			struct pollfd p = { e->fd, POLLIN, 0 };
			int n = poll(&p, 1, 10000);
			e->waits++;
			if (n < 0 && errno == EINTR)
				continue;
			if (n != 1)
				die(n ? "poll" : "poll: no data for 10 s");
		}
		double t0 = mono();
		ssize_t r = read(e->fd, b, sizeof b);   /* read: blocks here */
		if (mono() - t0 > BOUND / 2)   /* evidence for a stuck round (the client reports it) */
			printf("server: round %ld's read returned %zd after %.0f ms\n", e->rounds, r, (mono() - t0) * 1000);
		if (r == 0)
			break;
		if (r < 0)
			die("server read");
		if (write_all(e->fd, b, (size_t)r) < 0)
			die("server write");
		e->rounds++;
	}
	close(e->fd);
	return NULL;
}

static int add_in(int ep, int fd, uint64_t data)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = data };
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static int server_single(int l, const char *how)
{
	struct echo e = { .fd = nodelay(accept(l, NULL, NULL)), .how = how };
	if (e.fd < 0)
		die("accept");
	if (!strcmp(how, "epoll")) {
		e.ep = epoll_create1(0);
		if (add_in(e.ep, e.fd, 1) < 0)
			die("epoll_ctl");
	}
	echo_loop(&e);
	printf("server: %ld rounds, %ld waits (%s)\n", e.rounds, e.waits, how);
	return 0;
}

/* who: the byte each client connection sends first */
static int accept_who(int l, char *who)
{
	int s = nodelay(accept(l, NULL, NULL));
	if (s < 0 || read(s, who, 1) != 1)
		die("accept/who");
	return s;
}

static int server_cross(int l, const char *how)
{
	struct echo a = { .how = how }, b = { .how = "epoll" };
	char w1, w2;
	int s1 = accept_who(l, &w1), s2 = accept_who(l, &w2);
	if (w1 == w2 || (w1 != 'A' && w1 != 'B') || (w2 != 'A' && w2 != 'B'))
		die("who");
	a.fd = w1 == 'A' ? s1 : s2;
	b.fd = w1 == 'A' ? s2 : s1;
	/* Y (B's) takes the device first: a frame wakes B when both sleep */
	b.ep = epoll_create1(0);
	if (add_in(b.ep, b.fd, 2) < 0)
		die("epoll_ctl B");
	if (!strcmp(how, "epoll")) {
		a.ep = epoll_create1(0);
		if (add_in(a.ep, a.fd, 1) < 0)
			die("epoll_ctl A");
	}
	pthread_t ta, tb;
	pthread_create(&tb, NULL, echo_loop, &b);
	pthread_create(&ta, NULL, echo_loop, &a);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	printf("server: A %ld rounds, %ld waits (%s); B %ld rounds, %ld waits (epoll)\n", a.rounds, a.waits, how,
	       b.rounds, b.waits);
	return 0;
}

static int pipe_w = -1;
static void *write_pipe_later(void *arg)
{
	usleep(200000);
	if (write(pipe_w, "p", 1) != 1)
		die("pipe write");
	return arg;
}

struct late {
	int ep;
	int n;
	struct epoll_event ev;
	double took;
};

static void *sleep_on(void *arg)
{
	struct late *a = arg;
	double t0 = mono();
	a->n = epoll_wait(a->ep, &a->ev, 1, 5000);
	a->took = mono() - t0;
	return NULL;
}

static int server_kfd(int l)
{
	int s = nodelay(accept(l, NULL, NULL));
	char b[64];
	if (s < 0 || read(s, b, 1) != 1 || write(s, b, 1) != 1)   /* the connection runs over EMP */
		die("first echo");
	int pp[2];
	if (pipe(pp) < 0)
		die("pipe");
	pipe_w = pp[1];
	pthread_t t;
	for (int i = 0; i < 3; i++) {
		/* 1. epoll: an idle EMP socket and a pipe in one set */
		int ep = epoll_create1(0);
		add_in(ep, s, 1);
		add_in(ep, pp[0], 2);
		struct epoll_event ev[2];
		pthread_create(&t, NULL, write_pipe_later, NULL);
		double t0 = mono();
		int n = epoll_wait(ep, ev, 2, 5000);
		double dt = mono() - t0;
		pthread_join(t, NULL);
		CHECK(n == 1 && ev[0].data.u64 == 2 && (ev[0].events & EPOLLIN) && dt > 0.15 && dt < BOUND,
		      "epoll_wait: the pipe written by another thread ends the wait (%d events, %.0f ms)", n, dt * 1000);
		if (read(pp[0], b, 1) != 1)
			die("pipe read");
		close(ep);
		/* 2. poll: the same */
		struct pollfd p[2] = { { s, POLLIN, 0 }, { pp[0], POLLIN, 0 } };
		pthread_create(&t, NULL, write_pipe_later, NULL);
		t0 = mono();
		n = poll(p, 2, 5000);
		dt = mono() - t0;
		pthread_join(t, NULL);
		CHECK(n == 1 && !p[0].revents && (p[1].revents & POLLIN) && dt > 0.15 && dt < BOUND,
		      "poll: the pipe written by another thread ends the wait (%d, %.0f ms)", n, dt * 1000);
		if (read(pp[0], b, 1) != 1)
			die("pipe read");
	}
	for (int i = 0; i < 2; i++) {
		/* timeouts: nothing comes, the waits end at their timeout */
		struct pollfd p = { s, POLLIN, 0 };
		double t0 = mono();
		int n = poll(&p, 1, 300);
		double dt = mono() - t0;
		CHECK(n == 0 && dt >= 0.3 && dt < BOUND, "poll on an idle EMP socket: timeout after %.0f ms (300)", dt * 1000);
		int ep = epoll_create1(0);
		add_in(ep, s, 1);
		struct epoll_event ev;
		t0 = mono();
		n = epoll_wait(ep, &ev, 1, 300);
		dt = mono() - t0;
		CHECK(n == 0 && dt >= 0.3 && dt < BOUND, "epoll_wait on an idle EMP socket: timeout after %.0f ms (300)", dt * 1000);
		close(ep);
	}
	for (int i = 0; i < 3; i++) {
		/* 3. data waits on the EMP socket (seen by poll, not read); another
		 * thread sleeps on a set that holds only a pipe; we add the socket */
		struct late a = { .ep = epoll_create1(0) };
		add_in(a.ep, pp[0], 2);
		if (write(s, "go", 2) != 2)
			die("go");
		struct pollfd p = { s, POLLIN, 0 };
		if (poll(&p, 1, 5000) != 1)
			die("the client's answer did not come");
		pthread_create(&t, NULL, sleep_on, &a);
		usleep(100000);                     /* it sleeps now */
		double t0 = mono();
		add_in(a.ep, s, 1);
		pthread_join(t, NULL);
		double dt = mono() - t0;
		CHECK(a.n == 1 && a.ev.data.u64 == 1 && (a.ev.events & EPOLLIN) && dt < BOUND,
		      "a socket with data added to a set another thread sleeps on wakes it (%d events, data %llu, %.0f ms after the add)",
		      a.n, (unsigned long long)a.ev.data.u64, dt * 1000);
		ssize_t r = read(s, b, sizeof b);
		CHECK(r == 5 && !memcmp(b, "data!", 5), "the data is there (%zd bytes)", r);
		close(a.ep);
	}
	if (write(s, "done", 4) != 4)
		die("done");
	CHECK(read(s, b, 1) == 0, "the client closed");
	close(s);
	printf("server: %d failures\n", fails);
	return fails != 0;
}

/* ---- client ---- */

static ssize_t read_n(int fd, char *b, size_t n)
{
	size_t g = 0;
	while (g < n) {
		ssize_t r = read(fd, b + g, n - g);
		if (r <= 0)
			return r;
		g += (size_t)r;
	}
	return (ssize_t)g;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t xs(void)
{
	rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
	return rng;
}

/* A stuck round's evidence: every live endpoint's state now (empstat, both
 * ends: credits, frames in flight, drops), then whether the echo comes at
 * all within STUCK_MORE (late: a slow rescue such as a timer; never: lost),
 * and the state again. WAKEUP_EMPSTAT names the tool. */
#define STUCK_MORE 4.0
static void empstat_all(void)
{
	const char *t = getenv("WAKEUP_EMPSTAT");
	if (!t)
		return;
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
		 "for p in $(ls /dev/shm | sed -n 's/^emp\\.\\([0-9]*\\)\\..*/\\1/p' | sort -u); do "
		 "grep -qx wakeup /proc/$p/comm 2>/dev/null || continue; '%s' $p; "
		 "for t in /proc/$p/task/*; do echo \"task ${t##*/} $(cat $t/comm) wchan $(cat $t/wchan) "
		 "syscall $(cat $t/syscall)\"; done; ls -l /proc/$p/fd | sed -n 's/.* \\([0-9]*\\) -> /fd \\1 /p'; "
		 "done 1>&2", t);
	unsetenv("LD_PRELOAD");
	if (system(cmd) != 0)
		fprintf(stderr, "wakeup: empstat failed\n");
}

static void stuck_report(int s, size_t missing, double t0)
{
	empstat_all();
	char e[256];
	size_t got = 0;
	while (got < missing && mono() - t0 < BOUND + STUCK_MORE) {
		struct pollfd p = { s, POLLIN, 0 };
		if (poll(&p, 1, 50) > 0) {
			ssize_t k = read(s, e, missing - got);
			if (k <= 0)
				break;
			got += (size_t)k;
		}
	}
	fprintf(stderr, "wakeup: after the bound: %zu of the %zu missing bytes came, %.0f ms after the write\n", got,
		missing, (mono() - t0) * 1000);
	empstat_all();
}

/* one round on s: a random pause, a message, its echo within BOUND; returns its time */
static double round_on(int s, long i)
{
	char m[256], e[256];
	struct timespec ts = { 0, (long)(xs() % 300001) };
	nanosleep(&ts, NULL);
	size_t n = 1 + xs() % 200;
	for (size_t k = 0; k < n; k++)
		m[k] = (char)(i * 31 + k);
	double t0 = mono();
	if (write_all(s, m, n) < 0)
		die("client write");
	size_t got = 0;
	while (got < n) {
		double left = BOUND - (mono() - t0);
		struct pollfd p = { s, POLLIN, 0 };
		int r = left > 0 ? poll(&p, 1, (int)(left * 1000) + 1) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || mono() - t0 > BOUND) {
			fprintf(stderr, "wakeup: round %ld stuck: %zu of %zu bytes echoed after %.0f ms\n", i, got, n,
				(mono() - t0) * 1000);
			stuck_report(s, n - got, t0);
			exit(1);
		}
		ssize_t k = read(s, e + got, n - got);
		if (k <= 0)
			die("client read");
		got += (size_t)k;
	}
	if (memcmp(m, e, n)) {
		fprintf(stderr, "wakeup: round %ld: the echo differs\n", i);
		exit(1);
	}
	return mono() - t0;
}

static int client_rounds(const char *host, int port, const char *mode, long rounds)
{
	int cross = !strcmp(mode, "cross");
	int sb = -1, sa;
	if (cross) {
		sb = nodelay(dial(host, port));
		if (write(sb, "B", 1) != 1)
			die("who B");
		/* the server reads B's byte, then A's: B's set is made first */
	}
	sa = nodelay(dial(host, port));
	if (cross && write(sa, "A", 1) != 1)
		die("who A");
	prctl(PR_SET_TIMERSLACK, 1UL);
	double worst = 0, sum = 0, t0 = mono();
	for (long i = 0; i < rounds; i++) {
		if (mono() - t0 > TOTAL) {
			/* each round got its answer, but slowly: a wakeup was missed and
			 * something slower (a timer) did the work */
			fprintf(stderr, "wakeup: only %ld of %ld rounds in %.0f s (worst %.0f ms, mean %.1f ms)\n", i, rounds,
				TOTAL, worst * 1000, sum / i * 1000);
			exit(1);
		}
		double t = round_on(sa, i);
		sum += t;
		if (t > worst)
			worst = t;
		if (cross)
			round_on(sb, i);
	}
	printf("client: %ld rounds%s in %.2f s, mean %.0f us, worst %.1f ms (bound %.0f ms)\n", rounds,
	       cross ? " on A, each followed by one on B" : "", mono() - t0, sum / rounds * 1e6, worst * 1000, BOUND * 1000);
	close(sa);
	if (sb >= 0)
		close(sb);
	return 0;
}

static int client_kfd(const char *host, int port)
{
	int s = nodelay(dial(host, port));
	char b[16];
	if (write(s, "x", 1) != 1 || read(s, b, 1) != 1)
		die("first echo");
	for (;;) {
		if (read_n(s, b, 2) != 2)
			die("client: no command");
		if (!memcmp(b, "go", 2)) {
			if (write(s, "data!", 5) != 5)
				die("data");
			continue;
		}
		if (!memcmp(b, "do", 2) && read_n(s, b, 2) == 2 && !memcmp(b, "ne", 2))
			break;
		die("client: unexpected command");
	}
	close(s);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	alarm(50);
	if (argc >= 4 && !strcmp(argv[1], "server")) {
		int l = listener(atoi(argv[2]));
		if (!strcmp(argv[3], "kfd"))
			return server_kfd(l);
		if (argc == 5 && !strcmp(argv[3], "single"))
			return server_single(l, argv[4]);
		if (argc == 5 && !strcmp(argv[3], "cross"))
			return server_cross(l, argv[4]);
	}
	if (argc == 5 && !strcmp(argv[1], "client") && !strcmp(argv[4], "kfd"))
		return client_kfd(argv[2], atoi(argv[3]));
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client_rounds(argv[2], atoi(argv[3]), argv[4], atol(argv[5]));
	fprintf(stderr, "usage: wakeup server PORT single|cross epoll|poll|read | server PORT kfd\n"
			"       wakeup client HOST PORT single|cross ROUNDS | client HOST PORT kfd\n");
	return 2;
}
