/* conn.h: the per-connection EMP stream state shared by stream_engine.c, stream_app.c and linger.c. */
#ifndef EMP_CONN_H
#define EMP_CONN_H

#include "es.h"
#include "stats.h"

#define NCTRL 4
#define CTRL_SZ 16
#define CTRL_TAG 0x80000000u
enum { CT_CREDIT = 1, CT_HELLO = 2, CT_CLOSE = 3, CT_BYE = 4 };
/* A control message is {type, credits, key (2 words)}; a data message starts
 * with ES_HDR bytes {credits u16, flags u16, token u32}. key is the 64-bit
 * value the receiver chose in the negotiation, token its low 32 bits: the
 * receiver drops (and counts) whatever does not carry them. */
#define ES_SKIP 0xffffffffu              /* roff of a receive slot that held a forged message */
#define ES_KIND_CONN 3                   /* what a request's user pointer names */
#define ES_LEND_SG 8                     /* a lent receive: the slot's header, up to 6 of the reader's vectors, the slot's rest */
#define ES_LEND_MIN 2048                 /* a reader asking for less copies from the slot (a small read may not take a whole message) */
#define ES_LEND_AFTER 16384              /* a message this long (header included: firmware/lent.c EMP_LEND_MIN_BYTES) gives its slot a lending table */

