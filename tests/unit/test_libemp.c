/* test_libemp.c: the host API with real threads and real time: progress thread, wait/wait-any/timeouts, hooks, open errors. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"
#include "fw_int.h"

struct pair {
	struct emp_sim_wire *wire;
	struct emp_conf conf;
	emp_endpoint_t *ep[2];
	uint8_t mac[2][6];
};

static uint64_t rclock(void *arg) { return emp_now_ns(); }

static void pair_open_q(struct pair *p, int progress_thread, unsigned queue_frames)
{
	struct emp_sim_faults f = { .seed = 3, .delay_ns = 2000, .queue_frames = queue_frames };
	memset(p, 0, sizeof(*p));
	CHECK(emp_sim_wire_create(&p->wire, &f, rclock, NULL) == 0);
	emp_conf_defaults(&p->conf);
	p->conf.npeers = 2;
	p->conf.peers = calloc(2, sizeof(*p->conf.peers));
	for (int i = 0; i < 2; i++) {
		uint8_t m[6] = { 2, 0, 0, 0, 1, (uint8_t)(i + 1) };
		memcpy(p->mac[i], m, 6);
		memcpy(p->conf.peers[i].mac, m, 6);
		snprintf(p->conf.peers[i].name, sizeof(p->conf.peers[i].name), "n%d", i);
		p->conf.peers[i].ip = (uint32_t)(0x0a000101 + i);
	}
	for (int i = 0; i < 2; i++) {
		struct emp_open_opts o = { .conf = &p->conf, .driver = "sim", .endpoint = 1, .wire = p->wire,
					   .mac = p->mac[i], .no_progress_thread = !progress_thread };
		int rc = emp_open(&p->ep[i], &o);
		CHECK_MSG(rc == 0, "emp_open: %d %s", rc, emp_last_error());
	}
}

static void pair_open(struct pair *p, int progress_thread) { pair_open_q(p, progress_thread, 0); }

static void pair_close(struct pair *p)
{
	emp_close(p->ep[0]);
	emp_close(p->ep[1]);
	emp_sim_wire_destroy(p->wire);
	emp_conf_free(&p->conf);
}

static emp_addr_t A(int h) { emp_addr_t a = { (uint16_t)h, 1 }; return a; }

/* The progress thread completes a transfer while the application sleeps. */
static void t_progress_thread(void)
{
	struct pair p;
	pair_open(&p, 1);
	char src[100000], dst[100000];
	h_fill(src, sizeof(src), 9);
	struct iovec si = { src, sizeof(src) }, di = { dst, sizeof(dst) };
	emp_req_t *r, *s;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 1, &di, 1, &r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 1, &si, 1, &s), 0);
	for (int i = 0; i < 200 && (__atomic_load_n(&r->stat, __ATOMIC_ACQUIRE) != EMP_DS_DONE ||
				    __atomic_load_n(&s->stat, __ATOMIC_ACQUIRE) != EMP_DS_DONE); i++)
		usleep(5000);
	/* nobody called into libemp: only the progress threads can have done this */
	CHECK_EQ(r->stat, EMP_DS_DONE);
	CHECK_EQ(s->stat, EMP_DS_DONE);
	struct emp_status st;
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(st.result, (long long)sizeof(src));
	CHECK(h_check(dst, sizeof(dst), 9));
	CHECK_EQ(emp_test(p.ep[0], s, &st), 1);
	pair_close(&p);
}

/* ---- sleeps that share the device (emp_wait_for's share_device) ---- */

struct sharer {
	emp_endpoint_t *ep;
	emp_req_t *r;
	int efd;
	int held;                  /* a sleep of it held the device */
	int slept;                 /* sleeps */
	int rc;
	char buf[3000];
};

