/* rawcalls.c: descriptors closed around the close() wrapper: syscall(SYS_close) (libuv, so Node.js, closes every descriptor that way), syscall(SYS_close_range), close_range and closefrom. */
/*
 * libuv closes with syscall(SYS_close, fd) to avoid close()'s cancellation
 * point, so a Node.js server's closed EMP connections never reached the
 * shim: each kept its engine descriptors, receive buffers and table entry
 * (a server refused new connections in strict mode after about 470, "out of
 * EMP descriptors"), and the peer never got an EMP FIN; a descriptor
 * number reused by a later accept or recvmsg was taken for the old socket.
 * These wrappers send such closes through close() (sock.c); every other
 * call goes straight on. The library's own system calls do not come here
 * (driver/sys.h: libc's syscall() found with dlsym).
 */
#include <errno.h>
#include <linux/close_range.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "es.h"
#include "sys.h"

/* our descriptors in [first, last] closed through close(): EMP connections
 * end as the application's close() would end them */
static void close_ours(unsigned first, unsigned last)
{
	if (es__vfork_child())
		return;              /* the tables are the parent's (es.h) */
	int n = es__fd_max();
	for (unsigned fd = first; fd <= last && fd < (unsigned)n; fd++)
		if (es__fd_get((int)fd))
			close((int)fd);
}

int close_range(unsigned first, unsigned last, int flags)
{
	if (!es__tl_in && !(flags & CLOSE_RANGE_CLOEXEC) && first <= last) {
		int e = errno;
		close_ours(first, last);
		errno = e;
	}
	if (R_(close_range))
		return es__real.close_range(first, last, flags);
	return (int)emp__syscall(SYS_close_range, first, last, flags);
}

void closefrom(int lowfd)
{
	if (lowfd < 0)
		lowfd = 0;
	if (!es__tl_in) {
		int e = errno;
		close_ours((unsigned)lowfd, ~0u);
		errno = e;
	}
	if (R_(closefrom))
		es__real.closefrom(lowfd);
	else
		emp__syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0);
}

/* reads six arguments whatever the caller passed (as libc's own syscall()
 * does with its registers): the sixth comes from the caller's stack, which
 * AddressSanitizer would call an underflow */
__attribute__((no_sanitize_address)) long syscall(long nr, ...)
{
	va_list ap;
	long a[6];
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!es__tl_in) {
		if (nr == SYS_close)
			return close((int)a[0]);
		if (nr == SYS_close_range)
			return close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]);
	}
	return emp__sys6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
