/* fdedge.c: fd-table edges of the preload: duplicates onto fds above the RLIMIT_NOFILE of the table's first use; close() racing reads, writes and polls. */
/*
 *   fdedge dup-high HOST PORT N BASE RAISE
 *                                 RAISE 1: NOFILE limit 4096 before the first
 *                                 socket, raised to BASE + 30000 after the
 *                                 connect (exit 3 without CAP_SYS_RESOURCE);
 *                                 then dup2, dup3 and F_DUPFD onto BASE,
 *                                 BASE + 1000, BASE + 2000; N bytes through
 *                                 each duplicate given and the original,
 *                                 close all: "wrote TOTAL" (bytes taken)
 *   fdedge close-race HOST PORT ROUNDS
 *                                 per round a connection to an echo server,
 *                                 a reader, a writer and a poller thread on
 *                                 it (timeouts 20 ms: each call ends), and
 *                                 close() from the main thread after 0-3 ms;
 *                                 the threads end on EBADF: "rounds R bytes B"
 *   fdedge close-idle HOST PORT N FLAG
 *                                 write N bytes, close, then call nothing of
 *                                 the shim's until FLAG exists: "closed"
 *   fdedge sig-kernel HOST PORT N
 *                                 an EMP connection; N times the main thread
 *                                 dup()s and close()s it and writes a byte
 *                                 through it while SIGALRM (every 50 us) runs
 *                                 a handler that makes a TCP socket, writes a
 *                                 pipe, dup()s and closes kernel fds (all
 *                                 async-signal-safe calls; EINTR retried):
 *                                 "signals S"
 *   fdedge async-close HOST PORT ROUNDS [JITTER_US]
 *                                 the JDK's close of a channel another thread
 *                                 blocks on: per round a blocking read, then
 *                                 a blocking 64 MiB write (the echo server's
 *                                 replies unread), each on a new connection;
 *                                 200 ms in, the main thread dup2()s a socket
 *                                 pair's shut end over the socket's number
 *                                 and sends the thread a signal whose handler
 *                                 has no SA_RESTART: the read ends with
 *                                 EINTR, the write with EINTR or a short
 *                                 count, within 3 s: "async-close P passed,
 *                                 F failed"; JITTER_US: the close comes 0 ..
 *                                 JITTER_US us in, often while the call spins
 *   fdedge echo-threads PORT COUNT
 *                                 COUNT connections, a thread each echoing
 *                                 to EOF or an error: "served COUNT"
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/time.h>

#define SOCKLIB_PROG "fdedge"
#include "socklib.h"

static long long put(int fd, long long n)
{
	static char buf[65536];
	long long o = 0;
	while (o < n) {
		size_t k = n - o < (long long)sizeof buf ? (size_t)(n - o) : sizeof buf;
		if (write_all(fd, buf, k) < 0) {
			printf("write on fd %d: %s\n", fd, strerror(errno));
			break;
		}
		o += k;
	}
	return o;
}

static int dup_high(const char *host, int port, long long n, int base, int raise)
{
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl = { 4096, 4096 };
	if (raise && setrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("setrlimit 4096");
	int s = dial(host, port);
	rl.rlim_cur = rl.rlim_max = base + 30000;
	if (raise && setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		printf("raise: %s\n", strerror(errno));
		return 3;
	}
	int d[3];
	d[0] = dup2(s, base);
	printf("dup2 -> %d%s%s\n", d[0], d[0] < 0 ? ": " : "", d[0] < 0 ? strerror(errno) : "");
	d[1] = dup3(s, base + 1000, O_CLOEXEC);
	printf("dup3 -> %d%s%s\n", d[1], d[1] < 0 ? ": " : "", d[1] < 0 ? strerror(errno) : "");
	d[2] = fcntl(s, F_DUPFD, base + 2000);
	printf("F_DUPFD -> %d%s%s\n", d[2], d[2] < 0 ? ": " : "", d[2] < 0 ? strerror(errno) : "");
	long long total = 0;
	for (int i = 0; i < 3; i++)
		if (d[i] >= 0) {
			total += put(d[i], n);
			close(d[i]);
		}
	total += put(s, n);
	close(s);
	printf("wrote %lld\n", total);
	return 0;
}

static atomic_llong moved;
static pthread_barrier_t ready;

/* a thread's first call makes the shim's per-thread fds (its wake eventfd):
 * before the close, so that none takes the closed number while the threads
 * still name it (they use it after the close on purpose) */
