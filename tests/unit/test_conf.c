/* test_conf.c: unit tests of the cluster config parser, loader, lookups and socket rules. */
#include "runner.h"
#include "conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static struct emp_conf C;       /* large: keep it off the stack */
static char E[512];

static int parse(const char *text)
{
	return emp_conf_parse(&C, "t.conf", text, strlen(text), E, sizeof(E));
}

static uint32_t ip(const char *s)
{
	struct in_addr a;
	CHECK(inet_pton(AF_INET, s, &a) == 1);
	return a.s_addr;
}

/* text must fail with -EINVAL, a message starting "t.conf:LINE: " and quoting tok, leaving C empty. */
static void expect_err(int line, const char *tok, const char *text)
{
	char want[64];
	int rc = parse(text);
	CHECK_MSG(rc == -EINVAL, "rc %d for <<%s>>", rc, text);
	snprintf(want, sizeof(want), "t.conf:%d: ", line);
	CHECK_MSG(!strncmp(E, want, strlen(want)), "want %s, got: %s", want, E);
	if (tok) {
		char q[128];
		snprintf(q, sizeof(q), "(%s)", tok);
		CHECK_MSG(strstr(E, q) != NULL, "want %s in: %s", q, E);
	}
	CHECK(C.peers == NULL);
	CHECK_EQ(C.npeers, 0);
	CHECK_EQ(C.nrules, 0);
	CHECK_EQ(C.opt.ack_every, 3);
}

#define PEERS "peer a 10.0.0.1 02:00:00:00:00:01\npeer b 10.0.0.2 02:00:00:00:00:02\n"

static char *write_tmp(const char *text, size_t len)
{
	static char path[64];
	strcpy(path, "/tmp/emp-conf-test-XXXXXX");
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, text, len), (long long)len);
	close(fd);
	return path;
}

static void t_defaults(void)
{
	memset(&C, 0xa5, sizeof(C));
	emp_conf_defaults(&C);
	CHECK(C.peers == NULL);
	CHECK_EQ(C.npeers, 0);
	CHECK_EQ(C.nrules, 0);
	CHECK_EQ(C.opt.ack_every, 3);
	CHECK_EQ(C.opt.rto_us, 1000);
	CHECK_EQ(C.opt.rto_max_us, 200000);
	CHECK_EQ(C.opt.retries, 24);
	CHECK_EQ(C.opt.flow_control, 0);
	CHECK_EQ(C.opt.checksum, 0);
	CHECK_EQ(C.opt.window, 64);
	CHECK_EQ(C.opt.peer_window, 512);
	CHECK_EQ(C.opt.descriptors, 32768);
	CHECK_EQ(C.opt.ethertype, 0x88B5);
	CHECK_EQ(C.opt.qdisc_bypass, 1);
	CHECK_EQ(C.opt.ack_delay_us, 50);
	CHECK_EQ(C.opt.spin_us, 50);
	emp_conf_free(&C);
	emp_conf_free(&C);
}

