/* endpoint.c: opening and closing an endpoint: config, device, engine memory, descriptor table; driving and notifying. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
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

void emp__notify(struct emp_endpoint *ep)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&ep->sleepers, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		pthread_mutex_lock(&ep->wait_mu);
		for (struct emp_waiter *w = ep->waiters; w; w = w->next)
			if (w->efd >= 0 && write(w->efd, &one, sizeof(one)) < 0)
				continue;
		pthread_mutex_unlock(&ep->wait_mu);
	}
	if (ep->hook)
		ep->hook(ep->hook_arg);
}

static int drive(struct emp_endpoint *ep, int posting)
{
	int total = 0;
	for (;;) {
		if (pthread_mutex_trylock(&ep->eng_lock))
			return total;        /* the holder sees our mailbox entries after it unlocks */
		/* a lone ack may start waiting for a reply only while a thread waits
		 * in the engine and so polls again at once, or posts (the reply itself
		 * may be next); once started the hold runs to its deadline
		 * (emp__tx_flush_or_hold) */
		emp__fw_set_hold(ep->fw, posting || __atomic_load_n(&ep->spinning, __ATOMIC_RELAXED) > 0);
		int n = emp__fw_poll(ep->fw, emp__now(ep));
		int busy = emp__fw_busy(ep->fw);
		__atomic_store_n(&ep->busy_hint, busy, __ATOMIC_RELAXED);
		uint32_t mtu;
		uint64_t mm = n ? emp__fw_mtu_mismatches(ep->fw, &mtu) : 0;
		pthread_mutex_unlock(&ep->eng_lock);
		if (mm > ep->mtu_warned) {
			ep->mtu_warned = mm;
			fprintf(stderr, "emp: MTU mismatch: a peer's interface MTU differs from ours (%u); "
				"this session uses %u-byte frames (set the same MTU on every host for full-size frames)\n",
				ep->fwc.mtu, mtu);
		}
		if (n) {
			total += n;
			emp__notify(ep);
		}
		if (!busy && __atomic_load_n(&ep->mb.head, __ATOMIC_SEQ_CST) ==
				     __atomic_load_n(&ep->mb.tail, __ATOMIC_SEQ_CST))
			return total;
	}
}

/* Spinning callers: a turn with no frame waiting, no post and no work left
 * over skips the engine lock and the clock; every 16th turn drives anyway
 * (timers, and a driver without rx_pending always drives). */
static __thread unsigned idle_turns;

int emp__drive_spin(struct emp_endpoint *ep)
{
	if (ep->ops->rx_pending && !__atomic_load_n(&ep->busy_hint, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&ep->mb.head, __ATOMIC_ACQUIRE) == __atomic_load_n(&ep->mb.tail, __ATOMIC_ACQUIRE) &&
	    !ep->ops->rx_pending(ep->dev) && (++idle_turns & 15))
		return 0;
	idle_turns = 0;
	return emp__drive(ep);
}

int emp__drive(struct emp_endpoint *ep)
{
	return drive(ep, 0);
}

int emp__drive_post(struct emp_endpoint *ep)
{
	return drive(ep, 1);
}

int emp_progress(emp_endpoint_t *ep)
{
	return ep ? emp__drive_spin(ep) : -EINVAL;
}

int emp_flush(emp_endpoint_t *ep)
{
	if (!ep || !ep->fw_ready)
		return -EINVAL;
	pthread_mutex_lock(&ep->eng_lock);
	int n = emp__fw_poll(ep->fw, emp__now(ep));
	emp__fw_flush(ep->fw);
	pthread_mutex_unlock(&ep->eng_lock);
	if (n)
		emp__notify(ep);
	return n;
}

void emp_drive_begin(emp_endpoint_t *ep)
{
	__atomic_add_fetch(&ep->spinning, 1, __ATOMIC_SEQ_CST);
}

void emp_drive_end(emp_endpoint_t *ep)
{
	__atomic_sub_fetch(&ep->spinning, 1, __ATOMIC_SEQ_CST);
}

int emp_wait_fd(emp_endpoint_t *ep)
{
	return ep->dev_fd;
}

int64_t emp_next_deadline_ns(emp_endpoint_t *ep)
{
	uint64_t dl = emp__fw_next_deadline(ep->fw);     /* a racy read of one word: a hint */
	if (dl == UINT64_MAX)
		return -1;
	uint64_t now = emp__now(ep);
	return dl > now ? (int64_t)(dl - now) : 0;
}

void emp_set_completion_hook(emp_endpoint_t *ep, void (*fn)(void *), void *arg)
{
	ep->hook_arg = arg;
	__atomic_store_n(&ep->hook, fn, __ATOMIC_RELEASE);
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
}

