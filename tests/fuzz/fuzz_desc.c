/* fuzz_desc.c: libFuzzer target for the engine's host side: input bytes are host operations on the descriptor
 * table and mailbox of two engines joined by an in-memory wire (posts, cancels, reposts, batches, restarts),
 * interleaved with polls, time, wire faults, crafted and replayed frames; checks ownership and data. */
#include "fuzz_engine.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Two engines, A (host 0) and B (host 1), endpoint 1 each, share a clock and a
 * wire (one inbound queue per engine, filled by the other's tx_burst, drained
 * by its own rx_burst inside emp__fw_poll). Host 2 (C) is in the route table
 * but has no engine: frames to it vanish; crafted frames can come from it.
 *
 * Input: byte 0 = engine settings (bit0 checksum, bit1 flow control, bit2
 * ack_every 1, bit3 window 8, bit4 MTU 9000, bit5 peer_window 16 / peer_msgs 4,
 * bit6 retries 3, bit7 rto_max 4 ms), then operations: one byte (low 4 bits:
 * op, bit4: engine A or B, bits 5-7: op flags) and its arguments (missing
 * bytes read as 0):
 *   0 post send   idx host tag nsg sizes...   flag1: invalid on purpose, flag2: no kick
 *   1 post recv   idx host tag nsg sizes...   (same flags)
 *   2 cancel      idx                          mailbox entry idx|CANCEL, whatever the state
 *   3 repost      idx                          a completed descriptor, same buffers (persistent)
 *   4 reclaim     idx                          flag1: all; checks results and data, frees buffers
 *   5 poll        dt                           advance time (dt chooses how far) and poll
 *   6 wire        mode                         faults for the frames that follow
 *   7 craft       ctrl len_hi len_lo bytes...  a frame into the engine, from C (flag1: from its peer)
 *   8 replay      which                        a frame the peer sent earlier, again
 *   9 restart                                  the engine re-initialised (new incarnation); its host
 *                                              takes every descriptor back
 *  10 post twice  idx                          any index again (held by the engine or the host), or out of range
 *  11 kick                                     emp__fw_mailbox on unkicked posts
 *  12 timers      dt                           emp__fw_timers only
 *  13 run         rounds                       both engines polled, time in quarter RTOs
 *  14 big send    idx                          a send longer than 4 GiB (EMSGSIZE, never read)
 *  15 garbage     v0 v1 v2 v3                  a raw 32-bit mailbox entry
 *
 * Checks (abort on failure): the engine never writes a descriptor or a receive
 * buffer the host owns (canaries), never touches a buffer after it completed
 * (buffers are freed at reclaim, so ASan sees any later access), results are
 * lengths that fit or the engine's errors, completed receives hold exactly the
 * sender's bytes (unless the frames were tainted), posted descriptors equal the
 * engine's records, usage stays in bounds.
 */

#define NDESC    24
#define NHOSTS   3
#define MAXSG    6
#define QMAX     256
#define RECN     64
#define C_INC    0x0c0c0c0cu
#define C_SESSION 0x3333

static const uint8_t macs[NHOSTS][6] = {
	{ 0x02, 0, 0, 0, 0, 0x20 }, { 0x02, 0, 0, 0, 0, 0x21 }, { 0x02, 0, 0, 0, 0, 0x22 },
};

enum hstate { H_FREE, H_POSTED, H_DONE };

struct hdesc {                    /* the host's view of one descriptor */
	enum hstate st;
	int kicked;                   /* its mailbox entry was consumed (or it never needed one) */
	uint8_t op, nsg;
	uint16_t host;
	uint32_t tag;
	uint64_t len;
	uint8_t *buf[MAXSG];          /* exact-size heap buffers */
	uint64_t blen[MAXSG];
	struct emp_sg ext[MAXSG];     /* sg list outside the descriptor (nsg > 4) */
	struct emp_desc snap;         /* the descriptor as the host last saw it (H_DONE, checked) */
	int expect_einval;
};

struct qframe { uint8_t *p; uint32_t len; };