static int sh_done(void *arg)
{
	struct sharer *t = arg;
	return __atomic_load_n(&t->r->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

static int sh_sleep(void *arg, int64_t ns)
{
	struct sharer *t = arg;
	int dev = emp_wait_device();
	struct pollfd p[2] = { { t->efd, POLLIN, 0 }, { dev ? emp_wait_fd(t->ep) : -1, POLLIN, 0 } };
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };
	__atomic_store_n(&t->held, t->held | dev, __ATOMIC_RELAXED);
	__atomic_add_fetch(&t->slept, 1, __ATOMIC_RELAXED);
	ppoll(p, 2, ns < 0 ? NULL : &ts, NULL);
	uint64_t v;
	if (p[0].revents && read(t->efd, &v, sizeof v) < 0)
		v = 0;
	return 0;
}

static void *sh_thread(void *arg)
{
	struct sharer *t = arg;
	struct emp_waitfor w = { .done = sh_done, .sleep = sh_sleep, .arg = t, .timeout_ns = 5000000000ll,
				 .share_device = 1 };
	t->rc = emp_wait_for(t->ep, &w);
	return NULL;
}

/* the targeted wake: the completion hook writes the owner's eventfd, as the
 * sockets shim's does (whichever thread took the frame) */
static void sh_hook(void *arg, emp_req_t *const *reqs, int n)
{
	(void)arg;
	uint64_t one = 1;
	for (int i = 0; i < n; i++) {
		struct sharer *t = emp_req_user(reqs[i]);
		if (t && write(t->efd, &one, sizeof one) < 0)
			continue;
	}
}

static int sh_until(int *v, int want, int ms)
{
	for (int i = 0; i < ms && __atomic_load_n(v, __ATOMIC_SEQ_CST) != want; i++)
		usleep(1000);
	return __atomic_load_n(v, __ATOMIC_SEQ_CST) == want;
}

/* Four threads asleep for messages of their own: the first two hold the
 * device, the other two sleep on their own fds only (one frame wakes at most
 * two threads, not all); when both holders have had theirs and left, the
 * progress thread is called in and watches the device for the two still
 * asleep, whose messages arrive (with the sleepers counted as watching, as
 * before, they stayed asleep until their 5 s timeout). */
static void t_wait_share_device(void)
{
	struct pair p;
	pair_open(&p, 1);
	emp_endpoint_t *ep = p.ep[1];
	ep->spin_ns = 0;           /* straight to sleep */
	ep->gather_ns = 0;
	emp_set_completion_hook(ep, sh_hook, NULL);
	static struct sharer t[4];
	pthread_t th[4];
	unsigned long sh0 = __atomic_load_n(&emp__shared_sleeps, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++) {
		memset(&t[i], 0, sizeof t[i]);
		t[i].ep = ep;
		t[i].efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		CHECK(t[i].efd >= 0);
		struct iovec v = { t[i].buf, sizeof t[i].buf };
		CHECK_EQ(emp_post_recv(ep, A(0), 40 + (uint32_t)i, &v, 1, &t[i].r), 0);
		emp_req_set_user(t[i].r, &t[i]);
	}
	for (int i = 0; i < 4; i++) {
		CHECK(pthread_create(&th[i], NULL, sh_thread, &t[i]) == 0);
		CHECK_MSG(sh_until(&ep->dev_sleepers, i + 1, 2000), "thread %d not asleep (%d sleepers)", i,
			  __atomic_load_n(&ep->dev_sleepers, __ATOMIC_SEQ_CST));
	}
	CHECK_EQ(__atomic_load_n(&ep->dev_watchers, __ATOMIC_SEQ_CST), 2);
	CHECK(t[0].held && t[1].held && !t[2].held && !t[3].held);
	CHECK(__atomic_load_n(&emp__shared_sleeps, __ATOMIC_RELAXED) - sh0 >= 2);
	char src[4][3000];
	emp_req_t *s[4];
	struct emp_status st;
	unsigned long cv0 = __atomic_load_n(&emp__covers, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++) {
		h_fill(src[i], sizeof src[i], 50 + i);
		struct iovec v = { src[i], sizeof src[i] };
		CHECK_EQ(emp_post_send(p.ep[0], A(1), 40 + (uint32_t)i, &v, 1, &s[i]), 0);
		CHECK_MSG(emp_wait(p.ep[0], s[i], &st, 2000000000ll) == 1,
			  "message %d not taken in 2 s: nobody watched the receiver's device", i);
		if (i == 1) {
			/* both holders have theirs: gone, the others still asleep */
			pthread_join(th[0], NULL);
			pthread_join(th[1], NULL);
			CHECK(sh_until(&ep->dev_sleepers, 2, 2000));
			CHECK_EQ(__atomic_load_n(&ep->dev_watchers, __ATOMIC_SEQ_CST), 0);
			CHECK_MSG(__atomic_load_n(&emp__covers, __ATOMIC_RELAXED) > cv0,
				  "the last holder left two sleepers without calling the progress thread in");
			usleep(50000);
		}
	}
	for (int i = 2; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		CHECK_MSG(t[i].rc == 1, "thread %d: emp_wait_for %d (its message did not come)", i, t[i].rc);
		CHECK_EQ(emp_test(ep, t[i].r, &st), 1);
		CHECK_EQ(st.result, (long long)sizeof src[i]);
		CHECK(h_check(t[i].buf, sizeof t[i].buf, 50 + i));
		close(t[i].efd);
	}
	CHECK_EQ(__atomic_load_n(&ep->dev_sleepers, __ATOMIC_SEQ_CST), 0);
	CHECK_EQ(__atomic_load_n(&ep->dev_watchers, __ATOMIC_SEQ_CST), 0);
	pair_close(&p);
}

static double cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Frames wait on the device while another thread holds the engine (on a busy
 * machine: preempted inside it). The progress thread must not spin on the
 * readable device meanwhile (it would burn the CPU the holder needs); once
 * the engine is let go the frames are taken and the message arrives intact. */
static void t_progress_engine_held(void)
{
	struct pair p;
	pair_open(&p, 1);
	char src[20000], dst[20000];
	h_fill(src, sizeof(src), 4);
	struct iovec si = { src, sizeof(src) }, di = { dst, sizeof(dst) };
	emp_req_t *r, *s;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 2, &di, 1, &r), 0);
	usleep(20000);                         /* nobody has looked for a while: the device is the progress thread's */
	pthread_mutex_lock(&p.ep[1]->eng_lock);
	double c0 = cpu_ms();
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 2, &si, 1, &s), 0);
	usleep(300000);
	double used = cpu_ms() - c0;
	CHECK_EQ(__atomic_load_n(&r->stat, __ATOMIC_ACQUIRE), EMP_DS_POSTED);
	pthread_mutex_unlock(&p.ep[1]->eng_lock);
	/* a thread spinning on the device used 80 ms of CPU here; one that backs off 4 */
	CHECK_MSG(used < 40.0, "%.1f ms of CPU in 300 ms while the engine was held", used);
	for (int i = 0; i < 400 && (__atomic_load_n(&r->stat, __ATOMIC_ACQUIRE) != EMP_DS_DONE ||
				    __atomic_load_n(&s->stat, __ATOMIC_ACQUIRE) != EMP_DS_DONE); i++)
		usleep(5000);
	struct emp_status st;
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(st.result, (long long)sizeof(src));
	CHECK(h_check(dst, sizeof(dst), 4));
	CHECK_EQ(emp_test(p.ep[0], s, &st), 1);
	pair_close(&p);
}

static int drive_both(struct pair *p, emp_req_t *x, emp_req_t *y);

/* the counters as a line (what the shim logs at exit): the numbers moved,
 * and a drop shows under its reason */
static void t_counters_line(void)
{
	struct pair p;
	pair_open(&p, 0);
	char line[1024], b[16] = "counted";
	CHECK(emp_counters_line(p.ep[0], line, sizeof line) > 0);
	CHECK_MSG(strstr(line, "msgs sent 0 received 0") && strstr(line, "drops none"), "%s", line);
	struct iovec v = { b, sizeof(b) };
	emp_req_t *r, *s;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 3, &v, 1, &r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 3, &v, 1, &s), 0);
	CHECK(drive_both(&p, r, s));
	CHECK_EQ(emp_test(p.ep[0], s, &st), 1);
	CHECK(emp_counters_line(p.ep[0], line, sizeof line) > 0);
	CHECK_MSG(strstr(line, "msgs sent 1 received 0"), "%s", line);
	CHECK(emp_counters_line(p.ep[1], line, sizeof line) > 0);
	CHECK_MSG(strstr(line, "received 1"), "%s", line);
	/* a small buffer is cut, not overrun */
	char small[12];
	memset(small, 'x', sizeof small);
	CHECK_EQ(emp_counters_line(p.ep[0], small, 8), 7);
	CHECK_EQ(small[7], 0);
	CHECK_EQ(small[8], 'x');
	CHECK_EQ(emp_counters_line(p.ep[0], NULL, 0), -EINVAL);
	pair_close(&p);
}

static void t_wait_timeout(void)
{
	struct pair p;
	pair_open(&p, 1);
	char b[8];
	struct iovec di = { b, sizeof(b) };
	emp_req_t *r;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 1, &di, 1, &r), 0);
	uint64_t t0 = emp_now_ns();
	CHECK_EQ(emp_wait(p.ep[1], r, &st, 30000000), 0);          /* 30 ms, nothing comes */
	uint64_t el = emp_now_ns() - t0;
	CHECK_MSG(el >= 30000000 && el < 1000000000, "waited %llu ns", (unsigned long long)el);
	CHECK_EQ(emp_cancel(p.ep[1], r), 0);
	CHECK_EQ(emp_wait(p.ep[1], r, &st, -1), 1);
	CHECK_EQ(st.result, -ECANCELED);
	pair_close(&p);
}

