/* engine.c: engine memory layout, initialisation, the poll loop body, lists, completion and counters. */
#include "fw_int.h"

const char *const emp__drop_names[EMP_DROP_MAX] = {
	[EMP_DROP_SHORT] = "short", [EMP_DROP_ETHERTYPE] = "ethertype",
	[EMP_DROP_VERSION] = "version", [EMP_DROP_TYPE] = "type",
	[EMP_DROP_NOT_MINE] = "not_mine", [EMP_DROP_UNKNOWN_MAC] = "unknown_mac",
	[EMP_DROP_BAD_LEN] = "bad_len", [EMP_DROP_BAD_INDEX] = "bad_index",
	[EMP_DROP_CSUM] = "csum", [EMP_DROP_STALE] = "stale",
	[EMP_DROP_NO_SESSION] = "no_session", [EMP_DROP_NO_RECV] = "no_recv",
	[EMP_DROP_DUP] = "dup", [EMP_DROP_WINDOW] = "window",
	[EMP_DROP_UNKNOWN_MSG] = "unknown_msg", [EMP_DROP_NO_PEER_SLOT] = "no_peer_slot",
	[EMP_DROP_TX_FULL] = "tx_full", [EMP_DROP_ORDER] = "order",
	[EMP_DROP_DST_MAC] = "dst_mac", [EMP_DROP_EXPIRED] = "expired",
	[EMP_DROP_AUTH] = "auth", [EMP_DROP_DEVICE] = "device",
};

void emp__fw_config_defaults(struct emp_fw_config *c)
{
	memset(c, 0, sizeof(*c));
	c->ndesc = 4096;
	c->max_peers = 1024;
	c->ethertype = EMP_ETHERTYPE_DEFAULT;
	c->incarnation = 1;
	c->mtu = 1500;
	c->ack_every = EMP_DEF_ACK_EVERY;
	c->window = EMP_DEF_WINDOW;
	c->peer_window = EMP_DEF_PEER_WINDOW;
	c->peer_msgs = EMP_DEF_PEER_MSGS;
	c->rto_ns = EMP_DEF_RTO_NS;
	c->rto_max_ns = EMP_DEF_RTO_MAX_NS;
	c->ack_delay_ns = EMP_DEF_ACK_DELAY_NS;
	c->retries = EMP_DEF_RETRIES;
	c->tx_burst = 256;
	c->ack_hold_ns = 20000;
}

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t p = 1;
	while (p < n && p < (1u << 30))
		p <<= 1;
	return p;
}

#define ALIGN(x) (((x) + 63) & ~(size_t)63)

struct layout { size_t fw, rec, peer, phash, mhash, macs, rbucket, bounce, total; };

static void layout(const struct emp_fw_config *c, struct layout *l)
{
	size_t off = 0;
	l->fw = off;      off = ALIGN(off + sizeof(struct emp_fw));
	l->rec = off;     off = ALIGN(off + sizeof(struct rec) * c->ndesc);
	l->peer = off;    off = ALIGN(off + sizeof(struct peer) * (c->max_peers + 1));   /* + scratch (peer.c) */
	l->phash = off;   off = ALIGN(off + sizeof(int32_t) * pow2_at_least(c->max_peers * 2));
	l->mhash = off;   off = ALIGN(off + sizeof(int32_t) * pow2_at_least(c->nhosts * 2 + 2));
	l->macs = off;    off = ALIGN(off + 6 * (size_t)c->nhosts);
	l->rbucket = off; off = ALIGN(off + sizeof(struct dlist) * pow2_at_least(c->ndesc));
	l->bounce = off;  off = ALIGN(off + (size_t)TXB_MAX * c->mtu);
	l->total = off;
}

size_t emp__fw_memsize(const struct emp_fw_config *cfg)
{
	struct layout l;
	layout(cfg, &l);
	return l.total;
}

static uint32_t mac_hash(const uint8_t *m)
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 6; i++)
		h = (h ^ m[i]) * 16777619u;
	return h;
}

