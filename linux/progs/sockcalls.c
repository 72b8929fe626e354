/*
 * AF_UNIX stream sockets and the waits that take a signal mask, call by call, printing
 * every result (the conformance suite compares the output with the Linux guest's):
 *
 *   pair     socketpair: both directions, poll and epoll readiness, fstat, names and
 *            options, shutdown (end of file one way, EPIPE the other), the peer's close
 *            (POLLHUP, EPIPE with and without SIGPIPE), non-blocking EAGAIN both ways;
 *   fork     a socketpair across fork: the child answers a request, its exit is end of file;
 *   named    bind/listen/accept/connect on an abstract name, between two processes and
 *            inside one, getsockname/getpeername, a listener's readiness;
 *   errors   Linux's errors for bad input (EADDRINUSE, EINVAL, ECONNREFUSED, ENOENT,
 *            EISCONN, ENOTCONN, EOPNOTSUPP, ENOPROTOOPT, ESOCKTNOSUPPORT, EPROTONOSUPPORT,
 *            EFAULT for every pointer);
 *   masks    ppoll, pselect6 and epoll_pwait with a signal mask: a blocked pending signal
 *            the mask lets through ends the wait (EINTR, handler run, the old mask back); a
 *            signal the mask blocks does not, and is delivered after the call;
 *   tcp      Linux's errors for bad input to TCP sockets that need no packet (a port in use,
 *            accept before listen, send and recv unconnected, SO_ERROR, unknown levels and
 *            options, EFAULT for the pointers Linux checks first, epoll_ctl on a closed one).
 *
 * With no argument, every part in turn; the last line is "sockcalls: ok" when every check
 * held.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int failed;
/* 0, from main: keeps the compiler from seeing a constant bad pointer. */
static int argc_zero;

static void check(const char *what, int cond) {
    printf("%s: %s\n", what, cond ? "ok" : "FAILED");
    if (!cond)
        failed = 1;
}

/* "name: result" with the errno's name for a failure. */
static const char *ename(int e) {
    switch (e) {
    case EADDRINUSE: return "EADDRINUSE";
    case EINVAL: return "EINVAL";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ENOENT: return "ENOENT";
    case EISCONN: return "EISCONN";
    case ENOTCONN: return "ENOTCONN";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EFAULT: return "EFAULT";
    case EAGAIN: return "EAGAIN";
    case EPIPE: return "EPIPE";
    case EBADF: return "EBADF";
    case ENOTSOCK: return "ENOTSOCK";
    case EINTR: return "EINTR";
    case EEXIST: return "EEXIST";
    default: return "other";
    }
}

static void res(const char *what, long r) {
    if (r < 0)
        printf("%s: -1 %s\n", what, ename(errno));
    else
        printf("%s: %ld\n", what, r);
}

static const char *revents(int m) {
    /* Rotating buffers: two results may be printed by one printf. */
    static char bufs[4][64];
    static int next;
    char *b = bufs[next++ % 4];
    b[0] = 0;
    if (m & POLLIN) strcat(b, "IN ");
    if (m & POLLOUT) strcat(b, "OUT ");
    if (m & POLLHUP) strcat(b, "HUP ");
    if (m & POLLRDHUP) strcat(b, "RDHUP ");
    if (m & POLLERR) strcat(b, "ERR ");
    if (m & POLLNVAL) strcat(b, "NVAL ");
    if (!b[0]) strcat(b, "none ");
    b[strlen(b) - 1] = 0;
    return b;
}

static const char *polled(int fd) {
    struct pollfd p = { fd, POLLIN | POLLOUT | POLLRDHUP, 0 };
    poll(&p, 1, 0);
    return revents(p.revents);
}

static int sigs;
static void on_sig(int s) {
    (void)s;
    sigs++;
}

/* A name's bytes as text: an abstract name's leading 0 as '@'. */
static void print_name(const char *what, struct sockaddr_un *a, socklen_t len) {
    printf("%s: len %u", what, (unsigned)len);
    if (len > offsetof(struct sockaddr_un, sun_path)) {
        printf(" name ");
        for (socklen_t i = offsetof(struct sockaddr_un, sun_path); i < len && i < sizeof *a; i++) {
            char c = ((char *)a)[i];
            putchar(c == 0 ? '@' : c);
        }
    }
    printf("\n");
}