struct eng {
	int idx;                      /* host index 0 (A) or 1 (B) */
	struct emp_fw *fw;
	struct emp_fw_config cfg;
	struct emp_desc desc[NDESC];
	struct hdesc h[NDESC];
	struct emp_mailbox mb;
	uint32_t ring[FZ_RING];
	uint32_t unkicked;
	struct qframe in[QMAX];       /* inbound: frames from the wire */
	unsigned nin;
	struct qframe lent[QMAX];     /* handed to the engine by rx_burst until rx_release */
	unsigned nlent;
	struct qframe rec[RECN];      /* frames this engine sent, for replays */
	unsigned nrec;
	uint32_t inc;
	int tainted;                  /* something not from the peer's engine may have been delivered */
	int full;                     /* the device takes no frames now */
};

static struct eng E[2];
static size_t fwsize;
static uint64_t now;
static uint8_t wire_mode;         /* bit0 drop every 3rd, bit1 dup, bit2 reorder, bit3 corrupt, bit4 full */
static unsigned wire_count;
static uint64_t sink;

static const uint8_t *in_p;
static size_t in_n;
static uint8_t rd(void)
{
	if (!in_n)
		return 0;
	in_n--;
	return *in_p++;
}

/* byte i of a message of len bytes with tag from host h: base(h, tag, len) + i * 13 + i / 256.
 * The byte loops are kept out of the coverage instrumentation: they would dominate the run time. */
#define NOCOV __attribute__((no_sanitize("coverage"), noinline))
static uint8_t pat_base(unsigned h, uint32_t tag, uint64_t len) { return (uint8_t)(h * 89 + tag * 31 + len * 7); }

NOCOV static void pat_fill(uint8_t *p, uint64_t n, uint8_t base, uint64_t off)
{
	for (uint64_t j = 0; j < n; j++, off++)
		p[j] = (uint8_t)(base + off * 13 + (off >> 8));
}

NOCOV static int pat_check(const uint8_t *p, uint64_t n, uint8_t base, uint64_t off)
{
	int bad = 0;
	for (uint64_t j = 0; j < n; j++, off++)
		bad |= p[j] != (uint8_t)(base + off * 13 + (off >> 8));
	return bad;
}

NOCOV static int all_bytes(const uint8_t *p, uint64_t n, uint8_t v)
{
	int bad = 0;
	for (uint64_t j = 0; j < n; j++)
		bad |= p[j] != v;
	return bad;
}

static void qfree(struct qframe *q) { free(q->p); q->p = NULL; q->len = 0; }

/* ---- the null device: tx into the peer's queue, rx from our own ---- */

static void enqueue(struct eng *to, const uint8_t *f, uint32_t len)
{
	if (to->nin >= QMAX)
		return;                   /* the wire's queue overflows: lost */
	uint8_t *p = malloc(len ? len : 1);
	if (!p)
		abort();
	memcpy(p, f, len);
	to->in[to->nin++] = (struct qframe){ p, len };
}

static int null_tx(void *priv, const struct emp_txframe *f, unsigned n)
{
	struct eng *e = priv;
	static uint8_t buf[EMP_FRAME_MAX];
	if (e->full)
		return 0;
	unsigned sent = 0;
	for (; sent < n; sent++) {
		uint32_t len = 0;
		if (f[sent].hdr_len > HDRBUF || f[sent].npieces > EMP_TX_PIECES)
			abort();
		memcpy(buf, f[sent].hdr, f[sent].hdr_len);
		len = f[sent].hdr_len;
		for (uint32_t k = 0; k < f[sent].npieces; k++) {
			if (len + f[sent].piece[k].len > sizeof buf)
				abort();
			memcpy(buf + len, f[sent].piece[k].p, f[sent].piece[k].len);   /* reads every byte */
			len += f[sent].piece[k].len;
		}
		if (len > e->cfg.mtu + EMP_ETH_HLEN)
			abort();                  /* a frame longer than the MTU */
		struct qframe *r = &e->rec[e->nrec++ % RECN];
		free(r->p);
		r->p = malloc(len);
		if (!r->p)
			abort();
		memcpy(r->p, buf, len);
		r->len = len;
		if (memcmp(buf, macs[!e->idx], 6))
			continue;                 /* to host C (no engine), or elsewhere */
		struct eng *to = &E[!e->idx];
		unsigned k = wire_count++;
		if ((wire_mode & 1) && k % 3 == 2)
			continue;
		if ((wire_mode & 8) && k % 5 == 1 && len > EMP_ETH_HLEN + 4) {
			buf[EMP_ETH_HLEN + 4 + (k * 7) % (len - EMP_ETH_HLEN - 4)] ^= (uint8_t)(1u << (k % 8));
			if (!e->cfg.checksum)
				to->tainted = 1;  /* a flipped bit may pass: data checks are off */
		}
		enqueue(to, buf, len);
		if ((wire_mode & 2) && k % 4 == 0)
			enqueue(to, buf, len);
		if ((wire_mode & 4) && to->nin >= 2 && k % 2) {
			struct qframe t = to->in[to->nin - 1];
			to->in[to->nin - 1] = to->in[to->nin - 2];
			to->in[to->nin - 2] = t;
		}
	}
	if (wire_mode & 16)
		e->full = 1;                  /* the next burst finds the device full */
	return (int)sent;
}

