//! The program's descriptor table: Linux's small integers, each naming the console (standard
//! input from a file the host provides, standard output and error to the host), a regular
//! file of the library OS's file system (`crate::fs`), or a directory being listed.

use alloc::string::String;
use alloc::vec::Vec;

use crate::fs::{self, Fd, FsError};
use linuxabi::errno::*;
use linuxabi::support::LinuxStat;

pub const AT_FDCWD: i32 = -100;
pub const AT_SYMLINK_NOFOLLOW: u32 = 0x100;
pub const AT_EMPTY_PATH: u32 = 0x1000;
pub const AT_NO_AUTOMOUNT: u32 = 0x800;
/// Descriptors a program may have open (`RLIMIT_NOFILE`).
pub const MAX_FDS: usize = 64;

const O_ACCMODE: u32 = 3;
const O_CREAT: u32 = 0o100;
const O_EXCL: u32 = 0o200;
const O_NOCTTY: u32 = 0o400;
const O_TRUNC: u32 = 0o1000;
const O_APPEND: u32 = 0o2000;
const O_NONBLOCK: u32 = 0o4000;
const O_LARGEFILE: u32 = 0o100000;
const O_DIRECTORY: u32 = 0o200000;
const O_NOFOLLOW: u32 = 0o400000;
const O_CLOEXEC: u32 = 0o2000000;

#[derive(Debug)]
pub enum Console {
    /// Standard input: the bytes of a file (or none) and how far it was read.
    In { data: Vec<u8>, at: usize },
    Out,
    Err,
}

#[derive(Debug)]
pub enum Desc {
    Console(Console),
    File { fd: Fd, path: String },
    Dir { path: String, entries: Vec<(u64, u8, Vec<u8>)>, at: usize },
    /// A TCP socket (`linux::net`).
    Socket(alloc::boxed::Box<super::net::Socket>),
    /// An eventfd: a library OS descriptor (`fd::eventfd`, private scope).
    Event(crate::fd::Fd),
    /// An epoll instance (`linux::epoll`).
    Epoll(alloc::boxed::Box<super::epoll::Epoll>),
}

pub struct Files {
    slots: Vec<Option<Desc>>,
}

impl Files {
    /// 0, 1, 2: the console; `stdin` is standard input's bytes.
    pub fn new(stdin: Vec<u8>) -> Files {
        let mut slots: Vec<Option<Desc>> = (0..MAX_FDS).map(|_| None).collect();
        slots[0] = Some(Desc::Console(Console::In { data: stdin, at: 0 }));
        slots[1] = Some(Desc::Console(Console::Out));
        slots[2] = Some(Desc::Console(Console::Err));
        Files { slots }
    }

    /// Close every file (at exit).
    pub fn close_all(&mut self) {
        for i in 0..MAX_FDS {
            let _ = close(self, i as i32);
        }
    }
}

pub fn desc(f: &Files, fd: i32) -> Option<&Desc> {
    f.slots.get(usize::try_from(fd).ok()?)?.as_ref()
}

/// Put `d` in the lowest free slot; its number, or `-EMFILE` (and `d` closed).
pub fn install(f: &mut Files, d: Desc) -> i64 {
    match free_slot(f) {
        Some(i) => {
            f.slots[i] = Some(d);
            i as i64
        }
        None => {
            release(d);
            -EMFILE
        }
    }
}

/// Close what a descriptor holds.
fn release(d: Desc) -> i64 {
    match d {
        Desc::File { fd, .. } => fs::close(fd).map(|_| 0).unwrap_or_else(errno),
        Desc::Socket(s) => s.close(),
        Desc::Event(l) => crate::fd::close(l).map(|_| 0).unwrap_or(-EIO),
        _ => 0,
    }
}

pub fn desc_mut(f: &mut Files, fd: i32) -> Option<&mut Desc> {
    f.slots.get_mut(usize::try_from(fd).ok()?)?.as_mut()
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
    match desc(f, fd) {
        Some(Desc::Dir { path, .. }) => Ok(path.clone()),
        Some(_) => Err(-ENOTDIR),
        None => Err(-EBADF),
    }
}

fn free_slot(f: &Files) -> Option<usize> {
    f.slots.iter().position(|s| s.is_none())
}

fn linux_stat(st: &fs::Stat) -> LinuxStat {
    LinuxStat { ino: u64::from(st.ino), nlink: u64::from(st.links), mode: u32::from(st.mode), uid: u32::from(st.uid), gid: u32::from(st.gid), size: st.size as i64, blocks: i64::from(st.blocks512), mtime: i64::from(st.mtime) }
}

pub fn stat(path: &str, nofollow: bool) -> Result<LinuxStat, i64> {
    let r = if nofollow { fs::lstat(path) } else { fs::stat(path) };
    r.map(|s| linux_stat(&s)).map_err(errno)
}

