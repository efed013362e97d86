/* receive.c: every received frame: header validation, then one switch on frame type; DATA placement and matching. */
#include "fw_int.h"

void emp__drop(struct emp_fw *fw, enum emp_drop_reason why)
{
	fw->ctr.drops[why]++;
}

/* Copy len bytes between p and the descriptor's buffers at off (into them,
 * or out of them with out set), clamped to the capacity. */
void emp__sg_copy(const struct emp_desc *d, uint64_t off, uint8_t *p, uint64_t len, int out)
{
	unsigned s = 0;
	while (s < d->nsg && off >= d->sg[s].len)
		off -= d->sg[s++].len;
	while (len && s < d->nsg) {
		uint64_t n = d->sg[s].len - off;
		if (n > len)
			n = len;
		uint8_t *b = (uint8_t *)d->sg[s].base + off;
		memcpy(out ? p : b, out ? b : p, n);
		p += n;
		len -= n;
		off = 0;
		s++;
	}
}

/* a frame's payload into the descriptor's buffers at off */
void emp__place(const struct emp_desc *d, uint64_t off, const uint8_t *src, uint64_t len)
{
	emp__sg_copy(d, off, (uint8_t *)(uintptr_t)src, len, 0);
}

/* Rate-limited notice to a sender: "message msg_id is stuck here" (flags say
 * why). A no-receive notice only carries credits: at most one per message per
 * quarter RTO. A resend request (NACK) makes the sender resend at once: at
 * most one per peer per quarter RTO, whatever message it names, so requests
 * for different messages cannot chase each other in zero time. */
static void notice(struct emp_fw *fw, int32_t p, uint32_t msg_id, uint16_t flags, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	uint64_t gap = fw->cfg.rto_ns / 4;
	if (flags & EMP_F_NACK) {
		if (pe->resend_asked_at && now - pe->resend_asked_at < gap)
			return;
		pe->resend_asked_at = now ? now : 1;
	} else {
		if (pe->nack_msg == msg_id && now - pe->nack_sent_at < gap)
			return;
		pe->nack_msg = msg_id;
		pe->nack_sent_at = now;
	}
	emp__send_ack_raw(fw, p, msg_id, 0, 0, 0, flags);
}

/* A receive was posted: a sender whose message was dropped for want of one
 * resends now rather than after its retransmit timeout. */
void emp__rx_unblock(struct emp_fw *fw, const struct emp_desc *d)
{
	for (uint32_t p = 0; p < fw->npeers && fw->norecv_peers; p++) {
		struct peer *pe = &fw->peer[p];
		uint32_t off = pe->norecv_msg - pe->match_next;
		if (!pe->norecv_pending || seq_lt(pe->norecv_msg, pe->match_next) ||
		    (off < EMP_MATCH_BITS && (pe->matched >> off & 1)) ||
		    (d->host != EMP_ANY_HOST && d->host != pe->host) || (d->ep != EMP_ANY_EP && d->ep != pe->ep) ||
		    (d->tag != EMP_ANY_TAG && d->tag != pe->norecv_tag))
			continue;
		pe->norecv_pending = 0;
		fw->norecv_peers--;
		pe->resend_asked_at = fw->now ? fw->now : 1;
		emp__send_ack_raw(fw, (int32_t)p, pe->norecv_msg, 0, 0, 0, EMP_F_NACK | EMP_F_CHAIN);
	}
}

static int32_t find(struct emp_fw *fw, const struct dlist *l, uint32_t msg_id)
{
	for (int32_t r = l->head; r != NIL; r = fw->rec[r].next)
		if (fw->rec[r].msg_id == msg_id)
			return r;
	return NIL;
}

/* The completion ack a DATA frame carries (EMP_F_PIGGY): handled as the ACK
 * frame it replaces, before the frame's own data (which may yet be dropped). */
static void rx_piggy_ack(struct emp_fw *fw, const struct hdr *h, int32_t p, const uint8_t *q, uint64_t now)
{
	uint8_t body[EMP_ACK_HDR_LEN];
	uint32_t nfr = get32(q + 4);
	put32(body, nfr);
	put32(body + 4, nfr);
	put64(body + 8, 0);
	struct hdr a = *h;
	a.type = EMP_T_ACK;
	a.flags = 0;
	a.msg_id = get32(q);
	a.session = get16(q + 8);
	a.body = body;
	a.body_len = EMP_ACK_HDR_LEN;
	a.len = 0;                  /* the frame is counted once, as DATA */
	emp__rx_ack(fw, &a, p, now);
}

