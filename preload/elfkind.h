/* elfkind.h: what kind of program an ELF image is, for the programs the EMP library cannot reach: a Go program's build-ID note (emp-run reads the file, the shim its own image). */
#ifndef EMP_ELFKIND_H
#define EMP_ELFKIND_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * A Go program makes its socket calls as raw system calls, past libc, so a
 * preloaded library never sees them (its connections stay on kernel TCP
 * whatever the shim does); a statically linked program gets no preload at
 * all. Go's linker puts a note named "Go" (its build ID) into every binary.
 */

/* 1 if the notes in p[0..len) (a PT_NOTE segment's bytes) hold one named "Go" */
static inline int es__notes_have_go(const unsigned char *p, size_t len)
{
	size_t off = 0;
	while (len - off >= 12) {
		uint32_t namesz, descsz;
		memcpy(&namesz, p + off, 4);
		memcpy(&descsz, p + off + 4, 4);
		size_t name = off + 12, nlen = ((size_t)namesz + 3) & ~(size_t)3, dlen = ((size_t)descsz + 3) & ~(size_t)3;
		if (nlen > len - name || dlen > len - name - nlen)
			return 0;            /* truncated or malformed: not a note we know */
		if ((namesz == 3 || namesz == 4) && !memcmp(p + name, "Go", 3))   /* Go's linker says 4 */
			return 1;
		off = name + nlen + dlen;
	}
	return 0;
}

#endif
