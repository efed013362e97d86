/* fw.h: the engine's interface: descriptor table, mailbox ring, status words, config, counters, entry points. */
#ifndef EMP_FW_H
#define EMP_FW_H

#include <stddef.h>
#include <stdint.h>
#include "proto.h"

struct emp_driver_ops;

/* Errors the engine reports in descriptor results (Linux errno values;
 * firmware/ includes no OS header, libemp checks them against errno.h). */
#define EMP_EBUSY         16
#define EMP_EINVAL        22
#define EMP_EMSGSIZE      90
#define EMP_ECONNRESET   104
#define EMP_ENOBUFS      105
#define EMP_ETIMEDOUT    110
#define EMP_EHOSTUNREACH 113
#define EMP_ECANCELED    125

#define EMP_ANY_HOST  0xffffu
#define EMP_ANY_EP    0xffffu
#define EMP_ANY_TAG   0xffffffffu

/* ---- descriptors: the host/engine meeting point (thesis fig. 2.5) ---- */

/* Status word: who owns the descriptor now. */
enum emp_dstat {
	EMP_DS_FREE   = 0,   /* in the host's free pool */
	EMP_DS_HOST   = 1,   /* host is filling it, or host owns a completed one */
	EMP_DS_POSTED = 2,   /* engine owns it */
	EMP_DS_DONE   = 3,   /* engine finished; result is valid; host owns it */
};

enum emp_dop { EMP_OP_SEND = 1, EMP_OP_RECV = 2 };

#define EMP_DESC_INLINE_SG 4
struct emp_sg { void *base; uint64_t len; };

/* A frame of a receive left in the device (lent.c): its payload, where
 * the message's bytes [frame * frag, + len) are, until given back. */
struct emp_lend { const uint8_t *p; uint32_t len; uint32_t tok; };

struct emp_desc {
	/* written by host before posting */
	uint8_t  op;              /* EMP_OP_* */
	uint8_t  persistent;      /* host reposts without refilling */
	uint16_t host;            /* send: dest host; recv: source host or EMP_ANY_HOST */
	uint16_t ep;              /* send: dest ep; recv: source ep or EMP_ANY_EP */
	uint16_t nsg;
	uint32_t tag;             /* send: tag; recv: tag or EMP_ANY_TAG */
	uint64_t len;             /* total of sg lengths */
	const struct emp_sg *sg;  /* points at sg_inline or host memory */
	struct emp_sg sg_inline[EMP_DESC_INLINE_SG];
	void *user;               /* host's own pointer, engine ignores */
	uint64_t cap;             /* host only: the length given at init (emp_start_len) */
	uint16_t nsg_own;         /* host only: nsg while the buffers are lent out (emp_recv_redirect) */
	/* recv, written by host before posting: frames 1..nlend-1 of a message
	 * may stay in the device, lend[f] saying where, instead of being copied
	 * into sg (lent.c); the host reads them under the engine lock */
	struct emp_lend *lend;
	uint32_t nlend;
	/* engine: frames lent now (only falls once the receive is done), the
	 * message's bytes per frame, no lending while the buffers are redirected */
	uint32_t lent, lend_frag;
	uint8_t lend_off;
	/* ownership: written by host (-> POSTED) and engine (-> DONE) */
	uint32_t stat;
	/* written by engine before stat = DONE */
	int64_t  result;          /* bytes delivered, or -errno */
	uint16_t rhost, rep;      /* recv: actual source */
	uint32_t rtag;            /* recv: actual tag */
	uint64_t rlen;            /* recv: sender's message length */
};

/* Mailbox: single-producer (host, under its own lock) single-consumer
 * (engine) ring of descriptor indices. */
#define EMP_MB_CANCEL 0x80000000u
struct emp_mailbox {
	uint32_t head;            /* written by host */
	uint32_t pad0[15];
	uint32_t tail;            /* written by engine */
	uint32_t pad1[15];
	uint32_t mask;            /* size - 1, size a power of two */
	uint32_t *ring;
};

/* Completion queue: the engine appends the index of every descriptor it
 * completes (after its results and status word are written); the host, one
 * consumer at a time, takes them after each poll. The host sizes it (a power of
 * two >= the descriptor count) and drains it after every poll, so it never
 * holds more than one poll's completions; should it be full anyway the entry
 * is dropped and counted (cq_overflow), and the status word still tells. */
