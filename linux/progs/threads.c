/*
 * Threads and futexes call by call, with the errors Linux gives for bad input. Each line is
 * a check: its result as Linux gives it (the conformance case compares the two systems'
 * output line by line). `threads` runs them all and ends with 0; `threads groupexit` ends
 * the program with _exit(7) from a second thread while the main thread waits in
 * pthread_join (status 7). `threads signals` checks signals with threads: a tgkill to
 * another thread runs the handler in that thread, each thread's own mask, a futex wait
 * interrupted by a handler (EINTR), and ends with 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* <linux/futex.h>'s numbers (musl's headers do not include the kernel's). */
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129
#define FUTEX_CMP_REQUEUE_PRIVATE 132
#define FUTEX_WAKE_OP_PRIVATE 133
#define FUTEX_WAIT_BITSET_PRIVATE 137
#define FUTEX_WAKE_BITSET_PRIVATE 138
#define FUTEX_CLOCK_REALTIME 256
#define FUTEX_BITSET_MATCH_ANY 0xffffffffu
#define FUTEX_OP_ADD 1
#define FUTEX_OP_CMP_GE 5
#define FUTEX_OP(op, oparg, cmp, cmparg) ((((op) & 0xf) << 28) | (((cmp) & 0xf) << 24) | (((oparg) & 0xfff) << 12) | ((cmparg) & 0xfff))

static long fx(void *addr, int op, unsigned val, const struct timespec *ts, void *addr2, unsigned val3) {
    long r = syscall(SYS_futex, addr, op, val, ts, addr2, val3);
    return r < 0 ? -errno : r;
}

static int failures = 0;
static void check(const char *what, long got, long want) {
    printf("%s: %ld%s\n", what, got, got == want ? "" : " (WRONG)");
    if (got != want)
        failures++;
}

static int word_a = 0, word_b = 0;

static void *waiter_a(void *arg) {
    (void)arg;
    long r;
    do
        r = fx(&word_a, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    while (r == -EAGAIN && word_a == 0);
    return (void *)(r == 0 ? 1L : 0L);
}

static void *tid_thread(void *arg) {
    long tid = syscall(SYS_gettid);
    *(long *)arg = tid;
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set);
    return (void *)(long)(n == 0 && CPU_COUNT(&set) >= 1 ? 42 : 0);
}

static void *exiter(void *arg) {
    (void)arg;
    _exit(7);
}

/* Retry `op` until it reports `want` waiters handled (the waiters first have to reach the
 * wait; bounded). */
