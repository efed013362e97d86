/* negserver.c: the server side of negotiation: the OFFER and its resends, the client's ACCEPT and proof (its HELLO from the endpoint it named), REJECT, settling an accepted socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "neg.h"

static void send_reject(struct es_sock *s)
{
	struct neg_msg o;
	es__neg_fill(&o, N_REJECT, s);
	if (s->udp >= 0)
		R_(send)(s->udp, &o, sizeof o, MSG_DONTWAIT);
}

/* A new program gets the accepted socket (exec) before its first use here:
 * it cannot be negotiated for that program (an EMP connection cannot cross
 * exec), so the client hears at once, an OFFER and right behind it a REJECT
 * of it, instead of waiting out its bound (git daemon runs each clone this
 * way); kernel TCP from here on (strict mode: refused). */
int es__negs_exec(struct es_sock *s)
{
	int res;
	if (!s->ng.sv.begun && es__negs_begin(s, &res))
		return res;          /* decided already (a plain client, no side channel) */
	send_reject(s);
	return es__neg_fallback(s, "handed to a new program (exec) before its first use");
}

/* The client's endpoint proved itself (its HELLO with our key came from the
 * endpoint its ACCEPT named): receives from it alone, send slots toward it,
 * our HELLO. 0, or -1 (REJECT sent). */
static int take_proof(struct es_sock *s, const struct neg_msg *a)
{
	uint16_t pep = ntohs(a->ep);
	es__sock_lock(s);
	int r = es__conn_bind_ep(s, pep);
	if (r == 0)
		r = es__conn_set_peer(s, pep, ntohl(a->conn), ntohl(a->nbufs), ntohl(a->bufsz), a->ckey);
	if (r == 0)
		r = es__conn_send_hello(s);
	es__sock_unlock(s);
	if (r < 0)
		send_reject(s);
	return r;
}

/* When each client host last sent an ACCEPT (indexed by EMP host id, folded
 * into the table): a stepped negotiation waits past the short bound, up to
 * the long one, only for a client whose host is answering OFFERs (busy, not
 * mute), so a host that never answers holds a connection's receives for the
 * short bound alone (es__negs_step). */
#define HOSTS_SEEN 256
static _Atomic int64_t host_accept_at[HOSTS_SEEN];

static int host_answering(int host, int64_t now)
{
	return host >= 0 && now - atomic_load(&host_accept_at[host % HOSTS_SEEN]) < 1000000000ll;
}

/* The last proof (a HELLO from the endpoint an ACCEPT named) seen from each
 * client endpoint, hashed: a collision or a race between two provers costs
 * at most the extension it stands for (sv_step), never a refusal. */
#define PROOFS_SEEN 256
static struct {
	_Atomic uint32_t who;            /* host << 16 | endpoint, + 1 */
	_Atomic int64_t at;
} proofs[PROOFS_SEEN];

static uint32_t proof_who(int host, uint16_t cep) { return ((uint32_t)host << 16 | cep) + 1; }
static unsigned proof_slot(int host, uint16_t cep) { return ((unsigned)host * 65599u + cep) % PROOFS_SEEN; }

static void proof_note(int host, uint16_t cep, int64_t now)
{
	unsigned k = proof_slot(host, cep);
	atomic_store(&proofs[k].who, proof_who(host, cep));
	atomic_store(&proofs[k].at, now);
}

/* the endpoint proved another connection at t or later */
static int proved_since(int host, uint16_t cep, int64_t t)
{
	unsigned k = proof_slot(host, cep);
	return host >= 0 && atomic_load(&proofs[k].who) == proof_who(host, cep) && atomic_load(&proofs[k].at) >= t;
}

/* The first resend of an OFFER: only a lost datagram needs one (an OFFER
 * that met a client not bound yet draws ICMP and goes again in 200 us), and
 * a late ACCEPT is, far more often, a client or server waiting for a CPU, for
 * which a resend is only more work on both sides (at 1 ms, half the
 * connections of a loaded machine had their OFFER and ACCEPT sent twice). */