/* the completion hook: every completed request, once, with its user pointer */
static int hook_seen[4];
static char hook_bufs[4][64];
static void hook(void *arg, emp_req_t *const *reqs, int n)
{
	(void)arg;
	for (int i = 0; i < n; i++) {
		char *u = emp_req_user(reqs[i]);
		if (u >= hook_bufs[0] && u <= hook_bufs[3])
			__atomic_add_fetch(&hook_seen[(u - hook_bufs[0]) / 64], 1, __ATOMIC_RELAXED);
	}
}

static void t_wait_any_and_hook(void)
{
	struct pair p;
	pair_open(&p, 1);
	emp_set_completion_hook(p.ep[1], hook, NULL);
	char (*b)[64] = hook_bufs, s[64] = "third";
	emp_req_t *r[4], *sr;
	struct emp_status st;
	for (int i = 0; i < 4; i++) {
		struct iovec di = { b[i], 64 };
		CHECK_EQ(emp_recv_init(p.ep[1], A(0), (uint32_t)(10 + i), &di, 1, &r[i]), 0);
		emp_req_set_user(r[i], b[i]);
		CHECK_EQ(emp_start(p.ep[1], r[i]), 0);
	}
	struct iovec si = { s, 6 };
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 12, &si, 1, &sr), 0);
	int k = emp_wait_any(p.ep[1], r, 4, &st, 2000000000);
	CHECK_EQ(k, 2);
	CHECK_EQ(st.tag, 12);
	CHECK(!strcmp(b[2], "third"));
	/* the hook ran for exactly the request that completed */
	CHECK_EQ(__atomic_load_n(&hook_seen[2], __ATOMIC_RELAXED), 1);
	CHECK_EQ(hook_seen[0] + hook_seen[1] + hook_seen[3], 0);
	CHECK_EQ(emp_wait(p.ep[0], sr, &st, 2000000000), 1);
	for (int i = 0; i < 4; i++)
		if (i != 2)
			CHECK_EQ(emp_cancel(p.ep[1], r[i]), 0);
	/* cancellations are completions too: each once */
	for (int i = 0; i < 4; i++)
		CHECK_EQ(__atomic_load_n(&hook_seen[i], __ATOMIC_RELAXED), 1);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(emp_req_free(p.ep[1], r[i]), 0);
	pair_close(&p);
}

/* Threads ping-pong on their own tags over one endpoint pair at once. */
struct pp { struct pair *p; int side; uint32_t tag; int n; int ok; };

static void *pp_thread(void *arg)
{
	struct pp *t = arg;
	emp_endpoint_t *ep = t->p->ep[t->side];
	emp_addr_t peer = A(!t->side);
	uint32_t v = 0, got;
	for (int i = 0; i < t->n; i++) {
		struct iovec ri = { &got, 4 }, si = { &v, 4 };
		emp_req_t *r, *s;
		struct emp_status st;
		if (emp_post_recv(ep, peer, t->tag, &ri, 1, &r))
			return NULL;
		if (t->side == 0 || i > 0) {
			v = (uint32_t)i * 2 + (uint32_t)t->side;
			if (emp_post_send(ep, peer, t->tag, &si, 1, &s) || emp_wait(ep, s, &st, 5000000000) != 1)
				return NULL;
		}
		if (emp_wait(ep, r, &st, 5000000000) != 1 || st.result != 4)
			return NULL;
		if (t->side == 1 && i == 0) {
			v = 1;
			if (emp_post_send(ep, peer, t->tag, &si, 1, &s) || emp_wait(ep, s, &st, 5000000000) != 1)
				return NULL;
		}
	}
	t->ok = 1;
	return NULL;
}

static void t_threads(void)
{
	struct pair p;
	pair_open(&p, 1);
	struct pp t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		t[i] = (struct pp){ &p, i & 1, (uint32_t)(100 + i / 2), 300, 0 };
		pthread_create(&th[i], NULL, pp_thread, &t[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++)
		CHECK_MSG(t[i].ok, "thread %d", i);
	pair_close(&p);
}

static void t_open_errors(void)
{
	emp_endpoint_t *ep;
	struct emp_open_opts o = { .conf_path = "/nonexistent/emp.conf", .driver = "sim" };
	CHECK_EQ(emp_open(&ep, &o), -ENOENT);
	CHECK(strstr(emp_last_error(), "/nonexistent/emp.conf"));
	struct emp_conf c;
	emp_conf_defaults(&c);
	struct emp_open_opts o2 = { .conf = &c, .driver = "bogus" };
	CHECK_EQ(emp_open(&ep, &o2), -EINVAL);
	CHECK(strstr(emp_last_error(), "bogus"));
	/* bad arguments come back as -EINVAL, not crashes */
	struct pair p;
	pair_open(&p, 0);
	emp_req_t *r;
	char b[4];
	struct iovec io = { b, 4 };
	emp_addr_t nohost = { 77, 1 };
	CHECK_EQ(emp_post_send(p.ep[0], nohost, 1, &io, 1, &r), -EINVAL);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), EMP_ANY_TAG, &io, 1, &r), -EINVAL);
	CHECK_EQ(emp_post_recv(p.ep[0], A(1), 1, &io, -1, &r), -EINVAL);
	CHECK_EQ(emp_test(p.ep[0], (emp_req_t *)b, NULL), -EINVAL);
	pair_close(&p);
}

/* Every descriptor in use: the next post says so, and works again once one is reaped. */
static void t_descriptor_exhaustion(void)
{
	struct pair p;
	pair_open(&p, 0);
	uint32_t n = p.ep[1]->ndesc;
	emp_req_t **rs = calloc(n, sizeof(*rs));
	char b[4];
	struct iovec io = { b, 4 };
	for (uint32_t i = 0; i < n; i++)
		CHECK_EQ(emp_post_recv(p.ep[1], A(0), 1, &io, 1, &rs[i]), 0);
	emp_req_t *extra;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 1, &io, 1, &extra), -ENOBUFS);
	CHECK_EQ(emp_cancel(p.ep[1], rs[0]), 0);
	struct emp_status st;
	CHECK_EQ(emp_test(p.ep[1], rs[0], &st), 1);
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 1, &io, 1, &extra), 0);
	free(rs);
	pair_close(&p);
}

/* ---- emp_wait_for: nothing slips between the last look and the sleep ---- */

struct lastlook {
	struct pair *p;
	emp_req_t *r;
	int flag, armed, slept;
	int mode;                 /* 0: a frame arrives as the thread arms; 1: a completion lands */
};

