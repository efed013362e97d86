/* exec.c: EMP connections and new programs: the exec family, posix_spawn(p), system and popen (one helper, thin wrappers). */
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
 *  - a descriptor sent to another process (SCM_RIGHTS): passfd.c.
 * glibc reaches execve from these functions internally (not through the
 * PLT), so each needs its own wrapper. A file action of posix_spawn that
 * dup2s an EMP socket onto another descriptor is not seen here; the peer
 * resets the connection if bytes come on its kernel socket (stream_engine.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conn.h"

#define ES_EXEC_FLUSH_NS 2000000000ll

static void *real(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}
#define REAL(type, name) ((type)real(#name))

/* a connection of ours, as opposed to one of the parent's (fork) or one we
 * only share memory with (a vfork child runs on its parent's memory) */
int es__exec_owned(struct es_sock *s)
{
	if (s->state != ES_EMP || !s->c || s->c->gen != es__g.gen)
		return 0;
	return !es__vfork_child();
}

/* what was written goes out and is acknowledged (or the connection ends) */
void es__exec_flush(struct es_sock *s, int64_t dl)
{
	es__held_flush_old(0, 0);
	es__defer_flush();
	es__sig_begin();
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
	if (!x->spawn && es__exec_owned(s)) {
		es__log("fd %d carries an EMP connection, which cannot cross exec; flushed, then reset", fd);
		es__exec_flush(s, x->dl);
		struct linger lg = { 1, 0 };
		R_(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		R_(shutdown)(fd, SHUT_RDWR);
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
