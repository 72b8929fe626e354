//! The program's descriptor table: Linux's small integers over the library OS's one
//! descriptor model (`crate::fd`, docs/linux-abi.md "Descriptors").
//!
//! Each Linux descriptor is a slot holding an `fd::Fd` (an open file of the private
//! descriptor table, of any `fd::Kind`: the console, an `fs` file or directory, and through
//! the same calls a pipe end, a socket or an eventfd), its own `FD_CLOEXEC` flag, and the
//! index of a *Linux open file description* (`Desc`): what Linux keeps per `struct file` that
//! the descriptor layer does not (the status flags `O_APPEND`/`O_NONBLOCK` and the access
//! mode, which console stream it is, the path it was opened by, a directory's listing).
//! `dup` makes a new `fd::Fd` of the same open file (`fd::dup`: the offset stays shared) and
//! points the new slot at the same `Desc`, as Linux shares `struct file`.
//!
//! The console is `fd::Kind::Console`; what Linux programs see through it is this module's:
//! standard input is the byte string the runtime was given (`Files::stdin`) or, for the first
//! program of a boot, the serial console itself (`Files::console_in`), standard output
//! and error go to the host (`out`, framed records under the exec command).

use alloc::string::String;
use alloc::vec::Vec;

use crate::fd::{self, Kind, Scope};
use crate::fs::{self, FsError};
use abi::Error;
use linuxabi::errno::*;
use linuxabi::support::LinuxStat;

pub const AT_FDCWD: i32 = -100;
pub const AT_SYMLINK_NOFOLLOW: u32 = 0x100;
pub const AT_REMOVEDIR: u32 = 0x200;
pub const AT_SYMLINK_FOLLOW: u32 = 0x400;
pub const AT_EMPTY_PATH: u32 = 0x1000;
pub const AT_NO_AUTOMOUNT: u32 = 0x800;
/// Descriptors a program may have open (`RLIMIT_NOFILE`).
pub const MAX_FDS: usize = 64;

pub const O_ACCMODE: u32 = 3;
pub const O_RDONLY: u32 = 0;
pub const O_WRONLY: u32 = 1;
pub const O_RDWR: u32 = 2;
pub const O_CREAT: u32 = 0o100;
pub const O_EXCL: u32 = 0o200;
pub const O_NOCTTY: u32 = 0o400;
pub const O_TRUNC: u32 = 0o1000;
pub const O_APPEND: u32 = 0o2000;
pub const O_NONBLOCK: u32 = 0o4000;
pub const O_DSYNC: u32 = 0o10000;
pub const O_ASYNC: u32 = 0o20000;
pub const O_DIRECT: u32 = 0o40000;
pub const O_LARGEFILE: u32 = 0o100000;
pub const O_DIRECTORY: u32 = 0o200000;
pub const O_NOFOLLOW: u32 = 0o400000;
pub const O_NOATIME: u32 = 0o1000000;
pub const O_CLOEXEC: u32 = 0o2000000;
pub const O_SYNC: u32 = 0o4010000;
pub const O_PATH: u32 = 0o10000000;
pub const O_TMPFILE: u32 = 0o20200000;

/// The status flags `F_SETFL` may change (Linux's `SETFL_MASK` less what has no meaning here
/// but is still accepted and kept: `O_ASYNC`, `O_DIRECT`, `O_NOATIME`).
const SETFL: u32 = O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME;

/// Which console stream a console descriptor is, for the Linux program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard input: `Files::stdin`.
    In,
    /// Standard output or error: to the host (`out`), stream 1 or 2.
    Out(u8),
    /// Not the console.
    None,
}

/// A directory being listed by `getdents64`: its entries, read at the first call, and how
/// many were returned.
#[derive(Debug)]
pub struct DirList {
    pub entries: Vec<(u64, u8, Vec<u8>)>,
    pub at: usize,
}

/// A Linux open file description: what Linux keeps per `struct file` beside the descriptor
/// layer's open file (shared by every `dup` of it).
#[derive(Debug)]
pub struct Desc {
    /// Descriptors pointing here.
    refs: u32,
    /// The access mode and status flags (`F_GETFL`).
    pub flags: u32,
    pub stream: Stream,
    /// The absolute path it was opened by (empty for the console and for what has none).
    pub path: String,
    /// A directory: its listing (`None` until `getdents64` or for a non-directory).
    pub dir: Option<DirList>,
    pub is_dir: bool,
    /// A device file of [`DEVICES`] (`None` for everything else).
    pub dev: Option<Dev>,
    /// A socket: what Linux keeps of it beside the descriptor layer's socket (`net.rs`).
    pub sock: Option<alloc::boxed::Box<super::net::SockInfo>>,
    /// An epoll instance (`epoll.rs`), backed by a console descriptor of the descriptor layer
    /// as the devices are (its interest list is this layer's).
    pub epoll: Option<alloc::boxed::Box<super::epoll::Epoll>>,
    /// How many calls on it answered `EAGAIN` (wrapping): an edge-triggered epoll interest
    /// that sees it change treats what is ready next as a new edge (`epoll.rs`).
    pub drained: u32,
    /// A file's offset cell in the session's table once the description was carried across a
    /// `fork` (`proc::offset_cell_new`): parent and child then read, write and seek one
    /// offset, as Linux's processes share a `struct file`. `None`: the descriptor layer's
    /// own offset (private to this process).
    pub shared: Option<usize>,
}

