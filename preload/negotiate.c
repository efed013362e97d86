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
 *  Why this way round: the server's process that first uses the accepted socket
 *  negotiates, so fork-after-listen and accept-then-fork servers use the
 *  endpoint of the process that does the I/O; the client's UDP port is its TCP
 *  port, so the server needs no well-known port and no registry, and the
 *  client's socket exists before the SYN leaves, so no OFFER can race it.
 *  Fallback is fast where it matters: a plain client's host answers the OFFER
 *  with ICMP port unreachable (ECONNREFUSED on the server's connected UDP
 *  socket); a plain server never sends an OFFER, so the client falls back after
 *  EMP_NEG_TIMEOUT_MS (500 ms default) from connect. Commit points: the server
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

#include "es.h"

#define NEG_MAGIC 0x454d5073u   /* "EMPs" */
#define NEG_VERSION 1
enum { N_OFFER = 1, N_ACCEPT = 2, N_REJECT = 3 };

struct neg_msg {
	uint32_t magic;
	uint8_t version, type;
	uint16_t ep;
	uint32_t conn, nbufs, bufsz;
	uint32_t sip, dip;       /* sender's local and remote TCP address */
	uint16_t sport, dport;
	uint64_t nonce;
};

extern char *program_invocation_short_name;

static int self_and_peer(const struct sockaddr_in *local, const struct sockaddr_in *remote,
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

static int name_in(int fd, int peer, struct sockaddr_in *out)
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
	if (name_in(fd, 0, local) < 0 || name_in(fd, 1, remote) < 0)
		return 0;
	if (emp_conf_find_ip(&es__g.conf, local->sin_addr.s_addr) < 0)
		return 0;
	return self_and_peer(local, remote, ntohs(local->sin_port)) >= 0;
}

