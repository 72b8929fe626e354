//! The Linux system-call dispatcher: every reflected `syscall` of the program lands here
//! (from `upcall.rs`) and runs by its Linux number. [`HANDLERS`] and [`UNLOCKED`] list the
//! numbers with a handler; together they must name exactly the numbers
//! `linuxabi::support::SUPPORTED` lists (a compile-time check below), which is the table
//! docs/linux-abi.md is written from. Any other number is `-ENOSYS`, reported once per
//! program on the console with its name. Pointer arguments are checked against the
//! program's memory (`mem::Space`): `-EFAULT` before anything is touched.
//!
//! Lock discipline: what the threads of the program share is one [`Process`] behind the
//! process lock ([`PROC`], taken with [`lock_proc`]); what each thread has is its slot
//! (`thread::SLOTS`). A [`HANDLERS`] row runs with the process lock held and never blocks;
//! an [`UNLOCKED`] row (calls that may sleep or end a thread: `futex`, `nanosleep`, `pause`,
//! `rt_sigsuspend`, `wait4`, `waitid`, `sched_yield`, `clone`, `fork`, `execve`, `exit`,
//! `exit_group`, the readiness waits `poll`, `ppoll`, `select`, `pselect6`, `epoll_wait`,
//! `epoll_pwait`) gets the registers and takes the lock itself
//! only around what touches shared state, so other threads go on while it sleeps.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use linuxabi::errno::*;
use linuxabi::nr;
use percore::spin::{TicketLock, TicketLockGuard};

use super::files::{self, Files, Stream};
use super::fscalls;
use super::signal;
use super::load::Loaded;
use super::thread::{self, Threads};
use super::upcall::Frame;

/// What the threads of the running program share (each thread's own state is its slot,
/// `thread::SLOTS`).
pub struct Process {
    pub image: Loaded,
    pub files: Files,
    pub cwd: String,
    /// `Some(status)` once the program ended (`exit` of its last thread, `exit_group`).
    pub exit: Option<u64>,
    /// Numbers already reported as unimplemented (bit per number below 512; above, one bit).
    reported: [u64; 9],
    /// Signal actions, mask, alternate stack, alarm (`signal`): shared by the threads
    /// (`CLONE_SIGHAND`). NOT DONE: the mask and thread-directed pending signals are the
    /// process's, not each thread's (`thread::Slot::sigmask`/`pending` are unused yet).
    pub sig: super::signal::State,
    /// Standard output and error go to the host as framed records (`out`), not as a terminal.
    pub framed: bool,
    /// Its process id, parent, slot in the process table and children (`proc.rs`).
    pub procs: super::proc::ProcState,
    /// The thread table.
    pub threads: Threads,
}

impl Process {
    /// The process of a loaded program whose only thread is the runtime's own context.
    pub fn new(image: Loaded, files: Files, framed: bool) -> Process {
        CALLS.store(0, Ordering::Relaxed);
        let threads = Threads::new(image.share);
        Process { image, files, cwd: String::from("/"), exit: None, reported: [0; 9], sig: super::signal::State::new(), framed, procs: Default::default(), threads }
    }
}

pub static PROC: TicketLock<Option<Process>> = TicketLock::new(None);

/// System calls the program made (all threads).
pub static CALLS: AtomicU64 = AtomicU64::new(0);

/// Take the process lock. A thread that finds it held gives its turn (`pcore_yield`) between
/// tries: on a TC the holder may be a context queued behind it on the same core.
pub fn lock_proc() -> TicketLockGuard<'static, Option<Process>> {
    loop {
        if let Some(g) = PROC.try_lock() {
            return g;
        }
        let _ = crate::sys::pcore_yield();
    }
}

type Handler = fn(&mut Process, &[u64; 6]) -> i64;
/// A handler that takes the process lock itself (and may sleep without it).
type FrameHandler = fn(&mut Frame) -> i64;

