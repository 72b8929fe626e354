/* The cost of a 4 KiB file read and write: `abi_rw read|write [iters]` makes /tmp/rw (4 KiB),
 * then, inside the measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask plugin
 * insncount` counts the instructions in it), `iters` pread64s of its 4 KiB at offset 0, or
 * `iters` pwrite64s of 4 KiB at offset 0 (the same blocks, rewritten in the cache). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

int main(int argc, char **argv) {
    int write_mode = argc > 1 && strcmp(argv[1], "write") == 0;
    long iters = argc > 2 ? atol(argv[2]) : 20000;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    static char buf[4096];
    memset(buf, 'x', sizeof buf);
    int fd = open("/tmp/rw", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, buf, sizeof buf, 0) != sizeof buf) {
        printf("cannot make /tmp/rw\n");
        return 1;
    }
    long sum = 0;
    for (int i = 0; i < 100; i++)
        sum += write_mode ? pwrite(fd, buf, sizeof buf, 0) : pread(fd, buf, sizeof buf, 0);
    MARK(1);
    for (long i = 0; i < iters; i++)
        sum += write_mode ? pwrite(fd, buf, sizeof buf, 0) : pread(fd, buf, sizeof buf, 0);
    MARK(2);
    printf("workload name=%s ops=%ld\n", write_mode ? "write4k" : "read4k", iters);
    close(fd);
    return sum != (iters + 100) * 4096;
}
