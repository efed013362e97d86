/* test_acks.c: where completion acks go when the receiving thread is an event loop (emp_defer), has just slept or ended its wait as it armed: kept for its replies, alone at the round's bound or before its next sleep. */
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw.h"

#define SEC 1000000000ull
#define US  1000ull
#define MS  1000000ull

/* h1 answers h0's ping as an event loop: its replies leave at its next wait,
 * after other work. Its ack of the ping waits for the pong (no frame of its
 * own), also while a message to h2 leaves in between; a ping left
 * without an answer gets its ack alone once the round's bound passed. Not
 * batching (defer off, nobody spinning), the ack leaves at once. A ping of
 * len bytes: 3 frames (4000) ride as one of 1 does (a memcached set of a
 * few KB drew an ack frame of its own per request). */
static void round_ack(int auth, uint32_t len)
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
		static uint8_t ping[4000], r1[4000];
		for (uint32_t i = 0; i < len; i++)
			ping[i] = (uint8_t)(i * 7 + 1);
		uint8_t pong[4] = { 5, 6, 7, 8 }, other[4] = { 9, 9, 9, 9 };
		uint8_t r0[4], ro[4];
		struct iovec vp = { ping, len }, vq = { pong, 4 }, vo = { other, 4 };
		struct iovec v0 = { r0, 4 }, v1 = { r1, len }, vro = { ro, 4 };
		emp_req_t *s0, *s1, *so, *q0, *q1, *qo;
		struct emp_status st;
		CHECK_EQ(emp_post_recv(h.ep[0], h_addr(1), 7, &v0, 1, &q0), 0);
		CHECK_EQ(emp_post_recv(h.ep[2], h_addr(1), 8, &vro, 1, &qo), 0);
		CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 7, &v1, 1, &q1), 0);
		h_run(&h, NULL, NULL, 1 * MS);
		struct emp_counters a0 = h_ctr(&h, 0), a1 = h_ctr(&h, 1);
		CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 7, &vp, 1, &s0), 0);
		CHECK(h_run(&h, h_req_done, q1, 10 * MS));
		h_run(&h, NULL, NULL, 100 * US);                 /* the loop works a while */
		struct emp_counters m0 = h_ctr(&h, 0);
		CHECK_EQ(m0.rx_acks - a0.rx_acks, loop ? 0u : 1u);   /* kept, or gone at once */
		/* a message to h2 leaves; the ack stays */
		CHECK_EQ(emp_post_send(h.ep[1], h_addr(2), 8, &vo, 1, &so), 0);
		CHECK(h_run(&h, h_req_done, qo, 10 * MS));
		CHECK(!memcmp(ro, other, 4));
		CHECK_EQ(h_ctr(&h, 0).rx_acks - a0.rx_acks, loop ? 0u : 1u);
		/* the reply carries it */
		CHECK_EQ(emp_post_send(h.ep[1], h_addr(0), 7, &vq, 1, &s1), 0);
		CHECK(h_wait(&h, 0, q0, &st, 10 * MS));
		CHECK(!memcmp(r0, pong, 4));
		CHECK(h_wait(&h, 0, s0, &st, 10 * MS));
		CHECK_EQ(st.result, (long long)len);
		CHECK(h_wait(&h, 1, s1, &st, 10 * MS));
		CHECK(h_wait(&h, 1, so, &st, 10 * MS));
		CHECK(!memcmp(r1, ping, len));
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
		CHECK(h_run(&h, h_req_done, q1, 10 * MS));
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
		CHECK(h_run(&h, h_req_done, q0, 10 * MS));
		CHECK(h_run(&h, h_req_done, q2, 10 * MS));
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

/* A thread that slept until a request came may answer it: the request's ack
 * waits for the answer and rides in it (one frame, not two), as after a post
 * or a spin. An ack held back that way does not last into the thread's next
 * sleep: its look before the sleep sends it (held through the sleep, it went
 * only when the peer had resent its message). */
