/* progress.c: the progress thread: keeps the engine's timers, and drives the device only while no application thread does. */
/*
 * Application threads that wait (emp_wait_for) drive the engine themselves:
 * they spin on the device ring, then sleep in a kernel wait that holds the
 * device fd, and a completion goes straight from the engine to the socket
 * that owns it in the thread that polled. The progress thread stays off that
 * path. It keeps the engine's timers (retransmissions, hellos, probes; the
 * short ack timers only while nobody else polls) and looks around on a tick:
 *
 *  - standby (device not watched): some thread is inside emp_wait_for or a
 *    drive (a sender that posts without waiting), or left one less than
 *    EMP__TAKEOVER_NS ago. Frames are the threads' business;
 *    this thread never wakes for them.
 *  - takeover (device watched): no thread has looked at the device for
 *    EMP__TAKEOVER_NS (the application computes, or sleeps somewhere else). It
 *    drives on every frame, so acks and retransmissions continue, until a
 *    thread polls again (the first frame after that hands the device back).
 *  - cover (device watched): threads sleep, but none of them holds the
 *    device (waits that share it: emp_wait_for's share_device); the one that
 *    did left and kicked this thread. Watched until a thread holds it again.
 *
 * The tick runs every millisecond while nobody looks or posts are held
 * back, and doubles up to 4 ms while threads come and go and one of them is
 * inside a wait at each look (a process per connection at a few hundred
 * requests a second paid a wake-up per request at 1 ms), or a thread drove
 * the engine since the last look (a writer that never waits);
 * while they stay asleep in their own waits (or this thread watches the
 * device) it doubles up to 100 ms (an idle process wakes ten times a second),
 * and the next thread that leaves a wait pulls it back with one kick
 * (emp__progress_exit_seen). While threads look and the tick comes at least
 * every 4 ms, the tick also serves the engine's timers (no wake-up of their
 * own). Deferred posts older than EMP__DEFER_NS
 * are sent from the tick as well, so a reply leaves even when its application
 * does not come back to its loop, and so is what a layer above holds back
 * (emp_set_hold_hook: the shim's coalesced writes).
 */
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <stdio.h>
#include "sys.h"
#include "internal.h"
#include "stats.h"

struct emp_progress {
	struct emp_endpoint *ep;
	struct ev_loop *loop;
	ev_io io;                   /* the device: on only in takeover */
	ev_io io2;                  /* its second fd (wait_fd2), with io */
	ev_io tio;                  /* timerfd: short engine deadlines at ns precision */
	int tfd;
	uint64_t armed;             /* deadline the timerfd is set to, UINT64_MAX none */
	ev_timer tm;                /* the engine's next deadline (ms precision is fine) */
	ev_timer tick;              /* looking around: takeover, deferred posts */
	ev_async kick, stop;
	pthread_t thr;
	int fd;
	int fd2;                    /* the device's second wait fd, or -1 */
	int watching;               /* takeover: the device fd is in our loop */
	int deep;                   /* the tick is long: the next exit kicks */
	int force;                  /* the driver asked for a drive (emp__progress_kick) */
	int held;                   /* the hold hook's last answer: something is held back */
	double tick_s;
	unsigned exits_seen, drives_seen;
	int completions, idle_wakeups, dev_failed;
	uint64_t dev_retry_at;       /* a failing device is watched again from then on */
	uint64_t backoff_ns;         /* engine held by another thread: device not watched for this long */
	uint64_t backoff_until;      /* ... until then (the timerfd brings us back) */
};

#define TICK_MIN 0.001
#define TICK_MAX 0.1
#define TICK_BUSY 0.004         /* threads come and go, one inside a wait at each look */
#define BUSY_SLACK_NS 4000000ull /* engine timers while other threads look: at most this late */
#define NEAR_NS 500000ull       /* short deadlines nearer than this get the precise timerfd */
#define BACKOFF_MIN_NS 50000ull  /* first look again after the engine was held */
#define BACKOFF_MAX_NS 1000000ull

