/* test_shm.c: statistics segments as hostile files: FIFOs and symlinks in /dev/shm, a segment mutated under the reader, what cleanup may remove, nothing secret published, group access. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runner.h"
#include "harness.h"
#include "stats.h"

static void seg_name(emp_endpoint_t *ep, char *name)
{
	CHECK_EQ(emp_stats_name(ep, name, 64), 0);
}

static int seg_exists(const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	return access(path, F_OK) == 0;
}

static void read_ok(const char *name, struct emp_stats_snapshot *s)
{
	int rc = emp_stats_read(name, s);
	CHECK_MSG(rc == 0, "emp_stats_read(%s): %d", name, rc);
}

static uint64_t rclock(void *arg) { return emp_now_ns(); }

/* A segment as a dead or recycled process would leave it. */
static void fake_segment(const char *name, int pid, uint64_t proc_start)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	struct emp_stats_hdr hd;
	memset(&hd, 0, sizeof(hd));
	hd.magic = EMP_STATS_MAGIC;
	hd.version = EMP_STATS_VERSION;
	hd.pid = pid;
	hd.proc_start = proc_start;
	hd.pidns = emp__stats_pidns();
	hd.size = sizeof(hd);
	CHECK_EQ(write(fd, &hd, sizeof(hd)), (long long)sizeof(hd));
	close(fd);
}

static void seg_path(char *path, size_t len, const char *name)
{
	snprintf(path, len, "%s/%s", EMP_STATS_DIR, name);
}

/* A FIFO or a symlink planted in /dev/shm under a segment's name: readers and
 * the cleanup return at once (they used to block in open() for ever on the
 * FIFO: every emp_open on the host ran that scan) and follow no link. */
static void t_fifo_symlink(void)
{
	char fifo[64], lfifo[64], lseg[64], path[128], target[128];
	struct harness h;
	h_init(&h, 1, NULL, NULL);
	char live[64];
	seg_name(h.ep[0], live);
	snprintf(fifo, sizeof(fifo), "emp.%d.77", (int)getpid());
	snprintf(lfifo, sizeof(lfifo), "emp.%d.78", (int)getpid());
	snprintf(lseg, sizeof(lseg), "emp.%d.79", (int)getpid());
	seg_path(path, sizeof(path), fifo);
	unlink(path);
	CHECK_EQ(mkfifo(path, 0600), 0);
	seg_path(target, sizeof(target), fifo);
	seg_path(path, sizeof(path), lfifo);
	unlink(path);
	CHECK_EQ(symlink(target, path), 0);
	seg_path(target, sizeof(target), live);
	seg_path(path, sizeof(path), lseg);
	unlink(path);
	CHECK_EQ(symlink(target, path), 0);
	alarm(10);                             /* a hang fails the test here, not at the runner's limit */
	struct emp_stats_snapshot s;
	uint64_t t0 = emp_now_ns();
	CHECK_EQ(emp_stats_read(fifo, &s), -EINVAL);
	CHECK_EQ(emp_stats_read(lfifo, &s), -ELOOP);
	CHECK_EQ(emp_stats_read(lseg, &s), -ELOOP);  /* even to a valid segment: never followed */
	CHECK(emp_stats_clean(NULL, NULL) >= 0);
	/* what empstat does for every name */
	struct emp_stats_id ids[256];
	int n = emp_stats_list(ids, 256), seen = 0;
	for (int i = 0; i < n && i < 256; i++) {
		if (ids[i].pid != getpid())
			continue;
		int rc = emp_stats_read(ids[i].name, &s);
		if (rc == 0) {
			seen++;
			emp_stats_release(&s);
		}
	}
	CHECK_EQ(seen, 1);                     /* the live segment only */
	CHECK_MSG(emp_now_ns() - t0 < 5000000000ull, "took %llu ms", (unsigned long long)(emp_now_ns() - t0) / 1000000);
	alarm(0);
	/* not segments of ours: left alone */
	CHECK(seg_exists(fifo) && seg_exists(lfifo) && seg_exists(lseg));
	for (const char *nm = fifo; nm; nm = nm == fifo ? lfifo : nm == lfifo ? lseg : NULL) {
		seg_path(path, sizeof(path), nm);
		unlink(path);
	}
	h_free(&h);
}

/* A segment that another process truncates, grows and rewrites while readers
 * copy it: every read returns an error or a copy whose every offset lies in
 * the reader's own buffer; never SIGBUS, never an overflow (ASan build). */
