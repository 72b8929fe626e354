/* linuxfuzz: a system-call fuzzer that is itself a static Linux program. It issues every
 * x86-64 Linux system-call number 0..=461 and some numbers out of range with random arguments
 * biased towards bad pointers, seeded and reproducible, bounded in calls and in time
 * (docs/fuzz.md, "The Linux fuzzer").
 *
 *   linuxfuzz [seed=S] [calls=N] [secs=T] [trace]
 *
 * What it checks itself: it ends normally (prints `linuxfuzz: done ... failures=0` and exits
 * 0), and every result is a value a Linux call can return: never a negative value below
 * -4095, never an errno Linux never gives user space (-134 .. -4095, e.g. -ERESTARTSYS 512).
 * What the host checks (xtask/src/exec/fuzz.rs): no kernel panic or exception, the runtime
 * did not crash, and the leak checks (the runtime's and the kernel's after init) held.
 *
 * Calls it never issues, because they would end the run rather than test the call: exit (60),
 * exit_group (231), rt_sigreturn (15: restores random registers), reboot (169), seccomp (317:
 * strict mode kills the next call). Calls whose arguments it keeps away from itself (each
 * named where it is done in `tame`): signals that would kill or stop it or its parent,
 * handlers and masks (the watchdog's SIGALRM must stay deliverable), address-space calls
 * outside its own window, the descriptor it reports on, resource limits, arch_prctl's FS base,
 * prctl's seccomp/mm/tsc/syscall-dispatch options, fcntl's signal owners, clone's
 * CLONE_PARENT. fork, vfork, clone and clone3 run through `call_child_exits`: a child
 * (process or thread) calls exit at once without touching memory.
 *
 * Blocking calls are bounded by a watchdog: an interval timer sends SIGALRM every 20 ms to an
 * empty handler installed without SA_RESTART, so a read of an empty pipe, a futex wait, a
 * pause or a long sleep returns EINTR. */
#define _GNU_SOURCE
#include <signal.h>
#include <ucontext.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096ul
#define MAX_NR 461
#define OUT_FD 63 /* the report's descriptor: a dup of standard output, kept out of the calls */
#define SCRATCH_PAGES 64
#define WINDOW_PAGES 1024 /* reserved; the address-space calls use the first 512 pages */
#define WATCHDOG_US 20000

static long raw6(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
    return ret;
}

/* A call that may make a child (fork, vfork, clone, clone3): the child (rax 0) calls exit at
 * once, on no stack and touching no memory, so a thread with a random stack or TLS ends
 * cleanly too. */