/// The handlers run with the process lock held, by number (sorted).
pub const HANDLERS: &[(u64, Handler)] = &[
    (nr::READ, sys_read),
    (nr::WRITE, sys_write),
    (nr::OPEN, sys_open),
    (nr::CLOSE, sys_close),
    (nr::STAT, sys_stat),
    (nr::FSTAT, sys_fstat),
    (nr::LSTAT, sys_lstat),
    (nr::LSEEK, sys_lseek),
    (nr::MMAP, sys_mmap),
    (nr::MPROTECT, sys_mprotect),
    (nr::MUNMAP, sys_munmap),
    (nr::BRK, sys_brk),
    (nr::RT_SIGACTION, signal::sys_rt_sigaction),
    (nr::RT_SIGPROCMASK, signal::sys_rt_sigprocmask),
    (nr::RT_SIGRETURN, signal::sys_rt_sigreturn),
    (nr::IOCTL, sys_ioctl),
    (nr::PREAD64, sys_pread64),
    (nr::PWRITE64, fscalls::sys_pwrite64),
    (nr::READV, sys_readv),
    (nr::WRITEV, sys_writev),
    (nr::ACCESS, fscalls::sys_access),
    (nr::PIPE, super::pipe::sys_pipe),
    (nr::MREMAP, super::vm::sys_mremap),
    (nr::MSYNC, super::vm::sys_msync),
    (nr::MADVISE, super::vm::sys_madvise),
    (nr::DUP, fscalls::sys_dup),
    (nr::DUP2, fscalls::sys_dup2),
    (nr::GETITIMER, signal::sys_getitimer),
    (nr::ALARM, signal::sys_alarm),
    (nr::SETITIMER, signal::sys_setitimer),
    (nr::GETPID, super::proc::sys_getpid),
    (nr::SOCKET, super::net::sys_socket),
    (nr::CONNECT, super::net::sys_connect),
    (nr::ACCEPT, super::net::sys_accept),
    (nr::SENDTO, super::net::sys_sendto),
    (nr::RECVFROM, super::net::sys_recvfrom),
    (nr::SENDMSG, super::net::sys_sendmsg),
    (nr::RECVMSG, super::net::sys_recvmsg),
    (nr::SHUTDOWN, super::net::sys_shutdown),
    (nr::BIND, super::net::sys_bind),
    (nr::LISTEN, super::net::sys_listen),
    (nr::GETSOCKNAME, super::net::sys_getsockname),
    (nr::GETPEERNAME, super::net::sys_getpeername),
    (nr::SOCKETPAIR, super::unix::sys_socketpair),
    (nr::SETSOCKOPT, super::net::sys_setsockopt),
    (nr::GETSOCKOPT, super::net::sys_getsockopt),
    (nr::KILL, super::proc::sys_kill),
    (nr::UNAME, sys_uname),
    (nr::FCNTL, fscalls::sys_fcntl),
    (nr::FSYNC, fscalls::sys_fsync),
    (nr::FDATASYNC, fscalls::sys_fsync),
    (nr::TRUNCATE, fscalls::sys_truncate),
    (nr::FTRUNCATE, fscalls::sys_ftruncate),
    (nr::GETCWD, sys_getcwd),
    (nr::CHDIR, sys_chdir),
    (nr::FCHDIR, fscalls::sys_fchdir),
    (nr::RENAME, fscalls::sys_rename),
    (nr::MKDIR, fscalls::sys_mkdir),
    (nr::RMDIR, fscalls::sys_rmdir),
    (nr::CREAT, fscalls::sys_creat),
    (nr::LINK, fscalls::sys_link),
    (nr::UNLINK, fscalls::sys_unlink),
    (nr::SYMLINK, fscalls::sys_symlink),
    (nr::READLINK, fscalls::sys_readlink),
    (nr::CHMOD, fscalls::sys_chmod),
    (nr::FCHMOD, fscalls::sys_fchmod),
    (nr::CHOWN, fscalls::sys_chown),
    (nr::FCHOWN, fscalls::sys_fchown),
    (nr::LCHOWN, fscalls::sys_lchown),
    (nr::UMASK, fscalls::sys_umask),
    (nr::GETTIMEOFDAY, sys_gettimeofday),
    (nr::GETUID, sys_zero),
    (nr::GETGID, sys_zero),
    (nr::SETUID, sys_set_id),
    (nr::SETGID, sys_set_id),
    (nr::GETEUID, sys_zero),
    (nr::GETEGID, sys_zero),
    (nr::SETPGID, super::proc::sys_setpgid),
    (nr::GETPPID, super::proc::sys_getppid),
    (nr::GETPGRP, super::proc::sys_getpgrp),
    (nr::SETSID, super::proc::sys_setsid),
    (nr::SETGROUPS, sys_setgroups),
    (nr::GETPGID, super::proc::sys_getpgid),
    (nr::GETSID, super::proc::sys_getsid),
    (nr::RT_SIGPENDING, signal::sys_rt_sigpending),
    (nr::SIGALTSTACK, signal::sys_sigaltstack),
    (nr::STATFS, fscalls::sys_statfs),
    (nr::FSTATFS, fscalls::sys_fstatfs),
    (nr::ARCH_PRCTL, sys_arch_prctl),
    (nr::GETTID, thread::sys_gettid),
    (nr::TKILL, signal::sys_tkill),
    (nr::TIME, sys_time),
    (nr::SCHED_SETAFFINITY, thread::sys_sched_setaffinity),
    (nr::SCHED_GETAFFINITY, thread::sys_sched_getaffinity),
    (nr::EPOLL_CREATE, super::epoll::sys_epoll_create),
    (nr::GETDENTS64, sys_getdents64),
    (nr::SET_TID_ADDRESS, thread::sys_set_tid_address),
    (nr::CLOCK_GETTIME, sys_clock_gettime),
    (nr::EPOLL_CTL, super::epoll::sys_epoll_ctl),
    (nr::TGKILL, signal::sys_tgkill),
    (nr::OPENAT, sys_openat),
    (nr::MKDIRAT, fscalls::sys_mkdirat),
    (nr::FCHOWNAT, fscalls::sys_fchownat),
    (nr::NEWFSTATAT, sys_newfstatat),
    (nr::UNLINKAT, fscalls::sys_unlinkat),
    (nr::RENAMEAT, fscalls::sys_renameat),
    (nr::LINKAT, fscalls::sys_linkat),
    (nr::SYMLINKAT, fscalls::sys_symlinkat),
    (nr::READLINKAT, fscalls::sys_readlinkat),
    (nr::FCHMODAT, fscalls::sys_fchmodat),
    (nr::FACCESSAT, fscalls::sys_faccessat),
    (nr::SET_ROBUST_LIST, thread::sys_set_robust_list),
    (nr::GET_ROBUST_LIST, thread::sys_get_robust_list),
    (nr::UTIMENSAT, fscalls::sys_utimensat),
    (nr::EVENTFD, super::net::sys_eventfd),
    (nr::ACCEPT4, super::net::sys_accept4),
    (nr::EVENTFD2, super::net::sys_eventfd2),
    (nr::EPOLL_CREATE1, super::epoll::sys_epoll_create1),
    (nr::DUP3, fscalls::sys_dup3),
    (nr::PIPE2, super::pipe::sys_pipe2),
    (nr::PRLIMIT64, sys_prlimit64),
    (nr::RENAMEAT2, fscalls::sys_renameat2),
    (nr::GETRANDOM, sys_getrandom),
    (nr::STATX, fscalls::sys_statx),
    (nr::FACCESSAT2, fscalls::sys_faccessat2),
];

