/* emp-bw.c: native EMP bandwidth: a one-way stream of N messages followed by a return ack (thesis 2.4.2); --bidir. */
#include <unistd.h>
#include "tool.h"

enum { TAG_CTRL = 1, TAG_READY, TAG_DATA, TAG_DONE, TAG_QUIT };
#define DEPTH 16                       /* receives posted / sends in flight */

struct ctrl { uint32_t size, count, bidir, depth; };

static void usage(void)
{
	fprintf(stderr, "usage: emp-bw -s [--once] [options]\n"
		"       emp-bw -c PEER [-m SIZE[,SIZE...]] [-n COUNT] [--bidir] [--json] [options]\n"
		"options: --conf FILE  -i IFNAME  -e MY_EP (default 1 server, 2 client)  -E PEER_EP (default 1)\n");
	exit(tool_help ? 0 : 2);
}

static void must(int rc, const char *what)
{
	if (rc < 0)
		tool_die(what, rc);
}

static void ctl_send(emp_endpoint_t *ep, emp_addr_t to, uint32_t tag, void *p, size_t n)
{
	emp_req_t *r;
	struct emp_status st;
	struct iovec iov = { p, n };
	must(emp_post_send(ep, to, tag, &iov, 1, &r), "send");
	if (emp_wait(ep, r, &st, 10000000000ll) <= 0 || st.result < 0) {
		tool_counters(ep, stderr);
		tool_die("control send", st.result < 0 ? (int)st.result : -ETIMEDOUT);
	}
}

/* Move count messages of size each way as asked: sends keep `depth` in
 * flight, receives keep `depth` posted; returns when both are done. */
static void stream(emp_endpoint_t *ep, emp_addr_t peer, char *sbuf, char *rbuf, size_t size,
		   uint32_t nsend, uint32_t nrecv, emp_req_t **rr)
{
	emp_req_t *sr[DEPTH] = { 0 };
	struct iovec si = { sbuf, size };
	uint32_t sent = 0, sdone = 0, rdone = 0, rposted = nrecv < DEPTH ? nrecv : DEPTH;
	struct emp_status st;
	while (sdone < nsend || rdone < nrecv) {
		for (int i = 0; i < DEPTH; i++) {
			if (!sr[i] && sent < nsend) {
				must(emp_post_send(ep, peer, TAG_DATA, &si, 1, &sr[i]), "send");
				sent++;
			}
		}
		emp_req_t *all[2 * DEPTH];
		for (int i = 0; i < DEPTH; i++) {
			all[i] = sr[i];
			all[DEPTH + i] = rr ? rr[i] : NULL;
		}
		int k = emp_wait_any(ep, all, 2 * DEPTH, &st, 10000000000ll);
		if (k < 0) {
			tool_counters(ep, stderr);
			tool_die("stream", k);
		}
		if (st.result < 0)
			tool_die(k < DEPTH ? "send" : "recv", (int)st.result);
		if (k < DEPTH) {
			sr[k] = NULL;
			sdone++;
		} else {
			int i = k - DEPTH;
			rr[i] = NULL;
			rdone++;
			if (rposted < nrecv) {
				struct iovec ri = { rbuf + (size_t)i * size, size };
				emp_addr_t from = peer;
				must(emp_post_recv(ep, from, TAG_DATA, &ri, 1, &rr[i]), "recv");
				rposted++;
			}
		}
	}
}

static void post_recvs(emp_endpoint_t *ep, emp_addr_t peer, char *rbuf, size_t size, uint32_t n, emp_req_t **rr)
{
	for (uint32_t i = 0; i < DEPTH; i++) {
		rr[i] = NULL;
		if (i < n) {
			struct iovec ri = { rbuf + (size_t)i * size, size };
			must(emp_post_recv(ep, peer, TAG_DATA, &ri, 1, &rr[i]), "recv");
		}
	}
}

