/* neg.h: the negotiation side channel's messages and the helpers shared by negotiate.c (server side, settling) and negclient.c (client side, OFFER responder). */
#ifndef EMP_NEG_H
#define EMP_NEG_H

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

/* client negotiation states (s->ng.st) */
enum {
	NG_WAIT = 0,       /* no OFFER yet */
	NG_ACCEPTED,       /* OFFER answered: receives posted, ACCEPT sent; HELLO decides */
	NG_REJECTED,       /* the server gave up (REJECT) */
	NG_NOBUFS,         /* we could not set up the connection (REJECT sent) */
};

void es__neg_fill(struct neg_msg *m, int type, struct es_sock *s, uint64_t nonce);
/* message from the peer about this connection (its local = our remote) */
int es__neg_valid(const struct neg_msg *m, ssize_t n, struct es_sock *s);
int es__neg_udp_socket(void);
int es__neg_name_in(int fd, int peer, struct sockaddr_in *out);
int es__neg_self_and_peer(const struct sockaddr_in *local, const struct sockaddr_in *remote,
			  uint16_t port);
/* decisions; they return the socket's state, ES_CAND when s was freed (kernel TCP) */
int es__neg_finish_emp(struct es_sock *s);
int es__neg_fallback(struct es_sock *s, const char *why);

/* negclient.c: settle a connected client socket (PENDING, not server) */
int es__negc_settle(struct es_sock *s);

#endif
