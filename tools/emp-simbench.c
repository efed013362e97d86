/* emp-simbench.c: the engine's own cost on one core: two endpoints on the simulated wire, driven by one thread. */
#include <unistd.h>
#include "tool.h"
#include "driver.h"
#include "sim.h"
#include "conf.h"

#define DEPTH 32

static uint64_t rclock(void *arg) { return emp_now_ns(); }

static double run(emp_endpoint_t *a, emp_endpoint_t *b, size_t size, long count, double *secs)
{
	char *sbuf = calloc(1, size + 1), *rbuf = calloc(DEPTH, size + 1);
	emp_req_t *sr[DEPTH] = { 0 }, *rr[DEPTH] = { 0 };
	struct iovec si = { sbuf, size };
	emp_addr_t to = { 1, 1 }, from = { 0, 1 };
	long sent = 0, sdone = 0, rposted = 0, rdone = 0;
	struct emp_status st;
	uint64_t t0 = emp_now_ns();
	while (rdone < count || sdone < count) {
		for (int i = 0; i < DEPTH; i++) {
			if (!rr[i] && rposted < count) {
				struct iovec ri = { rbuf + (size_t)i * (size + 1), size };
				if (emp_post_recv(b, from, 5, &ri, 1, &rr[i]) < 0)
					tool_die("recv", -ENOBUFS);
				rposted++;
			}
			if (!sr[i] && sent < count) {
				if (emp_post_send(a, to, 5, &si, 1, &sr[i]) < 0)
					tool_die("send", -ENOBUFS);
				sent++;
			}
		}
		emp_progress(a);
		emp_progress(b);
		for (int i = 0; i < DEPTH; i++) {
			if (sr[i] && emp_test(a, sr[i], &st) == 1) {
				sr[i] = NULL;
				sdone++;
			}
			if (rr[i] && emp_test(b, rr[i], &st) == 1) {
				if (st.result != (int64_t)size)
					tool_die("recv result", (int)st.result);
				rr[i] = NULL;
				rdone++;
			}
		}
	}
	*secs = (double)(emp_now_ns() - t0) / 1e9;
	free(sbuf);
	free(rbuf);
	return (double)count / *secs;
}

int main(int argc, char **argv)
{
	/* emp-simbench [--json] [--auth KEYFILE]: KEYFILE turns frame authentication on */
	int json = 0;
	const char *key = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--auth") && i + 1 < argc)
			key = argv[++i];
		else {
			fprintf(stderr, "usage: emp-simbench [--json] [--auth KEYFILE]\n");
			return 2;
		}
	}
	struct emp_sim_wire *w;
	struct emp_sim_faults f = { .seed = 1, .mtu = 1500, .queue_frames = 8192 };
	if (emp_sim_wire_create(&w, &f, rclock, NULL) < 0)
		return 1;
	struct emp_conf conf;
	emp_conf_defaults(&conf);
	if (key) {
		conf.opt.auth = 1;
		snprintf(conf.opt.auth_key, sizeof(conf.opt.auth_key), "%s", key);
	}
	conf.npeers = 2;
	conf.peers = calloc(2, sizeof(*conf.peers));
	uint8_t mac[2][6] = { { 2, 0, 0, 0, 0, 1 }, { 2, 0, 0, 0, 0, 2 } };
	emp_endpoint_t *ep[2];
	for (int i = 0; i < 2; i++) {
		memcpy(conf.peers[i].mac, mac[i], 6);
		snprintf(conf.peers[i].name, sizeof(conf.peers[i].name), "s%d", i);
		conf.peers[i].ip = (uint32_t)(i + 1);
	}
	for (int i = 0; i < 2; i++) {
		struct emp_open_opts o = { .conf = &conf, .driver = "sim", .endpoint = 1, .wire = w,
					   .mac = mac[i], .no_progress_thread = 1 };
		if (emp_open(&ep[i], &o) < 0) {
			fprintf(stderr, "%s\n", emp_last_error());
			return 1;
		}
	}
	double s1, s2;
	double rate = run(ep[0], ep[1], 64, 200000, &s1);
	double mps = run(ep[0], ep[1], 1 << 20, 512, &s2) * (1 << 20) / 1e6;
	if (json)
		printf("{\"msgs_per_s_64B\":%.0f,\"MBps_1MiB\":%.1f}\n", rate, mps);
	else
		printf("engine on the sim wire, one core, both ends: %.0f msgs/s (64 B), %.1f MB/s (1 MiB)\n",
		       rate, mps);
	emp_close(ep[0]);
	emp_close(ep[1]);
	emp_sim_wire_destroy(w);
	return 0;
}
