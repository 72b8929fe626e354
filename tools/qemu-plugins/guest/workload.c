/*
 * /init of the Linux measurement guest: runs one workload between region markers (marker.h),
 * prints one result line, and powers the machine off. Built static (cc -static) by
 * `cargo xtask plugin build` and packed into an initramfs by xtask/src/linux.rs.
 *
 * Parameters come from the kernel command line: wl=NAME threads=N iters=N size=BYTES
 * passes=N files=N. Output: "workload name=NAME ops=N threads=N" or "workload-error: ...".
 *
 * Workloads (the paper's five where they fit in an initramfs; honest substitutes otherwise):
 *   stream   one thread reads a buffer line by line (asm loop, no other memory accesses)
 *   null     getppid() system calls
 *   dupclose per-thread dup(0)+close on the shared descriptor table (Corey section 1 / 8.4)
 *   dupclose_unshared  dup+close of the thread's own open file (open("/") of its own) in a
 *            table of its own (unshare(CLONE_FILES)): nothing shared by design, like ours'
 *            share_local
 *   counter  threads lock-add one shared 64-bit counter (user mode)
 *   private  threads add to their own 128-byte-aligned counters (user mode)
 *   find     substitute for the paper's find: walk a generated tree, stat every entry
 *   zip      substitute for zip: read the generated tree, LZ-compress into an archive file
 *   pipe     substitute for apache+ab: request/response over a socketpair between processes
 *   spawn    substitute for make: fork + wait of short-lived children that compute a little
 *   piperr   8-byte request / 8-byte response round trips over a pair of pipes between two
 *            processes pinned to CPU 0: Linux's nearest equivalent of a protected procedure
 *            call (docs/ppc.md)
 *   sockrr   the same over a Unix socketpair
 *   kallsyms dump /proc/kallsyms data symbols (used once to name kernel lines)
 *   tcpserv  Corey's TCP accept service (section 8.2) on the NIC: tcpserv.c
 *   filesum  Corey's filesum (section 8.4) without the web server: one buffer of `size` bytes
 *            per thread; each thread sums one byte every `stride` bytes of a buffer, `passes`
 *            times, each pass one marked region on its own vCPU. mode=locality: thread i sums
 *            buffer i every pass; mode=random: in pass p thread i sums buffer (i + p) mod
 *            threads, so over `threads` passes every thread sums every buffer (a rotation:
 *            the known answer for the multi-core cache models, docs/plugins.md);
 *            mode=shuffle: in pass p the threads sum the buffers in a pseudo-random
 *            permutation (fixed seed, the same in every run), like Corey's random mode.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../marker.h"

/* The literal marker sequence; clobbers rax/rdx. Extended asm so %% escapes apply. */
#define MARK(v) asm volatile(MARKER_ASM(v) ::: "rax", "rdx", "memory")

/* The region's guest wall time, for the plugin-overhead measurement: without icount, a TCG
 * guest's CLOCK_MONOTONIC follows the host clock. Taken outside the markers. */
static struct timespec region_t0, region_t1;
#define MARK_START(v) do { clock_gettime(CLOCK_MONOTONIC, &region_t0); MARK(v); } while (0)
#define MARK_STOP(v) do { MARK(v); clock_gettime(CLOCK_MONOTONIC, &region_t1); } while (0)

static char cmdline[4096];
void tcpserv_main(const char *cmdline); /* tcpserv.c; never returns */
static long param(const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    char *p = strstr(cmdline, pat);
    return p ? strtol(p + strlen(pat), NULL, 0) : def;
}
static const char *sparam(const char *key, char *buf, size_t n)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    char *p = strstr(cmdline, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    size_t i = 0;
    while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < n) {
        buf[i] = p[i];
        i++;
    }
    buf[i] = 0;
    return buf;
}

static void power_off(void)
{
    fflush(stdout);
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}

static void fail(const char *what)
{
    printf("workload-error: %s: %s\n", what, strerror(errno));
    power_off();
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &s);
    sched_setaffinity(0, sizeof s, &s);
}

