/* emp-run.c: runs a program with libempsock.so preloaded after validating the cluster config, passing CAP_NET_RAW on to it when installed with that file capability:
 * emp-run [--conf FILE] [--strict] [--debug] PROGRAM ARGS...;  emp-run [--conf FILE] --check-conf [FILE]. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <libgen.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <elf.h>
#include <fcntl.h>

#include "conf.h"
#include "elfkind.h"

static void usage(int rc)
{
	fprintf(rc ? stderr : stdout,
		"usage: emp-run [--conf FILE] [--strict] [--debug] PROGRAM [ARGS...]\n"
		"       emp-run [--conf FILE] --check-conf [FILE]\n"
		"  runs PROGRAM with its TCP connections to the cluster peers of the EMP\n"
		"  config ($EMP_CONF, else " EMP_CONF_DEFAULT_PATH ") carried over EMP.\n"
		"  The config is checked first: on an error emp-run prints FILE:LINE and what\n"
		"  is wrong, and exits 1 without starting PROGRAM.\n"
		"  --strict: a connection to a peer that cannot use EMP fails (EMP_STRICT=1)\n"
		"  --debug: one line per sockets-layer decision on stderr (EMP_SOCK_DEBUG=1)\n"
		"  --check-conf [FILE]: validate the config (FILE, else --conf, $EMP_CONF or\n"
		"    the default), print the resolved peers (name, IPv4, MAC, interface, and\n"
		"    whether this host reaches them), options and rules; exit 0 if valid,\n"
		"    1 if not\n"
		"  Run by a user without CAP_NET_RAW, emp-run installed with that file\n"
		"  capability (setcap cap_net_raw+p emp-run) passes it to PROGRAM as an ambient\n"
		"  capability (see emp-run(1)); set-user-ID, set-group-ID and file-capability\n"
		"  programs are refused then.\n");
	exit(rc);
}

/* ---- CAP_NET_RAW for an unprivileged user (emp-run with the file capability) ---- */

/*
 * AF_PACKET needs CAP_NET_RAW. A user without it runs emp-run installed with
 * `setcap cap_net_raw+p`: emp-run then holds the capability in its permitted
 * set only (it never uses it itself), adds it to its inheritable set and
 * raises it as an ambient capability, and executes PROGRAM. The kernel gives
 * a program without file capabilities its ambient set as permitted and
 * effective, and, since nothing grew beyond that set, does not mark the exec
 * secure (no AT_SECURE): the dynamic loader keeps LD_PRELOAD and the shim
 * loads. The kernel drops ambient capabilities when it executes a
 * set-user-ID, set-group-ID or file-capability program (and such a program
 * would not take LD_PRELOAD anyway); emp-run refuses those up front.
 */

static int caps(struct __user_cap_data_struct d[2], int set)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	return (int)syscall(set ? SYS_capset : SYS_capget, &h, d);
}

#define NET_RAW_BIT (1u << CAP_NET_RAW)     /* CAP_NET_RAW < 32: word 0 */

/* PROGRAM as execvp would find it (PATH search), into out; -1 if not found. */
static int resolve(const char *prog, char *out, size_t len)
{
	if (strchr(prog, '/'))
		return snprintf(out, len, "%s", prog) < (int)len ? 0 : -1;
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; ; p++) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (snprintf(out, len, "%.*s%s%s", (int)n, p, n ? "/" : "", prog) < (int)len &&
		    access(out, X_OK) == 0) {
			struct stat st;
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
				return 0;
		}
		if (!e)
			return -1;
		p = e;
	}
}

/* 0: nothing to do or done; 1: refused (message printed). path: the program
 * as execvp would find it, NULL if not found; *exec_path set when the
 * program is to be run from path (the file that was checked) */
