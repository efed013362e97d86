/* lent.c: frames of a receive left in the device's ring until the host reads them, instead of copied into its buffers. */
#include "fw_int.h"

/* A receive whose host asked for it (desc lend, nlend) keeps the frames
 * after the first of a message of 16 KiB or more (EMP_LEND_MIN_BYTES) where
 * the device put them: the host copies them out of the device straight into
 * the reader's buffer, one copy instead of two. The first frame (the
 * message's own header) is always copied. Frames go back to the device when
 * the host has read them (emp__fw_lent_return), when the receive ends in an
 * error (dropped), and before its buffers move (emp__fw_recv_resg: copied in
 * first). A device whose ring comes round to a frame still lent asks for it
 * (rx_urgent): the engine then copies all of that receive's frames into its
 * buffers. All of it under the engine lock. */

static void give_back(struct emp_fw *fw, struct emp_desc *d, uint32_t f)
{
	fw->ops->rx_unhold(fw->dev, d->lend[f].tok);
	d->lend[f].tok = 0;
	d->lend[f].p = 0;
	__atomic_store_n(&d->lent, d->lent - 1, __ATOMIC_RELEASE);
}

/* 1 if frame (its payload at the device's frame fw->rx_cur) stays lent */
int emp__lent_take(struct emp_fw *fw, int32_t r, uint32_t frame, const uint8_t *payload, uint32_t len)
{
	struct emp_desc *d = &fw->desc[r];
	const struct rec *x = &fw->rec[r];
	if (!d->lend || d->lend_off || frame == 0 || frame >= d->nlend || x->len < EMP_LEND_MIN_BYTES ||
	    fw->rx_cur < 0 || !fw->ops->rx_hold ||
	    (uint64_t)frame * x->frag + len > x->cap || d->lend[frame].tok)
		return 0;
	uint32_t tok = fw->ops->rx_hold(fw->dev, (unsigned)fw->rx_cur, (uint32_t)r + 1);
	if (!tok)
		return 0;
	d->lend[frame] = (struct emp_lend){ payload, len, tok };
	d->lend_frag = x->frag;
	__atomic_store_n(&d->lent, d->lent + 1, __ATOMIC_RELEASE);
	fw->ctr.rx_lent++;
	return 1;
}

/* the frames whose bytes all lie before upto go back to the device, copied
 * into the receive's buffers first if place */
static void give_back_to(struct emp_fw *fw, struct emp_desc *d, uint64_t upto, int place)
{
	for (uint32_t f = 1; d->lent && f < d->nlend; f++) {
		if (!d->lend[f].tok || (uint64_t)f * d->lend_frag + d->lend[f].len > upto)
			continue;
		if (place) {
			emp__place(d, (uint64_t)f * d->lend_frag, d->lend[f].p, d->lend[f].len);
			fw->ctr.lent_placed++;
		}
		give_back(fw, d, f);
	}
}

/* every frame still lent copied into the buffers, and given back */
void emp__lent_place(struct emp_fw *fw, int32_t r)
{
	give_back_to(fw, &fw->desc[r], UINT64_MAX, 1);
}

/* every frame still lent given back, its bytes not wanted */
void emp__lent_drop(struct emp_fw *fw, int32_t r)
{
	give_back_to(fw, &fw->desc[r], UINT64_MAX, 0);
}

/* the device's ring comes round to frames still lent: their receives take
 * them into their buffers (a reader that does not come back for a while);
 * for a device with rx_urgent (the caller looks) */
void emp__lent_urgent(struct emp_fw *fw)
{
	uint32_t owner = 0, tok;
	for (int n = 0; n < 64 && (tok = fw->ops->rx_urgent(fw->dev, &owner)); n++) {
		uint32_t r = owner - 1;
		if (owner && r < fw->cfg.ndesc && fw->desc[r].lent) {
			emp__lent_place(fw, (int32_t)r);
			continue;
		}
		fw->ops->rx_unhold(fw->dev, tok);   /* nobody's (cannot happen): the device gets it back */
	}
}

void emp__fw_lent_copy(struct emp_fw *fw, uint32_t idx, uint64_t off, uint8_t *dst, uint64_t n)
{
	if (idx >= fw->cfg.ndesc)
		return;
	const struct emp_desc *d = &fw->desc[idx];
	uint64_t frag = d->lend_frag;
	while (n) {
		uint64_t f = frag ? off / frag : 0, in = off - f * frag;
		uint64_t k;
		if (frag && f < d->nlend && d->lend[f].tok) {
			k = d->lend[f].len > in ? d->lend[f].len - in : 0;
			if (!k)
				return;      /* beyond the frame's bytes: nothing there */
			if (k > n)
				k = n;
			memcpy(dst, d->lend[f].p + in, k);
		} else {
			k = frag ? frag - in : n;    /* up to the next frame that may be lent */
			if (k > n)
				k = n;
			emp__sg_copy(d, off, dst, k, 1);
		}
		dst += k;
		off += k;
		n -= k;
	}
}

void emp__fw_lent_return(struct emp_fw *fw, uint32_t idx, uint64_t upto)
{
	if (idx < fw->cfg.ndesc)
		give_back_to(fw, &fw->desc[idx], upto, 0);
}

void emp__fw_lent_place_all(struct emp_fw *fw)
{
	for (uint32_t r = 0; r < fw->cfg.ndesc; r++)
		if (fw->desc[r].lent)
			emp__lent_place(fw, (int32_t)r);
}