static socklen_t abstract(struct sockaddr_un *a, const char *name) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    memcpy(a->sun_path + 1, name, strlen(name));
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
}

static void part_pair(void) {
    int sv[2];
    check("socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    printf("fresh pair polls: %s / %s\n", polled(sv[0]), polled(sv[1]));
    check("write 4 bytes", write(sv[0], "ping", 4) == 4);
    printf("after a write: %s\n", polled(sv[1]));
    char b[64] = {0};
    check("read them on the other end", read(sv[1], b, sizeof b) == 4 && memcmp(b, "ping", 4) == 0);
    check("and back", send(sv[1], "pong!", 5, 0) == 5 && recv(sv[0], b, sizeof b, 0) == 5 && memcmp(b, "pong!", 5) == 0);
    struct stat st;
    check("fstat: a socket", fstat(sv[0], &st) == 0 && S_ISSOCK(st.st_mode));
    struct sockaddr_un a;
    socklen_t len = sizeof a;
    res("getsockname of a pair end", getsockname(sv[0], (struct sockaddr *)&a, &len));
    print_name("its name", &a, len);
    len = sizeof a;
    res("getpeername of a pair end", getpeername(sv[0], (struct sockaddr *)&a, &len));
    print_name("its peer", &a, len);
    int v = -1;
    socklen_t vl = sizeof v;
    res("SO_TYPE", getsockopt(sv[0], SOL_SOCKET, SO_TYPE, &v, &vl));
    printf("SO_TYPE is %d (%u bytes)\n", v, (unsigned)vl);
    v = -1;
    res("SO_DOMAIN", getsockopt(sv[0], SOL_SOCKET, SO_DOMAIN, &v, &vl));
    printf("SO_DOMAIN is %d\n", v);
    v = -1;
    res("SO_ERROR", getsockopt(sv[0], SOL_SOCKET, SO_ERROR, &v, &vl));
    printf("SO_ERROR is %d\n", v);
    v = 1;
    res("SO_REUSEADDR set", setsockopt(sv[0], SOL_SOCKET, SO_REUSEADDR, &v, sizeof v));
    res("TCP_NODELAY (level 6) on a local socket", setsockopt(sv[0], 6, 1, &v, sizeof v));
    res("getsockopt level 6 on a local socket", getsockopt(sv[0], 6, 1, &v, &vl));
    res("unknown SOL_SOCKET option", setsockopt(sv[0], SOL_SOCKET, 9999, &v, sizeof v));
    res("SO_REUSEADDR with 2 bytes", setsockopt(sv[0], SOL_SOCKET, SO_REUSEADDR, &v, 2));

    /* epoll sees a write to the other end. */
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 7 }, out[2];
    check("epoll_ctl ADD a pair end", epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &ev) == 0);
    res("epoll_wait, nothing written", epoll_wait(ep, out, 2, 0));
    write(sv[0], "x", 1);
    long n = epoll_wait(ep, out, 2, 1000);
    res("epoll_wait after a write", n);
    check("the event is EPOLLIN on data 7", n == 1 && out[0].events == EPOLLIN && out[0].data.u32 == 7);
    read(sv[1], b, sizeof b);
    close(ep);

    /* shutdown: one direction ends, the other goes on. */
    res("shutdown(SHUT_WR)", shutdown(sv[0], SHUT_WR));
    printf("after SHUT_WR: writer %s, reader %s\n", polled(sv[0]), polled(sv[1]));
    res("read at the reader: end of file", read(sv[1], b, sizeof b));
    res("send on the shut side, MSG_NOSIGNAL", send(sv[0], "y", 1, MSG_NOSIGNAL));
    check("the other way still works", write(sv[1], "z", 1) == 1 && read(sv[0], b, 1) == 1 && b[0] == 'z');
    res("shutdown(3)", shutdown(sv[0], 3));

    /* The peer's close: hang-up, end of file, EPIPE and SIGPIPE. */
    close(sv[1]);
    printf("after the peer's close: %s\n", polled(sv[0]));
    res("read after the peer's close", read(sv[0], b, sizeof b));
    signal(SIGPIPE, on_sig);
    sigs = 0;
    res("write after the peer's close", write(sv[0], "w", 1));
    printf("SIGPIPEs: %d\n", sigs);
    sigs = 0;
    res("send MSG_NOSIGNAL after the peer's close", send(sv[0], "w", 1, MSG_NOSIGNAL));
    printf("SIGPIPEs: %d\n", sigs);
    signal(SIGPIPE, SIG_DFL);
    close(sv[0]);

    /* Non-blocking: EAGAIN both ways; a full direction is not writable. */
    check("socketpair SOCK_NONBLOCK", socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    res("read, nothing there", read(sv[0], b, sizeof b));
    res("recv MSG_DONTWAIT, nothing there", recv(sv[1], b, sizeof b, MSG_DONTWAIT));
    static char big[4096];
    long total = 0, r;
    int rounds = 0;
    while ((r = write(sv[0], big, sizeof big)) > 0 && rounds++ < 4096)
        total += r;
    res("the write that found no room", r);
    check("some bytes went first", total > 0);
    printf("full side: %s\n", polled(sv[0]));
    long got = 0;
    while ((r = read(sv[1], big, sizeof big)) > 0)
        got += r;
    check("the reader gets every byte", got == total);
    close(sv[0]);
    close(sv[1]);
}