static void serve(emp_endpoint_t *ep, const struct tool_opts *t)
{
	emp_addr_t any = { EMP_ANY_HOST, EMP_ANY_EP };
	for (;;) {
		struct ctrl c;
		struct iovec ci = { &c, sizeof(c) };
		emp_req_t *r, *rr[DEPTH];
		struct emp_status st;
		must(emp_post_recv(ep, any, EMP_ANY_TAG, &ci, 1, &r), "recv");
		must(emp_wait(ep, r, &st, -1), "wait");
		if (st.tag == TAG_QUIT) {
			if (t->once)
				break;
			continue;
		}
		if (st.tag != TAG_CTRL || st.result != sizeof(c) || c.size > (64u << 20))
			continue;
		emp_addr_t peer = st.source;
		char *rbuf = malloc((size_t)c.size * DEPTH + 1), *sbuf = malloc((size_t)c.size + 1);
		memset(sbuf, 0x5a, c.size);
		post_recvs(ep, peer, rbuf, c.size, c.count, rr);
		ctl_send(ep, peer, TAG_READY, NULL, 0);
		stream(ep, peer, sbuf, rbuf, c.size, c.bidir ? c.count : 0, c.count, rr);
		ctl_send(ep, peer, TAG_DONE, NULL, 0);
		free(rbuf);
		free(sbuf);
	}
	if (getenv("EMP_TOOL_COUNTERS"))
		tool_counters(ep, stderr);
}

static double run(emp_endpoint_t *ep, emp_addr_t peer, size_t size, uint32_t count, int bidir)
{
	struct ctrl c = { (uint32_t)size, count, (uint32_t)bidir, DEPTH };
	char *rbuf = malloc(size * DEPTH + 1), *sbuf = malloc(size + 1);
	memset(sbuf, 0xa5, size);
	emp_req_t *ready, *done, *rr[DEPTH];
	struct emp_status st;
	must(emp_post_recv(ep, peer, TAG_READY, NULL, 0, &ready), "recv");
	must(emp_post_recv(ep, peer, TAG_DONE, NULL, 0, &done), "recv");
	if (bidir)
		post_recvs(ep, peer, rbuf, size, count, rr);
	uint64_t t0 = emp_now_ns();
	ctl_send(ep, peer, TAG_CTRL, &c, sizeof(c));
	if (emp_wait(ep, ready, &st, 10000000000ll) <= 0)
		tool_die("server not ready", -ETIMEDOUT);
	stream(ep, peer, sbuf, rbuf, size, count, bidir ? count : 0, bidir ? rr : NULL);
	if (emp_wait(ep, done, &st, 30000000000ll) <= 0)
		tool_die("no final ack", -ETIMEDOUT);
	double sec = (double)(emp_now_ns() - t0) / 1e9;
	free(rbuf);
	free(sbuf);
	return (double)size * count * (bidir ? 2 : 1) * 8 / sec / 1e6;
}

int main(int argc, char **argv)
{
	struct tool_opts t = { .iters = 0, .rep = 1 };
	int bidir = 0;
	tool_parse(&t, argc, argv, &bidir, 1 << 20, usage);
	emp_endpoint_t *ep = tool_open(&t);
	if (t.server) {
		serve(ep, &t);
		emp_close(ep);
		return 0;
	}
	emp_addr_t peer = tool_peer(ep, &t);
	if (t.json)
		printf("{\"results\":[");
	for (int i = 0; i < t.nsizes; i++) {
		size_t s = t.sizes[i];
		/* default count: about 256 MiB or 20000 messages, whichever is fewer */
		uint32_t n = t.iters ? (uint32_t)t.iters : (uint32_t)((256u << 20) / (s ? s : 1));
		if (!t.iters && n > 20000)
			n = 20000;
		if (n < 1)
			n = 1;
		double mbps = run(ep, peer, s, n, bidir);
		if (t.json)
			printf("%s{\"size\":%zu,\"mbps\":%.1f}", i ? "," : "", s, mbps);
		else
			printf("%10zu bytes x %6u  %10.1f Mbit/s%s\n", s, n, mbps, bidir ? " (both directions)" : "");
		fflush(stdout);
	}
	if (t.json)
		printf("]}\n");
	tool_finish(ep, peer, TAG_QUIT);
	return 0;
}
