/* peers.c: the host's say over the engine's peer table: holding a peer while a connection uses it, and whether a HELLO alone may start a session. */
#include <errno.h>

#include "internal.h"

static int hold(emp_endpoint_t *ep, emp_addr_t peer, int delta)
{
	if (!ep || peer.host >= ep->conf.npeers || peer.ep == EMP_ANY_EP)
		return -EINVAL;
	pthread_mutex_lock(&ep->eng_lock);
	int r = emp__fw_peer_hold(ep->fw, peer.host, peer.ep, delta, emp__now(ep));
	pthread_mutex_unlock(&ep->eng_lock);
	return r == -EMP_ENOBUFS ? -ENOBUFS : r;
}

int emp_peer_hold(emp_endpoint_t *ep, emp_addr_t peer)
{
	return hold(ep, peer, 1);
}

void emp_peer_release(emp_endpoint_t *ep, emp_addr_t peer)
{
	hold(ep, peer, -1);
}

void emp_peer_policy(emp_endpoint_t *ep, int hello_needs_hold)
{
	if (!ep)
		return;
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_set_hello_needs_hold(ep->fw, hello_needs_hold);
	pthread_mutex_unlock(&ep->eng_lock);
}
