/* request.c: posting sends and receives through the mailbox, test/wait/wait-any, cancel, persistent requests. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static inline uint32_t idx_of(struct emp_endpoint *ep, emp_req_t *r)
{
	return (uint32_t)(r - ep->desc);
}

static int valid_req(struct emp_endpoint *ep, emp_req_t *r)
{
	return ep && r && r >= ep->desc && r < ep->desc + ep->ndesc;
}

static emp_req_t *alloc_desc(struct emp_endpoint *ep)
{
	pthread_mutex_lock(&ep->post_lock);
	emp_req_t *d = ep->nfree ? &ep->desc[ep->free_idx[--ep->nfree]] : NULL;
	pthread_mutex_unlock(&ep->post_lock);
	if (d)
		__atomic_store_n(&d->stat, EMP_DS_HOST, __ATOMIC_RELAXED);
	return d;
}

static void free_desc(struct emp_endpoint *ep, emp_req_t *d)
{
	uint32_t i = idx_of(ep, d);
	free(ep->ext_sg[i]);
	ep->ext_sg[i] = NULL;
	__atomic_store_n(&d->stat, EMP_DS_FREE, __ATOMIC_RELAXED);
	pthread_mutex_lock(&ep->post_lock);
	ep->free_idx[ep->nfree++] = i;
	pthread_mutex_unlock(&ep->post_lock);
}

static void mb_push(struct emp_endpoint *ep, uint32_t v)
{
	pthread_mutex_lock(&ep->post_lock);
	uint32_t h = ep->mb.head;
	ep->mb.ring[h & ep->mb.mask] = v;
	__atomic_store_n(&ep->mb.head, h + 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&ep->post_lock);
}

static int fill(struct emp_endpoint *ep, emp_req_t *d, int op, emp_addr_t a, uint32_t tag,
		const struct iovec *iov, int iovcnt)
{
	uint32_t i = idx_of(ep, d);
	struct emp_sg *sg = d->sg_inline;
	if (iovcnt > EMP_DESC_INLINE_SG) {
		sg = malloc(sizeof(*sg) * (size_t)iovcnt);
		if (!sg)
			return -ENOMEM;
		ep->ext_sg[i] = sg;
	}
	uint64_t len = 0;
	for (int k = 0; k < iovcnt; k++) {
		sg[k].base = iov[k].iov_base;
		sg[k].len = iov[k].iov_len;
		len += iov[k].iov_len;
	}
	d->op = (uint8_t)op;
	d->host = a.host;
	d->ep = a.ep;
	d->tag = tag;
	d->nsg = (uint16_t)iovcnt;
	d->sg = sg;
	d->len = len;
	d->cap = len;
	d->result = 0;
	return 0;
}

static int check_args(struct emp_endpoint *ep, int op, emp_addr_t a, uint32_t tag,
		      const struct iovec *iov, int iovcnt, emp_req_t **req)
{
	if (!ep || !req || iovcnt < 0 || iovcnt > 1024 || (iovcnt && !iov))
		return -EINVAL;
	if (op == EMP_OP_SEND && (a.host >= ep->conf.npeers || a.ep == EMP_ANY_EP || tag == EMP_ANY_TAG))
		return -EINVAL;
	if (op == EMP_OP_RECV && a.host != EMP_ANY_HOST && a.host >= ep->conf.npeers)
		return -EINVAL;
	uint64_t len = 0;
	for (int k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	if (op == EMP_OP_SEND && len > 0xffffffffull)
		return -EMSGSIZE;
	return 0;
}

static int prepare(struct emp_endpoint *ep, int op, emp_addr_t a, uint32_t tag,
		   const struct iovec *iov, int iovcnt, int persistent, emp_req_t **req)
{
	int rc = check_args(ep, op, a, tag, iov, iovcnt, req);
	if (rc)
		return rc;
	emp_req_t *d = alloc_desc(ep);
	if (!d)
		return -ENOBUFS;
	d->persistent = (uint8_t)persistent;
	d->user = NULL;
	rc = fill(ep, d, op, a, tag, iov, iovcnt);
	if (rc) {
		free_desc(ep, d);
		return rc;
	}
	*req = d;
	return 0;
}

/* Posts are in the mailbox: the engine takes them now, or (batching, or
 * inside the completion hook, whose drive loop takes them next) later. */
