/* timers.c: protocol timers as event hooks: data sent, ack progress, frame received; retransmit and hello expiry. */
#include "fw_int.h"

static uint64_t sent_unacked(const struct rec *x)
{
	return emp__sent_mask(x) & ~x->sack;
}

void emp__timer_data_sent(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	if (x->deadline == 0) {
		x->deadline = now + x->rto;
		emp__arm(fw, x->deadline);
	}
}

/* A round-trip sample: the retransmit timeout follows the measured round
 * trip (srtt + 4 rttvar), never below the floor (the configured rto, raised
 * while retransmissions turn out spurious) nor above rto_max. */
void emp__timer_rtt_sample(struct emp_fw *fw, struct peer *pe, uint64_t rtt, uint64_t now)
{
	if (pe->rto_floor > fw->cfg.rto_ns && now - pe->spurious_at > EMP_SPURIOUS_QUIET_NS) {
		pe->rto_floor -= pe->rto_floor / 8;   /* quiet for a while: back toward the configured rto */
		if (pe->rto_floor < fw->cfg.rto_ns)
			pe->rto_floor = 0;
	}
	if (!pe->srtt) {
		pe->srtt = rtt;
		pe->rttvar = rtt / 2;
	} else {
		uint64_t err = rtt > pe->srtt ? rtt - pe->srtt : pe->srtt - rtt;
		pe->rttvar = (3 * pe->rttvar + err) / 4;
		pe->srtt = (7 * pe->srtt + rtt) / 8;
	}
	uint64_t rto = pe->srtt + 4 * pe->rttvar;
	if (rto < fw->cfg.rto_ns)
		rto = fw->cfg.rto_ns;
	if (rto < pe->rto_floor)
		rto = pe->rto_floor;
	pe->rto = min64(rto, fw->cfg.rto_max_ns);
}

/* The receiver already had a frame we resent (an ack flagged DUP): our
 * timer fired while the frame was still on its way, typically queued behind
 * a slower link or a descheduled receiver. The round-trip samples missed that
 * delay, so the floor under the RTO doubles (once per round of duplicates, up
 * to a quarter of rto_max). A lost ack also makes the receiver see a
 * duplicate, so on a path that lost frames in the last second (a gap was
 * reported) the floor stays down, and it decays after a quiet second
 * (emp__timer_rtt_sample). */
void emp__timer_spurious(struct emp_fw *fw, struct peer *pe, uint64_t now)
{
	if (pe->spurious_at && now - pe->spurious_at < pe->rto)
		return;
	pe->spurious_at = now ? now : 1;
	fw->ctr.spurious_rtx++;
	/* on a path that loses frames a duplicate is as likely the answer to a
	 * lost ack as to an early timer: a higher floor would only slow the
	 * recovery of real losses */
	if (pe->lossy_at && now - pe->lossy_at < EMP_SPURIOUS_QUIET_NS)
		return;
	uint64_t f = pe->rto_floor > fw->cfg.rto_ns ? pe->rto_floor : fw->cfg.rto_ns;
	uint64_t cap = fw->cfg.rto_max_ns / 4;
	if (cap < fw->cfg.rto_ns)
		cap = fw->cfg.rto_ns;
	f = min64(f * 2, cap);
	pe->rto_floor = f;
	if (pe->rto < f)
		pe->rto = f;
}

void emp__timer_ack_progress(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	x->retries = 0;
	x->rto = fw->peer[x->peer].rto;
	if (sent_unacked(x)) {
		x->deadline = now + x->rto;
		emp__arm(fw, x->deadline);
	} else {
		x->deadline = 0;
	}
}

/* A partial collection's delayed ack: ack_delay_ns after its first frame,
 * or for a bulk message after its last one (the flow paused; while frames
 * keep coming the collections and the sender's requests ack it). */
void emp__timer_frame_received(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	if (x->deadline == 0 || emp__bulk(fw, x)) {
		x->deadline = now + fw->cfg.ack_delay_ns;
		emp__arm_fine(fw, x->deadline);
	}
}

