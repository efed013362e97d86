/* runner.c: runs each test of a list in a forked child with a timeout and prints the summary line. */
#include "runner.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int run_one(const struct emp_test *t)
{
	int timeout = t->timeout_s ? t->timeout_s : 60;
	const char *scale = getenv("EMP_TEST_TIMEOUT_SCALE");
	if (scale && atoi(scale) > 1)
		timeout *= atoi(scale);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 0;
	}
	if (pid == 0) {
		alarm(timeout);
		t->fn();
		fflush(stdout);
		_exit(0);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 1;
	if (WIFSIGNALED(st))
		fprintf(stderr, "  %s: killed by signal %d%s\n", t->name, WTERMSIG(st),
			WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
	return 0;
}

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s [--list] [NAME | SUBSTRING]\n"
		"  no argument: every test; NAME: that test only (exact name);\n"
		"  SUBSTRING: every test whose name contains it; --list: the names, one a line\n", prog);
}

int emp_test_main(const struct emp_test *tests, int n, int argc, char **argv)
{
	const char *filter = argc > 1 ? argv[1] : NULL;
	int passed = 0, failed = 0, exact = 0;
	if (filter && (!strcmp(filter, "-h") || !strcmp(filter, "--help"))) {
		usage(argv[0]);
		return 0;
	}
	if (filter && !strcmp(filter, "--list")) {
		for (int i = 0; i < n; i++)
			printf("%s\n", tests[i].name);
		return 0;
	}
	for (int i = 0; filter && i < n; i++)
		exact |= !strcmp(tests[i].name, filter);
	for (int i = 0; i < n; i++) {
		if (filter && (exact ? strcmp(tests[i].name, filter) : !strstr(tests[i].name, filter)))
			continue;
		double t0 = now_s();
		int ok = run_one(&tests[i]);
		printf("%s %-48s %7.2fs\n", ok ? "ok  " : "FAIL", tests[i].name, now_s() - t0);
		fflush(stdout);
		if (ok)
			passed++;
		else
			failed++;
	}
	if (!passed && !failed)
		fprintf(stderr, "no test matches '%s' (--list shows the names)\n", filter ? filter : "");
	printf("%d passed, %d failed\n", passed, failed);
	return failed || (passed == 0) ? 1 : 0;
}
