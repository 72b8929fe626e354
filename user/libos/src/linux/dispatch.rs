//! The Linux system-call dispatcher: every reflected `syscall` of the program lands here
//! (from `upcall.rs`) and runs by its Linux number. [`HANDLERS`] lists the numbers with a
//! handler; it must name exactly the numbers `linuxabi::support::SUPPORTED` lists, in order
//! (a compile-time check below), which is the table docs/linux-abi.md is written from. Any
//! other number is `-ENOSYS`, reported once per program on the console with its name.
//! Pointer arguments are checked against the program's memory (`mem::Space`): `-EFAULT`
//! before anything is touched.

use alloc::string::String;
use alloc::vec::Vec;

use linuxabi::errno::*;
use linuxabi::nr;
use percore::spin::TicketLock;

use super::files::{self, Desc, Files};
use super::load::Loaded;
use super::upcall::Frame;

/// Everything the dispatcher keeps about the running program.
pub struct Process {
    pub image: Loaded,
    pub files: Files,
    pub cwd: String,
    /// `Some(status)` once it called `exit`/`exit_group`.
    pub exit: Option<u64>,
    /// Numbers already reported as unimplemented (bit per number below 512; above, one bit).
    reported: [u64; 9],
    /// `rt_sigaction` records (32 bytes each), `rt_sigprocmask`'s mask.
    sigactions: [[u8; 32]; 65],
    sigmask: u64,
    fs_base: u64,
    tid_address: u64,
    /// Standard output and error go to the host as framed records (`out`), not as a terminal.
    pub framed: bool,
    /// System calls the program made.
    pub calls: u64,
}

impl Process {
    pub fn new(image: Loaded, files: Files, framed: bool) -> Process {
        Process { image, files, cwd: String::from("/"), exit: None, reported: [0; 9], sigactions: [[0; 32]; 65], sigmask: 0, fs_base: 0, tid_address: 0, framed, calls: 0 }
    }
}

pub static PROC: TicketLock<Option<Process>> = TicketLock::new(None);

type Handler = fn(&mut Process, &[u64; 6]) -> i64;

/// The handlers, by number (sorted).
pub const HANDLERS: &[(u64, Handler)] = &[
    (nr::READ, sys_read),
    (nr::WRITE, sys_write),
    (nr::OPEN, sys_open),
    (nr::CLOSE, sys_close),
    (nr::STAT, sys_stat),
    (nr::FSTAT, sys_fstat),
    (nr::LSTAT, sys_lstat),
    (nr::POLL, super::poll::sys_poll),
    (nr::LSEEK, sys_lseek),
    (nr::MMAP, sys_mmap),
    (nr::MPROTECT, sys_mprotect),
    (nr::MUNMAP, sys_munmap),
    (nr::BRK, sys_brk),
    (nr::RT_SIGACTION, sys_rt_sigaction),
    (nr::RT_SIGPROCMASK, sys_rt_sigprocmask),
    (nr::IOCTL, sys_ioctl),
    (nr::PREAD64, sys_pread64),
    (nr::READV, sys_readv),
    (nr::WRITEV, sys_writev),
    (nr::SELECT, super::poll::sys_select),
    (nr::SCHED_YIELD, sys_sched_yield),
    (nr::NANOSLEEP, sys_nanosleep),
    (nr::GETPID, sys_getpid),
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
    (nr::SETSOCKOPT, super::net::sys_setsockopt),
    (nr::GETSOCKOPT, super::net::sys_getsockopt),
    (nr::EXIT, sys_exit),
    (nr::UNAME, sys_uname),
    (nr::GETCWD, sys_getcwd),
    (nr::CHDIR, sys_chdir),
    (nr::GETTIMEOFDAY, sys_gettimeofday),
    (nr::GETUID, sys_zero),
    (nr::GETGID, sys_zero),
    (nr::GETEUID, sys_zero),
    (nr::GETEGID, sys_zero),
    (nr::GETPPID, sys_zero),
    (nr::ARCH_PRCTL, sys_arch_prctl),
    (nr::GETTID, sys_getpid),
    (nr::SCHED_GETAFFINITY, sys_sched_getaffinity),
    (nr::EPOLL_CREATE, super::epoll::sys_epoll_create),
    (nr::GETDENTS64, sys_getdents64),
    (nr::SET_TID_ADDRESS, sys_set_tid_address),
    (nr::CLOCK_GETTIME, sys_clock_gettime),
    (nr::EXIT_GROUP, sys_exit),
    (nr::EPOLL_WAIT, super::epoll::sys_epoll_wait),
    (nr::EPOLL_CTL, super::epoll::sys_epoll_ctl),
    (nr::OPENAT, sys_openat),
    (nr::NEWFSTATAT, sys_newfstatat),
    (nr::PSELECT6, super::poll::sys_pselect6),
    (nr::PPOLL, super::poll::sys_ppoll),
    (nr::EPOLL_PWAIT, super::epoll::sys_epoll_pwait),
    (nr::EVENTFD, super::net::sys_eventfd),
    (nr::ACCEPT4, super::net::sys_accept4),
    (nr::EVENTFD2, super::net::sys_eventfd2),
    (nr::EPOLL_CREATE1, super::epoll::sys_epoll_create1),
    (nr::PRLIMIT64, sys_prlimit64),
    (nr::GETRANDOM, sys_getrandom),
];

