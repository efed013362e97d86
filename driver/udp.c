/* udp.c: the UDP backend (emp__udp_ops): each EMP frame one UDP datagram segment, sent in GSO batches (UDP_SEGMENT) and received coalesced (UDP_GRO), with the outer sender checked against the config. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "driver.h"
#include "proto.h"
#include "sys.h"

/*
 * Frames travel exactly as the engine builds them (Ethernet header with the
 * config's MACs, EMP header, payload) as UDP payload: the engine and the wire
 * format do not change; the outer IPv4/UDP header (28 bytes) is the price,
 * taken from the EMP MTU. An endpoint binds its host's config IP and the UDP
 * port equal to its endpoint id; a frame goes to the config IP of its
 * destination MAC and the port of its destination endpoint.
 *
 * Transmit: one sendmmsg per burst; consecutive frames to the same place and
 * of the same length share one message with a UDP_SEGMENT control message
 * (the kernel cuts it into one datagram per frame, in software at the device
 * or in the NIC, after a single pass through the UDP/IP stack; across veth
 * the whole message stays one skb).
 * Receive: recvmmsg into 64 KiB buffers with UDP_GRO: a coalesced datagram
 * says its segment size, and each segment is one frame.
 * The engine checks everything inside a frame (EtherType, endpoint, MACs,
 * lengths); what only the datagram shows is checked here: its source IP must
 * be the config IP of the frame's source MAC and its source port the frame's
 * source endpoint, else the segment is dropped and counted (rx_dropped, with
 * the kernel's own drops at this socket).
 */

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

#define UDP_OVERHEAD   28                 /* IPv4 + UDP headers */
#define RX_BUFS        16                 /* datagrams per recvmmsg */
#define RX_BUF_BYTES   65536
#define TX_FRAMES      256                /* frames per sendmmsg (the engine's batch) */
#define TX_SEGS        64                 /* UDP_MAX_SEGMENTS */
#define TX_GSO_BYTES   (65535 - UDP_OVERHEAD)
#define LOOK_NS        8000             /* rx_pending: a real look at most this often */
#define CTL_BYTES      (CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint32_t)) + 64)

struct udp_host {
	uint8_t mac[6];
	uint32_t ip;                       /* network order */
};

struct udpdev {
	int fd;
	uint8_t mac[6];
	unsigned mtu;                      /* EMP MTU: interface MTU - 28 */
	uint16_t epid;
	struct udp_host *hosts;
	unsigned nhosts, last;             /* last: the host found last (a stream's frames) */
	int gso;                           /* UDP_SEGMENT works (cleared at its first EINVAL) */
	/* receive: the current batch of datagrams */
	uint8_t *buf;
	struct mmsghdr rmm[RX_BUFS];
	struct iovec riov[RX_BUFS];
	struct sockaddr_in rsrc[RX_BUFS];
	uint8_t rctl[RX_BUFS][CTL_BYTES];
	unsigned rn, rd, roff;             /* datagrams in the batch, the one being split, offset in it */
	unsigned rseg[RX_BUFS];            /* segment size of each */
	unsigned out;                      /* frames returned and not yet released */
	uint64_t last_look;
	uint32_t kdrops;                   /* SO_RXQ_OVFL: the socket's drops, as last told */
	uint64_t bad;                      /* segments dropped here: wrong sender, truncated */
	uint64_t datagrams, frames;        /* received: datagrams read, frames split from them */
	/* transmit */
	struct mmsghdr tmm[TX_FRAMES];
	struct iovec tiov[TX_FRAMES * (1 + EMP_TX_PIECES)];
	struct sockaddr_in tdst[TX_FRAMES];
	uint8_t tctl[TX_FRAMES][CMSG_SPACE(sizeof(uint16_t))];
	uint16_t tframes[TX_FRAMES];       /* frames in each message */
};

