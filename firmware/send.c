/* send.c: the transmit side: building frames into the tx batch, starting messages, the tx pump, flushing. */
#include "fw_int.h"

/* A header slot in the tx batch for a frame to peer p: Ethernet and common
 * header filled in; returns where the type's own header goes. */
uint8_t *emp__tx_slot(struct emp_fw *fw, int32_t p, uint8_t type, uint16_t flags, uint32_t msg_id,
		      uint16_t session, uint32_t body_len)
{
	if (fw->txn == TXB_MAX)
		emp__tx_flush(fw);
	struct peer *pe = &fw->peer[p];
	pe->last_act = fw->now;
	unsigned i = fw->txn++;
	uint8_t *b = fw->txhdr[i];
	memcpy(b, fw->host_mac[pe->host], 6);
	memcpy(b + 6, fw->cfg.mac, 6);
	put16(b + 12, fw->cfg.ethertype);
	uint8_t *h = b + EMP_ETH_HLEN;
	if (fw->cfg.checksum)
		flags |= EMP_F_CSUM;
	put32(h + EMP_C_CSUM, 0);
	put16(h + EMP_C_VTF, EMP_VTF(fw->cfg.auth ? EMP_PROTO_VERSION_AUTH : EMP_PROTO_VERSION, type, flags));
	put16(h + EMP_C_DST_EP, pe->ep);
	put16(h + EMP_C_SRC_EP, fw->cfg.endpoint);
	uint32_t dinc = emp__rx_side(type, flags) ? pe->rx_remote_inc : pe->tx_remote_inc;
	put32(h + EMP_C_DST_INC, dinc);
	put32(h + EMP_C_SRC_INC, fw->cfg.incarnation);
	put16(h + EMP_C_SESSION, session);
	put16(h + EMP_C_CREDITS, emp__fc_advertise(fw));
	put32(h + EMP_C_MSG_ID, msg_id);
	struct emp_txframe *f = &fw->txf[i];
	f->hdr = b;
	f->hdr_len = EMP_ETH_HLEN + EMP_HDR_LEN + body_len;
	f->npieces = 0;
	fw->txmeta[i].rec = NIL;
	fw->txmeta[i].peer = p;
	fw->txmeta[i].frame = 0;
	fw->txmeta[i].held_ack = fw->txmeta[i].dead = fw->txmeta[i].bulk_ack = 0;
	if (fw->cfg.auth)
		emp__auth_tx_key(fw, i, pe, type, flags);
	if (type == EMP_T_ACK) {
		fw->ctr.tx_acks++;
		if (flags & EMP_F_NACK)
			fw->ctr.tx_nacks++;
	}
	return h + EMP_HDR_LEN;
}

/* Payload pieces of [off, off+len) of a descriptor's scatter-gather list. */
static int gather(const struct emp_desc *d, uint64_t off, uint32_t len, struct emp_txframe *f, unsigned max)
{
	unsigned s = 0;
	while (s < d->nsg && off >= d->sg[s].len)
		off -= d->sg[s++].len;
	while (len && s < d->nsg) {
		if (f->npieces == max)
			return -1;
		uint64_t n = d->sg[s].len - off;
		if (n > len)
			n = len;
		f->piece[f->npieces].p = (const uint8_t *)d->sg[s].base + off;
		f->piece[f->npieces].len = (uint32_t)n;
		f->npieces++;
		len -= (uint32_t)n;
		off = 0;
		s++;
	}
	return len ? -1 : 0;
}

/* The held completion ack of message msg_id to peer p, in the batch before
 * slot end, waits no longer; 0 if it is not there (it rode in a reply, or left) */
static int release_held(struct emp_fw *fw, int32_t p, uint32_t msg_id, unsigned end)
{
	for (unsigned k = 0; k < end; k++) {
		const uint8_t *a = fw->txf[k].hdr + EMP_ETH_HLEN;
		if (fw->txmeta[k].held_ack && !fw->txmeta[k].dead && fw->txmeta[k].peer == p &&
		    get32(a + EMP_C_MSG_ID) == msg_id) {
			fw->txmeta[k].held_ack = 0;
			fw->tx_holdable--;
			return 1;
		}
	}
	return 0;
}

