/* conf.h: the cluster config file: peers (name, IPv4, MAC, interface), options, socket rules. */
#ifndef EMP_CONF_H
#define EMP_CONF_H

#include <stdint.h>

#define EMP_CONF_DEFAULT_PATH "/etc/emp/emp.conf"
#define EMP_CONF_NAME_MAX 64
#define EMP_CONF_MAX_PEERS 4096
#define EMP_CONF_MAX_RULES 256

struct emp_conf_peer {
	char name[EMP_CONF_NAME_MAX];
	uint32_t ip;                  /* IPv4, network byte order */
	uint8_t mac[6];
	char ifname[16];              /* "" if not given */
	int line;
};

/* `use emp|kernel [port N|N-M] [prog NAME] [peer NAME]`: first match wins. */
struct emp_conf_rule {
	int use_emp;                  /* 1 = emp, 0 = kernel */
	uint16_t port_lo, port_hi;    /* 0,0 = any port */
	char prog[EMP_CONF_NAME_MAX]; /* "" = any program */
	char peer[EMP_CONF_NAME_MAX]; /* "" = any peer */
	int line;
};

/* Every `option KEY VALUE` the engine knows; unknown keys are errors. */
struct emp_conf_options {
	uint32_t ack_every;           /* ack_every N (1..64), default 3 */
	uint64_t rto_us;              /* rto_us N, default 1000 */
	uint64_t rto_max_us;          /* rto_max_us N, default 200000 */
	uint32_t retries;             /* retries N (1..1000), default 24 */
	int flow_control;             /* flow_control on|off, default off */
	int checksum;                 /* checksum on|off, default off */
	uint32_t window;              /* window N frames per message (1..64), default 64 */
	uint32_t peer_window;         /* peer_window N frames per receiver, default 512 */
	uint32_t descriptors;         /* descriptors N (64..1048576), default 32768 */
	uint16_t ethertype;           /* ethertype 0xNNNN, default 0x88B5 */
	int qdisc_bypass;             /* qdisc_bypass on|off, default on */
	uint64_t ack_delay_us;        /* ack_delay_us N, default 50 */
	uint32_t spin_us;             /* spin_us N: busy-poll before blocking, default 50 */
	uint32_t gather_us;           /* gather_us N: longest sleep that lets a trickling message's
				       * frames gather (receive coalescing), 0 off, default 500 */
	char stats_group[33];         /* stats_group NAME|GID: statistics segments 0640 and this
				       * group, default "" (0600, owner only) */
	int auth;                     /* auth on|off: every frame carries a keyed MAC, default off */
	char auth_key[256];           /* auth_key PATH: the cluster secret (absolute path), needed by auth on */
	int transport;                /* transport afpacket|udp (EMP_TRANSPORT_*), default afpacket */
};

#define EMP_TRANSPORT_AFPACKET 0      /* EMP frames as raw Ethernet frames (AF_PACKET) */
#define EMP_TRANSPORT_UDP      1      /* each EMP frame one UDP datagram (segment): GSO/GRO batching */

struct emp_conf {
	char path[256];
	int npeers;
	struct emp_conf_peer *peers;  /* heap array */
	int nrules;
	struct emp_conf_rule rules[EMP_CONF_MAX_RULES];
	struct emp_conf_options opt;
};

void emp_conf_defaults(struct emp_conf *c);
/* Parse text; name is used in messages ("name:line: what is wrong").
 * 0 on success; -EINVAL with err filled on the first error. */
int emp_conf_parse(struct emp_conf *c, const char *name, const char *text, unsigned long len,
		   char *err, unsigned errlen);
/* Load a file: path NULL means $EMP_CONF (secure_getenv: ignored in a
 * set-uid or file-capability process), else EMP_CONF_DEFAULT_PATH. Only a
 * regular file is read (a FIFO, device or directory is refused at once).
 * -ENOENT / -EACCES / -EINVAL with err filled. */
int emp_conf_load(struct emp_conf *c, const char *path, char *err, unsigned errlen);
void emp_conf_free(struct emp_conf *c);

int emp_conf_find_name(const struct emp_conf *c, const char *name);   /* index or -1 */
int emp_conf_find_ip(const struct emp_conf *c, uint32_t ip_be);      /* index or -1 */
int emp_conf_find_mac(const struct emp_conf *c, const uint8_t mac[6]);/* index or -1 */
/* Rule decision for a socket: 1 emp, 0 kernel (no rule matched = emp). */
int emp_conf_use_emp(const struct emp_conf *c, const char *prog, int peer_idx, uint16_t port);

/* helpers shared with the tools */
int emp_conf_parse_mac(const char *s, uint8_t mac[6]);
void emp_conf_format_mac(const uint8_t mac[6], char out[18]);

#endif
