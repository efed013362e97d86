/* es.h: internal interfaces of libempsock.so (sockets over EMP): real calls, fd table, sockets, streams. */
#ifndef EMP_ES_H
#define EMP_ES_H

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "conf.h"
#include "emp.h"

/* ---- real libc functions (init.c) ---- */
struct es_real {
	int (*socket)(int, int, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*bind)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*sendfile64)(int, int, off_t *, size_t);
	int (*close)(int);
	int (*shutdown)(int, int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*fcntl)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	pid_t (*fork)(void);
	int (*execve)(const char *, char *const[], char *const[]);
	/* NULL where the C library has none (close_range, closefrom: glibc 2.34) */
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	int (*close_range)(unsigned, unsigned, int);
	void (*closefrom)(int);
	int (*sigaction)(int, const struct sigaction *, struct sigaction *);
	int (*setuid)(uid_t);
	int (*setreuid)(uid_t, uid_t);
	int (*setresuid)(uid_t, uid_t, uid_t);
	int (*seteuid)(uid_t);
};
extern struct es_real es__real;
#define R_(fn) (es__real.fn ? es__real.fn : (es__resolve(), es__real.fn))
void es__resolve(void);

/* Re-entrancy guard: nonzero while this thread is inside the shim or libemp;
 * every wrapper then passes straight through. */
extern __thread int es__tl_in __attribute__((tls_model("initial-exec")));

/* Process-wide settings (init.c). */
struct es_global {
	int conf_loaded;                 /* 1 config parsed, -1 none/unusable */
	struct emp_conf conf;
	int strict;
	int neg_ms;                      /* negotiation bound per side */
	int neg_known_ms;                /* client's bound toward a server known to speak EMP */
	int min_backlog;                 /* listen(): the kernel's accept queue holds at least this many (sock.c) */
	unsigned nbufs, bufsz;           /* receive buffers per connection, payload bytes each */
	unsigned lend;                   /* EMP_LEND: a message's frames read out of the device's ring (firmware/lent.c) */
	int debug;
	emp_endpoint_t *ep;              /* opened on first EMP connection */
	int ep_failed;
	unsigned gen;                    /* bumped in every forked child */
	pid_t pid;                       /* this process's (set at load and in a forked child) */
	pthread_mutex_t lock;
};
extern struct es_global es__g;
/* A vfork child (posix_spawn's, Python's subprocess) runs on its parent's
 * memory until it execs or exits, but with its own descriptor table: its
 * closes (close_range after vfork, in CPython) must not touch the shim's
 * tables, which are the parent's. One getpid(). */
static inline int es__vfork_child(void) { return es__g.pid && getpid() != es__g.pid; }
int es__conf(void);                           /* 1 if a config is loaded */
emp_endpoint_t *es__engine(void);             /* opens once; NULL on failure */
void es__engine_set(emp_endpoint_t *ep);      /* tests only: use ep (a simulated wire's), init.c */
void es__log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void es__dbg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t es__now_ns(void);
uint64_t es__random64(void);                  /* getrandom(2), buffered (rand.c) */

/* ---- sockets (fdtable.c) ---- */
enum es_state {
	ES_CAND = 1,      /* AF_INET stream, not yet connected/accepted, or listening */
	ES_CONNECTING,    /* non-blocking connect to a configured peer in progress */
	ES_PENDING,       /* connected/accepted to a peer, negotiation not yet run */
	ES_EMP,           /* data over EMP */
	ES_FAILED,        /* strict mode: negotiation failed; every call errors */
	ES_FOREIGN,       /* EMP connection inherited across fork: belongs to the parent */
};

/* A waiting thread's wake-up: whoever changes a socket it waits on sets hit
 * and writes efd only if the thread is asleep (armed) and nobody woke it yet. */
struct es_wake {
	int efd;
	atomic_int asleep;
	atomic_int hit;
	atomic_int written;              /* efd holds a count to drain */
	int look_fds;                    /* es__wait_fds: the spin looks at the caller's fds too */
	int sig_intr;                    /* the wait ends when a handler ran since the call began (sigcatch.c) */
};

struct es_waiter {               /* a wake on one socket's list (s->lock) */
	struct es_wake *wk;
	struct es_waiter *next, *prev;
	unsigned want;                   /* 0: every change; else readiness bits: only when one is set (poll) */
};

