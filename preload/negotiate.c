/* negotiate.c: deciding EMP or kernel for each TCP connection to a configured peer, over a UDP side channel. */
/*
 * Scheme (bounded, never in the application's byte stream, never waiting for
 * the peer *application* to speak):
 *
 *  client (connect)                                   server (accept + first use)
 *  - before the kernel connect: bind a UDP socket
 *    and the TCP socket to the SAME local port u
 *    (the app's own bind is kept; retried on clash)
 *  - kernel connect (the control connection)
 *                                                     - OFFER {ep, conn id, buffers,
 *            <------------ UDP to (client ip, u) ------  TCP 4-tuple, nonce}, resent
 *                                                        every 2..20 ms
 *  - OFFER matches the 4-tuple: post receives, -------> ACCEPT {ep, conn id, buffers, nonce}
 *    resend ACCEPT for every repeated OFFER            - ACCEPT: post HELLO over EMP,
 *  - HELLO arrives over EMP (reliable) <------------    connection is EMP
 *    connection is EMP
 *
 *  Many connections at once: the client process answers every OFFER the moment
 *  it arrives, for all its pending connections, from a background responder
 *  thread (negclient.c), not only for the socket its application is settling;
 *  so whatever order the server negotiates its accepted sockets in, each takes
 *  one round trip. Negotiations of different sockets run in parallel (one
 *  settle per socket at a time).
 *
 *  Why this way round: the server's process that first uses the accepted socket
 *  negotiates, so fork-after-listen and accept-then-fork servers use the
 *  endpoint of the process that does the I/O; the client's UDP port is its TCP
 *  port, so the server needs no well-known port and no registry, and the
 *  client's socket exists before the SYN leaves, so no OFFER can race it.
 *  Fallback is fast where it matters: a plain client's host answers the OFFER
 *  with ICMP port unreachable (ECONNREFUSED on the server's connected UDP
 *  socket); a plain server never sends an OFFER, so the client falls back after
 *  EMP_NEG_TIMEOUT_MS (500 ms default) from connect; toward a server that
 *  offered EMP before (ip, port) it waits EMP_NEG_TIMEOUT_KNOWN_MS (5 s), as such
 *  a server is only busy (its OFFER comes when it first uses the accepted socket,
 *  which may sit in its listen backlog). Commit points: the server
 *  commits on ACCEPT (before its deadline; afterwards it sends REJECT), the
 *  client only on HELLO, which EMP delivers reliably because the client posted
 *  its receives before sending ACCEPT; the client waits for it a deadline longer
 *  than the server's. A client that gives up closes its UDP socket, so a late
 *  OFFER gets ICMP and the server falls back too. Both sides therefore end in
 *  the same state unless every ACCEPT/REJECT of a negotiation is lost.
 *  Strict mode turns each fallback with a configured peer into an error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "neg.h"

extern char *program_invocation_short_name;

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

int es__eligible_accept(int fd, struct sockaddr_in *local, struct sockaddr_in *remote)
{
	if (!es__conf())
		return 0;
	if (es__neg_name_in(fd, 0, local) < 0 || es__neg_name_in(fd, 1, remote) < 0)
		return 0;
	if (emp_conf_find_ip(&es__g.conf, local->sin_addr.s_addr) < 0)
		return 0;
	return es__neg_self_and_peer(local, remote, ntohs(local->sin_port)) >= 0;
}

int es__neg_udp_socket(void)
{
	return R_(socket)(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

void es__neg_fill(struct neg_msg *m, int type, struct es_sock *s, uint64_t nonce)
{
	memset(m, 0, sizeof *m);
	m->magic = htonl(NEG_MAGIC);
	m->version = NEG_VERSION;
	m->type = (uint8_t)type;
	if (es__g.ep && s->c) {
		m->ep = htons(emp_endpoint_id(es__g.ep));
		m->conn = htonl(es__conn_lid(s));
	}
	m->nbufs = htonl(es__g.nbufs);
	m->bufsz = htonl(es__g.bufsz);
	m->sip = s->local.sin_addr.s_addr;
	m->sport = s->local.sin_port;
	m->dip = s->remote.sin_addr.s_addr;
	m->dport = s->remote.sin_port;
	m->nonce = nonce;
}

int es__neg_valid(const struct neg_msg *m, ssize_t n, struct es_sock *s)
{
	return n >= (ssize_t)sizeof *m && ntohl(m->magic) == NEG_MAGIC &&
	       m->version == NEG_VERSION && m->sip == s->remote.sin_addr.s_addr &&
	       m->sport == s->remote.sin_port && m->dip == s->local.sin_addr.s_addr &&
	       m->dport == s->local.sin_port;
}

void es__neg_close_udp(struct es_sock *s)
{
	if (s->udp >= 0)
		R_(close)(s->udp);
	s->udp = -1;
}

/* The negotiation is over without EMP: out of the responder, no buffers, no
 * side channel. */
static void abandon(struct es_sock *s)
{
	es__neg_forget(s);
	if (s->c)
		es__conn_destroy(s, 0);
	es__neg_close_udp(s);
}

int es__neg_finish_emp(struct es_sock *s)
{
	es__neg_forget(s);
	es__sock_lock(s);
	s->state = ES_EMP;
	es__live_add(s);        /* its kernel socket now only says whether the peer lives */
	es__sock_update(s, 1);
	es__sock_unlock(s);
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
	es__drop_to_kernel(fd, s);
	return ES_CAND;
}

