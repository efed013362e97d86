/* fw_int.h: the engine's private state: per-host (peer) state, per-message transfer records, lists, helpers. */
#ifndef EMP_FW_INT_H
#define EMP_FW_INT_H

#include <stdint.h>
#include <string.h>
#include "fw.h"
#include "../driver/driver.h"

#define NIL (-1)
#define TXB_MAX 256                 /* frames per tx batch: one system call (sendmmsg) each */
#define RXB_MAX 32                  /* frames per rx burst */
#define EMP_BULK_HOLD_NS 200000ull  /* a bulk stream's acks wait at most this long for company (send.c) */
#define EMP_BULK_HOLD_MAX 8         /* ... and leave when this many wait */
/* A message of this many frames or more is acked as bulk (receive.c): no
 * ack per collection of ack_every frames, the completion ack may wait for
 * company; receive coalescing paces it (gather.c). */
#define EMP_BULK_MIN_FRAMES 8
/* receive coalescing (gather.c) */
#define EMP_GATHER_MIN_FRAMES EMP_BULK_MIN_FRAMES   /* messages of this many frames or more are paced */
#define EMP_GATHER_WINDOW_NS 100000ull   /* the shortest span of a pace measurement */
#define EMP_GATHER_MIN_GAP_NS 1000ull    /* frames closer than this: no gathering (11.6 Gbit/s at 1500 B) */
#define EMP_GATHER_MIN_NS 50000ull       /* nor for less time than this (a sleep's timer slack) */
#define EMP_GATHER_MIN_LEFT 4            /* gather at least this many frames' worth */
#define EMP_GATHER_IDLE_NS 1000000ull    /* a pause this long: measure the pace afresh */
#define EMP_GATHER_QUIET_NS 2000000ull   /* no gathering this long after a message of few frames */
#define HDRBUF 80                   /* room for Ethernet + EMP headers (+ a piggybacked ack) */
/* A peer that no host layer holds, with nothing in flight, may be reclaimed
 * for another once this long has passed without a frame either way. Our own
 * session toward a peer restarts (HELLO) when we start sending after this
 * long without a frame, since the peer may have reclaimed its state of us:
 * FRESH is well below IDLE, so a peer never reclaims a session we still use
 * without a HELLO. A peer whose life said BYE (proto.h) needs no quiet. */
#define EMP_PEER_IDLE_NS  2000000000ull
#define EMP_PEER_FRESH_NS 1000000000ull

enum peer_tx_state {
	PTX_NEW = 0,                /* no session: HELLO needed before data */
	PTX_HELLO,                  /* HELLO sent, waiting for HELLO_ACK */
	PTX_UP,                     /* session established: data may flow */
};

enum rec_kind {
	REC_FREE = 0,
	REC_SEND_QUEUED,            /* posted, waiting for its turn */
	REC_SEND_ACTIVE,            /* has a msg id, frames in flight */
	REC_RECV_POSTED,            /* posted, unmatched */
	REC_RECV_ACTIVE,            /* matched to a message, frames arriving */
};

struct dlist { int32_t head, tail; };

