/* test_stats.c: the statistics segment: publish/read back, counters after traffic, seqlock consistency, connection slots, stale cleanup, EMP_DEBUG logging. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static uint64_t V(const struct emp_stats_snapshot *s, const char *name)
{
	uint64_t v = 0;
	CHECK_MSG(emp_stats_value(s, name, &v) == 0, "counter %s missing", name);
	return v;
}

/* Identity and engine counters read back with the reader empstat uses. */
static void t_publish_read(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	char n0[64], n1[64], comm[32] = "", path[128];
	seg_name(h.ep[0], n0);
	seg_name(h.ep[1], n1);
	CHECK(strcmp(n0, n1) != 0);        /* same endpoint id in one process: distinct names */
	char want[64];
	snprintf(want, sizeof(want), "emp.%d.1", (int)getpid());
	CHECK_MSG(!strcmp(n0, want), "%s", n0);
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, n0);
	struct stat st;
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_mode & 0777, 0600);          /* owner only (option stats_group widens it) */
	CHECK_EQ(st.st_uid, geteuid());
	struct emp_stats_id ids[256];
	int n = emp_stats_list(ids, 256), found = 0;
	for (int i = 0; i < n && i < 256; i++)
		found += ids[i].pid == getpid();
	CHECK_EQ(found, 2);

	struct emp_stats_snapshot s;
	read_ok(n0, &s);
	CHECK(s.alive);
	CHECK_EQ(s.hdr->pid, getpid());
	CHECK_EQ(s.hdr->endpoint, 1);
	CHECK_EQ(s.hdr->uid, geteuid());
	CHECK(s.hdr->pidns != 0 && s.hdr->pidns == emp__stats_pidns());
	CHECK_EQ(s.hdr->self_host, 0);
	CHECK_EQ(s.hdr->mtu, emp_mtu(h.ep[0]));
	CHECK(!memcmp(s.hdr->mac, h.mac[0], 6));
	CHECK(!strcmp(s.hdr->host, "h0"));
	CHECK(!strcmp(s.hdr->driver, "sim"));
	CHECK(!strcmp(s.hdr->ifname, "sim"));
	FILE *f = fopen("/proc/self/comm", "r");
	CHECK(f && fgets(comm, sizeof(comm), f));
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	CHECK(!strcmp(s.hdr->prog, comm));
	/* every counter of struct emp_counters is published (each field takes 8
	 * bytes there, a 32-bit one with its padding): a failure here means the
	 * engine grew a counter that the list in libemp/stats.c lacks */
	CHECK_EQ(s.hdr->ncounters, sizeof(struct emp_counters) / sizeof(uint64_t));
	CHECK_EQ(V(&s, "tx_frames"), 0);
	CHECK_EQ(V(&s, "drop.no_recv"), 0);
	CHECK_EQ(s.hdr->npeers, 0);
	uint64_t u0 = s.hdr->updates;
	emp_stats_release(&s);

	struct h_msg m[20];
	memset(m, 0, sizeof(m));
	for (int i = 0; i < 20; i++)
		m[i] = (struct h_msg){ .from = 0, .to = 1, .tag = 5, .len = 3000 + 100 * (uint32_t)i };
	h_traffic(&h, m, 20, 1000000000ull);
	CHECK_EQ(emp_stats_update(h.ep[0]), 0);
	read_ok(n0, &s);
	struct emp_counters c = h_ctr(&h, 0);
	CHECK(s.hdr->updates > u0);
	CHECK_EQ(V(&s, "msgs_sent"), 20);
	CHECK(V(&s, "tx_frames") > 20);
	CHECK_EQ(V(&s, "tx_frames"), c.tx_frames);
	CHECK_EQ(V(&s, "rx_acks"), c.rx_acks);
	CHECK_EQ(V(&s, "drops_total"), c.drops_total);
	for (int i = 0; i < EMP_DROP_MAX; i++) {
		char dn[32];
		snprintf(dn, sizeof(dn), "drop.%s", emp__drop_names[i]);
		CHECK_EQ(V(&s, dn), c.drops[i]);
	}
	CHECK_EQ(s.hdr->npeers, 1);
	CHECK_EQ(s.peer[0].host, 1);
	CHECK_EQ(s.peer[0].ep, 1);
	CHECK_EQ(s.peer[0].state, EMP_STATS_PEER_UP);
	CHECK_EQ(s.peer[0].life, 1);             /* its first life we know (the incarnation stays private) */
	CHECK(!strcmp(s.peer[0].name, "h1"));
	CHECK_EQ(s.hdr->peers_used, 1);
	CHECK(s.hdr->mem_bytes > 0);
	emp_stats_release(&s);
	read_ok(n1, &s);
	CHECK_EQ(V(&s, "msgs_received"), 0);  /* not updated since open: no progress thread here */
	emp_stats_release(&s);
	CHECK_EQ(emp_stats_update(h.ep[1]), 0);
	read_ok(n1, &s);
	CHECK_EQ(V(&s, "msgs_received"), 20);
	CHECK(V(&s, "rx_bytes") > 20 * 3000);
	emp_stats_release(&s);

	h_free(&h);
	CHECK(!seg_exists(n0));            /* emp_close unlinks */
	CHECK(!seg_exists(n1));
}