static int null_rx(void *priv, struct emp_rxframe *f, unsigned max)
{
	struct eng *e = priv;
	if (e->nlent)
		abort();                      /* rx_burst again before rx_release */
	unsigned n = e->nin < max ? e->nin : max;
	for (unsigned i = 0; i < n; i++) {
		e->lent[i] = e->in[i];
		f[i].data = e->lent[i].p;
		f[i].len = e->lent[i].len;
	}
	memmove(e->in, e->in + n, (e->nin - n) * sizeof e->in[0]);
	e->nin -= n;
	e->nlent = n;
	return (int)n;
}

static void null_release(void *priv, unsigned n)
{
	struct eng *e = priv;
	if (n != e->nlent)
		abort();
	for (unsigned i = 0; i < n; i++)
		qfree(&e->lent[i]);
	e->nlent = 0;
}

static const struct emp_driver_ops null_ops = {
	.name = "null", .tx_burst = null_tx, .rx_burst = null_rx, .rx_release = null_release,
};

/* ---- host side ---- */

static void free_bufs(struct hdesc *h)
{
	for (int k = 0; k < MAXSG; k++) {
		free(h->buf[k]);
		h->buf[k] = NULL;
		h->blen[k] = 0;
	}
}

static void canary(struct hdesc *h)
{
	for (int k = 0; k < h->nsg; k++)
		if (h->buf[k])
			memset(h->buf[k], 0xa5, h->blen[k]);
}

static void check_canary(const struct hdesc *h)
{
	if (h->op != EMP_OP_RECV)
		return;
	for (int k = 0; k < h->nsg; k++)
		if (h->buf[k] && all_bytes(h->buf[k], h->blen[k], 0xa5))
			abort();                  /* the engine wrote a buffer it had given back */
}

static void mb_push(struct eng *e, uint32_t v)
{
	if (e->mb.head - e->mb.tail >= 64)
		emp__fw_mailbox(e->fw, now);   /* the host never overruns the ring */
	e->mb.ring[e->mb.head & e->mb.mask] = v;
	__atomic_store_n(&e->mb.head, e->mb.head + 1, __ATOMIC_RELEASE);
}

static void kick(struct eng *e)
{
	emp__fw_mailbox(e->fw, now);
	for (int i = 0; i < NDESC; i++)
		e->h[i].kicked = 1;
	e->unkicked = 0;
}

static const uint32_t sizes[16] = { 0, 1, 7, 100, 1400, 1452, 1453, 2904, 8952, 9000, 16384, 65536, 100000,
				    3000, 64, 20000 };

static uint64_t rd_size(void)
{
	uint8_t b = rd();
	if (b & 0x80)
		return (uint64_t)(b & 0x7f) << 8 | rd();
	return sizes[b & 15];
}

