/* afp_lazy.c: AF_PACKET receive before the rx ring (recvmmsg into a pool) and the ring's build by a helper thread off the critical path, switched over without losing a frame. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "afp_int.h"
#include "proto.h"
#include "sys.h"

/*
 * Setting PACKET_RX_RING costs an RCU grace period in the kernel
 * (synchronize_net, 10-20 ms), and so does every later change of the ring. A
 * process that makes one connection and exits must not pay it: the receive
 * socket starts without a ring and rx_burst copies frames out with recvmmsg
 * into a pool of slots. Once ring_after frames have been read (or a frame
 * comes after a second of life), a helper thread builds the ring on the same
 * socket (the fd waiters poll never changes):
 *
 *  1. a helper socket hfd with the same filter is bound: from here on every
 *     frame reaches hfd as well; a grace period later, every frame that
 *     reached only fd is in fd's queue, and the helper moves them into the pool;
 *  2. mode SWITCH: readers take frames from hfd, and empty fd unread (the
 *     waiters sleep on fd; its frames are copies of hfd's);
 *  3. PACKET_RX_RING on fd: the kernel unhooks fd, waits a grace period,
 *     drops fd's queue (copies of frames hfd holds) and hooks fd up again with
 *     the ring; a grace period later every frame that missed the ring is in hfd;
 *  4. mode RINGH: readers take the ring, then the pool and hfd; the first
 *     reader that finds all three empty (a grace period after the ring went
 *     up) goes to mode RING, and the helper closes hfd (another grace period,
 *     on the helper's time). hfd hears every frame, so under a steady stream
 *     it never runs empty (0.4-0.5 s of frames read twice in an iperf3
 *     receiver): its frames carry their kernel receive time (SO_TIMESTAMPNS),
 *     and the first one stamped after the ring went up ends it, since every
 *     frame queued behind that one reached the ring as well (one delivery
 *     walk hands a frame to both sockets).
 *
 * Frames seen twice (read from fd just before the switch and again from hfd,
 * or from hfd and the ring before the stamp rule ends hfd) are duplicates,
 * which the engine drops like any other. Frames that arrive during step 3 reach only
 * hfd, which nobody sleeps on: the builder watches it meanwhile and kicks the
 * endpoint (emp_dev_params.kick: the progress thread drives once).
 */

#define POOL_SLOTS  128
#define RECV_BATCH  64
#define POOL_OFF    2          /* the EMP header after the 14-byte MAC header is 16-aligned */
#define RING_AFTER_DEFAULT 256
#define RING_AFTER_NS 1000000000ull   /* or at the first frame after a second of life */
#define LOOK_NS 8000             /* sockmode: a spinner's look at the socket at most this often */
#define LOOK_MAX_NS 32000        /* ... and while a stream fills every look, up to this */

static uint64_t mono_ns(void)
{
	return emp__afp_clock_ns(CLOCK_MONOTONIC);
}

/* the kernel receive time of message m (SCM_TIMESTAMPNS), 0 if none */
static uint64_t stamp_ns(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
			struct timespec ts;
			memcpy(&ts, CMSG_DATA(c), sizeof(ts));
			return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		}
	return 0;
}

int emp__afp_lazy_init(struct afp *a, int ring_now)
{
	a->hfd = -1;
	a->mode = AFP_RECV;
	a->pool_n = POOL_SLOTS;
	a->pool_slot = (a->mtu + EMP_ETH_HLEN + 4 + POOL_OFF + 63) & ~63u;
	/* untouched until frames land: a large MTU costs address space, not memory */
	a->pool = malloc((size_t)a->pool_n * a->pool_slot);
	a->plen = calloc(a->pool_n, sizeof(*a->plen));
	a->pbuf = calloc(a->pool_n, sizeof(*a->pbuf));
	if (!a->pool || !a->plen || !a->pbuf)
		return -ENOMEM;
	for (unsigned i = 0; i < a->pool_n; i++)
		a->pbuf[i] = i;
	a->ring_after = ring_now ? 0 : RING_AFTER_DEFAULT;
	a->t_open_ns = mono_ns();
	/* frames before the ring (0: at open); when given, it decides over ring_now */
	const char *e = secure_getenv("EMP_AFP_RING_AFTER");
	if (e && *e >= '0' && *e <= '9') {
		unsigned long long v = strtoull(e, NULL, 10);
		a->ring_after = v > (1ull << 62) ? (1ull << 62) : v;
		a->t_open_ns = 0;                /* that count alone decides */
	}
	const char *rx = secure_getenv("EMP_AFP_RX");
	a->sockmode = rx && !strcmp(rx, "socket");
	if (a->sockmode && !a->ring_after)
		a->ring_after = 1;               /* the builder then sets up the tx ring alone */
	a->look_ns = LOOK_NS;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	return 0;
}

