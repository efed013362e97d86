/* stream_engine.c: the byte stream over EMP messages, engine side: buffers, credits, send staging, FIN, completions, readiness, liveness. */
/*
 * Per connection each side posts R (c->rx_slots) persistent receives of ES_HDR+S
 * (c->rx_slot_sz) bytes, tag = its connection id (lid), and NCTRL small receives with tag lid|CTRL.
 * The peer holds R credits; one data message consumes one credit and carries
 * at most S payload bytes after an 8-byte header {credits returned, flags,
 * token}. Connection ids are random (getrandom) and every message carries the
 * key its receiver chose in the negotiation (data: its low 32 bits; control:
 * all 64): a message without it (or shorter than its header) is dropped and
 * counted (c->forged), its slot reposted in ring order without returning a
 * credit. The server posts its data receives with its control receives,
 * from any endpoint of the client's host, before its OFFER, so that the
 * client's first data can travel right behind its HELLO; they are not
 * looked at until the client's endpoint has proved itself (its HELLO with
 * our key), and from then on a message counts only with the key and from
 * that endpoint.
 * A slot is reposted when the application has read all of it; freed credits go
 * back piggybacked on the next data message, or in a CTRL message once R/4
 * have gathered with no data to carry them (at most one CTRL send in flight; the
 * receiver reposts CTRL receives as soon as it sees them). Messages with one
 * tag between one pair never overtake each other, so slots complete in posting
 * order and the stream is the slots read in sequence. write() copies into send
 * slots (appending to a staged slot not yet posted) and returns; staged slots
 * are posted whenever credits exist, from whichever thread looks at the
 * connection (the app, or the thread that drove the engine, through the
 * completion hook: every request carries its connection as user pointer).
 * FIN is a flag on the last message. The kernel TCP connection stays open for
 * liveness: its EOF/RST without an EMP FIN means the peer died (ECONNRESET).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"


void es__set_err(struct es_conn *c, int e, int line)
{
	if (!c->err) {
		c->err = e;
		es__dbg("conn %u: error %d (stream_engine.c:%d)", c->lid, e, line);
	}
}

static int map_err(int64_t r)
{
	if (r == -ECANCELED)
		return 0;
	return ECONNRESET;
}

uint32_t es__conn_lid(struct es_sock *s) { return s->c ? s->c->lid : 0; }

/* Slot rd_q's own buffers back (the lock held); its message, if it completed
 * into the reader's, stays there (reap_data then counts it read) */
int es__unlend(struct es_conn *c)
{
	if (!c->rd_active)
		return 0;
	int r = emp_recv_restore(c->ep, c->rreq[c->rd_q % c->rx_slots]);
	if (r != 2)
		c->rd_active = 0;    /* from here it lands in the slot */
	return r;
}

/* credits the peer returns: never more than the buffers it announced (a
 * larger count is a broken or hostile peer: it gets what it has, no more) */
static void add_credits(struct es_conn *c, uint32_t n)
{
	uint64_t t = (uint64_t)c->credits + n;
	c->credits = t > c->peer_bufs ? c->peer_bufs : (unsigned)t;
}

int es__post_recv(struct es_conn *c, uint64_t seq)
{
	int r = emp_start(c->ep, c->rreq[seq % c->rx_slots]);
	if (r < 0)
		set_err(c, ECONNRESET);
	return r;
}

int es__conn_create(struct es_sock *s, uint16_t host, uint16_t pep, uint32_t lid, uint64_t key_rx)
{
	emp_endpoint_t *ep = es__engine();
	if (!ep)
		return -1;
	struct es_conn *c = calloc(1, sizeof *c);
	if (!c)
		return -1;
	c->kind = ES_KIND_CONN;
	c->s = s;
	c->ep = ep;
	c->gen = es__g.gen;
	c->rx_slots = es__g.nbufs;
	c->rx_slot_sz = es__g.bufsz;
	c->lid = lid;
	c->key_rx = key_rx;
	c->peer.host = host;
	c->peer.ep = pep;
	c->rbuf = es__ring_get((size_t)c->rx_slots * (ES_HDR + c->rx_slot_sz));
	c->rreq = calloc(c->rx_slots, sizeof *c->rreq);
	c->rlen = calloc(c->rx_slots, sizeof *c->rlen);
	c->roff = calloc(c->rx_slots, sizeof *c->roff);
	if (!c->rbuf || !c->rreq || !c->rlen || !c->roff)
		goto fail;
	s->c = c;       /* before the first receive can complete: the hook finds it */
	int r = pep == EMP_ANY_EP ? 0 : es__conn_hold(c);
	if (r == 0)
		r = es__conn_post_ctrl(c);
	if (r == 0)     /* the server's from any endpoint of the client's host: its first data may come with its HELLO */
		r = es__conn_post_data(c);
	if (r == -ENOBUFS)
		es__log_once_nobufs();
	if (r < 0) {
		es__conn_destroy(s, 0);
		return -1;
	}
	return 0;
fail:
	es__ring_put(c->rbuf); free(c->rreq); free(c->rlen); free(c->roff); free(c);
	return -1;
}

