/* exec.c: EMP connections and other programs: the exec family, posix_spawn(p), system and popen (one helper, thin wrappers), and descriptors sent to another process (SCM_RIGHTS). */
/*
 * An EMP connection lives in this process's memory (the engine, the stream
 * state); a new program inherits only the kernel socket under it, which the
 * peer never reads (bytes there reset the connection, and bytes that come
 * after its EOF are lost). So no EMP connection reaches a new program:
 *  - exec of this process (execve, execv, execvp, execvpe, execl, execlp,
 *    execle, fexecve, execveat): its own connections that would be inherited
 *    (no FD_CLOEXEC) are flushed (what was written is acknowledged by the
 *    peer, bounded by ES_EXEC_FLUSH_NS), then reset: the peer reads every
 *    byte written before the exec, then an error; the new program's writes
 *    fail (EPIPE). Connections a forked child inherited from its parent
 *    (FOREIGN: the parent still runs them) are not the child's to end: the
 *    new program does not get them (FD_CLOEXEC). An exec that fails leaves
 *    the resets done.
 *    An accepted socket not used here yet (inetd's way, git daemon's) goes
 *    to the new program on kernel TCP: its client is told at once (OFFER,
 *    then REJECT: es__negs_exec) instead of waiting out its bound.
 *  - a new program started beside this one (posix_spawn, posix_spawnp,
 *    system, popen): the process keeps its connections; the child does not
 *    get them (FD_CLOEXEC for the call, cleared again after it), so its
 *    writes fail with EBADF instead of vanishing.
 *  - a descriptor sent to another process (SCM_RIGHTS, es__scm_out): that
 *    process gets the kernel socket only, as a new program does, and reads
 *    nothing there; this process's close then ended the EMP stream with a
 *    clean EOF, and whatever the peer had sent that nobody read was lost
 *    without a word. A connection of ours among the descriptors is flushed,
 *    then reset (connect(AF_UNSPEC): the kernel connection, which the
 *    other process shares, sends RST; and no EMP FIN at our close), with a
 *    log line naming the port: the peer reads every byte written before,
 *    then ECONNRESET, and the receiving process's calls fail (ENOTCONN,
 *    EPIPE). (A `use kernel` rule for the port keeps such a server on kernel
 *    TCP.) An accepted socket not negotiated yet is given away: kernel TCP
 *    in this process (its later epoll_ctl or close begins nothing here),
 *    and the process that gets it (es__scm_in) takes it as its own accept() would:
 *    its first use there negotiates (a server whose master accepts and
 *    hands connections to workers, Node's cluster module: each worker's
 *    connections on EMP, not kernel TCP after the client's bound).
 * glibc reaches execve from these functions internally (not through the
 * PLT), so each needs its own wrapper. A file action of posix_spawn that
 * dup2s an EMP socket onto another descriptor is not seen here; the peer
 * resets the connection if bytes come on its kernel socket (stream_engine.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conn.h"
#include "neg.h"

#define ES_EXEC_FLUSH_NS 2000000000ll

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}
#define REAL(type, name) ((type)real(#name))

static pid_t own_pid;              /* the process that loaded us (a vfork child differs) */
static unsigned own_gen;
__attribute__((constructor)) static void exec_init(void)
{
	own_pid = getpid();
	own_gen = es__g.gen;
}

/* a connection of ours, as opposed to one of the parent's (fork) or one we
 * only share memory with (a vfork child runs on its parent's memory) */
static int owned(struct es_sock *s)
{
	if (s->state != ES_EMP || !s->c || s->c->gen != es__g.gen)
		return 0;
	return es__g.gen != own_gen || getpid() == own_pid;
}

/* what was written goes out and is acknowledged (or the connection ends) */
static void flush_sends(struct es_sock *s, int64_t dl)
{
	es__held_flush_old(0, 0);
	es__defer_flush();
	es__sock_lock(s);
	struct es_conn *c = s->c;
	if (c) {
		c->hold_tail = 0;
		es__flush(c);
	}
	while (c && s->c == c && c->tx_done != c->tx_staged && !c->err && !c->kdead && es__now_ns() < dl)
		if (es__wait(s, dl) < 0)
			break;
	es__sock_unlock(s);
}

