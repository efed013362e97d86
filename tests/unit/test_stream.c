/* test_stream.c: a stream the way the tools and the sockets layer drive it: few receives, reposted as they complete, under loss. */
#include <stdlib.h>
#include <string.h>
#include "runner.h"
#include "harness.h"

#define MS 1000000ull
#define DEPTH 16

struct st {
	struct harness *h;
	emp_req_t *sr[DEPTH], *rr[DEPTH];
	uint8_t *sbuf, *rbuf;
	int sent, sdone, rdone, nmsg, bad, any, rposted;
	int rseq[DEPTH];               /* which message each posted receive must get */
	size_t maxsz;
};

static size_t size_of(int i)
{
	static const size_t sz[] = { 0, 1, 1451, 1452, 1453, 65536, 200000, 7 };
	return sz[i % 8];
}

static void post_recv(struct st *s, int k)
{
	struct iovec v = { s->rbuf + (size_t)k * s->maxsz, s->maxsz };
	emp_addr_t from = s->any ? (emp_addr_t){ EMP_ANY_HOST, EMP_ANY_EP } : h_addr(0);
	CHECK_EQ(emp_post_recv(s->h->ep[1], from, 10, &v, 1, &s->rr[k]), 0);
	s->rseq[k] = s->rposted++;
}

static int step(void *arg)
{
	struct st *s = arg;
	struct emp_status st;
	for (int k = 0; k < DEPTH; k++) {
		if (s->sr[k] && emp_test(s->h->ep[0], s->sr[k], &st) == 1) {
			CHECK_MSG(st.result >= 0, "send failed: %lld", (long long)st.result);
			s->sr[k] = NULL;
			s->sdone++;
		}
		if (!s->sr[k] && s->sent < s->nmsg) {
			size_t n = size_of(s->sent);
			uint8_t *b = s->sbuf + (size_t)k * s->maxsz;
			memcpy(b, &s->sent, 4);
			h_fill(b + 4, n, (uint32_t)s->sent);
			struct iovec v = { b, n + 4 };
			CHECK_EQ(emp_post_send(s->h->ep[0], h_addr(1), 10, &v, 1, &s->sr[k]), 0);
			s->sent++;
		}
		if (s->rr[k] && emp_test(s->h->ep[1], s->rr[k], &st) == 1) {
			uint8_t *b = s->rbuf + (size_t)k * s->maxsz;
			int idx;
			memcpy(&idx, b, 4);
			/* same tag, same pair: the i-th receive posted gets the i-th message sent */
			CHECK_EQ(idx, s->rseq[k]);
			CHECK_EQ(st.result, (long long)(size_of(idx) + 4));
			CHECK(h_check(b + 4, size_of(idx), (uint32_t)idx));
			s->rdone++;
			s->rr[k] = NULL;
			if (s->rposted < s->nmsg)
				post_recv(s, k);
		}
	}
	return s->sdone == s->nmsg && s->rdone == s->nmsg;
}

static void stream(uint32_t loss_ppm, uint64_t seed, int any)
{
	struct emp_sim_faults f = { .seed = seed, .loss_ppm = loss_ppm, .delay_ns = 3000 };
	struct harness h;
	h_init(&h, 2, &f, NULL);
	struct st s = { .h = &h, .nmsg = 400, .any = any, .maxsz = 200004 };
	s.sbuf = malloc(s.maxsz * DEPTH);
	s.rbuf = malloc(s.maxsz * DEPTH);
	for (int k = 0; k < DEPTH; k++)
		post_recv(&s, k);
	CHECK_MSG(h_run(&h, step, &s, 20000 * MS), "stalled: sent %d, sends done %d, received %d", s.sent,
		  s.sdone, s.rdone);
	struct emp_counters c = h_ctr(&h, 0);
	CHECK_EQ(c.send_errors, 0);
	if (loss_ppm)
		CHECK(c.retransmits > 0);
	free(s.sbuf);
	free(s.rbuf);
	h_free(&h);
}