pub fn open(f: &mut Files, path: &str, flags: u32) -> i64 {
    let known = O_ACCMODE | O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC | O_APPEND | O_NONBLOCK | O_LARGEFILE | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    if flags & !known != 0 || flags & O_ACCMODE == 3 {
        return -EINVAL;
    }
    let Some(slot) = free_slot(f) else { return -EMFILE };
    let path = normalize(path);
    let existing = fs::stat(&path);
    if let Ok(st) = &existing {
        if u32::from(st.mode) & 0o170000 == 0o040000 {
            if flags & O_ACCMODE != 0 {
                return -EISDIR;
            }
            if flags & O_CREAT != 0 && flags & O_EXCL != 0 {
                return -EEXIST;
            }
            let entries = match fs::readdir(&path) {
                Ok(v) => v.into_iter().map(|e| (u64::from(e.ino), e.file_type, e.name)).collect(),
                Err(e) => return errno(e),
            };
            f.slots[slot] = Some(Desc::Dir { path, entries, at: 0 });
            return slot as i64;
        }
    }
    if flags & O_DIRECTORY != 0 {
        return if existing.is_ok() { -ENOTDIR } else { -ENOENT };
    }
    let mut ours = flags & O_ACCMODE;
    for (l, o) in [(O_CREAT, fs::O_CREAT), (O_EXCL, fs::O_EXCL), (O_TRUNC, fs::O_TRUNC), (O_APPEND, fs::O_APPEND)] {
        if flags & l != 0 {
            ours |= o;
        }
    }
    match fs::open(&path, ours) {
        Ok(fd) => {
            f.slots[slot] = Some(Desc::File { fd, path });
            slot as i64
        }
        Err(e) => errno(e),
    }
}

pub fn close(f: &mut Files, fd: i32) -> i64 {
    let Some(s) = usize::try_from(fd).ok().and_then(|i| f.slots.get_mut(i)) else { return -EBADF };
    match s.take() {
        Some(d) => release(d),
        None => -EBADF,
    }
}

pub fn read(f: &mut Files, fd: i32, dst: &mut [u8], at: Option<u64>) -> i64 {
    match desc_mut(f, fd) {
        Some(Desc::Console(Console::In { data, at: pos })) => {
            if at.is_some() {
                return -ESPIPE;
            }
            let n = dst.len().min(data.len() - *pos);
            dst[..n].copy_from_slice(&data[*pos..*pos + n]);
            *pos += n;
            n as i64
        }
        Some(Desc::Console(_)) => -EBADF,
        Some(Desc::File { fd, .. }) => {
            let r = match at {
                Some(off) => fs::pread(*fd, dst, off),
                None => fs::read(*fd, dst),
            };
            r.map(|n| n as i64).unwrap_or_else(errno)
        }
        Some(Desc::Dir { .. }) => -EISDIR,
        Some(Desc::Socket(s)) if at.is_none() => s.recv(dst, 0),
        Some(Desc::Event(l)) if at.is_none() => crate::fd::read(*l, dst).map(|n| n as i64).unwrap_or_else(super::net::errno),
        Some(Desc::Socket(_) | Desc::Event(_)) => -ESPIPE,
        Some(Desc::Epoll(_)) => -EINVAL,
        None => -EBADF,
    }
}

pub fn write(f: &mut Files, fd: i32, src: &[u8], framed: bool) -> i64 {
    match desc_mut(f, fd) {
        Some(Desc::Console(Console::Out)) => {
            super::out::write(1, src, framed);
            src.len() as i64
        }
        Some(Desc::Console(Console::Err)) => {
            super::out::write(2, src, framed);
            src.len() as i64
        }
        Some(Desc::Console(Console::In { .. })) => -EBADF,
        Some(Desc::File { fd, .. }) => fs::write(*fd, src).map(|n| n as i64).unwrap_or_else(errno),
        Some(Desc::Dir { .. }) => -EBADF,
        Some(Desc::Socket(s)) => s.send(src, 0),
        Some(Desc::Event(l)) => crate::fd::write(*l, src).map(|n| n as i64).unwrap_or_else(super::net::errno),
        Some(Desc::Epoll(_)) => -EINVAL,
        None => -EBADF,
    }
}

pub fn lseek(f: &mut Files, fd: i32, off: i64, whence: u32) -> i64 {
    match desc_mut(f, fd) {
        Some(Desc::File { fd, .. }) => {
            if whence > 2 {
                return -EINVAL;
            }
            fs::lseek(*fd, off, whence).map(|n| n as i64).unwrap_or_else(errno)
        }
        Some(Desc::Dir { at, .. }) if whence == 0 && off == 0 => {
            *at = 0;
            0
        }
        Some(Desc::Dir { .. }) => -EINVAL,
        Some(Desc::Console(_) | Desc::Socket(_) | Desc::Event(_) | Desc::Epoll(_)) => -ESPIPE,
        None => -EBADF,
    }
}

pub fn fstat(f: &Files, fd: i32) -> Result<LinuxStat, i64> {
    match desc(f, fd) {
        Some(Desc::File { fd, .. }) => fs::fstat(*fd).map(|s| linux_stat(&s)).map_err(errno),
        Some(Desc::Dir { path, .. }) => stat(path, false),
        // A character device, as a pipe-less console looks on Linux (mode 020620).
        Some(Desc::Console(_)) => Ok(LinuxStat { mode: 0o020620, nlink: 1, ..Default::default() }),
        Some(Desc::Socket(_)) => Ok(LinuxStat { mode: 0o140777, nlink: 1, ..Default::default() }),
        // An anonymous inode (eventfd, epoll), as Linux shows them: mode 0600, no type bits.
        Some(Desc::Event(_) | Desc::Epoll(_)) => Ok(LinuxStat { mode: 0o600, nlink: 1, ..Default::default() }),
        None => Err(-EBADF),
    }
}

/// `linux_dirent64` records of the entries not listed yet that fit in `dst`.
pub fn getdents64(f: &mut Files, fd: i32, dst: &mut [u8]) -> i64 {
    let Some(d) = desc_mut(f, fd) else { return -EBADF };
    let Desc::Dir { entries, at, .. } = d else { return -ENOTDIR };
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
