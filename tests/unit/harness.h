/* harness.h: a simulated cluster for unit tests: N endpoints on one sim wire, driven in virtual time. */
#ifndef EMP_TEST_HARNESS_H
#define EMP_TEST_HARNESS_H

#include "emp.h"
#include "fw.h"
#include "driver.h"
#include "sim.h"
#include "conf.h"

#define H_MAX 8

struct harness {
	int n;
	uint64_t now;                    /* virtual ns */
	struct emp_sim_wire *wire;
	struct emp_conf conf;
	struct emp_fw_config fwc;
	emp_endpoint_t *ep[H_MAX];
	uint8_t mac[H_MAX][6];
	uint32_t inc_seq;
	void *raw[H_MAX];                /* raw ports opened by h_raw_open */
	int nraw;
};

/* n hosts h0..h(n-1), endpoint id 1 each; faults may be NULL; fwc NULL = defaults. */
void h_init(struct harness *h, int n, const struct emp_sim_faults *f, const struct emp_fw_config *fwc);
void h_free(struct harness *h);
/* Close and reopen endpoint i with a new incarnation (a restarted process). */
/* close endpoint i as a crash would (its peers are not told: no BYE) and open a new life */
void h_restart(struct harness *h, int i);
/* close endpoint i: emp_close, which says BYE in each of its sessions */
void h_close(struct harness *h, int i);
/* close endpoint i as a crash would: no BYE */
void h_crash(struct harness *h, int i);
emp_addr_t h_addr(int host);
/* Drive every endpoint, advancing virtual time to the next event, until
 * done(arg) is true or max_ns of virtual time passed. 1 if done. */
int h_run(struct harness *h, int (*done)(void *arg), void *arg, uint64_t max_ns);
/* a done() for h_run: request req (an emp_req_t *) has completed */
int h_req_done(void *req);
/* Wait (in virtual time) for one request: 1 done with st, 0 timeout. */
int h_wait(struct harness *h, int i, emp_req_t *r, struct emp_status *st, uint64_t max_ns);
/* Like h_run, but only endpoint i is driven (the others are frozen). */
int h_run_only(struct harness *h, int i, int (*done)(void *arg), void *arg, uint64_t max_ns);
struct emp_counters h_ctr(struct harness *h, int i);
void h_fill(void *buf, size_t len, uint32_t seed);
int h_check(const void *buf, size_t len, uint32_t seed);
/* One message of len bytes (h_fill seed) from endpoint a to b with tag, the receive posted first; both
 * must complete within max_ns (virtual) each. Checks the status (result and msg_len are len, source a:1,
 * the tag), every byte, and that the byte past the receive buffer is untouched. */
void h_xfer(struct harness *h, int a, int b, size_t len, uint32_t tag, uint32_t seed, uint64_t max_ns);

/* ---- raw frames: build, inject and capture EMP frames on the wire ---- */

/* A raw sim port (any MAC, in the config or not); closed by h_free. While
 * the cluster runs, frames delivered to it are kept (up to 4096) for h_raw_recv. */
void *h_raw_open(struct harness *h, const uint8_t mac[6]);
/* Put len bytes on the wire from port (the frame names its own dst/src MACs). */
void h_raw_send(struct harness *h, void *port, const void *frame, size_t len);
/* Frames delivered to port by now, oldest first (all are taken): up to max
 * are copied into out; returns how many there were. */
struct h_raw_frame { uint32_t len; uint8_t b[9014]; };
int h_raw_recv(struct harness *h, void *port, struct h_raw_frame *out, int max);

struct h_frame {
	uint8_t dst[6], src[6];
	uint16_t ethertype;
	uint8_t version, type;
	uint16_t flags, dst_ep, src_ep, session, credits;
	uint32_t dst_inc, src_inc, msg_id;
	uint32_t frame, msg_len, tag;       /* DATA */
	uint16_t frag, plen;
	uint32_t prev;                      /* DATA: same-tag message it must not overtake */
	uint32_t cum, nframes;              /* ACK */
	uint64_t sack;
	uint32_t mtu;                       /* HELLO, HELLO_ACK */
	uint32_t nonce;                     /* HELLO: the session's nonce; HELLO_ACK: its echo */
	uint32_t named;                     /* STALE: the incarnation refused */
	uint32_t piggy_msg, piggy_nframes;  /* DATA with EMP_F_PIGGY: the ack it carries */
	uint16_t piggy_session;
	const void *payload;                /* DATA: plen bytes (NULL: zeros) */
	int csum;                           /* compute the CRC32C and set EMP_F_CSUM */
};
/* Encode f into buf (room for EMP_FRAME_MAX); returns the frame length. */
size_t h_frame_build(const struct h_frame *f, uint8_t *buf);
/* Decode a frame (payload points into b); 0, or -1 if too short for its type. */
int h_frame_parse(const uint8_t *b, uint32_t len, struct h_frame *f);
/* f as endpoint `from` would address `to` right now: MACs, EtherType,
 * version, endpoints, incarnations (as the engines hold them) and session
 * (DATA/HELLO: from's send session toward to; ACK: to's send session). */
void h_frame_as(struct harness *h, int from, int to, uint8_t type, struct h_frame *f);
uint32_t h_incarnation(struct harness *h, int i);

/* ---- traffic: many messages, every one checked ---- */
struct h_msg {
	int from, to;
	uint32_t tag;
	uint32_t len;
	uint32_t seed;                   /* content; 0 = derived from the index */
	int recv_any_host, recv_any_tag; /* post the receive with wildcards */
	/* filled by h_traffic */
	emp_req_t *sr, *rr;
	struct emp_status sst, rst;
	uint8_t *sbuf, *rbuf;
};
/* Post every receive (message order), then every send (message order); run
 * until all complete (max_ns virtual); then check that every send returned
 * its length and every receive got exactly its message (length, source, tag,
 * bytes). Also posts one wildcard "sentinel" receive per receiving host after
 * the others and checks that it stays unmatched (no message delivered twice).
 * Fails the test on any mismatch. */
void h_traffic(struct harness *h, struct h_msg *m, int n, uint64_t max_ns);

#endif