struct es_epreg;
struct es_conn;

/* negotiation bookkeeping of a socket (negotiate.c, negserver.c, negclient.c) */
struct es_negst {
	int settling;                    /* a thread is bringing it to a decision */
	int st;                          /* client: NG_* (neg.h), under negclient.c's lock */
	int reg, slot;                   /* client: in the OFFER responder's table (slot) */
	unsigned gen;                    /* process generation of reg/slot */
	int64_t t0, t_offer;             /* client: kernel connect started (moved to the handshake's end once the bound is due: handshake_ns), OFFER answered */
	int t0_hs;                       /* client: t0 already moved to the handshake's end */
	int mark;                        /* server: what the client's SYN said (MARK_*, neg.h) */
	uint64_t skey, ckey;             /* keys of this negotiation (server's, client's) */
	uint32_t lid;                    /* server: our connection id named in the OFFER */
	uint16_t peer_ep;                /* client: the server endpoint of the OFFER we answered */
	uint32_t peer_lid, peer_bufs, peer_bufsz;
	int hello_tries;                 /* client: HELLOs sent again (es__conn_hello_again) */
	int conn_ret;                    /* client: a blocking connect() returns once our ACCEPT and HELLO are out */
	uint32_t early;                  /* client: bytes of the first write sent right behind our HELLO (es__negc_early) */
	atomic_int kgone;                /* the liveness set saw the peer's FIN or reset (a negotiation stepped by a wait) */
	int cl_stepped;                  /* client: a wait runs its negotiation step by step (es__negc_step) */
	struct {                         /* server: an OFFER out before the settle (es__settle_begin) */
		int begun, accepted;
		int stepped;                 /* an epoll wait runs it step by step (es__negs_step) */
		int64_t t0, dl, next, gap, icmp_grace, sent;
		int64_t acc_at;              /* when the ACCEPT was taken */
		uint64_t acc[6];             /* the ACCEPT taken (struct neg_msg) */
	} sv;
};

struct es_sock {
	/* identity and lifetime (fdtable.c, sock.c, linger.c) */
	int kind;                        /* ES_KIND_SOCK */
	pthread_mutex_t lock;
	int state;                       /* ES_*: what the state means is listed below */
	int refs;                        /* fds pointing here */
	int kfd;                         /* one of those fds (the kernel socket) */
	atomic_int users;                /* 1 while in the fd table + calls inside (es__sock_get) */
	int orphan;                      /* closed by the app; a lingering connection frees it */
	int dropped;                     /* went to the kernel: the last put only frees it */
	int kfd_own;                     /* kfd is the shim's duplicate (the app closed its last fd) */
	unsigned gen;
	int err;                         /* sticky error for FAILED */

	/* what the application set (sock.c) */
	int nonblock;
	int bound;                       /* bind() seen: a client's port may be its own (negclient.c) */
	int linger0;
	unsigned tcpopt;                 /* bit n: TCP option n (NODELAY, CORK, QUICKACK) is on */
	int64_t linger_ns;               /* SO_LINGER on with a timeout: close() waits this long for our FIN */
	int64_t rcvtimeo_ns, sndtimeo_ns;   /* 0 = none */
	struct sockaddr_in local, remote;

	/* negotiation (negotiate.c, negserver.c, negclient.c, neglisten.c) */
	int server;                      /* PENDING: 1 accepted, 0 connected */
	int udp;                         /* client: side-channel socket, or -1 */
	struct es_negst ng;

	/* readiness and waiting (ready.c, epoll.c, poll.c) */
	atomic_int dirty;                /* completions to look at; set when lock was busy */
	atomic_uint evmask;              /* readiness (poll bits) as of the last change, under lock */
	atomic_uint seq;                 /* bumped by every change (es__sock_update) */
	uint32_t ident;                  /* this socket's id in the liveness set (ready.c) and timeq.c */
	_Atomic int64_t tq_due;          /* look at it again by then (timeq.c) */
	unsigned tq_gen;                 /* in timeq.c's list: the process generation + 1 (its lock) */
	int live;                        /* kfd in the liveness set */
	unsigned live_ev;                /* with these events */
	atomic_int live_seen;            /* an event came before it was EMP (an accepted socket negotiating) */
	int connected;                   /* CONNECTING: the kernel connect finished (liveness set saw it) */
	struct es_epreg *epregs;         /* registrations in app epoll sets (lock and ep_lock) */
	struct es_waiter *waiters;       /* threads in poll/read/write on it (lock) */

