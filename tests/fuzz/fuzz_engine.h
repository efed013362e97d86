/* fuzz_engine.h: what the engine fuzzers share: an engine over a caller's null driver, crafted-frame fix-ups, result checks. */
#ifndef EMP_FUZZ_ENGINE_H
#define EMP_FUZZ_ENGINE_H

#include "fw_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FZ_RING 64                /* mailbox ring entries */

/* the defaults, with the fuzzer's table size and hosts, endpoint 1 */
static inline void fz_config(struct emp_fw_config *c, uint32_t ndesc, uint32_t nhosts, const uint8_t (*macs)[6])
{
	emp__fw_config_defaults(c);
	c->ndesc = ndesc;
	c->max_peers = 8;
	c->nhosts = nhosts;
	c->host_mac = macs;
	c->endpoint = 1;
}

/* engine memory for the largest config of fz_config (MTU 9000) */
static inline size_t fz_fw_size(uint32_t ndesc, uint32_t nhosts, const uint8_t (*macs)[6])
{
	struct emp_fw_config c;
	fz_config(&c, ndesc, nhosts, macs);
	c.mtu = 9000;
	return emp__fw_memsize(&c);
}

static inline struct emp_fw *fz_fw_alloc(size_t size)
{
	struct emp_fw *fw = aligned_alloc(64, (size + 63) & ~(size_t)63);
	if (!fw)
		abort();
	return fw;
}

/* an empty mailbox over ring[FZ_RING] */
static inline void fz_mailbox(struct emp_mailbox *mb, uint32_t *ring)
{
	memset(mb, 0, sizeof *mb);
	mb->ring = ring;
	mb->mask = FZ_RING - 1;
}

/* emp__fw_init over ops/dev; aborts if the engine refuses the config */
static inline void fz_fw_init(struct emp_fw *fw, size_t size, const struct emp_fw_config *cfg,
			      const struct emp_driver_ops *ops, void *dev, struct emp_desc *desc,
			      struct emp_mailbox *mb)
{
	struct emp_fw_env env = { .ops = ops, .dev = dev, .desc = desc, .mb = mb };
	if (emp__fw_init(fw, size, cfg, &env) != 0)
		abort();
}

/* a heap copy of exactly len bytes of src: over-reads are caught */
static inline uint8_t *fz_frame_copy(const uint8_t *src, uint32_t len)
{
	uint8_t *f = malloc(len ? len : 1);
	if (!f)
		abort();
	memcpy(f, src, len);
	return f;
}

/* frame f: Ethernet header from src to dst with the EMP EtherType, and the protocol version */
static inline void fz_fix_eth(uint8_t *f, const uint8_t *dst, const uint8_t *src)
{
	memcpy(f, dst, 6);
	memcpy(f + 6, src, 6);
	put16(f + 12, EMP_ETHERTYPE_DEFAULT);
	uint8_t *v = f + EMP_ETH_HLEN + EMP_C_VTF;   /* version: the vtf word's top 4 bits */
	v[0] = (uint8_t)((v[0] & 0x0f) | EMP_PROTO_VERSION << 4);
}

/* the frame type in EMP header c (the vtf word's bits 11..9) */
static inline uint8_t fz_type(const uint8_t *c)
{
	return (uint8_t)EMP_VTF_TYPE(get16(c + EMP_C_VTF));
}

static inline void fz_set_type(uint8_t *c, uint8_t type)
{
	uint16_t v = get16(c + EMP_C_VTF);
	put16(c + EMP_C_VTF, EMP_VTF(EMP_VTF_VERSION(v), type, EMP_VTF_FLAGS(v)));
}

/* EMP header c: endpoints 1 to 1, the incarnations and the session */
static inline void fz_fix_hdr(uint8_t *c, uint32_t dst_inc, uint32_t src_inc, uint16_t session)
{
	put16(c + EMP_C_DST_EP, 1);
	put16(c + EMP_C_SRC_EP, 1);
	put32(c + EMP_C_DST_INC, dst_inc);
	put32(c + EMP_C_SRC_INC, src_inc);
	put16(c + EMP_C_SESSION, session);
}

/* EMP header c of a len-byte frame: its CRC32C */
static inline void fz_fix_csum(uint8_t *c, uint32_t len)
{
	put32(c, emp__crc32c(0, c + 4, len - EMP_ETH_HLEN - 4));
}

/* a completed descriptor's result is a length that fits (a receive's rlen), or one of the engine's errors */
static inline void fz_check_result(const struct emp_desc *d)
{
	if (d->result >= 0) {
		if ((uint64_t)d->result > d->len)
			abort();
		if (d->op == EMP_OP_RECV && d->rlen != (uint64_t)d->result)
			abort();
	} else if (d->result != -EMP_EMSGSIZE && d->result != -EMP_ECANCELED && d->result != -EMP_ECONNRESET &&
		   d->result != -EMP_ETIMEDOUT && d->result != -EMP_EHOSTUNREACH && d->result != -EMP_EINVAL &&
		   d->result != -EMP_ENOBUFS) {
		abort();
	}
}

#endif
