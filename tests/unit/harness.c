/* harness.c: the simulated cluster used by the unit suites (virtual clock, deterministic). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw_int.h"

struct rawport {
	void *port;
	struct h_raw_frame *q;      /* frames taken off the wire, oldest first */
	int nq, lost;
};
#define RAWQ_MAX 4096

static uint64_t vclock(void *arg)
{
	return ((struct harness *)arg)->now;
}

static void open_ep(struct harness *h, int i)
{
	struct emp_open_opts o = {
		.conf = &h->conf, .driver = "sim", .endpoint = 1, .wire = h->wire, .mac = h->mac[i],
		.no_progress_thread = 1, .incarnation = ++h->inc_seq * 7919u + (uint32_t)i,
		.fw_override = &h->fwc, .clock = vclock, .clock_arg = h,
	};
	int rc = emp_open(&h->ep[i], &o);
	CHECK_MSG(rc == 0, "emp_open(%d): %d %s", i, rc, emp_last_error());
}

void h_init(struct harness *h, int n, const struct emp_sim_faults *f, const struct emp_fw_config *fwc)
{
	struct emp_sim_faults nf = { .seed = 1 };
	memset(h, 0, sizeof(*h));
	h->n = n;
	h->now = 1000000;
	CHECK(emp_sim_wire_create(&h->wire, f ? f : &nf, vclock, h) == 0);
	emp_conf_defaults(&h->conf);
	h->conf.peers = calloc((size_t)n, sizeof(*h->conf.peers));
	h->conf.npeers = n;
	for (int i = 0; i < n; i++) {
		uint8_t m[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(h->mac[i], m, 6);
		memcpy(h->conf.peers[i].mac, m, 6);
		snprintf(h->conf.peers[i].name, sizeof(h->conf.peers[i].name), "h%d", i);
		h->conf.peers[i].ip = (uint32_t)(0x0a000001 + i);
	}
	if (fwc)
		h->fwc = *fwc;
	else
		emp__fw_config_defaults(&h->fwc);
	for (int i = 0; i < n; i++)
		open_ep(h, i);
}

void h_close(struct harness *h, int i)
{
	if (h->ep[i])
		emp_close(h->ep[i]);
	h->ep[i] = NULL;
}

void h_crash(struct harness *h, int i)
{
	if (h->ep[i])
		h->ep[i]->said_bye = 1;   /* the peers are not told (emp_goodbye) */
	h_close(h, i);
}

void h_restart(struct harness *h, int i)
{
	h_crash(h, i);
	open_ep(h, i);
}

void h_free(struct harness *h)
{
	for (int i = 0; i < h->n; i++)
		h_close(h, i);
	for (int i = 0; i < h->nraw; i++) {
		struct rawport *r = h->raw[i];
		emp__sim_ops.close(r->port);
		free(r->q);
		free(r);
	}
	h->nraw = 0;
	emp_sim_wire_destroy(h->wire);
	emp_conf_free(&h->conf);
}

emp_addr_t h_addr(int host)
{
	emp_addr_t a = { (uint16_t)host, 1 };
	return a;
}

static void raw_pull_all(struct harness *h);

static int run(struct harness *h, int only, int (*done)(void *), void *arg, uint64_t max_ns)
{
	uint64_t end = h->now + max_ns;
	for (;;) {
		for (int round = 0; round < 1000; round++) {
			int busy = 0;
			for (int i = 0; i < h->n; i++) {
				if (!h->ep[i] || (only >= 0 && i != only))
					continue;
				emp_progress(h->ep[i]);
				busy |= emp__fw_busy(h->ep[i]->fw);
			}
			raw_pull_all(h);
			if (done && done(arg))
				return 1;
			uint64_t w = emp_sim_wire_next_event(h->wire);
			if (!busy && (w == UINT64_MAX || w > h->now))
				break;
		}
		uint64_t next = emp_sim_wire_next_event(h->wire);
		for (int i = 0; i < h->n; i++)
			if (h->ep[i] && (only < 0 || i == only)) {
				uint64_t d = emp__fw_next_deadline(h->ep[i]->fw);
				if (d < next)
					next = d;
			}
		if (next == UINT64_MAX || next > end) {
			h->now = end;
			return done ? done(arg) : 0;
		}
		h->now = next > h->now ? next : h->now + 1;
	}
}

int h_run(struct harness *h, int (*done)(void *), void *arg, uint64_t max_ns)
{
	return run(h, -1, done, arg, max_ns);
}

int h_run_only(struct harness *h, int i, int (*done)(void *), void *arg, uint64_t max_ns)
{
	return run(h, i, done, arg, max_ns);
}

struct one { emp_endpoint_t *ep; emp_req_t *r; struct emp_status *st; int got; };

static int one_done(void *arg)
{
	struct one *o = arg;
	if (!o->got)
		o->got = emp_test(o->ep, o->r, o->st) == 1;
	return o->got;
}

int h_wait(struct harness *h, int i, emp_req_t *r, struct emp_status *st, uint64_t max_ns)
{
	struct one o = { h->ep[i], r, st, 0 };
	return h_run(h, one_done, &o, max_ns);
}

struct emp_counters h_ctr(struct harness *h, int i)
{
	struct emp_counters c;
	emp_get_counters(h->ep[i], &c);
	return c;
}

void h_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *b = buf;
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		b[i] = (uint8_t)x;
	}
}

