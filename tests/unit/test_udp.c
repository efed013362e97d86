/* test_udp.c: the UDP backend on the loopback interface: GSO batches split back into the frames sent, and datagrams whose outer sender does not match the frame dropped and counted. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "runner.h"
#include "conf.h"
#include "driver.h"
#include "emp.h"
#include "proto.h"

#define EP_A 61001
#define EP_B 61002

static const struct emp_dev_host lo_host = { { 0, 0, 0, 0, 0, 0 }, 0 };

/* params for an endpoint on lo whose only host is lo_host at 127.0.0.1 */
static struct emp_dev_params lo_params(uint16_t ep, struct emp_dev_host *h, char *err, size_t errlen)
{
	*h = lo_host;
	h->ip = htonl(INADDR_LOOPBACK);
	err[0] = 0;
	return (struct emp_dev_params){ .ifname = "lo", .endpoint = ep, .hosts = h, .nhosts = 1,
					.err = err, .errlen = errlen };
}

static void *open_lo(uint16_t ep)
{
	struct emp_dev_host h;
	char err[256];
	struct emp_dev_params p = lo_params(ep, &h, err, sizeof err);
	void *d = NULL;
	int rc = emp__udp_ops.open(&p, &d);
	CHECK_MSG(rc == 0, "open on lo: %s", err);
	return d;
}

/* an EMP-looking frame header from ep src to ep dst (Ethernet + common header) */
static void mkhdr(uint8_t *h, uint16_t src, uint16_t dst, const uint8_t smac[6])
{
	memset(h, 0, EMP_ETH_HLEN + EMP_HDR_LEN);
	memcpy(h + 6, smac, 6);
	h[12] = 0x88, h[13] = 0xb5;
	h[EMP_OFF_DST_EP] = (uint8_t)(dst >> 8), h[EMP_OFF_DST_EP + 1] = (uint8_t)dst;
	h[EMP_ETH_HLEN + EMP_C_SRC_EP] = (uint8_t)(src >> 8), h[EMP_ETH_HLEN + EMP_C_SRC_EP + 1] = (uint8_t)src;
}

/* frames into f until want arrived or 2 s passed; returns how many */
static int collect(void *d, uint8_t (*out)[2048], unsigned *lens, int want)
{
	int got = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (got < want) {
		struct emp_rxframe f[32];
		int n = emp__udp_ops.rx_burst(d, f, 32);
		for (int i = 0; i < n && got < want; i++) {
			CHECK(f[i].len <= 2048);
			memcpy(out[got], f[i].data, f[i].len);
			lens[got++] = f[i].len;
		}
		if (n > 0) {
			emp__udp_ops.rx_release(d, (unsigned)n);
			continue;
		}
		struct pollfd pf = { emp__udp_ops.wait_fd(d), POLLIN, 0 };
		poll(&pf, 1, 50);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 2)
			break;
	}
	return got;
}

static uint8_t rx[512][2048];
static unsigned rxlen[512];

/* 100 frames of 1440 bytes and a short last one, one tx_burst: they arrive
 * intact and in order, in fewer datagrams than frames (GSO + GRO) */
static void t_udp_gso(void)
{
	void *a = open_lo(EP_A), *b = open_lo(EP_B);
	static uint8_t hdr[101][64], pay[101][1500];
	struct emp_txframe f[101];
	for (int i = 0; i < 101; i++) {
		mkhdr(hdr[i], EP_A, EP_B, lo_host.mac);
		unsigned len = i == 100 ? 300 : 1400;
		for (unsigned j = 0; j < len; j++)
			pay[i][j] = (uint8_t)(i * 7 + j);
		f[i] = (struct emp_txframe){ .hdr = hdr[i], .hdr_len = EMP_ETH_HLEN + EMP_HDR_LEN, .npieces = 1 };
		f[i].piece[0].p = pay[i];
		f[i].piece[0].len = len;
	}
	CHECK_EQ(emp__udp_ops.tx_burst(a, f, 101), 101);
	CHECK_EQ(collect(b, rx, rxlen, 101), 101);
	for (int i = 0; i < 101; i++) {
		unsigned hl = EMP_ETH_HLEN + EMP_HDR_LEN, len = i == 100 ? 300 : 1400;
		CHECK_EQ(rxlen[i], hl + len);
		CHECK(!memcmp(rx[i], hdr[i], hl) && !memcmp(rx[i] + hl, pay[i], len));
	}
	uint64_t dg, fr, bad;
	emp__udp_counts(b, &dg, &fr, &bad);
	CHECK_EQ(fr, 101);
	CHECK_EQ(bad, 0);
	CHECK_MSG(dg <= 101 / 2, "%llu datagrams for 101 frames: no GSO/GRO batching", (unsigned long long)dg);
	CHECK_EQ(emp__udp_ops.mtu(b), 65535 - 28 - 14);
	emp__udp_ops.close(a);
	emp__udp_ops.close(b);
}

/* datagrams to B's port from a plain socket: garbage, a frame whose source
 * endpoint is not the datagram's source port, one from a MAC not in the
 * config, one that names B's own port as its source: all dropped and
 * counted; then a matching one is delivered */
