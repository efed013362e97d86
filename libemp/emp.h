/* emp.h: the public EMP host API: endpoints, routes, post/test/wait/cancel, persistent requests, counters. */
#ifndef EMP_H
#define EMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emp_endpoint emp_endpoint_t;
typedef struct emp_desc emp_req_t;             /* a request is a descriptor */

#define EMP_ANY_HOST  0xffffu
#define EMP_ANY_EP    0xffffu
#define EMP_ANY_TAG   0xffffffffu
#define EMP_EP_AUTO   0u          /* emp_open: a random id that no other endpoint here holds */
#define EMP_EP_AUTO_MIN 1024u     /* ... chosen from this range */
#define EMP_EP_AUTO_MAX 65534u

typedef struct emp_addr {
	uint16_t host;                           /* index in the route table */
	uint16_t ep;                             /* endpoint id on that host */
} emp_addr_t;

struct emp_sim_wire;
struct emp_conf;
struct emp_fw_config;

struct emp_open_opts {
	const char *conf_path;       /* NULL: $EMP_CONF, else /etc/emp/emp.conf */
	const struct emp_conf *conf; /* or an already parsed config (copied) */
	const char *driver;          /* "afpacket" (default) or "sim" */
	const char *ifname;          /* afpacket: NULL = from config / routing */
	uint16_t endpoint;           /* own endpoint id, or EMP_EP_AUTO. afpacket: the id is locked in
					* the network namespace for the endpoint's life; one held by
					* another endpoint gives -EADDRINUSE (EMP_EP_AUTO picks another) */
	struct emp_sim_wire *wire;   /* sim: wire to attach to */
	const uint8_t *mac;          /* sim: this port's MAC */
	int no_progress_thread;      /* 1: caller drives with emp_progress() */
	uint32_t incarnation;        /* 0: chosen at random */
	const struct emp_fw_config *fw_override; /* tests: engine settings to use */
	uint64_t (*clock)(void *arg);  /* tests: virtual time; NULL = emp_now_ns */
	void *clock_arg;
	int ring_at_open;            /* afpacket: the receive ring now (one RCU grace period, 10-20 ms,
					* at open), not after the 256th frame: a long-lived endpoint
					* that wants its steady latency from the first frame. Off, a
					* short-lived process (the sockets shim's) never pays it */
};

struct emp_status {
	int64_t result;              /* bytes, or -errno */
	emp_addr_t source;           /* recv: who sent it */
	uint32_t tag;                /* recv: the message's tag */
	uint64_t msg_len;            /* recv: sender's length (> result if truncated) */
};

/* 0 or -errno; on failure emp_last_error() says why in one line. */
int emp_open(emp_endpoint_t **ep, const struct emp_open_opts *opts);
/* A process about to give up root (setuid to another user) while it may
 * still open an endpoint later calls this first: it keeps n (at most 8)
 * raw sockets, made now while it may, for the AF_PACKET backend to take
 * when its own socket() is refused after the drop. Returns how many are
 * kept, or -errno when none could be made. A forked child does not inherit
 * them. */
int emp_keep_raw_sockets(int n);
void emp_close(emp_endpoint_t *ep);
const char *emp_last_error(void);

/* Routes: config peers by name or IPv4 (network order); own index. */
int emp_host_lookup(emp_endpoint_t *ep, const char *name);
int emp_host_by_ip(emp_endpoint_t *ep, uint32_t ip_be);
int emp_self_host(emp_endpoint_t *ep);          /* -ENOENT if own MAC not in config */
uint16_t emp_endpoint_id(emp_endpoint_t *ep);
unsigned emp_mtu(emp_endpoint_t *ep);
const struct emp_conf *emp_config(emp_endpoint_t *ep);

/* Post a send or receive; *req is owned by the engine until it completes. */
int emp_post_send(emp_endpoint_t *ep, emp_addr_t to, uint32_t tag,
		  const struct iovec *iov, int iovcnt, emp_req_t **req);