struct emp_cq {
	uint32_t head;            /* written by engine */
	uint32_t pad0[15];
	uint32_t tail;            /* written by host */
	uint32_t pad1[15];
	uint32_t mask;            /* size - 1, size a power of two */
	uint32_t *ring;
};

/* ---- configuration (run-time options) ---- */
struct emp_fw_config {
	uint32_t ndesc;           /* descriptor table size */
	uint32_t max_peers;       /* remote endpoints tracked at once */
	uint32_t nhosts;          /* route table entries */
	const uint8_t (*host_mac)[6];
	uint16_t ethertype;
	uint16_t endpoint;        /* own endpoint id */
	uint32_t incarnation;     /* chosen by the caller, nonzero, new per open */
	uint32_t mtu;             /* device MTU */
	uint8_t  mac[6];          /* own MAC */
	uint32_t ack_every;       /* ack collection size K */
	uint32_t window;          /* frames in flight per message (<= 64) */
	uint32_t peer_window;     /* frames in flight per receiver */
	uint32_t peer_msgs;       /* messages in flight per receiver */
	uint64_t rto_ns, rto_max_ns, ack_delay_ns;
	uint32_t retries;         /* return-to-sender after this many timeouts */
	uint8_t  flow_control;    /* pace by receiver's advertised credits */
	uint8_t  checksum;        /* CRC32C on every frame sent */
	uint32_t tx_burst;        /* frames per poll before yielding */
	uint64_t ack_hold_ns;     /* a lone completion ack waits this long for a data frame to share its system call */
	uint64_t recv_idle_ns;    /* a partly received message that gets no new frame for this long is given
				   * up and its receive posted again (0: retries * rto_max, when a live
				   * sender has given up too); it also must arrive at an average of one
				   * frame per recv_idle_ns / 1024 (expire.c) */
	uint8_t  hello_needs_hold; /* a HELLO creates no peer the host does not hold (emp__fw_peer_hold):
				    * sessions start only where the host's own handshake agreed */
	uint8_t  auth;            /* frame authentication (auth.c): every frame carries a SipHash tag */
	uint8_t  auth_key[16];    /* the cluster secret (derived from the operator's key file) */
};

void emp__fw_config_defaults(struct emp_fw_config *c);

/* ---- counters ---- */
enum emp_drop_reason {
	EMP_DROP_SHORT, EMP_DROP_ETHERTYPE, EMP_DROP_VERSION, EMP_DROP_TYPE,
	EMP_DROP_NOT_MINE, EMP_DROP_UNKNOWN_MAC, EMP_DROP_BAD_LEN, EMP_DROP_BAD_INDEX,
	EMP_DROP_CSUM, EMP_DROP_STALE, EMP_DROP_NO_SESSION, EMP_DROP_NO_RECV,
	EMP_DROP_DUP, EMP_DROP_WINDOW, EMP_DROP_UNKNOWN_MSG, EMP_DROP_NO_PEER_SLOT,
	EMP_DROP_TX_FULL, EMP_DROP_ORDER,
	EMP_DROP_DST_MAC,          /* destination MAC not ours: broadcast, multicast or another host's */
	EMP_DROP_EXPIRED,          /* a frame of a message whose receive was given up (expire.c) */
	EMP_DROP_AUTH,             /* auth on: no tag, or a tag that does not verify (auth.c) */
	EMP_DROP_DEVICE,           /* dropped by the device before the engine saw them (a full ring) */
	EMP_DROP_MAX
};
extern const char *const emp__drop_names[EMP_DROP_MAX];