/* Every engine descriptor the connection will ever use is taken here (send
 * slots and the control send are persistent, like the receives), so a
 * connection either starts with all it needs or not at all: running out of
 * descriptors refuses new connections and never breaks running ones. */
int es__conn_set_peer(struct es_sock *s, uint16_t pep, uint32_t rid, unsigned nbufs, unsigned bufsz,
		      uint64_t key_tx)
{
	struct es_conn *c = s->c;
	if (c->sbuf)
		return c->err ? -1 : 0;   /* an OFFER seen again */
	c->peer.ep = pep;
	c->rid = rid;
	c->key_tx = key_tx;
	c->credits = nbufs;
	c->peer_bufs = nbufs;
	c->tx_slot_sz = bufsz < c->rx_slot_sz ? bufsz : c->rx_slot_sz;
	c->tx_slots = c->rx_slots;
	c->sbuf = es__ring_get((size_t)c->tx_slots * (ES_HDR + c->tx_slot_sz));
	c->sreq = calloc(c->tx_slots, sizeof *c->sreq);
	c->slen = calloc(c->tx_slots, sizeof *c->slen);
	c->sdone = calloc(c->tx_slots, 1);
	c->sfin = calloc(c->tx_slots, 1);
	c->smap = calloc(c->tx_slots, sizeof *c->smap);
	c->sfree = calloc(c->tx_slots, sizeof *c->sfree);
	if (!c->sbuf || !c->sreq || !c->slen || !c->sdone || !c->sfin || !c->smap || !c->sfree) {
		set_err(c, ENOMEM);
		return -1;
	}
	for (unsigned b = 0; b < c->tx_slots; b++)
		c->sfree[b] = (uint16_t)(c->tx_slots - 1 - b);   /* buffer 0 first */
	c->nfree = c->tx_slots;
	int r = 0;
	for (unsigned i = 0; i < c->tx_slots && r == 0; i++) {
		struct iovec v = { sbase(c, i), ES_HDR + c->tx_slot_sz };
		r = emp_send_init(c->ep, c->peer, c->rid, &v, 1, &c->sreq[i]);
		if (r == 0)
			emp_req_set_user(c->sreq[i], c);
	}
	struct iovec cv = { c->csbuf, CTRL_SZ };
	if (r == 0)
		r = emp_send_init(c->ep, c->peer, c->rid | CTRL_TAG, &cv, 1, &c->csend);
	if (r == 0)
		emp_req_set_user(c->csend, c);
	if (r < 0) {
		if (r == -ENOBUFS)
			es__log_once_nobufs();
		set_err(c, r == -ENOBUFS ? ENOBUFS : ENOMEM);
		return -1;
	}
	c->peer_known = 1;
	return 0;
}

/* Descriptors ran out: said once per process, with what to do about it. */
void es__log_once_nobufs(void)
{
	static atomic_int told;
	if (atomic_exchange(&told, 1))
		return;
	unsigned n = emp_config(es__g.ep) ? emp_config(es__g.ep)->opt.descriptors : 0;
	es__log("out of EMP descriptors (%u; each connection holds %u): new connections %s; raise `option descriptors` in the config",
		n, 2 * es__g.nbufs + NCTRL + 1, es__g.strict ? "are refused (strict mode)" : "use kernel TCP");
}

