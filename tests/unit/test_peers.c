/* test_peers.c: the engine's peer table: idle peers reclaimed for new ones, holds, HELLOs that may not allocate, STALE to strangers, session nonces. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../firmware/fw_int.h"

#define MS 1000000ull
#define S (1000 * MS)

static uint32_t peers_of(struct harness *h, int i)
{
	uint32_t p = 0;
	emp_get_usage(h->ep[i], NULL, &p, NULL);
	return p;
}

/* A table of 3 peers and 7 hosts talking to host 0 in turn, twice round:
 * every message arrives, idle peers give their slots to new ones, and a
 * peer met again after its slot went to another starts a new session. */
static void t_reclaim(void)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	fwc.max_peers = 3;
	struct harness h;
	h_init(&h, 8, NULL, &fwc);
	for (int round = 0; round < 2; round++)
		for (int i = 1; i < 8; i++) {
			h_xfer(&h, i, 0, 3000, 7, (uint32_t)(round * 100 + i), 50 * MS);
			h_xfer(&h, 0, i, 200, 8, (uint32_t)(round * 100 + i + 50), 50 * MS);
			CHECK(peers_of(&h, 0) <= 3);
			h_run(&h, NULL, NULL, EMP_PEER_IDLE_NS + 100 * MS);   /* idle */
		}
	struct emp_counters c = h_ctr(&h, 0);
	CHECK(c.peers_reclaimed >= 11);             /* 14 sessions, 3 slots */
	CHECK_EQ(c.drops[EMP_DROP_NO_PEER_SLOT], 0);
	CHECK_EQ(c.send_errors + c.recv_errors, 0);
	h_free(&h);
}

/* A held peer keeps its slot: with the table full of held peers a new one
 * is refused; released and idle, its slot goes to the newcomer. */
static void t_hold(void)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	fwc.max_peers = 2;
	struct harness h;
	h_init(&h, 4, NULL, &fwc);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(1)), 0);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(2)), 0);
	h_xfer(&h, 1, 0, 100, 3, 1, 50 * MS);
	h_run(&h, NULL, NULL, EMP_PEER_IDLE_NS * 2);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(3)), -ENOBUFS);
	emp_peer_release(h.ep[0], h_addr(1));
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(3)), 0);   /* 1 idle long enough */
	h_xfer(&h, 3, 0, 100, 3, 2, 50 * MS);
	h_xfer(&h, 2, 0, 100, 3, 3, 50 * MS);
	CHECK_EQ(h_ctr(&h, 0).peers_reclaimed, 1);
	h_free(&h);
}

/* A peer's life that says BYE (emp_goodbye: at its endpoint's close or its
 * process's exit) gives up its slot at once instead of after
 * EMP_PEER_IDLE_NS of quiet: with the table full of released peers a
 * newcomer is refused while they are only quiet and takes the slot of the
 * one that said BYE; one that said BYE while still held gives its slot up at
 * the release. (A BYE in another session is dropped: test_faults.) */
static void t_bye(void)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	fwc.max_peers = 2;
	struct harness h;
	h_init(&h, 5, NULL, &fwc);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(1)), 0);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(2)), 0);
	for (int i = 1; i <= 2; i++) {                     /* sessions both ways */
		h_xfer(&h, i, 0, 3000, 3, (uint32_t)i, 50 * MS);
		h_xfer(&h, 0, i, 3000, 3, (uint32_t)i + 10, 50 * MS);
	}
	emp_peer_release(h.ep[0], h_addr(1));
	h_run(&h, NULL, NULL, 10 * MS);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(3)), -ENOBUFS);   /* 1 only quiet, 2 held */
	emp_goodbye(h.ep[1]);
	emp_goodbye(h.ep[1]);                                    /* once per life */
	emp_goodbye(h.ep[2]);
	CHECK_EQ(h_ctr(&h, 1).byes_sent, 2);                     /* one per session, both with h0 */
	h_run(&h, NULL, NULL, 10 * MS);
	CHECK_EQ(h_ctr(&h, 0).peers_departed, 2);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(3)), 0);          /* 1's slot, 20 ms after its last frame */
	CHECK_EQ(h_ctr(&h, 0).peers_reclaimed, 1);
	h_xfer(&h, 3, 0, 3000, 3, 21, 50 * MS);
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(4)), -ENOBUFS);   /* 2 said BYE but is held */
	emp_peer_release(h.ep[0], h_addr(2));
	CHECK_EQ(emp_peer_hold(h.ep[0], h_addr(4)), 0);
	CHECK_EQ(h_ctr(&h, 0).peers_reclaimed, 2);
	h_xfer(&h, 4, 0, 3000, 3, 22, 50 * MS);
	CHECK_EQ(h_ctr(&h, 0).send_errors + h_ctr(&h, 0).recv_errors, 0);
	h_free(&h);
}