/* ---- multi-threaded workloads: each thread pinned, starts together, marks its own vCPU ---- */
static int nthreads;
static long iters;
static volatile int go;
static volatile int ready;
static volatile uint64_t shared_counter __attribute__((aligned(128)));
static struct {
    volatile uint64_t v;
    char pad[120];
} private_counter[64] __attribute__((aligned(128)));
static const char *wl;

/* Run fn(i) on threads 1..nthreads-1 and fn(0) on this one, all let go at once (each worker
 * counts itself in `ready`, then waits for `go`); returns when every one has finished. */
static void start_together(void *(*fn)(void *))
{
    pthread_t t[64];
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&t[i], NULL, fn, (void *)(intptr_t)i))
            fail("pthread_create");
    while (ready < nthreads - 1)
        sched_yield();
    go = 1;
    fn(0);
    for (int i = 1; i < nthreads; i++)
        pthread_join(t[i], NULL);
}

/* ---- filesum ---- */
static struct {
    unsigned char *buf[64];
    uint64_t want[64]; /* each buffer's sum at the stride, computed before the region */
    long size, passes, stride;
    int random, shuffle;
} fs;

/* Pass p's buffer for thread id under mode=shuffle: a Fisher-Yates permutation from a
 * xorshift seeded by p, computed the same way by every thread. */