struct emp_counters {
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes;
	uint64_t tx_data, rx_data, tx_acks, rx_acks, tx_nacks, rx_nacks;
	uint64_t retransmits, timeouts, fast_retransmits;
	uint64_t msgs_sent, msgs_received, bytes_sent, bytes_received;
	uint64_t send_errors, recv_errors, peer_restarts, hellos, stale_sent, probes_sent;
	uint64_t posts_refused;     /* mailbox entries for descriptors the engine may not take */
	uint64_t cq_overflow;       /* completions the host's queue had no room for */
	uint64_t piggy_acks;        /* completion acks sent inside a DATA frame */
	uint64_t spurious_rtx;      /* rounds of retransmissions the receiver already had (RTO floor raised) */
	uint64_t fc_stalls;
	uint64_t recv_expired;      /* partly received messages given up (their receives posted again) */
	uint64_t cancelled;         /* requests the host cancelled (a closing socket's receives): not errors */
	uint64_t replies_limited;   /* STALE / HELLO_ACK replies not sent: over the rate limit */
	uint64_t peers_reclaimed;    /* idle or dead peers whose slot went to another */
	uint64_t mtu_mismatch;       /* sessions with a peer whose MTU differs from ours */
	uint64_t acks_merged;        /* bulk acks replaced, before they left, by a later one of the same message */
	uint64_t rx_gathers;         /* waits that let a multi-frame message's frames gather (gather.c) */
	uint64_t byes_sent;          /* BYEs sent at the endpoint's close, one per session (ours toward a peer, theirs toward us) */
	uint64_t peers_departed;     /* BYEs taken: peers whose life ended (their slot free once unheld) */
	uint64_t rx_lent;            /* frames of receives left in the device until read (lent.c) */
	uint64_t lent_placed;        /* of them, copied into the receive's buffers after all (its ring came round, or a redirect) */
	uint64_t rx_direct;          /* messages that arrived straight into a waiting reader's buffers (emp_recv_redirect) */
	uint64_t rx_bulk;            /* frames the device read from its bulk path (afpacket: the bulk socket, afp_bulk.c) */
	uint64_t bye_completed;      /* sends a closing peer's BYE said it had received (their final ack was lost) */
	uint32_t last_mismatch_mtu;  /* the smaller MTU then chosen */
	uint64_t drops[EMP_DROP_MAX];
	uint64_t drops_total;
};

/* ---- the engine ---- */
struct emp_fw;

struct emp_fw_env {
	const struct emp_driver_ops *ops;
	void *dev;
	struct emp_desc *desc;        /* table of cfg.ndesc descriptors */
	struct emp_mailbox *mb;
	struct emp_cq *cq;            /* optional: completed descriptor indices for the host */
	int zeroed;                   /* optional: the memory is all zero (fresh pages): init leaves
				       * the records untouched (a record is set up when first posted),
				       * so a large descriptor table costs no page faults at open */
};

/* Memory the engine needs for cfg; the caller provides it (no allocation). */
size_t emp__fw_memsize(const struct emp_fw_config *cfg);
/* 0 or -EMP_EINVAL for a config the engine cannot run. */
int emp__fw_init(struct emp_fw *fw, size_t memsize, const struct emp_fw_config *cfg,
		 const struct emp_fw_env *env);

/* Event entry points; each returns the number of descriptors completed. */
int emp__fw_mailbox(struct emp_fw *fw, uint64_t now);                 /* host posted */
int emp__fw_frame(struct emp_fw *fw, const uint8_t *f, uint32_t len, uint64_t now); /* frame arrived */
int emp__fw_timers(struct emp_fw *fw, uint64_t now);                  /* time advanced */
/* All three plus driver rx and tx flush: the usual loop body. */
int emp__fw_poll(struct emp_fw *fw, uint64_t now);
/* Whether a lone completion ack may wait for a reply (ack_hold_ns): the host
 * allows it while one of its threads is waiting in the engine, i.e. polls it
 * again at once; otherwise acks leave at the end of each poll. hold_ns, if
 * not 0, is how long a hold started now may last (the host knows that the
 * thread will be back sooner: an event loop whose replies leave at its next
 * wait), else cfg.ack_hold_ns. */
void emp__fw_set_hold(struct emp_fw *fw, int ok, uint64_t hold_ns);
/* Whether a bulk stream's acks may wait for company (EMP_BULK_HOLD_NS at
 * most; they also do while ok is set above): the host allows it while its
 * thread polls again at once or sleeps no longer than emp__fw_bulk_deadline. */
void emp__fw_set_bulk_hold(struct emp_fw *fw, int ok);
void emp__fw_skip_rx(struct emp_fw *fw, int skip);
/* When the acks held that way must leave, 0 if none are held. */
uint64_t emp__fw_bulk_deadline(const struct emp_fw *fw);
/* How long a thread that waits may sleep without looking at the device while
 * a multi-frame message trickles in (a slow link), at most max_ns; 0: it
 * should look as usual. Counts rx_gathers when not 0 (gather.c). */
