/* negotiate.c: deciding EMP or kernel for each TCP connection to a configured peer: the scheme, the checks on side-channel messages, the decisions (EMP, fallback, strict failure), settling (the sides: negserver.c, negclient.c). */
/*
 * Scheme (bounded, never in the application's byte stream, never waiting for
 * the peer *application* to speak):
 *
 *  client (connect)                                   server (accept + first use)
 *  - kernel connect (the control connection); its
 *    SYN carries the EMP mark (IP TTL NEG_TTL_MARK);
 *    at once a UDP socket bound to the TCP port u it
 *    took, connected to the server's (ip, port) P
 *                                                     - accept: the saved SYN has no
 *                                                       mark -> kernel TCP, no message
 *                                                     - first use: a UDP socket bound to
 *                                                       its TCP (ip, P), connected to (ip, u);
 *                                                       control and data receives posted from
 *                                                       any endpoint of the client's host
 *                                                       OFFER {ep, conn id, buffers, 4-tuple,
 *            <------------ UDP (P -> u) --------------  skey}, resent every 4..20 ms
 *  - OFFER from (ip, P), in bounds: post receives,
 *    ACCEPT {ep, conn id, buffers, skey, ckey} ------> - ACCEPT with skey: hold the peer
 *    HELLO (carries skey) ------------- EMP --------> - HELLO with skey from the endpoint
 *    (a blocking connect returns here)                  the ACCEPT named: control receives
 *    first write (data, key) ---------- EMP -------->   from it, data counted only from it
 *                                                       and with the key (the first write is
 *                                                       read from then on), connection is EMP
 *  - HELLO with ckey <-------------- EMP ------------   HELLO (carries ckey)
 *    connection is EMP (if REJECT instead: the first
 *    write again on kernel TCP, negclient.c)
 *
 * Binding to the kernel connection: a datagram's source address is checked by
 * the kernel (both UDP sockets are connected), and only the client's user
 * holds UDP u (bound right after its connect took u, with SO_REUSEPORT, which
 * another user cannot join: the kernel gives one port to connections toward
 * different servers), and only the server's processes (SO_REUSEPORT: same
 * user) hold UDP P on the server's address: each connection's socket,
 * and a guard kept from the first negotiation on (neglisten.c). Keys come from
 * getrandom: skey ties ACCEPT and REJECT to the OFFER, and the EMP stream is
 * bound to both keys (every data message carries the receiver's key's low 32
 * bits, every control message all 64, stream_engine.c), so a process or host that
 * did not take part cannot inject into, reset or read a stream by naming its
 * ids. An ACCEPT can still name any endpoint; the server sends that endpoint
 * nothing until a HELLO with skey has come from it: an endpoint that never
 * proves itself is refused and counted (es__negstats.refused), and nothing
 * was sent to it (no retried message can end a session with a victim's
 * process either). Every field is
 * checked against bounds (neg.h); a message that fails a check changes
 * nothing and is counted (forged); nothing changes after a side has decided.
 *
 * Fallback: an unmarked client is served on kernel TCP at once (one
 * getsockopt at accept, no wait). A marked client whose host refuses the OFFER
 * (ICMP), or that declines (REJECT), or that does not answer within
 * EMP_NEG_TIMEOUT_MS, gets kernel TCP too; a client that receives no OFFER
 * falls back after its bound (negclient.c). Commit points: the server commits
 * on the client's HELLO (before its deadline; until then it can still REJECT),
 * the client on the server's HELLO, which EMP delivers reliably because the
 * client posted its receives before sending ACCEPT. A side that gives up
 * after its receives were announced keeps them posted for a grace second
 * (linger.c), so a message already on its way lands. Strict mode turns each
 * fallback with a configured peer into an error.
 *
 * Why the server offers: the process that first uses the accepted socket
 * negotiates, so fork-after-listen and accept-then-fork servers use the
 * endpoint of the process that does the I/O; and the client's UDP twin
 * exists before the server can have accepted (an OFFER that still beats it
 * draws ICMP, and a marked client's OFFER goes again for 20 ms).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "neg.h"

extern char *program_invocation_short_name;

struct es_negstats es__negstats;

void es__neg_dump(void)
{
	es__dbg("negotiation: forged %u, refused %u, plain %u, early %u, replayed %u, gone %u",
		atomic_load(&es__negstats.forged), atomic_load(&es__negstats.refused),
		atomic_load(&es__negstats.plain), atomic_load(&es__negstats.early),
		atomic_load(&es__negstats.replayed), atomic_load(&es__negstats.gone));
}

void es__neg_count_forged(struct es_sock *s, const char *why)
{
	unsigned n = atomic_fetch_add(&es__negstats.forged, 1) + 1;
	es__dbg("fd %d: negotiation message dropped: %s (%u so far)", s->kfd, why, n);
}

int64_t es__neg_bound_ns(int lng)
{
	int ms = lng && es__g.neg_known_ms > es__g.neg_ms ? es__g.neg_known_ms : es__g.neg_ms;
	return ms * 1000000ll;
}

int es__neg_self_and_peer(const struct sockaddr_in *local, const struct sockaddr_in *remote,
			 uint16_t port)
{
	const struct emp_conf *cf = &es__g.conf;
	int p = emp_conf_find_ip(cf, remote->sin_addr.s_addr);
	if (p < 0)
		return -1;
	if (local && emp_conf_find_ip(cf, local->sin_addr.s_addr) == p)
		return -1;
	if (!emp_conf_use_emp(cf, program_invocation_short_name, p, port))
		return -1;
	return p;
}

/* AF_INET, or AF_INET6 carrying a v4-mapped address, as sockaddr_in */
int es__to_in(const struct sockaddr *sa, socklen_t len, struct sockaddr_in *out)
{
	if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		*out = *(const struct sockaddr_in *)sa;
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
		if (!IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
			return -1;
		memset(out, 0, sizeof *out);
		out->sin_family = AF_INET;
		out->sin_port = a->sin6_port;
		memcpy(&out->sin_addr, &a->sin6_addr.s6_addr[12], 4);
		return 0;
	}
	return -1;
}

