/* connsetup.c: what a negotiation sets up in a stream: random connection ids, the peer held in the engine, the receives posted (control from any endpoint until the peer's is proved, then data and control from it), empstat's row for it. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "conn.h"

/* ---- connection ids in use (an open-addressing set, grown as needed) ---- */
static uint32_t *lids;
static unsigned nlids, caplids;
static pthread_mutex_t lid_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_lids = &lid_lock;   /* held across fork (fork.c) */

static int lid_slot(uint32_t lid)
{
	unsigned m = caplids - 1, i = (lid * 2654435761u) & m;
	while (lids[i] && lids[i] != lid)
		i = (i + 1) & m;
	return (int)i;
}

static int lid_grow(void)
{
	unsigned ncap = caplids ? caplids * 2 : 1024;
	uint32_t *old = lids, *nl = calloc(ncap, sizeof *nl);
	unsigned ocap = caplids;
	if (!nl)
		return -1;
	lids = nl;
	caplids = ncap;
	for (unsigned i = 0; i < ocap; i++)
		if (old[i] && old[i] != 0xffffffffu)
			lids[lid_slot(old[i])] = old[i];
	free(old);
	return 0;
}

/* A random connection id (the tag of its messages), 1..2^31-1, not in use by
 * another connection of this process; es__conn_lid_release gives it back. */
uint32_t es__conn_new_lid(void)
{
	pthread_mutex_lock(&lid_lock);
	if ((nlids + 1) * 2 > caplids && lid_grow() < 0) {
		pthread_mutex_unlock(&lid_lock);
		return 0;
	}
	for (;;) {
		uint32_t lid = (uint32_t)es__random64() & 0x7fffffffu;
		if (!lid)
			continue;
		int i = lid_slot(lid);
		if (lids[i] == lid)
			continue;
		lids[i] = lid;
		nlids++;
		pthread_mutex_unlock(&lid_lock);
		return lid;
	}
}

void es__conn_lid_release(uint32_t lid)
{
	pthread_mutex_lock(&lid_lock);
	if (lid && caplids) {
		int i = lid_slot(lid);
		if (lids[i] == lid) {
			/* re-insert the run that follows (no tombstones) */
			unsigned m = caplids - 1, j = ((unsigned)i + 1) & m;
			lids[i] = 0;
			nlids--;
			while (lids[j]) {
				uint32_t v = lids[j];
				lids[j] = 0;
				lids[lid_slot(v)] = v;
				j = (j + 1) & m;
			}
		}
	}
	pthread_mutex_unlock(&lid_lock);
}

/* ---- empstat's connection rows: one per EMP connection while slots last ----
 * A row is taken when the connection goes EMP and freed with it; its bytes,
 * credits and state are rewritten after the application's reads and writes,
 * at most every ROW_NS unless the state changed, so the row of a connection
 * gone quiet may lack up to ROW_NS of its last traffic. Slots: a lock-free
 * bitmap. */
#define ROW_NS 100000000ll
enum { ROW_EMP, ROW_FIN_IN, ROW_CLOSING, ROW_ERROR };
static const char *const row_names[] = { "emp", "emp fin-in", "closing", "error" };
static atomic_ulong rowmap[(EMP_STATS_MAX_CONNS + 63) / 64];

static int row_take(void)
{
	for (unsigned w = 0; w < sizeof rowmap / sizeof rowmap[0]; w++) {
		unsigned long v = atomic_load(&rowmap[w]);
		while (~v) {
			unsigned b = (unsigned)__builtin_ctzl(~v);
			if (w * 64 + b >= EMP_STATS_MAX_CONNS)
				break;
			if (atomic_compare_exchange_weak(&rowmap[w], &v, v | (1ul << b)))
				return (int)(w * 64 + b);
		}
	}
	return -1;
}

static int row_state(const struct es_conn *c)
{
	return c->err || c->kdead ? ROW_ERROR : c->closing ? ROW_CLOSING : c->rfin ? ROW_FIN_IN : ROW_EMP;
}

