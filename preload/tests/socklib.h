/* socklib.h: the helpers the socket test programs share: die, clocks, listener, dial, write_all (define SOCKLIB_PROG first). */
#ifndef EMP_SOCKLIB_H
#define EMP_SOCKLIB_H

#ifndef SOCKLIB_PROG
#error "define SOCKLIB_PROG (the program's name in error messages) before including socklib.h"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* "PROG: what: strerror(errno)" on stderr, exit 1 */
static inline void die(const char *what)
{
	fprintf(stderr, SOCKLIB_PROG ": %s: %s\n", what, strerror(errno));
	exit(1);
}

/* CLOCK_REALTIME in ms (comparable across the namespaces' processes) */
static inline long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t.tv_sec * 1000ll + t.tv_nsec / 1000000;
}

/* CLOCK_MONOTONIC in s */
static inline double mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* a TCP socket listening on port (any address, SO_REUSEADDR, backlog 64) */
static inline int listener(int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (bind(s, (void *)&a, sizeof a) < 0 || listen(s, 64) < 0)
		die("listen");
	return s;
}

/* a TCP socket connected (blocking) to host:port */
static inline int dial(const char *host, int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(s, (void *)&a, sizeof a) < 0)
		die("connect");
	return s;
}

/* all n bytes (retrying on EINTR); 0, or -1 on an error */
static inline int write_all(int fd, const void *b, size_t n)
{
	size_t o = 0;
	while (o < n) {
		ssize_t w = write(fd, (const char *)b + o, n - o);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		o += w;
	}
	return 0;
}

#endif