static int ll_done(void *arg)
{
	struct lastlook *a = arg;
	return a->mode ? __atomic_load_n(&a->flag, __ATOMIC_ACQUIRE)
		       : __atomic_load_n(&a->r->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}

static void ll_arm(void *arg)
{
	struct lastlook *a = arg;
	if (a->armed++)
		return;
	if (a->mode) {
		/* as another thread would: it completes our condition a moment
		 * before we armed, so it saw nobody asleep and wrote no fd */
		__atomic_store_n(&a->flag, 1, __ATOMIC_RELEASE);
		return;
	}
	/* the peer's message reaches our device now: after our last look at
	 * the ring, before the sleep */
	static char m[32] = "between look and sleep";
	struct iovec si = { m, sizeof(m) };
	emp_req_t *s;
	CHECK_EQ(emp_post_send(a->p->ep[0], A(1), 7, &si, 1, &s), 0);
	for (int i = 0; i < 20; i++) {
		emp_progress(a->p->ep[0]);
		usleep(200);
	}
}

/* the kernel wait: a frame already on the device (or a completion that wrote
 * no fd) would leave it asleep; it must not be reached */
static int ll_sleep(void *arg, int64_t ns)
{
	struct lastlook *a = arg;
	a->slept++;
	usleep(1000);
	return 0;
}

static int drive_both(struct pair *p, emp_req_t *x, emp_req_t *y)
{
	for (int i = 0; i < 2000; i++) {
		emp_progress(p->ep[0]);
		emp_progress(p->ep[1]);
		if (x->stat == EMP_DS_DONE && y->stat == EMP_DS_DONE)
			return 1;
		usleep(100);
	}
	return 0;
}

/* a first message each way of the pair's session (hello done), so that
 * the next one is a single data frame; its acks taken */
static void pair_warm(struct pair *p)
{
	static char b[64], w[8] = "warm";
	struct iovec di = { b, sizeof(b) }, wi = { w, sizeof(w) };
	emp_req_t *r, *s;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(p->ep[1], A(0), 6, &di, 1, &r), 0);
	CHECK_EQ(emp_post_send(p->ep[0], A(1), 6, &wi, 1, &s), 0);
	CHECK(drive_both(p, r, s));
	CHECK_EQ(emp_test(p->ep[1], r, &st), 1);
	CHECK_EQ(emp_test(p->ep[0], s, &st), 1);
	for (int i = 0; i < 20; i++) {        /* the ack: nothing held */
		emp_progress(p->ep[0]);
		emp_progress(p->ep[1]);
		usleep(200);
	}
}

static void t_wait_for_last_look(void)
{
	struct pair p;
	pair_open(&p, 0);                 /* no progress thread: only this thread drives */
	p.ep[1]->spin_ns = 0;             /* no spin: straight to arm, last look, sleep */
	char b[64];
	struct iovec di = { b, sizeof(b) };
	emp_req_t *r;
	struct emp_status st;
	pair_warm(&p);                    /* the session is up first (hello), so the message is one data frame */
	for (int mode = 0; mode < 2; mode++) {
		CHECK_EQ(emp_post_recv(p.ep[1], A(0), 7, &di, 1, &r), 0);
		struct lastlook a = { .p = &p, .r = r, .mode = mode };
		struct emp_waitfor wf = { .done = ll_done, .arm = ll_arm, .sleep = ll_sleep, .arg = &a,
					  .timeout_ns = 2000000000 };
		int rc = emp_wait_for(p.ep[1], &wf);
		CHECK_MSG(rc == 1 && a.armed == 1 && a.slept == 0, "mode %d: emp_wait_for %d, armed %d, slept %d",
			  mode, rc, a.armed, a.slept);
		if (mode == 0) {
			CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
			CHECK(!strcmp(b, "between look and sleep"));
		} else {
			CHECK_EQ(emp_cancel(p.ep[1], r), 0);
			CHECK_EQ(emp_wait(p.ep[1], r, &st, 1000000000), 1);
		}
	}
	for (int i = 0; i < 50; i++) {        /* the sends' acks */
		emp_progress(p.ep[0]);
		emp_progress(p.ep[1]);
		usleep(100);
	}
	pair_close(&p);
}

/* ---- emp_wait_for: a sleep that the engine's holder ended ---- */

/* Frames are on the device but another thread holds the engine lock (it is
 * taking them). The device fd stays readable until it has, so a waiter that
 * slept again after its failed look would return at once, again and again:
 * pgbench -j 2's two threads made 3.1-4.4 ppoll calls per transaction that
 * way. The waiter waits for the holder instead (up to EMP__HOLDER_WAIT_NS
 * each time), then looks itself. */
struct held { struct emp_endpoint *ep; atomic_int locked; int ms; };
static void *hold_engine(void *arg)
{
	struct held *h = arg;
	pthread_mutex_lock(&h->ep->eng_lock);
	atomic_store(&h->locked, 1);
	usleep(h->ms * 1000);
	pthread_mutex_unlock(&h->ep->eng_lock);
	return NULL;
}
struct hw { struct emp_endpoint *ep; emp_req_t *r; int sleeps; };
static int hw_done(void *arg)
{
	struct hw *a = arg;
	return __atomic_load_n(&a->r->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}
static int hw_sleep(void *arg, int64_t ns)
{
	struct hw *a = arg;
	a->sleeps++;
	struct pollfd pf = { emp_wait_fd(a->ep), POLLIN, 0 };
	int ms = ns < 0 || ns > 1000000000 ? 1000 : (int)(ns / 1000000);
	return poll(&pf, 1, ms) < 0 ? -errno : 0;   /* the device only: no event of the caller's */
}

static void t_wait_for_holder(void)
{
	struct pair p;
	pair_open(&p, 0);                 /* no progress thread */
	p.ep[1]->spin_ns = 0;             /* no spin: straight to the sleep */
	char b[64], w[8] = "warm", m[24] = "taken after the holder";
	struct iovec di = { b, sizeof(b) }, wi = { w, sizeof(w) }, mi = { m, sizeof(m) };
	emp_req_t *r, *s;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 6, &di, 1, &r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 6, &wi, 1, &s), 0);
	CHECK(drive_both(&p, r, s));      /* the session is up: the message is one data frame */
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(emp_test(p.ep[0], s, &st), 1);
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 7, &di, 1, &r), 0);
	struct held h = { .ep = p.ep[1], .ms = 40 };
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, hold_engine, &h), 0);
	while (!atomic_load(&h.locked))
		usleep(100);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 7, &mi, 1, &s), 0);
	struct pollfd pf = { emp_wait_fd(p.ep[1]), POLLIN, 0 };
	for (int i = 0; i < 200 && poll(&pf, 1, 0) == 0; i++) {
		emp_progress(p.ep[0]);
		usleep(100);
	}
	CHECK_MSG(pf.revents & POLLIN, "the frame never reached the device");
	unsigned long lw0 = __atomic_load_n(&emp__lock_waits, __ATOMIC_RELAXED);
	struct hw a = { .ep = p.ep[1], .r = r };
	struct emp_waitfor wf = { .done = hw_done, .sleep = hw_sleep, .arg = &a, .timeout_ns = 2000000000 };
	int rc = emp_wait_for(p.ep[1], &wf);
	unsigned long lw = __atomic_load_n(&emp__lock_waits, __ATOMIC_RELAXED) - lw0;
	pthread_join(th, NULL);
	/* each sleep that the readable device ends at once is followed by a
	 * wait for the holder of up to EMP__HOLDER_WAIT_NS: about 40 ms / 0.5 ms
	 * sleeps in all (53-68 measured; 57027 without the wait) */
	int most = 2 * (int)(40000000 / EMP__HOLDER_WAIT_NS) + 2;
	CHECK_MSG(rc == 1 && a.sleeps <= most && lw >= 1, "emp_wait_for %d, %d sleeps (at most %d), %lu waits for the holder",
		  rc, a.sleeps, most, lw);
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK(st.result == (int64_t)sizeof(m) && !memcmp(b, m, sizeof(m)));
	for (int i = 0; i < 50; i++) {        /* the send's ack */
		emp_progress(p.ep[0]);
		emp_progress(p.ep[1]);
		usleep(100);
	}
	CHECK_EQ(emp_test(p.ep[0], s, &st), 1);
	pair_close(&p);
}