int emp__fw_init(struct emp_fw *fw, size_t memsize, const struct emp_fw_config *c,
		 const struct emp_fw_env *env)
{
	struct layout l;
	if (!c || !env || !env->ops || !env->desc || !env->mb)
		return -EMP_EINVAL;
	if (c->ndesc < 2 || c->ndesc > (1u << 24) || c->max_peers < 1 || c->max_peers > 65536 ||
	    c->nhosts > 65535 || c->incarnation == 0 || c->mtu < EMP_MIN_MTU || c->mtu > 65535 ||
	    c->ack_every < 1 || c->window < 1 || c->window > EMP_SACK_BITS || c->peer_window < 1 ||
	    c->peer_msgs < 1 || c->peer_msgs > EMP_MATCH_BITS || c->rto_ns == 0 || c->rto_max_ns < c->rto_ns || c->retries < 1 ||
	    c->tx_burst < 1 || (c->nhosts && !c->host_mac) || c->auth > 1)
		return -EMP_EINVAL;
	layout(c, &l);
	if (memsize < l.total)
		return -EMP_EINVAL;
	uint8_t *base = (uint8_t *)fw;
	if (!env->zeroed)
		memset(base, 0, l.bounce);     /* the bounce buffers (last) are scratch: left untouched */
	fw->cfg = *c;
	fw->ops = env->ops;
	fw->rx_cur = -1;
	fw->dev = env->dev;
	fw->desc = env->desc;
	fw->mb = env->mb;
	fw->cq = env->cq;
	fw->rec = (struct rec *)(base + l.rec);
	fw->peer = (struct peer *)(base + l.peer);
	fw->phash = (int32_t *)(base + l.phash);
	fw->phash_mask = pow2_at_least(c->max_peers * 2) - 1;
	fw->mhash = (int32_t *)(base + l.mhash);
	fw->mhash_mask = pow2_at_least(c->nhosts * 2 + 2) - 1;
	fw->host_mac = (uint8_t (*)[6])(base + l.macs);
	fw->rbucket = (struct dlist *)(base + l.rbucket);
	fw->rbucket_mask = pow2_at_least(c->ndesc) - 1;
	fw->bounce = base + l.bounce;
	fw->cfg.host_mac = (const uint8_t (*)[6])fw->host_mac;
	for (uint32_t i = 0; i <= fw->phash_mask; i++)
		fw->phash[i] = NIL;
	for (uint32_t i = 0; i <= fw->mhash_mask; i++)
		fw->mhash[i] = NIL;
	for (uint32_t i = 0; i <= fw->rbucket_mask; i++)
		fw->rbucket[i].head = fw->rbucket[i].tail = NIL;
	fw->rwild.head = fw->rwild.tail = NIL;
	for (uint32_t i = 0; i < c->ndesc && !env->zeroed; i++)   /* take() sets them at each post */
		fw->rec[i].next = fw->rec[i].prev = NIL;
	for (uint32_t i = 0; i < c->nhosts; i++) {
		memcpy(fw->host_mac[i], c->host_mac[i], 6);
		uint32_t h = mac_hash(c->host_mac[i]) & fw->mhash_mask;
		while (fw->mhash[h] != NIL)
			h = (h + 1) & fw->mhash_mask;
		fw->mhash[h] = (int32_t)i;
	}
	fw->alist = NIL;
	fw->next_deadline = UINT64_MAX;
	fw->next_fine = UINT64_MAX;
	(void)emp__crc32c(0, "", 0);           /* build the tables now, not on the first frame */
	emp__auth_init(fw);
	if (fw->cfg.window > EMP_SACK_BITS)
		fw->cfg.window = EMP_SACK_BITS;
	return 0;
}

int emp__host_by_mac(const struct emp_fw *fw, const uint8_t *mac)
{
	uint32_t h = mac_hash(mac) & fw->mhash_mask;
	for (uint32_t n = 0; n <= fw->mhash_mask; n++, h = (h + 1) & fw->mhash_mask) {
		int32_t i = fw->mhash[h];
		if (i == NIL)
			return -1;
		if (!memcmp(fw->host_mac[i], mac, 6))
			return i;
	}
	return -1;
}