int emp_post_recv(emp_endpoint_t *ep, emp_addr_t from, uint32_t tag,
		  const struct iovec *iov, int iovcnt, emp_req_t **req);
/* 1 done (request freed unless persistent, st filled), 0 pending, -errno. */
int emp_test(emp_endpoint_t *ep, emp_req_t *req, struct emp_status *st);
/* emp_test without driving the engine: for callers that learn of completions
 * from the completion hook (and so must not re-enter it from there). */
int emp_reap(emp_endpoint_t *ep, emp_req_t *req, struct emp_status *st);
/* 1 done, 0 timeout (timeout_ns < 0: forever), -EINTR never; -errno. */
int emp_wait(emp_endpoint_t *ep, emp_req_t *req, struct emp_status *st, int64_t timeout_ns);
/* index of a completed request, -ETIMEDOUT, or -errno. */
int emp_wait_any(emp_endpoint_t *ep, emp_req_t **reqs, int n, struct emp_status *st,
		 int64_t timeout_ns);
/* Cancel an unmatched receive or unstarted send: it completes with -ECANCELED.
 * -EBUSY if the transfer already started. */
int emp_cancel(emp_endpoint_t *ep, emp_req_t *req);
/* The same for n requests with one look at the engine (a connection's
 * receives): requests not posted are skipped; returns how many started,
 * or how many are now cancelled (done with -ECANCELED, not yet reaped). */
int emp_start_many(emp_endpoint_t *ep, emp_req_t **reqs, int n);
int emp_cancel_many(emp_endpoint_t *ep, emp_req_t **reqs, int n);

/* Persistent requests: filled once, started many times; emp_test/emp_wait
 * leave them allocated; emp_req_free releases one that is not in flight. */
int emp_send_init(emp_endpoint_t *ep, emp_addr_t to, uint32_t tag,
		  const struct iovec *iov, int iovcnt, emp_req_t **req);
int emp_recv_init(emp_endpoint_t *ep, emp_addr_t from, uint32_t tag,
		  const struct iovec *iov, int iovcnt, emp_req_t **req);
int emp_start(emp_endpoint_t *ep, emp_req_t *req);
/* Start a persistent request made with one iovec on its first len bytes
 * (len at most the iovec's length at init): a send slot reused for messages
 * of any size. */
int emp_start_len(emp_endpoint_t *ep, emp_req_t *req, size_t len);
/* The same length, set without starting (several then go with one
 * emp_start_many, one look at the engine); -EBUSY while it is in flight. */
int emp_req_set_len(emp_endpoint_t *ep, emp_req_t *req, size_t len);
/* A posted receive's buffers lent out (a reader that waits with its own
 * buffer: a message lands there, one copy instead of two; what of it has
 * arrived already is moved over). The vectors, of the same total length,
 * go to the engine as they are and must stay valid until emp_recv_restore.
 * 0, -EBUSY (a message completed in it: the receive keeps its buffers),
 * -EINVAL. */
int emp_recv_redirect(emp_endpoint_t *ep, emp_req_t *req, const struct iovec *iov, int iovcnt);
/* The receive's own buffers back: 2 if a message completed into the lent
 * ones (it stays there; counter rx_direct), 1 if one was arriving (what
 * reached the lent buffers is copied to the receive's own, the rest follows
 * there), 0 if none came or nothing was lent. */
int emp_recv_restore(emp_endpoint_t *ep, emp_req_t *req);
int emp_req_free(emp_endpoint_t *ep, emp_req_t *req);
/* Frames 1..n-1 of a persistent receive's messages may stay in the device
 * until read, one copy fewer (firmware/lent.c; the frames of a message
 * beyond n are copied as before). Set while the request is not in flight;
 * 0, -EBUSY, -EINVAL, -ENOMEM. */