struct es_conn {
	int kind;                        /* ES_KIND_CONN */
	struct es_sock *s;
	emp_endpoint_t *ep;
	unsigned gen;
	uint32_t lid, rid;
	emp_addr_t peer;
	int peer_known;
	int held;                        /* emp_peer_hold on peer (released at teardown) */
	/* receive: a ring of rx_slots slots; a slot's sequence number q (counting
	 * from 0, never wrapping) is slot q % rx_slots. Below rx_read: read by the
	 * application and posted again; [rx_read, rx_done): completed, holding
	 * bytes not yet read; [rx_done, rx_read + rx_slots): posted, waiting */
	unsigned rx_slots;               /* receives posted per connection (EMP_SOCK_BUFS; credits the peer holds) */
	unsigned rx_slot_sz;             /* payload bytes per receive slot (EMP_SOCK_BUFSZ), after ES_HDR */
	int data_posted;                 /* the rx_slots receives are posted (the server: once the peer's endpoint is proved) */
	uint8_t *rbuf;
	emp_req_t **rreq;
	uint32_t *rlen, *roff;
	uint64_t rx_read;                /* oldest slot the application has not read to its end */
	uint64_t rx_done;                /* next slot to complete (completions come in this order) */
	size_t rbytes;
	unsigned to_return;
	int rfin;
	/* a reader waiting with nothing to read lends slot rd_q its buffers
	 * (stream_app.c): a message that arrives meanwhile lands there, one copy
	 * instead of two; reap_data counts its first rd_got bytes as read */
	int rd_active, rd_done;
	uint64_t rd_q;
	uint32_t rd_len, rd_got;
	uint32_t last_rlen;              /* the last data message's length: a reader lends only after a long one */
	struct iovec rd_sg[ES_LEND_SG];
	emp_req_t *creq[NCTRL];
	uint8_t cbuf[NCTRL][CTRL_SZ];
	emp_req_t *csend;                /* persistent, made with the send slots */
	int cbusy;                       /* csend in flight */
	uint8_t csbuf[CTRL_SZ];
	int hello_seen, hello_want, hello_sent;
	int first_failed;                /* the send of the first slot (a write right behind the HELLO) failed */
	uint16_t hello_ep;               /* the endpoint the peer's HELLO came from */
	uint64_t key_rx, key_tx;         /* ours (the peer presents it), the peer's (we present it) */
	unsigned forged;                 /* messages dropped for a wrong key or token */
	/* send: a ring of tx_slots slots, numbered like the receive ring. Below
	 * tx_done: completed, free again; [tx_done, tx_posted): posted, in flight;
	 * [tx_posted, tx_staged): filled by the application, waiting for a credit
	 * (the last one may still be appended to) */
	unsigned tx_slots;               /* send slots (= rx_slots) */
	unsigned tx_slot_sz;             /* payload bytes per send slot: min(ours, the peer's rx_slot_sz) */
	unsigned credits;                /* receives the peer has posted for us: data messages we may post */
	unsigned peer_bufs;              /* the peer's receive buffers: credits never exceed them */
	uint8_t *sbuf;
	emp_req_t **sreq;                /* by buffer: a buffer and its persistent send descriptor */
	uint32_t *slen;                  /* slen, sdone, sfin: by slot, q % tx_slots */
	uint8_t *sdone, *sfin;
	/* which buffer slot q writes into: smap[q % tx_slots], given as q is first
	 * staged (tx_mapped: the slots given so far) from a stack of free buffers,
	 * the one freed last on top: a stream whose few messages in flight come
	 * back acked writes into the same warm buffers, not through all of sbuf
	 * (32 x 128 KiB walked through cold: MTU 9000, the sender's CPU per MB
	 * 0.97-1.03 ms against 0.87-0.89 with 8 slots) */
	uint16_t *smap, *sfree;
	unsigned nfree;
	uint64_t tx_mapped;
	uint64_t tx_done;                /* oldest slot not free yet (freed in order as sends complete) */
	uint64_t tx_posted;              /* next slot to post (needs a credit) */
	uint64_t tx_staged;              /* next slot the application starts (it appends to the one before while unposted) */
	int fin_want, fin_staged, fin_done;
	int hold_tail;                   /* the writer may write again soon (TCP_CORK, MSG_MORE, an event-loop round): the last staged slot, with room, is not posted (hold.c) */
	int listed;                      /* on its thread's held list (hold.c) */
	int tail_bulk;                   /* the last staged slot was begun because the one before, still in flight, filled up: a bulk stream, whose tail is not held for the rest of an event-loop round (hold.c) */
	/* state */
	int err, err_told, kdead, shut_rd, shut_wr;
	int64_t kgrace;                  /* the kernel connection ended: the peer's EMP FIN awaited until then (es__kernel_check without waiting) */
	int leak;
	/* closing: after close() the connection lingers as a zombie until both
	 * sides said BYE: the last message each sends on the connection, once its
	 * own FIN is through, the peer's FIN seen and nothing is left to send; so
	 * after the peer's BYE nothing more can come and the receives may go */
	int closing, close_want, peer_closed;
	int rst_drawn;                   /* a write after peer_closed went nowhere, as TCP's draws a RST: the next gets EPIPE */
	int dying;                       /* given up: torn down at zdl (linger.c detach) */
	/* The close exchange: the closing side's FIN carries ES_CLOSE (no
	 * separate message; the peer then sends without credits); a FIN with
	 * CLOSE, or sent after the peer's FIN, with no control message in
	 * flight, carries ES_LAST: nothing at all follows it. A side whose FIN
	 * did not carry LAST sends BYE as its last control message once both
	 * FINs are through. peer_quiet: the peer's LAST or BYE came. */
	int bye_sent, bye_done, fin_last, peer_quiet;
	int64_t last_ctrl_ns, rfin_ns, zdl;
	struct es_conn *znext;
	/* empstat's row (connsetup.c) */
	uint64_t nin, nout;              /* bytes the application read and wrote */
	unsigned row1;                   /* row + 1; 0: none */
	int row_st;                      /* state as published (ROW_*, connsetup.c) */
	int64_t row_ns;                  /* last published */
};

