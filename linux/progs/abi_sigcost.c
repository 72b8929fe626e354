/* A signal's cost: `iters` (argv[1], default 20000) kill(getpid(), SIGUSR1) with an empty
 * handler, each delivered on the way back from kill and returned through rt_sigreturn, inside
 * the measured-region marker (tools/qemu-plugins/marker.h; `cargo xtask plugin insncount`).
 * The Linux guest's half is workload.c's `signal` (the same loop). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <unistd.h>

#define MARK(v) __asm__ volatile("movw $0x501, %%dx\n\tmovb $" #v ", %%al\n\toutb %%al, %%dx\n\t" ::: "rax", "rdx", "memory")

static volatile long handled;

static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 20000;
    ioperm(0x501, 1, 1); /* ENOSYS on this system, which needs none */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    pid_t me = getpid();
    for (int i = 0; i < 100; i++)
        kill(me, SIGUSR1);
    MARK(1);
    for (long i = 0; i < iters; i++)
        kill(me, SIGUSR1);
    MARK(2);
    printf("workload name=signal ops=%ld handled=%ld\n", iters, handled);
    return handled != iters + 100;
}