static void race_start(int fd)
{
	struct pollfd q = { fd, POLLIN, 0 };
	poll(&q, 1, 0);
	pthread_barrier_wait(&ready);
}

static void *race_reader(void *p)
{
	int fd = (int)(intptr_t)p;
	race_start(fd);
	char buf[8192];
	for (;;) {
		ssize_t r = read(fd, buf, sizeof buf);
		if (r > 0)
			atomic_fetch_add(&moved, r);
		else if (r == 0 || (errno != EAGAIN && errno != EINTR))
			return NULL;
	}
}

static void *race_writer(void *p)
{
	int fd = (int)(intptr_t)p;
	race_start(fd);
	static char buf[4096];
	for (;;) {
		ssize_t r = send(fd, buf, sizeof buf, MSG_NOSIGNAL);
		if (r > 0)
			atomic_fetch_add(&moved, r);
		else if (r == 0 || (errno != EAGAIN && errno != EINTR))
			return NULL;
	}
}

static void *race_poller(void *p)
{
	int fd = (int)(intptr_t)p;
	race_start(fd);
	for (;;) {
		struct pollfd q = { fd, POLLIN | POLLOUT, 0 };
		int r = poll(&q, 1, 20);
		if (r < 0 || (r > 0 && (q.revents & (POLLNVAL | POLLERR | POLLHUP))))
			return NULL;
		int v;
		if (ioctl(fd, FIONREAD, &v) < 0)
			return NULL;
	}
}

static int close_race(const char *host, int port, int rounds)
{
	struct timeval tv = { 0, 20000 };
	close(dial(host, port));   /* the shim's process-wide fds (the reaper's) exist before the races */
	for (int i = 0; i < rounds; i++) {
		int s = dial(host, port);
		setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		pthread_t t[3];
		void *(*fn[3])(void *) = { race_reader, race_writer, race_poller };
		pthread_barrier_init(&ready, NULL, 4);
		for (int k = 0; k < 3; k++)
			if (pthread_create(&t[k], NULL, fn[k], (void *)(intptr_t)s))
				die("pthread_create");
		pthread_barrier_wait(&ready);
		usleep(rand() % 3000);
		close(s);
		for (int k = 0; k < 3; k++)
			pthread_join(t[k], NULL);
		pthread_barrier_destroy(&ready);
	}
	printf("rounds %d bytes %lld\n", rounds, (long long)atomic_load(&moved));
	return 0;
}

static int close_idle(const char *host, int port, long long n, const char *flag)
{
	int s = dial(host, port);
	put(s, n);
	close(s);
	printf("closed\n");
	while (access(flag, F_OK) != 0)
		usleep(10000);
	return 0;
}

static int sig_pipe[2];
static atomic_long sig_count;

static void sig_handler(int sig)
{
	(void)sig;
	int e = errno;
	int k = socket(AF_INET, SOCK_STREAM, 0);
	char c = 'x';
	if (write(sig_pipe[1], &c, 1) == 1)
		(void)!read(sig_pipe[0], &c, 1);
	int d = dup(sig_pipe[1]);
	if (d >= 0)
		close(d);
	if (k >= 0)
		close(k);
	atomic_fetch_add(&sig_count, 1);
	errno = e;
}

static int sig_kernel(const char *host, int port, long n)
{
	signal(SIGPIPE, SIG_IGN);
	int s = dial(host, port);
	if (pipe(sig_pipe) < 0)
		die("pipe");
	struct sigaction sa = { .sa_handler = sig_handler, .sa_flags = SA_RESTART };
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = { { 0, 50 }, { 0, 50 } };
	setitimer(ITIMER_REAL, &it, NULL);
	for (long i = 0; i < n; i++) {
		int d = dup(s);
		if (d < 0 || write_all(d, "y", 1) < 0)
			die("dup / write");
		close(d);
	}
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	close(s);
	printf("signals %ld\n", (long)atomic_load(&sig_count));
	return 0;
}

static atomic_int ac_sigs;

static void ac_handler(int sig)
{
	(void)sig;
	atomic_fetch_add(&ac_sigs, 1);
}

struct ac_io {
	int fd, wr;
	size_t n;
	char *buf;
	ssize_t r;
	int e;
	atomic_int done;
};