static inline uint8_t *rslot(struct es_conn *c, uint64_t seq) { return c->rbuf + (seq % c->rx_slots) * (size_t)(ES_HDR + c->rx_slot_sz); }
/* send buffer b (its persistent descriptor: sreq[b]) */
static inline uint8_t *sbase(const struct es_conn *c, unsigned b) { return c->sbuf + b * (size_t)(ES_HDR + c->tx_slot_sz); }
/* the buffer of send slot q, given to it before (tx_map) */
static inline unsigned sbuf_of(const struct es_conn *c, uint64_t q) { return c->smap[q % c->tx_slots]; }
static inline uint8_t *sslot(const struct es_conn *c, uint64_t q) { return sbase(c, sbuf_of(c, q)); }
/* the persistent send descriptor of send slot q's buffer */
static inline emp_req_t *sreq_of(const struct es_conn *c, uint64_t q) { return c->sreq[sbuf_of(c, q)]; }
/* send slot q's buffer back on the free stack, on top: the next slot staged writes into it */
static inline void tx_unmap(struct es_conn *c, uint64_t q) { c->sfree[c->nfree++] = (uint16_t)sbuf_of(c, q); }
/* send slots up to q get their buffers (q < tx_done + tx_slots: one is free for each) */
static inline void tx_map(struct es_conn *c, uint64_t q)
{
	while (c->tx_mapped <= q)
		c->smap[c->tx_mapped++ % c->tx_slots] = c->sfree[--c->nfree];
}
/* the last staged slot is not posted yet, carries no FIN and has room: a write appends to it */
static inline int tx_tail_open(const struct es_conn *c)
{
	return c->tx_staged > c->tx_posted && !c->sfin[(c->tx_staged - 1) % c->tx_slots] &&
	       c->slen[(c->tx_staged - 1) % c->tx_slots] < c->tx_slot_sz;
}
/* a send slot is free: the next one can be staged */
static inline int tx_slot_free(const struct es_conn *c) { return c->tx_staged - c->tx_done < c->tx_slots; }
/* the next send slot staged, empty (with FIN if fin; tx_slot_free checked); its index */
static inline unsigned tx_stage_new(struct es_conn *c, int fin)
{
	unsigned i = c->tx_staged % c->tx_slots;
	tx_map(c, c->tx_staged);
	c->tail_bulk = c->tx_staged > c->tx_done && c->slen[(c->tx_staged - 1) % c->tx_slots] == c->tx_slot_sz;
	c->slen[i] = 0;
	c->sfin[i] = (uint8_t)fin;
	c->tx_staged++;
	return i;
}

void es__set_err(struct es_conn *c, int e, int line);
/* hold.c: list s (s->lock held) so that its held tail is posted at its thread's next wait or the bound */
void es__hold(struct es_sock *s);
/* connsetup.c: the peer held in the engine; control receives (from c->peer,
 * whose endpoint may be any), data receives (rx_slots, in ring order) */
int es__conn_hold(struct es_conn *c);
int es__conn_post_ctrl(struct es_conn *c);
int es__conn_post_data(struct es_conn *c);
/* connection ids in use (connsetup.c): released when a connection is freed */
void es__conn_lid_release(uint32_t lid);
/* a lingering connection moved: threads waiting for zombies look again (linger.c) */
void es__zombie_changed(struct es_conn *c);
/* tests only: one pass over the lingering connections; how many are left (linger.c) */
int es__zombies_reap(void);
extern int es__reaper_off;   /* tests only: no reaper thread (virtual time) */
/* empstat's connection rows (connsetup.c). es__conn_row (s->lock held) fills
 * *i and returns c's row (taken on first use) when it is due (state changed,
 * or 100 ms since the last), else -1; es__conn_row_put publishes it and must
 * be called with no lock of the shim held: libemp's statistics lock comes
 * after all of ours and its fork handler takes it first (fork.c).
 * es__conn_row_free: the connection goes (no shim lock held). */
int es__conn_row(struct es_conn *c, struct emp_conn_info *i);
void es__conn_row_put(int row, const struct emp_conn_info *i);
void es__conn_row_free(struct es_conn *c);
#define set_err(c, e) es__set_err(c, e, __LINE__)
int es__post_recv(struct es_conn *c, uint64_t seq);

/* bufcache.c: connection rings kept across connections */
struct es_bufstats {
	atomic_uint reused;       /* rings a new connection took from the cache */
	atomic_uint fresh;        /* rings malloc'd */
};
extern struct es_bufstats es__bufstats;
void *es__ring_get(size_t size);
void es__ring_put(void *p);
void es__retire_head(struct es_conn *c);
int es__unlend(struct es_conn *c);
int es__can_stage(struct es_conn *c);
void es__flush(struct es_conn *c);

#endif
