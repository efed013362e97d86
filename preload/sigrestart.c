/* sigrestart.c: whether a blocking EMP read or write that a signal handler interrupted goes on, as the kernel's would under SA_RESTART. */
#include <signal.h>

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
 * restarting: the C library installs them with SA_RESTART. The synchronous
 * fault signals (SIGSEGV, SIGBUS and the like) do not count: a fault comes
 * to the thread that makes it, never to one asleep in the wait, and the
 * handlers that crash reporters, sanitizers and Python's faulthandler put
 * there lack SA_RESTART, which made every blocking EMP read of such a
 * program end with EINTR at any signal (kernel TCP's went on).
 */
int es__sig_restarts(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP || es__sig_fault(sig) || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (!(sa.sa_flags & SA_SIGINFO) && (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN))
			continue;
		if (!(sa.sa_flags & SA_RESTART))
			return 0;
	}
	return 1;
}
