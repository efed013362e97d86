/* emp-run.c: runs a program with libempsock.so preloaded: emp-run [--conf FILE] [--strict] PROGRAM ARGS... */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr, "usage: emp-run [--conf FILE] [--strict] [--debug] PROGRAM [ARGS...]\n"
			"  runs PROGRAM with its TCP connections to the cluster peers of the EMP\n"
			"  config ($EMP_CONF, else /etc/emp/emp.conf) carried over EMP.\n"
			"  --strict: a connection to a peer that cannot use EMP fails (EMP_STRICT=1)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
			char abs[PATH_MAX];
			const char *c = argv[++i];
			if (realpath(c, abs))
				c = abs;
			setenv("EMP_CONF", c, 1);
		} else if (!strncmp(argv[i], "--conf=", 7)) {
			setenv("EMP_CONF", argv[i] + 7, 1);
		} else if (!strcmp(argv[i], "--strict")) {
			setenv("EMP_STRICT", "1", 1);
		} else if (!strcmp(argv[i], "--debug")) {
			setenv("EMP_SOCK_DEBUG", "1", 1);
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage();
		} else {
			fprintf(stderr, "emp-run: unknown option %s\n", argv[i]);
			usage();
		}
	}
	if (i >= argc)
		usage();
	char lib[PATH_MAX], self[PATH_MAX];
	const char *env = getenv("EMP_SOCK_LIB");
	if (env && *env) {
		snprintf(lib, sizeof lib, "%s", env);
	} else {
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n < 0) {
			perror("emp-run: /proc/self/exe");
			return 127;
		}
		self[n] = 0;
		snprintf(lib, sizeof lib, "%s/../lib/libempsock.so", dirname(self));
		char r[PATH_MAX];
		if (realpath(lib, r))
			snprintf(lib, sizeof lib, "%s", r);
	}
	if (access(lib, R_OK) != 0) {
		fprintf(stderr, "emp-run: %s: %s\n", lib, strerror(errno));
		return 127;
	}
	const char *old = getenv("LD_PRELOAD");
	if (old && *old && !strstr(old, lib)) {
		size_t n = strlen(lib) + strlen(old) + 2;
		char *v = malloc(n);
		snprintf(v, n, "%s:%s", lib, old);
		setenv("LD_PRELOAD", v, 1);
	} else if (!old || !*old) {
		setenv("LD_PRELOAD", lib, 1);
	}
	execvp(argv[i], argv + i);
	fprintf(stderr, "emp-run: %s: %s\n", argv[i], strerror(errno));
	return 127;
}
