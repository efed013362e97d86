/* stats_read.c: reading published statistics segments without trusting them: list, copy one consistently (pread, seqlock), liveness of the publisher, stale cleanup. */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "sys.h"
#include "stats.h"

#define COPY_TRIES 2000              /* about 20 ms of retries against a busy writer */
#define SCAN_MAX   4096              /* segments one cleanup looks at */

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
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	ssize_t n = emp__sys_read(fd, buf, sizeof(buf) - 1);
	emp__sys_close(fd);
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

/* /proc shows this process's pid namespace (not an ancestor's or a sibling's) */
static int proc_is_ours(void)
{
	char buf[32];
	ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtol(buf, NULL, 10) == (long)getpid();
}

uint64_t emp__stats_pidns(void)
{
	struct stat st;
	if (!proc_is_ours() || stat("/proc/self/ns/pid", &st) < 0)
		return 0;
	return (uint64_t)st.st_ino;
}

int emp_stats_pid_alive(int pid, uint64_t proc_start)
{
	uint64_t st;
	char state;
	if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH))
		return 0;
	if (!proc_is_ours() || proc_info(pid, &state, &st) < 0)
		return 1;                 /* no /proc view of it: trust kill() */
	if (state == 'Z' || state == 'X')
		return 0;                 /* exited, not yet reaped */
	return !proc_start || st == proc_start;   /* else the pid was reused */
}

/* uid is one of pid's real, effective, saved or filesystem uids */
static int proc_has_uid(int pid, uid_t uid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	ssize_t n = emp__sys_read(fd, buf, sizeof(buf) - 1);
	emp__sys_close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strstr(buf, "\nUid:");
	if (!p)
		return 0;
	p += 5;
	for (int i = 0; i < 4; i++) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p)
			return 0;
		if (v == (unsigned long)uid)
			return 1;
		p = end;
	}
	return 0;
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

/* Open a segment by name without following links or blocking, and only if it
 * is a regular file: a FIFO, device or socket planted in /dev/shm is refused. */
static int seg_open(const char *name, struct stat *st)
{
	char path[128];
	if (!name || !*name || strchr(name, '/') || strlen(name) >= sizeof(((struct emp_stats_id *)0)->name))
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		emp__sys_close(fd);
		return -EINVAL;
	}
	return fd;
}

/* len bytes at off, or -EAGAIN if the file is shorter now (truncated under us) */
static int pread_full(int fd, void *buf, size_t len, off_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EAGAIN;
		got += (size_t)n;
	}
	return 0;
}

/* len bytes at off under the sequence lock at seq_off, trying up to tries
 * times: 0, -EAGAIN (odd or moving all along: the copy is the last one
 * taken), -errno */
static int seq_pread(int fd, off_t seq_off, void *dst, size_t len, off_t off, int tries)
{
	int rc = -EAGAIN;
	for (int i = 0; i < tries; i++) {
		uint32_t a, b;
		int e = pread_full(fd, &a, 4, seq_off);
		if (!e && !(a & 1))
			e = pread_full(fd, dst, len, off);
		if (!e && !(a & 1))
			e = pread_full(fd, &b, 4, seq_off);
		if (e && e != -EAGAIN)
			return e;
		if (!e && !(a & 1) && a == b)
			return 0;
		rc = e ? e : -EAGAIN;
		if (e == -EAGAIN && i > 200)
			return e;             /* shorter than its header said, and staying so */
		backoff(i);
	}
	/* odd all along: the writer may have died halfway; the caller decides */
	int e = pread_full(fd, dst, len, off);
	return e ? e : rc;
}

static void terminate(char *s, size_t len)
{
	s[len - 1] = 0;
}

int emp__stats_check(void *buf, size_t len, struct emp_stats_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	if (!buf || len < sizeof(struct emp_stats_hdr) || len > EMP_STATS_MAX_SIZE)
		return -EPROTO;
	struct emp_stats_hdr *h = buf;
	if (h->magic != EMP_STATS_MAGIC)
		return h->magic ? -EPROTO : -EAGAIN;
	if (h->version != EMP_STATS_VERSION)
		return -EPROTONOSUPPORT;
	if (h->size != len)
		return -EAGAIN;           /* not the segment whose header we read */
	uint64_t ce = (uint64_t)h->counters_off + (uint64_t)h->ncounters * h->counter_size;
	uint64_t pe = (uint64_t)h->peers_off + (uint64_t)h->max_peers * h->peer_size;
	uint64_t ne = (uint64_t)h->conns_off + (uint64_t)h->nconns * h->conn_size;
	if (h->counter_size != sizeof(struct emp_stats_counter) || h->peer_size != sizeof(struct emp_stats_peer) ||
	    h->conn_size != sizeof(struct emp_stats_conn) || h->counters_off < sizeof(*h) ||
	    h->peers_off < sizeof(*h) || h->conns_off < sizeof(*h) || h->counters_off % 8 || h->peers_off % 8 ||
	    h->conns_off % 8 || ce > len || pe > len || ne > len || h->npeers > h->max_peers)
		return -EPROTO;
	/* the copy is ours: its strings end inside their fields whatever the writer put there */
	terminate(h->prog, sizeof(h->prog));
	terminate(h->ifname, sizeof(h->ifname));
	terminate(h->driver, sizeof(h->driver));
	terminate(h->host, sizeof(h->host));
	terminate(h->conf_path, sizeof(h->conf_path));
	struct emp_stats_peer *peer = (void *)((char *)buf + h->peers_off);
	for (uint32_t i = 0; i < h->npeers; i++)
		terminate(peer[i].name, sizeof(peer[i].name));
	struct emp_stats_conn *conn = (void *)((char *)buf + h->conns_off);
	for (uint32_t i = 0; i < h->nconns; i++)
		terminate(conn[i].c.state, sizeof(conn[i].c.state));
	s->buf = buf;
	s->len = len;
	s->hdr = h;
	s->ctr = (const void *)((char *)buf + h->counters_off);
	s->peer = peer;
	s->conn = conn;
	return 0;
}