static void t_parse_good(void)
{
	const char *text =
		"# cluster\n"
		"\n"
		"peer node1 10.0.0.1 02:AA:bb:0C:dd:0e eth1   # first\n"
		"  peer\tnode-2.x_y\t192.168.7.200\t12:34:56:78:9a:bc\n"
		"option ack_every 5\n"
		"option flow_control on\n"
		"option ethertype 0x88b6\n"
		"use kernel port 22\n"
		"use emp port 5201-5210 prog iperf3 peer node1\n"
		"use kernel prog ssh\n";
	CHECK_EQ(parse(text), 0);
	CHECK_EQ(E[0], 0);
	CHECK(!strcmp(C.path, "t.conf"));
	CHECK_EQ(C.npeers, 2);
	const struct emp_conf_peer *p = &C.peers[0];
	CHECK(!strcmp(p->name, "node1"));
	CHECK_EQ(p->ip, ip("10.0.0.1"));
	static const uint8_t m0[6] = { 0x02, 0xaa, 0xbb, 0x0c, 0xdd, 0x0e };
	CHECK(!memcmp(p->mac, m0, 6));
	CHECK(!strcmp(p->ifname, "eth1"));
	CHECK_EQ(p->line, 3);
	p = &C.peers[1];
	CHECK(!strcmp(p->name, "node-2.x_y"));
	CHECK_EQ(p->ip, ip("192.168.7.200"));
	CHECK_EQ(ntohl(p->ip), 0xc0a807c8u);
	static const uint8_t m1[6] = { 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc };
	CHECK(!memcmp(p->mac, m1, 6));
	CHECK_EQ(p->ifname[0], 0);
	CHECK_EQ(p->line, 4);
	CHECK_EQ(C.opt.ack_every, 5);
	CHECK_EQ(C.opt.flow_control, 1);
	CHECK_EQ(C.opt.ethertype, 0x88b6);
	CHECK_EQ(C.opt.retries, 24);          /* untouched options keep defaults */
	CHECK_EQ(C.nrules, 3);
	CHECK_EQ(C.rules[0].use_emp, 0);
	CHECK_EQ(C.rules[0].port_lo, 22);
	CHECK_EQ(C.rules[0].port_hi, 22);
	CHECK_EQ(C.rules[0].line, 8);
	CHECK_EQ(C.rules[1].use_emp, 1);
	CHECK_EQ(C.rules[1].port_lo, 5201);
	CHECK_EQ(C.rules[1].port_hi, 5210);
	CHECK(!strcmp(C.rules[1].prog, "iperf3"));
	CHECK(!strcmp(C.rules[1].peer, "node1"));
	CHECK_EQ(C.rules[2].port_lo, 0);
	CHECK_EQ(C.rules[2].port_hi, 0);
	CHECK(!strcmp(C.rules[2].prog, "ssh"));
	CHECK_EQ(C.rules[2].peer[0], 0);
	emp_conf_free(&C);
	CHECK(C.peers == NULL);
}

static void t_all_options(void)
{
	const char *text =
		"option ack_every 64\noption rto_us 500\noption rto_max_us 500\noption retries 1000\n"
		"option flow_control on\noption checksum on\noption window 1\noption peer_window 1024\n"
		"option descriptors 1048576\noption ethertype 0x0600\noption qdisc_bypass off\n"
		"option ack_delay_us 0\noption spin_us 0\n";
	CHECK_EQ(parse(text), 0);
	CHECK_EQ(C.opt.ack_every, 64);
	CHECK_EQ(C.opt.rto_us, 500);
	CHECK_EQ(C.opt.rto_max_us, 500);
	CHECK_EQ(C.opt.retries, 1000);
	CHECK_EQ(C.opt.flow_control, 1);
	CHECK_EQ(C.opt.checksum, 1);
	CHECK_EQ(C.opt.window, 1);
	CHECK_EQ(C.opt.peer_window, 1024);
	CHECK_EQ(C.opt.descriptors, 1048576);
	CHECK_EQ(C.opt.ethertype, 0x0600);
	CHECK_EQ(C.opt.qdisc_bypass, 0);
	CHECK_EQ(C.opt.ack_delay_us, 0);
	CHECK_EQ(C.opt.spin_us, 0);
	emp_conf_free(&C);
	/* rto_us above the default ceiling is fine once rto_max_us follows it */
	CHECK_EQ(parse("option rto_max_us 900000\noption rto_us 300000\n"), 0);
	CHECK_EQ(C.opt.rto_us, 300000);
	emp_conf_free(&C);
}

static void t_empty_and_layout(void)
{
	CHECK_EQ(parse(""), 0);
	CHECK_EQ(C.npeers, 0);
	CHECK(C.peers == NULL);
	CHECK_EQ(emp_conf_parse(&C, "t.conf", NULL, 0, E, sizeof(E)), 0);
	CHECK_EQ(parse("# only a comment\n\n   \t\n#\n"), 0);
	CHECK_EQ(C.npeers, 0);
	CHECK_EQ(emp_conf_use_emp(&C, "x", -1, 80), 1);
	/* CRLF, comment glued to a token, no final newline */
	CHECK_EQ(parse("peer a 10.0.0.1 02:00:00:00:00:01#c\r\n\r\npeer b 10.0.0.2 02:00:00:00:00:02 veth0"), 0);
	CHECK_EQ(C.npeers, 2);
	CHECK(!strcmp(C.peers[1].ifname, "veth0"));
	CHECK_EQ(C.peers[1].line, 3);
	emp_conf_free(&C);
	/* errors do not need a valid err buffer */
	CHECK_EQ(emp_conf_parse(&C, "t.conf", "bogus", 5, NULL, 0), -EINVAL);
}

