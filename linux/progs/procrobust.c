/*
 * Processes and threads together, one mode per conformance case; each prints one line per
 * check and `procrobust MODE: ok` at the end (exit 0), or FAILED lines (exit 1). An alarm
 * bounds every mode: a hang ends the program with SIGALRM (status 142).
 *
 *   lockwait  a thread asleep in pause, rt_sigsuspend or wait4 does not stop the other
 *             threads' calls (the main thread makes system calls meanwhile, then wakes it);
 *   futexsig  a process-directed signal (kill to the process) wakes a thread asleep in a
 *             futex wait at once (every round under 500 ms: a wait woken only by a periodic
 *             look of up to a second misses that in half the rounds);
 *   orphan    a process whose parent exits goes on running with init (pid 1) as its parent,
 *             and a zombie whose parent exits without reaping it is reaped;
 *   offsets   a file's offset is shared by parent and child after a fork (writes, reads,
 *             seeks, O_APPEND in turn);
 *   forkthread  fork from a thread other than the main one: the child runs and exits, the
 *             forking thread reaps it;
 *   execthread  execve from a second thread while a third one keeps printing: the other
 *             threads end, the new image runs with the process's pid.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

static void check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    fflush(stdout);
    if (!cond)
        failures++;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

static long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000L + t.tv_nsec / 1000L;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) < 0 && errno == EINTR)
        ;
}

/* Look every millisecond until *flag == want, at most 5 s. */
static int await_flag(volatile int *flag, int want) {
    long end = now_ms() + 5000;
    while (*flag != want) {
        if (now_ms() > end)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

static volatile int handled = 0;
static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

static void set_handler(int sig, void (*h)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigaction(sig, &sa, NULL);
}

static int finish(const char *mode) {
    printf("procrobust %s: %s\n", mode, failures == 0 ? "ok" : "FAILED");
    return failures == 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------------------- */
/* lockwait */

static volatile int t_ready = 0;
static volatile long t_result = 0;
static volatile int t_errno = 0;
static pid_t waited_child = 0;

static void *pauser(void *arg) {
    (void)arg;
    t_ready = 1;
    t_result = pause();
    t_errno = errno;
    return NULL;
}

static void *suspender(void *arg) {
    (void)arg;
    sigset_t none, usr1;
    sigemptyset(&none);
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    /* Blocked outside the suspend: the signal can only come in during it. */
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    t_ready = 1;
    t_result = sigsuspend(&none);
    t_errno = errno;
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    int st = 0;
    t_ready = 1;
    pid_t r = waitpid(waited_child, &st, 0);
    t_result = r == waited_child && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return NULL;
}

/* The main thread's calls while the other thread sleeps: each takes the process lock. */
static int calls_go_on(void) {
    char cwd[64];
    return getcwd(cwd, sizeof cwd) != NULL && getpid() > 0 && getppid() >= 0;
}

static int lockwait_main(void) {
    alarm(20);
    set_handler(SIGUSR1, on_usr1);

    /* pause: the main thread's calls go on, then its tgkill wakes the pauser. */
    pthread_t t;
    t_ready = 0;
    pthread_create(&t, NULL, pauser, NULL);
    await_flag(&t_ready, 1);
    sleep_ms(30);
    check("the main thread's calls go on while another thread is in pause", calls_go_on());
    pthread_kill(t, SIGUSR1);
    pthread_join(t, NULL);
    check("pause returns -1 EINTR after the handler", t_result == -1 && t_errno == EINTR && handled == 1);

    /* rt_sigsuspend: the same, the signal blocked outside the suspend. */
    t_ready = 0;
    pthread_create(&t, NULL, suspender, NULL);
    await_flag(&t_ready, 1);
    sleep_ms(30);
    check("the main thread's calls go on while another thread is in rt_sigsuspend", calls_go_on());
    pthread_kill(t, SIGUSR1);
    pthread_join(t, NULL);
    check("rt_sigsuspend returns -1 EINTR after the handler", t_result == -1 && t_errno == EINTR && handled == 2);

    /* wait4: a child that ends only once the main thread writes to its pipe. */
    int p[2];
    if (pipe(p) < 0)
        return 2;
    pid_t c = fork();
    if (c == 0) {
        char b;
        close(p[1]);
        _exit(read(p[0], &b, 1) == 1 ? 9 : 8);
    }
    close(p[0]);
    waited_child = c;
    t_ready = 0;
    pthread_create(&t, NULL, waiter, NULL);
    await_flag(&t_ready, 1);
    sleep_ms(30);
    check("the main thread's calls go on while another thread is in wait4", calls_go_on());
    check("the main thread writes the child's pipe", write(p[1], "x", 1) == 1);
    pthread_join(t, NULL);
    check("wait4 in the other thread gives the child's status", t_result == 9);
    close(p[1]);
    return finish("lockwait");
}

/* ---------------------------------------------------------------------------------------- */
/* futexsig */

#define ROUNDS 8
static volatile int fx_word = 0;
static volatile int fx_round = 0, fx_done = 0;
static volatile long fx_woke[ROUNDS + 1];
static volatile long fx_ret[ROUNDS + 1];

static volatile int fx_waiting = 0;

static void on_usr1_word(int sig) {
    (void)sig;
    handled++;
    fx_word = 1;
}

static void *futex_sleeper(void *arg) {
    (void)arg;
    for (int r = 1; r <= ROUNDS; r++) {
        await_flag(&fx_round, r);
        /* A signal that comes before the wait starts (a starved vCPU) sets the word, so the
         * wait returns EAGAIN instead of sleeping for good. */
        fx_word = 0;
        fx_waiting = r;
        long x = syscall(SYS_futex, &fx_word, 128 /* FUTEX_WAIT_PRIVATE */, 0, NULL, NULL, 0);
        fx_ret[r] = x < 0 ? -errno : x;
        fx_woke[r] = now_us();
        fx_done = r;
    }
    return NULL;
}

static int futexsig_main(void) {
    alarm(60);
    set_handler(SIGUSR1, on_usr1_word);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_t t;
    pthread_create(&t, NULL, futex_sleeper, NULL);
    /* Only the sleeper can take SIGUSR1. */
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    int fast = 0, eintr = 0;
    for (int r = 1; r <= ROUNDS; r++) {
        fx_round = r;
        await_flag(&fx_waiting, r);
        sleep_ms(40); /* the sleeper is in its futex wait by now (or the word tells it) */
        long t0 = now_us();
        kill(getpid(), SIGUSR1);
        if (!await_flag(&fx_done, r))
            break;
        long us = fx_woke[r] - t0;
        fast += us < 500000;
        eintr += fx_ret[r] == -EINTR || fx_ret[r] == -EAGAIN;
    }
    pthread_join(t, NULL);
    printf("rounds woken within 500 ms of the kill: %d of %d\n", fast, ROUNDS);
    check("every round woken within 500 ms", fast == ROUNDS);
    check("every futex wait ended by the signal (EINTR, or EAGAIN if it came first)", eintr == ROUNDS && handled == ROUNDS);
    return finish("futexsig");
}

/* ---------------------------------------------------------------------------------------- */
/* orphan */

static int orphan_main(void) {
    alarm(20);
    int p[2];
    if (pipe(p) < 0)
        return 2;
    int zp[2];
    if (pipe(zp) < 0)
        return 2;
    pid_t a = fork();
    if (a == 0) {
        close(p[0]);
        close(zp[0]);
        pid_t me = getpid();
        /* A child that ends at once and is never reaped by us. */
        pid_t z = fork();
        if (z == 0)
            _exit(0);
        /* A child that outlives us. */
        pid_t g = fork();
        if (g == 0) {
            long end = now_ms() + 5000;
            while (getppid() == me && now_ms() < end)
                sleep_ms(2);
            char line[128];
            int n = snprintf(line, sizeof line, "grandchild: parent after its parent's exit: %d\n", (int)getppid());
            write(p[1], line, (size_t)n);
            n = snprintf(line, sizeof line, "grandchild: still running\n");
            write(p[1], line, (size_t)n);
            _exit(0);
        }
        /* The zombie's pid for the top process; wait until it is a zombie (WNOWAIT). */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT);
        write(zp[1], &z, sizeof z);
        _exit(3);
    }
    close(p[1]);
    close(zp[1]);
    pid_t z = 0;
    check("the child names its zombie child", read(zp[0], &z, sizeof z) == sizeof z && z > 0);
    int st;
    check("the child exits with 3", waitpid(a, &st, 0) == a && WIFEXITED(st) && WEXITSTATUS(st) == 3);
    char buf[512];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(p[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = 0;
    fputs(buf, stdout);
    check("the grandchild ran on after its parent's exit", strstr(buf, "still running") != NULL);
    /* The orphaned zombie is reaped (by init): its pid no longer names a process. */
    long end = now_ms() + 5000;
    int gone = 0;
    while (now_ms() < end) {
        if (kill(z, 0) < 0 && errno == ESRCH) {
            gone = 1;
            break;
        }
        sleep_ms(5);
    }
    check("the orphaned zombie is reaped", gone);
    return finish("orphan");
}

/* ---------------------------------------------------------------------------------------- */
/* forkthread */

static volatile int ft_status = -1;
static pid_t ft_parent;

static void *forker(void *arg) {
    (void)arg;
    pid_t c = fork();
    if (c == 0) {
        /* The child: one thread, a pid of its own, the forking process as its parent. */
        _exit(getpid() != ft_parent && getppid() == ft_parent ? 5 : 6);
    }
    if (c < 0) {
        ft_status = -2;
        return NULL;
    }
    int st;
    if (waitpid(c, &st, 0) == c && WIFEXITED(st))
        ft_status = WEXITSTATUS(st);
    return NULL;
}

static int forkthread_main(void) {
    alarm(20);
    ft_parent = getpid();
    pthread_t t;
    pthread_create(&t, NULL, forker, NULL);
    pthread_join(t, NULL);
    check("fork from a second thread: the child ran and exited with 5", ft_status == 5);
    /* And once more, with the main thread making calls meanwhile. */
    ft_status = -1;
    pthread_create(&t, NULL, forker, NULL);
    for (int i = 0; i < 20; i++)
        getppid();
    pthread_join(t, NULL);
    check("again, the main thread busy meanwhile", ft_status == 5);
    return finish("forkthread");
}

/* ---------------------------------------------------------------------------------------- */
/* execthread */

static char **saved_argv;
static volatile int spins = 0;

static void *chatter(void *arg) {
    (void)arg;
    for (;;) {
        spins++;
        sleep_ms(1);
    }
    return NULL;
}

static void *execer(void *arg) {
    (void)arg;
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    char *av[] = {saved_argv[0], "execthread-after", pid, NULL};
    char *ev[] = {NULL};
    execve(saved_argv[0], av, ev);
    printf("execve from a thread failed: %s\n", strerror(errno));
    exit(1);
}

static int execthread_main(void) {
    alarm(20);
    pthread_t a, b;
    pthread_create(&a, NULL, chatter, NULL);
    while (spins < 3)
        sleep_ms(1);
    pthread_create(&b, NULL, execer, NULL);
    /* The main thread waits; execve ends it (and the chatter). */
    for (;;)
        pause();
    return 1;
}

static void *plain(void *arg) {
    (void)arg;
    return (void *)7;
}

static int execthread_after(const char *pid) {
    alarm(20);
    check("the new image has the process's pid", getpid() == atoi(pid));
    check("it is the only thread: its tid is the pid", syscall(SYS_gettid) == getpid());
    /* A thread of the old image that survived would still run on in the old memory: give
     * it time, then make sure this image's own calls still work. */
    sleep_ms(50);
    pthread_t t;
    void *r = NULL;
    check("the new image makes threads of its own", pthread_create(&t, NULL, plain, NULL) == 0 && pthread_join(t, &r) == 0 && r == (void *)7);
    return finish("execthread");
}

/* ---------------------------------------------------------------------------------------- */
/* offsets */

static int child_status(pid_t c) {
    int st;
    return waitpid(c, &st, 0) == c && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int offsets_main(void) {
    alarm(20);
    /* A child's write moves the offset the parent writes at next: both lines stay. */
    int fd = open("shared.txt", O_CREAT | O_TRUNC | O_WRONLY, 0644);
    pid_t c = fork();
    if (c == 0)
        _exit(write(fd, "a\n", 2) == 2 ? 0 : 1);
    check("the child wrote its line", child_status(c) == 0);
    check("the parent's offset is after the child's line", lseek(fd, 0, SEEK_CUR) == 2);
    check("the parent writes its line", write(fd, "b\n", 2) == 2);
    close(fd);
    char buf[64] = {0};
    fd = open("shared.txt", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    check("the file holds both lines", n == 4 && memcmp(buf, "a\nb\n", 4) == 0);

    /* A child's lseek and read move the parent's offset; the parent's moves the child's. */
    lseek(fd, 0, SEEK_SET);
    c = fork();
    if (c == 0)
        _exit(lseek(fd, 2, SEEK_SET) == 2 ? 0 : 1);
    check("the child seeks to 2", child_status(c) == 0);
    char b[3] = {0};
    check("the parent reads on from 2", read(fd, b, 2) == 2 && memcmp(b, "b\n", 2) == 0);
    lseek(fd, 1, SEEK_SET);
    c = fork();
    if (c == 0) {
        char x;
        _exit(read(fd, &x, 1) == 1 ? (unsigned char)x : 255);
    }
    check("the child reads at the parent's offset 1", child_status(c) == '\n');
    check("and the parent goes on at 2", lseek(fd, 0, SEEK_CUR) == 2);
    close(fd);

    /* O_APPEND from two processes in turn. */
    fd = open("shared.txt", O_WRONLY | O_APPEND);
    c = fork();
    if (c == 0)
        _exit(write(fd, "c\n", 2) == 2 ? 0 : 1);
    child_status(c);
    write(fd, "d\n", 2);
    close(fd);
    fd = open("shared.txt", O_RDONLY);
    memset(buf, 0, sizeof buf);
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    check("appends from both stay", n == 8 && memcmp(buf, "a\nb\nc\nd\n", 8) == 0);
    return finish("offsets");
}

int main(int argc, char **argv) {
    saved_argv = argv;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "lockwait") == 0)
        return lockwait_main();
    if (argc >= 2 && strcmp(argv[1], "futexsig") == 0)
        return futexsig_main();
    if (argc >= 2 && strcmp(argv[1], "orphan") == 0)
        return orphan_main();
    if (argc >= 2 && strcmp(argv[1], "offsets") == 0)
        return offsets_main();
    if (argc >= 2 && strcmp(argv[1], "forkthread") == 0)
        return forkthread_main();
    if (argc >= 2 && strcmp(argv[1], "execthread") == 0)
        return execthread_main();
    if (argc >= 3 && strcmp(argv[1], "execthread-after") == 0)
        return execthread_after(argv[2]);
    fprintf(stderr, "usage: procrobust lockwait|futexsig|orphan|offsets|forkthread|execthread\n");
    return 2;
}
