/* endpoint.c: opening and closing an endpoint: config, device, engine memory, descriptor table; lookups and counters (driving the engine: drive.c). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "sys.h"
#include "internal.h"
#include "stats.h"

_Static_assert(EMP_ECONNRESET == ECONNRESET && EMP_ETIMEDOUT == ETIMEDOUT && EMP_EINVAL == EINVAL &&
	       EMP_EMSGSIZE == EMSGSIZE && EMP_ENOBUFS == ENOBUFS && EMP_EHOSTUNREACH == EHOSTUNREACH &&
	       EMP_ECANCELED == ECANCELED, "engine errno values match the host's");

static __thread char last_err[256];

void emp__set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_err, sizeof(last_err), fmt, ap);
	va_end(ap);
}

const char *emp_last_error(void)
{
	return last_err[0] ? last_err : "no error";
}

uint64_t emp_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fw_config_from(struct emp_endpoint *ep, struct emp_fw_config *c)
{
	const struct emp_conf_options *o = &ep->conf.opt;
	emp__fw_config_defaults(c);
	c->ndesc = o->descriptors;
	c->ack_every = o->ack_every;
	c->rto_ns = o->rto_us * 1000ull;
	c->rto_max_ns = o->rto_max_us * 1000ull;
	c->retries = o->retries;
	c->flow_control = (uint8_t)o->flow_control;
	c->checksum = (uint8_t)o->checksum;
	c->window = o->window;
	c->peer_window = o->peer_window;
	c->ethertype = o->ethertype;
	c->ack_delay_ns = o->ack_delay_us * 1000ull;
	c->auth = (uint8_t)o->auth;           /* the key: emp__auth_key_load at open */
}

/* the device has frames its wait fd does not show (afp_lazy.c): the
 * progress thread drives once (kick_mu: not while it stops) */
static void device_kick(void *arg)
{
	struct emp_endpoint *ep = arg;
	pthread_mutex_lock(&ep->kick_mu);
	if (ep->prog)
		emp__progress_kick(ep);
	pthread_mutex_unlock(&ep->kick_mu);
}

/* The backend: the caller's (tests: sim), else EMP_TRANSPORT (afpacket or
 * udp), else the config's `option transport`. */
static int pick_driver(struct emp_endpoint *ep, const struct emp_open_opts *o)
{
	const char *name = o->driver;
	const char *env = secure_getenv("EMP_TRANSPORT");
	if (!name || !*name) {
		if (env && *env) {
			if (strcmp(env, "afpacket") && strcmp(env, "udp")) {
				emp__set_error("emp: EMP_TRANSPORT: expected afpacket or udp");
				return -EINVAL;
			}
			name = env;
		} else {
			name = ep->conf.opt.transport == EMP_TRANSPORT_UDP ? "udp" : "afpacket";
		}
	}
	ep->ops = emp__driver_find(name);
	if (!ep->ops) {
		emp__set_error("emp: unknown driver '%s' (afpacket, udp or sim)", name);
		return -EINVAL;
	}
	return 0;
}

static int open_backend(struct emp_endpoint *ep, const struct emp_open_opts *o,
			     struct emp_dev_params *pp, char *ifname, size_t iflen)
{
	struct emp_dev_params p = *pp;
	if (ep->ops->flags & EMP_DRV_IFNAME) {
		const char *env = secure_getenv("EMP_IFNAME");
		if (o->ifname)
			snprintf(ifname, iflen, "%s", o->ifname);
		else if (env && *env)
			snprintf(ifname, iflen, "%s", env);
		else if (emp__resolve_ifname(&ep->conf, ifname, iflen) < 0)
			return -ENODEV;
		p.ifname = ifname;
	}
	int rc = ep->ops->open(&p, &ep->dev);
	if (rc < 0)
		return rc;
	ep->ops->mac(ep->dev, ep->mac);
	ep->dev_fd = ep->ops->wait_fd ? ep->ops->wait_fd(ep->dev) : -1;
	ep->dev_fd2 = ep->ops->wait_fd2 ? ep->ops->wait_fd2(ep->dev) : -1;
	return 0;
}