static void t_err_mac(void)
{
	expect_err(1, "02:00:00:00:00", "peer a 10.0.0.1 02:00:00:00:00\n");
	expect_err(1, "02:00:00:00:00:01:02", "peer a 10.0.0.1 02:00:00:00:00:01:02\n");
	expect_err(1, "zz:00:00:00:00:01", "peer a 10.0.0.1 zz:00:00:00:00:01\n");
	expect_err(1, "02-00-00-00-00-01", "peer a 10.0.0.1 02-00-00-00-00-01\n");
	expect_err(1, "2:0:0:0:0:1", "peer a 10.0.0.1 2:0:0:0:0:1\n");
	expect_err(2, "01:00:5e:00:00:01", "\npeer a 10.0.0.1 01:00:5e:00:00:01\n");
	expect_err(1, "ff:ff:ff:ff:ff:ff", "peer a 10.0.0.1 ff:ff:ff:ff:ff:ff\n");
	expect_err(1, "00:00:00:00:00:00", "peer a 10.0.0.1 00:00:00:00:00:00\n");
	CHECK(strstr(E, "zero"));
}

static void t_err_ip(void)
{
	expect_err(1, "10.0.0", "peer a 10.0.0 02:00:00:00:00:01\n");
	expect_err(1, "10.0.0.256", "peer a 10.0.0.256 02:00:00:00:00:01\n");
	expect_err(1, "node", "peer a node 02:00:00:00:00:01\n");
	expect_err(1, "::1", "peer a ::1 02:00:00:00:00:01\n");
	expect_err(1, "0.0.0.0", "peer a 0.0.0.0 02:00:00:00:00:01\n");
	expect_err(1, "224.0.0.1", "peer a 224.0.0.1 02:00:00:00:00:01\n");
	expect_err(1, "255.255.255.255", "peer a 255.255.255.255 02:00:00:00:00:01\n");
}

static void t_err_duplicate(void)
{
	expect_err(3, "a", PEERS "peer a 10.0.0.3 02:00:00:00:00:03\n");
	CHECK(strstr(E, "line 1"));
	expect_err(3, "10.0.0.2", PEERS "peer c 10.0.0.2 02:00:00:00:00:03\n");
	expect_err(4, "02:00:00:00:00:01", PEERS "\npeer c 10.0.0.3 02:00:00:00:00:01\n");
	/* MAC uniqueness is case-insensitive */
	expect_err(3, "02:AA:00:00:00:01",
		   "peer a 10.0.0.1 02:aa:00:00:00:01\n\npeer c 10.0.0.3 02:AA:00:00:00:01\n");
}

static void t_err_peer_fields(void)
{
	expect_err(1, "10.0.0.1", "peer a 10.0.0.1\n");
	CHECK(strstr(E, "missing MAC"));
	expect_err(1, "peer", "peer\n");
	expect_err(2, "extra", "\npeer a 10.0.0.1 02:00:00:00:00:01 eth0 extra\n");
	expect_err(1, "a/b", "peer a/b 10.0.0.1 02:00:00:00:00:01\n");
	expect_err(1, NULL, "peer 0123456789012345678901234567890123456789012345678901234567890123 "
		   "10.0.0.1 02:00:00:00:00:01\n");
	CHECK_EQ(parse("peer 012345678901234567890123456789012345678901234567890123456789012 "
		       "10.0.0.1 02:00:00:00:00:01\n"), 0);   /* 63 characters */
	emp_conf_free(&C);
	expect_err(1, "0123456789abcdef", "peer a 10.0.0.1 02:00:00:00:00:01 0123456789abcdef\n");
	CHECK_EQ(parse("peer a 10.0.0.1 02:00:00:00:00:01 0123456789abcde\n"), 0);
	emp_conf_free(&C);
	expect_err(1, "Peer", "Peer a 10.0.0.1 02:00:00:00:00:01\n");
	CHECK(strstr(E, "unknown directive"));
	expect_err(2, "route", "# x\nroute a b\n");
}