int h_check(const void *buf, size_t len, uint32_t seed)
{
	const uint8_t *b = buf;
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		if (b[i] != (uint8_t)x)
			return 0;
	}
	return 1;
}

void h_xfer(struct harness *h, int a, int b, size_t len, uint32_t tag, uint32_t seed, uint64_t max_ns)
{
	uint8_t *src = malloc(len + 1), *dst = malloc(len + 1);
	CHECK(src && dst);
	h_fill(src, len, seed);
	memset(dst, 0xa5, len + 1);
	struct iovec si = { src, len }, di = { dst, len };
	emp_req_t *rr, *sr;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(h->ep[b], h_addr(a), tag, &di, 1, &rr), 0);
	CHECK_EQ(emp_post_send(h->ep[a], h_addr(b), tag, &si, 1, &sr), 0);
	CHECK(h_wait(h, b, rr, &st, max_ns));
	CHECK_EQ(st.result, (long long)len);
	CHECK_EQ(st.msg_len, (long long)len);
	CHECK_EQ(st.source.host, a);
	CHECK_EQ(st.source.ep, 1);
	CHECK_EQ(st.tag, tag);
	CHECK(h_wait(h, a, sr, &st, max_ns));
	CHECK_EQ(st.result, (long long)len);
	CHECK_MSG(h_check(dst, len, seed), "len %zu: bytes differ", len);
	CHECK_EQ(dst[len], 0xa5);
	free(src);
	free(dst);
}

/* ---- raw frames ---- */

void *h_raw_open(struct harness *h, const uint8_t mac[6])
{
	char err[128] = "";
	struct emp_dev_params prm = { .wire = h->wire, .mac = mac, .err = err, .errlen = sizeof(err) };
	struct rawport *r = calloc(1, sizeof(*r));
	CHECK(r && h->nraw < H_MAX);
	int rc = emp__sim_ops.open(&prm, &r->port);
	CHECK_MSG(rc == 0, "raw port: %d %s", rc, err);
	r->q = malloc(sizeof(*r->q) * RAWQ_MAX);
	CHECK(r->q);
	h->raw[h->nraw++] = r;
	return r;
}

void h_raw_send(struct harness *h, void *port, const void *frame, size_t len)
{
	struct rawport *r = port;
	struct emp_txframe t = { .hdr = frame, .hdr_len = (uint32_t)len };
	(void)h;
	CHECK_EQ(emp__sim_ops.tx_burst(r->port, &t, 1), 1);
}

