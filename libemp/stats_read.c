/* stats_read.c: reading published statistics segments: list them, copy one consistently (seqlock), liveness of the publisher, stale cleanup. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "stats.h"

#define COPY_TRIES 2000              /* about 20 ms of retries against a busy writer */

static int parse_num(const char **p, unsigned long max, unsigned long *out)
{
	char *end;
	if (!isdigit((unsigned char)**p))
		return -1;
	errno = 0;
	unsigned long v = strtoul(*p, &end, 10);
	if (errno || v > max)
		return -1;
	*out = v;
	*p = end;
	return 0;
}

/* "emp.<pid>.<ep>" or "emp.<pid>.<ep>.<n>" */
static int parse_name(const char *name, struct emp_stats_id *id)
{
	unsigned long pid, ep, n = 0;
	const char *p = name + 4;
	if (strncmp(name, "emp.", 4) || strlen(name) >= sizeof(id->name))
		return -1;
	if (parse_num(&p, INT_MAX, &pid) || pid == 0 || *p++ != '.' || parse_num(&p, 65535, &ep))
		return -1;
	if (*p == '.') {
		p++;
		if (parse_num(&p, 1000000, &n))
			return -1;
	}
	if (*p)
		return -1;
	snprintf(id->name, sizeof(id->name), "%s", name);
	id->pid = (int)pid;
	id->ep = (unsigned)ep;
	id->n = (unsigned)n;
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	const struct emp_stats_id *x = a, *y = b;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->ep != y->ep)
		return x->ep < y->ep ? -1 : 1;
	return x->n < y->n ? -1 : x->n > y->n;
}

int emp_stats_list(struct emp_stats_id *ids, int max)
{
	DIR *d = opendir(EMP_STATS_DIR);
	if (!d)
		return -errno;
	int n = 0;
	struct dirent *e;
	struct emp_stats_id id;
	while ((e = readdir(d)))
		if (parse_name(e->d_name, &id) == 0) {
			if (ids && n < max)
				ids[n] = id;
			n++;
		}
	closedir(d);
	if (ids)
		qsort(ids, (size_t)(n < max ? n : max), sizeof(*ids), id_cmp);
	return n;
}

/* state letter and start time (fields 3 and 22 of /proc/PID/stat) */
static int proc_info(int pid, char *state, uint64_t *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EPROTO;
	*state = p[2];
	for (int field = 2; p && *p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p)
		return -EPROTO;
	*start = strtoull(p + 1, NULL, 10);
	return 0;
}

int emp_stats_pid_alive(int pid, uint64_t proc_start)
{
	uint64_t st;
	char state;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return 0;
	if (proc_info(pid, &state, &st) < 0)
		return 1;                 /* no /proc view of it: trust kill() */
	if (state == 'Z' || state == 'X')
		return 0;                 /* exited, not yet reaped */
	return !proc_start || st == proc_start;   /* else the pid was reused */
}

static void backoff(int i)
{
	if (i < 100)
		return;
	struct timespec ts = { 0, 10000 };
	if (i < 200)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

/* copy len bytes from the live mapping under the sequence lock at *seq */
static int seq_copy(const uint32_t *seq, void *dst, const void *src, size_t len)
{
	for (int i = 0; i < COPY_TRIES; i++) {
		uint32_t a = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
		if (!(a & 1)) {
			memcpy(dst, src, len);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(seq, __ATOMIC_RELAXED) == a)
				return 0;
		}
		backoff(i);
	}
	memcpy(dst, src, len);            /* torn: fine only if the writer is gone */
	return -EAGAIN;
}

static int valid(const struct emp_stats_hdr *h, size_t size)
{
	uint64_t ce = (uint64_t)h->counters_off + (uint64_t)h->ncounters * h->counter_size;
	uint64_t pe = (uint64_t)h->peers_off + (uint64_t)h->max_peers * h->peer_size;
	uint64_t ne = (uint64_t)h->conns_off + (uint64_t)h->nconns * h->conn_size;
	return h->size <= size && h->size >= sizeof(*h) && h->counter_size == sizeof(struct emp_stats_counter) &&
	       h->peer_size == sizeof(struct emp_stats_peer) && h->conn_size == sizeof(struct emp_stats_conn) &&
	       h->counters_off >= sizeof(*h) && h->peers_off >= sizeof(*h) && h->conns_off >= sizeof(*h) &&
	       h->counters_off % 8 == 0 && h->peers_off % 8 == 0 && h->conns_off % 8 == 0 &&
	       ce <= h->size && pe <= h->size && ne <= h->size && h->npeers <= h->max_peers;
}