	/* the EMP byte stream (stream_engine.c, stream_app.c, connsetup.c, linger.c) */
	struct es_conn *c;               /* EMP state (ES_EMP) */
};

/* a thread waiting on s (woken through its es_wake by es__sock_update); s->lock held */
static inline void es__waiter_add(struct es_sock *s, struct es_waiter *w, struct es_wake *wk)
{
	w->wk = wk;
	w->want = 0;
	w->prev = NULL;
	w->next = s->waiters;
	if (s->waiters)
		s->waiters->prev = w;
	s->waiters = w;
}

static inline void es__waiter_del(struct es_sock *s, struct es_waiter *w)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		s->waiters = w->next;
	if (w->next)
		w->next->prev = w->prev;
}
#define ES_KIND_SOCK 1
#define ES_KIND_EPSET 2
#define ES_KIND_MARK 4              /* a TCP socket not used yet: a static mark, no object */

/* ---- what a socket's state means (the one place the states are grouped) ----
 *   CAND        kernel TCP, nothing of ours (or not yet connected/accepted)
 *   CONNECTING  undecided; the kernel connect runs; on the ready lists (its end settles it)
 *   PENDING     undecided; connected/accepted, negotiation to run (first use settles it)
 *   EMP         ours: data and readiness from the stream
 *   FAILED      ours, dead: strict mode refused kernel TCP; every call fails with s->err
 *   FOREIGN     ours, dead: the parent's EMP connection; every call fails with EIO
 * Readiness per state: es__events (ready.c); a state change goes with
 * es__sock_update under s->lock, so waiters see the new readiness. */
static inline int es__st_undecided(const struct es_sock *s)
{
	return s->state == ES_CONNECTING || s->state == ES_PENDING;
}

/* negotiating, and a wait settles it step by step: an accepted socket whose
 * OFFER is out, a connect whose first step is done */
static inline int es__st_stepped(const struct es_sock *s)
{
	return s->state == ES_PENDING && (s->ng.sv.begun || s->ng.cl_stepped);
}
/* the shim answers its data calls and readiness (EMP, FAILED, FOREIGN) */
static inline int es__st_ours(const struct es_sock *s)
{
	return s->state == ES_EMP || s->state == ES_FAILED || s->state == ES_FOREIGN;
}
/* what a waiter asking for interest (poll/epoll bits) sees of s's readiness:
 * errors and hangups whatever it asked (poll.c, epoll.c) */
static inline unsigned es__ready_for(struct es_sock *s, unsigned interest)
{
	return atomic_load(&s->evmask) & (interest | POLLERR | POLLHUP);
}

void *es__fd_get(int fd);                     /* raw table entry */
struct es_sock *es__sock(int fd);             /* entry if it is a socket */
void es__fd_set(int fd, void *obj);
int es__fd_fits(int fd);                      /* fd has a table entry (fs.nr_open at first use, capped) */
struct es_sock *es__sock_new(int fd, int state);
/* socket(): fd marked as a candidate with no allocation and no lock (a
 * signal handler may make and close sockets: async-signal-safe until the
 * socket is used); es__sock_cand makes the object at its first use that needs
 * one (connect, listen, options, epoll_ctl); es__mark_* act on the mark alone. */
void es__mark_cand(int fd, int nonblock);
struct es_sock *es__sock_cand(int fd);        /* the socket, made from a mark if need be */
int es__is_mark(const void *o);
int es__mark_nonblock(int fd, int on);        /* 1 if fd held a mark (now with that flag) */
void es__sock_unref_fd(int fd, struct es_sock *s); /* table entry dropped; frees on last */
extern void (*es__close_gap_hook)(int fd);   /* tests only: run between a close's kernel close and its table update */
int es__sock_close(int fd, struct es_sock *s);    /* close(2) of a socket's fd, then unref */
/* A call's reference: the socket (and its connection) stays alive until the
 * matching put, even if another thread closes the fd meanwhile (the close's
 * teardown then runs at the last put, as the kernel releases a file only when
 * its last call returns). NULL if fd is not a socket of ours. */
