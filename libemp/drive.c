/* drive.c: driving the engine: whoever holds the engine lock polls it (device, mailbox, timers, transmit); completions wake sleepers and go to the hook; the drive variants by what the caller does next (post, spin, sleep, flush). */
#include <errno.h>
#include <stdio.h>
#include <time.h>
#include "sys.h"
#include "internal.h"

/* Sleeping emp_wait callers learn that descriptors completed. */
static void wake_waiters(struct emp_endpoint *ep)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&ep->sleepers, __ATOMIC_SEQ_CST))
		return;
	uint64_t one = 1;
	pthread_mutex_lock(&ep->wait_mu);
	for (struct emp_waiter *w = ep->waiters; w; w = w->next)
		if (w->efd >= 0 && emp__sys_write(w->efd, &one, sizeof(one)) < 0)
			continue;
	pthread_mutex_unlock(&ep->wait_mu);
}

__thread int emp__tl_dispatch;
__thread int emp__tl_progress;

static __thread int tl_skip_rx;   /* emp__drive_post: this drive leaves the device alone */

/* Hand the completed requests to the hook, a batch at a time. Posts the hook
 * makes only queue: the drive loop around us takes them (no recursion). */
static void dispatch(struct emp_endpoint *ep, uint32_t *idx, int n)
{
	emp_completion_fn *fn = __atomic_load_n(&ep->hook, __ATOMIC_ACQUIRE);
	if (!fn || !n)
		return;
	emp_req_t *reqs[64];
	emp__tl_dispatch++;
	for (int i = 0; i < n;) {
		int k = 0;
		while (i < n && k < 64)
			reqs[k++] = &ep->desc[idx[i++]];
		fn(ep->hook_arg, reqs, k);
	}
	emp__tl_dispatch--;
}

/* One engine poll under its lock: the completed descriptors' indices are
 * taken off the completion queue into idx (up to max; the rest stay for the
 * next turn), and the poll's completion count is returned. */
static int poll_locked(struct emp_endpoint *ep, uint64_t now, int hold, int bulk, uint32_t *idx, int max, int *nidx, int *busy)
{
	/* an event-loop thread (emp_defer) posts its replies at its next wait:
	 * the acks of the requests it takes now wait for them (EMP__ROUND_ACK_NS
	 * at most) and ride in them (one frame per reply, not two) */
	emp__fw_set_hold(ep->fw, hold, hold && emp__deferring(ep) ? EMP__ROUND_ACK_NS : 0);
	emp__fw_set_bulk_hold(ep->fw, bulk);
	emp__fw_skip_rx(ep->fw, tl_skip_rx);
	int n = emp__fw_poll(ep->fw, now);
	if (!hold && !bulk)
		emp__fw_flush(ep->fw);
	int k = 0;
	uint32_t t = ep->cq.tail, h = __atomic_load_n(&ep->cq.head, __ATOMIC_ACQUIRE);
	while (t != h && k < max)
		idx[k++] = ep->cq.ring[t++ & ep->cq.mask];
	__atomic_store_n(&ep->cq.tail, t, __ATOMIC_RELEASE);
	*nidx = k;
	*busy = emp__fw_busy(ep->fw) || t != h;
	return n;
}

/* An application thread that drives (or tries to: the lock's holder does its
 * work) looks at the device, a sender that posts and never waits included.
 * While it is inside a drive (ep->drivers) and for EMP__TAKEOVER_NS after,
 * the progress thread leaves the device alone; it used to take it over
 * during a sender's long drives and then spin on the readable device fd
 * while the sender held the engine lock (one epoll_wait per frame). */
static void saw_device(struct emp_endpoint *ep)
{
	uint64_t now = emp__now(ep);
	if (now - __atomic_load_n(&ep->last_exit_ns, __ATOMIC_RELAXED) < EMP__TAKEOVER_NS / 8)
		return;
	__atomic_store_n(&ep->last_exit_ns, now, __ATOMIC_RELAXED);
	__atomic_add_fetch(&ep->drives, 1, __ATOMIC_RELAXED);
	emp__progress_exit_seen(ep);
}

/* hold: 1 a lone ack may wait for a reply (a thread posts, or spins and so
 * polls again at once); 0 nothing waits (the caller is about to sleep);
 * -1 as the endpoint's threads allow; HOLD_SLEEP as 0, but a bulk stream's
 * acks may wait (the caller sleeps no longer than emp__fw_bulk_deadline).
 * sure: wait for the engine lock rather than leave the work to its holder. */
#define HOLD_SLEEP (-2)
#define SURE_BOUNDED 2   /* sure, but for EMP__HOLDER_WAIT_NS at most */

