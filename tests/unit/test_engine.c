/* test_engine.c: the engine over the sim wire: sizes, ordering, matching, wildcards, persistent, cancel. */
#include <stdlib.h>
#include <string.h>
#include "runner.h"
#include "harness.h"

/* One message of len bytes from h0 to h1, receive posted first. */
static void xfer(struct harness *h, size_t len, uint32_t seed)
{
	uint8_t *src = malloc(len + 1), *dst = malloc(len + 1);
	h_fill(src, len, seed);
	memset(dst, 0, len + 1);
	struct iovec si = { src, len }, di = { dst, len };
	emp_req_t *rr, *sr;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(h->ep[1], h_addr(0), 7, &di, 1, &rr), 0);
	CHECK_EQ(emp_post_send(h->ep[0], h_addr(1), 7, &si, 1, &sr), 0);
	CHECK(h_wait(h, 1, rr, &st, 60000000000ull));
	CHECK_EQ(st.result, (long long)len);
	CHECK_EQ(st.source.host, 0);
	CHECK_EQ(st.tag, 7);
	CHECK(h_wait(h, 0, sr, &st, 60000000000ull));
	CHECK_EQ(st.result, (long long)len);
	CHECK(h_check(dst, len, seed));
	free(src);
	free(dst);
}

static void t_sizes(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	size_t frag = 1500 - EMP_DATA_OVERHEAD;
	size_t sizes[] = { 0, 1, frag - 1, frag, frag + 1, 65536, 1 << 20 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		xfer(&h, sizes[i], i + 1);
	struct emp_counters c = h_ctr(&h, 1);
	CHECK_EQ(c.msgs_received, 7);
	CHECK_EQ(c.drops_total, 0);
	h_free(&h);
}


static void t_loss_quick(void)
{
	struct emp_sim_faults f = { .seed = 42, .loss_ppm = 100000, .reorder_ppm = 50000, .reorder_ns = 20000,
				    .dup_ppm = 20000, .delay_ns = 5000 };
	struct harness h;
	h_init(&h, 2, &f, NULL);
	for (int i = 0; i < 20; i++)
		xfer(&h, (size_t)(i * 7777) % 300000, i + 100);
	struct emp_counters c = h_ctr(&h, 0);
	fprintf(stderr, "retransmits %llu timeouts %llu fast %llu\n", (unsigned long long)c.retransmits,
		(unsigned long long)c.timeouts, (unsigned long long)c.fast_retransmits);
	h_free(&h);
}

static const struct emp_test tests[] = {
	{ "engine_sizes", t_sizes, 60 },
	{ "engine_loss_quick", t_loss_quick, 60 },
};
const struct emp_test_suite emp_suite_engine = { "engine", tests, sizeof(tests) / sizeof(tests[0]) };
