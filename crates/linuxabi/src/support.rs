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
    (nr::READ, Support::Partial("standard input (a file the host gives, or end of file), regular files, pipes, TCP sockets, eventfds")),
    (nr::WRITE, Support::Partial("standard output and error (to the host, framed), regular files, pipes, TCP sockets (EPIPE and SIGPIPE unless MSG_NOSIGNAL), eventfds")),
    (nr::OPEN, Support::Partial("as openat")),
    (nr::CLOSE, Support::Full),
    (nr::STAT, Support::Partial("as newfstatat")),
    (nr::FSTAT, Support::Partial("st_dev, st_rdev 0; times are the modification time")),
    (nr::LSTAT, Support::Partial("as newfstatat")),
    (nr::POLL, Support::Partial("sockets, pipes, eventfds, epoll, the console and files; a wait with a TCP socket sleeps on the card's wait (its interrupt, the stack's next timer, a wake)")),
    (nr::LSEEK, Support::Partial("files only (ESPIPE for the console); no SEEK_DATA/SEEK_HOLE")),
    (nr::MMAP, Support::Partial("anonymous private only; no file mappings, MAP_FIXED, PROT_EXEC or address hints")),
    (nr::MPROTECT, Support::Partial("changes mmap'd memory; accepted without effect on the image, stack and brk heap")),
    (nr::MUNMAP, Support::Partial("mmap'd memory; pages of a partly unmapped mapping stay allocated until its last piece goes")),
    (nr::BRK, Support::Partial("up to 64 MiB above the image")),
    (nr::RT_SIGACTION, Support::Partial("SA_SIGINFO, SA_RESTORER (required, as on Linux x86-64), SA_RESTART, SA_NODEFER, SA_RESETHAND, SA_ONSTACK; SA_NOCLDSTOP/SA_NOCLDWAIT recorded only (no child processes)")),
    (nr::RT_SIGPROCMASK, Support::Full),
    (nr::RT_SIGRETURN, Support::Partial("x87/SSE state by fxsave (no AVX upper halves); the trap flag is not restored")),
    (nr::IOCTL, Support::Partial("TCGETS, TCSETS/TCSETSW/TCSETSF (kept, not applied: the console has no line discipline) and TIOCGWINSZ on the console when it is a terminal (not under cargo xtask exec, where output is captured: ENOTTY, as for a pipe); FIONBIO on any descriptor; everything else ENOTTY")),
    (nr::PREAD64, Support::Partial("regular files only")),
    (nr::PWRITE64, Support::Partial("regular files only (ESPIPE for the console)")),
    (nr::READV, Support::Partial("as read")),
    (nr::WRITEV, Support::Partial("as write")),
    (nr::ACCESS, Support::Partial("as faccessat2")),
    (nr::PIPE, Support::Partial("as pipe2 without flags")),
    (nr::SELECT, Support::Partial("as poll; exceptional conditions never fire")),
    (nr::SCHED_YIELD, Support::Full),
    (nr::MREMAP, Support::Partial("anonymous and private mappings, whole: shrink, grow in place or (MREMAP_MAYMOVE) move without copying; shared file mappings, MREMAP_FIXED and MREMAP_DONTUNMAP are not built (EINVAL/ENOMEM)")),
    (nr::MSYNC, Support::Partial("writes the writable shared file mappings in the range back to their files (MS_ASYNC does the same, at once)")),
    (nr::MADVISE, Support::Partial("every advice Linux accepts; MADV_DONTNEED zeroes writable private pages (a private file mapping reads zeros, not the file again); the rest have no effect")),
    (nr::DUP, Support::Full),
    (nr::DUP2, Support::Full),
    (nr::PAUSE, Support::Full),
    (nr::NANOSLEEP, Support::Partial("a signal with a handler interrupts it (EINTR and the remainder); it sleeps without the process lock (the program's other threads go on)")),
    (nr::GETITIMER, Support::Partial("ITIMER_REAL only (ITIMER_VIRTUAL and ITIMER_PROF: EINVAL)")),
    (nr::ALARM, Support::Partial("10 ms resolution while the program computes (timer ticks at 100 Hz)")),
    (nr::SETITIMER, Support::Partial("ITIMER_REAL only (ITIMER_VIRTUAL and ITIMER_PROF: EINVAL); 10 ms resolution")),
    (nr::GETPID, Support::Full),
    (nr::SOCKET, Support::Partial("AF_INET SOCK_STREAM and AF_UNIX SOCK_STREAM (SOCK_NONBLOCK, SOCK_CLOEXEC accepted); SOCK_DGRAM and SOCK_SEQPACKET EPROTONOSUPPORT (the stack has no UDP; local datagrams not built); AF_INET6 EAFNOSUPPORT")),
    (nr::CONNECT, Support::Partial("to an IPv4 address (EINPROGRESS when non-blocking) or a local name (a full accept queue is EAGAIN even when blocking)")),
    (nr::ACCEPT, Support::Partial("as accept4")),
    (nr::SENDTO, Support::Partial("connected TCP and local stream sockets; the address is ignored; MSG_DONTWAIT, MSG_NOSIGNAL")),
    (nr::RECVFROM, Support::Partial("connected TCP and local stream sockets; MSG_DONTWAIT; no MSG_PEEK or MSG_OOB (EOPNOTSUPP)")),
    (nr::SENDMSG, Support::Partial("as sendto, gathering the iovecs; no control data (no SCM_RIGHTS)")),
    (nr::RECVMSG, Support::Partial("as recvfrom, scattering into the iovecs; no control data")),
    (nr::SHUTDOWN, Support::Partial("SHUT_WR sends a FIN (a local socket's peer reads end of file); SHUT_RD makes reads return end of file")),
    (nr::BIND, Support::Partial("TCP: records the port (one socket of the program per port, whatever SO_REUSEADDR says), any address means all; AF_UNIX: a name in the session, not a file (it goes with the socket's last close)")),
    (nr::LISTEN, Support::Partial("a backlog of 1..64 ready connections")),
    (nr::GETSOCKNAME, Support::Full),
    (nr::GETPEERNAME, Support::Full),
    (nr::SOCKETPAIR, Support::Partial("AF_UNIX SOCK_STREAM only")),
    (nr::SETSOCKOPT, Support::Partial("TCP_NODELAY and SO_KEEPALIVE applied; SO_REUSEADDR, SO_REUSEPORT, SO_LINGER, SO_SNDBUF, SO_RCVBUF recorded only (AF_UNIX: accepted without effect)")),
    (nr::GETSOCKOPT, Support::Partial("the options setsockopt takes, SO_TYPE, SO_ERROR (AF_UNIX: SO_TYPE, SO_DOMAIN, SO_ERROR, SO_ACCEPTCONN)")),
    (nr::CLONE, Support::Partial("without CLONE_VM: a fork (exit signal SIGCHLD or none; CLONE_PARENT_SETTID, CLONE_CHILD_SETTID/CLEARTID accepted, the child ones without effect); with CLONE_VM a thread (musl's pthread_create set: CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND and CLONE_THREAD together, with any of CLONE_SYSVSEM, CLONE_SETTLS, CLONE_PARENT_SETTID, CLONE_CHILD_SETTID, CLONE_CHILD_CLEARTID, CLONE_DETACHED); Linux's EINVAL checks; other sharing EINVAL; at most 64 threads (EAGAIN)")),
    (nr::FORK, Support::Partial("a cfork of the whole context (a threaded program's child has the calling thread only, as Linux), copy-on-write (eager copies in a process with other threads); the child's pipe ends are its own open files; its regular files share their offset with the parent (one open file description, as Linux)")),
    (nr::VFORK, Support::Partial("as fork (the parent does not wait for the child's exec or exit)")),
    (nr::EXECVE, Support::Partial("static ELF programs only (no #! scripts, no interpreter); from a threaded program the other threads end first (one that makes no system call within 200 ms is halted; the main thread, if not the caller, at its next call)")),
    (nr::EXIT, Support::Partial("ends the calling thread (clear_child_tid cleared and futex-woken); the main thread's exit ends the program once the other threads have; the robust list is not walked")),
    (nr::WAIT4, Support::Partial("no stopped or continued children (no job-control stops); rusage all zero")),
    (nr::KILL, Support::Partial("any process of the program's session; a default or ignore action at the target's next system call, handlers through linux::signal")),
    (nr::UNAME, Support::Full),
    (nr::FCNTL, Support::Partial("F_DUPFD, F_DUPFD_CLOEXEC, F_GETFD, F_SETFD, F_GETFL, F_SETFL (O_APPEND, O_NONBLOCK; O_ASYNC, O_DIRECT, O_NOATIME kept without effect); no locks, leases, owners or pipe sizes (EINVAL)")),
    (nr::FSYNC, Support::Partial("files of the file system (EINVAL for the console)")),
    (nr::FDATASYNC, Support::Partial("as fsync")),
    (nr::TRUNCATE, Support::Full),
    (nr::FTRUNCATE, Support::Full),
    (nr::GETCWD, Support::Full),
    (nr::CHDIR, Support::Full),
    (nr::FCHDIR, Support::Full),
    (nr::RENAME, Support::Partial("as renameat2")),
    (nr::MKDIR, Support::Full),
    (nr::RMDIR, Support::Full),
    (nr::CREAT, Support::Partial("as openat")),
    (nr::LINK, Support::Full),
    (nr::UNLINK, Support::Full),
    (nr::SYMLINK, Support::Full),
    (nr::READLINK, Support::Full),
    (nr::CHMOD, Support::Partial("the stat of a descriptor already open may show the old mode")),
    (nr::FCHMOD, Support::Partial("descriptors opened by path (EINVAL for the console)")),
    (nr::CHOWN, Support::Partial("as root, recorded; ids above 65535 are EINVAL (ext2's 16-bit fields)")),
    (nr::FCHOWN, Support::Partial("as chown, on descriptors opened by path")),
    (nr::LCHOWN, Support::Partial("as chown")),
    (nr::UMASK, Support::Full),
    (nr::GETTIMEOFDAY, Support::Partial("time since boot: there is no wall clock")),
    (nr::GETUID, Support::Partial("always 0 (root)")),
    (nr::GETGID, Support::Partial("always 0")),
    (nr::SETUID, Support::Partial("the program stays root: uid 0 accepted, -1 EINVAL, any other EPERM")),
    (nr::SETGID, Support::Partial("as setuid, for the group")),
    (nr::GETEUID, Support::Partial("always 0")),
    (nr::GETEGID, Support::Partial("always 0")),
    (nr::SETPGID, Support::Partial("no EACCES for a child that has called execve")),
    (nr::GETPPID, Support::Partial("0 for the first program; 1 (init: the first program) once the parent ended")),
    (nr::GETPGRP, Support::Full),
    (nr::SETSID, Support::Full),
    (nr::SETGROUPS, Support::Partial("Linux's size and pointer checks; the list is not kept")),
    (nr::GETPGID, Support::Full),
    (nr::GETSID, Support::Full),
    (nr::RT_SIGPENDING, Support::Full),
    (nr::RT_SIGSUSPEND, Support::Full),
    (nr::SIGALTSTACK, Support::Full),
    (nr::STATFS, Support::Partial("the root ext2 file system's counts; f_fsid 0")),
    (nr::FSTATFS, Support::Partial("as statfs")),
    (nr::ARCH_PRCTL, Support::Partial("ARCH_SET_FS and ARCH_GET_FS only")),
    (nr::GETTID, Support::Full),
    (nr::TKILL, Support::Partial("to the calling process: the signal is pending for the process, not the named thread (ESRCH for a tid of another process)")),
    (nr::TIME, Support::Partial("seconds since boot, as gettimeofday: there is no wall clock")),
    (nr::FUTEX, Support::Partial("FUTEX_WAIT, FUTEX_WAKE, FUTEX_WAIT_BITSET, FUTEX_WAKE_BITSET, FUTEX_REQUEUE, FUTEX_CMP_REQUEUE, FUTEX_WAKE_OP, FUTEX_PRIVATE_FLAG, FUTEX_CLOCK_REALTIME (every clock counts from boot); no PI or FUTEX_WAIT_REQUEUE_PI (ENOSYS); shared futexes are private (one process)")),
    (nr::SCHED_SETAFFINITY, Support::Partial("threads do not move: a mask that keeps the thread's core is accepted, any other EINVAL")),
    (nr::SCHED_GETAFFINITY, Support::Partial("the one core the thread runs on")),
    (nr::EPOLL_CREATE, Support::Full),
    (nr::GETDENTS64, Support::Full),
    (nr::SET_TID_ADDRESS, Support::Full),
    (nr::CLOCK_GETTIME, Support::Partial("every clock counts from boot: there is no wall clock")),
    (nr::CLOCK_NANOSLEEP, Support::Partial("the realtime, monotonic, boot-time and TAI clocks (one clock from boot here), relative or TIMER_ABSTIME; a signal with a handler interrupts it (EINTR and the remainder); the process CPU-time clock is EOPNOTSUPP")),
    (nr::EXIT_GROUP, Support::Partial("every thread ends at its next system call or futex wake-up; one that makes none is halted after 100 ms")),
    (nr::EPOLL_WAIT, Support::Partial("level-triggered, EPOLLET (a new edge when a bit reappears after being seen clear), EPOLLONESHOT; a wait with a socket sleeps on the card's wait (its interrupt, the stack's next timer, a wake)")),
    (nr::EPOLL_CTL, Support::Partial("sockets, eventfds, epoll, the console (regular files EPERM); an interest goes when its descriptor closes")),
    (nr::TGKILL, Support::Partial("as tkill")),
    (nr::WAITID, Support::Partial("P_ALL, P_PID, P_PGID; WEXITED (no stopped or continued children); rusage all zero")),
    (nr::OPENAT, Support::Partial("O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY; O_CLOEXEC and O_NOFOLLOW ignored; modes are 0644")),
    (nr::MKDIRAT, Support::Full),
    (nr::FCHOWNAT, Support::Partial("as chown")),
    (nr::NEWFSTATAT, Support::Partial("as fstat; AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH")),
    (nr::UNLINKAT, Support::Full),
    (nr::RENAMEAT, Support::Partial("as renameat2")),
    (nr::LINKAT, Support::Partial("AT_SYMLINK_FOLLOW links the link's target by name; AT_EMPTY_PATH accepted only with a path")),
    (nr::SYMLINKAT, Support::Full),
    (nr::READLINKAT, Support::Full),
    (nr::FCHMODAT, Support::Partial("as chmod")),
    (nr::FACCESSAT, Support::Partial("as faccessat2")),
    (nr::PSELECT6, Support::Partial("as select; the signal mask is the thread's for the wait (swapped in before the first look; the old one back after, or after the handler of the signal that ended it)")),
    (nr::PPOLL, Support::Partial("as poll; the signal mask is the thread's for the wait (swapped in before the first look; the old one back after, or after the handler of the signal that ended it)")),
    (nr::SET_ROBUST_LIST, Support::Partial("recorded; the list is not walked at a thread's exit (robust mutexes of a dead owner are not marked)")),
    (nr::GET_ROBUST_LIST, Support::Full),
    (nr::UTIMENSAT, Support::Partial("the modification time only (ext2's seconds); access times are not kept")),
    (nr::EPOLL_PWAIT, Support::Partial("as epoll_wait; the signal mask is the thread's for the wait, as ppoll's")),
    (nr::EVENTFD, Support::Full),
    (nr::ACCEPT4, Support::Partial("SOCK_NONBLOCK, SOCK_CLOEXEC; the connection is served by the core whose stack received it")),
    (nr::EVENTFD2, Support::Full),
    (nr::EPOLL_CREATE1, Support::Full),
    (nr::DUP3, Support::Full),
    (nr::PIPE2, Support::Partial("O_CLOEXEC, O_NONBLOCK (O_DIRECT accepted: writes up to PIPE_BUF are records already)")),
    (nr::PRLIMIT64, Support::Partial("reads the limits; setting RLIMIT_NOFILE to at most its fixed 64 is accepted without effect, anything else is EPERM")),
    (nr::RENAMEAT2, Support::Partial("RENAME_NOREPLACE; RENAME_EXCHANGE and RENAME_WHITEOUT are EINVAL")),
    (nr::GETRANDOM, Support::Partial("time-stamp-counter seeded, not cryptographic")),
    (nr::STATX, Support::Partial("the basic stats (as fstat); no birth time, st_dev 0")),
    (nr::FACCESSAT2, Support::Partial("as root: everything is allowed but executing a file without an execute bit")),
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
        assert_eq!(support(nr::GETPID), Some(Support::Full));
        assert_eq!(support(nr::ACCT), None);
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
