/* afp_txring.c: the AF_PACKET backend's optional transmit ring (PACKET_TX_RING, TPACKET_V2): frames built in the mapped ring, one sendto() per burst. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "afp_int.h"
#include "proto.h"
#include "sys.h"

/*
 * Each frame (Ethernet + EMP header and the caller's pieces) is copied into
 * the next free ring slot, marked TP_STATUS_SEND_REQUEST, and one sendto()
 * with no data hands every marked slot to the kernel, which walks no msghdr
 * or iovec per frame. The slot goes back to TP_STATUS_AVAILABLE when the skb
 * is freed (on veth, once the peer's receive path has copied it). A slot
 * still held by the kernel ends the burst (the engine sends the rest again
 * at its next poll).
 *
 * How tpacket_snd builds the skb: by default each slot starts with a
 * virtio_net_hdr (PACKET_VNET_HDR) whose hdr_len is the whole frame, so the
 * kernel copies the frame into one linear skb. Without it (EMP_AFP_TX=
 * ringfrags) it copies the MAC header and attaches the slot's pages as
 * fragments; a device without scatter-gather (veth with offloads off) then
 * linearises every skb (a second allocation and the same copy), and the
 * peer's tpacket_rcv copies out of page fragments: on veth, offloads on or
 * off, the linear frame measured cheaper per byte for the sender (README,
 * Performance).
 *
 * Setting PACKET_TX_RING costs an RCU grace period, so the ring is built on
 * a socket of its own by afp_lazy.c's builder thread (or at open with
 * EMP_AFP_RING_AFTER=0) and published with a release store; until then, and
 * unless EMP_AFP_TX=ring asks for it (AFP_TXRING_DEFAULT), tx_burst uses
 * sendmmsg.
 * The socket is bound with protocol 0 (it hears nothing); every flush names
 * the EtherType and interface (txaddr).
 */

/* Ring size: the ring's slots are taken in turn, so all of it is walked
 * through, and every frame's copy into it, and the kernel's copy out of it,
 * touch lines that left the cache a ring ago unless the ring is small. On
 * veth the kernel frees a slot inside the sendto that sends it; on a NIC at
 * its transmit completion, and a full ring cuts a burst short (counted,
 * txring_full; the engine sends the rest at its next look). 512 KiB: 334
 * frames at MTU 1500, 64 at MTU 9000. It was 2 MiB and at least 512 frames
 * (4.75 MiB at 9000); a 2 MiB ring against this one, both with warm send
 * buffers, iperf3 -l 128K at MTU 9000: the sender's CPU per MB 0.77-0.87 ms
 * against 0.66-0.75 (README, "A warm send path") */
#define TXR_BYTES   (512u << 10)
#define TXR_MIN     64u
#define TXR_BLOCK   (256u << 10)
#define TXR_COMMIT  256u           /* frames per sendto at most */

/* where a V2 tx frame's data starts (no PACKET_TX_HAS_OFF) */
#define TXR_DATA_OFF TPACKET_ALIGN(sizeof(struct tpacket2_hdr))

static struct tpacket2_hdr *tslot(const struct afp *a, unsigned i)
{
	return (struct tpacket2_hdr *)(a->tring + (size_t)(i / a->tper_block) * a->tblock_size +
				       (size_t)(i % a->tper_block) * a->tframe_size);
}

/* The mode EMP_AFP_TX asks for: "ring" AFP_TX_RING, "ringfrags"
 * AFP_TX_RINGFRAGS, "mmsg" AFP_TX_MMSG; unset or anything else the
 * default (AFP_TXRING_DEFAULT). */
int emp__afp_txring_wanted(void)
{
	const char *e = secure_getenv("EMP_AFP_TX");
	if (e && !strcmp(e, "ring"))
		return AFP_TX_RING;
	if (e && !strcmp(e, "ringfrags"))
		return AFP_TX_RINGFRAGS;
	if (e && !strcmp(e, "mmsg"))
		return AFP_TX_MMSG;
	return AFP_TXRING_DEFAULT;
}

/* Build the ring on a new socket (a grace period: not on a caller's
 * critical path) and publish it; 0 or -errno (then sendmmsg stays). */
int emp__afp_txring_open(struct afp *a)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned page = pg > 0 ? (unsigned)pg : 4096;
	unsigned vnet = a->want_txring == AFP_TX_RING ? (unsigned)sizeof(struct virtio_net_hdr) : 0;
	unsigned fsz = TPACKET_ALIGN(TXR_DATA_OFF + vnet + a->mtu + EMP_ETH_HLEN + 4);
	unsigned block = TXR_BLOCK;
	while (block < fsz)
		block *= 2;
	block = (block + page - 1) / page * page;
	unsigned per = block / fsz;
	unsigned want = TXR_BYTES / fsz < TXR_MIN ? TXR_MIN : TXR_BYTES / fsz;
	unsigned nb = (want + per - 1) / per;
	struct tpacket_req req = { .tp_block_size = block, .tp_block_nr = nb,
				   .tp_frame_size = fsz, .tp_frame_nr = nb * per };
	int ver = TPACKET_V2, one = 1, rc;
	int fd = emp__afp_socket();
	if (fd < 0)
		return -errno;
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_ifindex = a->ifindex };
	/* no PACKET_VNET_HDR (a kernel without it): fragments */
	if (vnet && emp__sys_setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) < 0)
		vnet = 0;
	if (emp__sys_setsockopt(fd, SOL_PACKET, PACKET_VERSION, &ver, sizeof(ver)) < 0 ||
	    emp__sys_setsockopt(fd, SOL_PACKET, PACKET_LOSS, &one, sizeof(one)) < 0 ||
	    (a->qdisc_bypass &&
	     emp__sys_setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) < 0) ||
	    emp__sys_setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &req, sizeof(req)) < 0 ||
	    emp__sys_bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		rc = -errno;
		emp__sys_close(fd);
		return rc;
	}
	size_t len = (size_t)block * nb;
	uint8_t *ring = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (ring == MAP_FAILED) {
		rc = -errno;
		emp__sys_close(fd);
		return rc;
	}
	/* every slot may be in flight at once: the socket's send buffer must
	 * not refuse an skb first (it would leave frames marked) */
	int sndbuf = (int)(len * 2 + (size_t)nb * per * 1024);
	if (emp__sys_setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
		(void)emp__sys_setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	a->trfd = fd;
	a->tring = ring;
	a->tring_len = len;
	a->tvnet = vnet;
	a->tframe_size = fsz;
	a->tblock_size = block;
	a->tper_block = per;
	a->tnframes = nb * per;
	a->thead = 0;
	__atomic_store_n(&a->txring_up, 1, __ATOMIC_RELEASE);
	return 0;
}