#define OFFER_GAP_NS 4000000

/* Everything up to the first OFFER; 0 when it is out, else 1 with *res the
 * fallback's outcome. */
int es__negs_begin(struct es_sock *s, int *res)
{
	*res = 0;
	if (s->ng.mark == MARK_PLAIN)
		return *res = es__neg_fallback(s, "the client's SYN has no EMP mark (plain program)"), 1;
	emp_endpoint_t *ep = es__engine();
	int host = ep ? emp_host_by_ip(ep, s->remote.sin_addr.s_addr) : -1;
	if (host < 0)
		return *res = es__neg_fallback(s, "no EMP endpoint"), 1;
	es__negs_guard(&s->local);
	int udp = es__neg_udp_socket(), one = 1;
	if (udp < 0 || R_(setsockopt)(udp, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    R_(bind)(udp, (struct sockaddr *)&s->local, sizeof s->local) < 0 ||
	    R_(connect)(udp, (struct sockaddr *)&s->remote, sizeof s->remote) < 0) {
		int e = errno;
		if (udp >= 0)
			R_(close)(udp);
		static atomic_int told;
		if (e == EADDRINUSE && !atomic_exchange(&told, 1))
			es__log("UDP port %u is held by another program (or user): no EMP negotiation for TCP port %u",
				ntohs(s->local.sin_port), ntohs(s->local.sin_port));
		return *res = es__neg_fallback(s, "no side channel"), 1;
	}
	s->udp = udp;
	do
		s->ng.skey = es__random64();
	while (!s->ng.skey);
	s->ng.ckey = 0;
	s->ng.lid = es__conn_new_lid();
	if (es__conn_create(s, (uint16_t)host, EMP_ANY_EP, s->ng.lid, s->ng.skey) < 0)
		return *res = es__neg_fallback(s, "cannot set up EMP (descriptors?)"), 1;
	int64_t t0 = es__now_ns();
	s->ng.sv.begun = 1;
	s->ng.sv.accepted = 0;
	s->ng.sv.t0 = t0;
	s->ng.sv.dl = t0 + es__g.neg_ms * 1000000ll;
	s->ng.sv.gap = OFFER_GAP_NS;
	/* A marked client binds its UDP twin right after its kernel connect
	 * picked the port: an OFFER can beat it (ICMP). For a while that means
	 * "not yet" (the OFFER goes again soon), after it "plain": half the
	 * negotiation's bound (250 ms), since a marked client preempted between
	 * its connect and that bind is late, not plain. 20 ms was too short on a
	 * loaded machine: t_fault_load (1000 connections from 4 hosts at once,
	 * CI at nice 10) had one server fall back ("client host refused the
	 * offer") in a clean-clone run, 2026-11-27. */
	s->ng.sv.icmp_grace = s->ng.mark == MARK_EMP ? t0 + (int64_t)es__g.neg_ms * 500000ll : t0;
	struct neg_msg o;
	es__neg_fill(&o, N_OFFER, s);
	R_(send)(udp, &o, sizeof o, MSG_DONTWAIT);   /* a refusal shows in the settle's recv */
	s->ng.sv.sent = t0;
	s->ng.sv.next = t0 + s->ng.sv.gap;
	return 0;
}

/* The server's side; s is an accepted socket on its first use. Before the
 * OFFER its control receives are posted from any endpoint of the client's
 * host; the client answers with ACCEPT (naming its endpoint) and a HELLO
 * from that endpoint. The server sends nothing over EMP before that HELLO
 * has come from the endpoint the ACCEPT named: an ACCEPT naming another
 * process's endpoint gets nothing sent there, and is refused at the bound.
 * The OFFER may have gone out earlier (es__settle_begin). */
/* read the side channel dry: the client's ACCEPT (kept in *acc and s->ng.sv),
 * its REJECT, ICMP refusals (*refused), the rest counted; 0 to go on, else
 * the decision (es__neg_fallback's state) */
static int sv_read(struct es_sock *s, emp_endpoint_t *ep, int host, struct neg_msg *acc, int *refused)
{
	struct neg_msg m;
	for (;;) {
		ssize_t n = R_(recv)(s->udp, &m, sizeof m, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == ECONNREFUSED) {
				*refused |= !s->ng.sv.accepted;
				continue;
			}
			return 0;
		}
		if (!es__neg_valid(&m, n, s) || m.skey != s->ng.skey) {
			es__neg_count_forged(s, "not of this negotiation");
			continue;
		}
		if (m.type == N_REJECT && (!s->ng.sv.accepted || m.ckey == s->ng.ckey))
			return es__neg_fallback(s, "client declined EMP");
		if (m.type != N_ACCEPT || s->ng.sv.accepted || !es__neg_params_ok(&m) || !m.ckey) {
			if (m.type != N_ACCEPT || !s->ng.sv.accepted || memcmp(&m, acc, sizeof m))
				es__neg_count_forged(s, "unexpected or out of bounds");
			continue;
		}
		/* the client's HELLO may start a session with the engine from now on */
		if (emp_peer_hold(ep, (emp_addr_t){ (uint16_t)host, ntohs(m.ep) }) < 0) {
			send_reject(s);
			return es__neg_fallback(s, "EMP peer table full");
		}
		emp_peer_release(ep, (emp_addr_t){ (uint16_t)host, ntohs(m.ep) });
		*acc = m;
		memcpy(s->ng.sv.acc, acc, sizeof *acc);
		s->ng.ckey = m.ckey;
		s->ng.sv.accepted = 1;
		s->ng.sv.acc_at = es__now_ns();
		atomic_store(&host_accept_at[host % HOSTS_SEEN], s->ng.sv.acc_at);
		/* its HELLO left right behind the ACCEPT: the short bound from
		 * here for the proof (a stepped socket's bound was the long one) */
		int64_t pdl = s->ng.sv.acc_at + es__g.neg_ms * 1000000ll;
		if (s->ng.sv.stepped && pdl < s->ng.sv.dl)
			s->ng.sv.dl = pdl;
		return 0;   /* what follows (a REJECT, a copy) is read at the next look */
	}
}

