/* sys.c: the library's raw system calls: libc's syscall(), found once with dlsym(RTLD_NEXT), so an interposed syscall() (the sockets shim's, preload/rawcalls.c) never sees them. */
#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#include "sys.h"

typedef long (*syscall_fn)(long, ...);

long emp__sys6(long nr, long a, long b, long c, long d, long e, long f)
{
	static syscall_fn libc;
	syscall_fn fn = __atomic_load_n(&libc, __ATOMIC_ACQUIRE);
	if (!fn) {
		fn = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
		if (!fn)
			fn = syscall;        /* linked statically: nothing comes before us */
		__atomic_store_n(&libc, fn, __ATOMIC_RELEASE);
	}
	return fn(nr, a, b, c, d, e, f);
}