static int pass_net_raw(const char *path, int *exec_path, int debug)
{
	struct __user_cap_data_struct d[2];
	if (geteuid() == 0 || caps(d, 0) < 0 || !(d[0].permitted & NET_RAW_BIT) ||
	    (d[0].effective & NET_RAW_BIT && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, CAP_NET_RAW, 0, 0) == 1))
		return 0;              /* root, no capability to pass, or it is passed already */
	struct stat st;
	if (!path)
		return 0;              /* execvp reports it */
	*exec_path = 1;
	if (stat(path, &st) < 0)
		return 0;              /* execv reports it */
	if (st.st_mode & (S_ISUID | S_ISGID)) {
		fprintf(stderr, "emp-run: refusing to run %s with CAP_NET_RAW: it is set-%s-ID (the kernel "
			"would drop the capability and the loader the preload)\n", path,
			st.st_mode & S_ISUID ? "user" : "group");
		return 1;
	}
	if (getxattr(path, "security.capability", NULL, 0) >= 0) {
		fprintf(stderr, "emp-run: refusing to run %s with CAP_NET_RAW: it has file capabilities of its "
			"own (the kernel would drop the ambient capability and the loader the preload)\n", path);
		return 1;
	}
	d[0].inheritable |= NET_RAW_BIT;
	if (caps(d, 1) < 0 || prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) < 0) {
		fprintf(stderr, "emp-run: cannot pass CAP_NET_RAW on to %s: %s; it runs without (EMP unavailable)\n",
			path, strerror(errno));
		return 0;
	}
	if (debug)
		fprintf(stderr, "emp-run: %s gets CAP_NET_RAW (ambient) for EMP's raw frames\n", path);
	return 0;
}

/* ---- programs the library cannot reach ---- */

enum { PROG_OK, PROG_STATIC, PROG_GO };

/* What the loader and the program will make of the preload: PROG_STATIC (a
 * static ELF: no interpreter, so no preload), PROG_GO (a Go program: its
 * socket calls bypass libc), else PROG_OK (also anything not a 64-bit ELF:
 * a script's interpreter is looked at by the shim when it starts). */
static int prog_kind(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return PROG_OK;
	Elf64_Ehdr eh;
	int kind = PROG_OK, interp = 0, go = 0;
	if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)) {
		close(fd);
		return PROG_OK;
	}
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph)
			break;
		if (ph.p_type == PT_INTERP)
			interp = 1;
		if (ph.p_type == PT_NOTE && ph.p_filesz && ph.p_filesz <= 65536 && !go) {
			unsigned char *n = malloc(ph.p_filesz);
			if (n && pread(fd, n, ph.p_filesz, (off_t)ph.p_offset) == (ssize_t)ph.p_filesz)
				go = es__notes_have_go(n, ph.p_filesz);
			free(n);
		}
	}
	close(fd);
	if (go)
		kind = PROG_GO;
	else if (!interp)
		kind = PROG_STATIC;    /* static, static-pie: nothing runs the loader */
	return kind;
}

/* 1: refused (--strict), -1: go on, a warning printed (EMP cannot reach it),
 * 0: go on. path: the program as execvp would find it, NULL if not found */
static int check_reach(const char *path)
{
	if (!path)
		return 0;              /* execvp reports it */
	int k = prog_kind(path);
	if (k == PROG_OK)
		return 0;
	const char *s = getenv("EMP_STRICT");
	int strict = s && *s && strcmp(s, "0");
	fprintf(stderr, "emp-run: %s %s, so none of its connections can use EMP: they stay on kernel TCP%s\n",
		path, k == PROG_GO ? "is a Go program (Go makes its socket calls without libc, past the EMP library)"
				   : "is statically linked (the loader preloads nothing into it)",
		strict ? "" : "; preloaded clients that connect to it wait 500 ms each for an EMP offer that never comes");
	if (strict)
		fprintf(stderr, "emp-run: --strict: not starting it\n");
	return strict ? 1 : -1;
}

/* ---- what this machine has: interfaces (name, MAC, flags) and IPv4 addresses ---- */

#define MAX_IFS 256
struct lif {
	char name[IF_NAMESIZE + 1];
	unsigned flags;
	int has_mac;
	uint8_t mac[6];
	int naddr;
	uint32_t addr[8];            /* IPv4, network order */
};
static struct lif lifs[MAX_IFS];
static int nlifs;

static struct lif *lif_get(const char *name, int create)
{
	for (int i = 0; i < nlifs; i++)
		if (!strcmp(lifs[i].name, name))
			return &lifs[i];
	if (!create || nlifs >= MAX_IFS)
		return NULL;
	struct lif *l = &lifs[nlifs++];
	memset(l, 0, sizeof *l);
	snprintf(l->name, sizeof l->name, "%s", name);
	return l;
}

static void scan_interfaces(void)
{
	struct ifaddrs *ifa, *i;
	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i; i = i->ifa_next) {
		struct lif *l = lif_get(i->ifa_name, 1);
		if (!l)
			continue;
		l->flags = i->ifa_flags;
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_PACKET) {
			const struct sockaddr_ll *ll = (const struct sockaddr_ll *)i->ifa_addr;
			if (ll->sll_halen == 6) {
				memcpy(l->mac, ll->sll_addr, 6);
				l->has_mac = 1;
			}
		} else if (i->ifa_addr->sa_family == AF_INET && l->naddr < 8) {
			l->addr[l->naddr++] = ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		}
	}
	freeifaddrs(ifa);
}

