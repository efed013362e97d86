/* afp_bulk.c: the AF_PACKET backend's bulk receive socket: the frames of long messages skip the rx ring and are copied out by the thread that reads them (recvmmsg), on its own CPU. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/if_packet.h>

#include "afp_int.h"
#include "proto.h"
#include "sys.h"

/*
 * The rx ring's copy (tpacket_rcv) runs where the frame is received: in the
 * softirq of whichever CPU delivers it. On veth that is the sender's CPU,
 * inside its sendto, so a bulk stream's receive copy is charged to the
 * sender, which two machines never do; a frame left in a plain socket's
 * queue is copied by the receiving thread's recvmmsg instead, on its CPU (as
 * kernel TCP copies in recvmsg). A ring, though, is what a spinning waiter
 * can look at without a system call, which a ping-pong's latency needs.
 *
 * So an endpoint may have two receive sockets, split by their BPF filters:
 * the DATA frames of messages of at least AFP_BULK_MIN bytes go to the bulk
 * socket bfd, except each message's frame 0, its last frame and those asking
 * for an ack; those and everything else (acks, control, short messages) go
 * to fd and its ring. Any of them in the ring says that a long message is
 * arriving: for AFP_BULK_ACTIVE_NS after the latest such evidence a drive
 * looks at bfd (one recvmmsg for up to AFP_BULK_POOL frames, handed out over
 * the engine's bursts), unless the last look found it short and was less
 * than look_ns ago (32-256 us, longer while looks come back full: the last
 * frame and those asking for an ack force a look, so the pace only spreads
 * the copying; 8-64 us made the receiver's system calls per MB 70-83, above
 * kernel TCP's, for no more throughput); otherwise at most every
 * AFP_BULK_IDLE_NS (a frame 0 lost and sent again later). Waiters sleep on
 * both sockets (wait_fd and wait_fd2). Not on an epoll fd holding both: its
 * entry on bfd's wait queue ran for every frame queued there, inside the
 * sender's sendto on veth (4 % of the sender's CPU, 6.2-6.5 against 7.0
 * Gbit/s).
 *
 * Off unless asked for (emp__afp_bulk_wanted: EMP_AFP_BULK=1, or auto for a
 * veth without RPS). EMP_AFP_RX=socket, where no ring is built at all, has
 * no split. A socket buffer the process cannot raise to AFP_BULK_RCVBUF (no
 * CAP_NET_ADMIN, a low rmem_max) leaves the split off too: a bulk queue that
 * small drops frames.
 */

#define AFP_BULK_MIN        (32u << 10)       /* message length that goes to bfd */
#define AFP_BULK_RCVBUF     (16u << 20)
#define AFP_BULK_RCVBUF_MIN (4u << 20)
#define AFP_BULK_ACTIVE_NS  2000000ull
#define AFP_BULK_IDLE_NS    200000ull
#define AFP_BULK_LOOK_NS    32000ull
#define AFP_BULK_LOOK_MAX   256000ull
#define AFP_BULK_HDR        (EMP_ETH_HLEN + EMP_HDR_LEN + EMP_D_MSG_LEN + 4)   /* bytes a frame needs for the test */
#define POOL_OFF            2                 /* the EMP header after the MAC header 16-aligned */

static uint64_t mono_ns(void)
{
	return emp__afp_clock_ns(CLOCK_MONOTONIC);
}

/* Whether frames reaching ifname are received on the sending CPU: a veth
 * (its peer's transmit delivers in the sender's softirq) whose receive
 * queues steer nothing elsewhere (every rps_cpus mask zero or unreadable). */
static int rx_on_sender(const struct afp *a, const char *ifname)
{
	struct ethtool_drvinfo di = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	ifr.ifr_data = (void *)&di;
	if (emp__sys_ioctl(a->txfd, SIOCETHTOOL, &ifr) < 0 || strcmp(di.driver, "veth"))
		return 0;
	for (int q = 0; q < 64; q++) {
		char path[96], buf[160];
		snprintf(path, sizeof(path), "/sys/class/net/%s/queues/rx-%d/rps_cpus", ifname, q);
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd < 0)
			break;
		ssize_t n = emp__sys_read(fd, buf, sizeof(buf) - 1);
		emp__sys_close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != '0' && buf[i] != ',' && buf[i] != '\n')
				return 0;            /* steered to another CPU: received there */
	}
	return 1;
}