/* The completion ack just queued (the batch's last slot) for message x of
 * peer p may wait for a reply to carry it (EMP_F_PIGGY): a one-frame
 * message's, and a short one's of several frames too (a memcached set of 2
 * frames drew an ack frame of its own per request). Not in a stream: when
 * another message completes on the same connection (tag) while the ack of
 * one of several frames still waits, nothing answered in between, and that
 * ack goes now, with this one if it is of several frames too (an event
 * loop keeps held acks up to EMP__ROUND_ACK_NS: an iperf3 stream of 4 KiB
 * writes slowed by a tenth with them kept). A bulk message's never waits. */
void emp__tx_hold_ack(struct emp_fw *fw, int32_t p, const struct rec *x, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	unsigned last = fw->txn - 1;
	if (pe->held_set && pe->held_tag == x->tag) {
		pe->held_set = 0;
		if (release_held(fw, p, pe->held_msg, last) && x->nframes > 1)
			return;
	}
	if (emp__bulk(fw, x))
		return;
	if (x->nframes > 1) {
		pe->held_set = 1;
		pe->held_tag = x->tag;
		pe->held_msg = x->msg_id;
	}
	fw->tx_holdable++;
	fw->txmeta[last].held_ack = 1;
	fw->txmeta[last].since = now;
}

/* A completion ack held in this batch for the peer this DATA frame goes to
 * rides in the frame (EMP_F_PIGGY) if there is room; its own slot is dropped
 * at flush. One frame instead of two per ping-pong reply. */
static void piggyback(struct emp_fw *fw, unsigned i, int32_t p, uint8_t *b, uint32_t plen)
{
	if (!fw->tx_holdable || emp__overhead(fw) + EMP_PIGGY_LEN + plen > fw->cfg.mtu)
		return;
	for (unsigned k = 0; k < i; k++) {
		if (!fw->txmeta[k].held_ack || fw->txmeta[k].dead || fw->txmeta[k].peer != p)
			continue;
		const uint8_t *a = fw->txf[k].hdr + EMP_ETH_HLEN;   /* the ACK: common header, body */
		uint8_t *q = b + EMP_DATA_HDR_LEN;
		put32(q, get32(a + EMP_C_MSG_ID));                   /* msg_id */
		put32(q + 4, get32(a + EMP_HDR_LEN + 4));            /* nframes */
		put16(q + 8, get16(a + EMP_C_SESSION));              /* session */
		put16(q + 10, 0);
		uint8_t *c = b - EMP_HDR_LEN;
		put16(c + EMP_C_VTF, (uint16_t)(get16(c + EMP_C_VTF) | EMP_F_PIGGY));
		fw->txf[i].hdr_len += EMP_PIGGY_LEN;
		fw->txmeta[k].dead = 1;
		fw->tx_holdable--;
		fw->ctr.piggy_acks++;
		return;
	}
}

static void tx_data(struct emp_fw *fw, int32_t r, uint32_t frame, uint16_t flags)
{
	struct rec *x = &fw->rec[r];
	struct peer *pe = &fw->peer[x->peer];
	uint64_t off = (uint64_t)frame * x->frag;
	uint32_t plen = (uint32_t)(x->len - off < x->frag ? x->len - off : x->frag);
	uint8_t *b = emp__tx_slot(fw, x->peer, EMP_T_DATA, flags, x->msg_id, pe->tx_session, EMP_DATA_HDR_LEN);
	put24(b + EMP_D_FRAME, frame);
	put32(b + EMP_D_MSG_LEN, (uint32_t)x->len);
	put32(b + EMP_D_TAG, x->tag);
	put16(b + EMP_D_FRAG, (uint16_t)x->frag);
	uint32_t back = x->prev_id ? x->msg_id - x->prev_id : 0;
	b[EMP_D_PREV] = (uint8_t)(back > EMP_PREV_FAR ? EMP_PREV_FAR : back);
	unsigned i = fw->txn - 1;
	fw->txmeta[i].rec = r;
	fw->txmeta[i].frame = frame;
	piggyback(fw, i, x->peer, b, plen);
	/* with auth the tag takes a piece of its own (auth.c) */
	if (gather(&fw->desc[r], off, plen, &fw->txf[i], EMP_TX_PIECES - (fw->cfg.auth ? 1 : 0)) < 0) {
		/* more scattered than the driver gathers: copy into this slot's bounce buffer */
		struct emp_txframe *f = &fw->txf[i];
		uint8_t *bb = fw->bounce + (size_t)i * fw->cfg.mtu;
		const struct emp_desc *d = &fw->desc[r];
		uint64_t o = off;
		uint32_t left = plen, at = 0;
		for (unsigned s = 0; s < d->nsg && left; s++) {
			if (o >= d->sg[s].len) {
				o -= d->sg[s].len;
				continue;
			}
			uint64_t n = d->sg[s].len - o;
			if (n > left)
				n = left;
			memcpy(bb + at, (const uint8_t *)d->sg[s].base + o, n);
			at += (uint32_t)n;
			left -= (uint32_t)n;
			o = 0;
		}
		f->npieces = 1;
		f->piece[0].p = bb;
		f->piece[0].len = plen;
	}
	fw->ctr.tx_data++;
}

