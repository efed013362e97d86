/* init.c: real-function resolution (dlsym RTLD_NEXT), re-entrancy guard, settings, the EMP endpoint, the exit hook (fork: fork.c). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "elfkind.h"
#include "es.h"

struct es_real es__real;
__thread int es__tl_in __attribute__((tls_model("initial-exec")));
struct es_global es__g = { .lock = PTHREAD_MUTEX_INITIALIZER, .neg_ms = 500, .neg_known_ms = 5000,
			   .nbufs = 32, .bufsz = 131072 };
pthread_mutex_t *const es__lk_global = &es__g.lock;
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t *const es__lk_resolve = &resolve_lock;
static atomic_int resolved;

#define RES(fn) es__real.fn = dlsym(RTLD_NEXT, #fn)

void es__resolve(void)
{
	if (atomic_load(&resolved))
		return;
	es__tl_in++;
	pthread_mutex_lock(&resolve_lock);
	if (!atomic_load(&resolved)) {
		RES(socket); RES(connect); RES(bind); RES(listen); RES(accept); RES(accept4);
		RES(read); RES(write); RES(readv); RES(writev); RES(send); RES(recv);
		RES(sendto); RES(recvfrom); RES(sendmsg); RES(recvmsg); RES(sendfile);
		RES(sendfile64); RES(close); RES(shutdown); RES(poll); RES(ppoll); RES(select);
		RES(pselect); RES(epoll_create); RES(epoll_create1); RES(epoll_ctl);
		RES(epoll_wait); RES(epoll_pwait); RES(fcntl); RES(ioctl); RES(setsockopt);
		RES(getsockopt); RES(getsockname); RES(getpeername); RES(dup); RES(dup2);
		RES(dup3); RES(fork); RES(execve); RES(splice); RES(close_range); RES(closefrom);
		RES(sigaction); RES(setuid); RES(setreuid); RES(setresuid); RES(seteuid);
		atomic_store(&resolved, 1);
	}
	pthread_mutex_unlock(&resolve_lock);
	es__tl_in--;
}

int64_t es__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void vlog(const char *pfx, const char *fmt, va_list ap)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "%s", pfx);
	n += vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	R_(write)(2, buf, n);
}

void es__log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog("emp: ", fmt, ap);
	va_end(ap);
}

void es__dbg(const char *fmt, ...)
{
	if (!es__g.debug)
		return;
	char pfx[48];
	snprintf(pfx, sizeof pfx, "emp[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	vlog(pfx, fmt, ap);
	va_end(ap);
}

static unsigned env_u(const char *name, unsigned def, unsigned lo, unsigned hi)
{
	const char *v = secure_getenv(name);
	if (!v || !*v)
		return def;
	unsigned long x = strtoul(v, NULL, 0);
	return x < lo ? lo : x > hi ? hi : (unsigned)x;
}

/* EMP_STRICT set and not "0" */
static int strict_env(void)
{
	const char *s = secure_getenv("EMP_STRICT");
	return s && *s && strcmp(s, "0");
}

/* Loads the config on first use; 1 when EMP may be used at all. */
int es__conf(void)
{
	if (es__g.conf_loaded)
		return es__g.conf_loaded > 0;
	es__tl_in++;
	pthread_mutex_lock(&es__g.lock);
	if (!es__g.conf_loaded) {
		char err[256];
		es__g.strict = strict_env();
		es__g.debug = env_u("EMP_SOCK_DEBUG", 0, 0, 9);
		es__g.neg_ms = env_u("EMP_NEG_TIMEOUT_MS", 500, 5, 60000);
		es__g.neg_known_ms = env_u("EMP_NEG_TIMEOUT_KNOWN_MS", 5000, 5, 600000);
		es__g.min_backlog = env_u("EMP_LISTEN_MIN_BACKLOG", 1024, 0, 65535);
		es__g.nbufs = env_u("EMP_SOCK_BUFS", 32, 2, 256);
		es__g.bufsz = env_u("EMP_SOCK_BUFSZ", 131072, 1024, 1u << 20);
		es__g.lend = env_u("EMP_LEND", 1, 0, 1);
		emp_conf_defaults(&es__g.conf);
		int r = emp_conf_load(&es__g.conf, NULL, err, sizeof err);
		if (r < 0) {
			if (es__g.strict || secure_getenv("EMP_CONF"))
				es__log("%s; sockets stay on kernel TCP", err);
			es__g.conf_loaded = -1;
		} else {
			es__g.conf_loaded = 1;
		}
	}
	pthread_mutex_unlock(&es__g.lock);
	es__tl_in--;
	return es__g.conf_loaded > 0;
}

