/* progress.c: the progress thread: a libev loop that drives the engine on frames and timers and sleeps when idle. */
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>
#include "internal.h"
#include "stats.h"

struct emp_progress {
	struct emp_endpoint *ep;
	struct ev_loop *loop;
	ev_io io;
	ev_io tio;                  /* timerfd: engine deadlines at ns precision (libev's own timers round to ms) */
	int tfd;
	uint64_t armed;             /* deadline the timerfd is set to, UINT64_MAX none */
	ev_timer tm;                /* backstop and spin recheck */
	ev_async kick, stop;
	pthread_t thr;
	int io_off;                 /* device watch paused while an application thread spins */
	int completions, idle_wakeups, dev_failed;
	int fd;
};

#define SPIN_RECHECK 0.001      /* seconds between looks while a waiter spins */
#define NEAR_NS 500000ull       /* deadlines nearer than this get the precise timerfd */


static void rearm(struct emp_progress *pg)
{
	struct emp_endpoint *ep = pg->ep;
	uint64_t dl = emp__fw_next_deadline(ep->fw), fine = emp__fw_next_fine_deadline(ep->fw);
	if (ep->wire) {
		uint64_t w = emp_sim_wire_next_event(ep->wire);
		if (w < dl)
			dl = w;
	}
	if (pg->tfd >= 0 && !ep->clock) {
		/* setting a timer costs a system call and an hrtimer (dear under a
		 * hypervisor): only for the short timers (delayed and held acks)
		 * when near, and only when the deadline moved earlier or the armed
		 * one has passed; retransmit timeouts (>= 1 ms) are fine with
		 * libev's ms timer (a near retransmit deadline, pushed back by every
		 * ack under a stream, set the timerfd again and again: 4 % of the CPU) */
		uint64_t now = emp__now(ep);
		if (fine != UINT64_MAX && fine < now + NEAR_NS && (fine < pg->armed || pg->armed <= now)) {
			struct itimerspec its;
			memset(&its, 0, sizeof(its));
			its.it_value.tv_sec = (time_t)(fine / 1000000000ull);
			its.it_value.tv_nsec = (long)(fine % 1000000000ull);
			if (!fine)
				its.it_value.tv_nsec = 1;
			timerfd_settime(pg->tfd, TFD_TIMER_ABSTIME, &its, NULL);
			pg->armed = fine;
		}
		if (pg->armed > now && pg->armed <= dl)
			dl = UINT64_MAX;   /* the timerfd comes first; its event rearms */
	}
	/* backstop: look at least every 10 ms */
	uint64_t now = emp__now(ep);
	double after = dl > now ? (double)(dl - now) / 1e9 : 0.0;
	if (after > 0.01)
		after = 0.01;
	ev_timer_stop(pg->loop, &pg->tm);
	ev_timer_set(&pg->tm, after, 0.0);
	ev_timer_start(pg->loop, &pg->tm);
}

static void on_event(struct ev_loop *loop, struct emp_progress *pg)
{
	struct emp_endpoint *ep = pg->ep;
	if (__atomic_load_n(&ep->spinning, __ATOMIC_SEQ_CST) > 0) {
		/* a waiting thread drives the engine itself (spinning or blocked on
		 * the device): waking for every frame would only take the CPU from
		 * it; look again in a millisecond */
		if (!pg->io_off && pg->fd >= 0) {
			ev_io_stop(loop, &pg->io);
			__atomic_store_n(&pg->io_off, 1, __ATOMIC_SEQ_CST);
		}
		ev_timer_stop(loop, &pg->tm);
		ev_timer_set(&pg->tm, SPIN_RECHECK, 0.0);
		ev_timer_start(loop, &pg->tm);
		return;
	}
	if (pg->io_off) {
		__atomic_store_n(&pg->io_off, 0, __ATOMIC_SEQ_CST);
		ev_io_start(loop, &pg->io);
	}
	if (emp__drive(ep) > 0)
		pg->completions++;
	rearm(pg);
}

/* The device fd may report an error rather than frames: AF_PACKET sets
 * ENETDOWN when its interface goes down or away and then polls readable until
 * the error is read. After many wakeups that completed nothing, look: clear a
 * pending error (the next frames arrive normally once the link is back), and
 * if the fd keeps failing, stop watching it and look again every 100 ms
 * instead of spinning. */
