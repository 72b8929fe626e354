/*
 * The Linux guest's /init for `cargo xtask exec --system linux` (xtask/src/exec/linux.rs):
 * runs one program as a Linux user would see it and reports what it did to the host.
 *
 * The initramfs the host builds holds:
 *   /exec/argv    argv, each string NUL-terminated (argv[0] is the program's path, /bin/NAME)
 *   /exec/stdin   the bytes the program reads on standard input, then end of file
 *   /exec/disk    present with --disk: the ext2 image is /dev/vda; it becomes the root, and
 *                 the paths listed in /exec/copy (one a line) are copied into it first; the
 *                 block and ext2 modules are in /lib/modules (loaded in the order of
 *                 /lib/modules/order)
 *   /exec/net     present with --net: the NIC's modules are in /lib/modules too; the first
 *                 interface that is not loopback gets 10.0.2.15/24, route via 10.0.2.2
 *   the program, the request's files, /tmp
 *
 * The program runs in /tmp with standard input, output and error on three pipes (as in a
 * shell pipeline, so it sees no terminal). What it writes on each is copied, byte for byte,
 * to the serial ports ttyS1 (standard output) and ttyS2 (standard error), which QEMU writes
 * to two host files. ttyS3 carries the report, lines of text:
 *   status N          exit code, or 128 + the signal that killed it
 *   file f MODE SIZE CRC32 PATH    each regular file under /tmp (PATH relative to /tmp)
 *   file d MODE PATH               each directory
 *   file l TARGET PATH             each symbolic link
 *   end
 * or `error TEXT` when the guest could not run the program. ttyS0 is the kernel console.
 * Then every process left is killed and the machine powers off.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static int report_fd = -1;

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void report(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = sizeof line - 1;
    write_all(report_fd >= 0 ? report_fd : 2, line, (size_t)n);
}

static void power_off(void) {
    if (report_fd >= 0)
        tcdrain(report_fd);
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}

static void fail(const char *what) {
    report("error %s: %s\n", what, strerror(errno));
    power_off();
}

/* A serial port in raw mode: bytes pass unchanged (no \n -> \r\n, no echo). */
static int open_port(const char *path) {
    int fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct termios t;
    if (tcgetattr(fd, &t) == 0) {
        cfmakeraw(&t);
        cfsetospeed(&t, B115200);
        tcsetattr(fd, TCSANOW, &t);
    }
    return fd;
}

static char *read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return NULL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (buf)
        buf[got] = 0;
    *len = got;
    return buf;
}

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static int file_crc(const char *path, uint32_t *out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    uint32_t c = 0xffffffffu;
    unsigned char buf[8192];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < r; i++)
            c = crc_table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
    close(fd);
    *out = c ^ 0xffffffffu;
    return r < 0 ? -1 : 0;
}

/* The files under `dir` (its path relative to /tmp is `rel`), sorted by name, depth first. */
static void list_tree(const char *dir, const char *rel, int depth) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        report("file ? %s (%s)\n", rel, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) {
            free(names[i]);
            continue;
        }
        char path[4096], sub[4096];
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", nm);
        struct stat st;
        if (lstat(path, &st) < 0) {
            report("file ? %s\n", sub);
        } else if (S_ISREG(st.st_mode)) {
            uint32_t crc = 0;
            if (file_crc(path, &crc) < 0)
                report("file f %o %lld unreadable %s\n", st.st_mode & 07777, (long long)st.st_size, sub);
            else
                report("file f %o %lld %08x %s\n", st.st_mode & 07777, (long long)st.st_size, crc, sub);
        } else if (S_ISDIR(st.st_mode)) {
            report("file d %o %s\n", st.st_mode & 07777, sub);
            if (depth < 32)
                list_tree(path, sub, depth + 1);
        } else if (S_ISLNK(st.st_mode)) {
            char target[4096];
            ssize_t k = readlink(path, target, sizeof target - 1);
            target[k < 0 ? 0 : k] = 0;
            report("file l %s %s\n", target, sub);
        } else {
            report("file o %o %s\n", st.st_mode & 07777, sub);
        }
        free(names[i]);
    }
    free(names);
}

static void mkdirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    }
    mkdir(p, 0755);
}

static int copy_file(const char *from, const char *to) {
    struct stat st;
    if (stat(from, &st) < 0)
        return -1;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", to);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        mkdirs(parent);
    }
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 07777);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[65536];
    ssize_t r;
    while ((r = read(in, buf, sizeof buf)) > 0)
        write_all(out, buf, (size_t)r);
    fchmod(out, st.st_mode & 07777);
    close(in);
    return close(out);
}