static struct lif *lif_by_ip(uint32_t ip)
{
	for (int i = 0; i < nlifs; i++)
		for (int k = 0; k < lifs[i].naddr; k++)
			if (lifs[i].addr[k] == ip)
				return &lifs[i];
	return NULL;
}

static struct lif *lif_by_mac(const uint8_t mac[6])
{
	for (int i = 0; i < nlifs; i++)
		if (lifs[i].has_mac && !memcmp(lifs[i].mac, mac, 6))
			return &lifs[i];
	return NULL;
}

/* Local address the kernel would use toward ip (no packet is sent). */
static int route_src(uint32_t ip, uint32_t *src)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = ip };
	socklen_t len = sizeof a;
	int rc = connect(s, (struct sockaddr *)&a, sizeof a);
	if (rc == 0)
		rc = getsockname(s, (struct sockaddr *)&a, &len);
	close(s);
	if (rc == 0)
		*src = a.sin_addr.s_addr;
	return rc;
}

/* ---- --check-conf ---- */

static const char *yes_no(int v) { return v ? "on" : "off"; }

/* The EMP interface, found the way libemp finds it: $EMP_IFNAME, else this
 * host's line (its IFNAME, or the interface holding its IPv4), else the
 * interface the kernel routes the first reachable peer through. Returns how
 * it was found; ifname[0] = 0: none. */
static const char *find_interface(const struct emp_conf *c, int self_by_ip, char *ifname, size_t len)
{
	const char *how = "";
	const char *env = getenv("EMP_IFNAME");
	ifname[0] = 0;
	if (env && *env) {
		snprintf(ifname, len, "%s", env);
		how = "$EMP_IFNAME";
	} else if (self_by_ip >= 0) {
		const struct emp_conf_peer *pe = &c->peers[self_by_ip];
		snprintf(ifname, len, "%s", pe->ifname[0] ? pe->ifname : lif_by_ip(pe->ip)->name);
		how = pe->ifname[0] ? "this host's peer line" : "holds this host's address";
	} else {
		for (int i = 0; i < c->npeers && !ifname[0]; i++) {
			uint32_t src;
			struct lif *l;
			if (route_src(c->peers[i].ip, &src) == 0 && (l = lif_by_ip(src)) && strcmp(l->name, "lo")) {
				snprintf(ifname, len, "%s", l->name);
				how = "kernel route";
			}
		}
	}
	return how;
}

static void print_options_rules(const struct emp_conf *c)
{
	const struct emp_conf_options *o = &c->opt;
	printf("options: ack_every %u, rto_us %llu, rto_max_us %llu, retries %u, flow_control %s, checksum %s,\n"
	       "         window %u, peer_window %u, descriptors %u, ethertype 0x%04x, qdisc_bypass %s,\n"
	       "         ack_delay_us %llu, spin_us %u\n",
	       o->ack_every, (unsigned long long)o->rto_us, (unsigned long long)o->rto_max_us, o->retries,
	       yes_no(o->flow_control), yes_no(o->checksum), o->window, o->peer_window, o->descriptors,
	       o->ethertype, yes_no(o->qdisc_bypass), (unsigned long long)o->ack_delay_us, o->spin_us);
	if (!c->nrules)
		printf("rules: none: every stream socket to a peer uses EMP\n");
	else
		printf("rules (first match wins; a socket that matches none uses EMP):\n");
	for (int i = 0; i < c->nrules; i++) {
		const struct emp_conf_rule *r = &c->rules[i];
		char port[24] = "any";
		if (r->port_lo == r->port_hi && r->port_lo)
			snprintf(port, sizeof port, "%u", r->port_lo);
		else if (r->port_lo || r->port_hi)
			snprintf(port, sizeof port, "%u-%u", r->port_lo, r->port_hi);
		printf("  line %-4d use %-6s port %-11s prog %-12s peer %s\n", r->line, r->use_emp ? "emp" : "kernel",
		       port, r->prog[0] ? r->prog : "any", r->peer[0] ? r->peer : "any");
	}
}

