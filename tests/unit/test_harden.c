/* test_harden.c: hostile frames to the engine: frames to other MACs, forged credits, partial messages that never end, reply floods. */
#include <errno.h>
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw_int.h"

#define SEC 1000000000ull
#define MS  1000000ull
#define FRAG 1452u                  /* payload bytes per frame at MTU 1500 */

/* ---- host 0 played by the test on a raw port (its MAC), host 1 a real endpoint ---- */

struct scr {
	struct harness *h;
	void *port;
	uint32_t inc;
	uint16_t session;
	int nin;
	struct h_raw_frame in[256];
	uint8_t out[EMP_FRAME_MAX];
};

static void scr_frame(struct scr *s, uint8_t type, struct h_frame *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->dst, s->h->mac[1], 6);
	memcpy(f->src, s->h->mac[0], 6);
	f->ethertype = EMP_ETHERTYPE_DEFAULT;
	f->version = EMP_PROTO_VERSION;
	f->type = type;
	f->dst_ep = 1;
	f->src_ep = 1;
	f->dst_inc = h_incarnation(s->h, 1);
	f->src_inc = s->inc;
	f->session = s->session;
	f->credits = 100;
	f->mtu = 1500;
}

static void scr_send(struct scr *s, const struct h_frame *f)
{
	h_raw_send(s->h, s->port, s->out, h_frame_build(f, s->out));
}

static int scr_run(struct scr *s, uint64_t ns)
{
	h_run(s->h, NULL, NULL, ns);
	s->nin = h_raw_recv(s->h, s->port, s->in, 256);
	return s->nin;
}

/* count frames of a type (and msg_id unless 0) among those collected */
static int scr_count(struct scr *s, uint8_t type, uint32_t msg_id)
{
	int n = 0;
	for (int i = 0; i < s->nin && i < 256; i++) {
		struct h_frame f;
		CHECK_EQ(h_frame_parse(s->in[i].b, s->in[i].len, &f), 0);
		n += f.type == type && (!msg_id || f.msg_id == msg_id);
	}
	return n;
}

