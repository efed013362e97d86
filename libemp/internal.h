/* internal.h: libemp's private endpoint state shared by its files (locks, descriptor pool, progress thread). */
#ifndef EMP_LIBEMP_INTERNAL_H
#define EMP_LIBEMP_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "emp.h"
#include "fw.h"
#include "driver.h"
#include "conf.h"

struct emp_progress;

struct emp_waiter {                /* a thread blocked in emp_wait/emp_wait_any */
	int efd;
	struct emp_waiter *next;
};

struct emp_endpoint {
	struct emp_conf conf;
	const struct emp_driver_ops *ops;
	void *dev;
	struct emp_fw *fw;
	size_t fw_size;
	int fw_ready;
	uint64_t mtu_warned;
	struct emp_fw_config fwc;
	struct emp_desc *desc;
	struct emp_sg **ext_sg;          /* per descriptor: heap sg list for long iovecs */
	uint32_t ndesc;
	struct emp_mailbox mb;
	struct emp_cq cq;                /* completed descriptors, drained after every poll */
	uint32_t *free_idx;              /* free descriptor stack */
	uint32_t nfree;
	pthread_mutex_t post_lock;       /* mailbox producer side + free stack */
	pthread_mutex_t eng_lock;        /* whoever holds it drives the engine */
	pthread_mutex_t wait_mu;
	pthread_mutex_t kick_mu;      /* the device's kick against the progress thread's stop */
	int sleepers;                    /* threads asleep in emp_wait (their eventfds in waiters) */
	struct emp_waiter *waiters;      /* under wait_mu */
	int dev_fd;                      /* driver's wait fd, or -1 */
	int dev_fd2;                     /* its second one (wait_fd2), or -1 */
	/* who watches the device: threads in emp_wait_for (spinning, or asleep in
	 * a kernel wait that holds dev_fd) drive the engine themselves; the
	 * progress thread takes the ring over only when none has looked for a
	 * while, or when threads sleep and none of their sleeps holds dev_fd */
	int spinners;                    /* threads spinning in emp_wait_for */
	int dev_sleepers;                /* threads asleep in emp_wait_for */
	int dev_watchers;                /* ... of them those whose sleep holds dev_fd (or gathers) */
	int drivers;                     /* application threads inside a drive (drive.c) */
	uint64_t last_exit_ns;           /* when a thread last left emp_wait_for */
	uint64_t last_drive_ns;          /* when the engine was last driven (the poll's start and its end) */
	unsigned exits;                  /* how many times threads left emp_wait_for */
	unsigned drives;                 /* ... and looked at the device in a drive (saw_device, drive.c) */
	int busy_hint;                   /* the last drive left work (tx budget, frames): drive again */
	/* transmit batching (emp_defer): posts waiting for the next drive */
	unsigned deferred;               /* posts made without driving since the last drive */
	uint64_t deferred_bytes;         /* and their bytes */
	uint64_t deferred_t0;            /* when the oldest of them was made, 0 none */
	uint64_t spin_ns;
	uint64_t gather_ns;              /* longest receive-coalescing sleep (gather_us), 0 off */
	uint64_t (*clock)(void *);
	void *clock_arg;
	struct emp_sim_wire *wire;
	emp_completion_fn *hook;
	void *hook_arg;
	emp_hold_fn *hold;               /* emp_set_hold_hook */
	void *hold_arg;
	int self;
	int eplock;                      /* fd holding the endpoint id's lock (eplock.c), or -1 */
	uint16_t epid;
	pid_t owner;                     /* the process that opened it (emp_goodbye) */
	int said_bye;
	uint8_t mac[6];
	struct emp_progress *prog;
};

static inline uint64_t emp__now(struct emp_endpoint *ep)
{
	return ep->clock ? ep->clock(ep->clock_arg) : emp_now_ns();
}

/* Drive the engine if nobody else is; returns completions seen. Completed
 * requests go to the completion hook, sleeping emp_wait callers are woken. */
int emp__drive(struct emp_endpoint *ep);
/* the progress thread's: -EBUSY when another thread held the engine lock */
int emp__drive_try(struct emp_endpoint *ep);
/* the endpoint's fixed memory in bytes (engine, descriptor tables, mailbox) */
size_t emp__mem_bytes(const struct emp_endpoint *ep);
/* the same from a thread that has just posted, or has just armed its sleep,
 * and may answer what it takes now (a held ack may wait for its reply; the
 * thread's next look before a sleep sends it if no reply came); on a device
 * whose look is a system call, no look when one was just made (rx_pending) */
int emp__drive_post(struct emp_endpoint *ep);
/* a thread just woken from a sleep (it looks at the device whatever the
 * device); *contended set when another thread held the engine lock (its
 * holder takes the frames; the device fd stays readable until it has) */