static void t_err_options(void)
{
	expect_err(1, "ack_evry", "option ack_evry 3\n");
	CHECK(strstr(E, "unknown option"));
	expect_err(1, "0", "option ack_every 0\n");
	expect_err(1, "65", "option ack_every 65\n");
	expect_err(1, "1001", "option retries 1001\n");
	expect_err(1, "0", "option window 0\n");
	expect_err(1, "65", "option window 65\n");
	expect_err(1, "63", "option descriptors 63\n");
	expect_err(1, "1048577", "option descriptors 1048577\n");
	expect_err(1, "0", "option peer_window 0\n");
	expect_err(1, "-1", "option spin_us -1\n");
	expect_err(1, "3x", "option ack_every 3x\n");
	expect_err(1, "99999999999999999999999", "option rto_us 99999999999999999999999\n");
	expect_err(1, "yes", "option checksum yes\n");
	expect_err(1, "0x05ff", "option ethertype 0x05ff\n");
	expect_err(1, "88B5", "option ethertype 88B5\n");
	expect_err(1, "0x188B5", "option ethertype 0x188B5\n");
	expect_err(1, "0xg8B5", "option ethertype 0xg8B5\n");
	expect_err(2, "ack_every", "\noption ack_every\n");
	expect_err(1, "option", "option\n");
	expect_err(1, "4", "option ack_every 3 4\n");
	expect_err(2, "ack_every", "option ack_every 3\noption ack_every 4\n");
	/* rto_max_us must be >= rto_us, reported on the later of the two */
	expect_err(3, "2000", "option rto_us 2000\n\noption rto_max_us 1000\n");
	expect_err(1, "300000", "option rto_us 300000\n");
}

static void t_err_rules(void)
{
	/* a peer may be declared after the rule that names it */
	CHECK_EQ(parse("use kernel peer b\n" PEERS), 0);
	CHECK_EQ(C.nrules, 1);
	emp_conf_free(&C);
	expect_err(3, "c", PEERS "use kernel peer c\n");
	CHECK(strstr(E, "unknown peer"));
	expect_err(2, "nobody", "use emp\nuse kernel port 80 peer nobody\nuse emp\n");
	expect_err(1, "0", "use kernel port 0\n");
	expect_err(1, "65536", "use kernel port 65536\n");
	expect_err(1, "10-5", "use kernel port 10-5\n");
	expect_err(1, "5-", "use kernel port 5-\n");
	expect_err(1, "-5", "use kernel port -5\n");
	expect_err(1, "1-2-3", "use kernel port 1-2-3\n");
	expect_err(1, "http", "use kernel port http\n");
	expect_err(1, "tcp", "use tcp port 22\n");
	expect_err(1, "use", "use\n");
	expect_err(1, "port", "use kernel port\n");
	expect_err(1, "host", "use kernel host a\n");
	expect_err(1, "port", "use kernel port 1 port 2\n");
	expect_err(1, "prog", "use kernel prog a prog b\n");
	expect_err(1, "a/b", "use kernel prog a/b\n");
	CHECK_EQ(parse("use kernel port 1-65535\nuse emp port 65535\n"), 0);
	CHECK_EQ(C.rules[0].port_lo, 1);
	CHECK_EQ(C.rules[0].port_hi, 65535);
	emp_conf_free(&C);
}