/* the engine lock for ns at most: a holder that keeps it longer (a long
 * transmit, or preempted) leaves the caller free to look at its condition
 * and sleep again; 0 taken */
static int lock_within(pthread_mutex_t *mu, long ns)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += ns;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return pthread_mutex_clocklock(mu, CLOCK_MONOTONIC, &ts);
}

static int drive_core(struct emp_endpoint *ep, int hold, int sure, int *contended)
{
	int bulk = hold == HOLD_SLEEP;
	if (bulk)
		hold = 0;
	uint32_t idx[256];
	int total = 0;
	for (;;) {
		int err = sure == SURE_BOUNDED ? lock_within(&ep->eng_lock, EMP__HOLDER_WAIT_NS)
			 : sure ? pthread_mutex_lock(&ep->eng_lock)
			 : pthread_mutex_trylock(&ep->eng_lock);
		sure = 0;                    /* the loop's later turns only try */
		if (err) {                   /* held by another thread (all the while, if sure) */
			if (contended && !total)
				*contended = 1;
			return total;        /* the holder sees our mailbox entries after it unlocks */
		}
		/* a lone ack may start waiting for a reply only while a thread spins
		 * in the engine and so polls again at once, or posts (the reply itself
		 * may be next), or this is an event loop (emp_defer: its replies leave
		 * at its next wait, whose drive flushes); once started the hold runs to its deadline
		 * (emp__tx_flush_or_hold) unless a thread is about to sleep */
		int h = hold >= 0 ? hold : __atomic_load_n(&ep->spinners, __ATOMIC_RELAXED) > 0 || emp__deferring(ep);
		int k, busy;
		uint64_t t0 = emp__now(ep);   /* the drive's start: the poll's time too */
		__atomic_store_n(&ep->last_drive_ns, t0, __ATOMIC_RELAXED);
		__atomic_store_n(&ep->deferred, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&ep->deferred_bytes, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&ep->deferred_t0, 0, __ATOMIC_RELAXED);
		int n = poll_locked(ep, t0, h, bulk, idx, 256, &k, &busy);
		/* and when it ended: a stream's flush of a 128 KiB message (90
		 * frames through the kernel, about 100 us on veth) made every write
		 * look due again at its end (emp_progress_due), and the drive that
		 * followed flushed the wire a second time per write for the acks
		 * that came meanwhile, which the next write's post takes anyway */
		__atomic_store_n(&ep->last_drive_ns, emp__now(ep), __ATOMIC_RELAXED);
		__atomic_store_n(&ep->busy_hint, busy, __ATOMIC_RELAXED);
		uint32_t mtu;
		uint64_t mm = n ? emp__fw_mtu_mismatches(ep->fw, &mtu) : 0;
		pthread_mutex_unlock(&ep->eng_lock);
		if (mm > ep->mtu_warned) {
			ep->mtu_warned = mm;
			fprintf(stderr, "emp: MTU mismatch: a peer's interface MTU differs from ours (%u); "
				"this session uses %u-byte frames (set the same MTU on every host for full-size frames)\n",
				ep->fwc.mtu, mtu);
		}
		if (n || k) {
			total += n;
			wake_waiters(ep);
			dispatch(ep, idx, k);
		}
		if (!busy && __atomic_load_n(&ep->mb.head, __ATOMIC_SEQ_CST) ==
				     __atomic_load_n(&ep->mb.tail, __ATOMIC_SEQ_CST))
			return total;
	}
}

static int drive_ex2(struct emp_endpoint *ep, int hold, int sure, int *contended)
{
	if (emp__tl_progress)
		return drive_core(ep, hold, sure, contended);
	__atomic_add_fetch(&ep->drivers, 1, __ATOMIC_SEQ_CST);
	int n = drive_core(ep, hold, sure, contended);
	__atomic_sub_fetch(&ep->drivers, 1, __ATOMIC_SEQ_CST);
	saw_device(ep);
	return n;
}

static int drive_ex(struct emp_endpoint *ep, int hold, int sure)
{
	return drive_ex2(ep, hold, sure, NULL);
}

/* the progress thread's drive: -EBUSY when another thread held the engine
 * (that thread takes the waiting frames when it lets go; the caller backs
 * off instead of spinning on a device fd that stays readable meanwhile) */
int emp__drive_try(struct emp_endpoint *ep)
{
	int contended = 0;
	int n = drive_core(ep, -1, 0, &contended);
	return contended ? -EBUSY : n;
}

/* Spinning callers: a turn with no frame waiting, no post and no work left
 * over skips the engine lock and the clock; every 16th turn drives anyway
 * (timers, and a driver without rx_pending always drives). */
static __thread unsigned idle_turns;

