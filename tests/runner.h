/* runner.h: the test framework: a test list, a runner that forks each test with a timeout, and checks. */
#ifndef EMP_TEST_RUNNER_H
#define EMP_TEST_RUNNER_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>

struct emp_test {
	const char *name;
	void (*fn)(void);
	int timeout_s;          /* 0 = default (60 s) */
};

/* Fail the current test (it runs in a child process) with file:line. */
#define CHECK(cond) do { if (!(cond)) { \
	fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); exit(1); } } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); if (_a != _b) { \
	fprintf(stderr, "  FAIL %s:%d: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, #a, #b, _a, _b); \
	exit(1); } } while (0)
#define CHECK_MSG(cond, ...) do { if (!(cond)) { \
	fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

/* A suite: each tests/unit/test_*.c defines one (const struct emp_test_suite
 * emp_suite_NAME = { "NAME", list, count }) and main.c lists it. */
struct emp_test_suite {
	const char *name;
	const struct emp_test *tests;
	int n;
};

/* Runs the tests whose names contain argv[1] (all if none); prints
 * "N passed, N failed" and returns the exit status for main(). */
int emp_test_main(const struct emp_test *tests, int n, int argc, char **argv);

#endif
