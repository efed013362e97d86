/* stats.c: publishing an endpoint's statistics segment: create at open, seqlocked updates from the progress thread, connection slots, debug deltas, unlink at close. */
#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "sys.h"
#include "internal.h"
#include "stats.h"

_Static_assert(sizeof(struct emp_stats_hdr) % 8 == 0 && sizeof(struct emp_stats_peer) % 8 == 0 &&
	       sizeof(struct emp_stats_conn) % 8 == 0, "segment rows stay 8-byte aligned");

#define PERIOD_BUSY 0.1              /* seconds between updates while counters move */
#define PERIOD_IDLE 1.0              /* ... after IDLE_TICKS updates without change */
#define IDLE_TICKS  10
/* The progress thread's update takes the engine lock only when it is free: a
 * writer that drives the engine back to back (one iperf3 stream) holds it
 * most of the time, and a blocking lock there queued the progress thread on
 * the mutex's futex, woken at each of the writer's unlocks and beaten to the
 * lock again (1000-2200 wake-ups a second, each unlock a futex wake in the
 * writer). The update tries the lock for up to BUSY_SPIN_NS without queueing
 * on it (the writer lets go between its drives); still busy, it is tried again
 * after BUSY_RETRY, and after BUSY_TRIES such tries it waits for the lock, so
 * the segment is never more than about PERIOD_BUSY + BUSY_TRIES * BUSY_RETRY
 * old. */
#define BUSY_SPIN_NS 200000ull
#define BUSY_RETRY   0.001
#define BUSY_TRIES   50