static void scr_init(struct scr *s, struct harness *h)
{
	memset(s, 0, sizeof(*s));
	s->h = h;
	s->inc = 0x5c0ffee5;
	s->session = 0x4242;
	h_close(h, 0);
	s->port = h_raw_open(h, h->mac[0]);
	struct h_frame f;
	scr_frame(s, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	scr_send(s, &f);
	CHECK_EQ(scr_run(s, 1 * MS), 1);
	CHECK_EQ(scr_count(s, EMP_T_HELLO_ACK, 0), 1);
}

/* DATA frame `frame` of our message msg_id (tag, len, content seed) */
static void scr_data(struct scr *s, uint32_t msg_id, uint32_t tag, uint32_t len, uint32_t seed, uint32_t frame)
{
	static uint8_t msg[1 << 17];
	struct h_frame f;
	uint64_t off = (uint64_t)frame * FRAG;
	uint32_t plen = (uint32_t)(len - off < FRAG ? len - off : FRAG);
	CHECK(off + plen <= sizeof(msg));
	h_fill(msg, off + plen, seed);
	scr_frame(s, EMP_T_DATA, &f);
	f.msg_id = msg_id;
	f.tag = tag;
	f.msg_len = len;
	f.frag = FRAG;
	f.frame = frame;
	f.plen = (uint16_t)plen;
	f.payload = msg + off;
	uint32_t nf = len ? (uint32_t)(((uint64_t)len + FRAG - 1) / FRAG) : 1;
	f.flags = frame == nf - 1 ? EMP_F_LAST | EMP_F_ACKREQ : 0;
	scr_send(s, &f);
}

/* Frames whose destination MAC is not the endpoint's own (broadcast,
 * multicast, another host's: a promiscuous device passes them up) are
 * dropped and counted before anything else: no reply, no peer state. */
static void t_dst_mac(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	static const uint8_t dsts[3][6] = {
		{ 0xff, 0xff, 0xff, 0xff, 0xff, 0xff }, { 0x01, 0x00, 0x5e, 0x00, 0x00, 0x01 },
		{ 0x02, 0x00, 0x00, 0x00, 0x00, 0x77 },
	};
	struct emp_fw *fw = h.ep[1]->fw;
	struct emp_counters c0 = h_ctr(&h, 1);
	uint8_t buf[256];
	for (int i = 0; i < 3; i++) {
		struct h_frame f;
		h_frame_as(&h, 0, 1, EMP_T_HELLO, &f);
		f.dst_inc = 0;
		f.session = 0x77;
		memcpy(f.dst, dsts[i], 6);
		emp__fw_frame(fw, buf, (uint32_t)h_frame_build(&f, buf), h.now);
	}
	struct emp_counters c = h_ctr(&h, 1);
	CHECK_EQ(c.drops[EMP_DROP_DST_MAC] - c0.drops[EMP_DROP_DST_MAC], 3);
	CHECK_EQ(c.drops_total - c0.drops_total, 3);
	CHECK_EQ(c.tx_frames, c0.tx_frames);                /* no HELLO_ACK */
	uint32_t peers;
	emp_get_usage(h.ep[1], NULL, &peers, NULL);
	CHECK_EQ(peers, 0);
	/* the same HELLO to its own MAC is answered */
	struct h_frame f;
	h_frame_as(&h, 0, 1, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	f.session = 0x77;
	emp__fw_frame(fw, buf, (uint32_t)h_frame_build(&f, buf), h.now);
	CHECK_EQ(h_ctr(&h, 1).tx_frames, c0.tx_frames + 1);
	h_xfer(&h, 0, 1, 5000, 1, 1, 10 * SEC);
	h_free(&h);
}

/* A forged (or buggy) credit advertisement of 0xffff: the sender believes no
 * more than the messages it may have in flight toward that receiver, and the
 * transfer that follows is intact. */
static void t_forged_credits(void)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	fwc.flow_control = 1;
	struct harness h;
	h_init(&h, 2, NULL, &fwc);
	h_xfer(&h, 0, 1, 3000, 1, 1, 10 * SEC);          /* session up both ways */
	struct h_frame f;
	uint8_t buf[256];
	h_frame_as(&h, 1, 0, EMP_T_ACK, &f);              /* as h1 would ack h0's data */
	f.msg_id = 999;
	f.credits = 0xffff;
	emp__fw_frame(h.ep[0]->fw, buf, (uint32_t)h_frame_build(&f, buf), h.now);
	struct emp_peer_info pi[4];
	CHECK_EQ(emp__fw_peers(h.ep[0]->fw, pi, 4), 1);
	CHECK_MSG(pi[0].credits <= fwc.peer_msgs, "credits %u believed (peer_msgs %u)", pi[0].credits, fwc.peer_msgs);
	/* and over the wire: a DATA frame of h1 with the same claim */
	h_frame_as(&h, 1, 0, EMP_T_DATA, &f);
	f.msg_id = 2;
	f.tag = 77;
	f.msg_len = 10;
	f.frag = FRAG;
	f.plen = 10;
	f.flags = EMP_F_LAST;
	f.credits = 0xffff;
	emp__fw_frame(h.ep[0]->fw, buf, (uint32_t)h_frame_build(&f, buf), h.now);
	CHECK_EQ(emp__fw_peers(h.ep[0]->fw, pi, 4), 1);
	CHECK(pi[0].credits <= fwc.peer_msgs);
	struct h_msg m[40];
	memset(m, 0, sizeof(m));
	for (int i = 0; i < 40; i++)
		m[i] = (struct h_msg){ .from = 0, .to = 1, .tag = 5, .len = 2000 + 37 * (uint32_t)i };
	h_traffic(&h, m, 40, 20 * SEC);
	h_free(&h);
}

/* A spoofed message that never ends: a length of 4 GiB, a new frame every
 * now and then. Its receive is given up (counted), posted again in its place
 * and takes the next message, which arrives intact; later frames of the
 * dead message are dropped without an ack. A message of one-byte frames is
 * refused outright. */
/* two hosts whose receives give a message up after 100 ms without a frame */
static void idle_pair(struct harness *h, struct scr *s)
{
	struct emp_fw_config fwc;
	emp__fw_config_defaults(&fwc);
	fwc.recv_idle_ns = 100 * MS;
	h_init(h, 2, NULL, &fwc);
	scr_init(s, h);
}

static void t_partial_timeout(void)
{
	struct harness h;
	struct scr s;
	idle_pair(&h, &s);
	enum { CAP = 128 << 10 };
	static uint8_t rb[CAP + 1];
	memset(rb, 0xa5, sizeof(rb));
	struct iovec v = { rb, CAP };
	emp_req_t *r;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 1, &v, 1, &r), 0);
	/* one byte per frame: no sender does that (frames are at least 64 bytes) */
	struct h_frame f;
	scr_frame(&s, EMP_T_DATA, &f);
	f.msg_id = 1; f.tag = 1; f.msg_len = 1u << 30; f.frag = 1; f.plen = 1; f.frame = 5;
	scr_send(&s, &f);
	scr_run(&s, 1 * MS);
	CHECK_EQ(h_ctr(&h, 1).drops[EMP_DROP_BAD_LEN], 1);
	CHECK_EQ(emp_test(h.ep[1], r, &st), 0);
	/* 4 GiB in 1452-byte frames, one new frame every 60 ms: never idle for
	 * 100 ms, but far slower than a receive of 91 frames may take */
	uint64_t t0 = h.now;
	uint32_t frame = 0;
	while (h_ctr(&h, 1).recv_expired == 0 && h.now - t0 < 2 * SEC) {
		scr_data(&s, 1, 1, 0xfffffff0u, 9, frame++);
		scr_run(&s, 60 * MS);
		CHECK_EQ(emp_test(h.ep[1], r, &st), 0);
	}
	struct emp_counters c = h_ctr(&h, 1);
	CHECK_MSG(c.recv_expired == 1, "receive still pinned after %llu ms, %u frames",
		  (unsigned long long)((h.now - t0) / MS), frame);
	CHECK_MSG(h.now - t0 <= 200 * MS, "given up after %llu ms", (unsigned long long)((h.now - t0) / MS));
	CHECK(frame >= 2);                                   /* it was not merely idle */
	printf("  a never-ending message held its receive %llu ms (%u frames, one per 60 ms)\n",
	       (unsigned long long)((h.now - t0) / MS), frame);
	/* the dead message's frames: dropped, never acked as done */
	scr_data(&s, 1, 1, 0xfffffff0u, 9, frame++);
	scr_data(&s, 1, 1, 0xfffffff0u, 9, 0);
	scr_run(&s, 1 * MS);
	CHECK_EQ(h_ctr(&h, 1).drops[EMP_DROP_EXPIRED] - c.drops[EMP_DROP_EXPIRED], 2);
	CHECK_EQ(scr_count(&s, EMP_T_ACK, 1), 0);
	/* the next message takes the receive */
	for (uint32_t k = 0; k < 3; k++)
		scr_data(&s, 2, 1, 3000, 42, k);
	scr_run(&s, 1 * MS);
	CHECK_EQ(emp_test(h.ep[1], r, &st), 1);
	CHECK_EQ(st.result, 3000);
	CHECK_EQ(st.msg_len, 3000);
	CHECK(h_check(rb, 3000, 42));
	CHECK_EQ(h_ctr(&h, 1).recv_errors, 0);
	/* a sender that simply stops: given up after the idle time */
	CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 1, &v, 1, &r), 0);
	scr_data(&s, 3, 1, 5000, 43, 0);
	scr_run(&s, 99 * MS);
	CHECK_EQ(h_ctr(&h, 1).recv_expired, 1);
	scr_run(&s, 2 * MS);
	CHECK_EQ(h_ctr(&h, 1).recv_expired, 2);
	CHECK_EQ(emp_test(h.ep[1], r, &st), 0);
	for (uint32_t k = 0; k < 4; k++)
		scr_data(&s, 4, 1, 5000, 44, k);
	scr_run(&s, 1 * MS);
	CHECK_EQ(emp_test(h.ep[1], r, &st), 1);
	CHECK_EQ(st.result, 5000);
	CHECK(h_check(rb, 5000, 44));
	h_free(&h);
}

