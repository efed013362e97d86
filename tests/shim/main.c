/* main.c: the shim's test list (tests/shim: linked with the shim's objects), run by the forking runner. */
#include "runner.h"

/* Every suite named here must exist: a missing or misspelled one fails the link. */
#define SUITES(X) X(fork) X(simwire) X(simwire_rt) X(hold) X(sendfile) X(signals) X(flags) X(timeq)
#define DECL(n) extern const struct emp_test_suite emp_suite_##n;
SUITES(DECL)

int main(int argc, char **argv)
{
	static struct emp_test all[256];
	int n = 0;
#define ADD(s) for (int i = 0; i < emp_suite_##s.n && n < 256; i++) all[n++] = emp_suite_##s.tests[i];
	SUITES(ADD)
	return emp_test_main(all, n, argc, argv);
}
