/* The cost of a shell pipeline: runs `/bin/busybox sh -c CMD` (argv[1], default
 * "find /tree | sort | wc -l") in a forked child inside the measured-region marker
 * (tools/qemu-plugins/marker.h), waits for it, and prints the child's output and the
 * workload line `cargo xtask exec --insncount` divides by (ops=1: the count is the whole
 * pipeline, every process of it, at 1 vCPU). The image must hold /bin/busybox and the tree
 * (docs/results.md has the commands). On Linux the marker's port needs ioperm (root); this
 * system's kernel lets user mode write it. Exits 0 only if the shell did. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/io.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "find /tree | sort | wc -l";
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    fflush(stdout);
    MARK(1);
    pid_t c = fork();
    if (c == 0) {
        execl("/bin/busybox", "sh", "-c", cmd, (char *)0);
        _exit(127);
    }
    int st = 0;
    pid_t w = c > 0 ? waitpid(c, &st, 0) : -1;
    MARK(2);
    printf("workload name=pipeline ops=1\n");
    if (c < 0 || w != c) {
        printf("pipecost: fork or wait failed\n");
        return 1;
    }
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