int es__conn_row(struct es_conn *c, struct emp_conn_info *i)
{
	if (!c || c->gen != es__g.gen)
		return -1;
	int st = row_state(c);
	int64_t now = es__now_ns();
	if (c->row1 && st == c->row_st && now - c->row_ns < ROW_NS)
		return -1;
	if (!c->row1) {
		int r = row_take();
		if (r < 0)
			return -1;       /* more connections than rows: the rest unlisted */
		c->row1 = (unsigned)r + 1;
	}
	struct es_sock *s = c->s;
	*i = (struct emp_conn_info){
		.fd = s->kfd,
		.local_ip = s->local.sin_addr.s_addr, .remote_ip = s->remote.sin_addr.s_addr,
		.local_port = ntohs(s->local.sin_port), .remote_port = ntohs(s->remote.sin_port),
		.peer_host = c->peer.host, .peer_ep = c->peer.ep,
		.bytes_in = c->nin, .bytes_out = c->nout,
		.credits_tx = c->credits,
		.credits_rx = c->data_posted ? c->rx_slots - (unsigned)(c->rx_done - c->rx_read) : 0,
	};
	snprintf(i->state, sizeof i->state, "%s", row_names[st]);
	c->row_st = st;
	c->row_ns = now;
	return (int)c->row1 - 1;
}

void es__conn_row_put(int row, const struct emp_conn_info *i)
{
	emp_endpoint_t *ep = es__g.ep;
	if (row >= 0 && ep)
		emp_stats_conn_set(ep, (unsigned)row, i);
}

void es__conn_row_free(struct es_conn *c)
{
	if (!c->row1 || c->gen != es__g.gen)
		return;
	unsigned r = c->row1 - 1;
	emp_stats_conn_set(c->ep, r, NULL);
	atomic_fetch_and(&rowmap[r / 64], ~(1ul << (r % 64)));
	c->row1 = 0;
}

/* fork.c: the child's endpoint publishes rows of its own */
void es__conn_rows_atfork_child(void)
{
	for (unsigned w = 0; w < sizeof rowmap / sizeof rowmap[0]; w++)
		atomic_store(&rowmap[w], 0);
}

/* the engine keeps the peer while we use it */
int es__conn_hold(struct es_conn *c)
{
	int r = emp_peer_hold(c->ep, c->peer);
	c->held = r == 0;
	if (r < 0)
		es__dbg("EMP peer table full of peers in use: no EMP connection to host %u ep %u",
			c->peer.host, c->peer.ep);
	return r;
}

/* control receives from c->peer (its endpoint may be any: see es__conn_bind_ep) */
int es__conn_post_ctrl(struct es_conn *c)
{
	int r = 0;
	for (int i = 0; i < NCTRL && r == 0; i++) {
		struct iovec v = { c->cbuf[i], CTRL_SZ };
		r = emp_recv_init(c->ep, c->peer, c->lid | CTRL_TAG, &v, 1, &c->creq[i]);
		if (r == 0)
			emp_req_set_user(c->creq[i], c);   /* the completion hook finds c */
	}
	if (r == 0 && emp_start_many(c->ep, c->creq, NCTRL) != NCTRL)
		r = -EIO;
	return r;
}

/* data receives from c->peer, posted with one look at the engine, in ring order */
int es__conn_post_data(struct es_conn *c)
{
	int r = 0;
	for (unsigned i = 0; i < c->rx_slots && r == 0; i++) {
		struct iovec v = { rslot(c, i), ES_HDR + c->rx_slot_sz };
		r = emp_recv_init(c->ep, c->peer, c->lid, &v, 1, &c->rreq[i]);
		if (r == 0)
			emp_req_set_user(c->rreq[i], c);
	}
	if (r == 0 && emp_start_many(c->ep, c->rreq, (int)c->rx_slots) != (int)c->rx_slots)
		r = -EIO;
	c->data_posted = r == 0;
	return r;
}

