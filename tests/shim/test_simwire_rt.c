/* test_simwire_rt.c: the shim on the simulated wire in real time: engines with progress threads, blocking calls, SO_LINGER, a peer that dies. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "simwire.h"

struct rt_flow { struct sw *w; int from; size_t total, done; int eof; };

static void *rt_writer(void *arg)
{
	struct rt_flow *f = arg;
	uint8_t b[65536];
	while (f->done < f->total) {
		size_t n = f->total - f->done < sizeof b ? f->total - f->done : sizeof b;
		for (size_t k = 0; k < n; k++)
			b[k] = sw_pat(f->done + k, f->from);
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
	for (size_t k = 0; k < sizeof b; k++)
		b[k] = sw_pat(k, 0);
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
	for (size_t k = 0; k < sizeof b; k++)
		b[k] = sw_pat(k, 0);
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

static const struct emp_test tests[] = {
	{ "shim_simrt_peer_died", t_simrt_peer_died, 20 },
	{ "shim_simrt_blocking", t_simrt_blocking, 30 },
	{ "shim_simrt_linger", t_simrt_linger, 30 },
};

const struct emp_test_suite emp_suite_simwire_rt = { "simwire_rt", tests, sizeof(tests) / sizeof(tests[0]) };
