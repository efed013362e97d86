/* negclient.c: the client side of negotiation: the process's OFFER responder (every pending client socket is answered whenever its OFFER arrives), the known-EMP-server table, settling a client socket (its first write right behind our HELLO: negearly.c). */
/*
 * Every client socket that may use EMP marks its SYN (IP TTL) and gets, right
 * after its kernel connect picked the port (a blocking connect runs
 * non-blocking inside, then waits as the kernel would), a UDP socket bound to
 * that port and connected to the server's (ip, port): the kernel delivers
 * nothing else to it, so an OFFER comes from the process that holds the
 * server's TCP port (negotiate.c).
 * A blocking connect settles at once; a non-blocking one is registered here
 * (es__negc_start) until it is decided or closed, and a background
 * thread, the responder (started with the first registration in each
 * process), sleeps in epoll on the registered side channels and answers each
 * OFFER as it arrives: it posts the connection's receives, sends ACCEPT and
 * records that in s->ng; a repeated OFFER (same key) gets the same ACCEPT
 * again, a REJECT with the OFFER's key is recorded, anything else is dropped
 * and counted. The application thread that first uses the socket takes it
 * over from the responder (es__settle) and waits for the outcome: HELLO over
 * EMP with our key -> EMP; REJECT, a failed setup, or the bound without an
 * OFFER -> kernel TCP (strict mode: an error); a wait call (epoll_wait, poll,
 * select) that meets it steps it instead (es__negc_step) and leaves it with
 * the responder until it is decided. So the server's negotiation of
 * each of our sockets takes one round trip, in whatever order it accepts
 * them, while our application settles them in its own order.
 *
 * Bound: with no OFFER the client gives up EMP_NEG_TIMEOUT_MS (500) after
 * connect (or after the handshake's end, if a lost SYN made that later:
 * handshake_ns), which keeps fallback to plain servers bounded. A server (ip, port)
 * that has sent this process an OFFER is known to speak EMP: its OFFER for a
 * new connection comes when its program first uses the accepted socket, which
 * may sit in a busy server's listen backlog, so such connections wait up to
 * EMP_NEG_TIMEOUT_KNOWN_MS (5000) after connect. The long bound applies if the
 * server is known when the application asks, or if it sent an OFFER for any
 * connection since this one's connect (a burst of connects to a new server). A
 * known server's connection that still gets no OFFER marks it plain again:
 * later connections start from the short bound until it offers again. A
 * server that never offered and let a bound pass is plain: for 10 s the
 * process's later connections to it use kernel TCP at once (unmarked), then
 * one tries again (plain_lately). After
 * our ACCEPT we wait for the server's HELLO up to the long bound: the server
 * commits before its own (short) deadline and EMP delivers the HELLO reliably.
 * Giving up unregisters and closes our UDP socket, so a later OFFER meets ICMP
 * and the server falls back too.
 *
 * Locks (order: fork.c): neg_lock guards the table, the responder's registry
 * and s->ng.st of registered sockets; the responder touches a socket only under neg_lock while it is
 * registered, and every path that frees a socket unregisters it first
 * (es__negc_forget). Fork (fork.c): the child has no responder; its registry starts
 * empty; a socket the parent already answered for is the parent's (FOREIGN in
 * the child), one still waiting is registered again when the child settles it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "neg.h"
#include "sys.h"

static pthread_mutex_t neg_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_neg = &neg_lock;

/* ---- servers known to speak EMP, or found plain (under neg_lock) ---- */
#define KNOWN_N 256
#define KNOWN_PROBE 8
#define PLAIN_KEEP_NS 10000000000ll      /* a server that let a bound pass: kernel TCP at once for 10 s */
struct known {
	uint32_t ip;
	uint16_t port;
	int64_t offer_ns, plain_ns;      /* last OFFER from there; last bound missed */
};
static struct known known[KNOWN_N];

static int64_t known_last(const struct known *k)
{
	return k->offer_ns > k->plain_ns ? k->offer_ns : k->plain_ns;
}

