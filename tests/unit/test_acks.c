/* test_acks.c: where completion acks go when the receiving thread is an event loop (emp_defer): kept for its replies, alone at the round's bound. */
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw.h"

#define SEC 1000000000ull
#define US  1000ull
#define MS  1000000ull

static int req_done(void *arg)
{
	return __atomic_load_n(&((emp_req_t *)arg)->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

/* h1 answers h0's ping as an event loop: its replies leave at its next wait,
 * after other work. Its ack of the ping waits for the pong (no frame of its
 * own), also while a message to h2 leaves in between; a ping left
 * without an answer gets its ack alone once the round's bound passed. Not
 * batching (defer off, nobody spinning), the ack leaves at once. */
static void round_ack(int auth)
{
	struct harness h;
	struct emp_fw_config cfg;
	emp__fw_config_defaults(&cfg);
	if (auth) {           /* kept acks keep their slot's tag key */
		cfg.auth = 1;
		memcpy(cfg.auth_key, "cluster-secret!", 16);
	}
	h_init(&h, 3, NULL, &cfg);
	h_xfer(&h, 0, 1, 100, 1, 1, 60 * SEC);                  /* sessions up both ways */
	h_xfer(&h, 1, 0, 100, 1, 2, 60 * SEC);
	h_xfer(&h, 1, 2, 100, 1, 3, 60 * SEC);
	for (int loop = 1; loop >= 0; loop--) {
		emp_defer(h.ep[1], loop);      /* this thread drives both: both batch */
		uint8_t ping[4] = { 1, 2, 3, 4 }, pong[4] = { 5, 6, 7, 8 }, other[4] = { 9, 9, 9, 9 };
		uint8_t r0[4], r1[4], ro[4];
		struct iovec vp = { ping, 4 }, vq = { pong, 4 }, vo = { other, 4 };
		struct iovec v0 = { r0, 4 }, v1 = { r1, 4 }, vro = { ro, 4 };
		emp_req_t *s0, *s1, *so, *q0, *q1, *qo;
		struct emp_status st;
		CHECK_EQ(emp_post_recv(h.ep[0], h_addr(1), 7, &v0, 1, &q0), 0);
		CHECK_EQ(emp_post_recv(h.ep[2], h_addr(1), 8, &vro, 1, &qo), 0);
		CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 7, &v1, 1, &q1), 0);
		h_run(&h, NULL, NULL, 1 * MS);
		struct emp_counters a0 = h_ctr(&h, 0), a1 = h_ctr(&h, 1);
		CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 7, &vp, 1, &s0), 0);
		CHECK(h_run(&h, req_done, q1, 10 * MS));
		h_run(&h, NULL, NULL, 100 * US);                 /* the loop works a while */
		struct emp_counters m0 = h_ctr(&h, 0);
		CHECK_EQ(m0.rx_acks - a0.rx_acks, loop ? 0u : 1u);   /* kept, or gone at once */
		/* a message to h2 leaves; the ack stays */
		CHECK_EQ(emp_post_send(h.ep[1], h_addr(2), 8, &vo, 1, &so), 0);
		CHECK(h_run(&h, req_done, qo, 10 * MS));
		CHECK(!memcmp(ro, other, 4));
		CHECK_EQ(h_ctr(&h, 0).rx_acks - a0.rx_acks, loop ? 0u : 1u);
		/* the reply carries it */
		CHECK_EQ(emp_post_send(h.ep[1], h_addr(0), 7, &vq, 1, &s1), 0);
		CHECK(h_wait(&h, 0, q0, &st, 10 * MS));
		CHECK(!memcmp(r0, pong, 4));
		CHECK(h_wait(&h, 0, s0, &st, 10 * MS));
		CHECK_EQ(st.result, 4);
		CHECK(h_wait(&h, 1, s1, &st, 10 * MS));
		CHECK(h_wait(&h, 1, so, &st, 10 * MS));
		CHECK(!memcmp(r1, ping, 4));
		struct emp_counters b0 = h_ctr(&h, 0), b1 = h_ctr(&h, 1);
		CHECK_EQ(b1.piggy_acks - a1.piggy_acks, loop ? 1u : 0u);
		CHECK_EQ(b0.rx_acks - a0.rx_acks, 1);            /* the ping's ack arrived either way */
		CHECK_EQ(b0.drops_total, a0.drops_total);
		CHECK_EQ(b1.drops_total, a1.drops_total);
		CHECK_EQ(b1.retransmits, a1.retransmits);
		CHECK_EQ(b0.retransmits, a0.retransmits);
		/* no answer: the ack goes alone once the bound passed */
		CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 7, &v1, 1, &q1), 0);
		CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 7, &vp, 1, &s0), 0);
		CHECK(h_run(&h, req_done, q1, 10 * MS));
		CHECK(h_wait(&h, 0, s0, &st, EMP__ROUND_ACK_NS + 5 * MS));
		CHECK_EQ(h_ctr(&h, 0).rx_acks - b0.rx_acks, 1);
		CHECK_EQ(h_ctr(&h, 0).retransmits, b0.retransmits);
	}
	emp_defer(h.ep[1], 0);
	h_free(&h);
}

