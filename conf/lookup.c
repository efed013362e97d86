/* lookup.c: queries on a parsed cluster config: a peer by name, IPv4 or MAC, a MAC as text, and which connections the socket rules give to EMP. */
#include "conf.h"

#include <string.h>

void emp_conf_format_mac(const uint8_t mac[6], char out[18])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 6; i++) {
		out[3 * i] = hex[mac[i] >> 4];
		out[3 * i + 1] = hex[mac[i] & 15];
		out[3 * i + 2] = i == 5 ? '\0' : ':';
	}
}

int emp_conf_find_name(const struct emp_conf *c, const char *name)
{
	if (!c || !name)
		return -1;
	for (int i = 0; i < c->npeers; i++)
		if (!strcmp(c->peers[i].name, name))
			return i;
	return -1;
}

int emp_conf_find_ip(const struct emp_conf *c, uint32_t ip_be)
{
	if (!c)
		return -1;
	for (int i = 0; i < c->npeers; i++)
		if (c->peers[i].ip == ip_be)
			return i;
	return -1;
}

int emp_conf_find_mac(const struct emp_conf *c, const uint8_t mac[6])
{
	if (!c || !mac)
		return -1;
	for (int i = 0; i < c->npeers; i++)
		if (!memcmp(c->peers[i].mac, mac, 6))
			return i;
	return -1;
}

/* prog is compared by its last path component, so "/usr/bin/iperf3" matches `prog iperf3`. */
int emp_conf_use_emp(const struct emp_conf *c, const char *prog, int peer_idx, uint16_t port)
{
	if (!c)
		return 1;
	const char *base = prog ? strrchr(prog, '/') : NULL;
	base = base ? base + 1 : prog;
	for (int i = 0; i < c->nrules && i < EMP_CONF_MAX_RULES; i++) {
		const struct emp_conf_rule *r = &c->rules[i];
		if ((r->port_lo || r->port_hi) && (port < r->port_lo || port > r->port_hi))
			continue;
		if (r->prog[0] && (!base || strcmp(r->prog, base)))
			continue;
		if (r->peer[0] && (peer_idx < 0 || peer_idx >= c->npeers ||
				   strcmp(r->peer, c->peers[peer_idx].name)))
			continue;
		return r->use_emp;
	}
	return 1;
}
