/* connt.c: connection churn for the negotiation tests and the connection benchmark: an epoll echo server for many clients, and clients that connect, echo a checked pattern and close, many times in one process or once per process. */
/*
 *   connt server PORT                  echo every connection until EOF, for ever
 *   connt client HOST PORT N BYTES     N connections one after the other, each:
 *                                      connect, write BYTES, read them back
 *                                      (checked), close; prints "ok N conns,
 *                                      X us each" (X: mean wall time)
 *   connt hold HOST PORT SECONDS       one connection echoing checked chunks
 *                                      for SECONDS, then "ok BYTES"
 * A pattern depends on the connection's pid, sequence and byte offset, so
 * bytes that cross from one connection to another do not pass the check.
 * Exit status 0 only if every byte came back intact.
 */
#define SOCKLIB_PROG "connt"
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>

#include "socklib.h"

static unsigned char pat(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed + i / 8) * 0x9e3779b97f4a7c15ull;
	x ^= x >> 29;
	return (unsigned char)(x >> (8 * (i % 8)));
}

struct cbuf { int fd; size_t len, off; char b[65536]; };

static int server(int port)
{
	int l = listener(port), ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL }, out[64];
	epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
	printf("listening\n");
	for (;;) {
		int n = epoll_wait(ep, out, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			struct cbuf *c = out[i].data.ptr;
			if (!c) {
				int s = accept4(l, NULL, NULL, SOCK_NONBLOCK);
				if (s < 0)
					continue;
				c = calloc(1, sizeof *c);
				if (!c)
					die("calloc");
				c->fd = s;
				struct epoll_event e = { .events = EPOLLIN, .data.ptr = c };
				if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &e) < 0)
					die("epoll_ctl");
				continue;
			}
			ssize_t r = read(c->fd, c->b, sizeof c->b);
			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			if (r > 0) {
				fcntl(c->fd, F_SETFL, 0);      /* echo it all back, then on */
				int w = write_all(c->fd, c->b, (size_t)r);
				fcntl(c->fd, F_SETFL, O_NONBLOCK);
				if (w == 0)
					continue;
			}
			epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
			close(c->fd);
			free(c);
		}
	}
	return 0;
}

/* one connection: BYTES out and back, checked; 0 ok */
static int one(const char *host, int port, uint64_t seed, size_t bytes)
{
	int s = dial(host, port);
	char buf[16384], in[16384];
	size_t sent = 0, got = 0;
	while (got < bytes) {
		if (sent < bytes) {
			size_t k = bytes - sent < sizeof buf ? bytes - sent : sizeof buf;
			for (size_t i = 0; i < k; i++)
				buf[i] = (char)pat(seed, sent + i);
			if (write_all(s, buf, k) < 0)
				die("write");
			sent += k;
		}
		while (got < sent) {
			ssize_t r = read(s, in, sizeof in);
			if (r <= 0) {
				fprintf(stderr, "connt: read %zd after %zu of %zu bytes: %s\n", r, got, bytes,
					r < 0 ? strerror(errno) : "EOF");
				return 1;
			}
			for (ssize_t i = 0; i < r; i++)
				if ((unsigned char)in[i] != pat(seed, got + (size_t)i)) {
					fprintf(stderr, "connt: byte %zu differs\n", got + (size_t)i);
					return 1;
				}
			got += (size_t)r;
		}
	}
	close(s);
	return 0;
}

static int client(const char *host, int port, long n, size_t bytes)
{
	double t0 = mono();
	uint64_t base = (uint64_t)getpid() << 32;
	for (long i = 0; i < n; i++)
		if (one(host, port, base + (uint64_t)i, bytes))
			return fprintf(stderr, "connt: connection %ld of %ld failed\n", i + 1, n), 1;
	double el = mono() - t0;
	printf("ok %ld conns, %.1f us each\n", n, el / (double)n * 1e6);
	return 0;
}

static int hold(const char *host, int port, double seconds)
{
	int s = dial(host, port);
	uint64_t seed = (uint64_t)getpid() << 32 | 0xffffffffu, off = 0;
	char buf[4096], in[4096];
	double end = mono() + seconds;
	while (mono() < end) {
		for (size_t i = 0; i < sizeof buf; i++)
			buf[i] = (char)pat(seed, off + i);
		if (write_all(s, buf, sizeof buf) < 0)
			die("write");
		size_t got = 0;
		while (got < sizeof buf) {
			ssize_t r = read(s, in + got, sizeof buf - got);
			if (r <= 0)
				die("read");
			got += (size_t)r;
		}
		if (memcmp(in, buf, sizeof buf))
			return fprintf(stderr, "connt: held connection: bytes differ at %llu\n",
				       (unsigned long long)off), 1;
		off += sizeof buf;
		usleep(2000);
	}
	close(s);
	printf("ok %llu bytes\n", (unsigned long long)off);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]));
	if (argc >= 6 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atol(argv[4]), strtoull(argv[5], 0, 0));
	if (argc >= 5 && !strcmp(argv[1], "hold"))
		return hold(argv[2], atoi(argv[3]), atof(argv[4]));
	fprintf(stderr, "usage: connt server PORT | client HOST PORT N BYTES | hold HOST PORT SECONDS\n");
	return 2;
}
