/* wait.c: the one wait primitive (spin, arm, last look, one kernel wait), emp_wait/emp_wait_any on it, transmit batching. */
/*
 * Run to completion: a thread that waits drives the engine itself. It spins
 * for an adaptive budget, then arms (the caller's waker flags: from now on a
 * completion for it written by another thread wakes its fd), drives once more
 * so that a frame that arrived between the last look and arm() is processed
 * (on a device whose look is a system call, only if a look is due: its fd
 * is level-triggered, so the sleep ends at once for such a frame),
 * looks again, and sleeps in ONE kernel wait that holds the device fd beside
 * the caller's own fds. While any thread is inside, the progress thread leaves
 * the device alone; it keeps the engine's timers, so a sleeper is not woken for
 * retransmission deadlines (unless there is no progress thread, or time is
 * virtual: then the sleep is bounded by the engine's next deadline).
 * Threads whose waits end by a wake of their own (share_device: the shim's
 * reads, writes, poll and select, emp_wait) leave the device to the first
 * two of them that sleep: a frame wakes those, and whichever takes it wakes
 * its owner, instead of every sleeping thread waking for every frame.
 *
 * The budget follows the waits this thread sees: a wait that ended soon after
 * the spin gave up (within 8 x spin_us) says the peer answers at that pace, so
 * the budget grows to twice that wait (at most 8 x spin_us: a busy event loop
 * then never sleeps between batches, which costs a wake-up each); a wait longer
 * than that (the application is idle) halves it, down to spin_us / 64, so an
 * idle thread burns next to no CPU.
 *
 * A sleep that ends at once (frames were already waiting: a stream is
 * flowing) is followed by another spin of spin_us rather than by one sleep
 * per frame batch; that spin stops at the first yield that finds the CPU
 * wanted. A bulk stream's acks may wait in the engine while the thread
 * sleeps (emp__drive_nap): the sleep ends when they are due. No other ack
 * is held into a sleep (the thread sends them just before it). The look
 * after arming, and the one after a sleep, may hold the ack of a request
 * that ends the wait, as a spin's look does (emp__drive_post): a server that
 * slept answers with one frame, the reply carrying the ack, instead of two,
 * and a client whose reply came as it armed sends the ack in its next
 * request.
 *
 * A sleep that ended at once while another thread held the engine lock
 * (it is taking the frames that ended the sleep, and the device fd stays
 * readable until it has) is followed by a wait for that lock, not by another
 * sleep: pgbench -j 2's two threads, sharing one engine, slept again and
 * again meanwhile (3.1-4.4 ppoll calls per transaction, 0.2 with the wait).
 * The wait lasts EMP__HOLDER_WAIT_NS at most (a holder in a long transmit, or
 * preempted): then the thread looks at its condition and sleeps as before.
 *
 * Spinning threads yield the CPU now and then, for a peer that shares it on a
 * small host; a yield that comes back at once (nobody else wanted the CPU)
 * doubles the interval up to EMP__YIELD_MAX_NS (EMP__YIELD_FULL_NS while
 * every CPU is taken or a yield found a taker lately), a slow one resets it: a
 * spinner alone on its CPU makes few system calls, one sharing it gives way
 * at least every 50 us. With two threads more runnable than CPUs nobody
 * spins (crowded).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "sys.h"
#include "internal.h"

static __thread uint64_t spin_budget;               /* adaptive spin, ns; 0: not yet set */

/* More threads runnable than there are CPUs (the kernel's count, the fourth
 * field of /proc/loadavg, "running/total"), looked at by one thread at most
 * every CROWD_NS: then a waiter does not spin, it sleeps at once (one thread
 * over the CPUs is allowed: the peer a spinner waits for). A spinner
 * there takes the CPU a runnable thread (often the one it waits for) needs:
 * PostgreSQL, a process per connection, under pgbench -c 10 on 2 vCPUs spent
 * 40 % more CPU per transaction spinning. Anything unreadable: not crowded. */
#define CROWD_NS 10000000ull
static uint64_t crowd_at;
static int crowd_now, full_now, ncpu;

/* /proc/loadavg stays open (one pread per look instead of open, read and
 * close), at a number above the program's (emp__sys_fd_high). The program
 * may still close that number and reuse it: a read that fails or does not
 * parse gives the number up (it is the program's now) and the next look
 * opens the file again; a fresh one that does not parse ends the looks
 * (not crowded from then on, as when the file cannot be read at all). */
