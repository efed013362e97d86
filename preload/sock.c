/* sock.c: socket life calls: socket, connect, bind, listen, accept(4), close, shutdown, dup*, fcntl, ioctl, sockopts, names (exec: exec.c). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "es.h"

#define GUARD(fn, ...) do { if (es__tl_in) return R_(fn)(__VA_ARGS__); } while (0)

/* call with a reference on fd's socket for its length: a close() in another
 * thread meanwhile frees nothing the call uses (the teardown runs at the put) */
#define HELD(call)                                                              \
	({                                                                      \
		struct es_sock *h_ = es__tl_in ? NULL : es__sock_get(fd);       \
		if (h_)                                                         \
			es__reap_hold();                                        \
		__typeof__(call) r_ = call;                                     \
		if (h_) {                                                       \
			int e_ = errno;                                         \
			es__sock_put(h_);                                       \
			es__reap_release();                                     \
			errno = e_;                                             \
		}                                                               \
		r_;                                                             \
	})

int socket(int domain, int type, int proto)
{
	int fd = R_(socket)(domain, type, proto);
	if (fd < 0 || es__tl_in || (domain != AF_INET && domain != AF_INET6) ||
	    (type & 0xff) != SOCK_STREAM ||
	    (proto && proto != IPPROTO_TCP))
		return fd;
	int e = errno;
	if (es__conf())
		es__mark_cand(fd, type & SOCK_NONBLOCK);   /* no object yet: see es.h */
	errno = e;
	return fd;
}

