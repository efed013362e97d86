/* emp-verify.c: end-to-end check over a real wire: clients send patterned messages, the server verifies every byte. */
#include <time.h>
#include <unistd.h>
#include "tool.h"

#define TAG 10
#define LINGER_NS 300000000ull   /* server: answering after the last message */
#define DEPTH 16

struct mhdr { uint32_t index, size, seed, from; };

static void pattern(uint8_t *b, size_t len, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < len; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		b[i] = (uint8_t)x;
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: emp-verify -s -n MSGS_PER_CLIENT [-k CLIENTS] [options]\n"
		"       emp-verify -c PEER -n MSGS [-m SIZE[,SIZE...]] [options]\n"
		"options: --conf FILE  -i IFNAME  -e MY_EP  -E PEER_EP (default 1)  -t SECONDS (default 60)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct tool_opts t = { .rep = 1 };
	int clients = 1, ep_set = 0;
	long secs = 60;
	static const struct option lo[] = { { "conf", 1, 0, 'C' }, { 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "sc:m:n:k:i:e:E:t:", lo, NULL)) != -1) {
		switch (c) {
		case 's': t.server = 1; break;
		case 'c': t.peer = optarg; break;
		case 'm': if (tool_sizes(&t, optarg) < 0) usage(); break;
		case 'n': t.iters = atol(optarg); break;
		case 'k': clients = atoi(optarg); break;
		case 'i': t.ifname = optarg; break;
		case 'e': t.ep = (uint16_t)atoi(optarg); ep_set = 1; break;
		case 'E': t.rep = (uint16_t)atoi(optarg); break;
		case 't': secs = atol(optarg); break;
		case 'C': t.conf = optarg; break;
		default: usage();
		}
	}
	if (t.server == !!t.peer || t.iters <= 0 || clients < 1)
		usage();
	if (!ep_set)
		t.ep = t.server ? 1 : EMP_EP_AUTO;    /* clients: a random free id */
	if (!t.nsizes) {
		size_t d[] = { 0, 1, 1459, 1460, 1461, 65536, 1 << 20 };   /* 1460: one full frame at MTU 1500 */
		memcpy(t.sizes, d, sizeof(d));
		t.nsizes = 7;
	}
	size_t maxsz = sizeof(struct mhdr);
	for (int i = 0; i < t.nsizes; i++)
		if (t.sizes[i] + sizeof(struct mhdr) > maxsz)
			maxsz = t.sizes[i] + sizeof(struct mhdr);
	emp_endpoint_t *ep = tool_open(&t);
	int64_t tmo = secs * 1000000000ll;
	struct emp_status st;
	int bad = 0;
	uint8_t *buf = NULL, *ref = NULL;       /* freed after emp_close: receives may still be posted */
	if (t.server) {
		long want = t.iters * clients, got = 0, bytes = 0;
		buf = malloc(maxsz * DEPTH);
		ref = malloc(maxsz);
		emp_req_t *rr[DEPTH];
		emp_addr_t any = { EMP_ANY_HOST, EMP_ANY_EP };
		for (int i = 0; i < DEPTH; i++) {
			struct iovec iov = { buf + (size_t)i * maxsz, maxsz };
			if (emp_post_recv(ep, any, TAG, &iov, 1, &rr[i]) < 0)
				tool_die("recv", -ENOBUFS);
		}
		while (got < want) {
			int k = emp_wait_any(ep, rr, DEPTH, &st, tmo);
			if (k < 0) {
				fprintf(stderr, "emp-verify: timed out after %ld of %ld messages\n", got, want);
				tool_counters(ep, stderr);
				return 1;
			}
			uint8_t *m = buf + (size_t)k * maxsz;
			struct mhdr h;
			memcpy(&h, m, sizeof(h));
			if (st.result != (int64_t)(h.size + sizeof(h))) {
				fprintf(stderr, "emp-verify: message %u: length %lld, expected %zu\n", h.index,
					(long long)st.result, h.size + sizeof(h));
				bad++;
			} else {
				pattern(ref, h.size, h.seed);
				if (memcmp(ref, m + sizeof(h), h.size)) {
					fprintf(stderr, "emp-verify: message %u from %u: payload differs\n", h.index, h.from);
					bad++;
				}
			}
			got++;
			bytes += st.result;
			struct iovec iov = { m, maxsz };
			if (got + DEPTH - 1 < want + DEPTH && emp_post_recv(ep, any, TAG, &iov, 1, &rr[k]) < 0)
				tool_die("recv", -ENOBUFS);
		}
		/* the last message's completion ack may be lost: its sender resends
		 * and needs an answer (a duplicate ack), so stay a while (about 8
		 * of its backed-off retransmissions) before the endpoint goes */
		for (uint64_t until = emp_now_ns() + LINGER_NS; emp_now_ns() < until;) {
			emp_progress(ep);
			struct timespec ts = { 0, 200000 };
			nanosleep(&ts, NULL);
		}
		printf("emp-verify: %ld messages, %ld bytes, %d bad\n", got, bytes, bad);
		tool_counters(ep, stdout);
	} else {
		emp_addr_t peer = tool_peer(ep, &t);
		buf = malloc(maxsz * DEPTH);
		emp_req_t *sr[DEPTH] = { 0 };
		long sent = 0, done = 0;
		while (done < t.iters) {
			for (int i = 0; i < DEPTH && sent < t.iters; i++) {
				if (sr[i])
					continue;
				uint8_t *m = buf + (size_t)i * maxsz;
				struct mhdr h = { (uint32_t)sent, (uint32_t)t.sizes[sent % t.nsizes],
						  (uint32_t)(sent * 7 + getpid()), (uint32_t)emp_self_host(ep) };
				memcpy(m, &h, sizeof(h));
				pattern(m + sizeof(h), h.size, h.seed);
				struct iovec iov = { m, h.size + sizeof(h) };
				int rc = emp_post_send(ep, peer, TAG, &iov, 1, &sr[i]);
				if (rc < 0)
					tool_die("send", rc);
				sent++;
			}
			int k = emp_wait_any(ep, sr, DEPTH, &st, tmo);
			if (k < 0 || st.result < 0) {
				fprintf(stderr, "emp-verify: send failed: %s\n", strerror(k < 0 ? -k : (int)-st.result));
				tool_counters(ep, stderr);
				return 1;
			}
			sr[k] = NULL;
			done++;
		}
		printf("emp-verify: sent %ld messages\n", done);
		tool_counters(ep, stdout);
	}
	emp_close(ep);
	free(buf);
	free(ref);
	return bad ? 1 : 0;
}
