/*
 * A fork + execve + wait4 storm: 64 rounds of 4 children at once, each child execve()s this
 * program again (through argv[0], the program's own path) with `child N`, and the re-executed
 * program exits with N % 200 + 1. Checks: every child's status is its own code, wait4 returns
 * each pid once, and no child is left (a last wait4 says ECHILD).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 64
#define WIDTH 4

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return atoi(argv[2]) % 200 + 1;
    alarm(120);
    int bad = 0, done = 0;
    for (int r = 0; r < ROUNDS; r++) {
        pid_t pids[WIDTH];
        int codes[WIDTH];
        for (int k = 0; k < WIDTH; k++) {
            int n = r * WIDTH + k;
            codes[k] = n % 200 + 1;
            pids[k] = fork();
            if (pids[k] < 0) {
                printf("fork failed: %s\n", strerror(errno));
                return 1;
            }
            if (pids[k] == 0) {
                char num[16];
                snprintf(num, sizeof num, "%d", n);
                char *av[] = {argv[0], "child", num, NULL};
                char *ev[] = {"STORM=1", NULL};
                execve(argv[0], av, ev);
                _exit(255);
            }
        }
        for (int k = 0; k < WIDTH; k++) {
            int st;
            struct rusage ru;
            pid_t w = wait4(-1, &st, 0, &ru);
            int j = 0;
            while (j < WIDTH && pids[j] != w)
                j++;
            if (j == WIDTH || !WIFEXITED(st) || WEXITSTATUS(st) != codes[j]) {
                bad++;
                continue;
            }
            pids[j] = 0;
            done++;
        }
    }
    int st;
    int echild = wait4(-1, &st, 0, NULL) < 0 && errno == ECHILD;
    printf("children exec'd and reaped with their own status: %d of %d\n", done, ROUNDS * WIDTH);
    printf("wrong or unknown statuses: %d\n", bad);
    printf("no child left (ECHILD): %s\n", echild ? "ok" : "FAILED");
    int ok = done == ROUNDS * WIDTH && bad == 0 && echild;
    printf("forkstorm: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
