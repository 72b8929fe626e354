/*
 * Two processes time-sharing one core keep their own SSE registers: the parent and a forked
 * child each hold their own pattern in xmm5 (and their own MXCSR rounding mode) and check
 * them, without a system call, millions of times over about half a second, across many
 * timer-tick switches between them. A kernel that does not save and restore the x87/SSE
 * state when a time-sharing core switches contexts lets each see the other's.
 */
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Spin for `ms` milliseconds with `v` in xmm5 and `csr` in MXCSR; the number of looks that
 * found something else (each one puts its own value back). */
static long spin(unsigned long v, unsigned csr, long ms) {
    long bad = 0;
    __asm__ volatile("movq %0, %%xmm5" ::"r"(v) : "xmm5");
    __asm__ volatile("ldmxcsr %0" ::"m"(csr));
    long end = now_ms() + ms;
    while (now_ms() < end) {
        for (long i = 0; i < 200000; i++) {
            unsigned long got;
            unsigned cur;
            __asm__ volatile("movq %%xmm5, %0" : "=r"(got));
            __asm__ volatile("stmxcsr %0" : "=m"(cur));
            if (got != v || cur != csr) {
                bad++;
                __asm__ volatile("movq %0, %%xmm5" ::"r"(v) : "xmm5");
                __asm__ volatile("ldmxcsr %0" ::"m"(csr));
            }
        }
    }
    return bad;
}

int main(void) {
    pid_t c = fork();
    if (c == 0) {
        long bad = spin(0x2222222222222222UL, 0x1f80 | (1u << 13), 500);
        _exit(bad > 250 ? 250 : (int)bad);
    }
    long bad = spin(0x1111111111111111UL, 0x1f80 | (2u << 13), 500);
    int st;
    waitpid(c, &st, 0);
    int child_bad = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
    printf("parent saw another's SSE state: %s\n", bad ? "yes (FAILED)" : "never");
    printf("child saw another's SSE state: %s\n", child_bad ? "yes (FAILED)" : "never");
    int ok = bad == 0 && child_bad == 0;
    printf("fpswitch: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
