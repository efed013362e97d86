/* conf.c: the cluster config file: parser and validation, defaults (reading the file: load.c; queries on a parsed config: lookup.c). */
#include "sys.h"
#include "conf.h"
#include "conf_int.h"
#include "proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONF_LINE_MAX 1023             /* characters per line, newline not counted */
#define CONF_MAX_TOKENS 16             /* fields per line */
#define CONF_TOK_SHOW 48               /* bytes of an offending token quoted in a message */

struct parser {
	struct emp_conf *c;
	const char *name;
	int line;
	char *err;
	unsigned errlen;
	int peer_cap;
	unsigned opt_seen;             /* one bit per entry of opts[] */
	int rto_line, rto_max_line, auth_line;
};

enum opt_type { T_U32, T_U64, T_BOOL, T_ETHER, T_GROUP, T_PATH, T_TRANSPORT };

struct optdef {
	const char *key;
	enum opt_type type;
	size_t off;
	uint64_t lo, hi;
};

#define O(k, t, lo, hi) { #k, t, offsetof(struct emp_conf_options, k), lo, hi }
static const struct optdef opts[] = {
	O(ack_every, T_U32, 1, 64),
	O(rto_us, T_U64, 10, 10000000),
	O(rto_max_us, T_U64, 10, 60000000),
	O(retries, T_U32, 1, 1000),
	O(flow_control, T_BOOL, 0, 1),
	O(checksum, T_BOOL, 0, 1),
	O(window, T_U32, 1, 64),
	O(peer_window, T_U32, 1, 65536),
	O(descriptors, T_U32, 64, 1048576),
	O(ethertype, T_ETHER, 0x0600, 0xffff),
	O(qdisc_bypass, T_BOOL, 0, 1),
	O(ack_delay_us, T_U64, 0, 1000000),
	O(spin_us, T_U32, 0, 1000000),
	O(gather_us, T_U32, 0, 100000),
	O(stats_group, T_GROUP, 1, 32),
	O(auth, T_BOOL, 0, 1),
	O(auth_key, T_PATH, 2, 255),
	O(transport, T_TRANSPORT, 0, 1),
};
#undef O
#define NOPTS ((int)(sizeof(opts) / sizeof(opts[0])))

/* EtherTypes of other protocols: EMP frames must never be taken for them (a
 * host's IP stack, ARP cache or bridge would parse them) nor they for EMP. */
static const struct { uint16_t type; const char *name; } taken_types[] = {
	{ 0x0800, "IPv4" }, { 0x0806, "ARP" }, { 0x0842, "Wake-on-LAN" }, { 0x8035, "RARP" },
	{ 0x86DD, "IPv6" }, { 0x8100, "VLAN (802.1Q)" }, { 0x88A8, "VLAN (802.1ad)" },
	{ 0x9100, "VLAN (QinQ)" }, { 0x8808, "Ethernet flow control" }, { 0x8809, "slow protocols (LACP)" },
	{ 0x8847, "MPLS" }, { 0x8848, "MPLS" }, { 0x8863, "PPPoE" }, { 0x8864, "PPPoE" },
	{ 0x888E, "802.1X" }, { 0x88CC, "LLDP" }, { 0x88E5, "MACsec" }, { 0x88F7, "PTP" },
	{ 0x8906, "FCoE" }, { 0x8914, "FCoE" }, { 0x8915, "RoCE" }, { 0x9000, "loopback" },
	{ 0x22F0, "AVTP" }, { 0x88E7, "PBB" }, { 0x8902, "CFM" },
};

static int is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

static int hexval(char ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 :
	       ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* NAME: [A-Za-z0-9._-]{1,63} */
static int valid_name(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");
	return n >= 1 && n < EMP_CONF_NAME_MAX && s[n] == '\0';
}

/* Linux interface name: 1..15 printable characters, no '/' or ':', not "." or "..". */
static int valid_ifname(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 15 || !strcmp(s, ".") || !strcmp(s, ".."))
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch <= 0x20 || ch >= 0x7f || ch == '/' || ch == ':')
			return 0;
	}
	return 1;
}

