/*
 * A pipe between two processes. The child writes 1 MiB in uneven chunks (a known pattern)
 * and exits; the parent reads it all and checks every byte and the end of file; then the
 * other way round, a reader that closes early: the writer gets SIGPIPE by default (seen as
 * the child's signal), and EPIPE with SIGPIPE ignored.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOTAL (1 << 20)

static int check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    return cond;
}

static unsigned char pattern(long i) {
    return (unsigned char)(i ^ (i >> 9));
}

int main(void) {
    alarm(60);
    int ok = 1, p[2];
    if (pipe(p) < 0)
        return 1;
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        static unsigned char chunk[7001];
        long sent = 0;
        while (sent < TOTAL) {
            long n = TOTAL - sent < 7001 ? TOTAL - sent : 1 + sent % 7000;
            for (long i = 0; i < n; i++)
                chunk[i] = pattern(sent + i);
            if (write(p[1], chunk, (size_t)n) != n)
                _exit(2);
            sent += n;
        }
        _exit(0);
    }
    close(p[1]);
    static unsigned char buf[65536];
    long got = 0, wrong = 0;
    ssize_t r;
    while ((r = read(p[0], buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < r; i++)
            wrong += buf[i] != pattern(got + i);
        got += r;
    }
    close(p[0]);
    int st;
    waitpid(c, &st, 0);
    printf("bytes through the pipe: %ld of %d\n", got, TOTAL);
    ok &= check("all bytes arrived, then end of file", got == TOTAL && r == 0);
    ok &= check("every byte as written", wrong == 0);
    ok &= check("the writer exited 0", WIFEXITED(st) && WEXITSTATUS(st) == 0);

    if (pipe(p) < 0)
        return 1;
    close(p[0]);
    c = fork();
    if (c == 0) {
        signal(SIGPIPE, SIG_DFL);
        write(p[1], "x", 1);
        _exit(0);
    }
    waitpid(c, &st, 0);
    ok &= check("writing to a pipe with no reader: SIGPIPE", WIFSIGNALED(st) && WTERMSIG(st) == SIGPIPE);
    signal(SIGPIPE, SIG_IGN);
    ok &= check("and EPIPE with SIGPIPE ignored", write(p[1], "x", 1) < 0 && errno == EPIPE);
    close(p[1]);
    printf("pipe2proc: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
