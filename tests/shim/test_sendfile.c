/* test_sendfile.c: sendfile on an EMP stream (the file read straight into the send slots) on the simulated wire: offsets, the file offset, end of file, a partial send. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "simwire.h"

static int temp_file(uint8_t *data, size_t n)
{
	char path[] = "/tmp/emp-sendfile-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	for (size_t k = 0; k < n; k++)
		data[k] = (uint8_t)(k * 7 + k / 251);
	CHECK_EQ(write(fd, data, n), (ssize_t)n);
	CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* this process's read system calls so far (read, pread, readv, preadv:
 * /proc/self/io syscr), or 0 if the kernel does not count them */
static uint64_t read_calls(void)
{
	char b[512];
	int fd = open("/proc/self/io", O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, b, sizeof b - 1);
	close(fd);
	b[n > 0 ? n : 0] = 0;
	const char *p = strstr(b, "syscr:");
	return p ? strtoull(p + 6, NULL, 10) : 0;
}

/* read exactly n bytes at side 1 and compare (the engines driven between tries) */
static void expect(struct sw *w, const uint8_t *want, size_t n)
{
	static uint8_t b[65536];
	size_t got = 0;
	for (int i = 0; i < 200 && got < n; i++) {
		ssize_t r = read(w->fd[1], b + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else
			sw_settle(w);
	}
	CHECK_EQ(got, n);
	CHECK(!memcmp(b, want, n));
}

static void t_sendfile(void)
{
	struct sw w;
	sw_open(&w, NULL, 8, 4096);
	static uint8_t data[100000];
	int f = temp_file(data, sizeof data);
	/* at an offset: the file offset does not move */
	off_t off = 100;
	CHECK_EQ(sendfile(w.fd[0], f, &off, 5000), 5000);
	CHECK_EQ(off, 5100);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 0);
	expect(&w, data + 100, 5000);
	/* from the file offset, asking past the end: the rest of the file, and the offset moves */
	CHECK_EQ(lseek(f, 99000, SEEK_SET), 99000);
	CHECK_EQ(sendfile(w.fd[0], f, NULL, 5000), 1000);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), 100000);
	expect(&w, data + 99000, 1000);
	CHECK_EQ(sendfile(w.fd[0], f, NULL, 10), 0);          /* at the end */
	/* more than the send slots hold (non-blocking): a partial send, and the
	 * file offset moved by exactly what was sent */
	CHECK_EQ(lseek(f, 0, SEEK_SET), 0);
	uint64_t rd0 = read_calls();
	ssize_t r = sendfile(w.fd[0], f, NULL, sizeof data);
	uint64_t rd = read_calls() - rd0;
	CHECK(r > 0 && r < (ssize_t)sizeof data);
	CHECK_EQ(lseek(f, 0, SEEK_CUR), r);
	/* the 8 free slots filled by one read of the file (one per slot before) */
	CHECK_EQ(r, 8 * 4096);
	CHECK_MSG(rd <= 2, "%llu read calls for 8 slots", (unsigned long long)rd);
	expect(&w, data, (size_t)r);
	/* a descriptor that cannot be read: the error, nothing sent */
	int wr = open("/dev/null", O_WRONLY);
	CHECK_EQ(sendfile(w.fd[0], wr, NULL, 10), -1);
	CHECK_EQ(errno, EBADF);
	close(wr);
	close(f);
}

static const struct emp_test tests[] = {
	{ "shim_sendfile", t_sendfile, 20 },
};

const struct emp_test_suite emp_suite_sendfile = { "sendfile", tests, sizeof(tests) / sizeof(tests[0]) };