/* Two requests (from h0 and h2) in one round; the reply to one of them
 * carries its ack, the other's ack stays (moved in the batch) and goes
 * alone at the bound: it must still be valid (with auth, tagged with its own
 * session's key), so the sender gets it and does not retransmit. Both
 * orders, so that the kept ack moves in one of them. */
static void two_acks(int auth)
{
	struct emp_fw_config cfg;
	emp__fw_config_defaults(&cfg);
	if (auth) {
		cfg.auth = 1;
		memcpy(cfg.auth_key, "cluster-secret!", 16);
	}
	for (int answered = 0; answered <= 2; answered += 2) {
		struct harness h;
		h_init(&h, 3, NULL, &cfg);
		h_xfer(&h, 0, 1, 100, 1, 1, 60 * SEC);
		h_xfer(&h, 1, 0, 100, 1, 2, 60 * SEC);
		h_xfer(&h, 2, 1, 100, 1, 3, 60 * SEC);
		h_xfer(&h, 1, 2, 100, 1, 4, 60 * SEC);
		emp_defer(h.ep[1], 1);
		int other = 2 - answered;
		uint8_t p0[4] = { 1 }, p2[4] = { 2 }, pong[4] = { 3 }, r0[4], r2[4], rq[4];
		struct iovec v0 = { p0, 4 }, v2 = { p2, 4 }, vq = { pong, 4 }, w0 = { r0, 4 }, w2 = { r2, 4 }, wq = { rq, 4 };
		emp_req_t *q0, *q2, *qq, *s0, *s2, *sq;
		struct emp_status st;
		CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 7, &w0, 1, &q0), 0);
		CHECK_EQ(emp_post_recv(h.ep[1], h_addr(2), 7, &w2, 1, &q2), 0);
		CHECK_EQ(emp_post_recv(h.ep[answered], h_addr(1), 7, &wq, 1, &qq), 0);
		h_run(&h, NULL, NULL, 1 * MS);
		struct emp_counters a = h_ctr(&h, other);
		CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 7, &v0, 1, &s0), 0);
		CHECK_EQ(emp_post_send(h.ep[2], h_addr(1), 7, &v2, 1, &s2), 0);
		CHECK(h_run(&h, req_done, q0, 10 * MS));
		CHECK(h_run(&h, req_done, q2, 10 * MS));
		CHECK_EQ(emp_post_send(h.ep[1], h_addr(answered), 7, &vq, 1, &sq), 0);
		CHECK(h_wait(&h, answered, qq, &st, 10 * MS));
		CHECK(h_wait(&h, other, other ? s2 : s0, &st, EMP__ROUND_ACK_NS + 5 * MS));
		CHECK_EQ(st.result, 4);
		struct emp_counters b = h_ctr(&h, other);
		CHECK_EQ(b.rx_acks - a.rx_acks, 1);
		CHECK_EQ(b.retransmits, a.retransmits);
		CHECK_EQ(b.drops_total, a.drops_total);
		CHECK(h_wait(&h, answered, answered ? s2 : s0, &st, 10 * MS));
		CHECK(h_wait(&h, 1, sq, &st, 10 * MS));
		emp_defer(h.ep[1], 0);
		h_free(&h);
	}
}

static void t_round_ack(void) { round_ack(0); two_acks(0); }
static void t_round_ack_auth(void) { round_ack(1); two_acks(1); }

static const struct emp_test tests[] = {
	{ "engine_round_ack", t_round_ack, 30 },
	{ "engine_round_ack_auth", t_round_ack_auth, 30 },
};
const struct emp_test_suite emp_suite_acks = { "acks", tests, sizeof(tests) / sizeof(tests[0]) };