static int open_device(struct emp_endpoint *ep, const struct emp_open_opts *o)
{
	char err[256] = "", ifname[64] = "";
	struct emp_dev_params p = {
		.ethertype = ep->conf.opt.ethertype, .endpoint = ep->epid,
		.qdisc_bypass = ep->conf.opt.qdisc_bypass, .wire = o->wire, .mac = o->mac,
		.ring_now = o->ring_at_open,
		.kick = device_kick, .kick_arg = ep, .err = err, .errlen = sizeof(err),
	};
	struct emp_dev_host *hosts = NULL;
	if (ep->ops->flags & EMP_DRV_HOSTS) {
		hosts = calloc((size_t)ep->conf.npeers + 1, sizeof(*hosts));
		if (!hosts)
			return -ENOMEM;
		for (int i = 0; i < ep->conf.npeers; i++) {
			memcpy(hosts[i].mac, ep->conf.peers[i].mac, 6);
			hosts[i].ip = ep->conf.peers[i].ip;
		}
		p.hosts = hosts;
		p.nhosts = (unsigned)ep->conf.npeers;
	}
	int rc = open_backend(ep, o, &p, ifname, sizeof(ifname));
	free(hosts);                  /* the backend keeps its own copy */
	if (rc < 0)
		emp__set_error("%s", err[0] ? err : "emp: cannot open device");
	return rc;
}

/* udp: the id is the UDP port, so a random one avoids the kernel's range of
 * ephemeral ports (a client's TCP port there gets a UDP side channel bound
 * to the same number, negotiate.c): above it when there is room, else below */
static uint16_t random_port_id(void)
{
	static unsigned lo, hi;
	if (!hi) {
		unsigned a = 32768, b = 60999;
		FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
		if (f) {
			if (fscanf(f, "%u %u", &a, &b) != 2 || a > b || b > 65535)
				a = 32768, b = 60999;
			fclose(f);
		}
		lo = a, hi = b;
	}
	for (int i = 0; i < 1000; i++) {
		uint16_t id = emp__random_epid();
		if (id < lo || id > hi) {
			if (hi <= EMP_EP_AUTO_MAX - 512 && id < hi)
				continue;          /* room above the range: stay clear of servers' ports */
			return id;
		}
	}
	return emp__random_epid();
}

/* The endpoint id: o->endpoint, or a random one for EMP_EP_AUTO; a driver on a
 * wire other processes share (afpacket) locks it in this network namespace
 * first (eplock.c). */
static int claim_id(struct emp_endpoint *ep, const struct emp_open_opts *o)
{
	const struct emp_driver_ops *ops = ep->ops;
	int lock = ops && (ops->flags & EMP_DRV_IDLOCK);
	int tries = o->endpoint == EMP_EP_AUTO ? 64 : 1;
	for (int i = 0; i < tries; i++) {
		uint16_t id = o->endpoint != EMP_EP_AUTO ? o->endpoint
			    : (ops->flags & EMP_DRV_HOSTS) ? random_port_id() : emp__random_epid();
		int fd = lock ? emp__eplock(ep->conf.opt.ethertype, id) : -1;
		if (fd >= 0 || !lock) {
			ep->epid = id;
			ep->eplock = fd;
			return 0;
		}
		if (fd != -EADDRINUSE) {
			emp__set_error("emp: cannot lock endpoint id %u: %s", id, strerror(-fd));
			return fd;
		}
	}
	if (o->endpoint == EMP_EP_AUTO)
		emp__set_error("emp: no free endpoint id after %d random tries", tries);
	else
		emp__set_error("emp: endpoint id %u is in use by another endpoint in this network namespace",
			       o->endpoint);
	return -EADDRINUSE;
}