/// A description is gone (its last descriptor closed): let go of its shared offset.
fn drop_desc(d: Desc) {
    if let Some(c) = d.shared {
        super::proc::offset_cell_unref(c);
    }
}

/// What an `install_with` adds to a new description.
pub enum Extra {
    Sock(alloc::boxed::Box<super::net::SockInfo>),
    Epoll(alloc::boxed::Box<super::epoll::Epoll>),
}

/// The character devices programs expect under `/dev`. They are not in the file system: `open`
/// and `stat` of their paths give them, backed by a console descriptor of the descriptor layer
/// (so `dup`, `close` and a fork's carrying treat them as any descriptor) whose reads and
/// writes this layer answers itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dev {
    /// Reads give end of file, writes are dropped.
    Null,
    /// Reads give zero bytes, writes are dropped.
    Zero,
    /// Reads give pseudo-random bytes (as `getrandom`), writes are dropped.
    Urandom,
}

/// Each device's path, Linux's (major, minor) and inode number given by `stat`.
const DEVICES: [(&str, Dev, u32, u32); 4] = [("/dev/null", Dev::Null, 1, 3), ("/dev/zero", Dev::Zero, 1, 5), ("/dev/urandom", Dev::Urandom, 1, 9), ("/dev/random", Dev::Urandom, 1, 8)];

/// The device at `path` (normalized), if any.
pub fn device(path: &str) -> Option<(Dev, u32, u32)> {
    DEVICES.iter().find(|d| d.0 == path).map(|d| (d.1, d.2, d.3))
}

const S_IFCHR: u32 = 0o020000;

/// What `stat` says of a device: a character device, mode 0666, owned by root, empty. The
/// inode number is made from the device numbers (Linux's are devtmpfs's, unrelated to ext2).
fn dev_stat(major: u32, minor: u32) -> LinuxStat {
    LinuxStat { ino: u64::from(major << 8 | minor) | 1 << 32, nlink: 1, mode: S_IFCHR | 0o666, uid: 0, gid: 0, size: 0, blocks: 0, mtime: 0 }
}

/// The size of the kernel's `struct termios` (`TCGETS`/`TCSETS`): four flag words, `c_line`,
/// `c_cc[19]`.
pub const TERMIOS_LEN: usize = 36;

/// The serial console's settings as Linux starts it: `ICRNL | IXON`, `OPOST | ONLCR`,
/// `B38400 | CS8 | CREAD | HUPCL`, `ISIG | ICANON | ECHO | ECHOE | ECHOK | ECHOCTL | ECHOKE |
/// IEXTEN`, line discipline 0, and Linux's `INIT_C_CC` (^C ^\\ DEL ^U ^D, VTIME 0, VMIN 1, ...).
pub const DEFAULT_TERMIOS: [u8; TERMIOS_LEN] = {
    let mut t = [0u8; TERMIOS_LEN];
    let words: [u32; 4] = [0x0500, 0x0005, 0x04bf, 0x8a3b];
    let mut i = 0;
    while i < 4 {
        let b = words[i].to_le_bytes();
        t[i * 4] = b[0];
        t[i * 4 + 1] = b[1];
        t[i * 4 + 2] = b[2];
        t[i * 4 + 3] = b[3];
        i += 1;
    }
    let cc: [u8; 17] = [3, 0x1c, 0x7f, 0x15, 4, 0, 1, 0, 0x11, 0x13, 0x1a, 0, 0x12, 0x0f, 0x17, 0x16, 0];
    let mut j = 0;
    while j < cc.len() {
        t[17 + j] = cc[j];
        j += 1;
    }
    t
};

/// One Linux descriptor.
#[derive(Debug)]
pub struct Slot {
    pub fd: fd::Fd,
    pub cloexec: bool,
    desc: usize,
}

