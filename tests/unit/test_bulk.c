/* test_bulk.c: a bulk message's acks at the receiver, frame by frame as a fast receiver sees them: how many, how many system calls (device bursts), when they leave. */
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw_int.h"

#define MS 1000000ull
#define US 1000ull
#define FRAG 1460u                  /* payload bytes per frame at MTU 1500 */
#define LEN (128u << 10)            /* iperf3's write: 90 frames */
#define NF ((LEN + FRAG - 1) / FRAG)

/* host 0 is played by the test on a raw port with its MAC, host 1 is a real endpoint */
struct scr {
	struct harness h;
	void *port;
	uint32_t inc;
	uint16_t session;
	struct h_raw_frame in[64];
	uint8_t out[EMP_FRAME_MAX];
	uint8_t msg[LEN];
};

static void frame_of(struct scr *s, uint8_t type, struct h_frame *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->dst, s->h.mac[1], 6);
	memcpy(f->src, s->h.mac[0], 6);
	f->ethertype = EMP_ETHERTYPE_DEFAULT;
	f->version = EMP_PROTO_VERSION;
	f->type = type;
	f->dst_ep = f->src_ep = 1;
	f->dst_inc = h_incarnation(&s->h, 1);
	f->src_inc = s->inc;
	f->session = s->session;
	f->credits = 100;
	f->mtu = 1500;
}

static void send_frame(struct scr *s, const struct h_frame *f)
{
	h_raw_send(&s->h, s->port, s->out, h_frame_build(f, s->out));
}

/* acks host 1 sent us (from the frames collected), their cumulative counts in cum[] */
static int acks_in(struct scr *s, int n, uint32_t *cum)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		struct h_frame f;
		CHECK_EQ(h_frame_parse(s->in[i].b, s->in[i].len, &f), 0);
		if (f.type == EMP_T_ACK)
			cum[k++] = f.cum;
	}
	return k;
}

/* One 128 KiB message to host 1, a frame every 4 us (about 3 Gbit/s), host 1
 * polled after each. spin: a thread of host 1 spins in its engine (polls
 * again at once). Returns host 1's device bursts; *nacks, cum[] the acks. */
static uint64_t one_message(int spin, int *nacks, uint32_t *cum, struct emp_counters *c)
{
	static struct scr s;
	memset(&s, 0, sizeof(s));
	h_init(&s.h, 2, NULL, NULL);
	s.inc = 0x5c0ffee5;
	s.session = 0x4242;
	h_close(&s.h, 0);
	s.port = h_raw_open(&s.h, s.h.mac[0]);
	struct h_frame f;
	frame_of(&s, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	send_frame(&s, &f);
	h_run(&s.h, NULL, NULL, 1 * MS);
	h_raw_recv(&s.h, s.port, s.in, 64);          /* the HELLO_ACK */
	static uint8_t rb[LEN];
	struct iovec v = { rb, LEN };
	emp_req_t *rr;
	CHECK_EQ(emp_post_recv(s.h.ep[1], h_addr(0), 7, &v, 1, &rr), 0);
	h_run(&s.h, NULL, NULL, 1 * MS);
	h_fill(s.msg, LEN, 5);
	struct emp_counters c0 = h_ctr(&s.h, 1);
	struct emp_sim_stats a, b;
	emp_sim_wire_stats(s.h.wire, &a);
	if (spin)
		__atomic_add_fetch(&s.h.ep[1]->spinners, 1, __ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < NF; i++) {
		frame_of(&s, EMP_T_DATA, &f);
		f.msg_id = 1;
		f.tag = 7;
		f.msg_len = LEN;
		f.frag = FRAG;
		f.frame = i;
		f.plen = (uint16_t)(LEN - i * FRAG < FRAG ? LEN - i * FRAG : FRAG);
		f.payload = s.msg + (size_t)i * FRAG;
		f.flags = i == NF - 1 ? EMP_F_LAST | EMP_F_ACKREQ : 0;
		send_frame(&s, &f);
		h_run_only(&s.h, 1, NULL, NULL, 4 * US);
	}
	struct emp_status st;
	CHECK(h_wait(&s.h, 1, rr, &st, 1 * MS));
	CHECK_EQ(st.result, (long long)LEN);
	CHECK(h_check(rb, LEN, 5));
	h_run_only(&s.h, 1, NULL, NULL, EMP_BULK_HOLD_NS);   /* every ack is due by now */
	if (spin)
		__atomic_sub_fetch(&s.h.ep[1]->spinners, 1, __ATOMIC_SEQ_CST);
	emp_sim_wire_stats(s.h.wire, &b);
	*nacks = acks_in(&s, h_raw_recv(&s.h, s.port, s.in, 64), cum);
	*c = h_ctr(&s.h, 1);
	c->tx_acks -= c0.tx_acks;
	c->acks_merged -= c0.acks_merged;
	h_free(&s.h);
	return b.bursts - a.bursts - NF;                 /* our own sends are bursts too */
}

/* Not spinning (nothing polls again at once), host 1 acks each collection of
 * half the message window (32 frames) at once and the whole message at its
 * end: three acks, three bursts (a quarter window gave six). Spinning, the
 * collection ack waits for company; the next one of the same message
 * replaces it before it leaves, and the completion ack leaves within
 * EMP_BULK_HOLD_NS: two acks, fewer bursts. Either way the last ack says
 * the whole message. */
static void t_bulk_ack_bursts(void)
{
	int n0, n1;
	uint32_t cum0[64], cum1[64];
	struct emp_counters c0, c1;
	uint64_t b0 = one_message(0, &n0, cum0, &c0), b1 = one_message(1, &n1, cum1, &c1);
	CHECK_MSG(n0 == 3 && b0 == 3, "acks %d, bursts %llu", n0, (unsigned long long)b0);
	CHECK_EQ(c0.acks_merged, 0);
	CHECK_EQ(cum0[n0 - 1], NF);
	CHECK_MSG(n1 == 2 && b1 == 2, "acks %d, bursts %llu", n1, (unsigned long long)b1);
	CHECK_EQ(c1.acks_merged, 1);
	CHECK_EQ(c1.tx_acks, 2);
	CHECK_EQ(cum1[n1 - 1], NF);
}

static const struct emp_test tests[] = {
	{ "bulk_ack_bursts", t_bulk_ack_bursts, 30 },
};
const struct emp_test_suite emp_suite_bulk = { "bulk", tests, sizeof(tests) / sizeof(tests[0]) };
