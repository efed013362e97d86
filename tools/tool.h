/* tool.h: what the native EMP tools share: common options, opening an endpoint, size lists, JSON output. */
#ifndef EMP_TOOL_H
#define EMP_TOOL_H

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "emp.h"
#include "fw.h"

struct tool_opts {
	const char *conf, *ifname, *peer;
	int server, json, once;
	uint16_t ep, rep;
	size_t sizes[64];
	int nsizes;
	long iters;
};

static inline int tool_sizes(struct tool_opts *t, char *s)
{
	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		char *end;
		double v = strtod(tok, &end);
		if (*end == 'k' || *end == 'K')
			v *= 1024;
		else if (*end == 'm' || *end == 'M')
			v *= 1024 * 1024;
		if (v < 0 || v > 0xffffffffu || t->nsizes == 64)
			return -1;
		t->sizes[t->nsizes++] = (size_t)v;
	}
	return t->nsizes ? 0 : -1;
}

static inline emp_endpoint_t *tool_open(const struct tool_opts *t)
{
	emp_endpoint_t *ep;
	struct emp_open_opts o = { .conf_path = t->conf, .ifname = t->ifname, .endpoint = t->ep };
	int rc = emp_open(&ep, &o);
	if (rc < 0) {
		fprintf(stderr, "%s\n", emp_last_error());
		exit(2);
	}
	return ep;
}

static inline emp_addr_t tool_peer(emp_endpoint_t *ep, const struct tool_opts *t)
{
	int h = emp_host_lookup(ep, t->peer);
	if (h < 0) {
		fprintf(stderr, "emp: peer '%s' is not in the config\n", t->peer);
		exit(2);
	}
	emp_addr_t a = { (uint16_t)h, t->rep };
	return a;
}

static inline void tool_die(const char *what, int rc)
{
	fprintf(stderr, "emp: %s: %s\n", what, strerror(-rc));
	exit(1);
}

static inline void tool_counters(emp_endpoint_t *ep, FILE *f)
{
	struct emp_counters c;
	emp_get_counters(ep, &c);
	fprintf(f, "emp: frames tx %llu rx %llu, retransmits %llu, timeouts %llu, nacks rx %llu, drops %llu\n",
		(unsigned long long)c.tx_frames, (unsigned long long)c.rx_frames,
		(unsigned long long)c.retransmits, (unsigned long long)c.timeouts,
		(unsigned long long)c.rx_nacks, (unsigned long long)c.drops_total);
	for (int i = 0; i < EMP_DROP_MAX; i++)
		if (c.drops[i])
			fprintf(f, "emp:   drop %s %llu\n", emp__drop_names[i], (unsigned long long)c.drops[i]);
}

#endif
