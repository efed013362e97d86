/* afpacket.c: the AF_PACKET backend (emp__afpacket_ops): BPF-filtered raw socket, TPACKET_V2 rx ring, sendmmsg tx (receive before the ring: afp_lazy.c). */
#include <errno.h>
#include <fcntl.h>
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

#include "afp_int.h"
#include "driver.h"
#include "proto.h"
#include "sys.h"

/*
 * Receive: a TPACKET_V2 ring mapped into the process. rx_burst walks the slots
 * the kernel has handed to user space (TP_STATUS_USER) and returns pointers
 * straight into the ring; rx_release(n) gives the oldest n of them back
 * (TP_STATUS_KERNEL), in ring order. The socket is created with protocol 0 (it
 * sees nothing), gets its BPF filter (EtherType and EMP dst endpoint), and only
 * then is bound to the interface with the EMP EtherType. The ring is not set
 * up at open: that costs an RCU grace period (10-20 ms) that a short-lived
 * process must not wait for; frames are read with recvmmsg until the endpoint
 * is busy, and a helper thread then builds the ring (afp_lazy.c).
 * EMP_AFP_RING_AFTER=0 builds it at open, before the bind, as before.
 *
 * Transmit: sendmmsg(), one syscall per burst of up to TX_BATCH (256) frames, each
 * msghdr gathering the header and the caller's pieces (no staging copy); or,
 * once afp_lazy.c's builder has set it up, the tx ring (afp_txring.c).
 * EAGAIN/ENOBUFS ends the burst early (the caller counts the rest as drops);
 * a frame the device refuses as too long (EMSGSIZE) is skipped and counted.
 */

#ifndef SO_LOCK_FILTER
#define SO_LOCK_FILTER 44
#endif
#ifndef PACKET_QDISC_BYPASS
#define PACKET_QDISC_BYPASS 20
#endif

#define TX_BATCH       AFP_TX_BATCH   /* frames per sendmmsg (the engine's batch is up to 256) */
#define RING_BYTES     (4u << 20)     /* default ring size */
#define RING_MAX_BYTES (256u << 20)
#define RING_BLOCK     (256u << 10)   /* preferred block size */


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
	emp__afp_lazy_close(a);      /* the ring builder first: it uses fd */
	emp__afp_txring_close(a);
	emp__afp_bulk_close(a);
	if (a->ring)
		munmap(a->ring, a->ring_len);
	if (a->fd >= 0)
		close(a->fd);
	if (a->txfd >= 0)
		close(a->txfd);
	free(a->skip);
	free(a->owner);
	free(a->lq);
	free(a);
}