/* take everything deliverable now off the wire into the port's queue */
static void raw_pull(struct rawport *r)
{
	struct emp_rxframe rx[64];
	int n;
	while ((n = emp__sim_ops.rx_burst(r->port, rx, 64)) > 0) {
		for (int i = 0; i < n; i++) {
			if (r->nq == RAWQ_MAX || rx[i].len > sizeof(r->q[0].b)) {
				r->lost++;
				continue;
			}
			r->q[r->nq].len = rx[i].len;
			memcpy(r->q[r->nq].b, rx[i].data, rx[i].len);
			r->nq++;
		}
		emp__sim_ops.rx_release(r->port, (unsigned)n);
	}
}

static void raw_pull_all(struct harness *h)
{
	for (int i = 0; i < h->nraw; i++)
		raw_pull(h->raw[i]);
}

int h_raw_recv(struct harness *h, void *port, struct h_raw_frame *out, int max)
{
	struct rawport *r = port;
	(void)h;
	raw_pull(r);
	CHECK_EQ(r->lost, 0);
	int n = r->nq;
	for (int i = 0; i < n && i < max && out; i++)
		out[i] = r->q[i];
	r->nq = 0;
	return n;
}

static void p16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void p32(uint8_t *p, uint32_t v) { p16(p, (uint16_t)(v >> 16)); p16(p + 2, (uint16_t)v); }

size_t h_frame_build(const struct h_frame *f, uint8_t *buf)
{
	memcpy(buf, f->dst, 6);
	memcpy(buf + 6, f->src, 6);
	p16(buf + 12, f->ethertype);
	uint8_t *c = buf + EMP_ETH_HLEN;
	uint16_t flags = f->flags | (f->csum ? EMP_F_CSUM : 0);
	p32(c + EMP_C_CSUM, 0);
	p16(c + EMP_C_VTF, EMP_VTF(f->version, f->type, flags));
	p16(c + EMP_C_DST_EP, f->dst_ep);
	p16(c + EMP_C_SRC_EP, f->src_ep);
	p32(c + EMP_C_DST_INC, f->dst_inc);
	p32(c + EMP_C_SRC_INC, f->src_inc);
	p16(c + EMP_C_SESSION, f->session);
	p16(c + EMP_C_CREDITS, f->credits);
	p32(c + EMP_C_MSG_ID, f->msg_id);
	uint8_t *b = c + EMP_HDR_LEN;
	size_t body = 0;
	switch (f->type) {
	case EMP_T_DATA:
		b[EMP_D_FRAME] = (uint8_t)(f->frame >> 16);
		p16(b + EMP_D_FRAME + 1, (uint16_t)f->frame);
		p32(b + EMP_D_MSG_LEN, f->msg_len);
		p32(b + EMP_D_TAG, f->tag);
		p16(b + EMP_D_FRAG, f->frag);
		uint32_t back = f->prev ? f->msg_id - f->prev : 0;   /* the wire's 8-bit distance */
		b[EMP_D_PREV] = (uint8_t)(back > EMP_PREV_FAR ? EMP_PREV_FAR : back);
		if (flags & EMP_F_PIGGY) {
			p32(b + EMP_DATA_HDR_LEN, f->piggy_msg);
			p32(b + EMP_DATA_HDR_LEN + 4, f->piggy_nframes);
			p16(b + EMP_DATA_HDR_LEN + 8, f->piggy_session);
			p16(b + EMP_DATA_HDR_LEN + 10, 0);
			b += EMP_PIGGY_LEN;
			body = EMP_PIGGY_LEN;
		}
		if (f->payload)
			memcpy(b + EMP_DATA_HDR_LEN, f->payload, f->plen);
		else
			memset(b + EMP_DATA_HDR_LEN, 0, f->plen);
		body += EMP_DATA_HDR_LEN + (size_t)f->plen;
		break;
	case EMP_T_ACK:
		p32(b, f->cum);
		p32(b + 4, f->nframes);
		p32(b + 8, (uint32_t)(f->sack >> 32));
		p32(b + 12, (uint32_t)f->sack);
		body = EMP_ACK_HDR_LEN;
		break;
	case EMP_T_HELLO:
	case EMP_T_HELLO_ACK:
		p32(b, f->mtu);
		p32(b + 4, f->nonce);
		body = EMP_HELLO_HDR_LEN;
		break;
	case EMP_T_STALE:
		p32(b, f->named);
		body = EMP_STALE_HDR_LEN;
		break;
	default:
		break;
	}
	size_t len = EMP_ETH_HLEN + EMP_HDR_LEN + body;
	if (f->csum)
		p32(c, emp__crc32c(0, c + 4, len - EMP_ETH_HLEN - 4));
	return len;
}

