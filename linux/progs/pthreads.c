/*
 * Four threads pass a token round-robin with mutexes and condition variables (musl builds
 * them on futex wait/wake): 100 000 hand-offs in all. Each thread waits on its own condition
 * variable for its turn, so a lost wake-up stops the ring (the alarm then kills the program,
 * status 142). Checks: every hand-off happened, in order, each thread took exactly its share,
 * and a shared counter bumped under a second mutex by all four counts every increment.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define THREADS 4
#define HANDOFFS 100000
#define BUMPS 20000

static pthread_mutex_t ring = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv[THREADS];
static int turn = 0;
static long passed = 0;
static long taken[THREADS];
static long out_of_order = 0;

static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter = 0;

static void *run(void *arg) {
    int id = (int)(long)arg;
    for (;;) {
        pthread_mutex_lock(&ring);
        while (turn != id && passed < HANDOFFS)
            pthread_cond_wait(&turn_cv[id], &ring);
        if (passed >= HANDOFFS) {
            pthread_mutex_unlock(&ring);
            break;
        }
        if (passed % THREADS != id)
            out_of_order++;
        passed++;
        taken[id]++;
        turn = (id + 1) % THREADS;
        if (passed >= HANDOFFS)
            for (int k = 0; k < THREADS; k++)
                pthread_cond_signal(&turn_cv[k]);
        else
            pthread_cond_signal(&turn_cv[turn]);
        pthread_mutex_unlock(&ring);
    }
    for (int i = 0; i < BUMPS; i++) {
        pthread_mutex_lock(&count_lock);
        counter++;
        pthread_mutex_unlock(&count_lock);
    }
    return NULL;
}

int main(void) {
    alarm(120);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_cond_init(&turn_cv[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, run, (void *)(long)i) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int ok = 1;
    printf("hand-offs: %ld of %d\n", passed, HANDOFFS);
    ok &= passed == HANDOFFS;
    printf("out of order: %ld\n", out_of_order);
    ok &= out_of_order == 0;
    for (int i = 0; i < THREADS; i++) {
        printf("thread %d took %ld\n", i, taken[i]);
        ok &= taken[i] == HANDOFFS / THREADS;
    }
    printf("counter: %ld of %d\n", counter, THREADS * BUMPS);
    ok &= counter == (long)THREADS * BUMPS;
    printf("pthreads: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