static int connect_held(int fd, const struct sockaddr *sa, socklen_t len)
{
	GUARD(connect, fd, sa, len);
	struct es_sock *s = es__sock_cand(fd);
	struct sockaddr_in to;
	if (!s || s->state != ES_CAND || !sa)
		return R_(connect)(fd, sa, len);
	if (es__to_in(sa, len, &to) < 0) {
		es__drop_to_kernel(fd, s);
		return R_(connect)(fd, sa, len);
	}
	int p = es__negc_prepare(s, &to);
	if (p < 0)
		return -1;
	if (p == 0) {
		es__drop_to_kernel(fd, s);
		return R_(connect)(fd, sa, len);
	}
	/* A blocking connect runs non-blocking here and is waited for below: the
	 * UDP twin must hold the port the kernel picks before the server can
	 * answer, i.e. before the SYN comes back. */
	int e0 = errno, fl = R_(fcntl)(fd, F_GETFL), blocking = fl >= 0 && !(fl & O_NONBLOCK);
	if (blocking && R_(fcntl)(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		blocking = 0;
	int r = R_(connect)(fd, sa, len);
	int e = errno, st = 0;
	if (r == 0 || e == EINPROGRESS || e == EINTR || e == EALREADY)
		st = es__negc_start(s, !blocking && r != 0);   /* in progress: OFFERs are answered from now on */
	if (blocking && r < 0 && e == EINPROGRESS) {   /* wait as connect would have */
		struct pollfd p = { fd, POLLOUT, 0 };
		int ms = s->sndtimeo_ns ? (int)((s->sndtimeo_ns + 999999) / 1000000) : -1;
		int n = R_(poll)(&p, 1, ms);
		if (n > 0) {
			socklen_t el = sizeof e;
			e = 0;           /* writable without an error or hang-up: connected */
			if ((p.revents & (POLLERR | POLLHUP)) &&
			    R_(getsockopt)(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
				e = errno;
			r = e ? -1 : 0;
			if (!e)
				e = EINPROGRESS;
		} else {
			e = n == 0 ? EINPROGRESS : errno;   /* SO_SNDTIMEO, or EINTR: it goes on */
		}
	}
	if (blocking)
		R_(fcntl)(fd, F_SETFL, fl);
	if (st < 0) {            /* strict mode: no side channel */
		es__fail_strict(s, ECONNREFUSED, "no side channel");
		errno = ECONNREFUSED;
		return -1;
	}
	if (st == 0 && (r == 0 || e == EINPROGRESS || e == EINTR || e == EALREADY)) {
		es__drop_to_kernel(fd, s);      /* no side channel: kernel TCP */
		errno = r == 0 ? e0 : e;
		return r;
	}
	if (r == 0) {
		s->state = ES_PENDING;
		s->server = 0;
		s->ng.conn_ret = blocking;   /* back once our ACCEPT and HELLO are out (negclient.c; the first write: negearly.c) */
		if (es__settle(fd, s) == ES_FAILED) {
			errno = ECONNREFUSED;
			return -1;
		}
		errno = e0;
		return 0;
	}
	if (e == EINPROGRESS || e == EINTR || e == EALREADY) {
		s->state = ES_CONNECTING;
		es__live_add(s);           /* its finish wakes epoll waiters (ready.c) */
		es__ep_sock_switched(s);
	} else {
		es__drop_to_kernel(fd, s);
	}
	errno = e;
	return r;
}

int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
	int r = R_(bind)(fd, sa, len);
	if (r == 0 && !es__tl_in) {
		struct es_sock *s = es__sock_cand(fd);   /* NULL for all but TCP sockets we watch */
		if (s && s->state == ES_CAND)
			s->bound = 1;
	}
	if (r < 0 && errno == EADDRINUSE && !es__tl_in) {
		int type = 0;
		socklen_t tl = sizeof type;
		if (R_(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_DGRAM &&
		    es__negs_guard_yield(sa, len))
			r = R_(bind)(fd, sa, len);   /* the program's own use of the port comes first */
		else
			errno = EADDRINUSE;
	}
	return r;
}

/* A connection the kernel's accept queue has no room for is not refused: the
 * server drops the client's SYN (resent after 1 s) or the handshake's last ACK
 * (the client believes it is connected; the server sends its SYN-ACK again
 * after 1 s). Either way the server learns of the connection a second or more
 * after the client's connect, past the negotiation's bound (500 ms: a client
 * that never heard from this server cannot tell it from a plain program), so
 * a burst of fresh client processes against a small backlog (Python's
 * socketserver asks for 5) fell back to kernel TCP, or failed in strict
 * mode. A listener that may serve EMP peers gets a queue of at least
 * EMP_LISTEN_MIN_BACKLOG (1024; the kernel caps it at net.core.somaxconn; 0
 * keeps the program's own), as Onload's EF_ACCEPTQ_MIN_BACKLOG does. */
int listen(int fd, int backlog)
{
	GUARD(listen, fd, backlog);
	struct es_sock *s = es__sock_cand(fd);
	if (s && s->state == ES_CAND) {
		int e = errno;
		es__negs_listen(fd);          /* the SYN tells a preloaded client from a plain one */
		es__drop_to_kernel(fd, s);   /* accept() checks each connection itself */
		if (es__conf() && backlog >= 0 && backlog < es__g.min_backlog)   /* a negative one asks for the most */
			backlog = es__g.min_backlog;
		errno = e;
	}
	return R_(listen)(fd, backlog);
}

struct es_sock *es__sock_accepted(int fd, const struct sockaddr_in *l, const struct sockaddr_in *r, int nonblock,
				  int mark)
{
	struct es_sock *s = es__sock_new(fd, ES_PENDING);
	if (s) {
		s->server = 1;
		s->local = *l;
		s->remote = *r;
		s->nonblock = nonblock;
		s->ng.mark = mark;
	}
	return s;
}

static int accepted(int lfd, int fd, int flags)
{
	struct sockaddr_in l, r;
	int e = errno;
	int mark = es__eligible_accept(lfd, fd, &l, &r);
	if (mark)
		es__sock_accepted(fd, &l, &r, !!(flags & SOCK_NONBLOCK), mark);
	errno = e;
	return fd;
}

int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	int r = R_(accept)(fd, sa, len);
	if (r < 0 || es__tl_in || es__g.conf_loaded < 0)
		return r;
	return accepted(fd, r, 0);
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	int r = R_(accept4)(fd, sa, len, flags);
	if (r < 0 || es__tl_in || es__g.conf_loaded < 0)
		return r;
	return accepted(fd, r, flags);
}

int close(int fd)
{
	void *o = es__fd_get(fd);
	if (!o || es__tl_in || es__vfork_child())
		return R_(close)(fd);
	int *kind = o;
	if (*kind == ES_KIND_EPSET)
		es__epset_close(fd, o);
	else if (*kind == ES_KIND_SOCK) {
		es__reap_hold();     /* what the close's engine work finishes goes here, not to the reaper */
		int r = es__sock_close(fd, o);
		es__reap_release();  /* errno kept */
		return r;
	}
	else if (es__is_mark(o))
		es__fd_set(fd, NULL);    /* a socket never used: no lock, no free */
	return R_(close)(fd);
}

static int shutdown_held(int fd, int how)
{
	GUARD(shutdown, fd, how);
	struct es_sock *s = es__sock(fd);
	if (s && es__st_undecided(s))
		es__settle(fd, s);
	s = es__sock(fd);
	if (!s || s->state == ES_CAND || s->state == ES_CONNECTING)
		return R_(shutdown)(fd, how);
	if (s->state != ES_EMP) {
		errno = ENOTCONN;
		return -1;
	}
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		errno = EINVAL;
		return -1;
	}
	return es__shutdown(s, how);
}

/* newfd now also refers to oldfd's object; -1 (EMFILE, newfd closed) when
 * newfd is beyond the table: its writes would go down the kernel socket */
static int alias(int oldfd, int newfd)
{
	void *o = es__fd_get(oldfd);
	if (!o || newfd < 0 || newfd == oldfd)
		return newfd;
	int *kind = o;
	if (es__is_mark(o) && es__fd_fits(newfd))
		es__fd_set(newfd, o);    /* both a candidate; the first used makes the object */
	if (*kind != ES_KIND_SOCK)
		return newfd;
	struct es_sock *s = o;
	if (!es__fd_fits(newfd)) {
		es__log("fd %d is beyond the shim's fd table: the duplicate of fd %d is refused", newfd, oldfd);
		R_(close)(newfd);
		errno = EMFILE;
		return -1;
	}
	es__fd_lock();
	s->refs++;
	es__fd_set(newfd, s);
	es__fd_unlock();
	return newfd;
}

/* dup2/dup3 onto nfd, which the table cannot hold: refused before anything happens */
static int beyond(int fd, int nfd)
{
	if (nfd == fd || es__fd_fits(nfd) || !es__sock(fd))
		return 0;
	es__log("fd %d is beyond the shim's fd table: dup2 of fd %d onto it is refused", nfd, fd);
	errno = EBADF;
	return 1;
}

/* newfd is about to be closed implicitly by dup2/dup3 */
static void drop_target(int oldfd, int newfd)
{
	void *o = es__fd_get(newfd);
	if (!o || newfd == oldfd)
		return;
	if (*(int *)o == ES_KIND_EPSET)
		es__epset_close(newfd, o);
	else if (*(int *)o == ES_KIND_SOCK)
		es__sock_unref_fd(newfd, o);
	else if (es__is_mark(o))
		es__fd_set(newfd, NULL);
}

int dup(int fd)
{
	int r = R_(dup)(fd);
	if (r >= 0 && !es__tl_in)
		r = alias(fd, r);
	return r;
}

int dup2(int fd, int nfd)
{
	GUARD(dup2, fd, nfd);
	if (R_(fcntl)(fd, F_GETFD) < 0 || beyond(fd, nfd))
		return -1;
	drop_target(fd, nfd);
	int r = R_(dup2)(fd, nfd);
	if (r >= 0)
		r = alias(fd, r);
	return r;
}

int dup3(int fd, int nfd, int flags)
{
	GUARD(dup3, fd, nfd, flags);
	if (fd != nfd && R_(fcntl)(fd, F_GETFD) >= 0) {
		if (beyond(fd, nfd))
			return -1;
		drop_target(fd, nfd);
	}
	int r = R_(dup3)(fd, nfd, flags);
	if (r >= 0)
		r = alias(fd, r);
	return r;
}

static int do_fcntl(int (*real)(int, int, ...), int fd, int cmd, uintptr_t arg)
{
	int r = real(fd, cmd, arg);
	if (r < 0 || es__tl_in)
		return r;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		r = alias(fd, r);
	} else if (cmd == F_SETFL && !es__mark_nonblock(fd, !!(arg & O_NONBLOCK))) {
		struct es_sock *s = es__sock(fd);
		if (s)
			s->nonblock = !!(arg & O_NONBLOCK);
	}
	return r;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	uintptr_t arg = va_arg(ap, uintptr_t);
	va_end(ap);
	return do_fcntl(R_(fcntl), fd, cmd, arg);
}

static int (*real_fcntl64)(int, int, ...);
int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	uintptr_t arg = va_arg(ap, uintptr_t);
	va_end(ap);
	if (!real_fcntl64) {
		real_fcntl64 = dlsym(RTLD_NEXT, "fcntl64");
		if (!real_fcntl64)
			real_fcntl64 = R_(fcntl);
	}
	return do_fcntl(real_fcntl64, fd, cmd, arg);
}