/// The handlers that take the process lock themselves, by number (sorted).
pub const UNLOCKED: &[(u64, FrameHandler)] = &[
    (nr::POLL, super::poll::sys_poll),
    (nr::SELECT, super::poll::sys_select),
    (nr::SCHED_YIELD, sys_sched_yield),
    (nr::PAUSE, signal::sys_pause),
    (nr::NANOSLEEP, sys_nanosleep),
    (nr::CLONE, sys_clone),
    (nr::FORK, super::proc::sys_fork),
    (nr::VFORK, super::proc::sys_fork),
    (nr::EXECVE, super::exec::sys_execve),
    (nr::EXIT, thread::sys_exit),
    (nr::WAIT4, super::proc::sys_wait4),
    (nr::RT_SIGSUSPEND, signal::sys_rt_sigsuspend),
    (nr::FUTEX, super::futex::sys_futex),
    (nr::CLOCK_NANOSLEEP, sys_clock_nanosleep),
    (nr::EXIT_GROUP, thread::sys_exit_group),
    (nr::EPOLL_WAIT, super::epoll::sys_epoll_wait),
    (nr::WAITID, super::proc::sys_waitid),
    (nr::PSELECT6, super::poll::sys_pselect6),
    (nr::PPOLL, super::poll::sys_ppoll),
    (nr::EPOLL_PWAIT, super::epoll::sys_epoll_pwait),
];

/// `clone`: a thread (`CLONE_VM`, `thread.rs`) or a process (a fork, `proc.rs`).
fn sys_clone(f: &mut Frame) -> i64 {
    if f.rdi & thread::CLONE_VM != 0 {
        thread::sys_clone(f)
    } else {
        super::proc::sys_clone(f)
    }
}

/// Numbers below this index the handler array; the rest are unknown.
const TABLE_LEN: usize = 512;

#[derive(Clone, Copy)]
enum Entry {
    None,
    Locked(Handler),
    Unlocked(FrameHandler),
}

static TABLE: [Entry; TABLE_LEN] = {
    let mut t: [Entry; TABLE_LEN] = [Entry::None; TABLE_LEN];
    let mut i = 0;
    while i < HANDLERS.len() {
        t[HANDLERS[i].0 as usize] = Entry::Locked(HANDLERS[i].1);
        i += 1;
    }
    let mut i = 0;
    while i < UNLOCKED.len() {
        t[UNLOCKED[i].0 as usize] = Entry::Unlocked(UNLOCKED[i].1);
        i += 1;
    }
    t
};

// The two handler lists, merged in order, name the numbers of the support table.
const _: () = {
    let s = linuxabi::support::SUPPORTED;
    assert!(s.len() == HANDLERS.len() + UNLOCKED.len(), "linuxabi::support::SUPPORTED and HANDLERS + UNLOCKED differ in length");
    let (mut i, mut j, mut k) = (0, 0, 0);
    while k < s.len() {
        let n = s[k].0;
        if i < HANDLERS.len() && HANDLERS[i].0 == n {
            i += 1;
        } else if j < UNLOCKED.len() && UNLOCKED[j].0 == n {
            j += 1;
        } else {
            panic!("linuxabi::support::SUPPORTED names a number that HANDLERS and UNLOCKED do not have there (each list is sorted)");
        }
        k += 1;
    }
};