static void release_slot(struct afp *a)
{
	if (a->skip[a->tail] != AFP_LENT) {     /* a lent slot goes back at rx_unhold */
		__atomic_store_n(&emp__afp_slot(a, a->tail)->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
		a->skip[a->tail] = 0;
	}
	a->tail = (a->tail + 1) % a->nframes;
	a->held--;
}

/* A receive socket that hears nothing yet (protocol 0) with the locked BPF
 * filter: EtherType == etype at 12 and dst endpoint == our id, and with the
 * bulk split (afp_bulk.c) the frames of long messages (bulk 1) or the rest
 * (bulk 0); -errno. */
int emp__afp_filtered_socket(const struct afp *a, int bulk)
{
	struct sock_filter code[AFP_BPF_MAX];
	unsigned ncode = emp__afp_bulk_filter(a, bulk, code);
	struct sock_fprog prog = { (unsigned short)ncode, code };
	int one = 1, fd = emp__afp_socket();
	if (fd < 0)
		return -errno;
	/* before the ring, frames wait in the socket queue: room for a burst */
	int rcvbuf = 4 << 20;
	if (emp__sys_setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
		(void)emp__sys_setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (emp__sys_setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0 ||
	    emp__sys_setsockopt(fd, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof(one)) < 0) {
		int e = -errno;
		emp__sys_close(fd);
		return e;
	}
	return fd;
}

/* The rx ring on fd (PACKET_VERSION, PACKET_RX_RING: a grace period), mapped.
 * On failure fd is left without a ring, receiving into its queue. */
int emp__afp_ring_attach(struct afp *a, unsigned hint, int populate, char *err, size_t errlen)
{
	int ver = TPACKET_V2, rc;
	struct tpacket_req req;
	ring_setup(a, hint, &req);
	if (setsockopt(a->fd, SOL_PACKET, PACKET_VERSION, &ver, sizeof(ver)) < 0 ||
	    setsockopt(a->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
		rc = -errno;
		if (err)
			snprintf(err, errlen, "emp: afpacket: rx ring setup (%u frames of %u bytes) failed: %s",
				 req.tp_frame_nr, req.tp_frame_size, strerror(-rc));
		return rc;
	}
	/* the socket is hooked up with its ring from here on: every frame queued
	 * for delivery later reaches the ring (afp_lazy.c's switch ends its
	 * helper socket at the first frame stamped after this, so it is read now,
	 * before the mapping and its population take their milliseconds) */
	a->t_hooked_real = emp__afp_clock_ns(CLOCK_REALTIME);
	uint8_t *ring = mmap(NULL, a->ring_len, PROT_READ | PROT_WRITE,
			     MAP_SHARED | (populate ? MAP_POPULATE : 0), a->fd, 0);
	uint8_t *skip = calloc(a->nframes, 1);
	uint32_t *owner = calloc(a->nframes, sizeof(*owner));
	unsigned *lq = calloc(a->nframes, sizeof(*lq));
	if (ring == MAP_FAILED || !skip || !owner || !lq) {
		rc = ring == MAP_FAILED ? -errno : -ENOMEM;
		if (ring != MAP_FAILED)
			munmap(ring, a->ring_len);
		free(skip);
		free(owner);
		free(lq);
		memset(&req, 0, sizeof(req));      /* frames must not go to a ring nobody reads */
		(void)setsockopt(a->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req));
		if (err)
			snprintf(err, errlen, "emp: afpacket: mapping the rx ring failed: %s", strerror(-rc));
		return rc;
	}
	a->skip = skip;
	a->owner = owner;
	a->lq = lq;
	a->lq_head = a->lq_n = 0;
	a->head = a->tail = a->held = 0;
	a->ring = ring;
	return 0;
}

/* index, flags, MAC and MTU of the interface into a */
static int if_info(struct afp *a, const struct emp_dev_params *p)
{
	const char *ifn = p->ifname;
	struct ifreq ifr;
	int rc;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, ifn, strlen(ifn) + 1);
	if (ioctl(a->txfd, SIOCGIFINDEX, &ifr) < 0) {
		rc = -errno;
		if (rc == -ENODEV)
			seterr(p, "emp: afpacket: no such interface '%s'", ifn);
		else
			seterr(p, "emp: afpacket: %s: %s", ifn, strerror(-rc));
		return rc;
	}
	a->ifindex = ifr.ifr_ifindex;
	if (ioctl(a->txfd, SIOCGIFFLAGS, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFFLAGS: %s", ifn, strerror(-rc));
		return rc;
	}
	if (!(ifr.ifr_flags & IFF_UP) || !(ifr.ifr_flags & IFF_RUNNING)) {
		seterr(p, "emp: afpacket: interface '%s' is %s", ifn,
		       !(ifr.ifr_flags & IFF_UP) ? "down" : "up but has no carrier (not running)");
		return -ENETDOWN;
	}
	if (ioctl(a->txfd, SIOCGIFHWADDR, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFHWADDR: %s", ifn, strerror(-rc));
		return rc;
	}
	memcpy(a->mac, ifr.ifr_hwaddr.sa_data, 6);
	if (ioctl(a->txfd, SIOCGIFMTU, &ifr) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: %s: SIOCGIFMTU: %s", ifn, strerror(-rc));
		return rc;
	}
	a->mtu = (unsigned)ifr.ifr_mtu;
	if (a->mtu > 65535)
		a->mtu = 65535;
	if (a->mtu < EMP_MIN_MTU) {
		seterr(p, "emp: afpacket: %s: MTU %u is below the EMP minimum %u", ifn, a->mtu,
		       (unsigned)EMP_MIN_MTU);
		return -EINVAL;
	}
	return 0;
}

/* the send-only socket (opened first): protocol 0 at bind, so it receives nothing */
static int open_tx(struct afp *a, const struct emp_dev_params *p)
{
	int one = 1, rc;
	memset(&a->txaddr, 0, sizeof(a->txaddr));
	a->txaddr.sll_family = AF_PACKET;
	a->txaddr.sll_ifindex = a->ifindex;
	if (bind(a->txfd, (struct sockaddr *)&a->txaddr, sizeof(a->txaddr)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: send socket on %s: %s", p->ifname, strerror(-rc));
		return rc;
	}
	a->txaddr.sll_protocol = htons(a->etype);   /* what each frame is sent as */
	a->txaddr.sll_halen = 6;
	if (p->qdisc_bypass &&
	    setsockopt(a->txfd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: PACKET_QDISC_BYPASS: %s", strerror(-rc));
		return rc;
	}
	int sndbuf = 4 << 20;
	if (setsockopt(a->txfd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
		(void)setsockopt(a->txfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	return 0;
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
	struct afp *a = calloc(1, sizeof(*a));
	if (!a) {
		seterr(p, "emp: afpacket: out of memory");
		return -ENOMEM;
	}
	a->fd = a->hfd = a->trfd = a->bfd = -1;
	a->qdisc_bypass = p->qdisc_bypass;
	a->want_txring = emp__afp_txring_wanted();
	a->etype = p->ethertype ? p->ethertype : EMP_ETHERTYPE_DEFAULT;
	a->epid = p->endpoint;
	a->kick = p->kick;
	a->kick_arg = p->kick_arg;
	/* the send socket first: the interface ioctls go to it (closing a spare
	 * AF_PACKET socket would cost a grace period) */
	a->txfd = emp__afp_socket();
	if (a->txfd < 0) {
		rc = -errno;
		if (rc == -EPERM || rc == -EACCES)
			seterr(p, "emp: AF_PACKET needs CAP_NET_RAW (run as root or setcap cap_net_raw+ep)");
		else
			seterr(p, "emp: afpacket: socket: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = if_info(a, p)) < 0)
		goto fail;
	emp__afp_bulk_open(a, ifn);  /* first: fd's filter depends on whether it is there */
	a->fd = emp__sys_fd_high(emp__afp_filtered_socket(a, 0));
	if (a->fd < 0) {
		rc = a->fd;
		seterr(p, "emp: afpacket: attaching the BPF filter: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = open_tx(a, p)) < 0)
		goto fail;
	if ((rc = emp__afp_lazy_init(a, p->ring_now)) < 0) {
		seterr(p, "emp: afpacket: out of memory");
		goto fail;
	}
	if (!a->ring_after) {        /* the ring at once: drain it and the queue before the bind */
		if ((rc = emp__afp_ring_attach(a, p->rx_frames, 1, p->err, p->errlen)) < 0)
			goto fail;
		for (unsigned i = 0; i < a->nframes; i++) {
			struct tpacket2_hdr *h = emp__afp_slot(a, i);
			if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
				break;
			__atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
		}
		char junk;
		while (recv(a->fd, &junk, 1, MSG_DONTWAIT | MSG_TRUNC) >= 0)
			;
		a->mode = AFP_RING;
		if (a->want_txring)
			(void)emp__afp_txring_open(a);    /* failed: sendmmsg stays */
	}

	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(a->etype);
	sll.sll_ifindex = a->ifindex;
	if (bind(a->fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		rc = -errno;
		seterr(p, "emp: afpacket: bind to %s: %s", ifn, strerror(-rc));
		goto fail;
	}
	*priv = a;
	return 0;
fail:
	afp_close(a);
	return rc;
}

static int afp_tx_burst(void *priv, const struct emp_txframe *f, unsigned n)
{
	struct afp *a = priv;
	if (__atomic_load_n(&a->txring_up, __ATOMIC_ACQUIRE))
		return emp__afp_txring_burst(a, f, n);
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

int emp__afp_ring_rx_burst(struct afp *a, struct emp_rxframe *f, unsigned max)
{
	unsigned n = 0;
	while (a->held && a->skip[a->tail] == 1)  /* skipped slots at the tail go back now */
		release_slot(a);
	a->rslot_n = 0;
	while (n < max && a->held < a->nframes) {
		struct tpacket2_hdr *h = emp__afp_slot(a, a->head);
		uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
		if (!(st & TP_STATUS_USER) || a->skip[a->head] == AFP_LENT)
			break;                   /* a lent slot still holds the frame read a lap ago */
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
		if (n < AFP_BSLOTS)
			a->rslot_of[a->rslot_n++] = i;
		n++;
	}
	return (int)n;
}

/* fd's frames: its ring, or before it the pool (afp_lazy.c) */
int emp__afp_main_rx(struct afp *a, struct emp_rxframe *f, unsigned max)
{
	if (__atomic_load_n(&a->mode, __ATOMIC_ACQUIRE) == AFP_RING) {
		a->last_ring = 1;
		return emp__afp_ring_rx_burst(a, f, max);
	}
	return emp__afp_lazy_rx(a, f, max);
}

static int afp_rx_burst(void *priv, struct emp_rxframe *f, unsigned max)
{
	struct afp *a = priv;
	a->last_bulk = 0;
	int n = a->bulk ? emp__afp_bulk_burst(a, f, max) : emp__afp_main_rx(a, f, max);
	/* frames straight from the ring (not the bulk path's stash, nor the
	 * pool before the ring) may be lent */
	a->hold_ok = n > 0 && !a->bulk && a->last_ring;
	return n;
}

/* frames the kernel dropped at our socket (its buffer, later its ring, was
 * full: PACKET_STATISTICS, which resets what it reports) and those the pool
 * had no room for at the ring switch; the helper socket of the switch is
 * not asked (it lives for a moment) */
static uint64_t afp_rx_dropped(void *priv)
{
	struct afp *a = priv;
	struct tpacket_stats_v3 st;
	socklen_t len = sizeof(st);
	memset(&st, 0, sizeof(st));
	if (emp__sys_getsockopt(a->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
		a->kdrops += st.tp_drops;
	return a->kdrops + emp__afp_bulk_drops(a) + __atomic_load_n(&a->switch_left, __ATOMIC_RELAXED);
}

static int main_pending(const struct afp *a)
{
	if (__atomic_load_n(&a->mode, __ATOMIC_ACQUIRE) != AFP_RING) {
		if (!a->sockmode)
			return 1;            /* before the ring: only a look can tell */
		/* no ring ever: a spinner looks at most every look_ns (a system call
		 * each); read without the pool's lock, a hint like the ring's status */
		return __atomic_load_n(&a->phead, __ATOMIC_RELAXED) != __atomic_load_n(&a->pfill, __ATOMIC_RELAXED) ||
		       emp__afp_clock_ns(CLOCK_MONOTONIC) - __atomic_load_n(&a->last_look, __ATOMIC_RELAXED) >=
			       __atomic_load_n(&a->look_ns, __ATOMIC_RELAXED);
	}
	unsigned head = __atomic_load_n(&a->head, __ATOMIC_RELAXED) % a->nframes;
	const struct tpacket2_hdr *h = emp__afp_slot((struct afp *)a, head);
	return (__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER) != 0 &&
	       __atomic_load_n(&a->skip[head], __ATOMIC_RELAXED) != AFP_LENT;   /* a hint */
}

static int afp_rx_pending(void *priv)
{
	struct afp *a = priv;
	return main_pending(a) || (a->bulk && emp__afp_bulk_pending(a));
}

void emp__afp_ring_rx_release(struct afp *a, unsigned n)
{
	while (a->held && (n || a->skip[a->tail] == 1)) {
		if (a->skip[a->tail] != 1)
			n--;
		release_slot(a);
	}
}

static void afp_rx_release(void *priv, unsigned n)
{
	struct afp *a = priv;
	if (a->last_bulk)
		return;              /* bfd's pool is simply reused by the next burst */
	if (a->last_ring)
		emp__afp_ring_rx_release(a, n);
	else
		emp__afp_lazy_release(a, n);
}

static int afp_wait_fd(void *priv)
{
	return ((struct afp *)priv)->fd;
}

static int afp_wait_fd2(void *priv)
{
	const struct afp *a = priv;
	return a->bulk ? a->bfd : -1;
}

/* While the rx ring is being set (modes SWITCH and RINGH, afp_lazy.c),
 * frames reach the helper socket, which wait_fd does not show (SWITCH: fd
 * is unhooked for a grace period, 10-20 ms) or does not show alone (RINGH:
 * the frames that missed the ring): a waiter looks every AFP_SWITCH_LOOK_NS
 * meanwhile. Slept through, the window's acks waited for the builder's kick
 * (or for the waiter's own timeout), the sender's retransmit timer fired and
 * resent the window: 1600-4800 frames twice in a fresh process's first 20 MB. */
#define AFP_SWITCH_LOOK_NS 100000ull
static uint64_t afp_next_event(void *priv)
{
	const struct afp *a = priv;
	/* the bulk socket's last look read frames the engine has not taken yet
	 * (a poll can end on a short burst of fd's): neither fd shows them, so
	 * a waiter's sleep ends at once, and the next look takes them */
	if (a->bulk && __atomic_load_n(&a->bleft, __ATOMIC_RELAXED))
		return emp__afp_clock_ns(CLOCK_MONOTONIC);
	int m = __atomic_load_n(&a->mode, __ATOMIC_ACQUIRE);
	if (m != AFP_SWITCH && m != AFP_RINGH)
		return UINT64_MAX;
	return emp__afp_clock_ns(CLOCK_MONOTONIC) + AFP_SWITCH_LOOK_NS;
}

static uint64_t afp_rx_bulk(void *priv)
{
	return ((const struct afp *)priv)->bframes;
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
	.rx_hold = emp__afp_rx_hold,
	.rx_unhold = emp__afp_rx_unhold,
	.rx_urgent = emp__afp_rx_urgent,
	.rx_pending = afp_rx_pending,
	.rx_dropped = afp_rx_dropped,
	.wait_fd = afp_wait_fd,
	.wait_fd2 = afp_wait_fd2,
	.next_event = afp_next_event,
	.rx_bulk = afp_rx_bulk,
	.mac = afp_mac,
	.mtu = afp_mtu,
};
