/* peer.c: per-host state: the peer table, sessions (HELLO/HELLO_ACK), incarnations, restarts and resets. */
#include "fw_int.h"

static uint32_t phash(uint16_t host, uint16_t ep)
{
	return (((uint32_t)host << 16) | ep) * 2654435761u;
}

/* A peer nobody uses any more: no host hold, nothing queued, in flight or
 * half received, no session being opened, and no frame for EMP_PEER_IDLE_NS
 * or its life said BYE (no other life of it seen since). */
static int reclaimable(const struct emp_fw *fw, const struct peer *pe)
{
	return pe->used && !pe->holds && !pe->on_alist && pe->txq.head == NIL && pe->act.head == NIL &&
	       pe->rxa.head == NIL && !pe->norecv_pending && pe->tx_state != PTX_HELLO &&
	       (fw->now - pe->last_act >= EMP_PEER_IDLE_NS ||
		(pe->bye_inc && pe->bye_inc == pe->rx_remote_inc && !pe->rx_known));
}

static void unhash(struct emp_fw *fw, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	int32_t *pp = &fw->phash[phash(pe->host, pe->ep) & fw->phash_mask];
	while (*pp != NIL && *pp != p)
		pp = &fw->peer[*pp].hnext;
	if (*pp == p)
		*pp = pe->hnext;
}

/* A table slot: a never used one, or the least recently active reclaimable
 * peer's (only when the table is full: a peer's session and round-trip
 * estimate are worth keeping while there is room). */
static int32_t slot_get(struct emp_fw *fw)
{
	if (fw->npeers < fw->cfg.max_peers)
		return (int32_t)fw->npeers++;
	int32_t best = NIL;
	for (uint32_t i = 0; i < fw->npeers; i++)
		if (reclaimable(fw, &fw->peer[i]) &&
		    (best == NIL || fw->peer[i].last_act < fw->peer[best].last_act))
			best = (int32_t)i;
	if (best == NIL)
		return NIL;
	unhash(fw, best);
	fw->peer[best].used = 0;
	fw->npeers_live--;
	fw->ctr.peers_reclaimed++;
	return best;
}

int32_t emp__peer_get(struct emp_fw *fw, uint16_t host, uint16_t ep, int create)
{
	uint32_t h = phash(host, ep) & fw->phash_mask;
	for (int32_t p = fw->phash[h]; p != NIL; p = fw->peer[p].hnext)
		if (fw->peer[p].host == host && fw->peer[p].ep == ep)
			return p;
	if (!create)
		return NIL;
	int32_t p = slot_get(fw);
	if (p == NIL)
		return NIL;
	fw->npeers_live++;
	struct peer *pe = &fw->peer[p];
	memset(pe, 0, sizeof(*pe));
	pe->used = 1;
	pe->host = host;
	pe->ep = ep;
	pe->tx_state = PTX_NEW;
	/* sessions start from a value derived from our incarnation, so that a
	 * restarted endpoint does not reuse its previous life's session numbers
	 * (a peer reclaimed and met again may see a number again: the HELLO's
	 * nonce tells the sessions apart) */
	pe->tx_session = (uint16_t)(fw->cfg.incarnation ^ (fw->cfg.incarnation >> 16) ^ (uint32_t)p);
	pe->next_msg_id = 1;
	pe->match_next = 1;
	pe->frag = fw->cfg.mtu - emp__overhead(fw);
	pe->credits = 0xffff;
	pe->hello_rto = fw->cfg.rto_ns;
	pe->rto = fw->cfg.rto_ns;
	pe->last_act = fw->now;
	pe->txq.head = pe->txq.tail = NIL;
	pe->txs.head = pe->txs.tail = NIL;
	pe->act.head = pe->act.tail = NIL;
	pe->rxa.head = pe->rxa.tail = NIL;
	pe->anext = pe->aprev = NIL;
	pe->hnext = fw->phash[h];
	fw->phash[h] = p;
	return p;
}

/* A held peer keeps its state at both ends (the host layer above holds it
 * there too while its connection lasts), so only an unheld one can have
 * been forgotten by the other side. */
void emp__peer_fresh(struct emp_fw *fw, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (!pe->holds && pe->tx_state == PTX_UP && pe->txq.head == NIL && pe->act.head == NIL &&
	    now - pe->last_act >= EMP_PEER_FRESH_NS)
		pe->tx_state = PTX_NEW;          /* the next send opens a new session */
}

/* A HELLO that came before the host held its sender (the host's own
 * handshake, which names the sender, may arrive after the engine's: a UDP
 * datagram beside the frames) is kept, the last per sender of the latest 8,
 * and answered at the hold instead of at the sender's retry, a
 * retransmission timeout (1 ms and more) later. It allocates no peer; a
 * sender the host never holds just ages out. */