/* With a progress thread the segment follows the traffic by itself. */
static uint64_t rclock(void *arg) { return emp_now_ns(); }

static void t_progress_updates(void)
{
	struct emp_sim_wire *w;
	struct emp_sim_faults f = { .seed = 5 };
	struct emp_conf conf;
	emp_endpoint_t *ep[2];
	uint8_t mac[2][6] = { { 2, 0, 0, 0, 2, 1 }, { 2, 0, 0, 0, 2, 2 } };
	CHECK_EQ(emp_sim_wire_create(&w, &f, rclock, NULL), 0);
	emp_conf_defaults(&conf);
	conf.npeers = 2;
	conf.peers = calloc(2, sizeof(*conf.peers));
	for (int i = 0; i < 2; i++) {
		memcpy(conf.peers[i].mac, mac[i], 6);
		snprintf(conf.peers[i].name, sizeof(conf.peers[i].name), "p%d", i);
		conf.peers[i].ip = (uint32_t)(0x0a000201 + i);
	}
	for (int i = 0; i < 2; i++) {
		struct emp_open_opts o = { .conf = &conf, .driver = "sim", .endpoint = (uint16_t)(7 + i),
					   .wire = w, .mac = mac[i] };
		CHECK_EQ(emp_open(&ep[i], &o), 0);
	}
	char name[64];
	seg_name(ep[0], name);
	struct emp_stats_snapshot s;
	read_ok(name, &s);
	uint64_t u0 = s.hdr->updates;
	CHECK_EQ(V(&s, "msgs_sent"), 0);
	emp_stats_release(&s);
	static char src[200000], dst[200000];
	struct iovec si = { src, sizeof(src) }, di = { dst, sizeof(dst) };
	emp_req_t *r, *q;
	struct emp_status st;
	emp_addr_t a0 = { 0, 7 }, a1 = { 1, 8 };
	CHECK_EQ(emp_post_recv(ep[1], a0, 1, &di, 1, &r), 0);
	CHECK_EQ(emp_post_send(ep[0], a1, 1, &si, 1, &q), 0);
	CHECK_EQ(emp_wait(ep[0], q, &st, 5000000000ll), 1);
	CHECK_EQ(st.result, (long long)sizeof(src));
	CHECK_EQ(emp_wait(ep[1], r, &st, 5000000000ll), 1);
	CHECK_EQ(st.result, (long long)sizeof(dst));
	uint64_t sent = 0;
	for (int i = 0; i < 100 && sent == 0; i++) {
		usleep(20000);
		read_ok(name, &s);
		sent = V(&s, "msgs_sent");
		CHECK(s.hdr->updates >= u0);
		emp_stats_release(&s);
	}
	CHECK_EQ(sent, 1);
	emp_close(ep[0]);
	emp_close(ep[1]);
	CHECK(!seg_exists(name));
	emp_sim_wire_destroy(w);
	emp_conf_free(&conf);
}

/* Writers hammer a connection slot and the counters; every copy a reader
 * gets is one the writer wrote whole. */
