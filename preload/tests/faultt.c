/* faultt.c: socket programs for the fault tests (t_fault_*): peers killed while a second connection of the same
 * process keeps echoing, a server that streams, a client that reads, a two-phase client around a peer restart. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SOCKLIB_PROG "faultt"
#include "socklib.h"

/*
 * usage (every line of output is flushed at once; times are CLOCK_REALTIME ms):
 *   faultt stream-server PORT              accept one; write until an error: "end ERR after N at MS"
 *   faultt sink-client HOST PORT           connect; read until EOF/error:    "end EOF|ERR after N at MS"
 *   faultt two HOST PORTA write|read PORTB  one process, two connections: A streams to (write) or from
 *                                          (read) a peer the test kills, B echoes with verification to
 *                                          another peer until A has ended and then for 1 s (and 4 MB) more
 *   faultt two-server PORT read|write      accept A then B: A is read from or written to until it fails,
 *                                          B is echoed until EOF; exit 0 if B ended cleanly
 *   faultt echo-for HOST PORT SECONDS      echo with verification for SECONDS (then EOF)
 *   faultt phases HOST PORT BYTES GO_FILE  echo BYTES on a first connection, print "phase1 ok", wait for
 *                                          GO_FILE to exist, then echo BYTES on a new connection:
 *                                          "phase2 ok"; then stay until GO_FILE.end exists;
 *                                          exit 0 only if both verified
 */

static uint8_t pat(uint64_t seed, uint64_t i) { return (uint8_t)((i + seed) * 131 + ((i + seed) >> 9)); }

/* write until an error; prints how it ended */
static void stream_out(int s, const char *who)
{
	static char buf[65536];
	uint64_t n = 0;
	for (;;) {
		ssize_t w = write(s, buf, sizeof buf);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			printf("%send %s after %llu at %lld\n", who, strerror(errno), (unsigned long long)n, now_ms());
			return;
		}
		n += w;
	}
}