static int check_conf(const char *path)
{
	struct emp_conf c;
	char err[512];
	if (emp_conf_load(&c, path, err, sizeof err) < 0) {
		fprintf(stderr, "emp-run: %s\n", err);
		emp_conf_free(&c);
		return 1;
	}
	scan_interfaces();

	/* This host: the line whose MAC (what libemp uses) or IPv4 is local. */
	int self = -1, self_by_ip = -1;
	for (int i = 0; i < c.npeers; i++) {
		if (self < 0 && lif_by_mac(c.peers[i].mac))
			self = i;
		if (self_by_ip < 0 && lif_by_ip(c.peers[i].ip))
			self_by_ip = i;
	}
	char ifname[IF_NAMESIZE + 1];
	const char *how = find_interface(&c, self_by_ip, ifname, sizeof ifname);
	struct lif *eif = ifname[0] ? lif_get(ifname, 0) : NULL;
	int up = eif && (eif->flags & IFF_UP) && (eif->flags & IFF_RUNNING);
	char mac[18];

	printf("%s: valid: %d peer%s, %d rule%s\n", c.path, c.npeers, c.npeers == 1 ? "" : "s", c.nrules,
	       c.nrules == 1 ? "" : "s");
	if (!ifname[0])
		printf("interface: none toward the cluster (no peer address is local or routable; "
		       "set EMP_IFNAME or add IFNAME to this host's peer line)\n");
	else if (!eif)
		printf("interface: %s (%s): no such interface on this host\n", ifname, how);
	else {
		if (eif->has_mac)
			emp_conf_format_mac(eif->mac, mac);
		printf("interface: %s (%s): %s, MAC %s\n", ifname, how,
		       up ? "up" : (eif->flags & IFF_UP) ? "up, no carrier" : "down", eif->has_mac ? mac : "none");
	}
	printf("%-5s %-16s %-15s %-17s %-9s %s\n", "LINE", "PEER", "IPV4", "MAC", "IFNAME", "FROM THIS HOST");
	int warn = 0;
	for (int i = 0; i < c.npeers; i++) {
		const struct emp_conf_peer *pe = &c.peers[i];
		char ip[INET_ADDRSTRLEN], reach[160];
		inet_ntop(AF_INET, &pe->ip, ip, sizeof ip);
		emp_conf_format_mac(pe->mac, mac);
		if (i == self || (self < 0 && i == self_by_ip)) {
			struct lif *l = lif_by_mac(pe->mac);
			if (i == self)
				snprintf(reach, sizeof reach, "this host (MAC on %s)", l ? l->name : "?");
			else
				snprintf(reach, sizeof reach, "this host by address, but no local interface has MAC %s",
					 mac), warn++;
			if (pe->ifname[0] && !lif_get(pe->ifname, 0)) {
				snprintf(reach + strlen(reach), sizeof reach - strlen(reach),
					 "; interface %s does not exist", pe->ifname);
				warn++;
			}
		} else if (self < 0) {
			snprintf(reach, sizeof reach, "unreachable: this host is not in the config "
				 "(peers drop frames from unknown MACs)");
		} else if (!ifname[0]) {
			snprintf(reach, sizeof reach, "unreachable: no interface toward the cluster");
		} else if (!eif) {
			snprintf(reach, sizeof reach, "unreachable: %s does not exist", ifname);
		} else if (!up) {
			snprintf(reach, sizeof reach, "unreachable: %s is %s", ifname,
				 (eif->flags & IFF_UP) ? "up without carrier" : "down");
		} else {
			snprintf(reach, sizeof reach, "reachable via %s (up)", ifname);
		}
		printf("%-5d %-16s %-15s %-17s %-9s %s\n", pe->line, pe->name, ip, mac, pe->ifname[0] ? pe->ifname : "-",
		       reach);
	}
	if (self < 0 && self_by_ip < 0)
		printf("this host: not in the config (no local interface has a peer's MAC or address); "
		       "programs here keep kernel TCP\n");
	print_options_rules(&c);
	if (warn)
		printf("warnings: %d (the config is valid; see above)\n", warn);
	emp_conf_free(&c);
	return 0;
}

/* LD_PRELOAD gets the shim ($EMP_SOCK_LIB, else ../lib/libempsock.so next
 * to this program) in front of what it held; 0, or -1 (said why).
 * $EMP_SOCK_LIB may be a list (a:b), each of which must be readable: the
 * AddressSanitizer shim runs behind libasan, which must come first
 * (EMP_SOCK_LIB=$(gcc -print-file-name=libasan.so):build/lib/libempsock-asan.so) */