/* The server learns the client's endpoint from its ACCEPT and has posted
 * control and data receives from any endpoint of the client's host (the
 * client's HELLO, which proves the endpoint, comes before anything of ours;
 * its first data may come right behind it): once proved, the control
 * receives are posted again from that endpoint alone, and the data receives
 * (kept: they may hold that first data) count only messages from it
 * (reap_data). Lock held. */
int es__conn_bind_ep(struct es_sock *s, uint16_t pep)
{
	struct es_conn *c = s->c;
	struct emp_status st;
	if (c->peer.ep == pep)
		return 0;
	es__tl_in++;
	emp_cancel_many(c->ep, c->creq, NCTRL);
	int r = 0;
	for (int i = 0; i < NCTRL; i++) {
		int t = emp_reap(c->ep, c->creq[i], &st);
		if (t == 0 && emp_wait(c->ep, c->creq[i], &st, 20000000) == 0)
			r = -EBUSY;                  /* matched and under way: cannot go */
		if (r == 0)
			emp_req_free(c->ep, c->creq[i]);
	}
	c->peer.ep = pep;
	if (r == 0)
		r = es__conn_hold(c);
	if (r == 0)
		r = es__conn_post_ctrl(c);
	if (r == 0 && !c->data_posted)
		r = es__conn_post_data(c);
	es__tl_in--;
	if (r == -ENOBUFS)
		es__log_once_nobufs();
	if (r < 0)
		set_err(c, r == -ENOBUFS ? ENOBUFS : ECONNRESET);
	return r;
}

uint16_t es__conn_hello_ep(struct es_sock *s) { return s->c ? s->c->hello_ep : EMP_ANY_EP; }


/* The client's HELLO failed before the server's came: the engine's session
 * with that server process ended under it (the server restarted: its new
 * life answered STALE to our old session). Nothing else of the connection
 * has been sent but the first write that may have gone right behind the
 * HELLO (es__negc_early): the HELLO goes again in the engine's new session,
 * and the write with it if it failed too, from its slot (untouched since, as
 * for es__negc_replay). A write that succeeded is not sent again: the HELLO
 * went in the old session and failed there, but the write, posted behind it
 * while the engine opened its new session, went in that one and was
 * delivered (t_fault_restart: the server echoed the first write twice, about
 * one run in 20, when the old life's frames replayed slowed the client). A
 * write whose completion is not in yet: the next try. */
int es__conn_hello_again(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (!c || !c->err || !c->hello_sent || c->hello_seen || c->cbusy)
		return 0;
	if (s->ng.early && (c->tx_staged != 1 || c->tx_posted != 1 || c->tx_done != 1))
		return 0;
	es__dbg("conn %u: our HELLO failed (the server restarted?): sent again%s", c->lid,
		s->ng.early && c->first_failed ? ", with the first write" : "");
	c->err = 0;
	c->err_told = 0;
	c->hello_sent = 0;
	if (s->ng.early && c->first_failed) {
		c->first_failed = 0;
		c->tx_done = c->tx_posted = 0;      /* slot 0 staged again, posted by es__flush */
		while (c->tx_mapped > c->tx_staged)   /* buffers given ahead to slots not staged (a file read that failed) */
			tx_unmap(c, --c->tx_mapped);
		for (unsigned k = 0; k < c->nfree; k++)
			if (c->sfree[k] == sbuf_of(c, 0)) {   /* its buffer, freed as it completed, is its own again */
				c->sfree[k] = c->sfree[--c->nfree];
				break;
			}
		c->slen[0] = s->ng.early;
		c->sfin[0] = 0;
		c->sdone[0] = 0;
		if (c->credits < c->peer_bufs)
			c->credits++;               /* the failed send never reached a receive */
	}
	return es__conn_send_hello(s) == 0;
}