struct woke {
	struct harness *h;
	emp_req_t *r;                    /* done when it completes (NULL: never) */
	struct iovec *ping;              /* h0 sends it while h1 sleeps, into *sent */
	emp_req_t **sent;
	int sleeps;
	uint64_t frames0, sent_at_sleep[2];   /* h1's frames on the wire at sleeps 1, 2 (tx_acks counts queued ones) */
};
static int woke_done(void *arg)
{
	struct woke *w = arg;
	return w->r && h_req_done(w->r);
}
/* h0 works for 100 us while h1 is frozen (h_run_only would crawl: the
 * frames waiting for h1 are due events all along) */
static void peer_runs(struct harness *h)
{
	h->now += 100 * US;
	for (int i = 0; i < 32; i++)
		emp_progress(h->ep[0]);
}

static int woke_sleep(void *arg, int64_t ns)
{
	struct woke *w = arg;
	(void)ns;
	if (w->sleeps < 2)
		w->sent_at_sleep[w->sleeps] = h_ctr(w->h, 1).tx_frames - w->frames0;
	if (!w->sleeps++) {
		if (w->ping)
			CHECK_EQ(emp_post_send(w->h->ep[0], h_addr(1), 7, w->ping, 1, w->sent), 0);
	}
	peer_runs(w->h);
	return 0;
}

/* The ping-pong both tests below run: h0 pings h1 (tag 7) while h1 waits
 * in emp_wait_for, h1 answers. Set up with the sessions up, h1 not spinning
 * and both receives posted; pp_answer checks the answer is one frame with
 * the ping's ack riding in it, and that both sends complete; pp_end that
 * nothing was resent or dropped. */
struct pp {
	struct harness h;
	uint8_t ping[4], pong[4], r0[4], r1[4];
	struct iovec vp, vq, v0, v1;
	emp_req_t *s0, *s1, *q0, *q1;
	struct emp_counters a0, a1;
};

static void pp_begin(struct pp *t)
{
	h_init(&t->h, 2, NULL, NULL);
	h_xfer(&t->h, 0, 1, 100, 1, 1, 60 * SEC);
	h_xfer(&t->h, 1, 0, 100, 1, 2, 60 * SEC);
	t->h.ep[1]->spin_ns = 0;                   /* no spin: arm, look, sleep */
	memcpy(t->ping, (uint8_t[4]){ 1, 2, 3, 4 }, 4);
	memcpy(t->pong, (uint8_t[4]){ 5, 6, 7, 8 }, 4);
	t->vp = (struct iovec){ t->ping, 4 };
	t->vq = (struct iovec){ t->pong, 4 };
	t->v0 = (struct iovec){ t->r0, 4 };
	t->v1 = (struct iovec){ t->r1, 4 };
	CHECK_EQ(emp_post_recv(t->h.ep[0], h_addr(1), 7, &t->v0, 1, &t->q0), 0);
	CHECK_EQ(emp_post_recv(t->h.ep[1], h_addr(0), 7, &t->v1, 1, &t->q1), 0);
	h_run(&t->h, NULL, NULL, 1 * MS);
	t->a0 = h_ctr(&t->h, 0);
	t->a1 = h_ctr(&t->h, 1);
}

static void pp_answer(struct pp *t)
{
	struct emp_status st;
	CHECK(!memcmp(t->r1, t->ping, 4));
	CHECK_EQ(emp_post_send(t->h.ep[1], h_addr(0), 7, &t->vq, 1, &t->s1), 0);
	struct emp_counters b1 = h_ctr(&t->h, 1);
	CHECK_MSG(b1.tx_frames - t->a1.tx_frames == 1 && b1.piggy_acks - t->a1.piggy_acks == 1,
		  "h1 sent %llu frames (%llu acks riding in data) for the answer and the ack: 1 and 1 expected",
		  (unsigned long long)(b1.tx_frames - t->a1.tx_frames),
		  (unsigned long long)(b1.piggy_acks - t->a1.piggy_acks));
	CHECK(h_wait(&t->h, 0, t->q0, &st, 10 * MS));
	CHECK(!memcmp(t->r0, t->pong, 4));
	CHECK(h_wait(&t->h, 0, t->s0, &st, 10 * MS));
	CHECK_EQ(st.result, 4);
	CHECK(h_wait(&t->h, 1, t->s1, &st, 10 * MS));
}