pub struct Files {
    slots: Vec<Option<Slot>>,
    descs: Vec<Option<Desc>>,
    /// Standard input's bytes and how far they were read.
    stdin: Vec<u8>,
    stdin_at: usize,
    /// Standard input is the live console (the serial line) instead of `stdin`: a read
    /// waits for at least one byte typed (or sent) there. Set for a program run as the first
    /// program (`init=/PATH`), as a terminal is its input.
    pub console_in: bool,
    /// The console's terminal settings (the kernel's 36-byte `struct termios`) as `TCSETS`
    /// left them; a new process's are the serial console's cooked mode ([`DEFAULT_TERMIOS`]).
    pub termios: [u8; TERMIOS_LEN],
    /// Where the descriptors live: this context's private table (one thread on one core).
    scope: Scope,
    /// The file-creation mask (`umask`): process-wide in Linux (its `fs_struct`), kept here
    /// beside the descriptors every `*at` call resolves against.
    pub umask: u32,
}

pub fn errno_of(e: Error) -> i64 {
    -match e {
        Error::NotPermitted => EBADF,
        Error::NoSuchObject => EBADF,
        Error::WrongType => ESPIPE,
        Error::NoMemory => ENOMEM,
        Error::Busy => EMFILE,
        Error::InvalidArgument => EINVAL,
        Error::NotFound => ENOENT,
        Error::AlreadyExists => EEXIST,
        Error::NameTooLong => ENAMETOOLONG,
        Error::WouldBlock => EAGAIN,
        Error::BrokenPipe => EPIPE,
        Error::Unsupported => EINVAL,
        Error::BadAddress => EFAULT,
        _ => EIO,
    }
}

impl Files {
    /// 0, 1, 2: the console; `stdin` is standard input's bytes. `Err` if the descriptor
    /// layer cannot make them (what it made is closed).
    pub fn new(stdin: Vec<u8>) -> Result<Files, Error> {
        let mut f = Files { slots: (0..MAX_FDS).map(|_| None).collect(), descs: Vec::new(), stdin, stdin_at: 0, console_in: false, termios: DEFAULT_TERMIOS, scope: Scope::Private, umask: 0o022 };
        for (i, (stream, flags)) in [(Stream::In, O_RDONLY), (Stream::Out(1), O_WRONLY), (Stream::Out(2), O_WRONLY)].into_iter().enumerate() {
            let fd = match fd::open_console(f.scope) {
                Ok(fd) => fd,
                Err(e) => {
                    f.close_all();
                    return Err(e);
                }
            };
            let d = f.new_desc(Desc { refs: 0, flags, stream, path: String::new(), dir: None, is_dir: false, dev: None, sock: None, epoll: None, drained: 0, shared: None });
            f.put(i, fd, false, d);
        }
        Ok(f)
    }

    /// Close every descriptor (at exit).
    pub fn close_all(&mut self) {
        for i in 0..MAX_FDS {
            let _ = close(self, i as i32);
        }
    }

    /// Close the descriptors marked `FD_CLOEXEC` (for `execve`).
    pub fn close_on_exec(&mut self) {
        for i in 0..MAX_FDS {
            if self.slots[i].as_ref().is_some_and(|s| s.cloexec) {
                let _ = close(self, i as i32);
            }
        }
    }

    fn new_desc(&mut self, d: Desc) -> usize {
        match self.descs.iter().position(|d| d.is_none()) {
            Some(i) => {
                self.descs[i] = Some(d);
                i
            }
            None => {
                self.descs.push(Some(d));
                self.descs.len() - 1
            }
        }
    }

    fn put(&mut self, slot: usize, fd: fd::Fd, cloexec: bool, desc: usize) {
        if let Some(d) = self.descs[desc].as_mut() {
            d.refs += 1;
        }
        self.slots[slot] = Some(Slot { fd, cloexec, desc });
    }

    /// The descriptor `fd` (`None`: not open).
    pub fn slot(&self, fd: i32) -> Option<&Slot> {
        self.slots.get(usize::try_from(fd).ok()?)?.as_ref()
    }

    /// Descriptor `fd`'s open file description.
    pub fn desc(&self, fd: i32) -> Option<&Desc> {
        self.descs[self.slot(fd)?.desc].as_ref()
    }

    fn desc_mut(&mut self, fd: i32) -> Option<&mut Desc> {
        let i = self.slot(fd)?.desc;
        self.descs[i].as_mut()
    }

    /// The lowest free descriptor at or above `from`.
    fn free_slot(&self, from: usize) -> Option<usize> {
        (from..MAX_FDS).find(|&i| self.slots[i].is_none())
    }

    /// Install a newly opened `fd::Fd` with a new description in the lowest free slot; on
    /// `EMFILE` the descriptor is closed.
    pub fn install(&mut self, fd: fd::Fd, flags: u32, stream: Stream, path: String, is_dir: bool) -> i64 {
        let Some(slot) = self.free_slot(0) else {
            let _ = fd::close(fd);
            return -EMFILE;
        };
        let d = self.new_desc(Desc { refs: 0, flags: flags & !(O_CREAT | O_EXCL | O_TRUNC | O_NOCTTY | O_CLOEXEC), stream, path, dir: None, is_dir, dev: None, sock: None, epoll: None, drained: 0, shared: None });
        self.put(slot, fd, flags & O_CLOEXEC != 0, d);
        slot as i64
    }

