/* afp_spare.c: raw sockets kept for a process that gives up root: opened before the drop (emp_keep_raw_sockets), taken by the AF_PACKET backend when it can no longer open its own. */
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_packet.h>

#include "afp_int.h"
#include "sys.h"

/*
 * AF_PACKET sockets need CAP_NET_RAW when they are made, not when they are
 * used: a server whose workers drop root (Apache; nginx with `user
 * www-data;`) opens its endpoint in the worker after the drop, at its first
 * connection, and could not. The sockets shim calls emp_keep_raw_sockets
 * just before a setuid that takes root away: a few unbound sockets
 * (protocol 0: they hear nothing) are opened then, and the backend takes
 * them one by one where its own socket() fails with EPERM. They belong to the
 * process that opened them: a forked child drops its copies (parent and child
 * would bind one socket twice) and opens its own, or none.
 */
#define SPARE_MAX 8

static pthread_mutex_t spare_mu = PTHREAD_MUTEX_INITIALIZER;
static int spare[SPARE_MAX], nspare;
static pid_t spare_pid;

static int raw_socket(void)
{
	return emp__sys_fd_high(emp__sys_socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
}

/* the stash of a process this one was forked from: not ours */
static void forget_inherited(void)
{
	if (nspare && spare_pid != getpid()) {
		for (int i = 0; i < nspare; i++)
			emp__sys_close(spare[i]);
		nspare = 0;
	}
}

int emp_keep_raw_sockets(int n)
{
	if (n > SPARE_MAX)
		n = SPARE_MAX;
	pthread_mutex_lock(&spare_mu);
	forget_inherited();
	spare_pid = getpid();
	int rc = 0;
	while (nspare < n) {
		int fd = raw_socket();
		if (fd < 0) {
			rc = -errno;
			break;
		}
		spare[nspare++] = fd;
	}
	int kept = nspare;
	pthread_mutex_unlock(&spare_mu);
	return kept ? kept : rc;
}

int emp__afp_socket(void)
{
	int fd = raw_socket();
	if (fd >= 0 || (errno != EPERM && errno != EACCES))
		return fd;
	int e = errno;
	pthread_mutex_lock(&spare_mu);
	forget_inherited();
	if (nspare)
		fd = spare[--nspare];
	pthread_mutex_unlock(&spare_mu);
	if (fd < 0)
		errno = e;
	return fd;
}
