/* test_flags.c: recv/send flags that kernel TCP gives a meaning to, on an EMP stream (simulated wire): MSG_TRUNC discards (HAProxy's drain), MSG_OOB is refused, SIOCOUTQ counts the unacknowledged bytes. */
#include <errno.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "simwire.h"

/* side 1 sees at least n bytes waiting (the engines driven between looks) */
static void wait_bytes(struct sw *w, size_t n)
{
	for (int i = 0; i < 200; i++) {
		ssize_t r = recv(w->fd[1], NULL, 1 << 30, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
		if (r >= (ssize_t)n)
			return;
		sw_settle(w);
	}
	CHECK_MSG(0, "fewer than %zu bytes arrived", n);
}

/* MSG_TRUNC with no buffer: MSG_PEEK|MSG_TRUNC counts what waits, MSG_TRUNC
 * consumes that many bytes without copying (a NULL buffer, as HAProxy
 * passes; the shim crashed copying into it), and the next read gets the
 * bytes after them; over two messages too */
static void t_flags_trunc(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	uint8_t out[6000], in[6000];
	sw_fill(out, sizeof out, 0, 0);
	CHECK_EQ(write(w.fd[0], out, 3000), 3000);
	CHECK_EQ(write(w.fd[0], out + 3000, 3000), 3000);
	wait_bytes(&w, 6000);
	CHECK_EQ(recv(w.fd[1], NULL, 1 << 30, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT), 6000);
	CHECK_EQ(recv(w.fd[1], NULL, 1000, MSG_TRUNC | MSG_DONTWAIT), 1000);
	CHECK_EQ(recv(w.fd[1], in, 10, MSG_DONTWAIT), 10);
	CHECK(!memcmp(in, out + 1000, 10));
	CHECK_EQ(recv(w.fd[1], NULL, 3000, MSG_TRUNC | MSG_DONTWAIT), 3000);   /* across the two messages */
	ssize_t r = recv(w.fd[1], in, sizeof in, MSG_DONTWAIT);
	CHECK_EQ(r, 1990);
	CHECK(!memcmp(in, out + 4010, 1990));
	CHECK_EQ(recv(w.fd[1], NULL, 100, MSG_TRUNC | MSG_DONTWAIT), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	h_free(&w.h);
}

/* MSG_OOB: EMP carries no urgent data. recv says EINVAL (the kernel's
 * answer with none pending) and leaves the stream alone; send says
 * EOPNOTSUPP instead of sending the byte inline as if it were data */
static void t_flags_oob(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	CHECK_EQ(write(w.fd[0], "abc", 3), 3);
	wait_bytes(&w, 3);
	char b[8];
	CHECK_EQ(recv(w.fd[1], b, 1, MSG_OOB | MSG_DONTWAIT), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(send(w.fd[0], "!", 1, MSG_OOB), -1);
	CHECK_EQ(errno, EOPNOTSUPP);
	CHECK_EQ(recv(w.fd[1], b, sizeof b, MSG_DONTWAIT), 3);
	CHECK(!memcmp(b, "abc", 3));
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	h_free(&w.h);
}

/* SIOCOUTQ counts what was written and not yet acknowledged, SIOCOUTQNSD
 * what of it the engine has not taken yet (the kernel socket holds none of
 * the stream's bytes: it said 0 at once) */
static void t_flags_outq(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	uint8_t out[3000];
	sw_fill(out, sizeof out, 0, 0);
	CHECK_EQ(write(w.fd[0], out, sizeof out), 3000);
	int q = -1, nsd = -1;
	CHECK(ioctl(w.fd[0], SIOCOUTQ, &q) == 0 && ioctl(w.fd[0], SIOCOUTQNSD, &nsd) == 0);
	CHECK_EQ(q, 3000);
	CHECK(nsd >= 0 && nsd <= 3000);
	wait_bytes(&w, 3000);
	for (int i = 0; i < 200 && q; i++) {
		sw_settle(&w);
		CHECK(ioctl(w.fd[0], SIOCOUTQ, &q) == 0);
	}
	CHECK_EQ(q, 0);
	CHECK(ioctl(w.fd[0], SIOCOUTQNSD, &nsd) == 0);
	CHECK_EQ(nsd, 0);
	CHECK(close(w.fd[0]) == 0 && close(w.fd[1]) == 0);
	h_free(&w.h);
}

static const struct emp_test tests[] = {
	{ "shim_flags_trunc", t_flags_trunc, 20 },
	{ "shim_flags_oob", t_flags_oob, 20 },
	{ "shim_flags_outq", t_flags_outq, 20 },
};

const struct emp_test_suite emp_suite_flags = { "flags", tests, sizeof(tests) / sizeof(tests[0]) };
