/* stats.h: the published statistics segment /dev/shm/emp.<pid>.<ep>: its layout, the connection-table API, the reader. */
#ifndef EMP_STATS_H
#define EMP_STATS_H

#include <stddef.h>
#include <stdint.h>
#include "emp.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every open endpoint publishes one POSIX shared-memory segment, named
 * "/emp.<pid>.<endpoint>" (a name already taken, by a live process of another
 * pid namespace or a leftover, makes it "/emp.<pid>.<endpoint>.<n>"), file
 * /dev/shm/emp.<pid>.<endpoint>, created with O_EXCL, mode 0600 (0640 and
 * that group with `option stats_group GROUP`). The progress thread rewrites it
 * at most every 100 ms while counters move (every second when idle); readers
 * copy it (pread into their own buffer, under a sequence lock) and never stop
 * the process. emp_close unlinks it; segments of processes that died are
 * skipped by readers and removed by emp_stats_clean (empstat --clean) and, off
 * the caller's thread, by the progress thread of the next endpoint opened on
 * the machine: only the caller's own user's, and only when the publisher is
 * provably gone (same pid namespace, and its pid dead or another process).
 * Nothing that protects a session (incarnations, session numbers) is
 * published. EMP_STATS=0 in the environment turns publishing off.
 *
 * Every file under /dev/shm may be hostile: readers open with O_NOFOLLOW and
 * O_NONBLOCK and take only regular files; the header is read once and
 * everything after it is bounded by the reader's own copy.
 *
 * Layout (version 3, native byte order): struct emp_stats_hdr, then
 * hdr.ncounters struct emp_stats_counter at hdr.counters_off, hdr.max_peers
 * struct emp_stats_peer at hdr.peers_off (hdr.npeers valid), hdr.nconns
 * struct emp_stats_conn at hdr.conns_off. Static fields are written before
 * magic; hdr.seq is odd while the counters, usage and peer rows change; each
 * connection slot has its own seq.
 */
#define EMP_STATS_DIR       "/dev/shm"
#define EMP_STATS_MAGIC     0x31544154534d5045ull   /* "EMPSTAT1" read little-endian */
#define EMP_STATS_VERSION   3u
#define EMP_STATS_MAX_PEERS 256u                     /* peer rows published */
#define EMP_STATS_MAX_CONNS 256u                     /* connection slots */
#define EMP_STATS_MAX_COUNTERS 96u
#define EMP_STATS_MAX_SIZE  (16u << 20)                /* a larger segment is not one of ours */

#define EMP_STATS_F_PEER_TRAFFIC 1u   /* per-peer frames/bytes/retransmits are filled */

enum emp_stats_peer_state { EMP_STATS_PEER_NEW = 0, EMP_STATS_PEER_HELLO = 1, EMP_STATS_PEER_UP = 2 };

struct emp_stats_hdr {
	uint64_t magic;              /* EMP_STATS_MAGIC once the static part is valid */
	uint32_t version;            /* EMP_STATS_VERSION */
	uint32_t size;               /* bytes of the whole segment */
	uint32_t seq;                /* sequence lock: odd while the dynamic part is written */
	int32_t  pid;
	uint16_t endpoint;
	int16_t  self_host;          /* own index in the config, -1 if the MAC is not in it */
	uint32_t uid;                /* publisher's effective uid when it opened the endpoint */
	uint32_t mtu;
	uint32_t flags;              /* EMP_STATS_F_* */
	uint8_t  mac[6];
	uint8_t  pad0[2];
	uint64_t proc_start;         /* process start, clock ticks after boot (/proc/PID/stat field 22) */
	uint64_t pidns;              /* inode of the publisher's pid namespace (0: unknown): pid means
				      * something only to a reader in the same namespace */
	uint64_t start_ns;           /* endpoint opened, CLOCK_REALTIME ns */
	char     prog[16];           /* /proc/self/comm */
	char     ifname[32];         /* interface, or the driver name for drivers without one */
	char     driver[16];
	char     host[64];           /* own peer name in the config, "" if none */
	char     conf_path[256];
	uint32_t ncounters, counters_off;
	uint32_t max_peers, peers_off;
	uint32_t nconns, conns_off;
	uint32_t counter_size, peer_size, conn_size;
	uint32_t ndesc;              /* descriptor table size */
	uint32_t engine_max_peers;   /* peers the engine can track */
	uint32_t pad1;
	/* ---- dynamic part, under seq ---- */
	uint64_t update_ns;          /* last update, CLOCK_REALTIME ns */
	uint64_t updates;
	uint64_t mem_bytes;          /* engine memory reserved */
	uint32_t peers_used;         /* peers the engine tracks */
	uint32_t records_used;       /* transfer records in use (messages in flight or posted) */
	uint32_t npeers;             /* valid peer rows (<= max_peers) */
	uint32_t pad2;
	uint64_t reserved[8];
};

struct emp_stats_counter {
	char name[24];               /* struct emp_counters field, or "drop.<reason>" */
	uint64_t value;
};

