/* descriptors.c: the host mailbox: taking ownership of posted descriptors, cancel, and receive matching. */
#include "fw_int.h"

static uint32_t rhash(uint16_t host, uint16_t ep, uint32_t tag)
{
	uint32_t h = ((uint32_t)host << 16 | ep) * 2654435761u;
	return h ^ (tag * 2246822519u) ^ (tag >> 15);
}

/* Receives are kept in posting order (seq) in one of three places: a bucket
 * of the (host, ep, tag) hash for an exact one; a bucket of the (host, any
 * ep, tag) hash for one from any endpoint of a given host with a given tag
 * (a server's connection before the client's endpoint is known: many at once
 * on a busy server, and each frame's match used to walk all of them); the
 * rwild list for a wildcard host or tag. */
static int exact(const struct emp_desc *d)
{
	return d->host != EMP_ANY_HOST && d->ep != EMP_ANY_EP && d->tag != EMP_ANY_TAG;
}

static int any_ep(const struct emp_desc *d)
{
	return d->host != EMP_ANY_HOST && d->ep == EMP_ANY_EP && d->tag != EMP_ANY_TAG;
}

static struct dlist *bucket(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag)
{
	return &fw->rbucket[rhash(host, ep, tag) & fw->rbucket_mask];
}

static struct dlist *recv_list(struct emp_fw *fw, const struct emp_desc *d)
{
	if (exact(d) || any_ep(d))
		return bucket(fw, d->host, d->ep, d->tag);
	return &fw->rwild;
}

/* the first receive of a bucket posted for exactly (host, ep, tag), ep
 * EMP_ANY_EP included */
static int32_t bucket_first(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag)
{
	for (int32_t r = bucket(fw, host, ep, tag)->head; r != NIL; r = fw->rec[r].next) {
		const struct emp_desc *d = &fw->desc[r];
		if (d->host == host && d->ep == ep && d->tag == tag)
			return r;
	}
	return NIL;
}

static void post_recv(struct emp_fw *fw, int32_t r)
{
	struct emp_desc *d = &fw->desc[r];
	struct rec *x = &fw->rec[r];
	x->kind = REC_RECV_POSTED;
	x->cap = d->len;
	x->seq = ++fw->recv_seq;
	x->tag = d->tag;
	emp__dl_push(fw, recv_list(fw, d), r);
	fw->posted_recvs++;
	if (fw->norecv_peers)
		emp__rx_unblock(fw, d);
}

/* A receive whose message was given up (expire.c) is posted again, in its
 * original place in posting order (a stream of receives with one tag keeps
 * its order), and may unblock a sender waiting for a receive. */
void emp__repost_recv(struct emp_fw *fw, int32_t r)
{
	struct emp_desc *d = &fw->desc[r];
	struct rec *x = &fw->rec[r];
	struct dlist *l = recv_list(fw, d);
	emp__lent_drop(fw, r);               /* the given-up message's frames */
	x->kind = REC_RECV_POSTED;
	x->tag = d->tag;
	x->peer = NIL;
	x->msg_id = x->nframes = x->frag = x->cum = 0;
	x->len = x->sack = x->deadline = x->rx_expire = x->rx_limit = x->rx_first = 0;
	x->since_ack = x->nack_cum = 0;
	int32_t q = l->head;
	while (q != NIL && fw->rec[q].seq < x->seq)
		q = fw->rec[q].next;
	if (q == NIL) {
		emp__dl_push(fw, l, r);
	} else {
		struct rec *y = &fw->rec[q];
		x->next = q;
		x->prev = y->prev;
		if (y->prev != NIL)
			fw->rec[y->prev].next = r;
		else
			l->head = r;
		y->prev = r;
	}
	fw->posted_recvs++;
	if (fw->norecv_peers)
		emp__rx_unblock(fw, d);
}

/* First posted receive (posting order) matching a message from (host, ep)
 * with tag; it is unlinked and returned, or NIL. A wildcard receive (any
 * endpoint, host or tag) takes messages strictly in the sender's order, so
 * when allow_wild is 0 (earlier messages of this sender are still unmatched)
 * and the first candidate is a wildcard, nothing matches yet. */
int32_t emp__match_recv(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag, int allow_wild)
{
	int32_t best = bucket_first(fw, host, ep, tag);
	int32_t half = bucket_first(fw, host, EMP_ANY_EP, tag);
	struct dlist *from = bucket(fw, host, ep, tag);
	int wild = 0;
	if (half != NIL && (best == NIL || fw->rec[half].seq < fw->rec[best].seq)) {
		best = half;
		from = bucket(fw, host, EMP_ANY_EP, tag);
		wild = 1;
	}
	for (int32_t r = fw->rwild.head; r != NIL; r = fw->rec[r].next) {
		const struct emp_desc *d = &fw->desc[r];
		if (best != NIL && fw->rec[r].seq > fw->rec[best].seq)
			break;
		fw->wild_steps++;
		if ((d->host == EMP_ANY_HOST || d->host == host) && (d->ep == EMP_ANY_EP || d->ep == ep) &&
		    (d->tag == EMP_ANY_TAG || d->tag == tag)) {
			best = r;
			from = &fw->rwild;
			wild = 1;
			break;
		}
	}
	if (best == NIL || (wild && !allow_wild))
		return NIL;
	emp__dl_del(fw, from, best);
	fw->posted_recvs--;
	return best;
}

