/* exect.c: EMP connections across new programs: a client that writes, then execs / spawns / exits / is killed; a server that reads late and says how the stream ended. */
/*
 *   exect server PORT FLAG      accept one; first byte; wait until FLAG exists;
 *                               read to the end: "eof N" or "error ERRNO N"
 *   exect client HOST PORT A HOW B RESULT
 *                               write A bytes, then HOW: execve execv execvp
 *                               execvpe execl execlp execle fexecve execveat
 *                               (become "exect child FD B RESULT"), spawn
 *                               spawnp system popen (run it beside, wait for
 *                               it, close, exit), spawn-dup2 (the child gets it
 *                               by a file action, as fd 10), exit (_exit),
 *                               kill (SIGKILL)
 *   exect child FD B RESULT     write B bytes to FD: "ACCEPTED ERRNO" in RESULT
 * The p-forms find "exect" on $PATH.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#define SOCKLIB_PROG "exect"
#include "socklib.h"

extern char **environ;

static int server(int port, const char *flag)
{
	int l = listener(port), s = accept(l, NULL, NULL);
	char b, buf[65536];
	if (s < 0 || recv(s, &b, 1, MSG_PEEK) != 1)
		die("accept / first byte");
	while (access(flag, F_OK) != 0)
		usleep(10000);
	long long n = 0;
	ssize_t r;
	while ((r = read(s, buf, sizeof buf)) > 0)
		n += r;
	if (r < 0)
		printf("error %d %lld\n", errno, n);
	else
		printf("eof %lld\n", n);
	return 0;
}

static int child(int fd, long long total, const char *result)
{
	signal(SIGPIPE, SIG_IGN);
	static char buf[65536];
	long long n = 0;
	int e = 0;
	while (n < total) {
		size_t k = total - n < (long long)sizeof buf ? (size_t)(total - n) : sizeof buf;
		ssize_t r = write(fd, buf, k);
		if (r <= 0) {
			e = errno;
			break;
		}
		n += r;
	}
	FILE *f = fopen(result, "w");
	if (!f)
		die("result");
	fprintf(f, "%lld %d\n", n, e);
	fclose(f);
	return 0;
}

static int client(const char *host, int port, long long a, const char *how, const char *b,
		  const char *result)
{
	int s = dial(host, port);
	static char buf[65536];
	for (long long n = 0; n < a;) {
		size_t k = a - n < (long long)sizeof buf ? (size_t)(a - n) : sizeof buf;
		if (write_all(s, buf, k) < 0)
			die("client write");
		n += k;
	}
	char fds[16], cmd[8400], self[4096];
	snprintf(fds, sizeof fds, "%d", s);
	ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sl < 0)
		die("readlink");
	self[sl] = 0;
	char *av[] = { "exect", "child", fds, (char *)b, (char *)result, NULL };
	if (!strcmp(how, "exit"))
		_exit(0);
	if (!strcmp(how, "kill"))
		raise(SIGKILL);
	if (!strcmp(how, "execve")) execve(self, av, environ);
	else if (!strcmp(how, "execv")) execv(self, av);
	else if (!strcmp(how, "execvp")) execvp("exect", av);
	else if (!strcmp(how, "execvpe")) execvpe("exect", av, environ);
	else if (!strcmp(how, "execl")) execl(self, "exect", "child", fds, b, result, (char *)NULL);
	else if (!strcmp(how, "execlp")) execlp("exect", "exect", "child", fds, b, result, (char *)NULL);
	else if (!strcmp(how, "execle")) execle(self, "exect", "child", fds, b, result, (char *)NULL, environ);
	else if (!strcmp(how, "fexecve")) {
		int x = open(self, O_RDONLY | O_CLOEXEC);
		fexecve(x, av, environ);
	} else if (!strcmp(how, "execveat")) {
		execveat(AT_FDCWD, self, av, environ, 0);
	} else {
		pid_t pid = -1;
		int st = 0;
		snprintf(cmd, sizeof cmd, "'%s' child %s %s '%s'", self, fds, b, result);
		if (!strcmp(how, "spawn-dup2")) {   /* the child gets it as fd 10: not seen by the shim */
			posix_spawn_file_actions_t fa;
			posix_spawn_file_actions_init(&fa);
			posix_spawn_file_actions_adddup2(&fa, s, 10);
			av[2] = "10";
			int r = posix_spawn(&pid, self, &fa, NULL, av, environ);
			if (r)
				errno = r, die("posix_spawn");
			if (waitpid(pid, &st, 0) < 0)
				die("waitpid");
		} else if (!strcmp(how, "spawn") || !strcmp(how, "spawnp")) {
			int r = how[5] ? posix_spawnp(&pid, "exect", NULL, NULL, av, environ)
				       : posix_spawn(&pid, self, NULL, NULL, av, environ);
			if (r)
				errno = r, die("posix_spawn");
			if (waitpid(pid, &st, 0) < 0)
				die("waitpid");
		} else if (!strcmp(how, "system")) {
			st = system(cmd);
		} else if (!strcmp(how, "popen")) {
			FILE *f = popen(cmd, "r");
			if (!f)
				die("popen");
			st = pclose(f);
		} else {
			fprintf(stderr, "exect: unknown HOW %s\n", how);
			return 2;
		}
		if (st != 0)
			fprintf(stderr, "exect: child status %d\n", st);
		close(s);
		return 0;
	}
	die(how);
	return 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]), argv[3]);
	if (argc == 5 && !strcmp(argv[1], "child"))
		return child(atoi(argv[2]), atoll(argv[3]), argv[4]);
	if (argc == 8 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), atoll(argv[4]), argv[5], argv[6], argv[7]);
	fprintf(stderr, "usage: exect server PORT FLAG | client HOST PORT A HOW B RESULT | child FD B RESULT\n");
	return 2;
}