static void posted(struct emp_endpoint *ep, unsigned n, uint64_t bytes)
{
	if (emp__tl_dispatch)
		return;              /* the drive that runs the hook takes it next */
	if (emp__deferring(ep)) {
		/* batching: the engine takes them at the next drive (a wait, a
		 * flush, a full batch, or the progress thread's bound) */
		unsigned k = __atomic_add_fetch(&ep->deferred, n, __ATOMIC_RELAXED);
		uint64_t b = __atomic_add_fetch(&ep->deferred_bytes, bytes, __ATOMIC_RELAXED);
		if (k == n)
			__atomic_store_n(&ep->deferred_t0, emp__now(ep), __ATOMIC_RELAXED);
		if (k < EMP__DEFER_MAX && b < EMP__DEFER_BYTES)
			return;
	}
	emp__drive_post(ep);
}

/* a receive posted again, or freed: its frames still lent go back */
static void lent_reset(struct emp_endpoint *ep, emp_req_t *d)
{
	emp_recv_return(ep, d, UINT64_MAX);
	d->lend_off = 0;
}

int emp_start(emp_endpoint_t *ep, emp_req_t *d)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	uint32_t st = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	if (st != EMP_DS_HOST)
		return st == EMP_DS_POSTED ? -EBUSY : -EINVAL;
	lent_reset(ep, d);
	d->result = 0;
	__atomic_store_n(&d->stat, EMP_DS_POSTED, __ATOMIC_RELEASE);
	mb_push(ep, idx_of(ep, d));
	posted(ep, 1, d->len);
	return 0;
}

int emp_req_set_len(emp_endpoint_t *ep, emp_req_t *d, size_t len)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	if (__atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) != EMP_DS_HOST)
		return -EBUSY;
	if (d->nsg != 1 || len > d->cap)
		return -EINVAL;
	((struct emp_sg *)d->sg)[0].len = len;   /* the host's own copy while it owns d */
	d->len = len;
	return 0;
}

int emp_start_len(emp_endpoint_t *ep, emp_req_t *d, size_t len)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	if (__atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) == EMP_DS_HOST) {
		int r = emp_req_set_len(ep, d, len);
		if (r < 0)
			return r;
	}
	return emp_start(ep, d);
}

int emp_start_many(emp_endpoint_t *ep, emp_req_t **reqs, int n)
{
	int started = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		emp_req_t *d = reqs[i];
		if (!valid_req(ep, d) || __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) != EMP_DS_HOST)
			continue;
		lent_reset(ep, d);
		d->result = 0;
		__atomic_store_n(&d->stat, EMP_DS_POSTED, __ATOMIC_RELEASE);
		mb_push(ep, idx_of(ep, d));
		bytes += d->len;
		started++;
	}
	if (started)
		posted(ep, (unsigned)started, bytes);
	return started;
}

static int post(emp_endpoint_t *ep, int op, emp_addr_t a, uint32_t tag,
		const struct iovec *iov, int iovcnt, emp_req_t **req)
{
	emp_req_t *d;
	int rc = prepare(ep, op, a, tag, iov, iovcnt, 0, &d);
	if (rc)
		return rc;
	*req = d;
	return emp_start(ep, d);
}

int emp_post_send(emp_endpoint_t *ep, emp_addr_t to, uint32_t tag, const struct iovec *iov, int iovcnt,
		  emp_req_t **req)
{
	return post(ep, EMP_OP_SEND, to, tag, iov, iovcnt, req);
}

int emp_post_recv(emp_endpoint_t *ep, emp_addr_t from, uint32_t tag, const struct iovec *iov, int iovcnt,
		  emp_req_t **req)
{
	return post(ep, EMP_OP_RECV, from, tag, iov, iovcnt, req);
}

int emp_send_init(emp_endpoint_t *ep, emp_addr_t to, uint32_t tag, const struct iovec *iov, int iovcnt,
		  emp_req_t **req)
{
	return prepare(ep, EMP_OP_SEND, to, tag, iov, iovcnt, 1, req);
}

