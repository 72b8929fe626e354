/*
 * A single-threaded epoll TCP server (the socket and readiness calls of a Linux program, for
 * the conformance of `cargo xtask exec --net` on both systems: xtask/src/exec/sockets.rs).
 *
 *   epollserv PORT [MAXCONNS]
 *
 * Listens on PORT (non-blocking, SO_REUSEADDR, TCP_NODELAY on each connection), serves every
 * connection from one epoll loop (level-triggered for the listener, edge-triggered with
 * reads to EAGAIN for connections) and answers line commands:
 *
 *   ECHO TEXT          -> TEXT
 *   SET KEY VALUE      -> STORED            (a small table: 64 keys of up to 32 bytes)
 *   GET KEY            -> VALUE V | MISSING
 *   CHECKS             -> the results of the calls' error cases, one line (see `checks`)
 *   QUIT               -> BYE, then the server exits 0 after closing everything
 *   anything else      -> ERROR
 *
 * A connection that closes is removed from the epoll set; MAXCONNS (default 1000) accepted
 * connections end the server too (a bound for tests). An eventfd in the epoll set counts
 * the connections served, read back at exit. Each line on standard output says what
 * happened in an order both systems share (no addresses or timings).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 64
#define LINE 512

static struct {
    int used;
    size_t len;
    char buf[LINE];
} conns[MAXFD];

static struct {
    char key[33], val[33];
} table[64];
static int nkeys;

static int quit;

static void die(const char *what) {
    printf("error %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The name of an error number (the ones the checks meet; others as a number). */
static const char *ename(int e) {
    static char num[16];
    switch (e) {
    case EADDRINUSE: return "EADDRINUSE";
    case EINVAL: return "EINVAL";
    case ENOTCONN: return "ENOTCONN";
    case EFAULT: return "EFAULT";
    case ENOPROTOOPT: return "ENOPROTOOPT";
    case EBADF: return "EBADF";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    case EAGAIN: return "EAGAIN";
    case EPIPE: return "EPIPE";
    }
    snprintf(num, sizeof num, "E%d", e);
    return num;
}

/* The error cases, as "name=errno-name" words: bind to a port in use, accept on a socket
 * that does not listen, epoll_ctl on a closed descriptor, a bad pointer, a UDP socket,
 * recv on an unconnected socket, getsockopt SO_ERROR, a read of a closed descriptor. */
static void checks(int port, char *out, size_t n) {
    char *p = out;
    size_t left = n;
#define ADD(name, expr)                                                                 \
    do {                                                                                \
        int r_ = (expr);                                                                \
        int w_ = snprintf(p, left, "%s%s=%s", p == out ? "" : " ", name, r_ < 0 ? ename(errno) : "ok"); \
        if (w_ > 0 && (size_t)w_ < left) {                                              \
            p += w_;                                                                    \
            left -= (size_t)w_;                                                         \
        }                                                                               \
    } while (0)
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ADD("bind-in-use", bind(s, (struct sockaddr *)&a, sizeof a));
    ADD("accept-not-listening", accept(s, NULL, NULL));
    ADD("recv-unconnected", (int)recv(s, p, 1, MSG_DONTWAIT));
    int e = 0;
    socklen_t el = sizeof e;
    ADD("so-error", getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el));
    ADD("bind-bad-pointer", bind(s, (struct sockaddr *)8, sizeof a));
    ADD("getsockopt-bad-option", getsockopt(s, SOL_SOCKET, 12345, &e, &el));
    close(s);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    /* 63: a descriptor number nothing here opens (both systems allow 64 or more). */
    ADD("epoll-ctl-closed", epoll_ctl(ep, EPOLL_CTL_ADD, 63, &ev));
    ADD("epoll-ctl-self", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
    ADD("epoll-wait-zero-max", epoll_wait(ep, &ev, 0, 0));
    close(ep);
    ADD("read-closed", (int)read(63, &e, 1));
#undef ADD
}

/* Answer one line; returns the reply's length in `out`. */
static size_t answer(int port, char *line, char *out, size_t n) {
    char *sp = strchr(line, ' ');
    if (sp)
        *sp++ = 0;
    if (!strcmp(line, "ECHO") && sp)
        return (size_t)snprintf(out, n, "%s\n", sp);
    if (!strcmp(line, "SET") && sp) {
        char *v = strchr(sp, ' ');
        if (!v || strlen(sp) > 64)
            return (size_t)snprintf(out, n, "ERROR\n");
        *v++ = 0;
        if (strlen(sp) > 32 || strlen(v) > 32)
            return (size_t)snprintf(out, n, "ERROR\n");
        int i;
        for (i = 0; i < nkeys && strcmp(table[i].key, sp); i++)
            ;
        if (i == nkeys) {
            if (nkeys == 64)
                return (size_t)snprintf(out, n, "FULL\n");
            nkeys++;
        }
        strcpy(table[i].key, sp);
        strcpy(table[i].val, v);
        return (size_t)snprintf(out, n, "STORED\n");
    }
    if (!strcmp(line, "GET") && sp) {
        for (int i = 0; i < nkeys; i++)
            if (!strcmp(table[i].key, sp))
                return (size_t)snprintf(out, n, "VALUE %s\n", table[i].val);
        return (size_t)snprintf(out, n, "MISSING\n");
    }
    if (!strcmp(line, "CHECKS")) {
        char c[400];
        checks(port, c, sizeof c);
        printf("checks %s\n", c);
        return (size_t)snprintf(out, n, "%s\n", c);
    }
    if (!strcmp(line, "QUIT")) {
        quit = 1;
        return (size_t)snprintf(out, n, "BYE\n");
    }
    return (size_t)snprintf(out, n, "ERROR\n");
}

