/* datacalls.c: the data calls: read/write/readv/writev/send/recv/sendto/recvfrom/sendmsg/recvmsg/sendfile and the __*_chk variants. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "es.h"

/* s (with the call's reference) after settling a pending negotiation, or
 * NULL when it is the kernel's (s may have gone to it meanwhile: the
 * reference is dropped) */
static struct es_sock *settled(int fd, struct es_sock *s)
{
	if (es__st_undecided(s))
		es__settle(fd, s);
	if (s->state == ES_CAND || es__st_undecided(s) || es__sock(fd) != s) {
		es__sock_put(s);
		return NULL;
	}
	return s;
}

/* The EMP socket behind fd, after settling a pending negotiation, with a
 * reference for the call (dropped by put_ret); NULL = kernel. */
static struct es_sock *emp_fd(int fd)
{
	if (es__tl_in)
		return NULL;
	struct es_sock *s = es__sock_get(fd);
	if (s && (s = settled(fd, s)))
		es__reap_hold();    /* released by put_ret */
	return s;
}

/* emp_fd for a write: a client's first write while its negotiation waits
 * for the server's HELLO goes over EMP right away (es__settle_early), with
 * *done its result; else *done is -2 and the socket is as emp_fd gives it */
static struct es_sock *emp_fd_w(int fd, const struct iovec *iov, int n, int flags, ssize_t *done)
{
	*done = -2;
	if (es__tl_in)
		return NULL;
	struct es_sock *s = es__sock_get(fd);
	if (!s)
		return NULL;
	if (!(s->state == ES_PENDING && s->ng.conn_ret == 2 && !s->ng.early && n >= 0 && n <= 1024 &&
	      (*done = es__settle_early(fd, s, iov, n, flags)) != -2) &&
	    !(s = settled(fd, s)))
		return NULL;
	es__reap_hold();    /* released by put_ret */
	return s;
}

/* the call's reference goes, and closing connections its engine work
 * finished (es__reap_release); errno kept */
static ssize_t put_ret(struct es_sock *s, ssize_t r)
{
	int e = errno;
	es__sock_put(s);
	es__held_flush_aged();
	es__reap_release();
	errno = e;
	return r;
}

/* FAILED / FOREIGN sockets: every data call errors */
static ssize_t bad_state(struct es_sock *s)
{
	if (s->state == ES_FAILED) {
		errno = s->err ? s->err : ECONNREFUSED;
		return -1;
	}
	static int told;
	if (!told++)
		es__log("fd %d: EMP connection inherited across fork belongs to the parent process; "
			"use it there (or close it here)", s->kfd);
	errno = EIO;
	return -1;
}

/* a stream call's result (bytes, or -errno) as the system call returns it;
 * errno as the caller left it on success */
static ssize_t as_call(ssize_t r, int saved_errno)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	errno = saved_errno;
	return r;
}

static ssize_t rx(struct es_sock *s, struct iovec *iov, int n, int flags)
{
	if (s->state != ES_EMP)
		return bad_state(s);
	if (flags & MSG_OOB) {       /* EMP carries no urgent data: the kernel's answer when none is pending */
		errno = EINVAL;
		return -1;
	}
	int e = errno;
	return as_call(es__recv(s, iov, n, flags), e);
}

static ssize_t tx(struct es_sock *s, const struct iovec *iov, int n, int flags)
{
	if (s->state != ES_EMP)
		return bad_state(s);
	if (flags & MSG_OOB) {       /* no urgent data on EMP: said, not sent inline as if it were data */
		static atomic_int told;
		if (!atomic_exchange(&told, 1))
			es__log("send(MSG_OOB) on an EMP connection: EMP carries no urgent data (EOPNOTSUPP); a `use kernel` rule keeps such a program on kernel TCP");
		errno = EOPNOTSUPP;
		return -1;
	}
	int e = errno;
	return as_call(es__send(s, iov, n, flags), e);
}

