/* test_bulk.c: a bulk message at the receiver, frame by frame: its acks (how many, how many system calls, when they leave) and the receive-coalescing estimate. */
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
/* host 1 up, host 0 played by the test on a raw port, with a session */
static void scr_open(struct scr *s)
{
	memset(s, 0, sizeof(*s));
	h_init(&s->h, 2, NULL, NULL);
	s->inc = 0x5c0ffee5;
	s->session = 0x4242;
	h_close(&s->h, 0);
	s->port = h_raw_open(&s->h, s->h.mac[0]);
	struct h_frame f;
	frame_of(s, EMP_T_HELLO, &f);
	f.dst_inc = 0;
	send_frame(s, &f);
	h_run(&s->h, NULL, NULL, 1 * MS);
	h_raw_recv(&s->h, s->port, s->in, 64);        /* the HELLO_ACK */
	h_fill(s->msg, LEN, 5);
}

/* frame i of message id (len bytes, tag 7) from host 0 to host 1, with flags
 * (the last frame: LAST and ACKREQ as well) */
static void data_frame_fl(struct scr *s, uint32_t id, uint32_t len, uint32_t i, uint16_t flags)
{
	struct h_frame f;
	uint32_t nf = (len + FRAG - 1) / FRAG;
	frame_of(s, EMP_T_DATA, &f);
	f.msg_id = id;
	f.tag = 7;
	f.msg_len = len;
	f.frag = FRAG;
	f.frame = i;
	f.plen = (uint16_t)(len - i * FRAG < FRAG ? len - i * FRAG : FRAG);
	f.payload = s->msg + (size_t)i * FRAG;
	f.flags = flags | (i == nf - 1 ? EMP_F_LAST | EMP_F_ACKREQ : 0);
	send_frame(s, &f);
}

static void data_frame(struct scr *s, uint32_t id, uint32_t len, uint32_t i)
{
	data_frame_fl(s, id, len, i, 0);
}

/* the acks host 1 sent since the last look: how many, the flags and cum of the last */
static int last_ack(struct scr *s, uint16_t *flags, uint32_t *cum)
{
	int n = h_raw_recv(&s->h, s->port, s->in, 64), k = 0;
	for (int i = 0; i < n; i++) {
		struct h_frame f;
		CHECK_EQ(h_frame_parse(s->in[i].b, s->in[i].len, &f), 0);
		if (f.type == EMP_T_ACK) {
			*flags = f.flags;
			*cum = f.cum;
			k++;
		}
	}
	return k;
}