static struct known *known_find(const struct sockaddr_in *a, int create)
{
	uint32_t ip = a->sin_addr.s_addr;
	uint16_t port = a->sin_port;
	unsigned h = (ntohl(ip) * 2654435761u) ^ (ntohs(port) * 40503u);
	struct known *victim = NULL;
	for (int i = 0; i < KNOWN_PROBE; i++) {
		struct known *k = &known[(h + (unsigned)i) % KNOWN_N];
		if (known_last(k) && k->ip == ip && k->port == port)
			return k;
		if (!victim || !known_last(k) || (known_last(victim) && known_last(k) < known_last(victim)))
			victim = k;
	}
	if (!create)
		return NULL;
	memset(victim, 0, sizeof *victim);
	victim->ip = ip;
	victim->port = port;
	return victim;
}

/* the bound for a client socket still without an OFFER: long toward a known EMP server */
static int long_bound(struct es_sock *s)
{
	struct known *k = known_find(&s->remote, 0);
	return k && (k->offer_ns > k->plain_ns || k->offer_ns >= s->ng.t0);
}

/* ---- the responder's registry (under neg_lock) ---- */
struct slot {
	struct es_sock *s;
	uint32_t id;                     /* in the epoll data with the index: stale events miss */
};
static struct slot *slots;
static int nslots, hint;
static uint32_t next_id;
static int rep_ep = -1, rep_state;       /* responder: 0 not started, 1 running, -1 none */

static int registered(struct es_sock *s)
{
	return s->ng.reg && s->ng.gen == es__g.gen;
}

static void *responder(void *arg);

static void start_responder(void)
{
	rep_state = -1;
	rep_ep = emp__sys_fd_high(R_(epoll_create1)(EPOLL_CLOEXEC));
	if (rep_ep < 0)
		return;
	pthread_attr_t at;
	pthread_t t;
	sigset_t all, old;
	sigfillset(&all);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals belong to the application's threads */
	int r = pthread_create(&t, &at, responder, (void *)(intptr_t)rep_ep);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (r) {
		es__dbg("no negotiation responder thread (%s): OFFERs answered when settling", strerror(r));
		R_(close)(rep_ep);
		rep_ep = -1;
		return;
	}
	rep_state = 1;
}

static void reg_add(struct es_sock *s)
{
	if (registered(s))
		return;
	if (!rep_state)
		start_responder();
	int i = hint;
	while (i < nslots && slots[i].s)
		i++;
	if (i == nslots) {
		int n = nslots ? nslots * 2 : 64;
		struct slot *ns = realloc(slots, (size_t)n * sizeof *ns);
		if (!ns)
			return;   /* unregistered: the settling thread answers itself */
		memset(ns + nslots, 0, (size_t)(n - nslots) * sizeof *ns);
		slots = ns;
		nslots = n;
	}
	hint = i + 1;
	if (!++next_id)
		next_id = 1;
	slots[i].s = s;
	slots[i].id = next_id;
	s->ng.reg = 1;
	s->ng.slot = i;
	s->ng.gen = es__g.gen;
	if (rep_ep >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = (uint64_t)next_id << 32 | (unsigned)i };
		R_(epoll_ctl)(rep_ep, EPOLL_CTL_ADD, s->udp, &ev);
	}
}

static void reg_del(struct es_sock *s)
{
	if (!registered(s))
		return;
	if (rep_ep >= 0 && s->udp >= 0)
		R_(epoll_ctl)(rep_ep, EPOLL_CTL_DEL, s->udp, NULL);
	slots[s->ng.slot].s = NULL;
	slots[s->ng.slot].id = 0;
	if (s->ng.slot < hint)
		hint = s->ng.slot;
	s->ng.reg = 0;
}

/* wake whoever waits on s (the settling thread) */
static void wake(struct es_sock *s)
{
	es__sock_lock(s);
	es__sock_update(s, 1);
	es__sock_unlock(s);
}

static void reply(struct es_sock *s, int type)
{
	struct neg_msg a;
	es__neg_fill(&a, type, s);
	R_(send)(s->udp, &a, sizeof a, MSG_DONTWAIT);
}