static void pp_end(struct pp *t)
{
	struct emp_counters e0 = h_ctr(&t->h, 0), e1 = h_ctr(&t->h, 1);
	CHECK_EQ(e0.retransmits, t->a0.retransmits);
	CHECK_EQ(e1.retransmits, t->a1.retransmits);
	CHECK_EQ(e0.drops_total, t->a0.drops_total);
	CHECK_EQ(e1.drops_total, t->a1.drops_total);
	h_free(&t->h);
}

static void t_woken_ack(void)
{
	static struct pp t;
	struct emp_status st;
	pp_begin(&t);
	/* 1. the request comes while h1 sleeps; h1 answers it at once */
	struct woke w = { &t.h, t.q1, &t.vp, &t.s0, 0, t.a1.tx_frames, { 0 } };
	struct emp_waitfor wf = { .done = woke_done, .sleep = woke_sleep, .arg = &w, .timeout_ns = 10 * MS };
	CHECK_EQ(emp_wait_for(t.h.ep[1], &wf), 1);
	CHECK_MSG(w.sleeps >= 1, "the waiter slept %d times", w.sleeps);
	pp_answer(&t);
	/* 2. h1 waits for another request (tag 8, never sent); the one that
	 * wakes it is taken by the look after the sleep, which may hold its ack;
	 * no answer comes, h1 sleeps again: the ack leaves before that sleep */
	emp_req_t *q8;
	uint8_t r8[4];
	struct iovec v8 = { r8, 4 };
	CHECK_EQ(emp_post_recv(t.h.ep[1], h_addr(0), 7, &t.v1, 1, &t.q1), 0);
	CHECK_EQ(emp_post_recv(t.h.ep[1], h_addr(0), 8, &v8, 1, &q8), 0);
	h_run(&t.h, NULL, NULL, 1 * MS);
	struct emp_counters c1 = h_ctr(&t.h, 1);
	struct woke w2 = { &t.h, q8, &t.vp, &t.s0, 0, c1.tx_frames, { 0 } };
	struct emp_waitfor wf2 = { .done = woke_done, .sleep = woke_sleep, .arg = &w2, .timeout_ns = 1 * MS };
	CHECK_EQ(emp_wait_for(t.h.ep[1], &wf2), 0);
	CHECK(h_req_done(t.q1));
	CHECK_MSG(w2.sleeps >= 2 && w2.sent_at_sleep[1] == 1,
		  "slept %d times; h1's frames (the ack) sent before its second sleep: %llu (1)", w2.sleeps,
		  (unsigned long long)w2.sent_at_sleep[1]);
	CHECK(h_wait(&t.h, 0, t.s0, &st, 10 * MS));
	pp_end(&t);
}

/* A request that reaches h1 as it arms (after its last look, before its
 * sleep) is taken by the look after arming, and the wait ends there: the
 * thread does not sleep, so the request's ack waits for the answer and rides
 * in it, as after a spin or a wake. (That look used to send the ack alone:
 * pgbench -c 10 -j 1 against PostgreSQL, 0.33 frames per request more.) */
struct armed {
	struct harness *h;
	emp_req_t *r, **sent;
	struct iovec *ping;
	int arms, sleeps;
};
static int armed_done(void *arg)
{
	struct armed *a = arg;
	return h_req_done(a->r);
}
static void armed_arm(void *arg)
{
	struct armed *a = arg;
	if (a->arms++)
		return;
	CHECK_EQ(emp_post_send(a->h->ep[0], h_addr(1), 7, a->ping, 1, a->sent), 0);
	peer_runs(a->h);                          /* the ping is on h1's device now */
}
static int armed_sleep(void *arg, int64_t ns)
{
	struct armed *a = arg;
	(void)ns;
	a->sleeps++;
	peer_runs(a->h);
	return 0;
}

static void t_armed_ack(void)
{
	static struct pp t;
	pp_begin(&t);
	struct armed a = { &t.h, t.q1, &t.s0, &t.vp, 0, 0 };
	struct emp_waitfor wf = { .done = armed_done, .arm = armed_arm, .sleep = armed_sleep, .arg = &a,
				  .timeout_ns = 10 * MS };
	CHECK_EQ(emp_wait_for(t.h.ep[1], &wf), 1);
	struct emp_counters w1 = h_ctr(&t.h, 1);
	CHECK_MSG(a.arms == 1 && a.sleeps == 0, "armed %d times, slept %d times (1, 0)", a.arms, a.sleeps);
	CHECK_MSG(w1.tx_frames == t.a1.tx_frames, "h1 sent %llu frames while it waited (the ack alone): 0 expected",
		  (unsigned long long)(w1.tx_frames - t.a1.tx_frames));
	pp_answer(&t);
	pp_end(&t);
}