/* ---- lists of records (each record is on at most one list) ---- */
void emp__dl_push(struct emp_fw *fw, struct dlist *l, int32_t r)
{
	struct rec *x = &fw->rec[r];
	x->next = NIL;
	x->prev = l->tail;
	if (l->tail != NIL)
		fw->rec[l->tail].next = r;
	else
		l->head = r;
	l->tail = r;
}

void emp__dl_del(struct emp_fw *fw, struct dlist *l, int32_t r)
{
	struct rec *x = &fw->rec[r];
	if (x->prev != NIL)
		fw->rec[x->prev].next = x->next;
	else
		l->head = x->next;
	if (x->next != NIL)
		fw->rec[x->next].prev = x->prev;
	else
		l->tail = x->prev;
	x->next = x->prev = NIL;
}

/* Return the descriptor to the host: results first, then the status word. */
void emp__complete(struct emp_fw *fw, int32_t r, int64_t result)
{
	struct rec *x = &fw->rec[r];
	struct emp_desc *d = &fw->desc[r];
	if (d->op == EMP_OP_RECV) {
		d->rhost = x->src_host;
		d->rep = x->src_ep;
		d->rtag = x->tag;
		d->rlen = x->len;
		if (result >= 0) {
			fw->ctr.msgs_received++;
			fw->ctr.bytes_received += (uint64_t)result;
		} else if (result == -EMP_ECANCELED) {
			fw->ctr.cancelled++;
		} else {
			fw->ctr.recv_errors++;
		}
		if (result < 0)
			emp__lent_drop(fw, r);
	} else {
		if (result >= 0) {
			fw->ctr.msgs_sent++;
			fw->ctr.bytes_sent += x->len;
		} else if (result == -EMP_ECANCELED) {
			fw->ctr.cancelled++;
		} else {
			fw->ctr.send_errors++;
		}
	}
	d->result = result;
	x->kind = REC_FREE;
	fw->nrecs--;
	fw->completed++;
	__atomic_store_n(&d->stat, EMP_DS_DONE, __ATOMIC_RELEASE);
	if (fw->cq) {
		struct emp_cq *q = fw->cq;
		uint32_t h = q->head;
		if (h - __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) > q->mask) {
			fw->ctr.cq_overflow++;
			return;
		}
		q->ring[h & q->mask] = (uint32_t)r;
		__atomic_store_n(&q->head, h + 1, __ATOMIC_RELEASE);
	}
}

void emp__arm(struct emp_fw *fw, uint64_t deadline)
{
	if (deadline < fw->next_deadline)
		fw->next_deadline = deadline;
}

/* A short timer (tens of microseconds: a delayed or held ack), which the host
 * should meet precisely; retransmission timers tolerate a coarse clock. */
void emp__arm_fine(struct emp_fw *fw, uint64_t deadline)
{
	emp__arm(fw, deadline);
	if (deadline < fw->next_fine)
		fw->next_fine = deadline;
}

/* Frames the device dropped before we saw them (its ring was full: the
 * application did not come back to drive for a while) count as drops of
 * their own; asked at most every EMP_DEV_DROPS_NS (it may be a system call). */
static void device_drops(struct emp_fw *fw, uint64_t now)
{
	fw->dev_drops_at = now;
	uint64_t d = fw->ops->rx_dropped(fw->dev);
	if (d > fw->dev_drops_seen) {
		fw->ctr.drops[EMP_DROP_DEVICE] += d - fw->dev_drops_seen;
		fw->dev_drops_seen = d;
	}
}

/* ---- the poll loop body ---- */
int emp__fw_poll(struct emp_fw *fw, uint64_t now)
{
	struct emp_rxframe rx[RXB_MAX];
	fw->completed = 0;
	fw->in_poll = 1;
	fw->now = now;
	emp__fw_mailbox(fw, now);
	int drained = fw->skip_rx;       /* a post's drive just after a look (emp__fw_skip_rx) */
	for (int round = 0; round < 8 && !drained; round++) {
		int n = fw->ops->rx_burst(fw->dev, rx, RXB_MAX);
		if (n <= 0) {
			drained = 1;
			break;
		}
		for (int i = 0; i < n; i++) {
			fw->rx_cur = i;
			emp__fw_frame(fw, rx[i].data, rx[i].len, now);
		}
		fw->rx_cur = -1;
		fw->ops->rx_release(fw->dev, (unsigned)n);
		drained = n < RXB_MAX;
	}
	fw->rx_more = !drained;          /* busy: call again at once */
	if (fw->ops->rx_urgent)
		emp__lent_urgent(fw);
	if (fw->ops->rx_dropped && now - fw->dev_drops_at >= EMP_DEV_DROPS_NS)
		device_drops(fw, now);
	if (now >= fw->next_deadline)
		emp__fw_timers(fw, now);
	emp__tx_pump(fw, now);
	emp__tx_flush_or_hold(fw, now);
	fw->in_poll = 0;
	return fw->completed;
}