int es__neg_name_in(int fd, int peer, struct sockaddr_in *out)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof ss;
	int r = peer ? R_(getpeername)(fd, (struct sockaddr *)&ss, &l)
		     : R_(getsockname)(fd, (struct sockaddr *)&ss, &l);
	return r < 0 ? -1 : es__to_in((struct sockaddr *)&ss, l, out);
}

int es__neg_udp_socket(void)
{
	return R_(socket)(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

void es__neg_fill(struct neg_msg *m, int type, struct es_sock *s)
{
	memset(m, 0, sizeof *m);
	m->magic = htonl(NEG_MAGIC);
	m->version = NEG_VERSION;
	m->type = (uint8_t)type;
	if (es__g.ep && s->c) {
		m->ep = htons(emp_endpoint_id(es__g.ep));
		m->conn = htonl(es__conn_lid(s));
	} else if (es__g.ep && s->server && s->ng.lid) {
		m->ep = htons(emp_endpoint_id(es__g.ep));
		m->conn = htonl(s->ng.lid);
	}
	m->nbufs = htonl(es__g.nbufs);
	m->bufsz = htonl(es__g.bufsz);
	m->sip = s->local.sin_addr.s_addr;
	m->sport = s->local.sin_port;
	m->dip = s->remote.sin_addr.s_addr;
	m->dport = s->remote.sin_port;
	m->skey = s->ng.skey;
	m->ckey = s->ng.ckey;
}

int es__neg_valid(const struct neg_msg *m, ssize_t n, struct es_sock *s)
{
	return n == (ssize_t)sizeof *m && ntohl(m->magic) == NEG_MAGIC &&
	       m->version == NEG_VERSION && m->sip == s->remote.sin_addr.s_addr &&
	       m->sport == s->remote.sin_port && m->dip == s->local.sin_addr.s_addr &&
	       m->dport == s->local.sin_port;
}

int es__neg_params_ok(const struct neg_msg *m)
{
	uint16_t ep = ntohs(m->ep);
	uint32_t conn = ntohl(m->conn), nb = ntohl(m->nbufs), bs = ntohl(m->bufsz);
	return ep != 0 && ep != EMP_ANY_EP && conn != 0 && !(conn & 0x80000000u) &&
	       nb >= NEG_MIN_BUFS && nb <= NEG_MAX_BUFS && bs >= NEG_MIN_BUFSZ && bs <= NEG_MAX_BUFSZ &&
	       m->skey != 0;
}

void es__neg_close_udp(struct es_sock *s)
{
	if (s->udp >= 0)
		R_(close)(s->udp);
	s->udp = -1;
}

unsigned es__neg_seq(struct es_sock *s)
{
	return atomic_load(&s->seq);
}

/* Until the connection changes (its sequence moves past seq0: a HELLO
 * processed by whichever thread drove the engine), a datagram on udp, the
 * kernel connection ended at the peer (watch_peer: its FIN, a reset), or
 * until. want_engine: this thread drives the engine meanwhile (libemp's
 * wait: a spin, then one ppoll on the side channel, our eventfd and the
 * device). NEG_LOOK unless the wait ended on a change of the connection and
 * did not see the side channel readable (it need not be read now: a
 * datagram there ends the next wait at once); NEG_PEER_GONE, with NEG_LOOK,
 * when the peer ended the kernel connection. */
int es__neg_wait(struct es_sock *s, int udp, int watch_peer, int64_t until, int want_engine, unsigned seq0)
{
	/* waiting for a side-channel message alone (a client before its
	 * OFFER): the wait spins too, looking at the side channel now and then
	 * (es__klook_due), instead of sleeping at once */
	int look_udp = !want_engine && udp >= 0;
	emp_endpoint_t *ep = want_engine || look_udp ? es__g.ep : NULL;
	int64_t now = es__now_ns();
	int look = 1;
	if (now >= until)
		return NEG_LOOK;
	/* else no look at udp: the HELLO right behind the ACCEPT ends the spin */
	struct es_wake wk = { .efd = es__tl_efd(), .look_fds = look_udp };
	struct es_waiter w;
	es__sock_lock(s);
	es__waiter_add(s, &w, &wk);
	int seen = atomic_load(&s->seq) != seq0;
	es__sock_unlock(s);
	int gone = 0;
	if (!seen) {
		struct pollfd p[5];   /* room for the device's two (es__wait_fds) */
		int np = 0, pi = -1;
		p[np++] = (struct pollfd){ wk.efd, POLLIN, 0 };
		if (udp >= 0)
			p[np++] = (struct pollfd){ udp, POLLIN, 0 };
		if (watch_peer && s->kfd >= 0) {
			pi = np;
			p[np++] = (struct pollfd){ s->kfd, POLLRDHUP, 0 };
		}
		if (ep) {
			es__wait_fds(&wk, p, np, until - now, NULL);
		} else {
			int64_t wait = until - now;
			struct timespec ts = { (time_t)(wait / 1000000000), (long)(wait % 1000000000) };
			R_(ppoll)(p, (nfds_t)np, &ts, NULL);
		}
		gone = pi >= 0 && (p[pi].revents & (POLLRDHUP | POLLHUP | POLLERR));
		/* after the peer's end, the side channel once more: what it sent
		 * before it (an ACCEPT, an OFFER) still counts */
		look = udp < 0 || p[1].revents || gone || es__now_ns() >= until;
	}
	es__sock_lock(s);
	es__waiter_del(s, &w);
	if (atomic_load(&s->seq) == seq0)
		look = 1;                /* not a change of ours: look at everything */
	es__sock_unlock(s);
	es__wake_reset(&wk);
	return (look ? NEG_LOOK : 0) | (gone ? NEG_PEER_GONE : 0);
}

/* The negotiation is over without EMP: out of the responder, no buffers, no
 * side channel. */
static void abandon(struct es_sock *s)
{
	es__negc_forget(s);
	if (s->c)
		es__conn_destroy(s, 0);
	es__neg_close_udp(s);
}

int es__neg_finish_emp(struct es_sock *s)
{
	es__negc_forget(s);
	es__sock_lock(s);
	s->state = ES_EMP;
	struct emp_conn_info ri;
	int row = es__conn_row(s->c, &ri);
	es__live_add(s);        /* its kernel socket now only says whether the peer lives */
	es__sock_update(s, 1);
	es__sock_unlock(s);
	es__conn_row_put(row, &ri);   /* empstat lists it */
	es__neg_close_udp(s);
	es__ep_sock_switched(s);
	es__dbg("fd %d: EMP with %s:%u (conn %u)", s->kfd, inet_ntoa(s->remote.sin_addr),
		ntohs(s->remote.sin_port), es__conn_lid(s));
	return ES_EMP;
}

int es__neg_fallback(struct es_sock *s, const char *why)
{
	int fd = s->kfd;
	if (es__g.strict) {
		es__fail_strict(s, ECONNREFUSED, why);
		errno = ECONNREFUSED;
		return ES_FAILED;
	}
	es__dbg("fd %d: kernel TCP with %s:%u: %s", fd, inet_ntoa(s->remote.sin_addr),
		ntohs(s->remote.sin_port), why);
	if (!s->server && s->ng.early)
		es__negc_replay(s);   /* the first write went over EMP: again on kernel TCP */
	es__drop_to_kernel(fd, s);
	return ES_CAND;
}

static void unmap(int fd, void *o, void *arg)
{
	if (o == arg)
		es__fd_set(fd, NULL);
	(void)fd;
}

void es__drop_to_kernel(int fd, struct es_sock *s)
{
	(void)fd;
	abandon(s);
	es__live_del(s);
	s->state = ES_CAND;   /* kernel from now on */
	es__fd_lock();
	es__fd_foreach(unmap, s);
	es__fd_unlock();
	es__ep_sock_switched(s);
	s->kind = 0;
	es__hooks_quiesce();   /* a liveness harvest that found s before the unmap */
	s->dropped = 1;
	es__sock_release(s);   /* freed now, or by the last call still holding it */
}

void es__fail_strict(struct es_sock *s, int err, const char *why)
{
	es__log("connection %s:%u: %s; strict mode refuses kernel TCP",
		inet_ntoa(s->remote.sin_addr), ntohs(s->remote.sin_port), why);
	abandon(s);
	struct linger lg = { 1, 0 };
	R_(setsockopt)(s->kfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	R_(shutdown)(s->kfd, SHUT_RDWR);
	es__live_del(s);
	es__sock_lock(s);
	s->err = err;
	s->state = ES_FAILED;
	es__sock_update(s, 1);
	es__sock_unlock(s);
	es__ep_sock_switched(s);
}

/* a non-blocking connect that finished: ES_PENDING (negotiating), ES_CAND
 * (it failed: the kernel reports it; s is freed), ES_CONNECTING (not yet);
 * any other state as it is */
static int connect_done(int fd, struct es_sock *s)
{
	if (s->state != ES_CONNECTING)
		return s->state;
	struct pollfd p = { s->kfd, POLLOUT, 0 };
	if (R_(poll)(&p, 1, 0) <= 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP)))
		return s->state;
	struct sockaddr_in pa;
	socklen_t l = sizeof pa;
	if ((p.revents & POLLERR) || R_(getpeername)(s->kfd, (struct sockaddr *)&pa, &l) < 0) {
		es__drop_to_kernel(fd, s);   /* failed connect: the kernel reports it */
		return ES_CAND;
	}
	s->state = ES_PENDING;
	s->server = 0;
	return ES_PENDING;
}

/* Bring a connection that still has to negotiate to a decision: ES_CAND when
 * it went to the kernel (s is freed then), else its new state. */
static int settle(int fd, struct es_sock *s)
{
	int st = connect_done(fd, s);
	if (st != ES_PENDING)
		return st;
	return s->server ? es__negs_settle(s) : es__negc_settle(s);
}

/* One settle per socket at a time (a second thread waits for the first one's
 * outcome); different sockets settle in parallel. */
static pthread_mutex_t settle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t settle_cv = PTHREAD_COND_INITIALIZER;
pthread_mutex_t *const es__lk_settle = &settle_mu;

/* the settle is over: r ES_CAND means s is gone (and unmapped, so waiters see that) */
static void settle_end(struct es_sock *s, int r)
{
	pthread_mutex_lock(&settle_mu);
	if (r != ES_CAND)
		s->ng.settling = 0;
	pthread_cond_broadcast(&settle_cv);
	pthread_mutex_unlock(&settle_mu);
}

/* what a claim asks for: any socket still to negotiate (an accepted one, or
 * a connect that may have finished), an accepted one, or an accepted one
 * whose OFFER has not gone */
enum { CLAIM_UNDECIDED, CLAIM_SERVER, CLAIM_UNBEGUN };

/* fd's socket, if it is what the caller asks for and no other thread settles
 * it: claimed for the caller (1); else 0 with *state what es__settle would
 * return */
static int claim(int fd, struct es_sock *s, int what, int *state)
{
	pthread_mutex_lock(&settle_mu);
	int ok = es__sock(fd) == s && !s->ng.settling && es__st_undecided(s) &&
		 (what == CLAIM_UNDECIDED || (s->state == ES_PENDING && s->server &&
					      !(what == CLAIM_UNBEGUN && s->ng.sv.begun)));
	if (ok)
		s->ng.settling = 1;
	else
		*state = es__sock(fd) == s ? s->state : ES_CAND;
	pthread_mutex_unlock(&settle_mu);
	return ok;
}

int es__settle(int fd, struct es_sock *s)
{
	pthread_mutex_lock(&settle_mu);
	while (es__sock(fd) == s && s->ng.settling)
		pthread_cond_wait(&settle_cv, &settle_mu);
	if (es__sock(fd) != s || !es__st_undecided(s)) {
		int r = es__sock(fd) == s ? s->state : ES_CAND;
		pthread_mutex_unlock(&settle_mu);
		return r;
	}
	s->ng.settling = 1;
	pthread_mutex_unlock(&settle_mu);
	int e = errno;
	es__reap_hold();   /* callers hold no lock: connections the settle's engine work finished closing go at its end */
	int r = settle(fd, s);
	es__reap_release();
	if (r != ES_FAILED)
		errno = e;
	settle_end(s, r);
	return r;
}

void es__settle_for_exec(int fd, struct es_sock *s)
{
	int r;
	if (claim(fd, s, CLAIM_SERVER, &r))
		settle_end(s, es__negs_exec(s));
}

void es__settle_give_away(int fd, struct es_sock *s)
{
	int r;
	if (!claim(fd, s, CLAIM_UNBEGUN, &r))
		return;              /* ours to settle already (or not a server's) */
	es__dbg("fd %d: handed to another process before its first use: that process negotiates", fd);
	int ttl = s->ng.mark == MARK_EMP ? NEG_TTL_MARK : s->ng.mark == MARK_UNKNOWN ? NEG_TTL_UNKNOWN : 0;
	if (ttl)   /* what the SYN said, for it (neg.h); plain: the default TTL */
		R_(setsockopt)(fd, IPPROTO_IP, IP_TTL, &ttl, sizeof ttl);
	es__drop_to_kernel(fd, s);
	settle_end(s, ES_CAND);
}

int es__settle_begin(int fd, struct es_sock *s)
{
	int res;
	if (!claim(fd, s, CLAIM_UNBEGUN, &res))
		return res;
	int e = errno;
	res = ES_PENDING;
	es__reap_hold();
	if (es__negs_begin(s, &res) == 0) {
		es__sock_lock(s);
		es__sock_update(s, 1);   /* on its sets' ready lists: a wait settles it */
		es__sock_unlock(s);
	}
	es__reap_release();
	if (res != ES_FAILED)
		errno = e;
	settle_end(s, res);
	return res;
}

int es__settle_step(int fd, struct es_sock *s)
{
	int res;
	if (!claim(fd, s, CLAIM_UNDECIDED, &res))
		return res;          /* decided, or another thread settles it */
	int e = errno;
	es__reap_hold();
	if (s->server)
		res = es__negs_step(s);
	else if ((res = connect_done(fd, s)) == ES_PENDING)
		res = es__negc_step(s);
	es__reap_release();
	if (res != ES_FAILED)
		errno = e;
	settle_end(s, res);
	return res;
}

ssize_t es__settle_early(int fd, struct es_sock *s, const struct iovec *iov, int n, int flags)
{
	pthread_mutex_lock(&settle_mu);
	if (es__sock(fd) != s || s->ng.settling || s->state != ES_PENDING || s->server) {
		pthread_mutex_unlock(&settle_mu);
		return -2;
	}
	s->ng.settling = 1;
	pthread_mutex_unlock(&settle_mu);
	ssize_t r = es__negc_early(s, iov, n, flags);
	pthread_mutex_lock(&settle_mu);
	s->ng.settling = 0;
	pthread_cond_broadcast(&settle_cv);
	pthread_mutex_unlock(&settle_mu);
	return r;
}

static void child_fix(int fd, void *o, void *arg)
{
	(void)fd; (void)arg;
	struct es_sock *s = o;
	if (s->kind == ES_KIND_SOCK)
		s->ng.settling = 0;   /* the thread settling it stayed in the parent */
}

/* fork.c: the threads settling sockets stayed in the parent */
void es__settle_atfork_child(void)
{
	pthread_cond_init(&settle_cv, NULL);
	es__fd_foreach(child_fix, NULL);
}
