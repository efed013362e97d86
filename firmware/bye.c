/* bye.c: the end of a life: the BYEs an endpoint sends at its close, and what a peer's BYE ends here. */
#include "fw_int.h"

/* Their message id (of the session we know) completed here: matched,
 * received whole, not given up (expire.c). */
static int rx_completed(const struct emp_fw *fw, const struct peer *pe, uint32_t id)
{
	uint32_t off = id - pe->match_next;
	if (!seq_lt(id, pe->match_next) && (off >= EMP_MATCH_BITS || !(pe->matched >> off & 1)))
		return 0;
	for (int32_t r = pe->rxa.head; r != NIL; r = fw->rec[r].next)
		if (fw->rec[r].msg_id == id)
			return 0;
	return !emp__recv_dead(pe, id, pe->rx_session);
}

/* The DONE body for peer pe: the lowest id not completed (below it all
 * did), then which of the 64 from there did. */
static void done_body(const struct emp_fw *fw, const struct peer *pe, uint8_t *b)
{
	uint32_t next = pe->match_next;
	for (int32_t r = pe->rxa.head; r != NIL; r = fw->rec[r].next)
		if (seq_lt(fw->rec[r].msg_id, next))
			next = fw->rec[r].msg_id;
	for (int i = 0; i < 4; i++) {
		uint32_t id = pe->rx_dead_msg[i];
		if (id && pe->rx_dead_ses[i] == pe->rx_session && seq_lt(id, next) &&
		    pe->match_next - id <= EMP_MATCH_BITS)
			next = id;                 /* older ones' senders gave up long ago */
	}
	uint64_t done = 0;
	for (uint32_t i = 1; i < 64; i++)
		if (rx_completed(fw, pe, next + i))
			done |= 1ull << i;
	put32(b, next);
	put64(b + 4, done);
}

/* At the close (emp_goodbye): to every peer whose session toward us we
 * know, a BYE with what of it completed here; then to every peer we have a
 * session toward, the plain BYE. The DONE one goes first: after the plain
 * one the peer no longer holds its sends to us. */
void emp__fw_bye(struct emp_fw *fw)
{
	for (uint32_t i = 0; i < fw->npeers; i++) {
		struct peer *pe = &fw->peer[i];
		if (!pe->used)
			continue;
		if (pe->rx_known) {
			uint8_t *b = emp__tx_slot(fw, (int32_t)i, EMP_T_BYE, EMP_F_DONE, 0, pe->rx_session,
						  EMP_BYE_DONE_LEN);
			if (b) {
				done_body(fw, pe, b);
				fw->ctr.byes_sent++;
			}
		}
		if (pe->tx_state == PTX_UP) {
			(void)emp__tx_slot(fw, (int32_t)i, EMP_T_BYE, 0, 0, pe->tx_session, 0);
			fw->ctr.byes_sent++;
		}
	}
	emp__fw_flush(fw);
}

/* Life inc of peer p is over (either BYE): its slot may go to another at
 * once (peer.c). Counted once per life. */
static void life_over(struct emp_fw *fw, int32_t p, uint32_t inc)
{
	struct peer *pe = &fw->peer[p];
	if (pe->bye_inc != inc)
		fw->ctr.peers_departed++;
	pe->bye_inc = inc;
}

/* A plain BYE in the session of theirs we know (checked here and, with
 * auth, its tag under that session's key): that life is over. Its messages
 * to us can never complete, nor ours to it. */
void emp__rx_bye(struct emp_fw *fw, const struct hdr *h, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	if (h->dst_inc != fw->cfg.incarnation || !emp__rx_session_ok(pe, h)) {
		emp__drop(fw, EMP_DROP_NO_SESSION);
		return;
	}
	if (pe->tx_state != PTX_NEW && pe->tx_remote_inc == h->src_inc)
		emp__peer_tx_reset(fw, p);
	emp__peer_fail_recvs(fw, p, -EMP_ECONNRESET);
	pe->rx_known = 0;
	life_over(fw, p, h->src_inc);
}

/* A BYE with DONE in our session toward them (checked as an ACK is): the
 * sends it says completed there complete with their length, the rest fail.
 * Their receive side stays for the plain BYE that follows (or the quiet rule). */
void emp__rx_bye_done(struct emp_fw *fw, const struct hdr *h, int32_t p)
{
	struct peer *pe = &fw->peer[p];
	if (h->dst_inc != fw->cfg.incarnation || !emp__tx_session_ok(pe, h)) {
		emp__drop(fw, EMP_DROP_NO_SESSION);
		return;
	}
	uint32_t next = get32(h->body);
	uint64_t done = get64(h->body + 4);
	for (int32_t r = pe->act.head, rn; r != NIL; r = rn) {
		struct rec *x = &fw->rec[r];
		uint32_t off = x->msg_id - next;
		rn = x->next;
		if (!seq_lt(x->msg_id, next) && (off >= 64 || !(done >> off & 1)))
			continue;
		emp__dl_del(fw, &pe->act, r);
		fw->ctr.bye_completed++;
		emp__complete(fw, r, (int64_t)x->len);
	}
	emp__peer_tx_reset(fw, p);            /* the rest: ECONNRESET */
	life_over(fw, p, h->src_inc);
}