static int is_small(const struct peer *pe, const struct rec *x)
{
	return x->len <= pe->frag;
}

/* A posted send joins the peer's queue: a one-frame message with nothing of
 * its tag queued before it takes the lane (txs), which starts first; anything
 * else keeps posting order in txq. (A tag never overtakes itself.) */
void emp__send_enqueue(struct emp_fw *fw, int32_t p, int32_t r)
{
	struct peer *pe = &fw->peer[p];
	struct rec *x = &fw->rec[r];
	int lane = is_small(pe, x);
	for (int32_t q = pe->txq.tail; lane && q != NIL; q = fw->rec[q].prev)
		if (fw->rec[q].tag == x->tag)
			lane = 0;
	x->lane = (uint8_t)lane;
	emp__gather_sent(fw);
	emp__dl_push(fw, lane ? &pe->txs : &pe->txq, r);
}

static void start_one(struct emp_fw *fw, int32_t p, int32_t r)
{
	struct peer *pe = &fw->peer[p];
	struct rec *x = &fw->rec[r];
	emp__dl_del(fw, x->lane ? &pe->txs : &pe->txq, r);
	x->lane = 0;
	x->kind = REC_SEND_ACTIVE;
	if (x->len && (x->len + pe->frag - 1) / pe->frag > EMP_MAX_FRAMES) {
		x->kind = REC_SEND_QUEUED;       /* more frames than the 24-bit index counts */
		emp__complete(fw, r, -EMP_EMSGSIZE);
		return;
	}
	x->msg_id = pe->next_msg_id++;
	x->prev_id = 0;
	for (int32_t q = pe->act.tail; q != NIL; q = fw->rec[q].prev)
		if (fw->rec[q].tag == x->tag) {
			x->prev_id = fw->rec[q].msg_id;
			break;
		}
	x->frag = pe->frag;
	x->nframes = x->len ? (uint32_t)((x->len + x->frag - 1) / x->frag) : 1;
	x->cum = x->sent_hi = 0;
	x->sack = x->rtx = 0;
	x->rto = pe->rto;                /* the peer's measured round trip */
	x->probe_at = 0;
	x->deadline = 0;
	emp__dl_push(fw, &pe->act, r);
	pe->inflight_msgs++;
	emp__fc_started(fw, pe);
}

/* One-frame messages of the lane start first. Then txq in posting order
 * while the peer's windows allow; a multi-frame message leaves
 * EMP_SMALL_RESERVE_MSGS slots to the lane, and when it has to wait,
 * one-frame messages queued behind it (up to EMP_SMALL_LOOKAHEAD) start ahead
 * of it unless a message of their own tag waits before them: a connection's
 * FIN or credits never queue behind other connections' bulk data. */