#define REFUSED_N (sizeof(((struct emp_fw *)0)->refused) / sizeof(((struct emp_fw *)0)->refused[0]))
#define REFUSED_NS 100000000ull     /* older than this: the sender has retried, or given up */

void emp__hello_refused(struct emp_fw *fw, const struct hdr *h, uint64_t now)
{
	if (h->body_len < EMP_HELLO_HDR_LEN)
		return;
	unsigned i;
	for (i = 0; i < REFUSED_N; i++)
		if (fw->refused[i].at && fw->refused[i].host == (uint16_t)h->host && fw->refused[i].ep == h->src_ep)
			break;
	if (i == REFUSED_N)
		i = fw->refused_next++ % REFUSED_N;
	fw->refused[i].at = now ? now : 1;
	fw->refused[i].src_inc = h->src_inc;
	fw->refused[i].nonce = get32(h->body + 4);
	fw->refused[i].host = (uint16_t)h->host;
	fw->refused[i].ep = h->src_ep;
	fw->refused[i].session = h->session;
}

static void refused_replay(struct emp_fw *fw, int32_t p, uint16_t host, uint16_t ep, uint64_t now)
{
	for (unsigned i = 0; i < REFUSED_N; i++) {
		if (!fw->refused[i].at || fw->refused[i].host != host || fw->refused[i].ep != ep)
			continue;
		uint64_t at = fw->refused[i].at;
		fw->refused[i].at = 0;
		if (now - at >= REFUSED_NS)
			return;
		uint8_t body[EMP_HELLO_HDR_LEN] = { 0 };
		put32(body + 4, fw->refused[i].nonce);
		struct hdr h;
		memset(&h, 0, sizeof h);
		h.type = EMP_T_HELLO;
		h.host = host;
		h.src_mac = fw->host_mac[host];   /* option auth derives the session key from both MACs */
		h.dst_mac = fw->cfg.mac;
		h.src_ep = ep;
		h.dst_ep = fw->cfg.endpoint;
		h.session = fw->refused[i].session;
		h.src_inc = fw->refused[i].src_inc;
		h.dst_inc = fw->cfg.incarnation;
		h.body = body;
		h.body_len = sizeof body;
		emp__peer_touch(fw, p);
		emp__rx_hello(fw, &h, p, now);
		if (!fw->in_poll)
			emp__tx_flush(fw);       /* the answer goes now, not at the next poll */
		return;
	}
}

int emp__fw_peer_hold(struct emp_fw *fw, uint16_t host, uint16_t ep, int delta, uint64_t now)
{
	fw->now = now;
	int32_t p = emp__peer_get(fw, host, ep, delta > 0);
	if (p == NIL)
		return delta > 0 ? -EMP_ENOBUFS : 0;
	struct peer *pe = &fw->peer[p];
	if (delta > 0) {
		emp__peer_fresh(fw, p, now);     /* before the hold: only unheld peers restart */
		pe->holds++;
		refused_replay(fw, p, host, ep, now);
	} else if (pe->holds) {
		pe->holds--;
	}
	return 0;
}

void emp__fw_set_hello_needs_hold(struct emp_fw *fw, int on)
{
	fw->cfg.hello_needs_hold = !!on;
}

/* Put a peer on the circular active list (it has records to look after). */
void emp__peer_activate(struct emp_fw *fw, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	if (pe->on_alist)
		return;
	pe->on_alist = 1;
	if (fw->alist == NIL) {
		pe->anext = pe->aprev = p;
		fw->alist = p;
	} else {
		int32_t first = fw->alist, last = fw->peer[first].aprev;
		pe->anext = first;
		pe->aprev = last;
		fw->peer[last].anext = p;
		fw->peer[first].aprev = p;
	}
}

/* Return-to-sender: every send to this peer completes with err. */
void emp__peer_fail_sends(struct emp_fw *fw, int32_t p, int64_t err)
{
	struct peer *pe = &fw->peer[p];
	while (pe->act.head != NIL) {
		int32_t r = pe->act.head;
		emp__dl_del(fw, &pe->act, r);
		emp__complete(fw, r, err);
	}
	while (pe->txq.head != NIL) {
		int32_t r = pe->txq.head;
		emp__dl_del(fw, &pe->txq, r);
		emp__complete(fw, r, err);
	}
	while (pe->txs.head != NIL) {
		int32_t r = pe->txs.head;
		emp__dl_del(fw, &pe->txs, r);
		emp__complete(fw, r, err);
	}
	pe->inflight_frames = pe->inflight_msgs = 0;
	pe->unacked_starts = 0;
}

/* Partly received messages from a peer that restarted or reset: they can
 * never complete, so they complete with err. */
