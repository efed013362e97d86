/* crc32c.c: CRC32C (Castagnoli), slice-by-8, for the optional frame checksum. */
#include "fw_int.h"

static uint32_t tab[8][256];
static int ready;

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			tab[t][i] = (tab[t - 1][i] >> 8) ^ tab[0][tab[t - 1][i] & 0xff];
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
}

uint32_t emp__crc32c(uint32_t crc, const void *p, uint64_t len)
{
	const uint8_t *b = p;
	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
		init();
	crc = ~crc;
	while (len && ((uintptr_t)b & 7)) {
		crc = (crc >> 8) ^ tab[0][(crc ^ *b++) & 0xff];
		len--;
	}
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, b, 8);
		v ^= crc;
		crc = tab[7][v & 0xff] ^ tab[6][(v >> 8) & 0xff] ^ tab[5][(v >> 16) & 0xff] ^
		      tab[4][(v >> 24) & 0xff] ^ tab[3][(v >> 32) & 0xff] ^ tab[2][(v >> 40) & 0xff] ^
		      tab[1][(v >> 48) & 0xff] ^ tab[0][(v >> 56) & 0xff];
		b += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ tab[0][(crc ^ *b++) & 0xff];
	return ~crc;
}