/// Numbers below this index the handler array; the rest are unknown.
const TABLE_LEN: usize = 512;

static TABLE: [Option<Handler>; TABLE_LEN] = {
    let mut t: [Option<Handler>; TABLE_LEN] = [None; TABLE_LEN];
    let mut i = 0;
    while i < HANDLERS.len() {
        t[HANDLERS[i].0 as usize] = Some(HANDLERS[i].1);
        i += 1;
    }
    t
};

// The handler list and the support table name the same numbers in the same order.
const _: () = {
    let s = linuxabi::support::SUPPORTED;
    assert!(s.len() == HANDLERS.len(), "linuxabi::support::SUPPORTED and HANDLERS differ in length");
    let mut i = 0;
    while i < s.len() {
        assert!(s[i].0 == HANDLERS[i].0, "linuxabi::support::SUPPORTED and HANDLERS name different numbers");
        i += 1;
    }
};

/// Called by the upcall stub with the program's registers.
pub extern "C" fn linux_dispatch(f: &mut Frame) {
    let nr = (f.nr_flags >> 32) as u32;
    let args = [f.rdi, f.rsi, f.rdx, f.r10, f.r8, f.r9];
    let mut g = PROC.lock();
    let Some(p) = g.as_mut() else {
        f.ret = -ENOSYS as u64;
        return;
    };
    p.calls += 1;
    let r = match TABLE.get(nr as usize) {
        Some(Some(h)) => h(p, &args),
        _ => unknown(p, nr),
    };
    f.ret = r as u64;
    let exit = p.exit;
    drop(g);
    if let Some(status) = exit {
        super::upcall::leave(status);
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
    files::write(&mut p.files, fd, src, p.framed)
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
    files::write(&mut p.files, a[0] as i32, &all, p.framed)
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
fn path_arg(p: &Process, dirfd: i32, addr: u64) -> Result<String, i64> {
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

fn sys_openat(p: &mut Process, a: &[u64; 6]) -> i64 {
    match path_arg(p, a[0] as i32, a[1]) {
        Ok(path) => files::open(&mut p.files, &path, a[2] as u32),
        Err(e) => e,
    }
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
const TIOCGWINSZ: u64 = 0x5413;

fn sys_ioctl(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, req, arg) = (a[0] as i32, a[1], a[2]);
    if let Some(Desc::Socket(s)) = files::desc_mut(&mut p.files, fd) {
        // FIONBIO: an int, non-zero for non-blocking.
        const FIONBIO: u64 = 0x5421;
        if req != FIONBIO {
            return -ENOTTY;
        }
        let Some(v) = p.image.space.get_u64(arg).map(|v| v as u32) else { return -EFAULT };
        s.set_nonblock(v != 0);
        return 0;
    }
    let tty = match files::desc(&p.files, fd) {
        Some(Desc::Console(_)) => !p.framed,
        Some(_) => false,
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
        TCGETS => {
            // struct termios (60 bytes): the serial console's cooked mode as Linux sets it.
            let mut t = [0u8; 60];
            t[0..4].copy_from_slice(&0x0500u32.to_le_bytes()); // c_iflag: ICRNL | IXON
            t[4..8].copy_from_slice(&0x0005u32.to_le_bytes()); // c_oflag: OPOST | ONLCR
            t[8..12].copy_from_slice(&0x00bfu32.to_le_bytes()); // c_cflag: B38400 | CS8 | CREAD
            t[12..16].copy_from_slice(&0x8a3bu32.to_le_bytes()); // c_lflag: ISIG | ICANON | ECHO...
            if p.image.space.put(arg, &t) { 0 } else { -EFAULT }
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
    // Anonymous private mappings anywhere (the address is a hint we do not follow).
    let (len, prot, flags) = (a[1], a[2], a[3]);
    if flags & MAP_ANONYMOUS == 0 {
        return -ENODEV; // file mappings are not built yet
    }
    if flags & MAP_FIXED != 0 || flags & 3 != MAP_PRIVATE || prot & PROT_EXEC != 0 {
        return -EINVAL;
    }
    if len == 0 {
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

/// The program's process (and thread) id: it is the only process of its runtime.
pub const PID: i64 = 1;

fn sys_getpid(_p: &mut Process, _a: &[u64; 6]) -> i64 {
    PID
}

fn sys_zero(_p: &mut Process, _a: &[u64; 6]) -> i64 {
    0
}

fn sys_exit(p: &mut Process, a: &[u64; 6]) -> i64 {
    p.exit = Some(a[0] & 0xff);
    0
}

fn sys_set_tid_address(p: &mut Process, a: &[u64; 6]) -> i64 {
    p.tid_address = a[0];
    PID
}

const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;

fn sys_arch_prctl(p: &mut Process, a: &[u64; 6]) -> i64 {
    match a[0] {
        ARCH_SET_FS => match crate::sys::linux_personality(abi::LINUX_SET_FS, a[1], 0, 0) {
            Ok(_) => {
                p.fs_base = a[1];
                0
            }
            Err(_) => -EPERM,
        },
        ARCH_GET_FS => {
            if p.image.space.put(a[1], &p.fs_base.to_le_bytes()) {
                0
            } else {
                -EFAULT
            }
        }
        _ => -EINVAL,
    }
}

fn sys_rt_sigaction(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (sig, act, old, size) = (a[0] as usize, a[1], a[2], a[3]);
    if size != 8 || sig == 0 || sig > 64 || (act != 0 && (sig == 9 || sig == 19)) {
        return -EINVAL;
    }
    if old != 0 && !p.image.space.ok(old, 32, true) {
        return -EFAULT;
    }
    let new = if act != 0 {
        match p.image.space.read(act, 32) {
            Some(b) => Some(<[u8; 32]>::try_from(b).unwrap_or([0; 32])),
            None => return -EFAULT,
        }
    } else {
        None
    };
    if old != 0 {
        let prev = p.sigactions[sig];
        p.image.space.put(old, &prev);
    }
    if let Some(n) = new {
        p.sigactions[sig] = n;
    }
    0
}

fn sys_rt_sigprocmask(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (how, set, old, size) = (a[0], a[1], a[2], a[3]);
    if size != 8 {
        return -EINVAL;
    }
    let new = if set != 0 {
        match p.image.space.get_u64(set) {
            Some(v) => Some(v),
            None => return -EFAULT,
        }
    } else {
        None
    };
    if old != 0 && !p.image.space.put(old, &p.sigmask.to_le_bytes()) {
        return -EFAULT;
    }
    // SIGKILL and SIGSTOP cannot be blocked.
    let unblockable = (1u64 << 8) | (1 << 18);
    if let Some(v) = new {
        p.sigmask = match how {
            0 => p.sigmask | v,
            1 => p.sigmask & !v,
            2 => v,
            _ => return -EINVAL,
        } & !unblockable;
    }
    0
}

fn sys_sched_yield(_p: &mut Process, _a: &[u64; 6]) -> i64 {
    let _ = crate::sys::pcore_yield();
    0
}

fn sys_sched_getaffinity(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, len, mask) = (a[0] as i64, a[1], a[2]);
    if pid != 0 && pid != PID {
        return -ESRCH;
    }
    if len < 8 || len % 8 != 0 {
        return -EINVAL;
    }
    // The program runs on this core only.
    let core = crate::core_id();
    let mut m = [0u8; 8];
    if core < 64 {
        m = (1u64 << core).to_le_bytes();
    }
    if p.image.space.put(mask, &m) { 8 } else { -EFAULT }
}

const RLIMIT_STACK: u64 = 3;
const RLIMIT_NOFILE: u64 = 7;

fn sys_prlimit64(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (pid, res, new, old) = (a[0] as i64, a[1], a[2], a[3]);
    if pid != 0 && pid != PID {
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

fn now_ns() -> u64 {
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

fn sys_nanosleep(p: &mut Process, a: &[u64; 6]) -> i64 {
    let Some(b) = p.image.space.read(a[0], 16) else { return -EFAULT };
    let (s, ns) = (i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])), i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8])));
    if s < 0 || !(0..1_000_000_000).contains(&ns) {
        return -EINVAL;
    }
    let total = (s as u64).saturating_mul(1_000_000_000).saturating_add(ns as u64);
    let end = now_ns().saturating_add(total);
    while now_ns() < end {
        let left_us = ((end - now_ns()) / 1000).clamp(1, abi::MAX_WAIT_US);
        if crate::sys::wait(0, left_us).is_err() {
            core::hint::spin_loop();
        }
    }
    if a[1] != 0 && !p.image.space.put(a[1], &[0u8; 16]) {
        return -EFAULT;
    }
    0
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
