/*
 * Signals a process sends itself, and its own faults (no fork: see signals.c for SIGCHLD).
 * Checks: handlers on kill/raise with their siginfo; blocked signals stay pending; rt_sigreturn
 * gives back every register (general and SSE) a handler clobbers; SA_NODEFER, SA_RESETHAND,
 * SA_ONSTACK on an alternate stack; sigsuspend; SIG_IGN; alarm and setitimer interrupting a
 * computing loop, pause and nanosleep (EINTR); SIGSEGV, SIGFPE and SIGILL handlers that
 * siglongjmp out with si_addr/si_code; the errors for bad arguments.
 * `sigself segv|fpe|abort|term|ignsegv`: die of that signal (status 128 + N).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t seen, blocked_inside, count, alrm;
static volatile int info_signo, info_code, info_pid;
static volatile uintptr_t info_addr, handler_sp;
static sigjmp_buf env;
/* Addresses no program maps (volatile: the compiler may not assume anything about them). */
static volatile int *volatile low8 = (volatile int *)8, *volatile low16 = (volatile int *)16;

static int check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    return cond;
}

static void on_sig(int sig) {
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    seen = sig;
    blocked_inside = sigismember(&cur, sig);
    count++;
}

static void on_info(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    seen = sig;
    info_signo = si->si_signo;
    info_code = si->si_code;
    info_pid = si->si_pid;
}

static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    info_signo = sig;
    info_code = si->si_code;
    info_addr = (uintptr_t)si->si_addr;
    siglongjmp(env, 1);
}

static void on_alrm(int sig) {
    (void)sig;
    alrm++;
}

static void on_stack(int sig) {
    int local;
    (void)sig;
    handler_sp = (uintptr_t)&local;
    stack_t now;
    sigaltstack(NULL, &now);
    blocked_inside = (now.ss_flags & SS_ONSTACK) != 0;
}

/* Clobbers every caller-saved register and some SSE registers: rt_sigreturn must restore them. */
static void on_clobber(int sig) {
    (void)sig;
    volatile double d = 3.0;
    d = d * d + 0.5;
    seen = (int)d;
    __asm__ volatile("xor %%edx, %%edx\n\txor %%esi, %%esi\n\txor %%edi, %%edi\n\txor %%r8d, %%r8d\n\t"
                     "xor %%r9d, %%r9d\n\txor %%r10d, %%r10d\n\tpxor %%xmm0, %%xmm0\n\tpxor %%xmm7, %%xmm7\n\t"
                     "pxor %%xmm15, %%xmm15" ::: "rdx", "rsi", "rdi", "r8", "r9", "r10", "xmm0", "xmm7", "xmm15");
}

unsigned long g_pid, g_out[10];

/* kill(getpid(), SIGUSR2) by a raw syscall with known values in every register Linux keeps
 * across a call (all but rax, rcx, r11), then read them back. */