/* EMP_AFP_BULK=1 (on), auto (on only where the receive copy would otherwise
 * run on the sender's CPU: rx_on_sender), else off (the default).
 *
 * Not on by default: the split moves the receive copy, it does not remove
 * it, and a plain socket's copy costs more than the ring's (skbs queued and
 * freed, a system call per look). It pays where the sender is the
 * bottleneck and the receiver has CPU to spare (one iperf3 stream on veth:
 * 5.65-6.69 against 5.39-6.16 Gbit/s); where the receiver is (wrk -t1
 * taking nginx's 1 MiB responses on veth: 608-665 against 786-962 req/s), or
 * where the receive path already runs on the receiver's CPU (two machines;
 * veth with RPS, scripts/cluster --rx-cpu: iperf3 4.1-6.4 against the
 * ring's 6.2-10.8 Gbit/s, pinned), it costs (2026-11-27, README). */
int emp__afp_bulk_wanted(const struct afp *a, const char *ifname)
{
	const char *e = secure_getenv("EMP_AFP_BULK");
	const char *rx = secure_getenv("EMP_AFP_RX");
	if (!e || (rx && !strcmp(rx, "socket")))
		return 0;                        /* off; or no ring at all: nothing to split */
	if (!strcmp(e, "1") || !strcmp(e, "on"))
		return 1;
	return !strcmp(e, "auto") && rx_on_sender(a, ifname);
}

/* The BPF program of fd (bulk 0: what is not bulk) or bfd (bulk 1: only bulk),
 * for EtherType a->etype and endpoint a->epid; a->bulk 0: no split (every EMP
 * frame to us). code has room for AFP_BPF_MAX; returns the length. */
unsigned emp__afp_bulk_filter(const struct afp *a, int bulk, struct sock_filter *code)
{
	unsigned ACC = 0x40000;
	/* jumps are relative: the last two instructions accept (len-2) and drop (len-1) */
	if (!a->bulk) {
		struct sock_filter plain[] = {
			BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_ETHERTYPE),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, a->etype, 0, 3),
			BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_DST_EP),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, a->epid, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, ACC),
			BPF_STMT(BPF_RET | BPF_K, 0),
		};
		memcpy(code, plain, sizeof(plain));
		return sizeof(plain) / sizeof(plain[0]);
	}
	/* not ours: 0. Ours and bulk (DATA without LAST or ACKREQ, msg_len >=
	 * AFP_BULK_MIN, frame > 0):
	 * bulk ? ACC : 0. Ours and not bulk: bulk ? 0 : ACC. */
	unsigned yes = bulk ? ACC : 0, no = bulk ? 0 : ACC;
	struct sock_filter split[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_ETHERTYPE),
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, a->etype, 0, 13),          /* -> 15 drop */
		/* 2 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_DST_EP),
		/* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, a->epid, 0, 11),           /* -> 15 drop */
		/* 4 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_ETH_HLEN + EMP_C_VTF),
		/* 5 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 7u << 9 | EMP_F_LAST | EMP_F_ACKREQ),
		/* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)EMP_T_DATA << 9, 0, 7), /* -> 14 no */
		/* a DATA frame too short to hold msg_len is the engine's to count */
		/* 7 */ BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
		/* 8 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, AFP_BULK_HDR, 0, 5),       /* -> 14 no */
		/* 9 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, EMP_ETH_HLEN + EMP_HDR_LEN + EMP_D_MSG_LEN),
		/* 10 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, AFP_BULK_MIN, 0, 3),      /* -> 14 no */
		/* 11 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, EMP_ETH_HLEN + EMP_HDR_LEN + EMP_D_FRAME),
		/* 12 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 1u << 8, 0, 1),          /* frame >= 1 (24 bits, then msg_len's top byte) */
		/* 13 */ BPF_STMT(BPF_RET | BPF_K, yes),
		/* 14 */ BPF_STMT(BPF_RET | BPF_K, no),
		/* 15 */ BPF_STMT(BPF_RET | BPF_K, 0),
	};
	memcpy(code, split, sizeof(split));
	return sizeof(split) / sizeof(split[0]);
}

/* bfd and its pool, before fd exists (its filter depends on a->bulk). Not
 * fatal: a->bulk stays 0 on any failure. */
void emp__afp_bulk_open(struct afp *a, const char *ifname)
{
	a->bfd = -1;
	a->bulk = 0;
	if (!emp__afp_bulk_wanted(a, ifname))
		return;
	a->bulk = 1;                         /* the filter below is the bulk one */
	int fd = emp__sys_fd_high(emp__afp_filtered_socket(a, 1));
	if (fd < 0)
		goto off;
	int rcv = AFP_BULK_RCVBUF, got = 0;
	socklen_t gl = sizeof(got);
	if (emp__sys_setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) < 0)
		(void)emp__sys_setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	if (emp__sys_getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &gl) < 0 || (unsigned)got < AFP_BULK_RCVBUF_MIN)
		goto close_fd;
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(a->etype),
				   .sll_ifindex = a->ifindex };
	if (emp__sys_bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		goto close_fd;
	a->bslot = (a->mtu + EMP_ETH_HLEN + 4 + POOL_OFF + 63) & ~63u;
	a->bpool = malloc((size_t)AFP_BULK_POOL * a->bslot);
	if (!a->bpool)
		goto close_fd;
	a->bfd = fd;
	a->blook_ns = AFP_BULK_LOOK_NS;
	return;
close_fd:
	emp__sys_close(fd);
off:
	a->bulk = 0;
}

