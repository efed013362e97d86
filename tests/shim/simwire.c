/* simwire.c: both ends of one shim stream on the simulated wire (virtual or real time), and checked byte patterns, for tests/shim. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "simwire.h"

/* A failed CHECK exits: the shim's exit flush (registered before us, so run
 * after us) must not wait on engines whose virtual clock nobody moves. */
static void no_exit_flush(void)
{
	es__g.ep = NULL;
}

/* the two sockets of one stream over w->h's endpoints: R receive buffers of
 * S bytes per side; as a negotiation leaves them (state EMP, the kernel
 * socket in the liveness set) */
void sw_streams(struct sw *w, unsigned R, unsigned S, int nonblock)
{
	es__g.nbufs = R;
	es__g.bufsz = S;
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	uint32_t lid[2] = { es__conn_new_lid(), es__conn_new_lid() };
	uint64_t key[2] = { es__random64() | 1, es__random64() | 1 };
	for (int i = 0; i < 2; i++) {
		es__engine_set(w->h.ep[i]);      /* side i's connection lives on endpoint i */
		struct es_sock *s = es__sock_new(sv[i], ES_PENDING);
		CHECK(s);
		s->nonblock = nonblock;
		CHECK(es__conn_create(s, (uint16_t)(1 - i), 1, lid[i], key[i]) == 0);
		es__sock_lock(s);
		CHECK(es__conn_set_peer(s, 1, lid[1 - i], R, S, key[1 - i]) == 0);
		s->state = ES_EMP;
		es__live_add(s);
		es__sock_update(s, 1);
		es__sock_unlock(s);
		w->fd[i] = sv[i];
		w->s[i] = s;
	}
	es__engine_set(w->h.ep[0]);
	static int registered;
	if (!registered++)
		atexit(no_exit_flush);
}

/* virtual time: nobody drives the engines but the test (h_run); every call
 * must be non-blocking (a wait in the shim spins on a clock nobody moves) */
void sw_open(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S)
{
	h_init(&w->h, 2, f, NULL);
	es__reaper_off = 1;                /* virtual time: the test reaps (es__zombies_reap) */
	sw_streams(w, R, S, 1);
}

unsigned sw_evmask(struct sw *w, int i) { return atomic_load(&w->s[i]->evmask); }

uint8_t sw_pat(uint64_t off, int dir) { return (uint8_t)(((off + 1) * 2654435761u) >> 11) ^ (uint8_t)(dir * 0x5a); }

void sw_fill(void *b, size_t n, uint64_t off, int dir)
{
	for (size_t k = 0; k < n; k++)
		((uint8_t *)b)[k] = sw_pat(off + k, dir);
}

/* write from side i until the shim says EAGAIN; bytes taken */
size_t sw_write_all(struct sw *w, int i, size_t *off)
{
	uint8_t b[700];
	size_t n = 0;
	for (;;) {
		sw_fill(b, sizeof b, *off, i);
		ssize_t r = write(w->fd[i], b, sizeof b);
		if (r < 0) {
			CHECK_MSG(errno == EAGAIN, "write: %s", strerror(errno));
			return n;
		}
		*off += (size_t)r;
		n += (size_t)r;
		CHECK_MSG(n <= (1u << 20), "side %d: 1 MiB written and no EAGAIN", i);
	}
}

/* read up to max bytes at side i (from side 1-i), checking them; bytes read */
size_t sw_read_some(struct sw *w, int i, size_t *off, size_t max)
{
	uint8_t b[900];
	size_t n = 0;
	while (n < max) {
		ssize_t r = read(w->fd[i], b, max - n < sizeof b ? max - n : sizeof b);
		if (r <= 0) {
			CHECK_MSG(r < 0 && errno == EAGAIN, "read: %zd %s", r, strerror(errno));
			break;
		}
		for (ssize_t k = 0; k < r; k++)
			CHECK_MSG(b[k] == sw_pat(*off + (size_t)k, 1 - i), "byte %zu differs", *off + (size_t)k);
		*off += (size_t)r;
		n += (size_t)r;
	}
	return n;
}

int sw_poll(int fd, short ev, int ms)
{
	struct pollfd p = { fd, ev, 0 };
	int r = poll(&p, 1, ms);
	CHECK(r >= 0);
	return r ? p.revents : 0;
}

static uint64_t rclock(void *arg) { (void)arg; return emp_now_ns(); }

/* the same two sockets, blocking (2 s timeouts: a lost wake fails, it does
 * not hang), over a wire in real time whose engines run progress threads */
void sw_open_rt(struct sw *w, const struct emp_sim_faults *f, unsigned R, unsigned S)
{
	struct harness *h = &w->h;
	memset(h, 0, sizeof *h);
	h->n = 2;
	CHECK(emp_sim_wire_create(&h->wire, f, rclock, NULL) == 0);
	emp_conf_defaults(&h->conf);
	h->conf.peers = calloc(2, sizeof *h->conf.peers);
	h->conf.npeers = 2;
	for (int i = 0; i < 2; i++) {
		uint8_t m[6] = { 0x02, 0, 0, 0, 0, (uint8_t)(i + 1) };
		memcpy(h->mac[i], m, 6);
		memcpy(h->conf.peers[i].mac, m, 6);
		snprintf(h->conf.peers[i].name, sizeof h->conf.peers[i].name, "h%d", i);
		h->conf.peers[i].ip = (uint32_t)(0x0a000001 + i);
	}
	for (int i = 0; i < 2; i++) {
		struct emp_open_opts o = { .conf = &h->conf, .driver = "sim", .endpoint = 1, .wire = h->wire,
					   .mac = h->mac[i] };
		CHECK_MSG(emp_open(&h->ep[i], &o) == 0, "emp_open: %s", emp_last_error());
	}
	sw_streams(w, R, S, 0);
	for (int i = 0; i < 2; i++)
		w->s[i]->rcvtimeo_ns = w->s[i]->sndtimeo_ns = 2000000000;
}

int sw_run(struct harness *h, int (*done)(void *), void *arg, uint64_t max_ns)
{
	es__held_flush_old(0, 0);
	return h_run(h, done, arg, max_ns);
}

void sw_settle(struct sw *w)
{
	sw_run(&w->h, NULL, NULL, 200000000);
}

int sw_reap_each_round(void *arg)
{
	(void)arg;
	es__zombies_reap();
	return 0;
}

void sw_settle_reaping(struct sw *w)
{
	sw_run(&w->h, sw_reap_each_round, NULL, 200000000);
}
