/* empstat.c: shows the running EMP endpoints from their /dev/shm statistics segments: list, one process in detail, watch, JSON, clean. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "emp.h"
#include "stats.h"

#define MAXSEG 4096

static const char help[] =
"usage: empstat [options] [PID]\n"
"\n"
"Shows the EMP endpoints running on this machine, read from the statistics\n"
"segment every endpoint publishes in " EMP_STATS_DIR "/emp.<pid>.<endpoint>\n"
"(updated every 100 ms while traffic flows). Reading never stops or slows the\n"
"processes. Segments of processes that exited are skipped.\n"
"\n"
"  empstat              one line per endpoint: pid, program, endpoint, host,\n"
"                       interface, uptime, frames and bytes each way,\n"
"                       retransmissions, drops, peers, connections\n"
"  empstat PID          that process in detail: identity, engine usage, every\n"
"                       counter, drops by reason, per peer (session state,\n"
"                       life: restarts seen + 1, frames in flight, credits)\n"
"                       and per connection (addresses, state, bytes, credits)\n"
"\n"
"options:\n"
"  -w, --watch SECONDS  refresh every SECONDS (fractions allowed); the list\n"
"                       then also shows bytes per second each way\n"
"  -c, --count COUNT    stop after COUNT refreshes (default: 1 without -w,\n"
"                       forever with -w; -c alone refreshes every second)\n"
"  -e, --endpoint EP    only endpoint id EP\n"
"  -j, --json           JSON: one document per refresh, one line each:\n"
"                       {\"time\":..,\"endpoints\":[{pid, program, endpoint,\n"
"                       counters{}, drops{}, usage{}, peers[], connections[]..}],\n"
"                       \"stale\":N}; per-peer traffic fields are null when the\n"
"                       engine does not count them\n"
"  -a, --all            also show segments of exited processes (their last state)\n"
"      --clean          remove your own segments of exited processes (same pid\n"
"                       namespace, process provably gone) and say which\n"
"  -h, --help           this text\n"
"\n"
"exit status: 0 ok, 1 PID publishes nothing or --clean failed on a segment,\n"
"2 usage error. EMP_STATS=0 in a program's environment stops it publishing.\n";

struct opts {
	double every;
	long count;
	int pid, ep, json, all;
};

struct prev {
	char name[64];
	uint64_t start;              /* the segment's start_ns: a new process may reuse a name */
	uint64_t t, tx, rx;
};
static struct prev prev[MAXSEG];
static int nprev;

static void usage_exit(const char *why)
{
	fprintf(stderr, "empstat: %s\n%s", why, help);
	exit(2);
}