static void drop(int ep, int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    conns[fd].used = 0;
}

/* Read to EAGAIN (edge-triggered), answering each complete line. */
static void serve(int ep, int port, int fd) {
    for (;;) {
        char *b = conns[fd].buf + conns[fd].len;
        size_t room = LINE - 1 - conns[fd].len;
        if (room == 0) {
            printf("line too long: dropped\n");
            drop(ep, fd);
            return;
        }
        ssize_t r = read(fd, b, room);
        if (r < 0 && errno == EAGAIN)
            return;
        if (r <= 0) {
            drop(ep, fd);
            return;
        }
        conns[fd].len += (size_t)r;
        char *nl;
        while ((nl = memchr(conns[fd].buf, '\n', conns[fd].len))) {
            *nl = 0;
            if (nl > conns[fd].buf && nl[-1] == '\r')
                nl[-1] = 0;
            char out[600];
            size_t n = answer(port, conns[fd].buf, out, sizeof out);
            struct iovec iov[1] = {{out, n}};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = 1};
            if (sendmsg(fd, &m, MSG_NOSIGNAL) != (ssize_t)n) {
                drop(ep, fd);
                return;
            }
            size_t used = (size_t)(nl - conns[fd].buf) + 1;
            memmove(conns[fd].buf, nl + 1, conns[fd].len - used);
            conns[fd].len -= used;
            if (quit)
                return;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: epollserv PORT [MAXCONNS]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    long maxconns = argc > 2 ? atol(argv[2]) : 1000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0)
        die("socket");
    int one = 1;
    if (setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die("setsockopt SO_REUSEADDR");
    int got = 0;
    socklen_t gl = sizeof got;
    if (getsockopt(l, SOL_SOCKET, SO_REUSEADDR, &got, &gl) < 0 || !got)
        die("getsockopt SO_REUSEADDR");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(l, 16) < 0)
        die("listen");
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (getsockname(l, (struct sockaddr *)&me, &ml) < 0)
        die("getsockname");
    printf("listening on port %d\n", ntohs(me.sin_port));
    /* Non-blocking accept with nothing waiting, and a poll that times out. */
    if (accept4(l, NULL, NULL, SOCK_NONBLOCK) >= 0 || errno != EAGAIN)
        die("accept4 with nothing waiting should be EAGAIN");
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int ev = eventfd(0, EFD_NONBLOCK);
    if (ep < 0 || ev < 0)
        die("epoll_create1 / eventfd");
    struct epoll_event e = {.events = EPOLLIN, .data.fd = l};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, l, &e) < 0)
        die("epoll_ctl ADD listener");
    e.data.fd = ev;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e) < 0)
        die("epoll_ctl ADD eventfd");
    long accepted = 0;
    while (!quit && accepted < maxconns) {
        struct epoll_event out[16];
        int n = epoll_wait(ep, out, 16, -1);
        if (n < 0)
            die("epoll_wait");
        for (int i = 0; i < n && !quit; i++) {
            int fd = out[i].data.fd;
            if (fd == ev) {
                uint64_t v;
                if (read(ev, &v, sizeof v) != sizeof v)
                    die("read eventfd");
                /* Level-triggered: drained, it must not fire again until the next write. */
                continue;
            }
            if (fd == l) {
                for (;;) {
                    struct sockaddr_in peer;
                    socklen_t pl = sizeof peer;
                    int c = accept4(l, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (c < 0) {
                        if (errno != EAGAIN)
                            die("accept4");
                        break;
                    }
                    if (c >= MAXFD || pl != sizeof peer || peer.sin_family != AF_INET) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct sockaddr_in pn;
                    socklen_t pnl = sizeof pn;
                    if (getpeername(c, (struct sockaddr *)&pn, &pnl) < 0 || pn.sin_port != peer.sin_port)
                        die("getpeername");
                    conns[c].used = 1;
                    conns[c].len = 0;
                    struct epoll_event ce = {.events = EPOLLIN | EPOLLRDHUP | EPOLLET, .data.fd = c};
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0)
                        die("epoll_ctl ADD connection");
                    accepted++;
                    uint64_t one64 = 1;
                    if (write(ev, &one64, sizeof one64) != sizeof one64)
                        die("write eventfd");
                }
                continue;
            }
            if (fd >= 0 && fd < MAXFD && conns[fd].used)
                serve(ep, port, fd);
        }
    }
    printf("served %ld connections\n", accepted);
    for (int fd = 0; fd < MAXFD; fd++)
        if (conns[fd].used) {
            shutdown(fd, SHUT_WR);
            drop(ep, fd);
        }
    close(ev);
    close(ep);
    close(l);
    printf("bye\n");
    return 0;
}
