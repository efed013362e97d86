/* fdedge.c: fd-table edges of the preload: duplicates onto fds above the RLIMIT_NOFILE of the table's first use. */
/*
 *   fdedge dup-high HOST PORT N BASE RAISE
 *                                 RAISE 1: NOFILE limit 4096 before the first
 *                                 socket, raised to BASE + 30000 after the
 *                                 connect (exit 3 without CAP_SYS_RESOURCE);
 *                                 then dup2, dup3 and F_DUPFD onto BASE,
 *                                 BASE + 1000, BASE + 2000; N bytes through
 *                                 each duplicate given and the original,
 *                                 close all: "wrote TOTAL" (bytes taken)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

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

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 7 && !strcmp(argv[1], "dup-high"))
		return dup_high(argv[2], atoi(argv[3]), atoll(argv[4]), atoi(argv[5]), atoi(argv[6]));
	fprintf(stderr, "usage: fdedge dup-high HOST PORT N BASE RAISE\n");
	return 2;
}