static int set_preload(void)
{
	char lib[PATH_MAX], self[PATH_MAX];
	const char *env = getenv("EMP_SOCK_LIB");
	if (env && *env) {
		snprintf(lib, sizeof lib, "%s", env);
	} else {
		ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
		if (n < 0) {
			perror("emp-run: /proc/self/exe");
			return -1;
		}
		self[n] = 0;
		snprintf(lib, sizeof lib, "%s/../lib/libempsock.so", dirname(self));
		char r[PATH_MAX];
		if (realpath(lib, r))
			snprintf(lib, sizeof lib, "%s", r);
	}
	for (const char *p = lib; *p;) {
		size_t n = strcspn(p, ":");
		char one[PATH_MAX];
		snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one ? n : sizeof one - 1), p);
		if (access(one, R_OK) != 0) {
			fprintf(stderr, "emp-run: %s: %s\n", one, strerror(errno));
			return -1;
		}
		p += n + (p[n] == ':');
	}
	const char *old = getenv("LD_PRELOAD");
	if (old && *old && !strstr(old, lib)) {
		size_t n = strlen(lib) + strlen(old) + 2;
		char *v = malloc(n);
		snprintf(v, n, "%s:%s", lib, old);
		setenv("LD_PRELOAD", v, 1);
	} else if (!old || !*old) {
		setenv("LD_PRELOAD", lib, 1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int i = 1, check = 0, debug = 0;
	const char *check_file = NULL, *conf_arg = NULL;   /* conf_arg: --conf, for messages */
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
			char abs[PATH_MAX];
			const char *c = argv[++i];
			if (realpath(c, abs))
				c = abs;
			setenv("EMP_CONF", c, 1);
			conf_arg = getenv("EMP_CONF");
		} else if (!strncmp(argv[i], "--conf=", 7)) {
			setenv("EMP_CONF", argv[i] + 7, 1);
			conf_arg = getenv("EMP_CONF");
		} else if (!strcmp(argv[i], "--check-conf")) {
			check = 1;
			if (i + 1 < argc && strncmp(argv[i + 1], "--", 2))
				check_file = argv[++i];
		} else if (!strncmp(argv[i], "--check-conf=", 13)) {
			check = 1;
			check_file = argv[i] + 13;
		} else if (!strcmp(argv[i], "--strict")) {
			setenv("EMP_STRICT", "1", 1);
		} else if (!strcmp(argv[i], "--debug")) {
			setenv("EMP_SOCK_DEBUG", "1", 1);
			debug = 1;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(0);
		} else {
			fprintf(stderr, "emp-run: unknown option %s\n", argv[i]);
			usage(2);
		}
	}
	if (check) {
		if (i < argc) {
			fprintf(stderr, "emp-run: --check-conf runs no program\n");
			usage(2);
		}
		return check_conf(check_file ? check_file : conf_arg);
	}
	if (i >= argc)
		usage(2);

	/* Never start the program on a config the shim would refuse: the same
	 * parser, the same file ($EMP_CONF, set by --conf, else the default).
	 * Named explicitly: with the file capability this process is a secure
	 * exec and the library's secure_getenv would not see $EMP_CONF, while
	 * the program (not one) will. */
	if (!conf_arg)
		conf_arg = getenv("EMP_CONF");
	{
		struct emp_conf c;
		char err[512];
		int r = emp_conf_load(&c, conf_arg, err, sizeof err);
		emp_conf_free(&c);
		if (r < 0) {
			fprintf(stderr, "emp-run: %s\nemp-run: not starting %s\n", err, argv[i]);
			return 1;
		}
	}

	char path[PATH_MAX];
	const char *found = resolve(argv[i], path, sizeof path) == 0 ? path : NULL;
	int told = check_reach(found);
	if (told > 0)
		return 1;
	if (told < 0) {
		char me[24];
		snprintf(me, sizeof me, "%d", (int)getpid());
		setenv("EMP_RUN_PID", me, 1);   /* the shim in the program exec'd next: told already */
	}
	if (set_preload() < 0)
		return 127;
	int exec_path = 0;
	if (pass_net_raw(found, &exec_path, debug))
		return 126;
	if (exec_path)
		execv(path, argv + i);          /* the file that was checked */
	else
		execvp(argv[i], argv + i);
	fprintf(stderr, "emp-run: %s: %s\n", argv[i], strerror(errno));
	return 127;
}