/* Unsigned decimal, digits only, no overflow. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

__attribute__((format(printf, 3, 4)))
void emp__conf_seterr(char *err, unsigned errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* "name:line: what (token)"; returns -EINVAL. Non-printable bytes of the token show as '?'. */
__attribute__((format(printf, 3, 4)))
static int perr(struct parser *p, const char *tok, const char *fmt, ...)
{
	char what[256], shown[CONF_TOK_SHOW + 4];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	const char *name = p->name ? p->name : "<config>";
	if (!tok) {
		emp__conf_seterr(p->err, p->errlen, "%s:%d: %s", name, p->line, what);
		return -EINVAL;
	}
	size_t i = 0;
	for (; tok[i] && i < CONF_TOK_SHOW; i++) {
		unsigned char ch = (unsigned char)tok[i];
		shown[i] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
	}
	if (tok[i])
		memcpy(shown + i, "...", 3), i += 3;
	shown[i] = 0;
	emp__conf_seterr(p->err, p->errlen, "%s:%d: %s (%s)", name, p->line, what, shown);
	return -EINVAL;
}

void emp_conf_defaults(struct emp_conf *c)
{
	memset(c, 0, sizeof(*c));
	c->opt.ack_every = 3;
	c->opt.rto_us = 1000;
	c->opt.rto_max_us = EMP_DEF_RTO_MAX_NS / 1000;
	c->opt.retries = EMP_DEF_RETRIES;
	/* flow_control, checksum: off (0) */
	c->opt.window = 64;
	c->opt.peer_window = 512;
	c->opt.descriptors = 32768;
	c->opt.ethertype = 0x88B5;
	c->opt.qdisc_bypass = 1;
	c->opt.ack_delay_us = 50;
	c->opt.spin_us = 50;
	c->opt.gather_us = 500;
}

void emp_conf_free(struct emp_conf *c)
{
	if (!c)
		return;
	free(c->peers);
	c->peers = NULL;
	c->npeers = 0;
	c->nrules = 0;
}

int emp_conf_parse_mac(const char *s, uint8_t mac[6])
{
	uint8_t m[6];
	if (!s)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		int hi = hexval(s[3 * i]);
		int lo = hi < 0 ? -1 : hexval(s[3 * i + 1]);
		if (lo < 0)
			return -EINVAL;
		char sep = s[3 * i + 2];
		if (sep != (i == 5 ? '\0' : ':'))
			return -EINVAL;
		m[i] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(mac, m, 6);
	return 0;
}

/* peer NAME IPV4 MAC [IFNAME] */
static int parse_peer(struct parser *p, char **tok, int nt)
{
	static const char *const field[] = { "NAME", "IPV4", "MAC" };
	struct emp_conf *c = p->c;
	struct emp_conf_peer pe;
	struct in_addr a;

	if (nt < 4)
		return perr(p, tok[nt - 1], "peer: missing %s; expected `peer NAME IPV4 MAC [IFNAME]`",
			    field[nt - 1]);
	if (nt > 5)
		return perr(p, tok[5], "peer: unexpected extra field");
	memset(&pe, 0, sizeof(pe));
	pe.line = p->line;
	if (!valid_name(tok[1]))
		return perr(p, tok[1], "peer: bad name, expected 1-63 of [A-Za-z0-9._-]");
	strcpy(pe.name, tok[1]);
	if (inet_pton(AF_INET, tok[2], &a) != 1)
		return perr(p, tok[2], "peer %s: bad IPv4 address, expected a dotted quad", pe.name);
	pe.ip = a.s_addr;
	uint32_t h = ntohl(pe.ip);
	if (h == 0 || h == 0xffffffffu || (h >> 28) == 0xe)
		return perr(p, tok[2], "peer %s: IPv4 address is not a unicast host address", pe.name);
	if (emp_conf_parse_mac(tok[3], pe.mac) < 0)
		return perr(p, tok[3], "peer %s: bad MAC address, expected aa:bb:cc:dd:ee:ff", pe.name);
	static const uint8_t zero[6];
	if (!memcmp(pe.mac, zero, 6))
		return perr(p, tok[3], "peer %s: MAC address is all zero", pe.name);
	if (pe.mac[0] & 1)
		return perr(p, tok[3], "peer %s: MAC address is multicast or broadcast", pe.name);
	if (nt == 5) {
		if (!valid_ifname(tok[4]))
			return perr(p, tok[4], "peer %s: bad interface name, expected 1-15 characters",
				    pe.name);
		strcpy(pe.ifname, tok[4]);
	}
	for (int i = 0; i < c->npeers; i++) {
		const struct emp_conf_peer *o = &c->peers[i];
		if (!strcmp(o->name, pe.name))
			return perr(p, tok[1], "duplicate peer name, first declared on line %d", o->line);
		if (o->ip == pe.ip)
			return perr(p, tok[2], "peer %s: duplicate IPv4 address, also peer %s on line %d",
				    pe.name, o->name, o->line);
		if (!memcmp(o->mac, pe.mac, 6))
			return perr(p, tok[3], "peer %s: duplicate MAC address, also peer %s on line %d",
				    pe.name, o->name, o->line);
	}
	if (c->npeers >= EMP_CONF_MAX_PEERS)
		return perr(p, tok[1], "too many peers, the limit is %d", EMP_CONF_MAX_PEERS);
	if (c->npeers == p->peer_cap) {
		int cap = p->peer_cap ? p->peer_cap * 2 : 16;
		if (cap > EMP_CONF_MAX_PEERS)
			cap = EMP_CONF_MAX_PEERS;
		struct emp_conf_peer *np = realloc(c->peers, (size_t)cap * sizeof(*np));
		if (!np) {
			perr(p, tok[1], "out of memory");
			return -ENOMEM;
		}
		c->peers = np;
		p->peer_cap = cap;
	}
	c->peers[c->npeers++] = pe;
	return 0;
}

