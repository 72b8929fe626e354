//! What the library OS's Linux personality implements: one row per system call it handles
//! (the dispatcher's handler list must name the same numbers, in the same order: a
//! compile-time check in user/libos/src/linux/dispatch.rs), with what is missing where it is
//! partial. Every other number of [`crate::SYSCALLS`] is `-ENOSYS`. docs/linux-abi.md's
//! table is written from this ([`doc_table`]) and a host test in xtask checks it matches.

use crate::nr;

/// How much of a call is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// As Linux does it, for every argument Linux accepts.
    Full,
    /// Handled, with what is missing.
    Partial(&'static str),
}

/// Every call the dispatcher handles, sorted by number.
pub const SUPPORTED: &[(u64, Support)] = &[
    (nr::READ, Support::Partial("standard input (a file the host gives, or end of file), regular files, TCP sockets, eventfds; no pipes yet")),
    (nr::WRITE, Support::Partial("standard output and error (to the host, framed), regular files, TCP sockets (EPIPE, no SIGPIPE), eventfds")),
    (nr::OPEN, Support::Partial("as openat")),
    (nr::CLOSE, Support::Full),
    (nr::STAT, Support::Partial("as newfstatat")),
    (nr::FSTAT, Support::Partial("st_dev, st_rdev 0; times are the modification time")),
    (nr::LSTAT, Support::Partial("as newfstatat")),
    (nr::POLL, Support::Partial("sockets, eventfds, epoll, the console and files; a wait naps 1 ms at a time while a socket is involved")),
    (nr::LSEEK, Support::Partial("files only (ESPIPE for the console); no SEEK_DATA/SEEK_HOLE")),
    (nr::MMAP, Support::Partial("anonymous private only; no file mappings, MAP_FIXED, PROT_EXEC or address hints")),
    (nr::MPROTECT, Support::Partial("changes mmap'd memory; accepted without effect on the image, stack and brk heap")),
    (nr::MUNMAP, Support::Partial("mmap'd memory; pages of a partly unmapped mapping stay allocated until its last piece goes")),
    (nr::BRK, Support::Partial("up to 64 MiB above the image")),
    (nr::RT_SIGACTION, Support::Partial("recorded and returned; signals are never delivered")),
    (nr::RT_SIGPROCMASK, Support::Partial("recorded and returned; signals are never delivered")),
    (nr::IOCTL, Support::Partial("TCGETS and TIOCGWINSZ on the console when it is a terminal (not under cargo xtask exec, where output is captured: ENOTTY, as for a pipe); everything else ENOTTY")),
    (nr::PREAD64, Support::Partial("regular files only")),
    (nr::READV, Support::Partial("as read")),
    (nr::WRITEV, Support::Partial("as write")),
    (nr::SELECT, Support::Partial("as poll; exceptional conditions never fire")),
    (nr::SCHED_YIELD, Support::Full),
    (nr::NANOSLEEP, Support::Partial("never interrupted (no signals), so the remainder is always 0")),
    (nr::GETPID, Support::Partial("always 1: one process per runtime")),
    (nr::SOCKET, Support::Partial("AF_INET SOCK_STREAM (SOCK_NONBLOCK, SOCK_CLOEXEC accepted); SOCK_DGRAM EPROTONOSUPPORT (the stack has no UDP); AF_UNIX, AF_INET6 EAFNOSUPPORT")),
    (nr::CONNECT, Support::Partial("to an IPv4 address; EINPROGRESS when non-blocking")),
    (nr::ACCEPT, Support::Partial("as accept4")),
    (nr::SENDTO, Support::Partial("connected TCP sockets; the address is ignored; MSG_DONTWAIT, MSG_NOSIGNAL")),
    (nr::RECVFROM, Support::Partial("connected TCP sockets; MSG_DONTWAIT; no MSG_PEEK or MSG_OOB (EOPNOTSUPP)")),
    (nr::SENDMSG, Support::Partial("as sendto, gathering the iovecs; no control data")),
    (nr::RECVMSG, Support::Partial("as recvfrom, scattering into the iovecs; no control data")),
    (nr::SHUTDOWN, Support::Partial("SHUT_WR sends a FIN; SHUT_RD makes reads return end of file")),
    (nr::BIND, Support::Partial("records the port (one socket of the program per port, whatever SO_REUSEADDR says); any address means all")),
    (nr::LISTEN, Support::Partial("a backlog of 1..64 ready connections")),
    (nr::GETSOCKNAME, Support::Full),
    (nr::GETPEERNAME, Support::Full),
    (nr::SETSOCKOPT, Support::Partial("TCP_NODELAY and SO_KEEPALIVE applied; SO_REUSEADDR, SO_REUSEPORT, SO_LINGER, SO_SNDBUF, SO_RCVBUF recorded only")),
    (nr::GETSOCKOPT, Support::Partial("the options setsockopt takes, SO_TYPE, SO_ERROR")),
    (nr::EXIT, Support::Partial("ends the program (single-threaded: as exit_group)")),
    (nr::UNAME, Support::Full),
    (nr::GETCWD, Support::Full),
    (nr::CHDIR, Support::Full),
    (nr::GETTIMEOFDAY, Support::Partial("time since boot: there is no wall clock")),
    (nr::GETUID, Support::Partial("always 0 (root)")),
    (nr::GETGID, Support::Partial("always 0")),
    (nr::GETEUID, Support::Partial("always 0")),
    (nr::GETEGID, Support::Partial("always 0")),
    (nr::GETPPID, Support::Partial("always 0: no parent process")),
    (nr::ARCH_PRCTL, Support::Partial("ARCH_SET_FS and ARCH_GET_FS only")),
    (nr::GETTID, Support::Partial("the process id: one thread")),
    (nr::SCHED_GETAFFINITY, Support::Partial("the one core the program runs on")),
    (nr::EPOLL_CREATE, Support::Full),
    (nr::GETDENTS64, Support::Full),
    (nr::SET_TID_ADDRESS, Support::Partial("recorded; nothing clears it (no threads)")),
    (nr::CLOCK_GETTIME, Support::Partial("every clock counts from boot: there is no wall clock")),
    (nr::EXIT_GROUP, Support::Full),
    (nr::EPOLL_WAIT, Support::Partial("level-triggered, EPOLLET (a new edge when a bit reappears after being seen clear), EPOLLONESHOT; naps 1 ms at a time while a socket is involved")),
    (nr::EPOLL_CTL, Support::Partial("sockets, eventfds, epoll, the console (regular files EPERM); an interest goes when its descriptor closes")),
    (nr::OPENAT, Support::Partial("O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY; O_CLOEXEC and O_NOFOLLOW ignored; modes are 0644")),
    (nr::NEWFSTATAT, Support::Partial("as fstat; AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH")),
    (nr::PSELECT6, Support::Partial("as select; the signal mask is ignored (no signals)")),
    (nr::PPOLL, Support::Partial("as poll; the signal mask is ignored (no signals)")),
    (nr::EPOLL_PWAIT, Support::Partial("as epoll_wait; the signal mask is ignored (no signals)")),
    (nr::EVENTFD, Support::Full),
    (nr::ACCEPT4, Support::Partial("SOCK_NONBLOCK, SOCK_CLOEXEC; the connection is served by the core whose stack received it")),
    (nr::EVENTFD2, Support::Full),
    (nr::EPOLL_CREATE1, Support::Full),
    (nr::PRLIMIT64, Support::Partial("reads the limits; setting RLIMIT_NOFILE to at most its fixed 64 is accepted without effect, anything else is EPERM")),
    (nr::GETRANDOM, Support::Partial("time-stamp-counter seeded, not cryptographic")),
];