void emp__afp_bulk_close(struct afp *a)
{
	if (a->bfd >= 0)
		emp__sys_close(a->bfd);
	free(a->bpool);
	a->bpool = NULL;
	a->bfd = -1;
}

/* Whether fd gave a frame of a long message other than its frame 0 (the
 * last frame, or one asking for an ack: the filter leaves those to the
 * ring), so that frames of it before this one are in bfd. Any frame of one,
 * frame 0 included, says that the rest is on its way (bactive_until). */
static int long_msg(struct afp *a, const struct emp_rxframe *f, unsigned n)
{
	int seen = 0;
	for (unsigned i = 0; i < n; i++) {
		const uint8_t *d = f[i].data + EMP_ETH_HLEN;
		if (f[i].len < AFP_BULK_HDR ||
		    EMP_VTF_TYPE((unsigned)d[EMP_C_VTF] << 8 | d[EMP_C_VTF + 1]) != EMP_T_DATA)
			continue;
		const uint8_t *m = d + EMP_HDR_LEN + EMP_D_MSG_LEN;
		if (((uint32_t)m[0] << 24 | (uint32_t)m[1] << 16 | (uint32_t)m[2] << 8 | m[3]) < AFP_BULK_MIN)
			continue;
		if (!seen)
			__atomic_store_n(&a->bactive_until, mono_ns() + AFP_BULK_ACTIVE_NS, __ATOMIC_RELAXED);
		seen = 1;
		/* frame 0 has nothing of its message before it */
		const uint8_t *fr = d + EMP_HDR_LEN + EMP_D_FRAME;
		if (fr[0] | fr[1] | fr[2])
			return 1;
	}
	return 0;
}

/* Whether a look at bfd is due: while long messages arrive (frame 0 in the
 * ring or frames from bfd in the last AFP_BULK_ACTIVE_NS), unless the last
 * look did not fill the pool and was under look_ns ago (a receiver that
 * keeps up looked every 9 us and took 4 frames a call: 170 system calls per
 * MB); otherwise every AFP_BULK_IDLE_NS (a sender's drives after each post
 * make no call). Read without the engine's lock by spinners (rx_pending). A
 * sleeper woken by bfd inside look_ns spins until the look is due. */
static int due(const struct afp *a, uint64_t now)
{
	if (__atomic_load_n(&a->bleft, __ATOMIC_RELAXED))
		return 1;                        /* the last look's frames are not all taken */
	uint64_t last = __atomic_load_n(&a->blast_look, __ATOMIC_RELAXED);
	if (now >= __atomic_load_n(&a->bactive_until, __ATOMIC_RELAXED))
		return now - last >= AFP_BULK_IDLE_NS;
	return !__atomic_load_n(&a->bdrained, __ATOMIC_RELAXED) ||
	       now - last >= __atomic_load_n(&a->blook_ns, __ATOMIC_RELAXED);
}

/* The clock for a look's decision, or 0 to skip it: between long messages
 * (a ping-pong's spin turns and polls) it is read on every 32nd call only;
 * an active period found over is ended (unless the engine just renewed it).
 * Spinners call it without the engine's lock: the count is racy, which only
 * moves the 32nd call. */
