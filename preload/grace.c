/* grace.c: the grace an EMP connection gives the peer's EMP FIN once its kernel socket has ended: kept here, decided by the reaper thread at its end. */
/*
 * A peer that closed normally sent its EMP FIN before its kernel socket went,
 * but the kernel's FIN can overtake it (a loss, or an exiting process's
 * handoff still delivering): es__kernel_check gives the FIN up to 500 ms.
 * The thread that noticed the end is often an application's event loop, so
 * the grace is not waited for there: the connection stays as it is (readable
 * at the FIN if it comes), and the reaper thread (linger.c) looks again at
 * the grace's end, decides EOF or reset, and wakes the socket's waiters. The
 * socket is named by fd and ident, as the liveness set names it
 * (es__live_sock_do), never held: one closed or replaced meanwhile is skipped.
 */
#include <pthread.h>
#include <stdint.h>

#include "conn.h"

#define GRACES_MAX 256
struct grace { int fd; uint32_t ident; int64_t dl; };
static struct grace graces[GRACES_MAX];
static int ngraces;
static pthread_mutex_t grace_mu = PTHREAD_MUTEX_INITIALIZER;   /* a leaf: taken under s->lock */

int es__grace_add(struct es_sock *s, int64_t dl)
{
	if (es__reaper_off)
		return -1;
	es__reaper_start();
	if (!es__reaper_running())
		return -1;               /* no reaper (exiting, or no thread to be had) */
	pthread_mutex_lock(&grace_mu);
	int r = -1;
	if (ngraces < GRACES_MAX) {
		graces[ngraces++] = (struct grace){ s->kfd, s->ident, dl };
		r = 0;
	}
	pthread_mutex_unlock(&grace_mu);
	if (r == 0)
		es__reaper_wake();       /* its sleep may be longer than this grace */
	return r;
}

static void grace_end(struct es_sock *s, uint32_t unused)
{
	(void)unused;
	if (s->state == ES_EMP && s->c && s->c->keof_at)
		es__kernel_check(s, 0);   /* the grace is over: FIN seen, or reset */
}

void es__graces_due(int64_t *next)
{
	struct grace due[GRACES_MAX];
	int n = 0;
	int64_t now = es__now_ns();
	*next = INT64_MAX;
	pthread_mutex_lock(&grace_mu);
	for (int i = 0; i < ngraces;) {
		if (graces[i].dl <= now) {
			due[n++] = graces[i];
			graces[i] = graces[--ngraces];
		} else {
			if (graces[i].dl < *next)
				*next = graces[i].dl;
			i++;
		}
	}
	pthread_mutex_unlock(&grace_mu);
	for (int i = 0; i < n; i++)
		es__live_sock_do(due[i].fd, due[i].ident, grace_end, 0);
}

void es__graces_atfork_child(void)
{
	ngraces = 0;                 /* the parent's connections' graces */
	pthread_mutex_init(&grace_mu, NULL);
}
