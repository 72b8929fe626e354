/*
 * Files that a program creates, writes, renames and removes, and the descriptor calls: each
 * line says what was done and what came back (a value or an errno name), so the conformance
 * suite compares them with the Linux guest's; the files it leaves under /tmp/fsc are compared
 * too (types, modes, sizes, contents). Bad input: bad pointers (EFAULT), missing names,
 * wrong types, bad flags and descriptors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *en(int e) {
    switch (e) {
    case 0: return "0";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case EBADF: return "EBADF";
    case EACCES: return "EACCES";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    case EEXIST: return "EEXIST";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case EINVAL: return "EINVAL";
    case EMFILE: return "EMFILE";
    case ESPIPE: return "ESPIPE";
    case ELOOP: return "ELOOP";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ENODEV: return "ENODEV";
    case ENOMEM: return "ENOMEM";
    default: return "other";
    }
}

/* The result of a call: its value if it succeeded, else the errno's name. */
static void show(const char *what, long r) {
    if (r < 0)
        printf("%s: %s\n", what, en(errno));
    else
        printf("%s: %ld\n", what, r);
}

static long size_of(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* Read all of `p` into `buf` (at most `size` bytes): the number of bytes read. */
static long read_all(const char *p, char *buf, long size) {
    int fd = open(p, O_RDONLY);
    long got = 0, r;
    while ((r = read(fd, buf + got, size - got)) > 0)
        got += r;
    close(fd);
    return got;
}

static void contents(const char *p) {
    char b[128] = {0};
    int fd = open(p, O_RDONLY);
    long n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
    if (fd >= 0)
        close(fd);
    printf("%s holds %ld: '%s'\n", p, n, n > 0 ? b : "");
}

int main(void) {
    char *bad = (char *)1;
    umask(022);
    show("mkdir /tmp/fsc", mkdir("/tmp/fsc", 0755));
    show("mkdir again", mkdir("/tmp/fsc", 0755));
    show("mkdir /", mkdir("/", 0755));
    show("chdir", chdir("/tmp/fsc"));

    /* Creating and writing. */
    int fd = creat("a", 0640);
    show("creat a", fd >= 0 ? 0 : -1);
    show("write a", write(fd, "hello\n", 6));
    show("read a (write-only)", read(fd, (char[4]){0}, 4));
    show("pwrite a at 10", pwrite(fd, "tail", 4, 10));
    printf("size of a: %ld\n", size_of("a"));
    show("lseek a end", lseek(fd, 0, SEEK_END));
    struct iovec v[2] = {{"vec", 3}, {"tor\n", 4}};
    show("writev a", writev(fd, v, 2));
    show("fsync a", fsync(fd));
    show("fdatasync a", fdatasync(fd));
    show("ftruncate a 6", ftruncate(fd, 6));
    show("close a", close(fd));
    show("close a again", close(fd));
    contents("a");
    show("open a O_CREAT|O_EXCL", open("a", O_WRONLY | O_CREAT | O_EXCL, 0644));
    fd = open("a", O_WRONLY | O_APPEND);
    show("append", write(fd, "more\n", 5));
    show("F_GETFL has O_APPEND", (fcntl(fd, F_GETFL) & O_APPEND) != 0);
    show("F_SETFL 0", fcntl(fd, F_SETFL, 0));
    show("lseek 0", lseek(fd, 0, SEEK_SET));
    show("write over", write(fd, "HE", 2));
    close(fd);
    contents("a");
    fd = open("b", O_RDWR | O_CREAT | O_TRUNC, 0600);
    show("open b O_CREAT", fd >= 0 ? 0 : -1);
    show("write b", write(fd, "0123456789", 10));
    show("truncate b 4", truncate("b", 4));
    show("pread b", pread(fd, (char[16]){0}, 16, 0));
    show("pwrite negative", pwrite(fd, "x", 1, -1));
    show("pwrite bad pointer", pwrite(fd, bad, 1, 0));
    show("ftruncate negative", ftruncate(fd, -1));

    /* Descriptors. */
    int d = dup(fd);
    show("dup shares the offset", lseek(fd, 2, SEEK_SET) == 2 && lseek(d, 0, SEEK_CUR) == 2);
    show("F_GETFD", fcntl(d, F_GETFD));
    show("F_SETFD", fcntl(d, F_SETFD, FD_CLOEXEC));
    show("F_GETFD after", fcntl(d, F_GETFD));
    show("F_DUPFD 20", fcntl(fd, F_DUPFD, 20));
    show("F_DUPFD_CLOEXEC 20", fcntl(fd, F_DUPFD_CLOEXEC, 20));
    show("F_GETFD of 21", fcntl(21, F_GETFD));
    show("F_GETFL rdwr", fcntl(fd, F_GETFL) & O_ACCMODE);
    show("fcntl bad cmd", fcntl(fd, 9999));
    show("fcntl closed", fcntl(40, F_GETFD));
    show("dup2 to 30", dup2(fd, 30));
    show("dup2 same", dup2(30, 30));
    show("dup2 closed", dup2(41, 31));
    show("dup2 out of range", dup2(fd, 100000));
    show("dup3 same", dup3(30, 30, 0));
    show("dup3 bad flags", dup3(30, 31, 1));
    show("dup3 cloexec", dup3(30, 31, O_CLOEXEC));
    show("F_GETFD of 31", fcntl(31, F_GETFD));
    show("write through 31", write(31, "AB", 2));
    close(30);
    close(31);
    close(20);
    close(21);
    close(d);
    close(fd);
    contents("b");

    /* Directories and names. */
    show("mkdirat sub 0700", mkdirat(AT_FDCWD, "sub", 0700));
    show("mkdir bad pointer", mkdir(bad, 0755));
    show("mkdir missing parent", mkdir("nope/x", 0755));
    show("mkdir under a file", mkdir("a/x", 0755));
    int dfd = open("sub", O_RDONLY | O_DIRECTORY);
    show("open sub O_DIRECTORY", dfd >= 0 ? 0 : -1);
    show("open a O_DIRECTORY", open("a", O_RDONLY | O_DIRECTORY));
    show("open sub for writing", open("sub", O_WRONLY));
    show("openat sub/c", (fd = openat(dfd, "c", O_WRONLY | O_CREAT, 0666)) >= 0 ? 0 : -1);
    show("write c", write(fd, "in sub\n", 7));
    close(fd);
    show("rename a -> sub/a2", rename("a", "sub/a2"));
    show("rename missing", rename("a", "z"));
    show("renameat2 NOREPLACE onto c", syscall(SYS_renameat2, dfd, "a2", dfd, "c", 1));
    show("renameat2 bad flags", syscall(SYS_renameat2, dfd, "a2", dfd, "c", 8));
    show("rename dir into itself", rename("sub", "sub/inner"));
    show("link b -> b2", link("b", "b2"));
    struct stat st;
    stat("b", &st);
    printf("links of b: %ld\n", (long)st.st_nlink);
    show("link onto existing", link("b", "b2"));
    show("link a directory", link("sub", "sub3"));
    show("symlink sub/c -> lc", symlink("sub/c", "lc"));
    char t[64] = {0};
    long n = readlink("lc", t, sizeof t);
    printf("readlink lc: %ld '%s'\n", n, n > 0 ? t : "");
    show("readlink short buffer", readlink("lc", t, 3));
    show("readlink a file", readlink("b", t, sizeof t));
    show("readlink bad buffer", readlink("lc", bad, 10));
    show("readlinkat zero size", readlinkat(AT_FDCWD, "lc", t, 0));
    show("lstat is a link", lstat("lc", &st) == 0 && S_ISLNK(st.st_mode));
    show("open O_NOFOLLOW", open("lc", O_RDONLY | O_NOFOLLOW));
    contents("lc");
    show("symlink onto existing", symlink("x", "b"));
    show("unlink b2", unlink("b2"));
    show("unlink b2 again", unlink("b2"));
    show("unlink a directory", unlink("sub"));
    show("rmdir non-empty", rmdir("sub"));
    show("rmdir a file", rmdir("b"));
    show("mkdir empty", mkdir("empty", 0755));
    show("unlinkat AT_REMOVEDIR", unlinkat(AT_FDCWD, "empty", AT_REMOVEDIR));
    show("unlinkat bad flags", unlinkat(AT_FDCWD, "b", 0x1));
    show("unlinkat a file with AT_REMOVEDIR", unlinkat(AT_FDCWD, "b", AT_REMOVEDIR));
    show("unlink bad pointer", unlink(bad));
    close(dfd);

    /* Attributes. */
    show("chmod b 0751", chmod("b", 0751));
    stat("b", &st);
    printf("mode of b: %o\n", st.st_mode & 07777);
    fd = open("b", O_RDONLY);
    show("fchmod b 0604", fchmod(fd, 0604));
    show("fchown b 12 34", fchown(fd, 12, 34));
    close(fd);
    stat("b", &st);
    printf("b: mode %o uid %d gid %d\n", st.st_mode & 07777, (int)st.st_uid, (int)st.st_gid);
    show("chown -1 -1", chown("b", -1, -1));
    show("chmod missing", chmod("zz", 0644));
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1234567, 0}};
    show("utimensat", utimensat(AT_FDCWD, "b", ts, 0));
    stat("b", &st);
    printf("mtime of b: %ld\n", (long)st.st_mtime);
    ts[1].tv_nsec = 2000000000;
    show("utimensat bad nsec", utimensat(AT_FDCWD, "b", ts, 0));
    show("utimensat bad flags", utimensat(AT_FDCWD, "b", NULL, 0x4000));
    show("umask 077", umask(077));
    show("umask back", umask(022));
    show("access b F_OK", access("b", F_OK));
    show("access b X_OK", access("b", X_OK));
    show("access sub X_OK", access("sub", X_OK));
    show("access missing", access("zz", F_OK));
    show("access bad mode", access("b", 64));
    struct statfs sf;
    show("statfs", statfs("/tmp/fsc", &sf) == 0 && sf.f_bsize > 0 && sf.f_blocks > 0);
    show("statfs bad pointer", syscall(SYS_statfs, "/tmp/fsc", bad));
    show("statfs missing", statfs("/nope", &sf));
    /* statx by number (this musl has no wrapper): size at 40, mode at 28, nlink at 16. */
    unsigned char sx[256];
    show("statx b", syscall(SYS_statx, AT_FDCWD, "b", 0, 0x7ff, sx));
    printf("statx b: size %lld mode %o nlink %u\n", *(long long *)(sx + 40), *(unsigned short *)(sx + 28) & 07777, *(unsigned *)(sx + 16));
    show("statx bad flags", syscall(SYS_statx, AT_FDCWD, "b", 0x6000, 0x7ff, sx));
    show("statx bad buffer", syscall(SYS_statx, AT_FDCWD, "b", 0, 0x7ff, bad));
    show("fstat closed", fstat(45, &st));
    show("write closed", write(45, "x", 1));
    /* Access mode 3: open, but neither readable nor writable. */
    fd = open("b", 3);
    show("open mode 3", fd >= 0 ? 0 : -1);
    show("read mode 3", read(fd, t, 1));
    show("write mode 3", write(fd, "x", 1));
    close(fd);

    /* Memory: file mappings' bad input, mremap, madvise, msync. */
    fd = open("b", O_RDONLY);
    show("mmap unaligned offset", (long)mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 100));
    show("mmap closed fd", (long)mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 45, 0));
    show("mmap shared writable of a read-only fd", (long)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    char *pm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    show("mmap private writable of a read-only fd", pm == MAP_FAILED ? -1 : 0);
    show("private mapping shows b", pm != MAP_FAILED && memcmp(pm, "AB23", 4) == 0);
    close(fd);
    fd = open("sub", O_RDONLY);
    show("mmap a directory", (long)mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0));
    close(fd);
    fd = open("b", O_WRONLY);
    show("mmap a write-only fd", (long)mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0));
    close(fd);
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 7, 8192);
    char *m2 = mremap(m, 8192, 64 * 4096, MREMAP_MAYMOVE);
    show("mremap grow keeps the bytes", m2 != MAP_FAILED && m2[0] == 7 && m2[8191] == 7 && m2[8192] == 0);
    m2[64 * 4096 - 1] = 1;
    show("mremap shrink", mremap(m2, 64 * 4096, 4096, 0) == m2);
    show("mremap unaligned", (long)mremap(m2 + 1, 4096, 8192, MREMAP_MAYMOVE));
    show("mremap bad flags", (long)mremap(m2, 4096, 8192, 64));
    show("madvise DONTNEED", madvise(m2, 4096, MADV_DONTNEED));
    show("and the page reads zero", m2[0] == 0);
    show("madvise bad advice", madvise(m2, 4096, 77));
    show("madvise unaligned", madvise(m2 + 1, 4096, MADV_NORMAL));
    show("madvise WILLNEED", madvise(m2, 4096, MADV_WILLNEED));
    show("msync unaligned", msync(m2 + 1, 4096, MS_SYNC));
    show("msync bad flags", msync(m2, 4096, MS_SYNC | MS_ASYNC));
    show("munmap", munmap(m2, 4096));
    show("msync unmapped", msync(m2, 4096, MS_SYNC));
    show("munmap unaligned", munmap(m2 + 1, 4096));
    /* A file grown past its first blocks by many small writes (as tar writes its archive),
     * then read back whole: every byte where it was written, and the size all of it. */
    fd = open("big", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char blk[512];
    long wrote = 0;
    for (int i = 0; i < 20; i++) {
        memset(blk, 'a' + i, sizeof blk);
        wrote += write(fd, blk, sizeof blk);
    }
    show("20 writes of 512 bytes", wrote);
    struct stat bs;
    fstat(fd, &bs);
    show("fstat size after them", (long)bs.st_size);
    close(fd);
    show("stat size after close", size_of("big"));
    static char back[12000];
    long got = read_all("big", back, sizeof back);
    int same = got == 10240;
    for (int i = 0; same && i < 10240; i++)
        same = back[i] == 'a' + i / 512;
    show("read back", got);
    show("every byte as written", same);
    show("unlink big", unlink("big"));

    /* The device files: a character device each, mode 0666. */
    struct stat ds;
    show("stat /dev/null", stat("/dev/null", &ds));
    show("/dev/null is a character device", S_ISCHR(ds.st_mode));
    printf("mode of /dev/null: %o\n", ds.st_mode & 07777);
    fd = open("/dev/null", O_RDWR);
    show("write /dev/null", write(fd, "xyz", 3));
    show("read /dev/null", read(fd, blk, sizeof blk));
    fstat(fd, &ds);
    show("fstat /dev/null is a character device", S_ISCHR(ds.st_mode));
    close(fd);
    fd = open("/dev/zero", O_RDONLY);
    memset(blk, 1, sizeof blk);
    show("read /dev/zero", read(fd, blk, 100));
    show("and it gave zeros", blk[0] == 0 && blk[99] == 0 && blk[100] == 1);
    close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    show("read /dev/urandom", read(fd, blk, 16));
    close(fd);
    show("open /dev/null O_DIRECTORY", open("/dev/null", O_RDONLY | O_DIRECTORY));
    /* A child makes a directory and a file of 10 KiB; then the parent makes one of its own.
     * Each process must allocate inodes and blocks the other did not (both files keep their
     * bytes, the directory stays a directory), and both are left for the file listing. */
    pid_t kid = fork();
    if (kid == 0) {
        mkdir("kdir", 0755);
        int k = open("kdir/kid", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (int i = 0; i < 20; i++) {
            memset(blk, 'A' + i, sizeof blk);
            write(k, blk, sizeof blk);
        }
        close(k);
        _exit(0);
    }
    int kst = -1;
    show("wait for the child that wrote", waitpid(kid, &kst, 0) == kid && kst == 0);
    fd = open("mine", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 20; i++) {
        memset(blk, 'k' - i % 10, sizeof blk);
        write(fd, blk, sizeof blk);
    }
    close(fd);
    show("the child's directory is a directory", stat("kdir", &bs) == 0 && S_ISDIR(bs.st_mode));
    show("size of the child's file", size_of("kdir/kid"));
    got = read_all("kdir/kid", back, sizeof back);
    same = got == 10240;
    for (int i = 0; same && i < 10240; i++)
        same = back[i] == 'A' + i / 512;
    show("the child's file as it wrote it", same);
    got = read_all("mine", back, sizeof back);
    same = got == 10240;
    for (int i = 0; same && i < 10240; i++)
        same = back[i] == 'k' - (i / 512) % 10;
    show("the parent's file as it wrote it", same);
    printf("fscalls: done\n");
    return 0;
}
