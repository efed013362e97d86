/* sigrestart.c: a blocking EMP read or write and the signals that come while it waits: none is missed, and one whose handler asked for SA_RESTART lets it go on, as the kernel's would. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "es.h"

/*
 * signal(7): read, write, recv and send on a socket without a timeout are
 * restarted after a handler that was installed with SA_RESTART; poll, select
 * and epoll_wait never are, nor is a call on a socket with SO_RCVTIMEO or
 * SO_SNDTIMEO. The shim's wait does not learn which signal ran, so it goes on
 * only when every signal that has a handler asks for SA_RESTART: a program
 * with one handler without it sees EINTR as before (conservative). Only a
 * signal with a handler ends the wait with EINTR (a stop, an ignored signal or
 * a fatal one never returns to the caller), so the scan runs on that path only.
 * Dispositions that cannot be read (the C library's own signals) count as
 * restarting: the C library installs them with SA_RESTART.
 */
int es__sig_restarts(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (!(sa.sa_flags & SA_SIGINFO) && (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN))
			continue;
		if (!(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}

/*
 * A kernel read or write that blocks is inside the system call for the whole
 * wait, so any signal that comes meanwhile ends it with EINTR. The shim's
 * wait is a loop of sleeps (ppoll) and looks at the stream between them; a
 * signal that came while the thread was awake ran its handler there, and the
 * next sleep did not know: the call slept on. The JDK closes a blocking
 * SocketChannel that another thread reads by dup2() over its number, which
 * wakes that thread's ppoll (the number it polls is now a socket pair at EOF),
 * and then a signal to the reader; the reader's ppoll saw the number ready and
 * returned 1, the handler ran on the way out, and the reader slept for ever.
 *
 * So from its first sleep to its return a blocking call keeps the signals
 * blocked, and each sleep's ppoll unblocks them (the caller's mask) for as
 * long as it sleeps: a signal that comes while the thread is awake stays
 * pending and ends the next sleep with EINTR. A ppoll with fds ready returns
 * them before a pending signal, so a sleep after the first asks first (a
 * ppoll of no fds that returns at once). es__sig_release gives the mask back
 * when the call returns (a signal still pending runs its handler then). The
 * spin before the first sleep runs with the caller's mask: blocking it there
 * would cost two system calls on every wait that the spin answers.
 */
static __thread int held;
static __thread sigset_t held_old;

int es__sig_hold(const sigset_t **mask)
{
	if (!held) {
		sigset_t all;
		sigfillset(&all);
		if (pthread_sigmask(SIG_BLOCK, &all, &held_old) != 0)
			return 0;            /* *mask stays: the sleep runs as before */
		held = 1;
	} else {
		struct timespec z = { 0, 0 };
		if (R_(ppoll)(NULL, 0, &z, &held_old) < 0 && errno == EINTR)
			return -EINTR;
	}
	*mask = &held_old;
	return 0;
}

void es__sig_release(void)
{
	if (!held)
		return;
	held = 0;
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &held_old, NULL);
	errno = e;
}
