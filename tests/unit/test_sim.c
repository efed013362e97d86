/* test_sim.c: unit tests of the sim wire driver (routing, faults, determinism, queue, eventfd) and the driver registry. */
#include "sim.h"
#include "runner.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>

#include "driver.h"
#include "proto.h"

static uint64_t vclock(void *arg)
{
	return *(volatile uint64_t *)arg;
}

static const uint8_t MAC_A[6] = { 0x02, 0, 0, 0, 0, 0xa };
static const uint8_t MAC_B[6] = { 0x02, 0, 0, 0, 0, 0xb };
static const uint8_t MAC_C[6] = { 0x02, 0, 0, 0, 0, 0xc };
static const uint8_t MAC_X[6] = { 0x02, 0, 0, 0, 0, 0x7 };
static const uint8_t BCAST[6] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };

struct rig {
	struct emp_sim_wire *w;
	uint64_t now;
	void *port[3];
};

static const struct emp_driver_ops *S = &emp__sim_ops;

static void *port_open(struct emp_sim_wire *w, const uint8_t *mac)
{
	char err[128] = "";
	struct emp_dev_params prm = { .wire = w, .mac = mac, .err = err, .errlen = sizeof(err) };
	void *p = NULL;
	int rc = S->open(&prm, &p);
	CHECK_MSG(rc == 0, "open: %d %s", rc, err);
	return p;
}

/* a wire with ports A, B, C and a virtual clock; rig must stay in place (clock_arg) */
static void rig_up(struct rig *r, const struct emp_sim_faults *f)
{
	memset(r, 0, sizeof(*r));
	r->now = 1000;
	CHECK_EQ(emp_sim_wire_create(&r->w, f, vclock, &r->now), 0);
	r->port[0] = port_open(r->w, MAC_A);
	r->port[1] = port_open(r->w, MAC_B);
	r->port[2] = port_open(r->w, MAC_C);
}

static void rig_down(struct rig *r)
{
	for (int i = 0; i < 3; i++)
		S->close(r->port[i]);
	emp_sim_wire_destroy(r->w);
}

/* build a frame: dst, src, EtherType, then len-14 bytes of pattern (seed) */
static uint32_t mkframe(uint8_t *buf, const uint8_t *dst, const uint8_t *src, uint32_t len, uint32_t seed)
{
	memcpy(buf, dst, 6);
	memcpy(buf + 6, src, 6);
	buf[12] = 0x88;
	buf[13] = 0xb5;
	for (uint32_t i = 14; i < len; i++)
		buf[i] = (uint8_t)(seed * 31 + i * 7);
	if (len >= 18)
		memcpy(buf + 14, &seed, 4);
	return len;
}

static int send1(void *port, const uint8_t *frame, uint32_t len)
{
	struct emp_txframe t = { .hdr = frame, .hdr_len = len };
	return S->tx_burst(port, &t, 1);
}

/* receive everything deliverable now; returns count, copies the last frame into last */
static int drain(void *port, uint8_t *last, uint32_t *lastlen)
{
	struct emp_rxframe f[64];
	int total = 0, n;
	while ((n = S->rx_burst(port, f, 64)) > 0) {
		if (last) {
			memcpy(last, f[n - 1].data, f[n - 1].len);
			*lastlen = f[n - 1].len;
		}
		S->rx_release(port, (unsigned)n);
		total += n;
	}
	return total;
}