static uint16_t g16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t g32(const uint8_t *p) { return (uint32_t)g16(p) << 16 | g16(p + 2); }

int h_frame_parse(const uint8_t *buf, uint32_t len, struct h_frame *f)
{
	memset(f, 0, sizeof(*f));
	if (len < EMP_ETH_HLEN + EMP_HDR_LEN)
		return -1;
	memcpy(f->dst, buf, 6);
	memcpy(f->src, buf + 6, 6);
	f->ethertype = g16(buf + 12);
	const uint8_t *c = buf + EMP_ETH_HLEN, *b = c + EMP_HDR_LEN;
	uint32_t avail = len - EMP_ETH_HLEN - EMP_HDR_LEN;
	uint16_t vtf = g16(c + EMP_C_VTF);
	f->version = (uint8_t)EMP_VTF_VERSION(vtf);
	f->type = (uint8_t)EMP_VTF_TYPE(vtf);
	f->flags = (uint16_t)EMP_VTF_FLAGS(vtf);
	f->csum = !!(f->flags & EMP_F_CSUM);
	f->dst_ep = g16(c + EMP_C_DST_EP);
	f->src_ep = g16(c + EMP_C_SRC_EP);
	f->dst_inc = g32(c + EMP_C_DST_INC);
	f->src_inc = g32(c + EMP_C_SRC_INC);
	f->session = g16(c + EMP_C_SESSION);
	f->credits = g16(c + EMP_C_CREDITS);
	f->msg_id = g32(c + EMP_C_MSG_ID);
	switch (f->type) {
	case EMP_T_DATA:
		if (avail < EMP_DATA_HDR_LEN)
			return -1;
		f->frame = (uint32_t)b[EMP_D_FRAME] << 16 | g16(b + EMP_D_FRAME + 1);
		f->msg_len = g32(b + EMP_D_MSG_LEN);
		f->tag = g32(b + EMP_D_TAG);
		f->frag = g16(b + EMP_D_FRAG);
		f->prev = b[EMP_D_PREV] ? f->msg_id - b[EMP_D_PREV] : 0;
		/* the payload length is not on the wire: frag bytes, the last frame the rest */
		uint64_t at = (uint64_t)f->frame * f->frag;
		f->plen = (uint16_t)(!f->frag || at >= f->msg_len ? 0 : f->msg_len - at < f->frag ? f->msg_len - at : f->frag);
		uint32_t extra = (f->flags & EMP_F_PIGGY) ? EMP_PIGGY_LEN : 0;
		if (avail < EMP_DATA_HDR_LEN + extra + (uint32_t)f->plen)
			return -1;
		if (extra) {
			f->piggy_msg = g32(b + EMP_DATA_HDR_LEN);
			f->piggy_nframes = g32(b + EMP_DATA_HDR_LEN + 4);
			f->piggy_session = g16(b + EMP_DATA_HDR_LEN + 8);
		}
		f->payload = b + EMP_DATA_HDR_LEN + extra;
		break;
	case EMP_T_ACK:
		if (avail < EMP_ACK_HDR_LEN)
			return -1;
		f->cum = g32(b);
		f->nframes = g32(b + 4);
		f->sack = (uint64_t)g32(b + 8) << 32 | g32(b + 12);
		break;
	case EMP_T_HELLO:
	case EMP_T_HELLO_ACK:
		if (avail < EMP_HELLO_HDR_LEN)
			return -1;
		f->mtu = g32(b);
		f->nonce = g32(b + 4);
		break;
	case EMP_T_STALE:
		if (avail < EMP_STALE_HDR_LEN)
			return -1;
		f->named = g32(b);
		break;
	default:
		break;
	}
	return 0;
}

