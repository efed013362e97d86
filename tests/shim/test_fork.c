/* test_fork.c: the shim's fork handling (preload/fork.c): a fork while another thread holds any shim lock leaves the child with every lock free and its sockets usable. */
/*
 * Linked with the shim's objects (not preloaded), so the test calls its
 * internals. For each lock of es__fork_locks[] (and a socket's own lock) a
 * thread takes it and holds it while the main thread forks; a lock taken at
 * prepare makes fork wait for the holder (it lets go soon), any other is
 * copied held. The child must find every lock free, take each, and use the
 * shim (randomness, the liveness set, a tracked socket's lock, poll, epoll)
 * without hanging: the runner's timeout catches a deadlock.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner.h"
#include "es.h"

struct holder {
	pthread_mutex_t *mu;
	atomic_int held, release;
};

static void *hold(void *arg)
{
	struct holder *h = arg;
	pthread_mutex_lock(h->mu);
	atomic_store(&h->held, 1);
	while (!atomic_load(&h->release))
		usleep(1000);
	usleep(20000);          /* the fork is under way (or waits in prepare) */
	pthread_mutex_unlock(h->mu);
	return NULL;
}

/* in the child: every lock free, the shim usable; exit status says what failed */
static int child_checks(struct es_sock *s)
{
	for (int i = 0; i < es__fork_nlocks; i++) {
		if (pthread_mutex_trylock(*es__fork_locks[i].mu) != 0)
			return 10 + i;
		pthread_mutex_unlock(*es__fork_locks[i].mu);
	}
	if (pthread_mutex_trylock(&s->lock) != 0)
		return 2;
	pthread_mutex_unlock(&s->lock);
	es__sock_lock(s);
	es__sock_unlock(s);
	(void)es__random64();
	if (es__live_fd() < 0)
		return 3;
	int ep = epoll_create1(0), sv[2];
	if (ep < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 4;
	struct epoll_event ev = { .events = EPOLLOUT }, out;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev) < 0 || epoll_wait(ep, &out, 1, 1000) != 1)
		return 5;
	struct pollfd p = { sv[1], POLLOUT, 0 };
	if (poll(&p, 1, 1000) != 1)
		return 6;
	if (write(sv[0], "x", 1) != 1 || read(sv[1], &p, 1) != 1)
		return 7;
	close(sv[0]);
	close(sv[1]);
	close(ep);
	return 0;
}

static void fork_holding(pthread_mutex_t *mu, const char *name, struct es_sock *s)
{
	struct holder h = { .mu = mu };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, hold, &h) == 0);
	while (!atomic_load(&h.held))
		usleep(1000);
	atomic_store(&h.release, 1);
	pid_t pid = fork();
	if (pid == 0)
		_exit(child_checks(s));
	CHECK(pid > 0);
	pthread_join(t, NULL);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork while a thread held %s: child %s %d",
		  name, WIFEXITED(st) ? "exited" : "killed by signal",
		  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	/* and the parent goes on: the lock is free again */
	CHECK(pthread_mutex_trylock(mu) == 0);
	pthread_mutex_unlock(mu);
}

static void t_fork_each_lock_held(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	struct es_sock *s = es__sock_new(fd, ES_CAND);
	CHECK(s);
	for (int i = 0; i < es__fork_nlocks; i++)
		fork_holding(*es__fork_locks[i].mu, es__fork_locks[i].name, s);
	fork_holding(&s->lock, "a socket's lock", s);
	/* a held lock is fresh in the child even with several held at once */
	struct holder h[2] = { { .mu = *es__fork_locks[0].mu }, { .mu = *es__fork_locks[es__fork_nlocks - 1].mu } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		CHECK(pthread_create(&t[i], NULL, hold, &h[i]) == 0);
		while (!atomic_load(&h[i].held))
			usleep(1000);
	}
	for (int i = 0; i < 2; i++)
		atomic_store(&h[i].release, 1);
	pid_t pid = fork();
	if (pid == 0)
		_exit(child_checks(s));
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* the child's generation moves on and it holds no endpoint; the parent's is unchanged */
static void t_fork_child_state(void)
{
	unsigned g = es__g.gen;
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		unsigned cg = es__g.gen;
		int ok = cg == g + 1 && !es__g.ep && !es__g.ep_failed;
		_exit(ok ? 0 : 1);
	}
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(es__g.gen, g);
	close(pfd[0]);
	close(pfd[1]);
}

static const struct emp_test tests[] = {
	{ "shim_fork_each_lock_held", t_fork_each_lock_held, 30 },
	{ "shim_fork_child_state", t_fork_child_state, 10 },
};

const struct emp_test_suite emp_suite_fork = { "fork", tests, sizeof(tests) / sizeof(tests[0]) };