/* Forged frames that draw replies: old-incarnation DATA (STALE) and HELLOs
 * (HELLO_ACK), a thousand at once from one peer and from a thousand spoofed
 * endpoints. Replies stay within the limits and the rest is counted; a real
 * peer is answered once the burst is over. */
static void t_reply_rate(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	struct emp_fw *fw = h.ep[1]->fw;
	uint8_t buf[256];
	struct emp_counters c0 = h_ctr(&h, 1);
	for (int i = 0; i < 1000; i++) {
		struct h_frame f;
		h_frame_as(&h, 0, 1, EMP_T_DATA, &f);
		f.dst_inc = h_incarnation(&h, 1) ^ 0x1234;   /* a life of h1 that is gone */
		f.msg_id = 1; f.tag = 1; f.msg_len = 10; f.frag = FRAG; f.plen = 10; f.flags = EMP_F_LAST;
		emp__fw_frame(fw, buf, (uint32_t)h_frame_build(&f, buf), h.now);
	}
	struct emp_counters c = h_ctr(&h, 1);
	CHECK_MSG(c.stale_sent - c0.stale_sent == 1, "%llu STALEs to one peer at once",
		  (unsigned long long)(c.stale_sent - c0.stale_sent));
	CHECK_EQ(c.replies_limited - c0.replies_limited, 999);
	CHECK_EQ(c.drops[EMP_DROP_STALE] - c0.drops[EMP_DROP_STALE], 1000);
	for (int i = 0; i < 1000; i++) {
		struct h_frame f;
		h_frame_as(&h, 0, 1, EMP_T_HELLO, &f);
		f.dst_inc = 0;
		f.src_ep = (uint16_t)(100 + i);          /* a thousand spoofed endpoints of h0 */
		f.session = 9;
		emp__fw_frame(fw, buf, (uint32_t)h_frame_build(&f, buf), h.now + 1000 * MS);
	}
	struct emp_counters d = h_ctr(&h, 1);
	CHECK_MSG(d.tx_frames - c.tx_frames <= 64, "%llu HELLO_ACKs for one burst",
		  (unsigned long long)(d.tx_frames - c.tx_frames));
	CHECK(d.tx_frames - c.tx_frames > 0);
	CHECK_EQ(d.replies_limited - c.replies_limited, 1000 - (d.tx_frames - c.tx_frames));
	/* a real HELLO later is answered */
	h.now += 2 * SEC;
	h_xfer(&h, 0, 1, 5000, 1, 1, 10 * SEC);
	h_restart(&h, 1);                                 /* and a real restart is still noticed */
	char one = 1;
	struct iovec iv = { &one, 1 };
	emp_req_t *sr;
	struct emp_status st;
	CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 2, &iv, 1, &sr), 0);
	CHECK(h_wait(&h, 0, sr, &st, 5 * SEC));
	CHECK_EQ(st.result, -ECONNRESET);
	h_xfer(&h, 0, 1, 5000, 1, 2, 10 * SEC);
	h_free(&h);
}