/* Per-host state: one remote endpoint (host, ep). */
struct peer {
	uint16_t host, ep;
	uint8_t used, tx_state, rx_known, on_alist;
	uint32_t tx_remote_inc;     /* their incarnation, as we address them */
	uint16_t tx_session;        /* our session toward them */
	uint16_t rx_session;        /* their session toward us */
	uint32_t tx_nonce, rx_nonce; /* the sessions' HELLO nonces (peer.c) */
	uint32_t rx_resp;           /* auth: our nonce for their session toward us (sent in HELLO_ACK) */
	uint8_t tx_key[16], rx_key[16]; /* auth: the two sessions' keys (auth.c) */
	uint32_t rx_remote_inc;     /* their incarnation, as we accept them */
	uint32_t bye_inc;           /* the life of theirs that said BYE (0: none) */
	uint32_t next_msg_id;       /* next id we assign */
	uint32_t match_next;        /* lowest id of theirs not yet matched */
	uint64_t matched;           /* bit i: id match_next+i is matched (i < 64) */
	uint32_t frag;              /* payload bytes per frame toward them */
	uint32_t inflight_frames, inflight_msgs;
	uint32_t credits;           /* their last advertised free receives */
	uint32_t unacked_starts;    /* messages started since that advertisement */
	uint64_t hello_deadline, hello_rto, fc_probe_at;
	uint64_t challenge_at;      /* rate limit for PROBEs of the incarnation we know */
	uint64_t srtt, rttvar, rto;  /* round-trip estimate (ns), Jacobson/Karels */
	uint64_t rto_floor;         /* raised by spurious retransmits (0: the configured rto) */
	uint64_t spurious_at;       /* last spurious-retransmit response */
	uint64_t lossy_at;          /* last gap the receiver reported (NACK): frames do get lost */
	uint32_t hello_tries;
	uint64_t nack_sent_at;      /* rate limit for no-recv notices (per message) */
	uint32_t nack_msg;
	uint64_t resend_asked_at;   /* rate limit for resend requests (per peer) */
	uint8_t norecv_pending;     /* a message of theirs found no receive */
	uint32_t norecv_msg, norecv_tag;
	struct dlist txq;           /* REC_SEND_QUEUED, posting order */
	struct dlist txs;           /* the one-frame lane: REC_SEND_QUEUED one-frame messages with
				     * nothing of their tag in txq; they start first (send.c) */
	struct dlist act;           /* REC_SEND_ACTIVE, msg id order */
	struct dlist rxa;           /* REC_RECV_ACTIVE */
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes, retransmits;  /* this peer's traffic */
	uint64_t reply_at;          /* last unasked reply (STALE, HELLO_ACK) to it: rate limit (limit.c) */
	uint32_t rx_dead_msg[4];    /* messages of theirs whose receive was given up (expire.c) ... */
	uint16_t rx_dead_ses[4];    /* ... and their sessions; a ring */
	uint8_t rx_dead_n;
	uint8_t held_set;           /* held_msg, held_tag: the last message of several frames whose completion ack was held (send.c) */
	int32_t hnext;              /* hash chain */
	int32_t anext, aprev;       /* active-peer list */
	uint64_t last_act;          /* last frame to or from this peer (fw->now) */
	uint32_t holds;             /* host layer's references (emp__fw_peer_hold) */
	uint32_t held_msg, held_tag;
};

/* Per-message transfer record, one per descriptor slot. */
struct rec {
	uint8_t kind, fast_rtx_armed;
	uint8_t lane;               /* send, queued: on the peer's txs, not txq */
	int32_t next, prev;
	int32_t peer;
	uint32_t msg_id, tag, nframes, frag;
	uint32_t prev_id;           /* send: id this message must not overtake (same tag), 0 none */
	uint64_t len;               /* message length */
	uint64_t cap;               /* recv: buffer capacity */
	uint64_t seq;               /* recv: posting order */
	uint32_t cum;               /* frames [0,cum) acked (send) / received (recv) */
	uint64_t sack;              /* bit i: frame cum+i acked / received */
	uint32_t sent_hi;           /* send: frames [0,sent_hi) sent at least once */
	uint64_t rtx;               /* send: bit i: frame cum+i must be resent */
	uint64_t deadline;          /* send: retransmit timer; recv: delayed ack */
	uint64_t rto, last_fast_rtx;
	uint32_t probe_frame;       /* send: frame whose ack times the round trip */
	uint64_t probe_at;          /* its send time, 0 = no probe out */
	uint32_t retries;
	uint32_t since_ack, nack_cum;
	uint16_t src_host, src_ep;  /* recv: actual source */
	uint64_t rx_expire;         /* recv: give the message up at this time (expire.c) */
	uint64_t rx_limit;          /* recv: ... and at the latest at this one */
	uint64_t rx_first;          /* recv: when its first frame was taken, 0 none yet (gather.c) */
};

/* the pace of multi-frame messages arriving (gather.c) */
struct gather {
	uint64_t start;             /* the flow's first frame (measured afresh from there) */
	uint64_t t0, last;          /* the look that opened the span, the latest look that took a frame */
	uint64_t gap;               /* ns between frames arriving, 0: not measured yet */
	uint64_t msg_gap;           /* smoothed ns per frame of whole messages, first to last, 0: none yet */
	uint64_t done_at;           /* the latest multi-frame message completed, 0 none */
	uint64_t msg_int;           /* smoothed ns between their completions, 0: not measured yet */
	uint32_t sends, sends_at_done;   /* sends posted, and their count at done_at */
	uint64_t small_at;          /* the latest frame of a message of few frames, 0 none */
	uint32_t n;                 /* frames taken in the span's looks after t0's */
	int on;                     /* a flow is being measured */
};