__attribute__((format(printf, 2, 3)))
static void seterr(const struct emp_dev_params *p, const char *fmt, ...)
{
	if (!p->err || !p->errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct udp_host *host_by_mac(struct udpdev *u, const uint8_t *mac)
{
	if (u->last < u->nhosts && !memcmp(u->hosts[u->last].mac, mac, 6))
		return &u->hosts[u->last];
	for (unsigned i = 0; i < u->nhosts; i++)
		if (!memcmp(u->hosts[i].mac, mac, 6)) {
			u->last = i;
			return &u->hosts[i];
		}
	return NULL;
}

static uint16_t be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void udp_close(void *priv)
{
	struct udpdev *u = priv;
	if (!u)
		return;
	if (u->fd >= 0)
		emp__sys_close(u->fd);
	free(u->buf);
	free(u->hosts);
	free(u);
}

/* MAC and MTU of the interface; the host's IP from the config by that MAC */
static int if_info(struct udpdev *u, const struct emp_dev_params *p, uint32_t *self_ip)
{
	struct ifreq ifr;
	if (!p->ifname || strlen(p->ifname) >= IFNAMSIZ) {
		seterr(p, "emp: udp: no interface given");
		return -EINVAL;
	}
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, p->ifname, strlen(p->ifname) + 1);
	if (emp__sys_ioctl(u->fd, SIOCGIFHWADDR, &ifr) < 0) {
		int rc = -errno;
		seterr(p, "emp: udp: %s: %s", p->ifname, rc == -ENODEV ? "no such interface" : strerror(-rc));
		return rc;
	}
	memcpy(u->mac, ifr.ifr_hwaddr.sa_data, 6);
	if (emp__sys_ioctl(u->fd, SIOCGIFMTU, &ifr) < 0) {
		int rc = -errno;
		seterr(p, "emp: udp: %s: SIOCGIFMTU: %s", p->ifname, strerror(-rc));
		return rc;
	}
	unsigned m = ifr.ifr_mtu > 65535 ? 65535u : (unsigned)ifr.ifr_mtu;
	if (m < EMP_MIN_MTU + UDP_OVERHEAD + EMP_ETH_HLEN) {
		seterr(p, "emp: udp: %s: MTU %u is below the EMP minimum %u plus the UDP/IP and inner Ethernet headers",
		       p->ifname, m, (unsigned)EMP_MIN_MTU);
		return -EINVAL;
	}
	/* a frame is EMP_ETH_HLEN + mtu bytes of UDP payload */
	u->mtu = m - UDP_OVERHEAD - EMP_ETH_HLEN;
	const struct udp_host *h = host_by_mac(u, u->mac);
	if (!h) {
		seterr(p, "emp: udp: the MAC of %s is not a peer in the config (its IP is the one bound)", p->ifname);
		return -ENOENT;
	}
	*self_ip = h->ip;
	return 0;
}

static int sockopts(struct udpdev *u)
{
	int one = 1, rcv = 8 << 20, snd = 4 << 20, pmtu = IP_PMTUDISC_DO;
	if (emp__sys_setsockopt(u->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) < 0)
		(void)emp__sys_setsockopt(u->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	if (emp__sys_setsockopt(u->fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd)) < 0)
		(void)emp__sys_setsockopt(u->fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
	(void)emp__sys_setsockopt(u->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	(void)emp__sys_setsockopt(u->fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	/* without GRO every datagram is one frame: slower, still correct */
	(void)emp__sys_setsockopt(u->fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
	return 0;
}

static int udp_open(const struct emp_dev_params *p, void **priv)
{
	int rc;
	struct udpdev *u = calloc(1, sizeof(*u));
	if (!u) {
		seterr(p, "emp: udp: out of memory");
		return -ENOMEM;
	}
	u->fd = -1;
	u->gso = 1;
	u->epid = p->endpoint;
	if (!u->epid) {
		/* port 0 would bind a port the kernel picks, not the id peers address */
		seterr(p, "emp: udp: endpoint id 0 has no port of its own");
		rc = -EINVAL;
		goto fail;
	}
	u->buf = malloc((size_t)RX_BUFS * RX_BUF_BYTES);
	u->hosts = calloc(p->nhosts + 1, sizeof(*u->hosts));
	if (!u->buf || !u->hosts) {
		seterr(p, "emp: udp: out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < p->nhosts; i++) {
		memcpy(u->hosts[i].mac, p->hosts[i].mac, 6);
		u->hosts[i].ip = p->hosts[i].ip;
	}
	u->nhosts = p->nhosts;
	u->fd = emp__sys_fd_high(emp__sys_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	if (u->fd < 0) {
		rc = -errno;
		seterr(p, "emp: udp: socket: %s", strerror(-rc));
		goto fail;
	}
	uint32_t ip = 0;
	if ((rc = if_info(u, p, &ip)) < 0)
		goto fail;
	sockopts(u);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(u->epid), .sin_addr.s_addr = ip };
	if (emp__sys_bind(u->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &ip, a, sizeof(a));
		seterr(p, "emp: udp: bind %s port %u (the endpoint id): %s", a, (unsigned)u->epid, strerror(-rc));
		goto fail;
	}
	for (unsigned i = 0; i < RX_BUFS; i++) {
		u->riov[i].iov_base = u->buf + (size_t)i * RX_BUF_BYTES;
		u->riov[i].iov_len = RX_BUF_BYTES;
	}
	*priv = u;
	return 0;
fail:
	udp_close(u);
	return rc;
}

/* ---- transmit ---- */

static unsigned frame_len(const struct emp_txframe *t)
{
	unsigned n = t->hdr_len;
	for (uint32_t j = 0; j < t->npieces && j < EMP_TX_PIECES; j++)
		n += t->piece[j].len;
	return n;
}

/* where frame t goes; 0 if its destination MAC is no config host */
static int frame_dst(struct udpdev *u, const struct emp_txframe *t, struct sockaddr_in *to)
{
	if (t->hdr_len < EMP_OFF_DST_EP + 2)
		return 0;
	const struct udp_host *h = host_by_mac(u, t->hdr);
	if (!h)
		return 0;
	memset(to, 0, sizeof(*to));
	to->sin_family = AF_INET;
	to->sin_addr.s_addr = h->ip;
	to->sin_port = htons(be16(t->hdr + EMP_OFF_DST_EP));
	return 1;
}

/* messages for frames [0, n): each a run to one place of equal length frames
 * (the last may be shorter), at most TX_SEGS and TX_GSO_BYTES; a frame with
 * no known destination is a marked message of its own (msg_len -1), not sent */
static unsigned build(struct udpdev *u, const struct emp_txframe *f, unsigned n)
{
	const unsigned iov_cap = sizeof(u->tiov) / sizeof(u->tiov[0]), per = 1 + EMP_TX_PIECES;
	unsigned nm = 0, ni = 0, i = 0;
	/* a burst may hold more frames than TX_FRAMES (runs of up to TX_SEGS):
	 * stop while every frame of the next message still has its iovecs */
	while (i < n && nm < TX_FRAMES && ni + per <= iov_cap) {
		struct sockaddr_in *to = &u->tdst[nm];
		if (!frame_dst(u, &f[i], to)) {
			u->tframes[nm] = 1;    /* an empty message nobody gets: counted as sent */
			memset(&u->tmm[nm], 0, sizeof(u->tmm[nm]));
			u->tmm[nm].msg_len = (unsigned)-1;
			nm++, i++;
			continue;
		}
		unsigned seg = frame_len(&f[i]), k = 0, bytes = 0;
		struct iovec *iv = &u->tiov[ni];
		unsigned niv = 0;
		while (i + k < n && k < (u->gso ? TX_SEGS : 1u) && ni + niv + per <= iov_cap) {
			const struct emp_txframe *t = &f[i + k];
			unsigned len = frame_len(t);
			struct sockaddr_in d;
			if (k && (len > seg || bytes + len > TX_GSO_BYTES || !frame_dst(u, t, &d) ||
				  d.sin_addr.s_addr != to->sin_addr.s_addr || d.sin_port != to->sin_port))
				break;
			iv[niv].iov_base = (void *)t->hdr;
			iv[niv++].iov_len = t->hdr_len;
			for (uint32_t j = 0; j < t->npieces && j < EMP_TX_PIECES; j++)
				if (t->piece[j].len) {
					iv[niv].iov_base = (void *)t->piece[j].p;
					iv[niv++].iov_len = t->piece[j].len;
				}
			bytes += len;
			k++;
			if (len < seg)
				break;             /* a shorter frame ends the run */
		}
		struct msghdr *m = &u->tmm[nm].msg_hdr;
		memset(m, 0, sizeof(*m));
		m->msg_name = to;
		m->msg_namelen = sizeof(*to);
		m->msg_iov = iv;
		m->msg_iovlen = niv;
		if (k > 1) {
			m->msg_control = u->tctl[nm];
			m->msg_controllen = sizeof(u->tctl[nm]);
			struct cmsghdr *c = CMSG_FIRSTHDR(m);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			uint16_t g = (uint16_t)seg;
			memcpy(CMSG_DATA(c), &g, sizeof(g));
		}
		u->tmm[nm].msg_len = 0;
		u->tframes[nm++] = (uint16_t)k;
		ni += niv;
		i += k;
	}
	return nm;
}

static int udp_tx_burst(void *priv, const struct emp_txframe *f, unsigned n)
{
	struct udpdev *u = priv;
	unsigned done = 0;
	while (done < n) {
		unsigned nm = build(u, f + done, n - done), m0 = 0;
		while (m0 < nm) {
			/* messages with no destination are skipped (sent to nobody) */
			if (u->tmm[m0].msg_len == (unsigned)-1) {
				done += u->tframes[m0++];
				continue;
			}
			unsigned k = 0;
			while (m0 + k < nm && u->tmm[m0 + k].msg_len != (unsigned)-1)
				k++;
			int r = (int)emp__syscall(SYS_sendmmsg, u->fd, &u->tmm[m0], k, MSG_DONTWAIT);
			if (r > 0) {
				for (int j = 0; j < r; j++)
					done += u->tframes[m0 + (unsigned)j];
				m0 += (unsigned)r;
				continue;
			}
			int e = r < 0 ? errno : EAGAIN;
			if (e == EINTR)
				continue;
			if (e == EAGAIN || e == ENOBUFS)
				return (int)done;
			if ((e == EINVAL || e == EIO) && u->gso && u->tframes[m0] > 1) {
				u->gso = 0;            /* no UDP_SEGMENT here: one datagram per frame */
				break;                 /* build again from this frame */
			}
			/* this message cannot go (EMSGSIZE, EPERM from a filter, no
			 * route): its frames are lost on the wire; the engine retransmits */
			done += u->tframes[m0++];
		}
	}
	return (int)done;
}

/* ---- receive ---- */

static void ctl_read(struct udpdev *u, unsigned i)
{
	struct msghdr *m = &u->rmm[i].msg_hdr;
	u->rseg[i] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			int g;
			memcpy(&g, CMSG_DATA(c), sizeof(g));
			u->rseg[i] = g > 0 ? (unsigned)g : 0;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL &&
			   c->cmsg_len >= CMSG_LEN(sizeof(uint32_t))) {
			memcpy(&u->kdrops, CMSG_DATA(c), sizeof(uint32_t));
		}
	}
}

static int refill(struct udpdev *u)
{
	for (unsigned i = 0; i < RX_BUFS; i++) {
		struct msghdr *m = &u->rmm[i].msg_hdr;
		memset(m, 0, sizeof(*m));
		m->msg_name = &u->rsrc[i];
		m->msg_namelen = sizeof(u->rsrc[i]);
		m->msg_iov = &u->riov[i];
		m->msg_iovlen = 1;
		m->msg_control = u->rctl[i];
		m->msg_controllen = sizeof(u->rctl[i]);
	}
	u->last_look = mono_ns();
	int r = (int)emp__syscall(SYS_recvmmsg, u->fd, u->rmm, RX_BUFS, MSG_DONTWAIT, NULL);
	u->rn = r > 0 ? (unsigned)r : 0;
	u->rd = u->roff = 0;
	u->datagrams += u->rn;
	for (unsigned i = 0; i < u->rn; i++) {
		ctl_read(u, i);
		if (u->rmm[i].msg_hdr.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
			u->bad++;              /* longer than a buffer: not ours to split */
			u->rmm[i].msg_len = 0;
		}
	}
	return (int)u->rn;
}

/* segment [off, off + len) of datagram i came from where its frame says */
static int sender_ok(struct udpdev *u, unsigned i, const uint8_t *fr, unsigned len)
{
	if (len < EMP_ETH_HLEN + EMP_C_SRC_EP + 2 || u->rsrc[i].sin_family != AF_INET)
		return 0;
	const struct udp_host *h = host_by_mac(u, fr + 6);
	return h && h->ip == u->rsrc[i].sin_addr.s_addr &&
	       ntohs(u->rsrc[i].sin_port) == be16(fr + EMP_ETH_HLEN + EMP_C_SRC_EP);
}

static int udp_rx_burst(void *priv, struct emp_rxframe *f, unsigned max)
{
	struct udpdev *u = priv;
	unsigned n = 0;
	if (u->rd >= u->rn) {
		if (u->out)
			return 0;              /* the engine releases a burst before the next */
		if (refill(u) <= 0)
			return 0;
	}
	while (n < max && u->rd < u->rn) {
		unsigned i = u->rd, total = u->rmm[i].msg_len;
		if (u->roff >= total) {
			u->rd++;
			u->roff = 0;
			continue;
		}
		unsigned seg = u->rseg[i] ? u->rseg[i] : total;
		unsigned len = total - u->roff < seg ? total - u->roff : seg;
		const uint8_t *fr = u->buf + (size_t)i * RX_BUF_BYTES + u->roff;
		u->roff += len;
		if (!sender_ok(u, i, fr, len)) {
			u->bad++;
			continue;
		}
		f[n].data = fr;
		f[n].len = len;
		n++;
	}
	u->out += n;
	u->frames += n;
	return (int)n;
}

static void udp_rx_release(void *priv, unsigned n)
{
	struct udpdev *u = priv;
	u->out = n < u->out ? u->out - n : 0;
}

/* frames split and not yet returned, or a real look due (no cheaper peek exists for a socket) */
static int udp_rx_pending(void *priv)
{
	const struct udpdev *u = priv;
	return u->rd < u->rn || mono_ns() - u->last_look >= LOOK_NS;
}

void emp__udp_counts(void *priv, uint64_t *datagrams, uint64_t *frames, uint64_t *bad)
{
	const struct udpdev *u = priv;
	*datagrams = u->datagrams;
	*frames = u->frames;
	*bad = u->bad;
}

static uint64_t udp_rx_dropped(void *priv)
{
	const struct udpdev *u = priv;
	return (uint64_t)u->kdrops + u->bad;
}

static int udp_wait_fd(void *priv)
{
	return ((struct udpdev *)priv)->fd;
}

static void udp_mac(void *priv, uint8_t mac[6])
{
	memcpy(mac, ((struct udpdev *)priv)->mac, 6);
}

static unsigned udp_mtu(void *priv)
{
	return ((struct udpdev *)priv)->mtu;
}

const struct emp_driver_ops emp__udp_ops = {
	.name = "udp",
	.flags = EMP_DRV_IFNAME | EMP_DRV_IDLOCK | EMP_DRV_HOSTS | EMP_DRV_SYSLOOK,
	.open = udp_open,
	.close = udp_close,
	.tx_burst = udp_tx_burst,
	.rx_burst = udp_rx_burst,
	.rx_release = udp_rx_release,
	.rx_pending = udp_rx_pending,
	.rx_dropped = udp_rx_dropped,
	.wait_fd = udp_wait_fd,
	.mac = udp_mac,
	.mtu = udp_mtu,
};
