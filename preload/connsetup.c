/* connsetup.c: what a negotiation sets up in a stream: random connection ids, the peer held in the engine, the receives posted (control from any endpoint until the peer's is proved, then data and control from it). */
#include <errno.h>
#include <stdlib.h>

#include "conn.h"

/* A random connection id (the tag of its messages), 1..2^31-1, not in use by
 * another connection of this process. */
uint32_t es__conn_new_lid(void)
{
	for (;;) {
		uint32_t lid = (uint32_t)es__random64() & 0x7fffffffu;
		if (!lid)
			continue;
		int used = 0;
		pthread_mutex_lock(&es__reg_lock);
		int n = atomic_load(&es__reg_n);
		for (int i = 0; i < n && !used; i++) {
			struct es_sock *o = atomic_load(&es__reg[i]);
			used = o && o->c && o->c->lid == lid;
		}
		pthread_mutex_unlock(&es__reg_lock);
		if (!used)
			return lid;
	}
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
	}
	if (r == 0 && emp_start_many(c->ep, c->creq, NCTRL) != NCTRL)
		r = -EIO;
	return r;
}

/* data receives from c->peer, posted with one look at the engine, in ring order */
int es__conn_post_data(struct es_conn *c)
{
	int r = 0;
	for (unsigned i = 0; i < c->R && r == 0; i++) {
		struct iovec v = { rslot(c, i), ES_HDR + c->S };
		r = emp_recv_init(c->ep, c->peer, c->lid, &v, 1, &c->rreq[i]);
	}
	if (r == 0 && emp_start_many(c->ep, c->rreq, (int)c->R) != (int)c->R)
		r = -EIO;
	c->data_posted = r == 0;
	return r;
}

/* The server learns the client's endpoint from its ACCEPT and has posted
 * control receives from any endpoint of the client's host (the client's
 * HELLO, which proves the endpoint, comes before anything of ours): once
 * proved, the data receives are posted from that endpoint alone and the
 * control receives are posted again for it. Lock held. */
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
		int t = emp_test(c->ep, c->creq[i], &st);
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
	if (r == 0)
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
 * has been sent, so the HELLO goes again, in the engine's new session. */
int es__conn_hello_again(struct es_sock *s)
{
	struct es_conn *c = s->c;
	if (!c || !c->err || !c->hello_sent || c->hello_seen || c->cbusy)
		return 0;
	es__dbg("conn %u: our HELLO failed (the server restarted?): sent again", c->lid);
	c->err = 0;
	c->err_told = 0;
	c->hello_sent = 0;
	return es__conn_send_hello(s) == 0;
}