struct emp_stats_peer {
	uint16_t host, ep;           /* route-table index, endpoint id */
	uint8_t  state;              /* enum emp_stats_peer_state: our session toward them */
	uint8_t  rx_known;           /* they hold a session toward us */
	uint8_t  pad[2];
	uint32_t life;               /* 1 for the first life (incarnation) of theirs we saw, +1 per
				      * restart seen; 0: none known (the incarnation is not published) */
	uint32_t inflight_frames, inflight_msgs;
	uint32_t credits;            /* their last advertised free receives (as far as we use them) */
	uint32_t srtt_us, rto_us;    /* smoothed round trip and retransmit timeout toward them */
	uint32_t pad1;
	char     name[64];           /* config name of the host */
	/* valid only with EMP_STATS_F_PEER_TRAFFIC */
	uint64_t tx_frames, tx_bytes, rx_frames, rx_bytes, retransmits;
};

/* One sockets-layer connection, as the preload shim describes it. */
struct emp_conn_info {
	int32_t  fd;
	uint32_t local_ip, remote_ip;        /* IPv4, network byte order */
	uint16_t local_port, remote_port;    /* host byte order */
	uint16_t peer_host, peer_ep;         /* EMP address carrying it; EMP_ANY_HOST: none */
	char     state[16];                  /* free text: "emp", "kernel", "negotiating", ... */
	uint64_t bytes_in, bytes_out;
	uint32_t credits_tx;                 /* messages we may send now */
	uint32_t credits_rx;                 /* receives we hold posted for the peer */
};

struct emp_stats_conn {
	uint32_t seq;                /* per-slot sequence lock */
	uint32_t used;
	struct emp_conn_info c;
};

/* ---- publishing side (the process that owns the endpoint) ---- */

/* Describe connection slot (0 .. EMP_STATS_MAX_CONNS-1); c NULL frees it.
 * Cheap (a mutex and a copy); 0, -EINVAL (slot), -ENOENT (not published). */
int emp_stats_conn_set(emp_endpoint_t *ep, unsigned slot, const struct emp_conn_info *c);
/* Rewrite the segment now (endpoints without a progress thread call this). */
int emp_stats_update(emp_endpoint_t *ep);
/* The segment's name without "/" or directory, e.g. "emp.1234.1"; -ENOENT. */
int emp_stats_name(emp_endpoint_t *ep, char *buf, size_t len);

/* ---- reading side (empstat and tests) ---- */

struct emp_stats_id {
	char name[64];               /* "emp.<pid>.<ep>[.<n>]" */
	int pid;
	unsigned ep, n;
};

struct emp_stats_snapshot {
	void *buf;                   /* private copy of the segment */
	size_t len;
	const struct emp_stats_hdr *hdr;
	const struct emp_stats_counter *ctr;   /* hdr->ncounters */
	const struct emp_stats_peer *peer;     /* hdr->npeers */
	const struct emp_stats_conn *conn;     /* hdr->nconns slots, see .used */
	int alive;                   /* the publishing process still runs */
};

/* Segment names under EMP_STATS_DIR, sorted by pid, endpoint, n; returns how
 * many exist (may exceed max; only max are stored), or -errno. */
int emp_stats_list(struct emp_stats_id *ids, int max);
/* A consistent copy of one segment: 0, -ENOENT, -EAGAIN (being created,
 * truncated, or written too often to copy), -EPROTO (malformed),
 * -EPROTONOSUPPORT (version), -ELOOP (a symlink), -EINVAL (not a regular
 * file: FIFO, device...), -EPERM (owned by a user the publishing process is
 * not), -EACCES. Never blocks, whatever the file is. */
int emp_stats_read(const char *name, struct emp_stats_snapshot *s);
void emp_stats_release(struct emp_stats_snapshot *s);
/* 0 and *v, or -ENOENT for a counter name the segment does not have. */
int emp_stats_value(const struct emp_stats_snapshot *s, const char *name, uint64_t *v);
/* 1 if pid runs and (proc_start 0 or) started at proc_start, else 0. */
int emp_stats_pid_alive(int pid, uint64_t proc_start);
/* Remove segments of dead processes: only regular files owned by the
 * caller's effective uid whose header names the pid of their name, the
 * caller's pid namespace, and a process that is gone (pid dead, a zombie, or
 * started at another time). report(name, err, arg) is called for each (may be
 * NULL). Returns how many were removed, or -errno. Never blocks. */
int emp_stats_clean(void (*report)(const char *name, int err, void *arg), void *arg);

/* ---- libemp internals (endpoint.c, progress.c, the fuzzer) ---- */
/* Validates a private copy of a whole segment (len bytes, len == its size
 * field) and points s at it (s->buf = buf, not freed); terminates its
 * strings. 0 or -EPROTO/-EPROTONOSUPPORT/-EAGAIN. */
int emp__stats_check(void *buf, size_t len, struct emp_stats_snapshot *s);
/* Inode of this process's pid namespace, 0 if /proc does not show it. */
uint64_t emp__stats_pidns(void);
struct ev_loop;
void emp__stats_publish(emp_endpoint_t *ep);
void emp__stats_unpublish(emp_endpoint_t *ep);
void emp__stats_attach(emp_endpoint_t *ep, struct ev_loop *loop);
/* EMP_DEBUG=1..3 logging to stderr with an "emp: " prefix; level 0 always prints. */
int emp__log_level(void);
void emp__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