static double now_real(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t val(const struct emp_stats_snapshot *s, const char *name)
{
	uint64_t v = 0;
	emp_stats_value(s, name, &v);
	return v;
}

/* 4-5 characters: 999, 12.3K, 4.56M ... (base 1000 or 1024) */
static const char *human(char *buf, double v, double base)
{
	static const char suf[] = " KMGTPE";
	int i = 0;
	while (v >= 9999.5 && i < 6) {
		v /= base;
		i++;
	}
	if (!i)
		snprintf(buf, 16, "%.0f", v);
	else
		snprintf(buf, 16, v < 99.95 ? "%.1f%c" : "%.0f%c", v, suf[i]);
	return buf;
}

static const char *dur(char *buf, double s)
{
	long t = s < 0 ? 0 : (long)s;
	if (t < 60)
		snprintf(buf, 32, "%lds", t);
	else if (t < 3600)
		snprintf(buf, 32, "%ldm%02lds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, 32, "%ldh%02ldm", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, 32, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
	return buf;
}

static const char *mac_str(char *buf, const uint8_t *m)
{
	snprintf(buf, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
	return buf;
}

static const char *addr_str(char *buf, uint32_t ip, uint16_t port)
{
	char a[INET_ADDRSTRLEN];
	struct in_addr in = { ip };
	inet_ntop(AF_INET, &in, a, sizeof(a));
	snprintf(buf, 32, "%s:%u", a, port);
	return buf;
}

static const char *peer_state(uint8_t s)
{
	return s == EMP_STATS_PEER_NEW ? "new" : s == EMP_STATS_PEER_HELLO ? "hello" : s == EMP_STATS_PEER_UP ? "up" : "?";
}

static double uptime(const struct emp_stats_snapshot *s, double now)
{
	double end = s->alive ? now : (double)s->hdr->update_ns / 1e9;
	return end - (double)s->hdr->start_ns / 1e9;
}

/* bytes per second since the previous refresh, -1 on the first */
static void rates(const struct emp_stats_snapshot *s, const char *name, double *tx, double *rx)
{
	uint64_t t = s->hdr->update_ns, btx = val(s, "tx_bytes"), brx = val(s, "rx_bytes");
	*tx = *rx = -1;
	for (int i = 0; i < nprev; i++) {
		struct prev *p = &prev[i];
		if (strcmp(p->name, name) || p->start != s->hdr->start_ns)
			continue;
		if (t > p->t) {
			double dt = (double)(t - p->t) / 1e9;
			*tx = (double)(btx - p->tx) / dt;
			*rx = (double)(brx - p->rx) / dt;
			p->t = t, p->tx = btx, p->rx = brx;
		} else {
			*tx = *rx = 0;
		}
		return;
	}
	if (nprev < MAXSEG) {
		prev[nprev] = (struct prev){ .start = s->hdr->start_ns, .t = t, .tx = btx, .rx = brx };
		snprintf(prev[nprev++].name, sizeof(prev[0].name), "%.63s", name);
	}
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_endpoint(const char *name, const struct emp_stats_snapshot *s, double now)
{
	const struct emp_stats_hdr *h = s->hdr;
	char mac[18], a[32];
	printf("{\"pid\":%d,\"program\":", h->pid);
	json_str(h->prog);
	printf(",\"endpoint\":%u,\"segment\":", h->endpoint);
	json_str(name);
	printf(",\"alive\":%s,\"host\":", s->alive ? "true" : "false");
	json_str(h->host);
	printf(",\"self_host\":%d,\"interface\":", h->self_host);
	json_str(h->ifname);
	printf(",\"driver\":");
	json_str(h->driver);
	printf(",\"mac\":\"%s\",\"mtu\":%u,\"uid\":%u,\"conf\":", mac_str(mac, h->mac), h->mtu, h->uid);
	json_str(h->conf_path);
	printf(",\"start_time\":%.3f,\"uptime_s\":%.3f,\"update_time\":%.3f,\"updates\":%" PRIu64,
	       (double)h->start_ns / 1e9, uptime(s, now), (double)h->update_ns / 1e9, h->updates);
	printf(",\"usage\":{\"memory_bytes\":%" PRIu64 ",\"peers\":%u,\"records\":%u,\"descriptors\":%u,"
	       "\"max_peers\":%u}", h->mem_bytes, h->peers_used, h->records_used, h->ndesc, h->engine_max_peers);
	printf(",\"counters\":{");
	int first = 1;
	for (uint32_t i = 0; i < h->ncounters; i++)
		if (strncmp(s->ctr[i].name, "drop.", 5)) {
			printf("%s\"%.24s\":%" PRIu64, first ? "" : ",", s->ctr[i].name, s->ctr[i].value);
			first = 0;
		}
	printf("},\"drops\":{");
	first = 1;
	for (uint32_t i = 0; i < h->ncounters; i++)
		if (!strncmp(s->ctr[i].name, "drop.", 5)) {
			printf("%s\"%.19s\":%" PRIu64, first ? "" : ",", s->ctr[i].name + 5, s->ctr[i].value);
			first = 0;
		}
	printf("},\"peers\":[");
	int traffic = !!(h->flags & EMP_STATS_F_PEER_TRAFFIC);
	for (uint32_t i = 0; i < h->npeers; i++) {
		const struct emp_stats_peer *p = &s->peer[i];
		printf("%s{\"host\":%u,\"name\":", i ? "," : "", p->host);
		json_str(p->name);
		printf(",\"endpoint\":%u,\"state\":\"%s\",\"rx_known\":%s,\"life\":%u,\"inflight_frames\":%u,"
		       "\"inflight_msgs\":%u,\"credits\":%u,\"srtt_us\":%u,\"rto_us\":%u", p->ep, peer_state(p->state),
		       p->rx_known ? "true" : "false", p->life, p->inflight_frames, p->inflight_msgs, p->credits,
		       p->srtt_us, p->rto_us);
		if (traffic)
			printf(",\"tx_frames\":%" PRIu64 ",\"tx_bytes\":%" PRIu64 ",\"rx_frames\":%" PRIu64
			       ",\"rx_bytes\":%" PRIu64 ",\"retransmits\":%" PRIu64 "}", p->tx_frames, p->tx_bytes,
			       p->rx_frames, p->rx_bytes, p->retransmits);
		else
			printf(",\"tx_frames\":null,\"tx_bytes\":null,\"rx_frames\":null,\"rx_bytes\":null,"
			       "\"retransmits\":null}");
	}
	printf("],\"connections\":[");
	first = 1;
	for (uint32_t i = 0; i < h->nconns; i++) {
		const struct emp_stats_conn *c = &s->conn[i];
		if (!c->used)
			continue;
		printf("%s{\"slot\":%u,\"fd\":%d,\"local\":\"%s\"", first ? "" : ",", i, c->c.fd,
		       addr_str(a, c->c.local_ip, c->c.local_port));
		printf(",\"remote\":\"%s\",\"state\":", addr_str(a, c->c.remote_ip, c->c.remote_port));
		char st[sizeof(c->c.state) + 1];
		snprintf(st, sizeof(st), "%.*s", (int)sizeof(c->c.state), c->c.state);
		json_str(st);
		if (c->c.peer_host == EMP_ANY_HOST)
			printf(",\"peer_host\":null,\"peer_endpoint\":null");
		else
			printf(",\"peer_host\":%u,\"peer_endpoint\":%u", c->c.peer_host, c->c.peer_ep);
		printf(",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"credits_tx\":%u,\"credits_rx\":%u}",
		       c->c.bytes_in, c->c.bytes_out, c->c.credits_tx, c->c.credits_rx);
		first = 0;
	}
	printf("]}");
}

static void list_header(int watching)
{
	printf("%-8s %-15s %5s %-10s %-10s %7s %7s %7s %7s %7s %7s %6s %5s %5s%s\n", "PID", "PROGRAM", "EP", "HOST",
	       "IFACE", "UPTIME", "TX_FRM", "TX_B", "RX_FRM", "RX_B", "RETRANS", "DROPS", "PEERS", "CONNS",
	       watching ? "    TX_B/s   RX_B/s" : "");
}

static void list_line(const char *name, const struct emp_stats_snapshot *s, double now, int watching)
{
	const struct emp_stats_hdr *h = s->hdr;
	char b[10][32], prog[24];
	unsigned conns = 0;
	for (uint32_t i = 0; i < h->nconns; i++)
		conns += s->conn[i].used != 0;
	snprintf(prog, sizeof(prog), "%s%s", h->prog, s->alive ? "" : "(exited)");
	printf("%-8d %-15s %5u %-10.10s %-10.10s %7s %7s %7s %7s %7s %7s %6s %5u %5u", h->pid, prog, h->endpoint,
	       h->host[0] ? h->host : "-", h->ifname, dur(b[0], uptime(s, now)),
	       human(b[1], (double)val(s, "tx_frames"), 1000), human(b[2], (double)val(s, "tx_bytes"), 1024),
	       human(b[3], (double)val(s, "rx_frames"), 1000), human(b[4], (double)val(s, "rx_bytes"), 1024),
	       human(b[5], (double)val(s, "retransmits"), 1000), human(b[6], (double)val(s, "drops_total"), 1000),
	       h->peers_used, conns);
	if (watching) {
		double tx, rx;
		rates(s, name, &tx, &rx);
		printf("  %8s %8s", tx < 0 ? "-" : human(b[7], tx, 1024), rx < 0 ? "-" : human(b[8], rx, 1024));
	}
	putchar('\n');
}

static void detail(const char *name, const struct emp_stats_snapshot *s, double now)
{
	const struct emp_stats_hdr *h = s->hdr;
	char b[4][32], mac[18], when[64];
	time_t st = (time_t)(h->start_ns / 1000000000ull);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&st));
	printf("pid %d  %s  endpoint %u  %s(segment %s)\n", h->pid, h->prog, h->endpoint,
	       s->alive ? "" : "EXITED ", name);
	printf("  host %s  interface %s  mac %s  mtu %u  driver %s  uid %u\n",
	       h->host[0] ? h->host : "(not in config)", h->ifname, mac_str(mac, h->mac), h->mtu, h->driver, h->uid);
	printf("  config %s\n", h->conf_path[0] ? h->conf_path : "(given by the program)");
	printf("  started %s  uptime %s  updated %.2f s ago (%" PRIu64 " updates)\n", when, dur(b[0], uptime(s, now)),
	       now - (double)h->update_ns / 1e9, h->updates);
	printf("  engine: %u peers (of %u), %u transfer records (of %u descriptors), %sB memory\n", h->peers_used,
	       h->engine_max_peers, h->records_used, h->ndesc, human(b[1], (double)h->mem_bytes, 1024));
	printf("counters:\n");
	int col = 0;
	for (uint32_t i = 0; i < h->ncounters; i++) {
		if (!strncmp(s->ctr[i].name, "drop.", 5))
			continue;
		printf("  %-17.24s %14" PRIu64 "%s", s->ctr[i].name, s->ctr[i].value, ++col % 3 ? "" : "\n");
	}
	if (col % 3)
		putchar('\n');
	printf("drops by reason (total %" PRIu64 ")%s\n", val(s, "drops_total"), val(s, "drops_total") ? ":" : "");
	for (uint32_t i = 0; i < h->ncounters; i++)
		if (!strncmp(s->ctr[i].name, "drop.", 5) && s->ctr[i].value)
			printf("  %-17.19s %14" PRIu64 "\n", s->ctr[i].name + 5, s->ctr[i].value);
	int traffic = !!(h->flags & EMP_STATS_F_PEER_TRAFFIC);
	printf("peers: %u%s\n", h->npeers, h->npeers < h->peers_used ? " shown (table full)" : "");
	if (h->npeers)
		printf("  %4s %-12s %5s %-5s %-4s %-11s %7s %8s %8s %8s %8s %7s\n", "HOST", "NAME", "EP", "STATE",
		       "LIFE", "INFLIGHT", "CREDITS", "TX_FRM", "TX_B", "RX_FRM", "RX_B", "RETRANS");
	for (uint32_t i = 0; i < h->npeers; i++) {
		const struct emp_stats_peer *p = &s->peer[i];
		char infl[24], t[5][16];
		snprintf(infl, sizeof(infl), "%u/%u", p->inflight_frames, p->inflight_msgs);
		printf("  %4u %-12.12s %5u %-5s %-4u %-11s %7u", p->host, p->name, p->ep, peer_state(p->state),
		       p->life, infl, p->credits);
		if (traffic)
			printf(" %8s %8s %8s %8s %7s\n", human(t[0], (double)p->tx_frames, 1000),
			       human(t[1], (double)p->tx_bytes, 1024), human(t[2], (double)p->rx_frames, 1000),
			       human(t[3], (double)p->rx_bytes, 1024), human(t[4], (double)p->retransmits, 1000));
		else
			printf(" %8s %8s %8s %8s %7s\n", "-", "-", "-", "-", "-");
	}
	unsigned nc = 0;
	for (uint32_t i = 0; i < h->nconns; i++)
		nc += s->conn[i].used != 0;
	printf("connections: %u%s\n", nc, nc ? "" : " (published by the sockets layer, emp-run)");
	if (nc)
		printf("  %5s %-21s %-21s %-12s %-8s %8s %8s %9s\n", "FD", "LOCAL", "REMOTE", "STATE", "PEER", "IN",
		       "OUT", "CRED_TX/RX");
	for (uint32_t i = 0; i < h->nconns; i++) {
		const struct emp_stats_conn *c = &s->conn[i];
		char l[32], r[32], peer[24], cr[24], t[2][16];
		if (!c->used)
			continue;
		if (c->c.peer_host == EMP_ANY_HOST)
			snprintf(peer, sizeof(peer), "-");
		else
			snprintf(peer, sizeof(peer), "%u:%u", c->c.peer_host, c->c.peer_ep);
		snprintf(cr, sizeof(cr), "%u/%u", c->c.credits_tx, c->c.credits_rx);
		printf("  %5d %-21s %-21s %-12.16s %-8s %8s %8s %9s\n", c->c.fd,
		       addr_str(l, c->c.local_ip, c->c.local_port), addr_str(r, c->c.remote_ip, c->c.remote_port),
		       c->c.state, peer, human(t[0], (double)c->c.bytes_in, 1024),
		       human(t[1], (double)c->c.bytes_out, 1024), cr);
	}
}

/* One refresh; returns how many endpoints matched. */
static int show(const struct opts *o, int watching)
{
	static struct emp_stats_id ids[MAXSEG];
	int n = emp_stats_list(ids, MAXSEG), shown = 0, stale = 0;
	double now = now_real();
	if (n < 0 && n != -ENOENT) {
		fprintf(stderr, "empstat: %s: %s\n", EMP_STATS_DIR, strerror(-n));
		exit(1);
	}
	if (n > MAXSEG)
		n = MAXSEG;
	if (o->json)
		printf("{\"time\":%.3f,\"endpoints\":[", now);
	else if (!o->pid)
		list_header(watching);
	for (int i = 0; i < n; i++) {
		struct emp_stats_snapshot s;
		if ((o->pid && ids[i].pid != o->pid) || (o->ep >= 0 && ids[i].ep != (unsigned)o->ep))
			continue;
		/* a torn copy of a live writer (-EAGAIN: preempted in the middle
		 * of an update for longer than the read's own retries, seen under
		 * CPU hogs) or a segment still being created: asked for by pid,
		 * it is read again for up to a second rather than left out */
		int rc = emp_stats_read(ids[i].name, &s);
		for (int t = 0; rc == -EAGAIN && o->pid && t < 100; t++) {
			struct timespec ts = { 0, 10000000 };
			nanosleep(&ts, NULL);
			rc = emp_stats_read(ids[i].name, &s);
		}
		if (rc < 0)
			continue;         /* being created, or vanished meanwhile */
		if (!s.alive && !o->all) {
			stale++;
			emp_stats_release(&s);
			continue;
		}
		if (o->json) {
			if (shown)
				putchar(',');
			json_endpoint(ids[i].name, &s, now);
		} else if (o->pid) {
			if (shown)
				putchar('\n');
			detail(ids[i].name, &s, now);
		} else {
			list_line(ids[i].name, &s, now, watching);
		}
		shown++;
		emp_stats_release(&s);
	}
	if (o->json)
		printf("],\"stale\":%d}\n", stale);
	else if (stale)
		fprintf(stderr, "empstat: %d segment(s) of exited processes skipped (-a shows them, --clean removes them)\n",
			stale);
	fflush(stdout);
	return shown;
}

static int clean_errors;
static void clean_report(const char *name, int err, void *arg)
{
	if (err) {
		fprintf(stderr, "empstat: cannot remove %s/%s: %s\n", EMP_STATS_DIR, name, strerror(err));
		clean_errors++;
	} else {
		printf("removed %s/%s\n", EMP_STATS_DIR, name);
	}
}

int main(int argc, char **argv)
{
	struct opts o = { .count = -1, .ep = -1 };
	int clean = 0, c;
	static const struct option lo[] = {
		{ "watch", 1, 0, 'w' }, { "count", 1, 0, 'c' }, { "endpoint", 1, 0, 'e' }, { "json", 0, 0, 'j' },
		{ "all", 0, 0, 'a' }, { "clean", 0, 0, 'C' }, { "help", 0, 0, 'h' }, { 0 }
	};
	while ((c = getopt_long(argc, argv, "w:c:e:jah", lo, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'w':
			o.every = strtod(optarg, &end);
			if (*end || !(o.every > 0) || o.every > 86400)
				usage_exit("-w wants seconds > 0");
			break;
		case 'c':
			o.count = strtol(optarg, &end, 10);
			if (*end || o.count < 1)
				usage_exit("-c wants a count >= 1");
			break;
		case 'e':
			o.ep = (int)strtol(optarg, &end, 10);
			if (*end || o.ep < 0 || o.ep > 65535)
				usage_exit("-e wants an endpoint id 0..65535");
			break;
		case 'j': o.json = 1; break;
		case 'a': o.all = 1; break;
		case 'C': clean = 1; break;
		case 'h': fputs(help, stdout); return 0;
		default: usage_exit("unknown option");
		}
	}
	if (optind < argc) {
		char *end;
		long p = strtol(argv[optind], &end, 10);
		if (*end || p <= 0 || p > 0x7fffffff || optind + 1 < argc)
			usage_exit("the argument is one PID");
		o.pid = (int)p;
	}
	if (clean) {
		int n = emp_stats_clean(clean_report, NULL);
		if (n < 0 && n != -ENOENT) {
			fprintf(stderr, "empstat: %s: %s\n", EMP_STATS_DIR, strerror(-n));
			return 1;
		}
		printf("%d stale segment(s) removed\n", n < 0 ? 0 : n);
		return clean_errors ? 1 : 0;
	}
	int watching = o.every > 0 || o.count > 1;
	if (o.count < 0)
		o.count = o.every > 0 ? -1 : 1;
	if (!(o.every > 0))
		o.every = 1.0;
	int tty = isatty(1) && !o.json;
	for (long i = 0; o.count < 0 || i < o.count; i++) {
		if (i) {
			struct timespec ts = { (time_t)o.every, (long)(fmod(o.every, 1.0) * 1e9) };
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
			if (tty)
				fputs("\033[H\033[J", stdout);
			else if (!o.json)
				putchar('\n');
		}
		int shown = show(&o, watching);
		if (!shown && o.pid && !watching) {
			fprintf(stderr, "empstat: no EMP endpoint published by pid %d%s\n", o.pid,
				o.ep >= 0 ? " with that endpoint id" : "");
			return 1;
		}
	}
	return 0;
}