/* A receiver that closes after its final ack was lost (nobody can answer
 * for it afterwards: its engine is gone with it) says in its BYE what
 * completed. The sender's message that arrived whole completes with its
 * length, the one that found no receive fails with ECONNRESET, both at once
 * instead of after the retries (-ETIMEDOUT, seconds). The receiver never
 * sent to the sender: only the DONE BYE goes. */
static void bye_done(int auth)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	if (auth) {
		fwc.auth = 1;
		memcpy(fwc.auth_key, "bye-done-key-016", 16);
	}
	struct harness h;
	h_init(&h, 2, NULL, &fwc);
	h_xfer(&h, 0, 1, 3000, 3, 1, 50 * MS);            /* h0's session toward h1 */
	static uint8_t a[3000], rb[3000], b[100];
	h_fill(a, sizeof(a), 7);
	struct iovec rv = { rb, sizeof(rb) }, av = { a, sizeof(a) }, bv = { b, sizeof(b) };
	emp_req_t *rr, *sa, *sb;
	CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 4, &rv, 1, &rr), 0);
	CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 4, &av, 1, &sa), 0);
	CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 5, &bv, 1, &sb), 0);   /* no receive takes tag 5 */
	emp_progress(h.ep[0]);                               /* h0's frames go on the wire */
	struct emp_sim_faults lose = { .seed = 1, .loss_ppm = 1000000 };
	emp_sim_wire_set_faults(h.wire, &lose);              /* ... and every answer is lost */
	CHECK(h_run_only(&h, 1, h_req_done, rr, 10 * MS));
	struct emp_status st;
	CHECK_EQ(emp_test(h.ep[1], rr, &st), 1);
	CHECK_EQ(st.result, (int64_t)sizeof(a));
	CHECK(h_check(rb, sizeof(rb), 7));
	CHECK(h_ctr(&h, 1).tx_acks >= 1);                    /* its ack went, and was lost */
	CHECK(!h_req_done(sa) && !h_req_done(sb));
	struct emp_sim_faults none = { .seed = 1 };
	emp_sim_wire_set_faults(h.wire, &none);
	struct emp_counters c0 = h_ctr(&h, 0);
	h_close(&h, 1);
	uint64_t t0 = h.now;
	CHECK(h_wait(&h, 0, sa, &st, 50 * MS));
	CHECK_EQ(st.result, (int64_t)sizeof(a));
	CHECK(h_wait(&h, 0, sb, &st, 50 * MS));
	CHECK_EQ(st.result, -ECONNRESET);
	struct emp_counters c = h_ctr(&h, 0);
	CHECK_EQ(c.bye_completed - c0.bye_completed, 1);
	CHECK_EQ(c.peers_departed - c0.peers_departed, 1);
	CHECK_EQ(c.timeouts - c0.timeouts <= 2, 1);          /* not the retries' way */
	CHECK_MSG(h.now - t0 < 5 * MS, "took %llu ns", (unsigned long long)(h.now - t0));
	h_free(&h);
}

static void t_bye_done(void) { bye_done(0); }
static void t_bye_done_auth(void) { bye_done(1); }

/* Host 2 has no endpoint; a raw port speaks with its MAC from endpoint 5. */
static void *stranger(struct harness *h)
{
	h_close(h, 2);
	return h_raw_open(h, h->mac[2]);
}

