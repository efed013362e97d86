/* harness.h: a simulated cluster for unit tests: N endpoints on one sim wire, driven in virtual time. */
#ifndef EMP_TEST_HARNESS_H
#define EMP_TEST_HARNESS_H

#include "emp.h"
#include "fw.h"
#include "driver.h"
#include "conf.h"

#define H_MAX 8

struct harness {
	int n;
	uint64_t now;                    /* virtual ns */
	struct emp_sim_wire *wire;
	struct emp_conf conf;
	struct emp_fw_config fwc;
	emp_endpoint_t *ep[H_MAX];
	uint8_t mac[H_MAX][6];
	uint32_t inc_seq;
};

/* n hosts h0..h(n-1), endpoint id 1 each; faults may be NULL; fwc NULL = defaults. */
void h_init(struct harness *h, int n, const struct emp_sim_faults *f, const struct emp_fw_config *fwc);
void h_free(struct harness *h);
/* Close and reopen endpoint i with a new incarnation (a restarted process). */
void h_restart(struct harness *h, int i);
void h_close(struct harness *h, int i);
emp_addr_t h_addr(int host);
/* Drive every endpoint, advancing virtual time to the next event, until
 * done(arg) is true or max_ns of virtual time passed. 1 if done. */
int h_run(struct harness *h, int (*done)(void *arg), void *arg, uint64_t max_ns);
/* Wait (in virtual time) for one request: 1 done with st, 0 timeout. */
int h_wait(struct harness *h, int i, emp_req_t *r, struct emp_status *st, uint64_t max_ns);
struct emp_counters h_ctr(struct harness *h, int i);
void h_fill(void *buf, size_t len, uint32_t seed);
int h_check(const void *buf, size_t len, uint32_t seed);

#endif
