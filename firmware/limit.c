/* limit.c: rate limits for the replies the engine sends unasked (STALE, HELLO_ACK): per peer and for the whole endpoint. */
#include "fw_int.h"

/*
 * A STALE answers a frame that named an old incarnation; a HELLO_ACK answers a
 * HELLO. Both are sent for a frame anyone can forge, so a flood of forged
 * frames would make the engine flood the wire back (and spend its time on
 * it). Each peer gets at most one such reply per quarter of the configured
 * retransmit timeout (a real peer resends after a whole one), and the endpoint
 * at most REPLY_BURST per rto, whatever the number of (spoofed) peers. What is
 * not sent is counted (replies_limited); a real peer's next resend gets its
 * answer.
 */

#define REPLY_BURST 64u

/* The last reply time of a sender with no peer slot (a STALE to an unknown
 * source): a small direct-mapped table keyed by host and endpoint, so one
 * such sender gets one reply per gap like a known peer; a collision only
 * makes the newer sender share the older one's budget. */
static uint64_t *anon_slot(struct emp_fw *fw, uint16_t host, uint16_t ep)
{
	uint32_t key = ((uint32_t)host << 16 | ep) + 1u;
	uint32_t i = (key * 2654435761u) >> 28;          /* 16 slots */
	if (fw->reply_anon[i].key != key) {
		fw->reply_anon[i].key = key;
		fw->reply_anon[i].at = 0;
	}
	return &fw->reply_anon[i].at;
}

int emp__reply_ok_anon(struct emp_fw *fw, uint16_t host, uint16_t ep, uint64_t now)
{
	uint64_t *at = anon_slot(fw, host, ep);
	if (*at && now - *at < fw->cfg.rto_ns / 4) {
		fw->ctr.replies_limited++;
		return 0;
	}
	if (!emp__reply_ok(fw, NIL, now))
		return 0;
	*at = now ? now : 1;
	return 1;
}

int emp__reply_ok(struct emp_fw *fw, int32_t p, uint64_t now)
{
	uint64_t gap = fw->cfg.rto_ns / 4;
	if (p != NIL) {
		struct peer *pe = &fw->peer[p];
		if (pe->reply_at && now - pe->reply_at < gap) {
			fw->ctr.replies_limited++;
			return 0;
		}
	}
	if (!fw->reply_refill || now - fw->reply_refill >= fw->cfg.rto_ns) {
		fw->reply_refill = now ? now : 1;
		fw->reply_tokens = REPLY_BURST;
	}
	if (!fw->reply_tokens) {
		fw->ctr.replies_limited++;
		return 0;
	}
	fw->reply_tokens--;
	if (p != NIL)
		fw->peer[p].reply_at = now ? now : 1;
	return 1;
}
