/* ringswitch.c: the AF_PACKET driver on its own, receiving numbered frames while it builds its rx ring (afp_lazy.c): every number must arrive. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drvprog.h"

/* usage: ringswitch IFNAME ENDPOINT COUNT SECONDS
 * Frames (sent by another host with EtherType 0x88b5 to ENDPOINT) carry their
 * number, big-endian, at byte 40. Prints "got D of COUNT distinct, ... mode M"
 * and exits 0 only when every number arrived and the ring is in use. */
int main(int argc, char **argv)
{
	int status = 1;
	void *dev = drv_open(argc, argv, "ringswitch", &status);
	if (!dev)
		return status;
	unsigned count = (unsigned)atoi(argv[3]);
	struct afp *a = dev;
	uint8_t *seen = calloc(count, 1);
	unsigned distinct = 0, dups = 0, bad = 0, from_ring = 0, late_dups = 0, ring_seen = 0;
	int fd = emp__afpacket_ops.wait_fd(dev);
	printf("ready\n");
	fflush(stdout);
	double end = now_s() + atof(argv[4]);
	while (distinct < count && now_s() < end) {
		struct emp_rxframe f[64];
		int n = emp__afpacket_ops.rx_burst(dev, f, 64);
		for (int i = 0; i < n; i++) {
			if (f[i].len < 44) {
				bad++;
				continue;
			}
			const uint8_t *b = f[i].data + 40;
			uint32_t k = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
			if (k >= count)
				bad++;
			else if (seen[k])
				dups++, late_dups += ring_seen || a->last_ring;
			else
				seen[k] = 1, distinct++;
		}
		if (n > 0 && a->last_ring)
			from_ring += (unsigned)n, ring_seen = 1;
		emp__afpacket_ops.rx_release(dev, n > 0 ? (unsigned)n : 0);
		if (n <= 0) {
			struct pollfd pf = { fd, POLLIN, 0 };
			poll(&pf, 1, 1);
		}
	}
	int mode = __atomic_load_n(&a->mode, __ATOMIC_ACQUIRE);
	printf("late duplicates %u\n", late_dups);
	printf("early duplicates %u\n", dups - late_dups);   /* before any frame came from the ring */
	printf("got %u of %u distinct, %u duplicates, %u bad, %u from the ring, mode %d, left %llu, "
	       "helper caught up %d (%llu of its frames left unread), %llu dropped unread at the switch, "
	       "%llu helper frames dropped as read from the socket already\n",
	       distinct, count, dups, bad, from_ring, mode, (unsigned long long)a->switch_left, a->hcaught,
	       (unsigned long long)a->hdups, (unsigned long long)a->sdropped,
	       (unsigned long long)a->seen_dups);
	emp__afpacket_ops.close(dev);
	free(seen);
	return distinct == count && mode == AFP_RING && from_ring > 0 ? 0 : 1;
}
