/* internal.h: libemp's private endpoint state shared by its files (locks, descriptor pool, progress thread). */
#ifndef EMP_LIBEMP_INTERNAL_H
#define EMP_LIBEMP_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include "emp.h"
#include "fw.h"
#include "driver.h"
#include "conf.h"

struct emp_progress;

struct emp_waiter {                /* a thread blocked in emp_wait */
	int efd;
	struct emp_waiter *next;
};

struct emp_endpoint {
	struct emp_conf conf;
	const struct emp_driver_ops *ops;
	void *dev;
	struct emp_fw *fw;
	size_t fw_size;
	int fw_ready;
	uint64_t mtu_warned;
	struct emp_fw_config fwc;
	struct emp_desc *desc;
	struct emp_sg **ext_sg;          /* per descriptor: heap sg list for long iovecs */
	uint32_t ndesc;
	struct emp_mailbox mb;
	uint32_t *free_idx;              /* free descriptor stack */
	uint32_t nfree;
	pthread_mutex_t post_lock;       /* mailbox producer side + free stack */
	pthread_mutex_t eng_lock;        /* whoever holds it drives the engine */
	pthread_mutex_t wait_mu;
	int sleepers;
	struct emp_waiter *waiters;       /* under wait_mu */
	int dev_fd;                      /* driver's wait fd, or -1 */
	int spinning;                    /* threads driving the engine in emp_wait (spinning or blocked) */
	int busy_hint;                   /* the last drive left work (tx budget, frames): drive again */
	uint64_t spin_ns;
	uint64_t (*clock)(void *);
	void *clock_arg;
	struct emp_sim_wire *wire;
	void (*hook)(void *);
	void *hook_arg;
	int self;
	int eplock;                      /* fd holding the endpoint id's lock (eplock.c), or -1 */
	uint16_t epid;
	uint8_t mac[6];
	struct emp_progress *prog;
};

static inline uint64_t emp__now(struct emp_endpoint *ep)
{
	return ep->clock ? ep->clock(ep->clock_arg) : emp_now_ns();
}

/* Drive the engine if nobody else is; returns completions seen. */
int emp__drive(struct emp_endpoint *ep);
/* the same from a thread that has just posted (a held ack may wait for its reply) */
int emp__drive_post(struct emp_endpoint *ep);
/* the same for a spinning caller: skips the engine when nothing is waiting */
int emp__drive_spin(struct emp_endpoint *ep);
/* spinning threads yield the CPU this often (a peer may share it) */
#define EMP__YIELD_NS 1000ull
/* Tell sleeping waiters and the hook that descriptors completed. */
void emp__notify(struct emp_endpoint *ep);
void emp__set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int emp__progress_start(struct emp_endpoint *ep);
void emp__progress_stop(struct emp_endpoint *ep);
void emp__progress_kick(struct emp_endpoint *ep);

/* eplock.c: the id's lock in this network namespace (an fd, or -EADDRINUSE /
 * -errno); release; a random id for EMP_EP_AUTO. */
int emp__eplock(uint16_t ethertype, uint16_t id);
void emp__epunlock(int fd);
uint16_t emp__random_epid(void);

/* Interface toward the cluster: from opts, $EMP_IFNAME, the config or routing. */
int emp__resolve_ifname(const struct emp_conf *c, char *out, size_t outlen);

#endif
