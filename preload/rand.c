/* rand.c: the shim's randomness: negotiation keys, connection ids and cookies from getrandom(2), buffered, never shared with a forked child. */
/*
 * Nothing in the shim uses rand(): its values are predictable and calling it
 * would change the application's own rand() sequence. Keys and connection ids
 * come from the kernel's CSPRNG, read 256 bytes at a time (one system call per
 * 32 values). A forked child throws the parent's unread bytes away, so parent
 * and child never hand out the same value.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "es.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_rand = &mu;
static uint8_t pool[256];
static unsigned left;

static void refill(void)
{
	size_t got = 0;
	while (got < sizeof pool) {
		ssize_t n = getrandom(pool + got, sizeof pool - got, 0);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* no getrandom (very old kernel): refuse to run on weak values */
		es__log("getrandom failed (%s): cannot make negotiation keys", strerror(errno));
		abort();
	}
	left = sizeof pool;
}

uint64_t es__random64(void)
{
	uint64_t v;
	pthread_mutex_lock(&mu);
	if (left < sizeof v)
		refill();
	left -= sizeof v;
	memcpy(&v, pool + left, sizeof v);
	memset(pool + left, 0, sizeof v);
	pthread_mutex_unlock(&mu);
	return v;
}

/* fork.c: the child throws the parent's unread bytes away */
void es__rand_atfork_child(void)
{
	memset(pool, 0, sizeof pool);
	left = 0;
}
