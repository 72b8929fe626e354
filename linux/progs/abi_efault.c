/* Bad pointers get -EFAULT and the program goes on (the runtime must not fault). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *e(long r) { return r == -1 && errno == EFAULT ? "EFAULT" : "WRONG"; }

int main(int argc, char **argv) {
    (void)argc;
    printf("write(bad) %s\n", e(syscall(SYS_write, 1, (void *)8, 10)));
    printf("write(kernel half) %s\n", e(syscall(SYS_write, 1, (void *)0xffff800000000000ul, 10)));
    int fd = open(argv[0], O_RDONLY); /* a regular file with bytes to read */
    printf("read(bad) %s\n", e(syscall(SYS_read, fd, (void *)0x10, 5)));
    printf("stat(bad path) %s\n", e(syscall(SYS_stat, (void *)0x20, (void *)0x30)));
    struct stat st;
    printf("stat(bad buf) %s\n", e(syscall(SYS_stat, "/", (void *)0x40)));
    printf("openat(bad path) %s\n", e(syscall(SYS_openat, -100, (void *)0x1000, 0)));
    printf("uname(bad) %s\n", e(syscall(SYS_uname, (void *)0x50)));
    (void)st;
    printf("efault done\n");
    return 0;
}
