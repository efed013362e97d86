/* driver.h: the device backend ops struct shared by every driver (afpacket, sim). */
#ifndef EMP_DRIVER_H
#define EMP_DRIVER_H

#include <stdint.h>

/* One frame to transmit: Ethernet + EMP headers in hdr, payload in up to
 * EMP_TX_PIECES pieces gathered from the user's buffers (no staging copy). */
#define EMP_TX_PIECES 4
struct emp_txframe {
	const uint8_t *hdr;
	uint32_t hdr_len;
	uint32_t npieces;
	struct { const void *p; uint32_t len; } piece[EMP_TX_PIECES];
};

/* One received frame, pointing into driver memory until rx_release(). */
struct emp_rxframe {
	const uint8_t *data;
	uint32_t len;
};

struct emp_sim_wire;

/* a config host as a backend that addresses frames by IP sees it */
struct emp_dev_host {
	uint8_t mac[6];
	uint32_t ip;                 /* IPv4, network order */
};

/* What a backend needs to open a device. */
struct emp_dev_params {
	const char *ifname;          /* afpacket: interface; NULL = caller resolves */
	uint16_t ethertype;          /* EMP EtherType, 0x88B5 by default */
	uint16_t endpoint;           /* own endpoint id (BPF matches dst_ep) */
	int qdisc_bypass;            /* afpacket: PACKET_QDISC_BYPASS */
	unsigned rx_frames;          /* ring size hint, 0 = default */
	int ring_now;                /* afpacket: the rx ring at open (emp_open_opts.ring_at_open) */
	struct emp_sim_wire *wire;   /* sim: the wire to attach to */
	const uint8_t *mac;          /* sim: this port's MAC (6 bytes) */
	const struct emp_dev_host *hosts;   /* udp (EMP_DRV_HOSTS): the config's hosts */
	unsigned nhosts;
	/* optional: frames wait that wait_fd does not show (afpacket, while its
	 * rx ring is built): the caller drives the device soon; called from a
	 * thread of the driver's, may run at any time until close */
	void (*kick)(void *arg);
	void *kick_arg;
	char *err;                   /* out: one-line error message on failure */
	unsigned errlen;
};

/* what a backend needs from the layer that opens it (flags below) */
#define EMP_DRV_IFNAME  1u      /* opens a named network interface (p->ifname) */
#define EMP_DRV_IDLOCK  2u      /* shares a wire with other processes: endpoint ids are locked */
#define EMP_DRV_HOSTS   4u      /* addresses frames by the config's IPs (p->hosts) */
#define EMP_DRV_SYSLOOK 8u      /* a look (rx_burst) is a system call: rx_pending says when one is due */

struct emp_driver_ops {
	const char *name;
	unsigned flags;
	/* 0 or -errno; on error a one-line reason is written to p->err */
	int (*open)(const struct emp_dev_params *p, void **priv);
	void (*close)(void *priv);
	/* frames sent (all of them unless the device is full), or -errno */
	int (*tx_burst)(void *priv, const struct emp_txframe *f, unsigned n);
	/* up to max frames, valid until rx_release(); 0 when none */
	int (*rx_burst)(void *priv, struct emp_rxframe *f, unsigned max);
	void (*rx_release)(void *priv, unsigned n);
	/* optional: frame i of the last rx_burst stays valid past rx_release,
	 * until rx_unhold(token); owner (nonzero) is the caller's; 0 if it
	 * cannot (returns a token, nonzero) */
	uint32_t (*rx_hold)(void *priv, unsigned i, uint32_t owner);
	void (*rx_unhold)(void *priv, uint32_t token);
	/* a held frame the device needs back soon (its ring comes round to
	 * it), with its owner; 0 none */
	uint32_t (*rx_urgent)(void *priv, uint32_t *owner);
	/* optional: nonzero if a frame may be waiting (a cheap, lock-free peek
	 * for spinning callers; a wrong answer only costs one extra look) */
	int (*rx_pending)(void *priv);
	/* fd that becomes readable when frames arrive (poll/libev), or -1 */
	int (*wait_fd)(void *priv);
	/* optional: a second such fd (afpacket's bulk socket), or -1; a waiter
	 * sleeps on both (wait_fd alone carries the device's errors) */
	int (*wait_fd2)(void *priv);
	/* optional: the time (the clock the device was opened with) at which a
	 * frame becomes deliverable although wait_fd did not say so (a simulated
	 * wire's delayed frames), UINT64_MAX none; a sleeping engine bounds its
	 * sleep by it */
	uint64_t (*next_event)(void *priv);
	/* optional: frames the device dropped before rx_burst could return them
	 * (a full ring or socket buffer), counted since open; may cost a system
	 * call: the engine asks at most every EMP_DEV_DROPS_NS */
	uint64_t (*rx_dropped)(void *priv);
	/* optional: frames taken from a path of the device's own for long
	 * messages (afpacket's bulk socket), counted since open */
	uint64_t (*rx_bulk)(void *priv);
	void (*mac)(void *priv, uint8_t mac[6]);
	unsigned (*mtu)(void *priv);
};

extern const struct emp_driver_ops emp__afpacket_ops;
extern const struct emp_driver_ops emp__sim_ops;
extern const struct emp_driver_ops emp__udp_ops;
/* udp: datagrams read, frames split from them, segments dropped (wrong sender) */
void emp__udp_counts(void *priv, uint64_t *datagrams, uint64_t *frames, uint64_t *bad);

const struct emp_driver_ops *emp__driver_find(const char *name);

#endif