/* flushed, then reset (the kernel socket too, which other holders share) */
static void reset_after_flush(int fd, struct es_sock *s, int64_t dl)
{
	flush_sends(s, dl);
	struct linger lg = { 1, 0 };
	R_(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	R_(shutdown)(fd, SHUT_RDWR);
}

struct exec_ctx {
	int spawn;                       /* the caller goes on (posix_spawn, system, popen) */
	int64_t dl;
	int *fds;                        /* FD_CLOEXEC set by us, to clear after a spawn */
	int n, cap;
};

static void note(struct exec_ctx *x, int fd)
{
	if (x->n == x->cap) {
		int cap = x->cap ? x->cap * 2 : 16;
		int *p = realloc(x->fds, cap * sizeof *p);
		if (!p)
			return;              /* the flag stays: the fd is only kept from children */
		x->fds = p;
		x->cap = cap;
	}
	x->fds[x->n++] = fd;
}

static void prep_one(int fd, void *o, void *arg)
{
	struct exec_ctx *x = arg;
	struct es_sock *s = o;
	if (s->kind != ES_KIND_SOCK)
		return;
	int pend = !x->spawn && s->state == ES_PENDING && s->server;
	if (s->state != ES_EMP && s->state != ES_FOREIGN && !pend)
		return;
	int fl = R_(fcntl)(fd, F_GETFD);
	if (fl < 0 || (fl & FD_CLOEXEC))
		return;
	if (pend) {
		es__settle_for_exec(fd, s);   /* the client told at once, kernel TCP (git daemon) */
		return;
	}
	if (!x->spawn && owned(s)) {
		es__log("fd %d carries an EMP connection, which cannot cross exec; flushed, then reset", fd);
		reset_after_flush(fd, s, x->dl);
		return;
	}
	if (R_(fcntl)(fd, F_SETFD, fl | FD_CLOEXEC) == 0 && x->spawn)
		note(x, fd);
}

/* before a new program starts: see the top */
static void exec_prepare(struct exec_ctx *x, int spawn)
{
	*x = (struct exec_ctx){ .spawn = spawn, .dl = es__now_ns() + ES_EXEC_FLUSH_NS };
	if (es__tl_in)
		return;
	int e = errno;
	es__negc_settle_pending();   /* a connect that returned before the server's HELLO: EMP or kernel now */
	es__fd_foreach(prep_one, x);
	errno = e;
}

/* after a spawn: the process's descriptors as they were */
static void exec_done(struct exec_ctx *x)
{
	int e = errno;
	for (int i = 0; i < x->n; i++) {
		struct es_sock *s = es__sock(x->fds[i]);
		int fl = s ? R_(fcntl)(x->fds[i], F_GETFD) : -1;
		if (fl >= 0)
			R_(fcntl)(x->fds[i], F_SETFD, fl & ~FD_CLOEXEC);
	}
	free(x->fds);
	errno = e;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

int execve(const char *path, char *const argv[], char *const envp[])
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return R_(execve)(path, argv, envp);
}

int execv(const char *path, char *const argv[])
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return REAL(int (*)(const char *, char *const[]), execv)(path, argv);
}

int execvp(const char *file, char *const argv[])
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return REAL(int (*)(const char *, char *const[]), execvp)(file, argv);
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return REAL(execve_fn, execvpe)(file, argv, envp);
}

int fexecve(int fd, char *const argv[], char *const envp[])
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return REAL(int (*)(int, char *const[], char *const[]), fexecve)(fd, argv, envp);
}

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
	struct exec_ctx x;
	exec_prepare(&x, 0);
	return REAL(int (*)(int, const char *, char *const[], char *const[], int), execveat)(
		dirfd, path, argv, envp, flags);
}

