/* auth.c: frame authentication (option auth): key derivation, the tag every frame carries, and its check on arrival. */
#include "fw_int.h"

/*
 * Keys (all 128-bit SipHash keys; wire format in proto.h):
 *  - K, the cluster secret (cfg.auth_key, from the operator's key file);
 *  - per frame type, for frames sent before or without a session:
 *    K_hello, K_stale, K_probe = KDF(K, label);
 *  - per session (one direction: initiator I sends DATA, responder R acks):
 *    KDF(K, "EMP-sess", MAC_I, MAC_R, ep_I, ep_R, inc_I, inc_R, nonce_I,
 *    nonce_R, session). nonce_I is in I's HELLO; nonce_R is R's, chosen when
 *    it accepts that HELLO and sent in its HELLO_ACK. A frame of one session,
 *    life or peer pair does not verify in any other.
 * KDF(k, m) = SipHash(k, 0x01 | m) || SipHash(k, 0x02 | m).
 */

static void kdf(const uint8_t k[16], const uint8_t *m, uint32_t len, uint8_t out[16])
{
	for (uint8_t d = 1; d <= 2; d++) {
		struct emp_sip s;
		emp__sip_init(&s, k);
		emp__sip_update(&s, &d, 1);
		emp__sip_update(&s, m, len);
		put64(out + 8 * (d - 1), emp__sip_final(&s));
	}
}

void emp__auth_init(struct emp_fw *fw)
{
	if (!fw->cfg.auth)
		return;
	kdf(fw->cfg.auth_key, (const uint8_t *)"EMP-hello", 9, fw->auth_hello);
	kdf(fw->cfg.auth_key, (const uint8_t *)"EMP-stale", 9, fw->auth_stale);
	kdf(fw->cfg.auth_key, (const uint8_t *)"EMP-probe", 9, fw->auth_probe);
}

void emp__auth_session_key(const struct emp_fw *fw, uint8_t out[16], const uint8_t *mac_i, const uint8_t *mac_r,
			   uint16_t ep_i, uint16_t ep_r, uint32_t inc_i, uint32_t inc_r, uint32_t n_i,
			   uint32_t n_r, uint16_t session)
{
	uint8_t m[42];
	memcpy(m, "EMP-sess", 8);
	memcpy(m + 8, mac_i, 6);
	memcpy(m + 14, mac_r, 6);
	put16(m + 20, ep_i);
	put16(m + 22, ep_r);
	put32(m + 24, inc_i);
	put32(m + 28, inc_r);
	put32(m + 32, n_i);
	put32(m + 36, n_r);
	put16(m + 40, session);
	kdf(fw->cfg.auth_key, m, sizeof(m), out);
}

/* The key a frame of this type to peer pe is sent with (copied into the tx batch). */
void emp__auth_tx_key(struct emp_fw *fw, unsigned i, const struct peer *pe, uint8_t type, uint16_t flags)
{
	const uint8_t *k;
	switch (emp__rx_side(type, flags) ? EMP_T_ACK : type) {
	case EMP_T_ACK:       k = pe->rx_key; break;     /* their session toward us */
	case EMP_T_DATA:                                 /* our session toward them */
	case EMP_T_BYE:       k = pe->tx_key; break;
	case EMP_T_HELLO:     k = fw->auth_hello; break;
	case EMP_T_STALE:     k = fw->auth_stale; break;
	default:              k = fw->auth_probe; break;
	}
	memcpy(fw->txkey[i], k, 16);
}

/* At flush, after the checksum: the tag over the whole frame (Ethernet
 * header to the last payload byte) goes right after it. */