static long until(long (*op)(void), long want) {
    long r = -1;
    for (int i = 0; i < 2000; i++) {
        r = op();
        if (r == want)
            break;
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    return r;
}
/* Waiters moved so far (each try moves those that have reached the wait). */
static long moved = 0;
static long requeue_two(void) {
    long r = fx(&word_a, FUTEX_CMP_REQUEUE_PRIVATE, 0, (void *)(2L - moved), &word_b, 0);
    moved += r > 0 ? r : 0;
    return moved;
}
/* Wake one on word_a; add 1 to word_b (nobody waits there). */
static long wake_op_one(void) { return fx(&word_a, FUTEX_WAKE_OP_PRIVATE, 1, (void *)1L, &word_b, FUTEX_OP(FUTEX_OP_ADD, 1, FUTEX_OP_CMP_GE, 0)); }


/* Signals and threads. */
static volatile long handled_tid = 0, handled = 0;
static volatile int sig_go = 0, sig_ready = 0;
static int sig_word = 0;
static volatile long sig_child_tid = 0;

static void on_usr1(int s) {
    (void)s;
    handled_tid = syscall(SYS_gettid);
    handled++;
}

/* Waits (with a system call in its loop, where signals are taken) until told to stop. */
static void *spinner(void *arg) {
    (void)arg;
    sig_child_tid = syscall(SYS_gettid);
    sig_ready = 1;
    while (!sig_go)
        sched_yield();
    return NULL;
}

/* Blocks SIGUSR1 in itself only, then reports what its mask holds. */
static void *masker(void *arg) {
    (void)arg;
    sigset_t s, cur;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return (void *)(long)sigismember(&cur, SIGUSR1);
}

/* A futex wait with no timeout; returns its result (-errno). */
static void *futex_sleeper(void *arg) {
    (void)arg;
    sig_child_tid = syscall(SYS_gettid);
    sig_ready = 1;
    return (void *)fx(&sig_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

static void wait_ready(void) {
    for (int i = 0; i < 5000 && !sig_ready; i++) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
}

static int signals_main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL); /* no SA_RESTART: an interrupted futex wait is EINTR */

    pthread_t t;
    void *ret;
    sig_ready = 0;
    sig_go = 0;
    pthread_create(&t, NULL, spinner, NULL);
    wait_ready();
    check("tgkill to another thread", syscall(SYS_tgkill, getpid(), sig_child_tid, SIGUSR1) < 0 ? -errno : 0, 0);
    for (int i = 0; i < 5000 && !handled; i++) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    check("the handler ran once", handled, 1);
    check("in the thread it was sent to", handled_tid == sig_child_tid, 1);
    sig_go = 1;
    pthread_join(t, NULL);
    check("tgkill to a tid of no thread", syscall(SYS_tgkill, getpid(), 999999, SIGUSR1) < 0 ? -errno : 0, -ESRCH);
    check("tgkill with another process's tgid", syscall(SYS_tgkill, 999999, syscall(SYS_gettid), SIGUSR1) < 0 ? -errno : 0, -ESRCH);

    pthread_create(&t, NULL, masker, NULL);
    pthread_join(t, &ret);
    check("a thread's mask holds what it blocked", (long)ret, 1);
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    check("the main thread's mask does not", sigismember(&cur, SIGUSR1), 0);

    handled = 0;
    sig_ready = 0;
    sig_word = 0;
    pthread_create(&t, NULL, futex_sleeper, NULL);
    wait_ready();
    /* Give it time to reach the wait; a signal before the wait would be taken on the way back
     * from an earlier call and the wait would sleep: so wake it by the word afterwards. */
    struct timespec d = {0, 20000000};
    nanosleep(&d, NULL);
    syscall(SYS_tgkill, getpid(), sig_child_tid, SIGUSR1);
    for (int i = 0; i < 5000 && !handled; i++) {
        struct timespec e = {0, 1000000};
        nanosleep(&e, NULL);
    }
    sig_word = 1;
    fx(&sig_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(t, &ret);
    check("a futex wait interrupted by a handler", (long)ret, -EINTR);
    check("whose handler ran in the waiter", handled_tid == sig_child_tid, 1);

    printf("threads signals: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures != 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "signals") == 0)
        return signals_main();
    if (argc > 1 && strcmp(argv[1], "groupexit") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, exiter, NULL);
        pthread_join(t, NULL);
        printf("not reached\n");
        return 1;
    }
    check("gettid is the pid in the main thread", syscall(SYS_gettid) == getpid(), 1);

    /* clone's flag checks (no thread is made). */
    char stack[256];
    long r = syscall(SYS_clone, CLONE_VM | CLONE_THREAD, stack + sizeof stack, 0, 0, 0);
    check("clone CLONE_THREAD without CLONE_SIGHAND", r < 0 ? -errno : r, -EINVAL);
    r = syscall(SYS_clone, CLONE_SIGHAND, stack + sizeof stack, 0, 0, 0);
    check("clone CLONE_SIGHAND without CLONE_VM", r < 0 ? -errno : r, -EINVAL);
    r = syscall(SYS_clone, CLONE_FS | CLONE_NEWNS, stack + sizeof stack, 0, 0, 0);
    check("clone CLONE_FS with CLONE_NEWNS", r < 0 ? -errno : r, -EINVAL);

    /* futex errors. */
    int w = 5;
    struct timespec ten_ms = {0, 10 * 1000 * 1000}, bad_ns = {0, 1000000000}, past = {0, 1};
    check("FUTEX_WAIT on a word that differs", fx(&w, FUTEX_WAIT_PRIVATE, 4, NULL, NULL, 0), -EAGAIN);
    check("FUTEX_WAIT 10 ms relative timeout", fx(&w, FUTEX_WAIT_PRIVATE, 5, &ten_ms, NULL, 0), -ETIMEDOUT);
    check("FUTEX_WAIT_BITSET absolute timeout in the past", fx(&w, FUTEX_WAIT_BITSET_PRIVATE, 5, &past, NULL, FUTEX_BITSET_MATCH_ANY), -ETIMEDOUT);
    check("FUTEX_WAIT_BITSET CLOCK_REALTIME in the past", fx(&w, FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME, 5, &past, NULL, FUTEX_BITSET_MATCH_ANY), -ETIMEDOUT);
    check("FUTEX_WAIT tv_nsec out of range", fx(&w, FUTEX_WAIT_PRIVATE, 5, &bad_ns, NULL, 0), -EINVAL);
    check("FUTEX_WAIT misaligned", fx((char *)&w + 1, FUTEX_WAIT_PRIVATE, 5, NULL, NULL, 0), -EINVAL);
    check("FUTEX_WAIT unmapped address", fx((void *)8, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0), -EFAULT);
    check("FUTEX_WAIT unmapped timeout", fx(&w, FUTEX_WAIT_PRIVATE, 5, (void *)8, NULL, 0), -EFAULT);
    check("FUTEX_WAIT_BITSET with bitset 0", fx(&w, FUTEX_WAIT_BITSET_PRIVATE, 5, NULL, NULL, 0), -EINVAL);
    check("FUTEX_WAKE_BITSET with bitset 0", fx(&w, FUTEX_WAKE_BITSET_PRIVATE, 1, NULL, NULL, 0), -EINVAL);
    check("FUTEX_WAKE with no waiter", fx(&w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0), 0);
    check("FUTEX_CMP_REQUEUE on a word that differs", fx(&w, FUTEX_CMP_REQUEUE_PRIVATE, 1, (void *)1L, &word_b, 4), -EAGAIN);
    check("FUTEX_CMP_REQUEUE negative count", fx(&w, FUTEX_CMP_REQUEUE_PRIVATE, 1, (void *)-1L, &word_b, 5), -EINVAL);
    check("futex unknown operation", fx(&w, 99, 0, NULL, NULL, 0), -ENOSYS);

    /* set_robust_list / get_robust_list. */
    check("set_robust_list with a bad size", syscall(SYS_set_robust_list, (void *)0, 1) < 0 ? -errno : 0, -EINVAL);
    void *head = (void *)1;
    size_t len = 0;
    check("get_robust_list of the caller", syscall(SYS_get_robust_list, 0, &head, &len) < 0 ? -errno : 0, 0);
    check("its size", (long)len, 24);
    check("get_robust_list to an unmapped pointer", syscall(SYS_get_robust_list, 0, (void *)8, &len) < 0 ? -errno : 0, -EFAULT);
    check("get_robust_list of no thread", syscall(SYS_get_robust_list, 999999, &head, &len) < 0 ? -errno : 0, -ESRCH);

    /* A thread: its own tid, its affinity, its return value through pthread_join (which
     * waits for the kernel to clear and wake the thread's clear_child_tid word). */
    long tid = 0;
    pthread_t t;
    void *ret = NULL;
    check("pthread_create", pthread_create(&t, NULL, tid_thread, &tid), 0);
    check("pthread_join", pthread_join(t, &ret), 0);
    check("the thread's return value", (long)ret, 42);
    check("the thread's tid differs from the pid", tid != getpid() && tid > 0, 1);

    /* CMP_REQUEUE two waiters from word_a to word_b, then wake them on word_b. */
    pthread_t a1, a2;
    pthread_create(&a1, NULL, waiter_a, NULL);
    pthread_create(&a2, NULL, waiter_a, NULL);
    check("FUTEX_CMP_REQUEUE of two waiters (wake 0, move 2)", until(requeue_two, 2), 2);
    check("FUTEX_WAKE on the other word", fx(&word_b, FUTEX_WAKE_PRIVATE, 10, NULL, NULL, 0), 2);
    void *r1, *r2;
    pthread_join(a1, &r1);
    pthread_join(a2, &r2);
    check("both waiters woken (not timed out)", (long)r1 + (long)r2, 2);

    /* WAKE_OP: one waiter on word_a, woken; the op adds 1 to word_b. */
    word_a = 0;
    word_b = 0;
    pthread_create(&a1, NULL, waiter_a, NULL);
    check("FUTEX_WAKE_OP wakes the waiter on the second word", until(wake_op_one, 1), 1);
    pthread_join(a1, &r1);
    check("the waiter was woken", (long)r1, 1);
    check("the op changed the second word", word_b > 0, 1);

    printf("threads: %s\n", failures == 0 ? "ok" : "FAILED");
    return failures != 0;
}