struct hammer { emp_endpoint_t *ep; volatile int stop; uint64_t rounds; };

static void *writer(void *arg)
{
	struct hammer *hm = arg;
	for (uint64_t k = 1; !hm->stop; k++) {
		struct emp_conn_info c = { .fd = (int32_t)(k & 0x7fffffff), .local_ip = (uint32_t)k,
					   .remote_ip = (uint32_t)~k, .bytes_in = k, .bytes_out = k * 3,
					   .credits_tx = (uint32_t)k, .credits_rx = (uint32_t)(k + 1) };
		snprintf(c.state, sizeof(c.state), "s%llu", (unsigned long long)(k % 100000));
		emp_stats_conn_set(hm->ep, 5, &c);
		if (k % 64 == 0)
			emp_stats_update(hm->ep);
		hm->rounds = k;
	}
	return NULL;
}

static void t_seqlock(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	char name[64];
	seg_name(h.ep[0], name);
	struct hammer hm = { .ep = h.ep[0] };
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, writer, &hm), 0);
	uint64_t last_updates = 0, last_k = 0;
	int reads = 0, busy = 0;
	uint64_t end = emp_now_ns() + 1500000000ull;
	while (emp_now_ns() < end) {
		struct emp_stats_snapshot s;
		int rc = emp_stats_read(name, &s);
		if (rc == -EAGAIN) {
			busy++;
			continue;
		}
		CHECK_EQ(rc, 0);
		const struct emp_conn_info *c = &s.conn[5].c;
		if (s.conn[5].used) {
			uint64_t k = c->bytes_in;
			char want[16];
			snprintf(want, sizeof(want), "s%llu", (unsigned long long)(k % 100000));
			CHECK_MSG(c->bytes_out == 3 * k && c->fd == (int32_t)(k & 0x7fffffff) && c->local_ip == (uint32_t)k &&
					  c->remote_ip == (uint32_t)~k && c->credits_tx == (uint32_t)k &&
					  c->credits_rx == (uint32_t)(k + 1) && !strcmp(c->state, want),
				  "torn slot: k %llu out %llu fd %d state %s", (unsigned long long)k,
				  (unsigned long long)c->bytes_out, c->fd, c->state);
			CHECK(k >= last_k);
			last_k = k;
		}
		CHECK(s.hdr->updates >= last_updates);
		last_updates = s.hdr->updates;
		CHECK_EQ(s.hdr->seq % 2, 0);
		emp_stats_release(&s);
		reads++;
	}
	hm.stop = 1;
	pthread_join(th, NULL);
	CHECK_MSG(reads > 100 && last_k > 1000, "reads %d busy %d writes %llu", reads, busy,
		  (unsigned long long)hm.rounds);

	/* a writer that stopped halfway (odd sequence) makes a reader give up,
	 * in bounded time, instead of spinning forever */
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	int fd = open(path, O_RDWR);
	CHECK(fd >= 0);
	struct emp_stats_hdr *hp = mmap(NULL, sizeof(*hp), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(hp != MAP_FAILED);
	close(fd);
	__atomic_add_fetch(&hp->seq, 1, __ATOMIC_SEQ_CST);
	struct emp_stats_snapshot s;
	uint64_t t0 = emp_now_ns();
	CHECK_EQ(emp_stats_read(name, &s), -EAGAIN);
	CHECK(emp_now_ns() - t0 < 2000000000ull);
	__atomic_add_fetch(&hp->seq, 1, __ATOMIC_SEQ_CST);
	read_ok(name, &s);
	emp_stats_release(&s);
	munmap(hp, sizeof(*hp));
	h_free(&h);
}