static void *ac_thread(void *p)
{
	struct ac_io *a = p;
	a->r = a->wr ? write(a->fd, a->buf, a->n) : read(a->fd, a->buf, a->n);
	a->e = errno;
	atomic_store(&a->done, 1);
	return NULL;
}

static int async_close(const char *host, int port, int rounds, int jitter_us)
{
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = ac_handler, .sa_flags = 0 };
	sigaction(SIGUSR1, &sa, NULL);
	size_t big = 64 << 20;
	char *buf = calloc(1, big);
	int pass = 0, failed = 0;
	for (int i = 0; i < rounds * 2; i++) {
		int wr = i % 2;
		int s = dial(host, port);
		char c;
		if (write_all(s, "x", 1) < 0 || read(s, &c, 1) != 1)
			die("first echo");
		struct ac_io a = { .fd = s, .wr = wr, .n = wr ? big : 100, .buf = buf };
		pthread_t t;
		if (pthread_create(&t, NULL, ac_thread, &a))
			die("pthread_create");
		if (jitter_us)
			usleep((useconds_t)(rand() % jitter_us));   /* also while the call spins */
		else
			usleep(200000);
		int sp[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0)
			die("socketpair");
		shutdown(sp[0], SHUT_RDWR);
		double t0 = mono();
		if (dup2(sp[0], s) != s)
			die("dup2");
		pthread_kill(t, SIGUSR1);
		while (!atomic_load(&a.done) && mono() - t0 < 3)
			usleep(1000);
		double ms = (mono() - t0) * 1000;
		const char *what = wr ? "write" : "read";
		if (!atomic_load(&a.done)) {
			printf("round %d %s: still blocked %.0f ms after dup2 and the signal (signals handled %d)\n",
			       i / 2, what, ms, atomic_load(&ac_sigs));
			fflush(stdout);
			_exit(1);    /* the thread cannot be joined */
		}
		pthread_join(t, NULL);
		int ok = wr ? (a.r > 0 && (size_t)a.r < big) || (a.r < 0 && a.e == EINTR) : a.r < 0 && a.e == EINTR;
		if (jitter_us)   /* the call may start after the dup2: EOF or EPIPE from the socket pair */
			ok = ok || (wr ? a.r < 0 && a.e == EPIPE : a.r == 0);
		printf("round %d %s: %zd (%s) after %.1f ms: %s\n", i / 2, what, a.r, a.r < 0 ? strerror(a.e) : "bytes",
		       ms, ok ? "ok" : "FAIL");
		ok ? pass++ : failed++;
		close(s);
		close(sp[1]);
	}
	printf("async-close %d passed, %d failed\n", pass, failed);
	return failed != 0;
}

static void *echo_conn(void *p)
{
	int fd = (int)(intptr_t)p;
	char buf[16384];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) > 0)
		if (write_all(fd, buf, (size_t)r) < 0)
			break;
	close(fd);
	return NULL;
}

static int echo_threads(int port, int count)
{
	signal(SIGPIPE, SIG_IGN);
	int l = listener(port);
	pthread_t *t = calloc((size_t)count, sizeof *t);
	for (int i = 0; i < count; i++) {
		int s = accept(l, NULL, NULL);
		if (s < 0 || pthread_create(&t[i], NULL, echo_conn, (void *)(intptr_t)s))
			die("accept / thread");
	}
	for (int i = 0; i < count; i++)
		pthread_join(t[i], NULL);
	printf("served %d\n", count);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 7 && !strcmp(argv[1], "dup-high"))
		return dup_high(argv[2], atoi(argv[3]), atoll(argv[4]), atoi(argv[5]), atoi(argv[6]));
	if (argc == 6 && !strcmp(argv[1], "close-idle"))
		return close_idle(argv[2], atoi(argv[3]), atoll(argv[4]), argv[5]);
	if (argc == 5 && !strcmp(argv[1], "sig-kernel"))
		return sig_kernel(argv[2], atoi(argv[3]), atol(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "echo-threads"))
		return echo_threads(atoi(argv[2]), atoi(argv[3]));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "async-close"))
		return async_close(argv[2], atoi(argv[3]), atoi(argv[4]), argc == 6 ? atoi(argv[5]) : 0);
	if (argc == 5 && !strcmp(argv[1], "close-race"))
		return close_race(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: fdedge dup-high HOST PORT N BASE RAISE | close-race HOST PORT ROUNDS | async-close HOST PORT ROUNDS | echo-threads PORT COUNT | close-idle HOST PORT N FLAG\n");
	return 2;
}