int emp_recv_init(emp_endpoint_t *ep, emp_addr_t from, uint32_t tag, const struct iovec *iov, int iovcnt,
		  emp_req_t **req)
{
	return prepare(ep, EMP_OP_RECV, from, tag, iov, iovcnt, 1, req);
}

int emp_req_free(emp_endpoint_t *ep, emp_req_t *d)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	uint32_t st = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	if (st == EMP_DS_POSTED)
		return -EBUSY;
	if (st == EMP_DS_FREE)
		return -EINVAL;
	lent_reset(ep, d);
	free(d->lend);
	d->lend = NULL;
	d->nlend = 0;
	free_desc(ep, d);
	return 0;
}

/* atomic: a completion hook in another thread may read it while the owner
 * clears it (a connection being torn down) */
void emp_req_set_user(emp_req_t *req, void *user) { __atomic_store_n(&req->user, user, __ATOMIC_RELEASE); }
void *emp_req_user(emp_req_t *req) { return __atomic_load_n(&req->user, __ATOMIC_ACQUIRE); }

/* Reap a descriptor the engine finished: 1, with st filled. */
static int reap(struct emp_endpoint *ep, emp_req_t *d, struct emp_status *st)
{
	if (st) {
		st->result = d->result;
		st->source.host = d->rhost;
		st->source.ep = d->rep;
		st->tag = d->rtag;
		st->msg_len = d->rlen;
	}
	if (d->persistent)
		__atomic_store_n(&d->stat, EMP_DS_HOST, __ATOMIC_RELEASE);
	else
		free_desc(ep, d);
	return 1;
}

static int done(emp_req_t *d)
{
	return __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

int emp_reap(emp_endpoint_t *ep, emp_req_t *d, struct emp_status *st)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	uint32_t s = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	if (s == EMP_DS_DONE)
		return reap(ep, d, st);
	return s == EMP_DS_POSTED ? 0 : -EINVAL;
}

int emp_test(emp_endpoint_t *ep, emp_req_t *d, struct emp_status *st)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	uint32_t s = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	if (s != EMP_DS_POSTED && s != EMP_DS_DONE)
		return -EINVAL;
	if (!done(d))
		emp__drive(ep);
	return done(d) ? reap(ep, d, st) : 0;
}

int emp_wait(emp_endpoint_t *ep, emp_req_t *d, struct emp_status *st, int64_t timeout_ns)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	uint32_t s = __atomic_load_n(&d->stat, __ATOMIC_ACQUIRE);
	if (s != EMP_DS_POSTED && s != EMP_DS_DONE)
		return -EINVAL;
	int rc = emp__wait_reqs(ep, &d, 1, timeout_ns);
	if (rc == -ETIMEDOUT)
		return 0;
	return rc < 0 ? rc : reap(ep, d, st);
}

int emp_wait_any(emp_endpoint_t *ep, emp_req_t **reqs, int n, struct emp_status *st, int64_t timeout_ns)
{
	if (!ep || !reqs || n <= 0)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		if (reqs[i] && !valid_req(ep, reqs[i]))
			return -EINVAL;
	int rc = emp__wait_reqs(ep, reqs, n, timeout_ns);
	if (rc >= 0)
		reap(ep, reqs[rc], st);
	return rc;
}

int emp_cancel_many(emp_endpoint_t *ep, emp_req_t **reqs, int n)
{
	int pushed = 0, cancelled = 0;
	for (int i = 0; i < n; i++)
		if (valid_req(ep, reqs[i]) && __atomic_load_n(&reqs[i]->stat, __ATOMIC_ACQUIRE) == EMP_DS_POSTED) {
			mb_push(ep, idx_of(ep, reqs[i]) | EMP_MB_CANCEL);
			pushed++;
		}
	if (pushed)
		emp__drive_sure(ep);      /* the cancels are seen before we answer */
	for (int i = 0; i < n; i++)
		if (valid_req(ep, reqs[i]) && done(reqs[i]) && reqs[i]->result == -ECANCELED)
			cancelled++;
	return cancelled;
}