/* the execl family: the arguments into an array, then the v form (whose wrapper prepares) */
#define ES_EXECL_MAX 4096
#define COLLECT(first, ap, argv, n)                                        \
	do {                                                               \
		argv[0] = (char *)(first);                                 \
		for (n = 1; argv[n - 1] && n < ES_EXECL_MAX; n++)          \
			argv[n] = va_arg(ap, char *);                      \
		if (argv[n - 1]) {                                         \
			va_end(ap);                                        \
			errno = E2BIG;                                     \
			return -1;                                         \
		}                                                          \
	} while (0)

int execl(const char *path, const char *arg, ...)
{
	char *argv[ES_EXECL_MAX];
	int n;
	va_list ap;
	va_start(ap, arg);
	COLLECT(arg, ap, argv, n);
	va_end(ap);
	return execv(path, argv);
}

int execlp(const char *file, const char *arg, ...)
{
	char *argv[ES_EXECL_MAX];
	int n;
	va_list ap;
	va_start(ap, arg);
	COLLECT(arg, ap, argv, n);
	va_end(ap);
	return execvp(file, argv);
}

int execle(const char *path, const char *arg, ...)
{
	char *argv[ES_EXECL_MAX];
	int n;
	va_list ap;
	va_start(ap, arg);
	COLLECT(arg, ap, argv, n);
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	return execve(path, argv, envp);
}

typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			const posix_spawnattr_t *, char *const[], char *const[]);

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
		const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	struct exec_ctx x;
	exec_prepare(&x, 1);
	int r = REAL(spawn_fn, posix_spawn)(pid, path, fa, at, argv, envp);
	exec_done(&x);
	return r;
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
		 const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
	struct exec_ctx x;
	exec_prepare(&x, 1);
	int r = REAL(spawn_fn, posix_spawnp)(pid, file, fa, at, argv, envp);
	exec_done(&x);
	return r;
}

int system(const char *cmd)
{
	struct exec_ctx x;
	exec_prepare(&x, 1);
	int r = REAL(int (*)(const char *), system)(cmd);
	exec_done(&x);
	return r;
}

FILE *popen(const char *cmd, const char *mode)
{
	struct exec_ctx x;
	exec_prepare(&x, 1);
	FILE *f = REAL(FILE *(*)(const char *, const char *), popen)(cmd, mode);
	exec_done(&x);
	return f;
}

/* sendmsg's control data names descriptors for another process (see the top) */
void es__scm_out(const struct msghdr *m)
{
	if (es__tl_in || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
		return;
	int e = errno;
	const char *end = (const char *)m->msg_control + m->msg_controllen;
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		const char *p = (const char *)CMSG_DATA(c);
		size_t len = c->cmsg_len - CMSG_LEN(0);
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);   /* the kernel refuses it; read no further than the buffer */
		for (size_t i = 0; i + sizeof(int) <= len; i += sizeof(int)) {
			int fd;
			memcpy(&fd, p + i, sizeof fd);
			struct es_sock *s = es__sock_get(fd);
			if (!s)
				continue;
			if (s->kind == ES_KIND_SOCK && owned(s)) {
				es__log("fd %d carries an EMP connection (port %u), which cannot be passed to another process; flushed, then reset (a `use kernel` rule for the port keeps it on kernel TCP)",
					fd, ntohs(s->local.sin_port));
				flush_sends(s, es__now_ns() + ES_EXEC_FLUSH_NS);
				es__sock_lock(s);
				s->linger0 = 1;          /* our close sends no EMP FIN: the peer must not read a clean end */
				es__sock_unlock(s);
				/* a reset the process that gets the socket shares: the peer's
				 * reads fail (ECONNRESET), and so do that process's calls
				 * (ENOTCONN, EPIPE) */
				struct sockaddr unspec = { .sa_family = AF_UNSPEC };
				R_(connect)(fd, &unspec, sizeof unspec);
			} else if (s->kind == ES_KIND_SOCK && s->state == ES_PENDING && s->server) {
				es__settle_give_away(fd, s);   /* Node's cluster primary then removes it from epoll and closes it */
			}
			es__sock_put(s);
		}
	}
	errno = e;
}