/* One look at everything the server waits for: the OFFER again when its
 * gap is over, the side channel (read: the caller says), the
 * client's end (gone: its FIN or reset is in), its HELLO, the bound. The
 * decision (es__settle's states), or ES_PENDING with *until the time to look
 * again at the latest and *seq0 the connection's change count before this
 * look (es__neg_wait ends when it moves). nowait: a step (es__negs_step),
 * which may wait past the short bound for a busy client. */
static int sv_step(struct es_sock *s, int read, int gone, int64_t *until, unsigned *seq0, int nowait)
{
	emp_endpoint_t *ep = es__engine();
	int host = emp_host_by_ip(ep, s->remote.sin_addr.s_addr);
	struct neg_msg o, acc;
	memcpy(&acc, s->ng.sv.acc, sizeof acc);
	*seq0 = es__neg_seq(s);   /* before looking: a change after it ends the wait */
	int64_t now = es__now_ns();
	int refused = 0;
	if (!s->ng.sv.accepted && now >= s->ng.sv.next) {
		es__neg_fill(&o, N_OFFER, s);
		if (R_(send)(s->udp, &o, sizeof o, MSG_DONTWAIT) < 0 && errno == ECONNREFUSED)
			refused = 1;
		else
			s->ng.sv.sent = now;
		s->ng.sv.next = now + s->ng.sv.gap;
		/* stepped, past the short bound: the client is slow or mute, and
		 * the resends thin out (up to one a second) */
		if (s->ng.sv.gap < 20000000 ||
		    (s->ng.sv.stepped && now - s->ng.sv.t0 > es__g.neg_ms * 1000000ll && s->ng.sv.gap < 1000000000))
			s->ng.sv.gap *= 2;
	}
	int res = read ? sv_read(s, ep, host, &acc, &refused) : 0;
	if (res)
		return res;
	/* A client that ended the connection without answering will not
	 * (its process exited, or it closed the socket before its OFFER
	 * came: wrk at the end of a run, a port scan); nor will one that
	 * went on without EMP and is done. Waiting out the bound held a
	 * single-threaded server 250-500 ms per such connection, and the
	 * live ones queued behind them timed out (a node server after
	 * one `wrk -c 50` run with new connections served none over EMP
	 * for seconds). The side channel was read after the FIN was seen:
	 * an ACCEPT sent before it is in. */
	if (gone && !s->ng.sv.accepted) {
		atomic_fetch_add(&es__negstats.gone, 1);
		return es__neg_fallback(s, "the client ended the connection before answering the EMP offer");
	}
	/* an OFFER sent within the grace (the last one that went) met a
	 * client not bound yet: again soon */
	if (refused && s->ng.sv.sent >= s->ng.sv.icmp_grace)
		return es__neg_fallback(s, "client host refused the offer (plain program)");
	if (refused) {
		s->ng.sv.next = now + 200000;
		s->ng.sv.gap = OFFER_GAP_NS;
		if (now >= s->ng.sv.icmp_grace)
			s->ng.sv.icmp_grace = now;   /* the next refusal decides */
	}
	if (s->ng.sv.accepted && es__conn_hello_seen(s)) {
		if (es__conn_hello_ep(s) != ntohs(acc.ep)) {
			send_reject(s);
			return es__neg_fallback(s, "the client's HELLO came from another endpoint");
		}
		if (take_proof(s, &acc) < 0)
			return es__neg_fallback(s, "cannot set up EMP (descriptors, peers?)");
		if (host >= 0)
			proof_note(host, ntohs(acc.ep), now);
		return es__neg_finish_emp(s);
	}
	/* after its ACCEPT, a client whose HELLO has not come and whose
	 * kernel connection ended (killed between the two, or its program
	 * closed the socket unused) will not prove itself: its HELLO went
	 * before its FIN, and an EMP close sends the FIN only after the
	 * last message, which is acknowledged after the HELLO was seen
	 * here (the check above) */
	if (gone) {
		atomic_fetch_add(&es__negstats.gone, 1);
		send_reject(s);
		return es__neg_fallback(s, "the client ended the connection before its EMP endpoint confirmed");
	}
	int64_t dl = s->ng.sv.dl;
	/* a step (nobody waits) past the bound: a client that is busy, not
	 * mute, is waited for up to the long bound. Before its ACCEPT, one
	 * whose host answers other OFFERs (from the connection's start); after
	 * it, one whose endpoint (the one its ACCEPT named) proved another
	 * connection since (from the ACCEPT): that engine works, and this
	 * HELLO waits there behind the data of the connections already running
	 * (1000 connections from 4 hosts, each 1 MiB each way: t_fault_load was
	 * refused one in about 30 runs at the short bound from the ACCEPT). An
	 * ACCEPT naming an endpoint that proves nothing (mute, or another
	 * process's: a forger's) keeps the short bound; the long one ends 10 s
	 * after the connection at most */
	if (now >= dl && nowait) {
		int64_t from = !s->ng.sv.accepted ? (host_answering(host, now) ? s->ng.sv.t0 : 0)
			     : proved_since(host, ntohs(acc.ep), s->ng.sv.acc_at) ? s->ng.sv.acc_at : 0;
		int64_t ldl = from + es__neg_bound_ns(1);
		if (from && ldl > dl)
			s->ng.sv.dl = dl = ldl;
	}
	if (now >= dl) {
		send_reject(s);
		if (s->ng.sv.accepted) {
			unsigned n = atomic_fetch_add(&es__negstats.refused, 1) + 1;
			es__log("connection from %s:%u: the endpoint its ACCEPT named (%u) never proved itself: refused (%u so far)",
				inet_ntoa(s->remote.sin_addr), ntohs(s->remote.sin_port), ntohs(acc.ep), n);
			return es__neg_fallback(s, "the client's endpoint did not confirm EMP");
		}
		return es__neg_fallback(s, "client did not answer the EMP offer");
	}
	*until = s->ng.sv.accepted ? dl : (s->ng.sv.next < dl ? s->ng.sv.next : dl);
	return ES_PENDING;
}