static uint8_t *pool_at(struct afp *a, unsigned pos)
{
	return a->pool + (size_t)a->pbuf[pos % a->pool_n] * a->pool_slot + POOL_OFF;
}

/* Frames read from fd while hfd was bound but before mode SWITCH (the grace
 * period of step 1: 10-30 ms, thousands of frames in a bulk stream) reached
 * hfd as well, in the same order, and hfd gives them again first. A short
 * hash of each is kept (the last SEEN_MAX) and hfd's first frames that match
 * them, in order, are dropped unread: without that each frame of the window
 * was handled twice (about 3000 duplicates, and as many acks, at 5 Gbit/s). */
#define SEEN_MAX 16384u
#define SEEN_SLACK 64u

static uint64_t frame_key(const uint8_t *p, unsigned len)
{
	uint64_t h = 1469598103934665603ull ^ len;
	unsigned n = len < 64 ? len : 64;
	for (unsigned i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	for (unsigned i = 0; i < 8 && n + i < len; i++)    /* the last payload bytes too */
		h = (h ^ p[len - 1 - i]) * 1099511628211ull;
	return h;
}

/* hfd's frame with key k: 1 if fd gave it already (drop it) */
static int seen_on_fd(struct afp *a, uint64_t k)
{
	if (!a->seen)
		return 0;
	/* where to look: from hfd's match so far, a little ahead (fd's run may
	 * hold frames hfd never had: delivery walks under way while hfd was
	 * bound); for hfd's first frames, the whole run */
	uint64_t from = a->seen_cur, lim = SEEN_SLACK;
	if (from == UINT64_MAX) {
		from = a->seen_n > SEEN_MAX ? a->seen_n - SEEN_MAX : 0;
		lim = SEEN_MAX;
	}
	for (uint64_t i = from; i < a->seen_n && i - from < lim; i++)
		if (a->seen[i % SEEN_MAX] == k) {
			a->seen_cur = i + 1;
			a->seen_miss = 0;
			a->seen_dups++;
			return 1;
		}
	/* not among them: a frame fd never gave (its queue overflowed), or past
	 * the copies. Past them for sure once every key was matched, or after a
	 * few misses in a row (fewer while nothing matched: each looks at all) */
	if (a->seen_cur == a->seen_n || ++a->seen_miss > (a->seen_cur == UINT64_MAX ? 8u : SEEN_SLACK)) {
		free(a->seen);
		a->seen = NULL;
	}
	return 0;
}

/* Frames from fd into the free slots (under mu): how many were added, 0 when
 * none waits or there is no room, -1 when fd has nothing more to give. */
static int pool_fill(struct afp *a, int fd)
{
	unsigned room = a->pool_n - (a->pfill - a->ptail);
	if (!room)
		return 0;
	struct mmsghdr mm[RECV_BATCH];
	struct iovec iov[RECV_BATCH];
	uint8_t ctl[RECV_BATCH][CMSG_SPACE(sizeof(struct timespec))];
	unsigned k = room < RECV_BATCH ? room : RECV_BATCH;
	uint64_t t_ring = fd == a->hfd ? a->t_ring_real : 0;
	memset(mm, 0, sizeof(mm[0]) * k);
	for (unsigned i = 0; i < k; i++) {
		iov[i].iov_base = pool_at(a, a->pfill + i);
		iov[i].iov_len = a->pool_slot - POOL_OFF;
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
		if (t_ring) {
			mm[i].msg_hdr.msg_control = ctl[i];
			mm[i].msg_hdr.msg_controllen = sizeof(ctl[i]);
		}
	}
	int r = recvmmsg(fd, mm, k, MSG_DONTWAIT, NULL);
	if (a->sockmode) {
		/* a stream that fills the looks: look less often, so that each
		 * system call brings more frames; a trickle: look as often as before */
		__atomic_store_n(&a->last_look, mono_ns(), __ATOMIC_RELAXED);
		a->drained = r < (int)k;
		uint64_t look = a->look_ns;
		if (r >= 12 && look < LOOK_MAX_NS)
			look *= 2;
		else if (r <= 3)
			look = LOOK_NS;
		__atomic_store_n(&a->look_ns, look, __ATOMIC_RELAXED);   /* rx_pending reads it unlocked */
	}
	if (r <= 0)
		return -1;
	unsigned w = a->pfill;
	for (int i = 0; i < r; i++) {
		unsigned pos = a->pfill + (unsigned)i;
		uint64_t ts = t_ring ? stamp_ns(&mm[i].msg_hdr) : 0;
		if (ts && ts >= t_ring) {
			/* this one and every one behind it reached the ring too */
			a->hcaught = 1;
			a->hdups += (unsigned)(r - i);
			break;
		}
		if ((mm[i].msg_hdr.msg_flags & MSG_TRUNC) || mm[i].msg_len < EMP_ETH_HLEN) {
			a->truncated++;    /* longer than a slot (MTU raised?) */
			continue;
		}
		if (a->seen) {
			uint64_t key = frame_key(pool_at(a, pos), mm[i].msg_len);
			if (fd == a->hfd) {
				if (seen_on_fd(a, key))
					continue;
			} else if (a->mode == AFP_RECV) {
				a->seen[a->seen_n++ % SEEN_MAX] = key;
			}
		}
		uint32_t b = a->pbuf[w % a->pool_n];     /* keep the good ones in order */
		a->pbuf[w % a->pool_n] = a->pbuf[pos % a->pool_n];
		a->pbuf[pos % a->pool_n] = b;
		a->plen[w % a->pool_n] = mm[i].msg_len;
		w++;
	}
	int got = (int)(w - a->pfill);
	a->pfill = w;
	if (a->hcaught && fd == a->hfd)
		return got ? got : -1;
	return (unsigned)r < k ? (got ? got : -1) : got;
}

/* Mode SWITCH: every frame fd holds is in hfd too (the builder emptied fd a
 * grace period after hfd was bound), so fd's frames are dropped unread and
 * the pool takes hfd's; fd is still emptied, since the waiters sleep on it.
 * (Read from both, each frame was handled twice: some 3000 duplicates and
 * their acks per process start at 5 Gbit/s.) */
static void discard(struct afp *a, int fd)
{
	struct mmsghdr mm[RECV_BATCH];
	memset(mm, 0, sizeof(mm));               /* no buffers: each frame consumed, not copied */
	for (int rounds = 0; rounds < 8; rounds++) {
		int r = recvmmsg(fd, mm, RECV_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);
		if (r <= 0)
			return;
		a->sdropped += (unsigned)r;
		if (r < RECV_BATCH)
			return;
	}
}

static int pool_take(struct afp *a, struct emp_rxframe *f, unsigned max)
{
	unsigned n = 0;
	while (n < max && a->phead != a->pfill) {
		f[n].data = pool_at(a, a->phead);
		f[n].len = a->plen[a->phead % a->pool_n];
		a->phead++;
		n++;
	}
	a->last_ring = 0;
	return (int)n;
}

static void *builder(void *arg);

static void start_builder(struct afp *a)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);   /* the program's signals stay with its threads */
	a->builder = pthread_create(&a->thr, NULL, builder, a) == 0 ? 1 : 2;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int emp__afp_lazy_rx(struct afp *a, struct emp_rxframe *f, unsigned max)
{
	pthread_mutex_lock(&a->mu);
	int m = a->mode, n = 0;
	if (m == AFP_RINGH && a->phead == a->pfill) {
		/* the ring first: it must not fill up (and drop) while hfd is read */
		n = emp__afp_ring_rx_burst(a, f, max);
		if (n > 0) {
			a->last_ring = 1;
			pthread_mutex_unlock(&a->mu);
			return n;
		}
	}
	if (a->phead == a->pfill) {
		/* sockmode: the socket gave all it had at the last look, and that
		 * was under look_ns ago: no system call to be told so again */
		if (m == AFP_RECV && !(a->sockmode && a->drained &&
				       mono_ns() - a->last_look < a->look_ns))
			pool_fill(a, a->fd);
		else if (m == AFP_SWITCH)
			discard(a, a->fd);
		if ((m == AFP_SWITCH || m == AFP_RINGH) && a->phead == a->pfill && !a->hcaught)
			pool_fill(a, a->hfd);
	}
	if (a->phead != a->pfill) {
		n = pool_take(a, f, max);
		a->rx_seen += (unsigned)n;
		/* busy, or long-lived (before the ring, a spinning waiter's every
		 * look at the device is a system call): the ring is worth it now */
		if (m == AFP_RECV && !a->builder && a->ring_after != UINT64_MAX &&
		    (a->rx_seen >= a->ring_after ||
		     (a->t_open_ns && mono_ns() - a->t_open_ns >= RING_AFTER_NS)))
			start_builder(a);
	} else if (m == AFP_RINGH && (a->hgrace || a->hcaught) && a->ptail == a->pfill) {
		/* the pool is empty and so was hfd, a grace period after the ring
		 * went up, or hfd gave a frame the ring has too: whatever hfd
		 * holds or hears from now on, the ring has as well */
		__atomic_store_n(&a->mode, AFP_RING, __ATOMIC_RELEASE);
		pthread_cond_signal(&a->cv);
		m = AFP_RING;
	}
	pthread_mutex_unlock(&a->mu);
	if (!n && m == AFP_RING) {
		n = emp__afp_ring_rx_burst(a, f, max);
		a->last_ring = 1;
	}
	return n;
}

