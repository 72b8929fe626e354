/* A read's cost: `iters` (argv[1], default 20000) 64-byte pread64 calls at offset 0 of a
 * file (argv[2], default the program's own file, argv[0]: present on both systems' roots)
 * inside the measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask exec
 * --insncount` counts the instructions in it). Each call is checked: a short or failed read
 * ends the program with status 1 after the region. On Linux the marker's port needs ioperm
 * (root); this system's kernel lets user mode write it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    const char *path = argc > 2 ? argv[2] : argv[0];
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    char first[64], buf[64];
    if (pread(fd, first, sizeof first, 0) != (ssize_t)sizeof first) {
        perror("pread");
        return 1;
    }
    long bad = 0;
    for (int i = 0; i < 100; i++)
        bad += pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf;
    MARK(1);
    for (long i = 0; i < iters; i++)
        bad += pread(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf;
    MARK(2);
    if (bad || memcmp(buf, first, sizeof buf) != 0) {
        printf("abi_read: %ld short or failed reads, or the bytes changed\n", bad);
        return 1;
    }
    printf("workload name=pread64 ops=%ld\n", iters);
    return 0;
}
