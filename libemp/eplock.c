/* eplock.c: endpoint ids unique per network namespace: an exclusive lock held for the endpoint's life, random ids. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "sys.h"
#include "internal.h"

/*
 * Every AF_PACKET socket bound to the EMP EtherType in a network namespace
 * sees the frames of every endpoint there (the BPF filter only matches the
 * destination endpoint id), so two endpoints with one id in one namespace
 * answer each other's frames (STALE) and reset each other's sessions. The id
 * is therefore locked in the namespace the device belongs to: a socket bound
 * to the abstract UNIX address "\0emp.ep.<ethertype>.<id>". Abstract
 * addresses are per network namespace (a host-network container shares them,
 * as it shares the frames, whatever its mount namespace), the bind is
 * exclusive (EADDRINUSE), and the kernel releases it when the last fd goes,
 * also when the process is killed. No file, no privilege, nothing to clean.
 * (A forked child holds the parent's lock as it holds the parent's device
 * socket.)
 */

int emp__eplock(uint16_t ethertype, uint16_t id)
{
	struct sockaddr_un a;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "emp.ep.%04x.%u", ethertype, id);
	int fd = emp__sys_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (emp__sys_bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0) {
		int e = errno;
		emp__sys_close(fd);
		return -e;
	}
	return fd;
}

void emp__epunlock(int fd)
{
	if (fd >= 0)
		emp__sys_close(fd);
}

/* A random id for EMP_EP_AUTO, in [EMP_EP_AUTO_MIN, EMP_EP_AUTO_MAX]: the
 * ids below are left to programs that choose their own (servers). */
uint16_t emp__random_epid(void)
{
	uint16_t r = 0;
	while (getrandom(&r, sizeof(r), 0) != sizeof(r))
		;
	return (uint16_t)(EMP_EP_AUTO_MIN + r % (EMP_EP_AUTO_MAX - EMP_EP_AUTO_MIN + 1u));
}
