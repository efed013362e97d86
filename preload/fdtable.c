/* fdtable.c: the fd -> socket/epoll-set table (one lock-free lookup per call) and socket objects' life and locks. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "es.h"
#include "sys.h"

static void *_Atomic *tab;
static int tabn;
static atomic_int hiwater;
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_fdtab = &tab_lock;   /* held across fork (fork.c) */

#define ES_FD_CAP (1l << 24)

static long nr_open(void)
{
	char b[32];
	long n = 0;
	int fd = open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t k = R_(read)(fd, b, sizeof b - 1);
		R_(close)(fd);
		if (k > 0) {
			b[k] = 0;
			n = strtol(b, NULL, 10);
		}
	}
	return n > 0 ? n : 1l << 20;
}

static int tab_init(void)
{
	if (tab)
		return 0;
	pthread_mutex_lock(&tab_lock);
	if (!tab) {
		/* every fd the kernel can give (fs.nr_open bounds RLIMIT_NOFILE, which
		 * may be raised later): untouched entries cost address space only */
		long n = nr_open();
		if (n < 65536)
			n = 65536;
		if (n > ES_FD_CAP)
			n = ES_FD_CAP;
		const char *e = secure_getenv("EMP_FD_TABLE");   /* tests: a smaller table */
		long v = e ? strtol(e, NULL, 10) : 0;
		if (v >= 64 && v < n)
			n = v;
		void *p = mmap(NULL, n * sizeof(void *), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p != MAP_FAILED) {
			tabn = (int)n;
			__atomic_store_n(&tab, p, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&tab_lock);
	return tab ? 0 : -1;
}

void *es__fd_get(int fd)
{
	void *_Atomic *t = __atomic_load_n(&tab, __ATOMIC_ACQUIRE);
	if (!t || fd < 0 || fd >= tabn)
		return NULL;
	return atomic_load_explicit(&t[fd], memory_order_acquire);
}

struct es_sock *es__sock(int fd)
{
	struct es_sock *s = es__fd_get(fd);
	return s && s->kind == ES_KIND_SOCK ? s : NULL;
}

int es__fd_fits(int fd)
{
	return tab_init() == 0 && fd >= 0 && fd < tabn;
}

void es__fd_set(int fd, void *obj)
{
	if (!es__fd_fits(fd))
		return;
	atomic_store_explicit(&tab[fd], obj, memory_order_release);
	if (obj && fd >= atomic_load(&hiwater))
		atomic_store(&hiwater, fd + 1);
}

int es__fd_max(void)
{
	return atomic_load(&hiwater);
}

void es__fd_foreach(void (*fn)(int fd, void *obj, void *arg), void *arg)
{
	int n = es__fd_max();
	for (int fd = 0; fd < n; fd++) {
		void *o = es__fd_get(fd);
		if (o)
			fn(fd, o, arg);
	}
}

void es__fd_lock(void)
{
	pthread_mutex_lock(&tab_lock);
}

void es__fd_unlock(void)
{
	pthread_mutex_unlock(&tab_lock);
}

struct es_sock *es__sock_new(int fd, int state)
{
	if (tab_init() < 0 || fd < 0 || fd >= tabn)
		return NULL;
	struct es_sock *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->kind = ES_KIND_SOCK;
	pthread_mutex_init(&s->lock, NULL);
	s->state = state;
	s->refs = 1;
	atomic_init(&s->users, 1);
	s->kfd = fd;
	s->udp = -1;
	s->gen = es__g.gen;
	es__fd_set(fd, s);
	return s;
}

/* Lookups in progress (es__sock_get): a socket that left the table is
 * released only when none is, so no lookup can take a reference to freed
 * memory; the window is a load and an increment. */
static atomic_int lookups;
static __thread int tl_looking __attribute__((tls_model("initial-exec")));   /* a signal handler's close must not wait for its own thread */

struct es_sock *es__sock_get(int fd)
{
	if (!es__sock(fd))
		return NULL;         /* a kernel fd: no shared counter touched */
	tl_looking = 1;
	atomic_fetch_add(&lookups, 1);
	struct es_sock *s = es__sock(fd);
	if (s)
		atomic_fetch_add(&s->users, 1);
	atomic_fetch_sub(&lookups, 1);
	tl_looking = 0;
	return s;
}

static void sock_final(struct es_sock *s);

void es__sock_put(struct es_sock *s)
{
	if (atomic_fetch_sub(&s->users, 1) == 1)
		sock_final(s);
}

static void quiesce_lookups(void)
{
	atomic_thread_fence(memory_order_seq_cst);   /* the table stores before the look at lookups */
	while (atomic_load(&lookups) > tl_looking)
		sched_yield();
}

void es__sock_release(struct es_sock *s)
{
	quiesce_lookups();
	es__sock_put(s);
}

/* The last fd is closed while calls still hold s: the caller closes the
 * kernel fd at once, so the teardown that runs at the last put works on a
 * private duplicate made now (a lingering connection keeps it, else
 * sock_final closes it): made after the close, it could take the closed
 * number, which the application's other threads still name. */
static void keep_kernel_fd(struct es_sock *s)
{
	if (s->kfd_own)
		return;
	int k = emp__sys_dup_high(s->kfd);
	if (k < 0)
		return;
	es__sock_lock(s);
	es__live_del(s);         /* registered under the old number */
	s->kfd = k;
	s->kfd_own = 1;
	es__sock_unlock(s);
}

/* Numbers whose close is between the kernel's close and the table update
 * (under tab_lock). The kernel may hand such a number out again at once: to
 * a signal handler that interrupted the close, or to another thread (dup,
 * open, pipe); its close finds the table entry still naming our socket, but
 * the number is no longer the socket's: a plain close, which takes no
 * reference (t_sock_signal: the handler's dup of a pipe closed this way
 * dropped a second reference, and the connection was torn down under the
 * program's open fd, 1 run in 15). */
#define CLOSING_MAX 16
static int closing[CLOSING_MAX], nclosing;

static int closing_has(int fd)
{
	for (int i = 0; i < nclosing; i++)
		if (closing[i] == fd)
			return 1;
	return 0;
}

static void closing_del(int fd)
{
	pthread_mutex_lock(&tab_lock);
	for (int i = 0; i < nclosing; i++)
		if (closing[i] == fd) {
			closing[i] = closing[--nclosing];
			break;
		}
	pthread_mutex_unlock(&tab_lock);
}

void (*es__close_gap_hook)(int fd);

/* An O_PATH descriptor of "/": every data call on it (read, write, send,
 * poll, epoll_ctl) says EBADF. A closing socket's number is pointed at it
 * (dup3) before its table entry goes, so the number stays ours, naming no
 * socket, until the kernel frees it: no other thread or signal handler can
 * get it again while the table still names the socket (a file a second
 * thread opened there and wrote to took the bytes into the EMP connection),
 * and a call that still names the old number meanwhile sees EBADF, as after
 * a close, never the kernel socket under the connection. */
static int dead_fd = -1;

static int park(int fd)
{
	for (int tries = 0; tries < 2; tries++) {
		int d = __atomic_load_n(&dead_fd, __ATOMIC_ACQUIRE);
		if (d < 0) {
			d = emp__sys_fd_high(open("/", O_PATH | O_CLOEXEC));
			if (d < 0)
				return 0;
			int none = -1;
			if (!__atomic_compare_exchange_n(&dead_fd, &none, d, 0, __ATOMIC_ACQ_REL,
							 __ATOMIC_ACQUIRE)) {
				R_(close)(d);
				d = none;
			}
		}
		if (R_(dup3)(d, fd, O_CLOEXEC) == fd)
			return 1;
		if (errno != EBADF)
			return 0;
		/* the program closed it (a close-everything loop): a fresh one */
		__atomic_compare_exchange_n(&dead_fd, &d, -1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
	}
	return 0;
}

/* close(fd): the socket's kernel file leaves the number first (park), then
 * the table entry goes, then the number is freed; without park (no O_PATH
 * descriptor to be had), the kernel fd goes first and the entry after (a call
 * in another thread meanwhile finds the socket, or a closed fd: never the
 * kernel socket under an EMP connection, which the peer does not read) */
int es__sock_close(int fd, struct es_sock *s)
{
	pthread_mutex_lock(&tab_lock);
	if (closing_has(fd)) {
		pthread_mutex_unlock(&tab_lock);
		return R_(close)(fd);   /* a number handed out again inside our close */
	}
	int last = s->refs <= 1 && s->kfd == fd;
	pthread_mutex_unlock(&tab_lock);
	/* a blocking connect returned before the server's HELLO: the outcome
	 * first (a round trip at most), so the connection closes the way it went */
	if (last && s->state == ES_PENDING && s->ng.conn_ret == 2 && es__settle(fd, s) == ES_CAND)
		return R_(close)(fd);   /* kernel TCP: s went with it */
	if (last && s->state == ES_EMP)
		es__held_flush();    /* a write this thread held back leaves before the close */
	if (last && s->state != ES_CAND)
		keep_kernel_fd(s);
	pthread_mutex_lock(&tab_lock);
	int listed = nclosing < CLOSING_MAX;   /* full (16 closes at once): unguarded, as before */
	if (listed)
		closing[nclosing++] = fd;
	pthread_mutex_unlock(&tab_lock);
	int parked = park(fd);
	if (parked)
		es__sock_unref_fd(fd, s);   /* the number is still ours: nobody else has it */
	int r = R_(close)(fd);
	int e = errno;
	if (es__close_gap_hook)
		es__close_gap_hook(fd);
	if (!parked)
		es__sock_unref_fd(fd, s);
	if (listed)
		closing_del(fd);
	errno = e;
	return r;
}

struct es_mark { int kind; int nonblock; };
static const struct es_mark marks[2] = { { ES_KIND_MARK, 0 }, { ES_KIND_MARK, 1 } };

int es__is_mark(const void *o)
{
	return o == &marks[0] || o == &marks[1];
}

void es__mark_cand(int fd, int nonblock)
{
	es__fd_set(fd, (void *)&marks[!!nonblock]);
}

int es__mark_nonblock(int fd, int on)
{
	void *o = es__fd_get(fd);
	if (!es__is_mark(o))
		return 0;
	atomic_compare_exchange_strong(&tab[fd], &o, (void *)&marks[!!on]);
	return 1;
}

struct es_sock *es__sock_cand(int fd)
{
	void *o = es__fd_get(fd);
	if (!es__is_mark(o))
		return es__sock(fd);
	struct es_sock *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->kind = ES_KIND_SOCK;
	pthread_mutex_init(&s->lock, NULL);
	s->state = ES_CAND;
	s->refs = 1;
	atomic_init(&s->users, 1);
	s->kfd = fd;
	s->udp = -1;
	s->gen = es__g.gen;
	s->nonblock = ((const struct es_mark *)o)->nonblock;
	if (!atomic_compare_exchange_strong(&tab[fd], &o, s)) {
		free(s);                 /* closed or made meanwhile */
		return es__sock(fd);
	}
	return s;
}

/* fd no longer refers to s (closed or overwritten); the kernel fd itself is the caller's. */
void es__sock_unref_fd(int fd, struct es_sock *s)
{
	pthread_mutex_lock(&tab_lock);
	if (es__fd_get(fd) == s)
		es__fd_set(fd, NULL);
	int last = --s->refs <= 0;
	if (!last && s->kfd == fd) {
		int n = es__fd_max();
		for (int i = 0; i < n; i++)
			if (es__fd_get(i) == s) {
				s->kfd = i;
				break;
			}
	}
	pthread_mutex_unlock(&tab_lock);
	if (!last)
		return;
	quiesce_lookups();
	if (atomic_load(&s->users) > 1)
		keep_kernel_fd(s);   /* calls hold s: the teardown runs after the caller's close */
	es__sock_put(s);
}

/* the last reference went: the socket's teardown (its connection lingers or is given up) */
static void sock_final(struct es_sock *s)
{
	if (s->dropped) {
		free(s);
		return;
	}
	int own = s->kfd_own ? s->kfd : -1;   /* keep_kernel_fd's */
	es__negc_forget(s);   /* the negotiation responder lets go of it first */
	es__ep_sock_gone(s);
	s->kind = 0;
	s->orphan = 1;
	es__neg_close_udp(s);
	if (!s->c)
		es__live_del(s);   /* (a connection leaves the set in its teardown) */
	if (es__conn_destroy(s, !s->linger0 && s->state == ES_EMP))
		return;    /* lingers: the linger list owns s (and may have freed it), and own */
	es__hooks_quiesce();   /* a liveness harvest that found s before we unmapped it */
	free(s);
	if (own >= 0)
		R_(close)(own);
}

void es__sock_lock(struct es_sock *s)
{
	pthread_mutex_lock(&s->lock);
}

void es__sock_unlock(struct es_sock *s)
{
	for (;;) {
		if (s->c && atomic_exchange(&s->dirty, 0)) {
			es__process(s);
			continue;
		}
		pthread_mutex_unlock(&s->lock);
		if (!atomic_load(&s->dirty) || pthread_mutex_trylock(&s->lock))
			return;
	}
}

static void child_fix(int fd, void *o, void *arg)
{
	(void)fd; (void)arg;
	struct es_sock *s = o;
	if (s->kind != ES_KIND_SOCK)
		return;
	pthread_mutex_init(&s->lock, NULL);
	atomic_store(&s->users, 1);   /* the calls that held it were the parent's threads' */
	s->waiters = NULL;
	s->live = 0;             /* the liveness set stayed with the parent */
	if (s->state == ES_EMP) {
		s->state = ES_FOREIGN;
		atomic_store(&s->evmask, es__events(s));
	}
}

/* fork.c: after the process-wide locks were made fresh */
void es__fd_atfork_child(void)
{
	atomic_store(&lookups, 0);
	es__fd_foreach(child_fix, NULL);
}