static void t_err_limits(void)
{
	static char text[(EMP_CONF_MAX_PEERS + 2) * 48];
	char line[1100];
	/* 1023 characters is fine, 1024 is not */
	memset(line, ' ', 1023);
	memcpy(line + 1000, "# c", 3);
	line[1023] = 0;
	snprintf(text, sizeof(text), "\n%s\n", line);
	CHECK_EQ(parse(text), 0);
	snprintf(text, sizeof(text), "\n%s \n", line);
	expect_err(2, NULL, text);
	CHECK(strstr(E, "longer than 1023"));
	snprintf(text, sizeof(text), "%s ", line);      /* also without a newline */
	expect_err(1, NULL, text);
	/* NUL byte */
	static const char nul[] = "peer a 10.0.0.1 02:00:00:00:00:01\npeer b\0 10.0.0.2 02:00:00:00:00:02\n";
	CHECK_EQ(emp_conf_parse(&C, "t.conf", nul, sizeof(nul) - 1, E, sizeof(E)), -EINVAL);
	CHECK(!strncmp(E, "t.conf:2: ", 10));
	CHECK(strstr(E, "NUL"));
	CHECK(C.peers == NULL);
	/* EMP_CONF_MAX_PEERS peers fit, one more does not */
	size_t n = 0;
	for (int i = 0; i < EMP_CONF_MAX_PEERS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "peer p%d 10.%d.%d.1 02:00:00:00:%02x:%02x\n",
				      i, i / 256, i % 256, i / 256, i % 256);
	CHECK_EQ(parse(text), 0);
	CHECK_EQ(C.npeers, EMP_CONF_MAX_PEERS);
	CHECK_EQ(emp_conf_find_name(&C, "p4095"), 4095);
	emp_conf_free(&C);
	snprintf(text + n, sizeof(text) - n, "peer extra 10.9.9.9 02:00:00:00:ff:ff\n");
	expect_err(EMP_CONF_MAX_PEERS + 1, "extra", text);
	CHECK(strstr(E, "too many peers"));
	/* EMP_CONF_MAX_RULES rules fit, one more does not */
	n = 0;
	for (int i = 0; i < EMP_CONF_MAX_RULES; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "use kernel port %d\n", i + 1);
	CHECK_EQ(parse(text), 0);
	CHECK_EQ(C.nrules, EMP_CONF_MAX_RULES);
	snprintf(text + n, sizeof(text) - n, "use emp\n");
	expect_err(EMP_CONF_MAX_RULES + 1, NULL, text);
	CHECK(strstr(E, "too many rules"));
	/* too many fields on one line */
	expect_err(1, NULL, "use emp a b c d e f g h i j k l m n o p q r\n");
	/* non-printable bytes are shown as '?' */
	expect_err(1, "b?d", "b\x01" "d\n");
}

static void t_load_missing(void)
{
	const char *path = "/tmp/emp-conf-test-does-not-exist/emp.conf";
	CHECK_EQ(emp_conf_load(&C, path, E, sizeof(E)), -ENOENT);
	CHECK(strstr(E, path));
	CHECK(strstr(E, "EMP_CONF"));
	CHECK(C.peers == NULL);
	emp_conf_free(&C);
	/* a directory is not a config */
	CHECK_EQ(emp_conf_load(&C, "/tmp", E, sizeof(E)), -EINVAL);
	CHECK(strstr(E, "/tmp"));
}

static void t_load_env(void)
{
	const char *text = PEERS "option retries 7\n";
	char *path = write_tmp(text, strlen(text));
	char saved[64];
	strcpy(saved, path);
	CHECK_EQ(setenv("EMP_CONF", saved, 1), 0);
	CHECK_EQ(emp_conf_load(&C, NULL, E, sizeof(E)), 0);
	CHECK(!strcmp(C.path, saved));
	CHECK_EQ(C.npeers, 2);
	CHECK_EQ(C.opt.retries, 7);
	emp_conf_free(&C);
	/* an explicit path wins over $EMP_CONF */
	CHECK_EQ(emp_conf_load(&C, "/tmp/emp-conf-test-nope", E, sizeof(E)), -ENOENT);
	unlink(saved);
	/* $EMP_CONF naming a missing file */
	CHECK_EQ(emp_conf_load(&C, NULL, E, sizeof(E)), -ENOENT);
	CHECK(strstr(E, saved));
	CHECK(strstr(E, "$EMP_CONF"));
	/* unset: the default path */
	unsetenv("EMP_CONF");
	int rc = emp_conf_load(&C, NULL, E, sizeof(E));
	CHECK(!strcmp(C.path, EMP_CONF_DEFAULT_PATH));
	if (rc == -ENOENT)
		CHECK(strstr(E, EMP_CONF_DEFAULT_PATH));
	emp_conf_free(&C);
}