static uint64_t one_message(int spin, int *nacks, uint32_t *cum, struct emp_counters *c)
{
	static struct scr s;
	scr_open(&s);
	static uint8_t rb[LEN];
	struct iovec v = { rb, LEN };
	emp_req_t *rr;
	CHECK_EQ(emp_post_recv(s.h.ep[1], h_addr(0), 7, &v, 1, &rr), 0);
	h_run(&s.h, NULL, NULL, 1 * MS);
	struct emp_counters c0 = h_ctr(&s.h, 1);
	struct emp_sim_stats a, b;
	emp_sim_wire_stats(s.h.wire, &a);
	if (spin)
		__atomic_add_fetch(&s.h.ep[1]->spinners, 1, __ATOMIC_SEQ_CST);
	for (uint32_t i = 0; i < NF; i++) {
		data_frame(&s, 1, LEN, i);
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

/* the engine's receive-coalescing estimate for host 1 (firmware/gather.c) */
static uint64_t gather_ns_at(struct scr *s, uint64_t now, uint64_t max_ns)
{
	struct emp_endpoint *ep = s->h.ep[1];
	pthread_mutex_lock(&ep->eng_lock);
	uint64_t ns = emp__fw_gather_ns(ep->fw, now, max_ns);
	pthread_mutex_unlock(&ep->eng_lock);
	return ns;
}

static uint64_t gather_ns(struct scr *s, uint64_t max_ns)
{
	return gather_ns_at(s, s->h.now, max_ns);
}

/* frames [from, to) of message id, gap ns apart, host 1 polled after each */
static void paced(struct scr *s, uint32_t id, uint32_t len, uint32_t from, uint32_t to, uint64_t gap)
{
	for (uint32_t i = from; i < to; i++) {
		data_frame(s, id, len, i);
		h_run_only(&s->h, 1, NULL, NULL, gap);
	}
}

/* n receives of len bytes each into bufs (one after another) from host 0,
 * tag 7, posted at host 1 */
static void post_recvs(struct scr *s, uint8_t *bufs, uint32_t len, int n, emp_req_t **rr)
{
	for (int i = 0; i < n; i++) {
		struct iovec v = { bufs + (size_t)i * len, len };
		CHECK_EQ(emp_post_recv(s->h.ep[1], h_addr(0), 7, &v, 1, &rr[i]), 0);
	}
	h_run(&s->h, NULL, NULL, 1 * MS);
}

/* A message of 12 frames (within the message window: MTU 9000's 128 KiB is
 * 15), its frames taken one poll each: acked once, at its end (acked per
 * poll before, it drew 12 acks, each a system call of the receiver's); one
 * of 7 frames, below EMP_BULK_MIN_FRAMES, per collection of 3 and at its
 * end (3; acked at each poll that drained the device, it drew 7). */
static void t_bulk_medium_acks(void)
{
	static struct scr s;
	static uint8_t rb[2][LEN];
	scr_open(&s);
	const uint32_t nf[2] = { 12, 7 };
	const int want[2] = { 1, 3 };
	for (int m = 0; m < 2; m++) {
		uint32_t len = nf[m] * FRAG;
		struct iovec v = { rb[m], len };
		emp_req_t *rr;
		CHECK_EQ(emp_post_recv(s.h.ep[1], h_addr(0), 7, &v, 1, &rr), 0);
		h_run(&s.h, NULL, NULL, 1 * MS);
		h_raw_recv(&s.h, s.port, s.in, 64);
		paced(&s, (uint32_t)(m + 1), len, 0, nf[m], 4 * US);
		struct emp_status st;
		CHECK(h_wait(&s.h, 1, rr, &st, 1 * MS));
		CHECK_EQ(st.result, (long long)len);
		CHECK(h_check(rb[m], len, 5));
		h_run_only(&s.h, 1, NULL, NULL, EMP_BULK_HOLD_NS);   /* every ack is due by now */
		uint32_t cum[64];
		int n = acks_in(&s, h_raw_recv(&s.h, s.port, s.in, 64), cum);
		CHECK_MSG(n == want[m], "%u frames: %d acks, want %d", nf[m], n, want[m]);
		CHECK_EQ(cum[n - 1], nf[m]);
	}
	h_free(&s.h);
}

static int near(uint64_t got, uint64_t want)
{
	return got >= want - want / 10 && got <= want + want / 10;
}

/* A 128 KiB message (90 frames) trickling in a frame every 12 us (1 Gbit/s):
 * after 40 frames the engine lets a waiter sleep as long as the other 50
 * need (600 us), or its bound; not when the flow paused, nor for less than
 * 50 us (the last 4 frames here), nor at 0.9 us a frame, nor for 2 ms after
 * a one-frame message; rx_gathers counts each estimate given. */
static void t_gather_pace(void)
{
	static struct scr s;
	static uint8_t rb[10][LEN];
	emp_req_t *rr[10];
	scr_open(&s);
	post_recvs(&s, rb[0], LEN, 10, rr);
	uint64_t g0 = h_ctr(&s.h, 1).rx_gathers;
	CHECK_EQ(gather_ns(&s, 500 * US), 0);                    /* nothing under way */
	paced(&s, 1, LEN, 0, 40, 12 * US);
	uint64_t g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 50 * 12 * US), "50 frames left at 12 us: %llu ns", (unsigned long long)g);
	CHECK_EQ(gather_ns(&s, 500 * US), 500 * US);             /* the caller's bound */
	/* a caller whose clock was read before the last frame was taken */
	CHECK_EQ(gather_ns_at(&s, s.h.now - 20 * US, 500 * US), 500 * US);
	CHECK_EQ(h_ctr(&s.h, 1).rx_gathers - g0, 3);
	CHECK_EQ(gather_ns(&s, 0), 0);                           /* gather_us 0: off */
	h_run_only(&s.h, 1, NULL, NULL, 100 * US);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);                      /* no frame for 8 gaps: paused */
	paced(&s, 1, LEN, 40, 85, 12 * US);
	CHECK_MSG(gather_ns(&s, 2 * MS) > 0, "5 frames left (60 us): worth a gathering sleep");
	paced(&s, 1, LEN, 85, 86, 12 * US);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);                      /* 4 left, 48 us: below a timer slack */
	paced(&s, 1, LEN, 86, NF, 12 * US);
	struct emp_status st;
	CHECK(h_wait(&s.h, 1, rr[0], &st, 1 * MS));
	CHECK_EQ(st.result, (long long)LEN);
	CHECK(h_check(rb[0], LEN, 5));
	/* then 2 us a frame (5.8 Gbit/s), measured over a message: the arrival
	 * gap follows at once, the smoothed message pace (12 us a frame so far)
	 * over a few messages; meanwhile a sleep is at most 4 times left x the
	 * arrival gap: 30 frames left, 240 us; 10 left, 80 us */
	paced(&s, 2, LEN, 0, NF, 2 * US);
	CHECK(h_wait(&s.h, 1, rr[1], &st, 1 * MS));
	paced(&s, 3, LEN, 0, 60, 2 * US);
	g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 4 * 30 * 2 * US), "30 frames left at 2 us after 12 us: %llu ns", (unsigned long long)g);
	paced(&s, 3, LEN, 60, 80, 2 * US);
	g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 4 * 10 * 2 * US), "10 frames left at 2 us after 12 us: %llu ns", (unsigned long long)g);
	paced(&s, 3, LEN, 80, NF, 2 * US);
	CHECK(h_wait(&s.h, 1, rr[2], &st, 1 * MS));
	/* 0.9 us a frame (13 Gbit/s), measured over three messages: 60 frames
	 * left would be 54 us, but a spin finds such frames in batches */
	for (int m = 0; m < 3; m++) {
		paced(&s, (uint32_t)(4 + m), LEN, 0, NF, 900);
		CHECK(h_wait(&s.h, 1, rr[3 + m], &st, 1 * MS));
	}
	paced(&s, 7, LEN, 0, 30, 900);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);
	paced(&s, 7, LEN, 30, NF, 900);
	CHECK(h_wait(&s.h, 1, rr[6], &st, 1 * MS));
	CHECK(h_check(rb[6], LEN, 5));
	/* a one-frame message: the next 2 ms never gather (a reply waits for nobody) */
	data_frame(&s, 8, 100, 0);
	h_run_only(&s.h, 1, NULL, NULL, 12 * US);
	CHECK(h_wait(&s.h, 1, rr[7], &st, 1 * MS));
	CHECK_EQ(st.result, 100);
	paced(&s, 9, LEN, 0, 40, 12 * US);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);
	h_run_only(&s.h, 1, NULL, NULL, 1200 * US);              /* (paused: measured afresh) */
	paced(&s, 9, LEN, 40, 80, 12 * US);
	g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 10 * 12 * US), "10 frames left, 2 ms after the small message: %llu ns", (unsigned long long)g);
	paced(&s, 9, LEN, 80, NF, 12 * US);
	CHECK(h_wait(&s.h, 1, rr[8], &st, 1 * MS));
	/* frames taken ten at a time every 120 us (as after gathering sleeps):
	 * still 12 us a frame, not 120 us nor none (the first ten, too, come
	 * over 120 us after the message before) */
	s.h.now += 108 * US;
	for (uint32_t i = 0; i < 60; i++) {
		data_frame(&s, 10, LEN, i);
		if (i % 10 == 9)
			h_run_only(&s.h, 1, NULL, NULL, i < 59 ? 120 * US : 1 * US);
	}
	g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 30 * 12 * US), "30 frames left, taken in tens: %llu ns", (unsigned long long)g);
	paced(&s, 10, LEN, 60, NF, 12 * US);
	CHECK(h_wait(&s.h, 1, rr[9], &st, 1 * MS));
	CHECK(h_check(rb[9], LEN, 5));
	CHECK_EQ(h_ctr(&s.h, 1).rx_gathers - g0, 8);
	h_free(&s.h);
}