static int filesum_shuffled(long p, int id)
{
    int perm[64];
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(p + 1);
    for (int i = 0; i < nthreads; i++)
        perm[i] = i;
    for (int i = nthreads - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int j = (int)(x % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return perm[id];
}

static uint64_t filesum_pass(const unsigned char *buf)
{
    const unsigned char *p = buf, *end = buf + fs.size;
    uint64_t sum = 0;
    long stride = fs.stride;
    /* The region is this loop: one byte load per step, nothing else touches memory. */
    asm volatile(MARKER_ASM(1) "1: movzbl (%[p]), %%ecx\n\tadd %%rcx, %[sum]\n\tadd %[stride], %[p]\n\t"
                 "cmp %[end], %[p]\n\tjb 1b\n\t" MARKER_ASM(2)
                 : [p] "+r"(p), [sum] "+r"(sum)
                 : [end] "r"(end), [stride] "r"(stride)
                 : "rax", "rcx", "rdx", "memory", "cc");
    return sum;
}

static void *filesum_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    pin(id);
    __atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
    while (!go)
        ;
    for (long p = 0; p < fs.passes; p++) {
        int b = fs.shuffle ? filesum_shuffled(p, id) : fs.random ? (int)((id + p) % nthreads) : id;
        if (filesum_pass(fs.buf[b]) != fs.want[b]) {
            printf("workload-error: filesum: thread %d pass %ld: wrong sum of buffer %d\n", id, p, b);
            power_off();
        }
    }
    return NULL;
}

static long anon_huge_kb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static long run_filesum(void)
{
    char mode[32];
    const char *m = sparam("mode", mode, sizeof mode);
    fs.size = param("size", 1 << 20);
    fs.passes = param("passes", 4);
    fs.stride = param("stride", 64);
    fs.random = m && !strcmp(m, "random");
    fs.shuffle = m && !strcmp(m, "shuffle");
    if (nthreads < 1 || nthreads > 64 || fs.size < 64 || fs.size > (64L << 20) || fs.passes < 1 || fs.passes > 1000 ||
        fs.stride < 1 || fs.stride > 64 || fs.size % fs.stride || (m && strcmp(m, "random") && strcmp(m, "locality") && strcmp(m, "shuffle"))) {
        errno = EINVAL;
        fail("filesum needs threads 1..64, size 64..64M, passes 1..1000, stride 1..64 dividing size, mode=locality|random|shuffle");
    }
    /* Each buffer starts a 2 MB-aligned region and asks for a huge page, so that it is
     * physically contiguous when the kernel has THP (then it spreads evenly over the cache
     * sets); the result line says how much anonymous huge-page memory there is. */
    long span = (fs.size + (2L << 20) - 1) & ~((2L << 20) - 1);
    unsigned char *all = aligned_alloc(2L << 20, (size_t)(span * nthreads));
    if (!all)
        fail("alloc");
    madvise(all, (size_t)(span * nthreads), MADV_HUGEPAGE);
    for (int i = 0; i < nthreads; i++) {
        fs.buf[i] = all + span * i;
        for (long j = 0; j < fs.size; j++)
            fs.buf[i][j] = (unsigned char)(i * 7 + j * 13);
        fs.want[i] = 0;
        for (long j = 0; j < fs.size; j += fs.stride)
            fs.want[i] += fs.buf[i][j];
    }
    printf("filesum mode=%s size=%ld passes=%ld stride=%ld threads=%d anon_huge_kb=%ld\n",
           fs.shuffle ? "shuffle" : fs.random ? "random" : "locality",
           fs.size, fs.passes, fs.stride, nthreads, anon_huge_kb());
    start_together(filesum_worker);
    return fs.passes * nthreads;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    pin(id);
    __atomic_add_fetch(&ready, 1, __ATOMIC_SEQ_CST);
    while (!go)
        ;
    long n = iters;
    if (!strcmp(wl, "dupclose") || !strcmp(wl, "dupclose_unshared")) {
        int base = 0;
        /* Before the region: the thread's own copy of the table and its own open file (a
           struct file of its own), so no line needs to be shared. */
        if (!strcmp(wl, "dupclose_unshared")) {
            if (unshare(CLONE_FILES) != 0 || (base = open("/", O_RDONLY | O_DIRECTORY)) < 0) {
                printf("workload-error: unshare(CLONE_FILES) or open(/): %s\n", strerror(errno));
                return NULL;
            }
        }
        MARK_START(1);
        for (long i = 0; i < n; i++) {
            int fd = dup(base);
            close(fd);
        }
        MARK_STOP(2);
    } else if (!strcmp(wl, "null")) {
        MARK_START(1);
        for (long i = 0; i < n; i++)
            getppid();
        MARK_STOP(2);
    } else if (!strcmp(wl, "counter")) {
        volatile uint64_t *c = &shared_counter;
        /* All in registers: inside the region the only user data access is the counter. */
        asm volatile(MARKER_ASM(1) "1: lock addq $1, (%[c])\n\tdec %[n]\n\tjnz 1b\n\t" MARKER_ASM(2)
                     : [n] "+r"(n)
                     : [c] "r"(c)
                     : "rax", "rdx", "memory", "cc");
    } else if (!strcmp(wl, "private")) {
        volatile uint64_t *c = &private_counter[id].v;
        asm volatile(MARKER_ASM(1) "1: addq $1, (%[c])\n\tdec %[n]\n\tjnz 1b\n\t" MARKER_ASM(2)
                     : [n] "+r"(n)
                     : [c] "r"(c)
                     : "rax", "rdx", "memory", "cc");
    }
    return NULL;
}

static volatile long sig_handled;

static void on_usr1(int sig)
{
    (void)sig;
    sig_handled++;
}

/* A signal delivered and returned: kill(getpid(), SIGUSR1) with an empty handler (the same
   loop as linux/progs/abi_sigcost.c on this system's Linux personality). */
static long run_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    pid_t me = getpid();
    for (int i = 0; i < 100; i++)
        kill(me, SIGUSR1);
    MARK_START(1);
    for (long i = 0; i < iters; i++)
        kill(me, SIGUSR1);
    MARK_STOP(2);
    if (sig_handled != iters + 100)
        printf("workload-error: %ld of %ld signals handled\n", sig_handled, iters + 100);
    return iters;
}

static long run_threads(void)
{
    if (nthreads < 1 || nthreads > 64) {
        errno = EINVAL;
        fail("threads must be 1..64");
    }
    start_together(worker);
    return iters * nthreads;
}

