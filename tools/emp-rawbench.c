/* emp-rawbench.c: the raw-frame floor: AF_PACKET ping-pong and blast, one frame per system call. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

/*
 * Frames: Ethernet header with EtherType 0x88B5, then a header shaped like
 * EMP's common header but with version 0 (so no EMP engine accepts it) and
 * dst_ep 0xfffe:   14 csum(4)=0  18 version=0  19 type  20 flags(2)
 *                  22 dst_ep(2)  24 seq(4)  28 report body (3 x u64)
 * SIZE (-m) counts the bytes after the Ethernet header, the part the MTU
 * bounds, so -m 1500 fills a 1500-byte MTU; frames are SIZE + 14 bytes.
 * Throughput counts SIZE bytes per frame received by the server.
 */

#define ETYPE      0x88B5
#define T_PING     0xE1
#define T_BLAST    0xE2
#define T_FIN      0xE3
#define T_REPORT   0xE4
#define MIN_SIZE   46
#define MAX_FRAME  (14 + 65535)

static int fd = -1;
static uint8_t own_mac[6], peer_mac[6];
static unsigned if_mtu;
static long spin_us = 100000;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "emp-rawbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void on_signal(int s)
{
	(void)s;
	stop = 1;
}

static void put32(uint8_t *p, uint32_t v) { v = htonl(v); memcpy(p, &v, 4); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return ntohl(v); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v = v << 8 | p[i]; return v; }

static void open_if(const char *ifn)
{
	fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETYPE));
	if (fd < 0) {
		if (errno == EPERM)
			fprintf(stderr, "emp-rawbench: AF_PACKET needs CAP_NET_RAW (run as root)\n");
		else
			perror("emp-rawbench: socket");
		exit(1);
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifn);
	if (ioctl(fd, SIOCGIFINDEX, &ifr) < 0)
		die(ifn);
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETYPE),
				   .sll_ifindex = ifr.ifr_ifindex };
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) < 0)
		die("SIOCGIFHWADDR");
	memcpy(own_mac, ifr.ifr_hwaddr.sa_data, 6);
	if (ioctl(fd, SIOCGIFMTU, &ifr) < 0)
		die("SIOCGIFMTU");
	if_mtu = (unsigned)ifr.ifr_mtu;
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		die("bind");
	int big = 16 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
}

static void mkframe(uint8_t *f, const uint8_t *dst, int type, uint32_t seq)
{
	memcpy(f, dst, 6);
	memcpy(f + 6, own_mac, 6);
	f[12] = ETYPE >> 8;
	f[13] = ETYPE & 0xff;
	memset(f + 14, 0, 14);
	f[19] = (uint8_t)type;
	f[22] = 0xff;
	f[23] = 0xfe;
	put32(f + 24, seq);
}

static void xsend(const uint8_t *f, size_t len)
{
	while (send(fd, f, len, 0) < 0) {
		if (errno == EINTR && !stop)
			continue;
		if (errno == ENOBUFS || errno == EAGAIN)
			continue;
		die("send");
	}
}

/* One frame per recv(): spin with MSG_DONTWAIT for spin_us after the last
 * frame, then block in poll() (up to timeout_ms; -1 forever). 0 on timeout. */
static ssize_t xrecv(uint8_t *buf, size_t len, int timeout_ms)
{
	static uint64_t last;
	uint64_t t0 = now_ns();
	for (;;) {
		ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
		if (n >= 0) {
			last = now_ns();
			return n;
		}
		if (errno != EAGAIN && errno != EINTR)
			die("recv");
		if (stop)
			return -1;
		uint64_t t = now_ns();
		if (timeout_ms >= 0 && t - t0 >= (uint64_t)timeout_ms * 1000000ull)
			return 0;
		if (t - last < (uint64_t)spin_us * 1000)
			continue;
		struct pollfd p = { fd, POLLIN, 0 };
		int left = timeout_ms < 0 ? 1000 : timeout_ms - (int)((t - t0) / 1000000);
		if (left < 1)
			left = 1;
		poll(&p, 1, left);
	}
}

static int is_ours(const uint8_t *f, ssize_t n)
{
	return n >= 28 && f[12] == (ETYPE >> 8) && f[13] == (ETYPE & 0xff) && f[18] == 0;
}