static uint64_t look_clock(struct afp *a)
{
	unsigned k = __atomic_add_fetch(&a->bidle, 1, __ATOMIC_RELAXED);
	uint64_t until = __atomic_load_n(&a->bactive_until, __ATOMIC_RELAXED);
	if (!until && (k & 31))
		return 0;
	uint64_t now = mono_ns();
	if (until && now >= until)
		__atomic_compare_exchange_n(&a->bactive_until, &until, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	return now;
}

/* rx_pending's part (spinners, without the engine's lock) */
int emp__afp_bulk_pending(struct afp *a)
{
	if (__atomic_load_n(&a->bleft, __ATOMIC_RELAXED))
		return 1;
	uint64_t now = look_clock(a);
	return now && due(a, now);
}

/* Up to max frames from bfd: what the last look left in the pool, else a
 * new look (one recvmmsg for up to AFP_BULK_POOL frames) if one is due or
 * forced. Valid until the next call: a look reuses the pool, and comes only
 * when the engine has released every frame of it. 0 when none. */
static int bulk_rx(struct afp *a, struct emp_rxframe *f, unsigned max, int force)
{
	if (a->bhead == a->bfill) {
		uint64_t now = force ? mono_ns() : look_clock(a);
		if (!force && (!now || !due(a, now)))
			return 0;
		struct mmsghdr mm[AFP_BULK_POOL];
		struct iovec iov[AFP_BULK_POOL];
		unsigned k = AFP_BULK_POOL;
		memset(mm, 0, sizeof(mm));
		for (unsigned i = 0; i < k; i++) {
			iov[i].iov_base = a->bpool + (size_t)i * a->bslot + POOL_OFF;
			iov[i].iov_len = a->bslot - POOL_OFF;
			mm[i].msg_hdr.msg_iov = &iov[i];
			mm[i].msg_hdr.msg_iovlen = 1;
		}
		int r = (int)emp__syscall(SYS_recvmmsg, a->bfd, mm, k, MSG_DONTWAIT, NULL);
		a->bcalls++;
		/* a stream that fills each look: look less often, more frames per call */
		uint64_t look = a->blook_ns;
		if (r >= 16 && look < AFP_BULK_LOOK_MAX)
			look *= 2;
		else if (r <= 3)
			look = AFP_BULK_LOOK_NS;
		__atomic_store_n(&a->blook_ns, look, __ATOMIC_RELAXED);
		__atomic_store_n(&a->bdrained, r < (int)k, __ATOMIC_RELAXED);
		__atomic_store_n(&a->blast_look, now, __ATOMIC_RELAXED);
		a->bhead = a->bfill = 0;
		if (force)
			a->bforce = r == (int)k;     /* a full look: more may wait */
		if (r <= 0)
			return 0;
		__atomic_store_n(&a->bactive_until, now + AFP_BULK_ACTIVE_NS, __ATOMIC_RELAXED);
		for (int i = 0; i < r; i++) {
			if ((mm[i].msg_hdr.msg_flags & MSG_TRUNC) || mm[i].msg_len < EMP_ETH_HLEN) {
				a->truncated++;
				continue;
			}
			a->blen[a->bfill] = mm[i].msg_len;
			a->bidx[a->bfill++] = (uint8_t)i;
		}
	}
	unsigned n = 0;
	while (n < max && a->bhead < a->bfill) {
		f[n].data = a->bpool + (size_t)a->bidx[a->bhead] * a->bslot + POOL_OFF;
		f[n].len = a->blen[a->bhead++];
		n++;
	}
	__atomic_store_n(&a->bleft, a->bfill - a->bhead, __ATOMIC_RELAXED);
	a->bframes += n;
	return (int)n;
}

/* A burst with the bulk socket on. Frames of one long message reach both
 * sockets (frame 0, the last and those asking for an ack fd, the others bfd);
 * on one link they arrive in order, so when fd gives one of them, the frames
 * bfd holds came before it: bfd is emptied first (forced looks, whatever the
 * pace rules say) and fd's burst held back (stash) until then. Read the other
 * way round, the receiver saw the message's last frame ahead of the rest, a
 * gap to report, and the sender resent what was on its way; and a ping-pong
 * of long messages waited for the next paced look. Otherwise the two take
 * turns while both have frames. */
int emp__afp_bulk_burst(struct afp *a, struct emp_rxframe *f, unsigned max)
{
	int n;
	if (a->stash_n) {
		if (a->bhead != a->bfill || a->bforce) {
			if ((n = bulk_rx(a, f, max, a->bforce)) > 0) {
				a->last_bulk = 1;
				return n;
			}
			a->bforce = 0;
		}
		n = (int)(a->stash_n < max ? a->stash_n : max);
		memcpy(f, a->stash, (size_t)n * sizeof(*f));
		a->last_ring = a->stash_ring;
		a->stash_n = 0;
		return n;
	}
	if (a->bturn) {
		a->bturn = 0;
		if ((n = bulk_rx(a, f, max, 0)) > 0) {
			a->last_bulk = 1;
			return n;
		}
	}
	if ((n = emp__afp_main_rx(a, f, max)) > 0) {
		a->bturn = 1;
		if (!long_msg(a, f, (unsigned)n) || (unsigned)n > AFP_BULK_POOL)
			return n;
		memcpy(a->stash, f, (size_t)n * sizeof(*f));
		a->stash_n = (unsigned)n;
		a->stash_ring = a->last_ring;
		a->bforce = 1;
		return emp__afp_bulk_burst(a, f, max);
	}
	if ((n = bulk_rx(a, f, max, 0)) > 0)
		a->last_bulk = 1;
	return n;
}

/* frames the kernel dropped at bfd (a full queue), since the last ask */
uint64_t emp__afp_bulk_drops(struct afp *a)
{
	if (!a->bulk)
		return 0;
	struct tpacket_stats st;
	socklen_t len = sizeof(st);
	memset(&st, 0, sizeof(st));
	if (emp__sys_getsockopt(a->bfd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
		a->bdrops += st.tp_drops;
	return a->bdrops;
}