/* A receive that lends its message's frames (firmware/lent.c) gives up a
 * message with frames lent: they go back with it, and the next message's
 * bytes are read, not the dead one's. */
static void t_lent_given_up(void)
{
	struct harness h;
	struct scr s;
	idle_pair(&h, &s);
	enum { LEN = 40000 };   /* long enough to be lent (EMP_LEND_MIN_BYTES) */
	static uint8_t rb[LEN + 1024], out[LEN];
	struct iovec v = { rb, sizeof(rb) };
	emp_req_t *r;
	struct emp_status st;
	CHECK_EQ(emp_recv_init(h.ep[1], h_addr(0), 1, &v, 1, &r), 0);
	CHECK_EQ(emp_recv_lend(h.ep[1], r, 64), 0);
	CHECK_EQ(emp_start(h.ep[1], r), 0);
	uint32_t nf = (LEN + FRAG - 1) / FRAG;
	for (uint32_t k = 0; k < 10; k++)     /* 10 frames, then the sender stops */
		scr_data(&s, 3, 1, LEN, 43, k);
	scr_run(&s, 1 * MS);
	CHECK_EQ(h_ctr(&h, 1).rx_lent, 9);
	CHECK_EQ(emp_recv_lent(r), 9u);
	scr_run(&s, 101 * MS);
	CHECK_EQ(h_ctr(&h, 1).recv_expired, 1);
	CHECK_MSG(emp_recv_lent(r) == 0, "the given-up message keeps %u frames lent", emp_recv_lent(r));
	for (uint32_t k = 0; k < nf; k++)
		scr_data(&s, 4, 1, LEN, 44, k);
	scr_run(&s, 1 * MS);
	CHECK_EQ(emp_test(h.ep[1], r, &st), 1);
	CHECK_EQ(st.result, LEN);
	CHECK_EQ(emp_recv_lent(r), nf - 1);
	emp_recv_copy(h.ep[1], r, 0, out, sizeof(out));
	CHECK_MSG(h_check(out, sizeof(out), 44), "the message read is not the one that completed");
	CHECK_EQ(emp_req_free(h.ep[1], r), 0);
	h_free(&h);
}

static const struct emp_test tests[] = {
	{ "harden_dst_mac", t_dst_mac, 20 },
	{ "harden_forged_credits", t_forged_credits, 30 },
	{ "harden_partial_timeout", t_partial_timeout, 30 },
	{ "harden_lent_given_up", t_lent_given_up, 30 },
	{ "harden_reply_rate", t_reply_rate, 30 },
};
const struct emp_test_suite emp_suite_harden = { "harden", tests, sizeof(tests) / sizeof(tests[0]) };
