/* main.c: the unit suite's test list: every suite on the simulated wire, run by the forking runner. */
#include "runner.h"

/* Every suite named here must exist: a missing or misspelled one fails the
 * link, it never silently drops out of the run. */
#define SUITES(X) X(conf) X(sim) X(engine) X(libemp) X(faults) X(stream) X(stats) X(shm) X(ids) X(harden) X(peers) X(acks) X(auth) X(bulk) X(udp)
#define DECL(n) extern const struct emp_test_suite emp_suite_##n;
SUITES(DECL)

int main(int argc, char **argv)
{
	static struct emp_test all[1024];
	int n = 0;
#define ADD(s) for (int i = 0; i < emp_suite_##s.n && n < 1024; i++) all[n++] = emp_suite_##s.tests[i];
	SUITES(ADD)
	return emp_test_main(all, n, argc, argv);
}
