/*
 * The Linux baseline of Corey's TCP service (seeds/000 section 8.2; docs/net.md): `wl=tcpserv`.
 * Linked into the measurement guest's /init with workload.c, which calls tcpserv_main.
 *
 * 1. Loads the NIC's driver modules listed in /lib/modules/order (packed into the initramfs by
 *    xtask/src/linux.rs, dependencies first) with finit_module.
 * 2. Configures the first non-loopback interface itself, as QEMU's user-mode network expects:
 *    10.0.2.15/24, up, default route via 10.0.2.2 (no DHCP client in the initramfs).
 * 3. One thread per online CPU, pinned to it, each with its own SO_REUSEPORT listening socket
 *    on port 80 (the kernel spreads incoming connections over them by a hash of the 4-tuple):
 *    accept, write the 128 bytes, close.
 * 4. Prints `tcpserv: ready cores=N port=80` once every thread listens. With conns=N it prints
 *    `tcpserv: done conns=N core0=.. core1=.. calib_ops=.. calib_ns=..` after N connections
 *    and powers off; without, it serves until the machine is stopped.
 * 5. Region markers (marker.h) for the insncount plugin: every vCPU starts counting when the
 *    warmup=W'th connection has been served (the host's untimed warm-up), and stops when the
 *    N'th has, so the count covers the measured connections only (plus what idle vCPUs run).
 * 6. After the N'th connection, the share-nothing calibration of docs/bench.md: the register
 *    xorshift loop, 4 M steps on every CPU at once, best of 3, timed with CLOCK_MONOTONIC.
 *
 * Errors print `tcpserv-error: ...` (and `workload-error: ...` for the harness) and power off.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../marker.h"

#define TCPSERV_PORT 80
#define REPLY_LEN 128
#define MAX_CORES 256

static const char *tcmd;

static long tparam(const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(tcmd, pat);
    return p ? strtol(p + strlen(pat), NULL, 0) : def;
}

static void off(void)
{
    fflush(stdout);
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}

static void die(const char *what)
{
    printf("tcpserv-error: %s: %s\n", what, strerror(errno));
    printf("workload-error: tcpserv: %s: %s\n", what, strerror(errno));
    off();
}

/* Load every module named in /lib/modules/order, in order. EEXIST (built in, or loaded
 * already) is fine. The files are uncompressed (xtask decompresses .ko.xz on the host). */
static int load_modules(void)
{
    FILE *f = fopen("/lib/modules/order", "r");
    if (!f)
        die("open /lib/modules/order (initramfs without the NIC modules?)");
    char name[256], path[300];
    int n = 0;
    while (fgets(name, sizeof name, f)) {
        name[strcspn(name, "\r\n")] = 0;
        if (!name[0])
            continue;
        snprintf(path, sizeof path, "/lib/modules/%s", name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die(path);
        if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST) {
            char what[320];
            snprintf(what, sizeof what, "finit_module %s", name);
            die(what);
        }
        close(fd);
        n++;
    }
    fclose(f);
    return n;
}

/* The first interface that is not loopback; the driver's probe may finish after
 * finit_module returns, so wait for it (bounded: 30 s of guest time). */
static void find_interface(char *out, size_t n)
{
    for (int tries = 0; tries < 3000; tries++) {
        struct if_nameindex *ifs = if_nameindex();
        if (ifs) {
            for (struct if_nameindex *i = ifs; i->if_index; i++) {
                if (strcmp(i->if_name, "lo") != 0) {
                    snprintf(out, n, "%s", i->if_name);
                    if_freenameindex(ifs);
                    return;
                }
            }
            if_freenameindex(ifs);
        }
        usleep(10000);
    }
    errno = ENODEV;
    die("no network interface appeared after loading the modules");
}

static void set_addr(int s, const char *ifname, unsigned long req, const char *addr, const char *what)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
    struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr, &sin->sin_addr);
    if (ioctl(s, req, &ifr) != 0)
        die(what);
}

static void bring_up(int s, const char *ifname)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
    if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
        die("SIOCGIFFLAGS");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0)
        die("SIOCSIFFLAGS");
}

/* 10.0.2.15/24 up, loopback up, default route via QEMU's gateway 10.0.2.2. */
static void configure(const char *ifname)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        die("socket for ioctl");
    bring_up(s, "lo");
    set_addr(s, ifname, SIOCSIFADDR, "10.0.2.15", "SIOCSIFADDR 10.0.2.15");
    set_addr(s, ifname, SIOCSIFNETMASK, "255.255.255.0", "SIOCSIFNETMASK 255.255.255.0");
    bring_up(s, ifname);
    struct rtentry rt;
    memset(&rt, 0, sizeof rt);
    struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gw = (struct sockaddr_in *)&rt.rt_gateway,
                       *mask = (struct sockaddr_in *)&rt.rt_genmask;
    dst->sin_family = gw->sin_family = mask->sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.2.2", &gw->sin_addr);
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    rt.rt_dev = (char *)ifname;
    if (ioctl(s, SIOCADDRT, &rt) != 0)
        die("SIOCADDRT default via 10.0.2.2");
    close(s);
}

/* Per-thread counts, each on its own 128-byte line (nothing shared but the total). */
static struct {
    volatile uint64_t served, write_errors, accept_errors;
    char pad[104];
} counts[MAX_CORES] __attribute__((aligned(128)));
static volatile uint64_t total_served __attribute__((aligned(128)));
static volatile int listening;
static long warmup;
static unsigned char reply[REPLY_LEN];

