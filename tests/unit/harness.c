/* harness.c: the simulated cluster used by the unit suites (virtual clock, deterministic). */
#include <stdlib.h>
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"

static uint64_t vclock(void *arg)
{
	return ((struct harness *)arg)->now;
}

static void open_ep(struct harness *h, int i)
{
	struct emp_open_opts o = {
		.conf = &h->conf, .driver = "sim", .endpoint = 1, .wire = h->wire, .mac = h->mac[i],
		.no_progress_thread = 1, .incarnation = ++h->inc_seq * 7919u + (uint32_t)i,
		.fw_override = &h->fwc, .clock = vclock, .clock_arg = h,
	};
	int rc = emp_open(&h->ep[i], &o);
	CHECK_MSG(rc == 0, "emp_open(%d): %d %s", i, rc, emp_last_error());
}

void h_init(struct harness *h, int n, const struct emp_sim_faults *f, const struct emp_fw_config *fwc)
{
	struct emp_sim_faults nf = { .seed = 1 };
	memset(h, 0, sizeof(*h));
	h->n = n;
	h->now = 1000000;
	CHECK(emp_sim_wire_create(&h->wire, f ? f : &nf, vclock, h) == 0);
	emp_conf_defaults(&h->conf);
	h->conf.peers = calloc((size_t)n, sizeof(*h->conf.peers));
	h->conf.npeers = n;
	for (int i = 0; i < n; i++) {
		uint8_t m[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(h->mac[i], m, 6);
		memcpy(h->conf.peers[i].mac, m, 6);
		snprintf(h->conf.peers[i].name, sizeof(h->conf.peers[i].name), "h%d", i);
		h->conf.peers[i].ip = (uint32_t)(0x0a000001 + i);
	}
	if (fwc)
		h->fwc = *fwc;
	else
		emp__fw_config_defaults(&h->fwc);
	for (int i = 0; i < n; i++)
		open_ep(h, i);
}

void h_close(struct harness *h, int i)
{
	if (h->ep[i])
		emp_close(h->ep[i]);
	h->ep[i] = NULL;
}

void h_restart(struct harness *h, int i)
{
	h_close(h, i);
	open_ep(h, i);
}

void h_free(struct harness *h)
{
	for (int i = 0; i < h->n; i++)
		h_close(h, i);
	emp_sim_wire_destroy(h->wire);
	emp_conf_free(&h->conf);
}

emp_addr_t h_addr(int host)
{
	emp_addr_t a = { (uint16_t)host, 1 };
	return a;
}

int h_run(struct harness *h, int (*done)(void *), void *arg, uint64_t max_ns)
{
	uint64_t end = h->now + max_ns;
	for (;;) {
		for (int round = 0; round < 1000; round++) {
			int busy = 0;
			for (int i = 0; i < h->n; i++) {
				if (!h->ep[i])
					continue;
				emp_progress(h->ep[i]);
				busy |= emp__fw_busy(h->ep[i]->fw);
			}
			if (done && done(arg))
				return 1;
			uint64_t w = emp_sim_wire_next_event(h->wire);
			if (!busy && (w == UINT64_MAX || w > h->now))
				break;
		}
		uint64_t next = emp_sim_wire_next_event(h->wire);
		for (int i = 0; i < h->n; i++)
			if (h->ep[i]) {
				uint64_t d = emp__fw_next_deadline(h->ep[i]->fw);
				if (d < next)
					next = d;
			}
		if (next == UINT64_MAX || next > end) {
			h->now = end;
			return done ? done(arg) : 0;
		}
		h->now = next > h->now ? next : h->now + 1;
	}
}

struct one { emp_endpoint_t *ep; emp_req_t *r; struct emp_status *st; int got; };

static int one_done(void *arg)
{
	struct one *o = arg;
	if (!o->got)
		o->got = emp_test(o->ep, o->r, o->st) == 1;
	return o->got;
}

int h_wait(struct harness *h, int i, emp_req_t *r, struct emp_status *st, uint64_t max_ns)
{
	struct one o = { h->ep[i], r, st, 0 };
	return h_run(h, one_done, &o, max_ns);
}

struct emp_counters h_ctr(struct harness *h, int i)
{
	struct emp_counters c;
	emp_get_counters(h->ep[i], &c);
	return c;
}

void h_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *b = buf;
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		b[i] = (uint8_t)x;
	}
}

int h_check(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *b = buf;
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		if (b[i] != (uint8_t)x)
			return 0;
	}
	return 1;
}
