/* gather.c: receive coalescing: the pace at which multi-frame messages arrive, and how long a waiting host thread may let their frames gather before it looks. */
#include "fw_int.h"

/*
 * On a link slower than the hosts (a 1 Gbit/s wire, a shaped switch) a
 * message of many frames trickles in, a 1500-byte frame every 12 us at
 * 1 Gbit/s. A thread that sleeps on the device until the message is complete
 * then wakes for every few frames: a system call and a context switch each,
 * where kernel TCP's reader wakes about once per 30 segments. A NIC solves
 * the same problem with interrupt coalescing; the engine knows more than a
 * NIC: how many frames the nearest message still lacks, and the pace at which
 * they come. So a waiter may sleep without the device (emp__fw_gather_ns) for
 * about as long as the nearest multi-frame message needs to complete, and
 * take every frame that came in one look. On a fast link the same saves the
 * CPU a waiter would spin away until the message is complete (an iperf3
 * receiver on veth spent 60 % of its time in the spin). Never:
 * - when frames come faster than EMP_GATHER_MIN_GAP_NS apart (10 Gbit/s
 *   and more: a spin finds them in batches anyway);
 * - when a message of few frames arrived lately (a request or reply waits
 *   for nobody; EMP_GATHER_QUIET_NS);
 * - when the flow has paused (no frame for a few gaps) with a message under
 *   way;
 * - for fewer than EMP_GATHER_MIN_LEFT frames' worth of time, or less than
 *   EMP_GATHER_MIN_NS (a sleep ends up to a timer slack, 50 us, late);
 * - for longer than the caller's bound or a quarter of the peer window's
 *   frames (the acks that slide the sender's window leave before the sleep
 *   and after it: the sender never stalls).
 * Two paces are measured.
 * - The arrival gap: frames taken per span of at least EMP_GATHER_WINDOW_NS.
 *   Spans run from look to look (a look: one engine poll, one time for all
 *   the frames it takes); a span's frames are those taken by its looks after
 *   the first, whose frames had come before it. So the frames of one look
 *   (after a gathering sleep: many) count in the span that look closes and
 *   not in the next (counted there, with no time for them, they made the
 *   next span's pace look several times faster: on veth an iperf3 receiver's
 *   measured gap fell below EMP_GATHER_MIN_GAP_NS in half its waits, and the
 *   waits spun). A faster span is taken at once, a slower one smoothed (3/4
 *   old, 1/4 new); a pause longer than EMP_GATHER_IDLE_NS starts afresh.
 * - The message pace: from a message's first frame taken to its last, per
 *   frame, smoothed 3/4 old, 1/4 new (a message begun before a pause that
 *   restarted the measurement is left out). It is what the sleep needs: the
 *   time a message's remaining frames take. Frames come in bursts (a sender's
 *   transmit batch) and several messages' frames share the arrivals, so a
 *   message's own frames come slower than frames arrive: on veth at 6 Gbit/s
 *   2.1-2.7 us arrival gap, 3.3-3.5 us per frame of a message, and a sleep of
 *   left x arrival gap ended with the message still incomplete in four of
 *   five waits (the waiter then spun the rest of it away).
 * The estimate is left x the message pace (the arrival gap until a message
 * was measured), at most 4 x left x the arrival gap: the arrival gap follows
 * a flow that sped up at once, the smoothed message pace only over a few
 * messages, and a sleep meanwhile at most 4 times too long.
 * With no message under way the waiter may sleep until the next one of a
 * one-way stream is due (next_due): a sender bound by its own CPU sends each
 * message in a burst and then copies the next, so at MTU 9000 (15 frames a
 * message) the receiver found no message under way in 9 of 10 waits and
 * spun through the gap (0.44-0.55 ms of CPU per MB, kernel TCP 0.31-0.38).
 */

/* 3/4 old, 1/4 new (the first value as it is) */
static uint64_t smooth(uint64_t old, uint64_t now)
{
	return old ? (3 * old + now) / 4 : now;
}

/* a faster value at once, a slower one smoothed */
static uint64_t faster_at_once(uint64_t old, uint64_t now)
{
	return now < old ? now : smooth(old, now);
}

