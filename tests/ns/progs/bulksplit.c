/* bulksplit.c: the AF_PACKET driver on its own, receiving frames that another host marks with the socket they must reach (afp_bulk.c): the bulk socket takes exactly the frames of long DATA messages other than their first, their last and those asking for an ack, the ring the rest. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drvprog.h"

/* usage: bulksplit IFNAME ENDPOINT COUNT SECONDS
 * Each frame (EtherType 0x88b5, to ENDPOINT) ends with 5 bytes: its number
 * (big-endian) and 'B' (it must come from the bulk socket) or 'R' (from fd
 * and its ring). Prints the counts; exits 0 only when all COUNT frames came,
 * each by its path, no bulk frame twice, bulk frames alone woke a sleeper on wait_fd2, and a
 * burst that left frames of a look in the pool made next_event due at once. */
int main(int argc, char **argv)
{
	int status = 1;
	void *dev = drv_open(argc, argv, "bulksplit", &status);
	if (!dev)
		return status;
	unsigned count = (unsigned)atoi(argv[3]);
	struct afp *a = dev;
	uint8_t *seen = calloc(count, 1);
	unsigned distinct = 0, dups = 0, bdups = 0, bad = 0, bulk_ok = 0, ring_ok = 0, wrong = 0, woken = 0;
	unsigned left = 0, unbounded = 0;
	int slept = 0;
	int fd = emp__afpacket_ops.wait_fd(dev), fd2 = emp__afpacket_ops.wait_fd2(dev);
	printf("ready bulk %d\n", a->bulk);
	fflush(stdout);
	double end = now_s() + atof(argv[4]);
	while (distinct < count && now_s() < end) {
		struct emp_rxframe f[32];
		int n = emp__afpacket_ops.rx_burst(dev, f, 32);
		if (n > 0 && slept && a->last_bulk)
			woken++;             /* a sleeper on wait_fd woke for the bulk socket's frames */
		if (n > 0)
			slept = 0;
		if (n > 0 && a->last_bulk && a->bleft) {
			/* the look read more than this burst took: the wait fds do
			 * not show the rest, so a sleep must not start (next_event) */
			left++;
			unbounded += emp__afpacket_ops.next_event(dev) > emp__afp_clock_ns(CLOCK_MONOTONIC);
		}
		for (int i = 0; i < n; i++) {
			if (f[i].len < 60) {
				bad++;
				continue;
			}
			const uint8_t *b = f[i].data + f[i].len - 5;
			uint32_t k = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
			if (k >= count || (b[4] != 'B' && b[4] != 'R')) {
				bad++;
				continue;
			}
			if (seen[k]) {
				/* the ring's switch-over may hand a frame of fd twice
				 * (afp_lazy.c, t_core_ringswitch); the bulk socket never */
				dups++;
				bdups += b[4] == 'B';
				continue;
			}
			seen[k] = 1;
			distinct++;
			if ((b[4] == 'B') != (a->last_bulk != 0)) {
				if (wrong++ < 5)
					printf("frame %u marked %c came from %s\n", k, b[4], a->last_bulk ? "bulk" : "ring");
			} else if (b[4] == 'B') {
				bulk_ok++;
			} else {
				ring_ok++;
			}
		}
		emp__afpacket_ops.rx_release(dev, n > 0 ? (unsigned)n : 0);
		if (n <= 0) {
			/* nothing now: sleep on the two wait fds (a frame on either ends it) */
			struct pollfd pf[2] = { { fd, POLLIN, 0 }, { fd2, POLLIN, 0 } };
			slept = poll(pf, fd2 >= 0 ? 2 : 1, 20) > 0;
		}
	}
	printf("got %u of %u distinct, %u duplicates (%u bulk), %u bad, bulk socket %u, ring %u, wrong path %u, "
	       "woken %u, bulk calls %llu, bursts leaving bulk frames %u (a sleep not ended by them %u)\n",
	       distinct, count, dups, bdups, bad, bulk_ok, ring_ok, wrong, woken, (unsigned long long)a->bcalls, left,
	       unbounded);
	emp__afpacket_ops.close(dev);
	return distinct == count && !bdups && !wrong && !bad && bulk_ok && ring_ok && woken && !unbounded ? 0 : 1;
}