static void part_fork(void) {
    int sv[2];
    check("socketpair for fork", socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    pid_t c = fork();
    if (c == 0) {
        close(sv[0]);
        char b[64];
        long n = read(sv[1], b, sizeof b);
        for (long i = 0; i < n; i++)
            if (b[i] >= 'a' && b[i] <= 'z')
                b[i] -= 32;
        _exit(write(sv[1], b, (size_t)n) == n ? 0 : 3);
    }
    close(sv[1]);
    char b[64] = {0};
    check("request to the child", write(sv[0], "shout this", 10) == 10);
    long n = read(sv[0], b, sizeof b);
    printf("the child's answer: %.*s\n", (int)(n > 0 ? n : 0), b);
    res("then end of file (the child exited)", read(sv[0], b, sizeof b));
    int st;
    waitpid(c, &st, 0);
    check("the child exited 0", WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(sv[0]);
}

static void part_named(void) {
    struct sockaddr_un a, got;
    socklen_t alen = abstract(&a, "unixsock-test"), len;
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    check("socket(AF_UNIX)", l >= 0);
    printf("a fresh socket polls: %s\n", polled(l));
    res("bind to an abstract name", bind(l, (struct sockaddr *)&a, alen));
    len = sizeof got;
    res("getsockname", getsockname(l, (struct sockaddr *)&got, &len));
    print_name("bound", &got, len);
    res("accept before listen", accept(l, NULL, NULL));
    res("listen", listen(l, 4));
    printf("a listener with nothing queued: %s\n", polled(l));

    pid_t c = fork();
    if (c == 0) {
        close(l);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, alen) != 0)
            _exit(2);
        struct sockaddr_un p;
        socklen_t pl = sizeof p;
        if (getpeername(s, (struct sockaddr *)&p, &pl) != 0 || pl != alen || memcmp(p.sun_path, a.sun_path, alen - 2) != 0)
            _exit(3);
        pl = sizeof p;
        if (getsockname(s, (struct sockaddr *)&p, &pl) != 0 || pl != 2)
            _exit(4);
        if (write(s, "hello from the child", 20) != 20)
            _exit(5);
        char b[8];
        if (read(s, b, sizeof b) != 2 || memcmp(b, "ok", 2) != 0)
            _exit(6);
        _exit(0);
    }
    struct sockaddr_un peer;
    socklen_t pl = sizeof peer;
    int s = accept(l, (struct sockaddr *)&peer, &pl);
    check("accept a connection from the child", s >= 0);
    print_name("its peer (from accept)", &peer, pl);
    len = sizeof got;
    res("getsockname of the accepted socket", getsockname(s, (struct sockaddr *)&got, &len));
    print_name("accepted", &got, len);
    char b[64] = {0};
    long n = 0, r;
    while (n < 20 && (r = read(s, b + n, sizeof b - 1 - (size_t)n)) > 0)
        n += r;
    printf("from the child: %s\n", b);
    check("answer", write(s, "ok", 2) == 2);
    int st;
    waitpid(c, &st, 0);
    printf("the child's status: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
    res("read after the child exited", read(s, b, sizeof b));
    close(s);

    /* Inside one process: the connection waits in the queue until accept. */
    int c2 = socket(AF_UNIX, SOCK_STREAM, 0);
    res("connect inside the process", connect(c2, (struct sockaddr *)&a, alen));
    printf("the listener with one queued: %s\n", polled(l));
    res("connect again on a connected socket", connect(c2, (struct sockaddr *)&a, alen));
    int s2 = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    check("accept4 it", s2 >= 0);
    res("the accepted socket is non-blocking", fcntl(s2, F_GETFL) & O_NONBLOCK ? 1 : 0);
    check("bytes both ways", write(c2, "abc", 3) == 3 && read(s2, b, sizeof b) == 3 && write(s2, "d", 1) == 1 && read(c2, b, 1) == 1 && b[0] == 'd');
    res("listen on a connected socket", listen(c2, 1));
    res("accept on a connected socket", accept(c2, NULL, NULL));
    close(c2);
    printf("after the connector's close: %s\n", polled(s2));
    close(s2);

    int fl = fcntl(l, F_GETFL);
    fcntl(l, F_SETFL, fl | O_NONBLOCK);
    res("accept with nothing queued, non-blocking", accept(l, NULL, NULL));
    close(l);
    int c3 = socket(AF_UNIX, SOCK_STREAM, 0);
    res("connect after the listener closed", connect(c3, (struct sockaddr *)&a, alen));
    close(c3);
}

static void part_errors(void) {
    struct sockaddr_un a;
    socklen_t alen = abstract(&a, "unixsock-errors");
    int s1 = socket(AF_UNIX, SOCK_STREAM, 0), s2 = socket(AF_UNIX, SOCK_STREAM, 0);
    res("bind", bind(s1, (struct sockaddr *)&a, alen));
    res("bind the same name again", bind(s2, (struct sockaddr *)&a, alen));
    struct sockaddr_un b2;
    socklen_t b2len = abstract(&b2, "unixsock-other");
    res("bind a bound socket again", bind(s1, (struct sockaddr *)&b2, b2len));
    res("listen on an unbound socket", listen(s2, 1));
    res("accept on a bound socket that does not listen", accept(s1, NULL, NULL));
    res("connect to a bound socket that does not listen", connect(s2, (struct sockaddr *)&a, alen));
    res("connect to a name nobody has", connect(s2, (struct sockaddr *)&b2, b2len));
    struct sockaddr_un p = { .sun_family = AF_UNIX };
    strcpy(p.sun_path, "/tmp/no-such.sock");
    res("connect to a path that does not exist", connect(s2, (struct sockaddr *)&p, sizeof p));
    struct sockaddr_un bad = a;
    bad.sun_family = AF_INET;
    res("bind with family AF_INET", bind(s2, (struct sockaddr *)&bad, alen));
    res("bind with address length 1", bind(s2, (struct sockaddr *)&a, 1));
    res("bind with address length 200", bind(s2, (struct sockaddr *)&a, 200));
    res("bind with a NULL address", bind(s2, NULL, alen));
    res("bind with an unmapped address", bind(s2, (struct sockaddr *)8, alen));
    res("connect with an unmapped address", connect(s2, (struct sockaddr *)8, alen));
    res("send on a socket that is not connected", send(s2, "x", 1, MSG_NOSIGNAL));
    char b[8];
    res("read on a socket that is not connected", read(s2, b, sizeof b));
    struct sockaddr_un g;
    socklen_t gl = sizeof g;
    res("getpeername on a socket that is not connected", getpeername(s2, (struct sockaddr *)&g, &gl));
    res("getsockname with an unmapped address", getsockname(s1, (struct sockaddr *)8, &gl));
    res("getsockname with an unmapped length", getsockname(s1, (struct sockaddr *)&g, (socklen_t *)8));
    res("listen", listen(s1, 2));
    /* A connection queued first: Linux looks at the pointers only after taking one. */
    int q1 = socket(AF_UNIX, SOCK_STREAM, 0), q2 = socket(AF_UNIX, SOCK_STREAM, 0);
    connect(q1, (struct sockaddr *)&a, alen);
    connect(q2, (struct sockaddr *)&a, alen);
    gl = sizeof g;
    res("accept with an unmapped address", accept(s1, (struct sockaddr *)8, &gl));
    res("accept with an unmapped length", accept(s1, (struct sockaddr *)&g, (socklen_t *)8));
    close(q1);
    close(q2);
    /* Non-blocking from here: a call that should fail must not wait instead. */
    fcntl(s1, F_SETFL, O_NONBLOCK);
    int v;
    socklen_t vl = sizeof v;
    res("getsockopt with an unmapped value", getsockopt(s1, SOL_SOCKET, SO_TYPE, (void *)8, &vl));
    res("getsockopt with an unmapped length", getsockopt(s1, SOL_SOCKET, SO_TYPE, &v, (socklen_t *)8));
    res("setsockopt with an unmapped value", setsockopt(s1, SOL_SOCKET, SO_REUSEADDR, (void *)8, 4));
    res("socketpair with an unmapped vector", socketpair(AF_UNIX, SOCK_STREAM, 0, (int *)(long)(argc_zero + 8)));
    int sv[2];
    res("socketpair(AF_INET)", socketpair(AF_INET, SOCK_STREAM, 0, sv));
    res("socket(AF_UNIX, SOCK_STREAM, 99)", socket(AF_UNIX, SOCK_STREAM, 99));
    res("socket(AF_UNIX, SOCK_RDM)", socket(AF_UNIX, SOCK_RDM, 0));
    res("socket(AF_UNIX, type 12)", socket(AF_UNIX, 12, 0));
    res("shutdown(SHUT_RDWR) of a socket that is not connected", shutdown(s2, SHUT_RDWR));
    close(s1);
    close(s2);
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN };
    res("epoll_ctl on a closed local socket", epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev));
    close(ep);
    /* The name went with its socket: it can be bound again. */
    int s3 = socket(AF_UNIX, SOCK_STREAM, 0);
    res("bind the abstract name after its socket closed", bind(s3, (struct sockaddr *)&a, alen));
    close(s3);
}