uint32_t h_incarnation(struct harness *h, int i)
{
	CHECK(h->ep[i]);
	return h->ep[i]->fwc.incarnation;
}

void h_frame_as(struct harness *h, int from, int to, uint8_t type, struct h_frame *f)
{
	memset(f, 0, sizeof(*f));
	memcpy(f->dst, h->mac[to], 6);
	memcpy(f->src, h->mac[from], 6);
	f->ethertype = h->fwc.ethertype;
	f->version = EMP_PROTO_VERSION;
	f->type = type;
	f->dst_ep = 1;
	f->src_ep = 1;
	f->src_inc = h->ep[from] ? h_incarnation(h, from) : 0;
	f->dst_inc = h->ep[to] ? h_incarnation(h, to) : 0;
	f->mtu = 1500;
	if (!h->ep[from] || !h->ep[to])
		return;
	if (type == EMP_T_ACK) {
		/* acks travel in the data sender's (to's) session toward from */
		int32_t p = emp__peer_get(h->ep[to]->fw, (uint16_t)from, 1, 0);
		if (p != NIL)
			f->session = h->ep[to]->fw->peer[p].tx_session;
	} else {
		int32_t p = emp__peer_get(h->ep[from]->fw, (uint16_t)to, 1, 0);
		if (p != NIL)
			f->session = h->ep[from]->fw->peer[p].tx_session;
	}
}

/* ---- traffic ---- */

static void put_le32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get_le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static uint32_t msg_seed(const struct h_msg *m, int i) { return m->seed ? m->seed : 0x5eed0000u + (uint32_t)i; }

/* content: the message index in the first 4 bytes (if it has them), then the pattern */
static void msg_fill(uint8_t *b, const struct h_msg *m, int i)
{
	if (m->len >= 4) {
		put_le32(b, (uint32_t)i);
		h_fill(b + 4, m->len - 4, msg_seed(m, i));
	} else {
		h_fill(b, m->len, msg_seed(m, i));
	}
}

static int msg_ok(const uint8_t *b, const struct h_msg *m, int i)
{
	if (m->len >= 4)
		return get_le32(b) == (uint32_t)i && h_check(b + 4, m->len - 4, msg_seed(m, i));
	return h_check(b, m->len, msg_seed(m, i));
}