static void t_unicast_intact(void)
{
	struct rig r;
	rig_up(&r, NULL);
	uint8_t hdr[14 + 44], p1[100], p2[333];
	mkframe(hdr, MAC_B, MAC_A, sizeof(hdr), 1);
	for (unsigned i = 0; i < sizeof(p1); i++)
		p1[i] = (uint8_t)i;
	for (unsigned i = 0; i < sizeof(p2); i++)
		p2[i] = (uint8_t)(255 - i);
	struct emp_txframe t = { .hdr = hdr, .hdr_len = sizeof(hdr), .npieces = 2,
				 .piece = { { p1, sizeof(p1) }, { p2, sizeof(p2) } } };
	CHECK_EQ(S->tx_burst(r.port[0], &t, 1), 1);
	CHECK_EQ(drain(r.port[0], NULL, NULL), 0);
	CHECK_EQ(drain(r.port[2], NULL, NULL), 0);
	struct emp_rxframe f[4];
	CHECK_EQ(S->rx_burst(r.port[1], f, 4), 1);
	CHECK_EQ(f[0].len, sizeof(hdr) + sizeof(p1) + sizeof(p2));
	CHECK(!memcmp(f[0].data, hdr, sizeof(hdr)));
	CHECK(!memcmp(f[0].data + sizeof(hdr), p1, sizeof(p1)));
	CHECK(!memcmp(f[0].data + sizeof(hdr) + sizeof(p1), p2, sizeof(p2)));
	S->rx_release(r.port[1], 1);
	CHECK_EQ(S->rx_burst(r.port[1], f, 4), 0);
	uint8_t mac[6];
	S->mac(r.port[1], mac);
	CHECK(!memcmp(mac, MAC_B, 6));
	CHECK_EQ(S->mtu(r.port[1]), 1500);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.sent, 1);
	CHECK_EQ(st.delivered, 1);
	CHECK_EQ(st.lost + st.no_port + st.overflow + st.oversize, 0);
	rig_down(&r);
}

static void t_broadcast(void)
{
	struct rig r;
	rig_up(&r, NULL);
	uint8_t fr[64], got[64];
	uint32_t gl = 0;
	mkframe(fr, BCAST, MAC_A, 64, 9);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	CHECK_EQ(drain(r.port[0], NULL, NULL), 0);
	CHECK_EQ(drain(r.port[1], got, &gl), 1);
	CHECK(gl == 64 && !memcmp(got, fr, 64));
	CHECK_EQ(drain(r.port[2], got, &gl), 1);
	CHECK(gl == 64 && !memcmp(got, fr, 64));
	rig_down(&r);
}

static void t_unknown_mac(void)
{
	struct rig r;
	rig_up(&r, NULL);
	uint8_t fr[64];
	mkframe(fr, MAC_X, MAC_A, 64, 1);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(drain(r.port[i], NULL, NULL), 0);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.no_port, 1);
	CHECK_EQ(st.delivered, 0);
	rig_down(&r);
}

/* sends n frames A->B, draining B as it goes; marks in got[] which arrived */
static int run_pattern(uint64_t seed, uint32_t loss_ppm, int n, uint8_t *got)
{
	struct emp_sim_faults f = { .seed = seed, .loss_ppm = loss_ppm };
	struct rig r;
	rig_up(&r, &f);
	uint8_t fr[64];
	struct emp_rxframe rx[64];
	int recvd = 0;
	memset(got, 0, (size_t)n);
	for (int i = 0; i < n; i++) {
		mkframe(fr, MAC_B, MAC_A, 64, (uint32_t)i);
		CHECK_EQ(send1(r.port[0], fr, 64), 1);
		if (i % 32 == 31 || i == n - 1) {
			int k;
			while ((k = S->rx_burst(r.port[1], rx, 64)) > 0) {
				for (int j = 0; j < k; j++) {
					uint32_t s;
					memcpy(&s, rx[j].data + 14, 4);
					CHECK((int)s < n);
					got[s] = 1;
				}
				S->rx_release(r.port[1], (unsigned)k);
				recvd += k;
			}
		}
	}
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.sent, n);
	CHECK_EQ(st.lost + (uint64_t)recvd, n);
	rig_down(&r);
	return recvd;
}