static int la_fd = -1, la_dead;

/* the running count of /proc/loadavg's fourth field ("running/total"), or -1 */
static int loadavg_running(void)
{
	char b[128];
	for (int fresh = 0; fresh < 2 && !la_dead; fresh++) {
		int fd = __atomic_load_n(&la_fd, __ATOMIC_RELAXED);
		if (fd < 0) {
			fd = emp__sys_fd_high((int)emp__syscall(SYS_openat, AT_FDCWD, "/proc/loadavg", O_RDONLY | O_CLOEXEC));
			if (fd < 0)
				return -1;      /* out of fds for now: again at the next look */
			fresh = 1;
			__atomic_store_n(&la_fd, fd, __ATOMIC_RELAXED);
		}
		ssize_t n = emp__syscall(SYS_pread64, fd, b, sizeof b - 1, 0);
		b[n > 0 ? n : 0] = 0;
		int running, total;
		if (n > 0 && sscanf(b, "%*f %*f %*f %d/%d", &running, &total) == 2)
			return running;
		__atomic_store_n(&la_fd, -1, __ATOMIC_RELAXED);
		if (fresh) {                    /* ours, just opened: unreadable here */
			emp__sys_close(fd);
			la_dead = 1;
		}
	}
	return -1;
}

static void crowd_look(void)
{
	uint64_t now = emp_now_ns();           /* real time, also under a virtual clock */
	uint64_t at = __atomic_load_n(&crowd_at, __ATOMIC_RELAXED);
	if (now - at < CROWD_NS || !__atomic_compare_exchange_n(&crowd_at, &at, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	if (!ncpu) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		ncpu = n > 0 && n < 1 << 20 ? (int)n : 1;
	}
	int running = loadavg_running(), c = 0, f = 0;
	if (running >= 0) {
		c = running > ncpu + 1;   /* one more than the CPUs: the peer a spinner waits for */
		f = running > ncpu;
	}
	__atomic_store_n(&crowd_now, c, __ATOMIC_RELAXED);
	__atomic_store_n(&full_now, f, __ATOMIC_RELAXED);
}

int emp__crowded(void)
{
	crowd_look();
	return __atomic_load_n(&crowd_now, __ATOMIC_RELAXED);
}

unsigned long emp__crowd_skips;   /* waits that slept at once, the machine crowded (tests) */

/* every CPU was taken at the last look (more threads runnable than CPUs):
 * a thread that became runnable may be waiting behind a spinner */
static int cpus_full(void)
{
	crowd_look();
	return __atomic_load_n(&full_now, __ATOMIC_RELAXED);
}

static __thread struct emp__yield yl = { EMP__YIELD_NS, 0 };
static __thread int defer_on;

/* The interval to the next yield after one at now (busy: it found another
 * thread wanting the CPU; full: more threads runnable than CPUs). A busy
 * yield starts again at EMP__YIELD_NS; a quiet one doubles the interval, up to
 * EMP__YIELD_MAX_NS, but only up to EMP__YIELD_FULL_NS while every CPU is taken
 * or a yield of the last EMP__YIELD_BUSY_NS found a taker: on a spinner's CPU
 * a thread just woken (nginx's worker with a request) waited for the
 * spinner's next yield, and a quarter of nginx's requests took 300-500 us
 * instead of 50. */
uint64_t emp__yield_next(struct emp__yield *y, int busy, int full, uint64_t now)
{
	if (busy) {
		y->busy_at = now;
		return y->every = EMP__YIELD_NS;
	}
	uint64_t cap = (y->busy_at && now - y->busy_at < EMP__YIELD_BUSY_NS) || full ? EMP__YIELD_FULL_NS
										      : EMP__YIELD_MAX_NS;
	return y->every = y->every * 2 < cap ? y->every * 2 : cap;
}

/* 1 if the yield found others wanting the CPU */
static int spin_yield(struct emp_endpoint *ep, uint64_t *now, uint64_t *yielded)
{
	if (*now - *yielded < yl.every)
		return 0;
	sched_yield();
	uint64_t after = emp__now(ep);
	int busy = after - *now >= 3000;
	emp__yield_next(&yl, busy, !busy && cpus_full(), after);
	*now = *yielded = after;
	return busy;
}

/* the sleep bound: the engine's timers when nobody else keeps them, and
 * always the device's next_event (frames it holds that its fd does not show:
 * ours to take; the progress thread would look too, but a wake-up later) */
static int64_t bound_by_engine(struct emp_endpoint *ep, int64_t ns, uint64_t now)
{
	uint64_t dl = UINT64_MAX;
	if (!ep->prog || ep->clock)
		dl = emp__fw_next_deadline(ep->fw);
	if (ep->ops->next_event) {
		uint64_t e = ep->ops->next_event(ep->dev);
		if (e < dl)
			dl = e;
	}
	int64_t d = dl == UINT64_MAX ? -1 : dl > now ? (int64_t)(dl - now) : 0;
	if (ep->clock && (d < 0 || d > 10000000))
		d = 10000000;   /* virtual time: look every 10 ms of real time */
	if (d >= 0 && (ns < 0 || d < ns))
		ns = d;
	return ns;
}

/* A bulk stream's acks wait in the engine for company while this thread
 * sleeps (emp__drive_nap), but no longer than they may: the sleep ends then. */
static int64_t bound_by_acks(struct emp_endpoint *ep, int64_t ns, uint64_t now)
{
	uint64_t dl = emp__fw_bulk_deadline(ep->fw);   /* a racy read: an early wake at worst */
	if (!dl)
		return ns;
	int64_t d = dl > now ? (int64_t)(dl - now) : 0;
	return ns < 0 || d < ns ? d : ns;
}

void emp__looked(struct emp_endpoint *ep, uint64_t now)
{
	__atomic_store_n(&ep->last_exit_ns, now, __ATOMIC_RELAXED);
	__atomic_add_fetch(&ep->exits, 1, __ATOMIC_RELAXED);
	emp__progress_exit_seen(ep);
}

#define left emp__looked

#define UNDECIDED 0x7fffffff
#define EMP__NOSLEEP_NS 20000ull   /* a sleep that ended sooner found frames waiting: no sleep */

/* Spin from t for budget ns (up to end): 1 done, 0 timed out, else UNDECIDED.
 * polite: stop when a yield finds others wanting the CPU (sleep instead). */
static int spin(struct emp_endpoint *ep, const struct emp_waitfor *w, uint64_t t, uint64_t budget, uint64_t end,
		int polite)
{
	int rc = UNDECIDED;
	uint64_t spin_end = t + budget, yielded = t, now;
	/* a device whose look is a system call (udp): the budget is checked at
	 * every turn, so a short one ends after a look or two, not eight (a
	 * sockperf server at 2000 messages a second made 7 looks per message,
	 * 6 of them finding nothing) */
	int syslook = (ep->ops->flags & EMP_DRV_SYSLOOK) != 0;
	__atomic_add_fetch(&ep->spinners, 1, __ATOMIC_SEQ_CST);
	for (unsigned i = 1;; i++) {
		emp__drive_spin(ep);
		if (w->done(w->arg)) {
			rc = 1;
			break;
		}
		if ((i & 7) && !syslook)
			continue;
		now = emp__now(ep);   /* every 8 turns: a clock read costs more than a turn
				       * (but not more than a look that is a system call) */
		if (now >= end) {
			rc = 0;
			break;
		}
		if (now >= spin_end)
			break;
		if (spin_yield(ep, &now, &yielded) && polite)
			break;
	}
	__atomic_sub_fetch(&ep->spinners, 1, __ATOMIC_SEQ_CST);
	return rc;
}

/* Receive coalescing (firmware/gather.c): while a message of many frames is
 * arriving at a measured pace, a waiter sleeps without the device until the
 * message should be complete (the engine's estimate, at most gather_ns and
 * the caller's bound) and then takes every frame in one look, where a sleep
 * on the device would wake for every few frames and a spin would burn the
 * CPU meanwhile. Returns that time, 0: look as usual (virtual time never
 * gathers: its frames come when the test says). */
static uint64_t gather_for(struct emp_endpoint *ep, uint64_t end)
{
	if (!ep->gather_ns || ep->clock || pthread_mutex_trylock(&ep->eng_lock))
		return 0;
	uint64_t now = emp__now(ep), ns = emp__fw_gather_ns(ep->fw, now, ep->gather_ns);
	pthread_mutex_unlock(&ep->eng_lock);
	if (!ns || end <= now)
		return 0;
	if (end - now < ns)
		ns = end - now;
	int64_t b = bound_by_engine(ep, (int64_t)ns, now);
	return b > 0 ? (uint64_t)b : 0;
}

unsigned long emp__shared_sleeps;   /* sleeps that left the device to another thread (tests) */

/* ---- who holds the device in a sleep ---- */

/* Sleeps that may share the device hold it while fewer than this many do:
 * a frame wakes at most two of them, and the progress thread is called in
 * only when both have left while others sleep (with one, two threads in
 * turn handed the device to it about once a request: more wake-ups than the
 * two-thread herd it saved) */
#define EMP__DEV_HOLDERS 2

static __thread int tl_sleep_dev = 1;

int emp_wait_device(void)
{
	return tl_sleep_dev;
}

/* A sleep that held the device (or a gathering nap, which the progress
 * thread also leaves alone) is over: the last one calls the progress thread
 * in if threads still sleep without it. */
static void watch_end(struct emp_endpoint *ep)
{
	if (__atomic_sub_fetch(&ep->dev_watchers, 1, __ATOMIC_SEQ_CST) == 0 &&
	    __atomic_load_n(&ep->dev_sleepers, __ATOMIC_SEQ_CST) > 0)
		emp__progress_cover(ep);
}

/* A sleep begins: it holds the device unless it may share it and
 * EMP__DEV_HOLDERS sleeps hold it already. The sleeper is counted before the
 * look at the watchers, and a watcher that leaves stops counting itself
 * before it looks at the sleepers (watch_end): of a sleeper
 * that finds the device held and a watcher leaving, at least one sees the
 * other, so the device is never left unwatched with a thread asleep. */
static int sleep_begin(struct emp_endpoint *ep, const struct emp_waitfor *w)
{
	__atomic_add_fetch(&ep->dev_sleepers, 1, __ATOMIC_SEQ_CST);
	int hold = 1;
	if (w->share_device && ep->prog && !ep->clock) {
		int n = __atomic_load_n(&ep->dev_watchers, __ATOMIC_SEQ_CST);
		hold = 0;
		while (n < EMP__DEV_HOLDERS && !hold)
			hold = __atomic_compare_exchange_n(&ep->dev_watchers, &n, n + 1, 0, __ATOMIC_SEQ_CST,
							   __ATOMIC_SEQ_CST);
		if (!hold)
			__atomic_add_fetch(&emp__shared_sleeps, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_add_fetch(&ep->dev_watchers, 1, __ATOMIC_SEQ_CST);
	}
	tl_sleep_dev = hold;
	return hold;
}

static void sleep_end(struct emp_endpoint *ep, int hold)
{
	__atomic_sub_fetch(&ep->dev_sleepers, 1, __ATOMIC_SEQ_CST);
	tl_sleep_dev = 1;
	if (hold)
		watch_end(ep);
}

/* The gathering sleep: the acks go first (the sender's window slides on),
 * the thread counts as asleep on the device (the progress thread stays off
 * it), nothing wakes it early. A signal ends it early; it is not reported as
 * EINTR (it could as well have come just before the sleep). */
static int gather(struct emp_endpoint *ep, const struct emp_waitfor *w, uint64_t ns, uint64_t end)
{
	__atomic_add_fetch(&ep->dev_watchers, 1, __ATOMIC_SEQ_CST);
	emp__drive_flush(ep);
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
	emp__syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL);
	watch_end(ep);
	emp__drive_nap(ep);
	if (w->done(w->arg))
		return 1;
	return emp__now(ep) >= end ? 0 : UNDECIDED;
}

unsigned long emp__lock_waits;   /* waits that waited for the engine's holder (tests) */
int emp_wait_for(emp_endpoint_t *ep, const struct emp_waitfor *w)
{
	if (!ep || !w || !w->done || (!w->sleep && w->timeout_ns))
		return -EINVAL;
	uint64_t t0 = emp__now(ep), now = t0;
	uint64_t end = w->timeout_ns < 0 ? UINT64_MAX : t0 + (uint64_t)w->timeout_ns;
	emp__drive_spin(ep);                /* deferred posts leave now; frames are seen */
	if (w->done(w->arg)) {
		left(ep, now);
		return 1;
	}
	if (!w->timeout_ns) {
		left(ep, now);
		return 0;
	}
	int rc = UNDECIDED;
	if (!spin_budget)
		spin_budget = ep->spin_ns;
	/* a message trickling in: gather before any spin (its frames need that
	 * long anyway; a spin would burn the CPU until then) */
	uint64_t g0 = gather_for(ep, end);
	if (g0)
		rc = gather(ep, w, g0, end);
	/* after a gathering sleep the message still incomplete gathers again
	 * (the loop below); a spin would burn the CPU until it is complete */
	uint64_t budget = 0;
	if (rc == UNDECIDED && ep->spin_ns && !g0 && !w->no_spin) {
		if (!emp__crowded())
			budget = spin_budget;
		else
			__atomic_add_fetch(&emp__crowd_skips, 1, __ATOMIC_RELAXED);
	}
	if (budget)
		rc = spin(ep, w, emp__now(ep), budget, end, 0);
	while (rc == UNDECIDED) {
		uint64_t g = gather_for(ep, end);
		if (g) {
			rc = gather(ep, w, g, end);
			continue;
		}
		uint64_t slept = UINT64_MAX;
		int hold = sleep_begin(ep, w);
		if (w->arm)
			w->arm(w->arg);
		/* after arming: nothing slips between look and sleep. A frame
		 * this look takes may end the wait (a reply that came while
		 * the thread armed): then it does not sleep, and the ack of
		 * that reply may ride in the caller's next request, as after
		 * a post. Only a thread that does sleep sends what waits. On a
		 * device whose look is a system call, a look made just now is
		 * not made again (emp__drive_post): its fd is level-triggered,
		 * so a frame that came since ends the sleep at once. */
		emp__drive_post(ep);
		int r = 0, fin = w->done(w->arg);
		if (!fin && emp__fw_holding(ep->fw)) {
			emp__drive_nap(ep);
			fin = w->done(w->arg);
		}
		if (fin) {
			rc = 1;
		} else {
			now = emp__now(ep);
			int64_t ns = end == UINT64_MAX ? -1 : end > now ? (int64_t)(end - now) : 0;
			r = w->sleep(w->arg, bound_by_acks(ep, bound_by_engine(ep, ns, now), now));
			slept = emp__now(ep) - now;
		}
		if (w->disarm)
			w->disarm(w->arg);
		sleep_end(ep, hold);
		if (rc == 1)
			break;
		int busy;
		emp__drive_post_busy(ep, &busy);   /* a request that woke us: its ack may ride in our answer, as after a post */
		if (busy && slept < EMP__NOSLEEP_NS && !w->done(w->arg)) {
			/* the frames that ended the sleep are another thread's to take
			 * (it holds the engine): the device fd stays readable until it
			 * has, so a sleep now would end at once again; wait for it */
			emp__drive_post_holder(ep);   /* at most EMP__HOLDER_WAIT_NS; then as before */
			__atomic_add_fetch(&emp__lock_waits, 1, __ATOMIC_RELAXED);
		}
		now = emp__now(ep);
		if (w->done(w->arg))
			rc = 1;
		else if (r > 0)
			rc = 2;
		else if (r < 0)
			rc = r;
		else if (now >= end)
			rc = 0;
		else if (ep->spin_ns && slept < EMP__NOSLEEP_NS && !w->no_spin && !emp__crowded())
			rc = spin(ep, w, now, ep->spin_ns, end, 1);   /* frames were waiting: they flow; a sleep each costs a call */
	}
	now = emp__now(ep);
	uint64_t took = now - t0, hi = 8 * ep->spin_ns;
	if (g0)
		took = budget;                                  /* paced by the peer's link: no lesson */
	if (took > budget && took <= hi)
		spin_budget = 2 * took < hi ? 2 * took : hi;   /* just missed: spin longer */
	else if (took > hi && spin_budget > ep->spin_ns / 64)
		spin_budget /= 2;                               /* idle: spin less */
	left(ep, now);
	return rc;
}

/* ---- emp_wait, emp_wait_any: requests of the caller's, on the same primitive ---- */

static __thread int wake_efd = -1;

static int thread_wake_fd(void)
{
	if (wake_efd < 0)
		wake_efd = emp__sys_fd_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	return wake_efd;
}

static int is_done(emp_req_t *d)
{
	return __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

static int first_done(emp_req_t **reqs, int n)
{
	for (int i = 0; i < n; i++)
		if (reqs[i] && is_done(reqs[i]))
			return i;
	return -1;
}

struct reqwait {
	struct emp_endpoint *ep;
	emp_req_t **reqs;
	int n;
	int woken;                  /* a sleep saw our eventfd readable */
	struct emp_waiter w;
};

static int rw_done(void *arg)
{
	struct reqwait *a = arg;
	return first_done(a->reqs, a->n) >= 0;
}

/* another thread that completes something writes our eventfd (drive.c) */
static void rw_arm(void *arg)
{
	struct reqwait *a = arg;
	struct emp_endpoint *ep = a->ep;
	a->w.efd = thread_wake_fd();
	pthread_mutex_lock(&ep->wait_mu);
	a->w.next = ep->waiters;
	ep->waiters = &a->w;
	__atomic_add_fetch(&ep->sleepers, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ep->wait_mu);
}

static void rw_disarm(void *arg)
{
	struct reqwait *a = arg;
	struct emp_endpoint *ep = a->ep;
	pthread_mutex_lock(&ep->wait_mu);
	struct emp_waiter **pp = &ep->waiters;
	while (*pp && *pp != &a->w)
		pp = &(*pp)->next;
	if (*pp)
		*pp = a->w.next;
	__atomic_sub_fetch(&ep->sleepers, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ep->wait_mu);
	/* drained only when a sleep saw it written: a write that came after
	 * (or without a sleep) makes the next sleep return at once, which
	 * drains it then; not one read per sleep */
	uint64_t v;
	if (a->woken && a->w.efd >= 0 && emp__sys_read(a->w.efd, &v, sizeof(v)) < 0)
		v = 0;
	a->woken = 0;
}

/* Frames or our eventfd. The device may report an error instead of frames
 * (its interface went down or away): take the error and sleep on our own
 * eventfd for a while rather than spin on a failing device. */
static int rw_sleep(void *arg, int64_t ns)
{
	struct reqwait *a = arg;
	int dev = emp_wait_device();
	struct pollfd p[3] = { { dev ? a->ep->dev_fd : -1, POLLIN, 0 }, { a->w.efd, POLLIN, 0 },
			       { dev ? a->ep->dev_fd2 : -1, POLLIN, 0 } };
	if (emp__sys_ppoll(p, dev && a->ep->dev_fd2 >= 0 ? 3 : 2, ns, NULL) < 0 && errno == EINTR)
		return 0;                        /* emp_wait does not fail with EINTR */
	if (p[1].revents)
		a->woken = 1;
	if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
		emp_wait_fd_error(a->ep);
		if (emp__sys_ppoll(&p[1], 1, ns >= 0 && ns < 100000000 ? ns : 100000000, NULL) > 0)
			a->woken = 1;
	}
	return 0;
}

static int wait_many(struct emp_endpoint *ep, emp_req_t **reqs, int n, int64_t timeout_ns)
{
	struct reqwait a = { ep, reqs, n, 0, { -1, NULL } };
	struct emp_waitfor w = { .done = rw_done, .arm = rw_arm, .sleep = rw_sleep, .disarm = rw_disarm,
				 .arg = &a, .timeout_ns = timeout_ns, .share_device = 1 };
	emp_wait_for(ep, &w);
	int got = first_done(reqs, n);
	return got >= 0 ? got : -ETIMEDOUT;
}

int emp__wait_reqs(struct emp_endpoint *ep, emp_req_t **reqs, int n, int64_t timeout_ns)
{
	return wait_many(ep, reqs, n, timeout_ns);
}

/* ---- transmit batching ---- */

void emp_defer(emp_endpoint_t *ep, int on)
{
	(void)ep;
	defer_on = !!on;
}

int emp__deferring(struct emp_endpoint *ep)
{
	(void)ep;
	return defer_on;
}

void emp_flush(emp_endpoint_t *ep)
{
	if (ep && ep->fw_ready)
		emp__drive_flush(ep);
}