void es__retire_head(struct es_conn *c)
{
	unsigned i = c->rx_read % c->rx_slots;
	/* a slot that got a message long enough to be lent (firmware/lent.c:
	 * EMP_LEND_MIN_BYTES) lends from now on: its table (16 bytes a frame of
	 * 1 KiB payload or more, about 2 KiB) is made then, so a connection
	 * that never gets one, an idle or a request/response one, costs none */
	if (es__g.lend && c->rlen[i] + ES_HDR >= ES_LEND_AFTER && !emp_recv_lends(c->rreq[i]))
		(void)emp_recv_lend(c->ep, c->rreq[i], (unsigned)((ES_HDR + c->rx_slot_sz) / 1024 + 2));
	if (c->rd_active && c->rx_read == c->rd_q) {
		es__unlend(c);      /* its own buffers before it is posted again */
		c->rd_active = 0;
	}
	if (c->roff[i] != ES_SKIP)       /* a forged message took no credit of the peer's */
		c->to_return++;
	c->roff[i] = 0;
	c->rlen[i] = 0;
	es__post_recv(c, c->rx_read);
	c->rx_read++;
}

static int send_ctrl(struct es_conn *c, uint32_t type)
{
	uint32_t *m = (uint32_t *)c->csbuf;
	m[0] = type;
	m[1] = c->to_return;
	memcpy(&m[2], &c->key_tx, 8);
	if (emp_start(c->ep, c->csend) < 0) {
		set_err(c, ECONNRESET);
		return -1;
	}
	c->cbusy = 1;
	c->to_return = 0;
	return 0;
}

int es__conn_send_hello(struct es_sock *s)
{
	s->c->hello_want = !s->c->hello_sent;
	es__process(s);
	return s->c->err ? -1 : 0;
}

int es__conn_hello_seen(struct es_sock *s) { return s->c && s->c->hello_seen; }

int es__can_stage(struct es_conn *c)
{
	if (!c->peer_known || c->fin_want)
		return 0;
	return tx_tail_open(c) || tx_slot_free(c);
}

/* The slots es__flush readied, started together: one look at the engine
 * (one burst on the wire) for a sendfile's or a large write's many slots,
 * where each used to drive the engine, and flush the wire, alone. */
#define ES_POST_BATCH 16
static int start_posts(struct es_conn *c, emp_req_t **go, int *n)
{
	int k = *n;
	*n = 0;
	if (emp_start_many(c->ep, go, k) != k) {
		set_err(c, ECONNRESET);
		return -1;
	}
	return 0;
}

/* post staged slots while credits last; stage FIN; return credits */
void es__flush(struct es_conn *c)
{
	if (!c->peer_known || c->err)
		return;
	if (c->fin_want && !c->fin_staged) {
		if (c->tx_staged > c->tx_posted) {
			c->sfin[(c->tx_staged - 1) % c->tx_slots] = 1;
			c->fin_staged = 1;
		} else if (tx_slot_free(c)) {
			tx_stage_new(c, 1);
			c->fin_staged = 1;
		}
	}
	/* a peer that closed (ES_CLOSE) reposts every receive as it discards what
	 * arrives and returns no credits: what is left goes without them (a
	 * message that finds no receive yet is resent by the engine) */
	emp_req_t *go[ES_POST_BATCH];
	int ngo = 0;
	while (c->tx_posted < c->tx_staged && (c->credits > 0 || c->peer_closed)) {
		if (c->hold_tail && !c->fin_want && c->tx_posted + 1 == c->tx_staged && tx_tail_open(c))
			break;          /* the writer goes on soon: the tail waits (hold.c) */
		unsigned i = c->tx_posted % c->tx_slots;
		uint8_t *b = sslot(c, c->tx_posted);
		uint16_t cr = (uint16_t)c->to_return;   /* R <= 65535 (es.h bounds) */
		uint16_t fl = c->sfin[i] ? ES_FIN : 0;
		if (fl && c->close_want) {      /* "I closed" rides in the FIN */
			fl |= ES_CLOSE;
			c->close_want = 0;
		}
		/* nothing follows a FIN sent after the peer's FIN (no credits go back
		 * then), or one saying we closed (the peer needs no credits any more),
		 * unless a control message is still on its way */
		if (fl && (c->rfin || (fl & ES_CLOSE)) && !c->cbusy && !c->hello_want && !c->close_want) {
			fl |= ES_LAST;
			c->fin_last = 1;
		}
		uint32_t tok = (uint32_t)c->key_tx;
		memcpy(b, &cr, 2);
		memcpy(b + 2, &fl, 2);
		memcpy(b + 4, &tok, 4);
		c->sdone[i] = 0;
		emp_req_t *rq = sreq_of(c, c->tx_posted);
		if (emp_req_set_len(c->ep, rq, ES_HDR + c->slen[i]) < 0) {
			set_err(c, ECONNRESET);
			return;
		}
		go[ngo++] = rq;
		c->to_return = 0;
		if (c->credits)
			c->credits--;
		c->tx_posted++;
		if (ngo == ES_POST_BATCH && start_posts(c, go, &ngo) < 0)
			return;
	}
	if (ngo && start_posts(c, go, &ngo) < 0)
		return;
	/* credits are useless to a peer that has sent FIN: none after it (the
	 * closing side relies on that to know when the peer has gone quiet) */
	unsigned thresh = c->rx_slots / 4 ? c->rx_slots / 4 : 1;
	if (c->cbusy)
		return;
	if (c->bye_sent || c->fin_last)
		return;
	if (c->hello_want) {
		if (send_ctrl(c, CT_HELLO) == 0)
			c->hello_want = 0, c->hello_sent = 1;
	} else if (c->close_want) {
		if (send_ctrl(c, CT_CLOSE) == 0)
			c->close_want = 0;
	} else if (c->to_return >= thresh && !c->rfin) {
		send_ctrl(c, CT_CREDIT);
	} else if (c->rfin && c->fin_done && c->tx_done == c->tx_staged) {
		if (send_ctrl(c, CT_BYE) == 0)
			c->bye_sent = 1;
	}
}