/* ---- single-threaded workloads ---- */
static long run_stream(void)
{
    long size = param("size", 64 << 10), passes = param("passes", 4);
    if (size < 64 || size % 64 || passes < 1) {
        errno = EINVAL;
        fail("stream needs size a multiple of 64 and passes >= 1");
    }
    char *buf = aligned_alloc(4096, (size_t)size);
    if (!buf)
        fail("alloc");
    memset(buf, 1, (size_t)size); /* fault every page in before the region */
    char *end = buf + size;
    long p = passes;
    pin(0);
    /* One load per line and nothing else touches memory between the markers. */
    asm volatile(MARKER_ASM(1) "2: mov %[buf], %%rsi\n\t"
                 "1: movb (%%rsi), %%al\n\tadd $64, %%rsi\n\tcmp %[end], %%rsi\n\tjb 1b\n\t"
                 "dec %[p]\n\tjnz 2b\n\t" MARKER_ASM(2)
                 : [p] "+r"(p)
                 : [buf] "r"(buf), [end] "r"(end)
                 : "rax", "rdx", "rsi", "memory", "cc");
    return passes * (size / 64);
}

static void make_tree(const char *root, int files)
{
    char path[256];
    mkdir(root, 0755);
    char block[4096];
    for (size_t i = 0; i < sizeof block; i++)
        block[i] = (char)("the quick brown fox jumps over the lazy dog "[i % 44] ^ (i / 700));
    for (int d = 0; d < 8; d++) {
        snprintf(path, sizeof path, "%s/d%d", root, d);
        mkdir(path, 0755);
        for (int s = 0; s < 4; s++) {
            snprintf(path, sizeof path, "%s/d%d/s%d", root, d, s);
            mkdir(path, 0755);
        }
    }
    for (int f = 0; f < files; f++) {
        snprintf(path, sizeof path, "%s/d%d/s%d/file%d.txt", root, f % 8, (f / 8) % 4, f);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0)
            fail("create");
        int len = 512 + (f * 977) % 8192;
        for (int w = 0; w < len; w += (int)sizeof block)
            if (write(fd, block, (size_t)(len - w < (int)sizeof block ? len - w : (int)sizeof block)) < 0)
                fail("write");
        close(fd);
    }
}

static long walk(const char *dir, long *bytes)
{
    long n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st))
            continue;
        n++;
        *bytes += st.st_size;
        if (S_ISDIR(st.st_mode))
            n += walk(path, bytes);
    }
    closedir(d);
    return n;
}

/* A small LZ77 (hash of 3 bytes, 4 KB window): enough application-side work per byte to play
 * zip's part; the point is the OS/app mix of reading files and writing an archive. */
static size_t lz_compress(const unsigned char *in, size_t n, unsigned char *out)
{
    static int32_t head[4096];
    memset(head, -1, sizeof head);
    size_t i = 0, o = 0;
    while (i < n) {
        size_t best = 0, dist = 0;
        if (i + 3 <= n) {
            unsigned h = ((in[i] << 4) ^ (in[i + 1] << 2) ^ in[i + 2]) & 4095;
            int32_t c = head[h];
            head[h] = (int32_t)i;
            if (c >= 0 && i - (size_t)c < 4096) {
                size_t l = 0;
                while (i + l < n && l < 255 && in[c + l] == in[i + l])
                    l++;
                if (l >= 3) {
                    best = l;
                    dist = i - (size_t)c;
                }
            }
        }
        if (best) {
            out[o++] = 0xff;
            out[o++] = (unsigned char)best;
            out[o++] = (unsigned char)(dist >> 8);
            out[o++] = (unsigned char)dist;
            i += best;
        } else {
            out[o++] = in[i++];
        }
    }
    return o;
}

