/* handoff.c: a short exit: after the exit flush a child sharing the process's memory releases its packet sockets (and the ring) once the process is gone, so the exit does not wait for the kernel's RCU grace periods (EMP_EXIT_HANDOFF=0: off). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "es.h"
#include "sys.h"

/* The kernel frees an AF_PACKET socket only after an RCU grace period
 * (synchronize_net in packet_release and in tearing down its ring: 10-20 ms
 * each here, several per engine), and a process is not reaped until its
 * memory and files are gone: a short-lived client would spend most of its
 * life exiting. At exit a child sharing our memory (the ring is mapped there
 * and holds its socket too) but with its own copy of the descriptor table
 * takes the last references: it closes every descriptor that is not a packet
 * socket at once (the application's sockets and pipes are not kept open),
 * waits for our exit (a pipe whose other end we close only then, after our
 * memory is let go), then releases the packet sockets and the memory. Only
 * system calls run in the child, on a stack of its own. */
static char handoff_stack[16384] __attribute__((aligned(64)));

struct linux_dirent64 {
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

static int handoff(void *arg)
{
	int wfd = (int)(intptr_t)arg;     /* read end: EOF once we are the last */
	char buf[2048];
	int keep[16], nkeep = 0;
	int dfd = (int)emp__syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		emp__syscall(SYS_exit, 0);
	for (;;) {
		long n = emp__syscall(SYS_getdents64, dfd, buf, sizeof buf);
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
			off += d->d_reclen;
			int fd = 0;
			const char *c = d->d_name;
			if (*c < '0' || *c > '9')
				continue;
			for (; *c >= '0' && *c <= '9'; c++)
				fd = fd * 10 + (*c - '0');
			if (fd == dfd || fd == wfd)
				continue;
			int dom = 0;
			socklen_t l = sizeof dom;
			if (nkeep < 16 && emp__syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 &&
			    dom == AF_PACKET)
				keep[nkeep++] = fd;
			else
				emp__syscall(SYS_close, fd);
		}
	}
	emp__syscall(SYS_close, dfd);
	while (emp__syscall(SYS_read, wfd, buf, 1) < 0 && errno == EINTR)
		;
	for (int i = 0; i < nkeep; i++)
		emp__syscall(SYS_close, keep[i]);
	emp__syscall(SYS_exit, 0);
	return 0;
}

void es__handoff_device(void)
{
	const char *e = getenv("EMP_EXIT_HANDOFF"), *pre = getenv("LD_PRELOAD");
	if ((e && e[0] == '0') || (pre && strstr(pre, "vgpreload")))
		return;          /* off, or under valgrind (which runs no clone of this kind) */
	emp__syscall(SYS_getpid);   /* libc's syscall() found now (sys.c), not in the child */
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	/* no signal to the parent when it ends: it is reaped by whoever
	 * inherits it (init or a subreaper) once we are gone; p[1] stays open
	 * here until the kernel closes our files, after our memory */
	if (clone(handoff, handoff_stack + sizeof handoff_stack, CLONE_VM, (void *)(intptr_t)p[0]) < 0)
		R_(close)(p[1]);
	R_(close)(p[0]);
}
