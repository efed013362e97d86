/* test_signals.c: sigaction through the shim (sigcatch.c): what the program sees of its handlers, the count a blocking call reads, and a blocking read, epoll_wait, poll and select that a signal ends while they spin. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "simwire.h"
#include "es.h"

static atomic_int h_runs, h_sig, h_val;

static void on_sig(int sig)
{
	atomic_fetch_add(&h_runs, 1);
	atomic_store(&h_sig, sig);
}

static void on_info(int sig, siginfo_t *si, void *ctx)
{
	atomic_fetch_add(&h_runs, 1);
	atomic_store(&h_sig, si && ctx ? si->si_signo : -sig);
	atomic_store(&h_val, si ? si->si_value.sival_int : -1);
}

/* the kernel's action for sig, past every wrapper */
static void kernel_action(int sig, void **handler, unsigned long *flags)
{
	struct { void *h; unsigned long f; void *r; uint64_t m; } k;
	CHECK(syscall(SYS_rt_sigaction, sig, NULL, &k, 8) == 0);
	*handler = k.h;
	*flags = k.f;
}

/* A handler without SA_RESTART: the program reads back its own handler,
 * flags and mask; the kernel holds the trampoline; a signal runs the
 * program's handler once and moves this thread's count by one */
static void t_sig_report(void)
{
	struct sigaction sa = { .sa_handler = on_sig }, old;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	CHECK(sigaction(SIGUSR1, NULL, &old) == 0);
	CHECK(old.sa_handler == on_sig);
	CHECK_EQ(old.sa_flags & (SA_SIGINFO | SA_RESTART), 0);
	CHECK(sigismember(&old.sa_mask, SIGUSR2) == 1);
	void *kh;
	unsigned long kf;
	kernel_action(SIGUSR1, &kh, &kf);
	CHECK(kh != (void *)on_sig);
	unsigned c0 = es__tl_caught;
	atomic_store(&h_runs, 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK_EQ(atomic_load(&h_sig), SIGUSR1);
	CHECK_EQ(es__tl_caught - c0, 1);
	/* installed again over itself: the old action is still the program's */
	CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
	CHECK(old.sa_handler == on_sig);
}

/* siginterrupt(sig, 0) turns SA_RESTART on through glibc's own sigaction,
 * past the wrapper: the handler still runs, and is no longer counted (a
 * blocking call goes on, as the kernel's would) */
static void t_sig_siginterrupt(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	unsigned c0 = es__tl_caught;
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(es__tl_caught - c0, 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	CHECK(siginterrupt(SIGUSR1, 0) == 0);   /* what old programs still call */
#pragma GCC diagnostic pop
	atomic_store(&h_runs, 0);
	c0 = es__tl_caught;
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK_EQ(es__tl_caught, c0);
}

/* SA_SIGINFO: the program's handler gets the same siginfo (a sigqueue value)
 * and context */
static void t_sig_siginfo(void)
{
	struct sigaction sa = { .sa_sigaction = on_info, .sa_flags = SA_SIGINFO }, old;
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR2, &sa, NULL) == 0);
	CHECK(sigaction(SIGUSR2, NULL, &old) == 0);
	CHECK(old.sa_sigaction == on_info && (old.sa_flags & SA_SIGINFO));
	atomic_store(&h_runs, 0);
	union sigval v = { .sival_int = 4242 };
	CHECK(sigqueue(getpid(), SIGUSR2, v) == 0);
	for (int i = 0; i < 1000 && !atomic_load(&h_runs); i++)
		usleep(1000);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK_EQ(atomic_load(&h_sig), SIGUSR2);
	CHECK_EQ(atomic_load(&h_val), 4242);
}

/* Handlers the kernel restarts calls for (SA_RESTART), fault signals and
 * SIG_IGN are installed as given, and running one moves no count */