static void t_load_errors(void)
{
	const char *text = PEERS "\npeer c 10.0.0.3 02:00:00:00:00:0g\n";
	char *path = write_tmp(text, strlen(text));
	char want[96];
	snprintf(want, sizeof(want), "%s:4: ", path);
	CHECK_EQ(emp_conf_load(&C, path, E, sizeof(E)), -EINVAL);
	CHECK_MSG(!strncmp(E, want, strlen(want)), "%s", E);
	CHECK(C.peers == NULL);
	unlink(path);
	/* larger than 4 MiB (sparse) */
	path = write_tmp("", 0);
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_EQ(ftruncate(fd, (4 << 20) + 1), 0);
	close(fd);
	CHECK_EQ(emp_conf_load(&C, path, E, sizeof(E)), -EINVAL);
	CHECK(strstr(E, "4 MiB"));
	unlink(path);
}

static void t_example(void)
{
	CHECK_MSG(emp_conf_load(&C, "conf/emp.conf.example", E, sizeof(E)) == 0, "%s", E);
	CHECK(C.npeers >= 2 && C.npeers <= 4);
	CHECK(C.nrules >= 2);
	struct emp_conf d;
	emp_conf_defaults(&d);
	CHECK(!memcmp(&C.opt, &d.opt, sizeof(d.opt)));   /* every option shown is the default */
	emp_conf_free(&C);
}

static void t_rules_match(void)
{
	const char *text = PEERS
		"peer c 10.0.0.3 02:00:00:00:00:03\n"
		"use kernel port 22\n"
		"use emp port 20-30 peer a\n"         /* shadowed at 22 by the rule above */
		"use kernel port 20-30\n"
		"use kernel prog ssh\n"
		"use emp prog rsync peer b\n"
		"use kernel prog rsync\n"
		"use kernel peer c port 5000-5001\n";
	CHECK_EQ(parse(text), 0);
	int a = emp_conf_find_name(&C, "a"), b = emp_conf_find_name(&C, "b"), c = emp_conf_find_name(&C, "c");
	CHECK(a == 0 && b == 1 && c == 2);
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 22), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 21), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 20), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 30), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", b, 21), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 31), 1);       /* no rule: emp */
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 19), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "ssh", a, 80), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "/usr/bin/ssh", a, 80), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "sshd", a, 80), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "rsync", b, 873), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "rsync", a, 873), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "rsync", -1, 873), 0);
	CHECK_EQ(emp_conf_use_emp(&C, NULL, b, 873), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", c, 5000), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "app", c, 5001), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "app", c, 5002), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", b, 5000), 1);
	CHECK_EQ(emp_conf_use_emp(&C, "app", 99, 5000), 1);    /* out-of-range index never matches a peer */
	CHECK_EQ(emp_conf_use_emp(&C, "app", a, 0), 1);
	emp_conf_free(&C);
	/* a catch-all rule decides everything after it */
	CHECK_EQ(parse("use kernel\nuse emp port 80\n"), 0);
	CHECK_EQ(emp_conf_use_emp(&C, "x", -1, 80), 0);
	emp_conf_free(&C);
}

static void t_find(void)
{
	CHECK_EQ(parse(PEERS "peer c 10.0.0.3 02:00:00:00:00:03 eth2\n"), 0);
	CHECK_EQ(emp_conf_find_name(&C, "a"), 0);
	CHECK_EQ(emp_conf_find_name(&C, "c"), 2);
	CHECK_EQ(emp_conf_find_name(&C, "d"), -1);
	CHECK_EQ(emp_conf_find_name(&C, "A"), -1);
	CHECK_EQ(emp_conf_find_name(&C, NULL), -1);
	CHECK_EQ(emp_conf_find_ip(&C, ip("10.0.0.2")), 1);
	CHECK_EQ(emp_conf_find_ip(&C, ip("10.0.0.3")), 2);
	CHECK_EQ(emp_conf_find_ip(&C, ip("10.0.0.4")), -1);
	CHECK_EQ(emp_conf_find_ip(&C, htonl(0x0a000001)), 0);
	static const uint8_t mb[6] = { 2, 0, 0, 0, 0, 2 }, mx[6] = { 2, 0, 0, 0, 0, 9 };
	CHECK_EQ(emp_conf_find_mac(&C, mb), 1);
	CHECK_EQ(emp_conf_find_mac(&C, mx), -1);
	CHECK_EQ(emp_conf_find_mac(&C, C.peers[2].mac), 2);
	emp_conf_free(&C);
	CHECK_EQ(emp_conf_find_name(&C, "a"), -1);
	CHECK_EQ(emp_conf_find_ip(&C, ip("10.0.0.1")), -1);
}