/* 1 if a TCP listener of this network namespace holds local port `port`
 * (family AF_INET or AF_INET6; sock_diag, which filters listeners by port):
 * an accepted socket's port, not a client's */
static int port_listens(int family, uint16_t port)
{
	int nl = R_(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return 0;
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} q = {
		.h = { .nlmsg_len = sizeof q, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.r = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = 1u << TCP_LISTEN, .id = { .idiag_sport = port } },
	};
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	int found = 0, done = 0;
	if (R_(sendto)(nl, &q, sizeof q, 0, (struct sockaddr *)&k, sizeof k) == (ssize_t)sizeof q) {
		long buf[2048];
		for (int rounds = 0; !done && rounds < 64; rounds++) {
			ssize_t n = R_(recv)(nl, buf, sizeof buf, 0);
			if (n <= 0)
				break;
			for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
				if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
					done = 1;
					break;
				}
				if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
				    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
				    ((struct inet_diag_msg *)NLMSG_DATA(h))->id.idiag_sport == port)
					found = 1;
			}
		}
	}
	R_(close)(nl);
	return found;
}

/* recvmsg's control data brought descriptors from another process (see the top) */
void es__scm_in(const struct msghdr *m)
{
	if (es__tl_in || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr) || es__g.conf_loaded < 0 ||
	    !es__conf())
		return;
	int e = errno;
	const char *end = (const char *)m->msg_control + m->msg_controllen;
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		const char *p = (const char *)CMSG_DATA(c);
		size_t len = c->cmsg_len - CMSG_LEN(0);
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);
		for (size_t i = 0; i + sizeof(int) <= len; i += sizeof(int)) {
			int fd, type = 0, dom = 0;
			memcpy(&fd, p + i, sizeof fd);
			socklen_t tl = sizeof type, dl = sizeof dom;
			struct sockaddr_in l, r;
			if (es__fd_get(fd) || R_(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
			    type != SOCK_STREAM || R_(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 ||
			    (dom != AF_INET && dom != AF_INET6) ||
			    es__neg_name_in(fd, 0, &l) < 0 || es__neg_name_in(fd, 1, &r) < 0 ||
			    emp_conf_find_ip(&es__g.conf, r.sin_addr.s_addr) < 0 || !port_listens(dom, l.sin_port))
				continue;
			int fl = R_(fcntl)(fd, F_GETFL);
			int mark = es__eligible_accept(-1, fd, &l, &r), ttl = 0;
			socklen_t ttll = sizeof ttl;
			if (mark == MARK_UNKNOWN && R_(getsockopt)(fd, IPPROTO_IP, IP_TTL, &ttl, &ttll) == 0) {
				/* what the sender's accept read in the SYN (neg.h); the TTL back to the default */
				mark = ttl == NEG_TTL_MARK ? MARK_EMP : ttl == NEG_TTL_UNKNOWN ? MARK_UNKNOWN : MARK_PLAIN;
				int def = -1;
				if (mark != MARK_PLAIN)
					R_(setsockopt)(fd, IPPROTO_IP, IP_TTL, &def, sizeof def);
				if (mark == MARK_PLAIN && !es__g.strict)
					continue;        /* a plain client, or a sender without the library: kernel TCP */
			}
			if (!mark)
				continue;
			struct es_sock *s = es__sock_new(fd, ES_PENDING);
			if (s) {
				s->server = 1;
				s->local = l;
				s->remote = r;
				s->nonblock = fl >= 0 && (fl & O_NONBLOCK);
				s->ng.mark = mark;
				es__dbg("fd %d: a connection accepted by another process (SCM_RIGHTS): negotiated at its first use here", fd);
			}
		}
	}
	errno = e;
}