/// Called by the upcall stub with the program's registers (on the calling thread's upcall
/// stack).
pub extern "C" fn linux_dispatch(f: &mut Frame) {
    let nr = (f.nr_flags >> 32) as u32;
    CALLS.fetch_add(1, Ordering::Relaxed);
    let entry = TABLE.get(nr as usize).copied().unwrap_or(Entry::None);
    if let Entry::Unlocked(h) = entry {
        let r = h(f);
        f.ret = r as u64;
        return after_unlocked(f, nr);
    }
    let args = [f.rdi, f.rsi, f.rdx, f.r10, f.r8, f.r9];
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else {
        f.ret = -ENOSYS as u64;
        return;
    };
    p.sig.call_rsp = f.rsp;
    let r = match entry {
        Entry::Locked(h) => h(p, &args),
        _ => unknown(p, nr),
    };
    f.ret = r as u64;
    // A signal to deliver (or rt_sigreturn's registers) changes where the program resumes.
    let next = if p.exit.is_none() { signal::after_call(p, f, nr) } else { None };
    let exit = p.exit;
    drop(g);
    leave_or_resume(exit, next);
}

/// After an `UNLOCKED` call (fork, execve, wait4, futex, ...: run without the lock): what any
/// call's way back does, signals delivered (a child's SIGCHLD, another process's kill, a
/// SIGPIPE) and the program's end if it exited, a signal ended it or another thread called
/// `exit_group`.
fn after_unlocked(f: &mut Frame, nr: u32) {
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return };
    p.sig.call_rsp = f.rsp;
    let next = if p.exit.is_none() { signal::after_call(p, f, nr) } else { None };
    let exit = p.exit;
    drop(g);
    leave_or_resume(exit, next);
}

fn leave_or_resume(exit: Option<u64>, next: Option<signal::Next>) {
    // The program ended (this thread or another's `exit_group`, a signal): this thread ends.
    if let Some(status) = exit.or_else(thread::group_exit) {
        super::upcall::leave(status);
    }
    // Another thread's execve ends this one (the main thread runs the new image instead).
    if thread::exec_ends_me() {
        ended_by_exec();
    }
    match next {
        None => {}
        Some(signal::Next::Resume(regs)) => super::upcall::resume(&regs),
        Some(signal::Next::Exit(status)) => super::upcall::leave(status),
    }
}

/// The way out of a thread that another thread's `execve` ends (out of line: the common way
/// back only tests one word).
#[cold]
#[inline(never)]
fn ended_by_exec() -> ! {
    match thread::leave_for_exec() {
        Some(h) => super::exec::run_handed_over(h),
        None => super::upcall::leave(thread::group_exit().unwrap_or(0)),
    }
}

fn unknown(p: &mut Process, nr: u32) -> i64 {
    let bit = (nr as usize).min(TABLE_LEN);
    let (w, b) = (bit / 64, bit % 64);
    if p.reported[w] & (1 << b) == 0 {
        p.reported[w] |= 1 << b;
        let name = linuxabi::name(u64::from(nr)).unwrap_or("(no such call)");
        crate::println!("linux: unimplemented system call {name} ({nr}): -ENOSYS");
    }
    -ENOSYS
}

// ---------------------------------------------------------------------------------------
// Files and the console

fn sys_read(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len) = (a[0] as i32, a[1], a[2]);
    let Some(dst) = p.image.space.write(buf, len) else { return -EFAULT };
    files::read(&mut p.files, fd, dst, None)
}

fn sys_pread64(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len, off) = (a[0] as i32, a[1], a[2], a[3] as i64);
    if off < 0 {
        return -EINVAL;
    }
    let Some(dst) = p.image.space.write(buf, len) else { return -EFAULT };
    files::read(&mut p.files, fd, dst, Some(off as u64))
}

fn sys_write(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len) = (a[0] as i32, a[1], a[2]);
    let Some(src) = p.image.space.read(buf, len) else { return -EFAULT };
    files::write(&mut p.files, fd, src, p.framed, None)
}