/* What a timeout resends. The first one since the message last progressed
 * sends two probes, its oldest unacked frame and its newest sent one, not
 * the whole window: a receiver that is slow rather than short of frames (its
 * queue takes longer to drain than the rto; a process switching its receive
 * ring) has them all, and a window sent again only lengthened its queue
 * (1600-4800 frames twice in a fresh process's first 20 MB). A receiver that
 * lost frames finds a gap below the newest probe and names it (NACK: resent
 * at once, emp__rx_ack), or the oldest probe fills it; a tail it never got
 * shows up the same way (the receiver names a gap again whenever a frame
 * asks for an ack, receive.c). The next timeout without progress resends all. */
static uint64_t timeout_resend(const struct rec *x)
{
	uint64_t un = sent_unacked(x);
	if (x->retries > 1 || !(un & (un - 1)))
		return un;
	return (un & (0 - un)) | (1ull << (63 - __builtin_clzll(un)));
}

/* A message's retransmit timer fired: resend what is unacked, back off, or
 * give up and return every send to this peer with an error. */
static int send_timeout(struct emp_fw *fw, int32_t p, struct rec *x, uint64_t now)
{
	fw->ctr.timeouts++;
	if (++x->retries > fw->cfg.retries) {
		struct peer *pe = &fw->peer[p];
		emp__peer_fail_sends(fw, p, -EMP_ETIMEDOUT);
		pe->tx_state = PTX_NEW;        /* next send starts a new session */
		return 1;
	}
	x->rto = min64(x->rto * 2, fw->cfg.rto_max_ns);
	if (x->rto > fw->peer[p].rto)
		fw->peer[p].rto = x->rto;      /* Karn: the backoff stays until a clean sample */
	x->rtx |= timeout_resend(x);
	x->deadline = now + x->rto;
	return 0;
}

static void hello_timeout(struct emp_fw *fw, int32_t p, uint64_t now)
{
	struct peer *pe = &fw->peer[p];
	if (++pe->hello_tries > fw->cfg.retries) {
		emp__peer_fail_sends(fw, p, -EMP_EHOSTUNREACH);
		pe->tx_state = PTX_NEW;
		pe->hello_deadline = 0;
		return;
	}
	pe->hello_rto = min64(pe->hello_rto * 2, fw->cfg.rto_max_ns);
	emp__peer_send_hello(fw, p, now);
}

int emp__fw_timers(struct emp_fw *fw, uint64_t now)
{
	int before = fw->completed;
	uint64_t next = UINT64_MAX, fine = UINT64_MAX;
	fw->now = now;
	if (fw->alist != NIL) {
		int32_t p = fw->alist;
		do {
			struct peer *pe = &fw->peer[p];
			int32_t pnext = pe->anext;
			if (pe->tx_state == PTX_HELLO && pe->hello_deadline) {
				if (now >= pe->hello_deadline)
					hello_timeout(fw, p, now);
				if (pe->hello_deadline)
					next = min64(next, pe->hello_deadline);
			}
			if (pe->fc_probe_at)
				next = min64(next, pe->fc_probe_at);
			for (int32_t r = pe->act.head; r != NIL;) {
				struct rec *x = &fw->rec[r];
				int32_t rn = x->next;
				if (x->deadline && now >= x->deadline && send_timeout(fw, p, x, now))
					break;
				if (x->deadline)
					next = min64(next, x->deadline);
				r = rn;
			}
			for (int32_t r = pe->rxa.head; r != NIL;) {
				struct rec *x = &fw->rec[r];
				int32_t rn = x->next;
				if (emp__recv_expired(fw, p, r, now)) {
					r = rn;              /* given up, its receive posted again */
					continue;
				}
				if (x->deadline && now >= x->deadline)
					emp__send_ack(fw, p, x, 0);
				if (x->deadline)
					fine = min64(fine, x->deadline);
				if (x->rx_expire)
					next = min64(next, x->rx_expire);
				r = rn;
			}
			p = pnext;
		} while (p != NIL && p != fw->alist);
	}
	if (fw->tx_hold_until)
		fine = min64(fine, fw->tx_hold_until);
	if (fw->bulk_until)
		fine = min64(fine, fw->bulk_until);
	fw->next_fine = fine;
	fw->next_deadline = min64(next, fine);
	if (!fw->in_poll)
		emp__tx_flush(fw);
	return fw->completed - before;
}