    /// `install` of a socket or an epoll (`O_RDWR` plus `flags`' `O_NONBLOCK`/`O_CLOEXEC`).
    pub fn install_with(&mut self, fd: fd::Fd, flags: u32, extra: Extra) -> i64 {
        let n = self.install(fd, O_RDWR | (flags & (O_NONBLOCK | O_CLOEXEC)), Stream::None, String::new(), false);
        if n >= 0 {
            if let Some(d) = self.desc_mut(n as i32) {
                match extra {
                    Extra::Sock(x) => d.sock = Some(x),
                    Extra::Epoll(x) => d.epoll = Some(x),
                }
            }
        }
        n
    }

    /// A call on descriptor `fd` answered `EAGAIN` (`Desc::drained`).
    pub fn note_drained(&mut self, fd: i32) {
        if let Some(d) = self.desc_mut(fd) {
            d.drained = d.drained.wrapping_add(1);
        }
    }

    /// Descriptor `fd`'s description, to change (a socket's or epoll's state).
    pub fn desc_of(&mut self, fd: i32) -> Option<&mut Desc> {
        self.desc_mut(fd)
    }

    /// The scope new descriptors are made in.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// Before the program's first thread: move every descriptor into the process-wide table
    /// (`fd::dup` into `Scope::Process`, the private one closed) and make new ones there, so
    /// that the threads, each a context of its own, can use them (a private descriptor is its
    /// context's alone). Sockets move too: the process-wide table holds them, but their calls
    /// still answer only on the core whose stack has them (`WrongCore` elsewhere). On an
    /// error the descriptors moved so far stay moved (each is still the same open file).
    pub fn to_process_scope(&mut self) -> Result<(), Error> {
        if let Scope::Process = self.scope {
            return Ok(());
        }
        for i in 0..MAX_FDS {
            let Some(old) = self.slots[i].as_ref().map(|s| s.fd) else { continue };
            let new = fd::dup(old, Scope::Process)?;
            if let Some(s) = self.slots[i].as_mut() {
                s.fd = new;
            }
            let _ = fd::close(old);
        }
        self.scope = Scope::Process;
        Ok(())
    }

    /// Every open descriptor: `(number, open file, its description)` (a fork carries each to
    /// the child, `proc.rs`).
    pub fn open_fds(&self) -> Vec<(usize, fd::Fd, &Desc)> {
        (0..MAX_FDS).filter_map(|i| self.slots[i].as_ref().and_then(|s| Some((i, s.fd, self.descs[s.desc].as_ref()?)))).collect()
    }

    /// Before a `fork`: every open description of a file (not a directory) gets a shared
    /// offset cell (from its current offset) if it has none, and the cell one more holder for
    /// the child's copy of the description. Returns, per descriptor number, the cell counted
    /// for the child (once per description, at its lowest descriptor), so a fork that fails
    /// lets go of them (`proc::offset_cell_unref`).
    pub fn share_offsets_for_child(&mut self) -> Vec<(usize, usize)> {
        let mut counted: Vec<(usize, usize)> = Vec::new();
        let mut seen: Vec<usize> = Vec::new();
        for i in 0..MAX_FDS {
            let Some(s) = self.slots[i].as_ref() else { continue };
            let (ofd, di) = (s.fd, s.desc);
            if seen.contains(&di) {
                continue;
            }
            seen.push(di);
            let Some(d) = self.descs[di].as_mut() else { continue };
            if d.is_dir || d.path.is_empty() || d.dev.is_some() || !matches!(fd::kind(ofd), Ok(Kind::Fs(_))) {
                continue;
            }
            if d.shared.is_none() {
                let Ok(off) = fd::lseek(ofd, 0, fs::SEEK_CUR) else { continue };
                d.shared = super::proc::offset_cell_new(off);
            }
            if let Some(c) = d.shared {
                super::proc::offset_cell_ref(c);
                counted.push((i, c));
            }
        }
        counted
    }

    /// Descriptor `fd`'s open file becomes `new` in every descriptor of its description (a
    /// local socket that connects becomes a connection of the descriptor layer); the other
    /// descriptors get `dup`s of `new` (one that cannot is closed). Returns the open files
    /// replaced, for the caller to close.
    pub fn replace_open_file(&mut self, fd: i32, new: fd::Fd) -> Vec<fd::Fd> {
        let Some(desc) = self.slot(fd).map(|s| s.desc) else {
            let _ = fd::close(new);
            return Vec::new();
        };
        let mut old = Vec::new();
        let mut first = Some(new);
        for i in 0..MAX_FDS {
            let Some(s) = self.slots[i].as_ref() else { continue };
            if s.desc != desc {
                continue;
            }
            let next = match first.take() {
                Some(n) => Some(n),
                None => fd::dup(new, self.scope).ok(),
            };
            old.push(s.fd);
            match next {
                Some(n) => {
                    if let Some(s) = self.slots[i].as_mut() {
                        s.fd = n;
                    }
                }
                None => self.reseat(i, None),
            }
        }
        old
    }