/* the endpoint becomes the shim's: completions reach the sockets' streams;
 * sessions only with peers a negotiation agreed on (held); es__g.lock held */
static void adopt(emp_endpoint_t *ep)
{
	emp_set_completion_hook(ep, es__on_completions, NULL);
	es__hold_attach(ep);
	emp_peer_policy(ep, 1);
	__atomic_store_n(&es__g.ep, ep, __ATOMIC_RELEASE);
	es__dbg("endpoint %u open, self host %d", emp_endpoint_id(ep), emp_self_host(ep));
}

emp_endpoint_t *es__engine(void)
{
	emp_endpoint_t *ep = __atomic_load_n(&es__g.ep, __ATOMIC_ACQUIRE);
	if (ep || es__g.ep_failed)
		return ep;
	if (!es__conf())
		return NULL;
	es__tl_in++;
	pthread_mutex_lock(&es__g.lock);
	if (!es__g.ep && !es__g.ep_failed) {
		struct emp_open_opts o;
		memset(&o, 0, sizeof o);
		o.conf = &es__g.conf;
		/* a random id no other endpoint here holds (EMP_EP_AUTO), or the
		 * one EMP_ENDPOINT names (a restarted server keeping its id) */
		o.endpoint = (uint16_t)env_u("EMP_ENDPOINT", EMP_EP_AUTO, EMP_EP_AUTO_MIN, EMP_EP_AUTO_MAX);
		int r = emp_open(&ep, &o);
		if (r < 0) {
			es__log("cannot open an EMP endpoint: %s; sockets stay on kernel TCP",
				emp_last_error());
			es__g.ep_failed = 1;
		} else {
			adopt(ep);
		}
	}
	pthread_mutex_unlock(&es__g.lock);
	es__tl_in--;
	return es__g.ep;
}

/* Tests only (tests/shim links the shim's objects; libempsock.so does not
 * export it, and nothing in the environment reaches it): the shim's engine is
 * ep, an endpoint the test opened (on a simulated wire, in virtual time),
 * set up as es__engine sets up its own. A test may switch it between two
 * connections' set-ups (both ends of a stream in one process): a connection
 * keeps the endpoint it was created on (c->ep). */
void es__engine_set(emp_endpoint_t *ep)
{
	pthread_mutex_lock(&es__g.lock);
	es__g.conf_loaded = 1;
	es__g.ep_failed = 0;
	adopt(ep);
	pthread_mutex_unlock(&es__g.lock);
}

/* fork.c: the child has no progress thread and must not use the parent's
 * endpoint: it opens its own on demand; inherited EMP connections become
 * FOREIGN (fdtable.c). */
void es__init_atfork_child(void)
{
	es__g.ep = NULL;
	es__g.ep_failed = 0;
	es__g.gen++;
	es__g.pid = getpid();
}

static void dump_counters(void)
{
	char line[1024];
	if (es__g.ep && emp_counters_line(es__g.ep, line, sizeof line) > 0)
		es__dbg("engine: %s", line);
	es__neg_dump();
}

static void at_exit(void)
{
	if (es__g.ep)
		es__flush_all();
	if (es__g.debug >= 2)
		dump_counters();
}

/* the main program's image (the first object dl_iterate_phdr names) has
 * Go's build-ID note */
static int main_is_go(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_NOTE &&
		    es__notes_have_go((const unsigned char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr),
				      info->dlpi_phdr[i].p_memsz)) {
			*(int *)arg = 1;
			break;
		}
	return 1;                    /* the main program only */
}

/* A Go program makes its socket calls past libc, so none of its
 * connections can be ours (emp-run says so before it starts one; a program
 * started another way, from a script under emp-run, is told here). In
 * strict mode it does not run: its connections to the cluster's peers would
 * go over kernel TCP, which strict mode promises never happens. */
static void check_reach(void)
{
	int go = 0;
	dl_iterate_phdr(main_is_go, &go);
	if (!go)
		return;
	const char *er = getenv("EMP_RUN_PID");
	int strict = strict_env();   /* the config is not loaded here: start-up stays cheap */
	if (!strict && er && atoi(er) == (int)getpid())
		return;              /* emp-run looked at this program and said so */
	es__log("this is a Go program (it makes its socket calls without libc, past this library): "
		"none of its connections can use EMP%s", strict ? "; strict mode: exiting" : "");
	if (strict)
		_exit(1);
}

__attribute__((constructor)) static void es_init(void)
{
	es__g.pid = getpid();
	es__resolve();
	check_reach();
	atexit(at_exit);
}
