/* splice.c: splice(2) with an EMP socket on one side, through a buffer: its bytes are not in the kernel socket, which a real splice would read (and wait on for ever) or write (the peer resets the connection). */
/*
 * socket -> pipe: the bytes are peeked, as many as the pipe takes are
 * written to it, and exactly those are then taken from the socket, so
 * nothing is lost when the pipe is full. pipe -> socket: what is read from
 * the pipe cannot go back, so it is all sent, waiting for room even on a
 * non-blocking socket. One of the two must be a pipe (as for splice itself);
 * SPLICE_F_NONBLOCK makes both sides non-blocking; SPLICE_F_MORE is MSG_MORE.
 * Both calls go through the shim's own recv/send/write/read, so a socket
 * still negotiating settles first and a FAILED one errors as usual.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "es.h"

#define SPLICE_BUF 65536


static int ours(int fd)
{
	struct es_sock *s = es__sock(fd);
	return s && s->kind == ES_KIND_SOCK && s->state != ES_CAND;
}

/* bytes a write to pipe fd takes without waiting */
static ssize_t pipe_room(int fd)
{
	int used = 0, cap = R_(fcntl)(fd, F_GETPIPE_SZ);
	if (cap < 0 || R_(ioctl)(fd, FIONREAD, &used) < 0)
		return -1;
	return cap > used ? cap - used : 0;
}

static ssize_t from_socket(int in, int out, size_t n, unsigned int flags)
{
	char buf[SPLICE_BUF];
	int nb = (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0;
	ssize_t r = recv(in, buf, n < sizeof buf ? n : sizeof buf, MSG_PEEK | nb);
	if (r <= 0)
		return r;
	size_t want = (size_t)r;
	if (flags & SPLICE_F_NONBLOCK) {
		ssize_t room = pipe_room(out);
		if (room == 0) {
			errno = EAGAIN;
			return -1;
		}
		if (room > 0 && (size_t)room < want)
			want = (size_t)room;
	}
	ssize_t w = write(out, buf, want);
	if (w <= 0)
		return w;
	ssize_t c = recv(in, buf, (size_t)w, MSG_DONTWAIT);   /* the bytes peeked: there */
	return c == w ? w : (c < 0 ? -1 : c);
}

static ssize_t to_socket(int in, int out, size_t n, unsigned int flags)
{
	char buf[SPLICE_BUF];
	if (flags & SPLICE_F_NONBLOCK) {
		struct pollfd p = { in, POLLIN, 0 };
		if (R_(poll)(&p, 1, 0) == 0) {
			errno = EAGAIN;
			return -1;
		}
	}
	ssize_t r = read(in, buf, n < sizeof buf ? n : sizeof buf);
	if (r <= 0)
		return r;
	size_t done = 0;
	int more = (flags & SPLICE_F_MORE) ? MSG_MORE : 0;
	while (done < (size_t)r) {
		ssize_t w = send(out, buf + done, (size_t)r - done, more);
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = { out, POLLOUT, 0 };
			if (poll(&p, 1, -1) >= 0 || errno == EINTR)
				continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		return done ? (ssize_t)done : -1;
	}
	return (ssize_t)done;
}

ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n, unsigned int flags)
{
	int a = !es__tl_in && ours(in), b = !es__tl_in && ours(out);
	if (!a && !b)
		return R_(splice) ? es__real.splice(in, off_in, out, off_out, n, flags) : (errno = ENOSYS, -1);
	if ((a && off_in) || (b && off_out)) {
		errno = ESPIPE;
		return -1;
	}
	if (a && b) {
		errno = EINVAL;          /* neither is a pipe */
		return -1;
	}
	if (!n)
		return 0;
	return a ? from_socket(in, out, n, flags) : to_socket(in, out, n, flags);
}