static int server(void)
{
	static uint8_t buf[MAX_FRAME];
	uint64_t bytes = 0, frames = 0, t_first = 0, t_last = 0, echoed = 0;
	uint32_t last_fin = 0;
	uint8_t report[14 + MIN_SIZE];
	int have_report = 0;
	fprintf(stderr, "emp-rawbench: server on %02x:%02x:%02x:%02x:%02x:%02x mtu %u\n",
		own_mac[0], own_mac[1], own_mac[2], own_mac[3], own_mac[4], own_mac[5], if_mtu);
	while (!stop) {
		ssize_t n = xrecv(buf, sizeof(buf), -1);
		if (n <= 0)
			continue;
		int type = is_ours(buf, n) ? buf[19] : 0;
		if (type == T_BLAST) {
			if (!frames)
				t_first = now_ns();
			t_last = now_ns();
			frames++;
			bytes += (uint64_t)n - 14;
		} else if (type == T_FIN) {
			uint32_t id = get32(buf + 24);
			if (!have_report || id != last_fin) {
				mkframe(report, buf + 6, T_REPORT, id);
				memset(report + 28, 0, sizeof(report) - 28);
				put64(report + 28, bytes);
				put64(report + 36, frames);
				put64(report + 44, frames > 1 ? t_last - t_first : 0);
				last_fin = id;
				have_report = 1;
				fprintf(stderr, "emp-rawbench: blast received %llu frames, %llu bytes\n",
					(unsigned long long)frames, (unsigned long long)bytes);
				bytes = frames = 0;
			}
			xsend(report, sizeof(report));
		} else if (type != T_REPORT) {  /* echo everything else */
			uint8_t tmp[6];
			memcpy(tmp, buf, 6);
			memcpy(buf, buf + 6, 6);
			memcpy(buf + 6, tmp, 6);
			xsend(buf, (size_t)n);
			echoed++;
		}
	}
	fprintf(stderr, "emp-rawbench: server done, %llu frames echoed\n", (unsigned long long)echoed);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void pingpong(unsigned size, long iters, int json, int first)
{
	static uint8_t f[MAX_FRAME], r[MAX_FRAME];
	uint64_t *rtt = calloc((size_t)iters, sizeof(*rtt));
	if (!rtt)
		die("calloc");
	long warm = iters / 10 < 1000 ? iters / 10 : 1000;
	long lost = 0;
	static uint32_t seq;
	for (unsigned i = 28; i < size + 14; i++)
		f[i] = (uint8_t)i;
	for (long i = -warm; i < iters && !stop; i++) {
		mkframe(f, peer_mac, T_PING, ++seq);
		int tries = 0;
		uint64_t t0 = now_ns();
		xsend(f, size + 14);
		for (;;) {
			ssize_t n = xrecv(r, sizeof(r), 200);
			if (n < 0)
				break;
			if (n == 0) {           /* lost: send again */
				lost++;
				if (++tries > 50) {
					fprintf(stderr, "emp-rawbench: no answer from the server\n");
					exit(1);
				}
				t0 = now_ns();
				xsend(f, size + 14);
				continue;
			}
			if (is_ours(r, n) && r[19] == T_PING && get32(r + 24) == seq &&
			    (size_t)n == size + 14)
				break;
		}
		if (i >= 0)
			rtt[i] = now_ns() - t0;
	}
	qsort(rtt, (size_t)iters, sizeof(*rtt), cmp_u64);
	double sum = 0;
	for (long i = 0; i < iters; i++)
		sum += (double)rtt[i];
	double med = rtt[iters / 2] / 2000.0, mean = sum / iters / 2000.0;
	double p99 = rtt[(long)(iters * 0.99)] / 2000.0, mn = rtt[0] / 2000.0;
	if (json)
		printf("%s{\"size\":%u,\"half_rtt_us\":%.3f,\"mean_us\":%.3f,\"min_us\":%.3f,"
		       "\"p99_us\":%.3f,\"iters\":%ld,\"resent\":%ld}", first ? "" : ",",
		       size, med, mean, mn, p99, iters, lost);
	else
		printf("%7u B  half-RTT median %7.3f us  mean %7.3f  min %7.3f  p99 %7.3f  (%ld iters)\n",
		       size, med, mean, mn, p99, iters);
	fflush(stdout);
	free(rtt);
}

static void blast(unsigned size, double secs, int json, int first)
{
	static uint8_t f[MAX_FRAME], r[MAX_FRAME];
	uint32_t id = (uint32_t)now_ns() | 1;
	for (unsigned i = 28; i < size + 14; i++)
		f[i] = (uint8_t)(i * 7);
	mkframe(f, peer_mac, T_BLAST, 0);
	uint64_t sent = 0, t0 = now_ns(), end = t0 + (uint64_t)(secs * 1e9), t;
	do {
		for (int k = 0; k < 64; k++) {
			put32(f + 24, (uint32_t)sent);
			xsend(f, size + 14);
			sent++;
		}
		t = now_ns();
	} while (t < end && !stop);
	uint64_t tx_ns = t - t0;
	usleep(50000);                  /* let the server drain its queue */
	uint8_t fin[14 + MIN_SIZE];
	memset(fin, 0, sizeof(fin));
	mkframe(fin, peer_mac, T_FIN, id);
	for (int tries = 0;; tries++) {
		if (tries == 20) {
			fprintf(stderr, "emp-rawbench: no report from the server\n");
			exit(1);
		}
		xsend(fin, sizeof(fin));
		ssize_t n;
		int got = 0;
		while ((n = xrecv(r, sizeof(r), 200)) > 0)
			if (is_ours(r, n) && r[19] == T_REPORT && get32(r + 24) == id && n >= 52) {
				got = 1;
				break;
			}
		if (got)
			break;
	}
	uint64_t bytes = get64(r + 28), frames = get64(r + 36), ns = get64(r + 44);
	if (!ns)
		ns = tx_ns;
	double mbps = bytes * 8.0 / ns * 1000.0;
	double tx_mbps = sent * (double)size * 8.0 / tx_ns * 1000.0;
	if (json)
		printf("%s{\"size\":%u,\"mbps\":%.1f,\"tx_mbps\":%.1f,\"frames_sent\":%llu,"
		       "\"frames_rcvd\":%llu,\"seconds\":%.3f}", first ? "" : ",", size, mbps, tx_mbps,
		       (unsigned long long)sent, (unsigned long long)frames, ns / 1e9);
	else
		printf("%7u B  received %.3f Gbit/s (%llu of %llu frames, %.1f%% lost), sent %.3f Gbit/s\n",
		       size, mbps / 1000, (unsigned long long)frames, (unsigned long long)sent,
		       sent ? 100.0 * (double)(sent - frames) / (double)sent : 0.0, tx_mbps / 1000);
	fflush(stdout);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: emp-rawbench -i IFNAME -s                         server: echo frames, count blasts\n"
		"       emp-rawbench -i IFNAME -c PEER_MAC [-m SIZES] [-n ITERS]   ping-pong half round trip\n"
		"       emp-rawbench -i IFNAME --blast -c PEER_MAC [-m SIZES] [-t SECONDS]   throughput\n"
		"  SIZES: bytes after the 14-byte Ethernet header, comma list (default 64); the\n"
		"  frame is SIZE+14 bytes and SIZE must fit the MTU. One frame per system call.\n"
		"  --json  print {\"results\":[...]}   --spin-us N  busy-poll N us before blocking\n");
	exit(2);
}

