/* Thread-local storage through arch_prctl(ARCH_SET_FS): initialised and zeroed __thread
 * variables, their addresses relative to the thread pointer, and ARCH_GET_FS. */
#define ARCH_GET_FS 0x1003
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static __thread int counter = 41;
static __thread char zeroed[100];

int main(void) {
    counter++;
    zeroed[99] = 7;
    unsigned long fs = 0;
    long r = syscall(SYS_arch_prctl, ARCH_GET_FS, &fs);
    unsigned long self;
    __asm__ volatile("mov %%fs:0, %0" : "=r"(self));
    /* x86-64 TLS variant II: the block sits just below the thread pointer, which points
     * at itself. */
    int near = (unsigned long)&counter < fs && fs - (unsigned long)&counter < 4096;
    printf("counter=%d zeroed[0]=%d zeroed[99]=%d\n", counter, zeroed[0], zeroed[99]);
    printf("arch_prctl=%ld self-pointer=%s below-tp=%s\n", r, self == fs ? "yes" : "no", near ? "yes" : "no");
    return !(counter == 42 && r == 0 && self == fs && near);
}