int emp__drive_spin(struct emp_endpoint *ep)
{
	if (ep->ops->rx_pending && !__atomic_load_n(&ep->busy_hint, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&ep->mb.head, __ATOMIC_ACQUIRE) == __atomic_load_n(&ep->mb.tail, __ATOMIC_ACQUIRE) &&
	    !ep->ops->rx_pending(ep->dev) && (++idle_turns & 15))
		return 0;
	idle_turns = 0;
	return drive_ex(ep, -1, 0);
}

int emp__drive(struct emp_endpoint *ep)
{
	return drive_ex(ep, -1, 0);
}

/* A post's drive, and a wait's right after arming. On a device whose look
 * is a system call (EMP_DRV_SYSLOOK: udp, each look a recvmmsg) it leaves
 * the device alone when a look was made just now and found nothing left
 * (rx_pending): a server over udp looked again in the repost of the receive
 * its request filled and in the send of its reply, a few microseconds after
 * the look that took the request, 1.7 of its 7.4 system calls per message,
 * and in the drive after arming, right after its spin's last look. Frames
 * are taken at the next wait (the device fd is level-triggered: a sleep
 * ends at once while a frame waits), or by the next post once rx_pending
 * says a look is due. */
int emp__drive_post(struct emp_endpoint *ep)
{
	if (!(ep->ops->flags & EMP_DRV_SYSLOOK) || !ep->ops->rx_pending || ep->ops->rx_pending(ep->dev))
		return drive_ex(ep, 1, 0);
	tl_skip_rx = 1;
	int n = drive_ex(ep, 1, 0);
	tl_skip_rx = 0;
	return n;
}

int emp__drive_post_busy(struct emp_endpoint *ep, int *contended)
{
	*contended = 0;
	return drive_ex2(ep, 1, 0, contended);
}

int emp__drive_post_holder(struct emp_endpoint *ep)
{
	return drive_ex(ep, 1, SURE_BOUNDED);
}

int emp__drive_nap(struct emp_endpoint *ep)
{
	return drive_ex(ep, HOLD_SLEEP, 0);
}

int emp__drive_sure(struct emp_endpoint *ep)
{
	return drive_ex(ep, -1, 1);
}

/* everything out now, held acks included: the caller waits for nobody */
int emp__drive_flush(struct emp_endpoint *ep)
{
	return drive_ex(ep, 0, 1);
}

int emp_progress_due(emp_endpoint_t *ep)
{
	if (!ep)
		return -EINVAL;
	uint64_t now = emp__now(ep);
	if (now - __atomic_load_n(&ep->last_drive_ns, __ATOMIC_RELAXED) < EMP__DUE_NS)
		return 0;
	uint64_t d0 = __atomic_load_n(&ep->deferred_t0, __ATOMIC_RELAXED);
	if (ep->ops->rx_pending && !ep->ops->rx_pending(ep->dev) && !__atomic_load_n(&ep->busy_hint, __ATOMIC_RELAXED) &&
	    !(d0 && now - d0 >= EMP__DUE_NS))
		return 0;
	return drive_ex(ep, -1, 0);
}

int emp_progress(emp_endpoint_t *ep)
{
	if (!ep)
		return -EINVAL;
	int n = emp__drive_spin(ep);
	emp__looked(ep, emp__now(ep));   /* a thread looks: the progress thread stays back */
	return n;
}

int emp_wait_fd(emp_endpoint_t *ep)
{
	return ep->dev_fd;
}

int emp_wait_fd2(emp_endpoint_t *ep)
{
	return ep->dev_fd2;
}

int emp_wait_fd_error(emp_endpoint_t *ep)
{
	int err = 0;
	socklen_t el = sizeof(err);
	if (!ep || ep->dev_fd < 0 || emp__sys_getsockopt(ep->dev_fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		return 0;
	return err != 0;
}

int64_t emp_next_deadline_ns(emp_endpoint_t *ep)
{
	uint64_t dl = emp__fw_next_deadline(ep->fw);     /* a racy read of one word: a hint */
	if (dl == UINT64_MAX)
		return -1;
	uint64_t now = emp__now(ep);
	return dl > now ? (int64_t)(dl - now) : 0;
}

void emp_set_completion_hook(emp_endpoint_t *ep, emp_completion_fn *fn, void *arg)
{
	ep->hook_arg = arg;
	__atomic_store_n(&ep->hook, fn, __ATOMIC_RELEASE);
}

void emp_set_hold_hook(emp_endpoint_t *ep, emp_hold_fn *fn, void *arg)
{
	ep->hold_arg = arg;
	__atomic_store_n(&ep->hold, fn, __ATOMIC_RELEASE);
}