struct emp_fw {
	struct emp_fw_config cfg;
	const struct emp_driver_ops *ops;
	void *dev;
	struct emp_desc *desc;
	struct emp_mailbox *mb;
	struct emp_cq *cq;
	struct rec *rec;            /* [ndesc] */
	struct peer *peer;          /* [max_peers] */
	int32_t *phash;             /* [phash_mask+1] */
	uint32_t phash_mask;
	int32_t *mhash;             /* MAC -> host index */
	uint32_t mhash_mask;
	uint8_t (*host_mac)[6];     /* [nhosts] copy */
	struct dlist *rbucket;      /* posted receives from one host and tag: exact, or from any endpoint of it */
	uint32_t rbucket_mask;
	struct dlist rwild;         /* posted receives with a wildcard host or tag */
	uint64_t wild_steps;        /* rwild entries looked at by matching (tests) */
	uint64_t recv_seq;
	uint32_t posted_recvs;
	uint32_t norecv_peers;      /* peers with norecv_pending */
	uint32_t npeers, nrecs;     /* npeers: table slots ever used (index bound) */
	uint32_t npeers_live;       /* slots in use now */
	uint32_t hello_seq;         /* sessions opened (session nonces) */
	int32_t alist;              /* first active peer, circular via anext */
	uint64_t next_deadline;
	uint64_t next_fine;          /* earliest of the short timers only (delayed and held acks) */
	uint64_t dev_drops_at, dev_drops_seen;   /* the device's drop count: last asked, last seen */
	int pending_tx, rx_more, in_poll, completed, hold_ok, bulk_ok, skip_rx;
	int rx_cur;                  /* the frame being taken: its index in the device's burst, -1 none (lent.c) */
	uint64_t hold_ns;            /* a hold started now lasts this long (0: cfg.ack_hold_ns) */
	uint64_t now;
	/* tx batch */
	unsigned txn;
	unsigned tx_holdable;        /* frames in the batch that may wait for company */
	uint64_t tx_hold_until;     /* 0: not holding */
	struct emp_txframe txf[TXB_MAX];
	struct { int32_t rec, peer; uint32_t frame; uint8_t held_ack, dead, bulk_ack; uint64_t since; } txmeta[TXB_MAX];   /* since: a held ack's hold began */
	uint64_t bulk_until;        /* 0, or until when the batch's bulk acks may wait (send.c) */
	uint8_t txhdr[TXB_MAX][HDRBUF];
	struct { uint8_t b[HDRBUF]; uint32_t len; int32_t peer; uint64_t since; uint8_t key[16]; } keep[TXB_MAX];   /* acks kept for the next batch (send.c) */
	uint8_t *bounce;            /* [TXB_MAX][mtu] for frames with too many pieces */
	uint32_t reply_tokens;      /* unasked replies that may go now (limit.c) */
	uint64_t reply_refill;      /* when the bucket was last refilled */
	struct { uint32_t key; uint64_t at; } reply_anon[16]; /* replies to senders without a peer slot (limit.c) */
	/* HELLOs dropped for want of a hold (hello_needs_hold), the last of each
	 * of the latest senders: answered when the host holds the sender soon
	 * after (peer.c); no peer state */
	struct { uint64_t at; uint32_t src_inc, nonce; uint16_t host, ep, session; } refused[8];
	unsigned refused_next;
	struct emp_counters ctr;
	struct gather rxg;
	/* auth.c: per-type keys, a scratch session key, each batch slot's key and tag */
	uint8_t auth_hello[16], auth_stale[16], auth_probe[16], auth_tmp[16];
	uint8_t txkey[TXB_MAX][16];
	uint8_t txtag[TXB_MAX][EMP_AUTH_TAG_LEN];
};

/* DATA header and, with auth, the tag: a frame's bytes beyond Ethernet and payload */
static inline uint32_t emp__overhead(const struct emp_fw *fw)
{
	return EMP_DATA_OVERHEAD + (fw->cfg.auth ? EMP_AUTH_TAG_LEN : 0);
}

/* byte order */
static inline void put16(uint8_t *p, uint16_t v) { p[0] = v >> 8; p[1] = (uint8_t)v; }
static inline void put24(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 16); p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)v; }
static inline void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = (uint8_t)v; }
static inline void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }
static inline uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

/* bit i: frame cum+i of this send has gone out at least once (i < 64) */
static inline uint64_t emp__sent_mask(const struct rec *x)
{
	uint32_t n = x->sent_hi - x->cum;
	return n >= 64 ? ~0ull : (1ull << n) - 1;
}
/* a message acked as bulk: longer than the message window, or of
 * EMP_BULK_MIN_FRAMES frames or more */