struct es_sock *es__sock_get(int fd);
void es__sock_put(struct es_sock *s);
/* s left the fd table for good (last fd closed, or it went to the kernel): no
 * new call can find it; the table's reference is dropped */
void es__sock_release(struct es_sock *s);
void es__sock_lock(struct es_sock *s);
void es__sock_unlock(struct es_sock *s);     /* runs deferred completion work first */
int es__fd_max(void);
void es__fd_foreach(void (*fn)(int fd, void *obj, void *arg), void *arg);
void es__fd_lock(void);
void es__fd_unlock(void);
void es__fd_atfork_child(void);

/* ---- fork (fork.c): the one pthread_atfork, the lock order ---- */
/* every process-wide lock of the shim, in lock order (fork.c says it) */
struct es_fork_lock {
	const char *name;
	pthread_mutex_t *const *mu;
	int at_prepare;                  /* held across fork(2) (else re-initialised in the child) */
};
extern const struct es_fork_lock es__fork_locks[];
extern const int es__fork_nlocks;
/* the locks, each owned by its file (fork.c only lists them) */
extern pthread_mutex_t *const es__lk_ep, *const es__lk_neg, *const es__lk_zombies, *const es__lk_tq,
	*const es__lk_global, *const es__lk_settle, *const es__lk_fdtab, *const es__lk_live,
	*const es__lk_lids, *const es__lk_guard, *const es__lk_zwait, *const es__lk_rand,
	*const es__lk_resolve, *const es__lk_hold;
/* the child's fix-ups, called by fork.c in this order after the locks are fresh */
void es__init_atfork_child(void);             /* init.c: no endpoint, generation + 1 */
/* es__fd_atfork_child (above), then: */
void es__conn_atfork_child(void);             /* linger.c */
void es__ep_atfork_child(void);               /* epoll.c */
void es__settle_atfork_child(void);           /* negotiate.c */
void es__negc_atfork_child(void);             /* negclient.c */
void es__conn_rows_atfork_child(void);        /* connsetup.c */
void es__rand_atfork_child(void);             /* rand.c */
void es__hold_atfork_child(void);             /* hold.c */

/* ---- negotiation (negotiate.c, negclient.c, neglisten.c); prefixes: es__neg_
 * shared by both sides (neg.h), es__negc_ the client (negclient.c, negearly.c), es__negs_
 * the server's listeners and port guard (neglisten.c) ---- */
/* Before connect: decide eligibility and prepare the side channel. 1 = candidate, 0 = kernel. */
int es__negc_prepare(struct es_sock *s, const struct sockaddr_in *to);
/* After the kernel connect was issued (it picked the port): the UDP twin
 * takes the same port number; with async (in progress) the process's OFFER
 * responder answers for the socket from now on, whatever the application
 * does. 1, or 0 (no side channel: kernel TCP), or -1 (strict mode: refuse). */
int es__negc_start(struct es_sock *s, int async);
int es__negc_bind(struct es_sock *s, in_port_t port, const struct sockaddr_in *to);
/* listen(): the listener records each SYN (TCP_SAVE_SYN) so that accept can
 * tell a preloaded client from a plain one */
void es__negs_listen(int fd);
/* a negotiation on the server's (ip, port): keep its UDP guard (neglisten.c) */
void es__negs_guard(const struct sockaddr_in *a);
/* the process's negotiation counters, one debug line (the exit summary) */
void es__neg_dump(void);
/* bind() of a UDP socket failed with EADDRINUSE: 1 if a guard held that port and gave way */
int es__negs_guard_yield(const struct sockaddr *sa, socklen_t len);
/* The socket is going away (last fd closed): the responder lets go of it. */
void es__negc_forget(struct es_sock *s);
/* close the negotiation side channel, if open */
void es__neg_close_udp(struct es_sock *s);
int es__to_in(const struct sockaddr *sa, socklen_t len, struct sockaddr_in *out);
/* 0: kernel TCP; else MARK_* of the accepted connection (listener lfd) */
int es__eligible_accept(int lfd, int fd, struct sockaddr_in *local, struct sockaddr_in *remote);
/* fd, an accepted connection es__eligible_accept named, as a pending server
 * socket with mark (sock.c: accept, passfd.c: one received); NULL if no memory */