/* The arrival gap counts the frames of one look in the span that look
 * closes: 20 frames taken in one look after a 240 us sleep, then one frame a
 * look, all arriving 12 us apart, measure 12 us (counted in the next span,
 * with no time of their own, they made it about 6 us). */
static void t_gather_spans(void)
{
	static struct scr s;
	static uint8_t rb[LEN];
	emp_req_t *rr;
	scr_open(&s);
	post_recvs(&s, rb, LEN, 1, &rr);
	paced(&s, 1, LEN, 0, 20, 12 * US);
	s.h.now += 228 * US;                                     /* host 1 sleeps; 20 frames come */
	for (uint32_t i = 20; i < 40; i++)
		data_frame(&s, 1, LEN, i);
	h_run_only(&s.h, 1, NULL, NULL, 12 * US);                 /* and are taken in one look */
	paced(&s, 1, LEN, 40, 60, 12 * US);
	uint64_t g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 30 * 12 * US), "30 frames left at 12 us, 20 taken in one look: %llu ns",
		  (unsigned long long)g);
	paced(&s, 1, LEN, 60, NF, 12 * US);
	struct emp_status st;
	CHECK(h_wait(&s.h, 1, rr, &st, 1 * MS));
	CHECK_EQ(st.result, (long long)LEN);
	CHECK(h_check(rb, LEN, 5));
	h_free(&s.h);
}