/* A wait that takes a mask, run with SIGUSR1 blocked and pending: `through` lets SIGUSR1
 * through (the wait ends, EINTR, handler run); otherwise it stays blocked (the wait times
 * out). Prints the result, the handler count and whether SIGUSR1 is blocked afterwards. */
static void masked(const char *name, int which, int through) {
    int sv[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    sigset_t block, during, now;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, NULL);
    sigs = 0;
    raise(SIGUSR1);
    if (through)
        sigemptyset(&during);
    else
        during = block;
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    long r = -1;
    if (which == 0) {
        struct pollfd p = { sv[0], POLLIN, 0 };
        r = ppoll(&p, 1, &ts, &during);
    } else if (which == 1) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(sv[0], &rd);
        r = pselect(sv[0] + 1, &rd, NULL, NULL, &ts, &during);
    } else {
        int ep = epoll_create1(0);
        struct epoll_event ev = { .events = EPOLLIN }, out;
        epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
        r = epoll_pwait(ep, &out, 1, 100, &during);
        int e = errno;
        close(ep);
        errno = e;
    }
    int e = errno;
    int after_call = sigs;
    sigprocmask(SIG_BLOCK, NULL, &now);
    int still_blocked = sigismember(&now, SIGUSR1);
    errno = e;
    char what[96];
    snprintf(what, sizeof what, "%s, SIGUSR1 %s", name, through ? "let through" : "kept blocked");
    res(what, r);
    printf("  handler runs: %d; SIGUSR1 blocked after: %d\n", after_call, still_blocked);
    sigprocmask(SIG_UNBLOCK, &block, NULL);
    printf("  handler runs once unblocked: %d\n", sigs);
    close(sv[0]);
    close(sv[1]);
}

