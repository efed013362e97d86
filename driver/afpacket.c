/* afpacket.c: the AF_PACKET backend (emp__afpacket_ops): BPF-filtered raw socket, TPACKET_V2 rx ring, sendmmsg tx. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "driver.h"
#include "proto.h"

/*
 * Receive: a TPACKET_V2 ring mapped into the process. rx_burst walks the slots
 * the kernel has handed to user space (TP_STATUS_USER) and returns pointers
 * straight into the ring; rx_release(n) gives the oldest n of them back
 * (TP_STATUS_KERNEL), in ring order. The socket is created with protocol 0 (it
 * sees nothing), gets its BPF filter (EtherType and EMP dst endpoint) and ring,
 * and only then is bound to the interface with the EMP EtherType; the ring is
 * drained after that anyway.
 *
 * Transmit: sendmmsg(), one syscall per burst of up to TX_BATCH (256) frames, each
 * msghdr gathering the header and the caller's pieces (no staging copy).
 * EAGAIN/ENOBUFS ends the burst early (the caller counts the rest as drops);
 * a frame the device refuses as too long (EMSGSIZE) is skipped and counted.
 */

#ifndef SO_LOCK_FILTER
#define SO_LOCK_FILTER 44
#endif
#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif

#define TX_BATCH       256            /* frames per sendmmsg (the engine's batch is up to 256) */
#define RING_BYTES     (4u << 20)     /* default ring size */
#define RING_MAX_BYTES (256u << 20)
#define RING_BLOCK     (256u << 10)   /* preferred block size */

struct afp {
	int fd;                 /* receive: the ring, the filter, the fd waiters poll */
	int txfd;               /* send only: protocol 0, never polled, so freeing a sent
	                         * frame wakes nobody (no sock_def_write_space lock) */
	struct sockaddr_ll txaddr;
	int ifindex;
	uint8_t mac[6];
	unsigned mtu;
	uint8_t *ring;
	size_t ring_len;
	unsigned frame_size, nframes;
	unsigned block_size, per_block;   /* frames never straddle a block */
	unsigned head;          /* next slot rx_burst looks at */
	unsigned tail;          /* oldest slot not yet released */
	unsigned held;          /* slots between tail and head */
	uint8_t *skip;          /* slot consumed by rx_burst but not returned */
	uint64_t truncated, oversize;
	/* tx_burst's message headers (the engine calls it under its lock): on
	 * the heap, not on the caller's stack, which may be a small thread's */
	struct mmsghdr mm[TX_BATCH];
	struct iovec iov[TX_BATCH][1 + EMP_TX_PIECES];
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

static struct tpacket2_hdr *slot(struct afp *a, unsigned i)
{
	return (struct tpacket2_hdr *)(a->ring + (size_t)(i / a->per_block) * a->block_size +
				       (size_t)(i % a->per_block) * a->frame_size);
}

/* frames per ring and their layout: frames never straddle a block */
static int ring_setup(struct afp *a, unsigned hint, struct tpacket_req *req)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned page = pg > 0 ? (unsigned)pg : 4096;
	/* header + sockaddr_ll, then the MAC header aligned so the network header
	 * is 16-aligned, then the frame (VLAN tag room included) */
	unsigned need = TPACKET_ALIGN(TPACKET2_HDRLEN + 16) + a->mtu + EMP_ETH_HLEN + 4;
	a->frame_size = TPACKET_ALIGN(need);
	unsigned block = RING_BLOCK;
	while (block < a->frame_size)
		block *= 2;
	block = (block + page - 1) / page * page;
	unsigned per_block = block / a->frame_size;
	unsigned want = hint ? hint : RING_BYTES / a->frame_size;
	if (want < 64)
		want = 64;
	if ((uint64_t)want * a->frame_size > RING_MAX_BYTES)
		want = RING_MAX_BYTES / a->frame_size;
	unsigned nblocks = (want + per_block - 1) / per_block;
	memset(req, 0, sizeof(*req));
	req->tp_block_size = block;
	req->tp_block_nr = nblocks;
	req->tp_frame_size = a->frame_size;
	req->tp_frame_nr = nblocks * per_block;
	a->nframes = req->tp_frame_nr;
	a->block_size = block;
	a->per_block = per_block;
	a->ring_len = (size_t)block * nblocks;
	return 0;
}

static void afp_close(void *priv)
{
	struct afp *a = priv;
	if (!a)
		return;
	if (a->ring)
		munmap(a->ring, a->ring_len);
	if (a->fd >= 0)
		close(a->fd);
	if (a->txfd >= 0)
		close(a->txfd);
	free(a->skip);
	free(a);
}

