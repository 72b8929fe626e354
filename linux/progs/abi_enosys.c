/* An unknown system-call number gets -ENOSYS (twice; the runtime reports it once), and so
 * does a real Linux call the personality does not implement. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void) {
    for (int i = 0; i < 2; i++) {
        long r = syscall(999);
        printf("syscall(999) = %ld, errno %s\n", r, errno == ENOSYS ? "ENOSYS" : strerror(errno));
    }
    /* A Linux call the personality does not implement (process accounting; Linux answers
     * with its own result, not printed). */
    syscall(SYS_acct, 0);
    printf("still running\n");
    return 0;
}