/* first valid OFFER: post our receives, learn the peer's, answer */
static void take_offer(struct es_sock *s, const struct neg_msg *m)
{
	emp_endpoint_t *ep = __atomic_load_n(&es__g.ep, __ATOMIC_ACQUIRE);
	int host = ep ? emp_host_by_ip(ep, s->remote.sin_addr.s_addr) : -1;
	uint16_t pep = ntohs(m->ep);
	s->ng.skey = m->skey;
	do
		s->ng.ckey = es__random64();
	while (!s->ng.ckey);
	s->ng.peer_ep = pep;
	s->ng.peer_lid = ntohl(m->conn);
	s->ng.peer_bufs = ntohl(m->nbufs);
	s->ng.peer_bufsz = ntohl(m->bufsz);
	int r = host < 0 ? -1 : es__conn_create(s, (uint16_t)host, pep, es__conn_new_lid(), s->ng.ckey);
	if (r == 0) {
		es__sock_lock(s);
		r = es__conn_set_peer(s, pep, s->ng.peer_lid, s->ng.peer_bufs, s->ng.peer_bufsz, s->ng.skey);
		es__sock_unlock(s);
	}
	int64_t now = es__now_ns();
	struct known *k = known_find(&s->remote, 1);
	k->offer_ns = now;
	if (r < 0) {
		s->ng.st = NG_NOBUFS;
		reply(s, N_REJECT);
		return;
	}
	s->ng.st = NG_ACCEPTED;
	s->ng.t_offer = now;
	reply(s, N_ACCEPT);
	/* our HELLO proves the endpoint the ACCEPT names (the server has posted
	 * control receives from any of our host's endpoints before its OFFER) */
	es__sock_lock(s);
	es__conn_send_hello(s);
	es__sock_unlock(s);
}

/* read s's side channel dry; neg_lock held. Only the server's (ip, port)
 * reaches this socket (it is connected); what it sends must still be a
 * well-formed message of this connection, and after our ACCEPT it must carry
 * the key of the OFFER we answered. */
static void service(struct es_sock *s)
{
	int st0 = s->ng.st;
	for (;;) {
		struct neg_msg m;
		ssize_t n = R_(recv)(s->udp, &m, sizeof m, MSG_DONTWAIT);
		if (n < 0) {
			if (errno == ECONNREFUSED)   /* ICMP for an ACCEPT the server no longer wanted */
				continue;
			break;
		}
		if (!es__neg_valid(&m, n, s)) {
			es__neg_count_forged(s, "malformed or of another connection");
			continue;
		}
		int again = s->ng.st == NG_ACCEPTED && m.skey == s->ng.skey;
		if (m.type == N_OFFER && s->ng.st == NG_WAIT && es__neg_params_ok(&m) && !m.ckey) {
			take_offer(s, &m);
			break;   /* what follows (a repeated OFFER, a REJECT) is read at the next look */
		} else if (m.type == N_OFFER && again && m.ep == htons(s->ng.peer_ep) &&
			 m.conn == htonl(s->ng.peer_lid))
			reply(s, N_ACCEPT);              /* our ACCEPT was lost */
		else if (m.type == N_REJECT && again && (!m.ckey || m.ckey == s->ng.ckey))
			s->ng.st = NG_REJECTED;
		else
			es__neg_count_forged(s, "unexpected now, or not of the OFFER we answered");
	}
	if (s->ng.st != st0)
		wake(s);
}

static void *responder(void *arg)
{
	int ep = (int)(intptr_t)arg;
	struct epoll_event ev[64];
	es__tl_in = 1;   /* everything this thread calls goes straight to libc */
	for (;;) {
		int n = R_(epoll_wait)(ep, ev, 64, -1);
		if (n < 0) {
			if (errno != EINTR)
				usleep(10000);
			continue;
		}
		pthread_mutex_lock(&neg_lock);
		for (int i = 0; i < n; i++) {
			unsigned idx = (uint32_t)ev[i].data.u64;
			uint32_t id = (uint32_t)(ev[i].data.u64 >> 32);
			if ((int)idx < nslots && slots[idx].s && slots[idx].id == id)
				service(slots[idx].s);
		}
		pthread_mutex_unlock(&neg_lock);
	}
	return NULL;
}