static void t_conn_slots(void)
{
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	char name[64];
	seg_name(h.ep[0], name);
	struct emp_conn_info c = { .fd = 42, .local_ip = 0x0100000a, .remote_ip = 0x0200000a, .local_port = 40000,
				   .remote_port = 5201, .peer_host = 1, .peer_ep = 1, .state = "emp",
				   .bytes_in = 1000, .bytes_out = 2000, .credits_tx = 8, .credits_rx = 16 };
	CHECK_EQ(emp_stats_conn_set(h.ep[0], EMP_STATS_MAX_CONNS, &c), -EINVAL);
	CHECK_EQ(emp_stats_conn_set(h.ep[0], 3, &c), 0);
	struct emp_stats_snapshot s;
	read_ok(name, &s);
	int used = 0;
	for (uint32_t i = 0; i < s.hdr->nconns; i++)
		used += s.conn[i].used != 0;
	CHECK_EQ(used, 1);
	CHECK(s.conn[3].used);
	CHECK(!memcmp(&s.conn[3].c, &c, sizeof(c)));
	CHECK_EQ(s.conn[4].c.fd, -1);
	emp_stats_release(&s);
	CHECK_EQ(emp_stats_conn_set(h.ep[0], 3, NULL), 0);
	read_ok(name, &s);
	CHECK(!s.conn[3].used);
	emp_stats_release(&s);
	h_free(&h);
	CHECK_EQ(emp_stats_conn_set(NULL, 3, &c), -ENOENT);
}

/* A fake segment as a dead or recycled process would leave it. */
static void fake_segment(const char *name, int pid, uint64_t proc_start, int valid)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, name);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	struct emp_stats_hdr hd;
	memset(&hd, 0, sizeof(hd));
	if (valid) {
		hd.magic = EMP_STATS_MAGIC;
		hd.version = EMP_STATS_VERSION;
		hd.pid = pid;
		hd.proc_start = proc_start;
		hd.pidns = emp__stats_pidns();
		hd.size = sizeof(hd);
	}
	CHECK_EQ(write(fd, &hd, sizeof(hd)), (long long)sizeof(hd));
	close(fd);
}

