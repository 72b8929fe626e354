/* fork + _exit + wait4's cost: `iters` rounds (argv[1], default 200) inside the
 * measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask plugin insncount`
 * counts the instructions in it, the child's included at 1 vCPU). On Linux the marker's port
 * needs ioperm (root); this system's kernel lets user mode write it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/io.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    long bad = 0;
    MARK(1);
    for (long i = 0; i < iters; i++) {
        pid_t c = fork();
        if (c == 0)
            _exit(7);
        int st;
        bad += wait4(c, &st, 0, NULL) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 7;
    }
    MARK(2);
    printf("workload name=fork_exit_wait ops=%ld\n", iters);
    return bad != 0;
}
