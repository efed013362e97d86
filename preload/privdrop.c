/* privdrop.c: setuid, setreuid, setresuid, seteuid: a process that gives up root keeps the raw sockets its endpoint will need (libemp's emp_keep_raw_sockets), so a worker that drops root before its first connection still speaks EMP. */
#include <errno.h>
#include <unistd.h>

#include "es.h"

/*
 * Apache's children and nginx's workers (`user www-data;`, Debian's
 * default) switch to an unprivileged user right after the fork, before
 * their first connection, where the shim opens the process's endpoint: its
 * AF_PACKET sockets need CAP_NET_RAW, which the switch took away ("cannot
 * open an EMP endpoint"; kernel TCP, or refused under --strict). Just
 * before a switch that takes root away, the sockets are opened and kept; the
 * endpoint takes them later. A process that is not root, or that stays root,
 * is left alone. What the worker keeps is what its endpoint needs: a
 * descriptor of a raw socket, no capability (it cannot open more). The UDP
 * side channel of a listener on a port below 1024 is another matter: a
 * worker that is not root cannot bind it (such a port stays on kernel TCP).
 */
#define KEEP 6           /* send, receive, ring switch helper, transmit ring, bulk, one more */

static void before_drop(int to_root)
{
	/* a vfork child shares the parent's memory, the stash included, but not
	 * its descriptors: it keeps nothing (it is about to exec) */
	if (to_root || geteuid() != 0 || es__tl_in || !es__conf() || es__vfork_child())
		return;
	es__tl_in++;
	int n = emp_keep_raw_sockets(KEEP);
	es__tl_in--;
	es__dbg("giving up root: %d raw sockets kept for the endpoint%s", n > 0 ? n : 0,
		n > 0 ? "" : " (none could be made)");
}

/* an effective uid argument of the set*uid family: -1 keeps the current one */
static int euid_root(uid_t e)
{
	return e == (uid_t)-1 ? geteuid() == 0 : e == 0;
}

int setuid(uid_t uid)
{
	before_drop(uid == 0);
	return R_(setuid)(uid);
}

int setreuid(uid_t r, uid_t e)
{
	before_drop(euid_root(e));
	return R_(setreuid)(r, e);
}

int setresuid(uid_t r, uid_t e, uid_t s)
{
	before_drop(euid_root(e));
	return R_(setresuid)(r, e, s);
}

int seteuid(uid_t e)
{
	before_drop(e == 0);
	return R_(seteuid)(e);
}