/* data receives that completed, in ring order; 1 if any */
static int reap_data(struct es_conn *c)
{
	struct emp_status st;
	int changed = 0, r;
	if (c->peer.ep == EMP_ANY_EP)
		return 0;   /* the server's, before the client's endpoint proved itself: kept for then */
	while (c->data_posted && c->rx_done < c->rx_read + c->rx_slots) {
		unsigned i = c->rx_done % c->rx_slots;
		r = emp_reap(c->ep, c->rreq[i], &st);
		if (r == 0)
			break;
		changed = 1;
		if (r < 0 || st.result < 0) {
			set_err(c, r < 0 ? ECONNRESET : map_err(st.result));
			if (c->err)
				break;
			es__post_recv(c, c->rx_done);   /* cancelled (teardown) */
			continue;
		}
		uint8_t *b = rslot(c, c->rx_done);
		uint16_t cr, fl;
		uint32_t tok = 0;
		memcpy(&cr, b, 2);
		memcpy(&fl, b + 2, 2);
		if (st.result >= ES_HDR)
			memcpy(&tok, b + 4, 4);
		/* a runt (none of ours is shorter than its header) or a message
		 * without the key: dropped, its slot skipped in ring order (posted
		 * again at once it would take a later message's place) */
		if (st.result < ES_HDR || tok != (uint32_t)c->key_rx || st.source.ep != c->peer.ep) {
			/* not from the process we negotiated with: skipped in ring order */
			c->forged++;
			c->rlen[i] = 0;
			c->roff[i] = ES_SKIP;
			if (c->rd_active && c->rx_done == c->rd_q)
				c->rd_done = 1;      /* nothing for the reader */
			c->rx_done++;
			es__dbg("conn %u: message without its key dropped (%u so far)", c->lid, c->forged);
			continue;
		}
		add_credits(c, cr);
		c->rlen[i] = (uint32_t)(st.result - ES_HDR);
		c->roff[i] = 0;
		c->last_rlen = c->rlen[i];
		if (c->rd_active && c->rx_done == c->rd_q) {
			/* it landed in a waiting reader's buffers: read already */
			c->rd_got = c->rlen[i] < c->rd_len ? c->rlen[i] : c->rd_len;
			c->rd_done = 1;
			c->roff[i] = c->rd_got;
		}
		c->rbytes += c->rlen[i] - c->roff[i];
		if (fl & ES_CLOSE) {
			c->peer_closed = 1;
			c->fin_want = 1;
		}
		if (fl & ES_LAST)
			c->peer_quiet = 1;
		if ((fl & ES_FIN) && !c->rfin) {
			c->rfin = 1;
			c->rfin_ns = es__now_ns();
		}
		c->rx_done++;
	}
	if (c->closing) {   /* nobody reads any more: discard, keep credits flowing */
		while (c->rx_read < c->rx_done && c->rlen[c->rx_read % c->rx_slots]) {
			es__retire_head(c);
			changed = 1;
		}
		c->rbytes = 0;
	}
	/* empty non-FIN slots at the head (forged ones; none are sent empty) */
	while (c->rx_read < c->rx_done && c->rlen[c->rx_read % c->rx_slots] == 0 && (!c->rfin || c->roff[c->rx_read % c->rx_slots] == ES_SKIP)) {
		es__retire_head(c);
		changed = 1;
	}
	return changed;
}