static void load_modules(void) {
    size_t len;
    char *order = read_file("/lib/modules/order", &len);
    if (!order)
        return;
    for (char *line = strtok(order, "\n"); line; line = strtok(NULL, "\n")) {
        char path[512];
        snprintf(path, sizeof path, "/lib/modules/%s", line);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST))
            report("error loading module %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    free(order);
}

/* With --disk: the image becomes the root, with the program and the files copied in. */
static void switch_to_disk(void) {
    load_modules();
    mkdir("/newroot", 0755);
    int ok = -1;
    /* The virtio disk may appear a moment after its driver loads. */
    for (int i = 0; i < 200 && ok < 0; i++) {
        ok = mount("/dev/vda", "/newroot", "ext2", 0, NULL);
        if (ok < 0)
            ok = mount("/dev/vda", "/newroot", "ext4", 0, NULL);
        if (ok < 0) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (ok < 0)
        fail("mount /dev/vda (the --disk image) as ext2");
    size_t len;
    char *copy = read_file("/exec/copy", &len);
    for (char *line = copy ? strtok(copy, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char to[4096];
        snprintf(to, sizeof to, "/newroot%s", line);
        if (copy_file(line, to) < 0)
            fail(line);
    }
    free(copy);
    mkdirs("/newroot/tmp");
    chmod("/newroot/tmp", 01777);
    mkdirs("/newroot/dev");
    mkdirs("/newroot/proc");
    mkdirs("/newroot/sys");
    if (mount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL) < 0)
        fail("move /dev into the disk's root");
    if (mount("/proc", "/newroot/proc", NULL, MS_MOVE, NULL) < 0)
        fail("move /proc into the disk's root");
    mount("/sys", "/newroot/sys", NULL, MS_MOVE, NULL);
    if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
        fail("switch to the disk's root");
}

/* With --net (/exec/net): the NIC's modules loaded, the first interface that is not loopback
 * at 10.0.2.15/24 with QEMU's gateway 10.0.2.2 as the default route, loopback up: the address
 * QEMU's user network forwards to, as on this system. */
static void net_ifreq(int s, const char *ifname, unsigned long req, const char *addr, const char *what) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
    if (addr) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
        sin->sin_family = AF_INET;
        inet_pton(AF_INET, addr, &sin->sin_addr);
    } else {
        if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0)
            fail(what);
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    }
    if (ioctl(s, req, &ifr) != 0)
        fail(what);
}