/* The server's side; s is an accepted socket on its first use. */
static int neg_server(struct es_sock *s)
{
	emp_endpoint_t *ep = es__engine();
	int host = ep ? emp_host_by_ip(ep, s->remote.sin_addr.s_addr) : -1;
	if (host < 0)
		return es__neg_fallback(s, "no EMP endpoint");
	if (es__conn_create(s, (uint16_t)host, EMP_ANY_EP) < 0)
		return es__neg_fallback(s, "cannot set up EMP buffers");
	int udp = es__neg_udp_socket();
	struct sockaddr_in b = s->local;
	b.sin_port = 0;
	if (udp < 0 || R_(bind)(udp, (struct sockaddr *)&b, sizeof b) < 0 ||
	    R_(connect)(udp, (struct sockaddr *)&s->remote, sizeof s->remote) < 0) {
		if (udp >= 0)
			R_(close)(udp);
		return es__neg_fallback(s, "no side channel");
	}
	s->udp = udp;
	uint64_t nonce = ((uint64_t)rand() << 32) ^ (uint64_t)es__now_ns() ^ es__conn_lid(s);
	struct neg_msg o, m;
	es__neg_fill(&o, N_OFFER, s, nonce);
	int64_t dl = es__now_ns() + es__g.neg_ms * 1000000ll, next = 0, gap = 2000000;
	for (;;) {
		int64_t now = es__now_ns();
		if (now >= dl) {
			es__neg_fill(&o, N_REJECT, s, nonce);
			R_(send)(udp, &o, sizeof o, MSG_DONTWAIT);
			return es__neg_fallback(s, "client did not answer the EMP offer (plain program?)");
		}
		if (now >= next) {
			if (R_(send)(udp, &o, sizeof o, MSG_DONTWAIT) < 0 && errno == ECONNREFUSED)
				return es__neg_fallback(s, "client host refused the offer (plain program)");
			next = now + gap;
			if (gap < 20000000)
				gap *= 2;
		}
		struct pollfd p = { udp, POLLIN, 0 };
		int64_t until = next < dl ? next : dl;
		R_(poll)(&p, 1, (int)((until - now + 999999) / 1000000));
		for (;;) {
			ssize_t n = R_(recv)(udp, &m, sizeof m, MSG_DONTWAIT);
			if (n < 0) {
				if (errno == ECONNREFUSED)
					return es__neg_fallback(s, "client host refused the offer (plain program)");
				break;
			}
			if (!es__neg_valid(&m, n, s) || m.nonce != nonce)
				continue;
			if (m.type == N_REJECT)
				return es__neg_fallback(s, "client declined EMP");
			if (m.type != N_ACCEPT)
				continue;
			es__sock_lock(s);
			int r = es__conn_set_peer(s, ntohs(m.ep), ntohl(m.conn), ntohl(m.nbufs), ntohl(m.bufsz));
			es__sock_unlock(s);
			if (r < 0) {
				es__neg_fill(&o, N_REJECT, s, nonce);
				R_(send)(udp, &o, sizeof o, MSG_DONTWAIT);
				return es__neg_fallback(s, "cannot set up EMP send slots (descriptors?)");
			}
			es__sock_lock(s);
			r = es__conn_send_hello(s);
			es__sock_unlock(s);
			if (r < 0)
				return es__neg_fallback(s, "EMP hello failed");
			return es__neg_finish_emp(s);
		}
	}
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
	free(s);   /* callers only compare the pointer after this */
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

/* Bring a connection that still has to negotiate to a decision: ES_CAND when
 * it went to the kernel (s is freed then), else its new state. */
static int settle(int fd, struct es_sock *s)
{
	if (s->state == ES_CONNECTING) {
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
	}
	if (s->state != ES_PENDING)
		return s->state;
	return s->server ? neg_server(s) : es__negc_settle(s);
}

/* One settle per socket at a time (a second thread waits for the first one's
 * outcome); different sockets settle in parallel. */
static pthread_mutex_t settle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t settle_cv = PTHREAD_COND_INITIALIZER;

int es__settle(int fd, struct es_sock *s, int block)
{
	(void)block;
	pthread_mutex_lock(&settle_mu);
	while (es__sock(fd) == s && s->ng.settling)
		pthread_cond_wait(&settle_cv, &settle_mu);
	if (es__sock(fd) != s || (s->state != ES_CONNECTING && s->state != ES_PENDING)) {
		int r = es__sock(fd) == s ? s->state : ES_CAND;
		pthread_mutex_unlock(&settle_mu);
		return r;
	}
	s->ng.settling = 1;
	pthread_mutex_unlock(&settle_mu);
	int e = errno;
	int r = settle(fd, s);
	if (r != ES_FAILED)
		errno = e;
	pthread_mutex_lock(&settle_mu);
	if (r != ES_CAND)   /* else s is gone (and unmapped, so waiters see that) */
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

static void atfork_child(void)
{
	pthread_mutex_init(&settle_mu, NULL);
	pthread_cond_init(&settle_cv, NULL);
	es__fd_foreach(child_fix, NULL);
}

__attribute__((constructor)) static void neg_init(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}