static void part_masks(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIGUSR1, &sa, NULL);
    const char *names[] = { "ppoll", "pselect6", "epoll_pwait" };
    for (int w = 0; w < 3; w++) {
        masked(names[w], w, 1);
        masked(names[w], w, 0);
    }
    /* Bad masks, by the raw calls. */
    struct pollfd p = { 0, 0, 0 };
    struct timespec ts = { 0, 0 };
    sigset_t m;
    sigemptyset(&m);
    errno = 0;
    res("ppoll with sigsetsize 4", syscall(SYS_ppoll, &p, 1, &ts, &m, 4));
    res("ppoll with an unmapped mask", syscall(SYS_ppoll, &p, 1, &ts, (void *)8, 8));
    int ep = epoll_create1(0);
    struct epoll_event out;
    res("epoll_pwait with sigsetsize 16", syscall(SYS_epoll_pwait, ep, &out, 1, 0, &m, 16));
    res("epoll_pwait with an unmapped mask", syscall(SYS_epoll_pwait, ep, &out, 1, 0, (void *)8, 8));
    close(ep);
    struct { const sigset_t *ss; size_t len; } six = { &m, 4 };
    res("pselect6 with sigsetsize 4", syscall(SYS_pselect6, 0, NULL, NULL, NULL, &ts, &six));
    res("pselect6 with an unmapped mask pair", syscall(SYS_pselect6, 0, NULL, NULL, NULL, &ts, (void *)8));
}

