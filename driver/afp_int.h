/* afp_int.h: the AF_PACKET backend's private state, shared by afpacket.c (open, ring, tx) and afp_lazy.c (receive before the ring, the ring's build off the critical path). */
#ifndef EMP_AFP_INT_H
#define EMP_AFP_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <linux/filter.h>
#include <linux/if_packet.h>

#include "driver.h"

/* clock c now, in ns (CLOCK_MONOTONIC for intervals; CLOCK_REALTIME to
 * compare with the kernel's receive stamps) */
static inline uint64_t emp__afp_clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define AFP_BULK_POOL 64    /* bulk socket (afp_bulk.c): frames per recvmmsg, handed out over the engine's bursts */
#define AFP_TX_BATCH 256    /* frames per sendmmsg (the engine's batch is up to 256) */
enum { AFP_TX_MMSG, AFP_TX_RING, AFP_TX_RINGFRAGS };   /* EMP_AFP_TX: mmsg, ring, ringfrags */
#define AFP_TXRING_DEFAULT AFP_TX_RING   /* EMP_AFP_TX unset: the tx ring (once built), linear skbs */

/* how the receive socket is read (afp.mode, changed by the builder thread) */
enum {
	AFP_RECV,     /* no ring yet: recvmmsg from fd into the pool */
	AFP_SWITCH,   /* the helper socket hfd hears every frame too: read hfd, empty fd unread */
	AFP_RINGH,    /* fd has its ring: read the pool, then hfd, then the ring */
	AFP_RING,     /* the ring only (hfd handed back to the builder to close) */
};

#define AFP_LENT 2      /* skip[]: handed out and lent (rx_hold) */
#define AFP_GIVEN 3     /* ... and given back before the tail's sweep reached it */
#define AFP_BSLOTS 256

struct afp {
	int fd;                 /* receive: the filter, later the ring; the fd waiters poll */
	int txfd;               /* send only: protocol 0, never polled, so freeing a sent
	                         * frame wakes nobody (no sock_def_write_space lock) */
	struct sockaddr_ll txaddr;
	int ifindex;
	uint8_t mac[6];
	uint16_t etype, epid;
	unsigned mtu;
	uint8_t *ring;
	size_t ring_len;
	unsigned frame_size, nframes;
	unsigned block_size, per_block;   /* frames never straddle a block */
	unsigned head;          /* next slot rx_burst looks at */
	unsigned tail;          /* oldest slot not yet released */
	unsigned held;          /* slots between tail and head */
	uint8_t *skip;          /* slot consumed by rx_burst but not handed out (1), or AFP_LENT, AFP_GIVEN */
	/* lent slots (rx_hold): their owners, and in the order lent (a FIFO
	 * whose front may have been given back already) */
	uint32_t *owner;
	unsigned *lq, lq_head, lq_n;
	unsigned rslot_of[AFP_BSLOTS];   /* the ring slot of each frame of the last ring burst */
	unsigned rslot_n;
	int hold_ok;            /* the last burst's frames are the ring's, in rslot_of */
	uint64_t truncated, oversize;
	uint64_t kdrops;        /* the kernel's tp_drops of fd, summed (reading resets them) */
	/* transmit ring (afp_txring.c), built off the critical path */
	int want_txring;        /* EMP_AFP_TX: AFP_TX_RING / _RINGFRAGS build it */
	int qdisc_bypass;
	int txring_up;          /* published (release) once trfd and tring are ready */
	int trfd;
	unsigned tvnet;         /* virtio_net_hdr before each frame (linear skb) */
	uint8_t *tring;
	size_t tring_len;
	unsigned tframe_size, tblock_size, tper_block, tnframes;
	unsigned thead;         /* next slot to fill */
	uint64_t txring_full;   /* bursts cut short by a full ring */
	uint64_t txring_short;  /* flushes the kernel did not take whole */
	/* tx_burst's message headers (the engine calls it under its lock): on
	 * the heap, not on the caller's stack, which may be a small thread's */
	struct mmsghdr mm[AFP_TX_BATCH];
	struct iovec iov[AFP_TX_BATCH][1 + EMP_TX_PIECES];