static void *serve(void *arg)
{
    int id = (int)(intptr_t)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(id, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("sched_setaffinity");
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0)
        die("socket");
    int one = 1;
    if (setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
        die("SO_REUSEADDR/SO_REUSEPORT");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(TCPSERV_PORT);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(l, (struct sockaddr *)&a, sizeof a) != 0)
        die("bind port 80");
    if (listen(l, 256) != 0)
        die("listen");
    __atomic_add_fetch(&listening, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno != EINTR)
                counts[id].accept_errors++;
            if (counts[id].accept_errors > 1000)
                die("accept keeps failing");
            continue;
        }
        size_t sent = 0;
        while (sent < REPLY_LEN) {
            ssize_t w = send(c, reply + sent, REPLY_LEN - sent, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                counts[id].write_errors++;
                break;
            }
            sent += (size_t)w;
        }
        close(c);
        if (sent == REPLY_LEN)
            counts[id].served++;
        if (__atomic_add_fetch(&total_served, 1, __ATOMIC_SEQ_CST) == (uint64_t)warmup)
            asm volatile(MARKER_ASM(3) ::: "rax", "rdx", "memory");
    }
    return NULL;
}

/* The calibration: the same xorshift step as bench/src/suite.rs (x through memory each
 * step, as black_box does there), on every CPU at once. */
#define CALIB_STEPS 4000000L
static pthread_barrier_t calib_barrier;
static struct {
    struct timespec t0, t1;
    char pad[96];
} calib_times[MAX_CORES] __attribute__((aligned(128)));

static void *calib_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(id, &set);
    sched_setaffinity(0, sizeof set, &set);
    pthread_barrier_wait(&calib_barrier);
    clock_gettime(CLOCK_MONOTONIC, &calib_times[id].t0);
    uint64_t x = (uint64_t)id + 1;
    for (long i = 0; i < CALIB_STEPS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        asm volatile("" : : "r"(&x) : "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &calib_times[id].t1);
    return (void *)(uintptr_t)(x & 1);
}

static long long ts_ns(struct timespec t)
{
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Fastest of 3: first start to last stop over all CPUs. */
static long long calibrate(int ncpu)
{
    long long best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t t[MAX_CORES];
        pthread_barrier_init(&calib_barrier, NULL, (unsigned)ncpu);
        for (int i = 1; i < ncpu; i++)
            if (pthread_create(&t[i], NULL, calib_worker, (void *)(intptr_t)i) != 0)
                die("pthread_create (calibration)");
        calib_worker((void *)0);
        for (int i = 1; i < ncpu; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&calib_barrier);
        long long t0 = ts_ns(calib_times[0].t0), t1 = ts_ns(calib_times[0].t1);
        for (int i = 1; i < ncpu; i++) {
            if (ts_ns(calib_times[i].t0) < t0)
                t0 = ts_ns(calib_times[i].t0);
            if (ts_ns(calib_times[i].t1) > t1)
                t1 = ts_ns(calib_times[i].t1);
        }
        if (best == 0 || t1 - t0 < best)
            best = t1 - t0;
    }
    return best;
}

void tcpserv_main(const char *cmdline)
{
    tcmd = cmdline;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < REPLY_LEN; i++)
        reply[i] = (unsigned char)('a' + i % 26);
    reply[REPLY_LEN - 1] = '\n';
    long conns = tparam("conns", 0);
    warmup = tparam("warmup", 0);
    if (warmup == 0)
        asm volatile(MARKER_ASM(3) ::: "rax", "rdx", "memory");
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1 || ncpu > MAX_CORES) {
        errno = EINVAL;
        die("online CPUs not in 1..256");
    }
    int mods = load_modules();
    char ifname[IFNAMSIZ];
    find_interface(ifname, sizeof ifname);
    configure(ifname);
    pthread_t t[MAX_CORES];
    for (int i = 0; i < ncpu; i++)
        if (pthread_create(&t[i], NULL, serve, (void *)(intptr_t)i) != 0)
            die("pthread_create");
    while (__atomic_load_n(&listening, __ATOMIC_SEQ_CST) < ncpu)
        usleep(1000);
    printf("tcpserv: ready cores=%d port=%d if=%s modules=%d system=linux\n", ncpu, TCPSERV_PORT, ifname, mods);
    if (conns <= 0)
        for (;;)
            pause();
    /* Bounded by the host: it kills the machine if the connections never come. */
    while (__atomic_load_n(&total_served, __ATOMIC_SEQ_CST) < (uint64_t)conns)
        usleep(2000);
    asm volatile(MARKER_ASM(4) ::: "rax", "rdx", "memory");
    /* The service threads stay blocked in accept: the calibration has the CPUs to itself. */
    long long calib_ns = calibrate(ncpu);
    uint64_t served = 0, werr = 0, aerr = 0;
    char per[MAX_CORES * 24] = "";
    size_t at = 0;
    for (int i = 0; i < ncpu; i++) {
        served += counts[i].served;
        werr += counts[i].write_errors;
        aerr += counts[i].accept_errors;
        at += (size_t)snprintf(per + at, sizeof per - at, " core%d=%llu", i, (unsigned long long)counts[i].served);
    }
    printf("tcpserv: done conns=%llu warmup=%ld served=%llu write_errors=%llu accept_errors=%llu cores=%d service_cores=%d%s calib_ops=%lld calib_ns=%lld\n",
           (unsigned long long)total_served, warmup, (unsigned long long)served, (unsigned long long)werr, (unsigned long long)aerr, ncpu, ncpu, per,
           (long long)CALIB_STEPS * ncpu, calib_ns);
    off();
}