static void start_messages(struct emp_fw *fw, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	while (pe->txs.head != NIL && pe->inflight_msgs < fw->cfg.peer_msgs && emp__fc_may_start(fw, pe, now))
		start_one(fw, p, pe->txs.head);
	uint32_t big_max = fw->cfg.peer_msgs > EMP_SMALL_RESERVE_MSGS ? fw->cfg.peer_msgs - EMP_SMALL_RESERVE_MSGS : 1;
	uint32_t held[EMP_SMALL_LOOKAHEAD];
	unsigned nheld = 0, looked = 0;
	int32_t r = pe->txq.head;
	while (r != NIL && pe->inflight_msgs < fw->cfg.peer_msgs && emp__fc_may_start(fw, pe, now)) {
		struct rec *x = &fw->rec[r];
		int32_t next = x->next;
		int wait = !is_small(pe, x) && pe->inflight_msgs >= big_max;
		for (unsigned i = 0; !wait && i < nheld; i++)
			wait = held[i] == x->tag;
		if (!wait) {
			start_one(fw, p, r);
		} else {
			if (nheld == EMP_SMALL_LOOKAHEAD || ++looked > EMP_SMALL_LOOKAHEAD)
				break;
			held[nheld++] = x->tag;   /* later messages of this tag wait too */
		}
		r = next;
	}
}

/* Frames of one message: retransmissions first, then new frames within the
 * message window and the receiver window. */
static void pump_rec(struct emp_fw *fw, int32_t r, unsigned *budget, uint64_t now)
{
	struct rec *x = &fw->rec[r];
	struct peer *pe = &fw->peer[x->peer];
	int sent = 0;
	while (x->rtx && *budget) {
		unsigned i = (unsigned)__builtin_ctzll(x->rtx);
		x->rtx &= x->rtx - 1;
		uint32_t frame = x->cum + i;
		if (frame >= x->sent_hi || (x->sack >> i & 1))
			continue;
		uint16_t fl = EMP_F_ACKREQ | (frame == x->nframes - 1 ? EMP_F_LAST : 0);
		if (x->probe_at && frame == x->probe_frame)
			x->probe_at = 0;         /* Karn: an ack of a resent frame times nothing */
		tx_data(fw, r, frame, fl);
		fw->ctr.retransmits++;
		pe->retransmits++;
		(*budget)--;
		sent = 1;
	}
	uint32_t limit = x->cum + fw->cfg.window;
	if (limit > x->nframes)
		limit = x->nframes;
	/* a one-frame message with no message of its tag before it in flight
	 * always has room for its frame (at most peer_msgs of them are in
	 * flight): it never waits for the bulk window to drain. The window
	 * freed by each ack goes to the older messages first, so a connection's
	 * HELLO behind others' data left after their last frames (t_fault_load:
	 * a HELLO past the server's 500 ms bound). One that follows its tag's
	 * previous message keeps its place: ahead of it, it would be dropped
	 * (EMP_DROP_ORDER) and resent. */
	int free_pass = x->nframes == 1 && !x->prev_id;
	while (x->sent_hi < limit && *budget && (free_pass || pe->inflight_frames < fw->cfg.peer_window)) {
		uint32_t frame = x->sent_hi++;
		pe->inflight_frames++;
		uint16_t fl = 0;
		if (frame == x->nframes - 1)
			fl |= EMP_F_LAST | EMP_F_ACKREQ;
		if (frame == limit - 1 || pe->inflight_frames == fw->cfg.peer_window)
			fl |= EMP_F_ACKREQ;
		if (!x->probe_at) {              /* time the round trip of this frame */
			x->probe_at = now ? now : 1;
			x->probe_frame = frame;
		}
		tx_data(fw, r, frame, fl);
		(*budget)--;
		sent = 1;
	}
	if (sent)
		emp__timer_data_sent(fw, x, now);
}

static int peer_idle(const struct peer *pe)
{
	return pe->txq.head == NIL && pe->txs.head == NIL && pe->act.head == NIL && pe->rxa.head == NIL &&
	       pe->tx_state != PTX_HELLO;
}

static void alist_remove(struct emp_fw *fw, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	if (pe->anext == p) {
		fw->alist = NIL;
	} else {
		fw->peer[pe->aprev].anext = pe->anext;
		fw->peer[pe->anext].aprev = pe->aprev;
		if (fw->alist == p)
			fw->alist = pe->anext;
	}
	pe->on_alist = 0;
	pe->anext = pe->aprev = NIL;
}

