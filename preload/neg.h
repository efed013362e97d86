/* neg.h: the negotiation side channel's messages, bounds and marks, and the helpers shared by negotiate.c (server side, settling), neglisten.c (listeners, the SYN mark) and negclient.c (client side, OFFER responder). */
#ifndef EMP_NEG_H
#define EMP_NEG_H

#include "es.h"

#define NEG_MAGIC 0x454d5073u   /* "EMPs" */
#define NEG_VERSION 3   /* 3: the server posts its data receives with its OFFER (the client's first data rides behind its HELLO) */
enum { N_OFFER = 1, N_ACCEPT = 2, N_REJECT = 3 };

/* IP TTL of a preloaded client's SYN (and the rest of its kernel
 * connection): "this client speaks EMP". The server reads it from the saved
 * SYN (TCP_SAVE_SYN on its listener) and serves an unmarked client on kernel
 * TCP at once, without a message. EMP peers share one Ethernet segment, so
 * no router changes the TTL between them. */
#define NEG_TTL_MARK 105
/* An accepted socket handed to another process before its first use
 * (SCM_RIGHTS; the saved SYN is read once, by the process that accepted)
 * carries what its SYN said in its own IP TTL until that process reads it:
 * NEG_TTL_MARK (marked), NEG_TTL_UNKNOWN (no saved SYN), else plain
 * (es__settle_give_away, es__scm_in) */
#define NEG_TTL_UNKNOWN 104

/* what the accepted connection's SYN said (es_negst.mark) */
enum { MARK_UNKNOWN = 1, MARK_EMP, MARK_PLAIN };

/* bounds on what a peer may ask for (receive buffers per connection) */
#define NEG_MIN_BUFS 2u
#define NEG_MAX_BUFS 256u
#define NEG_MIN_BUFSZ 1024u
#define NEG_MAX_BUFSZ (1u << 20)

/* All integers big-endian; keys are opaque bytes. 48 bytes, no padding. */
struct neg_msg {
	uint32_t magic;
	uint8_t version, type;
	uint16_t ep;             /* sender's EMP endpoint */
	uint32_t conn;           /* sender's connection id (its receives' tag) */
	uint32_t nbufs, bufsz;   /* sender's receive buffers */
	uint32_t sip, dip;       /* sender's local and remote TCP address */
	uint16_t sport, dport;
	uint64_t skey;           /* server's key: chosen in OFFER, echoed in every later message */
	uint64_t ckey;           /* client's key: chosen in ACCEPT, echoed in a later REJECT */
};

/* client negotiation states (s->ng.st) */
enum {
	NG_WAIT = 0,       /* no OFFER yet */
	NG_ACCEPTED,       /* OFFER answered: receives posted, ACCEPT sent; the server's HELLO decides */
	NG_REJECTED,       /* the server gave up (REJECT) */
	NG_NOBUFS,         /* we could not set up the connection (REJECT sent) */
};

/* Counters of the process's negotiations (negotiate.c), also in the exit
 * summary of EMP_SOCK_DEBUG. */
struct es_negstats {
	atomic_uint forged;       /* side-channel messages that failed a check */
	atomic_uint refused;      /* ACCEPTs whose endpoint never proved itself */
	atomic_uint plain;        /* accepted connections without the EMP mark (kernel at once) */
	atomic_uint early;        /* client: first writes sent right behind our HELLO */
	atomic_uint replayed;     /* client: ... of which the server refused EMP: sent again on kernel TCP */
	atomic_uint gone;         /* server: clients that ended the connection before answering the OFFER */
};
extern struct es_negstats es__negstats;
void es__neg_count_forged(struct es_sock *s, const char *why);

void es__neg_fill(struct neg_msg *m, int type, struct es_sock *s);
/* 0 if m (n bytes) is a well-formed message of this connection (4-tuple
 * mirrored); the type's own fields are the caller's to check */
int es__neg_valid(const struct neg_msg *m, ssize_t n, struct es_sock *s);
/* an OFFER's or ACCEPT's endpoint, connection id and buffers within bounds */
int es__neg_params_ok(const struct neg_msg *m);
int es__neg_udp_socket(void);
int es__neg_name_in(int fd, int peer, struct sockaddr_in *out);
/* a negotiation's bound: the short one (EMP_NEG_TIMEOUT_MS), or with lng
 * the longer of it and the bound for a peer known to speak EMP
 * (EMP_NEG_TIMEOUT_KNOWN_MS) */
int64_t es__neg_bound_ns(int lng);
int es__neg_self_and_peer(const struct sockaddr_in *local, const struct sockaddr_in *remote,
			  uint16_t port);
/* s's change count (its connection's HELLO moves it): read before looking */
unsigned es__neg_seq(struct es_sock *s);
/* wait until udp is readable, s's connection changed since seq0 (es__neg_seq
 * before the caller looked), the peer ended the kernel connection
 * (watch_peer), or until (ns); drives the engine. NEG_LOOK: read the side
 * channel; NEG_PEER_GONE: the peer's FIN or reset is in */
#define NEG_LOOK 1
#define NEG_PEER_GONE 2
int es__neg_wait(struct es_sock *s, int udp, int watch_peer, int64_t until, int want_engine, unsigned seq0);
/* decisions; they return the socket's state, ES_CAND when s was freed (kernel TCP) */
int es__neg_finish_emp(struct es_sock *s);
int es__neg_fallback(struct es_sock *s, const char *why);

/* negserver.c: everything up to the first OFFER of an accepted socket: 0
 * when it is out, else 1 with *res the fallback's outcome; settle it
 * (PENDING, server); both return the socket's state as es__settle does */
int es__negs_begin(struct es_sock *s, int *res);
/* an accepted socket a new program gets before its first use: the client
 * told at once (OFFER, then REJECT), kernel TCP (negserver.c) */
int es__negs_exec(struct es_sock *s);
int es__negs_settle(struct es_sock *s);
/* one look without waiting, for an epoll wait (es__settle_step): the
 * decision, or ES_PENDING and the socket is looked at again when something
 * changes (negserver.c) */
int es__negs_step(struct es_sock *s);

/* negclient.c: settle a connected client socket (PENDING, not server) */
int es__negc_settle(struct es_sock *s);
int es__negc_step(struct es_sock *s);   /* one look, no wait (epwait.c) */
/* negearly.c: the first write of a client socket whose ACCEPT and HELLO
 * are out, over EMP before the server's HELLO: bytes sent, or -2 when it is
 * not such a write (the caller settles and goes on as usual); the caller is
 * the socket's settler (es__settle_early) */
ssize_t es__negc_early(struct es_sock *s, const struct iovec *iov, int n, int flags);
/* a fallback after such a write: its bytes again on the kernel connection */
void es__negc_replay(struct es_sock *s);

#endif
