/* test_ids.c: endpoint ids: the per-namespace lock (held for the endpoint's life, released by a kill), random ids. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "runner.h"
#include "harness.h"
#include "../../libemp/internal.h"

/* Endpoint ids: a lock per network namespace, held while the endpoint lives,
 * released when the process dies, whatever kills it. */
static void t_lock(void)
{
	uint16_t id = emp__random_epid();
	int fds[2];
	CHECK_EQ(pipe(fds), 0);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		int fd = emp__eplock(0x88b5, id);
		char ok = fd >= 0 ? 'y' : 'n';
		if (write(fds[1], &ok, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	char got = 0;
	CHECK_EQ(read(fds[0], &got, 1), 1);
	CHECK_EQ(got, 'y');
	CHECK_EQ(emp__eplock(0x88b5, id), -EADDRINUSE);  /* held by another process */
	int other = emp__eplock(0x88b6, id);             /* another EtherType: another id space */
	CHECK(other >= 0);
	emp__epunlock(other);
	kill(child, SIGKILL);
	int wst;
	CHECK_EQ(waitpid(child, &wst, 0), child);
	int fd = emp__eplock(0x88b5, id);                 /* released by the kill */
	CHECK(fd >= 0);
	CHECK_EQ(emp__eplock(0x88b5, id), -EADDRINUSE);  /* exclusive within one process too */
	emp__epunlock(fd);
	fd = emp__eplock(0x88b5, id);
	CHECK(fd >= 0);
	emp__epunlock(fd);
	close(fds[0]);
	close(fds[1]);
	/* random ids: in range, spread */
	int same = 0;
	uint16_t prev = emp__random_epid();
	for (int i = 0; i < 1000; i++) {
		uint16_t r = emp__random_epid();
		CHECK(r >= EMP_EP_AUTO_MIN && r <= EMP_EP_AUTO_MAX);
		same += r == prev;
		prev = r;
	}
	CHECK(same < 5);
}

/* EMP_EP_AUTO on the simulated wire: a random id in range (sim ports are
 * told apart by MAC, so no lock there). */
static void t_auto(void)
{
	struct harness h;
	h_init(&h, 1, NULL, NULL);
	struct emp_sim_wire *w;
	struct emp_sim_faults f = { .seed = 3 };
	CHECK_EQ(emp_sim_wire_create(&w, &f, NULL, NULL), 0);
	uint8_t mac[6] = { 2, 0, 0, 0, 8, 1 };
	emp_endpoint_t *a, *b;
	struct emp_open_opts o = { .conf = &h.conf, .driver = "sim", .endpoint = EMP_EP_AUTO, .wire = w,
				   .mac = mac, .no_progress_thread = 1 };
	CHECK_EQ(emp_open(&a, &o), 0);
	mac[5] = 2;
	CHECK_EQ(emp_open(&b, &o), 0);
	uint16_t ia = emp_endpoint_id(a), ib = emp_endpoint_id(b);
	CHECK(ia >= EMP_EP_AUTO_MIN && ia <= EMP_EP_AUTO_MAX && ib >= EMP_EP_AUTO_MIN && ib <= EMP_EP_AUTO_MAX);
	emp_close(a);
	emp_close(b);
	emp_sim_wire_destroy(w);
	h_free(&h);
}

static const struct emp_test tests[] = {
	{ "ids_lock", t_lock, 20 },
	{ "ids_auto", t_auto, 20 },
};
const struct emp_test_suite emp_suite_ids = { "ids", tests, sizeof(tests) / sizeof(tests[0]) };
