/* fdtable.c: the fd -> socket/epoll-set table (one lock-free lookup per call) and socket objects' life and locks. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "es.h"

static void *_Atomic *tab;
static int tabn;
static atomic_int hiwater;
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;

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
	s->kfd = fd;
	s->udp = -1;
	s->gen = es__g.gen;
	es__fd_set(fd, s);
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
	es__neg_forget(s);   /* the negotiation responder lets go of it first */
	es__ep_sock_gone(s);
	s->kind = 0;
	s->orphan = 1;
	es__neg_close_udp(s);
	if (!s->c)
		es__live_del(s);   /* (a connection leaves the set in its teardown) */
	if (!es__conn_destroy(s, !s->linger0 && s->state == ES_EMP)) {
		es__hooks_quiesce();   /* a liveness harvest that found s before we unmapped it */
		free(s);   /* else the linger list owns it (and may have freed it already) */
	}
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
	s->waiters = NULL;
	s->live = 0;             /* the liveness set stayed with the parent */
	if (s->state == ES_EMP) {
		s->state = ES_FOREIGN;
		atomic_store(&s->evmask, POLLERR | POLLHUP | POLLIN | POLLOUT);
	}
}

void es__fd_atfork_child(void)
{
	pthread_mutex_init(&tab_lock, NULL);
	es__fd_foreach(child_fix, NULL);
}