/// The `(base, len)` pairs of an iovec array.
fn iovecs(p: &Process, iov: u64, n: u64) -> Result<Vec<(u64, u64)>, i64> {
    if n > 1024 {
        return Err(-EINVAL);
    }
    let raw = p.image.space.read(iov, n * 16).ok_or(-EFAULT)?;
    Ok(raw.chunks(16).map(|c| (u64::from_le_bytes(c[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(c[8..].try_into().unwrap_or([0; 8])))).collect())
}

fn sys_writev(p: &mut Process, a: &[u64; 6]) -> i64 {
    let v = match iovecs(p, a[1], a[2]) {
        Ok(v) => v,
        Err(e) => return e,
    };
    // Gathered into one write, so a line written in pieces stays one record.
    let mut all = Vec::new();
    for (b, l) in v {
        match p.image.space.read(b, l) {
            Some(s) => all.extend_from_slice(s),
            None => return -EFAULT,
        }
    }
    files::write(&mut p.files, a[0] as i32, &all, p.framed, None)
}

fn sys_readv(p: &mut Process, a: &[u64; 6]) -> i64 {
    let v = match iovecs(p, a[1], a[2]) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let mut total = 0i64;
    for (b, l) in v {
        let Some(dst) = p.image.space.write(b, l) else { return if total > 0 { total } else { -EFAULT } };
        let n = files::read(&mut p.files, a[0] as i32, dst, None);
        if n < 0 {
            return if total > 0 { total } else { n };
        }
        total += n;
        if (n as u64) < l {
            break;
        }
    }
    total
}

/// A path argument, made absolute against the working directory.
pub(super) fn path_arg(p: &Process, dirfd: i32, addr: u64) -> Result<String, i64> {
    let raw = p.image.space.cstr(addr, 4095)?;
    let s = core::str::from_utf8(raw).map_err(|_| -EINVAL)?;
    if s.is_empty() {
        return Err(-ENOENT);
    }
    if s.starts_with('/') {
        return Ok(String::from(s));
    }
    let base = if dirfd == files::AT_FDCWD { p.cwd.clone() } else { files::dir_path(&p.files, dirfd)? };
    Ok(files::join(&base, s))
}

fn sys_open(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_openat(p, &[files::AT_FDCWD as u64, a[0], a[1], a[2], 0, 0])
}

pub(super) fn sys_openat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let path = match path_arg(p, a[0] as i32, a[1]) {
        Ok(path) => path,
        Err(e) => return e,
    };
    let create = a[2] as u32 & files::O_CREAT != 0;
    let existed = create && crate::fs::lstat(&path).is_ok();
    let r = files::open(&mut p.files, &path, a[2] as u32);
    if create && r >= 0 {
        fscalls::after_create(p, &files::normalize(&path), existed, a[3]);
    }
    r
}

fn sys_close(p: &mut Process, a: &[u64; 6]) -> i64 {
    files::close(&mut p.files, a[0] as i32)
}

fn put_stat(p: &Process, addr: u64, st: Result<linuxabi::support::LinuxStat, i64>) -> i64 {
    match st {
        Ok(st) => {
            if p.image.space.put(addr, &st.to_bytes()) {
                0
            } else {
                -EFAULT
            }
        }
        Err(e) => e,
    }
}

fn sys_fstat(p: &mut Process, a: &[u64; 6]) -> i64 {
    if !p.image.space.ok(a[1], 144, true) {
        return -EFAULT;
    }
    let st = files::fstat(&p.files, a[0] as i32);
    put_stat(p, a[1], st)
}

fn sys_stat(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_newfstatat(p, &[files::AT_FDCWD as u64, a[0], a[1], 0, 0, 0])
}

fn sys_lstat(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_newfstatat(p, &[files::AT_FDCWD as u64, a[0], a[1], files::AT_SYMLINK_NOFOLLOW as u64, 0, 0])
}

fn sys_newfstatat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (dirfd, flags) = (a[0] as i32, a[3] as u32);
    if flags & !(files::AT_SYMLINK_NOFOLLOW | files::AT_EMPTY_PATH | files::AT_NO_AUTOMOUNT) != 0 {
        return -EINVAL;
    }
    if !p.image.space.ok(a[2], 144, true) {
        return -EFAULT;
    }
    if flags & files::AT_EMPTY_PATH != 0 && p.image.space.read(a[1], 1).is_some_and(|b| b[0] == 0) {
        let st = files::fstat(&p.files, dirfd);
        return put_stat(p, a[2], st);
    }
    let st = path_arg(p, dirfd, a[1]).and_then(|path| files::stat(&path, flags & files::AT_SYMLINK_NOFOLLOW != 0));
    put_stat(p, a[2], st)
}

fn sys_lseek(p: &mut Process, a: &[u64; 6]) -> i64 {
    files::lseek(&mut p.files, a[0] as i32, a[1] as i64, a[2] as u32)
}

fn sys_getdents64(p: &mut Process, a: &[u64; 6]) -> i64 {
    let Some(dst) = p.image.space.write(a[1], a[2]) else { return -EFAULT };
    files::getdents64(&mut p.files, a[0] as i32, dst)
}

fn sys_getcwd(p: &mut Process, a: &[u64; 6]) -> i64 {
    let need = p.cwd.len() as u64 + 1;
    if a[1] < need {
        return -ERANGE;
    }
    let mut b = Vec::from(p.cwd.as_bytes());
    b.push(0);
    if p.image.space.put(a[0], &b) {
        need as i64
    } else {
        -EFAULT
    }
}