/* frames [from, to) of messages a and a + 1 alternating, 2 us apart */
static void alternate(struct scr *s, uint32_t a, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++) {
		data_frame(s, a, LEN, i);
		h_run_only(&s->h, 1, NULL, NULL, 2 * US);
		data_frame(s, a + 1, LEN, i);
		h_run_only(&s->h, 1, NULL, NULL, 2 * US);
	}
}

/* two messages at a time, frames alternating 2 us apart: each message's own
 * frames come 4 us apart, and the sleep for the nearest one's last 30 frames
 * is 120 us, not the 60 us the arrival gap alone gives */
static void t_gather_msg_pace(void)
{
	static struct scr s;
	static uint8_t rb[4][LEN];
	emp_req_t *rr[4];
	scr_open(&s);
	post_recvs(&s, rb[0], LEN, 4, rr);
	alternate(&s, 1, 0, NF);
	struct emp_status st;
	CHECK(h_wait(&s.h, 1, rr[0], &st, 1 * MS));
	CHECK(h_wait(&s.h, 1, rr[1], &st, 1 * MS));
	alternate(&s, 3, 0, 60);
	uint64_t g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 30 * 4 * US), "30 frames left, two messages' frames alternating 2 us apart: %llu ns",
		  (unsigned long long)g);
	alternate(&s, 3, 60, NF);
	for (int i = 2; i < 4; i++) {
		CHECK(h_wait(&s.h, 1, rr[i], &st, 1 * MS));
		CHECK_EQ(st.result, (long long)LEN);
		CHECK(h_check(rb[i], LEN, 5));
	}
	h_free(&s.h);
}

/* A gap the receiver named once (NACK) and that stays open is named again
 * whenever a frame asks for an ack: the sender's resend of it was lost, and
 * its timeout's probes (which ask) must draw the gap again, or the recovery
 * waits for a second, backed-off timeout. A duplicate that asks is answered
 * DUP and, with the gap open, NACK too. */
static void t_bulk_gap_named_again(void)
{
	static struct scr s;
	scr_open(&s);
	static uint8_t rb[LEN];
	struct iovec v = { rb, LEN };
	emp_req_t *rr;
	struct emp_status st;
	uint16_t fl = 0;
	uint32_t cum = 0;
	CHECK_EQ(emp_post_recv(s.h.ep[1], h_addr(0), 7, &v, 1, &rr), 0);
	h_run(&s.h, NULL, NULL, 1 * MS);
	h_raw_recv(&s.h, s.port, s.in, 64);
	for (uint32_t i = 0; i < 3; i++)
		data_frame(&s, 1, LEN, i);
	data_frame(&s, 1, LEN, 5);                          /* frames 3 and 4 lost */
	h_run_only(&s.h, 1, NULL, NULL, 10 * US);
	CHECK(last_ack(&s, &fl, &cum) >= 1);
	CHECK_MSG(fl & EMP_F_NACK, "the gap is not named (flags %#x)", fl);
	CHECK_EQ(cum, 3);
	data_frame_fl(&s, 1, LEN, 6, EMP_F_ACKREQ);         /* a probe: the gap is still open */
	h_run_only(&s.h, 1, NULL, NULL, 10 * US);
	CHECK_EQ(last_ack(&s, &fl, &cum), 1);
	CHECK_MSG(fl & EMP_F_NACK, "an open gap not named again when asked (flags %#x)", fl);
	CHECK_EQ(cum, 3);
	data_frame_fl(&s, 1, LEN, 5, EMP_F_ACKREQ);         /* a duplicate that asks */
	h_run_only(&s.h, 1, NULL, NULL, 10 * US);
	CHECK_EQ(last_ack(&s, &fl, &cum), 1);
	CHECK_MSG((fl & EMP_F_DUP) && (fl & EMP_F_NACK), "a duplicate's ack flags %#x", fl);
	for (uint32_t i = 3; i < NF; i++)                   /* the rest: the message completes intact */
		if (i != 5 && i != 6)
			data_frame(&s, 1, LEN, i);
	CHECK(h_wait(&s.h, 1, rr, &st, 1 * MS));
	CHECK_EQ(st.result, (long long)LEN);
	CHECK(h_check(rb, LEN, 5));
	h_free(&s.h);
}