static int registers_survive(void) {
    g_pid = (unsigned long)getpid();
    __asm__ volatile(
        "mov $0x1111111111111111, %%rbx\n\t"
        "mov $0x1212121212121212, %%r12\n\t"
        "mov $0x1313131313131313, %%r13\n\t"
        "mov $0x1414141414141414, %%r14\n\t"
        "mov $0x1515151515151515, %%r15\n\t"
        "mov $0x0808080808080808, %%r8\n\t"
        "mov $0x0909090909090909, %%r9\n\t"
        "mov $0x1010101010101010, %%r10\n\t"
        "mov $0x0707070707070707, %%rax\n\t"
        "movq %%rax, %%xmm7\n\t"
        "mov $0x0f0f0f0f0f0f0f0f, %%rax\n\t"
        "movq %%rax, %%xmm15\n\t"
        "mov g_pid(%%rip), %%rdi\n\t"
        "mov $12, %%esi\n\t"
        "mov $0x2222222222222222, %%rdx\n\t"
        "mov $62, %%eax\n\t"
        "syscall\n\t"
        "mov %%rbx, g_out+0(%%rip)\n\t"
        "mov %%r12, g_out+8(%%rip)\n\t"
        "mov %%r13, g_out+16(%%rip)\n\t"
        "mov %%r14, g_out+24(%%rip)\n\t"
        "mov %%r15, g_out+32(%%rip)\n\t"
        "mov %%r8, g_out+40(%%rip)\n\t"
        "mov %%r9, g_out+48(%%rip)\n\t"
        "mov %%r10, g_out+56(%%rip)\n\t"
        "mov %%rdx, g_out+64(%%rip)\n\t"
        "movq %%xmm7, %%rax\n\t"
        "mov %%rax, g_out+72(%%rip)\n\t"
        "movq %%xmm15, %%rax\n\t"
        "mov $0x0f0f0f0f0f0f0f0f, %%rcx\n\t"
        "cmp %%rcx, %%rax\n\t"
        "je 1f\n\t"
        "movq $0, g_out+72(%%rip)\n"
        "1:\n\t"
        :
        :
        : "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "xmm7", "xmm15", "memory", "cc");
    return g_out[0] == 0x1111111111111111UL && g_out[1] == 0x1212121212121212UL && g_out[2] == 0x1313131313131313UL &&
           g_out[3] == 0x1414141414141414UL && g_out[4] == 0x1515151515151515UL && g_out[5] == 0x0808080808080808UL &&
           g_out[6] == 0x0909090909090909UL && g_out[7] == 0x1010101010101010UL && g_out[8] == 0x2222222222222222UL &&
           g_out[9] == 0x0707070707070707UL;
}

static void set(int sig, void (*h)(int), int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = flags;
    sigaction(sig, &sa, NULL);
}

static void set_info(int sig, void (*h)(int, siginfo_t *, void *)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = h;
    sa.sa_flags = SA_SIGINFO;
    sigaction(sig, &sa, NULL);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void itimer_ms(long ms) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = ms / 1000;
    it.it_value.tv_usec = (ms % 1000) * 1000;
    setitimer(ITIMER_REAL, &it, NULL);
}

static int die(const char *how) {
    printf("dying by %s\n", how);
    fflush(stdout);
    if (strcmp(how, "segv") == 0) {
        *low16 = 1;
    } else if (strcmp(how, "ignsegv") == 0) {
        signal(SIGSEGV, SIG_IGN); /* a fault is forced through: still fatal */
        *low16 = 1;
    } else if (strcmp(how, "fpe") == 0) {
        volatile int z = 0, n = 7;
        printf("%d\n", n / z);
    } else if (strcmp(how, "abort") == 0) {
        abort();
    } else if (strcmp(how, "term") == 0) {
        kill(getpid(), SIGTERM);
    }
    printf("still alive: FAILED\n");
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1)
        return die(argv[1]);
    int ok = 1;

    set(SIGUSR1, on_sig, 0);
    kill(getpid(), SIGUSR1);
    ok &= check("handler runs on kill, its signal blocked inside", seen == SIGUSR1 && blocked_inside == 1);

    sigset_t block, old, pend;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    seen = 0;
    sigprocmask(SIG_BLOCK, &block, &old);
    kill(getpid(), SIGUSR1);
    sigpending(&pend);
    ok &= check("blocked signal pending, not delivered", seen == 0 && sigismember(&pend, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);
    ok &= check("delivered once unblocked", seen == SIGUSR1);

    set_info(SIGUSR2, on_info);
    kill(getpid(), SIGUSR2);
    ok &= check("SA_SIGINFO from kill: signo, SI_USER, sender pid", info_signo == SIGUSR2 && info_code == SI_USER && info_pid == getpid());
    raise(SIGUSR2);
    ok &= check("SA_SIGINFO from raise (tkill): SI_TKILL", info_signo == SIGUSR2 && info_code == SI_TKILL);

    set(SIGUSR2, on_clobber, 0);
    ok &= check("rt_sigreturn restores the registers and SSE state a handler clobbers", registers_survive() && seen == 9);

    set(SIGUSR1, on_sig, SA_NODEFER);
    kill(getpid(), SIGUSR1);
    ok &= check("SA_NODEFER: not blocked inside", seen == SIGUSR1 && blocked_inside == 0);

    count = 0;
    set(SIGUSR1, on_sig, SA_RESETHAND);
    kill(getpid(), SIGUSR1);
    struct sigaction q;
    sigaction(SIGUSR1, NULL, &q);
    ok &= check("SA_RESETHAND: runs once, then SIG_DFL", count == 1 && q.sa_handler == SIG_DFL);

    static char alt[16384];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    ok &= check("sigaltstack set", sigaltstack(&ss, NULL) == 0);
    set(SIGUSR1, on_stack, SA_ONSTACK);
    blocked_inside = 0;
    kill(getpid(), SIGUSR1);
    ok &= check("SA_ONSTACK: the handler runs on the alternate stack", handler_sp > (uintptr_t)alt && handler_sp < (uintptr_t)alt + sizeof alt && blocked_inside == 1);
    stack_t small = {.ss_sp = alt, .ss_size = 100, .ss_flags = 0};
    ok &= check("sigaltstack too small: ENOMEM", sigaltstack(&small, NULL) == -1 && errno == ENOMEM);
    stack_t badf = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 77};
    ok &= check("sigaltstack bad flags: EINVAL", sigaltstack(&badf, NULL) == -1 && errno == EINVAL);

    set(SIGUSR1, on_sig, 0);
    sigprocmask(SIG_BLOCK, &block, &old);
    kill(getpid(), SIGUSR1);
    seen = 0;
    sigset_t none;
    sigemptyset(&none);
    int r = sigsuspend(&none);
    sigset_t after;
    sigprocmask(SIG_BLOCK, NULL, &after);
    ok &= check("sigsuspend: handler runs, EINTR, mask back", r == -1 && errno == EINTR && seen == SIGUSR1 && sigismember(&after, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);

    signal(SIGUSR2, SIG_IGN);
    kill(getpid(), SIGUSR2);
    sigpending(&pend);
    ok &= check("SIG_IGN: nothing happens, nothing pending", !sigismember(&pend, SIGUSR2));

    set(SIGALRM, on_alrm, 0);
    ok &= check("alarm returns the previous alarm's seconds", alarm(5) == 0 && alarm(0) == 5);
    alrm = 0;
    itimer_ms(100);
    double t0 = now();
    volatile unsigned long spins = 0;
    while (!alrm && now() - t0 < 20)
        for (int i = 0; i < 100000; i++)
            spins++;
    ok &= check("setitimer interrupts a computing loop", alrm == 1);
    alrm = 0;
    alarm(1);
    t0 = now();
    while (!alrm && now() - t0 < 20)
        spins++;
    ok &= check("alarm interrupts a computing loop", alrm == 1);

    itimer_ms(50);
    r = pause();
    ok &= check("pause: EINTR after the handler", r == -1 && errno == EINTR && alrm == 2);
    itimer_ms(50);
    struct timespec req = {.tv_sec = 5, .tv_nsec = 0}, rem = {0, 0};
    r = nanosleep(&req, &rem);
    ok &= check("nanosleep: EINTR with the time left", r == -1 && errno == EINTR && rem.tv_sec >= 1 && rem.tv_sec <= 5);

    struct itimerval cur;
    itimer_ms(3000);
    getitimer(ITIMER_REAL, &cur);
    ok &= check("getitimer: the time left", cur.it_value.tv_sec >= 1 && cur.it_value.tv_sec <= 3);
    itimer_ms(0);
    getitimer(ITIMER_REAL, &cur);
    ok &= check("setitimer 0 disarms", cur.it_value.tv_sec == 0 && cur.it_value.tv_usec == 0);

    set_info(SIGSEGV, on_fault);
    info_signo = 0;
    if (sigsetjmp(env, 1) == 0)
        *low8 = 1;
    ok &= check("SIGSEGV handler: si_addr, SEGV_MAPERR, siglongjmp out", info_signo == SIGSEGV && info_addr == 8 && info_code == SEGV_MAPERR);
    sigprocmask(SIG_BLOCK, NULL, &after);
    ok &= check("siglongjmp put the mask back", !sigismember(&after, SIGSEGV));
    info_signo = 0;
    if (sigsetjmp(env, 1) == 0)
        *low8 = 1;
    ok &= check("a second SIGSEGV reaches the handler too", info_signo == SIGSEGV);

    set_info(SIGFPE, on_fault);
    info_signo = 0;
    volatile int zero = 0, x = 0;
    if (sigsetjmp(env, 1) == 0)
        x = 7 / zero;
    ok &= check("SIGFPE handler on divide by zero: FPE_INTDIV", info_signo == SIGFPE && info_code == FPE_INTDIV && x == 0);

    set_info(SIGILL, on_fault);
    info_signo = 0;
    if (sigsetjmp(env, 1) == 0)
        __asm__ volatile("ud2");
    ok &= check("SIGILL handler on ud2: ILL_ILLOPN", info_signo == SIGILL && info_code == ILL_ILLOPN);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    ok &= check("sigaction(SIGKILL): EINVAL", sigaction(SIGKILL, &sa, NULL) == -1 && errno == EINVAL);
    ok &= check("sigaction(SIGSTOP): EINVAL", sigaction(SIGSTOP, &sa, NULL) == -1 && errno == EINVAL);
    ok &= check("rt_sigaction(65): EINVAL", syscall(SYS_rt_sigaction, 65, 0, 0, 8) == -1 && errno == EINVAL);
    ok &= check("rt_sigaction bad sigsetsize: EINVAL", syscall(SYS_rt_sigaction, SIGUSR1, 0, 0, 4) == -1 && errno == EINVAL);
    ok &= check("rt_sigaction bad act pointer: EFAULT", syscall(SYS_rt_sigaction, SIGUSR1, 8, 0, 8) == -1 && errno == EFAULT);
    ok &= check("rt_sigaction bad oldact pointer: EFAULT", syscall(SYS_rt_sigaction, SIGUSR1, 0, 8, 8) == -1 && errno == EFAULT);
    ok &= check("rt_sigprocmask bad how: EINVAL", syscall(SYS_rt_sigprocmask, 7, &block, 0, 8) == -1 && errno == EINVAL);
    ok &= check("rt_sigprocmask bad set pointer: EFAULT", syscall(SYS_rt_sigprocmask, SIG_BLOCK, 8, 0, 8) == -1 && errno == EFAULT);
    ok &= check("rt_sigpending bad pointer: EFAULT", syscall(SYS_rt_sigpending, 8, 8) == -1 && errno == EFAULT);
    ok &= check("rt_sigsuspend bad pointer: EFAULT", syscall(SYS_rt_sigsuspend, 8, 8) == -1 && errno == EFAULT);
    ok &= check("kill with signal 65: EINVAL", kill(getpid(), 65) == -1 && errno == EINVAL);
    ok &= check("kill(pid, 0): the process exists", kill(getpid(), 0) == 0);
    ok &= check("tgkill with tid 0: EINVAL", syscall(SYS_tgkill, getpid(), 0, SIGUSR1) == -1 && errno == EINVAL);
    ok &= check("setitimer bad which: EINVAL", syscall(SYS_setitimer, 9, 0, 0) == -1 && errno == EINVAL);
    ok &= check("setitimer bad pointer: EFAULT", syscall(SYS_setitimer, ITIMER_REAL, 8, 0) == -1 && errno == EFAULT);
    ok &= check("sigaltstack bad pointer: EFAULT", syscall(SYS_sigaltstack, 8, 0) == -1 && errno == EFAULT);

    printf("sigself: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
