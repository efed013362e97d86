/* fuzz_frame.c: libFuzzer target for the engine's frame parser and protocol state: arbitrary frames fed
 * to emp__fw_frame() of an engine over a null driver, after a prelude that sets up sessions and transfers. */
#include "fuzz_engine.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Input:
 *   byte 0  prelude: bit0 a HELLO from host 1 (so its DATA is in session),
 *           bit1 receives posted (exact, wildcard, small, scattered; the
 *           70000-byte one lends its frames: lent.c, the frames the driver
 *           keeps until given back),
 *           bit2 sends posted to host 1 and its HELLO_ACK fed (so ACKs find
 *           messages), bit3 checksums, bit4 flow control (bits 3 and 4 both:
 *           frame authentication on instead), bit5 ack_every 1, bit6 window 8,
 *           bit7 MTU 9000
 *   then records: ctrl, len_hi, len_lo, len bytes of frame (clipped to what is left)
 *   ctrl bit0 fix Ethernet header and version; bit1 fix endpoints, incarnations
 *        and session; bit2 fix the checksum (when the frame's CSUM flag is set)
 *        and with auth the tag (under the key the engine will check it with);
 *        bit3 let time pass after the frame ((bits 4-5) + 1 half-RTOs) and poll
 *        (bits 4-5 both: the driver asks for every lent frame back, rx_urgent);
 *        bit6 source host 2 instead of 1; bit7 not a frame: a mailbox action
 *        (len_lo: descriptor; len_hi bit0: cancel, else repost if done, after
 *        reading its message and giving its lent frames back as the host does)
 */

#define NDESC    32
#define NHOSTS   3
#define REMOTE_INC 0x01234567u
#define REMOTE_SESSION 0x2222
#define OWN_INC  0x0badcafeu

static const uint8_t macs[NHOSTS][6] = {
	{ 0x02, 0, 0, 0, 0, 0x10 }, { 0x02, 0, 0, 0, 0, 0x11 }, { 0x02, 0, 0, 0, 0, 0x12 },
};

static uint64_t sink;

static int null_tx(void *priv, const struct emp_txframe *f, unsigned n)
{
	/* read every byte the engine hands over, so that a bad gather shows */
	for (unsigned i = 0; i < n; i++) {
		uint32_t s = 0;
		for (uint32_t k = 0; k < f[i].hdr_len; k++)
			s += f[i].hdr[k];
		if (f[i].npieces > EMP_TX_PIECES)
			abort();
		for (uint32_t p = 0; p < f[i].npieces; p++) {
			const uint8_t *b = f[i].piece[p].p;
			if (f[i].piece[p].len)
				s += b[0] + b[f[i].piece[p].len - 1];
		}
		sink += s;
	}
	return (int)n;
}
static int null_rx(void *priv, struct emp_rxframe *f, unsigned max) { return 0; }
static void null_release(void *priv, unsigned n) {}

/* frames the engine keeps (rx_hold): each a heap copy of its exact length,
 * freed when given back, so a read of one given back is caught */
#define FZ_HELD 128
static uint8_t *held[FZ_HELD];
static uint32_t held_owner[FZ_HELD];
static uint8_t *feeding;                 /* the frame emp__fw_frame has now */
static int feeding_held, urgent;

static uint32_t fz_hold(void *priv, unsigned i, uint32_t owner)
{
	if (i != 0 || !feeding || feeding_held)
		return 0;
	for (uint32_t k = 0; k < FZ_HELD; k++)
		if (!held[k]) {
			held[k] = feeding;
			held_owner[k] = owner;
			feeding_held = 1;
			return k + 1;
		}
	return 0;
}

static void fz_unhold(void *priv, uint32_t tok)
{
	if (!tok || tok > FZ_HELD || !held[tok - 1])
		abort();                 /* given back twice, or never held */
	free(held[tok - 1]);
	held[tok - 1] = NULL;
}

static uint32_t fz_urgent(void *priv, uint32_t *owner)
{
	for (uint32_t k = 0; urgent && k < FZ_HELD; k++)
		if (held[k]) {
			*owner = held_owner[k];
			return k + 1;
		}
	return 0;
}

static const struct emp_driver_ops null_ops = {
	.name = "null", .tx_burst = null_tx, .rx_burst = null_rx, .rx_release = null_release,
	.rx_hold = fz_hold, .rx_unhold = fz_unhold, .rx_urgent = fz_urgent,
};

static struct emp_fw *fw;
static size_t fwsize;
static struct emp_desc desc[NDESC];
static struct emp_mailbox mb;
static uint32_t ring[FZ_RING];
static uint8_t *rbuf[8];                 /* exact-size heap buffers: ASan sees any overrun */
static const size_t rlen[8] = { 0, 1, 100, 1456, 5000, 70000, 3000, 20 };
static uint8_t *sbuf;
static struct emp_lend lend4[64];         /* receive 4's lent frames */
static uint8_t scratch[70000];
static uint64_t now;
static struct emp_fw_config cfg;

static void setup_once(void)
{
	if (fw)
		return;
	fwsize = fz_fw_size(NDESC, NHOSTS, macs);
	fw = fz_fw_alloc(fwsize);
	for (int i = 0; i < 8; i++)
		rbuf[i] = malloc(rlen[i] ? rlen[i] : 1);
	sbuf = malloc(200000);
	for (int i = 0; i < 200000; i++)
		sbuf[i] = (uint8_t)(i * 7);
	if (!fw || !sbuf)
		abort();
}

static void mb_post(uint32_t v)
{
	mb.ring[mb.head & mb.mask] = v;
	mb.head++;
	emp__fw_mailbox(fw, now);
}

static void post(uint32_t i, uint8_t op, uint16_t host, uint32_t tag, int nsg, const uint8_t *const *base,
		 const size_t *len)
{
	struct emp_desc *d = &desc[i];
	memset(d, 0, sizeof(*d));
	d->op = op;
	d->host = host;
	d->ep = host == EMP_ANY_HOST ? EMP_ANY_EP : 1;
	d->tag = tag;
	d->nsg = (uint16_t)nsg;
	d->sg = d->sg_inline;
	for (int k = 0; k < nsg; k++) {
		d->sg_inline[k].base = (void *)base[k];
		d->sg_inline[k].len = len[k];
		d->len += len[k];
	}
	if (i == 4) {
		d->lend = lend4;
		d->nlend = 64;
	}
	d->stat = EMP_DS_POSTED;
	mb_post(i);
}

/* a frame to the engine as the device's frame 0 of a burst (it may keep it) */
static void feed(uint8_t *f, uint32_t len)
{
	feeding = f;
	feeding_held = 0;
	fw->rx_cur = 0;
	emp__fw_frame(fw, f, len, now);
	fw->rx_cur = -1;
	feeding = NULL;
	if (!feeding_held)
		free(f);
}

/* what the host does with a finished receive before posting it again:
 * read its message, give its lent frames back */
static void host_read(uint32_t i)
{
	struct emp_desc *d = &desc[i];
	if (d->op == EMP_OP_RECV && d->result > 0 && d->lent)
		emp__fw_lent_copy(fw, i, 0, scratch, (uint64_t)d->result < sizeof(scratch) ? (uint64_t)d->result : sizeof(scratch));
	emp__fw_lent_return(fw, i, UINT64_MAX);
	if (d->lent)
		abort();
	d->lend_off = 0;
}

static uint16_t our_session(void)
{
	int32_t p = emp__peer_get(fw, 1, 1, 0);
	return p == NIL ? 0 : fw->peer[p].tx_session;
}

/* ---- auth: the tag a frame from host `host` needs (the engine's own key choice, auth.c) ---- */
static const uint8_t KEY[16] = "fuzz-cluster-key";

/* bytes of the type's body (receive.c: body_size), -1 if unknown */
static int64_t fz_body(const uint8_t *c, uint32_t avail)
{
	uint16_t vtf = get16(c + EMP_C_VTF);
	const uint8_t *b = c + EMP_HDR_LEN;
	switch (EMP_VTF_TYPE(vtf)) {
	case EMP_T_DATA: {
		if (avail < EMP_DATA_HDR_LEN || !get16(b + EMP_D_FRAG))
			return -1;
		uint64_t at = (uint64_t)get24(b + EMP_D_FRAME) * get16(b + EMP_D_FRAG), len = get32(b + EMP_D_MSG_LEN);
		uint64_t plen = at >= len ? 0 : len - at < get16(b + EMP_D_FRAG) ? len - at : get16(b + EMP_D_FRAG);
		return EMP_DATA_HDR_LEN + (int64_t)plen + (EMP_VTF_FLAGS(vtf) & EMP_F_PIGGY ? EMP_PIGGY_LEN : 0);
	}
	case EMP_T_ACK: return EMP_ACK_HDR_LEN;
	case EMP_T_HELLO: case EMP_T_HELLO_ACK: return EMP_HELLO_HDR_LEN;
	case EMP_T_STALE: return EMP_STALE_HDR_LEN;
	case EMP_T_BYE: return EMP_VTF_FLAGS(vtf) & EMP_F_DONE ? EMP_BYE_DONE_LEN : 0;
	case EMP_T_PROBE: return 0;
	default: return -1;
	}
}

static void fz_tag(uint8_t *f, uint32_t len, int host)
{
	uint8_t *c = f + EMP_ETH_HLEN, k[16];
	int64_t body = fz_body(c, len - EMP_ETH_HLEN - EMP_HDR_LEN);
	uint32_t n = EMP_ETH_HLEN + EMP_HDR_LEN + (uint32_t)(body < 0 ? 0 : body);
	if (body < 0 || (uint64_t)n + EMP_AUTH_TAG_LEN > len)
		return;
	int32_t p = emp__peer_get(fw, (uint16_t)host, 1, 0);
	const struct peer *pe = p == NIL ? NULL : &fw->peer[p];
	uint16_t vtf = get16(c + EMP_C_VTF);
	switch (EMP_VTF_TYPE(vtf)) {
	case EMP_T_BYE:                                   /* DONE: in our session, as ACK */
		if (!pe) return;
		memcpy(k, EMP_VTF_FLAGS(vtf) & EMP_F_DONE ? pe->tx_key : pe->rx_key, 16);
		break;
	case EMP_T_DATA: if (!pe) return; memcpy(k, pe->rx_key, 16); break;
	case EMP_T_ACK: if (!pe) return; memcpy(k, pe->tx_key, 16); break;
	case EMP_T_HELLO: memcpy(k, fw->auth_hello, 16); break;
	case EMP_T_STALE: memcpy(k, fw->auth_stale, 16); break;
	case EMP_T_PROBE: memcpy(k, fw->auth_probe, 16); break;
	default:                                          /* HELLO_ACK: our session's key */
		if (!pe)
			return;
		emp__auth_session_key(fw, k, macs[0], macs[host], 1, 1, OWN_INC, get32(c + EMP_C_SRC_INC),
				      pe->tx_nonce, get32(c + EMP_C_MSG_ID), pe->tx_session);
	}
	put64(f + n, emp__siphash(k, f, n));
}

static void fz_version(uint8_t *f)
{
	if (cfg.auth)
		f[EMP_ETH_HLEN + EMP_C_VTF] = (uint8_t)((f[EMP_ETH_HLEN + EMP_C_VTF] & 0x0f) | EMP_PROTO_VERSION_AUTH << 4);
}

/* a well-formed HELLO or HELLO_ACK from host 1 (tagged with auth) */
static void feed_hello(uint8_t type, uint16_t session, uint32_t dst_inc)
{
	uint8_t f[EMP_ETH_HLEN + EMP_HDR_LEN + EMP_HELLO_HDR_LEN + EMP_AUTH_TAG_LEN];
	memset(f, 0, sizeof(f));
	fz_fix_eth(f, macs[0], macs[1]);
	fz_version(f);
	uint8_t *c = f + EMP_ETH_HLEN;
	fz_set_type(c, type);
	fz_fix_hdr(c, dst_inc, REMOTE_INC, session);
	put16(c + EMP_C_CREDITS, 4);
	put32(c + EMP_HDR_LEN, 1500);
	int32_t p = emp__peer_get(fw, 1, 1, 0);
	if (type == EMP_T_HELLO_ACK && p != NIL) {
		put32(c + EMP_HDR_LEN + 4, fw->peer[p].tx_nonce);   /* the echo */
		put32(c + EMP_C_MSG_ID, 77);                         /* the responder's nonce (auth) */
	}
	if (cfg.auth)
		fz_tag(f, sizeof(f), 1);
	emp__fw_frame(fw, f, cfg.auth ? sizeof(f) : sizeof(f) - EMP_AUTH_TAG_LEN, now);
}

static void check_invariants(void)
{
	uint32_t peers, recs;
	emp__fw_usage(fw, &peers, &recs);
	if (peers > cfg.max_peers || recs > cfg.ndesc)
		abort();
	uint32_t live = 0;
	for (uint32_t i = 0; i < NDESC; i++) {
		const struct emp_desc *d = &desc[i];
		if (d->stat == EMP_DS_POSTED)
			live++;
		if (d->stat != EMP_DS_DONE)
			continue;
		fz_check_result(d);
	}
	if (live != recs)
		abort();                  /* every posted descriptor has a record, and only those */
	uint32_t nheld = 0, nlent = 0;
	for (uint32_t k = 0; k < FZ_HELD; k++)
		nheld += held[k] != NULL;
	for (uint32_t i = 0; i < NDESC; i++)
		nlent += desc[i].lent;
	if (nheld != nlent)
		abort();                  /* every frame the device keeps is lent to a receive, and only those */
	struct emp_counters c;
	emp__fw_counters(fw, &c);
	if (c.msgs_received + c.recv_errors + c.msgs_sent + c.send_errors > 1000000)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup_once();
	if (size < 1)
		return 0;
	uint8_t pre = data[0];
	data++;
	size--;
	fz_config(&cfg, NDESC, NHOSTS, macs);
	cfg.incarnation = OWN_INC;
	cfg.mtu = pre & 0x80 ? 9000 : 1500;
	memcpy(cfg.mac, macs[0], 6);
	cfg.auth = (pre & 0x18) == 0x18;
	cfg.checksum = !cfg.auth && (pre & 0x08);
	cfg.flow_control = !cfg.auth && (pre & 0x10);
	memcpy(cfg.auth_key, KEY, 16);
	cfg.ack_every = pre & 0x20 ? 1 : 3;
	cfg.window = pre & 0x40 ? 8 : 64;
	memset(desc, 0, sizeof(desc));
	fz_mailbox(&mb, ring);
	now = 1000000;
	fz_fw_init(fw, fwsize, &cfg, &null_ops, NULL, desc, &mb);

	if (pre & 0x01)
		feed_hello(EMP_T_HELLO, REMOTE_SESSION, 0);
	if (pre & 0x02) {
		const uint8_t *b[4];
		size_t l[4];
		for (int i = 0; i < 6; i++) {
			b[0] = rbuf[i + 1];
			l[0] = rlen[i + 1];
			post((uint32_t)i, EMP_OP_RECV, i == 3 ? EMP_ANY_HOST : 1, i == 4 ? EMP_ANY_TAG : (uint32_t)(i & 1),
			     1, b, l);
		}
		b[0] = rbuf[0]; l[0] = 0;                 /* a receive in 4 pieces, one empty */
		b[1] = rbuf[7]; l[1] = rlen[7];
		b[2] = rbuf[2]; l[2] = rlen[2];
		b[3] = rbuf[3]; l[3] = rlen[3];
		post(6, EMP_OP_RECV, 2, 0, 4, b, l);
	}
	if (pre & 0x04) {
		static const size_t sl[] = { 0, 10, 3000, 100000, 1457 };
		for (int i = 0; i < 5; i++) {
			const uint8_t *b[2] = { sbuf, sbuf + 150000 };
			size_t l[2] = { sl[i] / 2, sl[i] - sl[i] / 2 };
			post(8 + (uint32_t)i, EMP_OP_SEND, 1, (uint32_t)(i & 1), 2, b, l);
		}
		feed_hello(EMP_T_HELLO_ACK, our_session(), OWN_INC);
		emp__fw_poll(fw, now);
	}
	check_invariants();

	while (size >= 3) {
		uint8_t ctrl = data[0];
		uint32_t len = (uint32_t)data[1] << 8 | data[2];
		data += 3;
		size -= 3;
		if (ctrl & 0x80) {
			uint32_t i = data[-1] % NDESC;
			struct emp_desc *d = &desc[i];
			if (data[-2] & 1) {
				if (d->stat == EMP_DS_POSTED)
					mb_post(i | EMP_MB_CANCEL);
			} else if (d->stat == EMP_DS_DONE && d->op) {
				host_read(i);
				d->stat = EMP_DS_POSTED;      /* a persistent repost */
				mb_post(i);
			}
			check_invariants();
			continue;
		}
		if (len > size)
			len = (uint32_t)size;
		uint8_t *f = fz_frame_copy(data, len);
		data += len;
		size -= len;
		uint8_t *c = f + EMP_ETH_HLEN;
		int host = ctrl & 0x40 ? 2 : 1;
		if ((ctrl & 0x01) && len >= EMP_ETH_HLEN + 5) {
			fz_fix_eth(f, macs[0], macs[host]);
			fz_version(f);
		}
		if ((ctrl & 0x02) && len >= EMP_ETH_HLEN + EMP_HDR_LEN) {
			uint8_t type = fz_type(c);
			fz_fix_hdr(c, OWN_INC, REMOTE_INC,
				   type == EMP_T_ACK || type == EMP_T_HELLO_ACK ? our_session() : REMOTE_SESSION);
		}
		if ((ctrl & 0x04) && len >= EMP_ETH_HLEN + EMP_HDR_LEN && (c[EMP_C_VTF + 1] & EMP_F_CSUM))
			fz_fix_csum(c, len);
		if ((ctrl & 0x04) && cfg.auth && len >= EMP_ETH_HLEN + EMP_HDR_LEN)
			fz_tag(f, len, host);
		feed(f, len);
		if (ctrl & 0x08) {
			now += (uint64_t)(((ctrl >> 4) & 3) + 1) * (cfg.rto_ns / 2);
			urgent = ((ctrl >> 4) & 3) == 3;
			emp__fw_poll(fw, now);
			urgent = 0;
		}
		check_invariants();
	}
	/* let every timer run out: retransmissions, hello retries, return-to-sender */
	for (int k = 0; k < 40; k++) {
		uint64_t d = emp__fw_next_deadline(fw);
		if (d == UINT64_MAX)
			break;
		now = d > now ? d : now + 1;
		emp__fw_poll(fw, now);
		check_invariants();
	}
	for (uint32_t i = 0; i < NDESC; i++)      /* the host lets go of everything */
		host_read(i);
	for (uint32_t k = 0; k < FZ_HELD; k++)
		if (held[k])
			abort();
	return 0;
}