/* Payload bytes of DATA frame `frame` of a message (frag bytes each, the
 * last one the rest); 0 for an index or frag the message cannot have (the
 * frame is then dropped by rx_data). */
static uint32_t data_plen(uint32_t frame, uint32_t msg_len, uint32_t frag)
{
	if (!frag || !msg_len)
		return 0;
	uint64_t off = (uint64_t)frame * frag;
	if (off >= msg_len)
		return 0;
	return (uint32_t)(msg_len - off < frag ? msg_len - off : frag);
}

/* Frames per collection: ack_every, or for a bulk message (emp__bulk:
 * longer than the message window, or of 8 frames or more) half the window if
 * that is more. The sender asks for an ack (ACKREQ) at its window's edge and
 * on the last frame, and a gap draws a NACK at once, so a stream needs only a
 * few acks per window: each costs the receiver a frame and, alone in its
 * poll, a system call. Half a window still lets the sender slide before it
 * reaches the edge; the peer window (512 frames) spreads a stream over
 * several messages anyway. A quarter (16) gave six acks per 128 KiB message,
 * this three. A message within the window needs only its completion ack
 * (MTU 9000: a 128 KiB message is 15 frames; acked per collection of 3 and
 * per poll, the receiver made 82 system calls per MB, one per 1.4 frames). */
static uint32_t collection(const struct emp_fw *fw, const struct rec *x)
{
	uint32_t k = fw->cfg.ack_every, bulk = fw->cfg.window / 2;
	return emp__bulk(fw, x) && bulk > k ? bulk : k;
}