/* h1, an event loop, takes two messages from h0 in one round, the first of
 * 3 frames. On two connections (tags) they are two requests: both acks
 * wait for the replies (none reaches h0 within 100 us). On one connection
 * they are a stream (nothing answered the first): the first one's ack
 * waits no longer, whether the second is of 3 frames (its ack goes too) or
 * bulk (20 frames: its ack never waits). Kept up to EMP__ROUND_ACK_NS, a
 * stream of 4 KiB writes slowed. */
static void stream_acks(void)
{
	static const struct { int same; uint32_t len2; unsigned acks; } cs[] = {
		{ 0, 4000, 0 }, { 1, 4000, 2 }, { 1, 20 * 1460, 2 },
	};
	for (unsigned c = 0; c < sizeof cs / sizeof cs[0]; c++) {
		struct harness h;
		h_init(&h, 2, NULL, NULL);
		h_xfer(&h, 0, 1, 100, 1, 1, 60 * SEC);
		h_xfer(&h, 1, 0, 100, 1, 2, 60 * SEC);
		emp_defer(h.ep[1], 1);
		static uint8_t m[2][20 * 1460], r[2][20 * 1460];
		const uint32_t len[2] = { 4000, cs[c].len2 };
		emp_req_t *q[2], *sd[2];
		struct emp_status st;
		for (int i = 0; i < 2; i++) {
			for (uint32_t j = 0; j < len[i]; j++)
				m[i][j] = (uint8_t)(j * 3 + i);
			struct iovec v = { r[i], len[i] };
			CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), cs[c].same ? 7u : 7u + i, &v, 1, &q[i]), 0);
		}
		h_run(&h, NULL, NULL, 1 * MS);
		struct emp_counters a0 = h_ctr(&h, 0);
		for (int i = 0; i < 2; i++) {
			struct iovec v = { m[i], len[i] };
			CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), cs[c].same ? 7u : 7u + i, &v, 1, &sd[i]), 0);
		}
		CHECK(h_run(&h, h_req_done, q[1], 10 * MS));
		CHECK(h_req_done(q[0]));
		h_run(&h, NULL, NULL, 100 * US);
		struct emp_counters b0 = h_ctr(&h, 0);
		/* acks that finished h0's sends (a bulk message's collections count too) */
		int fin = h_req_done(sd[0]) + h_req_done(sd[1]);
		CHECK_MSG(fin == (int)cs[c].acks, "case %u (%s, %u bytes): %d of h0's sends acked within 100 us (%u); %llu acks",
			  c, cs[c].same ? "one connection" : "two", cs[c].len2, fin, cs[c].acks,
			  (unsigned long long)(b0.rx_acks - a0.rx_acks));
		for (int i = 0; i < 2; i++) {
			CHECK(h_wait(&h, 0, sd[i], &st, EMP__ROUND_ACK_NS + 5 * MS));
			CHECK_EQ(st.result, (long long)len[i]);
			CHECK(!memcmp(r[i], m[i], len[i]));
		}
		CHECK_EQ(h_ctr(&h, 0).retransmits, a0.retransmits);
		emp_defer(h.ep[1], 0);
		h_free(&h);
	}
}

static void t_round_ack(void) { round_ack(0, 4); round_ack(0, 4000); two_acks(0); stream_acks(); }
static void t_round_ack_auth(void) { round_ack(1, 4); round_ack(1, 4000); two_acks(1); }

static const struct emp_test tests[] = {
	{ "engine_round_ack", t_round_ack, 30 },
	{ "engine_woken_ack", t_woken_ack, 30 },
	{ "engine_armed_ack", t_armed_ack, 30 },
	{ "engine_round_ack_auth", t_round_ack_auth, 30 },
};
const struct emp_test_suite emp_suite_acks = { "acks", tests, sizeof(tests) / sizeof(tests[0]) };
