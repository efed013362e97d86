/* conn.h: the per-connection EMP stream state shared by stream.c, xfer.c and close.c. */
#ifndef EMP_CONN_H
#define EMP_CONN_H

#include "es.h"

#define NCTRL 4
#define CTRL_SZ 16
#define CTRL_TAG 0x80000000u
enum { CT_CREDIT = 1, CT_HELLO = 2, CT_CLOSE = 3, CT_BYE = 4 };

#define ES_KIND_CONN 3                   /* what a request's user pointer names */
#define ES_KIND_TOMB 4

struct es_conn {
	int kind;                        /* ES_KIND_CONN */
	struct es_sock *s;
	emp_endpoint_t *ep;
	unsigned gen;
	uint32_t lid, rid;
	emp_addr_t peer;
	int peer_known;
	/* receive */
	int rposted;                     /* the receives are posted (once the peer's endpoint is known) */
	unsigned R, S;
	uint8_t *rbuf;
	emp_req_t **rreq;
	uint32_t *rlen, *roff;
	uint64_t rh, rc;
	size_t rbytes;
	unsigned to_return;
	int rfin;
	emp_req_t *creq[NCTRL];
	uint8_t cbuf[NCTRL][CTRL_SZ];
	emp_req_t *csend;                /* persistent, made with the send slots */
	int cbusy;                       /* csend in flight */
	uint8_t csbuf[CTRL_SZ];
	int hello_seen, hello_want;
	/* send */
	unsigned W, PS, credits;
	unsigned peer_bufs;              /* the peer's receive buffers: credits never exceed them */
	uint8_t *sbuf;
	emp_req_t **sreq;
	uint32_t *slen;
	uint8_t *sdone, *sfin;
	uint64_t sh, sp, st;
	int fin_want, fin_staged, fin_done;
	/* state */
	int err, err_told, kdead, shut_rd, shut_wr;
	int leak;
	/* closing: after close() the connection lingers as a zombie until both
	 * sides said BYE: the last message each sends on the connection, once its
	 * own FIN is through, the peer's FIN seen and nothing is left to send; so
	 * after the peer's BYE nothing more can come and the receives may go */
	int closing, close_want, peer_closed;
	int bye_sent, bye_done, bye_seen;
	int cbusy_bye;                   /* the control send in flight is our BYE */
	int64_t last_ctrl_ns, rfin_ns, zdl;
	struct es_conn *znext;
};

static inline uint8_t *rslot(struct es_conn *c, uint64_t seq) { return c->rbuf + (seq % c->R) * (size_t)(ES_HDR + c->S); }
static inline uint8_t *sslot(struct es_conn *c, uint64_t seq) { return c->sbuf + (seq % c->W) * (size_t)(ES_HDR + c->PS); }

void es__set_err(struct es_conn *c, int e, int line);
/* a tomb's receive completed (completion hook): taken, dropped, posted again */
void es__tomb_done(void *tomb, emp_req_t *req);
#define set_err(c, e) es__set_err(c, e, __LINE__)
int es__post_recv(struct es_conn *c, uint64_t seq);
void es__retire_head(struct es_conn *c);
int es__can_stage(struct es_conn *c);
void es__flush(struct es_conn *c);

#endif