struct mutator { char path[128]; const uint8_t *img; size_t len; volatile int stop; uint64_t rounds; };

static void *mutate(void *arg)
{
	struct mutator *m = arg;
	int fd = open(m->path, O_RDWR);
	CHECK(fd >= 0);
	uint32_t x = 12345;
	while (!m->stop) {
		x = x * 1103515245u + 12345u;
		uint32_t v = x >> 8;
		switch (v % 8) {
		case 0: CHECK_EQ(ftruncate(fd, 0), 0); break;
		case 1: CHECK_EQ(ftruncate(fd, (off_t)(v % m->len)), 0); break;
		case 2: CHECK_EQ(ftruncate(fd, (off_t)m->len * 4), 0); break;
		case 3: {                      /* the size field: smaller, larger, huge */
			uint32_t sz = v % 3 == 0 ? (uint32_t)m->len * 8 : v % 3 == 1 ? (uint32_t)sizeof(struct emp_stats_hdr) : 0xfffffff0u;
			CHECK_EQ(pwrite(fd, &sz, 4, offsetof(struct emp_stats_hdr, size)), 4);
			break;
		}
		case 4: {                      /* counts and offsets */
			uint32_t g[6] = { v, v >> 3, 0x7fffffff, v % 4096, 1u << 20, v & ~7u };
			CHECK_EQ(pwrite(fd, g, sizeof(g), offsetof(struct emp_stats_hdr, ncounters)), (long long)sizeof(g));
			break;
		}
		case 5: {                      /* strings without their NUL */
			char junk[64];
			memset(junk, 'A' + (int)(v % 26), sizeof(junk));
			CHECK_EQ(pwrite(fd, junk, sizeof(junk), offsetof(struct emp_stats_hdr, host)), (long long)sizeof(junk));
			break;
		}
		default:                       /* the original, whole */
			CHECK_EQ(ftruncate(fd, (off_t)m->len), 0);
			CHECK_EQ(pwrite(fd, m->img, m->len, 0), (long long)m->len);
			break;
		}
		m->rounds++;
	}
	close(fd);
	return NULL;
}

static void t_mutating_segment(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	h_xfer(&h, 0, 1, 5000, 1, 7, 1000000000ull);
	CHECK_EQ(emp_stats_update(h.ep[0]), 0);
	char live[64], name[64], path[128];
	seg_name(h.ep[0], live);
	seg_path(path, sizeof(path), live);
	int fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	struct stat st;
	CHECK_EQ(fstat(fd, &st), 0);
	size_t len = (size_t)st.st_size;
	uint8_t *img = malloc(len);
	CHECK(img && pread(fd, img, len, 0) == (ssize_t)len);
	close(fd);
	struct mutator m = { .img = img, .len = len };
	snprintf(name, sizeof(name), "emp.%d.4242", (int)getpid());
	seg_path(m.path, sizeof(m.path), name);
	fd = open(m.path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, img, len) == (ssize_t)len);
	close(fd);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, mutate, &m), 0);
	int ok = 0, bad = 0;
	uint64_t end = emp_now_ns() + 1500000000ull;
	for (int i = 0; i < 200000 && emp_now_ns() < end; i++) {
		struct emp_stats_snapshot s;
		int rc = emp_stats_read(name, &s);
		if (rc < 0) {
			CHECK_MSG(rc == -EAGAIN || rc == -EPROTO || rc == -EPROTONOSUPPORT, "rc %d", rc);
			bad++;
			continue;
		}
		/* walk it as empstat does: everything inside the copy */
		const struct emp_stats_hdr *hd = s.hdr;
		CHECK_EQ(s.len, hd->size);
		CHECK(s.len <= EMP_STATS_MAX_SIZE);
		CHECK((const char *)(s.ctr + hd->ncounters) <= (const char *)s.buf + s.len);
		CHECK((const char *)(s.peer + hd->npeers) <= (const char *)s.buf + s.len);
		CHECK((const char *)(s.conn + hd->nconns) <= (const char *)s.buf + s.len);
		uint64_t sum = 0;
		for (uint32_t k = 0; k < hd->ncounters; k++)
			sum += s.ctr[k].value + strnlen(s.ctr[k].name, sizeof(s.ctr[k].name));
		for (uint32_t k = 0; k < hd->npeers; k++)
			sum += strlen(s.peer[k].name);
		for (uint32_t k = 0; k < hd->nconns; k++)
			sum += s.conn[k].used + strlen(s.conn[k].c.state);
		sum += strlen(hd->host) + strlen(hd->prog) + strlen(hd->ifname) + strlen(hd->conf_path);
		CHECK(sum > 0);
		emp_stats_release(&s);
		ok++;
	}
	m.stop = 1;
	pthread_join(th, NULL);
	unlink(m.path);
	free(img);
	printf("  reads: %d whole, %d refused; %llu mutations\n", ok, bad, (unsigned long long)m.rounds);
	CHECK(ok > 0 && bad > 0 && m.rounds > 100);
	h_free(&h);
}