void emp__fw_set_hold(struct emp_fw *fw, int ok, uint64_t hold_ns)
{
	fw->hold_ok = ok;
	fw->hold_ns = hold_ns;
}

/* The next polls leave the device alone (1) or look at it (0): the host's
 * post on a device whose look is a system call, right after a look */
void emp__fw_skip_rx(struct emp_fw *fw, int skip)
{
	fw->skip_rx = skip;
}

void emp__fw_set_bulk_hold(struct emp_fw *fw, int ok)
{
	fw->bulk_ok = ok;
}

uint64_t emp__fw_bulk_deadline(const struct emp_fw *fw)
{
	return fw->bulk_until;
}

void emp__fw_flush(struct emp_fw *fw)
{
	emp__tx_flush(fw);
}

uint64_t emp__fw_next_fine_deadline(const struct emp_fw *fw)
{
	return fw->next_fine;
}

uint64_t emp__fw_next_deadline(const struct emp_fw *fw)
{
	return fw->next_deadline;
}

/* Frames wait in the transmit batch (acks held for a reply or for company):
 * a racy read, a hint for a thread about to sleep */
int emp__fw_holding(const struct emp_fw *fw)
{
	return __atomic_load_n(&fw->txn, __ATOMIC_RELAXED) != 0;
}

int emp__fw_busy(const struct emp_fw *fw)
{
	return fw->pending_tx || fw->rx_more ||
	       __atomic_load_n(&fw->mb->head, __ATOMIC_ACQUIRE) != fw->mb->tail;
}

void emp__fw_counters(const struct emp_fw *fw, struct emp_counters *c)
{
	*c = fw->ctr;
	c->rx_bulk = fw->ops->rx_bulk ? fw->ops->rx_bulk(fw->dev) : 0;
	c->drops_total = 0;
	for (int i = 0; i < EMP_DROP_MAX; i++)
		c->drops_total += c->drops[i];
}

uint64_t emp__fw_mtu_mismatches(const struct emp_fw *fw, uint32_t *mtu)
{
	if (mtu)
		*mtu = fw->ctr.last_mismatch_mtu;
	return fw->ctr.mtu_mismatch;
}

uint32_t emp__fw_peers(const struct emp_fw *fw, struct emp_peer_info *out, uint32_t max)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < fw->npeers && n < max; i++) {
		const struct peer *pe = &fw->peer[i];
		if (!pe->used)
			continue;
		struct emp_peer_info *o = &out[n++];
		o->host = pe->host;
		o->ep = pe->ep;
		o->tx_state = pe->tx_state;
		o->rx_known = pe->rx_known;
		o->remote_inc = pe->tx_remote_inc ? pe->tx_remote_inc : pe->rx_remote_inc;
		o->inflight_frames = pe->inflight_frames;
		o->inflight_msgs = pe->inflight_msgs;
		o->credits = pe->credits;
		o->srtt_ns = pe->srtt;
		o->rto_ns = pe->rto;
		o->tx_frames = pe->tx_frames;
		o->tx_bytes = pe->tx_bytes;
		o->rx_frames = pe->rx_frames;
		o->rx_bytes = pe->rx_bytes;
		o->retransmits = pe->retransmits;
	}
	return fw->npeers_live;
}

void emp__fw_usage(const struct emp_fw *fw, uint32_t *peers, uint32_t *records)
{
	if (peers)
		*peers = fw->npeers_live;
	if (records)
		*records = fw->nrecs;
}