static void t_stream_clean(void) { stream(0, 1, 1); }
static void t_stream_loss5_any(void) { stream(50000, 2, 1); }
static void t_stream_loss5_any_b(void) { stream(50000, 3, 1); }
static void t_stream_loss5_exact(void) { stream(50000, 4, 0); }
static void t_stream_loss20_any(void) { stream(200000, 5, 1); }

/* A bulk message (1 MiB, 723 frames at MTU 1500) on a clean wire: the
 * receiver acks collections of a quarter window (16 frames), plus what the
 * sender asks for at its window's edge and the last frame, not a collection
 * of 3 (each ack is a frame and, alone in its poll, a system call). */
static void t_stream_bulk_acks(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	size_t len = 1 << 20;
	h_xfer(&h, 0, 1, len, 5, 77, 10000 * MS);
	struct emp_counters r = h_ctr(&h, 1), s = h_ctr(&h, 0);
	CHECK_EQ(r.bytes_received, len);
	CHECK_EQ(s.retransmits, 0);
	CHECK(r.rx_data >= 700);
	CHECK_MSG(r.tx_acks * 6 < r.rx_data, "acks %llu for %llu frames",
		  (unsigned long long)r.tx_acks, (unsigned long long)r.rx_data);
	h_free(&h);
}

/* A stream of 128 KiB messages (iperf3's writes: 90 frames each, several in
 * flight) on a clean wire: the receiver acks collections of half the
 * message window (32 frames), the sender's window edge and the last frame:
 * three acks a message, about one per 30 frames (a quarter window, 16
 * frames, gave six, one per 15). */
static void t_stream_bulk_acks_128k(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	enum { N = 24, LEN = 128 << 10 };
	struct h_msg m[N];
	memset(m, 0, sizeof(m));
	for (int i = 0; i < N; i++)
		m[i] = (struct h_msg){ .from = 0, .to = 1, .tag = 9, .len = LEN };
	h_traffic(&h, m, N, 10000 * MS);
	struct emp_counters r = h_ctr(&h, 1), s = h_ctr(&h, 0);
	CHECK_EQ(r.bytes_received, (uint64_t)N * LEN);
	CHECK_EQ(s.retransmits, 0);
	CHECK(r.rx_data >= 90 * N);
	CHECK_MSG(r.tx_acks * 24 < r.rx_data, "acks %llu for %llu frames",
		  (unsigned long long)r.tx_acks, (unsigned long long)r.rx_data);
	CHECK_MSG(s.rx_acks * 24 < r.rx_data, "acks %llu for %llu frames",
		  (unsigned long long)s.rx_acks, (unsigned long long)r.rx_data);
	h_free(&h);
}

/* At MTU 1500 a frame carries 1460 payload bytes (40 bytes of EMP header,
 * 48 before wire version 2): 2 x 1460 bytes are two frames, one more byte a
 * third; the frames on the wire are full 1514-byte Ethernet frames. */
static void t_stream_payload_per_frame(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	CHECK_EQ(emp_mtu(h.ep[0]), 1500);
	h_xfer(&h, 0, 1, 2 * 1460, 5, 78, 1000 * MS);
	CHECK_EQ(h_ctr(&h, 0).tx_data, 2);
	h_xfer(&h, 0, 1, 2 * 1460 + 1, 5, 79, 1000 * MS);
	CHECK_EQ(h_ctr(&h, 0).tx_data, 5);
	CHECK_EQ(h_ctr(&h, 1).rx_data, 5);
	h_free(&h);
}

static const struct emp_test tests[] = {
	{ "stream_payload_per_frame", t_stream_payload_per_frame, 30 },
	{ "stream_bulk_acks", t_stream_bulk_acks, 60 },
	{ "stream_bulk_acks_128k", t_stream_bulk_acks_128k, 60 },
	{ "stream_clean", t_stream_clean, 60 },
	{ "stream_loss5_wildcard", t_stream_loss5_any, 60 },
	{ "stream_loss5_wildcard_b", t_stream_loss5_any_b, 60 },
	{ "stream_loss5_exact", t_stream_loss5_exact, 60 },
	{ "stream_loss20_wildcard", t_stream_loss20_any, 60 },
};
const struct emp_test_suite emp_suite_stream = { "stream", tests, sizeof(tests) / sizeof(tests[0]) };
