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