static void t_loss_rate(void)
{
	enum { N = 100000 };
	static uint8_t got[N];
	int rx = run_pattern(42, 50000, N, got);   /* 5 %: expect 5000 lost, sd ~69 */
	int lost = N - rx;
	CHECK_MSG(lost > 4500 && lost < 5500, "lost %d of %d at 5%%", lost, N);
	rx = run_pattern(43, 1000, N, got);        /* 0.1 %: expect 100, sd 10 */
	lost = N - rx;
	CHECK_MSG(lost > 50 && lost < 150, "lost %d of %d at 0.1%%", lost, N);
	CHECK_EQ(run_pattern(44, 0, N, got), N);
}

static void t_determinism(void)
{
	enum { N = 20000 };
	static uint8_t a[N], b[N], c[N];
	run_pattern(7, 100000, N, a);
	run_pattern(7, 100000, N, b);
	run_pattern(8, 100000, N, c);
	CHECK(!memcmp(a, b, N));
	CHECK(memcmp(a, c, N) != 0);
}

static void t_delay(void)
{
	struct emp_sim_faults f = { .seed = 1, .delay_ns = 1000000 };
	struct rig r;
	rig_up(&r, &f);
	CHECK_EQ(emp_sim_wire_next_event(r.w), UINT64_MAX);
	uint8_t fr[64];
	mkframe(fr, MAC_B, MAC_A, 64, 1);
	r.now = 5000;
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	CHECK_EQ(emp_sim_wire_next_event(r.w), 5000 + 1000000);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 0);
	r.now = 5000 + 999999;
	CHECK_EQ(drain(r.port[1], NULL, NULL), 0);
	r.now = 5000 + 1000000;
	CHECK_EQ(drain(r.port[1], NULL, NULL), 1);
	CHECK_EQ(emp_sim_wire_next_event(r.w), UINT64_MAX);
	rig_down(&r);
}

static uint32_t rx_seq(void *port, int *ok)
{
	struct emp_rxframe f[1];
	*ok = S->rx_burst(port, f, 1) == 1;
	if (!*ok)
		return 0;
	uint32_t s;
	memcpy(&s, f[0].data + 14, 4);
	S->rx_release(port, 1);
	return s;
}

static void t_reorder(void)
{
	struct emp_sim_faults f = { .seed = 3, .reorder_ppm = 1000000, .reorder_ns = 500 };
	struct rig r;
	rig_up(&r, &f);
	uint8_t fr[64];
	int ok;
	mkframe(fr, MAC_B, MAC_A, 64, 1);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);                 /* held back 500 ns */
	f.reorder_ppm = 0;
	emp_sim_wire_set_faults(r.w, &f);
	mkframe(fr, MAC_B, MAC_A, 64, 2);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	CHECK_EQ(rx_seq(r.port[1], &ok), 2);
	CHECK(ok);
	rx_seq(r.port[1], &ok);
	CHECK(!ok);
	r.now += 500;
	CHECK_EQ(rx_seq(r.port[1], &ok), 1);
	CHECK(ok);
	/* reorder_ns 0: a reordered frame goes behind the next one sent at the same time */
	f.reorder_ppm = 1000000;
	f.reorder_ns = 0;
	emp_sim_wire_set_faults(r.w, &f);
	mkframe(fr, MAC_B, MAC_A, 64, 3);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	f.reorder_ppm = 0;
	emp_sim_wire_set_faults(r.w, &f);
	mkframe(fr, MAC_B, MAC_A, 64, 4);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	CHECK_EQ(rx_seq(r.port[1], &ok), 4);
	CHECK_EQ(rx_seq(r.port[1], &ok), 3);
	CHECK(ok);
	/* 10 % reordered over 1000 frames: all arrive once, some out of order */
	f.reorder_ppm = 100000;
	f.reorder_ns = 2000;
	emp_sim_wire_set_faults(r.w, &f);
	static uint8_t seen[1000];
	int inversions = 0, count = 0;
	uint32_t prev = 0;
	for (uint32_t i = 0; i < 1000; i++) {
		mkframe(fr, MAC_B, MAC_A, 64, 100 + i);
		CHECK_EQ(send1(r.port[0], fr, 64), 1);
		r.now += 100;
		uint32_t s;
		while ((s = rx_seq(r.port[1], &ok)), ok) {
			CHECK(s >= 100 && s < 1100 && !seen[s - 100]);
			seen[s - 100] = 1;
			inversions += s < prev;
			prev = s;
			count++;
		}
	}
	r.now += 10000;
	uint32_t s;
	while ((s = rx_seq(r.port[1], &ok)), ok) {
		CHECK(s >= 100 && s < 1100 && !seen[s - 100]);
		seen[s - 100] = 1;
		count++;
	}
	CHECK_EQ(count, 1000);
	CHECK(inversions > 10);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK(st.reordered > 50 && st.reordered < 160);
	rig_down(&r);
}

