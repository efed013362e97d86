/* flow.c: flow control: receive credits piggybacked on every frame, per-receiver pacing, starvation probes. */
#include "fw_int.h"

/* Our free receive state, carried in every frame we send. */
uint16_t emp__fc_advertise(const struct emp_fw *fw)
{
	return fw->posted_recvs > 0xffff ? 0xffff : (uint16_t)fw->posted_recvs;
}

/* A peer's word on its free receives, bounded by what we could use of them
 * (peer_msgs messages in flight toward it): a forged or buggy 0xffff buys
 * nothing and shows as no more than that. */
void emp__fc_update(struct emp_fw *fw, struct peer *pe, uint16_t credits)
{
	pe->credits = credits < fw->cfg.peer_msgs ? credits : fw->cfg.peer_msgs;
	pe->unacked_starts = 0;
}

/* With flow control on, a message starts only while the receiver has
 * advertised receives for it; a starved sender probes once per RTO so it
 * learns when receives are posted again. A message still in flight to the
 * receiver is such a probe already (its frames draw acks that carry the
 * credits), so a new one starts only when none is. Off: always (the thesis
 * default). */
int emp__fc_may_start(struct emp_fw *fw, struct peer *pe, uint64_t now)
{
	if (!fw->cfg.flow_control || pe->credits > pe->unacked_starts)
		return 1;
	if (pe->fc_probe_at && now >= pe->fc_probe_at) {
		pe->fc_probe_at = 0;
		if (!pe->inflight_msgs)
			return 1;
	}
	if (pe->fc_probe_at == 0) {
		pe->fc_probe_at = now + fw->cfg.rto_ns;
		emp__arm(fw, pe->fc_probe_at);
		fw->ctr.fc_stalls++;
	}
	return 0;
}

void emp__fc_started(struct emp_fw *fw, struct peer *pe)
{
	pe->unacked_starts++;
}