static void post(struct eng *e, uint8_t op, uint8_t flags)
{
	uint32_t i = rd() % NDESC;
	uint8_t hb = rd(), tb = rd(), nb = rd();
	struct hdesc *h = &e->h[i];
	struct emp_desc *d = &e->desc[i];
	if (h->st != H_FREE) {
		(void)rd_size();
		return;
	}
	memset(h, 0, sizeof *h);
	memset(d, 0, sizeof *d);
	h->op = op;
	h->host = hb % 5 == 4 ? (op == EMP_OP_RECV ? EMP_ANY_HOST : 1) : hb % 5 == 3 ? 7 : hb % 5;
	if (hb % 5 < 2 && !(hb & 0x80))
		h->host = (uint16_t)!e->idx;   /* mostly the peer */
	h->tag = tb & 0x80 ? EMP_ANY_TAG : tb & 3;
	if (op == EMP_OP_SEND && h->tag == EMP_ANY_TAG && !(flags & 1))
		h->tag = 0;
	h->nsg = nb % (MAXSG + 1);
	const struct emp_sg *sg = h->nsg > EMP_DESC_INLINE_SG ? h->ext : d->sg_inline;
	struct emp_sg *sgw = h->nsg > EMP_DESC_INLINE_SG ? h->ext : d->sg_inline;
	for (int k = 0; k < h->nsg; k++) {
		uint64_t n = rd_size();
		h->blen[k] = n;
		h->buf[k] = malloc(n ? n : 1);
		if (!h->buf[k])
			abort();
		sgw[k].base = h->buf[k];
		sgw[k].len = n;
		h->len += n;
	}
	if (op == EMP_OP_SEND) {           /* the message's bytes, across its pieces */
		uint64_t off = 0;
		for (int k = 0; k < h->nsg; off += h->blen[k], k++)
			pat_fill(h->buf[k], h->blen[k], pat_base((unsigned)e->idx, h->tag, h->len), off);
	} else {
		canary(h);
	}
	d->op = op;
	d->host = h->host;
	d->ep = h->host == EMP_ANY_HOST ? EMP_ANY_EP : 1;
	if (op == EMP_OP_RECV && (hb & 0x40))
		d->ep = EMP_ANY_EP;
	d->tag = h->tag;
	d->nsg = h->nsg;
	d->sg = sg;
	d->len = h->len;
	d->persistent = 1;
	d->user = h;
	if (flags & 1) {                  /* a host mistake the engine must refuse with EINVAL */
		switch (tb % 5) {
		case 0: d->len += 1; break;
		case 1: if (d->nsg) d->sg = NULL; else d->op = 7; break;
		case 2: if (d->nsg && sgw[0].len) sgw[0].base = NULL; else d->op = 0; break;
		case 3: d->host = NHOSTS + 3; break;
		case 4: if (op == EMP_OP_SEND) d->tag = EMP_ANY_TAG; else d->op = 9; break;
		}
		h->expect_einval = 1;
	}
	h->st = H_POSTED;
	__atomic_store_n(&d->stat, EMP_DS_POSTED, __ATOMIC_RELEASE);
	mb_push(e, i);
	if (flags & 2) {
		h->kicked = 0;
		e->unkicked++;
	} else {
		kick(e);
	}
}

static void big_send(struct eng *e)
{
	uint32_t i = rd() % NDESC;
	struct hdesc *h = &e->h[i];
	struct emp_desc *d = &e->desc[i];
	if (h->st != H_FREE)
		return;
	memset(h, 0, sizeof *h);
	memset(d, 0, sizeof *d);
	static uint8_t dummy[16];
	h->op = EMP_OP_SEND;
	h->host = (uint16_t)!e->idx;
	d->op = EMP_OP_SEND;
	d->host = h->host;
	d->ep = 1;
	d->nsg = 2;
	d->sg = d->sg_inline;
	d->sg_inline[0] = (struct emp_sg){ dummy, 1ull << 32 };   /* never read: too long to send */
	d->sg_inline[1] = (struct emp_sg){ dummy, 16 };
	d->len = (1ull << 32) + 16;
	h->len = d->len;
	h->st = H_POSTED;
	__atomic_store_n(&d->stat, EMP_DS_POSTED, __ATOMIC_RELEASE);
	mb_push(e, i);
	kick(e);
	if (h->st == H_POSTED && (d->stat != EMP_DS_DONE || d->result != -EMP_EMSGSIZE))
		abort();                      /* refused at once, as EMSGSIZE */
}