fn sys_chdir(p: &mut Process, a: &[u64; 6]) -> i64 {
    let path = match path_arg(p, files::AT_FDCWD, a[0]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    match files::stat(&path, false) {
        Ok(st) if st.mode & 0o170000 == 0o040000 => {
            p.cwd = files::normalize(&path);
            0
        }
        Ok(_) => -ENOTDIR,
        Err(e) => e,
    }
}

const TCGETS: u64 = 0x5401;
const TCSETS: u64 = 0x5402;
const TCSETSW: u64 = 0x5403;
const TCSETSF: u64 = 0x5404;
const TIOCGWINSZ: u64 = 0x5413;

fn sys_ioctl(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, req, arg) = (a[0] as i32, a[1], a[2]);
    // FIONBIO: an int, non-zero for non-blocking: the description's O_NONBLOCK, on any kind
    // (as Linux).
    const FIONBIO: u64 = 0x5421;
    if req == FIONBIO {
        let Some(b) = p.image.space.read(arg, 4) else { return -EFAULT };
        let on = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != 0;
        return match p.files.desc_of(fd) {
            Some(d) => {
                d.flags = if on { d.flags | files::O_NONBLOCK } else { d.flags & !files::O_NONBLOCK };
                0
            }
            None => -EBADF,
        };
    }
    let tty = match p.files.desc(fd) {
        Some(d) => d.stream != Stream::None && !p.framed,
        None => return -EBADF,
    };
    if !tty {
        return -ENOTTY;
    }
    match req {
        TIOCGWINSZ => {
            // struct winsize: rows, cols, xpixel, ypixel (u16 each).
            let ws: [u16; 4] = [24, 80, 0, 0];
            let b: Vec<u8> = ws.iter().flat_map(|v| v.to_le_bytes()).collect();
            if p.image.space.put(arg, &b) { 0 } else { -EFAULT }
        }
        // The kernel's struct termios is 36 bytes (NCCS 19), not the C libraries' larger
        // one: glibc converts from a 36-byte copy on its stack, so writing more smashes it.
        TCGETS => {
            let t = p.files.termios;
            if p.image.space.put(arg, &t) { 0 } else { -EFAULT }
        }
        TCSETS | TCSETSW | TCSETSF => {
            // Kept and given back by TCGETS; the console has no line discipline to apply
            // it to (input comes as typed, output as written).
            let Some(b) = p.image.space.read(arg, files::TERMIOS_LEN as u64) else { return -EFAULT };
            p.files.termios.copy_from_slice(&b);
            0
        }
        _ => -ENOTTY,
    }
}

// ---------------------------------------------------------------------------------------
// Memory

const PROT_READ: u64 = 1;
const PROT_WRITE: u64 = 2;
const PROT_EXEC: u64 = 4;
const MAP_PRIVATE: u64 = 2;
const MAP_FIXED: u64 = 0x10;
const MAP_ANONYMOUS: u64 = 0x20;

fn sys_mmap(p: &mut Process, a: &[u64; 6]) -> i64 {
    // Anywhere in the window (the address is a hint we do not follow).
    let (len, prot, flags, fd, off) = (a[1], a[2], a[3], a[4] as i32, a[5]);
    let kind = flags & 3;
    if flags & MAP_FIXED != 0 || kind == 0 || prot & PROT_EXEC != 0 || len == 0 {
        return -EINVAL;
    }
    if flags & MAP_ANONYMOUS == 0 {
        return super::vm::mmap_file(p, len, prot, kind, fd, off);
    }
    if kind != MAP_PRIVATE {
        // Anonymous shared memory is shared only with children: none yet.
        return -EINVAL;
    }
    match p.image.space.mmaps.map(len, prot & (PROT_READ | PROT_WRITE)) {
        Ok(v) => v as i64,
        Err(e) => e,
    }
}