static long call_child_exits(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall\n\t"
                     "test %%rax, %%rax\n\t"
                     "jnz 1f\n\t"
                     "mov $60, %%eax\n\t"
                     "xor %%edi, %%edi\n\t"
                     "syscall\n\t"
                     "ud2\n"
                     "1:"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* ---- output without stdio (fd OUT_FD only) ---- */
static char obuf[4096];
static int olen;
static void oflush(void) {
    int at = 0;
    while (at < olen) {
        long n = raw6(1, OUT_FD, (long)(obuf + at), olen - at, 0, 0, 0);
        if (n <= 0)
            break;
        at += n;
    }
    olen = 0;
}
static void oc(char c) {
    if (olen == sizeof obuf)
        oflush();
    obuf[olen++] = c;
}
static void ostr(const char *s) {
    while (*s)
        oc(*s++);
}
static void onum(long v) {
    char b[24];
    int i = 0;
    unsigned long u = v < 0 ? -(unsigned long)v : (unsigned long)v;
    if (v < 0)
        ostr("-");
    do {
        b[i++] = '0' + u % 10;
        u /= 10;
    } while (u);
    while (i)
        oc(b[--i]);
}
static void ohex(unsigned long v) {
    static const char d[] = "0123456789abcdef";
    char b[20];
    int i = 0;
    do {
        b[i++] = d[v & 15];
        v >>= 4;
    } while (v);
    ostr("0x");
    while (i)
        oc(b[--i]);
}

/* ---- the random stream ---- */
static uint64_t state;
static uint64_t rnd(void) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

/* ---- memory the fuzzer owns ---- */
static char *scratch;      /* SCRATCH_PAGES read-write pages, a PROT_NONE guard after them */
static char *ro;           /* one read-only page */
static char *window;       /* WINDOW_PAGES reserved (PROT_NONE) for the address-space calls */
static unsigned long hole; /* a page that was mapped and is not */
static pid_t self, parent;

static const char *const PATHS[] = {
    "/tmp/fz0", "/tmp/fz1", "/tmp/fz2", "/tmp/fz3", "/tmp/fzd", "/tmp/fzd/a", "/tmp/fz0/x", "/tmp/.",
    "/", "", ".", "..", "/nonexistent/x", "fz0", "fzd/../fz1", "/tmp/fzl",
};
/* Long names: in pages of their own (two, then a guard), since calls may write into them. */
static char *longname, *longpath;
static void fill_names(void) {
    memset(longname, 'n', 299);
    longname[299] = 0;
    for (unsigned i = 0; i + 1 < 5000; i++)
        longpath[i] = i % 2 ? '/' : 'd';
    longpath[4999] = 0;
}

/* Pointers no call may read: NULL, the first page, the kernel half, non-canonical, unmapped. */
static unsigned long bad_ptr(void) {
    switch (below(9)) {
    case 0: return 0;
    case 1: return 1 + below(PAGE - 1);
    case 2: return 0xffffffff81000000ul + below(1 << 20);
    case 3: return 0xffff888000000000ul + below(1 << 20) * 8;
    case 4: return 0xfffffffffffff000ul + below(PAGE);
    case 5: return 0x0000800000000000ul;
    case 6: return 0x8000000000000000ul | (rnd() & 0xffff);
    case 7: return hole + below(PAGE);
    default: return 0x00007ffffffff000ul - below(8) * PAGE; /* the top of the user half */
    }
}

/* Any pointer: half the time into scratch (readable and writable), else a bad one or memory
 * that cannot be written (read-only, code), or a buffer straddling the end of scratch. */
static unsigned long any_ptr(void) {
    switch (below(12)) {
    case 0: case 1: case 2: case 3: return (unsigned long)scratch + below(SCRATCH_PAGES * PAGE - 512);
    case 4: case 5: return (unsigned long)scratch + below(SCRATCH_PAGES) * PAGE;
    case 6: return (unsigned long)ro + below(PAGE);
    case 7: return (unsigned long)&any_ptr + below(64);
    case 8: return (unsigned long)scratch + SCRATCH_PAGES * PAGE - 1 - below(64);
    case 9: return (unsigned long)window + below(512) * PAGE;
    case 10: return (unsigned long)PATHS[below(sizeof PATHS / sizeof *PATHS)];
    default: return bad_ptr();
    }
}

static long small_int(void) {
    long v = below(65);
    return v == OUT_FD ? 64 : v;
}

static long any_int(void) {
    switch (below(12)) {
    case 0: case 1: case 2: return small_int();
    case 3: return -1;
    case 4: return (long)(rnd() & 0xffffffff);
    case 5: return (long)rnd();
    case 6: return 1l << below(64);
    case 7: return (long)((1ul << below(32)) | (1ul << below(32)));
    case 8: return (long)(below(16) * PAGE);
    case 9: return -100; /* AT_FDCWD */
    case 10: { long c[] = {0x7fffffff, -0x80000000l, 0x7fffffffffffffffl, (long)0x8000000000000000ul, 4095, 4097}; return c[below(6)]; }
    default: return any_ptr();
    }
}

static long any_arg(void) {
    switch (below(4)) {
    case 0: return any_ptr();
    case 1: return (long)PATHS[below(sizeof PATHS / sizeof *PATHS)];
    default: return any_int();
    }
}

/* An address for the address-space calls: inside the window or one no call may use. */
static unsigned long mm_addr(void) {
    if (below(4) == 0)
        return below(2) ? bad_ptr() : (unsigned long)window + below(512 * PAGE);
    return (unsigned long)window + below(512) * PAGE;
}
/* A length for them: within the window's reserve, or too large to be valid at all. */
static long mm_len(void) {
    switch (below(6)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return 1l << (47 + below(16));
    case 3: return below(512 * PAGE);
    default: return (1 + below(512)) * PAGE;
    }
}

/* A signal number that neither kills nor stops anyone: none, ignored by default, or invalid. */
static long safe_sig(void) {
    long s[] = {0, SIGURG, SIGWINCH, 65, -1, 1000, 0x7fffffff};
    return s[below(7)];
}
/* A pid other than the parent's and init's (kill, ptrace and process_vm_* on them would reach
 * the harness). */
static long safe_pid(long p) { return (p == 1 || p == parent) ? self : p; }

static void watchdog(void) {
    struct itimerval t = {{0, WATCHDOG_US}, {0, WATCHDOG_US}};
    raw6(38, ITIMER_REAL, (long)&t, 0, 0, 0, 0);
}
static void unblock_watchdog(void) {
    uint64_t m = 1ul << (SIGALRM - 1);
    raw6(14, SIG_UNBLOCK, (long)&m, 0, 8, 0, 0);
}
static void on_alarm(int s) { (void)s; }

/* A fault of the fuzzer itself: say where, after which call, and end (the host sees the
 * status and this line). */
static volatile long last_k = -1, last_nr = -1;
static void on_fault(int sig, siginfo_t *si, void *uc) {
    ucontext_t *u = uc;
    ostr("linuxfuzz: FAILED: signal ");
    onum(sig);
    ostr(" at rip ");
    ohex(u->uc_mcontext.gregs[REG_RIP]);
    ostr(" address ");
    ohex((unsigned long)si->si_addr);
    ostr(" after call #");
    onum(last_k);
    ostr(" nr=");
    onum(last_nr);
    ostr("\n");
    oflush();
    raw6(231, 3, 0, 0, 0, 0, 0);
}

/* Set-up calls, tried again while they fail with ENOMEM (allocation injection). */
#include <errno.h>
static char *map_retrying(unsigned long len, int prot) {
    for (int i = 0; i < 1000; i++) {
        char *p = mmap(0, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED || errno != ENOMEM)
            return p;
    }
    return MAP_FAILED;
}
#define retry_ok(call) ({ int _r = (call); for (int _i = 0; _r != 0 && errno == ENOMEM && _i < 1000; _i++) _r = (call); _r == 0; })

enum { SKIP = -1, NORMAL = 0, CHILD = 1 };

/* Make the arguments of call `nr` safe for the fuzzer itself (see the head comment);
 * returns SKIP for calls never issued, CHILD for calls that may make a child. */
static int tame(long nr, long *a) {
    switch (nr) {
    case 60: case 231: case 15: case 169: case 317:
        return SKIP;
    case 56: /* clone: no CLONE_PARENT (its child would be the harness's) */
        a[0] &= ~0x8000l;
        return CHILD;
    case 435: { /* clone3: arguments in scratch, flags without CLONE_PARENT */
        uint64_t *c = (uint64_t *)(scratch + PAGE * below(SCRATCH_PAGES - 1));
        for (int i = 0; i < 11; i++)
            c[i] = below(3) ? 0 : (uint64_t)any_arg();
        c[0] &= ~0x8000ul;
        if (below(2))
            a[0] = (long)c;
        else
            a[0] = bad_ptr();
        return CHILD;
    }
    case 57: case 58:
        return CHILD;
    case 13: /* rt_sigaction: reads no new action (the watchdog's handler stays) */
        a[1] = below(2) ? 0 : bad_ptr();
        return NORMAL;
    case 130: /* rt_sigsuspend: no mask that blocks SIGALRM */
        a[0] = bad_ptr();
        return NORMAL;
    case 7: case 23: case 232: /* poll, select, epoll_wait: the watchdog bounds them */
        return NORMAL;
    case 270: /* pselect6: its sigmask argument */
        a[5] = bad_ptr();
        return NORMAL;
    case 271: case 281: case 441: /* ppoll, epoll_pwait, epoll_pwait2 */
        a[3] = bad_ptr();
        return NORMAL;
    case 426: /* io_uring_enter's sigset */
        a[4] = bad_ptr();
        return NORMAL;
    case 62: case 129: case 424: /* kill, rt_sigqueueinfo, pidfd_send_signal */
        a[0] = safe_pid(a[0]);
        a[1] = safe_sig();
        return NORMAL;
    case 200: /* tkill */
        a[0] = safe_pid(a[0]);
        a[1] = safe_sig();
        return NORMAL;
    case 234: case 297: /* tgkill, rt_tgsigqueueinfo */
        a[0] = safe_pid(a[0]);
        a[1] = safe_pid(a[1]);
        a[2] = safe_sig();
        return NORMAL;
    case 101: /* ptrace */
        a[1] = safe_pid(a[1]);
        return NORMAL;
    case 310: case 311: case 312: case 434: /* process_vm_readv/writev, kcmp, pidfd_open */
        a[0] = safe_pid(a[0]);
        if (nr == 312)
            a[1] = safe_pid(a[1]);
        return NORMAL;
    case 222: /* timer_create: the default event (SIGALRM) or an unreadable one */
        a[1] = bad_ptr();
        return NORMAL;
    case 160: /* setrlimit: no new limit */
        a[1] = bad_ptr();
        return NORMAL;
    case 302: /* prlimit64 */
        a[0] = safe_pid(a[0]);
        a[2] = bad_ptr();
        return NORMAL;
    case 334: /* rseq: an area the kernel would read at every preemption */
        a[0] = bad_ptr();
        return NORMAL;
    case 158: { /* arch_prctl: never ARCH_SET_FS (musl's thread pointer) nor shadow stacks */
        long codes[] = {0x1001, 0x1003, 0x1004, 0x1011, 0x1012, 0x1021, 0x1022, 0x1023, 0, a[0]};
        a[0] = codes[below(10)];
        if (a[0] == 0x1002 || (a[0] >= 0x5001 && a[0] <= 0x5005))
            a[0] = 0x1003;
        return NORMAL;
    }
    case 157: /* prctl: not PR_SET_SECCOMP, PR_SET_MM, PR_SET_TSC, PR_SET_SYSCALL_USER_DISPATCH */
        if (below(2))
            a[0] = below(70);
        if (a[0] == 22 || a[0] == 35 || a[0] == 26 || a[0] == 59)
            a[0] = 1000;
        return NORMAL;
    case 72: /* fcntl: not F_SETOWN, F_SETSIG, F_SETOWN_EX (signals to others or fatal ones) */
        if (below(2))
            a[1] = below(48);
        if (a[1] == 8 || a[1] == 10 || a[1] == 15)
            a[1] = 1;
        return NORMAL;
    case 16: /* ioctl: not FIOSETOWN, SIOCSPGRP */
        if (a[1] == 0x8901 || a[1] == 0x8902)
            a[1] = 0x5401;
        return NORMAL;
    case 3: case 33: case 292: /* close, dup2, dup3: never the report's descriptor */
        return NORMAL;
    case 436: /* close_range: never over the report's descriptor */
        if ((unsigned long)a[0] <= OUT_FD && (unsigned long)a[1] >= OUT_FD)
            a[1] = OUT_FD - 1;
        return NORMAL;
    case 59: /* execve: a path that names no program */
        a[0] = below(4) ? (long)PATHS[below(sizeof PATHS / sizeof *PATHS)] : bad_ptr();
        return NORMAL;
    case 322: /* execveat: likewise, and not AT_EMPTY_PATH (a descriptor of a fuzzed file) */
        a[1] = below(4) ? (long)PATHS[below(sizeof PATHS / sizeof *PATHS)] : bad_ptr();
        a[4] &= ~0x1000l;
        return NORMAL;
    case 133: case 259: /* mknod(at): device 0 (never /dev/mem by chance) */
        a[nr == 133 ? 2 : 3] = 0;
        return NORMAL;
    case 285: /* fallocate: at most 1 MiB (tmpfs on Linux would take the guest's memory) */
        a[3] = below(4) ? (long)below(1 << 20) : -1;
        return NORMAL;
    case 300: /* fanotify_init: no permission classes (their events block every process) */
        a[0] &= ~0xcl;
        return NORMAL;
    case 9: /* mmap */
        a[0] = mm_addr();
        a[1] = mm_len();
        return NORMAL;
    case 25: /* mremap: old and new address in the window */
        a[0] = mm_addr();
        a[1] = mm_len();
        a[2] = mm_len();
        a[4] = mm_addr();
        return NORMAL;
    case 10: case 11: case 26: case 27: case 28: case 149: case 150: case 216: case 237: case 325:
    case 329: case 30: case 67:
        /* mprotect, munmap, msync, mincore, madvise, mlock, munlock, remap_file_pages, mbind,
         * mlock2, pkey_mprotect, shmat, shmdt: only the window */
        if (nr == 30) {
            a[1] = mm_addr();
        } else {
            a[0] = mm_addr();
            a[1] = mm_len();
        }
        return NORMAL;
    }
    return NORMAL;
}

/* (number, result) pairs reached: bit e of reached[nr] for -e (e < 134), bit 134 for >= 0. */
static uint64_t reached[MAX_NR + 1][3];
static long counts[MAX_NR + 1];

int main(int argc, char **argv) {
    uint64_t seed = 1;
    long calls = 20000, secs = 30;
    int trace = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        long v = 0;
        const char *eq = strchr(s, '=');
        if (eq)
            for (const char *p = eq + 1; *p >= '0' && *p <= '9'; p++)
                v = v * 10 + (*p - '0');
        if (!strncmp(s, "seed=", 5)) seed = v;
        else if (!strncmp(s, "calls=", 6)) calls = v;
        else if (!strncmp(s, "secs=", 5)) secs = v;
        else if (!strcmp(s, "trace")) trace = 1;
    }
    state = seed * 0x2545f4914f6cdd1dull + 1;
    self = getpid();
    parent = getppid();
    if (dup2(1, OUT_FD) != OUT_FD)
        return 2;
    /* The standard descriptors are the fuzzer's to close, dup over and write to; the report
     * goes to OUT_FD. */
    close(0);
    close(1);
    close(2);

    /* Signals whose default action would end or stop the run; the fuzzer never sends them,
     * but a call can make the kernel send one (SIGPIPE, SIGIO, SIGXFSZ, SIGHUP, ...). */
    int ign[] = {SIGPIPE, SIGIO, SIGXFSZ, SIGXCPU, SIGVTALRM, SIGPROF, SIGHUP, SIGTTIN, SIGTTOU, SIGTSTP, SIGTRAP, SIGSYS, SIGPWR, SIGSTKFLT, SIGUSR1, SIGUSR2};
    for (unsigned i = 0; i < sizeof ign / sizeof *ign; i++)
        signal(ign[i], SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART: a blocked call returns EINTR */
    sigaction(SIGALRM, &sa, 0);
    sa.sa_handler = 0;
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGBUS, &sa, 0);
    sigaction(SIGILL, &sa, 0);
    sigaction(SIGFPE, &sa, 0);

    /* Under allocation injection a set-up call may fail for want of memory: tried again. */
    char *s = map_retrying((SCRATCH_PAGES + 16) * PAGE, PROT_READ | PROT_WRITE);
    window = map_retrying(WINDOW_PAGES * PAGE, PROT_NONE);
    ro = map_retrying(PAGE, PROT_READ | PROT_WRITE);
    char *h = map_retrying(PAGE, PROT_READ);
    if (s == MAP_FAILED || window == MAP_FAILED || ro == MAP_FAILED || h == MAP_FAILED) {
        ostr("linuxfuzz: set-up failed: mmap\n");
        oflush();
        return 2;
    }
    /* The guard after the scratch pages: a write running off their end meets it. */
    if (!retry_ok(mprotect(s + SCRATCH_PAGES * PAGE, 16 * PAGE, PROT_NONE)) && !retry_ok(munmap(s + SCRATCH_PAGES * PAGE, 16 * PAGE))) {
        ostr("linuxfuzz: set-up failed: guard\n");
        oflush();
        return 2;
    }
    scratch = s;
    for (unsigned i = 0; i < PAGE; i++)
        ro[i] = (char)rnd();
    retry_ok(mprotect(ro, PAGE, PROT_READ));
    char *names = map_retrying(3 * PAGE, PROT_READ | PROT_WRITE);
    if (names == MAP_FAILED || (!retry_ok(mprotect(names + 2 * PAGE, PAGE, PROT_NONE)) && !retry_ok(munmap(names + 2 * PAGE, PAGE)))) {
        ostr("linuxfuzz: set-up failed: names\n");
        oflush();
        return 2;
    }
    longname = names + 2 * PAGE - 5000 - 300;
    longpath = names + 2 * PAGE - 5000;
    fill_names();
    /* The hole last: no later mapping of the set-up takes its place. */
    hole = (unsigned long)h;
    retry_ok(munmap(h, PAGE));

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    watchdog();

    long done = 0, ok = 0, errs = 0, skipped = 0, failures = 0, children = 0;
    for (long k = 0; k < calls; k++) {
        if ((k & 63) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (t1.tv_sec - t0.tv_sec >= secs)
                break;
            /* Fresh scratch: random bytes, pointers into scratch, path pointers. */
            uint64_t *w = (uint64_t *)scratch;
            for (unsigned i = 0; i < 2048; i++) {
                unsigned at = below(SCRATCH_PAGES * PAGE / 8);
                switch (below(4)) {
                case 0: w[at] = (uint64_t)scratch + below(SCRATCH_PAGES * PAGE); break;
                case 1: w[at] = (uint64_t)PATHS[below(sizeof PATHS / sizeof *PATHS)]; break;
                case 2: w[at] = below(256); break;
                default: w[at] = rnd();
                }
            }
            fill_names();
            /* Some path names in scratch, NUL-terminated or not. */
            memcpy(scratch + below(SCRATCH_PAGES * PAGE - 400), below(2) ? longname : "/tmp/fz1", below(2) ? 300 : 9);
        }
        long nr;
        switch (below(40)) {
        case 0: nr = MAX_NR + 1 + below(600); break;
        case 1: { long o[] = {-1, 0x40000000 + below(600), (1l << 32) + 39, 0x7fffffff, 1000000, (long)0x8000000000000000ul}; nr = o[below(6)]; break; }
        default: nr = below(MAX_NR + 1);
        }
        long a[6];
        for (int i = 0; i < 6; i++)
            a[i] = any_arg();
        if (below(8) == 0)
            a[below(6)] = below(2) ? (long)longname : (long)longpath;
        int kind = (nr >= 0 && nr <= MAX_NR) ? tame(nr, a) : NORMAL;
        if (kind == SKIP) {
            skipped++;
            continue;
        }
        /* The report's descriptor is no call's argument. */
        for (int i = 0; i < 6; i++)
            if (a[i] == OUT_FD)
                a[i] = 64;
        if (trace) {
            ostr("call #");
            onum(k);
            ostr(" nr=");
            onum(nr);
            for (int i = 0; i < 6; i++) {
                ostr(" ");
                ohex(a[i]);
            }
            ostr("\n");
            oflush();
        }
        last_k = k;
        last_nr = nr;
        long r = kind == CHILD ? call_child_exits(nr, a[0], a[1], a[2], a[3], a[4], a[5]) : raw6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
        done++;
        if (kind == CHILD && r > 0)
            children++;
        if (r >= 0 || r < -4095)
            ok += r >= 0;
        else
            errs++;
        if (r < -4095 || (r < -133 && r >= -4095)) {
            failures++;
            ostr("linuxfuzz: FAILED: call #");
            onum(k);
            ostr(" nr=");
            onum(nr);
            ostr(" returned ");
            onum(r);
            ostr(" (no Linux call returns it)\n");
            oflush();
        }
        if (nr >= 0 && nr <= MAX_NR) {
            counts[nr]++;
            unsigned bit = r >= 0 ? 134 : (unsigned)(-r < 134 ? -r : 134);
            reached[nr][bit / 64] |= 1ull << (bit % 64);
        }
        /* What a call may have changed of the fuzzer's own set-up. */
        if (nr == 14)
            unblock_watchdog();
        if (nr == 37 || nr == 38)
            watchdog();
        /* Reap children now and then (a system allows a bounded number). */
        if (children > 8) {
            while (raw6(61, -1, 0, WNOHANG | __WALL, 0, 0, 0) > 0)
                ;
            children = 0;
        }
    }
    /* Stop the watchdog, reap every child, close what the calls opened. */
    struct itimerval off = {{0, 0}, {0, 0}};
    raw6(38, ITIMER_REAL, (long)&off, 0, 0, 0, 0);
    for (int i = 0; i < 200 && raw6(61, -1, 0, WNOHANG | __WALL, 0, 0, 0) > 0; i++)
        ;
    for (int fd = 0; fd < 1024; fd++)
        if (fd != OUT_FD)
            raw6(3, fd, 0, 0, 0, 0, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    long numbers = 0, pairs = 0;
    for (int n = 0; n <= MAX_NR; n++) {
        numbers += counts[n] > 0;
        for (int i = 0; i < 3; i++)
            pairs += __builtin_popcountll(reached[n][i]);
    }
    ostr("linuxfuzz: done seed=");
    onum(seed);
    ostr(" calls=");
    onum(done);
    ostr(" ok=");
    onum(ok);
    ostr(" errors=");
    onum(errs);
    ostr(" skipped=");
    onum(skipped);
    ostr(" numbers=");
    onum(numbers);
    ostr(" paths=");
    onum(pairs);
    ostr(" ms=");
    onum(ms);
    ostr(" failures=");
    onum(failures);
    ostr("\n");
    oflush();
    return failures ? 1 : 0;
}