void emp__peer_fail_recvs(struct emp_fw *fw, int32_t p, int64_t err)
{
	struct peer *pe = &fw->peer[p];
	while (pe->rxa.head != NIL) {
		int32_t r = pe->rxa.head;
		emp__dl_del(fw, &pe->rxa, r);
		emp__complete(fw, r, err);
	}
}

/* HELLO_ACK with auth: msg_id carries our nonce for the session (proto.h) */
static void send_hello(struct emp_fw *fw, int32_t p, uint8_t type, uint16_t session, uint32_t nonce)
{
	uint32_t resp = type == EMP_T_HELLO_ACK && fw->cfg.auth ? fw->peer[p].rx_resp : 0;
	uint8_t *b = emp__tx_slot(fw, p, type, 0, resp, session, EMP_HELLO_HDR_LEN);
	if (!b)
		return;
	put32(b, fw->cfg.mtu);
	put32(b + 4, nonce);
}

/* A session's nonce: unpredictable from outside (the incarnation is random)
 * and never repeated by this endpoint, so a session number reused toward a
 * peer we forgot and met again still opens a new session there. */
static uint32_t session_nonce(struct emp_fw *fw)
{
	if (fw->cfg.auth)        /* a counter: a replayed HELLO is known as older (rx_hello) */
		return ++fw->hello_seq ? fw->hello_seq : ++fw->hello_seq;
	uint32_t x = fw->cfg.incarnation ^ (++fw->hello_seq * 0x9e3779b9u);
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	x *= 0xc2b2ae35u;
	x ^= x >> 16;
	return x ? x : 1;
}

void emp__peer_send_hello(struct emp_fw *fw, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (pe->tx_state == PTX_NEW) {
		pe->tx_state = PTX_HELLO;
		pe->tx_session++;
		pe->tx_nonce = session_nonce(fw);
		pe->hello_tries = 0;
		pe->hello_rto = fw->cfg.rto_ns;
		pe->next_msg_id = 1;
	}
	fw->ctr.hellos++;
	send_hello(fw, p, EMP_T_HELLO, pe->tx_session, pe->tx_nonce);
	pe->hello_deadline = now + pe->hello_rto;
	emp__arm(fw, pe->hello_deadline);
}

/* Our sends to a peer whose incarnation changed can never be delivered. */
void emp__peer_tx_reset(struct emp_fw *fw, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	emp__peer_fail_sends(fw, p, -EMP_ECONNRESET);
	pe->tx_state = PTX_NEW;
	pe->tx_remote_inc = 0;
}

/* The incarnation of this peer we currently believe in (0: none yet). */
static uint32_t known_inc(const struct peer *pe)
{
	if (pe->rx_known)
		return pe->rx_remote_inc;
	return pe->tx_state != PTX_NEW ? pe->tx_remote_inc : 0;
}

/* Ask the incarnation we know whether it is still alive (see PROBE in proto.h). */
static void send_probe(struct emp_fw *fw, int32_t p, uint32_t inc, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (pe->challenge_at && now < pe->challenge_at)
		return;
	pe->challenge_at = now + fw->cfg.rto_ns;
	uint8_t *b = emp__tx_slot(fw, p, EMP_T_PROBE, 0, 0, 0, 0);
	put32(b - EMP_HDR_LEN + EMP_C_DST_INC, inc);   /* dst_inc: the life in question */
	fw->ctr.probes_sent++;
}

void emp__rx_hello(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (h->body_len < EMP_HELLO_HDR_LEN) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		return;
	}
	uint32_t known = known_inc(pe);
	if (known && known != h->src_inc) {
		/* another life than the one we talk to: a restart, or a replay of a
		 * dead life. Only the known one's successor can prove it (STALE). */
		send_probe(fw, p, known, now);
		emp__drop(fw, EMP_DROP_STALE);
		return;
	}
	uint32_t nonce = get32(h->body + 4);
	int fresh = !pe->rx_known;
	if (!fresh && (pe->rx_session != h->session || pe->rx_nonce != nonce)) {
		/* same life, new session (the peer gave up on us, or forgot us, and
		 * starts over); a repeated HELLO of the current session changes
		 * nothing. With auth the nonces of a life only grow: an older one is
		 * a replay of an earlier session, which must not reset this one. */
		if (fw->cfg.auth && !seq_lt(pe->rx_nonce, nonce)) {
			emp__drop(fw, EMP_DROP_STALE);
			return;
		}
		emp__peer_fail_recvs(fw, p, -EMP_ECONNRESET);
		fresh = 1;
	}
	if (fresh) {
		pe->rx_known = 1;
		pe->rx_remote_inc = h->src_inc;
		pe->rx_session = h->session;
		pe->rx_nonce = nonce;
		pe->match_next = 1;
		pe->matched = 0;
		if (fw->cfg.auth) {
			pe->rx_resp = session_nonce(fw);
			emp__auth_session_key(fw, pe->rx_key, h->src_mac, fw->cfg.mac, h->src_ep, fw->cfg.endpoint,
					      h->src_inc, fw->cfg.incarnation, nonce, pe->rx_resp, h->session);
		}
	}
	if (emp__reply_ok(fw, p, now))           /* forged HELLOs draw no flood (limit.c) */
		send_hello(fw, p, EMP_T_HELLO_ACK, h->session, nonce);
	/* a queued send toward a peer we just learned about: start its session too */
	if (pe->tx_state == PTX_HELLO && pe->hello_tries > 0)
		emp__peer_send_hello(fw, p, now);
}