static long zip_dir(const char *dir, int archive)
{
    long n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    char path[512];
    static unsigned char in[16384], out[16384 * 2];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            n += zip_dir(path, archive);
            continue;
        }
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t r;
        while ((r = read(fd, in, sizeof in)) > 0) {
            size_t c = lz_compress(in, (size_t)r, out);
            if (write(archive, out, c) < 0)
                fail("archive write");
        }
        close(fd);
        n++;
    }
    closedir(d);
    return n;
}

static long run_fs(int zip)
{
    int files = (int)param("files", 200);
    make_tree("/tmp/tree", files);
    pin(0);
    long ops;
    if (zip) {
        int a = open("/tmp/archive.lz", O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (a < 0)
            fail("archive");
        MARK_START(1);
        ops = zip_dir("/tmp/tree", a);
        MARK_STOP(2);
        close(a);
    } else {
        long bytes = 0;
        long passes = param("passes", 2);
        MARK_START(1);
        ops = 0;
        for (long p = 0; p < passes; p++)
            ops += walk("/tmp/tree", &bytes);
        MARK_STOP(2);
    }
    return ops;
}

static long run_pipe(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        fail("socketpair");
    long n = param("iters", 200);
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    static char req[256], resp[4096];
    if (child == 0) {
        /* server: read a request, answer with a 4 KB page */
        close(sv[0]);
        memset(resp, 'x', sizeof resp);
        for (long i = 0; i < n; i++) {
            if (read(sv[1], req, sizeof req) <= 0)
                break;
            size_t sent = 0;
            while (sent < sizeof resp) {
                ssize_t w = write(sv[1], resp + sent, sizeof resp - sent);
                if (w <= 0)
                    _exit(1);
                sent += (size_t)w;
            }
        }
        _exit(0);
    }
    close(sv[1]);
    memset(req, 'r', sizeof req);
    MARK_START(3); /* both processes, wherever they run */
    for (long i = 0; i < n; i++) {
        if (write(sv[0], req, sizeof req) < 0)
            fail("request");
        size_t got = 0;
        while (got < sizeof resp) {
            ssize_t r = read(sv[0], resp, sizeof resp - got);
            if (r <= 0)
                fail("response");
            got += (size_t)r;
        }
    }
    MARK_STOP(4);
    waitpid(child, NULL, 0);
    return n;
}

/* Pin the calling process to CPU 0 (piperr, sockrr: client and server share one core, as a
 * protected procedure call's client and handler do). */
static void pin_cpu0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set))
        fail("sched_setaffinity");
}

/* piperr / sockrr: the client writes an 8-byte request, the server adds one and writes it
 * back; `iters` round trips inside the region (after 100 outside it), each answer checked. */
static long run_rr(int sock)
{
    int to_server[2], to_client[2];
    if (sock) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
            fail("socketpair");
        to_server[0] = sv[1];
        to_server[1] = sv[0];
        to_client[0] = sv[0];
        to_client[1] = sv[1];
    } else if (pipe(to_server) || pipe(to_client)) {
        fail("pipe");
    }
    long n = param("iters", 2000);
    long warm = 100;
    pin_cpu0();
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        for (long i = 0; i < n + warm; i++) {
            uint64_t v;
            if (read(to_server[0], &v, sizeof v) != sizeof v)
                _exit(1);
            v += 1;
            if (write(to_client[1], &v, sizeof v) != sizeof v)
                _exit(1);
        }
        _exit(0);
    }
    for (long i = 0; i < n + warm; i++) {
        if (i == warm)
            MARK_START(3); /* both processes (one CPU: they take turns on it) */
        uint64_t v = (uint64_t)i;
        if (write(to_server[1], &v, sizeof v) != sizeof v)
            fail("request");
        if (read(to_client[0], &v, sizeof v) != sizeof v)
            fail("response");
        if (v != (uint64_t)i + 1)
            fail("wrong response");
    }
    MARK_STOP(4);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("server");
    return n;
}