void emp__gather_frame(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	struct gather *g = &fw->rxg;
	if (x->nframes < EMP_GATHER_MIN_FRAMES) {
		g->small_at = now ? now : 1;
		return;
	}
	if (!x->rx_first)
		x->rx_first = now ? now : 1;
	if (g->on && now - g->last > EMP_GATHER_IDLE_NS)
		g->on = 0;
	if (!g->on) {
		g->on = 1;
		g->gap = g->msg_gap = g->msg_int = 0;
		g->start = g->t0 = g->last = now;
		g->n = 0;
		return;
	}
	if (now != g->last && g->last - g->t0 >= EMP_GATHER_WINDOW_NS && g->n) {
		g->gap = faster_at_once(g->gap, (g->last - g->t0) / g->n);   /* the last look closed a span */
		g->t0 = g->last;
		g->n = 0;
	}
	g->last = now;
	if (now != g->t0)
		g->n++;
}

void emp__gather_done(struct emp_fw *fw, const struct rec *x, uint64_t now)
{
	struct gather *g = &fw->rxg;
	if (x->nframes < EMP_GATHER_MIN_FRAMES || !g->on)
		return;
	if (g->done_at && g->done_at >= g->start && now > g->done_at)
		g->msg_int = smooth(g->msg_int, now - g->done_at);
	g->done_at = now;
	g->sends_at_done = g->sends;
	if (x->rx_first < g->start || now <= x->rx_first)
		return;                     /* begun before a pause: not this flow's pace */
	g->msg_gap = smooth(g->msg_gap, (now - x->rx_first) / (x->nframes - 1));
}

void emp__gather_sent(struct emp_fw *fw)
{
	fw->rxg.sends++;
}

/* frames the nearest multi-frame message being received still lacks, or
 * UINT32_MAX if none is under way */
static uint32_t nearest_left(const struct emp_fw *fw)
{
	uint32_t left = UINT32_MAX;
	if (fw->alist == NIL)
		return left;
	int32_t p = fw->alist;
	do {
		const struct peer *pe = &fw->peer[p];
		for (int32_t r = pe->rxa.head; r != NIL; r = fw->rec[r].next) {
			const struct rec *x = &fw->rec[r];
			if (x->nframes >= EMP_GATHER_MIN_FRAMES && x->nframes - x->cum < left)
				left = x->nframes - x->cum;
		}
		p = pe->anext;
	} while (p != NIL && p != fw->alist);
	return left;
}

/* No message under way: the next one of a one-way stream is due an interval
 * after the last one completed, if this host posted no send since (one that
 * sends waits for an answer, which comes when the peer makes it: a 64 KB
 * ping-pong slept to the interval and took 320 us a round trip, not 100) and
 * the interval has not passed twice over (the stream ended). 0: not known. */
static uint64_t next_due(const struct gather *g, uint64_t now)
{
	uint64_t since = now > g->done_at ? now - g->done_at : 0;
	if (!g->msg_int || g->done_at < g->start || g->sends != g->sends_at_done || since >= 2 * g->msg_int)
		return 0;
	return since < g->msg_int ? g->msg_int - since : 0;
}

uint64_t emp__fw_gather_ns(struct emp_fw *fw, uint64_t now, uint64_t max_ns)
{
	const struct gather *g = &fw->rxg;
	uint64_t since = now > g->last ? now - g->last : 0;   /* the caller's clock may be older */
	if (!max_ns || !g->on || g->gap < EMP_GATHER_MIN_GAP_NS)
		return 0;
	if (g->small_at && now - g->small_at < EMP_GATHER_QUIET_NS)
		return 0;
	uint32_t left = nearest_left(fw);
	uint64_t ns;
	if (left == UINT32_MAX) {
		ns = next_due(g, now);
	} else {
		if (since > 4 * g->gap || left < EMP_GATHER_MIN_LEFT)
			return 0;
		ns = (uint64_t)left * (g->msg_gap ? g->msg_gap : g->gap);
		ns = min64(ns, 4 * (uint64_t)left * g->gap);
	}
	ns = min64(ns, max_ns);
	ns = min64(ns, (uint64_t)(fw->cfg.peer_window / 4) * g->gap);
	if (ns < EMP_GATHER_MIN_LEFT * g->gap || ns < EMP_GATHER_MIN_NS)
		return 0;
	fw->ctr.rx_gathers++;
	return ns;
}
