/* epoll_int.h: what the two halves of the shim's epoll share: the set and registration records, the set lock, the ready list and set helpers (epoll.c), waiting (epwait.c). */
#ifndef ES_EPOLL_INT_H
#define ES_EPOLL_INT_H

#include <stdatomic.h>
#include <sys/epoll.h>

#include "es.h"

struct es_epset;
struct es_epreg {
	struct es_epset *set;
	struct es_sock *s;
	int fd;
	uint32_t events;
	epoll_data_t data;
	int emulated;                     /* on our ready lists, not in the kernel set */
	int disabled;                     /* EPOLLONESHOT reported; until EPOLL_CTL_MOD */
	int pending;                      /* an edge since the last report (EPOLLET) */
	int queued;                       /* on set->ready (set->lock) */
	struct es_epreg *snext;           /* in s->epregs */
	struct es_epreg *next;            /* in set->regs */
	struct es_epreg *rnext, *rprev;   /* in the ready list */
};

struct es_epset {
	int kind;                         /* ES_KIND_EPSET */
	unsigned gen;                     /* inherited across fork: the parent's, hands off */
	int epfd;
	int efd;                          /* WAKE */
	int armed;                        /* DEV, LIVE, WAKE are in the kernel set */
	int dev_in;                       /* DEV is (the engine may come later) */
	int nemu;                         /* emulated registrations */
	int nested;                       /* this epoll fd sits in other epoll sets */
	int refs, dead;                   /* ep_lock: waits in progress; closed */
	struct es_epreg *regs;
	pthread_mutex_t lock;             /* the ready list */
	struct es_epreg *rhead, *rtail;
	atomic_int nready;
	atomic_int sleepers;              /* threads about to sleep or asleep on it */
	atomic_int signaled;              /* efd written, not yet drained */
	unsigned kskip;                   /* epoll_waits answered from the ready list alone */
	int64_t klook_ns;                 /* the kernel fds' last look */
};

#define C_DEV 0
#define C_LIVE 1
#define C_WAKE 2
#define C_DEV2 3                          /* the device's second fd (emp_wait_fd2) */
#define KLOOK_EVERY 8                     /* kernel fds looked at every 8th answer ... */
#define KLOOK_NS 1000000                  /* ... or after 1 ms */

extern pthread_mutex_t es__ep_lock;        /* sets, registrations, s->epregs */
extern uint64_t es__ep_cookie;             /* data of our own entries in a kernel set: cookie + C_* */
extern atomic_int es__ep_raw_sleepers[64]; /* by epfd % 64: threads in the kernel's epoll_wait on a set with no EMP socket yet */

int es__ep_internal(uint64_t data);
uint32_t es__ep_want_of(const struct es_epreg *r);
void es__ep_rq_add(struct es_epset *set, struct es_epreg *r);
void es__ep_rq_del(struct es_epset *set, struct es_epreg *r);
void es__ep_set_drain(struct es_epset *set);
void es__ep_set_quiet(struct es_epset *set);
struct es_epset *es__ep_set_get(int epfd, int create);
int es__ep_set_arm(struct es_epset *set);
void es__ep_set_free(struct es_epset *set);

#endif