static void release_slot(struct afp *a)
{
	__atomic_store_n(&slot(a, a->tail)->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
	a->skip[a->tail] = 0;
	a->tail = (a->tail + 1) % a->nframes;
	a->held--;
}

static int afp_open(const struct emp_dev_params *p, void **priv)
{
	const char *ifn = p->ifname;
	int rc;
	if (!ifn || !*ifn) {
		seterr(p, "emp: afpacket: no interface given");
		return -EINVAL;
	}
	if (strlen(ifn) >= IFNAMSIZ) {
		seterr(p, "emp: afpacket: interface name '%s' too long", ifn);
		return -EINVAL;
	}
	uint16_t etype = p->ethertype ? p->ethertype : EMP_ETHERTYPE_DEFAULT;
	struct afp *a = calloc(1, sizeof(*a));
	if (!a) {
		seterr(p, "emp: afpacket: out of memory");
		return -ENOMEM;
	}
	a->txfd = -1;
	a->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (a->fd < 0) {
		rc = -errno;
		if (rc == -EPERM || rc == -EACCES)
			seterr(p, "emp: AF_PACKET needs CAP_NET_RAW (run as root or setcap cap_net_raw+ep)");
		else
			seterr(p, "emp: afpacket: socket: %s", strerror(-rc));
		goto fail;
	}

	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, ifn, strlen(ifn) + 1);
	if (ioctl(a->fd, SIOCGIFINDEX, &ifr) < 0) {
		rc = -errno;
		if (rc == -ENODEV)
			seterr(p, "emp: afpacket: no such interface '%s'", ifn);
		else
			seterr(p, "emp: afpacket: %s: %s", ifn, strerror(-rc));
		goto fail;
	}
	a->ifindex = ifr.ifr_ifindex;
	if (ioctl(a->fd, SIOCGIFFLAGS, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFFLAGS: %s", ifn, strerror(-rc));
		goto fail;
	}
	if (!(ifr.ifr_flags & IFF_UP) || !(ifr.ifr_flags & IFF_RUNNING)) {
		rc = -ENETDOWN;
		seterr(p, "emp: afpacket: interface '%s' is %s", ifn,
		       !(ifr.ifr_flags & IFF_UP) ? "down" : "up but has no carrier (not running)");
		goto fail;
	}
	if (ioctl(a->fd, SIOCGIFHWADDR, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFHWADDR: %s", ifn, strerror(-rc));
		goto fail;
	}
	memcpy(a->mac, ifr.ifr_hwaddr.sa_data, 6);
	if (ioctl(a->fd, SIOCGIFMTU, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFMTU: %s", ifn, strerror(-rc));
		goto fail;
	}
	a->mtu = (unsigned)ifr.ifr_mtu;
	if (a->mtu > 65535)
		a->mtu = 65535;
	if (a->mtu < EMP_MIN_MTU) {
		rc = -EINVAL;
		seterr(p, "emp: afpacket: %s: MTU %u is below the EMP minimum %u", ifn, a->mtu,
		       (unsigned)EMP_MIN_MTU);
		goto fail;
	}

	/* accept EtherType == etype at 12 and dst endpoint == p->endpoint */
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_ETHERTYPE),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, etype, 0, 3),
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, EMP_OFF_DST_EP),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, p->endpoint, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0x40000),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { sizeof(code) / sizeof(code[0]), code };
	int one = 1;
	if (setsockopt(a->fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0 ||
	    setsockopt(a->fd, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof(one)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: attaching the BPF filter: %s", strerror(-rc));
		goto fail;
	}
	a->txfd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	memset(&a->txaddr, 0, sizeof(a->txaddr));
	a->txaddr.sll_family = AF_PACKET;
	a->txaddr.sll_ifindex = a->ifindex;   /* protocol 0 at bind: it receives nothing */
	if (a->txfd < 0 || bind(a->txfd, (struct sockaddr *)&a->txaddr, sizeof(a->txaddr)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: send socket on %s: %s", ifn, strerror(-rc));
		goto fail;
	}
	a->txaddr.sll_protocol = htons(etype);   /* what each frame is sent as */
	a->txaddr.sll_halen = 6;
	if (p->qdisc_bypass &&
	    setsockopt(a->txfd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: PACKET_QDISC_BYPASS: %s", strerror(-rc));
		goto fail;
	}
	int sndbuf = 4 << 20;
	if (setsockopt(a->txfd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
		(void)setsockopt(a->txfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

	int ver = TPACKET_V2;
	struct tpacket_req req;
	ring_setup(a, p->rx_frames, &req);
	if (setsockopt(a->fd, SOL_PACKET, PACKET_VERSION, &ver, sizeof(ver)) < 0 ||
	    setsockopt(a->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: rx ring setup (%u frames of %u bytes) failed: %s",
		       req.tp_frame_nr, req.tp_frame_size, strerror(-rc));
		goto fail;
	}
	a->ring = mmap(NULL, a->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, a->fd, 0);
	if (a->ring == MAP_FAILED) {
		a->ring = NULL;
		rc = -errno;
		seterr(p, "emp: afpacket: mapping the rx ring failed: %s", strerror(-rc));
		goto fail;
	}
	a->skip = calloc(a->nframes, 1);
	if (!a->skip) {
		rc = -ENOMEM;
		seterr(p, "emp: afpacket: out of memory");
		goto fail;
	}

	/* Drain. The socket had protocol 0 (no frames) until now and its filter is
	 * locked, so only filtered frames can ever reach the ring; still, hand
	 * back anything there and flush the socket queue before binding. */
	for (unsigned i = 0; i < a->nframes; i++) {
		struct tpacket2_hdr *h = slot(a, i);
		if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
			break;
		__atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
	}
	while (recv(a->fd, a->skip, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0)
		;

	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(etype);
	sll.sll_ifindex = a->ifindex;
	if (bind(a->fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: bind to %s: %s", ifn, strerror(-rc));
		goto fail;
	}
	a->head = a->tail = 0;
	*priv = a;
	return 0;
fail:
	afp_close(a);
	return rc;
}

static int afp_tx_burst(void *priv, const struct emp_txframe *f, unsigned n)
{
	struct afp *a = priv;
	struct mmsghdr *mm = a->mm;
	struct iovec (*iov)[1 + EMP_TX_PIECES] = a->iov;
	unsigned done = 0;
	while (done < n) {
		unsigned k = n - done < TX_BATCH ? n - done : TX_BATCH;
		for (unsigned i = 0; i < k; i++) {
			const struct emp_txframe *t = &f[done + i];
			unsigned ni = 0;
			iov[i][ni].iov_base = (void *)t->hdr;
			iov[i][ni++].iov_len = t->hdr_len;
			for (uint32_t j = 0; j < t->npieces && j < EMP_TX_PIECES; j++)
				if (t->piece[j].len) {
					iov[i][ni].iov_base = (void *)t->piece[j].p;
					iov[i][ni++].iov_len = t->piece[j].len;
				}
			memset(&mm[i], 0, sizeof(mm[i]));
			mm[i].msg_hdr.msg_name = &a->txaddr;
			mm[i].msg_hdr.msg_namelen = sizeof(a->txaddr);
			mm[i].msg_hdr.msg_iov = iov[i];
			mm[i].msg_hdr.msg_iovlen = ni;
		}
		int r = sendmmsg(a->txfd, mm, k, MSG_DONTWAIT);
		if (r > 0) {
			done += (unsigned)r;
			continue;
		}
		int e = r < 0 ? errno : EAGAIN;
		if (e == EINTR)
			continue;
		if (e == EMSGSIZE) {           /* frame longer than the device takes: skip it */
			a->oversize++;
			done++;
			continue;
		}
		if (e == EAGAIN || e == ENOBUFS)
			return (int)done;
		return done ? (int)done : -e;
	}
	return (int)done;
}

static int afp_rx_burst(void *priv, struct emp_rxframe *f, unsigned max)
{
	struct afp *a = priv;
	unsigned n = 0;
	while (a->held && a->skip[a->tail])  /* skipped slots at the tail go back now */
		release_slot(a);
	while (n < max && a->held < a->nframes) {
		struct tpacket2_hdr *h = slot(a, a->head);
		uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
		if (!(st & TP_STATUS_USER))
			break;
		unsigned i = a->head;
		a->head = (a->head + 1) % a->nframes;
		a->held++;
		if (h->tp_snaplen < h->tp_len || (st & TP_STATUS_COPY)) {
			a->truncated++;      /* longer than the ring slot (MTU raised?) */
			a->skip[i] = 1;
			if (a->held == 1)
				release_slot(a);
			continue;
		}
		f[n].data = (const uint8_t *)h + h->tp_mac;
		f[n].len = h->tp_snaplen;
		n++;
	}
	return (int)n;
}

static int afp_rx_pending(void *priv)
{
	const struct afp *a = priv;
	unsigned head = __atomic_load_n(&a->head, __ATOMIC_RELAXED);
	const struct tpacket2_hdr *h = slot((struct afp *)a, head % a->nframes);
	return (__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0;
}

static void afp_rx_release(void *priv, unsigned n)
{
	struct afp *a = priv;
	while (a->held && (n || a->skip[a->tail])) {
		if (!a->skip[a->tail])
			n--;
		release_slot(a);
	}
}

static int afp_wait_fd(void *priv)
{
	return ((struct afp *)priv)->fd;
}

static void afp_mac(void *priv, uint8_t mac[6])
{
	memcpy(mac, ((struct afp *)priv)->mac, 6);
}

static unsigned afp_mtu(void *priv)
{
	return ((struct afp *)priv)->mtu;
}

const struct emp_driver_ops emp__afpacket_ops = {
	.name = "afpacket",
	.flags = EMP_DRV_IFNAME | EMP_DRV_IDLOCK,
	.open = afp_open,
	.close = afp_close,
	.tx_burst = afp_tx_burst,
	.rx_burst = afp_rx_burst,
	.rx_release = afp_rx_release,
	.rx_pending = afp_rx_pending,
	.wait_fd = afp_wait_fd,
	.mac = afp_mac,
	.mtu = afp_mtu,
};