static void t_duplication(void)
{
	struct emp_sim_faults f = { .seed = 5, .dup_ppm = 1000000 };
	struct rig r;
	rig_up(&r, &f);
	uint8_t fr[200];
	mkframe(fr, MAC_B, MAC_A, 200, 77);
	CHECK_EQ(send1(r.port[0], fr, 200), 1);
	struct emp_rxframe rx[4];
	CHECK_EQ(S->rx_burst(r.port[1], rx, 4), 2);
	CHECK(rx[0].len == 200 && !memcmp(rx[0].data, fr, 200));
	CHECK(rx[1].len == 200 && !memcmp(rx[1].data, fr, 200));
	CHECK(rx[0].data != rx[1].data);
	S->rx_release(r.port[1], 2);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.duplicated, 1);
	CHECK_EQ(st.delivered, 2);
	rig_down(&r);
}

static void t_corruption(void)
{
	struct emp_sim_faults f = { .seed = 11, .corrupt_ppm = 1000000 };
	struct rig r;
	rig_up(&r, &f);
	uint8_t fr[100];
	for (uint32_t i = 0; i < 1000; i++) {
		mkframe(fr, MAC_B, MAC_A, 100, i);
		CHECK_EQ(send1(r.port[0], fr, 100), 1);
		struct emp_rxframe rx[1];
		CHECK_EQ(S->rx_burst(r.port[1], rx, 1), 1);
		CHECK_EQ(rx[0].len, 100);
		int bits = 0;
		for (int k = 0; k < 100; k++) {
			uint8_t d = rx[0].data[k] ^ fr[k];
			if (d)
				CHECK_MSG(k >= 14, "corrupted byte %d in the Ethernet header", k);
			bits += __builtin_popcount(d);
		}
		CHECK_EQ(bits, 1);
		S->rx_release(r.port[1], 1);
	}
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.corrupted, 1000);
	rig_down(&r);
}

static void t_overflow(void)
{
	struct emp_sim_faults f = { .seed = 1, .queue_frames = 16 };
	struct rig r;
	rig_up(&r, &f);
	uint8_t fr[64];
	mkframe(fr, MAC_B, MAC_A, 64, 1);
	struct emp_txframe t[20];
	for (int i = 0; i < 20; i++)
		t[i] = (struct emp_txframe){ .hdr = fr, .hdr_len = 64 };
	CHECK_EQ(S->tx_burst(r.port[0], t, 20), 20);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.overflow, 4);
	struct emp_rxframe rx[32];
	CHECK_EQ(S->rx_burst(r.port[1], rx, 32), 16);
	/* frames held by the reader still occupy slots */
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.overflow, 5);
	S->rx_release(r.port[1], 16);
	CHECK_EQ(send1(r.port[0], fr, 64), 1);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 1);
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.overflow, 5);
	rig_down(&r);
}