ssize_t read(int fd, void *buf, size_t n)
{
	struct es_sock *s = emp_fd(fd);
	if (!s)
		return R_(read)(fd, buf, n);
	struct iovec v = { buf, n };
	return put_ret(s, rx(s, &v, 1, 0));
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		abort();
	return read(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n)
{
	struct iovec v = { (void *)buf, n };
	ssize_t d;
	struct es_sock *s = emp_fd_w(fd, &v, 1, 0, &d);
	if (!s)
		return R_(write)(fd, buf, n);
	if (d != -2)
		return put_ret(s, d);
	return put_ret(s, tx(s, &v, 1, 0));
}

ssize_t readv(int fd, const struct iovec *iov, int n)
{
	struct es_sock *s = emp_fd(fd);
	if (!s)
		return R_(readv)(fd, iov, n);
	if (n < 0 || n > 1024) {
		errno = EINVAL;
		return put_ret(s, -1);
	}
	return put_ret(s, rx(s, (struct iovec *)iov, n, 0));
}

ssize_t writev(int fd, const struct iovec *iov, int n)
{
	ssize_t d;
	struct es_sock *s = emp_fd_w(fd, iov, n, 0, &d);
	if (!s)
		return R_(writev)(fd, iov, n);
	if (d != -2)
		return put_ret(s, d);
	if (n < 0 || n > 1024) {
		errno = EINVAL;
		return put_ret(s, -1);
	}
	return put_ret(s, tx(s, iov, n, 0));
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	struct es_sock *s = emp_fd(fd);
	if (!s)
		return R_(recv)(fd, buf, n, flags);
	struct iovec v = { buf, n };
	return put_ret(s, rx(s, &v, 1, flags));
}

ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		abort();
	return recv(fd, buf, n, flags);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	struct iovec v = { (void *)buf, n };
	ssize_t d;
	struct es_sock *s = emp_fd_w(fd, &v, 1, flags, &d);
	if (!s)
		return R_(send)(fd, buf, n, flags);
	if (d != -2)
		return put_ret(s, d);
	return put_ret(s, tx(s, &v, 1, flags));
}

static void peer_addr(struct es_sock *s, struct sockaddr *sa, socklen_t *len)
{
	if (!sa || !len)
		return;
	socklen_t l = *len < sizeof s->remote ? *len : sizeof s->remote;
	memcpy(sa, &s->remote, l);
	*len = sizeof s->remote;
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *len)
{
	struct es_sock *s = emp_fd(fd);
	if (!s)
		return R_(recvfrom)(fd, buf, n, flags, sa, len);
	struct iovec v = { buf, n };
	ssize_t r = rx(s, &v, 1, flags);
	if (r >= 0)
		peer_addr(s, sa, len);
	return put_ret(s, r);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
		       struct sockaddr *sa, socklen_t *len)
{
	if (n > buflen)
		abort();
	return recvfrom(fd, buf, n, flags, sa, len);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t len)
{
	struct iovec v = { (void *)buf, n };
	ssize_t d;
	struct es_sock *s = emp_fd_w(fd, &v, 1, flags, &d);
	if (!s)
		return R_(sendto)(fd, buf, n, flags, sa, len);
	if (d != -2)
		return put_ret(s, d);
	/* a connected stream socket ignores the address (Linux: EISCONN only if given for
	 * a non-TFO send; keep it simple and ignore it) */
	return put_ret(s, tx(s, &v, 1, flags));
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
	struct es_sock *s = emp_fd(fd);
	if (!s) {
		ssize_t r = R_(recvmsg)(fd, m, flags);
		if (r >= 0 && m->msg_controllen)
			es__scm_in(m);       /* descriptors from another process (passfd.c) */
		return r;
	}
	if (flags & MSG_ERRQUEUE)   /* the kernel socket's queue (EAGAIN: EMP queues nothing there) */
		return put_ret(s, R_(recvmsg)(s->kfd, m, flags));
	if (m->msg_iovlen > 1024) {
		errno = EMSGSIZE;
		return put_ret(s, -1);
	}
	ssize_t r = rx(s, m->msg_iov, (int)m->msg_iovlen, flags);
	if (r >= 0) {
		if (m->msg_name)
			peer_addr(s, m->msg_name, &m->msg_namelen);
		m->msg_controllen = 0;
		m->msg_flags = 0;
	}
	return put_ret(s, r);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
	ssize_t d;
	struct es_sock *s = emp_fd_w(fd, m->msg_iov, m->msg_iovlen > 1024 ? -1 : (int)m->msg_iovlen, flags, &d);
	if (!s) {
		if (m->msg_controllen)
			es__scm_out(m);      /* descriptors for another process (passfd.c) */
		return R_(sendmsg)(fd, m, flags);
	}
	if (d != -2)
		return put_ret(s, d);
	if (m->msg_iovlen > 1024) {
		errno = EMSGSIZE;
		return put_ret(s, -1);
	}
	return put_ret(s, tx(s, m->msg_iov, (int)m->msg_iovlen, flags));
}

/* the file is read straight into the stream's send slots (one copy) */
static ssize_t emp_sendfile(struct es_sock *s, int in, off_t *off, size_t count)
{
	int e = errno;
	return as_call(es__send_file(s, in, off, count), e);
}

ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
	struct es_sock *s = emp_fd(out);
	if (!s)
		return R_(sendfile)(out, in, off, count);
	if (s->state != ES_EMP)
		return put_ret(s, bad_state(s));
	return put_ret(s, emp_sendfile(s, in, off, count));
}

ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
	struct es_sock *s = emp_fd(out);
	if (!s)
		return R_(sendfile64)(out, in, off, count);
	if (s->state != ES_EMP)
		return put_ret(s, bad_state(s));
	return put_ret(s, emp_sendfile(s, in, off, count));
}
