/* neglisten.c: the server's side around a negotiation: listeners that save each SYN, the EMP mark read from an accepted connection's SYN, the guard that keeps the server's UDP port. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "neg.h"

/* Guards: the server's side channels are UDP sockets bound to its TCP
 * (ip, port) P, shared with SO_REUSEPORT (same user only), each connected to
 * one client. From its first negotiation on P a process keeps a guard on P
 * too, so that no other user can take the port between negotiations and
 * answer clients in the server's name. A guard receives nothing (its filter
 * drops every datagram; connected sockets are preferred for their peers).
 * It belongs to the process that negotiates (a server whose workers run as
 * another user than the process that listens still negotiates), and gives
 * way if the program itself binds a UDP socket to P. */
struct guard { uint32_t ip; uint16_t port; int gfd; };
static struct guard *guards;
static int nguards;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_guard = &guard_mu;   /* held across fork (fork.c) */

void es__negs_guard(const struct sockaddr_in *a)
{
	pthread_mutex_lock(&guard_mu);
	for (int i = 0; i < nguards; i++)
		if (guards[i].port == a->sin_port && guards[i].ip == a->sin_addr.s_addr) {
			pthread_mutex_unlock(&guard_mu);
			return;          /* held (or given way: gfd -1) */
		}
	struct guard *ng = realloc(guards, (size_t)(nguards + 1) * sizeof *ng);
	if (!ng) {
		pthread_mutex_unlock(&guard_mu);
		return;
	}
	guards = ng;
	int g = es__neg_udp_socket(), one = 1;
	struct sock_filter drop = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { 1, &drop };
	if (g >= 0 && (R_(setsockopt)(g, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
		       R_(setsockopt)(g, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) < 0 ||
		       R_(bind)(g, (const struct sockaddr *)a, sizeof *a) < 0)) {
		R_(close)(g);
		g = -1;
	}
	guards[nguards++] = (struct guard){ a->sin_addr.s_addr, a->sin_port, g };
	pthread_mutex_unlock(&guard_mu);
}

int es__negs_guard_yield(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_in a;
	if (!nguards || !sa || es__to_in(sa, len, &a) < 0 || !a.sin_port)
		return 0;
	int found = 0;
	pthread_mutex_lock(&guard_mu);
	for (int i = 0; i < nguards; i++)
		if (guards[i].port == a.sin_port && guards[i].gfd >= 0) {
			es__log("the program binds UDP port %u: EMP negotiation for TCP port %u stops (its guard gives way)",
				ntohs(a.sin_port), ntohs(a.sin_port));
			R_(close)(guards[i].gfd);
			guards[i].gfd = -1;      /* and is not taken again */
			found = 1;
		}
	pthread_mutex_unlock(&guard_mu);
	return found;
}

void es__negs_listen(int fd)
{
	int e = errno, one = 1;
	R_(setsockopt)(fd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
	errno = e;
}

/* What the SYN of an accepted connection said: the IP TTL (IPv4) or hop
 * limit (IPv6) of the saved SYN headers; unknown without them (the listener
 * did not save it: created without the shim, or a SYN cookie). An IPv4 SYN
 * also names the connection (the kernel's copy of the headers it accepted:
 * its source is the peer, its destination us), which spares a getsockname
 * and a getpeername per connection: *named is set then. */
static int syn_mark(int lfd, int fd, struct sockaddr_in *local, struct sockaddr_in *remote, int *named)
{
	uint8_t h[128];
	socklen_t l = sizeof h;
	*named = 0;
	if (R_(getsockopt)(fd, IPPROTO_TCP, TCP_SAVED_SYN, h, &l) < 0 || l < 20) {
		if (lfd >= 0) {           /* from the next connection on */
			int one = 1;
			R_(setsockopt)(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
		}
		return MARK_UNKNOWN;
	}
	unsigned ihl = (h[0] & 15u) * 4;
	if ((h[0] >> 4) == 4 && ihl >= 20 && l >= ihl + 4) {
		*remote = (struct sockaddr_in){ .sin_family = AF_INET };
		*local = (struct sockaddr_in){ .sin_family = AF_INET };
		memcpy(&remote->sin_addr, h + 12, 4);
		memcpy(&local->sin_addr, h + 16, 4);
		memcpy(&remote->sin_port, h + ihl, 2);
		memcpy(&local->sin_port, h + ihl + 2, 2);
		*named = 1;
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
	int named, m = syn_mark(lfd, fd, local, remote, &named);
	if (!named && (es__neg_name_in(fd, 0, local) < 0 || es__neg_name_in(fd, 1, remote) < 0))
		return 0;
	if (emp_conf_find_ip(&es__g.conf, local->sin_addr.s_addr) < 0)
		return 0;
	if (es__neg_self_and_peer(local, remote, ntohs(local->sin_port)) < 0)
		return 0;
	if (m == MARK_PLAIN) {
		atomic_fetch_add(&es__negstats.plain, 1);
		if (!es__g.strict)
			return 0;   /* a plain client: kernel TCP, nothing more to do */
	}
	return m;
}