uint64_t emp__fw_gather_ns(struct emp_fw *fw, uint64_t now, uint64_t max_ns);
/* Send every frame the engine holds back (before closing). */
void emp__fw_flush(struct emp_fw *fw);
/* Earliest time emp__fw_timers has work, UINT64_MAX if none. */
uint64_t emp__fw_next_deadline(const struct emp_fw *fw);
/* The same for the short timers only (delayed and held acks), UINT64_MAX if none. */
uint64_t emp__fw_next_fine_deadline(const struct emp_fw *fw);
/* Nonzero if the engine has frames it could send right now. */
int emp__fw_busy(const struct emp_fw *fw);
/* Frames wait in the transmit batch (held acks): a hint, read without the lock. */
int emp__fw_holding(const struct emp_fw *fw);
void emp__fw_counters(const struct emp_fw *fw, struct emp_counters *c);
/* Sessions opened with a peer of another MTU so far; *mtu gets the MTU then used. */
uint64_t emp__fw_mtu_mismatches(const struct emp_fw *fw, uint32_t *mtu);
/* One remote endpoint as the engine sees it (for empstat). */
struct emp_peer_info {
	uint16_t host, ep;
	uint8_t tx_state, rx_known;        /* tx_state: 0 new, 1 hello sent, 2 up */
	uint32_t remote_inc, inflight_frames, inflight_msgs, credits;
	uint64_t srtt_ns, rto_ns;
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes, retransmits;
};
/* Copies up to max peers in index order; returns how many exist. Read-only;
 * the caller holds the engine lock. */
uint32_t emp__fw_peers(const struct emp_fw *fw, struct emp_peer_info *out, uint32_t max);
/* In-flight memory in use: live transfer records and peers. */
void emp__fw_usage(const struct emp_fw *fw, uint32_t *peers, uint32_t *records);
/* The host layer starts (delta +1) or stops (-1) using the peer (host, ep):
 * a held peer is never reclaimed, and with hello_needs_hold only a held peer
 * may start a session with a HELLO (one refused shortly before is answered
 * at the hold: peer.c). Taking the first hold of a peer idle for
 * EMP_PEER_FRESH_NS restarts our session toward it. 0, or -EMP_ENOBUFS when
 * the table is full of peers in use. */
int emp__fw_peer_hold(struct emp_fw *fw, uint16_t host, uint16_t ep, int delta, uint64_t now);
/* The endpoint closes: a BYE to every peer our session toward is up with
 * (not retransmitted), flushed with the batch. Nothing may be sent after. */
void emp__fw_bye(struct emp_fw *fw);
void emp__fw_set_hello_needs_hold(struct emp_fw *fw, int on);

uint32_t emp__crc32c(uint32_t crc, const void *p, uint64_t len);
/* A posted receive's buffers (same total length), also while a message is
 * arriving (what reached the old ones is moved over): 0, -EMP_EBUSY once it
 * completed. */
int emp__fw_recv_resg(struct emp_fw *fw, uint32_t idx, const struct emp_sg *sg, uint16_t nsg);
/* Receive idx gets its own buffers back (own, nown) after emp__fw_recv_resg:
 * 2 if a message completed into the lent ones (counted: rx_direct), 1 if one
 * is arriving (what reached the lent buffers is copied over first), 0 if
 * none came. */
int emp__fw_recv_unlend(struct emp_fw *fw, uint32_t idx, const struct emp_sg *own, uint16_t nown);
/* Receive idx's message bytes [off, off + n) into dst, from its buffers and
 * the frames it has in the device (lent.c); engine lock held */
void emp__fw_lent_copy(struct emp_fw *fw, uint32_t idx, uint64_t off, uint8_t *dst, uint64_t n);
/* its frames whose bytes all lie before upto go back to the device */
void emp__fw_lent_return(struct emp_fw *fw, uint32_t idx, uint64_t upto);
/* every frame still lent copied into its receive's buffers (the device closes) */
void emp__fw_lent_place_all(struct emp_fw *fw);

/* SipHash-2-4 with a 64-bit result (siphash.c): one-shot and incremental. */
struct emp_sip { uint64_t v[4]; uint64_t total; uint8_t buf[8]; unsigned nbuf; };
void emp__sip_init(struct emp_sip *s, const uint8_t key[16]);
void emp__sip_update(struct emp_sip *s, const void *data, uint64_t len);
uint64_t emp__sip_final(struct emp_sip *s);
uint64_t emp__siphash(const uint8_t key[16], const void *data, uint64_t len);

#endif
