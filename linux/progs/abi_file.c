/* Files through openat, read, fstat, lseek, pread64, getdents64, getcwd and chdir. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    int fd = openat(AT_FDCWD, "/data/input.txt", O_RDONLY);
    if (fd < 0) { printf("openat: %s\n", strerror(errno)); return 1; }
    struct stat st;
    if (fstat(fd, &st) != 0) { printf("fstat: %s\n", strerror(errno)); return 1; }
    printf("size=%lld regular=%d\n", (long long)st.st_size, S_ISREG(st.st_mode));
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n < 0) { printf("read: %s\n", strerror(errno)); return 1; }
    buf[n] = 0;
    printf("read %zd: %s", n, buf);
    char two[8] = {0};
    printf("pread=%zd '%s' lseek=%lld\n", pread(fd, two, 5, 6), two, (long long)lseek(fd, 0, SEEK_CUR));
    close(fd);
    if (open("/data/missing", O_RDONLY) < 0)
        printf("missing: %s\n", strerror(errno));
    if (chdir("/data") != 0) { printf("chdir: %s\n", strerror(errno)); return 1; }
    char cwd[64];
    printf("cwd=%s\n", getcwd(cwd, sizeof cwd) ? cwd : "?");
    fd = open("input.txt", O_RDONLY);
    printf("relative open %s\n", fd >= 0 ? "ok" : strerror(errno));
    if (fd >= 0) close(fd);
    int d = open(".", O_RDONLY | O_DIRECTORY);
    char dbuf[1024];
    long k = syscall(SYS_getdents64, d, dbuf, sizeof dbuf);
    int names = 0, found = 0;
    for (long off = 0; off < k;) {
        struct dirent64 *e = (struct dirent64 *)(dbuf + off);
        names++;
        if (strcmp(e->d_name, "input.txt") == 0 && e->d_type == DT_REG) found = 1;
        off += e->d_reclen;
    }
    printf("getdents64: %d names, input.txt %s\n", names, found ? "found" : "MISSING");
    close(d);
    return !found;
}
