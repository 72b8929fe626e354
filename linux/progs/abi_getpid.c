/* getpid's cost: `iters` calls (argv[1], default 20000) inside the measured-region marker
 * (tools/qemu-plugins/marker.h; `cargo xtask plugin insncount` counts the instructions in it).
 * On Linux the marker's port needs ioperm (root); this system's kernel lets user mode write it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/io.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    long sum = 0;
    for (int i = 0; i < 100; i++)
        sum += getpid();
    MARK(1);
    for (long i = 0; i < iters; i++)
        sum += getpid();
    MARK(2);
    printf("workload name=getpid ops=%ld\n", iters);
    return sum == 0;
}