/* More runnable threads than CPUs: a waiter sleeps at once instead of
 * spinning (wait.c crowded): done() is never asked from inside a spin */
struct crowd { atomic_int stop; };
static void *hog(void *arg)
{
	struct crowd *c = arg;
	while (!atomic_load_explicit(&c->stop, memory_order_relaxed))
		;
	return NULL;
}
static int cr_calls, cr_spun;
static int cr_done(void *arg)
{
	struct emp_endpoint *ep = arg;
	cr_calls++;
	cr_spun += __atomic_load_n(&ep->spinners, __ATOMIC_SEQ_CST) > 0;   /* asked from inside a spin */
	return 0;
}
static int cr_sleep(void *arg, int64_t ns) { (void)arg; (void)ns; usleep(500); return 0; }

static int running_now(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	int r = 0, t = 0;
	double a, b, c;
	if (f && fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &r, &t) != 5)
		r = 0;
	if (f)
		fclose(f);
	return r;
}

static void t_wait_crowded(void)
{
	struct pair p;
	pair_open(&p, 0);
	p.ep[1]->spin_ns = 2000000;       /* 2 ms of spin if it spun */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	enum { MAXH = 64 };
	int nh = (int)(2 * ncpu + 2 < MAXH ? 2 * ncpu + 2 : MAXH);
	pthread_t th[MAXH];
	struct crowd c = { 0 };
	for (int i = 0; i < nh; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, hog, &c), 0);
	usleep(30000);                    /* the last look at the count is older than 10 ms */
	int running = running_now();
	CHECK_MSG(running > ncpu + 1, "%d hogs: %d threads running on %ld CPUs", nh, running, ncpu);
	cr_calls = cr_spun = 0;
	struct emp_waitfor wf = { .done = cr_done, .sleep = cr_sleep, .arg = p.ep[1], .timeout_ns = 3000000 };
	int rc = emp_wait_for(p.ep[1], &wf);
	atomic_store(&c.stop, 1);
	for (int i = 0; i < nh; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(rc, 0);
	CHECK_MSG(cr_calls > 0 && cr_spun == 0, "crowded: done() asked %d times, %d of them from a spin", cr_calls, cr_spun);
	pair_close(&p);
}

/* the fds open on /proc/loadavg: how many, and the last one in *fd */
static int loadavg_fds(int *fd)
{
	int n = 0;
	*fd = -1;
	for (int i = 0; i < 1024; i++) {
		char p[64], l[64];
		snprintf(p, sizeof p, "/proc/self/fd/%d", i);
		ssize_t k = readlink(p, l, sizeof l - 1);
		if (k > 0) {
			l[k] = 0;
			if (!strcmp(l, "/proc/loadavg")) {
				n++;
				*fd = i;
			}
		}
	}
	return n;
}

/* The crowd looks (wait.c) keep /proc/loadavg open above the program's
 * numbers and read it again, one fd for all looks; a program that closes
 * that number and reuses it keeps its file untouched: the next look gives
 * the number up and opens the file again. */
static void t_loadavg_fd(void)
{
	int a, b;
	usleep(11000);                    /* looks are at most every 10 ms */
	emp__crowded();
	CHECK_EQ(loadavg_fds(&a), 1);
	CHECK(a >= 256);
	for (int i = 0; i < 3; i++) {
		usleep(11000);
		emp__crowded();
		CHECK_EQ(loadavg_fds(&b), 1);
		CHECK_EQ(b, a);
	}
	int pp[2];
	CHECK_EQ(pipe(pp), 0);
	CHECK_EQ(write(pp[1], "x", 1), 1);
	CHECK_EQ(dup2(pp[0], a), a);      /* the program closed it and took the number */
	usleep(11000);
	emp__crowded();
	CHECK_EQ(loadavg_fds(&b), 1);
	CHECK(b >= 0 && b != a);
	char c = 0;
	CHECK_EQ(read(a, &c, 1), 1);      /* the program's pipe: open, its byte still there */
	CHECK_EQ(c, 'x');
	close(a);
	close(pp[0]);
	close(pp[1]);
}

/* A spinner's yield interval (emp__yield_next): quiet yields double it up to
 * EMP__YIELD_MAX_NS; a yield that found a taker starts again at
 * EMP__YIELD_NS and, for EMP__YIELD_BUSY_NS after it, the interval grows only
 * to EMP__YIELD_FULL_NS, as it does while every CPU is taken (an interval
 * already longer falls to it at the next yield) */
static void t_yield_interval(void)
{
	struct emp__yield y = { EMP__YIELD_NS, 0 };
	uint64_t t = 1000000000ull, v = 0;
	for (int i = 0; i < 20; i++)
		v = emp__yield_next(&y, 0, 0, t += 1000);
	CHECK_EQ(v, EMP__YIELD_MAX_NS);
	CHECK_EQ(emp__yield_next(&y, 1, 0, t += 1000), EMP__YIELD_NS);   /* a taker */
	for (int i = 0; i < 20; i++)
		v = emp__yield_next(&y, 0, 0, t += 10000);
	CHECK_EQ(v, EMP__YIELD_FULL_NS);                                   /* 200 us later: still capped */
	t += EMP__YIELD_BUSY_NS;
	for (int i = 0; i < 20; i++)
		v = emp__yield_next(&y, 0, 0, t += 1000);
	CHECK_EQ(v, EMP__YIELD_MAX_NS);                                    /* the taker is long gone */
	CHECK_EQ(emp__yield_next(&y, 0, 1, t += 1000), EMP__YIELD_FULL_NS); /* every CPU taken */
	CHECK_EQ(emp__yield_next(&y, 0, 0, t += 1000), 2 * EMP__YIELD_FULL_NS);
	CHECK(EMP__YIELD_FULL_NS < EMP__YIELD_MAX_NS);
}