static int polling(struct emp_endpoint *ep)
{
	return __atomic_load_n(&ep->spinners, __ATOMIC_SEQ_CST) + __atomic_load_n(&ep->dev_watchers, __ATOMIC_SEQ_CST) +
	       __atomic_load_n(&ep->drivers, __ATOMIC_SEQ_CST);
}

/* threads asleep and none of them holds the device (the one that did left,
 * emp_wait_for's share_device): the device is ours until one does again,
 * whenever the last look was */
static int uncovered(struct emp_endpoint *ep)
{
	return __atomic_load_n(&ep->dev_sleepers, __ATOMIC_SEQ_CST) > 0 && !polling(ep);
}

static int others_look(struct emp_endpoint *ep, uint64_t now)
{
	return polling(ep) > 0 || now - __atomic_load_n(&ep->last_exit_ns, __ATOMIC_RELAXED) < EMP__TAKEOVER_NS;
}

static void watch(struct emp_progress *pg, int on)
{
	if (pg->fd < 0 || pg->watching == on || (on && emp__now(pg->ep) < pg->dev_retry_at))
		return;
	if (on)
		ev_io_start(pg->loop, &pg->io);
	else
		ev_io_stop(pg->loop, &pg->io);
	if (pg->fd2 >= 0 && on)
		ev_io_start(pg->loop, &pg->io2);
	else if (pg->fd2 >= 0)
		ev_io_stop(pg->loop, &pg->io2);
	pg->watching = on;
}