    /// In a forked child: descriptor `i` is now `fd` (its copy names the parent's open file
    /// in the parent's private table, which this context can neither use nor close), or gone
    /// with `None` (a kind a child cannot be given: its description goes with its last slot).
    pub fn reseat(&mut self, i: usize, new: Option<fd::Fd>) {
        let Some(s) = self.slots.get_mut(i).and_then(|s| s.as_mut()) else { return };
        match new {
            Some(fd) => s.fd = fd,
            None => {
                let desc = s.desc;
                self.slots[i] = None;
                if let Some(d) = self.descs[desc].as_mut() {
                    d.refs -= 1;
                    if d.refs == 0 {
                        self.descs[desc].take().map(drop_desc);
                    }
                }
            }
        }
    }
}

pub fn errno(e: FsError) -> i64 {
    -match e {
        FsError::NotFound => ENOENT,
        FsError::NotDir => ENOTDIR,
        FsError::IsDir => EISDIR,
        FsError::NameTooLong => ENAMETOOLONG,
        FsError::InvalidArgument => EINVAL,
        FsError::NoSpace => ENOSPC,
        FsError::Exists => EEXIST,
        FsError::NotEmpty => ENOTEMPTY,
        FsError::BadDescriptor => EBADF,
        FsError::ReadOnly => EROFS,
        FsError::NoMemory => ENOMEM,
        FsError::TooManyLinks => ELOOP,
        _ => EIO,
    }
}