/* A device whose look is a system call (EMP_DRV_SYSLOOK: udp, each look a
 * recvmmsg), here the sim wire with a counted look and a due flag standing
 * for the driver's rx_pending: a post's drive right after a look leaves the
 * device alone (a server over udp looked again in the repost of its receive
 * and in the send of its reply, 1.7 of 7.4 calls per message), one when a
 * look is due takes what waits; a wait looks either way. */
static int sl_due;
static unsigned sl_looks;
static int sl_pending(void *priv) { (void)priv; return sl_due; }
static int sl_rx_burst(void *priv, struct emp_rxframe *f, unsigned max)
{
	sl_looks++;
	return emp__sim_ops.rx_burst(priv, f, max);
}

static void t_syslook_post(void)
{
	static struct emp_driver_ops ops;
	static struct harness h;
	sl_due = 1;                  /* a look is due, except around the post under test */
	ops = emp__sim_ops;
	ops.flags |= EMP_DRV_SYSLOOK;
	ops.rx_pending = sl_pending;
	ops.rx_burst = sl_rx_burst;
	h_init(&h, 2, NULL, NULL);
	h_xfer(&h, 0, 1, 100, 1, 1, 60 * 1000000000ull);       /* sessions up both ways */
	h_xfer(&h, 1, 0, 100, 1, 2, 60 * 1000000000ull);
	h.ep[1]->ops = &ops;
	h.ep[1]->fw->ops = &ops;            /* the engine looks through its own pointer */
	uint8_t in[64], out[64] = { 1, 2, 3 }, back[64];
	struct iovec vi = { in, 64 }, vo = { out, 64 }, vb = { back, 64 };
	emp_req_t *q, *s0, *s1, *s2, *b1, *b2;
	struct emp_status st;
	CHECK_EQ(emp_post_recv(h.ep[1], h_addr(0), 7, &vi, 1, &q), 0);
	CHECK_EQ(emp_post_recv(h.ep[0], h_addr(1), 8, &vb, 1, &b1), 0);
	h_run(&h, NULL, NULL, 1000000);
	CHECK_EQ(emp_post_send(h.ep[0], h_addr(1), 7, &vo, 1, &s0), 0);
	/* its post sent it: h0's frame waits on h1's wire */
	sl_due = 0;
	unsigned l0 = sl_looks;
	CHECK_EQ(emp_post_send(h.ep[1], h_addr(0), 8, &vo, 1, &s1), 0);
	CHECK_MSG(sl_looks == l0, "a post's drive with no look due looked %u times", sl_looks - l0);
	CHECK(!h_req_done(q));
	sl_due = 1;
	CHECK_EQ(emp_post_recv(h.ep[0], h_addr(1), 8, &vb, 1, &b2), 0);
	CHECK_EQ(emp_post_send(h.ep[1], h_addr(0), 8, &vo, 1, &s2), 0);
	CHECK_MSG(sl_looks > l0, "a post's drive with a look due did not look");
	CHECK(h_req_done(q));
	CHECK(h_wait(&h, 1, q, &st, 1000000));
	CHECK_EQ(st.result, 64);
	CHECK(!memcmp(in, out, 64));
	CHECK(h_wait(&h, 0, b1, &st, 10000000));
	CHECK(h_wait(&h, 0, b2, &st, 10000000));
	CHECK(h_wait(&h, 0, s0, &st, 10000000));
	CHECK(h_wait(&h, 1, s1, &st, 10000000));
	CHECK(h_wait(&h, 1, s2, &st, 10000000));
	h.ep[1]->ops = &emp__sim_ops;
	h.ep[1]->fw->ops = &emp__sim_ops;
	h_free(&h);
}

/* The same device in a wait: the drive after arming makes no look when one
 * was made just now (the sleep's fd is level-triggered: a frame that came
 * since ends the sleep at once; a server over udp paid a recvmmsg there per
 * message), and looks when one is due (a frame that came as the thread
 * armed is taken without a sleep). */
struct slw {
	struct pair *p;
	emp_req_t *r;
	int mode;                 /* 0: no look due at arm, the frame comes during the sleep; 1: a look due, the frame comes at arm */
	unsigned at_arm, between;
	int slept;
};
static int slw_done(void *arg)
{
	return __atomic_load_n(&((struct slw *)arg)->r->stat, __ATOMIC_ACQUIRE) == EMP_DS_DONE;
}
static void slw_send(struct pair *p)
{
	static char m[32] = "came as the thread waited";
	struct iovec si = { m, sizeof(m) };
	emp_req_t *s;
	CHECK_EQ(emp_post_send(p->ep[0], A(1), 9, &si, 1, &s), 0);
	for (int i = 0; i < 20; i++) {
		emp_progress(p->ep[0]);
		usleep(200);
	}
}
static void slw_arm(void *arg)
{
	struct slw *a = arg;
	a->at_arm = sl_looks;
	if (a->mode == 0)
		sl_due = 0;               /* a look was made just now */
	else
		slw_send(a->p);
}
static int slw_sleep(void *arg, int64_t ns)
{
	struct slw *a = arg;
	(void)ns;
	if (a->slept++ == 0) {
		a->between = sl_looks - a->at_arm;
		sl_due = 1;
		if (a->mode == 0)
			slw_send(a->p);
	}
	usleep(1000);
	return 0;
}

static void t_syslook_wait(void)
{
	static struct emp_driver_ops ops;
	struct pair p;
	pair_open(&p, 0);                 /* no progress thread: only this thread drives */
	p.ep[1]->spin_ns = 0;             /* no spin: straight to arm, the drive after it, sleep */
	ops = *p.ep[1]->ops;
	ops.flags |= EMP_DRV_SYSLOOK;
	ops.rx_pending = sl_pending;
	ops.rx_burst = sl_rx_burst;
	char b[64];
	struct iovec di = { b, sizeof(b) };
	emp_req_t *r;
	struct emp_status st;
	pair_warm(&p);
	const struct emp_driver_ops *orig = p.ep[1]->ops;
	p.ep[1]->ops = &ops;
	p.ep[1]->fw->ops = &ops;              /* the engine looks through its own pointer */
	for (int mode = 0; mode < 2; mode++) {
		memset(b, 0, sizeof(b));
		sl_due = 1;
		CHECK_EQ(emp_post_recv(p.ep[1], A(0), 9, &di, 1, &r), 0);
		struct slw a = { .p = &p, .r = r, .mode = mode };
		struct emp_waitfor wf = { .done = slw_done, .arm = slw_arm, .sleep = slw_sleep, .arg = &a,
					  .timeout_ns = 2000000000 };
		int rc = emp_wait_for(p.ep[1], &wf);
		CHECK_MSG(rc == 1, "mode %d: emp_wait_for %d", mode, rc);
		CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
		CHECK_EQ(st.result, 32);
		CHECK(!strcmp(b, "came as the thread waited"));
		if (mode == 0)
			CHECK_MSG(a.slept >= 1 && a.between == 0,
				  "no look due: slept %d, looked %u times between arming and the sleep", a.slept, a.between);
		else
			CHECK_MSG(a.slept == 0, "a look due: the frame that came at arm was not taken (slept %d)", a.slept);
	}
	sl_due = 1;
	for (int i = 0; i < 50; i++) {        /* the sends' acks */
		emp_progress(p.ep[0]);
		emp_progress(p.ep[1]);
		usleep(100);
	}
	p.ep[1]->ops = orig;
	p.ep[1]->fw->ops = orig;
	pair_close(&p);
}