static void check_device(struct ev_loop *loop, struct emp_progress *pg)
{
	struct pollfd p = { pg->fd, POLLIN, 0 };
	if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLERR | POLLHUP | POLLNVAL)))
		return;
	int err = 0;
	socklen_t len = sizeof(err);
	getsockopt(pg->fd, SOL_SOCKET, SO_ERROR, &err, &len);
	p.revents = 0;
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL))) {
		if (!pg->dev_failed)
			fprintf(stderr, "emp: device error (%s): interface down or gone; retrying every 100 ms\n",
				err ? strerror(err) : "hangup");
		pg->dev_failed = 1;
		ev_io_stop(loop, &pg->io);
		__atomic_store_n(&pg->io_off, 1, __ATOMIC_SEQ_CST);
		ev_timer_stop(loop, &pg->tm);
		ev_timer_set(&pg->tm, 0.1, 0.0);
		ev_timer_start(loop, &pg->tm);
	}
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct emp_progress *pg = w->data;
	int before = pg->completions;
	on_event(loop, pg);
	if (pg->completions != before)
		pg->idle_wakeups = pg->dev_failed = 0;
	else if (++pg->idle_wakeups >= 64) {
		pg->idle_wakeups = 0;
		check_device(loop, pg);
	}
}

static void tio_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct emp_progress *pg = w->data;
	uint64_t n;
	if (read(pg->tfd, &n, sizeof(n)) < 0)
		n = 0;
	pg->armed = UINT64_MAX;
	on_event(loop, pg);
}
static void tm_cb(struct ev_loop *loop, ev_timer *w, int revents) { on_event(loop, w->data); }
static void kick_cb(struct ev_loop *loop, ev_async *w, int revents) { on_event(loop, w->data); }
static void stop_cb(struct ev_loop *loop, ev_async *w, int revents) { ev_break(loop, EVBREAK_ALL); }

static void *run(void *arg)
{
	struct emp_progress *pg = arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);   /* signals belong to the application's threads */
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
	int fd = ep->ops->wait_fd ? ep->ops->wait_fd(ep->dev) : -1;
	pg->fd = fd;
	pg->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	pg->armed = UINT64_MAX;
	if (pg->tfd >= 0) {
		ev_io_init(&pg->tio, tio_cb, pg->tfd, EV_READ);
		pg->tio.data = pg;
		ev_io_start(pg->loop, &pg->tio);
	}
	ev_init(&pg->tm, tm_cb);
	pg->tm.data = pg;
	if (fd >= 0) {
		ev_io_init(&pg->io, io_cb, fd, EV_READ);
		pg->io.data = pg;
		ev_io_start(pg->loop, &pg->io);
	}
	ev_async_init(&pg->kick, kick_cb);
	pg->kick.data = pg;
	ev_async_start(pg->loop, &pg->kick);
	ev_async_init(&pg->stop, stop_cb);
	ev_async_start(pg->loop, &pg->stop);
	/* poll at least every 10 ms even if a wakeup is missed */
	ev_timer_set(&pg->tm, 0.01, 0.0);
	ev_timer_start(pg->loop, &pg->tm);
	emp__stats_attach(ep, pg->loop);   /* statistics segment updates */
	ep->prog = pg;
	if (pthread_create(&pg->thr, NULL, run, pg)) {
		ev_loop_destroy(pg->loop);
		if (pg->tfd >= 0)
			close(pg->tfd);
		free(pg);
		ep->prog = NULL;
		emp__set_error("emp: cannot start the progress thread");
		return -EAGAIN;
	}
	return 0;
}

/* A thread that spun and now blocks outside libemp (the shim's poll and
 * epoll): the progress thread paused its device watch while it spun and would
 * otherwise look again only after SPIN_RECHECK, leaving frames unprocessed for
 * up to a millisecond. */
void emp_progress_resume(emp_endpoint_t *ep)
{
	struct emp_progress *pg = ep ? ep->prog : NULL;
	if (pg && __atomic_load_n(&pg->io_off, __ATOMIC_SEQ_CST) && !__atomic_load_n(&ep->spinning, __ATOMIC_SEQ_CST))
		ev_async_send(pg->loop, &pg->kick);
}

void emp__progress_kick(struct emp_endpoint *ep)
{
	if (ep->prog)
		ev_async_send(ep->prog->loop, &ep->prog->kick);
}

void emp__progress_stop(struct emp_endpoint *ep)
{
	struct emp_progress *pg = ep->prog;
	ev_async_send(pg->loop, &pg->stop);
	pthread_join(pg->thr, NULL);
	ev_loop_destroy(pg->loop);
	if (pg->tfd >= 0)
		close(pg->tfd);
	free(pg);
	ep->prog = NULL;
}
