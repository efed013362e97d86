/* sim.h: the simulated wire's own API (the backend behind emp__sim_ops): ports in one process, seeded faults, virtual time. */
#ifndef EMP_SIM_H
#define EMP_SIM_H

#include <stdint.h>

struct emp_sim_wire;

/* The simulated wire: any number of ports in one process, seeded faults.
 * Rates are in parts per million of frames. Time comes from clock(). */
struct emp_sim_faults {
	uint64_t seed;
	uint32_t loss_ppm;
	uint32_t reorder_ppm;     /* frame held back by reorder_ns */
	uint32_t dup_ppm;
	uint32_t corrupt_ppm;     /* one random bit flipped in the EMP part */
	uint64_t delay_ns;        /* one-way latency for every frame */
	uint64_t reorder_ns;
	unsigned mtu;             /* device MTU of every port (default 1500) */
	unsigned queue_frames;    /* per-port receive queue; overflow = drop (default 4096) */
	int tx_error;             /* tests: tx_burst fails with -tx_error, sends nothing (a device gone: ENXIO) */
};

struct emp_sim_stats {
	uint64_t sent, delivered, lost, reordered, duplicated, corrupted, overflow, no_port;
	uint64_t oversize;        /* refused by tx: longer than mtu + 14 (or shorter than 14) */
	uint64_t bursts;          /* tx_burst calls (a real device's system calls) */
};

int  emp_sim_wire_create(struct emp_sim_wire **w, const struct emp_sim_faults *f,
			 uint64_t (*clock)(void *arg), void *clock_arg);
void emp_sim_wire_destroy(struct emp_sim_wire *w);
void emp_sim_wire_set_faults(struct emp_sim_wire *w, const struct emp_sim_faults *f);
void emp_sim_wire_stats(struct emp_sim_wire *w, struct emp_sim_stats *s);
/* tests: fn sees every frame the wire accepts, as sent (NULL: none); called
 * under the wire's lock: it must not call into the wire */
struct emp_txframe;
typedef void emp_sim_tap_fn(void *arg, const struct emp_txframe *f);
void emp_sim_wire_tap(struct emp_sim_wire *w, emp_sim_tap_fn *fn, void *arg);
/* earliest time a queued frame becomes deliverable to any port, or UINT64_MAX */
uint64_t emp_sim_wire_next_event(struct emp_sim_wire *w);

#endif