static void rx_data(struct emp_fw *fw, const struct hdr *h, uint64_t now)
{
	const uint8_t *b = h->body;
	uint32_t frame = get24(b + EMP_D_FRAME), msg_len = get32(b + EMP_D_MSG_LEN), tag = get32(b + EMP_D_TAG);
	uint32_t frag = get16(b + EMP_D_FRAG), back = b[EMP_D_PREV];
	/* every sender's frames carry at least EMP_MIN_MTU bytes (both MTUs are) */
	if (frag < EMP_MIN_MTU - emp__overhead(fw) || frag + emp__overhead(fw) > fw->cfg.mtu) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		return;
	}
	uint32_t nframes = msg_len ? (uint32_t)(((uint64_t)msg_len + frag - 1) / frag) : 1;
	if (frame >= nframes) {
		emp__drop(fw, EMP_DROP_BAD_INDEX);
		return;
	}
	uint64_t off = (uint64_t)frame * frag;
	uint32_t plen = data_plen(frame, msg_len, frag);   /* body_size checked the frame holds it */
	if (h->dst_inc != fw->cfg.incarnation) {
		emp__send_stale(fw, h);
		emp__drop(fw, EMP_DROP_STALE);
		return;
	}
	int32_t p = emp__peer_get(fw, (uint16_t)h->host, h->src_ep, 0);
	const uint8_t *payload = b + EMP_DATA_HDR_LEN;
	if (h->flags & EMP_F_PIGGY) {
		if (p != NIL)
			rx_piggy_ack(fw, h, p, payload, now);
		payload += EMP_PIGGY_LEN;
	}
	struct peer *pe = p == NIL ? NULL : &fw->peer[p];
	if (!emp__rx_session_ok(pe, h)) {
		emp__drop(fw, EMP_DROP_NO_SESSION);
		return;
	}
	emp__fc_update(fw, pe, h->credits);
	emp__peer_touch(fw, p);
	pe->rx_frames++;
	pe->rx_bytes += h->len;
	int32_t r = find(fw, &pe->rxa, h->msg_id);
	if (r == NIL) {
		uint32_t off = h->msg_id - pe->match_next, prev = back ? h->msg_id - back : 0;
		if (emp__recv_dead(pe, h->msg_id, h->session)) {
			emp__drop(fw, EMP_DROP_EXPIRED);   /* given up here: no ack (expire.c) */
			return;
		}
		if (seq_lt(h->msg_id, pe->match_next) || (off < EMP_MATCH_BITS && (pe->matched >> off & 1))) {
			/* a message completed here: its final ack was lost */
			emp__drop(fw, EMP_DROP_DUP);
			emp__send_ack_raw(fw, p, h->msg_id, nframes, nframes, 0, EMP_F_DUP);
			return;
		}
		if (off >= EMP_MATCH_BITS) {
			/* too far ahead of the first unmatched message: ask for that one */
			emp__drop(fw, EMP_DROP_WINDOW);
			notice(fw, p, pe->match_next, EMP_F_NACK | EMP_F_STUCK, now);
			return;
		}
		if (prev && !seq_lt(prev, pe->match_next) &&
		    (prev - pe->match_next >= EMP_MATCH_BITS || !(pe->matched >> (prev - pe->match_next) & 1))) {
			/* the same tag's previous message has not arrived: it goes first */
			emp__drop(fw, EMP_DROP_ORDER);
			notice(fw, p, prev, EMP_F_NACK | EMP_F_CHAIN, now);
			return;
		}
		r = emp__match_recv(fw, pe->host, pe->ep, tag, off == 0);
		if (r == NIL && emp__match_recv_blocked(fw, pe->host, pe->ep, tag)) {
			/* a wildcard receive would take it, but earlier messages of this
			 * sender must be matched before a wildcard takes a later one */
			emp__drop(fw, EMP_DROP_ORDER);
			notice(fw, p, pe->match_next, EMP_F_NACK | EMP_F_STUCK, now);
			return;
		}
		if (r == NIL) {
			/* no buffering: dropped, the sender retransmits */
			emp__drop(fw, EMP_DROP_NO_RECV);
			notice(fw, p, h->msg_id, EMP_F_NORECV, now);
			if (!pe->norecv_pending)
				fw->norecv_peers++;
			pe->norecv_pending = 1;
			pe->norecv_msg = h->msg_id;
			pe->norecv_tag = tag;
			return;
		}
		if (pe->norecv_pending) {
			pe->norecv_pending = 0;
			fw->norecv_peers--;
		}
		struct rec *x = &fw->rec[r];
		x->kind = REC_RECV_ACTIVE;
		x->peer = p;
		x->msg_id = h->msg_id;
		x->tag = tag;
		x->len = msg_len;
		x->nframes = nframes;
		x->frag = frag;
		x->cum = 0;
		x->sack = 0;
		x->since_ack = x->nack_cum = 0;
		x->deadline = 0;
		x->src_host = pe->host;
		x->src_ep = pe->ep;
		emp__recv_matched(fw, x, now);
		emp__dl_push(fw, &pe->rxa, r);
		emp__peer_activate(fw, p);          /* its delayed-ack timer lives on the active list */
		pe->matched |= 1ull << off;
		while (pe->matched & 1) {
			pe->matched >>= 1;
			pe->match_next++;
		}
	}
	struct rec *x = &fw->rec[r];
	if (x->len != msg_len || x->frag != frag) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		return;
	}
	if (frame < x->cum || (frame - x->cum < EMP_SACK_BITS && (x->sack >> (frame - x->cum) & 1))) {
		emp__drop(fw, EMP_DROP_DUP);
		if (h->flags & EMP_F_ACKREQ)       /* a resend or a probe: the gap it may not have filled is named */
			emp__send_ack(fw, p, x, EMP_F_DUP | (x->sack ? EMP_F_NACK : 0));
		return;
	}
	if (frame - x->cum >= EMP_SACK_BITS) {
		emp__drop(fw, EMP_DROP_WINDOW);
		return;
	}
	if (off < x->cap && !emp__lent_take(fw, r, frame, payload, plen))
		emp__place(&fw->desc[r], off, payload,
		      (uint32_t)(x->cap - off < plen ? x->cap - off : plen));
	fw->ctr.rx_data++;
	emp__recv_progress(fw, x, now);
	emp__gather_frame(fw, x, now);
	x->sack |= 1ull << (frame - x->cum);
	while (x->sack & 1) {
		x->sack >>= 1;
		x->cum++;
	}
	x->since_ack++;
	if (x->cum == x->nframes) {
		emp__gather_done(fw, x, now);
		emp__send_ack(fw, p, x, 0);
		if (emp__bulk(fw, x))
			emp__tx_bulk_ack(fw, x->msg_id, now);
		emp__tx_hold_ack(fw, p, x, now);
		emp__dl_del(fw, &pe->rxa, r);
		emp__complete(fw, r, x->len <= x->cap ? (int64_t)x->len : -EMP_EMSGSIZE);
	} else if (x->sack && x->nack_cum != x->cum + 1) {
		/* a gap: tell the sender now instead of waiting for its timer */
		x->nack_cum = x->cum + 1;
		emp__send_ack(fw, p, x, EMP_F_NACK);
	} else if (x->since_ack >= collection(fw, x) || (h->flags & EMP_F_ACKREQ)) {
		/* a gap named before and still open is named again when the sender
		 * asks (its resend, or its timeout's probe, was lost too) */
		emp__send_ack(fw, p, x, x->sack && (h->flags & EMP_F_ACKREQ) ? EMP_F_NACK : 0);
		/* a collection's ack may wait for company; one the sender asked
		 * for (its window's edge) leaves with this poll */
		if (emp__bulk(fw, x) && !(h->flags & EMP_F_ACKREQ))
			emp__tx_bulk_ack(fw, x->msg_id, now);
	} else {
		/* a partial collection waits for its delayed ack (ack_delay_ns): the
		 * rest of a short message is a few microseconds behind, and its
		 * completion ack rides in the reply. Acked as soon as a poll had
		 * drained the device, a 2-frame request whose frames came in two
		 * polls drew an ack frame for its first frame. A lost frame is
		 * named at once (the NACK above) and the sender's probes find a
		 * lost tail. */
		emp__timer_frame_received(fw, x, now);
	}
}