int emp__drive_post_busy(struct emp_endpoint *ep, int *contended);
/* the same, waiting up to EMP__HOLDER_WAIT_NS for the engine lock rather
 * than leaving the work to its holder (held all that time: 0, as a try) */
int emp__drive_post_holder(struct emp_endpoint *ep);
#define EMP__HOLDER_WAIT_NS 500000l
/* the same for a spinning caller: skips the engine when nothing is waiting */
int emp__drive_spin(struct emp_endpoint *ep);
/* the same before a thread sleeps: nothing is held back for a reply (nobody
 * would send it before the ack hold ran out), but a bulk stream's acks may
 * wait (emp__fw_bulk_deadline): the caller's sleep ends by then */
int emp__drive_nap(struct emp_endpoint *ep);
/* the same, waiting for the engine lock rather than leaving it to its holder */
int emp__drive_sure(struct emp_endpoint *ep);
/* the same, and nothing held back (exit, an explicit flush) */
int emp__drive_flush(struct emp_endpoint *ep);
/* more threads runnable than CPUs plus one (wait.c): waiters do not spin */
int emp__crowded(void);
extern unsigned long emp__crowd_skips;   /* waits that did not spin: crowded (tests) */
extern unsigned long emp__shared_sleeps;   /* sleeps that left the device to another sleeper (tests) */
extern unsigned long emp__covers;          /* the progress thread called in: sleepers, none on the device (tests) */
extern unsigned long emp__lock_waits;   /* waits that waited for the engine lock's holder after a sleep ended at once (tests) */
/* emp_wait/emp_wait_any on emp_wait_for (wait.c): index of a done request or -ETIMEDOUT */
int emp__wait_reqs(struct emp_endpoint *ep, emp_req_t **reqs, int n, int64_t timeout_ns);
/* the calling thread batches its posts (emp_defer) */
int emp__deferring(struct emp_endpoint *ep);
/* nonzero while this thread runs the completion hook (inside a drive) */
extern __thread int emp__tl_dispatch;
extern __thread int emp__tl_progress;   /* this thread is the progress thread */
/* spinning threads yield the CPU at least this often (a peer may share it);
 * the interval grows while yields find nobody else to run, up to the most,
 * or up to the full one while more threads are runnable than there are CPUs
 * or a recent yield found one that was */
#define EMP__YIELD_NS 1000ull
#define EMP__YIELD_MAX_NS 1000000ull
#define EMP__YIELD_FULL_NS 50000ull
#define EMP__YIELD_BUSY_NS 20000000ull   /* a yield that found a taker counts this long */
struct emp__yield { uint64_t every, busy_at; };
uint64_t emp__yield_next(struct emp__yield *y, int busy, int full, uint64_t now);
/* deferred posts leave at most this long after the first (progress thread),
 * or when this many posts or bytes have gathered */
#define EMP__DEFER_NS 200000ull
/* an event loop's round: the acks of the requests it took wait this long at
 * most for its replies to carry them (a round of many connections' requests
 * takes longer than the deferred posts' bound) */
#define EMP__ROUND_ACK_NS 1000000ull
#define EMP__DEFER_MAX 32u
#define EMP__DEFER_BYTES 65536u
/* a thread busy with I/O drives the engine when frames wait and nobody did
 * for this long (emp_progress_due) */
#define EMP__DUE_NS 100000ull
/* the progress thread takes the device over when no thread has looked at it
 * for this long */
#define EMP__TAKEOVER_NS 1000000ull
void emp__set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int emp__progress_start(struct emp_endpoint *ep);
void emp__progress_stop(struct emp_endpoint *ep);
void emp__progress_kick(struct emp_endpoint *ep);
/* a thread left emp_wait_for: a progress thread in a long sleep shortens it */
void emp__progress_exit_seen(struct emp_endpoint *ep);
/* threads sleep and none of them holds the device fd: watch it now */
void emp__progress_cover(struct emp_endpoint *ep);
/* a thread looked at the device (left a wait, or drove once with emp_progress) */
void emp__looked(struct emp_endpoint *ep, uint64_t now);

/* eplock.c: the id's lock in this network namespace (an fd, or -EADDRINUSE /
 * -errno); release; a random id for EMP_EP_AUTO. */
int emp__eplock(uint16_t ethertype, uint16_t id);
void emp__epunlock(int fd);
uint16_t emp__random_epid(void);

/* Interface toward the cluster: from opts, $EMP_IFNAME, the config or routing. */
/* authkey.c: option auth_key's file checked and hashed into the engine's key */
int emp__auth_key_load(const char *path, uint8_t key[16], char *err, size_t errlen);
int emp__resolve_ifname(const struct emp_conf *c, char *out, size_t outlen);

#endif
