/* authkey.c: the cluster secret for frame authentication (option auth_key): the file's checks and the key derived from it. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEYFILE_MIN 16            /* bytes: at least 128 bits of secret (e.g. 32 from /dev/urandom) */
#define KEYFILE_MAX 4096

/* The file must be a regular file owned by us or root, readable by nobody
 * else (no group or other permission bits); its whole content is the
 * secret, hashed into the engine's 128-bit key. 0, or -errno with err set. */
int emp__auth_key_load(const char *path, uint8_t key[16], char *err, size_t errlen)
{
	uint8_t buf[KEYFILE_MAX + 1];
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "emp: auth_key %s: %s", path, strerror(e));
		return -e;
	}
	int rc = -EINVAL;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(err, errlen, "emp: auth_key %s: %s", path, strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "emp: auth_key %s: not a regular file", path);
	} else if (st.st_uid != geteuid() && st.st_uid != 0) {
		rc = -EPERM;
		snprintf(err, errlen, "emp: auth_key %s: owned by uid %u, must be owned by uid %u or root", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
	} else if (st.st_mode & 077) {
		rc = -EPERM;
		snprintf(err, errlen, "emp: auth_key %s: mode %04o lets others read it; chmod 600 it", path,
			 (unsigned)(st.st_mode & 07777));
	} else {
		ssize_t n = 0, r;
		while (n <= KEYFILE_MAX && (r = read(fd, buf + n, sizeof(buf) - (size_t)n)) > 0)
			n += r;
		if (n < KEYFILE_MIN || n > KEYFILE_MAX) {
			snprintf(err, errlen, "emp: auth_key %s: %zd bytes, expected %d..%d (e.g. head -c 32 /dev/urandom)",
				 path, n, KEYFILE_MIN, KEYFILE_MAX);
		} else {
			static const uint8_t label[16] = "EMP-cluster-key";
			struct emp_sip s;
			for (uint8_t d = 0; d < 2; d++) {
				emp__sip_init(&s, label);
				emp__sip_update(&s, &d, 1);
				emp__sip_update(&s, buf, (uint64_t)n);
				uint64_t v = emp__sip_final(&s);
				for (int i = 0; i < 8; i++)
					key[8 * d + i] = (uint8_t)(v >> (56 - 8 * i));
			}
			rc = 0;
		}
		explicit_bzero(buf, sizeof(buf));
	}
	close(fd);
	return rc;
}