static void t_oversize(void)
{
	struct rig r;
	rig_up(&r, NULL);
	static uint8_t fr[9100];
	mkframe(fr, MAC_B, MAC_A, 1515, 1);
	send1(r.port[0], fr, 1515);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 0);
	mkframe(fr, MAC_B, MAC_A, 1514, 1);
	send1(r.port[0], fr, 1514);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 1);
	struct emp_sim_stats st;
	emp_sim_wire_stats(r.w, &st);
	CHECK_EQ(st.oversize, 1);
	CHECK_EQ(st.sent, 1);
	rig_down(&r);
	/* jumbo wire */
	struct emp_sim_faults f = { .mtu = 9000 };
	rig_up(&r, &f);
	CHECK_EQ(S->mtu(r.port[0]), 9000);
	mkframe(fr, MAC_B, MAC_A, 9014, 2);
	send1(r.port[0], fr, 9014);
	uint8_t *got = malloc(9100);
	uint32_t gl = 0;
	CHECK_EQ(drain(r.port[1], got, &gl), 1);
	CHECK(gl == 9014 && !memcmp(got, fr, 9014));
	mkframe(fr, MAC_B, MAC_A, 9015, 2);
	send1(r.port[0], fr, 9015);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 0);
	free(got);
	rig_down(&r);
}

static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void t_eventfd(void)
{
	struct rig r;
	rig_up(&r, NULL);
	int fd = S->wait_fd(r.port[1]);
	CHECK(fd >= 0);
	CHECK(!readable(fd));
	uint8_t fr[64];
	mkframe(fr, MAC_B, MAC_A, 64, 1);
	send1(r.port[0], fr, 64);
	CHECK(readable(fd));
	CHECK(!readable(S->wait_fd(r.port[2])));
	send1(r.port[0], fr, 64);
	struct emp_rxframe rx[1];
	CHECK_EQ(S->rx_burst(r.port[1], rx, 1), 1);
	CHECK(readable(fd));                           /* one still deliverable */
	CHECK_EQ(S->rx_burst(r.port[1], rx, 1), 1);
	CHECK(!readable(fd));
	S->rx_release(r.port[1], 2);
	rig_down(&r);
}

/* rx_burst twice before release: both batches stay valid; release is FIFO */
static void t_rx_hold(void)
{
	struct rig r;
	rig_up(&r, NULL);
	uint8_t fr[64];
	for (uint32_t i = 0; i < 8; i++) {
		mkframe(fr, MAC_B, MAC_A, 64, i);
		send1(r.port[0], fr, 64);
	}
	struct emp_rxframe a[4], b[4];
	CHECK_EQ(S->rx_burst(r.port[1], a, 4), 4);
	CHECK_EQ(S->rx_burst(r.port[1], b, 4), 4);
	for (uint32_t i = 0; i < 4; i++) {
		uint32_t s;
		memcpy(&s, a[i].data + 14, 4);
		CHECK_EQ(s, i);
		memcpy(&s, b[i].data + 14, 4);
		CHECK_EQ(s, i + 4);
	}
	S->rx_release(r.port[1], 4);
	/* new frames must not land in b's slots */
	for (uint32_t i = 0; i < 4; i++) {
		mkframe(fr, MAC_B, MAC_A, 64, 100 + i);
		send1(r.port[0], fr, 64);
	}
	for (uint32_t i = 0; i < 4; i++) {
		uint32_t s;
		memcpy(&s, b[i].data + 14, 4);
		CHECK_EQ(s, i + 4);
	}
	S->rx_release(r.port[1], 4);
	CHECK_EQ(drain(r.port[1], NULL, NULL), 4);
	rig_down(&r);
}

struct thr_arg {
	void *port;
	uint8_t src;
	int n;
};

static void *sender(void *v)
{
	struct thr_arg *a = v;
	uint8_t fr[64], me[6] = { 2, 0, 0, 0, 1, a->src };
	for (int i = 0; i < a->n; i++) {
		mkframe(fr, MAC_B, me, 64, (uint32_t)i);
		send1(a->port, fr, 64);
	}
	return NULL;
}