struct es_sock *es__sock_accepted(int fd, const struct sockaddr_in *l, const struct sockaddr_in *r, int nonblock,
				  int mark);
/* Drive a PENDING/CONNECTING socket to a decision (one thread per socket at a
 * time; others wait for its outcome): a CONNECTING socket whose kernel connect
 * has not finished stays so at once; otherwise this blocks until the
 * negotiation is decided (at most its bound), from poll and epoll_wait too.
 * Returns its state, ES_CAND when it went to the kernel (s is freed then). */
int es__settle(int fd, struct es_sock *s);
/* An accepted socket's negotiation started without waiting (its OFFER goes
 * out; es__settle finishes it): an event loop's accept + epoll_ctl ADD for a
 * backlog of connections sends every OFFER at once, not one round trip each.
 * Returns the state as es__settle does. */
int es__settle_begin(int fd, struct es_sock *s);
/* An epoll wait's look at an undecided socket (accepted, its OFFER out; or
 * a non-blocking connect that finished): one step of its negotiation without
 * waiting (none if another thread settles it); undecided, it comes back on
 * its sets' ready lists when something changes (negserver.c: es__negs_step,
 * negclient.c: es__negc_step). Returns the state as es__settle does. */
int es__settle_step(int fd, struct es_sock *s);
/* fd goes to another process (SCM_RIGHTS) before its first use here: an
 * accepted socket whose negotiation has not begun is left to that process
 * (kernel TCP in this one: this process's own later calls, an epoll_ctl or
 * the close, begin nothing); the caller holds a reference */
void es__settle_give_away(int fd, struct es_sock *s);
/* fd goes to a new program (exec) before its first use here: an accepted
 * socket is settled on kernel TCP and its client told at once (negserver.c
 * es__negs_exec) */
void es__settle_for_exec(int fd, struct es_sock *s);
/* A client's first write while its negotiation waits for the server's
 * HELLO, sent right behind our HELLO over EMP (negearly.c
 * es__negc_early): bytes sent, -1 with errno, or -2 when it cannot go so
 * (the caller settles and writes as usual). */
ssize_t es__settle_early(int fd, struct es_sock *s, const struct iovec *iov, int n, int flags);
/* at exit (es__flush_all): such sockets to their outcome (negearly.c) */
void es__negc_settle_pending(void);
/* sendmsg/recvmsg with control data: descriptors passed to or from another
 * process (SCM_RIGHTS, passfd.c) */
struct msghdr;
void es__scm_out(const struct msghdr *m);
void es__scm_in(const struct msghdr *m);
/* exec.c, for passfd.c: a connection negotiated by this process; what was
 * written goes out and is acknowledged (or the connection ends) by dl */
int es__exec_owned(struct es_sock *s);
void es__exec_flush(struct es_sock *s, int64_t dl);
void es__drop_to_kernel(int fd, struct es_sock *s);
void es__fail_strict(struct es_sock *s, int err, const char *why);

/* ---- byte stream over EMP: set-up (connsetup.c, stream_engine.c), completions and
 * readiness (stream_engine.c), reads and writes (stream_app.c), teardown (linger.c) ---- */
/* receives posted for messages from (peer_host, peer_ep) tagged lid, which
 * must carry key_rx (our key from the negotiation) */
int es__conn_create(struct es_sock *s, uint16_t peer_host, uint16_t peer_ep, uint32_t lid, uint64_t key_rx);
/* peer_ep was EMP_ANY_EP (only control receives posted): now it is known */
int es__conn_bind_ep(struct es_sock *s, uint16_t peer_ep);
uint16_t es__conn_hello_ep(struct es_sock *s);
/* client: our HELLO failed before the server's came; 1 if it went again (lock held) */
int es__conn_hello_again(struct es_sock *s);
uint32_t es__conn_new_lid(void);              /* random, unused in this process */
/* out of engine descriptors: said once per process */
void es__log_once_nobufs(void);
/* 0, or -1 (connection error set) when the send slots or their engine
 * descriptors cannot be had: the negotiation must then decline EMP. */
int es__conn_set_peer(struct es_sock *s, uint16_t ep, uint32_t rid, unsigned nbufs, unsigned bufsz,
		      uint64_t key_tx);
int es__conn_send_hello(struct es_sock *s);
int es__conn_hello_seen(struct es_sock *s);
/* linger.c: the last fd is gone; 1 when the connection lingers (the linger
 * list then owns s); flush: close in order (FIN), else give up */