static long run_spawn(void)
{
    long n = param("iters", 20);
    MARK_START(3);
    for (long i = 0; i < n; i++) {
        pid_t c = fork();
        if (c < 0)
            fail("fork");
        if (c == 0) {
            /* a "compile": some arithmetic over a private buffer */
            static unsigned buf[8192];
            unsigned h = 0;
            for (int k = 0; k < 8192; k++)
                buf[k] = h = h * 31 + (unsigned)k;
            _exit((int)(buf[h & 8191] & 1));
        }
        waitpid(c, NULL, 0);
    }
    MARK_STOP(4);
    return n;
}

static void dump_kallsyms(void)
{
    FILE *f = fopen("/proc/kallsyms", "r");
    if (!f)
        fail("/proc/kallsyms");
    char line[512];
    printf("kallsyms-begin\n");
    while (fgets(line, sizeof line, f)) {
        /* "ffffffff81e00000 D name": text (to name the code that wrote a line), data, bss and
         * read-only data of the kernel image; module symbols are left out */
        char *sp = strchr(line, ' ');
        if (!sp || !strchr("tTdDbBrR", sp[1]) || strchr(line, '['))
            continue;
        fputs(line, stdout);
    }
    printf("kallsyms-end\n");
    fclose(f);
}

int main(void)
{
    mkdir("/proc", 0555);
    mkdir("/tmp", 01777);
    mount("proc", "/proc", "proc", 0, NULL);
    mount("tmpfs", "/tmp", "tmpfs", 0, NULL);
    int fd = open("/proc/cmdline", O_RDONLY);
    cmdline[0] = ' ';
    if (fd >= 0) {
        ssize_t r = read(fd, cmdline + 1, sizeof cmdline - 2);
        if (r > 0)
            cmdline[r + 1] = 0;
        close(fd);
    }
    char name[64];
    wl = sparam("wl", name, sizeof name);
    if (!wl) {
        printf("workload-error: no wl= on the kernel command line\n");
        power_off();
    }
    if (ioperm(MARKER_PORT, 1, 1))
        fail("ioperm(0x501)");
    if (!strcmp(wl, "tcpserv"))
        tcpserv_main(cmdline);
    if (!strcmp(wl, "idle")) {
        /* `cargo xtask idle`'s baseline of a shell at its prompt: block reading the console. */
        printf("idle: ready\n");
        fflush(stdout);
        for (;;) {
            char c;
            if (read(0, &c, 1) <= 0)
                pause();
        }
    }
    nthreads = (int)param("threads", 1);
    iters = param("iters", 1000);
    long ops;
    if (!strcmp(wl, "kallsyms")) {
        dump_kallsyms();
        ops = 0;
    } else if (!strcmp(wl, "stream"))
        ops = run_stream();
    else if (!strcmp(wl, "null") || !strcmp(wl, "dupclose") || !strcmp(wl, "dupclose_unshared") || !strcmp(wl, "counter") || !strcmp(wl, "private"))
        ops = run_threads();
    else if (!strcmp(wl, "find"))
        ops = run_fs(0);
    else if (!strcmp(wl, "zip"))
        ops = run_fs(1);
    else if (!strcmp(wl, "pipe"))
        ops = run_pipe();
    else if (!strcmp(wl, "piperr"))
        ops = run_rr(0);
    else if (!strcmp(wl, "sockrr"))
        ops = run_rr(1);
    else if (!strcmp(wl, "spawn"))
        ops = run_spawn();
    else if (!strcmp(wl, "filesum"))
        ops = run_filesum();
    else if (!strcmp(wl, "signal"))
        ops = run_signal();
    else {
        printf("workload-error: unknown workload `%s`\n", wl);
        power_off();
    }
    long long region_ns = (long long)(region_t1.tv_sec - region_t0.tv_sec) * 1000000000LL + (region_t1.tv_nsec - region_t0.tv_nsec);
    printf("workload name=%s ops=%ld threads=%d region_ns=%lld\n", wl, ops, nthreads, region_ns > 0 ? region_ns : 0);
    power_off();
    return 0;
}