static inline int emp__bulk(const struct emp_fw *fw, const struct rec *x)
{
	return x->nframes > fw->cfg.window || x->nframes >= EMP_BULK_MIN_FRAMES;
}
/* serial-number comparison for 32-bit message ids */
static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline uint64_t min64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* Parsed common header of a received frame. */
struct hdr {
	const uint8_t *dst_mac, *src_mac;
	uint8_t type;
	uint16_t flags, dst_ep, src_ep, session, credits;
	uint32_t dst_inc, src_inc, msg_id;
	int host;                   /* sender's route-table index */
	uint32_t len;               /* whole frame */
	const uint8_t *body;        /* after the common header */
	uint32_t body_len;
};

/* engine.c: lists, records, completion */
void emp__dl_push(struct emp_fw *fw, struct dlist *l, int32_t r);
void emp__dl_del(struct emp_fw *fw, struct dlist *l, int32_t r);
void emp__complete(struct emp_fw *fw, int32_t r, int64_t result);
void emp__arm(struct emp_fw *fw, uint64_t deadline);
void emp__arm_fine(struct emp_fw *fw, uint64_t deadline);
int emp__host_by_mac(const struct emp_fw *fw, const uint8_t *mac);
/* peer.c: per-host state, sessions, incarnations, reclaiming */
int32_t emp__peer_get(struct emp_fw *fw, uint16_t host, uint16_t ep, int create);
/* a frame went to or came from p */
static inline void emp__peer_touch(struct emp_fw *fw, int32_t p) { fw->peer[p].last_act = fw->now; }
/* A frame (DATA, BYE) of their session toward us, the one we know. */
static inline int emp__rx_session_ok(const struct peer *pe, const struct hdr *h)
{
	return pe && pe->rx_known && pe->rx_remote_inc == h->src_inc && pe->rx_session == h->session;
}
/* A frame (ACK, BYE with DONE) of our session toward them, the one that is up. */
static inline int emp__tx_session_ok(const struct peer *pe, const struct hdr *h)
{
	return pe && pe->tx_state == PTX_UP && pe->tx_session == h->session && pe->tx_remote_inc == h->src_inc;
}
/* A frame we send in their session toward us (ACK, HELLO_ACK, BYE with DONE):
 * it names their incarnation as we accept it and, with auth, uses that key. */
static inline int emp__rx_side(uint8_t type, uint16_t flags)
{
	return type == EMP_T_ACK || type == EMP_T_HELLO_ACK || (type == EMP_T_BYE && (flags & EMP_F_DONE));
}
/* before a send is queued to p: a session idle for EMP_PEER_FRESH_NS starts over */
void emp__peer_fresh(struct emp_fw *fw, int32_t p, uint64_t now);
void emp__peer_activate(struct emp_fw *fw, int32_t p);
void emp__peer_fail_sends(struct emp_fw *fw, int32_t p, int64_t err);
void emp__peer_fail_recvs(struct emp_fw *fw, int32_t p, int64_t err);
/* our session toward p is over: its sends fail (ECONNRESET), the next send opens a new one */
void emp__peer_tx_reset(struct emp_fw *fw, int32_t p);
void emp__peer_send_hello(struct emp_fw *fw, int32_t p, uint64_t now);
void emp__rx_hello(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now);
void emp__hello_refused(struct emp_fw *fw, const struct hdr *h, uint64_t now);
void emp__rx_hello_ack(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now);
void emp__rx_stale(struct emp_fw *fw, const struct hdr *h, int32_t p);
void emp__send_stale(struct emp_fw *fw, const struct hdr *h);
void emp__rx_probe(struct emp_fw *fw, const struct hdr *h, uint64_t now);
/* bye.c: the end of a life */
void emp__rx_bye(struct emp_fw *fw, const struct hdr *h, int32_t p);
void emp__rx_bye_done(struct emp_fw *fw, const struct hdr *h, int32_t p);
/* send.c: data frames and the tx batch */
uint8_t *emp__tx_slot(struct emp_fw *fw, int32_t p, uint8_t type, uint16_t flags, uint32_t msg_id,
		      uint16_t session, uint32_t body_len);