int es__negs_settle(struct es_sock *s)
{
	_Static_assert(sizeof(struct neg_msg) <= sizeof s->ng.sv.acc, "ACCEPT copy");
	int res;
	if (!s->ng.sv.begun && es__negs_begin(s, &res))
		return res;
	/* an OFFER sent early may have waited on a busy loop's ready list: the
	 * bound counts from this settle too (the client waits while it hears
	 * OFFERs: EMP_NEG_TIMEOUT_KNOWN_MS); an OFFER more than a gap old goes again */
	int64_t t1 = es__now_ns() + es__g.neg_ms * 1000000ll;
	if (t1 > s->ng.sv.dl && !s->ng.sv.stepped)
		s->ng.sv.dl = t1;
	/* a blocking call (a read right after accept) waits the short bound
	 * at most, also for a socket the steps gave the long one */
	if (s->ng.sv.stepped && s->ng.sv.dl > t1)
		s->ng.sv.dl = t1;
	int look = 1;   /* read the side channel (es__neg_wait says when it need not) */
	int gone = atomic_load(&s->ng.kgone);   /* the client's FIN or reset came before its proof */
	for (;;) {
		int64_t until;
		unsigned seq0;
		/* the side channel before the ACCEPT always (the client's HELLO
		 * may have ended the wait while the ACCEPT waits unread: the
		 * wait's spin does not look at the side channel); after it only
		 * when the wait says so */
		int r = sv_step(s, look || !s->ng.sv.accepted, gone, &until, &seq0, 0);
		if (r != ES_PENDING)
			return r;
		int w = es__neg_wait(s, s->udp, 1, until, 1, seq0);
		look = w & NEG_LOOK;
		gone = (w & NEG_PEER_GONE) != 0;
	}
}

