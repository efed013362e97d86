/* sim.c: the simulated wire (emp__sim_ops, emp_sim_wire_*): ports in one process, seeded faults, virtual time. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "sys.h"
#include "driver.h"
#include "sim.h"
#include "proto.h"

/*
 * Model. A wire joins ports; tx_burst copies each frame (gathering hdr and
 * pieces) into a free slot of the destination port's preallocated pool and
 * queues it with a delivery time; rx_burst hands out the queued frames whose
 * time has come, in (time, send order) order. Everything is under one mutex
 * per wire, so ports may be driven from several threads.
 *
 * Faults, drawn per destination copy from one splitmix64 stream seeded from
 * faults.seed (same seed + same calls = same outcome): loss, duplication
 * (a second copy), corruption (one bit of bytes 14..len-1 flipped), reordering
 * (the copy is held back by reorder_ns; with reorder_ns 0 it is instead queued
 * behind the next frame sent to that port at the same time), delay (every
 * copy becomes deliverable at send time + delay_ns).
 *
 * Queue: a port has queue_frames slots of mtu+14 bytes; frames waiting in the
 * queue and frames handed out by rx_burst but not yet rx_release()d both hold
 * a slot. A copy that finds no free slot is dropped (stats.overflow).
 *
 * Stats: sent = frames accepted by tx; delivered = copies placed in a receive
 * queue; oversize = frames refused by tx (longer than the sender's mtu + 14,
 * or shorter than an Ethernet header). For unicast traffic
 * sent + duplicated == delivered + lost + overflow + no_port.
 *
 * wait_fd: an eventfd per port. It is made readable whenever a copy is queued,
 * even when that copy is delayed and not yet deliverable, and is cleared by
 * rx_burst once nothing deliverable remains. So for delayed frames the fd may
 * wake the engine early (it finds nothing and sleeps to its own deadline) and
 * does not wake it again when the delay expires: an engine on the sim wire
 * must bound its sleep by the next_event op (virtual-clock tests
 * advance the clock to it).
 *
 * Changing mtu or queue_frames with emp_sim_wire_set_faults() affects ports
 * opened afterwards. The seed is re-applied only when it changes.
 */

#define SIM_DEF_MTU   1500u
#define SIM_DEF_QUEUE 4096u

struct sim_qent {
	uint64_t t;     /* delivery time */
	uint64_t seq;   /* send order tie-break */
	uint32_t slot;
};

struct sim_port {
	struct emp_sim_wire *w;
	uint8_t mac[6];
	unsigned mtu;
	unsigned nslots;
	size_t slot_size;
	uint8_t *pool;          /* nslots * slot_size */
	uint32_t *len;          /* per slot */
	uint32_t *freel;        /* free slot stack */
	unsigned nfree;
	struct sim_qent *heap;  /* queued frames, min-heap by (t, seq) */
	unsigned nheap;
	uint32_t *out;          /* handed out, not released: FIFO ring */
	unsigned out_head, out_n;
	uint32_t *owner;        /* per slot: lent to (rx_hold), 0 not */
	uint32_t *lq;           /* lent slots in the order lent (FIFO ring; may hold given-back ones) */
	unsigned lq_head, lq_n;
	uint64_t seq;
	int efd;
	int signaled;
};

struct emp_sim_wire {
	pthread_mutex_t mu;
	struct emp_sim_faults f;
	uint64_t rng;
	uint64_t (*clock)(void *arg);
	void *clock_arg;
	struct emp_sim_stats st;
	struct sim_port **ports;
	unsigned nports, cap;
	int destroyed;
	emp_sim_tap_fn *tap;             /* tests: sees every frame tx accepts */
	void *tap_arg;
};

