/* load.c: reading the cluster config file ($EMP_CONF or the default path): open without blocking, regular files only, a size limit, then the parser. */
#include "sys.h"
#include "conf.h"
#include "conf_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads a whole file, at most CONF_MAX_BYTES, into a malloc'd buffer (untouched pages cost nothing). */
static int read_all(int fd, const char *path, char **out, unsigned long *outlen, char *err,
		    unsigned errlen)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		emp__conf_seterr(err, errlen, "%s: cannot stat: %s", path, strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		emp__conf_seterr(err, errlen, "%s: is %s, not a config file (a regular file)", path,
		       S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
		       S_ISSOCK(st.st_mode) ? "a socket" : "a device");
		return -EINVAL;
	}
	size_t used = 0;
	char *buf = malloc(CONF_MAX_BYTES + 1);
	if (!buf) {
		emp__conf_seterr(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	while (used <= CONF_MAX_BYTES) {
		ssize_t r = emp__sys_read(fd, buf + used, CONF_MAX_BYTES + 1 - used);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			emp__conf_seterr(err, errlen, "%s: cannot read: %s", path, strerror(e));
			return -e;
		}
		if (r == 0)
			break;
		used += (size_t)r;
	}
	if (used > CONF_MAX_BYTES) {
		free(buf);
		emp__conf_seterr(err, errlen, "%s: file is larger than %lu MiB; not a cluster config", path,
		       CONF_MAX_BYTES >> 20);
		return -EINVAL;
	}
	*out = buf;
	*outlen = used;
	return 0;
}

int emp_conf_load(struct emp_conf *c, const char *path, char *err, unsigned errlen)
{
	const char *env = NULL;
	char *text = NULL;
	unsigned long len = 0;

	emp_conf_defaults(c);
	if (!path) {
		env = secure_getenv("EMP_CONF");
		path = env && *env ? env : EMP_CONF_DEFAULT_PATH;
		if (path != env)
			env = NULL;
	}
	snprintf(c->path, sizeof(c->path), "%s", path);
	/* never blocks: a FIFO (or a device) named as the config is refused, not read */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			emp__conf_seterr(err, errlen, "%s: no such cluster config file%s; write one (see "
			       "conf/emp.conf.example) or set EMP_CONF=/path/to/emp.conf", path,
			       env ? " (named by $EMP_CONF)" : "");
		else if (e == EACCES || e == EPERM)
			emp__conf_seterr(err, errlen, "%s: permission denied reading the cluster config", path);
		else
			emp__conf_seterr(err, errlen, "%s: cannot open: %s", path, strerror(e));
		return e == EPERM ? -EACCES : -e;
	}
	int rc = read_all(fd, path, &text, &len, err, errlen);
	emp__sys_close(fd);
	if (rc < 0)
		return rc;
	rc = emp_conf_parse(c, path, text, len, err, errlen);
	free(text);
	return rc;
}
