/* bufcache.c: a closed connection's receive and send rings kept for the next connection instead of going back to malloc. */
/*
 * A connection's rings are large (EMP_SOCK_BUFS x EMP_SOCK_BUFSZ: 4 MiB each
 * by default) and a short connection touches a page or two of them. Given
 * back to malloc, two such rings at the top of the heap shrink it (brk: the
 * kernel flushes the TLB of every CPU the process's threads ran on, an
 * interrupt each), and the next connection grows it again and faults fresh
 * zeroed pages in: 1.1 brk and 1.6 page faults per connection on a connt
 * server. Up to BC_SLOTS rings wait here, each with its size; a new
 * connection takes one of its size (counted: es__bufstats); when all are
 * taken, a ring put back replaces one in turn (the oldest sizes leave). The cache is
 * lock-free (a fork in the middle of a put or get leaves at most one ring
 * unaccounted in the child). A ring left here keeps its touched pages: at
 * most BC_SLOTS rings' worth. A ring reused carries the bytes of its last
 * connection; the stream layer reads only what a receive completed into it.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "conn.h"

#define BC_SLOTS 4
#define BC_HDR 64                /* keeps the ring 64-byte aligned behind its header */

struct bc_hdr {
	size_t size;
};

static _Atomic(struct bc_hdr *) slots[BC_SLOTS];
struct es_bufstats es__bufstats;

void *es__ring_get(size_t size)
{
	for (int i = 0; i < BC_SLOTS; i++) {
		struct bc_hdr *h = atomic_load(&slots[i]);
		if (h && h->size == size && atomic_compare_exchange_strong(&slots[i], &h, NULL)) {
			atomic_fetch_add(&es__bufstats.reused, 1);
			return (uint8_t *)h + BC_HDR;
		}
	}
	struct bc_hdr *h = malloc(BC_HDR + size);
	if (!h)
		return NULL;
	h->size = size;
	atomic_fetch_add(&es__bufstats.fresh, 1);
	return (uint8_t *)h + BC_HDR;
}

void es__ring_put(void *p)
{
	if (!p)
		return;
	struct bc_hdr *h = (struct bc_hdr *)((uint8_t *)p - BC_HDR);
	for (int i = 0; i < BC_SLOTS; i++) {
		struct bc_hdr *none = NULL;
		if (!atomic_load(&slots[i]) && atomic_compare_exchange_strong(&slots[i], &none, h))
			return;
	}
	/* full: the newest stays (rings of a size no longer used leave in turn) */
	static atomic_uint next;
	free(atomic_exchange(&slots[atomic_fetch_add(&next, 1) % BC_SLOTS], h));
}