static int no_side_channel(const struct sockaddr_in *to)
{
	if (!es__g.strict)
		return 0;
	es__log("connect to %s: no side-channel port for EMP negotiation (strict mode)",
		inet_ntoa(to->sin_addr));
	errno = EADDRINUSE;
	return -1;
}

/* A server (ip, port) that never sent this process an OFFER and whose last
 * connection got none within the bound runs a plain program: for
 * PLAIN_KEEP_NS the process's later connections to it use kernel TCP at once,
 * unmarked (a preloaded server serves them on kernel TCP at once too); then
 * one connection tries again. Without this every connection to a plain
 * server on a configured peer waited the bound. A server that has offered
 * before and missed a bound (busy) keeps the short bound, as before. */
static int plain_lately(const struct sockaddr_in *to)
{
	pthread_mutex_lock(&neg_lock);
	struct known *k = known_find(to, 0);
	int64_t now = es__now_ns();
	int plain = k && !k->offer_ns && now - k->plain_ns < PLAIN_KEEP_NS;
	pthread_mutex_unlock(&neg_lock);
	return plain;
}

int es__negc_prepare(struct es_sock *s, const struct sockaddr_in *to)
{
	if (!es__conf() || es__neg_self_and_peer(NULL, to, ntohs(to->sin_port)) < 0)
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
	if (!es__g.strict && plain_lately(to)) {   /* its last connection waited out the bound */
		es__dbg("connect to %s:%u: no EMP offer from there lately: kernel TCP at once",
			inet_ntoa(to->sin_addr), ntohs(to->sin_port));
		return 0;
	}
	/* a port the program bound is known now (one system call, only then);
	 * any other port is the kernel's pick at connect, read after it */
	struct sockaddr_storage a;
	socklen_t l = sizeof a;
	in_port_t aport = 0;
	if (s->bound) {
		if (R_(getsockname)(s->kfd, (struct sockaddr *)&a, &l) < 0)
			return 0;
		aport = a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
						: ((struct sockaddr_in *)&a)->sin_port;
	}
	/* The UDP twin takes the TCP port's number: the program's own port now,
	 * else the one the kernel picks at connect (es__negc_bind; connect
	 * picks it the way it does for any connection: ports held in TIME_WAIT
	 * toward other servers are shared, which bind(0) would not do). */
	int mark = NEG_TTL_MARK;
	if ((aport && es__negc_bind(s, aport, to) < 0) ||
	    R_(setsockopt)(s->kfd, IPPROTO_IP, IP_TTL, &mark, sizeof mark) < 0) {
		es__neg_close_udp(s);
		return no_side_channel(to);
	}
	s->remote = *to;
	s->ng.t0 = es__now_ns();
	s->ng.st = NG_WAIT;
	return 1;
}

/* The kernel gives one local port to connections toward different servers,
 * so twins of one port may coexist (SO_REUSEPORT, each connected to its own
 * server); another user cannot bind it (SO_REUSEPORT wants the same user). */