int emp_recv_lend(emp_endpoint_t *ep, emp_req_t *req, unsigned n);
/* frames of the receive's message still in the device (0: its bytes are
 * all in its buffers and may be read there without a lock) */
unsigned emp_recv_lent(const emp_req_t *req);
/* 1 if emp_recv_lend gave the receive a table */
int emp_recv_lends(const emp_req_t *req);
/* bytes [off, off + n) of a completed receive's message into dst, from its
 * buffers and the device */
void emp_recv_copy(emp_endpoint_t *ep, emp_req_t *req, uint64_t off, void *dst, size_t n);
/* its frames whose bytes all lie before upto go back to the device */
void emp_recv_return(emp_endpoint_t *ep, emp_req_t *req, uint64_t upto);
void emp_req_set_user(emp_req_t *req, void *user);
void *emp_req_user(emp_req_t *req);

/* Drive the engine once (for callers without the progress thread). */
int emp_progress(emp_endpoint_t *ep);
/* Drive it only if frames or deferred posts have waited while nobody drove
 * for 100 us: a thread busy with I/O on many connections keeps acks and
 * retransmissions moving at no cost when there is nothing to do. */
int emp_progress_due(emp_endpoint_t *ep);
/* fd readable when frames arrive (-1 if the device has none). */
int emp_wait_fd(emp_endpoint_t *ep);
/* A second fd of the device that becomes readable when frames arrive (the
 * AF_PACKET driver's bulk socket: the frames of long messages), or -1: a
 * thread that sleeps until frames arrive polls it beside emp_wait_fd. */
int emp_wait_fd2(emp_endpoint_t *ep);
/* A wait saw POLLERR/POLLHUP on emp_wait_fd (its interface went down or
 * away): takes the pending error, so the fd stops reporting it, and returns
 * 1; 0 when there was none. The caller should not wait on the fd again at
 * once (a nap of up to 100 ms is enough: frames come back with the link). */
int emp_wait_fd_error(emp_endpoint_t *ep);
/* ns until the engine next needs a call (0: now), or -1 if it has no timer. */
int64_t emp_next_deadline_ns(emp_endpoint_t *ep);

/* ---- for layers with readiness of their own (the sockets shim) ---- */

/* Called with the requests the engine completed, from whichever thread drove
 * it (engine lock not held, possibly several threads at once); each request's
 * user pointer (emp_req_set_user) says whose it is. The requests are still the
 * caller's to test and reap; the hook must not block. */
typedef void emp_completion_fn(void *arg, emp_req_t *const *reqs, int n);
void emp_set_completion_hook(emp_endpoint_t *ep, emp_completion_fn *fn, void *arg);

/* A layer that holds data back from the engine for a while (the shim
 * coalescing a connection's writes) registers this: the progress thread calls
 * it on every look (engine lock not held); it posts what has been held too
 * long and returns how much is still held. While that is not 0 the thread
 * looks every millisecond. */
typedef int emp_hold_fn(void *arg);
void emp_set_hold_hook(emp_endpoint_t *ep, emp_hold_fn *fn, void *arg);

/* The one way to wait for a condition of the caller's own while this thread
 * drives the engine itself (run to completion): it looks at done(), drives the
 * engine in a spin for the endpoint's adaptive spin budget, then calls arm(),
 * drives once more (a frame that came between the last look and arm() is seen),
 * looks at done() again and sleeps in sleep(): ONE kernel wait on the caller's
 * own fds and emp_wait_fd() (so frames wake it), bounded by ns (< 0: no
 * bound); after each sleep it calls disarm(), drives and looks again. While a
 * thread is inside, the progress thread leaves the device alone (it keeps the
 * timers). done() must cost no system call. Returns 1 when done() said so, 2
 * when sleep() returned > 0 (the caller's own fds are ready), 0 on timeout,
 * -EINTR when sleep() was interrupted, or another -errno from sleep().
 *
 * share_device: the caller's arm() makes every change of its condition wake
 * its own fds (a completion for it, taken by another thread, writes them).
 * Then its sleep holds emp_wait_fd() only when no other sleeping thread does
 * (emp_wait_device() says which): frames wake one thread, which drives the
 * engine for all, not every thread asleep (50 threads blocked in reads woke
 * 50 times per frame). When the one that holds the device leaves while others
 * sleep without it, the progress thread watches it until a thread does again.
 * Ignored without a progress thread. */