/* Cleanup removes only the caller's own segments whose publisher is provably
 * gone: same pid namespace, pid dead or a different process. */
static void t_clean_only_provable(void)
{
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0)
		_exit(0);
	int wst;
	CHECK_EQ(waitpid(child, &wst, 0), child);
	char dead[64], other_ns[64], unknown_ns[64], other_user[64], live[64], reused[64], path[128];
	snprintf(dead, sizeof(dead), "emp.%d.1", (int)child);
	snprintf(other_ns, sizeof(other_ns), "emp.%d.2", (int)child);
	snprintf(unknown_ns, sizeof(unknown_ns), "emp.%d.3", (int)child);
	snprintf(other_user, sizeof(other_user), "emp.%d.4", (int)child);
	snprintf(live, sizeof(live), "emp.%d.5", (int)getpid());
	snprintf(reused, sizeof(reused), "emp.%d.6", (int)getpid());
	fake_segment(dead, child, 0);
	fake_segment(other_ns, child, 0);
	fake_segment(unknown_ns, child, 0);
	fake_segment(other_user, child, 0);
	char stat_line[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	CHECK(f && fgets(stat_line, sizeof(stat_line), f));
	fclose(f);
	char *p = strrchr(stat_line, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	CHECK(p);
	fake_segment(live, getpid(), strtoull(p + 1, NULL, 10));   /* this very process */
	fake_segment(reused, getpid(), 1);                      /* our pid, another start */
	/* the recorded pid namespace: another one, and none */
	struct emp_stats_hdr hd;
	seg_path(path, sizeof(path), other_ns);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0 && pread(fd, &hd, sizeof(hd), 0) == (ssize_t)sizeof(hd));
	hd.pidns ^= 0x5a5a5a;
	CHECK(pwrite(fd, &hd, sizeof(hd), 0) == (ssize_t)sizeof(hd));
	close(fd);
	seg_path(path, sizeof(path), unknown_ns);
	fd = open(path, O_RDWR);
	CHECK(fd >= 0 && pread(fd, &hd, sizeof(hd), 0) == (ssize_t)sizeof(hd));
	hd.pidns = 0;
	CHECK(pwrite(fd, &hd, sizeof(hd), 0) == (ssize_t)sizeof(hd));
	close(fd);
	int root = geteuid() == 0;
	seg_path(path, sizeof(path), other_user);
	if (root)
		CHECK_EQ(chown(path, 65534, 65534), 0);   /* nobody's */
	else
		unlink(path);
	CHECK(emp_stats_clean(NULL, NULL) >= 2);
	CHECK(!seg_exists(dead));
	CHECK(!seg_exists(reused));
	CHECK_MSG(seg_exists(other_ns), "a segment of another pid namespace was removed");
	CHECK_MSG(seg_exists(unknown_ns), "a segment without a pid namespace was removed");
	CHECK_MSG(seg_exists(live), "a live process's segment was removed");
	if (root)
		CHECK_MSG(seg_exists(other_user), "another user's segment was removed");
	else
		printf("  (not root: the other-user case is skipped)\n");
	const char *left[] = { other_ns, unknown_ns, other_user, live };
	for (int i = 0; i < 4; i++) {
		seg_path(path, sizeof(path), left[i]);
		unlink(path);
	}
}

/* Nothing that protects a session is published: neither endpoint's
 * incarnation appears anywhere in either segment, while the peer rows still
 * tell lives apart (a restart moves the peer's life number). */
static int contains(const uint8_t *b, size_t len, uint32_t v)
{
	for (size_t i = 0; i + 4 <= len; i++)
		if (!memcmp(b + i, &v, 4))
			return 1;
	uint32_t be = __builtin_bswap32(v);
	for (size_t i = 0; i + 4 <= len; i++)
		if (!memcmp(b + i, &be, 4))
			return 1;
	return 0;
}

