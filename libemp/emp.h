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
	uint16_t endpoint;           /* own endpoint id */
	struct emp_sim_wire *wire;   /* sim: wire to attach to */
	const uint8_t *mac;          /* sim: this port's MAC */
	int no_progress_thread;      /* 1: caller drives with emp_progress() */
	uint32_t incarnation;        /* 0: chosen at random */
	const struct emp_fw_config *fw_override; /* tests: engine settings to use */
	uint64_t (*clock)(void *arg);  /* tests: virtual time; NULL = emp_now_ns */
	void *clock_arg;
};

struct emp_status {
	int64_t result;              /* bytes, or -errno */
	emp_addr_t source;           /* recv: who sent it */
	uint32_t tag;                /* recv: the message's tag */
	uint64_t msg_len;            /* recv: sender's length (> result if truncated) */
};

/* 0 or -errno; on failure emp_strerror_last() says why in one line. */
int emp_open(emp_endpoint_t **ep, const struct emp_open_opts *opts);
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
int emp_req_free(emp_endpoint_t *ep, emp_req_t *req);
void emp_req_set_user(emp_req_t *req, void *user);
void *emp_req_user(emp_req_t *req);

/* Drive the engine once (for callers without the progress thread). */
int emp_progress(emp_endpoint_t *ep);
/* Drive the engine once and send every frame it holds back (an ack waiting
 * for a reply): before a process that keeps the endpoint open exits. */
int emp_flush(emp_endpoint_t *ep);
/* For layers that wait on conditions of their own (the sockets shim): between
 * emp_drive_begin and emp_drive_end this thread drives the engine itself
 * (emp_progress in a spin, or after poll() on emp_wait_fd returns) and the
 * progress thread stands back instead of competing for every frame. A thread
 * blocked in between must bound its sleep by emp_next_deadline_ns. */
void emp_drive_begin(emp_endpoint_t *ep);
void emp_drive_end(emp_endpoint_t *ep);
/* Before blocking outside libemp after emp_drive_end (poll, epoll_wait): makes
 * sure the progress thread watches the device again at once. */
void emp_progress_resume(emp_endpoint_t *ep);
/* fd readable when frames arrive (-1 if the device has none). */
int emp_wait_fd(emp_endpoint_t *ep);
/* ns until the engine next needs a call (0: now), or -1 if it has no timer. */
int64_t emp_next_deadline_ns(emp_endpoint_t *ep);
/* Called after any request completes (from whichever thread drove the engine,
 * engine lock not held); for wiring completions into eventfds. */
void emp_set_completion_hook(emp_endpoint_t *ep, void (*fn)(void *arg), void *arg);

/* Peers (remote endpoints) the engine keeps a session with. A layer with
 * connections of its own holds the peer while one uses it: a held peer is
 * never reclaimed; an unheld one with nothing in flight may be, after it has
 * been idle for a while, when the table is full (a new session starts with
 * the next message either way). emp_peer_hold: 0, or -ENOBUFS when the table
 * is full of peers in use. emp_peer_policy(ep, 1): a HELLO from a peer nobody
 * holds starts no session and allocates nothing (for layers whose own
 * handshake decides who may talk; default 0: anyone in the route table). */
int emp_peer_hold(emp_endpoint_t *ep, emp_addr_t peer);
void emp_peer_release(emp_endpoint_t *ep, emp_addr_t peer);
void emp_peer_policy(emp_endpoint_t *ep, int hello_needs_hold);

struct emp_counters;
int emp_get_counters(emp_endpoint_t *ep, struct emp_counters *c);
/* engine memory: bytes reserved, peers and transfer records in use */
void emp_get_usage(emp_endpoint_t *ep, size_t *bytes, uint32_t *peers, uint32_t *records);

/* Clock used by the engine (CLOCK_MONOTONIC ns). */
uint64_t emp_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
