/* route.c: finding the interface toward the cluster: the own config line, a local address, or the kernel's route. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "sys.h"
#include "internal.h"

/* Name of the interface holding IPv4 address ip (network order). */
static int ifname_of_ip(uint32_t ip, char *out, size_t outlen)
{
	struct ifaddrs *ifa, *i;
	int found = 0;
	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (i = ifa; i && !found; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if (((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == ip) {
			snprintf(out, outlen, "%s", i->ifa_name);
			found = 1;
		}
	}
	freeifaddrs(ifa);
	return found ? 0 : -ENOENT;
}

/* Local address the kernel would use toward ip (no packet is sent). */
static int route_src(uint32_t ip, uint32_t *src)
{
	int s = emp__sys_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = ip };
	socklen_t len = sizeof(a);
	int rc = emp__sys_connect(s, (struct sockaddr *)&a, sizeof(a));
	if (rc == 0)
		rc = getsockname(s, (struct sockaddr *)&a, &len);
	emp__sys_close(s);
	if (rc < 0)
		return -errno;
	*src = a.sin_addr.s_addr;
	return 0;
}

int emp__resolve_ifname(const struct emp_conf *c, char *out, size_t outlen)
{
	char tmp[IF_NAMESIZE + 1];
	/* 1. a config line whose IP is ours */
	for (int i = 0; i < c->npeers; i++) {
		if (ifname_of_ip(c->peers[i].ip, tmp, sizeof(tmp)) == 0) {
			snprintf(out, outlen, "%s", c->peers[i].ifname[0] ? c->peers[i].ifname : tmp);
			return 0;
		}
	}
	/* 2. the interface the kernel routes the first reachable peer through */
	for (int i = 0; i < c->npeers; i++) {
		uint32_t src = 0;
		if (route_src(c->peers[i].ip, &src) == 0 && ifname_of_ip(src, tmp, sizeof(tmp)) == 0 &&
		    strcmp(tmp, "lo") != 0) {
			snprintf(out, outlen, "%s", tmp);
			return 0;
		}
	}
	emp__set_error("emp: no interface toward the cluster: none of the %d peers in %s is a local "
		       "address or routable; set EMP_IFNAME or add IFNAME to this host's peer line",
		       c->npeers, c->path[0] ? c->path : "the config");
	return -ENODEV;
}
