/* main.c: the unit suite's test list: every suite on the simulated wire, run by the forking runner. */
#include "runner.h"

/* Suites are weak so a build with some files missing still links. */
#define SUITES(X) X(conf) X(sim) X(engine) X(libemp) X(faults) X(stream) X(stats) X(peers)
#define DECL(n) extern const struct emp_test_suite emp_suite_##n __attribute__((weak));
SUITES(DECL)

int main(int argc, char **argv)
{
	static struct emp_test all[1024];
	int n = 0;
#define ADD(s) if (&emp_suite_##s) for (int i = 0; i < emp_suite_##s.n && n < 1024; i++) all[n++] = emp_suite_##s.tests[i];
	SUITES(ADD)
	return emp_test_main(all, n, argc, argv);
}