fn sys_munmap(p: &mut Process, a: &[u64; 6]) -> i64 {
    match p.image.space.mmaps.unmap(a[0], a[1]) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

fn sys_mprotect(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (addr, len, prot) = (a[0], a[1], a[2]);
    if prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 || addr % abi::PAGE_SIZE != 0 {
        return -EINVAL;
    }
    // In an mmap: changed as asked. In the image, stack or brk heap (musl makes its RELRO
    // part read-only): accepted as long as it is the program's memory, protections unchanged.
    match p.image.space.mmaps.protect(addr, len, prot) {
        Ok(true) => 0,
        // Not in the mmap window: the image, stack or brk heap.
        Ok(false) if p.image.space.ok(addr, len, false) => 0,
        Ok(false) => -ENOMEM,
        Err(e) => e,
    }
}

fn sys_brk(p: &mut Process, a: &[u64; 6]) -> i64 {
    super::load::set_brk(&mut p.image, a[0]) as i64
}

// ---------------------------------------------------------------------------------------
// Identity, signals, threads


fn sys_zero(_p: &mut Process, _a: &[u64; 6]) -> i64 {
    0
}

/// `setuid`/`setgid`: the program is root and stays root: id 0 is accepted (what a server's
/// `-u root` asks), -1 is `EINVAL` as on Linux, any other id `EPERM` (the ids are not kept).
fn sys_set_id(_p: &mut Process, a: &[u64; 6]) -> i64 {
    match a[0] as u32 {
        0 => 0,
        u32::MAX => -EINVAL,
        _ => -EPERM,
    }
}

/// `setgroups(size, list)`: Linux's checks (more than `NGROUPS_MAX` `EINVAL`, an unreadable
/// list `EFAULT`); the list is not kept (`getgroups` is not implemented).
fn sys_setgroups(p: &mut Process, a: &[u64; 6]) -> i64 {
    const NGROUPS_MAX: u64 = 65536;
    let n = a[0] as i32;
    if n < 0 || n as u64 > NGROUPS_MAX {
        return -EINVAL;
    }
    if n > 0 && p.image.space.read(a[1], n as u64 * 4).is_none() {
        return -EFAULT;
    }
    0
}

const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;

fn sys_arch_prctl(p: &mut Process, a: &[u64; 6]) -> i64 {
    match a[0] {
        ARCH_SET_FS => match crate::sys::linux_personality(abi::LINUX_SET_FS, a[1], 0, 0) {
            Ok(_) => {
                thread::me().fs_base.store(a[1], Ordering::Relaxed);
                0
            }
            Err(_) => -EPERM,
        },
        ARCH_GET_FS => {
            if p.image.space.put(a[1], &thread::me().fs_base.load(Ordering::Relaxed).to_le_bytes()) {
                0
            } else {
                -EFAULT
            }
        }
        _ => -EINVAL,
    }
}

fn sys_sched_yield(_f: &mut Frame) -> i64 {
    let _ = crate::sys::pcore_yield();
    0
}

const RLIMIT_STACK: u64 = 3;
const RLIMIT_NOFILE: u64 = 7;

fn sys_prlimit64(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, res, new, old) = (a[0] as i64, a[1], a[2], a[3]);
    if pid != 0 && pid != i64::from(p.procs.pid) {
        return -ESRCH;
    }
    if res > 15 {
        return -EINVAL;
    }
    if new != 0 {
        // Limits are fixed. Setting the descriptor limit to what it is or less is accepted
        // without effect (memcached sets it to its connection count at start and exits if
        // that fails); anything else, or more, is EPERM.
        let Some(b) = p.image.space.read(new, 16) else { return -EFAULT };
        let (cur, max) = (u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8])));
        if res != RLIMIT_NOFILE || cur > max || max > files::MAX_FDS as u64 {
            return -EPERM;
        }
    }
    let inf = u64::MAX;
    let (cur, max) = match res {
        RLIMIT_STACK => (super::load::STACK_SIZE, super::load::STACK_SIZE),
        RLIMIT_NOFILE => (files::MAX_FDS as u64, files::MAX_FDS as u64),
        _ => (inf, inf),
    };
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&cur.to_le_bytes());
    b[8..].copy_from_slice(&max.to_le_bytes());
    if old != 0 && !p.image.space.put(old, &b) {
        return -EFAULT;
    }
    0
}

fn sys_uname(p: &mut Process, a: &[u64; 6]) -> i64 {
    // struct utsname: six fields of 65 bytes.
    let mut u = [0u8; 390];
    for (i, f) in ["Linux", "manycore", "6.1.0-manycore-os", "#1 library OS Linux personality", "x86_64", "(none)"].iter().enumerate() {
        u[i * 65..i * 65 + f.len()].copy_from_slice(f.as_bytes());
    }
    if p.image.space.put(a[0], &u) { 0 } else { -EFAULT }
}

// ---------------------------------------------------------------------------------------
// Time and randomness

pub(super) fn now_ns() -> u64 {
    crate::time::now_ns()
}

fn sys_clock_gettime(p: &mut Process, a: &[u64; 6]) -> i64 {
    // Every clock counts from boot: there is no wall clock (CLOCK_REALTIME starts at 1970).
    if a[0] > 11 {
        return -EINVAL;
    }
    let t = now_ns();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(t / 1_000_000_000).to_le_bytes());
    b[8..].copy_from_slice(&(t % 1_000_000_000).to_le_bytes());
    if p.image.space.put(a[1], &b) { 0 } else { -EFAULT }
}

fn sys_gettimeofday(p: &mut Process, a: &[u64; 6]) -> i64 {
    let t = now_ns();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&(t / 1_000_000_000).to_le_bytes());
    b[8..].copy_from_slice(&((t % 1_000_000_000) / 1000).to_le_bytes());
    if a[0] != 0 && !p.image.space.put(a[0], &b) {
        return -EFAULT;
    }
    if a[1] != 0 && !p.image.space.put(a[1], &[0u8; 8]) {
        return -EFAULT;
    }
    0
}

