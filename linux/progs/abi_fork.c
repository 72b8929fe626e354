/* fork + _exit + wait4's cost: `iters` rounds (argv[1], default 200) inside the
 * measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask plugin insncount`
 * counts the instructions in it, the child's included at 1 vCPU). On Linux the marker's port
 * needs ioperm (root); this system's kernel lets user mode write it.
 *
 * `abi_fork N threads`: the same from a process with a second thread, which reads a word the
 * main thread writes after each fork. The second thread read the word's page before the
 * fork, so it holds an entry for it; after the main thread's write (the parent's
 * copy-on-write break) it must read the new value, and after the child's write to its own
 * copy still the parent's. A stale entry for the old page, which the child then owns, would
 * show the old value, then the child's. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

/* The word the threads share, on a page of its own; the hand-off words on another. */
static volatile long word __attribute__((aligned(4096)));
static char pad[4096] __attribute__((used));
static long req __attribute__((aligned(4096)));
static long ack, seen, stop;

/* The second thread: for each request, read the word and answer with what it read. */
static void *reader(void *arg) {
    (void)arg;
    long done = 0;
    for (;;) {
        long r;
        while ((r = __atomic_load_n(&req, __ATOMIC_ACQUIRE)) == done) {
            if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
                return NULL;
            sched_yield();
        }
        __atomic_store_n(&seen, word, __ATOMIC_RELAXED);
        __atomic_store_n(&ack, r, __ATOMIC_RELEASE);
        done = r;
    }
}

/* What the second thread reads now. A thread that never answers (it reads a stale copy of
 * the request) ends the program at once (status 3), not at a timeout. */
static long read_there(void) {
    long r = __atomic_load_n(&req, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&req, r, __ATOMIC_RELEASE);
    for (long spins = 0; __atomic_load_n(&ack, __ATOMIC_ACQUIRE) != r; spins++) {
        if (spins == 1000000) {
            printf("the second thread never answered request %ld\n", r);
            fflush(stdout);
            _exit(3);
        }
        sched_yield();
    }
    return __atomic_load_n(&seen, __ATOMIC_RELAXED);
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200;
    int threads = argc > 2 && strcmp(argv[2], "threads") == 0;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    long bad = 0, stale = 0;
    pthread_t t;
    if (threads && pthread_create(&t, NULL, reader, NULL) != 0)
        return 2;
    MARK(1);
    for (long i = 0; i < iters; i++) {
        if (threads) {
            word = 2 * i;
            stale += read_there() != 2 * i;
        }
        pid_t c = fork();
        if (c == 0) {
            if (threads)
                word = -1;
            _exit(7);
        }
        if (threads) {
            word = 2 * i + 1;
            stale += read_there() != 2 * i + 1;
        }
        int st;
        bad += wait4(c, &st, 0, NULL) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 7;
        if (threads)
            stale += read_there() != 2 * i + 1;
    }
    MARK(2);
    if (threads) {
        __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
        pthread_join(t, NULL);
        printf("reads of the parent's word through the second thread: %ld stale\n", stale);
    }
    printf("workload name=fork_exit_wait ops=%ld\n", iters);
    return bad != 0 || stale != 0;
}