int h_req_done(void *req)
{
	return __atomic_load_n(&((emp_req_t *)req)->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

struct tr { struct h_msg *m; int n, scur, rcur; };

static int tr_done(void *arg)
{
	struct tr *t = arg;
	while (t->scur < t->n && h_req_done(t->m[t->scur].sr))
		t->scur++;
	while (t->rcur < t->n && h_req_done(t->m[t->rcur].rr))
		t->rcur++;
	return t->scur == t->n && t->rcur == t->n;
}

void h_traffic(struct harness *h, struct h_msg *m, int n, uint64_t max_ns)
{
	struct emp_counters c0[H_MAX], c1[H_MAX];
	uint64_t nrecv[H_MAX] = { 0 }, nsent[H_MAX] = { 0 }, brecv[H_MAX] = { 0 };
	emp_req_t *sentinel[H_MAX] = { 0 };
	uint8_t sbuf[H_MAX][64];
	for (int i = 0; i < h->n; i++)
		if (h->ep[i])
			c0[i] = h_ctr(h, i);
	CHECK(n > 0);
	uint32_t wcap[H_MAX] = { 0 };         /* wildcard receives: room for any of their messages */
	for (int i = 0; i < n; i++) {
		CHECK(m[i].from >= 0 && m[i].from < h->n && m[i].to >= 0 && m[i].to < h->n);
		CHECK(m[i].len >= 4 || (!m[i].recv_any_host && !m[i].recv_any_tag));
		if ((m[i].recv_any_host || m[i].recv_any_tag) && m[i].len > wcap[m[i].to])
			wcap[m[i].to] = m[i].len;
	}
	for (int i = 0; i < n; i++) {
		uint32_t cap = m[i].recv_any_host || m[i].recv_any_tag ? wcap[m[i].to] : m[i].len;
		m[i].sbuf = malloc(m[i].len + 1);
		m[i].rbuf = malloc(cap + 1);
		CHECK(m[i].sbuf && m[i].rbuf);
		msg_fill(m[i].sbuf, &m[i], i);
		memset(m[i].rbuf, 0xee, cap + 1);
		nrecv[m[i].to]++;
		brecv[m[i].to] += m[i].len;
		nsent[m[i].from]++;
	}
	for (int i = 0; i < n; i++) {
		int wild = m[i].recv_any_host || m[i].recv_any_tag;
		struct iovec v = { m[i].rbuf, wild ? wcap[m[i].to] : m[i].len };
		emp_addr_t a = m[i].recv_any_host ? (emp_addr_t){ EMP_ANY_HOST, EMP_ANY_EP } : h_addr(m[i].from);
		uint32_t tag = m[i].recv_any_tag ? EMP_ANY_TAG : m[i].tag;
		CHECK_EQ(emp_post_recv(h->ep[m[i].to], a, tag, &v, 1, &m[i].rr), 0);
	}
	for (int i = 0; i < h->n; i++) {
		if (!nrecv[i])
			continue;
		struct iovec v = { sbuf[i], sizeof(sbuf[i]) };
		CHECK_EQ(emp_post_recv(h->ep[i], (emp_addr_t){ EMP_ANY_HOST, EMP_ANY_EP }, EMP_ANY_TAG, &v, 1,
				       &sentinel[i]), 0);
	}
	for (int i = 0; i < n; i++) {
		struct iovec v = { m[i].sbuf, m[i].len };
		CHECK_EQ(emp_post_send(h->ep[m[i].from], h_addr(m[i].to), m[i].tag, &v, 1, &m[i].sr), 0);
	}
	struct tr t = { m, n, 0, 0 };
	int ok = h_run(h, tr_done, &t, max_ns);
	CHECK_MSG(ok, "traffic incomplete after %llu ns: sends %d/%d, receives %d/%d done",
		  (unsigned long long)max_ns, t.scur, n, t.rcur, n);
	/* a little more time: anything delivered twice would land in the sentinel */
	h_run(h, NULL, NULL, 20000000);
	for (int i = 0; i < n; i++) {
		CHECK_EQ(emp_test(h->ep[m[i].from], m[i].sr, &m[i].sst), 1);
		CHECK_EQ(emp_test(h->ep[m[i].to], m[i].rr, &m[i].rst), 1);
	}
	char *got = calloc((size_t)n, 1);
	int *last = malloc(sizeof(int) * (size_t)n);     /* per message index: last index seen in its stream */
	CHECK(got && last);
	for (int i = 0; i < n; i++) {
		CHECK_MSG(m[i].sst.result == (int64_t)m[i].len, "send %d (%d->%d len %u): result %lld", i,
			  m[i].from, m[i].to, m[i].len, (long long)m[i].sst.result);
		const struct emp_status *st = &m[i].rst;
		int k = i;
		if (m[i].recv_any_host || m[i].recv_any_tag) {
			/* which message did this wildcard receive get? */
			CHECK_MSG(st->result >= 4, "recv %d: result %lld", i, (long long)st->result);
			k = (int)get_le32(m[i].rbuf);
			CHECK_MSG(k >= 0 && k < n, "recv %d: message index %d", i, k);
			CHECK_MSG(m[k].recv_any_host || m[k].recv_any_tag, "recv %d got exact message %d", i, k);
			CHECK_MSG(m[k].to == m[i].to, "recv %d got message %d for host %d", i, k, m[k].to);
			CHECK_MSG(!m[i].recv_any_host ? m[k].from == m[i].from : 1, "recv %d from %d", i, m[k].from);
			CHECK_MSG(!m[i].recv_any_tag ? m[k].tag == m[i].tag : 1, "recv %d tag %u", i, m[k].tag);
		}
		CHECK_MSG(!got[k], "message %d delivered twice", k);
		got[k] = 1;
		CHECK_MSG(st->result == (int64_t)m[k].len, "recv %d (msg %d %d->%d len %u): result %lld", i, k,
			  m[k].from, m[k].to, m[k].len, (long long)st->result);
		CHECK_EQ(st->msg_len, m[k].len);
		CHECK_EQ(st->source.host, m[k].from);
		CHECK_EQ(st->source.ep, 1);
		CHECK_EQ(st->tag, m[k].tag);
		CHECK_MSG(msg_ok(m[i].rbuf, &m[k], k), "recv %d: bytes of message %d (len %u) differ", i, k,
			  m[k].len);
		CHECK_EQ(m[i].rbuf[(m[i].recv_any_host || m[i].recv_any_tag) ? wcap[m[i].to] : m[i].len], 0xee);
		/* per (from, to, tag), later receives got later messages */
		last[i] = k;
		for (int j = i - 1; j >= 0; j--) {
			if (m[j].to != m[i].to || !got[last[j]] || m[last[j]].from != m[k].from ||
			    m[last[j]].tag != m[k].tag)
				continue;
			CHECK_MSG(last[j] < k, "order: recv %d got msg %d, earlier recv %d got msg %d", i, k, j,
				  last[j]);
			break;
		}
	}
	for (int i = 0; i < n; i++)
		CHECK_MSG(got[i], "message %d never delivered", i);
	for (int i = 0; i < h->n; i++) {
		if (!sentinel[i])
			continue;
		struct emp_status st;
		CHECK_EQ(emp_test(h->ep[i], sentinel[i], &st), 0);
		CHECK_EQ(emp_cancel(h->ep[i], sentinel[i]), 0);
		CHECK_EQ(emp_test(h->ep[i], sentinel[i], &st), 1);
		CHECK_EQ(st.result, -ECANCELED);
	}
	for (int i = 0; i < h->n; i++) {
		if (!h->ep[i])
			continue;
		c1[i] = h_ctr(h, i);
		CHECK_EQ(c1[i].msgs_received - c0[i].msgs_received, nrecv[i]);
		CHECK_EQ(c1[i].bytes_received - c0[i].bytes_received, brecv[i]);
		CHECK_EQ(c1[i].msgs_sent - c0[i].msgs_sent, nsent[i]);
		CHECK_EQ(c1[i].recv_errors - c0[i].recv_errors, 0);
		CHECK_EQ(c1[i].cancelled - c0[i].cancelled, nrecv[i] ? 1 : 0);       /* the sentinel */
		CHECK_EQ(c1[i].send_errors - c0[i].send_errors, 0);
	}
	for (int i = 0; i < n; i++) {
		free(m[i].sbuf);
		free(m[i].rbuf);
		m[i].sbuf = m[i].rbuf = NULL;
	}
	free(got);
	free(last);
}