static void t_sig_untouched(void)
{
	struct sigaction sa = { .sa_handler = on_sig, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	void *kh;
	unsigned long kf;
	kernel_action(SIGUSR1, &kh, &kf);
	CHECK(kh == (void *)on_sig);
	unsigned c0 = es__tl_caught;
	atomic_store(&h_runs, 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK_EQ(es__tl_caught, c0);
	struct sigaction seg = { .sa_handler = on_sig };
	sigemptyset(&seg.sa_mask);
	struct sigaction prev;
	CHECK(sigaction(SIGSEGV, &seg, &prev) == 0);
	kernel_action(SIGSEGV, &kh, &kf);
	CHECK(kh == (void *)on_sig);
	CHECK(sigaction(SIGSEGV, &prev, NULL) == 0);
	struct sigaction ign = { .sa_handler = SIG_IGN };
	sigemptyset(&ign.sa_mask);
	CHECK(sigaction(SIGUSR1, &ign, NULL) == 0);
	kernel_action(SIGUSR1, &kh, &kf);
	CHECK(kh == (void *)SIG_IGN);
}

/* signal() hands back what the kernel holds (the trampoline); installed
 * again (by signal() or sigaction()), it still runs the program's handler */
static void t_sig_signal_roundtrip(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	void (*old)(int) = signal(SIGUSR1, SIG_IGN);
	CHECK(old != SIG_ERR && old != SIG_IGN && old != SIG_DFL);
	CHECK(signal(SIGUSR1, old) == SIG_IGN);
	atomic_store(&h_runs, 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK_EQ(atomic_load(&h_sig), SIGUSR1);
	/* the same value installed again through sigaction (no SA_SIGINFO) runs
	 * the program's handler once, and reads back as the program's */
	struct sigaction again = { .sa_handler = old }, back;
	sigemptyset(&again.sa_mask);
	CHECK(sigaction(SIGUSR1, &again, NULL) == 0);
	atomic_store(&h_runs, 0);
	CHECK(raise(SIGUSR1) == 0);
	CHECK_EQ(atomic_load(&h_runs), 1);
	CHECK(sigaction(SIGUSR1, NULL, &back) == 0);
	CHECK(back.sa_handler == on_sig);
}

/* close both ends and drive the wire until the lingering connections are
 * torn down (a later test's close must not reap into a freed harness) */
static void sw_close(struct sw *w)
{
	CHECK(close(w->fd[0]) == 0 && close(w->fd[1]) == 0);
	sw_settle_reaping(w);
	h_free(&w->h);
}

struct rd { int fd; ssize_t r; int e; atomic_int done; };

static void *blocking_read(void *arg)
{
	struct rd *d = arg;
	char b[64];
	d->r = read(d->fd, b, sizeof b);
	d->e = errno;
	atomic_store(&d->done, 1);
	return NULL;
}

/* A blocking read that spins for EMP (virtual time: nobody moves the
 * engines' clock, so the spin never gives up and never sleeps) ends with
 * EINTR when a handler without SA_RESTART runs on its thread: the kernel's
 * read would have. Before sigcatch.c the handler ran and the spin went on. */
static void t_sig_spin_eintr(void)
{
	struct sw w;
	sw_open(&w, NULL, 4, 1024);
	CHECK(fcntl(w.fd[1], F_SETFL, 0) == 0);   /* blocking */
	struct sigaction sa = { .sa_handler = on_sig };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	struct rd d = { .fd = w.fd[1] };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, blocking_read, &d) == 0);
	usleep(50000);
	CHECK(!atomic_load(&d.done));
	atomic_store(&h_runs, 0);
	CHECK(pthread_kill(t, SIGUSR1) == 0);
	for (int i = 0; i < 2000 && !atomic_load(&d.done); i++)
		usleep(1000);
	CHECK_MSG(atomic_load(&d.done), "the read still spins 2 s after the signal (handler ran %d times)",
		  atomic_load(&h_runs));
	pthread_join(t, NULL);
	CHECK_EQ(d.r, -1);
	CHECK_EQ(d.e, EINTR);
	CHECK_EQ(atomic_load(&h_runs), 1);
	/* the stream is intact: the next byte written is read */
	CHECK(fcntl(w.fd[1], F_SETFL, O_NONBLOCK) == 0);
	CHECK_EQ(write(w.fd[0], "z", 1), 1);
	char c = 0;
	for (int i = 0; i < 200 && read(w.fd[1], &c, 1) != 1; i++)
		sw_settle(&w);
	CHECK_EQ(c, 'z');
	sw_close(&w);
}

struct mw { int fd, ep, how; int r, e; atomic_int done; };

static void *multiplex_wait(void *arg)
{
	struct mw *m = arg;
	if (m->how == 0) {
		struct epoll_event ev;
		m->r = epoll_wait(m->ep, &ev, 1, -1);
	} else if (m->how == 1) {
		struct pollfd p = { m->fd, POLLIN, 0 };
		m->r = poll(&p, 1, -1);
	} else {
		fd_set rs;
		FD_ZERO(&rs);
		FD_SET(m->fd, &rs);
		m->r = select(m->fd + 1, &rs, NULL, NULL, NULL);
	}
	m->e = errno;
	atomic_store(&m->done, 1);
	return NULL;
}

/* epoll_wait, poll and select with no timeout on an idle EMP socket spin
 * for ever in virtual time; a handler without SA_RESTART on their thread
 * ends them with EINTR, as the kernel's would (before, the handler ran and
 * the spin went on) */
static void t_sig_multiplex_eintr(void)
{
	struct sigaction sa = { .sa_handler = on_sig };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	static const char *name[3] = { "epoll_wait", "poll", "select" };
	for (int how = 0; how < 3; how++) {
		struct sw w;
		sw_open(&w, NULL, 4, 1024);
		struct mw m = { .fd = w.fd[1], .ep = epoll_create1(0), .how = how };
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 7 };
		CHECK(m.ep >= 0 && epoll_ctl(m.ep, EPOLL_CTL_ADD, w.fd[1], &ev) == 0);
		pthread_t t;
		CHECK(pthread_create(&t, NULL, multiplex_wait, &m) == 0);
		usleep(50000);
		CHECK_MSG(!atomic_load(&m.done), "%s returned %d before any signal", name[how], m.r);
		atomic_store(&h_runs, 0);
		CHECK(pthread_kill(t, SIGUSR1) == 0);
		for (int i = 0; i < 2000 && !atomic_load(&m.done); i++)
			usleep(1000);
		CHECK_MSG(atomic_load(&m.done), "%s still spins 2 s after the signal (handler ran %d times)", name[how],
			  atomic_load(&h_runs));
		pthread_join(t, NULL);
		CHECK_MSG(m.r == -1 && m.e == EINTR, "%s: %d (%s)", name[how], m.r, strerror(m.e));
		CHECK(close(m.ep) == 0);
		sw_close(&w);
	}
}

static const struct emp_test tests[] = {
	{ "shim_sig_report", t_sig_report, 10 },
	{ "shim_sig_siginfo", t_sig_siginfo, 10 },
	{ "shim_sig_siginterrupt", t_sig_siginterrupt, 10 },
	{ "shim_sig_untouched", t_sig_untouched, 10 },
	{ "shim_sig_signal_roundtrip", t_sig_signal_roundtrip, 10 },
	{ "shim_sig_spin_eintr", t_sig_spin_eintr, 20 },
	{ "shim_sig_multiplex_eintr", t_sig_multiplex_eintr, 20 },
};

const struct emp_test_suite emp_suite_signals = { "signals", tests, sizeof(tests) / sizeof(tests[0]) };