static void part_tcp(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0), s2 = socket(AF_INET, SOCK_STREAM, 0);
    check("two TCP sockets", s >= 0 && s2 >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(7777) };
    res("bind port 7777", bind(s, (struct sockaddr *)&a, sizeof a));
    res("bind port 7777 again", bind(s2, (struct sockaddr *)&a, sizeof a));
    res("accept before listen", accept(s, NULL, NULL));
    res("send unconnected, MSG_NOSIGNAL", send(s2, "x", 1, MSG_NOSIGNAL));
    signal(SIGPIPE, on_sig);
    sigs = 0;
    res("write unconnected", write(s2, "x", 1));
    printf("SIGPIPEs: %d\n", sigs);
    signal(SIGPIPE, SIG_DFL);
    char b[8];
    res("recv unconnected", recv(s2, b, sizeof b, MSG_DONTWAIT));
    int v = -1;
    socklen_t vl = sizeof v;
    res("SO_ERROR of a fresh socket", getsockopt(s2, SOL_SOCKET, SO_ERROR, &v, &vl));
    printf("SO_ERROR is %d\n", v);
    res("SO_TYPE", getsockopt(s2, SOL_SOCKET, SO_TYPE, &v, &vl));
    printf("SO_TYPE is %d\n", v);
    v = 1;
    res("setsockopt level 999", setsockopt(s, 999, 1, &v, sizeof v));
    res("getsockopt level 999", getsockopt(s, 999, 1, &v, &vl));
    res("setsockopt unknown SOL_SOCKET option", setsockopt(s, SOL_SOCKET, 9999, &v, sizeof v));
    res("setsockopt with an unmapped value", setsockopt(s, SOL_SOCKET, SO_REUSEADDR, (void *)8, 4));
    res("getsockopt with an unmapped value", getsockopt(s, SOL_SOCKET, SO_TYPE, (void *)8, &vl));
    res("getsockopt with an unmapped length", getsockopt(s, SOL_SOCKET, SO_TYPE, &v, (socklen_t *)8));
    res("bind with an unmapped address", bind(s2, (struct sockaddr *)8, sizeof a));
    res("connect with an unmapped address", connect(s2, (struct sockaddr *)8, sizeof a));
    struct sockaddr_in g;
    socklen_t gl = sizeof g;
    res("getsockname with an unmapped address", getsockname(s, (struct sockaddr *)8, &gl));
    res("getsockname with an unmapped length", getsockname(s, (struct sockaddr *)&g, (socklen_t *)8));
    res("getpeername unconnected", getpeername(s2, (struct sockaddr *)&g, &gl));
    res("shutdown unconnected", shutdown(s2, SHUT_RDWR));
    res("listen", listen(s, 4));
    fcntl(s, F_SETFL, O_NONBLOCK);
    res("accept, nothing there, non-blocking", accept(s, NULL, NULL));
    int ep = epoll_create1(0);
    close(s2);
    struct epoll_event ev = { .events = EPOLLIN };
    res("epoll_ctl ADD a closed TCP socket", epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev));
    res("epoll_ctl ADD the listener", epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
    res("epoll_ctl ADD it twice", epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
    res("epoll_ctl MOD with an unmapped event", epoll_ctl(ep, EPOLL_CTL_MOD, s, (struct epoll_event *)8));
    close(ep);
    close(s);
}

int main(int argc, char **argv) {
    argc_zero = argc > 99;
    alarm(60);
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *only = argc > 1 ? argv[1] : "";
    if (!*only || !strcmp(only, "pair"))
        part_pair();
    if (!*only || !strcmp(only, "fork"))
        part_fork();
    if (!*only || !strcmp(only, "named"))
        part_named();
    if (!*only || !strcmp(only, "errors"))
        part_errors();
    if (!*only || !strcmp(only, "masks"))
        part_masks();
    if (!*only || !strcmp(only, "tcp"))
        part_tcp();
    printf("sockcalls: %s\n", failed ? "FAILED" : "ok");
    return failed;
}