struct emp_stats {
	struct emp_stats *next;
	struct emp_endpoint *ep;
	pthread_mutex_t upd;             /* one update() at a time (progress thread, emp_stats_update) */
	char name[64];                   /* shm name, with the leading '/' */
	int pid;                         /* publisher; a forked child must not unlink */
	struct emp_stats_hdr *hdr;       /* NULL: not published (EMP_STATS=0 or no /dev/shm) */
	size_t size;
	struct emp_stats_counter *ctr;
	struct emp_stats_peer *peer;
	struct emp_stats_conn *conn;
	uint32_t nctr;
	uint16_t ctr_off[EMP_STATS_MAX_COUNTERS];  /* offset of each counter in struct emp_counters */
	uint8_t ctr_size[EMP_STATS_MAX_COUNTERS];  /* 8 or 4 bytes */
	struct ev_loop *loop;
	ev_timer tm;
	int idle;
	int busy;                        /* tries in a row that found the engine lock taken */
	int cleaned;                     /* the stale-segment scan ran (progress thread, first tick) */
	uint64_t open_mono;
	struct emp_counters last;
	uint64_t lastv[EMP_STATS_MAX_COUNTERS];    /* published values (padding-free comparison) */
	uint8_t pstate[EMP_STATS_MAX_PEERS];        /* last state | rx_known << 4 */
	uint32_t pinc[EMP_STATS_MAX_PEERS];         /* their incarnation at the last update (never published) */
	uint32_t rinc[EMP_STATS_MAX_PEERS];         /* ... and now */
	uint32_t pkey[EMP_STATS_MAX_PEERS];         /* host << 16 | ep of each row */
	uint32_t plife[EMP_STATS_MAX_PEERS];        /* published life number of each row */
	uint32_t nseen;                  /* peers seen by the last update */
	struct emp_stats_peer rows[EMP_STATS_MAX_PEERS];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  /* registry and every segment write */
static struct emp_stats *reg;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;

/* Every field of struct emp_counters but drops[] (published as drop.<reason>);
 * test_stats checks that none is missing when the engine adds one. */
#define F(x) { #x, offsetof(struct emp_counters, x), sizeof(((struct emp_counters *)0)->x) }
static const struct { const char *name; size_t off, size; } fields[] = {
	F(tx_frames), F(tx_bytes), F(rx_frames), F(rx_bytes), F(tx_data), F(rx_data), F(tx_acks),
	F(rx_acks), F(tx_nacks), F(rx_nacks), F(retransmits), F(timeouts), F(fast_retransmits),
	F(msgs_sent), F(msgs_received), F(bytes_sent), F(bytes_received), F(send_errors),
	F(recv_errors), F(peer_restarts), F(hellos), F(stale_sent), F(probes_sent), F(posts_refused), F(cq_overflow), F(piggy_acks), F(spurious_rtx), F(fc_stalls), F(recv_expired), F(cancelled), F(replies_limited), F(mtu_mismatch), F(peers_reclaimed), F(acks_merged), F(rx_gathers), F(byes_sent), F(peers_departed), F(rx_direct), F(rx_lent), F(lent_placed), F(rx_bulk), F(bye_completed),
	F(last_mismatch_mtu), F(drops_total),
};
#undef F
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *const state_names[] = { "new", "hello", "up" };

static struct emp_stats *find(struct emp_endpoint *ep)
{
	for (struct emp_stats *s = reg; s; s = s->next)
		if (s->ep == ep)
			return s;
	return NULL;
}

/* sequence lock, writer side (callers hold mu) */
static void seq_begin(uint32_t *seq)
{
	__atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void seq_end(uint32_t *seq)
{
	__atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void read_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	out[0] = 0;
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
}

/* start time of this process (field 22 of /proc/self/stat, clock ticks) */
static uint64_t own_start(void)
{
	char buf[1024];
	read_line("/proc/self/stat", buf, sizeof(buf));
	char *p = strrchr(buf, ')');
	unsigned long long v = 0;
	for (int field = 2; p && *p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		v = strtoull(p + 1, NULL, 10);
	return v;
}

/* the interface an AF_PACKET socket is bound to; else the driver's name */
static void ifname_of(struct emp_endpoint *ep, char *out, size_t len)
{
	struct sockaddr_ll sll;
	socklen_t sl = sizeof(sll);
	char tmp[IF_NAMESIZE];
	int fd = ep->ops->wait_fd ? ep->ops->wait_fd(ep->dev) : -1;
	if (fd >= 0 && getsockname(fd, (struct sockaddr *)&sll, &sl) == 0 && sll.sll_family == AF_PACKET &&
	    if_indextoname((unsigned)sll.sll_ifindex, tmp)) {
		snprintf(out, len, "%s", tmp);
		return;
	}
	snprintf(out, len, "%s", ep->ops->name);
}

static void fill_static(struct emp_stats *s)
{
	struct emp_endpoint *ep = s->ep;
	struct emp_stats_hdr *h = s->hdr;
	h->version = EMP_STATS_VERSION;
	h->size = (uint32_t)s->size;
	h->pid = s->pid;
	h->endpoint = ep->epid;
	h->self_host = (int16_t)ep->self;
	h->uid = (uint32_t)geteuid();
	h->mtu = ep->fwc.mtu;
	memcpy(h->mac, ep->mac, 6);
	h->proc_start = own_start();
	h->pidns = emp__stats_pidns();
	h->start_ns = realtime_ns();
	read_line("/proc/self/comm", h->prog, sizeof(h->prog));
	ifname_of(ep, h->ifname, sizeof(h->ifname));
	snprintf(h->driver, sizeof(h->driver), "%s", ep->ops->name);
	if (ep->self >= 0)
		snprintf(h->host, sizeof(h->host), "%s", ep->conf.peers[ep->self].name);
	snprintf(h->conf_path, sizeof(h->conf_path), "%s", ep->conf.path);
	h->ndesc = ep->ndesc;
	h->engine_max_peers = ep->fwc.max_peers;
	h->counter_size = sizeof(struct emp_stats_counter);
	h->peer_size = sizeof(struct emp_stats_peer);
	h->conn_size = sizeof(struct emp_stats_conn);
	h->ncounters = s->nctr;
	h->counters_off = (uint32_t)((char *)s->ctr - (char *)h);
	h->max_peers = EMP_STATS_MAX_PEERS;
	h->peers_off = (uint32_t)((char *)s->peer - (char *)h);
	h->nconns = EMP_STATS_MAX_CONNS;
	h->conns_off = (uint32_t)((char *)s->conn - (char *)h);
	for (uint32_t i = 0; i < s->nctr; i++) {
		if (i < NFIELDS)
			snprintf(s->ctr[i].name, sizeof(s->ctr[i].name), "%s", fields[i].name);
		else
			snprintf(s->ctr[i].name, sizeof(s->ctr[i].name), "drop.%s", emp__drop_names[i - NFIELDS]);
	}
	for (uint32_t i = 0; i < EMP_STATS_MAX_CONNS; i++)
		s->conn[i].c.fd = -1;
	h->flags |= EMP_STATS_F_PEER_TRAFFIC;
	__atomic_store_n(&h->magic, EMP_STATS_MAGIC, __ATOMIC_RELEASE);
}

/* The group of `option stats_group` (a name or a number), or -1 if none. */
static gid_t stats_gid(const struct emp_endpoint *ep)
{
	const char *g = ep->conf.opt.stats_group;
	char *end, buf[4096];
	struct group gr, *res = NULL;
	if (!g[0])
		return (gid_t)-1;
	unsigned long v = strtoul(g, &end, 10);
	if (*g >= '0' && *g <= '9' && !*end && v < 0xffffffffUL)
		return (gid_t)v;
	if (getgrnam_r(g, &gr, buf, sizeof(buf), &res) || !res) {
		emp__log(0, "option stats_group %s: no such group; statistics stay readable by their owner only", g);
		return (gid_t)-1;
	}
	return res->gr_gid;
}

/* Create and map the segment (mu held): a new file (O_EXCL: a name taken by
 * anyone, for whatever reason, is skipped, never reused), ours, mode 0600 or
 * 0640 with the configured group. */
static int create(struct emp_stats *s)
{
	size_t off_ctr = (sizeof(struct emp_stats_hdr) + 63) & ~(size_t)63;
	size_t off_peer = off_ctr + EMP_STATS_MAX_COUNTERS * sizeof(struct emp_stats_counter);
	size_t off_conn = off_peer + EMP_STATS_MAX_PEERS * sizeof(struct emp_stats_peer);
	size_t size = off_conn + EMP_STATS_MAX_CONNS * sizeof(struct emp_stats_conn);
	size = (size + 4095) & ~(size_t)4095;
	int fd = -1;
	for (unsigned k = 0; k < 64 && fd < 0; k++) {
		if (k)
			snprintf(s->name, sizeof(s->name), "/emp.%d.%u.%u", s->pid, s->ep->epid, k);
		else
			snprintf(s->name, sizeof(s->name), "/emp.%d.%u", s->pid, s->ep->epid);
		fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		emp__sys_close(fd);                /* cannot happen with O_EXCL; never write into what is not ours */
		return -EPERM;
	}
	mode_t mode = 0600;
	gid_t gid = stats_gid(s->ep);
	if (gid != (gid_t)-1) {
		if (fchown(fd, (uid_t)-1, gid) == 0)
			mode = 0640;
		else
			emp__log(0, "option stats_group %s: %s; statistics stay readable by their owner only",
				 s->ep->conf.opt.stats_group, strerror(errno));
	}
	fchmod(fd, mode);                 /* whatever the umask says */
	void *m = MAP_FAILED;
	int rc = ftruncate(fd, (off_t)size) == 0 ? 0 : -errno;
	if (rc == 0) {
		m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			rc = -errno;
	}
	emp__sys_close(fd);
	if (rc < 0) {
		shm_unlink(s->name);
		return rc;
	}
	s->hdr = m;
	s->size = size;
	s->ctr = (struct emp_stats_counter *)((char *)m + off_ctr);
	s->peer = (struct emp_stats_peer *)((char *)m + off_peer);
	s->conn = (struct emp_stats_conn *)((char *)m + off_conn);
	fill_static(s);
	return 0;
}

static void unlink_all_at_exit(void)
{
	pthread_mutex_lock(&mu);
	for (struct emp_stats *s = reg; s; s = s->next)
		if (s->hdr && s->pid == getpid())
			shm_unlink(s->name);
	pthread_mutex_unlock(&mu);
}

static void fork_prepare(void) { pthread_mutex_lock(&mu); }
static void fork_parent(void) { pthread_mutex_unlock(&mu); }
static void fork_child(void) { pthread_mutex_unlock(&mu); }

/* at exit: unlink what emp_close did not; at fork: the child must not
 * inherit mu locked by a progress thread that does not exist there */
static void reg_handlers(void)
{
	atexit(unlink_all_at_exit);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Peer rows from the engine's read-only peer view (engine lock held). */
static uint32_t read_peers(struct emp_stats *s)
{
	struct emp_peer_info pi[EMP_STATS_MAX_PEERS];   /* ~25 KiB of the caller's stack */
	uint32_t n = emp__fw_peers(s->ep->fw, pi, EMP_STATS_MAX_PEERS);
	if (n > EMP_STATS_MAX_PEERS)
		n = EMP_STATS_MAX_PEERS;
	for (uint32_t i = 0; i < n; i++) {
		const struct emp_peer_info *p = &pi[i];
		struct emp_stats_peer *r = &s->rows[i];
		r->host = p->host;
		r->ep = p->ep;
		r->state = p->tx_state;
		r->rx_known = p->rx_known;
		s->rinc[i] = p->remote_inc;
		r->inflight_frames = p->inflight_frames;
		r->inflight_msgs = p->inflight_msgs;
		r->credits = p->credits;
		r->srtt_us = (uint32_t)(p->srtt_ns / 1000);
		r->rto_us = (uint32_t)(p->rto_ns / 1000);
		r->tx_frames = p->tx_frames;
		r->tx_bytes = p->tx_bytes;
		r->rx_frames = p->rx_frames;
		r->rx_bytes = p->rx_bytes;
		r->retransmits = p->retransmits;
	}
	return n;
}

/* Each row's life number (1 for the first incarnation seen, +1 per restart:
 * the incarnations themselves stay private); EMP_DEBUG=2: sessions and
 * restarts; 3: every change of the counters. */
static void track_peers(struct emp_stats *s, const struct emp_counters *c, uint32_t n, int moved)
{
	const struct emp_counters *o = &s->last;
	unsigned epid = s->ep->epid;
	for (uint32_t i = 0; i < n; i++) {
		const struct emp_stats_peer *r = &s->rows[i];
		const char *st = r->state < 3 ? state_names[r->state] : "?";
		uint8_t now = (uint8_t)(r->state | r->rx_known << 4);
		uint32_t key = (uint32_t)r->host << 16 | r->ep;
		if (i >= s->nseen || s->pkey[i] != key) {
			s->pkey[i] = key;            /* a new peer, or a row the engine gave another peer */
			s->pinc[i] = 0;
			s->plife[i] = 0;
		}
		if (s->rinc[i] && s->rinc[i] != s->pinc[i])
			s->plife[i]++;
		s->rows[i].life = s->plife[i];
		if (i >= s->nseen)
			emp__log(2, "ep %u: new peer %s:%u, our session %s, theirs %s", epid, r->name, r->ep, st,
				 r->rx_known ? "up" : "none");
		else if ((now & 15) != (s->pstate[i] & 15))
			emp__log(2, "ep %u: session to %s:%u %s", epid, r->name, r->ep, st);
		else if (now != s->pstate[i])
			emp__log(2, "ep %u: %s:%u %s a session toward us", epid, r->name, r->ep,
				 r->rx_known ? "opened" : "closed");
		if (s->pinc[i] && s->rinc[i] && s->rinc[i] != s->pinc[i])
			emp__log(2, "ep %u: %s:%u restarted (life %u)", epid, r->name, r->ep, s->plife[i]);
		s->pstate[i] = now;
		if (s->rinc[i])
			s->pinc[i] = s->rinc[i];
	}
	s->nseen = n;
	if (c->peer_restarts != o->peer_restarts)
		emp__log(2, "ep %u: %llu peer restart(s) seen (total %llu)", epid,
			 (unsigned long long)(c->peer_restarts - o->peer_restarts),
			 (unsigned long long)c->peer_restarts);
	if (c->send_errors != o->send_errors || c->recv_errors != o->recv_errors)
		emp__log(2, "ep %u: %llu send(s), %llu receive(s) failed", epid,
			 (unsigned long long)(c->send_errors - o->send_errors),
			 (unsigned long long)(c->recv_errors - o->recv_errors));
	if (moved)
		emp__log(3, "ep %u: +%llu/%llu frames tx/rx, +%llu retransmits, +%llu timeouts, +%llu drops", epid,
			 (unsigned long long)(c->tx_frames - o->tx_frames),
			 (unsigned long long)(c->rx_frames - o->rx_frames),
			 (unsigned long long)(c->retransmits - o->retransmits),
			 (unsigned long long)(c->timeouts - o->timeouts),
			 (unsigned long long)(c->drops_total - o->drops_total));
}

/* The engine lock; wait 0: only if it is free or comes free within
 * BUSY_SPIN_NS (trylock: never queued on the mutex), else -EBUSY. */
static int lock_engine(struct emp_endpoint *ep, int wait)
{
	if (wait)
		return pthread_mutex_lock(&ep->eng_lock), 0;
	uint64_t t0 = 0;
	while (pthread_mutex_trylock(&ep->eng_lock)) {
		uint64_t now = emp_now_ns();
		if (!t0)
			t0 = now;
		else if (now - t0 >= BUSY_SPIN_NS)
			return -EBUSY;
	}
	return 0;
}

/* Read the engine, log what changed, rewrite the segment; 1 if counters moved.
 * wait 0: -EBUSY, nothing done, when another thread holds the engine. */
static int update(struct emp_stats *s, int wait)
{
	struct emp_endpoint *ep = s->ep;
	struct emp_counters c;
	size_t mem = emp__mem_bytes(ep);
	uint32_t pu = 0, ru = 0;
	pthread_mutex_lock(&s->upd);
	if (lock_engine(ep, wait) < 0) {
		pthread_mutex_unlock(&s->upd);
		return -EBUSY;
	}
	emp__fw_counters(ep->fw, &c);
	emp__fw_usage(ep->fw, &pu, &ru);
	uint32_t n = read_peers(s);
	pthread_mutex_unlock(&ep->eng_lock);
	for (uint32_t i = 0; i < n; i++) {
		uint16_t h = s->rows[i].host;
		snprintf(s->rows[i].name, sizeof(s->rows[i].name), "%s",
			 h < ep->conf.npeers ? ep->conf.peers[h].name : "?");
	}
	uint64_t v[EMP_STATS_MAX_COUNTERS] = { 0 };
	for (uint32_t i = 0; i < s->nctr; i++) {
		const char *p = (const char *)&c + s->ctr_off[i];
		uint32_t v32;
		if (s->ctr_size[i] == 4)
			memcpy(&v32, p, 4), v[i] = v32;
		else
			memcpy(&v[i], p, 8);
	}
	int moved = memcmp(v, s->lastv, s->nctr * sizeof(v[0])) != 0;
	track_peers(s, &c, n, moved);
	memcpy(s->lastv, v, s->nctr * sizeof(v[0]));
	s->last = c;
	if (!s->hdr) {
		pthread_mutex_unlock(&s->upd);
		return moved;
	}
	pthread_mutex_lock(&mu);
	struct emp_stats_hdr *h = s->hdr;
	seq_begin(&h->seq);
	h->update_ns = realtime_ns();
	h->updates++;
	h->mem_bytes = mem;
	h->peers_used = pu;
	h->records_used = ru;
	h->npeers = n;
	for (uint32_t i = 0; i < s->nctr; i++)
		s->ctr[i].value = v[i];
	memcpy(s->peer, s->rows, n * sizeof(s->rows[0]));
	seq_end(&h->seq);
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&s->upd);
	return moved;
}

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct emp_stats *s = w->data;
	if (!s->cleaned && s->hdr) {
		/* tidy up after processes that died: here, on the progress thread,
		 * not in emp_open, whose caller may hold locks of its own */
		s->cleaned = 1;
		emp_stats_clean(NULL, NULL);
	}
	int moved = update(s, s->busy >= BUSY_TRIES);
	if (moved == -EBUSY) {
		s->busy++;
		w->repeat = BUSY_RETRY;
		ev_timer_again(loop, w);
		return;
	}
	s->busy = 0;
	if (moved)
		s->idle = 0;
	else
		s->idle++;
	double want = s->idle >= IDLE_TICKS ? PERIOD_IDLE : PERIOD_BUSY;
	if (w->repeat != want) {
		w->repeat = want;
		ev_timer_again(loop, w);
	}
}

void emp__stats_publish(struct emp_endpoint *ep)
{
	const char *env = secure_getenv("EMP_STATS");
	int on = !(env && env[0] == '0');
	if (!on && emp__log_level() < 1)
		return;
	struct emp_stats *s = calloc(1, sizeof(*s));
	if (!s)
		return;
	s->ep = ep;
	pthread_mutex_init(&s->upd, NULL);
	s->pid = getpid();
	s->open_mono = emp_now_ns();
	for (size_t i = 0; i < NFIELDS; i++) {
		s->ctr_size[s->nctr] = (uint8_t)fields[i].size;
		s->ctr_off[s->nctr++] = (uint16_t)fields[i].off;
	}
	for (int i = 0; i < EMP_DROP_MAX && s->nctr < EMP_STATS_MAX_COUNTERS; i++) {
		s->ctr_size[s->nctr] = 8;
		s->ctr_off[s->nctr++] = (uint16_t)(offsetof(struct emp_counters, drops) + (size_t)i * 8);
	}
	int rc = 0;
	pthread_mutex_lock(&mu);
	if (on)
		rc = create(s);
	s->next = reg;
	reg = s;
	pthread_mutex_unlock(&mu);
	pthread_once(&handlers_once, reg_handlers);
	if (rc < 0)
		emp__log(1, "cannot publish statistics in %s%s: %s", EMP_STATS_DIR, s->name, strerror(-rc));
	update(s, 1);
	if (emp__log_level() >= 1) {
		char mac[18], ifn[32];
		emp_conf_format_mac(ep->mac, mac);
		ifname_of(ep, ifn, sizeof(ifn));
		emp__log(1, "pid %d endpoint %u open: %s %s mtu %u mac %s host %s%s%s", s->pid,
			 ep->epid, ep->ops->name, ifn, ep->fwc.mtu, mac,
			 ep->self >= 0 ? ep->conf.peers[ep->self].name : "(not in config)",
			 s->hdr ? ", statistics in " EMP_STATS_DIR : "", s->hdr ? s->name : "");
	}
}

void emp__stats_attach(struct emp_endpoint *ep, struct ev_loop *loop)
{
	pthread_mutex_lock(&mu);
	struct emp_stats *s = find(ep);
	pthread_mutex_unlock(&mu);
	if (!s || s->loop)
		return;
	s->loop = loop;
	ev_timer_init(&s->tm, tick, PERIOD_BUSY, PERIOD_BUSY);
	s->tm.data = s;
	ev_timer_start(loop, &s->tm);
}

void emp__stats_unpublish(struct emp_endpoint *ep)
{
	pthread_mutex_lock(&mu);
	struct emp_stats **pp = &reg, *s = NULL;
	for (; *pp; pp = &(*pp)->next)
		if ((*pp)->ep == ep) {
			s = *pp;
			*pp = s->next;
			break;
		}
	pthread_mutex_unlock(&mu);
	if (!s)
		return;
	if (emp__log_level() >= 1) {
		struct emp_counters c;
		emp__fw_counters(ep->fw, &c);
		emp__log(1, "pid %d endpoint %u closed after %.1f s: tx %llu frames %llu bytes, rx %llu frames "
			 "%llu bytes, %llu retransmits, %llu drops", s->pid, ep->epid,
			 (double)(emp_now_ns() - s->open_mono) / 1e9, (unsigned long long)c.tx_frames,
			 (unsigned long long)c.tx_bytes, (unsigned long long)c.rx_frames,
			 (unsigned long long)c.rx_bytes, (unsigned long long)c.retransmits,
			 (unsigned long long)c.drops_total);
	}
	if (s->hdr) {
		if (s->pid == getpid())
			shm_unlink(s->name);
		munmap(s->hdr, s->size);
	}
	pthread_mutex_destroy(&s->upd);
	free(s);
}

int emp_stats_update(emp_endpoint_t *ep)
{
	pthread_mutex_lock(&mu);
	struct emp_stats *s = find(ep);
	pthread_mutex_unlock(&mu);
	if (!s)
		return -ENOENT;
	update(s, 1);
	return 0;
}

int emp_stats_name(emp_endpoint_t *ep, char *buf, size_t len)
{
	int rc = -ENOENT;
	pthread_mutex_lock(&mu);
	struct emp_stats *s = find(ep);
	if (s && s->hdr)
		rc = snprintf(buf, len, "%s", s->name + 1) < (int)len ? 0 : -ENOSPC;
	pthread_mutex_unlock(&mu);
	return rc;
}

int emp_stats_conn_set(emp_endpoint_t *ep, unsigned slot, const struct emp_conn_info *c)
{
	if (slot >= EMP_STATS_MAX_CONNS)
		return -EINVAL;
	int rc = -ENOENT;
	pthread_mutex_lock(&mu);
	struct emp_stats *s = find(ep);
	if (s && s->hdr) {
		struct emp_stats_conn *e = &s->conn[slot];
		seq_begin(&e->seq);
		if (c) {
			e->c = *c;
			e->c.state[sizeof(e->c.state) - 1] = 0;
		} else {
			memset(&e->c, 0, sizeof(e->c));
			e->c.fd = -1;
		}
		e->used = c != NULL;
		seq_end(&e->seq);
		rc = 0;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}