void emp__afp_lazy_release(struct afp *a, unsigned n)
{
	pthread_mutex_lock(&a->mu);
	unsigned out = a->phead - a->ptail;
	a->ptail += n < out ? n : out;
	pthread_mutex_unlock(&a->mu);
}

/* an RCU grace period: membarrier(MEMBARRIER_CMD_GLOBAL) waits for one
 * without a file descriptor. (It was a spare AF_PACKET socket opened and
 * closed, whose release waits for one: but this thread runs beside the
 * application, and a descriptor number the application had just closed and
 * read again by mistake then named that blocking socket: the read blocked
 * for ever and held the socket, so its release waited for nothing.) */
static void grace(void)
{
	if (emp__syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
		return;
	int s = emp__sys_socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s >= 0)
		emp__sys_close(s);
}

static void set_mode(struct afp *a, int m)
{
	pthread_mutex_lock(&a->mu);
	__atomic_store_n(&a->mode, m, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&a->mu);
}

/* everything fd (or hfd) holds into the pool, waiting (bounded) for the
 * readers to free slots; what still finds no room is left (the kernel drops
 * it with the old queue, and the sender retransmits it) and counted */
static void drain_into_pool(struct afp *a, int fd)
{
	for (int tries = 0; tries < 50; tries++) {
		pthread_mutex_lock(&a->mu);
		int r;
		while ((r = pool_fill(a, fd)) > 0)
			;
		pthread_mutex_unlock(&a->mu);
		if (r < 0)
			return;
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&a->mu);
	a->switch_left++;
	pthread_mutex_unlock(&a->mu);
}

