/*
 * Four threads take signals at the same time, each from its own call site to its own handler:
 * thread i sends itself signal SIGS[i] with tgkill from site_i (a function of its own, so the
 * address the call returns to differs per thread), the handler handler_i (one per thread)
 * runs, and its rt_sigreturn resumes the thread just after site_i's syscall. Between signals
 * each thread makes a plain system call (getppid). So each round trip resumes a thread twice
 * at an address no other thread uses, while the other threads do the same on other vCPUs.
 *
 * Checks: a handler or a call site that runs in a thread other than its own (a resume that
 * jumped to another thread's address: the check compares the site's number with the
 * thread's own, kept in thread-local storage) counts as a mix-up; every thread saw every one
 * of its signals; the plain calls gave the right answer. Prints the counts and `sigthreads:
 * ok` when all hold. `sigthreads N`: N rounds per thread (20 000 by default: enough that
 * a race on one word shared by every thread's resume showed 4 to 6 times a run at 4 vCPUs).
 *
 * `sigthreads badrsp`: a handler sets the stack pointer it returns to to 8 (no stack there);
 * the program ends killed by SIGSEGV (status 139) on both systems.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <sys/syscall.h>
#include <unistd.h>

#define THREADS 4
/* Rounds per thread; `sigthreads N` runs N. */
static int rounds = 20000;

static const int SIGS[THREADS] = {SIGUSR1, SIGUSR2, SIGWINCH, SIGURG};

static __thread int my_id = -1;
static __thread long my_hits;
static long hits[THREADS];
static long mixups;
static long bad_calls;
static pid_t pid, ppid;

static void mixup(void) {
    __atomic_fetch_add(&mixups, 1, __ATOMIC_RELAXED);
}

/* One handler per thread: it must run in the thread whose signal it is. */
#define HANDLER(i)                                                                             \
    static void handler_##i(int sig) {                                                         \
        if (my_id != i || sig != SIGS[i])                                                      \
            mixup();                                                                           \
        else                                                                                   \
            my_hits++;                                                                         \
    }
HANDLER(0)
HANDLER(1)
HANDLER(2)
HANDLER(3)
static void (*const HANDLERS[THREADS])(int) = {handler_0, handler_1, handler_2, handler_3};

/* One call site per thread: tgkill(pid, tid, SIGS[i]) as a raw syscall, so the rip the
 * signal return goes back to is this function's; the code after the syscall must run in
 * thread i. */
#define SITE(i)                                                                                \
    static __attribute__((noinline)) long site_##i(long tid) {                                 \
        long r;                                                                                \
        __asm__ volatile("syscall"                                                            \
                         : "=a"(r)                                                             \
                         : "a"((long)SYS_tgkill), "D"((long)pid), "S"(tid), "d"((long)SIGS[i]) \
                         : "rcx", "r11", "memory");                                            \
        if (my_id != i)                                                                        \
            mixup();                                                                           \
        return r;                                                                              \
    }
SITE(0)
SITE(1)
SITE(2)
SITE(3)
static long (*const SITES[THREADS])(long) = {site_0, site_1, site_2, site_3};

static void *run(void *arg) {
    int id = (int)(long)arg;
    my_id = id;
    long tid = syscall(SYS_gettid);
    for (int r = 0; r < rounds; r++) {
        if (SITES[id](tid) != 0)
            __atomic_fetch_add(&bad_calls, 1, __ATOMIC_RELAXED);
        if (getppid() != ppid)
            __atomic_fetch_add(&bad_calls, 1, __ATOMIC_RELAXED);
    }
    hits[id] = my_hits;
    return NULL;
}

static void bad_rsp(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    ((ucontext_t *)ctx)->uc_mcontext.gregs[REG_RSP] = 8;
}

int main(int argc, char **argv) {
    alarm(100);
    if (argc > 1 && strcmp(argv[1], "badrsp") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = bad_rsp;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGUSR1, &sa, NULL);
        printf("returning to rsp 8\n");
        fflush(stdout);
        raise(SIGUSR1);
        printf("still running\n");
        return 0;
    }
    if (argc > 1 && (rounds = atoi(argv[1])) <= 0) {
        printf("usage: sigthreads [ROUNDS > 0]\n");
        return 2;
    }
    pid = getpid();
    ppid = getppid();
    /* Thread i's handler is in place before thread i starts. */
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = HANDLERS[i];
        const char *failed = sigaction(SIGS[i], &sa, NULL) != 0                          ? "sigaction"
                             : pthread_create(&t[i], NULL, run, (void *)(long)i) != 0 ? "pthread_create"
                                                                                        : NULL;
        if (failed) {
            printf("%s failed for thread %d\n", failed, i);
            return 1;
        }
    }
    int joined = 0;
    for (int i = 0; i < THREADS; i++)
        joined += pthread_join(t[i], NULL) == 0;
    int ok = joined == THREADS && mixups == 0 && bad_calls == 0;
    for (int i = 0; i < THREADS; i++) {
        printf("thread %d handled %ld of %d\n", i, hits[i], rounds);
        ok &= hits[i] == rounds;
    }
    printf("mix-ups: %ld\n", mixups);
    printf("wrong results: %ld\n", bad_calls);
    printf("sigthreads: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