static int open_device(struct emp_endpoint *ep, const struct emp_open_opts *o)
{
	char err[256] = "", ifname[64] = "";
	struct emp_dev_params p = {
		.ethertype = ep->conf.opt.ethertype, .endpoint = o->endpoint,
		.qdisc_bypass = ep->conf.opt.qdisc_bypass, .wire = o->wire, .mac = o->mac,
		.err = err, .errlen = sizeof(err),
	};
	ep->ops = emp__driver_find(o->driver);
	if (!ep->ops) {
		emp__set_error("emp: unknown driver '%s' (afpacket or sim)", o->driver);
		return -EINVAL;
	}
	if (ep->ops == &emp__afpacket_ops) {
		const char *env = getenv("EMP_IFNAME");
		if (o->ifname)
			snprintf(ifname, sizeof(ifname), "%s", o->ifname);
		else if (env && *env)
			snprintf(ifname, sizeof(ifname), "%s", env);
		else if (emp__resolve_ifname(&ep->conf, ifname, sizeof(ifname)) < 0)
			return -ENODEV;
		p.ifname = ifname;
	}
	int rc = ep->ops->open(&p, &ep->dev);
	if (rc < 0) {
		emp__set_error("%s", err[0] ? err : "emp: cannot open device");
		return rc;
	}
	ep->ops->mac(ep->dev, ep->mac);
	ep->dev_fd = ep->ops->wait_fd ? ep->ops->wait_fd(ep->dev) : -1;
	return 0;
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
	ep->fw_size = emp__fw_memsize(&ep->fwc);
	ep->fw = aligned_alloc(64, (ep->fw_size + 63) & ~(size_t)63);
	if (!ep->desc || !ep->ext_sg || !ep->free_idx || !ep->mb.ring || !ep->fw)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		ep->free_idx[i] = n - 1 - i;
	ep->nfree = n;
	return 0;
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
	ep->dev_fd = -1;
	pthread_mutex_init(&ep->post_lock, NULL);
	pthread_mutex_init(&ep->eng_lock, NULL);
	pthread_mutex_init(&ep->wait_mu, NULL);
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
	ep->epid = o->endpoint;
	ep->spin_ns = (uint64_t)ep->conf.opt.spin_us * 1000ull;
	if (o->fw_override)
		ep->fwc = *o->fw_override;
	else
		fw_config_from(ep, &ep->fwc);
	rc = open_device(ep, o);
	if (rc < 0) {
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
	ep->fwc.endpoint = o->endpoint;
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
		struct emp_fw_env env = { .ops = ep->ops, .dev = ep->dev, .desc = ep->desc, .mb = &ep->mb };
		rc = emp__fw_init(ep->fw, ep->fw_size, &ep->fwc, &env);
		ep->fw_ready = rc == 0;
		if (rc < 0)
			emp__set_error("emp: engine rejected its configuration (mtu %u, descriptors %u)",
				       ep->fwc.mtu, ep->fwc.ndesc);
	}
	free(macs);                   /* the engine keeps its own copy */
	ep->fwc.host_mac = NULL;
	if (rc == 0)
		emp__stats_publish(ep);      /* /dev/shm/emp.<pid>.<ep> for empstat */
	const char *pe = getenv("EMP_PROGRESS_THREAD");
	if (rc == 0 && !o->no_progress_thread && !(pe && pe[0] == '0'))
		rc = emp__progress_start(ep);
	if (rc < 0) {
		emp_close(ep);
		return rc;
	}
	*out = ep;
	return 0;
}

void emp_close(emp_endpoint_t *ep)
{
	if (!ep)
		return;
	if (ep->prog)
		emp__progress_stop(ep);
	emp__stats_unpublish(ep);
	if (ep->dev && ep->fw && ep->fw_ready) {
		/* acks held back for a reply that will not come go out now */
		pthread_mutex_lock(&ep->eng_lock);
		emp__fw_poll(ep->fw, emp__now(ep));
		emp__fw_flush(ep->fw);
		pthread_mutex_unlock(&ep->eng_lock);
	}
	if (ep->dev)
		ep->ops->close(ep->dev);
	if (ep->ext_sg)
		for (uint32_t i = 0; i < ep->ndesc; i++)
			free(ep->ext_sg[i]);
	free(ep->ext_sg);
	free(ep->desc);
	free(ep->free_idx);
	free(ep->mb.ring);
	free(ep->fw);
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

void emp_get_usage(emp_endpoint_t *ep, size_t *bytes, uint32_t *peers, uint32_t *records)
{
	pthread_mutex_lock(&ep->eng_lock);
	emp__fw_usage(ep->fw, peers, records);
	pthread_mutex_unlock(&ep->eng_lock);
	if (bytes)
		*bytes = ep->fw_size + ep->ndesc * (sizeof(struct emp_desc) + sizeof(void *) + 4) +
			 (ep->mb.mask + 1) * 4;
}