/* the precise timer: the timerfd fires at t (absolute, CLOCK_MONOTONIC ns) */
static void tfd_arm(struct emp_progress *pg, uint64_t t)
{
	struct itimerspec its;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = (time_t)(t / 1000000000ull);
	its.it_value.tv_nsec = (long)(t % 1000000000ull);
	if (!t)
		its.it_value.tv_nsec = 1;   /* 0 would disarm it */
	timerfd_settime(pg->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	pg->armed = t;
}

static void rearm(struct emp_progress *pg, uint64_t now)
{
	struct emp_endpoint *ep = pg->ep;
	uint64_t dl = emp__fw_next_deadline(ep->fw), fine = emp__fw_next_fine_deadline(ep->fw);
	if (ep->ops->next_event) {
		uint64_t w = ep->ops->next_event(ep->dev);
		if (w < dl)
			dl = w;
	}
	if (pg->tfd >= 0 && !ep->clock && !others_look(ep, now)) {
		/* the short timers (held and delayed acks) are ours only while
		 * nobody else polls; a timer costs a system call and an hrtimer,
		 * so only when near and earlier than the one already set */
		if (fine != UINT64_MAX && fine < now + NEAR_NS && (fine < pg->armed || pg->armed <= now))
			tfd_arm(pg, fine);
		if (pg->armed > now && pg->armed <= dl)
			dl = UINT64_MAX;   /* the timerfd comes first; its event rearms */
	}
	ev_timer_stop(pg->loop, &pg->tm);
	if (dl != UINT64_MAX && dl < pg->backoff_until)
		dl = pg->backoff_until;           /* the engine's holder runs the timers it finds due */
	/* the threads that look run the timers as they drive, but a thread
	 * asleep in its wait does not wake for them: ours then, with slack
	 * (a deadline that an ack moves meanwhile costs no wake-up each time) */
	if (dl != UINT64_MAX && others_look(ep, now) && dl < now + BUSY_SLACK_NS)
		dl = now + BUSY_SLACK_NS;
	/* ... and while the tick comes at least that often, the tick is that
	 * look (step with timer set): a bulk stream's retransmission deadline,
	 * moved by every ack, woke this thread every 4 ms for nothing besides
	 * the tick's own wake-up (nginx sending 1 MiB files: 0.3 per request) */
	if (dl != UINT64_MAX && others_look(ep, now) && pg->tick_s * 1e9 <= (double)BUSY_SLACK_NS)
		dl = UINT64_MAX;
	if (dl != UINT64_MAX) {
		double after = dl > now ? (double)(dl - now) / 1e9 : 0.0;
		ev_timer_set(&pg->tm, after > TICK_MAX ? TICK_MAX : after, 0.0);
		ev_timer_start(pg->loop, &pg->tm);
	}
}

/* Another thread holds the engine (it may be preempted inside it on a busy
 * machine): its frames stay in the ring, the device fd stays readable, and
 * watching it would spin this thread on the CPU the holder needs. Stop
 * watching; the timerfd brings us back after 50 us, doubling to 1 ms while
 * the engine stays held. The holder takes the waiting frames as it lets go. */
static void back_off(struct emp_progress *pg, uint64_t now)
{
	pg->backoff_ns = pg->backoff_ns ? pg->backoff_ns * 2 : BACKOFF_MIN_NS;
	if (pg->backoff_ns > BACKOFF_MAX_NS)
		pg->backoff_ns = BACKOFF_MAX_NS;
	pg->backoff_until = now + pg->backoff_ns;
	if (!pg->watching)
		return;
	watch(pg, 0);
	if (pg->tfd >= 0 && !pg->ep->clock && (pg->backoff_until < pg->armed || pg->armed <= now))
		tfd_arm(pg, pg->backoff_until);
}

/* One look: take the device over or hand it back, drive when it is ours or
 * a timer or old deferred posts call for it. */
static void step(struct emp_progress *pg, int timer)
{
	struct emp_endpoint *ep = pg->ep;
	uint64_t now = emp__now(ep);
	watch(pg, (uncovered(ep) || !others_look(ep, now)) && now >= pg->backoff_until);   /* nobody looks: frames wake us */
	uint64_t d0 = __atomic_load_n(&ep->deferred_t0, __ATOMIC_RELAXED);
	int old_defer = d0 && now - d0 >= EMP__DEFER_NS;
	/* a thread that polls runs the engine's timers too (every drive does);
	 * ours only when nobody did for a while: a deadline long past */
	uint64_t dl = emp__fw_next_deadline(ep->fw);
	int late = timer && (!others_look(ep, now) || (dl != UINT64_MAX && now > dl + EMP__TAKEOVER_NS));
	uint64_t bulk = emp__fw_bulk_deadline(ep->fw);   /* a bulk stream's acks left waiting by a thread gone */
	late |= bulk && now >= bulk && !polling(ep);
	int force = __atomic_exchange_n(&pg->force, 0, __ATOMIC_ACQ_REL);
	emp_hold_fn *hold = __atomic_load_n(&ep->hold, __ATOMIC_ACQUIRE);
	pg->held = hold ? hold(ep->hold_arg) : 0;   /* held too long: posted now */
	if (pg->watching || late || old_defer || force) {
		int n = emp__drive_try(ep);
		if (n > 0)
			pg->completions++;
		if (n == -EBUSY)
			back_off(pg, now);
		else
			pg->backoff_ns = 0;
	}
	rearm(pg, emp__now(ep));
}

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct emp_progress *pg = w->data;
	struct emp_endpoint *ep = pg->ep;
	unsigned exits = __atomic_load_n(&ep->exits, __ATOMIC_RELAXED);
	unsigned drives = __atomic_load_n(&ep->drives, __ATOMIC_RELAXED);
	int held = __atomic_load_n(&ep->deferred, __ATOMIC_RELAXED) || pg->held;
	int left = exits != pg->exits_seen, drove = drives != pg->drives_seen;
	pg->drives_seen = drives;
	if (held || left || drove) {
		/* threads come and go, and drive the engine as they do: while one
		 * of them is inside a wait at every look, look less often (a
		 * thread that left to compute is taken over at most TICK_BUSY
		 * late), with no kick at its exit; else stay near. Posts held
		 * back are sent from here if they stay: near, unless threads
		 * came back to their waits since (which post what they hold). A
		 * thread that drove and left no wait (a sender that posts and
		 * never waits: a bulk stream's writer) looks at the device
		 * itself: busy, and its next drive kicks nobody (the tick used to
		 * grow past 4 ms there and each next drive kicked it back: about
		 * 560 wake-ups and 110 kicks a second for one iperf3 stream) */
		int busy = held ? left : !left || polling(ep) > 0;
		pg->exits_seen = exits;
		pg->tick_s = busy ? 2 * pg->tick_s : TICK_MIN;
		if (pg->tick_s > TICK_BUSY)
			pg->tick_s = TICK_BUSY;
	} else if (!polling(ep) && !pg->watching) {
		pg->tick_s = TICK_MIN;          /* nobody looks yet: the next tick takes over */
	} else if (pg->tick_s < TICK_MAX) {
		pg->tick_s *= 2;                /* nothing moved: look less often */
		if (pg->tick_s > TICK_MAX)
			pg->tick_s = TICK_MAX;
		if (pg->tick_s > 4 * TICK_MIN)
			__atomic_store_n(&pg->deep, 1, __ATOMIC_SEQ_CST);
	}
	step(pg, 1);                        /* a deadline long past is ours (step: late) */
	ev_timer_stop(loop, &pg->tick);
	ev_timer_set(&pg->tick, pg->tick_s, 0.0);
	ev_timer_start(loop, &pg->tick);
}