/* option KEY VALUE */
static int parse_option(struct parser *p, char **tok, int nt)
{
	if (nt < 2)
		return perr(p, tok[0], "option: missing KEY; expected `option KEY VALUE`");
	int k = 0;
	while (k < NOPTS && strcmp(opts[k].key, tok[1]))
		k++;
	if (k == NOPTS)
		return perr(p, tok[1], "unknown option");
	const struct optdef *o = &opts[k];
	if (nt < 3)
		return perr(p, tok[1], "option %s: missing VALUE", o->key);
	if (nt > 3)
		return perr(p, tok[3], "option %s: unexpected extra field", o->key);
	if (p->opt_seen & (1u << k))
		return perr(p, tok[1], "option given twice");
	const char *v = tok[2];
	uint64_t val = 0;
	char *dst = (char *)&p->c->opt + o->off;

	switch (o->type) {
	case T_BOOL:
		if (!strcmp(v, "on"))
			val = 1;
		else if (strcmp(v, "off"))
			return perr(p, v, "option %s: expected on or off", o->key);
		*(int *)dst = (int)val;
		break;
	case T_ETHER:
		if (v[0] != '0' || (v[1] != 'x' && v[1] != 'X') || strlen(v) < 3 || strlen(v) > 6)
			return perr(p, v, "option %s: expected 0xNNNN", o->key);
		for (const char *q = v + 2; *q; q++) {
			int d = hexval(*q);
			if (d < 0)
				return perr(p, v, "option %s: expected 0xNNNN", o->key);
			val = val << 4 | (unsigned)d;
		}
		if (val < o->lo || val > o->hi)
			return perr(p, v, "option %s: must be 0x0600..0xffff (an EtherType, not a length)",
				    o->key);
		for (size_t i = 0; i < sizeof(taken_types) / sizeof(taken_types[0]); i++)
			if (taken_types[i].type == val)
				return perr(p, v, "option %s: 0x%04llx is the EtherType of %s; choose an unused "
					    "one (default 0x88b5, the IEEE local experimental EtherType)", o->key,
					    (unsigned long long)val, taken_types[i].name);
		*(uint16_t *)dst = (uint16_t)val;
		break;
	case T_GROUP: {
		/* a group name (letters, digits, ._-, not starting with '-') or a number */
		size_t n = strlen(v);
		if (n < o->lo || n > o->hi || v[0] == '-' ||
		    strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
			return perr(p, v, "option %s: expected a group name or number (1-32 of [A-Za-z0-9._-])",
				    o->key);
		memcpy(dst, v, n + 1);
		break;
	}
	case T_TRANSPORT:
		if (!strcmp(v, "afpacket"))
			val = EMP_TRANSPORT_AFPACKET;
		else if (!strcmp(v, "udp"))
			val = EMP_TRANSPORT_UDP;
		else
			return perr(p, v, "option %s: expected afpacket (raw Ethernet frames) or udp (EMP frames in UDP "
				    "datagrams)", o->key);
		*(int *)dst = (int)val;
		break;
	case T_PATH: {
		/* an absolute path of printable characters (the file is checked when an endpoint opens) */
		size_t n = strlen(v);
		int ok = n >= o->lo && n <= o->hi && v[0] == '/';
		for (size_t i = 0; ok && i < n; i++)
			ok = (unsigned char)v[i] > 0x20 && (unsigned char)v[i] < 0x7f;
		if (!ok)
			return perr(p, v, "option %s: expected an absolute path (at most %llu characters)", o->key,
				    (unsigned long long)o->hi);
		memcpy(dst, v, n + 1);
		break;
	}
	case T_U32:
	case T_U64:
		if (parse_u64(v, strlen(v), &val) < 0)
			return perr(p, v, "option %s: expected a decimal number", o->key);
		if (val < o->lo || val > o->hi)
			return perr(p, v, "option %s: must be %llu..%llu", o->key,
				    (unsigned long long)o->lo, (unsigned long long)o->hi);
		if (o->type == T_U32)
			*(uint32_t *)dst = (uint32_t)val;
		else
			*(uint64_t *)dst = val;
		break;
	}
	p->opt_seen |= 1u << k;
	if (o->off == offsetof(struct emp_conf_options, rto_us))
		p->rto_line = p->line;
	if (o->off == offsetof(struct emp_conf_options, rto_max_us))
		p->rto_max_line = p->line;
	if (o->off == offsetof(struct emp_conf_options, auth))
		p->auth_line = p->line;
	return 0;
}

/* port N|N-M, 1..65535, N <= M */
static int parse_port(const char *s, uint16_t *lo, uint16_t *hi)
{
	const char *dash = strchr(s, '-');
	uint64_t a, b;
	if (dash) {
		if (parse_u64(s, (size_t)(dash - s), &a) < 0 || parse_u64(dash + 1, strlen(dash + 1), &b) < 0)
			return -1;
	} else {
		if (parse_u64(s, strlen(s), &a) < 0)
			return -1;
		b = a;
	}
	if (a < 1 || b > 65535 || a > b)
		return -1;
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

/* use emp|kernel [port N|N-M] [prog NAME] [peer NAME], qualifiers in any order, each once */
static int parse_use(struct parser *p, char **tok, int nt)
{
	struct emp_conf_rule r;
	memset(&r, 0, sizeof(r));
	r.line = p->line;
	if (nt < 2)
		return perr(p, tok[0], "use: missing emp or kernel; expected "
			    "`use emp|kernel [port N|N-M] [prog NAME] [peer NAME]`");
	if (!strcmp(tok[1], "emp"))
		r.use_emp = 1;
	else if (strcmp(tok[1], "kernel"))
		return perr(p, tok[1], "use: expected emp or kernel");
	int have_port = 0;
	for (int i = 2; i < nt; i += 2) {
		const char *key = tok[i];
		if (strcmp(key, "port") && strcmp(key, "prog") && strcmp(key, "peer"))
			return perr(p, key, "use: unexpected field, expected port, prog or peer");
		if (i + 1 >= nt)
			return perr(p, key, "use: missing value after %s", key);
		const char *v = tok[i + 1];
		if (!strcmp(key, "port")) {
			if (have_port)
				return perr(p, key, "use: port given twice");
			if (parse_port(v, &r.port_lo, &r.port_hi) < 0)
				return perr(p, v, "use: bad port, expected N or N-M with 1 <= N <= M <= 65535");
			have_port = 1;
		} else {
			char *dst = !strcmp(key, "prog") ? r.prog : r.peer;
			if (dst[0])
				return perr(p, key, "use: %s given twice", key);
			if (!valid_name(v))
				return perr(p, v, "use: bad %s name, expected 1-63 of [A-Za-z0-9._-]", key);
			strcpy(dst, v);
		}
	}
	if (p->c->nrules >= EMP_CONF_MAX_RULES)
		return perr(p, tok[0], "too many rules, the limit is %d", EMP_CONF_MAX_RULES);
	p->c->rules[p->c->nrules++] = r;
	return 0;
}

/* One line, NUL-terminated, at most CONF_LINE_MAX characters; modified in place. */
static int parse_line(struct parser *p, char *buf)
{
	char *tok[CONF_MAX_TOKENS];
	int nt = 0;
	char *hash = strchr(buf, '#');
	if (hash)
		*hash = '\0';
	for (char *q = buf;;) {
		while (*q && is_space(*q))
			q++;
		if (!*q)
			break;
		if (nt == CONF_MAX_TOKENS)
			return perr(p, q, "too many fields on one line");
		tok[nt++] = q;
		while (*q && !is_space(*q))
			q++;
		if (*q)
			*q++ = '\0';
	}
	if (nt == 0)
		return 0;
	if (!strcmp(tok[0], "peer"))
		return parse_peer(p, tok, nt);
	if (!strcmp(tok[0], "option"))
		return parse_option(p, tok, nt);
	if (!strcmp(tok[0], "use"))
		return parse_use(p, tok, nt);
	return perr(p, tok[0], "unknown directive, expected peer, option or use");
}

/* Checks that need the whole file: rule peers declared anywhere, rto_max_us >= rto_us. */
static int check_all(struct parser *p)
{
	struct emp_conf *c = p->c;
	for (int i = 0; i < c->nrules; i++) {
		const struct emp_conf_rule *r = &c->rules[i];
		if (r->peer[0] && emp_conf_find_name(c, r->peer) < 0) {
			p->line = r->line;
			return perr(p, r->peer, "use: rule names an unknown peer");
		}
	}
	if (c->opt.auth && !c->opt.auth_key[0]) {
		p->line = p->auth_line;
		return perr(p, NULL, "option auth on needs option auth_key PATH (the cluster secret)");
	}
	if (c->opt.rto_max_us < c->opt.rto_us) {
		p->line = p->rto_line > p->rto_max_line ? p->rto_line : p->rto_max_line;
		char v[24];
		snprintf(v, sizeof(v), "%llu", (unsigned long long)c->opt.rto_us);
		return perr(p, v, "option rto_max_us (%llu) must be >= rto_us",
			    (unsigned long long)c->opt.rto_max_us);
	}
	return 0;
}

/* Initialises c itself (defaults first), so c need not hold anything and must not hold peers
 * the caller still owns: call emp_conf_free before parsing again into the same struct.
 * On error c is left empty with default options. */
int emp_conf_parse(struct emp_conf *c, const char *name, const char *text, unsigned long len,
		   char *err, unsigned errlen)
{
	struct parser p = { .c = c, .name = name, .err = err, .errlen = errlen };
	char buf[CONF_LINE_MAX + 1];
	int rc = 0;

	emp_conf_defaults(c);
	if (err && errlen)
		err[0] = '\0';
	snprintf(c->path, sizeof(c->path), "%s", name ? name : "");
	if (len && !text)
		return perr(&p, NULL, "no text");
	if (len > CONF_MAX_BYTES) {
		rc = perr(&p, NULL, "config is %lu bytes, larger than the %lu MiB limit", len,
			  CONF_MAX_BYTES >> 20);
		goto fail;
	}
	for (unsigned long pos = 0; pos < len;) {
		const char *s = text + pos;
		const char *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		p.line++;
		if (n > CONF_LINE_MAX) {
			memcpy(buf, s, CONF_TOK_SHOW + 1);
			buf[CONF_TOK_SHOW + 1] = '\0';
			rc = perr(&p, buf, "line is longer than %d characters", CONF_LINE_MAX);
			goto fail;
		}
		if (memchr(s, '\0', n)) {
			rc = perr(&p, NULL, "line contains a NUL byte");
			goto fail;
		}
		memcpy(buf, s, n);
		buf[n] = '\0';
		rc = parse_line(&p, buf);
		if (rc < 0)
			goto fail;
		pos += n + (nl ? 1 : 0);
	}
	rc = check_all(&p);
	if (rc < 0)
		goto fail;
	return 0;
fail:
	emp_conf_free(c);
	emp_conf_defaults(c);
	snprintf(c->path, sizeof(c->path), "%s", name ? name : "");
	return rc;
}