/* The whole segment into our own buffer: its size is taken from one read of
 * the header and bounds everything after; a file truncated or resized under
 * us gives an error, never a fault. */
static int read_seg(int fd, const struct stat *st, struct emp_stats_snapshot *s)
{
	struct emp_stats_hdr h;
	int rc = pread_full(fd, &h, sizeof(h), 0);
	if (rc < 0)
		return rc;                /* -EAGAIN: still being created */
	if (h.magic != EMP_STATS_MAGIC)
		return h.magic ? -EPROTO : -EAGAIN;
	if (h.version != EMP_STATS_VERSION)
		return -EPROTONOSUPPORT;
	if (h.size < sizeof(h) || h.size > EMP_STATS_MAX_SIZE)
		return -EPROTO;
	size_t len = h.size;
	char *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	/* an exited writer's sequence will not move again: no waiting for it */
	uint64_t ns = emp__stats_pidns();
	int tries = (h.pidns && ns && h.pidns != ns) || emp_stats_pid_alive(h.pid, h.proc_start) ? COPY_TRIES : 1;
	int torn = seq_pread(fd, offsetof(struct emp_stats_hdr, seq), buf, len, 0, tries);
	if (torn && torn != -EAGAIN) {
		free(buf);
		return torn;
	}
	rc = emp__stats_check(buf, len, s);
	if (rc < 0) {
		free(buf);
		return torn == -EAGAIN && rc == -EPROTO ? -EAGAIN : rc;
	}
	/* connection slots have a lock each; slots the copy shows unused and
	 * quiet are a state the writer left them in */
	const struct emp_stats_hdr *c = s->hdr;
	for (uint32_t i = 0; i < c->nconns; i++) {
		size_t off = c->conns_off + (size_t)i * sizeof(struct emp_stats_conn);
		struct emp_stats_conn *slot = (void *)(buf + off);
		if (!slot->used && !(slot->seq & 1))
			continue;
		int e = seq_pread(fd, (off_t)off, slot, sizeof(*slot), (off_t)off, tries);
		if (e == -EAGAIN)
			torn = -EAGAIN;
		else if (e < 0)
			torn = e;
		terminate(slot->c.state, sizeof(slot->c.state));
	}
	int foreign = c->pidns && ns && c->pidns != ns;
	s->alive = foreign || emp_stats_pid_alive(c->pid, c->proc_start);
	/* a file owned by someone the publishing process is not: planted */
	if (st->st_uid != geteuid() && st->st_uid != 0 && !foreign && s->alive && !proc_has_uid(c->pid, st->st_uid))
		torn = -EPERM;
	if ((torn && torn != -EAGAIN) || (torn && s->alive)) {
		free(buf);
		memset(s, 0, sizeof(*s));
		return torn;
	}
	return 0;                     /* a torn copy of an exited writer is its last state */
}

int emp_stats_read(const char *name, struct emp_stats_snapshot *s)
{
	struct stat st;
	memset(s, 0, sizeof(*s));
	int fd = seg_open(name, &st);
	if (fd < 0)
		return fd;
	int rc = read_seg(fd, &st, s);
	emp__sys_close(fd);
	return rc;
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

/* Provably stale: a regular file of ours whose header names the pid of its
 * name, our pid namespace, and a process that is gone. *st gets its identity
 * (unlink only that file). Anything else stays: a live process, one of another
 * namespace, another user's, a header not written yet, a foreign file. */
static int stale(const struct emp_stats_id *id, uint64_t pidns, struct stat *st)
{
	struct emp_stats_hdr h;
	int fd = seg_open(id->name, st);
	if (fd < 0)
		return 0;
	int rc = st->st_uid == geteuid() ? pread_full(fd, &h, sizeof(h), 0) : -EPERM;
	emp__sys_close(fd);
	return rc == 0 && h.magic == EMP_STATS_MAGIC && h.version == EMP_STATS_VERSION && h.pid == id->pid &&
	       h.pidns == pidns && !emp_stats_pid_alive(h.pid, h.proc_start);
}

int emp_stats_clean(void (*report)(const char *name, int err, void *arg), void *arg)
{
	uint64_t pidns = emp__stats_pidns();
	if (!pidns)
		return 0;                 /* no /proc of our own: nothing can be proven gone */
	struct emp_stats_id *ids = malloc(sizeof(*ids) * SCAN_MAX);
	if (!ids)
		return -ENOMEM;
	int n = emp_stats_list(ids, SCAN_MAX), removed = 0;
	if (n < 0) {
		free(ids);
		return n;
	}
	for (int i = 0; i < n && i < SCAN_MAX; i++) {
		struct stat st, now;
		if (!stale(&ids[i], pidns, &st))
			continue;
		char path[128];
		snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, ids[i].name);
		if (lstat(path, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino)
			continue;             /* replaced or removed meanwhile */
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