static int parse_mac(const char *s, uint8_t m[6])
{
	unsigned v[6];
	char c;
	if (sscanf(s, "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &c) != 6)
		return -1;
	for (int i = 0; i < 6; i++) {
		if (v[i] > 255)
			return -1;
		m[i] = (uint8_t)v[i];
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *ifn = NULL, *sizes = "64", *peer = NULL;
	int srv = 0, do_blast = 0, json = 0;
	long iters = 10000;
	double secs = 3;
	static const struct option lo[] = {
		{ "blast", no_argument, 0, 'b' }, { "json", no_argument, 0, 'j' },
		{ "spin-us", required_argument, 0, 'S' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 } };
	int o;
	while ((o = getopt_long(argc, argv, "i:sc:m:n:t:h", lo, NULL)) != -1) {
		switch (o) {
		case 'i': ifn = optarg; break;
		case 's': srv = 1; break;
		case 'c': peer = optarg; break;
		case 'm': sizes = optarg; break;
		case 'n': iters = atol(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'b': do_blast = 1; break;
		case 'j': json = 1; break;
		case 'S': spin_us = atol(optarg); break;
		default: usage();
		}
	}
	if (!ifn || (!srv && !peer) || iters < 1 || !(secs > 0))
		usage();
	if (peer && parse_mac(peer, peer_mac) < 0) {
		fprintf(stderr, "emp-rawbench: bad MAC '%s'\n", peer);
		return 2;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	open_if(ifn);
	if (srv)
		return server();

	if (json)
		printf("{\"results\":[");
	char *list = strdup(sizes);
	int first = 1;
	for (char *tok = strtok(list, ","); tok && !stop; tok = strtok(NULL, ",")) {
		long size = atol(tok);
		if (size < MIN_SIZE || size > (long)if_mtu) {
			fprintf(stderr, "emp-rawbench: size %ld outside %d..%u (the MTU)\n", size, MIN_SIZE, if_mtu);
			return 2;
		}
		if (do_blast)
			blast((unsigned)size, secs, json, first);
		else
			pingpong((unsigned)size, iters, json, first);
		first = 0;
	}
	if (json)
		printf("]}\n");
	free(list);
	return 0;
}