/* The ring is up (fd hooked to it since t_hooked_real): readers take it from
 * now on. At once, by whichever thread set it: until then they read hfd, whose
 * frames since the hook-up are in the ring as well and came twice. */
static void ring_up(struct afp *a)
{
	pthread_mutex_lock(&a->mu);
	a->t_ring_real = a->t_hooked_real;
	__atomic_store_n(&a->mode, AFP_RINGH, __ATOMIC_RELEASE);   /* readers take the ring too (it wakes them) */
	pthread_mutex_unlock(&a->mu);
}

struct attach_job { struct afp *a; int rc, done; };

static void *attach_thread(void *arg)
{
	struct attach_job *j = arg;
	j->rc = emp__afp_ring_attach(j->a, 0, 1, NULL, 0);
	if (j->rc == 0)
		ring_up(j->a);
	__atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* PACKET_RX_RING on fd. While the kernel waits out its grace period, frames
 * reach only hfd, which nobody sleeps on: a second thread sets the ring and
 * this one kicks the endpoint (a drive soon) whenever hfd holds frames. */
static int attach_watched(struct afp *a, int h)
{
	struct attach_job j = { a, 0, 0 };
	pthread_t t;
	if (!a->kick || pthread_create(&t, NULL, attach_thread, &j)) {
		int rc = emp__afp_ring_attach(a, 0, 1, NULL, 0);
		if (rc == 0)
			ring_up(a);
		return rc;
	}
	while (!__atomic_load_n(&j.done, __ATOMIC_ACQUIRE)) {
		struct pollfd p = { h, POLLIN, 0 };
		if (poll(&p, 1, 1) > 0 && (p.revents & POLLIN)) {
			a->kick(a->kick_arg);
			struct timespec ts = { 0, 200000 };   /* time to drain it */
			nanosleep(&ts, NULL);
		}
	}
	pthread_join(t, NULL);
	return j.rc;
}

static void *builder(void *arg)
{
	struct afp *a = arg;
	if (a->sockmode) {                   /* the tx ring only: receive stays on recvmmsg */
		if (a->want_txring && !a->stop)
			(void)emp__afp_txring_open(a);
		return NULL;
	}
	int h = emp__sys_fd_high(emp__afp_filtered_socket(a, 0));
	if (h < 0)
		return NULL;                     /* stays on recvmmsg */
	int one = 1;                         /* receive times: when hfd has caught up with the ring */
	(void)emp__sys_setsockopt(h, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
	/* keys from before the bind on: a frame that reaches hfd is in them
	 * whenever fd gave it (none: duplicates, still correct) */
	uint64_t *seen = malloc(SEEN_MAX * sizeof(*seen));
	pthread_mutex_lock(&a->mu);
	a->seen = seen;
	a->seen_n = 0;
	a->seen_cur = UINT64_MAX;
	a->seen_miss = 0;
	pthread_mutex_unlock(&a->mu);
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(a->etype),
				   .sll_ifindex = a->ifindex };
	if (emp__sys_bind(h, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		emp__sys_close(h);
		pthread_mutex_lock(&a->mu);
		free(a->seen);
		a->seen = NULL;
		pthread_mutex_unlock(&a->mu);
		return NULL;                     /* stays on recvmmsg */
	}
	pthread_mutex_lock(&a->mu);
	a->hfd = h;
	pthread_mutex_unlock(&a->mu);
	grace();                             /* every frame now reaches hfd too */
	drain_into_pool(a, a->fd);
	set_mode(a, AFP_SWITCH);
	int rc = attach_watched(a, h);
	if (rc < 0) {                        /* no ring: back to fd alone */
		grace();
		drain_into_pool(a, h);
		pthread_mutex_lock(&a->mu);
		__atomic_store_n(&a->mode, AFP_RECV, __ATOMIC_RELEASE);
		a->hfd = -1;
		free(a->seen);
		a->seen = NULL;
		a->ring_after = UINT64_MAX;
		pthread_mutex_unlock(&a->mu);
		emp__sys_close(h);
		return NULL;
	}
	grace();                             /* every frame that missed the ring is in hfd */
	pthread_mutex_lock(&a->mu);
	a->hgrace = 1;
	while (a->mode != AFP_RING && !a->stop)
		pthread_cond_wait(&a->cv, &a->mu);
	a->hfd = -1;
	free(a->seen);
	a->seen = NULL;
	int stop = a->stop;
	pthread_mutex_unlock(&a->mu);
	emp__sys_close(h);
	if (a->want_txring && !stop)
		(void)emp__afp_txring_open(a);   /* its own grace period; failed: sendmmsg stays */
	return NULL;
}

void emp__afp_lazy_close(struct afp *a)
{
	if (a->builder == 1) {
		pthread_mutex_lock(&a->mu);
		a->stop = 1;
		pthread_cond_signal(&a->cv);
		pthread_mutex_unlock(&a->mu);
		pthread_join(a->thr, NULL);
	}
	if (a->pool) {
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
	}
	free(a->seen);
	free(a->pool);
	free(a->plen);
	free(a->pbuf);
}