int es__negc_bind(struct es_sock *s, in_port_t port, const struct sockaddr_in *to)
{
	int udp = es__neg_udp_socket(), one = 1;
	struct sockaddr_in u = { .sin_family = AF_INET, .sin_port = port };
	if (udp >= 0 && (R_(setsockopt)(udp, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
			 R_(bind)(udp, (struct sockaddr *)&u, sizeof u) < 0 ||
			 R_(connect)(udp, (const struct sockaddr *)to, sizeof *to) < 0)) {
		R_(close)(udp);
		udp = -1;
	}
	s->udp = udp;
	return udp < 0 ? -1 : 0;
}

int es__negc_start(struct es_sock *s, int async)
{
	if (es__neg_name_in(s->kfd, 0, &s->local) < 0 || !s->local.sin_port ||
	    (s->udp < 0 && es__negc_bind(s, s->local.sin_port, &s->remote) < 0))
		return no_side_channel(&s->remote) < 0 ? -1 : 0;
	if (!async)
		return 1;   /* settled at once by connect() */
	pthread_mutex_lock(&neg_lock);
	reg_add(s);
	pthread_mutex_unlock(&neg_lock);
	return 1;
}

void es__negc_forget(struct es_sock *s)
{
	if (!registered(s))
		return;
	pthread_mutex_lock(&neg_lock);
	reg_del(s);
	pthread_mutex_unlock(&neg_lock);
}

/* When the kernel's handshake ended: the SYN-ACK is the last segment with an
 * ACK our connection received (a preloaded server sends nothing on it before
 * the negotiation decides). No OFFER can come before, so the bound counts
 * from there: a SYN that was lost, or dropped by a server whose accept queue
 * was full, is sent again only after 1 s, and the bound counted from
 * connect() had run out before the server even saw the connection. Asked
 * only once the bound from connect() is due: one system call, on a slow path. */
static int64_t handshake_ns(struct es_sock *s, int64_t now)
{
	struct tcp_info ti;
	socklen_t l = sizeof ti;
	memset(&ti, 0, sizeof ti);
	if (R_(getsockopt)(s->kfd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0 ||
	    l < offsetof(struct tcp_info, tcpi_last_ack_recv) + sizeof ti.tcpi_last_ack_recv ||
	    ti.tcpi_state != TCP_ESTABLISHED)
		return s->ng.t0;
	return now - (int64_t)ti.tcpi_last_ack_recv * 1000000;
}

/* registered by the parent, or answered there by a connect that returned early,
 * and the parent's endpoint has the connection: ES_FOREIGN (1); else 0 */
static int settle_inherited(struct es_sock *s)
{
	int inherited = (s->ng.reg || s->ng.conn_ret == 2) && s->ng.gen != es__g.gen;
	if (!inherited || s->ng.st != NG_ACCEPTED)
		return 0;
	es__dbg("fd %d: negotiated by the parent process", s->kfd);
	if (s->c)
		es__conn_destroy(s, 0);
	es__neg_close_udp(s);
	s->ng.reg = 0;
	es__sock_lock(s);
	s->state = ES_FOREIGN;
	es__sock_update(s, 1);   /* its readiness (es__events): a wait returns at once */
	es__sock_unlock(s);
	es__ep_sock_switched(s);
	return 1;
}

/* One look at a client socket's negotiation (neg_lock held): *emp once the
 * server's HELLO is in, *why once it is over without EMP, else *until is
 * when to look again at the latest. look: read the side channel first;
 * gone: the kernel connection ended. */
static void judge(struct es_sock *s, int look, int gone, int64_t *until, int *emp, const char **why)
{
	int64_t now = es__now_ns();
	*until = now;
	if (look)
		service(s);
	if (s->ng.st == NG_ACCEPTED) {
		*emp = es__conn_hello_seen(s);
		if (!*emp && s->ng.hello_tries < 4) {
			es__sock_lock(s);
			s->ng.hello_tries += es__conn_hello_again(s);
			es__sock_unlock(s);
		}
		*until = s->ng.t_offer + es__neg_bound_ns(1) + 200000000ll;
		if (!*emp && now >= *until)
			*why = "server did not confirm EMP";
	} else if (s->ng.st == NG_REJECTED) {
		*why = "server gave up on EMP";
	} else if (s->ng.st == NG_NOBUFS) {
		*why = "cannot set up EMP buffers (descriptors?)";
	} else if (gone) {
		/* a server gone before it offered (killed, or restarted: the
		 * connections in its accept queue are reset) or a plain one
		 * that answered and closed: no OFFER will come, and waiting
		 * out the bound (5 s for a server known to speak EMP) only
		 * held back the kernel's own answer */
		*why = "the server ended the connection before offering EMP";
	} else {
		int lng = long_bound(s);
		*until = s->ng.t0 + es__neg_bound_ns(lng);
		if (now >= *until && !s->ng.t0_hs) {
			s->ng.t0_hs = 1;
			int64_t hs = handshake_ns(s, now);
			if (hs > s->ng.t0)
				s->ng.t0 = hs;
			*until = s->ng.t0 + es__neg_bound_ns(lng);
		}
		if (now >= *until) {
			*why = lng ? "no EMP offer from the server (known to speak EMP; busy?)"
				   : "no EMP offer from the server (plain program?)";
			struct known *k = known_find(&s->remote, 1);
			if (k)
				k->plain_ns = now;
		}
	}
}

/* A connected client socket (PENDING) to a decision; the caller is its only settler. */
int es__negc_settle(struct es_sock *s)
{
	if (settle_inherited(s))
		return ES_FOREIGN;
	if (s->udp < 0 || !es__engine())
		return es__neg_fallback(s, "no side channel for EMP negotiation");
	/* this thread answers from now on: the responder lets go */
	pthread_mutex_lock(&neg_lock);
	if (registered(s))
		reg_del(s);
	s->ng.reg = 0;
	pthread_mutex_unlock(&neg_lock);
	const char *why = NULL;
	int emp = 0, look = 1, gone = atomic_load(&s->ng.kgone);
	for (;;) {
		unsigned seq0 = es__neg_seq(s);
		int64_t until;
		pthread_mutex_lock(&neg_lock);
		judge(s, look, gone, &until, &emp, &why);
		/* even if the server's HELLO is in already (this thread lost its CPU a while) */
		int back = s->ng.conn_ret == 1 && s->ng.st == NG_ACCEPTED && !why;
		pthread_mutex_unlock(&neg_lock);
		if (back) {              /* a blocking connect: the first write may go now (es__negc_early) */
			s->ng.conn_ret = 2;
			s->ng.gen = es__g.gen;   /* a forked child's copy is the parent's (below) */
			return ES_PENDING;
		}
		if (emp || why)
			break;
		/* before an OFFER came, the kernel connection's end ends the wait
		 * too (an OFFER sent before the server fell back and closed is
		 * still read: the wait says look) */
		int w = es__neg_wait(s, s->udp, s->ng.st == NG_WAIT, until, s->ng.st == NG_ACCEPTED, seq0);
		look = (w & NEG_LOOK) != 0;
		gone = (w & NEG_PEER_GONE) != 0;
	}
	es__neg_close_udp(s);   /* from here on a late OFFER meets ICMP */
	return emp ? es__neg_finish_emp(s) : es__neg_fallback(s, why);
}

/* The same without waiting, for an epoll wait that took the socket from its
 * ready list (epwait.c), as the server's side does (es__negs_step): one
 * look, and, undecided, the socket stays with the responder, which answers
 * its OFFER whenever it comes and puts it back on its sets' ready lists, as
 * do the server's HELLO (its connection's completion), the kernel
 * connection's end (the liveness set) and its bound (timeq.c). An event
 * loop that connects goes on serving everything else meanwhile: the whole
 * settle used to run inside its epoll_wait, one server round trip (the
 * server's accept and first use of the connection, the OFFER, its HELLO)
 * per new connection, during which nothing else of the loop ran. */
int es__negc_step(struct es_sock *s)
{
	if (s->udp < 0 || !es__engine())
		return es__negc_settle(s);
	pthread_mutex_lock(&neg_lock);
	if (!registered(s)) {
		pthread_mutex_unlock(&neg_lock);
		return es__negc_settle(s);   /* not the responder's (a fork's copy, a blocking connect's) */
	}
	const char *why = NULL;
	int emp = 0;
	int64_t until;
	judge(s, 1, atomic_load(&s->ng.kgone), &until, &emp, &why);
	if (emp || why)
		reg_del(s);                  /* decided: the responder lets go */
	pthread_mutex_unlock(&neg_lock);
	if (!emp && !why) {
		s->ng.cl_stepped = 1;   /* its changes put it on its sets' ready lists (es__events) */
		es__tq_later(s, until);
		return ES_PENDING;
	}
	es__neg_close_udp(s);
	return emp ? es__neg_finish_emp(s) : es__neg_fallback(s, why);
}

/* fork.c: the child has no responder and a copy of the registry it must not use. */
void es__negc_atfork_child(void)
{
	if (rep_ep >= 0)
		R_(close)(rep_ep);
	rep_ep = -1;
	rep_state = 0;
	slots = NULL;   /* the parent's copy may be mid-change: left, not freed */
	nslots = hint = 0;
}
