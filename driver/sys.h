/* sys.h: the drivers' and libemp's own way to the kernel: system calls that never pass through the sockets shim's wrappers. */
/*
 * libempsock.so carries libemp and the drivers, and it exports read, write,
 * close, poll, socket, setsockopt, ... for the application. A call to one of
 * those from inside the library would land in the shim's own wrapper first.
 * Everything below goes straight to the kernel instead, through libc's
 * syscall() (emp__syscall: found with dlsym(RTLD_NEXT), sys.c; the shim wraps
 * syscall() itself for applications that close descriptors with it, libuv),
 * so the engine's device, timer and wake-up fds never touch the shim's fd
 * table or its locks. Same conventions as libc: -1 and errno.
 */
#ifndef EMP_SYS_H
#define EMP_SYS_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

long emp__sys6(long nr, long a, long b, long c, long d, long e, long f);
/* emp__syscall(SYS_x, args...): syscall(2) that no wrapper sees (at most 6 arguments) */
#define emp__syscall(...) emp__sys6_(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)
#define emp__sys6_(nr, a, b, c, d, e, f, ...) \
	emp__sys6((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

static inline ssize_t emp__sys_read(int fd, void *b, size_t n) { return emp__syscall(SYS_read, fd, b, n); }
static inline ssize_t emp__sys_write(int fd, const void *b, size_t n) { return emp__syscall(SYS_write, fd, b, n); }
static inline int emp__sys_close(int fd) { return (int)emp__syscall(SYS_close, fd); }
static inline int emp__sys_socket(int d, int t, int p) { return (int)emp__syscall(SYS_socket, d, t, p); }
static inline int emp__sys_bind(int fd, const struct sockaddr *a, socklen_t l) { return (int)emp__syscall(SYS_bind, fd, a, l); }
static inline int emp__sys_connect(int fd, const struct sockaddr *a, socklen_t l) { return (int)emp__syscall(SYS_connect, fd, a, l); }
static inline int emp__sys_setsockopt(int fd, int lv, int nm, const void *v, socklen_t l)
{
	return (int)emp__syscall(SYS_setsockopt, fd, lv, nm, v, l);
}
static inline int emp__sys_getsockopt(int fd, int lv, int nm, void *v, socklen_t *l)
{
	return (int)emp__syscall(SYS_getsockopt, fd, lv, nm, v, l);
}
static inline int emp__sys_ioctl(int fd, unsigned long req, void *arg) { return (int)emp__syscall(SYS_ioctl, fd, req, arg); }
static inline int emp__sys_fcntl(int fd, int cmd, long arg) { return (int)emp__syscall(SYS_fcntl, fd, cmd, arg); }

/* The library's own fds (device sockets, wake-up and timer fds, a closing
 * connection's private copy of its kernel socket) live at EMP__FD_HIGH and
 * up: the lowest free number is often one the application has just closed,
 * and a program that closes a number twice (a harmless EBADF without us;
 * iperf3's server does it to its streams) would close ours instead.
 * emp__sys_dup_high: a close-on-exec copy up there, else the lowest free;
 * emp__sys_fd_high: fd itself moved up there (kept where it is if nothing
 * is free up there or the limit is lower). */
#define EMP__FD_HIGH 256
static inline int emp__sys_dup_high(int fd)
{
	int h = emp__sys_fcntl(fd, F_DUPFD_CLOEXEC, EMP__FD_HIGH);
	return h >= 0 ? h : emp__sys_fcntl(fd, F_DUPFD_CLOEXEC, 3);
}
static inline int emp__sys_fd_high(int fd)
{
	if (fd < 0 || fd >= EMP__FD_HIGH)
		return fd;
	int h = emp__sys_fcntl(fd, F_DUPFD_CLOEXEC, EMP__FD_HIGH);
	if (h < 0)
		return fd;
	emp__sys_close(fd);          /* the same file stays open under h */
	return h;
}
static inline ssize_t emp__sys_send(int fd, const void *b, size_t n, int fl)
{
	return emp__syscall(SYS_sendto, fd, b, n, fl, NULL, 0);
}
static inline ssize_t emp__sys_recv(int fd, void *b, size_t n, int fl)
{
	return emp__syscall(SYS_recvfrom, fd, b, n, fl, NULL, NULL);
}
/* ppoll with ns (< 0: forever); the kernel's timespec is a private copy */
static inline int emp__sys_ppoll(struct pollfd *p, nfds_t n, int64_t ns, const sigset_t *mask)
{
	struct timespec ts, *tp = NULL;
	if (ns >= 0) {
		ts.tv_sec = (time_t)(ns / 1000000000);
		ts.tv_nsec = (long)(ns % 1000000000);
		tp = &ts;
	}
	return (int)emp__syscall(SYS_ppoll, p, n, tp, mask, mask ? (size_t)(_NSIG / 8) : (size_t)0);
}

#endif