/* The device fd may report an error rather than frames: AF_PACKET sets
 * ENETDOWN when its interface goes down or away and then polls readable until
 * the error is read. After many wakeups that completed nothing, look: clear a
 * pending error (the next frames arrive normally once the link is back), and
 * if the fd keeps failing, stop watching it and look again every 100 ms
 * instead of spinning. */
static void check_device(struct emp_progress *pg)
{
	struct pollfd p = { pg->fd, POLLIN, 0 };
	if (emp__sys_ppoll(&p, 1, 0, NULL) <= 0 || !(p.revents & (POLLERR | POLLHUP | POLLNVAL)))
		return;
	int err = 0;
	socklen_t len = sizeof(err);
	emp__sys_getsockopt(pg->fd, SOL_SOCKET, SO_ERROR, &err, &len);
	p.revents = 0;
	if (emp__sys_ppoll(&p, 1, 0, NULL) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) {
		if (!pg->dev_failed)
			fprintf(stderr, "emp: device error (%s): interface down or gone; retrying every 100 ms\n",
				err ? strerror(err) : "hangup");
		watch(pg, 0);
		pg->dev_failed = 1;
		pg->dev_retry_at = emp__now(pg->ep) + 100000000ull;
	}
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct emp_progress *pg = w->data;
	int before = pg->completions;
	step(pg, 0);
	if (pg->completions != before)
		pg->idle_wakeups = pg->dev_failed = 0;
	else if (++pg->idle_wakeups >= 64) {
		pg->idle_wakeups = 0;
		check_device(pg);
	}
}

/* frames on the second fd: the engine takes them (errors show on the first) */
static void io2_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct emp_progress *pg = w->data;
	int before = pg->completions;
	step(pg, 0);
	if (pg->completions != before)
		pg->idle_wakeups = 0;
}

static void tio_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct emp_progress *pg = w->data;
	uint64_t n;
	if (emp__sys_read(pg->tfd, &n, sizeof(n)) < 0)
		n = 0;
	pg->armed = UINT64_MAX;
	step(pg, 1);
}

static void tm_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	step(w->data, 1);
}

static void kick_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct emp_progress *pg = w->data;
	pg->tick_s = TICK_MIN;
	ev_timer_stop(loop, &pg->tick);
	ev_timer_set(&pg->tick, pg->tick_s, 0.0);
	ev_timer_start(loop, &pg->tick);
	step(pg, 0);
}

static void stop_cb(struct ev_loop *loop, ev_async *w, int revents) { ev_break(loop, EVBREAK_ALL); }

static void *run(void *arg)
{
	struct emp_progress *pg = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);   /* signals belong to the application's threads */
	emp__tl_progress = 1;
	pthread_setname_np(pthread_self(), "emp-progress");   /* top, perf, /proc/PID/task/TID/comm */
	ev_run(pg->loop, 0);
	return NULL;
}

