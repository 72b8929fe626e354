/*
 * mmap of a file. Writes /tmp/mapped (3 pages and a bit of a known pattern), then checks:
 * a shared read-only mapping shows the file; bytes past the end of the file in the last
 * page read as zero; a write through a shared writable mapping reaches the file (read back
 * with pread after msync); a write through a private mapping does not; a mapping at an
 * offset shows the file from there. The file is left behind (its checksum is compared).
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (3 * 4096 + 100)

static int check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    return cond;
}

static unsigned char pattern(long i) {
    return (unsigned char)(i * 7 + (i >> 8));
}

int main(void) {
    static unsigned char buf[SIZE];
    for (long i = 0; i < SIZE; i++)
        buf[i] = pattern(i);
    int fd = open("/tmp/mapped", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, buf, SIZE) != SIZE) {
        printf("cannot write /tmp/mapped\n");
        return 1;
    }
    int ok = 1;
    unsigned char *ro = mmap(NULL, 4 * 4096, PROT_READ, MAP_SHARED, fd, 0);
    ok &= check("mmap shared read-only", ro != MAP_FAILED);
    if (ro == MAP_FAILED)
        return 1;
    ok &= check("the mapping shows the file", memcmp(ro, buf, SIZE) == 0);
    int zero = 1;
    for (long i = SIZE; i < 4 * 4096; i++)
        zero &= ro[i] == 0;
    ok &= check("past the end of the file reads zero", zero);

    unsigned char *rw = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ok &= check("mmap shared writable", rw != MAP_FAILED);
    if (rw == MAP_FAILED)
        return 1;
    memcpy(rw + 5000, "shared write", 12);
    ok &= check("msync", msync(rw, SIZE, MS_SYNC) == 0);
    char got[12];
    ok &= check("the shared write reached the file", pread(fd, got, 12, 5000) == 12 && memcmp(got, "shared write", 12) == 0);
    ok &= check("and the other mapping sees it", memcmp(ro + 5000, "shared write", 12) == 0);

    unsigned char *pv = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ok &= check("mmap private writable", pv != MAP_FAILED);
    if (pv == MAP_FAILED)
        return 1;
    memcpy(pv + 100, "private", 7);
    ok &= check("the private write stays private", pread(fd, got, 7, 100) == 7 && memcmp(got, buf + 100, 7) == 0 && memcmp(pv + 100, "private", 7) == 0);

    unsigned char *off = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 8192);
    ok &= check("a mapping at offset 8192 shows the file from there", off != MAP_FAILED && memcmp(off, buf + 8192, 4096) == 0);

    ok &= check("munmap", munmap(ro, 4 * 4096) == 0 && munmap(rw, SIZE) == 0 && munmap(pv, SIZE) == 0 && munmap(off, 4096) == 0);
    close(fd);
    printf("mmapfile: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
