/*
 * Signals and their handlers. Checks: a SIGUSR1 handler runs when the program kill()s
 * itself, with the signal number and while SIGUSR1 is blocked inside it; a blocked signal
 * stays pending until unblocked; SIGCHLD's handler runs when a child exits and wait4 then
 * gives the child's code; a child that touches address 0 with no handler is killed by
 * SIGSEGV (the parent goes on); `signals segv` does that to itself (status 139).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t usr1_seen = 0, usr1_blocked_inside = 0, chld_seen = 0;

static void on_usr1(int sig) {
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    usr1_seen = sig;
    usr1_blocked_inside = sigismember(&cur, SIGUSR1);
}

static void on_chld(int sig) {
    (void)sig;
    chld_seen++;
}

static int check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    return cond;
}

static void segv_now(void) {
    volatile int *p = (volatile int *)0;
    *p = 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "segv") == 0) {
        printf("touching address 0 with no handler\n");
        fflush(stdout);
        segv_now();
        printf("still alive: FAILED\n");
        return 1;
    }
    alarm(60);
    int ok = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    kill(getpid(), SIGUSR1);
    ok &= check("SIGUSR1 handler ran on kill", usr1_seen == SIGUSR1);
    ok &= check("SIGUSR1 blocked inside its handler", usr1_blocked_inside == 1);

    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    usr1_seen = 0;
    sigprocmask(SIG_BLOCK, &block, &old);
    kill(getpid(), SIGUSR1);
    sigset_t pend;
    sigpending(&pend);
    ok &= check("blocked SIGUSR1 pending, not delivered", usr1_seen == 0 && sigismember(&pend, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);
    ok &= check("delivered once unblocked", usr1_seen == SIGUSR1);

    sa.sa_handler = on_chld;
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t chld, none;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old);
    pid_t c = fork();
    if (c == 0)
        _exit(5);
    sigemptyset(&none);
    while (!chld_seen)
        sigsuspend(&none);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int st = 0;
    struct rusage ru;
    pid_t w = wait4(c, &st, 0, &ru);
    ok &= check("SIGCHLD handler ran when the child exited", chld_seen == 1);
    ok &= check("wait4 gives the child's exit code 5", w == c && WIFEXITED(st) && WEXITSTATUS(st) == 5);

    c = fork();
    if (c == 0) {
        signal(SIGSEGV, SIG_DFL);
        segv_now();
        _exit(0);
    }
    w = waitpid(c, &st, 0);
    ok &= check("a child's bad access with no handler: killed by SIGSEGV", w == c && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    ok &= check("the parent goes on", 1);
    printf("signals: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
