/* test_simwire_rt.c: the shim on the simulated wire in real time: engines with progress threads, blocking calls, SO_LINGER, a peer that dies. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "simwire.h"
#include "../../libemp/internal.h"

struct rt_flow { struct sw *w; int from; size_t total, done; int eof; };

static void *rt_writer(void *arg)
{
	struct rt_flow *f = arg;
	uint8_t b[65536];
	while (f->done < f->total) {
		size_t n = f->total - f->done < sizeof b ? f->total - f->done : sizeof b;
		sw_fill(b, n, f->done, f->from);
		ssize_t r = write(f->w->fd[f->from], b, n);
		CHECK_MSG(r > 0, "blocking write: %zd %s", r, strerror(errno));
		f->done += (size_t)r;
	}
	CHECK(shutdown(f->w->fd[f->from], SHUT_WR) == 0);
	return NULL;
}

/* blocking read until end of file; every byte checked */
static void rt_read(struct rt_flow *f)
{
	uint8_t b[50000];
	for (;;) {
		ssize_t r = read(f->w->fd[1 - f->from], b, sizeof b);
		CHECK_MSG(r >= 0, "blocking read after %zu bytes: %s", f->done, strerror(errno));
		if (r == 0)
			break;
		for (ssize_t k = 0; k < r; k++)
			CHECK_MSG(b[k] == sw_pat(f->done + (size_t)k, f->from), "byte %zu differs", f->done + (size_t)k);
		f->done += (size_t)r;
	}
	f->eof = 1;
}

static void *rt_reader(void *arg)
{
	rt_read(arg);
	return NULL;
}

/* Blocking reads and writes (es__wait: the waiter is woken by whichever
 * thread's completion hook saw its stream move) both ways at once, 1% loss:
 * 2 MB each way intact, then end of file */
static void t_simrt_blocking(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 3, .loss_ppm = 10000, .delay_ns = 2000 };
	sw_open_rt(&w, &fa, 8, 16384);
	struct rt_flow wf[2] = { { &w, 0, 2000000, 0, 0 }, { &w, 1, 2000000, 0, 0 } };
	struct rt_flow rf[2] = { { &w, 0, 0, 0, 0 }, { &w, 1, 0, 0, 0 } };
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, rt_writer, &wf[i]) == 0);
	pthread_t rd;
	CHECK(pthread_create(&rd, NULL, rt_reader, &rf[1]) == 0);
	rt_read(&rf[0]);
	pthread_join(rd, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(rf[0].done, 2000000);
	CHECK_EQ(rf[1].done, 2000000);
	struct emp_sim_stats st;
	emp_sim_wire_stats(w.h.wire, &st);
	CHECK(st.lost > 0);
}

static void *rt_reader_later(void *arg)
{
	usleep(50000);                   /* the writer is in close() by then */
	rt_read(arg);
	return NULL;
}

/* SO_LINGER with a timeout: close() returns once the data and FIN are
 * through (the peer's engine has every byte, though the last 4 KiB could
 * only go once its reader, 50 ms late, freed buffers); toward a
 * peer that does not read it gives up at the timeout, and the connection
 * lingers on: the peer then reads every byte written before the close, and 0 */
