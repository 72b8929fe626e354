/*
 * Threads and futexes call by call, with the errors Linux gives for bad input. Each line is
 * a check: its result as Linux gives it (the conformance case compares the two systems'
 * output line by line). `threads` runs them all and ends with 0; `threads groupexit` ends
 * the program with _exit(7) from a second thread while the main thread waits in
 * pthread_join (status 7).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
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