static void t_stale_cleanup(void)
{
	/* a process that opened an endpoint and died without emp_close */
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		struct harness h;
		h_init(&h, 1, NULL, NULL);
		_exit(0);
	}
	int wst;
	CHECK_EQ(waitpid(child, &wst, 0), child);
	char dead[64], reused[64], creating[64];
	snprintf(dead, sizeof(dead), "emp.%d.1", (int)child);
	CHECK_MSG(seg_exists(dead), "%s left behind", dead);
	struct emp_stats_snapshot s;
	read_ok(dead, &s);                     /* still readable: the last state */
	CHECK(!s.alive);
	CHECK_EQ(s.hdr->pid, child);
	emp_stats_release(&s);
	/* our pid, but a different process start: a recycled pid */
	snprintf(reused, sizeof(reused), "emp.%d.9", (int)getpid());
	fake_segment(reused, getpid(), 1, 1);
	/* our pid, header not written yet: being created, must stay */
	snprintf(creating, sizeof(creating), "emp.%d.10", (int)getpid());
	fake_segment(creating, getpid(), 0, 0);
	CHECK(emp_stats_pid_alive(getpid(), 0));
	CHECK(!emp_stats_pid_alive(child, 0));
	CHECK_EQ(emp_stats_read(creating, &s), -EAGAIN);
	int rc = emp_stats_clean(NULL, NULL);
	CHECK(rc >= 0);
	CHECK(!seg_exists(dead));
	CHECK(!seg_exists(reused));
	CHECK(seg_exists(creating));
	/* the next publisher tidies up after dead ones too, on its progress
	 * thread (not in emp_open, whose caller may hold a lock) */
	fake_segment(dead, child, 0, 1);
	struct harness h;
	h_init(&h, 1, NULL, NULL);
	CHECK(seg_exists(dead));               /* no progress thread: no scan in emp_open */
	struct emp_sim_wire *w;
	struct emp_sim_faults f = { .seed = 5 };
	emp_endpoint_t *ep;
	uint8_t mac[6] = { 2, 0, 0, 0, 3, 1 };
	CHECK_EQ(emp_sim_wire_create(&w, &f, rclock, NULL), 0);
	struct emp_open_opts o = { .conf = &h.conf, .driver = "sim", .endpoint = 3, .wire = w, .mac = mac };
	CHECK_EQ(emp_open(&ep, &o), 0);
	for (int i = 0; i < 200 && seg_exists(dead); i++)
		usleep(10000);
	CHECK(!seg_exists(dead));
	CHECK(seg_exists(creating));
	emp_close(ep);
	emp_sim_wire_destroy(w);
	h_free(&h);
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", EMP_STATS_DIR, creating);
	unlink(path);
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
	fake_segment(dead, child, 0, 1);
	fake_segment(other_ns, child, 0, 1);
	fake_segment(unknown_ns, child, 0, 1);
	fake_segment(other_user, child, 0, 1);
	char stat_line[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	CHECK(f && fgets(stat_line, sizeof(stat_line), f));
	fclose(f);
	char *p = strrchr(stat_line, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	CHECK(p);
	fake_segment(live, getpid(), strtoull(p + 1, NULL, 10), 1);   /* this very process */
	fake_segment(reused, getpid(), 1, 1);                         /* our pid, another start */
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

static void t_disabled(void)
{
	setenv("EMP_STATS", "0", 1);
	struct harness h;
	h_init(&h, 2, NULL, NULL);
	char name[64];
	CHECK_EQ(emp_stats_name(h.ep[0], name, sizeof(name)), -ENOENT);
	CHECK_EQ(emp_stats_update(h.ep[0]), -ENOENT);
	h_free(&h);
}

/* EMP_DEBUG: nothing at 0; open/close at 1; sessions at 2; all "emp: " lines. */
static void capture(const char *level, char *out, size_t cap)
{
	char tmpl[] = "/tmp/emp-stats-log-XXXXXX";
	int fd = mkstemp(tmpl);
	CHECK(fd >= 0);
	unlink(tmpl);
	fflush(stderr);
	int saved = dup(2);
	dup2(fd, 2);
	pid_t p = fork();
	if (p == 0) {
		setenv("EMP_DEBUG", level, 1);
		struct harness h;
		h_init(&h, 2, NULL, NULL);
		struct h_msg m[3];
		memset(m, 0, sizeof(m));
		for (int i = 0; i < 3; i++)
			m[i] = (struct h_msg){ .from = 0, .to = 1, .tag = 1, .len = 100 };
		h_traffic(&h, m, 3, 1000000000ull);
		emp_stats_update(h.ep[0]);
		h_free(&h);
		_exit(0);
	}
	int st;
	CHECK_EQ(waitpid(p, &st, 0), p);
	dup2(saved, 2);
	close(saved);
	ssize_t n = pread(fd, out, cap - 1, 0);
	close(fd);
	out[n > 0 ? n : 0] = 0;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void t_debug_log(void)
{
	static char buf[16384];
	capture("0", buf, sizeof(buf));
	CHECK_MSG(buf[0] == 0, "EMP_DEBUG=0 printed: %s", buf);
	capture("1", buf, sizeof(buf));
	CHECK_MSG(strstr(buf, "emp: pid ") && strstr(buf, "endpoint 1 open: sim") && strstr(buf, "closed after"),
		  "%s", buf);
	CHECK_MSG(!strstr(buf, "session"), "%s", buf);
	for (char *l = buf; *l; l = strchr(l, '\n') + 1)
		CHECK_MSG(!strncmp(l, "emp: ", 5), "line without prefix: %s", l);
	capture("2", buf, sizeof(buf));
	CHECK_MSG(strstr(buf, "ep 1: new peer h1:1, our session up"), "%s", buf);
}

static const struct emp_test tests[] = {
	{ "stats_publish_read", t_publish_read, 20 },
	{ "stats_progress_thread_updates", t_progress_updates, 20 },
	{ "stats_seqlock", t_seqlock, 30 },
	{ "stats_conn_slots", t_conn_slots, 20 },
	{ "stats_stale_cleanup", t_stale_cleanup, 20 },
	{ "stats_fifo_symlink", t_fifo_symlink, 20 },
	{ "stats_mutating_segment", t_mutating_segment, 30 },
	{ "stats_clean_only_provable", t_clean_only_provable, 20 },
	{ "stats_no_incarnations", t_no_incarnations, 20 },
	{ "stats_group_readable", t_group_readable, 20 },
	{ "stats_disabled", t_disabled, 20 },
	{ "stats_debug_log", t_debug_log, 20 },
};
const struct emp_test_suite emp_suite_stats = { "stats", tests, sizeof(tests) / sizeof(tests[0]) };