static void t_no_incarnations(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	h.inc_seq = 0x5a3c17;                  /* distinctive incarnations from here on */
	h_restart(&h, 0);
	h_restart(&h, 1);
	h_xfer(&h, 0, 1, 3000, 1, 3, 1000000000ull);
	h_xfer(&h, 1, 0, 3000, 1, 4, 1000000000ull);
	uint32_t inc[3] = { h_incarnation(&h, 0), h_incarnation(&h, 1), 0 };
	for (int e = 0; e < 2; e++) {
		CHECK_EQ(emp_stats_update(h.ep[e]), 0);
		char name[64], path[128];
		seg_name(h.ep[e], name);
		seg_path(path, sizeof(path), name);
		int fd = open(path, O_RDONLY);
		struct stat st;
		CHECK(fd >= 0 && fstat(fd, &st) == 0);
		uint8_t *b = malloc((size_t)st.st_size);
		CHECK(b && pread(fd, b, (size_t)st.st_size, 0) == st.st_size);
		close(fd);
		for (int k = 0; k < 2; k++)
			CHECK_MSG(!contains(b, (size_t)st.st_size, inc[k]), "segment %s holds incarnation %08x", name, inc[k]);
		free(b);
		struct emp_stats_snapshot s;
		read_ok(name, &s);
		CHECK_EQ(s.hdr->npeers, 1);
		CHECK_EQ(s.peer[0].life, 1);
		emp_stats_release(&s);
	}
	/* the peer restarts: its row's life moves to 2 */
	h_restart(&h, 1);
	inc[2] = h_incarnation(&h, 1);
	char one = 1;
	struct iovec iv = { &one, 1 };
	emp_req_t *sr;
	struct emp_status st;
	CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 2, &iv, 1, &sr), 0);
	CHECK(h_wait(&h, 0, sr, &st, 2000000000ull));
	CHECK_EQ(st.result, -ECONNRESET);       /* the old life is gone */
	h_xfer(&h, 0, 1, 100, 2, 5, 2000000000ull);
	CHECK_EQ(emp_stats_update(h.ep[0]), 0);
	char name[64];
	seg_name(h.ep[0], name);
	struct emp_stats_snapshot s;
	read_ok(name, &s);
	CHECK_EQ(s.hdr->npeers, 1);
	CHECK_EQ(s.peer[0].life, 2);
	CHECK(!contains(s.buf, s.len, inc[2]));
	emp_stats_release(&s);
	h_free(&h);
}

/* option stats_group: the segment is 0640 and belongs to that group. */
static void t_group_readable(void)
{
	struct emp_sim_wire *w;
	struct emp_sim_faults f = { .seed = 5 };
	struct emp_conf conf;
	char text[256], err[256];
	snprintf(text, sizeof(text), "peer a 10.0.9.1 02:00:00:00:09:01\noption stats_group %u\n", (unsigned)getegid());
	CHECK_MSG(emp_conf_parse(&conf, "t", text, strlen(text), err, sizeof(err)) == 0, "%s", err);
	CHECK_EQ(emp_sim_wire_create(&w, &f, rclock, NULL), 0);
	uint8_t mac[6] = { 2, 0, 0, 0, 9, 1 };
	emp_endpoint_t *ep;
	struct emp_open_opts o = { .conf = &conf, .driver = "sim", .endpoint = 9, .wire = w, .mac = mac,
				   .no_progress_thread = 1 };
	CHECK_EQ(emp_open(&ep, &o), 0);
	char name[64], path[128];
	seg_name(ep, name);
	seg_path(path, sizeof(path), name);
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0640);
	CHECK_EQ(st.st_gid, getegid());
	emp_close(ep);
	emp_sim_wire_destroy(w);
	emp_conf_free(&conf);
}

static const struct emp_test tests[] = {
	{ "shm_fifo_symlink", t_fifo_symlink, 20 },
	{ "shm_mutating_segment", t_mutating_segment, 30 },
	{ "shm_clean_only_provable", t_clean_only_provable, 20 },
	{ "shm_no_incarnations", t_no_incarnations, 20 },
	{ "shm_group_readable", t_group_readable, 20 },
};
const struct emp_test_suite emp_suite_shm = { "shm", tests, sizeof(tests) / sizeof(tests[0]) };