int emp_cancel(emp_endpoint_t *ep, emp_req_t *d)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	if (__atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) != EMP_DS_POSTED)
		return done(d) ? -EBUSY : -EINVAL;
	mb_push(ep, idx_of(ep, d) | EMP_MB_CANCEL);
	emp__drive_sure(ep);      /* the cancel is seen before we answer */
	if (done(d) && d->result == -ECANCELED)
		return 0;
	return -EBUSY;
}

/* the request's own buffers (fill: inline, or the array it allocated) */
static const struct emp_sg *own_sg(struct emp_endpoint *ep, emp_req_t *d)
{
	uint32_t i = idx_of(ep, d);
	return ep->ext_sg[i] ? ep->ext_sg[i] : d->sg_inline;
}

/* the caller's vectors go to the engine as they are: the same layout */
_Static_assert(sizeof(struct iovec) == sizeof(struct emp_sg) &&
	       offsetof(struct iovec, iov_base) == offsetof(struct emp_sg, base) &&
	       offsetof(struct iovec, iov_len) == offsetof(struct emp_sg, len) &&
	       sizeof(((struct iovec *)0)->iov_len) == sizeof(((struct emp_sg *)0)->len), "iovec as emp_sg");

int emp_recv_redirect(emp_endpoint_t *ep, emp_req_t *d, const struct iovec *iov, int iovcnt)
{
	const struct emp_sg *sg = (const struct emp_sg *)(const void *)iov;
	unsigned nsg = iovcnt > 0 ? (unsigned)iovcnt : 0;
	if (!valid_req(ep, d) || !sg || !nsg || nsg > 0xffff || d->op != EMP_OP_RECV || d->sg != own_sg(ep, d))
		return -EINVAL;
	pthread_mutex_lock(&ep->eng_lock);
	uint16_t own = d->nsg;
	int r = emp__fw_recv_resg(ep->fw, idx_of(ep, d), sg, (uint16_t)nsg);
	if (r == 0)
		d->nsg_own = own;
	pthread_mutex_unlock(&ep->eng_lock);
	return r == 0 ? 0 : r == -EMP_EBUSY ? -EBUSY : -EINVAL;
}

int emp_recv_restore(emp_endpoint_t *ep, emp_req_t *d)
{
	if (!valid_req(ep, d))
		return -EINVAL;
	const struct emp_sg *own = own_sg(ep, d);
	if (d->sg == own)
		return 0;
	pthread_mutex_lock(&ep->eng_lock);
	int r = emp__fw_recv_unlend(ep->fw, idx_of(ep, d), own, d->nsg_own);
	pthread_mutex_unlock(&ep->eng_lock);
	return r;
}

unsigned emp_recv_lent(const emp_req_t *d) { return __atomic_load_n(&d->lent, __ATOMIC_ACQUIRE); }
int emp_recv_lends(const emp_req_t *d) { return d->lend != NULL; }

int emp_recv_lend(emp_endpoint_t *ep, emp_req_t *d, unsigned n)
{
	if (!valid_req(ep, d) || d->op != EMP_OP_RECV || n > 0xffff)
		return -EINVAL;
	if (__atomic_load_n(&d->stat, __ATOMIC_ACQUIRE) == EMP_DS_POSTED || emp_recv_lent(d))
		return -EBUSY;
	struct emp_lend *t = n ? calloc(n, sizeof(*t)) : NULL;
	if (n && !t)
		return -ENOMEM;
	free(d->lend);
	d->lend = t;
	d->nlend = n;
	return 0;
}

void emp_recv_copy(emp_endpoint_t *ep, emp_req_t *d, uint64_t off, void *dst, size_t n)
{
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_lent_copy(ep->fw, idx_of(ep, d), off, dst, n);
	pthread_mutex_unlock(&ep->eng_lock);
}

void emp_recv_return(emp_endpoint_t *ep, emp_req_t *d, uint64_t upto)
{
	if (!emp_recv_lent(d))
		return;
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_lent_return(ep->fw, idx_of(ep, d), upto);
	pthread_mutex_unlock(&ep->eng_lock);
}
