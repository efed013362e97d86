/* fuzz_conf.c: libFuzzer target for the cluster config parser, its lookups, rules and MAC helpers. */
#include "conf.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct emp_conf conf;   /* large: keep it off the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256];
	int rc = emp_conf_parse(&conf, "fuzz", (const char *)data, size, err, sizeof(err));
	if (rc != 0) {
		if (rc != -EINVAL || memchr(err, '\0', sizeof(err)) == NULL || strncmp(err, "fuzz:", 5))
			abort();       /* every error is -EINVAL with a "name:line:" message */
		if (conf.peers || conf.npeers || conf.nrules)
			abort();       /* nothing left behind on error */
	} else {
		uint8_t mac[6] = { 2, 0, 0, 0, 0, 1 };
		char s[18];
		for (int i = 0; i < conf.npeers; i++) {
			const struct emp_conf_peer *p = &conf.peers[i];
			if (emp_conf_find_name(&conf, p->name) != i || emp_conf_find_ip(&conf, p->ip) != i ||
			    emp_conf_find_mac(&conf, p->mac) != i)
				abort();       /* names, IPs and MACs are unique */
			emp_conf_format_mac(p->mac, s);
			if (emp_conf_parse_mac(s, mac) != 0 || memcmp(mac, p->mac, 6))
				abort();
			for (int port = 0; port < 65536; port += 4099)
				(void)emp_conf_use_emp(&conf, p->name, i, (uint16_t)port);
		}
		(void)emp_conf_find_name(&conf, "node1");
		(void)emp_conf_find_ip(&conf, 0x0100000a);
		(void)emp_conf_find_mac(&conf, mac);
		for (int i = 0; i < conf.nrules; i++) {
			const struct emp_conf_rule *r = &conf.rules[i];
			int pi = r->peer[0] ? emp_conf_find_name(&conf, r->peer) : -1;
			if (r->peer[0] && pi < 0)
				abort();       /* rules name declared peers only */
			(void)emp_conf_use_emp(&conf, r->prog[0] ? r->prog : NULL, pi, r->port_lo);
			(void)emp_conf_use_emp(&conf, "/usr/bin/x", pi, r->port_hi);
		}
		(void)emp_conf_use_emp(&conf, NULL, -1, 0);
		(void)emp_conf_use_emp(&conf, "prog", conf.npeers, 80);
		emp_conf_free(&conf);
	}
	/* the MAC helper on the raw input as a string */
	char buf[32];
	size_t n = size < sizeof(buf) - 1 ? size : sizeof(buf) - 1;
	memcpy(buf, data, n);
	buf[n] = '\0';
	uint8_t m[6];
	if (emp_conf_parse_mac(buf, m) == 0) {
		char s[18];
		emp_conf_format_mac(m, s);
		if (strncasecmp(s, buf, 18))
			abort();
	}
	return 0;
}