void emp__tx_pump(struct emp_fw *fw, uint64_t now)
{
	unsigned budget = fw->cfg.tx_burst;
	fw->pending_tx = 0;
	if (fw->alist == NIL)
		return;
	/* one pass over the circular list, head to tail; only the peer being
	 * visited is ever removed, so the tail stays a valid stop mark */
	int32_t p = fw->alist, last = fw->peer[p].aprev;
	for (;;) {
		struct peer *pe = &fw->peer[p];
		int32_t next = pe->anext;
		if (peer_idle(pe)) {
			alist_remove(fw, p);
		} else if (pe->tx_state == PTX_UP) {
			start_messages(fw, p, now);
			for (int32_t r = pe->act.head; r != NIL && budget; r = fw->rec[r].next)
				pump_rec(fw, r, &budget, now);
			if (!budget) {
				fw->pending_tx = 1;
				fw->alist = next;    /* next poll starts with the next peer */
				return;
			}
		}
		if (p == last || fw->alist == NIL)
			break;
		p = next;
	}
}

/* Whether batch slot i is an ack an event loop's poll keeps (held, not
 * ridden in a DATA frame, not due yet: each waits at most the host's bound,
 * hold_ns, and half the retransmit timeout toward its peer, ours standing for
 * theirs); *dl is when it is due. */
static int ack_kept(const struct emp_fw *fw, unsigned i, uint64_t now, uint64_t *dl)
{
	const struct emp_txframe *f = &fw->txf[i];
	if (fw->txmeta[i].dead || !fw->txmeta[i].held_ack || f->npieces || f->hdr_len > HDRBUF)
		return 0;
	const struct peer *pe = &fw->peer[fw->txmeta[i].peer];
	uint64_t rto = pe->rto ? pe->rto : fw->cfg.rto_ns;
	*dl = fw->txmeta[i].since + (fw->hold_ns < rto / 2 ? fw->hold_ns : rto / 2);
	return now < *dl;
}

/* An event loop's poll (hold_ns set by the host): its replies leave at the
 * loop's next wait, not in this batch, so the completion acks of the requests
 * it took stay, at the front of the next batch, for those replies to ride in
 * (EMP_F_PIGGY); the rest of the batch goes now. The kept acks' headers are
 * copied aside and back (header slots are reused by index), and the credits
 * they advertise are refreshed. */
static void flush_keeping_acks(struct emp_fw *fw, uint64_t now)
{
	/* which acks stay, and is anything else here */
	unsigned k = 0, live = 0;
	uint64_t until = UINT64_MAX, dl;
	for (unsigned i = 0; i < fw->txn; i++) {
		if (ack_kept(fw, i, now, &dl)) {
			if (dl < until)
				until = dl;
			k++;
		} else if (!fw->txmeta[i].dead) {
			live++;
		}
	}
	if (live) {                          /* send the rest; the kept ones move to the front */
		unsigned n = 0;
		for (unsigned i = 0; i < fw->txn; i++) {
			const struct emp_txframe *f = &fw->txf[i];
			if (!ack_kept(fw, i, now, &dl))
				continue;
			memcpy(fw->keep[n].b, f->hdr, f->hdr_len);
			fw->keep[n].len = f->hdr_len;
			fw->keep[n].peer = fw->txmeta[i].peer;
			fw->keep[n].since = fw->txmeta[i].since;
			memcpy(fw->keep[n].key, fw->txkey[i], 16);   /* auth: the slot's tag key */
			fw->txmeta[i].dead = 1;      /* kept: not sent now */
			n++;
		}
		emp__tx_flush(fw);
		for (unsigned j = 0; j < n; j++) {
			unsigned i = fw->txn++;
			memcpy(fw->txhdr[i], fw->keep[j].b, fw->keep[j].len);
			put16(fw->txhdr[i] + EMP_ETH_HLEN + EMP_C_CREDITS, emp__fc_advertise(fw));
			fw->txf[i].hdr = fw->txhdr[i];
			fw->txf[i].hdr_len = fw->keep[j].len;
			fw->txf[i].npieces = 0;
			fw->txmeta[i].rec = NIL;
			fw->txmeta[i].peer = fw->keep[j].peer;
			fw->txmeta[i].frame = 0;
			fw->txmeta[i].held_ack = 1;
			fw->txmeta[i].dead = 0;
			fw->txmeta[i].since = fw->keep[j].since;
			memcpy(fw->txkey[i], fw->keep[j].key, 16);
		}
		fw->tx_holdable = n;
	}
	if (k && until != fw->tx_hold_until)
		emp__arm_fine(fw, until);
	fw->tx_hold_until = k ? until : 0;
}

