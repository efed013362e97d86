/* passfd.c: descriptors passed between processes over UNIX sockets (SCM_RIGHTS): what sendmsg hands away, what recvmsg brings in. */
/*
 * A process that gets a socket this way gets the kernel socket only, as a
 * new program does across exec (exec.c), while an EMP connection lives in
 * the memory of the process that negotiated it.
 *  - sent (es__scm_out): an EMP connection of ours cannot follow. It is
 *    flushed (the peer reads every byte written before), then reset:
 *    connect(AF_UNSPEC) sends RST on the kernel connection, which the other
 *    process shares, so the peer reads ECONNRESET and that process's calls
 *    fail (ENOTCONN, EPIPE); our close sends no EMP FIN. Before, our close
 *    ended the stream with a clean EOF while what the peer had sent and
 *    nobody read was lost without a word. A log line names the port (a `use
 *    kernel` rule for it keeps such a server on kernel TCP). An accepted
 *    socket not negotiated yet is given away: kernel TCP in this process
 *    (its later epoll_ctl or close begins nothing here), with what its SYN
 *    said left in its IP TTL (neg.h NEG_TTL_*).
 *  - received (es__scm_in): a socket accepted in this network namespace
 *    (its local port has a TCP listener: sock_diag) is taken as this
 *    process's own accept() would take it, so its first use here
 *    negotiates: a master that accepts and hands connections to workers
 *    (Node's cluster module) gets them on EMP, not on kernel TCP after the
 *    client's bound. A connected client socket is left alone.
 * Not seen: descriptors passed with sendmmsg/recvmmsg.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "conn.h"
#include "neg.h"

#define ES_PASS_FLUSH_NS 2000000000ll

/* fn for every descriptor the control data of m carries (SCM_RIGHTS) */
static void each_fd(const struct msghdr *m, void (*fn)(int fd))
{
	if (!m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
		return;
	const char *end = (const char *)m->msg_control + m->msg_controllen;
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
		if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		const char *p = (const char *)CMSG_DATA(c);
		size_t len = c->cmsg_len - CMSG_LEN(0);
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);   /* the kernel refuses it; read no further than the buffer */
		for (size_t i = 0; i + sizeof(int) <= len; i += sizeof(int)) {
			int fd;
			memcpy(&fd, p + i, sizeof fd);
			fn(fd);
		}
	}
}

static void hand_away(int fd)
{
	struct es_sock *s = es__sock_get(fd);
	if (!s)
		return;
	if (s->kind == ES_KIND_SOCK && es__exec_owned(s)) {
		es__log("fd %d carries an EMP connection (port %u), which cannot be passed to another process; flushed, then reset (a `use kernel` rule for the port keeps it on kernel TCP)",
			fd, ntohs(s->local.sin_port));
		es__exec_flush(s, es__now_ns() + ES_PASS_FLUSH_NS);
		es__sock_lock(s);
		s->linger0 = 1;              /* no EMP FIN at our close: the peer must not read a clean end */
		es__sock_unlock(s);
		struct sockaddr unspec = { .sa_family = AF_UNSPEC };
		R_(connect)(fd, &unspec, sizeof unspec);
	} else if (s->kind == ES_KIND_SOCK && s->state == ES_PENDING && s->server) {
		es__settle_give_away(fd, s);   /* Node's cluster primary then removes it from epoll and closes it */
	}
	es__sock_put(s);
}

void es__scm_out(const struct msghdr *m)
{
	if (es__tl_in)
		return;
	int e = errno;
	each_fd(m, hand_away);
	errno = e;
}

/* 1 if a TCP listener of this network namespace holds local port `port`
 * (family AF_INET or AF_INET6; sock_diag filters listeners by port): an
 * accepted socket's port, not a client's */
static int port_listens(int family, uint16_t port)
{
	int nl = R_(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return 0;
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} q = {
		.h = { .nlmsg_len = sizeof q, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.r = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
		       .idiag_states = 1u << TCP_LISTEN, .id = { .idiag_sport = port } },
	};
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	int found = 0, done = 0;
	if (R_(sendto)(nl, &q, sizeof q, 0, (struct sockaddr *)&k, sizeof k) == (ssize_t)sizeof q) {
		long buf[2048];
		for (int rounds = 0; !done && rounds < 64; rounds++) {
			ssize_t n = R_(recv)(nl, buf, sizeof buf, 0);
			if (n <= 0)
				break;
			for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
				if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
					done = 1;
					break;
				}
				if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
				    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg)) &&
				    ((struct inet_diag_msg *)NLMSG_DATA(h))->id.idiag_sport == port)
					found = 1;
			}
		}
	}
	R_(close)(nl);
	return found;
}

static void take_in(int fd)
{
	int type = 0, dom = 0;
	socklen_t tl = sizeof type, dl = sizeof dom;
	struct sockaddr_in l, r;
	if (es__fd_get(fd) || R_(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM ||
	    R_(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 || (dom != AF_INET && dom != AF_INET6))
		return;
	int mark = es__eligible_accept(-1, fd, &l, &r);   /* names it: a configured peer's, on our address */
	if (!mark || !port_listens(dom, l.sin_port))
		return;
	int ttl = 0;
	socklen_t ttll = sizeof ttl;
	if (mark == MARK_UNKNOWN && R_(getsockopt)(fd, IPPROTO_IP, IP_TTL, &ttl, &ttll) == 0) {
		/* what the sender's accept read in the SYN (neg.h); the TTL back to the default */
		mark = ttl == NEG_TTL_MARK ? MARK_EMP : ttl == NEG_TTL_UNKNOWN ? MARK_UNKNOWN : MARK_PLAIN;
		int def = -1;
		if (mark != MARK_PLAIN)
			R_(setsockopt)(fd, IPPROTO_IP, IP_TTL, &def, sizeof def);
		if (mark == MARK_PLAIN && !es__g.strict)
			return;              /* a plain client, or a sender without the library: kernel TCP */
	}
	int fl = R_(fcntl)(fd, F_GETFL);
	if (es__sock_accepted(fd, &l, &r, fl >= 0 && (fl & O_NONBLOCK), mark))
		es__dbg("fd %d: a connection accepted by another process (SCM_RIGHTS): negotiated at its first use here", fd);
}

void es__scm_in(const struct msghdr *m)
{
	if (es__tl_in || es__g.conf_loaded < 0 || !es__conf())
		return;
	int e = errno;
	each_fd(m, take_in);
	errno = e;
}