int emp__progress_start(struct emp_endpoint *ep)
{
	struct emp_progress *pg = calloc(1, sizeof(*pg));
	if (!pg)
		return -ENOMEM;
	pg->ep = ep;
	pg->loop = ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV | EVFLAG_NOSIGMASK);
	if (!pg->loop)
		pg->loop = ev_loop_new(EVFLAG_AUTO);
	if (!pg->loop) {
		free(pg);
		emp__set_error("emp: cannot create the progress loop");
		return -ENOMEM;
	}
	pg->fd = ep->dev_fd;             /* the driver's wait fds, as open_backend took them */
	pg->tfd = emp__sys_fd_high(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	pg->armed = UINT64_MAX;
	pg->tick_s = TICK_MIN;
	if (pg->tfd >= 0) {
		ev_io_init(&pg->tio, tio_cb, pg->tfd, EV_READ);
		pg->tio.data = pg;
		ev_io_start(pg->loop, &pg->tio);
	}
	ev_init(&pg->tm, tm_cb);
	pg->tm.data = pg;
	ev_init(&pg->tick, tick_cb);
	pg->tick.data = pg;
	ev_timer_set(&pg->tick, pg->tick_s, 0.0);
	ev_timer_start(pg->loop, &pg->tick);
	if (pg->fd >= 0) {
		ev_io_init(&pg->io, io_cb, pg->fd, EV_READ);
		pg->io.data = pg;
	}
	pg->fd2 = pg->fd >= 0 ? ep->dev_fd2 : -1;
	if (pg->fd2 >= 0) {
		ev_io_init(&pg->io2, io2_cb, pg->fd2, EV_READ);
		pg->io2.data = pg;
	}
	ev_async_init(&pg->kick, kick_cb);
	pg->kick.data = pg;
	ev_async_start(pg->loop, &pg->kick);
	ev_async_init(&pg->stop, stop_cb);
	ev_async_start(pg->loop, &pg->stop);
	emp__stats_attach(ep, pg->loop);   /* statistics segment updates */
	ep->prog = pg;
	if (pthread_create(&pg->thr, NULL, run, pg)) {
		ev_loop_destroy(pg->loop);
		if (pg->tfd >= 0)
			emp__sys_close(pg->tfd);
		free(pg);
		ep->prog = NULL;
		emp__set_error("emp: cannot start the progress thread");
		return -EAGAIN;
	}
	return 0;
}

void emp__progress_exit_seen(struct emp_endpoint *ep)
{
	struct emp_progress *pg = ep->prog;
	if (pg && __atomic_load_n(&pg->deep, __ATOMIC_RELAXED) && __atomic_exchange_n(&pg->deep, 0, __ATOMIC_SEQ_CST))
		ev_async_send(pg->loop, &pg->kick);
}

unsigned long emp__covers;

void emp__progress_cover(struct emp_endpoint *ep)
{
	struct emp_progress *pg = __atomic_load_n(&ep->prog, __ATOMIC_ACQUIRE);
	if (!pg)
		return;
	__atomic_add_fetch(&emp__covers, 1, __ATOMIC_RELAXED);
	ev_async_send(pg->loop, &pg->kick);
}

/* The driver has frames its wait fd does not show: one drive soon, whoever
 * looks at the device (the frames' completions wake the waiters). */
void emp__progress_kick(struct emp_endpoint *ep)
{
	struct emp_progress *pg = __atomic_load_n(&ep->prog, __ATOMIC_ACQUIRE);
	if (!pg)
		return;
	__atomic_store_n(&pg->force, 1, __ATOMIC_RELEASE);
	ev_async_send(pg->loop, &pg->kick);
}

void emp__progress_stop(struct emp_endpoint *ep)
{
	struct emp_progress *pg = ep->prog;
	ev_async_send(pg->loop, &pg->stop);
	pthread_join(pg->thr, NULL);
	ev_loop_destroy(pg->loop);
	if (pg->tfd >= 0)
		emp__sys_close(pg->tfd);
	free(pg);
	ep->prog = NULL;
}
