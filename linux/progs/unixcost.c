/* A local socket's cost beside a pipe's: `iters` (argv[2], default 20000) rounds of a
 * 64-byte write to one end and a 64-byte read from the other, in one process, over a
 * socketpair(AF_UNIX, SOCK_STREAM) (argv[1] "unix", the default) or a pipe (argv[1] "pipe"),
 * inside the measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask exec
 * --insncount` divides the instructions in it by ops). Every round is checked; a short or
 * failed call ends the program with status 1 after the region. On Linux the marker's port
 * needs ioperm (root); this system's kernel lets user mode write it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/socket.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    const char *kind = argc > 1 ? argv[1] : "unix";
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    int fds[2];
    int made = strcmp(kind, "pipe") == 0 ? pipe(fds) : socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
    if (made != 0) {
        perror(kind);
        return 1;
    }
    char out[64], in[64];
    memset(out, 'u', sizeof out);
    long bad = 0;
    for (int i = 0; i < 100; i++)
        bad += write(fds[1], out, sizeof out) != (ssize_t)sizeof out || read(fds[0], in, sizeof in) != (ssize_t)sizeof in;
    MARK(1);
    for (long i = 0; i < iters; i++)
        bad += write(fds[1], out, sizeof out) != (ssize_t)sizeof out || read(fds[0], in, sizeof in) != (ssize_t)sizeof in;
    MARK(2);
    if (bad || memcmp(in, out, sizeof in) != 0) {
        printf("unixcost: %ld short or failed rounds, or the bytes changed\n", bad);
        return 1;
    }
    printf("workload name=%s_rw ops=%ld\n", kind, iters);
    return 0;
}