int emp_stats_read(const char *name, struct emp_stats_snapshot *s)
{
	char path[128];
	struct stat st;
	memset(s, 0, sizeof(*s));
	if (!name || strchr(name, '/'))
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof(struct emp_stats_hdr)) {
		close(fd);
		return -EAGAIN;           /* still being created */
	}
	size_t size = (size_t)st.st_size;
	void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -errno;
	const struct emp_stats_hdr *h = m;
	uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
	int rc = 0;
	if (magic != EMP_STATS_MAGIC)
		rc = magic ? -EPROTO : -EAGAIN;
	else if (h->version != EMP_STATS_VERSION)
		rc = -EPROTONOSUPPORT;
	else if (!valid(h, size))
		rc = -EPROTO;
	char *buf = rc ? NULL : malloc(h->size);
	if (!rc && !buf)
		rc = -ENOMEM;
	if (rc) {
		munmap(m, size);
		return rc;
	}
	int torn = seq_copy(&h->seq, buf, m, h->size);
	const struct emp_stats_hdr *c = (const struct emp_stats_hdr *)buf;
	if (!valid(c, size)) {
		torn = -EPROTO;
	} else {
		for (uint32_t i = 0; i < c->nconns; i++) {
			size_t off = c->conns_off + (size_t)i * sizeof(struct emp_stats_conn);
			const struct emp_stats_conn *live = (const void *)((const char *)m + off);
			if (seq_copy(&live->seq, buf + off, live, sizeof(*live)) < 0)
				torn = -EAGAIN;
		}
	}
	munmap(m, size);
	s->alive = emp_stats_pid_alive(c->pid, c->proc_start);
	if (torn == -EPROTO || (torn && s->alive)) {
		free(buf);
		return torn;
	}
	s->buf = buf;
	s->len = c->size;
	s->hdr = c;
	s->ctr = (const void *)(buf + c->counters_off);
	s->peer = (const void *)(buf + c->peers_off);
	s->conn = (const void *)(buf + c->conns_off);
	return 0;
}

void emp_stats_release(struct emp_stats_snapshot *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

int emp_stats_value(const struct emp_stats_snapshot *s, const char *name, uint64_t *v)
{
	for (uint32_t i = 0; s->hdr && i < s->hdr->ncounters; i++)
		if (!strncmp(s->ctr[i].name, name, sizeof(s->ctr[i].name))) {
			*v = s->ctr[i].value;
			return 0;
		}
	return -ENOENT;
}

/* stale: the pid is gone, or it now belongs to a process started later */
static int stale(const struct emp_stats_id *id)
{
	struct emp_stats_hdr h;
	char path[128];
	if (!emp_stats_pid_alive(id->pid, 0))
		return 1;
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, id->name);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	ssize_t n = pread(fd, &h, sizeof(h), 0);
	close(fd);
	if (n != (ssize_t)sizeof(h) || h.magic != EMP_STATS_MAGIC || h.pid != id->pid)
		return 0;                 /* being created by a live process */
	return !emp_stats_pid_alive(h.pid, h.proc_start);
}

int emp_stats_clean(void (*report)(const char *name, int err, void *arg), void *arg)
{
	int n = emp_stats_list(NULL, 0);
	if (n <= 0)
		return n;
	int cap = n + 64, removed = 0;
	struct emp_stats_id *ids = malloc(sizeof(*ids) * (size_t)cap);
	if (!ids)
		return -ENOMEM;
	n = emp_stats_list(ids, cap);
	for (int i = 0; i < n && i < cap; i++) {
		if (!stale(&ids[i]))
			continue;
		char path[128];
		snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, ids[i].name);
		int err = unlink(path) == 0 ? 0 : errno == ENOENT ? -1 : errno;
		if (err == -1)
			continue;             /* someone else removed it meanwhile */
		if (!err)
			removed++;
		if (report)
			report(ids[i].name, err, arg);
	}
	free(ids);
	return removed;
}