void emp__tx_flush(struct emp_fw *fw);
void emp__tx_flush_or_hold(struct emp_fw *fw, uint64_t now);
void emp__tx_bulk_ack(struct emp_fw *fw, uint32_t msg_id, uint64_t now);
void emp__tx_hold_ack(struct emp_fw *fw, int32_t p, const struct rec *x, uint64_t now);
/* send.c: a posted send joins its peer's queue (or the one-frame lane) */
void emp__send_enqueue(struct emp_fw *fw, int32_t p, int32_t r);
void emp__tx_pump(struct emp_fw *fw, uint64_t now);
/* receive.c: the frame dispatcher */
void emp__drop(struct emp_fw *fw, enum emp_drop_reason why);
/* ack.c */
void emp__send_ack(struct emp_fw *fw, int32_t p, struct rec *r, uint16_t flags);
void emp__send_ack_raw(struct emp_fw *fw, int32_t p, uint32_t msg_id, uint32_t cum,
		       uint32_t nframes, uint64_t sack, uint16_t flags);
void emp__rx_ack(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now);
/* timers.c: protocol events */
void emp__timer_data_sent(struct emp_fw *fw, struct rec *r, uint64_t now);
void emp__timer_ack_progress(struct emp_fw *fw, struct rec *r, uint64_t now);
void emp__timer_frame_received(struct emp_fw *fw, struct rec *r, uint64_t now);
void emp__timer_rtt_sample(struct emp_fw *fw, struct peer *pe, uint64_t rtt, uint64_t now);
void emp__timer_spurious(struct emp_fw *fw, struct peer *pe, uint64_t now);
/* flow.c: credits */
uint16_t emp__fc_advertise(const struct emp_fw *fw);
void emp__fc_update(struct emp_fw *fw, struct peer *pe, uint16_t credits);
int emp__fc_may_start(struct emp_fw *fw, struct peer *pe, uint64_t now);
void emp__fc_started(struct emp_fw *fw, struct peer *pe);
/* descriptors.c: mailbox, posting, matching */
int32_t emp__match_recv(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag, int allow_wild);
int emp__match_recv_blocked(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag);
/* receive.c: tell a sender whose message found no receive that one is posted now */
void emp__rx_unblock(struct emp_fw *fw, const struct emp_desc *d);
/* descriptors.c: a receive given back to the posted lists, at its place in posting order */
void emp__repost_recv(struct emp_fw *fw, int32_t r);
/* expire.c: partial receives that stop making progress */
void emp__recv_matched(struct emp_fw *fw, struct rec *x, uint64_t now);
void emp__recv_progress(struct emp_fw *fw, struct rec *x, uint64_t now);
/* gather.c: a frame of message x was taken (its pace is measured) */
void emp__gather_frame(struct emp_fw *fw, struct rec *x, uint64_t now);
/* gather.c: x, a receive, took its last frame now (its pace is measured) */
void emp__gather_done(struct emp_fw *fw, const struct rec *x, uint64_t now);
/* gather.c: a send was posted (a host that sends is not a stream's receiver only) */
void emp__gather_sent(struct emp_fw *fw);
int emp__recv_expired(struct emp_fw *fw, int32_t p, int32_t r, uint64_t now);
int emp__recv_dead(const struct peer *pe, uint32_t msg_id, uint16_t session);
/* auth.c: frame authentication */
void emp__auth_init(struct emp_fw *fw);
void emp__auth_session_key(const struct emp_fw *fw, uint8_t out[16], const uint8_t *mac_i, const uint8_t *mac_r,
			   uint16_t ep_i, uint16_t ep_r, uint32_t inc_i, uint32_t inc_r, uint32_t n_i,
			   uint32_t n_r, uint16_t session);
void emp__auth_tx_key(struct emp_fw *fw, unsigned i, const struct peer *pe, uint8_t type, uint16_t flags);
void emp__auth_tag(struct emp_fw *fw, unsigned i);
int emp__auth_check(struct emp_fw *fw, const struct hdr *h, const uint8_t *f);
/* limit.c: STALE and HELLO_ACK are sent unasked (a spoofed frame draws one): 1 if one may go to p now */
int emp__reply_ok(struct emp_fw *fw, int32_t p, uint64_t now);
int emp__reply_ok_anon(struct emp_fw *fw, uint16_t host, uint16_t ep, uint64_t now);

void emp__sg_copy(const struct emp_desc *d, uint64_t off, uint8_t *p, uint64_t len, int out);   /* receive.c */
void emp__place(const struct emp_desc *d, uint64_t off, const uint8_t *src, uint64_t len);
/* lent.c */
int emp__lent_take(struct emp_fw *fw, int32_t r, uint32_t frame, const uint8_t *payload, uint32_t len);
void emp__lent_place(struct emp_fw *fw, int32_t r);
void emp__lent_drop(struct emp_fw *fw, int32_t r);
void emp__lent_urgent(struct emp_fw *fw);

#endif
