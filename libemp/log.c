/* log.c: EMP_DEBUG=1..3 diagnostics to stderr, one "emp: " line per call, written with one write(2). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "sys.h"
#include "stats.h"

static int level = -1;

int emp__log_level(void)
{
	int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
	if (l < 0) {
		const char *e = secure_getenv("EMP_DEBUG");
		l = e && *e ? atoi(e) : 0;
		if (l < 0)
			l = 0;
		__atomic_store_n(&level, l, __ATOMIC_RELAXED);
	}
	return l;
}

void emp__log(int lvl, const char *fmt, ...)
{
	if (lvl > emp__log_level())
		return;
	int saved = errno;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + 5, sizeof(buf) - 6, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if (n > (int)sizeof(buf) - 7)
		n = (int)sizeof(buf) - 7;
	buf[0] = 'e', buf[1] = 'm', buf[2] = 'p', buf[3] = ':', buf[4] = ' ';
	buf[5 + n] = '\n';
	ssize_t w = emp__sys_write(2, buf, (size_t)n + 6);
	(void)w;
	errno = saved;
}
