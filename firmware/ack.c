/* ack.c: acknowledgments: the receiver's collection acks and NACKs, the sender's ack processing and fast retransmit. */
#include "fw_int.h"

void emp__send_ack_raw(struct emp_fw *fw, int32_t p, uint32_t msg_id, uint32_t cum,
		       uint32_t nframes, uint64_t sack, uint16_t flags)
{
	uint8_t *b = emp__tx_slot(fw, p, EMP_T_ACK, flags, msg_id, fw->peer[p].rx_session, EMP_ACK_HDR_LEN);
	put32(b, cum);
	put32(b + 4, nframes);
	put64(b + 8, sack);
}

void emp__send_ack(struct emp_fw *fw, int32_t p, struct rec *r, uint16_t flags)
{
	emp__send_ack_raw(fw, p, r->msg_id, r->cum, r->nframes, r->sack, flags);
	r->since_ack = 0;
	r->deadline = 0;
}

void emp__rx_ack(struct emp_fw *fw, const struct hdr *h, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (!emp__tx_session_ok(pe, h)) {
		emp__drop(fw, EMP_DROP_STALE);       /* an ack from before a reset */
		return;
	}
	emp__fc_update(fw, pe, h->credits);
	if (h->len) {               /* 0: an ack that rode in a DATA frame */
		pe->rx_frames++;
		pe->rx_bytes += h->len;
	}
	fw->ctr.rx_acks++;
	if (h->flags & EMP_F_DUP)
		emp__timer_spurious(fw, pe, now);
	if (h->flags & EMP_F_NACK) {
		fw->ctr.rx_nacks++;
		if (!(h->flags & (EMP_F_STUCK | EMP_F_CHAIN | EMP_F_NORECV))) {
			/* a gap: this path loses frames, so duplicates may be answers
			 * to lost acks rather than early timers (emp__timer_spurious) */
			pe->lossy_at = now ? now : 1;
			pe->rto_floor = 0;
		}
	}
	int32_t r;
	for (r = pe->act.head; r != NIL; r = fw->rec[r].next)
		if (fw->rec[r].msg_id == h->msg_id)
			break;
	if (r == NIL) {
		emp__drop(fw, EMP_DROP_UNKNOWN_MSG);
		return;
	}
	struct rec *x = &fw->rec[r];
	if (h->flags & (EMP_F_STUCK | EMP_F_CHAIN)) {
		/* the receiver dropped everything from this message on (STUCK), or
		 * this message's later ones with the same tag (CHAIN): resend now */
		uint32_t chain = x->msg_id;
		for (int32_t q = r; q != NIL; q = fw->rec[q].next) {
			struct rec *y = &fw->rec[q];
			if (q != r && (h->flags & EMP_F_CHAIN)) {
				if (y->prev_id != chain)
					continue;
				chain = y->msg_id;
			}
			y->rtx |= emp__sent_mask(y) & ~y->sack;
			y->last_fast_rtx = now ? now : 1;
		}
		fw->ctr.fast_retransmits++;
		return;
	}
	uint32_t cum = get32(h->body), nframes = get32(h->body + 4);
	uint64_t sack = get64(h->body + 8);
	if (h->flags & EMP_F_NORECV)
		return;                               /* credits were the news */
	if ((nframes && nframes != x->nframes) || cum > x->sent_hi) {
		emp__drop(fw, EMP_DROP_BAD_INDEX);
		return;
	}
	uint32_t old_done = x->cum + (uint32_t)__builtin_popcountll(x->sack);
	if (cum > x->cum) {
		uint32_t d = cum - x->cum;
		x->sack = d >= 64 ? 0 : x->sack >> d;
		x->rtx = d >= 64 ? 0 : x->rtx >> d;
		x->cum = cum;
	}
	uint32_t back = x->cum - cum;
	x->sack |= (back >= 64 ? 0 : sack >> back) & emp__sent_mask(x);
	while (x->sack & 1) {
		x->sack >>= 1;
		x->rtx >>= 1;
		x->cum++;
	}
	x->rtx &= ~x->sack;
	if (x->probe_at && (x->probe_frame < x->cum ||
			    (x->probe_frame - x->cum < 64 && (x->sack >> (x->probe_frame - x->cum) & 1)))) {
		emp__timer_rtt_sample(fw, pe, now - x->probe_at, now);
		x->probe_at = 0;
	}
	uint32_t done = x->cum + (uint32_t)__builtin_popcountll(x->sack);
	uint32_t newly = done - old_done;
	pe->inflight_frames = pe->inflight_frames > newly ? pe->inflight_frames - newly : 0;
	if (done > old_done)
		emp__timer_ack_progress(fw, x, now);
	if (x->cum == x->nframes) {
		emp__dl_del(fw, &pe->act, r);
		if (pe->inflight_msgs)
			pe->inflight_msgs--;
		emp__complete(fw, r, (int64_t)x->len);
		return;
	}
	if ((h->flags & EMP_F_NACK) && (x->last_fast_rtx == 0 || now - x->last_fast_rtx >= fw->cfg.rto_ns / 4)) {
		/* frames below the highest one the receiver holds are missing: resend them now */
		uint64_t miss;
		if (x->sack) {
			unsigned top = 63 - (unsigned)__builtin_clzll(x->sack);
			miss = ((1ull << top) - 1) & ~x->sack;
		} else {
			miss = emp__sent_mask(x);
		}
		miss &= emp__sent_mask(x);
		if (miss) {
			x->rtx |= miss;
			x->last_fast_rtx = now ? now : 1;
			fw->ctr.fast_retransmits++;
		}
	}
}