static void raw_frame(struct harness *h, uint8_t type, struct h_frame *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->dst, h->mac[0], 6);
	memcpy(f->src, h->mac[2], 6);
	f->ethertype = EMP_ETHERTYPE_DEFAULT;
	f->version = EMP_PROTO_VERSION;
	f->type = type;
	f->dst_ep = 1;
	f->src_ep = 5;
	f->src_inc = 0x77777777;
	f->dst_inc = h_incarnation(h, 0);
	f->session = 0x1234;
	f->mtu = 1500;
	f->nonce = 9;
}

/* A frame naming an incarnation of ours that is gone is answered with
 * STALE, and allocates nothing for its sender. */
static void t_stale_allocates_nothing(void)
{
	struct harness h;
	h_init(&h, 3, NULL, NULL);
	void *raw = stranger(&h);
	struct h_frame f, g;
	uint8_t b[EMP_FRAME_MAX];
	raw_frame(&h, EMP_T_DATA, &f);
	f.dst_inc ^= 1;
	f.msg_id = 1; f.tag = 3; f.msg_len = 10; f.frag = 1000; f.plen = 10; f.flags = EMP_F_LAST;
	for (int i = 0; i < 50; i++) {
		f.src_ep = (uint16_t)(100 + i);      /* 50 different strangers */
		h_raw_send(&h, raw, b, h_frame_build(&f, b));
	}
	h_run(&h, NULL, NULL, 5 * MS);
	struct h_raw_frame *in = malloc(64 * sizeof *in);
	CHECK(in);
	int n = h_raw_recv(&h, raw, in, 64);
	CHECK_EQ(n, 50);
	CHECK_EQ(h_frame_parse(in[0].b, in[0].len, &g), 0);
	CHECK_EQ(g.type, EMP_T_STALE);
	CHECK_EQ(g.dst_ep, 100);
	CHECK_EQ(h_ctr(&h, 0).stale_sent, 50);
	CHECK_EQ(peers_of(&h, 0), 0);
	free(in);
	h_free(&h);
}

/* With hello_needs_hold a HELLO from an endpoint the host does not hold is
 * dropped without a trace; held, the same HELLO opens a session. */
