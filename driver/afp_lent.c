/* afp_lent.c: receive-ring slots lent to the engine (rx_hold, rx_unhold, rx_urgent: firmware/lent.c). */
#include "afp_int.h"

/* Lending (firmware/lent.c): a lent slot stays TP_STATUS_USER when the
 * burst is released; the tail passes it, and the head stops at it a lap
 * later until it is given back. The oldest lent slot within a quarter of
 * the ring ahead of the head is urgent. All under the engine lock. */
uint32_t emp__afp_rx_hold(void *priv, unsigned i, uint32_t owner)
{
	struct afp *a = priv;
	if (!a->hold_ok || i >= a->rslot_n || !owner || a->lq_n == a->nframes)
		return 0;
	unsigned s = a->rslot_of[i];
	if (a->skip[s])
		return 0;
	a->skip[s] = AFP_LENT;
	a->owner[s] = owner;
	a->lq[(a->lq_head + a->lq_n++) % a->nframes] = s;
	return s + 1;
}

void emp__afp_rx_unhold(void *priv, uint32_t tok)
{
	struct afp *a = priv;
	unsigned s = tok - 1;
	if (!tok || s >= a->nframes || a->skip[s] != AFP_LENT)
		return;
	a->owner[s] = 0;
	int unswept = 0;                 /* handed out in the burst not yet released: the sweep's */
	for (unsigned k = 0; k < a->held && !unswept; k++)
		unswept = (a->tail + k) % a->nframes == s;
	if (unswept) {
		a->skip[s] = AFP_GIVEN;
		return;
	}
	a->skip[s] = 0;
	__atomic_store_n(&emp__afp_slot(a, s)->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
}

uint32_t emp__afp_rx_urgent(void *priv, uint32_t *owner)
{
	struct afp *a = priv;
	while (a->lq_n && a->skip[a->lq[a->lq_head]] != AFP_LENT) {
		a->lq_head = (a->lq_head + 1) % a->nframes;
		a->lq_n--;
	}
	if (!a->lq_n)
		return 0;
	unsigned s = a->lq[a->lq_head];
	unsigned ahead = (s + a->nframes - a->head) % a->nframes;
	if (ahead >= a->nframes / 4)
		return 0;
	*owner = a->owner[s];
	return s + 1;
}