/* The same without waiting, for an epoll wait that took the socket from its
 * ready list (epwait.c): one look, and, undecided, the socket is looked at
 * again when its kernel connection changes (the liveness set: the client's
 * FIN, its bytes), when its connection does (the client's HELLO), and when
 * its OFFER is due again or its bound is over (timeq.c). So a client that
 * never answers holds nobody: a single-threaded server serves the others
 * while it waits out the bound in the background (a blocking settle held it
 * for the bound, 500 ms, per such connection). */
int es__negs_step(struct es_sock *s)
{
	int res;
	if (!s->ng.sv.begun && es__negs_begin(s, &res))
		return res;
	/* The side channel at every step but a first one right behind the
	 * OFFER (epoll_ctl ADD sent it and put the socket on the ready list:
	 * no answer can be there yet, a recv would only say EAGAIN), unless
	 * the client's HELLO is in (its ACCEPT went before it). An ACCEPT
	 * arriving later is read at the step its HELLO brings (the client
	 * sends both at once), or at the OFFER's next resend. */
	int read = s->ng.sv.stepped || es__now_ns() - s->ng.sv.sent > 1000000 || es__conn_hello_seen(s);
	if (!s->ng.sv.stepped) {
		s->ng.sv.stepped = 1;
		es__live_add(s);   /* its kernel socket's changes put it on its sets' ready lists */
		/* Waiting costs this server nothing now, and a client that is
		 * only slow (its process busy: 1000 connections from 4 hosts at
		 * once, t_fault_load) gets, once its host has answered another
		 * OFFER within the last second, the bound a client gives a server
		 * known to speak EMP (sv_step); a blocking settle waited the short
		 * bound from its own start, connection after connection. One that
		 * is gone ends it at once (its FIN), a plain one by ICMP; after
		 * the ACCEPT the proof has the short bound (sv_read). */
		s->ng.sv.dl = s->ng.sv.t0 + es__g.neg_ms * 1000000ll;
	}
	int64_t until;
	unsigned seq0;
	res = sv_step(s, read, atomic_load(&s->ng.kgone), &until, &seq0, 1);
	if (res == ES_PENDING)
		es__tq_later(s, until);
	return res;
}