void emp__afp_txring_close(struct afp *a)
{
	if (a->tring)
		munmap(a->tring, a->tring_len);
	if (a->trfd >= 0)
		emp__sys_close(a->trfd);
	a->tring = NULL;
	a->trfd = -1;
}

/* Hand the marked slots (the last `queued`, ending before thead) to the
 * kernel. It takes them in ring order and leaves a suffix marked when it
 * cannot send (no skb, device error): those are unmarked again and thead
 * goes back to the first of them, where the kernel's own head stays, so the
 * engine counts them unsent (it sends them again at its next poll) and no
 * stale frame waits in the ring for a later flush. Only this thread sends on
 * trfd, so after the call returns no kernel code looks at a marked slot.
 * Returns how many were taken; *err the call's -errno, if any. */
static unsigned commit(struct afp *a, unsigned queued, int *err)
{
	ssize_t r;
	do
		r = emp__syscall(SYS_sendto, a->trfd, NULL, 0, MSG_DONTWAIT,
			    (struct sockaddr *)&a->txaddr, sizeof(a->txaddr));
	while (r < 0 && errno == EINTR);
	*err = r < 0 ? -errno : 0;
	unsigned first = (a->thead + a->tnframes - queued) % a->tnframes, taken = 0;
	while (taken < queued &&
	       __atomic_load_n(&tslot(a, (first + taken) % a->tnframes)->tp_status, __ATOMIC_ACQUIRE) !=
		       TP_STATUS_SEND_REQUEST)
		taken++;
	for (unsigned k = taken; k < queued; k++)
		__atomic_store_n(&tslot(a, (first + k) % a->tnframes)->tp_status, TP_STATUS_AVAILABLE,
				 __ATOMIC_RELEASE);
	a->thead = (first + taken) % a->tnframes;
	if (taken < queued)
		a->txring_short++;
	return taken;
}

/* One frame into slot h: its length, or 0 if it is too long (skipped) */
static uint32_t build(struct afp *a, struct tpacket2_hdr *h, const struct emp_txframe *t)
{
	uint32_t len = t->hdr_len;
	for (uint32_t j = 0; j < t->npieces && j < EMP_TX_PIECES; j++)
		len += t->piece[j].len;
	if (len > a->mtu + EMP_ETH_HLEN) {
		a->oversize++;
		return 0;
	}
	uint8_t *d = (uint8_t *)h + TXR_DATA_OFF;
	if (a->tvnet) {
		/* no flags, no GSO: hdr_len is how much goes into the linear part */
		struct virtio_net_hdr v = { .hdr_len = (uint16_t)len };
		memcpy(d, &v, sizeof(v));
		d += sizeof(v);
	}
	memcpy(d, t->hdr, t->hdr_len);
	d += t->hdr_len;
	for (uint32_t j = 0; j < t->npieces && j < EMP_TX_PIECES; j++) {
		memcpy(d, t->piece[j].p, t->piece[j].len);
		d += t->piece[j].len;
	}
	h->tp_len = len + a->tvnet;
	__atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
	a->thead = a->thead + 1 == a->tnframes ? 0 : a->thead + 1;
	return len;
}

/* Frames into the ring, one flush per burst (or per TXR_COMMIT frames);
 * how many went: the rest found the ring full or the kernel refused them.
 * A frame longer than the MTU is skipped and counted, as sendmmsg's
 * EMSGSIZE. */
int emp__afp_txring_burst(struct afp *a, const struct emp_txframe *f, unsigned n)
{
	uint16_t idx[TXR_COMMIT];        /* the frame each marked slot holds */
	unsigned done = 0, queued = 0, retried = 0, taken;
	int err = 0;
	while (done < n) {
		struct tpacket2_hdr *h = tslot(a, a->thead);
		int busy = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) != TP_STATUS_AVAILABLE;
		if (busy || queued == TXR_COMMIT) {
			/* send what is marked; a slot the kernel still holds
			 * (on veth: until the peer has copied the frame) gets
			 * one more look after that */
			if (queued && (taken = commit(a, queued, &err)) < queued)
				return (int)idx[taken];
			queued = 0;
			if (busy && retried++) {
				a->txring_full++;
				break;
			}
			continue;
		}
		if (build(a, h, &f[done]))
			idx[queued++] = (uint16_t)done;
		done++;
	}
	if (queued && (taken = commit(a, queued, &err)) < queued)
		return idx[taken] ? (int)idx[taken] : err && err != -EAGAIN && err != -ENOBUFS ? err : 0;
	return (int)done;
}