int es__conn_destroy(struct es_sock *s, int flush);
/* linger.c: at exit every connection closes in order (bounded wait) */
void es__flush_all(void);
int es__exiting(void);          /* linger.c: the exit flush has begun (es__flush_all) */
/* handoff.c: at the end of es__flush_all: a child releases the packet
 * sockets once the process is gone (EMP_EXIT_HANDOFF=0: not) */
void es__handoff_device(void);
uint32_t es__conn_lid(struct es_sock *s);
void es__process(struct es_sock *s);          /* lock held: take the completed requests */
unsigned es__stream_events(struct es_sock *s);  /* an EMP stream's readiness as poll bits; lock held */
ssize_t es__recv(struct es_sock *s, struct iovec *iov, int iovcnt, int flags);
ssize_t es__send(struct es_sock *s, const struct iovec *iov, int iovcnt, int flags);
ssize_t es__send_file(struct es_sock *s, int in, off_t *off, size_t count);   /* sendfile: read into the send slots */
int es__shutdown(struct es_sock *s, int how);
void es__uncork(struct es_sock *s);     /* TCP_CORK off / TCP_NODELAY on: post what corking held (stream_app.c) */
int es__fionread(struct es_sock *s);
int es__outq(struct es_sock *s, int nsd);
int es__so_error(struct es_sock *s);
/* lock held: notice the kernel connection's FIN/RST; wait: drive the engine
 * through the grace for the peer's EMP FIN (else it runs on: timeq.c) */
void es__kernel_check(struct es_sock *s, int wait);
/* lock held: a grace that ran out (by now) or whose FIN came is decided: 0;
 * 1 while it runs (s->tq_due its end) */
int es__kernel_grace_end(struct es_sock *s, int64_t now);
/* wait for a change on s (waiter + kernel fd); 1 woke, 0 timeout, -EINTR; lock held */
int es__wait(struct es_sock *s, int64_t deadline_ns);
/* every caught signal's handler asks for SA_RESTART (sigrestart.c) */
int es__sig_restarts(void);
int es__sig_fault(int sig);   /* SIGSEGV and the like: sent by a fault of the thread that runs */
extern __thread unsigned es__tl_caught __attribute__((tls_model("initial-exec")));   /* sigcatch.c */
extern __thread unsigned es__tl_sig0 __attribute__((tls_model("initial-exec")));     /* at the blocking call's start */
static inline void es__sig_begin(void) { es__tl_sig0 = es__tl_caught; }
static inline int es__sig_caught(void) { return es__tl_caught != es__tl_sig0; }
/* A sleep that a handler must end: the eventfd its sleep polls, and the flag
 * that has its waker drain it. es__sig_sleep: 0, or -EINTR (one ran since
 * the call began; the kick is not left set); es__sig_woke after the sleep. */
struct es_kick { int efd; atomic_int *flag; volatile int fired; };
extern __thread struct es_kick *es__tl_kick __attribute__((tls_model("initial-exec")));
static inline int es__sig_sleep(struct es_kick *k)
{
	es__tl_kick = k;
	atomic_signal_fence(memory_order_seq_cst);
	if (!es__sig_caught())
		return 0;
	es__tl_kick = NULL;
	return -EINTR;
}
static inline void es__sig_woke(void) { es__tl_kick = NULL; }

/* ---- readiness carried with completions (ready.c) ---- */
/* readiness of s in any state, as poll bits; lock held */
unsigned es__events(struct es_sock *s);
/* s changed (edge: something happened, even if its bits did not move):
 * recompute its event mask, put it on the ready lists of its epoll sets and
 * wake the threads waiting on it that sleep; lock held */
void es__sock_update(struct es_sock *s, int edge);
/* libemp's completion hook: the connections that own the requests are processed */
void es__on_completions(void *arg, emp_req_t *const *reqs, int n);
/* a teardown waits until no hook can still hold its connection */
void es__hooks_quiesce(void);
void es__wake(struct es_wake *wk);
extern unsigned long es__wake_writes;   /* wakes that wrote a sleeper's eventfd (tests) */
/* ready to wait again: hit cleared, efd drained if it was written */
void es__wake_reset(struct es_wake *wk);
/* the liveness set: the kernel sockets of EMP connections (EOF/RST = the
 * peer died) and of connects in progress, one epoll fd for the process */
