/* siphash.c: SipHash-2-4 (Aumasson and Bernstein, 2012), 64-bit tag, one-shot and incremental, for frame authentication. */
#include "fw_int.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3) do { \
	v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32); \
	v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2; \
	v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0; \
	v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32); \
} while (0)

static uint64_t le64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}

void emp__sip_init(struct emp_sip *s, const uint8_t key[16])
{
	uint64_t k0 = le64(key), k1 = le64(key + 8);
	s->v[0] = 0x736f6d6570736575ull ^ k0;
	s->v[1] = 0x646f72616e646f6dull ^ k1;
	s->v[2] = 0x6c7967656e657261ull ^ k0;
	s->v[3] = 0x7465646279746573ull ^ k1;
	s->total = 0;
	s->nbuf = 0;
}

static void block(struct emp_sip *s, uint64_t m)
{
	uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2], v3 = s->v[3];
	v3 ^= m;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= m;
	s->v[0] = v0, s->v[1] = v1, s->v[2] = v2, s->v[3] = v3;
}

void emp__sip_update(struct emp_sip *s, const void *data, uint64_t len)
{
	const uint8_t *p = data;
	s->total += len;
	if (s->nbuf) {
		while (len && s->nbuf < 8) {
			s->buf[s->nbuf++] = *p++;
			len--;
		}
		if (s->nbuf < 8)
			return;
		block(s, le64(s->buf));
		s->nbuf = 0;
	}
	/* the state in locals: p may alias s as far as the compiler knows (bytes) */
	uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2], v3 = s->v[3];
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t m = le64(p);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	s->v[0] = v0, s->v[1] = v1, s->v[2] = v2, s->v[3] = v3;
	while (len--)
		s->buf[s->nbuf++] = *p++;
}

uint64_t emp__sip_final(struct emp_sip *s)
{
	uint64_t b = (uint64_t)(s->total & 0xff) << 56;
	for (unsigned i = 0; i < s->nbuf; i++)
		b |= (uint64_t)s->buf[i] << (8 * i);
	block(s, b);
	uint64_t v0 = s->v[0], v1 = s->v[1], v2 = s->v[2] ^ 0xff, v3 = s->v[3];
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t emp__siphash(const uint8_t key[16], const void *data, uint64_t len)
{
	struct emp_sip s;
	emp__sip_init(&s, key);
	emp__sip_update(&s, data, len);
	return emp__sip_final(&s);
}