static int udp_socket(void)
{
	return R_(socket)(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

int es__neg_client_prepare(struct es_sock *s, const struct sockaddr_in *to)
{
	if (!es__conf() || self_and_peer(NULL, to, ntohs(to->sin_port)) < 0)
		return 0;
	emp_endpoint_t *ep = es__engine();
	if (!ep) {
		if (es__g.strict) {
			es__log("connect to %s: no EMP endpoint (strict mode)", inet_ntoa(to->sin_addr));
			errno = ENETUNREACH;
			return -1;
		}
		return 0;
	}
	int self = emp_self_host(ep), host = emp_host_by_ip(ep, to->sin_addr.s_addr);
	if (host < 0 || host == self)
		return 0;
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	if (R_(getsockname)(s->kfd, (struct sockaddr *)&a, &l) < 0)
		return 0;
	socklen_t alen = l;
	in_port_t *aport = a.ss_family == AF_INET6 ? &((struct sockaddr_in6 *)&a)->sin6_port
						   : &((struct sockaddr_in *)&a)->sin_port;
	int udp = -1;
	if (*aport) {
		udp = udp_socket();
		struct sockaddr_in u = { .sin_family = AF_INET, .sin_port = *aport };
		if (udp >= 0 && R_(bind)(udp, (struct sockaddr *)&u, sizeof u) < 0) {
			R_(close)(udp);
			udp = -1;
		}
	} else {
		for (int i = 0; i < 16 && udp < 0; i++) {
			udp = udp_socket();
			if (udp < 0)
				break;
			struct sockaddr_in u = { .sin_family = AF_INET };
			l = sizeof u;
			if (R_(bind)(udp, (struct sockaddr *)&u, sizeof u) < 0 ||
			    R_(getsockname)(udp, (struct sockaddr *)&u, &l) < 0) {
				R_(close)(udp);
				udp = -1;
				break;
			}
			struct sockaddr_storage t = a;
			*(t.ss_family == AF_INET6 ? &((struct sockaddr_in6 *)&t)->sin6_port
						  : &((struct sockaddr_in *)&t)->sin_port) = u.sin_port;
			if (R_(bind)(s->kfd, (struct sockaddr *)&t, alen) < 0) {
				R_(close)(udp);
				udp = -1;
				if (errno != EADDRINUSE)
					break;
			}
		}
	}
	if (udp < 0) {
		if (es__g.strict) {
			es__log("connect to %s: no side-channel port for EMP negotiation (strict mode)",
				inet_ntoa(to->sin_addr));
			errno = EADDRINUSE;
			return -1;
		}
		return 0;
	}
	s->udp = udp;
	s->remote = *to;
	return 1;
}

static void fill(struct neg_msg *m, int type, struct es_sock *s, uint64_t nonce)
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

/* message from the peer about this connection (its local = our remote) */
static int valid(const struct neg_msg *m, ssize_t n, struct es_sock *s)
{
	return n >= (ssize_t)sizeof *m && ntohl(m->magic) == NEG_MAGIC &&
	       m->version == NEG_VERSION && m->sip == s->remote.sin_addr.s_addr &&
	       m->sport == s->remote.sin_port && m->dip == s->local.sin_addr.s_addr &&
	       m->dport == s->local.sin_port;
}

static void finish_emp(struct es_sock *s)
{
	es__sock_lock(s);
	s->state = ES_EMP;
	es__signal(s);
	es__sock_unlock(s);
	if (s->udp >= 0) {
		R_(close)(s->udp);
		s->udp = -1;
	}
	es__ep_sock_switched(s);
	es__dbg("fd %d: EMP with %s:%u (conn %u)", s->kfd, inet_ntoa(s->remote.sin_addr),
		ntohs(s->remote.sin_port), es__conn_lid(s));
}

static int fallback(struct es_sock *s, const char *why)
{
	int fd = s->kfd;
	if (es__g.strict) {
		es__fail_strict(s, ECONNREFUSED, why);
		errno = ECONNREFUSED;
		return -1;
	}
	es__dbg("fd %d: kernel TCP with %s:%u: %s", fd, inet_ntoa(s->remote.sin_addr),
		ntohs(s->remote.sin_port), why);
	es__drop_to_kernel(fd, s);
	return 0;
}

int es__neg_client(struct es_sock *s)
{
	socklen_t l;
	name_in(s->kfd, 0, &s->local);
	int64_t dl = es__now_ns() + es__g.neg_ms * 1000000ll, dl2 = 0;
	struct neg_msg m, a;
	struct sockaddr_in from;
	int have_offer = 0;
	for (;;) {
		int64_t now = es__now_ns();
		if (!have_offer && now >= dl)
			return fallback(s, "no EMP offer from the server (plain program?)");
		if (have_offer) {
			if (es__conn_hello_seen(s)) {
				finish_emp(s);
				return 0;
			}
			if (now >= dl2)
				return fallback(s, "server did not confirm EMP");
			es__sock_lock(s);
			int64_t t = now + 2000000;
			es__wait(s, t < dl2 ? t : dl2);
			es__sock_unlock(s);
			if (es__conn_hello_seen(s))
				continue;
		} else {
			struct pollfd p = { s->udp, POLLIN, 0 };
			int ms = (int)((dl - now + 999999) / 1000000);
			if (R_(poll)(&p, 1, ms) < 0 && errno != EINTR)
				return fallback(s, "poll failed");
		}
		for (;;) {
			l = sizeof from;
			ssize_t n = R_(recvfrom)(s->udp, &m, sizeof m, MSG_DONTWAIT,
						 (struct sockaddr *)&from, &l);
			if (n < 0)
				break;
			if (!valid(&m, n, s))
				continue;
			if (m.type == N_REJECT && have_offer)
				return fallback(s, "server gave up on EMP");
			if (m.type != N_OFFER)
				continue;
			if (!have_offer) {
				emp_endpoint_t *ep = es__engine();
				int host = ep ? emp_host_by_ip(ep, s->remote.sin_addr.s_addr) : -1;
				if (host < 0 || es__conn_create(s, (uint16_t)host, ntohs(m.ep)) < 0 ||
				    es__conn_set_peer(s, ntohs(m.ep), ntohl(m.conn), ntohl(m.nbufs),
						      ntohl(m.bufsz)) < 0) {
					fill(&a, N_REJECT, s, m.nonce);
					R_(sendto)(s->udp, &a, sizeof a, 0, (struct sockaddr *)&from, l);
					return fallback(s, "cannot set up EMP buffers");
				}
				have_offer = 1;
				dl2 = es__now_ns() + (es__g.neg_ms + 200) * 1000000ll;
			}
			fill(&a, N_ACCEPT, s, m.nonce);
			R_(sendto)(s->udp, &a, sizeof a, 0, (struct sockaddr *)&from, l);
		}
	}
}

int es__neg_server(struct es_sock *s)
{
	emp_endpoint_t *ep = es__engine();
	int host = ep ? emp_host_by_ip(ep, s->remote.sin_addr.s_addr) : -1;
	if (host < 0)
		return fallback(s, "no EMP endpoint");
	if (es__conn_create(s, (uint16_t)host, EMP_ANY_EP) < 0)
		return fallback(s, "cannot set up EMP buffers");
	int udp = udp_socket();
	struct sockaddr_in b = s->local;
	b.sin_port = 0;
	if (udp < 0 || R_(bind)(udp, (struct sockaddr *)&b, sizeof b) < 0 ||
	    R_(connect)(udp, (struct sockaddr *)&s->remote, sizeof s->remote) < 0) {
		if (udp >= 0)
			R_(close)(udp);
		return fallback(s, "no side channel");
	}
	s->udp = udp;
	uint64_t nonce = ((uint64_t)rand() << 32) ^ (uint64_t)es__now_ns() ^ es__conn_lid(s);
	struct neg_msg o, m;
	fill(&o, N_OFFER, s, nonce);
	int64_t dl = es__now_ns() + es__g.neg_ms * 1000000ll, next = 0, gap = 2000000;
	for (;;) {
		int64_t now = es__now_ns();
		if (now >= dl) {
			fill(&o, N_REJECT, s, nonce);
			R_(send)(udp, &o, sizeof o, MSG_DONTWAIT);
			return fallback(s, "client did not answer the EMP offer (plain program?)");
		}
		if (now >= next) {
			if (R_(send)(udp, &o, sizeof o, MSG_DONTWAIT) < 0 && errno == ECONNREFUSED)
				return fallback(s, "client host refused the offer (plain program)");
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
					return fallback(s, "client host refused the offer (plain program)");
				break;
			}
			if (!valid(&m, n, s) || m.nonce != nonce)
				continue;
			if (m.type == N_REJECT)
				return fallback(s, "client declined EMP");
			if (m.type != N_ACCEPT)
				continue;
			es__sock_lock(s);
			int r = es__conn_set_peer(s, ntohs(m.ep), ntohl(m.conn), ntohl(m.nbufs), ntohl(m.bufsz));
			es__sock_unlock(s);
			if (r < 0) {
				fill(&o, N_REJECT, s, nonce);
				R_(send)(udp, &o, sizeof o, MSG_DONTWAIT);
				return fallback(s, "cannot set up EMP send slots (descriptors?)");
			}
			es__sock_lock(s);
			r = es__conn_send_hello(s);
			es__sock_unlock(s);
			if (r < 0)
				return fallback(s, "EMP hello failed");
			finish_emp(s);
			return 0;
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
	if (s->c)
		es__conn_destroy(s, 0);
	if (s->udp >= 0) {
		R_(close)(s->udp);
		s->udp = -1;
	}
	s->state = ES_CAND;   /* kernel from now on */
	es__fd_lock();
	es__fd_foreach(unmap, s);
	es__fd_unlock();
	es__ep_sock_switched(s);
	if (s->nfd >= 0) {
		R_(close)(s->nfd);
		s->nfd = -1;
	}
	s->kind = 0;
	free(s);   /* callers only compare the pointer after this */
}

void es__fail_strict(struct es_sock *s, int err, const char *why)
{
	es__log("connection %s:%u: %s; strict mode refuses kernel TCP",
		inet_ntoa(s->remote.sin_addr), ntohs(s->remote.sin_port), why);
	if (s->c)
		es__conn_destroy(s, 0);
	if (s->udp >= 0) {
		R_(close)(s->udp);
		s->udp = -1;
	}
	struct linger lg = { 1, 0 };
	R_(setsockopt)(s->kfd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	R_(shutdown)(s->kfd, SHUT_RDWR);
	s->err = err;
	s->state = ES_FAILED;
	es__ep_sock_switched(s);
}

/* Bring a connection that still has to negotiate to a decision. */
static pthread_mutex_t settle_lock = PTHREAD_MUTEX_INITIALIZER;

static int settle(int fd, struct es_sock *s);

/* One negotiation at a time per process (bounded), so that two threads using a
 * fresh socket at once cannot both run one. */
int es__settle(int fd, struct es_sock *s, int block)
{
	(void)block;
	pthread_mutex_lock(&settle_lock);
	int r = es__sock(fd) == s ? settle(fd, s) : ES_CAND;
	pthread_mutex_unlock(&settle_lock);
	return r;
}

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
	if (s->state == ES_PENDING) {
		if (s->server)
			es__neg_server(s);
		else
			es__neg_client(s);
		return es__sock(fd) == s ? s->state : ES_CAND;
	}
	return s->state;
}