/* Would a wildcard receive be the first candidate for this message? (Then
 * emp__match_recv with allow_wild 0 refused it for ordering, not for want of
 * a receive.) */
int emp__match_recv_blocked(struct emp_fw *fw, uint16_t host, uint16_t ep, uint32_t tag)
{
	int32_t e = bucket_first(fw, host, ep, tag);
	uint64_t exact_seq = e != NIL ? fw->rec[e].seq : UINT64_MAX;
	int32_t half = bucket_first(fw, host, EMP_ANY_EP, tag);
	if (half != NIL && fw->rec[half].seq < exact_seq)
		return 1;
	for (int32_t r = fw->rwild.head; r != NIL && fw->rec[r].seq < exact_seq; r = fw->rec[r].next) {
		const struct emp_desc *d = &fw->desc[r];
		fw->wild_steps++;
		if ((d->host == EMP_ANY_HOST || d->host == host) && (d->ep == EMP_ANY_EP || d->ep == ep) &&
		    (d->tag == EMP_ANY_TAG || d->tag == tag))
			return 1;
	}
	return 0;
}

static void post_send(struct emp_fw *fw, int32_t r, uint64_t now)
{
	struct emp_desc *d = &fw->desc[r];
	struct rec *x = &fw->rec[r];
	int32_t p = emp__peer_get(fw, d->host, d->ep, 1);
	if (p == NIL) {
		fw->ctr.drops[EMP_DROP_NO_PEER_SLOT]++;
		x->kind = REC_SEND_QUEUED;
		emp__complete(fw, r, -EMP_ENOBUFS);
		return;
	}
	emp__peer_fresh(fw, p, now);
	x->kind = REC_SEND_QUEUED;
	x->peer = p;
	x->len = d->len;
	x->tag = d->tag;
	emp__send_enqueue(fw, p, r);
	emp__peer_activate(fw, p);
	if (fw->peer[p].tx_state == PTX_NEW)
		emp__peer_send_hello(fw, p, now);
}

/* the total length of n buffers into *len: 0, or -1 if one has no memory
 * (a NULL list, or a NULL base with a length) */
static int sg_total(const struct emp_sg *sg, unsigned n, uint64_t *len)
{
	*len = 0;
	if (n && !sg)
		return -1;
	for (unsigned i = 0; i < n; i++) {
		if (!sg[i].base && sg[i].len)
			return -1;
		*len += sg[i].len;
	}
	return 0;
}

static void take(struct emp_fw *fw, uint32_t idx, uint64_t now)
{
	if (idx >= fw->cfg.ndesc)
		return;                           /* corrupt mailbox entry: ignore */
	struct emp_desc *d = &fw->desc[idx];
	struct rec *x = &fw->rec[idx];
	int32_t r = (int32_t)idx;
	if (x->kind != REC_FREE || __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) != EMP_DS_POSTED) {
		/* posted twice (the first post stands), or an entry for a
		 * descriptor the host owns (a stale or corrupt entry): refused */
		fw->ctr.posts_refused++;
		return;
	}
	memset(x, 0, sizeof(*x));
	x->next = x->prev = x->peer = NIL;
	uint64_t len;
	int bad = sg_total(d->sg, d->nsg, &len) < 0;
	if (d->op == EMP_OP_SEND && !bad && (d->host >= fw->cfg.nhosts || d->tag == EMP_ANY_TAG))
		bad = 1;
	if (d->op == EMP_OP_RECV && !bad && d->host != EMP_ANY_HOST && d->host >= fw->cfg.nhosts)
		bad = 1;
	if ((d->op != EMP_OP_SEND && d->op != EMP_OP_RECV) || bad || len != d->len) {
		x->kind = REC_SEND_QUEUED;
		fw->nrecs++;
		emp__complete(fw, r, -EMP_EINVAL);
		return;
	}
	fw->nrecs++;
	if (d->op == EMP_OP_SEND) {
		if (len > 0xffffffffull) {
			x->kind = REC_SEND_QUEUED;
			emp__complete(fw, r, -EMP_EMSGSIZE);
			return;
		}
		post_send(fw, r, now);
	} else {
		post_recv(fw, r);
	}
}