static void t_simrt_linger(void)
{
	uint8_t b[20000];
	sw_fill(b, sizeof b, 0, 0);
	for (int reads = 1; reads >= 0; reads--) {
		struct sw w;
		sw_open_rt(&w, NULL, 4, 4096);
		struct rt_flow f = { &w, 0, 0, 0, 0 };
		CHECK_EQ(write(w.fd[0], b, sizeof b), (ssize_t)sizeof b);   /* 16 KiB at the peer, 4 KiB staged */
		struct linger lg = { 1, reads ? 10 : 1 };
		CHECK(setsockopt(w.fd[0], SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
		pthread_t t;
		if (reads)
			CHECK(pthread_create(&t, NULL, rt_reader_later, &f) == 0);
		CHECK(close(w.fd[0]) == 0);
		uint64_t at_peer = h_ctr(&w.h, 1).bytes_received;   /* payload and stream headers */
		if (reads) {
			CHECK(at_peer >= sizeof b);
			pthread_join(t, NULL);
		} else {
			CHECK(at_peer < sizeof b);   /* the timeout: 4 KiB and the FIN could not go */
			CHECK_EQ(es__zombies_reap(), 1);
			rt_read(&f);
		}
		CHECK_EQ(f.done, sizeof b);
		for (int i = 0; i < 200 && es__zombies_reap(); i++)
			usleep(10000);
		CHECK_EQ(es__zombies_reap(), 0);
	}
}

/* The peer's process died: its kernel socket ends without an EMP FIN. The
 * survivor's poll is woken by the liveness set and names the error, read
 * hands out the data that had arrived, then ECONNRESET once, then end of file */
static void t_simrt_peer_died(void)
{
	struct sw w;
	sw_open_rt(&w, NULL, 4, 4096);
	uint8_t b[3000];
	sw_fill(b, sizeof b, 0, 0);
	CHECK_EQ(write(w.fd[0], b, sizeof b), 3000);
	CHECK(sw_poll(w.fd[1], POLLIN, 2000) & POLLIN);
	CHECK_EQ(sw_poll0(w.fd[1], POLLRDHUP), 0);   /* alive */
	CHECK(R_(close)(w.fd[0]) == 0);          /* side 0 gone, no FIN, its engine silent */
	short re = (short)sw_poll(w.fd[1], POLLRDHUP, 2000);
	CHECK_EQ(re & (POLLERR | POLLHUP | POLLRDHUP), POLLERR | POLLHUP | POLLRDHUP);
	size_t off = 0;
	CHECK_EQ(sw_read_some(&w, 1, &off, sizeof b), 3000);
	CHECK_EQ(read(w.fd[1], b, sizeof b), -1);
	CHECK_EQ(errno, ECONNRESET);
	CHECK_EQ(read(w.fd[1], b, sizeof b), 0);
	CHECK_EQ(send(w.fd[1], "x", 1, MSG_NOSIGNAL), -1);
	CHECK_EQ(errno, EPIPE);
}

/* the writer of t_simrt_direct: n messages of one slot each, then EOF */
struct dflow { struct sw *w; size_t total; unsigned usec; };

static void *d_writer(void *arg)
{
	struct dflow *f = arg;
	static uint8_t b[16384];
	for (size_t done = 0; done < f->total;) {
		size_t n = f->total - done < sizeof b ? f->total - done : sizeof b;
		sw_fill(b, n, done, 0);
		ssize_t r = write(f->w->fd[0], b, n);
		CHECK_MSG(r > 0, "blocking write: %zd %s", r, strerror(errno));
		done += (size_t)r;
		if (f->usec)
			usleep(f->usec);
	}
	CHECK(shutdown(f->w->fd[0], SHUT_WR) == 0);
	return NULL;
}

/* one read of the stream at *off in the given shape (0: one buffer of a
 * whole slot, 1: three vectors, 2: 3000 bytes, less than a message, 3:
 * MSG_WAITALL for two messages); bytes checked; 0 at end of file */
static ssize_t d_read(struct sw *w, size_t *off, int shape)
{
	static uint8_t b[40000];
	ssize_t r;
	if (shape == 1) {
		struct iovec v[3] = { { b, 5000 }, { b + 5000, 7000 }, { b + 12000, 4384 } };
		r = readv(w->fd[1], v, 3);
	} else {
		r = recv(w->fd[1], b, shape == 0 ? 16384 : shape == 2 ? 3000 : 32768, shape == 3 ? MSG_WAITALL : 0);
	}
	CHECK_MSG(r >= 0, "read after %zu bytes: %s", *off, strerror(errno));
	for (ssize_t k = 0; k < r; k++)
		CHECK_MSG(b[k] == sw_pat(*off + (size_t)k, 0), "byte %zu differs (shape %d)", *off + (size_t)k, shape);
	*off += (size_t)r;
	return r;
}

/* A reader that waits with nothing to read lends the next receive slot its
 * own buffers, and the message lands there (one copy instead of two): in
 * each shape of read (one buffer, vectors, a buffer shorter than the
 * message, whose rest is read from the slot, MSG_WAITALL), 1 MB arrives
 * intact and most messages went straight to the reader (rx_direct); a read
 * that times out while its buffers are lent gets them back, and the message
 * that comes later is read intact; with 2 % loss and a reader that wakes
 * every millisecond (SO_RCVTIMEO), a message caught arriving at the wake is
 * moved back to the slot, and every byte arrives */
static void t_simrt_direct(void)
{
	for (int shape = 0; shape < 4; shape++) {
		struct sw w;
		sw_open_rt(&w, NULL, 8, 16384);
		struct dflow f = { &w, 1000000, 300 };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, d_writer, &f) == 0);
		size_t off = 0;
		while (d_read(&w, &off, shape) > 0)
			;
		pthread_join(t, NULL);
		CHECK_EQ(off, f.total);
		uint64_t direct = h_ctr(&w.h, 1).rx_direct;
		CHECK_MSG(direct >= (shape == 3 ? 1u : 5u), "shape %d: %llu of 62 messages straight to the reader", shape,
			  (unsigned long long)direct);
	}
	/* a wait that times out with the buffers lent (after a long message:
	 * a reader lends only then), then the next message */
	struct sw w;
	sw_open_rt(&w, NULL, 8, 16384);
	struct timeval tv = { 0, 50000 };
	CHECK(setsockopt(w.fd[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
	uint8_t b[16384];
	sw_fill(b, sizeof b, 0, 0);
	CHECK_EQ(write(w.fd[0], b, sizeof b), (ssize_t)sizeof b);
	size_t off = 0;
	CHECK_EQ(d_read(&w, &off, 0), 16384);
	CHECK_EQ(read(w.fd[1], b, sizeof b), -1);
	CHECK_EQ(errno, EAGAIN);
	struct dflow f = { &w, 16384, 0 };
	pthread_t t;
	CHECK(pthread_create(&t, NULL, d_writer, &f) == 0);
	off = 0;
	while (d_read(&w, &off, 0) > 0)
		;
	pthread_join(t, NULL);
	CHECK_EQ(off, 16384);
	/* wakes in the middle of messages, under loss */
	struct emp_sim_faults fa = { .seed = 5, .loss_ppm = 20000, .delay_ns = 200000 };
	struct sw w2;
	sw_open_rt(&w2, &fa, 8, 16384);
	struct timeval tv2 = { 0, 1000 };
	CHECK(setsockopt(w2.fd[1], SOL_SOCKET, SO_RCVTIMEO, &tv2, sizeof tv2) == 0);
	struct dflow f2 = { &w2, 500000, 0 };
	CHECK(pthread_create(&t, NULL, d_writer, &f2) == 0);
	off = 0;
	for (int i = 0; i < 200000; i++) {
		static uint8_t c[16384];
		ssize_t r = read(w2.fd[1], c, sizeof c);
		if (r < 0) {
			CHECK_MSG(errno == EAGAIN, "read: %s", strerror(errno));
			continue;
		}
		if (r == 0)
			break;
		for (ssize_t k = 0; k < r; k++)
			CHECK_MSG(c[k] == sw_pat(off + (size_t)k, 0), "byte %zu differs under loss", off + (size_t)k);
		off += (size_t)r;
	}
	pthread_join(t, NULL);
	CHECK_EQ(off, 500000);
}

struct rt_poll { int fd, rc; short revents; };

static void *rt_poller(void *arg)
{
	struct rt_poll *p = arg;
	struct pollfd f = { p->fd, POLLIN, 0 };
	p->rc = poll(&f, 1, 3000);
	p->revents = f.revents;
	return NULL;
}

/* A thread asleep in poll for POLLIN is not woken by what it did not ask
 * for: the completion of a write on the same socket (its ack came back) only
 * made it look and sleep again, a wake-up per request for a client thread
 * that writes a request and polls for the reply (memcslap); the reply wakes
 * it. The poller sleeps without the device here (two holders are counted
 * for it, as when other threads sleep first), and this thread drives side
 * 0's engine: only the poller's eventfd can end its sleep. */
static void t_simrt_poll_wants(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 5, .delay_ns = 2000 };
	sw_open_rt(&w, &fa, 8, 16384);
	emp_endpoint_t *ep = w.h.ep[0];
	__atomic_add_fetch(&ep->dev_watchers, 2, __ATOMIC_SEQ_CST);
	struct rt_poll p = { w.fd[0], -9, 0 };
	pthread_t t;
	unsigned long sh0 = __atomic_load_n(&emp__shared_sleeps, __ATOMIC_RELAXED);
	CHECK(pthread_create(&t, NULL, rt_poller, &p) == 0);
	for (int i = 0; i < 1000 && __atomic_load_n(&emp__shared_sleeps, __ATOMIC_RELAXED) == sh0; i++)
		usleep(1000);
	CHECK_MSG(__atomic_load_n(&emp__shared_sleeps, __ATOMIC_RELAXED) > sh0, "the poller never slept");
	unsigned long w0 = __atomic_load_n(&es__wake_writes, __ATOMIC_RELAXED);
	uint8_t b[100];
	sw_fill(b, sizeof b, 0, 0);
	CHECK_EQ(write(w.fd[0], b, sizeof b), (ssize_t)sizeof b);
	int q = -1;
	for (int i = 0; i < 1000 && !(ioctl(w.fd[0], SIOCOUTQ, &q) == 0 && q == 0); i++) {
		emp_progress(ep);
		usleep(1000);
	}
	CHECK_MSG(q == 0, "the write was not acknowledged in 1 s (%d bytes out)", q);
	CHECK_EQ(__atomic_load_n(&p.rc, __ATOMIC_SEQ_CST), -9);   /* still asleep */
	CHECK_MSG(__atomic_load_n(&es__wake_writes, __ATOMIC_RELAXED) == w0,
		  "the write's completion woke the thread polling for POLLIN (%lu wakes)",
		  __atomic_load_n(&es__wake_writes, __ATOMIC_RELAXED) - w0);
	size_t off = 0;
	CHECK_EQ(sw_read_some(&w, 1, &off, sizeof b), sizeof b);
	sw_fill(b, sizeof b, 0, 1);
	CHECK_EQ(write(w.fd[1], b, sizeof b), (ssize_t)sizeof b);
	for (int i = 0; i < 1000 && __atomic_load_n(&p.rc, __ATOMIC_SEQ_CST) == -9; i++) {
		emp_progress(ep);
		usleep(1000);
	}
	pthread_join(t, NULL);
	CHECK_EQ(p.rc, 1);
	CHECK(p.revents & POLLIN);
	CHECK(__atomic_load_n(&es__wake_writes, __ATOMIC_RELAXED) > w0);   /* the reply's wake ended it */
	__atomic_sub_fetch(&ep->dev_watchers, 2, __ATOMIC_SEQ_CST);
	off = 0;
	CHECK_EQ(sw_read_some(&w, 0, &off, sizeof b), sizeof b);
}

struct rt_one { struct sw *w; int nfds, deferred, rc; };

/* poll for the request (on fd 0 alone, or beside a pipe), read it, answer,
 * then look at whether this thread now defers its posts */
static void *rt_one_server(void *arg)
{
	struct rt_one *o = arg;
	int p[2];
	CHECK(pipe(p) == 0);
	struct pollfd f[2] = { { o->w->fd[0], POLLIN, 0 }, { p[0], POLLIN, 0 } };
	o->rc = poll(f, (nfds_t)o->nfds, 2000);
	uint8_t b[64];
	CHECK_EQ(read(o->w->fd[0], b, sizeof b), 10);
	CHECK_EQ(write(o->w->fd[0], b, 10), 10);
	o->deferred = es__tl_defer;
	close(p[0]);
	close(p[1]);
	return NULL;
}

/* A thread that polls one descriptor waits for that connection (Apache's
 * workers, Python's sockets with a timeout); it may next block where the
 * shim does not look (Apache's worker hands the connection back and sleeps
 * on a condition variable), so its answer is not deferred to its next wait:
 * with it deferred, Apache answered when the progress thread's tick came,
 * 931 against 5846 requests/s over one connection. A poll of several
 * descriptors is an event loop's, whose answers leave together. */
static void t_simrt_poll_one_nodefer(void)
{
	struct sw w;
	struct emp_sim_faults fa = { .seed = 7, .delay_ns = 2000 };
	sw_open_rt(&w, &fa, 8, 16384);
	for (int nfds = 1; nfds <= 2; nfds++) {
		struct rt_one o = { &w, nfds, -1, -9 };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, rt_one_server, &o) == 0);
		usleep(20000);
		uint8_t b[10], r[10];
		sw_fill(b, sizeof b, 10 * (size_t)nfds, 1);
		CHECK_EQ(write(w.fd[1], b, sizeof b), (ssize_t)sizeof b);
		pthread_join(t, NULL);
		CHECK_EQ(o.rc, 1);
		CHECK_EQ(read(w.fd[1], r, sizeof r), (ssize_t)sizeof r);
		CHECK(!memcmp(r, b, sizeof b));
		CHECK_MSG(o.deferred == (nfds > 1), "a poll of %d descriptor(s): the thread %s its answers", nfds,
			  o.deferred ? "defers" : "does not defer");
	}
}

static const struct emp_test tests[] = {
	{ "shim_simrt_poll_one_nodefer", t_simrt_poll_one_nodefer, 20 },
	{ "shim_simrt_poll_wants", t_simrt_poll_wants, 20 },
	{ "shim_simrt_direct", t_simrt_direct, 60 },
	{ "shim_simrt_peer_died", t_simrt_peer_died, 20 },
	{ "shim_simrt_blocking", t_simrt_blocking, 30 },
	{ "shim_simrt_linger", t_simrt_linger, 30 },
};

const struct emp_test_suite emp_suite_simwire_rt = { "simwire_rt", tests, sizeof(tests) / sizeof(tests[0]) };