/* The ack just put last in the batch (a plain one, of a bulk message) may
 * wait for company (bulk_hold); an earlier one of the same message still in
 * the batch says less than it (cumulative count, selective bitmap) and goes
 * no further. */
void emp__tx_bulk_ack(struct emp_fw *fw, uint32_t msg_id, uint64_t now)
{
	unsigned last = fw->txn - 1;
	int32_t p = fw->txmeta[last].peer;
	fw->txmeta[last].bulk_ack = 1;
	fw->txmeta[last].since = now;
	for (unsigned i = 0; i < last; i++) {
		if (!fw->txmeta[i].bulk_ack || fw->txmeta[i].dead || fw->txmeta[i].peer != p ||
		    get32(fw->txf[i].hdr + EMP_ETH_HLEN + EMP_C_MSG_ID) != msg_id)
			continue;
		fw->txmeta[i].dead = 1;
		fw->txmeta[last].since = fw->txmeta[i].since;   /* the oldest news sets the bound */
		fw->ctr.tx_acks--;
		fw->ctr.acks_merged++;
	}
}

/* A bulk stream's receiver that polls again at once (a thread spins in the
 * engine: hold_ok) keeps a batch of nothing but acks (its bulk acks, and
 * completion acks that may wait anyway) for up to EMP_BULK_HOLD_NS or a
 * quarter of the retransmit timeout, and EMP_BULK_HOLD_MAX acks: one system
 * call carries several, and a later ack of the same message replaces an
 * earlier one (emp__tx_bulk_ack). So does one about to sleep no longer than
 * until they are due (bulk_ok, emp__fw_bulk_deadline); others flush. */
static int bulk_hold(struct emp_fw *fw, uint64_t now)
{
	unsigned bulk = 0;
	uint64_t oldest = UINT64_MAX, bound = UINT64_MAX;
	for (unsigned i = 0; i < fw->txn; i++) {
		if (fw->txmeta[i].dead)
			continue;
		if (!fw->txmeta[i].bulk_ack && !fw->txmeta[i].held_ack)
			return 0;
		if (!fw->txmeta[i].bulk_ack)
			continue;
		const struct peer *pe = &fw->peer[fw->txmeta[i].peer];
		uint64_t rto = pe->rto ? pe->rto : fw->cfg.rto_ns;
		if (rto / 4 < bound)
			bound = rto / 4;
		if (fw->txmeta[i].since < oldest)
			oldest = fw->txmeta[i].since;
		bulk++;
	}
	if (!bulk || bulk >= EMP_BULK_HOLD_MAX)
		return 0;
	if (bound > EMP_BULK_HOLD_NS)
		bound = EMP_BULK_HOLD_NS;
	uint64_t until = oldest + bound;
	if (now >= until)
		return 0;
	if (until != fw->bulk_until)
		emp__arm_fine(fw, until);
	fw->bulk_until = until;
	return 1;
}

/* End of a poll: a batch holding only held completion acks (emp__tx_hold_ack)
 * waits up to ack_hold_ns, so that the reply the application is about to
 * post (ping-pong) carries the ack (EMP_F_PIGGY); anything else goes now. A
 * hold starts only while the host allows it (emp__fw_set_hold: a thread waits
 * in the engine and so polls again at once, or has just posted), and lasts
 * through the polls that follow until its deadline (the reply's post may come
 * after a few other looks at the engine). An event loop's polls keep each
 * ack longer and send the rest (flush_keeping_acks). */