void emp__auth_tag(struct emp_fw *fw, unsigned i)
{
	struct emp_txframe *f = &fw->txf[i];
	struct emp_sip s;
	emp__sip_init(&s, fw->txkey[i]);
	emp__sip_update(&s, f->hdr, f->hdr_len);
	for (unsigned k = 0; k < f->npieces; k++)
		emp__sip_update(&s, f->piece[k].p, f->piece[k].len);
	uint64_t tag = emp__sip_final(&s);
	if (!f->npieces) {
		put64(fw->txhdr[i] + f->hdr_len, tag);   /* HDRBUF has room: no body is that long */
		f->hdr_len += EMP_AUTH_TAG_LEN;
	} else {
		put64(fw->txtag[i], tag);                 /* tx_data left a piece free */
		f->piece[f->npieces].p = fw->txtag[i];
		f->piece[f->npieces].len = EMP_AUTH_TAG_LEN;
		f->npieces++;
	}
}

/* The key a received frame must verify with, or NULL: then either it was
 * dropped (counted: no session it could belong to), or *pass is set and the
 * dispatcher refuses it before it changes anything (an unknown peer, or an
 * incarnation of ours that is gone: answered by a rate-limited STALE, which
 * names a life nobody believes in, so it is harmless). */
static const uint8_t *rx_key(struct emp_fw *fw, const struct hdr *h, int *pass)
{
	int32_t p = emp__peer_get(fw, (uint16_t)h->host, h->src_ep, 0);
	struct peer *pe = p == NIL ? NULL : &fw->peer[p];
	*pass = 0;
	switch (h->type) {
	case EMP_T_DATA:
		if (h->dst_inc != fw->cfg.incarnation) {
			*pass = 1;           /* rx_data answers STALE and drops it, nothing else */
			return NULL;
		}
		if (!emp__rx_session_ok(pe, h)) {
			emp__drop(fw, EMP_DROP_NO_SESSION);
			return NULL;
		}
		return pe->rx_key;
	case EMP_T_ACK:
		if (!pe || h->dst_inc != fw->cfg.incarnation) {
			*pass = 1;           /* dropped as unknown_msg, or answered by a STALE */
			return NULL;
		}
		if (!emp__tx_session_ok(pe, h)) {
			emp__drop(fw, EMP_DROP_STALE);
			return NULL;
		}
		return pe->tx_key;
	case EMP_T_HELLO_ACK:
		if (!pe || pe->tx_state != PTX_HELLO || h->session != pe->tx_session ||
		    h->dst_inc != fw->cfg.incarnation || get32(h->body + 4) != pe->tx_nonce) {
			emp__drop(fw, EMP_DROP_STALE);
			return NULL;
		}
		emp__auth_session_key(fw, fw->auth_tmp, fw->cfg.mac, fw->host_mac[pe->host], fw->cfg.endpoint, pe->ep,
				      fw->cfg.incarnation, h->src_inc, pe->tx_nonce, h->msg_id, pe->tx_session);
		return fw->auth_tmp;
	case EMP_T_BYE:
		if (h->flags & EMP_F_DONE) {         /* in our session toward them, as ACK */
			if (h->dst_inc != fw->cfg.incarnation || !emp__tx_session_ok(pe, h)) {
				emp__drop(fw, EMP_DROP_NO_SESSION);
				return NULL;
			}
			return pe->tx_key;
		}
		if (h->dst_inc != fw->cfg.incarnation || !emp__rx_session_ok(pe, h)) {
			emp__drop(fw, EMP_DROP_NO_SESSION);
			return NULL;
		}
		return pe->rx_key;
	case EMP_T_HELLO: return fw->auth_hello;
	case EMP_T_STALE: return fw->auth_stale;
	case EMP_T_PROBE: return fw->auth_probe;
	default:
		*pass = 1;
		return NULL;
	}
}

/* 0: go on with the frame; -1: dropped and counted. The frame's version
 * said it carries a tag; body_len said where (Ethernet padding may follow). */
int emp__auth_check(struct emp_fw *fw, const struct hdr *h, const uint8_t *f)
{
	int pass;
	const uint8_t *k = rx_key(fw, h, &pass);
	if (!k)
		return pass ? 0 : -1;
	uint32_t n = EMP_ETH_HLEN + EMP_HDR_LEN + h->body_len;
	if (emp__siphash(k, f, n) != get64(f + n)) {
		emp__drop(fw, EMP_DROP_AUTH);
		return -1;
	}
	return 0;
}
