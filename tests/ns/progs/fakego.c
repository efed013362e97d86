/* fakego.c: a C program carrying the note Go's linker writes into every Go binary (name "Go", type 4: its build ID), for emp-run's and the shim's check of programs whose socket calls bypass libc. */
#include <stdio.h>
__asm__(".section .note.go.buildid,\"a\",@note\n"
	".p2align 2\n"
	".long 4\n.long 8\n.long 4\n"
	".asciz \"Go\"\n.byte 0\n"
	".ascii \"fakebld0\"\n"
	".previous\n");
int main(void)
{
	puts("fakego ran");
	return 0;
}