static void t_hello_needs_hold(void)
{
	struct harness h;
	h_init(&h, 3, NULL, NULL);
	void *raw = stranger(&h);
	emp_peer_policy(h.ep[0], 1);
	struct h_frame f, g;
	uint8_t b[EMP_FRAME_MAX];
	raw_frame(&h, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	for (int i = 0; i < 20; i++) {
		f.src_ep = (uint16_t)(100 + i);
		h_raw_send(&h, raw, b, h_frame_build(&f, b));
	}
	h_run(&h, NULL, NULL, 5 * MS);
	struct h_raw_frame *in = malloc(64 * sizeof *in);
	CHECK(in);
	CHECK_EQ(h_raw_recv(&h, raw, in, 64), 0);
	CHECK_EQ(peers_of(&h, 0), 0);
	CHECK_EQ(h_ctr(&h, 0).drops[EMP_DROP_NO_SESSION], 20);
	CHECK_EQ(emp_peer_hold(h.ep[0], (emp_addr_t){ 2, 100 }), 0);
	f.src_ep = 100;
	h_raw_send(&h, raw, b, h_frame_build(&f, b));
	h_run(&h, NULL, NULL, 5 * MS);
	CHECK_EQ(h_raw_recv(&h, raw, in, 64), 1);
	CHECK_EQ(h_frame_parse(in[0].b, in[0].len, &g), 0);
	CHECK_EQ(g.type, EMP_T_HELLO_ACK);
	CHECK_EQ(g.session, 0x1234);
	CHECK_EQ(g.nonce, 9);
	CHECK_EQ(peers_of(&h, 0), 1);
	free(in);
	h_free(&h);
}

/* A HELLO dropped because its sender was not held yet is answered as soon
 * as the host holds that sender (no wait for the sender's retry); one that
 * is older than the engine keeps them, or whose sender is never held, is
 * not, and neither allocates a peer. */
static void t_hello_before_hold(void)
{
	struct harness h;
	h_init(&h, 3, NULL, NULL);
	void *raw = stranger(&h);
	emp_peer_policy(h.ep[0], 1);
	struct h_frame f, g;
	uint8_t b[EMP_FRAME_MAX];
	struct h_raw_frame *in = malloc(64 * sizeof *in);
	CHECK(in);
	raw_frame(&h, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	f.src_ep = 100;
	h_raw_send(&h, raw, b, h_frame_build(&f, b));
	f.src_ep = 101;
	f.nonce = 10;
	h_raw_send(&h, raw, b, h_frame_build(&f, b));
	h_run(&h, NULL, NULL, 1 * MS);
	CHECK_EQ(h_raw_recv(&h, raw, in, 64), 0);
	CHECK_EQ(h_ctr(&h, 0).drops[EMP_DROP_NO_SESSION], 2);
	CHECK_EQ(peers_of(&h, 0), 0);
	CHECK_EQ(emp_peer_hold(h.ep[0], (emp_addr_t){ 2, 100 }), 0);
	h_run(&h, NULL, NULL, 1 * MS);
	CHECK_EQ(h_raw_recv(&h, raw, in, 64), 1);          /* answered at the hold */
	CHECK_EQ(h_frame_parse(in[0].b, in[0].len, &g), 0);
	CHECK_EQ(g.type, EMP_T_HELLO_ACK);
	CHECK_EQ(g.dst_ep, 100);
	CHECK_EQ(g.session, 0x1234);
	CHECK_EQ(g.nonce, 9);
	CHECK_EQ(peers_of(&h, 0), 1);
	h_run(&h, NULL, NULL, 200 * MS);                    /* 101's HELLO is old now */
	CHECK_EQ(emp_peer_hold(h.ep[0], (emp_addr_t){ 2, 101 }), 0);
	h_run(&h, NULL, NULL, 1 * MS);
	CHECK_EQ(h_raw_recv(&h, raw, in, 64), 0);
	free(in);
	h_free(&h);
}

/* A peer that forgot us opens its session again with the same number: the
 * nonce tells the sessions apart, so its message 1 is a new message, not
 * a duplicate of the old session's message 1. */
static void t_session_nonce(void)
{
	struct harness h;
	h_init(&h, 3, NULL, NULL);
	void *raw = stranger(&h);
	struct h_frame f;
	uint8_t b[EMP_FRAME_MAX], rb[64];
	struct iovec v = { rb, sizeof rb };
	emp_req_t *r;
	struct emp_status st;
	for (int life = 0; life < 2; life++) {
		raw_frame(&h, EMP_T_HELLO, &f);
		f.dst_inc = 0;
		f.nonce = 100 + (uint32_t)life;      /* same session number both times */
		h_raw_send(&h, raw, b, h_frame_build(&f, b));
		CHECK_EQ(emp_post_recv(h.ep[0], (emp_addr_t){ 2, 5 }, 3, &v, 1, &r), 0);
		raw_frame(&h, EMP_T_DATA, &f);
		uint8_t payload[10];
		memset(payload, 'a' + life, sizeof payload);
		f.msg_id = 1; f.tag = 3; f.msg_len = 10; f.frag = 1000; f.plen = 10; f.flags = EMP_F_LAST;
		f.payload = payload;
		h_raw_send(&h, raw, b, h_frame_build(&f, b));
		CHECK(h_wait(&h, 0, r, &st, 5 * MS));
		CHECK_EQ(st.result, 10);
		CHECK_EQ(rb[0], 'a' + life);
	}
	h_free(&h);
}

static const struct emp_test tests[] = {
	{ "peers_reclaim", t_reclaim, 60 },
	{ "peers_hold", t_hold, 30 },
	{ "peers_bye", t_bye, 30 },
	{ "peers_bye_done", t_bye_done, 30 },
	{ "peers_bye_done_auth", t_bye_done_auth, 30 },
	{ "peers_stale_allocates_nothing", t_stale_allocates_nothing, 30 },
	{ "peers_hello_needs_hold", t_hello_needs_hold, 30 },
	{ "peers_hello_before_hold", t_hello_before_hold, 30 },
	{ "peers_session_nonce", t_session_nonce, 30 },
};
const struct emp_test_suite emp_suite_peers = { "peers", tests, sizeof(tests) / sizeof(tests[0]) };