void emp_sim_wire_tap(struct emp_sim_wire *w, emp_sim_tap_fn *fn, void *arg)
{
	pthread_mutex_lock(&w->mu);
	w->tap = fn;
	w->tap_arg = arg;
	pthread_mutex_unlock(&w->mu);
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* true with probability ppm / 1e6; always consumes one draw */
static int chance(struct emp_sim_wire *w, uint32_t ppm)
{
	return splitmix64(&w->rng) % 1000000u < ppm;
}

static uint64_t mono_ns(void *arg)
{
	(void)arg;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void faults_norm(struct emp_sim_faults *f)
{
	if (!f->mtu)
		f->mtu = SIM_DEF_MTU;
	if (f->mtu > 65535)
		f->mtu = 65535;
	if (!f->queue_frames)
		f->queue_frames = SIM_DEF_QUEUE;
}

/* ---- the receive queue: a binary min-heap keyed by (t, seq) ---- */

static int qless(const struct sim_qent *a, const struct sim_qent *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void heap_push(struct sim_port *p, struct sim_qent e)
{
	unsigned i = p->nheap++;
	while (i > 0) {
		unsigned up = (i - 1) / 2;
		if (!qless(&e, &p->heap[up]))
			break;
		p->heap[i] = p->heap[up];
		i = up;
	}
	p->heap[i] = e;
}

static struct sim_qent heap_pop(struct sim_port *p)
{
	struct sim_qent top = p->heap[0];
	struct sim_qent last = p->heap[--p->nheap];
	unsigned i = 0, n = p->nheap;
	for (;;) {
		unsigned c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && qless(&p->heap[c + 1], &p->heap[c]))
			c++;
		if (!qless(&p->heap[c], &last))
			break;
		p->heap[i] = p->heap[c];
		i = c;
	}
	if (n)
		p->heap[i] = last;
	return top;
}

/* ---- eventfd signalling (called with the wire lock held) ---- */

static void port_signal(struct sim_port *p)
{
	if (p->signaled)
		return;
	uint64_t one = 1;
	if (emp__sys_write(p->efd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		p->signaled = 1;
}

static void port_unsignal(struct sim_port *p)
{
	if (!p->signaled)
		return;
	uint64_t v;
	if (emp__sys_read(p->efd, &v, sizeof(v)) == (ssize_t)sizeof(v) || errno == EAGAIN)
		p->signaled = 0;
}

/* ---- the wire ---- */

int emp_sim_wire_create(struct emp_sim_wire **wp, const struct emp_sim_faults *f,
			uint64_t (*clock)(void *arg), void *clock_arg)
{
	struct emp_sim_wire *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	if (f)
		w->f = *f;
	faults_norm(&w->f);
	w->rng = w->f.seed;
	w->clock = clock ? clock : mono_ns;
	w->clock_arg = clock ? clock_arg : NULL;
	pthread_mutex_init(&w->mu, NULL);
	*wp = w;
	return 0;
}

static void wire_free(struct emp_sim_wire *w)
{
	pthread_mutex_destroy(&w->mu);
	free(w->ports);
	free(w);
}

/* The wire is freed once it is destroyed and its last port is closed. */
void emp_sim_wire_destroy(struct emp_sim_wire *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->destroyed = 1;
	int last = w->nports == 0;
	pthread_mutex_unlock(&w->mu);
	if (last)
		wire_free(w);
}

void emp_sim_wire_set_faults(struct emp_sim_wire *w, const struct emp_sim_faults *f)
{
	pthread_mutex_lock(&w->mu);
	uint64_t old = w->f.seed;
	w->f = *f;
	faults_norm(&w->f);
	if (w->f.seed != old)
		w->rng = w->f.seed;
	pthread_mutex_unlock(&w->mu);
}

void emp_sim_wire_stats(struct emp_sim_wire *w, struct emp_sim_stats *s)
{
	pthread_mutex_lock(&w->mu);
	*s = w->st;
	pthread_mutex_unlock(&w->mu);
}

uint64_t emp_sim_wire_next_event(struct emp_sim_wire *w)
{
	uint64_t t = UINT64_MAX;
	pthread_mutex_lock(&w->mu);
	for (unsigned i = 0; i < w->nports; i++) {
		struct sim_port *p = w->ports[i];
		if (p->nheap && p->heap[0].t < t)
			t = p->heap[0].t;
	}
	pthread_mutex_unlock(&w->mu);
	return t;
}

/* ---- ports ---- */

static void port_free(struct sim_port *p)
{
	if (p->efd >= 0)
		emp__sys_close(p->efd);
	free(p->pool);
	free(p->len);
	free(p->freel);
	free(p->heap);
	free(p->out);
	free(p->owner);
	free(p->lq);
	free(p);
}

static int sim_open(const struct emp_dev_params *prm, void **priv)
{
	struct emp_sim_wire *w = prm->wire;
	static const uint8_t zero[6];
	if (!w || !prm->mac) {
		if (prm->err)
			snprintf(prm->err, prm->errlen, "emp: sim driver needs a wire and a MAC");
		return -EINVAL;
	}
	if ((prm->mac[0] & 1) || !memcmp(prm->mac, zero, 6)) {
		if (prm->err)
			snprintf(prm->err, prm->errlen, "emp: sim port MAC must be a non-zero unicast address");
		return -EINVAL;
	}
	struct sim_port *p = calloc(1, sizeof(*p));
	if (!p)
		goto nomem;
	p->efd = -1;
	p->w = w;
	memcpy(p->mac, prm->mac, 6);
	pthread_mutex_lock(&w->mu);
	p->mtu = w->f.mtu;
	p->nslots = w->f.queue_frames;
	pthread_mutex_unlock(&w->mu);
	p->slot_size = ((size_t)p->mtu + EMP_ETH_HLEN + 63) & ~(size_t)63;
	p->pool = malloc(p->slot_size * p->nslots);
	p->len = calloc(p->nslots, sizeof(*p->len));
	p->freel = malloc(p->nslots * sizeof(*p->freel));
	p->heap = malloc(p->nslots * sizeof(*p->heap));
	p->out = malloc(p->nslots * sizeof(*p->out));
	p->owner = calloc(p->nslots, sizeof(*p->owner));
	p->lq = malloc(p->nslots * sizeof(*p->lq));
	if (!p->pool || !p->len || !p->freel || !p->heap || !p->out || !p->owner || !p->lq)
		goto nomem;
	for (unsigned i = 0; i < p->nslots; i++)
		p->freel[i] = p->nslots - 1 - i;
	p->nfree = p->nslots;
	p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->efd < 0) {
		int e = errno;
		if (prm->err)
			snprintf(prm->err, prm->errlen, "emp: sim: eventfd: %s", strerror(e));
		port_free(p);
		return -e;
	}

	pthread_mutex_lock(&w->mu);
	int rc = 0;
	for (unsigned i = 0; i < w->nports; i++)
		if (!memcmp(w->ports[i]->mac, p->mac, 6))
			rc = -EADDRINUSE;
	if (!rc && w->destroyed)
		rc = -ENODEV;
	if (!rc && w->nports == w->cap) {
		unsigned ncap = w->cap ? 2 * w->cap : 8;
		struct sim_port **np = realloc(w->ports, ncap * sizeof(*np));
		if (!np)
			rc = -ENOMEM;
		else {
			w->ports = np;
			w->cap = ncap;
		}
	}
	if (!rc)
		w->ports[w->nports++] = p;
	pthread_mutex_unlock(&w->mu);
	if (rc) {
		if (prm->err)
			snprintf(prm->err, prm->errlen, "emp: sim: cannot attach port: %s",
				 rc == -EADDRINUSE ? "MAC already on this wire" : strerror(-rc));
		port_free(p);
		return rc;
	}
	*priv = p;
	return 0;
nomem:
	if (prm->err)
		snprintf(prm->err, prm->errlen, "emp: sim: out of memory for the port's frame pool");
	if (p)
		port_free(p);
	return -ENOMEM;
}

static void sim_close(void *priv)
{
	struct sim_port *p = priv;
	if (!p)
		return;
	struct emp_sim_wire *w = p->w;
	pthread_mutex_lock(&w->mu);
	for (unsigned i = 0; i < w->nports; i++)
		if (w->ports[i] == p) {
			w->ports[i] = w->ports[--w->nports];
			break;
		}
	int last = w->destroyed && w->nports == 0;
	pthread_mutex_unlock(&w->mu);
	port_free(p);
	if (last)
		wire_free(w);
}

static uint32_t txf_len(const struct emp_txframe *f)
{
	uint64_t n = f->hdr_len;
	for (uint32_t i = 0; i < f->npieces && i < EMP_TX_PIECES; i++)
		n += f->piece[i].len;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* copy up to max bytes of the frame into out */
static void txf_gather(const struct emp_txframe *f, uint8_t *out, uint32_t max)
{
	uint32_t n = f->hdr_len < max ? f->hdr_len : max;
	memcpy(out, f->hdr, n);
	for (uint32_t i = 0; i < f->npieces && i < EMP_TX_PIECES && n < max; i++) {
		uint32_t k = f->piece[i].len;
		if (k > max - n)
			k = max - n;
		if (k)
			memcpy(out + n, f->piece[i].p, k);
		n += k;
	}
}

/* Queue one frame on port d, applying the faults. Wire lock held. */
static void deliver(struct emp_sim_wire *w, struct sim_port *d, const struct emp_txframe *f,
		    uint32_t len, uint64_t now)
{
	const struct emp_sim_faults *fl = &w->f;
	if (chance(w, fl->loss_ppm)) {
		w->st.lost++;
		return;
	}
	int copies = 1;
	if (chance(w, fl->dup_ppm)) {
		copies = 2;
		w->st.duplicated++;
	}
	for (int c = 0; c < copies; c++) {
		int corrupt = chance(w, fl->corrupt_ppm);
		uint64_t bitr = splitmix64(&w->rng);
		int reorder = chance(w, fl->reorder_ppm);
		if (len > d->mtu + EMP_ETH_HLEN) {   /* receiver has a smaller MTU */
			w->st.oversize++;
			continue;
		}
		if (!d->nfree) {
			w->st.overflow++;
			continue;
		}
		uint32_t slot = d->freel[--d->nfree];
		uint8_t *buf = d->pool + (size_t)slot * d->slot_size;
		txf_gather(f, buf, len);
		d->len[slot] = len;
		if (corrupt && len > EMP_ETH_HLEN) {
			uint64_t bit = bitr % ((uint64_t)(len - EMP_ETH_HLEN) * 8);
			buf[EMP_ETH_HLEN + bit / 8] ^= (uint8_t)(1u << (bit % 8));
			w->st.corrupted++;
		}
		struct sim_qent e = { now + fl->delay_ns, d->seq += 2, slot };
		if (reorder) {
			w->st.reordered++;
			if (fl->reorder_ns)
				e.t += fl->reorder_ns;
			else
				e.seq += 3;     /* behind the next frame sent at the same time */
		}
		heap_push(d, e);
		w->st.delivered++;
		port_signal(d);
	}
}

static int sim_tx_burst(void *priv, const struct emp_txframe *f, unsigned n)
{
	struct sim_port *p = priv;
	struct emp_sim_wire *w = p->w;
	uint64_t now = w->clock(w->clock_arg);
	pthread_mutex_lock(&w->mu);
	w->st.bursts++;
	if (w->f.tx_error) {
		int e = w->f.tx_error;
		pthread_mutex_unlock(&w->mu);
		return -e;
	}
	for (unsigned i = 0; i < n; i++) {
		uint32_t len = txf_len(&f[i]);
		if (len < EMP_ETH_HLEN || len > p->mtu + EMP_ETH_HLEN) {
			w->st.oversize++;
			continue;
		}
		w->st.sent++;
		if (w->tap)
			w->tap(w->tap_arg, &f[i]);
		uint8_t dst[6];
		txf_gather(&f[i], dst, 6);
		if (dst[0] & 1) {               /* broadcast / multicast: every other port */
			for (unsigned k = 0; k < w->nports; k++)
				if (w->ports[k] != p)
					deliver(w, w->ports[k], &f[i], len, now);
			continue;
		}
		struct sim_port *d = NULL;
		for (unsigned k = 0; k < w->nports; k++)
			if (!memcmp(w->ports[k]->mac, dst, 6)) {
				d = w->ports[k];
				break;
			}
		if (d)
			deliver(w, d, &f[i], len, now);
		else
			w->st.no_port++;
	}
	pthread_mutex_unlock(&w->mu);
	return (int)n;
}

static int sim_rx_burst(void *priv, struct emp_rxframe *f, unsigned max)
{
	struct sim_port *p = priv;
	struct emp_sim_wire *w = p->w;
	uint64_t now = w->clock(w->clock_arg);
	unsigned n = 0;
	pthread_mutex_lock(&w->mu);
	while (n < max && p->nheap && p->heap[0].t <= now) {
		struct sim_qent e = heap_pop(p);
		p->out[(p->out_head + p->out_n++) % p->nslots] = e.slot;
		f[n].data = p->pool + (size_t)e.slot * p->slot_size;
		f[n].len = p->len[e.slot];
		n++;
	}
	if (!p->nheap || p->heap[0].t > now)
		port_unsignal(p);
	pthread_mutex_unlock(&w->mu);
	return (int)n;
}

static void sim_rx_release(void *priv, unsigned n)
{
	struct sim_port *p = priv;
	pthread_mutex_lock(&p->w->mu);
	if (n > p->out_n)
		n = p->out_n;
	for (unsigned i = 0; i < n; i++) {
		uint32_t sl = p->out[p->out_head];
		if (!p->owner[sl])           /* a lent slot stays out until rx_unhold */
			p->freel[p->nfree++] = sl;
		p->out_head = (p->out_head + 1) % p->nslots;
	}
	p->out_n -= n;
	pthread_mutex_unlock(&p->w->mu);
}

/* Lending (firmware/lent.c): frame i of the last burst (not yet released)
 * keeps its slot past rx_release; a quarter of the slots or fewer free
 * makes the oldest lent one urgent. */
static uint32_t sim_rx_hold(void *priv, unsigned i, uint32_t owner)
{
	struct sim_port *p = priv;
	uint32_t tok = 0;
	pthread_mutex_lock(&p->w->mu);
	if (owner && i < p->out_n) {
		uint32_t sl = p->out[(p->out_head + i) % p->nslots];
		if (!p->owner[sl] && p->lq_n < p->nslots) {
			p->owner[sl] = owner;
			p->lq[(p->lq_head + p->lq_n++) % p->nslots] = sl;
			tok = sl + 1;
		}
	}
	pthread_mutex_unlock(&p->w->mu);
	return tok;
}

static void sim_rx_unhold(void *priv, uint32_t tok)
{
	struct sim_port *p = priv;
	uint32_t sl = tok - 1;
	pthread_mutex_lock(&p->w->mu);
	if (tok && sl < p->nslots && p->owner[sl]) {
		p->owner[sl] = 0;
		int out = 0;                 /* still in the burst: rx_release frees it */
		for (unsigned k = 0; k < p->out_n && !out; k++)
			out = p->out[(p->out_head + k) % p->nslots] == sl;
		if (!out)
			p->freel[p->nfree++] = sl;
	}
	pthread_mutex_unlock(&p->w->mu);
}

static uint32_t sim_rx_urgent(void *priv, uint32_t *owner)
{
	struct sim_port *p = priv;
	uint32_t tok = 0;
	pthread_mutex_lock(&p->w->mu);
	while (p->lq_n && !p->owner[p->lq[p->lq_head]]) {
		p->lq_head = (p->lq_head + 1) % p->nslots;
		p->lq_n--;
	}
	if (p->lq_n && p->nfree <= p->nslots / 4) {
		uint32_t sl = p->lq[p->lq_head];
		*owner = p->owner[sl];
		tok = sl + 1;
	}
	pthread_mutex_unlock(&p->w->mu);
	return tok;
}

/* the next time a frame queued for this port becomes deliverable (an engine
 * on this wire bounds its sleep by it: see wait_fd above) */
static uint64_t sim_next_event(void *priv)
{
	/* this port's own next delivery: frames queued for other ports are not
	 * this engine's business (a peer that does not take its frames must
	 * not look like a deadline here, again and again) */
	struct sim_port *p = priv;
	pthread_mutex_lock(&p->w->mu);
	uint64_t t = p->nheap ? p->heap[0].t : UINT64_MAX;
	pthread_mutex_unlock(&p->w->mu);
	return t;
}

static int sim_wait_fd(void *priv)
{
	return ((struct sim_port *)priv)->efd;
}

static void sim_mac(void *priv, uint8_t mac[6])
{
	memcpy(mac, ((struct sim_port *)priv)->mac, 6);
}

static unsigned sim_mtu(void *priv)
{
	return ((struct sim_port *)priv)->mtu;
}

const struct emp_driver_ops emp__sim_ops = {
	.name = "sim",
	.open = sim_open,
	.close = sim_close,
	.tx_burst = sim_tx_burst,
	.rx_burst = sim_rx_burst,
	.rx_release = sim_rx_release,
	.rx_hold = sim_rx_hold,
	.rx_unhold = sim_rx_unhold,
	.rx_urgent = sim_rx_urgent,
	.wait_fd = sim_wait_fd,
	.next_event = sim_next_event,
	.mac = sim_mac,
	.mtu = sim_mtu,
};
