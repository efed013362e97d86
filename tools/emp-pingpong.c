/* emp-pingpong.c: native EMP latency: half the round trip of a ping-pong, per message size (thesis 2.4.2). */
#include <unistd.h>
#include "tool.h"

#define TAG_PING 1
#define TAG_QUIT 2

static void usage(void)
{
	fprintf(stderr, "usage: emp-pingpong -s [--once] [options]\n"
		"       emp-pingpong -c PEER [-m SIZE[,SIZE...]] [-n ITERS] [--json] [options]\n"
		"options: --conf FILE  -i IFNAME  -e MY_EP (default 1 server, 2 client)  -E PEER_EP (default 1)\n");
	exit(tool_help ? 0 : 2);
}

static void serve(emp_endpoint_t *ep, const struct tool_opts *t)
{
	/* two buffers: the next receive is posted before the reply goes out,
	 * since EMP drops a message that finds no receive posted */
	size_t cap = 16u << 20;
	char *buf[2] = { malloc(cap), malloc(cap) };
	struct iovec iov[2] = { { buf[0], cap }, { buf[1], cap } };
	emp_addr_t any = { EMP_ANY_HOST, EMP_ANY_EP };
	emp_req_t *r, *s;
	struct emp_status st, sst;
	int cur = 0, rc = emp_post_recv(ep, any, EMP_ANY_TAG, &iov[0], 1, &r);
	if (rc < 0)
		tool_die("post_recv", rc);
	for (;;) {
		rc = emp_wait(ep, r, &st, -1);
		if (rc < 0)
			tool_die("wait", rc);
		rc = emp_post_recv(ep, any, EMP_ANY_TAG, &iov[!cur], 1, &r);
		if (rc < 0)
			tool_die("post_recv", rc);
		if (st.tag == TAG_QUIT) {
			if (t->once)
				break;
		} else if (st.result >= 0) {
			struct iovec out = { buf[cur], (size_t)st.result };
			if (emp_post_send(ep, st.source, st.tag, &out, 1, &s) == 0)
				emp_wait(ep, s, &sst, -1);
		}
		cur = !cur;
	}
	if (getenv("EMP_TOOL_COUNTERS"))
		tool_counters(ep, stderr);
	free(buf[0]);
	free(buf[1]);
}

static double ping(emp_endpoint_t *ep, emp_addr_t peer, size_t size, long iters)
{
	char *sb = calloc(1, size + 1), *rb = calloc(1, size + 1);
	struct iovec si = { sb, size }, ri = { rb, size };
	emp_addr_t from = peer;
	struct emp_status st;
	uint64_t t0 = 0;
	long warm = iters / 10 < 100 ? iters / 10 : 100;
	for (long i = -warm; i < iters; i++) {
		if (i == 0)
			t0 = emp_now_ns();
		emp_req_t *r, *s;
		int rc = emp_post_recv(ep, from, TAG_PING, &ri, 1, &r);
		if (rc == 0)
			rc = emp_post_send(ep, peer, TAG_PING, &si, 1, &s);
		if (rc < 0)
			tool_die("post", rc);
		if ((rc = emp_wait(ep, s, &st, 10000000000ll)) <= 0 || st.result < 0) {
			tool_counters(ep, stderr);
			tool_die("send", rc < 0 ? rc : rc == 0 ? -ETIMEDOUT : (int)st.result);
		}
		if ((rc = emp_wait(ep, r, &st, 10000000000ll)) <= 0 || st.result < 0) {
			tool_counters(ep, stderr);
			tool_die("recv", rc < 0 ? rc : rc == 0 ? -ETIMEDOUT : (int)st.result);
		}
	}
	double us = (double)(emp_now_ns() - t0) / 1e3 / (double)iters / 2.0;
	free(sb);
	free(rb);
	return us;
}

int main(int argc, char **argv)
{
	struct tool_opts t = { .iters = 10000, .rep = 1 };
	tool_parse(&t, argc, argv, NULL, 4, usage);
	if (t.iters <= 0)
		usage();
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
		double us = ping(ep, peer, t.sizes[i], t.iters);
		if (t.json)
			printf("%s{\"size\":%zu,\"half_rtt_us\":%.3f}", i ? "," : "", t.sizes[i], us);
		else
			printf("%10zu bytes  %9.2f us half round trip\n", t.sizes[i], us);
		fflush(stdout);
	}
	if (t.json)
		printf("]}\n");
	tool_finish(ep, peer, TAG_QUIT);
	return 0;
}
