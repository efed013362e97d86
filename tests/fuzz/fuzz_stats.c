/* fuzz_stats.c: libFuzzer target for the statistics-segment reader: a hostile segment in /dev/shm, read and walked the way empstat does. */
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char name[64], path[128];

static void cleanup(void)
{
	unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(name, sizeof(name), "emp.%d.65535.999", (int)getpid());
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	atexit(cleanup);
	return 0;
}

/* Everything empstat touches: every byte must lie in the copy (ASan). */
static void walk(const struct emp_stats_snapshot *s)
{
	const struct emp_stats_hdr *h = s->hdr;
	const char *end = (const char *)s->buf + s->len;
	if (!h || s->len != h->size || (const char *)(s->ctr + h->ncounters) > end ||
	    (const char *)(s->peer + h->npeers) > end || (const char *)(s->conn + h->nconns) > end ||
	    h->npeers > h->max_peers)
		abort();
	volatile size_t sum = strlen(h->prog) + strlen(h->ifname) + strlen(h->driver) + strlen(h->host) +
			      strlen(h->conf_path);
	for (uint32_t i = 0; i < h->ncounters; i++)
		sum += strnlen(s->ctr[i].name, sizeof(s->ctr[i].name)) + s->ctr[i].value;
	for (uint32_t i = 0; i < h->npeers; i++)
		sum += strlen(s->peer[i].name) + s->peer[i].life + s->peer[i].credits;
	for (uint32_t i = 0; i < h->nconns; i++)
		sum += s->conn[i].used + strlen(s->conn[i].c.state) + s->conn[i].c.bytes_in;
	uint64_t v;
	(void)emp_stats_value(s, "tx_frames", &v);
	(void)emp_stats_value(s, "drop.no_recv", &v);
	(void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct emp_stats_snapshot s;
	/* the checker alone, on a private copy of exactly the input */
	if (size <= EMP_STATS_MAX_SIZE) {
		void *buf = malloc(size ? size : 1);
		if (!buf)
			return 0;
		memcpy(buf, data, size);
		if (emp__stats_check(buf, size, &s) == 0)
			walk(&s);
		free(buf);
	}
	/* the same bytes as a segment file, through the reader empstat uses; its
	 * writer made to look exited (pid 0, this pid namespace), which a reader
	 * does not wait for (a live writer's busy sequence lock is test_stats's) */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		abort();
	if (size && write(fd, data, size) != (ssize_t)size)
		abort();
	int32_t nopid = 0;
	uint64_t nons = 0;
	if (size >= offsetof(struct emp_stats_hdr, pid) + 4 &&
	    pwrite(fd, &nopid, 4, offsetof(struct emp_stats_hdr, pid)) != 4)
		abort();
	if (size >= offsetof(struct emp_stats_hdr, pidns) + 8 &&
	    pwrite(fd, &nons, 8, offsetof(struct emp_stats_hdr, pidns)) != 8)
		abort();
	close(fd);
	int rc = emp_stats_read(name, &s);
	if (rc == 0) {
		walk(&s);
		emp_stats_release(&s);
	} else if (rc != -EAGAIN && rc != -EPROTO && rc != -EPROTONOSUPPORT) {
		abort();               /* a file of ours, regular: only format errors */
	}
	return 0;
}