static void cancel(struct emp_fw *fw, uint32_t idx)
{
	if (idx >= fw->cfg.ndesc)
		return;
	int32_t r = (int32_t)idx;
	struct rec *x = &fw->rec[r];
	if (x->kind == REC_RECV_POSTED) {
		emp__dl_del(fw, recv_list(fw, &fw->desc[r]), r);
		fw->posted_recvs--;
		x->src_host = EMP_ANY_HOST;
		x->src_ep = EMP_ANY_EP;
		emp__complete(fw, r, -EMP_ECANCELED);
	} else if (x->kind == REC_SEND_QUEUED && x->peer != NIL) {
		emp__dl_del(fw, x->lane ? &fw->peer[x->peer].txs : &fw->peer[x->peer].txq, r);
		emp__complete(fw, r, -EMP_ECANCELED);
	}
	/* active transfers cannot be cancelled: the host sees them still posted */
}

int emp__fw_mailbox(struct emp_fw *fw, uint64_t now)
{
	struct emp_mailbox *mb = fw->mb;
	int before = fw->completed;
	uint32_t head = __atomic_load_n(&mb->head, __ATOMIC_ACQUIRE);
	uint32_t tail = mb->tail;
	while (tail != head) {
		uint32_t v = mb->ring[tail & mb->mask];
		tail++;
		if (v & EMP_MB_CANCEL)
			cancel(fw, v & ~EMP_MB_CANCEL);
		else
			take(fw, v, now);
	}
	__atomic_store_n(&mb->tail, tail, __ATOMIC_RELEASE);
	if (!fw->in_poll)
		emp__tx_flush(fw);
	return fw->completed - before;
}

/* bytes [0, lim) at the same offsets of two layouts of one buffer space:
 * copied from a to b wherever they are kept in different places */
static void sg_move(const struct emp_sg *a, unsigned na, const struct emp_sg *b, unsigned nb, uint64_t lim)
{
	unsigned ia = 0, ib = 0;
	uint64_t oa = 0, ob = 0;
	while (ia < na && ib < nb && lim) {
		uint64_t ka = a[ia].len - oa, kb = b[ib].len - ob, k = ka < kb ? ka : kb;
		if (k > lim)
			k = lim;
		lim -= k;
		uint8_t *pa = (uint8_t *)a[ia].base + oa, *pb = (uint8_t *)b[ib].base + ob;
		if (k && pa != pb)
			memmove(pb, pa, k);
		oa += k;
		ob += k;
		if (oa == a[ia].len) {
			ia++;
			oa = 0;
		}
		if (ob == b[ib].len) {
			ib++;
			ob = 0;
		}
	}
}

/* how far into receive idx's buffers a message arriving there has reached:
 * its frames [0, cum) and those the bitmap holds beyond */
static uint64_t placed_end(const struct emp_fw *fw, uint32_t idx)
{
	const struct rec *x = &fw->rec[idx];
	uint64_t hi = x->cum + (x->sack ? 64u - (unsigned)__builtin_clzll(x->sack) : 0u);
	uint64_t end = hi * x->frag;
	return end < x->len ? end : x->len;
}

int emp__fw_recv_resg(struct emp_fw *fw, uint32_t idx, const struct emp_sg *sg, uint16_t nsg)
{
	if (idx >= fw->cfg.ndesc)
		return -EMP_EINVAL;
	struct emp_desc *d = &fw->desc[idx];
	const struct rec *x = &fw->rec[idx];
	/* in the mailbox (REC_FREE), posted, or with a message arriving (what
	 * reached the old buffers is moved first) */
	if (d->op != EMP_OP_RECV || __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) != EMP_DS_POSTED ||
	    (x->kind != REC_FREE && x->kind != REC_RECV_POSTED && x->kind != REC_RECV_ACTIVE))
		return -EMP_EBUSY;
	uint64_t len;
	if (sg_total(sg, nsg, &len) < 0 || len != d->len)
		return -EMP_EINVAL;
	if (d->lent)
		emp__lent_place(fw, (int32_t)idx);   /* what the device holds comes along */
	d->lend_off = 1;                         /* and the rest lands in the new buffers */
	if (x->kind == REC_RECV_ACTIVE)
		sg_move(d->sg, d->nsg, sg, nsg, placed_end(fw, idx));
	d->sg = sg;
	d->nsg = nsg;
	return 0;
}

int emp__fw_recv_unlend(struct emp_fw *fw, uint32_t idx, const struct emp_sg *own, uint16_t nown)
{
	if (idx >= fw->cfg.ndesc)
		return 0;
	struct emp_desc *d = &fw->desc[idx];
	uint32_t st = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	int r = 0;
	if (st == EMP_DS_POSTED && fw->rec[idx].kind == REC_RECV_ACTIVE) {
		sg_move(d->sg, d->nsg, own, nown, placed_end(fw, idx));   /* the rest follows it there */
		r = 1;
	} else if ((st == EMP_DS_DONE || st == EMP_DS_HOST) && d->result >= 0) {
		fw->ctr.rx_direct++;
		r = 2;
	}
	d->sg = own;
	d->nsg = nown;
	d->lend_off = 0;
	return r;
}