/// The support of call `nr`, or `None` for `-ENOSYS`.
pub fn support(nr: u64) -> Option<Support> {
    SUPPORTED.binary_search_by_key(&nr, |r| r.0).ok().map(|i| SUPPORTED[i].1)
}

/// Linux's `struct stat` on x86-64 (144 bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinuxStat {
    pub ino: u64,
    pub nlink: u64,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: i64,
    pub blocks: i64,
    pub mtime: i64,
}

impl LinuxStat {
    pub fn to_bytes(&self) -> [u8; 144] {
        let mut b = [0u8; 144];
        let mut put = |o: usize, v: &[u8]| b[o..o + v.len()].copy_from_slice(v);
        put(8, &self.ino.to_le_bytes());
        put(16, &self.nlink.to_le_bytes());
        put(24, &self.mode.to_le_bytes());
        put(28, &self.uid.to_le_bytes());
        put(32, &self.gid.to_le_bytes());
        put(48, &self.size.to_le_bytes());
        put(56, &4096i64.to_le_bytes());
        put(64, &self.blocks.to_le_bytes());
        put(72, &self.mtime.to_le_bytes());
        put(88, &self.mtime.to_le_bytes());
        put(104, &self.mtime.to_le_bytes());
        b
    }
}

/// docs/linux-abi.md's table: one row for every number in [`crate::SYSCALLS`].
pub fn doc_table(out: &mut impl core::fmt::Write) -> core::fmt::Result {
    writeln!(out, "| number | name | status | what is missing |")?;
    writeln!(out, "| ---: | --- | --- | --- |")?;
    for &(n, name) in crate::SYSCALLS {
        match support(n as u64) {
            Some(Support::Full) => writeln!(out, "| {n} | `{name}` | implemented | |")?,
            Some(Support::Partial(what)) => writeln!(out, "| {n} | `{name}` | partial | {what} |")?,
            None => writeln!(out, "| {n} | `{name}` | ENOSYS | |")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_names_real_calls() {
        for w in SUPPORTED.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
        for &(n, _) in SUPPORTED {
            assert!(crate::name(n).is_some(), "{n} is no Linux call");
        }
        assert_eq!(support(nr::GETPID), Some(Support::Partial("always 1: one process per runtime")));
        assert_eq!(support(nr::FORK), None);
    }

    #[test]
    fn stat_fields_sit_where_linux_has_them() {
        let b = LinuxStat { ino: 5, nlink: 2, mode: 0o100644, uid: 1, gid: 2, size: 300, blocks: 8, mtime: 99 }.to_bytes();
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 0o100644);
        assert_eq!(i64::from_le_bytes(b[48..56].try_into().unwrap()), 300);
        assert_eq!(i64::from_le_bytes(b[88..96].try_into().unwrap()), 99);
    }
}