/* control receives that completed (each posted again); 1 if any */
static int reap_ctrl(struct es_conn *c)
{
	struct emp_status st;
	int changed = 0;
	for (int i = 0; i < NCTRL; i++) {
		int r = emp_reap(c->ep, c->creq[i], &st);
		if (r == 0)
			continue;
		changed = 1;
		if (r < 0 || st.result < 0) {
			if (r < 0 || st.result != -ECANCELED)
				set_err(c, ECONNRESET);
			continue;
		}
		uint32_t *m = (uint32_t *)c->cbuf[i];
		uint64_t key;
		memcpy(&key, &m[2], 8);
		if (st.result != CTRL_SZ || key != c->key_rx) {
			c->forged++;
			es__dbg("conn %u: control message without its key dropped (%u so far)", c->lid, c->forged);
		} else {
			c->last_ctrl_ns = es__now_ns();
			if (m[0] == CT_HELLO) {
				c->hello_seen = 1;
				c->hello_ep = st.source.ep;
				if (!c->hello_sent)
					c->hello_want = 1;      /* the answer proves our endpoint */
			}
			if (m[0] == CT_CLOSE) {
				c->peer_closed = 1;
				c->fin_want = 1;
			}
			if (m[0] == CT_BYE)
				c->peer_quiet = 1;
			add_credits(c, m[1]);
		}
		if (emp_start(c->ep, c->creq[i]) < 0)
			set_err(c, ECONNRESET);
	}
	return changed;
}

/* sends that completed (data slots retired in order, the control send); 1 if any */
static int reap_sends(struct es_conn *c)
{
	struct emp_status st;
	int changed = 0, r;
	for (uint64_t q = c->tx_done; q < c->tx_posted; q++) {
		unsigned i = q % c->tx_slots;
		if (c->sdone[i])
			continue;
		r = emp_reap(c->ep, sreq_of(c, q), &st);
		if (r == 0)
			continue;
		c->sdone[i] = 1;
		if (r < 0 || st.result < 0) {
			set_err(c, ECONNRESET);
			if (q == 0)
				c->first_failed = 1;
		}
	}
	while (c->tx_done < c->tx_posted && c->sdone[c->tx_done % c->tx_slots]) {
		unsigned i = c->tx_done % c->tx_slots;
		if (c->sfin[i])
			c->fin_done = 1;
		c->sdone[i] = 0;
		c->sfin[i] = 0;
		c->slen[i] = 0;
		tx_unmap(c, c->tx_done);
		c->tx_done++;
		changed = 1;
	}
	if (c->cbusy) {
		r = emp_reap(c->ep, c->csend, &st);
		if (r != 0) {
			c->cbusy = 0;
			changed = 1;
			if (r < 0 || st.result < 0)
				set_err(c, ECONNRESET);
			else if (c->bye_sent)
				c->bye_done = 1;
		}
	}
	return changed;
}

/* Take the requests of s that completed (the engine is not driven from here:
 * this runs inside the completion hook); lock held. */
static void kernel_dead(struct es_sock *s, int e);

void es__process(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (!c || c->gen != es__g.gen || c->leak)
		return;
	int changed = reap_data(c);
	changed |= reap_ctrl(c);
	changed |= reap_sends(c);
	es__flush(c);
	if (c->kgrace && (c->rfin || c->err))
		kernel_dead(s, 0);   /* the FIN (or an error) came within the grace */
	if (changed) {
		es__sock_update(s, 1);
		if (c->closing)
			es__zombie_changed(c);
	}
}