/* emp_progress_due after a long drive: a stream's write posts a message whose
 * flush through the kernel takes about 100 us on veth (90 frames); the
 * write's (or the next write's) due drive then found the engine last driven
 * over EMP__DUE_NS ago and drove again, a second flush per write for the acks
 * that came meanwhile (the next post takes them). The drive's end counts as a
 * drive: right after it nothing is due; EMP__DUE_NS later, with frames
 * pending, it is. */
static int (*ld_tx)(void *, const struct emp_txframe *, unsigned);
static int ld_slow_tx(void *priv, const struct emp_txframe *f, unsigned n)
{
	usleep(2 * EMP__DUE_NS / 1000);
	return ld_tx(priv, f, n);
}

static void t_due_after_long_drive(void)
{
	static struct emp_driver_ops ops;
	struct pair p;
	pair_open(&p, 0);                 /* no progress thread: only this thread drives */
	char b[64], w[8] = "warm";
	struct iovec di = { b, sizeof(b) }, wi = { w, sizeof(w) };
	emp_req_t *r, *s;
	pair_warm(&p);                        /* the session is up */
	const struct emp_driver_ops *orig = p.ep[0]->ops;
	ops = *orig;
	ld_tx = orig->tx_burst;
	ops.tx_burst = ld_slow_tx;            /* every flush takes 2 x EMP__DUE_NS */
	ops.rx_burst = sl_rx_burst;           /* looks counted (sl_looks) */
	ops.rx_pending = sl_pending;
	sl_due = 1;                           /* frames always seem to wait */
	sl_looks = 0;
	p.ep[0]->ops = &ops;
	p.ep[0]->fw->ops = &ops;
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 7, &di, 1, &r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 7, &wi, 1, &s), 0);   /* its drive flushes: slow */
	unsigned l0 = sl_looks;
	CHECK(l0 > 0);
	CHECK_EQ(emp_progress_due(p.ep[0]), 0);
	CHECK_MSG(sl_looks == l0, "right after a long drive, a due drive looked %u times", sl_looks - l0);
	usleep(2 * EMP__DUE_NS / 1000);
	emp_progress_due(p.ep[0]);
	CHECK_MSG(sl_looks > l0, "EMP__DUE_NS after the drive, with frames pending, no due drive");
	p.ep[0]->ops = orig;
	p.ep[0]->fw->ops = orig;
	struct emp_status st;
	CHECK(drive_both(&p, r, s));
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(st.result, 8);
	for (int i = 0; i < 50; i++) {        /* the sends' acks */
		emp_progress(p.ep[0]);
		emp_progress(p.ep[1]);
		usleep(100);
	}
	pair_close(&p);
}


/* ---- frames left in the device until read (firmware/lent.c) ---- */

#define LENT_MSG 100000

static void lent_fill(uint8_t *b, size_t n, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 7; x ^= x << 17;
		b[i] = (uint8_t)x;
	}
}

/* a persistent receive that lends, started */
static emp_req_t *lent_recv(struct pair *p, uint8_t *buf, size_t len, uint32_t tag)
{
	emp_req_t *r;
	struct iovec v = { buf, len };
	CHECK_EQ(emp_recv_init(p->ep[1], A(0), tag, &v, 1, &r), 0);
	CHECK_EQ(emp_recv_lend(p->ep[1], r, (unsigned)(len / 1024 + 2)), 0);
	CHECK_EQ(emp_start(p->ep[1], r), 0);
	return r;
}

static struct emp_counters lent_ctr(emp_endpoint_t *ep)
{
	struct emp_counters c;
	CHECK_EQ(emp_get_counters(ep, &c), 0);
	return c;
}

/* A message's frames after the first stay in the device: its buffer does
 * not get their bytes, the reader copies them out in pieces of any size,
 * and every frame goes back (80 messages through one receive on a queue of
 * 4096 frames: a frame kept would run it out, and the message would not
 * complete). */
static void t_lent_read(void)
{
	struct pair p;
	pair_open(&p, 0);
	pair_warm(&p);
	static uint8_t src[LENT_MSG], buf[LENT_MSG], out[LENT_MSG];
	emp_req_t *r = NULL, *s;
	struct emp_status st;
	struct iovec sv = { src, sizeof(src) };
	for (unsigned m = 0; m < 80; m++) {
		lent_fill(src, sizeof(src), m + 1);
		memset(buf, 0, sizeof(buf));
		memset(out, 0xee, sizeof(out));
		if (!r)
			r = lent_recv(&p, buf, sizeof(buf), 7);
		else
			CHECK_EQ(emp_start(p.ep[1], r), 0);   /* what is still lent goes back here (odd m) */
		CHECK_EQ(emp_post_send(p.ep[0], A(1), 7, &sv, 1, &s), 0);
		CHECK_MSG(drive_both(&p, r, s), "message %u did not complete", m);
		CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
		CHECK_EQ(st.result, LENT_MSG);
		emp_test(p.ep[0], s, &st);
		unsigned lent = emp_recv_lent(r);
		CHECK_MSG(lent >= LENT_MSG / 1500 - 2, "message %u: %u frames lent", m, lent);
		CHECK_MSG(buf[3000] == 0 && buf[LENT_MSG / 2] == 0 && buf[LENT_MSG - 1] == 0,
			  "message %u: a lent frame's bytes were copied into the buffer", m);
		CHECK_MSG(memcmp(buf, src, 1000) == 0, "message %u: the first frame is copied", m);
		size_t cut[] = { 0, 777, 1460, 50001, LENT_MSG - 3, LENT_MSG };
		for (int k = 0; k + 1 < 6; k++) {
			emp_recv_copy(p.ep[1], r, cut[k], out + cut[k], cut[k + 1] - cut[k]);
			if (!(m & 1))
				emp_recv_return(p.ep[1], r, cut[k + 1]);
		}
		CHECK_MSG(memcmp(out, src, sizeof(src)) == 0, "message %u: bytes read differ", m);
		if (!(m & 1))
			CHECK_EQ(emp_recv_lent(r), 0u);
		else
			CHECK_EQ(emp_recv_lent(r), lent);
	}
	/* a message under EMP_LEND_MIN_BYTES is copied whole */
	struct iovec sv2 = { src, 10000 };
	CHECK_EQ(emp_start(p.ep[1], r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 7, &sv2, 1, &s), 0);
	CHECK(drive_both(&p, r, s));
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(st.result, 10000);
	CHECK_EQ(emp_recv_lent(r), 0u);
	CHECK(memcmp(buf, src, 10000) == 0);
	emp_test(p.ep[0], s, &st);
	struct emp_counters c = lent_ctr(p.ep[1]);
	CHECK_MSG(c.rx_lent >= 80 * (LENT_MSG / 1500 - 2) && c.lent_placed == 0, "lent %llu placed %llu",
		  (unsigned long long)c.rx_lent, (unsigned long long)c.lent_placed);
	emp_req_free(p.ep[1], r);
	pair_close(&p);
}

