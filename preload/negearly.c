/* negearly.c: the client's first write right behind its HELLO: sent over EMP before the server's HELLO, sent again on kernel TCP after a fallback, such sockets brought to their outcome at exit. */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "conn.h"
#include "neg.h"

/* The client's first data right behind its HELLO: a blocking connect
 * returns once the OFFER is answered (ACCEPT and HELLO out, receives posted,
 * the server's credits known), and the first write goes over EMP at once,
 * without waiting a round trip for the server's HELLO. The server has
 * posted its data receives from any endpoint of our host before its OFFER
 * and looks at them only once our HELLO proved our endpoint, counting only
 * messages with its key from that endpoint (stream_engine.c). If the server
 * refuses EMP after all (REJECT, or no HELLO within the bound), it has read
 * none of it, and the bytes go again on the kernel connection before
 * anything else (es__negc_replay), so the stream is the same either way.
 * One write of at most EARLY_MAX bytes (a fresh kernel socket's send buffer
 * takes it whole); a second one settles first. */
#define EARLY_MAX 16384

ssize_t es__negc_early(struct es_sock *s, const struct iovec *iov, int n, int flags)
{
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (!total || total > EARLY_MAX || (flags & ~(MSG_NOSIGNAL | MSG_DONTWAIT)) || s->ng.early)
		return -2;
	pthread_mutex_lock(es__lk_neg);
	int ok = s->ng.st == NG_ACCEPTED && s->c && s->c->gen == es__g.gen && s->ng.gen == es__g.gen;
	pthread_mutex_unlock(es__lk_neg);
	if (!ok)
		return -2;
	es__sock_lock(s);
	struct es_conn *c = s->c;
	ok = c->peer_known && !c->err && c->credits > 0 && c->tx_staged == 0 && total <= c->tx_slot_sz &&
	     !(s->tcpopt & (1u << TCP_CORK));
	es__sock_unlock(s);
	if (!ok)
		return -2;
	ssize_t r = es__send(s, iov, n, flags | MSG_DONTWAIT);
	if (r <= 0)
		return -2;
	s->ng.early = (uint32_t)r;
	atomic_fetch_add(&es__negstats.early, 1);
	es__dbg("fd %d: first write (%zd bytes) sent right behind our HELLO", s->kfd, r);
	return r;
}

void es__negc_replay(struct es_sock *s)
{
	struct es_conn *c = s->c;
	size_t len = s->ng.early, off = 0;
	s->ng.early = 0;
	if (!c || !c->sbuf)
		return;
	const uint8_t *b = sslot(c, 0) + ES_HDR;   /* the connection's first slot, untouched since */
	while (off < len) {
		ssize_t w = R_(send)(s->kfd, b + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		struct pollfd p = { s->kfd, POLLOUT, 0 };
		if (w > 0)
			off += (size_t)w;
		else if (w < 0 && (errno == EINTR || (errno == EAGAIN && R_(poll)(&p, 1, 1000) > 0)))
			continue;
		else
			break;
	}
	atomic_fetch_add(&es__negstats.replayed, 1);
	es__dbg("fd %d: the first write's %zu bytes sent again on kernel TCP (%zu went)", s->kfd, len, off);
	if (off < len)
		R_(shutdown)(s->kfd, SHUT_RDWR);   /* a stream with a hole: broken, not silently short */
}

/* At exit: sockets whose blocking connect returned before the server's
 * HELLO are brought to their outcome first, so that an EMP one closes with
 * its FIN exchange like any other (es__flush_all) and the server never
 * sees a kernel EOF without it. */
struct early_set { int n, cap; int *fd; };

static void early_one(int fd, void *o, void *arg)
{
	struct early_set *e = arg;
	struct es_sock *sk = o;
	if (sk->kind != ES_KIND_SOCK || sk->state != ES_PENDING || sk->ng.conn_ret != 2)
		return;
	if (e->n == e->cap) {
		int nc = e->cap ? e->cap * 2 : 16, *nf = realloc(e->fd, (size_t)nc * sizeof *nf);
		if (!nf)
			return;
		e->fd = nf;
		e->cap = nc;
	}
	e->fd[e->n++] = fd;
}

void es__negc_settle_pending(void)
{
	struct early_set e = { 0 };
	es__fd_foreach(early_one, &e);
	for (int i = 0; i < e.n; i++) {
		struct es_sock *sk = es__sock(e.fd[i]);
		if (sk && sk->state == ES_PENDING && sk->ng.conn_ret == 2)
			es__settle(e.fd[i], sk);
	}
	free(e.fd);
}