static void t_mac(void)
{
	uint8_t m[6], r[6];
	char s[18];
	CHECK_EQ(emp_conf_parse_mac("02:AB:cd:Ef:00:9f", m), 0);
	static const uint8_t want[6] = { 0x02, 0xab, 0xcd, 0xef, 0x00, 0x9f };
	CHECK(!memcmp(m, want, 6));
	emp_conf_format_mac(m, s);
	CHECK(!strcmp(s, "02:ab:cd:ef:00:9f"));
	CHECK_EQ(emp_conf_parse_mac(s, r), 0);
	CHECK(!memcmp(m, r, 6));
	for (int i = 0; i < 256; i++) {
		uint8_t x[6] = { (uint8_t)i, (uint8_t)(255 - i), (uint8_t)(i * 7), 0, 0xff, (uint8_t)(i ^ 0x5a) };
		emp_conf_format_mac(x, s);
		CHECK_EQ(strlen(s), 17);
		CHECK_EQ(emp_conf_parse_mac(s, r), 0);
		CHECK(!memcmp(x, r, 6));
	}
	memset(r, 0x77, 6);
	const char *bad[] = { "", "02:ab:cd:ef:00", "02:ab:cd:ef:00:9f:", "02:ab:cd:ef:00:9", "02:ab:cd:ef:00:9fa",
			      "02-ab-cd-ef-00-9f", "0x:ab:cd:ef:00:9f", " 2:ab:cd:ef:00:9f", "02:ab:cd:ef:00: 9", NULL };
	for (int i = 0; bad[i]; i++)
		CHECK_MSG(emp_conf_parse_mac(bad[i], r) == -EINVAL, "%s", bad[i]);
	CHECK_EQ(emp_conf_parse_mac(NULL, r), -EINVAL);
	CHECK_EQ(r[0], 0x77);     /* untouched on error */
}

/* EtherTypes of other protocols are refused, each by name. */
static void t_err_ethertype_taken(void)
{
	static const struct { const char *v, *name; } taken[] = {
		{ "0x0800", "IPv4" }, { "0x0806", "ARP" }, { "0x86dd", "IPv6" }, { "0x86DD", "IPv6" },
		{ "0x8100", "VLAN" }, { "0x88a8", "VLAN" }, { "0x9100", "VLAN" }, { "0x8035", "RARP" },
		{ "0x8847", "MPLS" }, { "0x88cc", "LLDP" }, { "0x888e", "802.1X" },
	};
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		char text[64];
		snprintf(text, sizeof(text), "option ethertype %s\n", taken[i].v);
		expect_err(1, taken[i].v, text);
		CHECK_MSG(strstr(E, taken[i].name), "%s: %s", taken[i].v, E);
	}
	expect_err(1, "0x0000", "option ethertype 0x0000\n");
	expect_err(1, "0x05dc", "option ethertype 0x05dc\n");     /* an 802.3 length */
	CHECK_EQ(parse("option ethertype 0x88b6\n"), 0);
	CHECK_EQ(C.opt.ethertype, 0x88b6);
	emp_conf_free(&C);
}

