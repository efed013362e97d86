/* sigcatch.c: sigaction(): a handler without SA_RESTART runs through a trampoline that counts it per thread, so a blocking EMP call learns that one ran while it copied, spun or slept (the kernel's call would have ended with EINTR). */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "es.h"

/*
 * A kernel read or write that blocks is inside the system call from its start
 * to its end, so a signal that comes at any moment of it ends it (EINTR, or a
 * short count) unless the handler asked for SA_RESTART. The shim's call is in
 * user space most of that time (copying, spinning for EMP), where a handler
 * runs and returns without the call learning of it: it went on to sleep, for
 * ever if nothing else came (the JDK ends a blocked channel call that way:
 * dup2 over the number, then a signal to the thread).
 *
 * So the handlers that would end such a call (a handler function, no
 * SA_RESTART) are installed behind a trampoline that bumps es__tl_caught and
 * calls the program's handler with the same arguments; the blocking call
 * compares the count with the one at its start (ready.c, epwait.c: the
 * spin's looks and each sleep's start); a handler that runs between that look
 * and the sleep (es__tl_kick set) writes the eventfd the sleep polls, so it
 * returns at once. poll, select and epoll_wait end the same way (the kernel's
 * end with EINTR for any handler; these for those without SA_RESTART). A signal that wakes the ppoll itself ends it with
 * EINTR, or (when the ppoll found an fd ready as it woke: the JDK's dup2 made
 * the number it polled a socket pair at EOF) runs the trampoline on the way
 * out, which the next look sees. Handlers with
 * SA_RESTART (HotSpot's, glibc's signal()) and the synchronous fault signals
 * (SIGSEGV and the like: a JVM's or a sanitizer's) are installed unchanged.
 * The trampoline counts only while the kernel's action lacks SA_RESTART (one
 * sigaction read per signal): siginterrupt(sig, 0) turns it on through
 * glibc's own call, past this wrapper.
 * sigaction()'s old action reports the program's handler, never the
 * trampoline. The trampoline dispatches through the last handler recorded for
 * the signal, so a handler read back with signal() and installed again still
 * reaches the program's function. Records live in a fixed pool (sigaction is
 * async-signal-safe: no malloc here) and are never freed, as a trampoline on
 * another thread may be reading one; a program that installs more than
 * SIGCATCH_MAX distinct handlers gets the rest installed unchanged.
 */
__thread unsigned es__tl_caught __attribute__((tls_model("initial-exec")));
__thread unsigned es__tl_sig0 __attribute__((tls_model("initial-exec")));
__thread struct es_kick *es__tl_kick __attribute__((tls_model("initial-exec")));

#define SIGCATCH_MAX 256
static struct sigaction pool[SIGCATCH_MAX];
static atomic_int npool;
static atomic_flag pool_lock = ATOMIC_FLAG_INIT;
static struct sigaction *_Atomic apps[NSIG];

static void tramp(int sig, siginfo_t *si, void *ctx)
{
	int e = errno;
	struct sigaction cur;
	/* counted only while the kernel's action still lacks SA_RESTART:
	 * siginterrupt(sig, 0) sets it behind our back (glibc's own sigaction);
	 * es__real, not R_: resolved before any trampoline was installed, and a
	 * handler must not take the resolver's lock */
	if (!es__real.sigaction || es__real.sigaction(sig, NULL, &cur) != 0 || !(cur.sa_flags & SA_RESTART)) {
		es__tl_caught++;
		struct es_kick *k = es__tl_kick;
		if (k) {                 /* between its last look and its sleep: end the sleep */
			uint64_t one = 1;
			atomic_store(k->flag, 1);
			(void)!R_(write)(k->efd, &one, 8);
			k->fired = 1;
		}
	}
	errno = e;
	struct sigaction *a = sig > 0 && sig < NSIG ? atomic_load(&apps[sig]) : NULL;
	if (!a)
		return;
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, ctx);
	else if (a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN)
		a->sa_handler(sig);
}

int es__sig_fault(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGTRAP || sig == SIGSYS;
}

static int same(const struct sigaction *x, const struct sigaction *y)
{
	return x->sa_flags == y->sa_flags && !memcmp(&x->sa_mask, &y->sa_mask, sizeof x->sa_mask) &&
	       ((x->sa_flags & SA_SIGINFO) ? (void *)x->sa_sigaction == (void *)y->sa_sigaction
					   : (void *)x->sa_handler == (void *)y->sa_handler);
}

/* the pool's copy of act (an equal one if there is), NULL when full or busy
 * (a handler that calls sigaction while its thread was inside this one: it
 * must not wait for itself; its handler is installed unchanged) */
static struct sigaction *record(const struct sigaction *act)
{
	if (atomic_flag_test_and_set_explicit(&pool_lock, memory_order_acquire))
		return NULL;
	struct sigaction *r = NULL;
	int n = atomic_load(&npool);
	for (int i = 0; i < n && !r; i++)
		if (same(&pool[i], act))
			r = &pool[i];
	if (!r && n < SIGCATCH_MAX) {
		pool[n] = *act;
		r = &pool[n];
		atomic_store(&npool, n + 1);
	}
	atomic_flag_clear_explicit(&pool_lock, memory_order_release);
	return r;
}

static int catchable(int sig, const struct sigaction *act)
{
	if (!act || sig <= 0 || sig >= NSIG || es__sig_fault(sig) || (act->sa_flags & SA_RESTART))
		return 0;
	if (act->sa_flags & SA_SIGINFO)
		return act->sa_sigaction != NULL;
	return act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN;
}

static int is_tramp(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == tramp;
}

/* the trampoline, as a program that read it back (signal() returns it) may
 * install it again */
static int points_at_tramp(const struct sigaction *a)
{
	return (void *)a->sa_handler == (void *)tramp || (void *)a->sa_sigaction == (void *)tramp;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
	int (*real)(int, const struct sigaction *, struct sigaction *) = R_(sigaction);
	struct sigaction *prev = sig > 0 && sig < NSIG ? atomic_load(&apps[sig]) : NULL;
	/* the record the trampoline dispatches to: the last one again when the
	 * program installs the trampoline it read back, a new one for a handler
	 * that would end a blocking call, none for anything else */
	struct sigaction *rec = act && points_at_tramp(act) ? prev : catchable(sig, act) ? record(act) : NULL;
	struct sigaction t;
	if (rec) {
		t = *act;
		t.sa_flags |= SA_SIGINFO;
		t.sa_sigaction = tramp;
		atomic_store(&apps[sig], rec);   /* before the trampoline can run for it */
	}
	int r = real(sig, rec ? &t : act, oact);
	if (r < 0) {
		if (rec)
			atomic_store(&apps[sig], prev);
		return r;
	}
	if (oact && is_tramp(oact) && prev)
		*oact = *prev;
	return 0;
}