/* read until EOF or an error; prints how it ended */
static void stream_in(int s, const char *who)
{
	static char buf[65536];
	uint64_t n = 0;
	ssize_t r;
	while ((r = read(s, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
		n += r > 0 ? r : 0;
	printf("%send %s after %llu at %lld\n", who, r == 0 ? "EOF" : strerror(errno), (unsigned long long)n,
	       now_ms());
}

/* Echo with verification: odd-sized writes, each read back and compared; the
 * first of first bytes if first is not 0. Runs until stop() says so; returns
 * bytes verified, or -1 on a mismatch or error. */
static long long echo_until(int s, uint64_t seed, size_t first, int (*stop)(uint64_t done, void *arg), void *arg)
{
	static __thread char out[65536], in[65536];
	uint64_t sent = 0;
	while (!stop(sent, arg)) {
		size_t k = sent == 0 && first ? first : 1 + (size_t)rand() % (sizeof out - 1);
		for (size_t i = 0; i < k; i++)
			out[i] = (char)pat(seed, sent + i);
		if (write_all(s, out, k) < 0) {
			fprintf(stderr, "faultt: echo write: %s\n", strerror(errno));
			return -1;
		}
		size_t got = 0;
		while (got < k) {
			struct pollfd p = { s, POLLIN, 0 };
			if (poll(&p, 1, 5000) != 1) {
				fprintf(stderr, "faultt: echo: no answer for 5 s\n");
				return -1;
			}
			ssize_t r = read(s, in + got, k - got);
			if (r <= 0) {
				fprintf(stderr, "faultt: echo read: %s\n", r ? strerror(errno) : "EOF");
				return -1;
			}
			got += r;
		}
		if (memcmp(in, out, k)) {
			fprintf(stderr, "faultt: echo mismatch near byte %llu\n", (unsigned long long)sent);
			return -1;
		}
		sent += k;
	}
	return (long long)sent;
}

static void echo_serve(int s)
{
	static __thread char buf[65536];
	ssize_t r;
	while ((r = read(s, buf, sizeof buf)) > 0)
		if (write_all(s, buf, r) < 0)
			break;
}

/* ---- two: one process, two connections ---- */

static volatile int a_ended;
static double a_end_mono;
struct two_a { int fd, writing; };

static void *two_a_main(void *p)
{
	struct two_a *a = p;
	if (a->writing)
		stream_out(a->fd, "A ");
	else
		stream_in(a->fd, "A ");
	a_end_mono = mono();
	__atomic_store_n(&a_ended, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct after { uint64_t at_end; int have; };
static int stop_after_a(uint64_t done, void *arg)
{
	struct after *x = arg;
	if (!__atomic_load_n(&a_ended, __ATOMIC_ACQUIRE))
		return 0;
	if (!x->have) {
		x->have = 1;
		x->at_end = done;
	}
	return mono() - a_end_mono >= 1.0 && done - x->at_end >= 4000000;
}

static int two(const char *host, int pa, const char *mode, int pb)
{
	signal(SIGPIPE, SIG_IGN);
	static struct two_a a;
	a.writing = !strcmp(mode, "write");
	a.fd = dial(host, pa);
	int b = dial(host, pb);
	printf("connected\n");
	pthread_t t;
	pthread_create(&t, NULL, two_a_main, &a);
	struct after x = { 0, 0 };
	long long n = echo_until(b, 7, 0, stop_after_a, &x);
	pthread_join(t, NULL);
	if (n < 0) {
		printf("B FAILED\n");
		return 1;
	}
	close(b);
	printf("B ok %lld bytes echoed and verified, %llu after A ended\n", n, (unsigned long long)(n - x.at_end));
	return 0;
}

/* ---- two-server: accept A (the peer the test kills) then B (echo) ---- */

static int two_server(int port, const char *mode)
{
	signal(SIGPIPE, SIG_IGN);
	int l = listener(port);
	static struct two_a a;
	a.writing = !strcmp(mode, "write");
	a.fd = accept(l, NULL, NULL);
	if (a.fd < 0)
		die("accept A");
	printf("accepted A\n");
	int b = accept(l, NULL, NULL);
	if (b < 0)
		die("accept B");
	printf("accepted B\n");
	pthread_t t;
	pthread_create(&t, NULL, two_a_main, &a);
	echo_serve(b);
	printf("B ended\n");
	pthread_join(t, NULL);
	return 0;
}

static int stop_at_time(uint64_t done, void *arg) { return mono() >= *(double *)arg; }

static int echo_for(const char *host, int port, double secs)
{
	int s = dial(host, port);
	double end = mono() + secs;
	long long n = echo_until(s, 11, 0, stop_at_time, &end);
	if (n < 0)
		return 1;
	close(s);
	printf("echo ok %lld bytes in %.1f s\n", n, secs);
	return 0;
}

/* ---- phases: around a peer restart ---- */

static int stop_at_bytes(uint64_t done, void *arg) { return done >= *(uint64_t *)arg; }

static int phases(const char *host, int port, uint64_t bytes, const char *go)
{
	int s = dial(host, port);
	long long n = echo_until(s, 1, 0, stop_at_bytes, &bytes);
	if (n < 0) {
		printf("phase1 FAILED\n");
		return 1;
	}
	printf("phase1 ok %lld bytes\n", n);
	struct stat st;
	double limit = mono() + 60;
	while (stat(go, &st) != 0) {
		if (mono() > limit) {
			printf("phase2 never started\n");
			return 1;
		}
		usleep(20000);
	}
	close(s);   /* the first connection's peer is gone; its end is not what we test */
	s = dial(host, port);
	printf("phase2 connected\n");
	/* a first write of 4000 bytes goes right behind the HELLO (the shim's
	 * early write, at most 16 KiB), into a server whose previous life the
	 * engine still names: its HELLO fails there, and the write must go once */
	n = echo_until(s, 2, 4000, stop_at_bytes, &bytes);
	if (n < 0) {
		printf("phase2 FAILED\n");
		return 1;
	}
	close(s);
	printf("phase2 ok %lld bytes\n", n);
	/* stay (the endpoint stays open) until the test has looked at our counters */
	char end[4096];
	snprintf(end, sizeof end, "%s.end", go);
	for (limit = mono() + 60; stat(end, &st) != 0 && mono() < limit;)
		usleep(20000);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	srand((unsigned)getpid());
	if (argc < 3) {
		fprintf(stderr, "usage: faultt MODE ARGS (see the comment at the top of faultt.c)\n");
		return 2;
	}
	const char *m = argv[1];
	if (!strcmp(m, "stream-server") && argc == 3) {
		signal(SIGPIPE, SIG_IGN);
		int l = listener(atoi(argv[2])), s = accept(l, NULL, NULL);
		if (s < 0)
			die("accept");
		printf("accepted\n");
		stream_out(s, "");
		return 0;
	}
	if (!strcmp(m, "sink-client") && argc == 4) {
		int s = dial(argv[2], atoi(argv[3]));
		printf("connected\n");
		stream_in(s, "");
		return 0;
	}
	if (!strcmp(m, "two") && argc == 6)
		return two(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]));
	if (!strcmp(m, "two-server") && argc == 4)
		return two_server(atoi(argv[2]), argv[3]);
	if (!strcmp(m, "echo-for") && argc == 5)
		return echo_for(argv[2], atoi(argv[3]), atof(argv[4]));
	if (!strcmp(m, "phases") && argc == 6)
		return phases(argv[2], atoi(argv[3]), strtoull(argv[4], NULL, 0), argv[5]);
	fprintf(stderr, "faultt: unknown mode or wrong arguments: %s\n", m);
	return 2;
}