/* Kernel connection: EOF or RST means the peer's process is gone or aborted.
 * A peer that closed normally sent its EMP FIN before its kernel socket went
 * (its exit flush, or the end of its linger), but the FIN may still be in our
 * ring or on its way again after a loss while the kernel's FIN overtook it:
 * on EOF the engine gets up to ES_FIN_GRACE_NS to deliver it before the
 * connection counts as reset. A grace that ran out says the peer died without
 * its FINs: for the next second other connections get none (a dead peer with
 * many connections costs one grace, not one each). Bytes on the kernel
 * connection: the peer is not speaking EMP on it (negotiation never writes
 * there), so its stream cannot be trusted. Lock held.
 *
 * wait: the caller waits for this connection (a blocking reader or writer,
 * the reaper): it drives the engine through the grace. Else (the liveness
 * harvest, in whichever thread's epoll_wait or poll: an event loop serving
 * other connections) the grace runs without anyone waiting: the connection
 * stays as it is, readable at the FIN if it comes (es__process ends the
 * grace then), and a wait decides it at the grace's end (timeq.c). A
 * single-threaded server stalled up to 500 ms for each killed client. */
#define ES_FIN_GRACE_NS 500000000ll
static _Atomic int64_t grace_lost_at;

/* the kernel connection is over: reset unless the EMP FIN came (e: how it ended) */
static void kernel_dead(struct es_sock *s, int e)
{
	struct es_conn *c = s->c;
	if (!e && !c->rfin && c->kgrace)
		atomic_store(&grace_lost_at, es__now_ns());
	c->kgrace = 0;
	c->kdead = 1;
	if (e || !c->rfin)
		set_err(c, ECONNRESET);
	es__dbg("fd %d: kernel connection %s (EMP FIN %s)", s->kfd,
		e == EPROTO ? "carries bytes" : e ? "reset" : "closed", c->rfin ? "seen" : "missing");
	es__live_del(s);      /* edge-triggered, but a dead socket has nothing more to say */
	es__sock_update(s, 1);
}

void es__kernel_check(struct es_sock *s, int wait)
{
	struct es_conn *c = s->c;
	if (!c || c->kdead)
		return;
	char b;
	ssize_t n = R_(recv)(s->kfd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	int e = n > 0 ? EPROTO : n < 0 ? errno : 0;
	es__process(s);
	if (c->kdead)
		return;              /* the FIN ended a grace that was running */
	int64_t now = es__now_ns(), end = c->kgrace ? c->kgrace : now + ES_FIN_GRACE_NS;
	if (!c->kgrace && now - atomic_load(&grace_lost_at) < 1000000000ll)
		end = now;
	int grace = !e && !c->rfin && !c->err && now < end;
	if (grace && !wait) {
		if (!c->kgrace)
			es__tq_later(s, end);
		c->kgrace = end;
		return;
	}
	if (grace)
		c->kgrace = end;     /* a lost grace counts (kernel_dead) */
	while (!e && !c->rfin && !c->err && es__now_ns() < end) {
		emp_progress(c->ep);     /* our own completions wait (dirty): taken right here */
		es__process(s);
		if (c->kdead)
			return;
		if (!c->rfin)
			sched_yield();
	}
	kernel_dead(s, e);
}

int es__kernel_grace_end(struct es_sock *s, int64_t now)
{
	struct es_conn *c = s->c;
	if (!c || !c->kgrace || c->kdead)
		return 0;
	if (now < c->kgrace && !c->rfin && !c->err) {
		atomic_store(&s->tq_due, c->kgrace);
		return 1;
	}
	kernel_dead(s, 0);
	return 0;
}

unsigned es__stream_events(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (!c)
		return 0;
	unsigned ev = 0;
	if (c->rbytes || c->rfin || c->shut_rd || c->err || c->kdead)
		ev |= POLLIN;
	if (es__can_stage(c) || c->err || c->kdead || c->shut_wr || c->peer_closed)
		ev |= POLLOUT;
	if (c->rfin || c->kdead)
		ev |= POLLRDHUP;
	if (c->kdead || (c->rfin && c->fin_done))
		ev |= POLLHUP;
	if (c->err && !c->err_told)
		ev |= POLLERR;
	return ev;
}