/* Bytes of the type's own header and payload, or -1 if the type is unknown. */
static int64_t body_size(uint8_t type, uint16_t flags, const uint8_t *body, uint32_t avail)
{
	switch (type) {
	case EMP_T_DATA:
		if (avail < EMP_DATA_HDR_LEN || !get16(body + EMP_D_FRAG))
			return -2;               /* no frag: no payload length either */
		return EMP_DATA_HDR_LEN +
			(int64_t)data_plen(get24(body + EMP_D_FRAME), get32(body + EMP_D_MSG_LEN), get16(body + EMP_D_FRAG)) +
			(flags & EMP_F_PIGGY ? EMP_PIGGY_LEN : 0);
	case EMP_T_ACK:
		return EMP_ACK_HDR_LEN;
	case EMP_T_HELLO:
	case EMP_T_HELLO_ACK:
		return EMP_HELLO_HDR_LEN;
	case EMP_T_STALE:
		return EMP_STALE_HDR_LEN;
	case EMP_T_BYE:
		return flags & EMP_F_DONE ? EMP_BYE_DONE_LEN : 0;
	case EMP_T_PROBE:
		return 0;
	default:
		return -1;
	}
}

int emp__fw_frame(struct emp_fw *fw, const uint8_t *f, uint32_t len, uint64_t now)
{
	int before = fw->completed;
	struct hdr h;
	fw->now = now;
	fw->ctr.rx_frames++;
	fw->ctr.rx_bytes += len;
	if (len < EMP_ETH_HLEN + EMP_HDR_LEN) {
		emp__drop(fw, EMP_DROP_SHORT);
		goto out;
	}
	if (get16(f + EMP_OFF_ETHERTYPE) != fw->cfg.ethertype) {
		emp__drop(fw, EMP_DROP_ETHERTYPE);
		goto out;
	}
	const uint8_t *c = f + EMP_ETH_HLEN;
	uint16_t vtf = get16(c + EMP_C_VTF);
	unsigned ver = EMP_VTF_VERSION(vtf), tag_len = fw->cfg.auth ? EMP_AUTH_TAG_LEN : 0;
	if (ver != (fw->cfg.auth ? EMP_PROTO_VERSION_AUTH : EMP_PROTO_VERSION)) {
		/* with auth on, an untagged frame (of this version) is an auth failure */
		emp__drop(fw, fw->cfg.auth && ver == EMP_PROTO_VERSION ? EMP_DROP_AUTH : EMP_DROP_VERSION);
		goto out;
	}
	h.dst_mac = f;
	h.src_mac = f + 6;
	h.type = (uint8_t)EMP_VTF_TYPE(vtf);
	h.flags = (uint16_t)EMP_VTF_FLAGS(vtf);
	h.dst_ep = get16(c + EMP_C_DST_EP);
	h.src_ep = get16(c + EMP_C_SRC_EP);
	h.dst_inc = get32(c + EMP_C_DST_INC);
	h.src_inc = get32(c + EMP_C_SRC_INC);
	h.session = get16(c + EMP_C_SESSION);
	h.credits = get16(c + EMP_C_CREDITS);
	h.msg_id = get32(c + EMP_C_MSG_ID);
	h.body = c + EMP_HDR_LEN;
	h.len = len;
	/* Ethernet may pad short frames: the type says how long the frame is */
	uint32_t avail = len - EMP_ETH_HLEN - EMP_HDR_LEN;
	int64_t need = body_size(h.type, h.flags, h.body, avail);
	if (need == -1) {
		emp__drop(fw, EMP_DROP_TYPE);
		goto out;
	}
	if (need < 0 || (uint64_t)need + tag_len > avail) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		goto out;
	}
	h.body_len = (uint32_t)need;
	if ((h.flags & EMP_F_CSUM) &&
	    emp__crc32c(0, c + 4, EMP_HDR_LEN - 4 + h.body_len) != get32(c)) {
		emp__drop(fw, EMP_DROP_CSUM);
		goto out;
	}
	if (memcmp(h.dst_mac, fw->cfg.mac, 6)) {
		/* broadcast, multicast, or another host's (a promiscuous device) */
		emp__drop(fw, EMP_DROP_DST_MAC);
		goto out;
	}
	if (h.dst_ep != fw->cfg.endpoint) {
		emp__drop(fw, EMP_DROP_NOT_MINE);
		goto out;
	}
	h.host = emp__host_by_mac(fw, h.src_mac);
	if (h.host < 0) {
		emp__drop(fw, EMP_DROP_UNKNOWN_MAC);
		goto out;
	}
	if (fw->cfg.auth && emp__auth_check(fw, &h, f) < 0)
		goto out;
	int32_t p;
	switch (h.type) {
	case EMP_T_DATA:
		rx_data(fw, &h, now);
		break;
	case EMP_T_ACK:
		p = emp__peer_get(fw, (uint16_t)h.host, h.src_ep, 0);
		if (p == NIL) {
			emp__drop(fw, EMP_DROP_UNKNOWN_MSG);
		} else if (h.dst_inc != fw->cfg.incarnation) {
			emp__send_stale(fw, &h);
			emp__drop(fw, EMP_DROP_STALE);
		} else {
			emp__peer_touch(fw, p);
			emp__rx_ack(fw, &h, p, now);
		}
		break;
	case EMP_T_HELLO:
		/* with hello_needs_hold a HELLO creates no state: the host made the
		 * peer when its own handshake agreed (emp__fw_peer_hold) */
		p = emp__peer_get(fw, (uint16_t)h.host, h.src_ep, !fw->cfg.hello_needs_hold);
		if (p == NIL) {
			emp__drop(fw, fw->cfg.hello_needs_hold ? EMP_DROP_NO_SESSION : EMP_DROP_NO_PEER_SLOT);
			if (fw->cfg.hello_needs_hold)
				emp__hello_refused(fw, &h, now);
		} else {
			emp__peer_touch(fw, p);
			emp__rx_hello(fw, &h, p, now);
		}
		break;
	case EMP_T_HELLO_ACK:
		p = emp__peer_get(fw, (uint16_t)h.host, h.src_ep, 0);
		if (p == NIL) {
			emp__drop(fw, EMP_DROP_STALE);
		} else {
			emp__peer_touch(fw, p);
			emp__rx_hello_ack(fw, &h, p, now);
		}
		break;
	case EMP_T_STALE:
		p = emp__peer_get(fw, (uint16_t)h.host, h.src_ep, 0);
		if (p == NIL)
			emp__drop(fw, EMP_DROP_STALE);
		else
			emp__rx_stale(fw, &h, p);
		break;
	case EMP_T_PROBE:
		emp__rx_probe(fw, &h, now);
		break;
	case EMP_T_BYE:
		p = emp__peer_get(fw, (uint16_t)h.host, h.src_ep, 0);
		if (p == NIL)
			emp__drop(fw, EMP_DROP_NO_SESSION);
		else if (h.flags & EMP_F_DONE)
			emp__rx_bye_done(fw, &h, p);
		else
			emp__rx_bye(fw, &h, p);
		break;
	default:
		emp__drop(fw, EMP_DROP_TYPE);
		break;
	}
out:
	if (!fw->in_poll)
		emp__tx_flush(fw);
	return fw->completed - before;
}