/* The engine returned descriptors: take note (the host owns them from now on). */
static void harvest(struct eng *e)
{
	for (int i = 0; i < NDESC; i++) {
		struct hdesc *h = &e->h[i];
		struct emp_desc *d = &e->desc[i];
		uint32_t st = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
		if (h->st == H_POSTED && st == EMP_DS_DONE) {
			h->st = H_DONE;
			if (h->expect_einval && d->result != -EMP_EINVAL)
				abort();
			fz_check_result(d);
			if (d->result >= 0 && d->op == EMP_OP_SEND && (uint64_t)d->result != d->len)
				abort();
			if (d->op == EMP_OP_RECV && d->result >= 0) {
				if (d->host != EMP_ANY_HOST && d->rhost != d->host)
					abort();          /* matched a receive for another host */
				if (d->tag != EMP_ANY_TAG && d->rtag != d->tag)
					abort();          /* or another tag */
				/* the sender's bytes, exactly (from the peer's engine, untainted) */
				if (d->rhost == (uint16_t)!e->idx && !e->tainted) {
					uint64_t off = 0, res = (uint64_t)d->result;
					uint8_t base = pat_base(d->rhost, d->rtag, d->rlen);
					for (int k = 0; k < h->nsg && off < res; off += h->blen[k], k++) {
						uint64_t n = res - off < h->blen[k] ? res - off : h->blen[k];
						if (pat_check(h->buf[k], n, base, off))
							abort();
					}
				}
			}
			h->snap = *d;
			canary(h);                /* from now on the engine must not write it */
		} else if (h->st != H_POSTED && st != (h->st == H_FREE ? EMP_DS_FREE : EMP_DS_DONE)) {
			abort();                  /* the engine changed a status word the host owns */
		} else if (h->st == H_DONE && memcmp(&h->snap, d, sizeof *d)) {
			abort();                  /* or a completed descriptor */
		}
	}
}

static void reclaim(struct eng *e, uint32_t i)
{
	struct hdesc *h = &e->h[i];
	struct emp_desc *d = &e->desc[i];
	if (h->st != H_DONE)
		return;
	check_canary(h);
	free_bufs(h);
	memset(h, 0, sizeof *h);
	memset(d, 0, sizeof *d);
	h->kicked = 1;
}

static void repost(struct eng *e, uint32_t i)
{
	struct hdesc *h = &e->h[i];
	struct emp_desc *d = &e->desc[i];
	if (h->st != H_DONE || h->len > 0xffffffffull)
		return;
	check_canary(h);
	if (h->op == EMP_OP_SEND) {
		uint64_t off = 0;
		for (int k = 0; k < h->nsg; off += h->blen[k], k++)
			pat_fill(h->buf[k], h->blen[k], pat_base((unsigned)e->idx, d->tag, h->len), off);
	}
	h->st = H_POSTED;
	__atomic_store_n(&d->stat, EMP_DS_POSTED, __ATOMIC_RELEASE);
	mb_push(e, i);
	kick(e);
}

static void check(struct eng *e)
{
	harvest(e);
	uint32_t peers, recs, posted = 0;
	emp__fw_usage(e->fw, &peers, &recs);
	if (peers > e->cfg.max_peers || recs > e->cfg.ndesc)
		abort();
	for (int i = 0; i < NDESC; i++)
		posted += e->h[i].st == H_POSTED;
	if (!e->unkicked && posted != recs) {
		/* every posted descriptor has a record, and only those */
		fprintf(stderr, "fuzz_desc: engine %c: %u descriptors posted, %u records:", 'A' + e->idx, posted, recs);
		for (int i = 0; i < NDESC; i++)
			if (e->h[i].st == H_POSTED)
				fprintf(stderr, " %d(op %u host %u tag %u len %llu kind %u)", i, e->h[i].op, e->h[i].host,
					e->h[i].tag, (unsigned long long)e->h[i].len, e->fw->rec[i].kind);
		fprintf(stderr, "\n  records in use:");
		for (uint32_t i = 0; i < NDESC; i++)
			if (e->fw->rec[i].kind)
				fprintf(stderr, " %u(kind %u, host state %d, stat %u, result %lld)", i, e->fw->rec[i].kind,
					e->h[i].st, e->desc[i].stat, (long long)e->desc[i].result);
		fprintf(stderr, "\n");
		abort();
	}
}

