/*
 * /init of the Linux guest of `cargo xtask bench boot` (xtask/src/boot_bench.rs): the
 * counterpart of this system's `hello` (user/apps/src/bin/hello.rs), the one program in each
 * side's initrd. Its first act is to print the same first line as `hello`; the benchmark's
 * endpoint is that line on the serial console. Then it prints its arguments like `hello` and
 * powers the machine off (the benchmark usually stops QEMU at the first line already).
 *
 * Static (glibc), so the initrd needs nothing else: the kernel's built-in initramfs provides
 * /dev/console, which becomes this program's stdin, stdout and stderr.
 */
#include <stdio.h>
#include <string.h>
#include <sys/reboot.h>
#include <unistd.h>

static void put(const char *s, int n)
{
	while (n > 0) {
		ssize_t w = write(1, s, (size_t)n);
		if (w <= 0)
			return;
		s += w;
		n -= (int)w;
	}
}

int main(int argc, char **argv)
{
	char line[256];
	int n = snprintf(line, sizeof line, "hello from user mode: %d argument(s)\n", argc - 1);
	put(line, n);
	for (int i = 1; i < argc; i++) {
		n = snprintf(line, sizeof line, "  arg %d: %s\n", i - 1, argv[i]);
		put(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
	}
	sync();
	reboot(RB_POWER_OFF);
	/* Only reached if the power-off was refused (not PID 1): say so and fail. */
	put("hello: power-off failed\n", 24);
	return 1;
}