/// `time(tloc)`: whole seconds of the same clock as `gettimeofday`, also stored at `tloc`
/// unless it is null (a bad one: `EFAULT`, as Linux).
fn sys_time(p: &mut Process, a: &[u64; 6]) -> i64 {
    let s = now_ns() / 1_000_000_000;
    if a[0] != 0 && !p.image.space.put(a[0], &s.to_le_bytes()) {
        return -EFAULT;
    }
    s as i64
}

/// Sleeps without the process lock (the program's other threads go on), until the time is
/// up or a signal with a handler (or one that ends the program) comes: then EINTR and what
/// was left, as Linux (no restart, whatever SA_RESTART says).
fn sys_nanosleep(f: &mut Frame) -> i64 {
    let (req, rem) = (f.rdi, f.rsi);
    let (end, psig) = {
        let g = lock_proc();
        let Some(p) = g.as_ref() else { return -ENOSYS };
        match read_timespec_ns(p, req) {
            Ok(total) => (now_ns().saturating_add(total), p.sig.slot),
            Err(e) => return e,
        }
    };
    sleep_until_ns(end, psig, rem)
}

/// `clock_nanosleep(clock, flags, req, rem)`: `nanosleep` on a clock, relative or (with
/// `TIMER_ABSTIME`) until `req` on that clock. Every clock here counts from boot
/// (`clock_gettime`), so the realtime, monotonic and boot-time clocks are one clock; the CPU-time
/// clocks and the others Linux refuses for sleeping are `EINVAL` (Linux sleeps on the
/// process CPU-time clock; not here: `EOPNOTSUPP`). An absolute sleep writes no remainder,
/// as Linux.
fn sys_clock_nanosleep(f: &mut Frame) -> i64 {
    const TIMER_ABSTIME: u64 = 1;
    const EOPNOTSUPP: i64 = 95;
    let (clock, flags, req, rem) = (f.rdi, f.rsi, f.rdx, f.r10);
    match clock {
        0 | 1 | 7 | 11 => {}  // REALTIME, MONOTONIC, BOOTTIME, TAI
        2 => return -EOPNOTSUPP, // PROCESS_CPUTIME_ID
        _ => return -EINVAL,
    }
    let (end, psig) = {
        let g = lock_proc();
        let Some(p) = g.as_ref() else { return -ENOSYS };
        match read_timespec_ns(p, req) {
            Ok(t) if flags & TIMER_ABSTIME != 0 => (t, p.sig.slot),
            Ok(t) => (now_ns().saturating_add(t), p.sig.slot),
            Err(e) => return e,
        }
    };
    sleep_until_ns(end, psig, if flags & TIMER_ABSTIME != 0 { 0 } else { rem })
}

/// A `struct timespec` at `addr` in nanoseconds: `EFAULT` if unreadable, `EINVAL` if negative
/// or its nanoseconds are out of range.
fn read_timespec_ns(p: &Process, addr: u64) -> Result<u64, i64> {
    let b = p.image.space.read(addr, 16).ok_or(-EFAULT)?;
    let (s, ns) = (i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])), i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8])));
    if s < 0 || !(0..1_000_000_000).contains(&ns) {
        return Err(-EINVAL);
    }
    Ok((s as u64).saturating_mul(1_000_000_000).saturating_add(ns as u64))
}

/// Sleep until `now_ns()` reaches `end`, without the process lock; a signal with a handler
/// (or one that ends the program) ends it with EINTR and, if `rem` is not 0, what was left
/// written there. Nothing is written at a normal end (as Linux).
fn sleep_until_ns(end: u64, psig: &'static signal::SignalSlot, rem: u64) -> i64 {
    let me = thread::me();
    loop {
        let (interrupted, until) = {
            let mut g = lock_proc();
            let Some(p) = g.as_mut() else { return -ENOSYS };
            signal::wait_check(p, end)
        };
        if interrupted {
            let left = end.saturating_sub(now_ns());
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&(left / 1_000_000_000).to_le_bytes());
            b[8..].copy_from_slice(&(left % 1_000_000_000).to_le_bytes());
            let g = lock_proc();
            let Some(p) = g.as_ref() else { return -ENOSYS };
            if rem != 0 && !p.image.space.put(rem, &b) {
                return -EFAULT;
            }
            return -EINTR;
        }
        if now_ns() >= end || thread::must_leave() {
            return 0;
        }
        super::futex::sleep_until_sig(me, Some(psig), until, || signal::pending_for_me(psig));
    }
}

/// splitmix64 over the time-stamp counter: unpredictable enough for hash seeds, not for keys.
pub fn random_u64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15) ^ crate::time::tsc();
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn sys_getrandom(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (buf, len, flags) = (a[0], a[1].min(1 << 25), a[2]);
    if flags & !7 != 0 {
        return -EINVAL;
    }
    let Some(d) = p.image.space.write(buf, len) else { return -EFAULT };
    let mut st = crate::time::tsc();
    for c in d.chunks_mut(8) {
        let v = random_u64(&mut st).to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
    len as i64
}