static void t_udp_hostile(void)
{
	void *b = open_lo(EP_B);
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(EP_A), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in to = me;
	to.sin_port = htons(EP_B);
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&me, sizeof me) == 0);
	uint8_t fr[200];
	static const uint8_t stranger[6] = { 2, 9, 9, 9, 9, 9 };
	CHECK_EQ(sendto(s, "xyz", 3, 0, (struct sockaddr *)&to, sizeof to), 3);
	mkhdr(fr, 4242, EP_B, lo_host.mac);                     /* source endpoint != source port */
	CHECK_EQ(sendto(s, fr, sizeof fr, 0, (struct sockaddr *)&to, sizeof to), (long)sizeof fr);
	mkhdr(fr, EP_A, EP_B, stranger);                        /* MAC no config host has */
	CHECK_EQ(sendto(s, fr, sizeof fr, 0, (struct sockaddr *)&to, sizeof to), (long)sizeof fr);
	mkhdr(fr, EP_A, EP_B, lo_host.mac);
	memcpy(fr + 100, "good", 4);
	CHECK_EQ(sendto(s, fr, sizeof fr, 0, (struct sockaddr *)&to, sizeof to), (long)sizeof fr);
	CHECK_EQ(collect(b, rx, rxlen, 1), 1);
	CHECK_EQ(rxlen[0], sizeof fr);
	CHECK(!memcmp(rx[0] + 100, "good", 4));
	uint64_t dg, frames, bad;
	emp__udp_counts(b, &dg, &frames, &bad);
	CHECK_EQ(bad, 3);
	CHECK_EQ(frames, 1);
	CHECK_EQ(emp__udp_ops.rx_dropped(b), 3);
	close(s);
	emp__udp_ops.close(b);
}

/* a second endpoint with the same id cannot bind its port: EADDRINUSE */
static void t_udp_port_taken(void)
{
	void *a = open_lo(EP_A);
	struct emp_dev_host h;
	char err[256];
	struct emp_dev_params p = lo_params(EP_A, &h, err, sizeof err);
	void *d = NULL;
	CHECK_EQ(emp__udp_ops.open(&p, &d), -EADDRINUSE);
	CHECK(strstr(err, "port 61001"));
	p.nhosts = 0;                                           /* own MAC not in the config */
	CHECK_EQ(emp__udp_ops.open(&p, &d), -ENOENT);
	p = lo_params(0, &h, err, sizeof err);                  /* id 0: no port of its own */
	CHECK_EQ(emp__udp_ops.open(&p, &d), -EINVAL);
	CHECK(strstr(err, "endpoint id 0"));
	emp__udp_ops.close(a);
}

/* one burst of 400 frames in 4 pieces each (2000 iovecs, more than one
 * sendmmsg's worth): every frame arrives intact and in order */
static void t_udp_big_burst(void)
{
	enum { N = 400, PL = 300 };
	void *a = open_lo(EP_A), *b = open_lo(EP_B);
	static uint8_t hdr[N][64], pay[N][EMP_TX_PIECES][PL];
	static struct emp_txframe f[N];
	for (int i = 0; i < N; i++) {
		mkhdr(hdr[i], EP_A, EP_B, lo_host.mac);
		f[i] = (struct emp_txframe){ .hdr = hdr[i], .hdr_len = EMP_ETH_HLEN + EMP_HDR_LEN, .npieces = EMP_TX_PIECES };
		for (int j = 0; j < EMP_TX_PIECES; j++) {
			for (int k = 0; k < PL; k++)
				pay[i][j][k] = (uint8_t)(i * 31 + j * 7 + k);
			f[i].piece[j].p = pay[i][j];
			f[i].piece[j].len = PL;
		}
	}
	int sent = 0;
	for (int tries = 0; sent < N && tries < 100; tries++) {
		int r = emp__udp_ops.tx_burst(a, f + sent, N - sent);
		CHECK(r >= 0);
		sent += r;
	}
	CHECK_EQ(sent, N);
	CHECK_EQ(collect(b, rx, rxlen, N), N);
	unsigned hl = EMP_ETH_HLEN + EMP_HDR_LEN;
	for (int i = 0; i < N; i++) {
		CHECK_EQ(rxlen[i], hl + EMP_TX_PIECES * PL);
		CHECK_MSG(!memcmp(rx[i], hdr[i], hl) && !memcmp(rx[i] + hl, pay[i], sizeof pay[i]),
			  "frame %d damaged", i);
	}
	emp__udp_ops.close(a);
	emp__udp_ops.close(b);
}

/* EMP_TRANSPORT names the transport for one process: anything but afpacket
 * or udp is refused with a clear error before a device is opened */
static void t_udp_env(void)
{
	struct emp_conf c;
	emp_conf_defaults(&c);
	emp_endpoint_t *ep = NULL;
	struct emp_open_opts o = { .conf = &c, .endpoint = 7, .no_progress_thread = 1 };
	CHECK(setenv("EMP_TRANSPORT", "raw;rm -rf /", 1) == 0);
	CHECK_EQ(emp_open(&ep, &o), -EINVAL);
	CHECK_MSG(strstr(emp_last_error(), "EMP_TRANSPORT"), "%s", emp_last_error());
	unsetenv("EMP_TRANSPORT");
}

static const struct emp_test tests[] = {
	{ "udp_gso_split", t_udp_gso, 20 },
	{ "udp_hostile_sender", t_udp_hostile, 20 },
	{ "udp_port_taken", t_udp_port_taken, 20 },
	{ "udp_big_burst", t_udp_big_burst, 20 },
	{ "udp_env_transport", t_udp_env, 20 },
};
const struct emp_test_suite emp_suite_udp = { "udp", tests, sizeof(tests) / sizeof(tests[0]) };