struct emp_waitfor {
	int (*done)(void *arg);
	void (*arm)(void *arg);                  /* optional */
	int (*sleep)(void *arg, int64_t ns);     /* > 0 ready, 0 nothing, -errno */
	void (*disarm)(void *arg);               /* optional */
	void *arg;
	int64_t timeout_ns;                      /* < 0 forever, 0 one look (no sleep) */
	int share_device;                        /* see above; 0: every sleep holds the device */
	int no_spin;                             /* 1: sleep at once, never spin (nobody's latency waits on it) */
};
int emp_wait_for(emp_endpoint_t *ep, const struct emp_waitfor *w);
/* Inside sleep(): 1 when this sleep must hold emp_wait_fd() (and
 * emp_wait_fd2()), 0 when another thread's sleep holds them. */
int emp_wait_device(void);

/* Transmit batching for the calling thread. While on, posts only queue for the
 * engine (no system call); they leave together at the next emp_wait_for or
 * emp_flush by any thread, when 32 posts or 64 KiB have gathered, or at the
 * latest about 0.2-1 ms later from the progress thread. An event loop turns it
 * on when it returns events and its next wait sends every reply in one batch. */
void emp_defer(emp_endpoint_t *ep, int on);
/* Drive the engine now and send everything it holds: deferred posts, and an
 * ack that waits for a reply (before a process that keeps the endpoint exits). */
void emp_flush(emp_endpoint_t *ep);
/* This endpoint's life is over: every peer it has a session with is told
 * (BYE, one frame each, not retransmitted), so that a peer whose table is
 * full may give the slot to another at once rather than after 2 s of quiet.
 * Messages still in flight to or from this endpoint fail at those peers.
 * Call only when the endpoint will send nothing more (at exit; emp_close
 * calls it); a forked child's copy of an endpoint never says it. */
void emp_goodbye(emp_endpoint_t *ep);

/* Peers (remote endpoints) the engine keeps a session with. A layer with
 * connections of its own holds the peer while one uses it: a held peer is
 * never reclaimed; an unheld one with nothing in flight may be, after it has
 * been idle for a while, when the table is full (a new session starts with
 * the next message either way). emp_peer_hold: 0, or -ENOBUFS when the table
 * is full of peers in use. emp_peer_policy(ep, 1): a HELLO from a peer nobody
 * holds starts no session and allocates nothing (for layers whose own
 * handshake decides who may talk; default 0: anyone in the route table); the
 * last such HELLO of each of the 8 latest senders is kept for 100 ms and
 * answered when the peer is held, so a handshake that lost the race to the
 * engine's costs no retransmission timeout. */
int emp_peer_hold(emp_endpoint_t *ep, emp_addr_t peer);
void emp_peer_release(emp_endpoint_t *ep, emp_addr_t peer);
void emp_peer_policy(emp_endpoint_t *ep, int hello_needs_hold);

struct emp_counters;
int emp_get_counters(emp_endpoint_t *ep, struct emp_counters *c);
/* the counters as one line of text (messages, frames, retransmits, timeouts,
 * fast retransmits, flow-control stalls, drops by reason) for a log: the
 * length written, or -errno; needs no firmware header */
int emp_counters_line(emp_endpoint_t *ep, char *buf, size_t len);
/* engine memory: bytes reserved, peers and transfer records in use */
void emp_get_usage(emp_endpoint_t *ep, size_t *bytes, uint32_t *peers, uint32_t *records);

/* Clock used by the engine (CLOCK_MONOTONIC ns). */
uint64_t emp_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