static int ioctl_held(int fd, unsigned long req, void *arg)
{
	struct es_sock *s = es__tl_in ? NULL : es__sock(fd);
	if (s && (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD)) {
		if (es__st_undecided(s))
			es__settle(fd, s);
		s = es__sock(fd);
		if (s && s->state == ES_EMP) {   /* the kernel socket holds none of the stream's bytes */
			*(int *)arg = req == FIONREAD ? es__fionread(s) : es__outq(s, req == SIOCOUTQNSD);
			return 0;
		}
	}
	int r = R_(ioctl)(fd, req, arg);
	if (r == 0 && req == FIONBIO && !es__tl_in && !es__mark_nonblock(fd, !!*(int *)arg) && (s = es__sock(fd)))
		s->nonblock = !!*(int *)arg;
	return r;
}

static int64_t tv_ns(const void *v, socklen_t len)
{
	if (len < sizeof(struct timeval))
		return 0;
	const struct timeval *tv = v;
	return (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
}

/* TCP options that only shape the kernel's segments (Nagle, corking, quick
 * acks) mean nothing to an EMP stream, which sends what was written at the
 * application's next wait: on an EMP socket they are kept (getsockopt reads
 * them back) and cost no system call (nginx corks and uncorks every response) */
static int tcp_shaping(int level, int name)
{
	return level == IPPROTO_TCP && (name == TCP_NODELAY || name == TCP_CORK || name == TCP_QUICKACK);
}

/* TCP_DEFER_ACCEPT (Apache's default `AcceptFilter http data`, nginx's
 * `listen ... deferred`, HAProxy's `defer-accept`) makes the kernel hold a
 * connection back from accept() until the client sends a byte on it. A
 * client under emp-run sends none there: it waits for the server's OFFER
 * first, which the server sends only once it has accepted, so every EMP
 * client gave up after its 500 ms wait (refused under --strict). Where EMP
 * may be used it is not given to the kernel (a listener is the kernel's
 * alone: getsockopt then reports 0). */
static int defer_accept_kept(int fd, int level, int name, const void *v, socklen_t len)
{
	if (level != IPPROTO_TCP || name != TCP_DEFER_ACCEPT || es__tl_in || !v || len < sizeof(int) ||
	    !*(const int *)v || !es__conf())
		return 0;
	static atomic_int told;
	if (!atomic_exchange(&told, 1))
		es__dbg("fd %d: TCP_DEFER_ACCEPT not set (an EMP client's first bytes go over EMP, after the "
			"server's offer: accept() would hold its connection back until it gave up)", fd);
	return 1;
}

static int setsockopt_held(int fd, int level, int name, const void *v, socklen_t len)
{
	if (defer_accept_kept(fd, level, name, v, len))
		return 0;
	struct es_sock *s0 = es__tl_in ? NULL : es__sock(fd);
	if (s0 && s0->state == ES_EMP && tcp_shaping(level, name) && v && len >= sizeof(int)) {
		int on = !!*(const int *)v;
		s0->tcpopt = (s0->tcpopt & ~(1u << name)) | ((unsigned)on << name);
		if ((name == TCP_CORK && !on) || (name == TCP_NODELAY && on))
			es__uncork(s0);   /* as Linux pushes what corking held */
		return 0;
	}
	int r = R_(setsockopt)(fd, level, name, v, len);
	struct es_sock *s;
	if (r < 0 || es__tl_in || !(s = es__sock_cand(fd)))   /* the options are kept from now on */
		return r;
	if (tcp_shaping(level, name) && v && len >= sizeof(int)) {
		int on = !!*(const int *)v;       /* kept for when the socket becomes EMP */
		s->tcpopt = (s->tcpopt & ~(1u << name)) | ((unsigned)on << name);
	}
	if (level != SOL_SOCKET)
		return r;
	if (name == SO_RCVTIMEO)
		s->rcvtimeo_ns = tv_ns(v, len);
	else if (name == SO_SNDTIMEO)
		s->sndtimeo_ns = tv_ns(v, len);
	else if (name == SO_LINGER && len >= sizeof(struct linger)) {
		const struct linger *lg = v;
		s->linger0 = lg->l_onoff && lg->l_linger <= 0;
		s->linger_ns = lg->l_onoff && lg->l_linger > 0 ? lg->l_linger * 1000000000ll : 0;
	}
	return r;
}

static int getsockopt_held(int fd, int level, int name, void *v, socklen_t *len)
{
	GUARD(getsockopt, fd, level, name, v, len);
	struct es_sock *s = es__sock(fd);
	if (s && s->state == ES_EMP && tcp_shaping(level, name) && v && len && *len >= sizeof(int)) {
		*(int *)v = (s->tcpopt >> name) & 1;
		*len = sizeof(int);
		return 0;
	}
	if (s && level == SOL_SOCKET && name == SO_ERROR) {
		if (es__st_undecided(s))
			es__settle(fd, s);
		s = es__sock(fd);
		if (s && (s->state == ES_EMP || s->state == ES_FAILED) && v && len &&
		    *len >= sizeof(int)) {
			int e = 0;
			if (s->state == ES_FAILED) {
				e = s->err;
				s->err = 0;
			} else {
				e = es__so_error(s);
			}
			*(int *)v = e;
			*len = sizeof(int);
			return 0;
		}
	}
	return R_(getsockopt)(fd, level, name, v, len);
}

int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	return R_(getsockname)(fd, sa, len);
}

int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	return R_(getpeername)(fd, sa, len);
}

int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	return HELD(connect_held(fd, sa, len));
}

int shutdown(int fd, int how)
{
	return HELD(shutdown_held(fd, how));
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return HELD(ioctl_held(fd, req, arg));
}

int setsockopt(int fd, int level, int name, const void *v, socklen_t len)
{
	return HELD(setsockopt_held(fd, level, name, v, len));
}

int getsockopt(int fd, int level, int name, void *v, socklen_t *len)
{
	return HELD(getsockopt_held(fd, level, name, v, len));
}