static void init_engine(struct eng *e, const struct emp_fw_config *base, uint32_t inc)
{
	for (int i = 0; i < NDESC; i++) {
		free_bufs(&e->h[i]);
		memset(&e->h[i], 0, sizeof e->h[i]);
		e->h[i].kicked = 1;
	}
	memset(e->desc, 0, sizeof e->desc);
	fz_mailbox(&e->mb, e->ring);
	e->unkicked = 0;
	e->full = 0;
	for (unsigned i = 0; i < e->nin; i++)
		qfree(&e->in[i]);
	e->nin = 0;
	e->cfg = *base;
	e->cfg.incarnation = e->inc = inc;
	memcpy(e->cfg.mac, macs[e->idx], 6);
	fz_fw_init(e->fw, fwsize, &e->cfg, &null_ops, e, e->desc, &e->mb);
}

static uint16_t session_toward(struct eng *e, uint16_t host)
{
	int32_t p = emp__peer_get(e->fw, host, 1, 0);
	return p == NIL ? 0 : e->fw->peer[p].tx_session;
}

static void craft(struct eng *e, uint8_t flags)
{
	uint8_t ctrl = rd();
	uint32_t len = (uint32_t)rd() << 8;
	len |= rd();
	if (len > in_n)
		len = (uint32_t)in_n;
	uint8_t *f = fz_frame_copy(in_p, len);
	in_p += len;
	in_n -= len;
	int from = flags & 1 ? !e->idx : 2;
	uint32_t src_inc = from == 2 ? C_INC : E[from].inc;
	if (from != 2)
		e->tainted = 1;
	uint8_t *c = f + EMP_ETH_HLEN;
	if ((ctrl & 1) && len >= EMP_ETH_HLEN + 6) {
		fz_fix_eth(f, macs[e->idx], macs[from]);
		if (fz_type(c) < 1 || fz_type(c) > 5)
			fz_set_type(c, (uint8_t)(1 + fz_type(c) % 5));
	}
	if ((ctrl & 2) && len >= EMP_ETH_HLEN + EMP_HDR_LEN) {
		uint8_t type = fz_type(c);
		fz_fix_hdr(c, e->inc, src_inc,
			   type == EMP_T_ACK || type == EMP_T_HELLO_ACK ? session_toward(e, (uint16_t)from)
			   : from == 2 ? C_SESSION : session_toward(&E[from], (uint16_t)e->idx));
	}
	if ((ctrl & 4) && len >= EMP_ETH_HLEN + EMP_HDR_LEN + EMP_DATA_HDR_LEN && fz_type(c) == EMP_T_DATA) {
		uint32_t frag = e->cfg.mtu - EMP_DATA_OVERHEAD;   /* a plausible DATA header */
		uint8_t *b = c + EMP_HDR_LEN;
		uint32_t avail = len - EMP_ETH_HLEN - EMP_HDR_LEN - EMP_DATA_HDR_LEN;
		put16(b + EMP_D_FRAG, (uint16_t)frag);
		uint32_t msg_len = (uint32_t)b[EMP_D_MSG_LEN + 2] << 8 | b[EMP_D_MSG_LEN + 3];
		uint32_t nfr = msg_len ? (msg_len + frag - 1) / frag : 1;
		uint32_t fr = b[EMP_D_FRAME + 2] % nfr;
		uint32_t want = msg_len ? (msg_len - fr * frag < frag ? msg_len - fr * frag : frag) : 0;
		if (want > avail)
			msg_len = fr * frag + avail;   /* the payload length follows: this frame's fits */
		put24(b + EMP_D_FRAME, fr);
		put32(b + EMP_D_MSG_LEN, msg_len);
	}
	if ((ctrl & 8) && len >= EMP_ETH_HLEN + EMP_HDR_LEN) {
		c[EMP_C_VTF + 1] |= EMP_F_CSUM;
		fz_fix_csum(c, len);
	}
	emp__fw_frame(e->fw, f, len, now);
	free(f);
}

