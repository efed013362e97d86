/* simwire.h: both ends of one shim stream on the simulated wire, for the tests in tests/shim (simwire.c). */
#ifndef EMP_TESTS_SIMWIRE_H
#define EMP_TESTS_SIMWIRE_H
/*
 * Two shim sockets in the test process are the two ends of one EMP stream:
 * each is set up as a negotiation leaves it (es__conn_create,
 * es__conn_set_peer, state EMP, its kernel socket in the liveness set) on its
 * own endpoint of one simulated wire, the kernel TCP connection being one
 * AF_UNIX socket pair; the engine is handed to the shim with es__engine_set.
 * Tests call the application's API (read, write, shutdown, close, poll,
 * epoll: the shim's own wrappers, linked in).
 */
#include "runner.h"
#include "unit/harness.h"
#include "conn.h"

#define VT_MAX 5000000000ull            /* virtual ns a step may take at most */

struct sw {
	struct harness h;
	int fd[2];                       /* the shim's sockets: side 0 on host 0, side 1 on host 1 */
	struct es_sock *s[2];
};

/* R receive buffers of S bytes per side. sw_open: virtual time (tests/unit
 * harness), no progress thread: the test drives the engines (h_run) and every
 * call must be non-blocking (a wait in the shim spins on a clock nobody
 * moves). sw_open_rt: real time, progress threads, blocking sockets with 2 s
 * timeouts (a lost wake fails, it does not hang). */
void sw_open(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S);
void sw_open_rt(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S);
void sw_streams(struct sw *w, unsigned R, unsigned S, int nonblock);
unsigned sw_evmask(struct sw *w, int i);
/* drive both engines (the harness's h_run) after posting what the shim
 * coalesced, as the thread's next wait would (hold.c) */
int sw_run(struct harness *h, int (*done)(void *), void *arg, uint64_t max_ns);
/* 200 ms of virtual time driven; _reaping: tearing down lingering
 * connections after every round (before h_free, so a later close reaps
 * nothing of a freed harness) */
void sw_settle(struct sw *w);
void sw_settle_reaping(struct sw *w);
int sw_reap_each_round(void *arg);   /* sw_run's done: a reap pass, never done */
/* byte off of the stream written by side dir */
uint8_t sw_pat(uint64_t off, int dir);
/* b[0..n) = the bytes at off.. of the stream written by side dir */
void sw_fill(void *b, size_t n, uint64_t off, int dir);
/* write sw_pat bytes from side i until EAGAIN (fails after 1 MiB); bytes taken */
size_t sw_write_all(struct sw *w, int i, size_t *off);
/* read up to max bytes at side i, each checked; stops at EAGAIN; bytes read */
size_t sw_read_some(struct sw *w, int i, size_t *off, size_t max);
/* poll one fd for ms: its revents, 0 if none */
int sw_poll(int fd, short ev, int ms);
static inline int sw_poll0(int fd, short ev) { return sw_poll(fd, ev, 0); }

#endif
