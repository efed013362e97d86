/* expire.c: partial receives that stop making progress: their deadlines, giving them up, the receive posted again. */
#include "fw_int.h"

/*
 * A matched receive belongs to one message until its last frame arrives. A
 * sender that died halfway, or a spoofed message that never ends (a huge
 * length, a frame now and then), would hold it for ever. So a partly received
 * message must keep arriving: a new frame at least every recv_idle_ns (by
 * default retries * rto_max: a live sender that has heard nothing for that
 * long has given the message up itself), and on average one frame per
 * recv_idle_ns / 1024 over the frames the receive can hold (a 128 KiB
 * receive, 90 frames at MTU 1500: 5.2 s at most with the defaults). Past
 * either bound the message is given up: counted (recv_expired), its receive
 * goes back to the posted lists at its place in posting order (the next
 * message takes it), and its later frames are dropped (EMP_DROP_EXPIRED) and
 * not acked, so a live sender sees its send fail with -ETIMEDOUT rather than
 * succeed for data that never arrived.
 */

#define IDLE_MIN_NS 1000000000ull     /* whatever retries and rto_max say */

static uint64_t idle_ns(const struct emp_fw *fw)
{
	if (fw->cfg.recv_idle_ns)
		return fw->cfg.recv_idle_ns;
	uint64_t v = (uint64_t)fw->cfg.retries * fw->cfg.rto_max_ns;
	return v < IDLE_MIN_NS ? IDLE_MIN_NS : v;
}

/* A receive was just matched to a message (x->nframes, frag and cap set). */
void emp__recv_matched(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	uint64_t idle = idle_ns(fw), need = x->nframes, held = x->cap / x->frag + 1;
	if (held < need)
		need = held;               /* frames past the buffer are only counted */
	x->rx_limit = now + idle + need * (idle / 1024);
	x->rx_expire = min64(now + idle, x->rx_limit);
	emp__arm(fw, x->rx_expire);
}

/* A new frame of it arrived (deadlines only move later: no new timer). */
void emp__recv_progress(struct emp_fw *fw, struct rec *x, uint64_t now)
{
	x->rx_expire = min64(now + idle_ns(fw), x->rx_limit);
}

/* Gives the message of active receive r (peer p) up if its time is over;
 * 1 if it did (r left the peer's list). */
int emp__recv_expired(struct emp_fw *fw, int32_t p, int32_t r, uint64_t now)
{
	struct rec *x = &fw->rec[r];
	if (!x->rx_expire || now < x->rx_expire)
		return 0;
	struct peer *pe = &fw->peer[p];
	emp__dl_del(fw, &pe->rxa, r);
	unsigned i = pe->rx_dead_n++ % 4;
	pe->rx_dead_msg[i] = x->msg_id;
	pe->rx_dead_ses[i] = pe->rx_session;
	fw->ctr.recv_expired++;
	emp__repost_recv(fw, r);
	return 1;
}

/* A message of this peer whose receive was given up (ids start at 1, so the
 * zeroed ring of a new peer names none). */
int emp__recv_dead(const struct peer *pe, uint32_t msg_id, uint16_t session)
{
	for (int i = 0; i < 4; i++)
		if (pe->rx_dead_msg[i] == msg_id && pe->rx_dead_ses[i] == session)
			return 1;
	return 0;
}