static void t_threads(void)
{
	struct emp_sim_faults f = { .queue_frames = 1 << 16 };
	struct rig r;
	rig_up(&r, &f);
	struct thr_arg a[2] = { { r.port[0], 1, 20000 }, { r.port[2], 2, 20000 } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, sender, &a[i]);
	int got = 0;
	uint32_t next[3] = { 0, 0, 0 };
	while (got < 40000) {
		struct emp_rxframe rx[64];
		int n = S->rx_burst(r.port[1], rx, 64);
		for (int j = 0; j < n; j++) {
			uint32_t s;
			memcpy(&s, rx[j].data + 14, 4);
			uint8_t src = rx[j].data[11];
			CHECK(src == 1 || src == 2);
			CHECK_EQ(s, next[src]);              /* per-sender order kept */
			next[src]++;
		}
		S->rx_release(r.port[1], (unsigned)n);
		got += n;
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	rig_down(&r);
}

static void t_open_errors(void)
{
	struct rig r;
	rig_up(&r, NULL);
	char err[128] = "";
	void *p = NULL;
	struct emp_dev_params prm = { .wire = r.w, .mac = MAC_A, .err = err, .errlen = sizeof(err) };
	CHECK_EQ(S->open(&prm, &p), -EADDRINUSE);
	CHECK(strstr(err, "MAC"));
	prm.mac = BCAST;
	CHECK_EQ(S->open(&prm, &p), -EINVAL);
	prm.wire = NULL;
	prm.mac = MAC_X;
	CHECK_EQ(S->open(&prm, &p), -EINVAL);
	/* destroying the wire before its ports is safe: it goes with the last port */
	emp_sim_wire_destroy(r.w);
	for (int i = 0; i < 3; i++)
		S->close(r.port[i]);
}

static void t_driver_find(void)
{
	CHECK(emp__driver_find("sim") == &emp__sim_ops);
	CHECK(emp__driver_find("afpacket") == &emp__afpacket_ops);
	CHECK(emp__driver_find(NULL) == &emp__afpacket_ops);
	CHECK(emp__driver_find("") == &emp__afpacket_ops);
	CHECK(emp__driver_find("tigon2") == NULL);
}

/* afpacket error paths that need neither root nor a namespace */
static void t_afpacket_errors(void)
{
	const struct emp_driver_ops *A = &emp__afpacket_ops;
	char err[160] = "";
	void *p = NULL;
	struct emp_dev_params prm = { .ethertype = 0x88b5, .endpoint = 1, .err = err, .errlen = sizeof(err) };
	CHECK_EQ(A->open(&prm, &p), -EINVAL);
	CHECK(strstr(err, "no interface"));
	prm.ifname = "emp-nonexist9";
	int rc = A->open(&prm, &p);
	CHECK_MSG(rc == -ENODEV || rc == -EPERM, "rc %d: %s", rc, err);
	if (rc == -ENODEV)
		CHECK_MSG(strstr(err, "emp-nonexist9") != NULL, "%s", err);
	else
		CHECK_MSG(strstr(err, "CAP_NET_RAW") != NULL, "%s", err);
}

static const struct emp_test tests[] = {
	{ "sim_unicast_intact", t_unicast_intact, 0 },
	{ "sim_broadcast", t_broadcast, 0 },
	{ "sim_unknown_mac", t_unknown_mac, 0 },
	{ "sim_loss_rate", t_loss_rate, 0 },
	{ "sim_determinism", t_determinism, 0 },
	{ "sim_delay", t_delay, 0 },
	{ "sim_reorder", t_reorder, 0 },
	{ "sim_duplication", t_duplication, 0 },
	{ "sim_corruption_one_bit", t_corruption, 0 },
	{ "sim_queue_overflow", t_overflow, 0 },
	{ "sim_oversize_rejected", t_oversize, 0 },
	{ "sim_eventfd", t_eventfd, 0 },
	{ "sim_rx_hold_release", t_rx_hold, 0 },
	{ "sim_threads", t_threads, 0 },
	{ "sim_open_errors", t_open_errors, 0 },
	{ "driver_find", t_driver_find, 0 },
	{ "driver_afpacket_errors", t_afpacket_errors, 0 },
};

const struct emp_test_suite emp_suite_sim = { "sim", tests, sizeof(tests) / sizeof(tests[0]) };
