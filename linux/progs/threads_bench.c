/*
 * Costs of the thread primitives, inside the measured-region marker
 * (tools/qemu-plugins/marker.h; `cargo xtask plugin insncount` counts the instructions in
 * it): `threads_bench mutex N` (N uncontended pthread_mutex_lock/unlock pairs: no system
 * call), `threads_bench handoff N` (N hand-offs of a turn between two threads, each a
 * futex wake and wait), `threads_bench create N` (N pthread_create + pthread_join).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")
#define FUTEX_WAIT_PRIVATE 128
#define FUTEX_WAKE_PRIVATE 129

static volatile int turn = 0;
static long rounds;

static void *player(void *arg) {
    int me = (int)(long)arg;
    for (long i = 0; i < rounds; i++) {
        while (turn != me)
            syscall(SYS_futex, &turn, FUTEX_WAIT_PRIVATE, 1 - me, NULL, NULL, 0);
        turn = 1 - me;
        syscall(SYS_futex, &turn, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    return NULL;
}

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "mutex";
    long n = argc > 2 ? atol(argv[2]) : 10000;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    if (!strcmp(what, "mutex")) {
        pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
        for (int i = 0; i < 100; i++) {
            pthread_mutex_lock(&m);
            pthread_mutex_unlock(&m);
        }
        MARK(1);
        for (long i = 0; i < n; i++) {
            pthread_mutex_lock(&m);
            pthread_mutex_unlock(&m);
        }
        MARK(2);
    } else if (!strcmp(what, "handoff")) {
        /* Each player takes the turn n/2 times: n hand-offs in all. */
        rounds = n / 2;
        pthread_t a, b;
        MARK(1);
        pthread_create(&a, NULL, player, (void *)0L);
        pthread_create(&b, NULL, player, (void *)1L);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        MARK(2);
    } else if (!strcmp(what, "create")) {
        pthread_t t;
        MARK(1);
        for (long i = 0; i < n; i++) {
            pthread_create(&t, NULL, nothing, NULL);
            pthread_join(t, NULL);
        }
        MARK(2);
    } else {
        printf("usage: threads_bench mutex|handoff|create N\n");
        return 2;
    }
    printf("workload name=%s ops=%ld\n", what, n);
    return 0;
}