/* Nobody reads: once the device is short of room (a quarter of its 256
 * frames), the oldest receive's frames are copied into its buffer and go
 * back; every message completes and reads back whole. Receives freed with
 * frames lent give them back too (4 more messages, none placed). */
static void t_lent_urgent(void)
{
	struct pair p;
	pair_open_q(&p, 0, 256);
	pair_warm(&p);
	enum { N = 4 };
	static uint8_t src[N][LENT_MSG], buf[N][LENT_MSG], out[LENT_MSG];
	emp_req_t *r[N], *s[N];
	struct emp_status st;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			lent_fill(src[i], LENT_MSG, (unsigned)(round * N + i + 100));
			memset(buf[i], 0, LENT_MSG);
			r[i] = lent_recv(&p, buf[i], LENT_MSG, (uint32_t)(20 + i));
		}
		uint64_t placed0 = lent_ctr(p.ep[1]).lent_placed;
		for (int i = 0; i < N; i++) {
			struct iovec sv = { src[i], LENT_MSG };
			CHECK_EQ(emp_post_send(p.ep[0], A(1), (uint32_t)(20 + i), &sv, 1, &s[i]), 0);
			CHECK_MSG(drive_both(&p, r[i], s[i]), "round %d message %d did not complete", round, i);
		}
		uint64_t placed = lent_ctr(p.ep[1]).lent_placed - placed0;
		if (round == 0)
			CHECK_MSG(placed >= LENT_MSG / 1500 - 2 && emp_recv_lent(r[0]) == 0 && buf[0][3000] == src[0][3000],
				  "the first receive's frames placed: %llu, %u still lent",
				  (unsigned long long)placed, emp_recv_lent(r[0]));
		for (int i = 0; i < N; i++) {
			CHECK_EQ(emp_test(p.ep[1], r[i], &st), 1);
			CHECK_EQ(st.result, LENT_MSG);
			emp_test(p.ep[0], s[i], &st);
			memset(out, 0, sizeof(out));
			emp_recv_copy(p.ep[1], r[i], 0, out, LENT_MSG);
			CHECK_MSG(memcmp(out, src[i], LENT_MSG) == 0, "round %d message %d differs", round, i);
		}
		CHECK_MSG(emp_recv_lent(r[N - 1]) > 0, "the last receive kept its frames");
		for (int i = 0; i < N; i++)
			CHECK_EQ(emp_req_free(p.ep[1], r[i]), 0);       /* lent frames go back */
	}
	pair_close(&p);
}

/* A device that fails (its interface gone: ENXIO) is tried again by the
 * retransmission timers, not at once: a waiter sleeps meanwhile (a process
 * exiting after its namespace went spun on it for its whole 2 s flush,
 * taking both CPUs), and the message goes once the device works again. */
static void t_tx_device_gone(void)
{
	struct pair p;
	pair_open(&p, 0);
	pair_warm(&p);
	static char src[3000], dst[3000];
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (char)(i * 13);
	struct iovec sv = { src, sizeof(src) }, dv = { dst, sizeof(dst) };
	emp_req_t *r, *s;
	struct emp_status st;
	struct emp_sim_faults f = { .seed = 3, .delay_ns = 2000, .tx_error = ENXIO };
	emp_sim_wire_set_faults(p.wire, &f);
	struct emp_sim_stats a, b;
	emp_sim_wire_stats(p.wire, &a);
	CHECK_EQ(emp_post_recv(p.ep[1], A(0), 9, &dv, 1, &r), 0);
	CHECK_EQ(emp_post_send(p.ep[0], A(1), 9, &sv, 1, &s), 0);
	CHECK_EQ(emp_wait(p.ep[0], s, &st, 50 * 1000000ll), 0);     /* 50 ms: not sent */
	emp_sim_wire_stats(p.wire, &b);
	CHECK_MSG(b.bursts - a.bursts <= 100, "%llu tries of the failed device in 50 ms",
		  (unsigned long long)(b.bursts - a.bursts));
	CHECK_MSG(b.bursts - a.bursts >= 2, "the failed device was not tried again");
	f.tx_error = 0;
	emp_sim_wire_set_faults(p.wire, &f);
	CHECK(drive_both(&p, r, s));
	CHECK_EQ(emp_test(p.ep[1], r, &st), 1);
	CHECK_EQ(st.result, (int64_t)sizeof(src));
	CHECK(memcmp(src, dst, sizeof(src)) == 0);
	pair_close(&p);
}

static const struct emp_test tests[] = {
	{ "libemp_syslook_post", t_syslook_post, 20 },
	{ "libemp_syslook_wait", t_syslook_wait, 20 },
	{ "libemp_due_after_long_drive", t_due_after_long_drive, 20 },
	{ "libemp_tx_device_gone", t_tx_device_gone, 20 },
	{ "libemp_lent_read", t_lent_read, 30 },
	{ "libemp_lent_urgent", t_lent_urgent, 30 },
	{ "libemp_wait_crowded", t_wait_crowded, 20 },
	{ "libemp_yield_interval", t_yield_interval, 20 },
	{ "libemp_loadavg_fd", t_loadavg_fd, 20 },
	{ "libemp_wait_for_last_look", t_wait_for_last_look, 20 },
	{ "libemp_wait_for_holder", t_wait_for_holder, 20 },
	{ "libemp_progress_thread", t_progress_thread, 20 },
	{ "libemp_progress_engine_held", t_progress_engine_held, 20 },
	{ "libemp_wait_share_device", t_wait_share_device, 20 },
	{ "libemp_counters_line", t_counters_line, 20 },
	{ "libemp_wait_timeout_cancel", t_wait_timeout, 20 },
	{ "libemp_wait_any_hook", t_wait_any_and_hook, 20 },
	{ "libemp_threads", t_threads, 60 },
	{ "libemp_open_errors", t_open_errors, 20 },
	{ "libemp_descriptor_exhaustion", t_descriptor_exhaustion, 20 },
};
const struct emp_test_suite emp_suite_libemp = { "libemp", tests, sizeof(tests) / sizeof(tests[0]) };