/// `a/b` with `.` and `..` resolved, absolute.
pub fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    let mut s = String::new();
    for p in &parts {
        s.push('/');
        s.push_str(p);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

pub fn join(base: &str, rel: &str) -> String {
    let mut s = String::from(base);
    s.push('/');
    s.push_str(rel);
    normalize(&s)
}

/// The path of directory descriptor `fd` (for `*at` calls).
pub fn dir_path(f: &Files, fd: i32) -> Result<String, i64> {
    match f.desc(fd) {
        Some(d) if d.is_dir => Ok(d.path.clone()),
        Some(_) => Err(-ENOTDIR),
        None => Err(-EBADF),
    }
}

pub fn linux_stat(st: &fs::Stat) -> LinuxStat {
    LinuxStat { ino: u64::from(st.ino), nlink: u64::from(st.links), mode: u32::from(st.mode), uid: u32::from(st.uid), gid: u32::from(st.gid), size: st.size as i64, blocks: i64::from(st.blocks512), mtime: i64::from(st.mtime) }
}

pub fn stat(path: &str, nofollow: bool) -> Result<LinuxStat, i64> {
    if let Some((_, major, minor)) = device(&normalize(path)) {
        return Ok(dev_stat(major, minor));
    }
    let r = if nofollow { fs::lstat(path) } else { fs::stat(path) };
    r.map(|s| linux_stat(&s)).map_err(errno)
}

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

/// `openat` of the absolute `path` (see docs/linux-abi.md "Descriptors").
pub fn open(f: &mut Files, path: &str, flags: u32) -> i64 {
    // Linux's `open` ignores flags it does not know, and access mode 3 opens for neither
    // reading nor writing (`ioctl` only): so here, where `read` and `write` refuse it.
    if flags & O_TMPFILE == O_TMPFILE {
        return -EOPNOTSUPP;
    }
    if f.free_slot(0).is_none() {
        return -EMFILE;
    }
    let path = normalize(path);
    if let Some((dev, _, _)) = device(&path) {
        if flags & O_DIRECTORY != 0 {
            return -ENOTDIR;
        }
        if flags & O_CREAT != 0 && flags & O_EXCL != 0 {
            return -EEXIST;
        }
        let fd = match fd::open_console(f.scope) {
            Ok(fd) => fd,
            Err(e) => return errno_of(e),
        };
        let n = f.install(fd, flags, Stream::None, path, false);
        if n >= 0 {
            if let Some(d) = f.desc_mut(n as i32) {
                d.dev = Some(dev);
            }
        }
        return n;
    }
    let existing = fs::lstat(&path);
    if let Ok(st) = &existing {
        let mode = u32::from(st.mode);
        if flags & O_CREAT != 0 && flags & O_EXCL != 0 {
            return -EEXIST;
        }
        if mode & S_IFMT == S_IFLNK {
            if flags & O_NOFOLLOW != 0 {
                return -ELOOP;
            }
        }
    }
    let target = fs::stat(&path);
    if let Ok(st) = &target {
        if u32::from(st.mode) & S_IFMT == S_IFDIR {
            if flags & O_ACCMODE != O_RDONLY || flags & O_CREAT != 0 {
                return -EISDIR;
            }
            return match fd::open(f.scope, &path, fs::O_RDONLY) {
                Ok(fd) => f.install(fd, flags, Stream::None, path, true),
                Err(e) => errno(e),
            };
        }
        if flags & O_DIRECTORY != 0 {
            return -ENOTDIR;
        }
    } else if flags & O_DIRECTORY != 0 && flags & O_CREAT == 0 {
        return target.map(|_| 0).unwrap_or_else(errno);
    }
    let mut ours = if flags & O_ACCMODE == 3 { fs::O_RDONLY } else { flags & O_ACCMODE };
    // O_APPEND is this layer's (it can change with F_SETFL): `write` seeks to the end.
    for (l, o) in [(O_CREAT, fs::O_CREAT), (O_EXCL, fs::O_EXCL), (O_TRUNC, fs::O_TRUNC)] {
        if flags & l != 0 {
            ours |= o;
        }
    }
    if flags & O_TRUNC != 0 && flags & O_ACCMODE == O_RDONLY {
        // Linux truncates even then; the file system wants a writable open for it.
        ours = (ours & !O_ACCMODE) | fs::O_RDWR;
    }
    match fd::open(f.scope, &path, ours) {
        Ok(fd) => f.install(fd, flags, Stream::None, path, false),
        Err(e) => errno(e),
    }
}

pub fn close(f: &mut Files, fd: i32) -> i64 {
    let Some(s) = usize::try_from(fd).ok().and_then(|i| f.slots.get_mut(i)) else { return -EBADF };
    let Some(slot) = s.take() else { return -EBADF };
    if let Some(d) = f.descs[slot.desc].as_mut() {
        d.refs -= 1;
        if d.refs == 0 {
            f.descs[slot.desc].take().map(drop_desc);
        }
    }
    match fd::close(slot.fd) {
        Ok(()) => 0,
        Err(e) => errno_of(e),
    }
}

/// A copy of descriptor `old` at `new` (closing what `new` was), or at the lowest free
/// descriptor at or above `min` when `new` is `None`; the copy's `FD_CLOEXEC` is `cloexec`.
pub fn dup(f: &mut Files, old: i32, new: Option<i32>, min: usize, cloexec: bool) -> i64 {
    let Some(s) = f.slot(old) else { return -EBADF };
    let (ofd, desc) = (s.fd, s.desc);
    let slot = match new {
        Some(n) => match usize::try_from(n) {
            Ok(n) if n < MAX_FDS => n,
            _ => return -EBADF,
        },
        None => match f.free_slot(min) {
            Some(i) => i,
            None => return -EMFILE,
        },
    };
    if new == Some(old) {
        return old as i64;
    }
    let nfd = match fd::dup(ofd, f.scope) {
        Ok(x) => x,
        Err(e) => return errno_of(e),
    };
    if f.slots[slot].is_some() {
        let _ = close(f, slot as i32);
    }
    f.put(slot, nfd, cloexec, desc);
    slot as i64
}

pub const F_DUPFD: u32 = 0;
pub const F_GETFD: u32 = 1;
pub const F_SETFD: u32 = 2;
pub const F_GETFL: u32 = 3;
pub const F_SETFL: u32 = 4;
pub const F_DUPFD_CLOEXEC: u32 = 1030;
const FD_CLOEXEC: u64 = 1;

/// `fcntl`'s descriptor commands; anything else is `-EINVAL`.
pub fn fcntl(f: &mut Files, fd: i32, cmd: u32, arg: u64) -> i64 {
    let Some(s) = f.slot(fd) else { return -EBADF };
    match cmd {
        F_DUPFD | F_DUPFD_CLOEXEC => {
            let min = arg as i32;
            if min < 0 || min as usize >= MAX_FDS {
                return -EINVAL;
            }
            dup(f, fd, None, min as usize, cmd == F_DUPFD_CLOEXEC)
        }
        F_GETFD => s.cloexec as i64,
        F_SETFD => {
            let c = arg & FD_CLOEXEC != 0;
            if let Some(s) = f.slots[fd as usize].as_mut() {
                s.cloexec = c;
            }
            0
        }
        F_GETFL => f.desc(fd).map_or(-EBADF, |d| (d.flags | O_LARGEFILE) as i64),
        F_SETFL => {
            let arg = arg as u32;
            if let Some(d) = f.desc_mut(fd) {
                d.flags = (d.flags & !SETFL) | (arg & SETFL);
            }
            0
        }
        _ => -EINVAL,
    }
}

pub fn read(f: &mut Files, fd: i32, dst: &mut [u8], at: Option<u64>) -> i64 {
    let r = read_inner(f, fd, dst, at);
    if r == -EAGAIN {
        f.note_drained(fd);
    }
    r
}

fn read_inner(f: &mut Files, fd: i32, dst: &mut [u8], at: Option<u64>) -> i64 {
    let Some(s) = f.slot(fd) else { return -EBADF };
    let ofd = s.fd;
    let Some(d) = f.descs[s.desc].as_ref() else { return -EBADF };
    if matches!(d.flags & O_ACCMODE, O_WRONLY | 3) {
        return -EBADF;
    }
    if d.is_dir {
        return -EISDIR;
    }
    if d.epoll.is_some() {
        return -EINVAL;
    }
    if d.sock.is_some() {
        return if at.is_some() { -ESPIPE } else { super::net::recv(f, fd, dst, 0) };
    }
    match d.dev {
        Some(Dev::Null) => return 0,
        Some(Dev::Zero) => {
            dst.fill(0);
            return dst.len() as i64;
        }
        Some(Dev::Urandom) => {
            let mut st = crate::time::tsc();
            for c in dst.chunks_mut(8) {
                let v = super::dispatch::random_u64(&mut st).to_le_bytes();
                c.copy_from_slice(&v[..c.len()]);
            }
            return dst.len() as i64;
        }
        None => {}
    }
    match d.stream {
        Stream::In => {
            if at.is_some() {
                return -ESPIPE;
            }
            if f.console_in {
                // The console has no end of input: a read waits for what is typed.
                return if dst.is_empty() { 0 } else { crate::console::read_blocking(dst, 0) as i64 };
            }
            let n = dst.len().min(f.stdin.len() - f.stdin_at);
            dst[..n].copy_from_slice(&f.stdin[f.stdin_at..f.stdin_at + n]);
            f.stdin_at += n;
            n as i64
        }
        Stream::Out(_) => -EBADF,
        Stream::None => {
            if d.flags & O_NONBLOCK != 0 && super::pipe::would_block(ofd, dst.len()) {
                return -EAGAIN;
            }
            let r = match (at, d.shared) {
                (Some(off), _) => fd::read_at(ofd, off, dst),
                // The offset parent and child share: one step on it under its lock.
                (None, Some(c)) => super::proc::with_offset_cell(c, |off| match fd::read_at(ofd, off, dst) {
                    Ok(n) => (off + n as u64, Ok(n)),
                    Err(e) => (off, Err(e)),
                }),
                (None, None) => fd::read(ofd, dst),
            };
            r.map(|n| n as i64).unwrap_or_else(errno_of)
        }
    }
}

/// Write `src` to `fd` (at `at`, its offset unchanged, for `pwrite64`).
pub fn write(f: &mut Files, fd: i32, src: &[u8], framed: bool, at: Option<u64>) -> i64 {
    let r = write_inner(f, fd, src, framed, at);
    if r == -EAGAIN {
        f.note_drained(fd);
    }
    r
}

fn write_inner(f: &mut Files, fd: i32, src: &[u8], framed: bool, at: Option<u64>) -> i64 {
    let Some(s) = f.slot(fd) else { return -EBADF };
    let ofd = s.fd;
    let Some(d) = f.descs[s.desc].as_ref() else { return -EBADF };
    if matches!(d.flags & O_ACCMODE, O_RDONLY | 3) {
        return -EBADF;
    }
    if d.dev.is_some() {
        return src.len() as i64;
    }
    if d.epoll.is_some() {
        return -EINVAL;
    }
    if d.sock.is_some() {
        return if at.is_some() { -ESPIPE } else { super::net::send(f, fd, src, 0) };
    }
    match d.stream {
        Stream::Out(n) => {
            if at.is_some() {
                return -ESPIPE;
            }
            super::out::write(u32::from(n), src, framed);
            src.len() as i64
        }
        Stream::In => -EBADF,
        Stream::None => {
            let r = match (at, d.shared) {
                (Some(off), _) => fd::write_at(ofd, off, src),
                (None, Some(c)) => {
                    let append = d.flags & O_APPEND != 0;
                    super::proc::with_offset_cell(c, |off| {
                        // O_APPEND: at the end as it is now (under the cell's lock, so two
                        // processes' appends do not overwrite each other).
                        let at = if append { fd::lseek(ofd, 0, fs::SEEK_END).unwrap_or(off) } else { off };
                        match fd::write_at(ofd, at, src) {
                            Ok(n) => (at + n as u64, Ok(n)),
                            Err(e) => (off, Err(e)),
                        }
                    })
                }
                (None, None) => {
                    if d.flags & O_APPEND != 0 {
                        if let Err(e) = fd::lseek(ofd, 0, fs::SEEK_END) {
                            if e != Error::WrongType {
                                return errno_of(e);
                            }
                        }
                    }
                    if d.flags & O_NONBLOCK != 0 && super::pipe::would_block(ofd, src.len()) {
                        return -EAGAIN;
                    }
                    fd::write(ofd, src)
                }
            };
            match r {
                Ok(n) => n as i64,
                Err(Error::BrokenPipe) => {
                    super::pipe::broken_pipe();
                    -EPIPE
                }
                // The file system's "no room" arrives as `NoMemory` through the descriptor
                // layer; for a file Linux says `ENOSPC`.
                Err(Error::NoMemory) if matches!(fd::kind(ofd), Ok(Kind::Fs(_))) => -ENOSPC,
                Err(e) => errno_of(e),
            }
        }
    }
}

pub fn lseek(f: &mut Files, fd: i32, off: i64, whence: u32) -> i64 {
    let Some(s) = f.slot(fd) else { return -EBADF };
    let ofd = s.fd;
    if whence > 2 {
        return -EINVAL;
    }
    let Some(d) = f.desc_mut(fd) else { return -EBADF };
    if d.stream != Stream::None {
        return -ESPIPE;
    }
    if d.dev.is_some() {
        // Linux's character devices here ignore the seek and report offset 0.
        return 0;
    }
    if d.is_dir {
        if whence == 0 && off == 0 {
            d.dir = None;
            return 0;
        }
        return -EINVAL;
    }
    let r = match d.shared {
        // The shared offset: the descriptor layer's own is set to it, then moved as asked
        // (its checks: a negative result is EINVAL), and the result shared again.
        Some(c) => super::proc::with_offset_cell(c, |cur| {
            let r = fd::lseek(ofd, cur as i64, fs::SEEK_SET).and_then(|_| fd::lseek(ofd, off, whence));
            match r {
                Ok(n) => (n, Ok(n)),
                Err(e) => (cur, Err(e)),
            }
        }),
        None => fd::lseek(ofd, off, whence),
    };
    match r {
        Ok(n) => n as i64,
        Err(Error::InvalidArgument) => -EINVAL,
        Err(e) => errno_of(e),
    }
}

pub fn fstat(f: &Files, fd: i32) -> Result<LinuxStat, i64> {
    let s = f.slot(fd).ok_or(-EBADF)?;
    if let Some((_, major, minor)) = f.desc(fd).and_then(|d| d.dev).and_then(|_| device(&f.desc(fd)?.path)) {
        return Ok(dev_stat(major, minor));
    }
    if f.desc(fd).is_some_and(|d| d.epoll.is_some()) {
        // An anonymous inode, as Linux shows an epoll: mode 0600, no type bits.
        return Ok(LinuxStat { mode: 0o600, nlink: 1, ..Default::default() });
    }
    fd::fstat(s.fd).map(|st| linux_stat(&st)).map_err(errno_of)
}

/// `linux_dirent64` records of the entries not listed yet that fit in `dst`.
pub fn getdents64(f: &mut Files, fd: i32, dst: &mut [u8]) -> i64 {
    let Some(d) = f.desc_mut(fd) else { return -EBADF };
    if !d.is_dir {
        return -ENOTDIR;
    }
    if d.dir.is_none() {
        match fs::readdir(&d.path) {
            Ok(v) => d.dir = Some(DirList { entries: v.into_iter().map(|e| (u64::from(e.ino), e.file_type, e.name)).collect(), at: 0 }),
            Err(e) => return errno(e),
        }
    }
    let Some(DirList { entries, at }) = d.dir.as_mut() else { return -EBADF };
    let mut used = 0usize;
    while *at < entries.len() {
        let (ino, ft, name) = &entries[*at];
        let reclen = (19 + name.len() + 1).next_multiple_of(8);
        if used + reclen > dst.len() {
            if used == 0 {
                return -EINVAL;
            }
            break;
        }
        let r = &mut dst[used..used + reclen];
        r.fill(0);
        r[0..8].copy_from_slice(&ino.to_le_bytes());
        r[8..16].copy_from_slice(&((*at + 1) as i64).to_le_bytes());
        r[16..18].copy_from_slice(&(reclen as u16).to_le_bytes());
        // ext2 file types to Linux's DT_*: regular 8, directory 4, symbolic link 10.
        r[18] = match ft {
            1 => 8,
            2 => 4,
            3 => 2,
            4 => 6,
            5 => 1,
            6 => 12,
            7 => 10,
            _ => 0,
        };
        r[19..19 + name.len()].copy_from_slice(name);
        used += reclen;
        *at += 1;
    }
    used as i64
}