/* option stats_group: a group name or number. */
static void t_stats_group(void)
{
	CHECK_EQ(parse("option stats_group emp-stats\n"), 0);
	CHECK(!strcmp(C.opt.stats_group, "emp-stats"));
	emp_conf_free(&C);
	CHECK_EQ(parse("option stats_group 1234\n"), 0);
	CHECK(!strcmp(C.opt.stats_group, "1234"));
	emp_conf_free(&C);
	CHECK_EQ(parse(PEERS), 0);
	CHECK_EQ(C.opt.stats_group[0], 0);
	emp_conf_free(&C);
	expect_err(1, "a/b", "option stats_group a/b\n");
	expect_err(1, "-x", "option stats_group -x\n");
	expect_err(1, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "option stats_group aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
}

/* option transport: afpacket (default) or udp, nothing else. */
static void t_transport(void)
{
	CHECK_EQ(parse(PEERS), 0);
	CHECK_EQ(C.opt.transport, EMP_TRANSPORT_AFPACKET);
	emp_conf_free(&C);
	CHECK_EQ(parse("option transport udp\n"), 0);
	CHECK_EQ(C.opt.transport, EMP_TRANSPORT_UDP);
	emp_conf_free(&C);
	CHECK_EQ(parse("option transport afpacket\n"), 0);
	CHECK_EQ(C.opt.transport, EMP_TRANSPORT_AFPACKET);
	emp_conf_free(&C);
	expect_err(1, "tcp", "option transport tcp\n");
	expect_err(1, "UDP", "option transport UDP\n");
}

/* The config must be a regular file: a FIFO (which would block the first
 * socket() of every program for ever), a device or a socket is refused at
 * once, named directly or by $EMP_CONF. */
static void t_load_not_regular(void)
{
	char fifo[64];
	snprintf(fifo, sizeof(fifo), "/tmp/emp-conf-fifo-%d", (int)getpid());
	unlink(fifo);
	CHECK_EQ(mkfifo(fifo, 0600), 0);
	alarm(5);                          /* a hang fails here */
	CHECK_EQ(emp_conf_load(&C, fifo, E, sizeof(E)), -EINVAL);
	CHECK_MSG(strstr(E, fifo) && strstr(E, "FIFO"), "%s", E);
	CHECK_EQ(setenv("EMP_CONF", fifo, 1), 0);
	CHECK_EQ(emp_conf_load(&C, NULL, E, sizeof(E)), -EINVAL);
	unsetenv("EMP_CONF");
	CHECK_EQ(emp_conf_load(&C, "/dev/null", E, sizeof(E)), -EINVAL);
	CHECK_MSG(strstr(E, "device"), "%s", E);
	CHECK_EQ(emp_conf_load(&C, "/dev/zero", E, sizeof(E)), -EINVAL);
	alarm(0);
	unlink(fifo);
	/* a symlink to a regular file is fine (/etc keeps configs that way) */
	const char *text = PEERS;
	char *path = write_tmp(text, strlen(text));
	char link[64];
	snprintf(link, sizeof(link), "/tmp/emp-conf-link-%d", (int)getpid());
	unlink(link);
	CHECK_EQ(symlink(path, link), 0);
	CHECK_EQ(emp_conf_load(&C, link, E, sizeof(E)), 0);
	CHECK_EQ(C.npeers, 2);
	emp_conf_free(&C);
	unlink(link);
	unlink(path);
}

static const struct emp_test tests[] = {
	{ "conf_defaults", t_defaults, 0 },
	{ "conf_parse_good", t_parse_good, 0 },
	{ "conf_all_options", t_all_options, 0 },
	{ "conf_empty_and_layout", t_empty_and_layout, 0 },
	{ "conf_err_mac", t_err_mac, 0 },
	{ "conf_err_ip", t_err_ip, 0 },
	{ "conf_err_duplicate", t_err_duplicate, 0 },
	{ "conf_err_peer_fields", t_err_peer_fields, 0 },
	{ "conf_err_options", t_err_options, 0 },
	{ "conf_err_rules", t_err_rules, 0 },
	{ "conf_err_limits", t_err_limits, 0 },
	{ "conf_load_missing", t_load_missing, 0 },
	{ "conf_load_env", t_load_env, 0 },
	{ "conf_load_errors", t_load_errors, 0 },
	{ "conf_err_ethertype_taken", t_err_ethertype_taken, 0 },
	{ "conf_stats_group", t_stats_group, 0 },
	{ "conf_transport", t_transport, 0 },
	{ "conf_load_not_regular", t_load_not_regular, 10 },
	{ "conf_example", t_example, 0 },
	{ "conf_rules_match", t_rules_match, 0 },
	{ "conf_find", t_find, 0 },
	{ "conf_mac", t_mac, 0 },
};

const struct emp_test_suite emp_suite_conf = { "conf", tests, sizeof(tests) / sizeof(tests[0]) };
