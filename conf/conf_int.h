/* conf_int.h: what conf.c and load.c share: the size limit and the error message helper. */
#ifndef EMP_CONF_INT_H
#define EMP_CONF_INT_H

#define CONF_MAX_BYTES (4ul << 20)     /* a config (file or text) larger than this is an error */

/* printf into err (errlen bytes; nothing if err is NULL or errlen 0) */
__attribute__((format(printf, 3, 4)))
void emp__conf_seterr(char *err, unsigned errlen, const char *fmt, ...);

#endif