static void net_up(void) {
    load_modules();
    char ifname[IFNAMSIZ] = "";
    /* The driver's probe may finish after finit_module returns (bounded: 10 s). */
    for (int tries = 0; tries < 1000 && !ifname[0]; tries++) {
        struct if_nameindex *ifs = if_nameindex();
        for (struct if_nameindex *i = ifs; i && i->if_index; i++)
            if (strcmp(i->if_name, "lo") != 0) {
                snprintf(ifname, sizeof ifname, "%s", i->if_name);
                break;
            }
        if (ifs)
            if_freenameindex(ifs);
        if (!ifname[0]) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (!ifname[0])
        fail("no network interface appeared after loading the NIC's modules");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        fail("socket for the interface ioctls");
    net_ifreq(s, "lo", SIOCSIFFLAGS, NULL, "bring lo up");
    net_ifreq(s, ifname, SIOCSIFADDR, "10.0.2.15", "SIOCSIFADDR 10.0.2.15");
    net_ifreq(s, ifname, SIOCSIFNETMASK, "255.255.255.0", "SIOCSIFNETMASK 255.255.255.0");
    net_ifreq(s, ifname, SIOCSIFFLAGS, NULL, "bring the interface up");
    struct rtentry rt;
    memset(&rt, 0, sizeof rt);
    struct sockaddr_in *dst = (struct sockaddr_in *)&rt.rt_dst, *gw = (struct sockaddr_in *)&rt.rt_gateway,
                       *mask = (struct sockaddr_in *)&rt.rt_genmask;
    dst->sin_family = gw->sin_family = mask->sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.2.2", &gw->sin_addr);
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    rt.rt_dev = ifname;
    if (ioctl(s, SIOCADDRT, &rt) != 0)
        fail("SIOCADDRT default via 10.0.2.2");
    close(s);
}

static void set_nonblock(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(void) {
    mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    report_fd = open_port("/dev/ttyS3");
    int out_port = open_port("/dev/ttyS1");
    int err_port = open_port("/dev/ttyS2");
    if (report_fd < 0 || out_port < 0 || err_port < 0)
        fail("open the serial ports ttyS1..ttyS3");
    crc_init();

    size_t argv_len = 0, stdin_len = 0;
    char *argv_buf = read_file("/exec/argv", &argv_len);
    char *stdin_buf = read_file("/exec/stdin", &stdin_len);
    if (!argv_buf || argv_len == 0 || !stdin_buf)
        fail("read /exec/argv and /exec/stdin");
    int argc = 0;
    for (size_t i = 0; i < argv_len; i++)
        argc += argv_buf[i] == 0;
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    for (size_t i = 0, k = 0; i < argv_len && (int)k < argc; k++) {
        argv[k] = argv_buf + i;
        i += strlen(argv_buf + i) + 1;
    }
    /* Before the disk: its root has no /lib/modules (switch_to_disk's load finds them loaded). */
    if (access("/exec/net", F_OK) == 0)
        net_up();
    if (access("/exec/disk", F_OK) == 0)
        switch_to_disk();
    chmod("/tmp", 01777);

    int in_p[2], out_p[2], err_p[2];
    if (pipe2(in_p, O_CLOEXEC) < 0 || pipe2(out_p, O_CLOEXEC) < 0 || pipe2(err_p, O_CLOEXEC) < 0)
        fail("pipe2");
    signal(SIGPIPE, SIG_IGN);
    pid_t child = fork();
    if (child < 0)
        fail("fork");
    if (child == 0) {
        dup2(in_p[0], 0);
        dup2(out_p[1], 1);
        dup2(err_p[1], 2);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setsid();
        if (chdir("/tmp") < 0)
            _exit(126);
        char *envp[] = {"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/tmp", "PWD=/tmp", "TERM=dumb", NULL};
        execve(argv[0], argv, envp);
        int e = errno;
        char msg[512];
        int n = snprintf(msg, sizeof msg, "exec-init: cannot execute %s: %s\n", argv[0], strerror(e));
        write_all(2, msg, (size_t)n);
        _exit(e == ENOENT ? 127 : 126);
    }
    close(in_p[0]);
    close(out_p[1]);
    close(err_p[1]);
    set_nonblock(in_p[1]);
    if (stdin_len == 0) {
        close(in_p[1]);
        in_p[1] = -1;
    }

    size_t fed = 0;
    int status = 0, exited = 0, out_open = 1, err_open = 1;
    struct timespec exit_time = {0, 0};
    char buf[65536];
    for (;;) {
        /* Reap everything (init adopts orphans); remember the program's own status. */
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
            if (p == child) {
                exited = 1;
                status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                clock_gettime(CLOCK_MONOTONIC, &exit_time);
            }
        }
        if (exited && !out_open && !err_open)
            break;
        if (exited) {
            /* Background jobs may hold the pipes open: wait for them at most 2 s. */
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - exit_time.tv_sec >= 2)
                break;
        }
        struct pollfd fds[3] = {
            {out_open ? out_p[0] : -1, POLLIN, 0},
            {err_open ? err_p[0] : -1, POLLIN, 0},
            {in_p[1], POLLOUT, 0},
        };
        poll(fds, 3, 50);
        for (int k = 0; k < 2; k++) {
            if (!fds[k].revents || fds[k].fd < 0)
                continue;
            ssize_t r = read(fds[k].fd, buf, sizeof buf);
            if (r > 0) {
                write_all(k == 0 ? out_port : err_port, buf, (size_t)r);
            } else if (r == 0 || errno != EINTR) {
                close(fds[k].fd);
                if (k == 0)
                    out_open = 0;
                else
                    err_open = 0;
            }
        }
        if (in_p[1] >= 0 && fds[2].revents) {
            ssize_t w = write(in_p[1], stdin_buf + fed, stdin_len - fed);
            if (w > 0)
                fed += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || fed == stdin_len) {
                close(in_p[1]);
                in_p[1] = -1;
            }
        }
    }
    /* Nothing the program started outlives it. */
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    tcdrain(out_port);
    tcdrain(err_port);
    report("status %d\n", status);
    list_tree("/tmp", "", 0);
    report("end\n");
    power_off();
    return 0;
}
