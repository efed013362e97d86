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
	/* 1.5 s of reads against the writer; on a busy machine (a build beside
	 * it: 42 reads in 1.5 s once) on until 200 reads, for at most 20 s */
	uint64_t r0 = emp_now_ns(), end = r0 + 1500000000ull, hard_end = r0 + 20000000000ull;
	for (uint64_t now = r0; now < end || ((reads <= 200 || last_k <= 1000) && now < hard_end); now = emp_now_ns()) {
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
	{ "stats_disabled", t_disabled, 20 },
	{ "stats_debug_log", t_debug_log, 20 },
};
const struct emp_test_suite emp_suite_stats = { "stats", tests, sizeof(tests) / sizeof(tests[0]) };