/* A one-way stream whose messages come in bursts (16 frames 1 us apart,
 * one message every 100 us, as a sender bound by its own CPU sends them):
 * with no message under way, 30 us after the last one completed, a waiter
 * may sleep until the next is due (70 us); not once this host posted a send
 * (a request/response's answer comes when the peer makes it), nor once the
 * interval has passed twice over (the stream ended) */
static void t_gather_next(void)
{
	enum { M = 8, MF = 16 };
	static struct scr s;
	static uint8_t rb[M][MF * FRAG];
	emp_req_t *rr[M];
	const uint32_t len = MF * FRAG;
	scr_open(&s);
	post_recvs(&s, rb[0], len, M, rr);
	uint64_t g0 = h_ctr(&s.h, 1).rx_gathers;
	struct emp_status st;
	for (uint32_t m = 0; m < 6; m++) {
		paced(&s, m + 1, len, 0, MF, 1 * US);
		CHECK(h_wait(&s.h, 1, rr[m], &st, 1 * US));
		CHECK_EQ(st.result, (long long)len);
		CHECK(h_check(rb[m], len, 5));
		if (m < 5)
			h_run_only(&s.h, 1, NULL, NULL, (100 - MF) * US);
	}
	h_run_only(&s.h, 1, NULL, NULL, 30 * US);
	uint64_t g = gather_ns(&s, 2 * MS);
	CHECK_MSG(near(g, 70 * US), "no message under way, 30 us after one, one every 100 us: %llu ns",
		  (unsigned long long)g);
	CHECK_EQ(gather_ns(&s, 40 * US), 0);                     /* the caller's bound: below a timer slack */
	h_run_only(&s.h, 1, NULL, NULL, 170 * US);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);                      /* 200 us since: the stream ended */
	paced(&s, 7, len, 0, MF, 1 * US);                        /* it goes on: one more message */
	CHECK(h_wait(&s.h, 1, rr[6], &st, 1 * US));
	h_run_only(&s.h, 1, NULL, NULL, 30 * US);
	CHECK_MSG(gather_ns(&s, 2 * MS) > 0, "a message again, then 30 us: the next is due");
	uint8_t b[64] = { 0 };
	struct iovec v = { b, sizeof(b) };
	emp_req_t *sr;
	CHECK_EQ(emp_post_send(s.h.ep[1], h_addr(0), 7, &v, 1, &sr), 0);
	h_run_only(&s.h, 1, NULL, NULL, 1 * US);
	CHECK_EQ(gather_ns(&s, 2 * MS), 0);                      /* it sent: an answer is not due at an interval */
	CHECK_EQ(h_ctr(&s.h, 1).rx_gathers - g0, 2);
	h_free(&s.h);
}

static const struct emp_test tests[] = {
	{ "bulk_ack_bursts", t_bulk_ack_bursts, 30 },
	{ "bulk_medium_acks", t_bulk_medium_acks, 30 },
	{ "bulk_gap_named_again", t_bulk_gap_named_again, 30 },
	{ "gather_pace", t_gather_pace, 30 },
	{ "gather_spans", t_gather_spans, 30 },
	{ "gather_msg_pace", t_gather_msg_pace, 30 },
	{ "gather_next", t_gather_next, 30 },
};
const struct emp_test_suite emp_suite_bulk = { "bulk", tests, sizeof(tests) / sizeof(tests[0]) };
