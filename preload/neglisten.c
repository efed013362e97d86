/* neglisten.c: the server's side before a negotiation: listeners that save each SYN and hold their UDP port (the guard), and the EMP mark read from an accepted connection's SYN. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "neg.h"

extern char *program_invocation_short_name;

/* Guards: a listener's UDP twin. The server's side channels are UDP sockets
 * bound to its TCP (ip, port) P, shared with SO_REUSEPORT (same user only),
 * each connected to one client; while the listener lives a guard holds P
 * too, so that no other user can take the port and answer clients in the
 * server's name between negotiations. It receives nothing (its filter drops
 * every datagram; connected sockets are preferred for their peers). If the
 * program itself binds a UDP socket to P, the guard gives way. */
struct guard { int lfd, gfd; uint16_t port; };
static struct guard *guards;
static int nguards;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
atomic_int es__guard_max;                 /* 1 + highest listener fd with a guard */

/* some configured peer may reach this listener over EMP */
static int emp_port(const struct sockaddr_in *a)
{
	const struct emp_conf *cf = &es__g.conf;
	int self = a->sin_addr.s_addr == htonl(INADDR_ANY) ? -2 : emp_conf_find_ip(cf, a->sin_addr.s_addr);
	if (self == -1)
		return 0;                /* an address no peer reaches over EMP */
	for (int p = 0; p < cf->npeers; p++)
		if (p != self && emp_conf_use_emp(cf, program_invocation_short_name, p, ntohs(a->sin_port)))
			return 1;
	return 0;
}

static int guard_open(int lfd)
{
	struct sockaddr_in a;
	if (es__neg_name_in(lfd, 0, &a) < 0 || !a.sin_port || !emp_port(&a))
		return -1;
	int g = es__neg_udp_socket(), one = 1;
	struct sock_filter drop = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { 1, &drop };
	if (g < 0)
		return -1;
	if (R_(setsockopt)(g, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
	    R_(setsockopt)(g, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0 ||
	    R_(bind)(g, (struct sockaddr *)&a, sizeof a) < 0) {
		if (errno == EADDRINUSE)
			es__log("UDP port %u is held by another program: no EMP negotiation for TCP port %u",
				ntohs(a.sin_port), ntohs(a.sin_port));
		R_(close)(g);
		return -1;
	}
	pthread_mutex_lock(&guard_mu);
	struct guard *ng = realloc(guards, (size_t)(nguards + 1) * sizeof *ng);
	if (!ng) {
		pthread_mutex_unlock(&guard_mu);
		R_(close)(g);
		return -1;
	}
	guards = ng;
	guards[nguards++] = (struct guard){ lfd, g, a.sin_port };
	if (lfd >= atomic_load(&es__guard_max))
		atomic_store(&es__guard_max, lfd + 1);
	pthread_mutex_unlock(&guard_mu);
	return 0;
}

static void guard_drop(int i)
{
	R_(close)(guards[i].gfd);
	guards[i] = guards[--nguards];
}

void es__neg_unlisten(int lfd)
{
	pthread_mutex_lock(&guard_mu);
	for (int i = 0; i < nguards; i++)
		if (guards[i].lfd == lfd) {
			guard_drop(i);
			break;
		}
	pthread_mutex_unlock(&guard_mu);
}

int es__neg_guard_yield(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_in a;
	if (!sa || es__to_in(sa, len, &a) < 0 || !a.sin_port)
		return 0;
	int found = 0;
	pthread_mutex_lock(&guard_mu);
	for (int i = 0; i < nguards; i++)
		if (guards[i].port == a.sin_port) {
			es__log("the program binds UDP port %u: EMP negotiation for TCP port %u stops (its guard gives way)",
				ntohs(a.sin_port), ntohs(a.sin_port));
			guard_drop(i);
			found = 1;
			break;
		}
	pthread_mutex_unlock(&guard_mu);
	return found;
}

void es__neg_listen(int fd, int listening)
{
	int e = errno, one = 1;
	if (!listening) {
		R_(setsockopt)(fd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
	} else {
		es__neg_unlisten(fd);    /* listen() again on the same socket */
		guard_open(fd);          /* after listen(): its port is known now */
	}
	errno = e;
}

/* What the SYN of an accepted connection said: the IP TTL (IPv4) or hop
 * limit (IPv6) of the saved SYN headers; unknown without them (the listener
 * did not save it: created without the shim, or a SYN cookie). */
static int syn_mark(int lfd, int fd)
{
	uint8_t h[128];
	socklen_t l = sizeof h;
	if (R_(getsockopt)(fd, IPPROTO_TCP, TCP_SAVED_SYN, h, &l) < 0 || l < 20) {
		if (lfd >= 0) {           /* from the next connection on */
			int one = 1;
			R_(setsockopt)(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
		}
		return MARK_UNKNOWN;
	}
	unsigned ttl = (h[0] >> 4) == 4 ? h[8] : (h[0] >> 4) == 6 && l >= 40 ? h[7] : 0;
	if (!ttl)
		return MARK_UNKNOWN;
	return ttl == NEG_TTL_MARK ? MARK_EMP : MARK_PLAIN;
}

int es__eligible_accept(int lfd, int fd, struct sockaddr_in *local, struct sockaddr_in *remote)
{
	if (!es__conf())
		return 0;
	if (es__neg_name_in(fd, 0, local) < 0 || es__neg_name_in(fd, 1, remote) < 0)
		return 0;
	if (emp_conf_find_ip(&es__g.conf, local->sin_addr.s_addr) < 0)
		return 0;
	if (es__neg_self_and_peer(local, remote, ntohs(local->sin_port)) < 0)
		return 0;
	int m = syn_mark(lfd, fd);
	if (m == MARK_PLAIN) {
		atomic_fetch_add(&es__negstats.plain, 1);
		if (!es__g.strict)
			return 0;   /* a plain client: kernel TCP, nothing more to do */
	}
	return m;
}

