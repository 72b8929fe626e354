/* The initial stack as Linux builds it: argc, argv, envp and the auxiliary vector. Prints
 * what it finds; exits 0 only if every auxv entry the loader must give is there and right. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

extern char **environ;
extern char _start[];

int main(int argc, char **argv) {
    int bad = 0;
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    const char *v = getenv("ABI_TEST");
    printf("ABI_TEST=%s\n", v ? v : "(unset)");
    int n = 0;
    for (char **e = environ; *e; e++)
        n++;
    printf("envc=%d\n", n);
    if (getauxval(AT_PAGESZ) != 4096) { printf("AT_PAGESZ wrong\n"); bad = 1; }
    if (getauxval(AT_PHENT) != sizeof(Elf64_Phdr)) { printf("AT_PHENT wrong\n"); bad = 1; }
    Elf64_Phdr *ph = (Elf64_Phdr *)getauxval(AT_PHDR);
    unsigned long phnum = getauxval(AT_PHNUM);
    int loads = 0;
    for (unsigned long i = 0; ph && i < phnum; i++)
        if (ph[i].p_type == PT_LOAD) loads++;
    if (!ph || loads == 0) { printf("AT_PHDR/AT_PHNUM wrong\n"); bad = 1; }
    if (getauxval(AT_ENTRY) != (unsigned long)_start) { printf("AT_ENTRY wrong\n"); bad = 1; }
    unsigned char *r = (unsigned char *)getauxval(AT_RANDOM);
    int nz = 0;
    for (int i = 0; r && i < 16; i++)
        nz |= r[i];
    if (!r || !nz) { printf("AT_RANDOM wrong\n"); bad = 1; }
    const char *fn = (const char *)getauxval(AT_EXECFN);
    if (!fn || strcmp(fn, argv[0]) != 0) { printf("AT_EXECFN wrong\n"); bad = 1; }
    if (getauxval(AT_SECURE) != 0) { printf("AT_SECURE wrong\n"); bad = 1; }
    printf("hwcap has fpu: %d\n", (int)(getauxval(AT_HWCAP) & 1));
    printf("auxv %s\n", bad ? "BAD" : "ok");
    return bad;
}