int es__live_fd(void);
void es__live_add(struct es_sock *s);         /* state EMP or CONNECTING */
void es__live_del(struct es_sock *s);
void es__live_harvest(void);                  /* after the live fd was readable */
/* a socket by fd and ident for a thread that does not own it (ready.c):
 * locked, or NULL when it is gone (or, with busy, locked by another thread:
 * *busy set); es__sock_ungrab unlocks it */
struct es_sock *es__sock_grab(int fd, uint32_t id, int *busy);
void es__sock_ungrab(struct es_sock *s);
/* timeq.c: look at s again by until (a negotiation stepped by waits, an EMP
 * connection in its FIN grace); the earliest such time (INT64_MAX: none);
 * look at those due by now (waits call it: epwait.c, poll.c) */
void es__tq_later(struct es_sock *s, int64_t until);
int64_t es__tq_due(void);
void es__tq_tick(int64_t now);
/* a wait's sleep of left ns (-1: for ever), after a look at what is due:
 * no longer than the queue's earliest time (1 ms when that is past: another
 * thread is ticking); *cut (if given) set when the queue's time is shorter */
int64_t es__tq_bound(int64_t now, int64_t left, int *cut);
void es__tq_atfork_child(void);
/* one wait on kernel fds beside the engine (negotiation, blocking I/O): spins
 * and drives the engine, sleeps in ppoll on p[] + the device; returns 1 when
 * wk was hit, 2 when p[] has events, 0 timeout, -EINTR */
/* around the shim's own waits and settles (no shim lock held at the release):
 * closing connections the engine work in between finished are torn down at
 * the release by this thread instead of the reaper's (linger.c) */
void es__reap_hold(void);
void es__reap_release(void);
int es__wait_fds(struct es_wake *wk, struct pollfd *p, int n, int64_t timeout_ns, const sigset_t *mask);
/* the pacing of a spin's looks at a wait's kernel fds (ready.c): start at
 * the wait; due: the time when a look is due now, else 0; found: after a
 * look, what it found */
struct es_klook { unsigned turns; int64_t next; };
void es__klook_start(struct es_klook *l);
int64_t es__klook_due(struct es_klook *l);
void es__klook_found(struct es_klook *l, int64_t now, int found);
void es__klook_hit(void);          /* a sleep found the kernel fds ready */
extern unsigned long es__klooks;   /* looks made (tests) */
/* the calling thread's eventfd for es_wake */
int es__tl_efd(void);
/* transmit batching: an event-loop thread that got events defers its sends
 * until its next wait (emp_defer); calls that pass through flush them */
extern __thread int es__tl_defer __attribute__((tls_model("initial-exec")));
void es__defer_on(void);
static inline void es__defer_flush(void)
{
	if (es__tl_defer && es__g.ep)
		emp_flush(es__g.ep);
}
/* write coalescing (hold.c): held tails leave at the thread's next wait
 * (es__held_flush), or older than a bound (busy_skip: not a socket whose lock
 * is taken), or all at exec (es__held_flush_old) */
void es__held_flush(void);
void es__held_flush_aged(void);   /* no lock held: this thread's, if held long enough */
int es__unhold(struct es_sock *s);
int es__held_flush_old(int64_t min_age_ns, int busy_skip);
void es__hold_attach(emp_endpoint_t *ep);

/* ---- epoll (epoll.c) ---- */
void es__ep_sock_gone(struct es_sock *s);    /* drop every registration of s */
void es__ep_sock_switched(struct es_sock *s); /* state changed: re-home registrations */
void es__epset_close(int fd, void *set);
/* s's readiness changed (ev, edge): onto the ready lists of its sets; s->lock held */
void es__ep_ready(struct es_sock *s, unsigned ev, int edge);
void es__ep_cleared(struct es_sock *s, unsigned ev);   /* bits dropped: nested sets stop looking ready */

/* ---- poll/select (poll.c) ---- */
int es__poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask);

#define ES_HDR 8                             /* per-message header on the data tag */
#define ES_FIN 1u
#define ES_CLOSE 2u                          /* with FIN: the sender closed the socket */
#define ES_LAST 4u                           /* with FIN: no message of any kind follows */

#endif
