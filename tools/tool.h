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

static int tool_help;               /* --help: usage() exits 0 */

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

/* The options emp-pingpong and emp-bw share: -s | -c PEER, -m SIZES, -n N,
 * -i IF, -e EP, -E PEER_EP, --conf, --json, --once, and --bidir when the
 * caller passes bidir. Defaults: endpoint 1 serving, 2 as client; size
 * default_size. Calls usage() on anything wrong. */
static inline void tool_parse(struct tool_opts *t, int argc, char **argv, int *bidir, size_t default_size,
			      void (*usage)(void))
{
	static const struct option lo[] = {
		{ "conf", 1, 0, 'C' }, { "json", 0, 0, 'j' }, { "once", 0, 0, 'o' },
		{ "bidir", 0, 0, 'b' }, { "help", 0, 0, 'h' }, { 0 }
	};
	int c, ep_set = 0;
	while ((c = getopt_long(argc, argv, "sc:m:n:i:e:E:h", lo, NULL)) != -1) {
		switch (c) {
		case 's': t->server = 1; break;
		case 'c': t->peer = optarg; break;
		case 'm': if (tool_sizes(t, optarg) < 0) usage(); break;
		case 'n': t->iters = atol(optarg); break;
		case 'i': t->ifname = optarg; break;
		case 'e': t->ep = (uint16_t)atoi(optarg); ep_set = 1; break;
		case 'E': t->rep = (uint16_t)atoi(optarg); break;
		case 'C': t->conf = optarg; break;
		case 'j': t->json = 1; break;
		case 'o': t->once = 1; break;
		case 'b': if (!bidir) usage(); *bidir = 1; break;
		case 'h': tool_help = 1; usage(); break;
		default: usage();
		}
	}
	if (t->server == !!t->peer || t->iters < 0)
		usage();
	if (!ep_set)
		t->ep = t->server ? 1 : 2;
	if (!t->nsizes) {
		t->sizes[0] = default_size;
		t->nsizes = 1;
	}
}

static inline emp_endpoint_t *tool_open(const struct tool_opts *t)
{
	emp_endpoint_t *ep;
	/* a benchmark's endpoint lives long: its receive ring from the start */
	struct emp_open_opts o = { .conf_path = t->conf, .ifname = t->ifname, .endpoint = t->ep,
				   .ring_at_open = 1 };
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
	if (c.bye_completed)
		fprintf(f, "emp: sends completed by a closing peer's BYE %llu\n", (unsigned long long)c.bye_completed);
}

/* Client end: tell the server we are done (tag quit), print counters if
 * EMP_TOOL_COUNTERS is set, close. */
static inline void tool_finish(emp_endpoint_t *ep, emp_addr_t peer, uint32_t quit_tag)
{
	emp_req_t *q;
	struct emp_status st;
	if (emp_post_send(ep, peer, quit_tag, NULL, 0, &q) == 0)
		emp_wait(ep, q, &st, 2000000000);
	if (getenv("EMP_TOOL_COUNTERS"))
		tool_counters(ep, stderr);
	emp_close(ep);
}

#endif