void emp__tx_flush_or_hold(struct emp_fw *fw, uint64_t now)
{
	if (fw->txn && (fw->hold_ok || fw->bulk_ok) && bulk_hold(fw, now))
		return;
	/* a hold already started lasts through other looks, not into a sleep
	 * (bulk_ok without hold_ok: the thread's look before it sleeps) */
	int may = fw->txn && fw->tx_holdable && fw->cfg.ack_hold_ns &&
		  (fw->hold_ok || (fw->tx_hold_until && !fw->bulk_ok));
	if (may && fw->hold_ok && fw->hold_ns) {
		flush_keeping_acks(fw, now);
		return;
	}
	if (may && fw->tx_holdable == fw->txn) {
		if (!fw->tx_hold_until) {
			fw->tx_hold_until = now + fw->cfg.ack_hold_ns;
			emp__arm_fine(fw, fw->tx_hold_until);
		}
		if (now < fw->tx_hold_until)
			return;
	}
	emp__tx_flush(fw);
}

void emp__tx_flush(struct emp_fw *fw)
{
	unsigned n = fw->txn;
	fw->tx_holdable = 0;
	fw->tx_hold_until = 0;
	if (!n)
		return;
	if (fw->bulk_until) {                   /* held acks advertise today's credits */
		fw->bulk_until = 0;
		for (unsigned i = 0; i < n; i++)
			if (fw->txmeta[i].bulk_ack && !fw->txmeta[i].dead)
				put16((uint8_t *)fw->txf[i].hdr + EMP_ETH_HLEN + EMP_C_CREDITS, emp__fc_advertise(fw));
	}
	if (fw->cfg.checksum) {
		for (unsigned i = 0; i < n; i++) {
			struct emp_txframe *f = &fw->txf[i];
			uint8_t *h = (uint8_t *)f->hdr + EMP_ETH_HLEN;
			uint32_t c = emp__crc32c(0, h + 4, f->hdr_len - EMP_ETH_HLEN - 4);
			for (unsigned k = 0; k < f->npieces; k++)
				c = emp__crc32c(c, f->piece[k].p, f->piece[k].len);
			put32(h, c);
		}
	}
	for (unsigned i = 0; fw->cfg.auth && i < n; i++)
		if (!fw->txmeta[i].dead)
			emp__auth_tag(fw, i);
	unsigned live = 0;
	for (unsigned i = 0; i < n; i++) {      /* acks that rode in a DATA frame go no further */
		if (fw->txmeta[i].dead)
			continue;
		if (live != i) {
			fw->txf[live] = fw->txf[i];
			fw->txmeta[live] = fw->txmeta[i];
		}
		live++;
	}
	n = live;
	int sent = n ? fw->ops->tx_burst(fw->dev, fw->txf, n) : 0;
	int gone = sent < 0;                    /* the device failed (its link is gone), not full */
	if (sent < 0)
		sent = 0;
	for (unsigned i = 0; i < (unsigned)sent; i++) {
		const struct emp_txframe *f = &fw->txf[i];
		uint64_t bytes = f->hdr_len;
		for (unsigned k = 0; k < f->npieces; k++)
			bytes += f->piece[k].len;
		fw->ctr.tx_frames++;
		fw->ctr.tx_bytes += bytes;
		struct peer *pe = &fw->peer[fw->txmeta[i].peer];
		pe->tx_frames++;
		pe->tx_bytes += bytes;
	}
	/* frames the device had no room for: data goes again next poll; a
	 * device that failed (its interface gone) lost them, as a wire would:
	 * the retransmission timers try again, not every poll (a process
	 * whose interface had gone spun on it for its 2 s exit flush) */
	for (unsigned i = (unsigned)sent; i < n; i++) {
		fw->ctr.drops[EMP_DROP_TX_FULL]++;
		if (gone)
			continue;
		int32_t r = fw->txmeta[i].rec;
		if (r == NIL || fw->rec[r].kind != REC_SEND_ACTIVE)
			continue;
		struct rec *x = &fw->rec[r];
		uint32_t fr = fw->txmeta[i].frame;
		if (fr >= x->cum && fr - x->cum < EMP_SACK_BITS)
			x->rtx |= 1ull << (fr - x->cum);
		fw->pending_tx = 1;
	}
	fw->txn = 0;
}