	/* before the ring (afp_lazy.c) */
	int mode;               /* AFP_*, read with acquire */
	int last_ring;          /* the last burst came from the ring */
	int hfd;                /* helper socket during the switch, or -1 */
	uint8_t *pool;          /* pool_n slots of pool_slot bytes */
	uint32_t *plen, *pbuf;  /* per position: frame length, slot index */
	unsigned pool_n, pool_slot;
	unsigned ptail, phead, pfill;     /* released < returned < filled (free-running) */
	uint64_t rx_seen;       /* frames read before the ring: the build starts at ring_after */
	uint64_t ring_after;
	int sockmode;           /* EMP_AFP_RX=socket: no rx ring ever (frames copied out by the reader's CPU) */
	uint64_t last_look;     /* sockmode: the last recvmmsg on fd (rx_pending: looks at most every look_ns) */
	uint64_t look_ns;
	int drained;            /* sockmode: that look took fewer frames than it asked for */
	uint64_t t_open_ns;     /* a process alive past RING_AFTER_NS builds it too */
	uint64_t switch_left;   /* frames the pool had no room for at the switch (retransmitted) */
	int hgrace;             /* a grace period has passed since the ring went up */
	uint64_t t_ring_real;   /* CLOCK_REALTIME after the ring went up (0: not yet) */
	uint64_t t_hooked_real; /* CLOCK_REALTIME as PACKET_RX_RING returned (ring_attach) */
	int hcaught;            /* hfd gave a frame stamped after that: the rest of it is in the ring */
	uint64_t hdups;         /* hfd frames not read because the ring has them (a test's count) */
	uint64_t *seen;         /* keys of frames read from fd since hfd was bound (afp_lazy.c) */
	uint64_t seen_n, seen_cur;        /* keys kept (free-running); hfd's match position */
	unsigned seen_miss;     /* hfd frames in a row not found among them */
	uint64_t seen_dups;     /* hfd frames dropped unread because fd gave them (a test's count) */
	uint64_t sdropped;      /* fd frames dropped unread in mode SWITCH (hfd has them; a test's count) */
	/* the bulk receive socket (afp_bulk.c) */
	int bulk;               /* the split is on: fd's filter leaves long messages' frames to bfd */
	int bfd;                /* those frames, copied out by recvmmsg */
	uint8_t *bpool;         /* AFP_BULK_POOL slots of bslot bytes: the last look's frames */
	unsigned bslot;
	unsigned bhead, bfill, bleft;     /* frames of the last look handed out, kept; left (a hint) */
	uint32_t blen[AFP_BULK_POOL];
	uint8_t bidx[AFP_BULK_POOL];
	int bturn;              /* the next burst looks at bfd first */
	struct emp_rxframe stash[AFP_BULK_POOL];   /* fd's burst held back while bfd is emptied first */
	unsigned stash_n;
	int stash_ring, bforce; /* its last_ring; a look at bfd is owed before it goes */
	int last_bulk;          /* the last burst came from bfd (nothing to release) */
	int bdrained;           /* the last look took fewer frames than it asked for */
	uint64_t blast_look, blook_ns, bactive_until;
	unsigned bidle;         /* looks decided between long messages (racy): every 32nd reads the clock */
	uint64_t bframes, bcalls, bdrops;   /* frames and recvmmsg calls on bfd; its kernel drops */
	void (*kick)(void *arg);          /* emp_dev_params.kick */
	void *kick_arg;
	int builder;            /* 0 none, 1 running (join it), 2 could not start */
	int stop;
	pthread_t thr;
	pthread_mutex_t mu;     /* pool, mode changes, hfd */
	pthread_cond_t cv;
};

int emp__afp_ring_attach(struct afp *a, unsigned hint, int populate, char *err, size_t errlen);
int emp__afp_ring_rx_burst(struct afp *a, struct emp_rxframe *f, unsigned max);
void emp__afp_ring_rx_release(struct afp *a, unsigned n);
/* receive-ring slot i (frames never straddle a block) */
static inline struct tpacket2_hdr *emp__afp_slot(struct afp *a, unsigned i)
{
	return (struct tpacket2_hdr *)(a->ring + (size_t)(i / a->per_block) * a->block_size +
				       (size_t)(i % a->per_block) * a->frame_size);
}
/* afp_lent.c */
uint32_t emp__afp_rx_hold(void *priv, unsigned i, uint32_t owner);
void emp__afp_rx_unhold(void *priv, uint32_t tok);
uint32_t emp__afp_rx_urgent(void *priv, uint32_t *owner);
int emp__afp_filtered_socket(const struct afp *a, int bulk);
/* a new AF_PACKET socket (SOCK_RAW, protocol 0, high fd), or one kept before
 * the process gave up root (afp_spare.c); -1 with errno */
int emp__afp_socket(void);

#define AFP_BPF_MAX 16
int emp__afp_bulk_wanted(const struct afp *a, const char *ifname);
unsigned emp__afp_bulk_filter(const struct afp *a, int bulk, struct sock_filter *code);
void emp__afp_bulk_open(struct afp *a, const char *ifname);
void emp__afp_bulk_close(struct afp *a);
int emp__afp_bulk_pending(struct afp *a);
int emp__afp_bulk_burst(struct afp *a, struct emp_rxframe *f, unsigned max);
int emp__afp_main_rx(struct afp *a, struct emp_rxframe *f, unsigned max);
uint64_t emp__afp_bulk_drops(struct afp *a);

int emp__afp_txring_wanted(void);
int emp__afp_txring_open(struct afp *a);
void emp__afp_txring_close(struct afp *a);
int emp__afp_txring_burst(struct afp *a, const struct emp_txframe *f, unsigned n);

int emp__afp_lazy_init(struct afp *a, int ring_now);
int emp__afp_lazy_rx(struct afp *a, struct emp_rxframe *f, unsigned max);
void emp__afp_lazy_release(struct afp *a, unsigned n);
void emp__afp_lazy_close(struct afp *a);

#endif