static int alloc_tables(struct emp_endpoint *ep)
{
	uint32_t n = ep->ndesc, mbsize = 1;
	while (mbsize < n * 2)
		mbsize <<= 1;
	ep->desc = calloc(n, sizeof(*ep->desc));
	ep->ext_sg = calloc(n, sizeof(*ep->ext_sg));
	ep->free_idx = calloc(n, sizeof(uint32_t));
	ep->mb.ring = calloc(mbsize, sizeof(uint32_t));
	ep->mb.mask = mbsize - 1;
	ep->cq.ring = calloc(mbsize, sizeof(uint32_t));
	ep->cq.mask = mbsize - 1;
	ep->fw_size = emp__fw_memsize(&ep->fwc);
	/* fresh zero pages, touched only as the engine uses them (fw_env.zeroed) */
	void *fw = mmap(NULL, ep->fw_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ep->fw = fw == MAP_FAILED ? NULL : fw;
	if (!ep->desc || !ep->ext_sg || !ep->free_idx || !ep->mb.ring || !ep->cq.ring || !ep->fw)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		ep->free_idx[i] = n - 1 - i;
	ep->nfree = n;
	return 0;
}

/* A config option in microseconds, in ns; the environment variable env, when
 * set, overrides it at run time (at most max_us, the option's own bound). */
static uint64_t us_option(const char *env, uint32_t conf_us, unsigned long max_us)
{
	const char *v = secure_getenv(env);
	if (!v || !*v)
		return (uint64_t)conf_us * 1000ull;
	unsigned long us = strtoul(v, NULL, 10);
	return (us > max_us ? max_us : us) * 1000ull;
}

int emp_open(emp_endpoint_t **out, const struct emp_open_opts *o)
{
	struct emp_open_opts dflt = { 0 };
	char err[512] = "";
	int rc;
	if (!out)
		return -EINVAL;
	if (!o)
		o = &dflt;
	struct emp_endpoint *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->self = -1;
	ep->dev_fd = ep->dev_fd2 = -1;
	ep->eplock = -1;
	pthread_mutex_init(&ep->post_lock, NULL);
	pthread_mutex_init(&ep->eng_lock, NULL);
	pthread_mutex_init(&ep->wait_mu, NULL);
	pthread_mutex_init(&ep->kick_mu, NULL);
	if (o->conf) {
		ep->conf = *o->conf;
		ep->conf.peers = calloc((size_t)o->conf->npeers + 1, sizeof(*ep->conf.peers));
		if (!ep->conf.peers) {
			free(ep);
			return -ENOMEM;
		}
		if (o->conf->npeers > 0)
			memcpy(ep->conf.peers, o->conf->peers, sizeof(*ep->conf.peers) * (size_t)o->conf->npeers);
	} else {
		rc = emp_conf_load(&ep->conf, o->conf_path, err, sizeof(err));
		if (rc < 0) {
			emp__set_error("%s", err);
			free(ep);
			return rc;
		}
	}
	ep->clock = o->clock;
	ep->clock_arg = o->clock_arg;
	ep->wire = o->wire;
	ep->spin_ns = us_option("EMP_SPIN_US", ep->conf.opt.spin_us, 1000000);
	ep->gather_ns = us_option("EMP_GATHER_US", ep->conf.opt.gather_us, 100000);
	/* EMP_AUTH=on turns authentication on (it can never turn it off) */
	const char *av = secure_getenv("EMP_AUTH");
	if (av && !strcmp(av, "on"))
		ep->conf.opt.auth = 1;
	if (o->fw_override)
		ep->fwc = *o->fw_override;
	else
		fw_config_from(ep, &ep->fwc);
	if (!o->fw_override && ep->fwc.auth) {
		rc = ep->conf.opt.auth_key[0] ? emp__auth_key_load(ep->conf.opt.auth_key, ep->fwc.auth_key, err, sizeof(err))
					     : -EINVAL;
		if (rc < 0) {
			emp__set_error("%s", ep->conf.opt.auth_key[0] ? err : "emp: auth on (EMP_AUTH) needs option auth_key PATH");
			emp_conf_free(&ep->conf);
			free(ep);
			return rc;
		}
	}
	rc = pick_driver(ep, o);
	/* an id whose UDP port another socket holds (udp): another id */
	for (int tries = 0; rc == 0; tries++) {
		rc = claim_id(ep, o);
		if (rc == 0)
			rc = open_device(ep, o);
		if (rc != -EADDRINUSE || o->endpoint != EMP_EP_AUTO || tries >= 16)
			break;
		emp__epunlock(ep->eplock);
		ep->eplock = -1;
		rc = 0;
	}
	if (rc < 0) {
		emp__epunlock(ep->eplock);
		emp_conf_free(&ep->conf);
		free(ep);
		return rc;
	}
	uint8_t (*macs)[6] = calloc((size_t)ep->conf.npeers + 1, 6);
	for (int i = 0; macs && i < ep->conf.npeers; i++)
		memcpy(macs[i], ep->conf.peers[i].mac, 6);
	ep->self = emp_conf_find_mac(&ep->conf, ep->mac);
	ep->fwc.nhosts = (uint32_t)ep->conf.npeers;
	ep->fwc.host_mac = (const uint8_t (*)[6])macs;
	ep->fwc.endpoint = ep->epid;
	ep->fwc.mtu = ep->ops->mtu(ep->dev);
	memcpy(ep->fwc.mac, ep->mac, 6);
	ep->fwc.incarnation = o->incarnation;
	while (!ep->fwc.incarnation && getrandom(&ep->fwc.incarnation, sizeof(uint32_t), 0) != sizeof(uint32_t))
		;
	if (!ep->fwc.incarnation)
		ep->fwc.incarnation = 1;
	ep->ndesc = ep->fwc.ndesc;
	rc = macs ? alloc_tables(ep) : -ENOMEM;
	if (rc == 0) {
		struct emp_fw_env env = { .ops = ep->ops, .dev = ep->dev, .desc = ep->desc, .mb = &ep->mb, .cq = &ep->cq,
					   .zeroed = 1 };
		rc = emp__fw_init(ep->fw, ep->fw_size, &ep->fwc, &env);
		ep->fw_ready = rc == 0;
		ep->owner = getpid();
		if (rc < 0)
			emp__set_error("emp: engine rejected its configuration (mtu %u, descriptors %u)",
				       ep->fwc.mtu, ep->fwc.ndesc);
	}
	free(macs);                   /* the engine keeps its own copy */
	ep->fwc.host_mac = NULL;
	if (rc == 0)
		emp__stats_publish(ep);      /* /dev/shm/emp.<pid>.<ep> for empstat */
	const char *pe = secure_getenv("EMP_PROGRESS_THREAD");
	if (rc == 0 && !o->no_progress_thread && !(pe && pe[0] == '0'))
		rc = emp__progress_start(ep);
	if (rc < 0) {
		emp_close(ep);
		return rc;
	}
	*out = ep;
	return 0;
}

void emp_goodbye(emp_endpoint_t *ep)
{
	if (!ep || !ep->fw_ready || ep->owner != getpid() || ep->said_bye)
		return;
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_poll(ep->fw, emp__now(ep));
	emp__fw_bye(ep->fw);
	ep->said_bye = 1;
	pthread_mutex_unlock(&ep->eng_lock);
}

void emp_close(emp_endpoint_t *ep)
{
	if (!ep)
		return;
	pthread_mutex_lock(&ep->kick_mu);
	if (ep->prog)
		emp__progress_stop(ep);
	pthread_mutex_unlock(&ep->kick_mu);
	emp__stats_unpublish(ep);
	if (ep->dev && ep->fw && ep->fw_ready) {
		/* acks held back for a reply that will not come go out now */
		pthread_mutex_lock(&ep->eng_lock);
		emp__fw_poll(ep->fw, emp__now(ep));
		emp__fw_flush(ep->fw);
		pthread_mutex_unlock(&ep->eng_lock);
		emp_goodbye(ep);
	}
	if (ep->dev && ep->fw && ep->fw_ready) {
		/* frames still lent are copied into their receives' buffers:
		 * the device's memory goes now, a receive may still be read */
		pthread_mutex_lock(&ep->eng_lock);
		emp__fw_lent_place_all(ep->fw);
		pthread_mutex_unlock(&ep->eng_lock);
	}
	if (ep->dev)
		ep->ops->close(ep->dev);
	emp__epunlock(ep->eplock);        /* after the device: the id is free once nobody hears it */
	if (ep->ext_sg)
		for (uint32_t i = 0; i < ep->ndesc; i++)
			free(ep->ext_sg[i]);
	for (uint32_t i = 0; ep->desc && i < ep->ndesc; i++)
		free(ep->desc[i].lend);        /* the device they pointed into is gone */
	free(ep->ext_sg);
	free(ep->desc);
	free(ep->free_idx);
	free(ep->mb.ring);
	free(ep->cq.ring);
	if (ep->fw)
		munmap(ep->fw, ep->fw_size);
	emp_conf_free(&ep->conf);
	free(ep);
}

int emp_host_lookup(emp_endpoint_t *ep, const char *name)
{
	int i = emp_conf_find_name(&ep->conf, name);
	return i < 0 ? -ENOENT : i;
}

int emp_host_by_ip(emp_endpoint_t *ep, uint32_t ip_be)
{
	int i = emp_conf_find_ip(&ep->conf, ip_be);
	return i < 0 ? -ENOENT : i;
}

int emp_self_host(emp_endpoint_t *ep) { return ep->self < 0 ? -ENOENT : ep->self; }
uint16_t emp_endpoint_id(emp_endpoint_t *ep) { return ep->epid; }
unsigned emp_mtu(emp_endpoint_t *ep) { return ep->fwc.mtu; }
const struct emp_conf *emp_config(emp_endpoint_t *ep) { return &ep->conf; }

int emp_get_counters(emp_endpoint_t *ep, struct emp_counters *c)
{
	if (!ep || !c)
		return -EINVAL;
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_counters(ep->fw, c);
	pthread_mutex_unlock(&ep->eng_lock);
	return 0;
}

int emp_counters_line(emp_endpoint_t *ep, char *buf, size_t len)
{
	struct emp_counters c;
	int rc = emp_get_counters(ep, &c);
	if (rc < 0)
		return rc;
	if (!buf || !len)
		return -EINVAL;
	char drops[512];
	int n = 0;
	drops[0] = 0;
	for (int i = 0; i < EMP_DROP_MAX && n < (int)sizeof drops - 40; i++)
		if (c.drops[i])
			n += snprintf(drops + n, sizeof drops - (size_t)n, " %s=%llu", emp__drop_names[i],
				      (unsigned long long)c.drops[i]);
	int k = snprintf(buf, len, "msgs sent %llu received %llu, frames tx %llu rx %llu, retransmits %llu, "
			 "timeouts %llu, fast %llu, fc stalls %llu, drops%s",
			 (unsigned long long)c.msgs_sent, (unsigned long long)c.msgs_received,
			 (unsigned long long)c.tx_frames, (unsigned long long)c.rx_frames,
			 (unsigned long long)c.retransmits, (unsigned long long)c.timeouts,
			 (unsigned long long)c.fast_retransmits, (unsigned long long)c.fc_stalls,
			 drops[0] ? drops : " none");
	return k < 0 ? -EINVAL : (size_t)k >= len ? (int)len - 1 : k;
}

/* the endpoint's fixed memory: engine, descriptor tables, mailbox */
size_t emp__mem_bytes(const struct emp_endpoint *ep)
{
	return ep->fw_size + ep->ndesc * (sizeof(struct emp_desc) + sizeof(void *) + 4) + (ep->mb.mask + 1) * 8;
}

void emp_get_usage(emp_endpoint_t *ep, size_t *bytes, uint32_t *peers, uint32_t *records)
{
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_usage(ep->fw, peers, records);
	pthread_mutex_unlock(&ep->eng_lock);
	if (bytes)
		*bytes = emp__mem_bytes(ep);
}