void emp__rx_hello_ack(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (h->body_len < EMP_HELLO_HDR_LEN) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		return;
	}
	if (pe->tx_state != PTX_HELLO || h->session != pe->tx_session || h->dst_inc != fw->cfg.incarnation) {
		emp__drop(fw, EMP_DROP_STALE);
		return;
	}
	uint32_t mtu = get32(h->body);
	if (mtu < EMP_MIN_MTU) {
		emp__drop(fw, EMP_DROP_BAD_LEN);
		return;
	}
	if (mtu != fw->cfg.mtu) {
		/* both ends use the smaller MTU; the host is told (counter) */
		fw->ctr.mtu_mismatch++;
		if (mtu > fw->cfg.mtu)
			mtu = fw->cfg.mtu;
		fw->ctr.last_mismatch_mtu = mtu;
	}
	pe->frag = mtu - emp__overhead(fw);
	if (fw->cfg.auth)
		memcpy(pe->tx_key, fw->auth_tmp, 16);   /* derived by emp__auth_check for this HELLO_ACK */
	pe->tx_remote_inc = h->src_inc;
	pe->tx_state = PTX_UP;
	pe->hello_tries = 0;
	pe->hello_deadline = 0;
	emp__fc_update(fw, pe, h->credits);     /* the first word on its receives */
	emp__peer_activate(fw, p);
}

/* The peer says it no longer has the incarnation our frame named: that life
 * is over. Acted on only when it names the life we believe in, and comes from
 * another one, to us as we are now. */
void emp__rx_stale(struct emp_fw *fw, const struct hdr *h, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	uint32_t named = get32(h->body);
	int tx = pe->tx_state != PTX_NEW && pe->tx_remote_inc == named;
	int rx = pe->rx_known && pe->rx_remote_inc == named;
	if (h->dst_inc != fw->cfg.incarnation || named == h->src_inc || (!tx && !rx)) {
		emp__drop(fw, EMP_DROP_STALE);
		return;
	}
	fw->ctr.peer_restarts++;
	if (tx)
		emp__peer_tx_reset(fw, p);
	if (rx) {
		/* its previous life's messages to us can never complete either; its
		 * new life's HELLO is then a first contact */
		emp__peer_fail_recvs(fw, p, -EMP_ECONNRESET);
		pe->rx_known = 0;
	}
}

/* Answer a frame that named an incarnation of ours that is gone. A sender
 * we keep no state for is addressed through the scratch slot after the table
 * (engine.c reserves it): such a frame allocates nothing. */
void emp__send_stale(struct emp_fw *fw, const struct hdr *h)
{
	int32_t p = emp__peer_get(fw, (uint16_t)h->host, h->src_ep, 0);
	int ok = p != NIL ? emp__reply_ok(fw, p, fw->now)
	                  : emp__reply_ok_anon(fw, (uint16_t)h->host, h->src_ep, fw->now);
	if (!ok)                                 /* forged frames draw no flood (limit.c) */
		return;
	if (p == NIL) {
		p = (int32_t)fw->cfg.max_peers;
		struct peer *pe = &fw->peer[p];
		memset(pe, 0, sizeof(*pe));
		pe->host = (uint16_t)h->host;
		pe->ep = h->src_ep;
		pe->anext = pe->aprev = pe->hnext = NIL;
	}
	fw->ctr.stale_sent++;
	uint8_t *b = emp__tx_slot(fw, p, EMP_T_STALE, 0, 0, 0, EMP_STALE_HDR_LEN);
	put32(b - EMP_HDR_LEN + EMP_C_DST_INC, h->src_inc);   /* to the life that sent it */
	put32(b, h->dst_inc);
}

void emp__rx_probe(struct emp_fw *fw, const struct hdr *h, uint64_t now)
{
	if (h->dst_inc == fw->cfg.incarnation)
		return;   /* still us: the HELLO that made the peer ask was not ours */
	emp__send_stale(fw, h);
	emp__drop(fw, EMP_DROP_STALE);
	/* our own HELLO is what the peer doubted: send it again at once */
	int32_t p = emp__peer_get(fw, (uint16_t)h->host, h->src_ep, 0);
	if (p != NIL && fw->peer[p].tx_state == PTX_HELLO)
		emp__peer_send_hello(fw, p, now);
}