static uint64_t rd_dt(const struct eng *e)
{
	uint8_t b = rd();
	switch (b & 7) {
	case 0: return 0;
	case 1: return 1000;
	case 2: return e->cfg.ack_delay_ns;
	case 3: return e->cfg.rto_ns / 2;
	case 4: return e->cfg.rto_ns;
	case 5: return e->cfg.rto_ns * 8;
	case 6: return e->cfg.rto_max_ns;
	default: return (uint64_t)(b >> 3) * 10000000ull;
	}
}

static void poll_one(struct eng *e)
{
	e->full = 0;
	emp__fw_poll(e->fw, now);
	check(e);
}

static size_t setup_once(void)
{
	static int done;
	if (done)
		return fwsize;
	fwsize = fz_fw_size(NDESC, NHOSTS, macs);
	for (int k = 0; k < 2; k++) {
		E[k].idx = k;
		E[k].fw = fz_fw_alloc(fwsize);
	}
	done = 1;
	return fwsize;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup_once();
	if (size < 1)
		return 0;
	in_p = data + 1;
	in_n = size - 1;
	uint8_t pre = data[0];
	struct emp_fw_config cfg;
	fz_config(&cfg, NDESC, NHOSTS, macs);
	cfg.checksum = pre & 1;
	cfg.flow_control = !!(pre & 2);
	cfg.ack_every = pre & 4 ? 1 : 3;
	cfg.window = pre & 8 ? 8 : 64;
	cfg.mtu = pre & 16 ? 9000 : 1500;
	if (pre & 32) {
		cfg.peer_window = 16;
		cfg.peer_msgs = 4;
	}
	cfg.retries = pre & 64 ? 3 : 24;
	if (pre & 128)
		cfg.rto_max_ns = 4000000;
	now = 1000000000ull;
	wire_mode = 0;
	wire_count = 0;
	for (int k = 0; k < 2; k++) {
		E[k].tainted = 0;
		for (unsigned i = 0; i < RECN; i++)
			qfree(&E[k].rec[i]);
		E[k].nrec = 0;
		init_engine(&E[k], &cfg, 0x1000u + (uint32_t)k);
	}

	int ops = 0, trace = getenv("FUZZ_DESC_TRACE") != NULL;   /* one line per operation */
	while (in_n && ops++ < 4000) {
		uint8_t b = rd();
		struct eng *e = &E[(b >> 4) & 1];
		uint8_t op = b & 15, flags = b >> 5;
		switch (op) {
		case 0: post(e, EMP_OP_SEND, flags); break;
		case 1: post(e, EMP_OP_RECV, flags); break;
		case 2: {
			uint32_t i = rd() % NDESC;
			mb_push(e, i | EMP_MB_CANCEL);
			kick(e);
			break;
		}
		case 3: repost(e, rd() % NDESC); break;
		case 4: {
			uint32_t i = rd() % NDESC;
			harvest(e);
			if (flags & 1)
				for (uint32_t k = 0; k < NDESC; k++)
					reclaim(e, k);
			else
				reclaim(e, i);
			break;
		}
		case 5: now += rd_dt(e); poll_one(e); break;
		case 6: wire_mode = rd(); break;
		case 7: craft(e, flags); break;
		case 8: {
			struct eng *o = &E[!e->idx];
			uint8_t w = rd();
			if (o->nrec) {
				struct qframe *q = &o->rec[(o->nrec - 1 - w % (o->nrec < RECN ? o->nrec : RECN)) % RECN];
				if (q->p && q->len && !memcmp(q->p, macs[e->idx], 6))
					enqueue(e, q->p, q->len);   /* delivered at the next poll */
			}
			break;
		}
		case 9: {
			harvest(e);
			for (int i = 0; i < NDESC; i++)   /* canaries of returned receives: intact */
				if (e->h[i].st == H_DONE)
					check_canary(&e->h[i]);
			init_engine(e, &cfg, e->inc + 0x10000u);
			break;
		}
		case 10: {
			uint8_t w = rd();
			uint32_t i = w % NDESC;
			harvest(e);
			if (w & 0x80)
				mb_push(e, NDESC + (uint32_t)w * 3);     /* out of range */
			else
				mb_push(e, i);    /* again: while the engine still has it, or once the
						   * host owns it (DONE, reclaimed): the engine must
						   * refuse it (posts_refused), never write it */
			kick(e);
			break;
		}
		case 11: kick(e); break;
		case 12: now += rd_dt(e); emp__fw_timers(e->fw, now); check(e); break;
		case 13: {
			unsigned rounds = 1 + rd() % 32;
			for (unsigned r = 0; r < rounds; r++) {
				now += cfg.rto_ns / 4;
				poll_one(&E[0]);
				poll_one(&E[1]);
			}
			break;
		}
		case 14: big_send(e); break;
		case 15: {
			uint32_t v = (uint32_t)rd() << 24;
			v |= (uint32_t)rd() << 16;
			v |= (uint32_t)rd() << 8;
			v |= rd();
			/* only entries the engine must ignore: out of range, or a cancel */
			if ((v & ~EMP_MB_CANCEL) < NDESC && !(v & EMP_MB_CANCEL))
				v |= 0x40000000u;
			mb_push(e, v);
			kick(e);
			break;
		}
		}
		sink += op;
		if (trace) {
			fprintf(stderr, "op %2u %c flags %u:", op, 'A' + (int)(e - E), flags);
			for (int k = 0; k < 2; k++) {
				uint32_t peers, recs;
				emp__fw_usage(E[k].fw, &peers, &recs);
				fprintf(stderr, "  %c recs %u [", 'A' + k, recs);
				for (int i = 0; i < NDESC; i++)
					fprintf(stderr, "%c", E[k].fw->rec[i].kind ? '0' + E[k].fw->rec[i].kind : '.');
				fprintf(stderr, "] host [");
				for (int i = 0; i < NDESC; i++)
					fprintf(stderr, "%c", ".PD"[E[k].h[i].st]);
				fprintf(stderr, "]");
			}
			fprintf(stderr, "\n");
		}
	}
	/* wind down: everything kicked, the wire clean, every timer run out */
	wire_mode = 0;
	for (int k = 0; k < 2; k++)
		kick(&E[k]);
	for (int round = 0; round < 400; round++) {
		uint64_t d0 = emp__fw_next_deadline(E[0].fw), d1 = emp__fw_next_deadline(E[1].fw);
		uint64_t d = d0 < d1 ? d0 : d1;
		if (d == UINT64_MAX && !E[0].nin && !E[1].nin && !emp__fw_busy(E[0].fw) && !emp__fw_busy(E[1].fw))
			break;
		now = d != UINT64_MAX && d > now ? d : now + cfg.rto_ns / 4;
		poll_one(&E[0]);
		poll_one(&E[1]);
	}
	for (int k = 0; k < 2; k++) {
		harvest(&E[k]);
		for (int i = 0; i < NDESC; i++)
			if (E[k].h[i].st == H_DONE)
				check_canary(&E[k].h[i]);
	}
	/* give every allocation back, so that libFuzzer's leak check has nothing to chase */
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < NDESC; i++)
			free_bufs(&E[k].h[i]);
		for (unsigned i = 0; i < E[k].nin; i++)
			qfree(&E[k].in[i]);
		E[k].nin = 0;
		for (unsigned i = 0; i < RECN; i++)
			qfree(&E[k].rec[i]);
		E[k].nrec = 0;
	}
	if (getenv("FUZZ_DESC_DEBUG")) {          /* what an input did (for writing seeds) */
		for (int k = 0; k < 2; k++) {
			struct emp_counters c;
			emp__fw_counters(E[k].fw, &c);
			fprintf(stderr, "%c: sent %llu recv %llu send_err %llu recv_err %llu tx %llu rx %llu rtx %llu "
				"drops %llu restarts %llu%s\n", 'A' + k, (unsigned long long)c.msgs_sent,
				(unsigned long long)c.msgs_received, (unsigned long long)c.send_errors,
				(unsigned long long)c.recv_errors, (unsigned long long)c.tx_frames,
				(unsigned long long)c.rx_frames, (unsigned long long)c.retransmits,
				(unsigned long long)c.drops_total, (unsigned long long)c.peer_restarts,
				E[k].tainted ? " (tainted)" : "");
			for (int r = 0; r < EMP_DROP_MAX; r++)
				if (c.drops[r])
					fprintf(stderr, "   drop %s %llu\n", emp__drop_names[r], (unsigned long long)c.drops[r]);
		}
	}
	return 0;
}
