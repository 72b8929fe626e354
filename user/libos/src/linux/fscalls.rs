//! The Linux file calls that create, change and remove names and attributes, and the
//! descriptor calls (`dup*`, `fcntl`): `mkdirat`, `unlinkat`, `renameat2`, `linkat`,
//! `symlinkat`, `readlinkat`, `fchmodat`, `fchownat`, `utimensat`, `truncate`, `fsync`,
//! `umask`, `statfs`, `statx`, `faccessat` and their older forms, on the library OS's ext2
//! file system (`crate::fs`). Paths are made absolute against the working directory or a
//! directory descriptor (`dispatch::path_arg`); every pointer is checked before anything
//! changes (`-EFAULT`).

use alloc::string::String;
use alloc::vec::Vec;

use linuxabi::errno::*;

use super::dispatch::{path_arg, Process};
use super::files::{self, errno, AT_EMPTY_PATH, AT_FDCWD, AT_NO_AUTOMOUNT, AT_REMOVEDIR, AT_SYMLINK_FOLLOW, AT_SYMLINK_NOFOLLOW};
use crate::fd::{self, Kind};
use crate::fs;

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

fn at(a: u64) -> i32 {
    a as i32
}

/// The `fs` descriptor behind Linux descriptor `fd`: `Err(-EBADF)` if it is not open,
/// `Err(other)` if it is open but not a file of the file system.
fn fs_fd(p: &Process, fd: i32, other: i64) -> Result<fs::Fd, i64> {
    let s = p.files.slot(fd).ok_or(-EBADF)?;
    match fd::kind(s.fd) {
        Ok(Kind::Fs(i)) => Ok(fs::Fd(i)),
        Ok(_) => Err(other),
        Err(_) => Err(-EBADF),
    }
}

/// The path of an open descriptor (`-EBADF` if not open; `other` if it has none).
fn fd_path(p: &Process, fd: i32, other: i64) -> Result<String, i64> {
    let d = p.files.desc(fd).ok_or(-EBADF)?;
    if d.path.is_empty() {
        Err(other)
    } else {
        Ok(d.path.clone())
    }
}

fn kind_of(path: &str) -> Option<u32> {
    fs::lstat(path).ok().map(|s| u32::from(s.mode) & S_IFMT)
}

// ---------------------------------------------------------------------------------------
// Creating and opening

pub fn sys_creat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let flags = files::O_CREAT | files::O_WRONLY | files::O_TRUNC;
    super::dispatch::sys_openat(p, &[AT_FDCWD as u64, a[0], u64::from(flags), a[1], 0, 0])
}

/// The permission bits a new file or directory gets: `mode` less the umask.
fn perm(p: &Process, mode: u64) -> u16 {
    (mode as u32 & 0o7777 & !p.files.umask) as u16
}

/// Give a name just made the permissions asked for, when the file system's default differs.
fn set_perm(path: &str, want: u16, default: u16) -> i64 {
    if want == default {
        return 0;
    }
    fs::set_attr(path, false, Some(want), None, None).map(|_| 0).unwrap_or_else(errno)
}

pub fn sys_mkdir(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_mkdirat(p, &[AT_FDCWD as u64, a[0], a[1], 0, 0, 0])
}

pub fn sys_mkdirat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let path = match path_arg(p, at(a[0]), a[1]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let want = perm(p, a[2]);
    if let Err(e) = fs::mkdir(&path) {
        return errno(e);
    }
    set_perm(&path, want, 0o755)
}

/// After an `openat` that may have made the file: its permissions as asked.
pub fn after_create(p: &Process, path: &str, existed: bool, mode: u64) {
    if !existed {
        let _ = set_perm(path, perm(p, mode), 0o644);
    }
}

// ---------------------------------------------------------------------------------------
// Removing and renaming

pub fn sys_unlink(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_unlinkat(p, &[AT_FDCWD as u64, a[0], 0, 0, 0, 0])
}

pub fn sys_rmdir(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_unlinkat(p, &[AT_FDCWD as u64, a[0], u64::from(AT_REMOVEDIR), 0, 0, 0])
}

pub fn sys_unlinkat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let flags = a[2] as u32;
    if flags & !AT_REMOVEDIR != 0 {
        return -EINVAL;
    }
    let path = match path_arg(p, at(a[0]), a[1]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if flags & AT_REMOVEDIR != 0 {
        if path == "/" {
            return -EBUSY;
        }
        if path.ends_with("/.") || raw_ends_with_dot(p, a[1]) {
            return -EINVAL;
        }
        return match kind_of(&path) {
            None => -ENOENT,
            Some(S_IFDIR) => fs::rmdir(&path).map(|_| 0).unwrap_or_else(errno),
            Some(_) => -ENOTDIR,
        };
    }
    match kind_of(&path) {
        None => -ENOENT,
        Some(S_IFDIR) => -EISDIR,
        Some(_) => fs::unlink(&path).map(|_| 0).unwrap_or_else(errno),
    }
}

/// Whether the path as the program wrote it ends in `.` (`rmdir("a/.")` is `EINVAL`).
fn raw_ends_with_dot(p: &Process, addr: u64) -> bool {
    p.image.space.cstr(addr, 4095).is_ok_and(|s| s == b"." || s.ends_with(b"/."))
}

pub fn sys_rename(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_renameat2(p, &[AT_FDCWD as u64, a[0], AT_FDCWD as u64, a[1], 0, 0])
}

pub fn sys_renameat(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_renameat2(p, &[a[0], a[1], a[2], a[3], 0, 0])
}

const RENAME_NOREPLACE: u32 = 1;
const RENAME_EXCHANGE: u32 = 2;
const RENAME_WHITEOUT: u32 = 4;

pub fn sys_renameat2(p: &mut Process, a: &[u64; 6]) -> i64 {
    let flags = a[4] as u32;
    if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 || flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0 {
        return -EINVAL;
    }
    let (old, new) = match (path_arg(p, at(a[0]), a[1]), path_arg(p, at(a[2]), a[3])) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    if flags & (RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
        // Atomic exchange and whiteouts need the file system's help: not built.
        return -EINVAL;
    }
    let (ok, nk) = (kind_of(&old), kind_of(&new));
    let Some(ok) = ok else { return -ENOENT };
    if flags & RENAME_NOREPLACE != 0 && nk.is_some() {
        return -EEXIST;
    }
    if old == new {
        return 0;
    }
    match nk {
        Some(S_IFDIR) if ok != S_IFDIR => return -EISDIR,
        Some(k) if k != S_IFDIR && ok == S_IFDIR => return -ENOTDIR,
        _ => {}
    }
    if ok == S_IFDIR && new.starts_with(&old) && new.as_bytes().get(old.len()) == Some(&b'/') {
        return -EINVAL;
    }
    fs::rename(&old, &new).map(|_| 0).unwrap_or_else(errno)
}

// ---------------------------------------------------------------------------------------
// Links

pub fn sys_link(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_linkat(p, &[AT_FDCWD as u64, a[0], AT_FDCWD as u64, a[1], 0, 0])
}

pub fn sys_linkat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let flags = a[4] as u32;
    if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
        return -EINVAL;
    }
    let (mut old, new) = match (path_arg(p, at(a[0]), a[1]), path_arg(p, at(a[2]), a[3])) {
        (Ok(o), Ok(n)) => (o, n),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    match kind_of(&old) {
        None => return -ENOENT,
        Some(S_IFDIR) => return -EPERM,
        Some(S_IFLNK) if flags & AT_SYMLINK_FOLLOW != 0 => {
            // Link the target (the file system links names, not inodes).
            match fs::readlink(&old) {
                Ok(t) => {
                    let t = String::from_utf8_lossy(&t).into_owned();
                    let dir: String = old.rsplit_once('/').map_or("/", |(d, _)| if d.is_empty() { "/" } else { d }).into();
                    old = if t.starts_with('/') { files::normalize(&t) } else { files::join(&dir, &t) };
                }
                Err(e) => return errno(e),
            }
        }
        _ => {}
    }
    if kind_of(&new).is_some() {
        return -EEXIST;
    }
    fs::link(&old, &new).map(|_| 0).unwrap_or_else(errno)
}

pub fn sys_symlink(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_symlinkat(p, &[a[0], AT_FDCWD as u64, a[1], 0, 0, 0])
}

pub fn sys_symlinkat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let target = match p.image.space.cstr(a[0], 4095) {
        Ok(t) => Vec::from(t),
        Err(e) => return e,
    };
    let path = match path_arg(p, at(a[1]), a[2]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if target.is_empty() {
        return -ENOENT;
    }
    let Ok(target) = core::str::from_utf8(&target) else { return -EINVAL };
    if kind_of(&path).is_some() {
        return -EEXIST;
    }
    fs::symlink(target, &path).map(|_| 0).unwrap_or_else(errno)
}

pub fn sys_readlink(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_readlinkat(p, &[AT_FDCWD as u64, a[0], a[1], a[2], 0, 0])
}

pub fn sys_readlinkat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (buf, len) = (a[2], a[3] as i64);
    if len <= 0 {
        return -EINVAL;
    }
    let path = match path_arg(p, at(a[0]), a[1]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    match kind_of(&path) {
        None => return -ENOENT,
        Some(S_IFLNK) => {}
        Some(_) => return -EINVAL,
    }
    let t = match fs::readlink(&path) {
        Ok(t) => t,
        Err(e) => return errno(e),
    };
    let n = t.len().min(len as usize);
    if p.image.space.put(buf, &t[..n]) {
        n as i64
    } else {
        -EFAULT
    }
}

// ---------------------------------------------------------------------------------------
// Attributes

/// The path an `*at` attribute call names: `AT_EMPTY_PATH` with `""` is the descriptor itself.
fn attr_path(p: &Process, dirfd: i32, addr: u64, flags: u32) -> Result<String, i64> {
    if flags & AT_EMPTY_PATH != 0 && p.image.space.read(addr, 1).is_some_and(|b| b[0] == 0) {
        if dirfd == AT_FDCWD {
            return Ok(p.cwd.clone());
        }
        return fd_path(p, dirfd, -EBADF);
    }
    path_arg(p, dirfd, addr)
}

pub fn sys_chmod(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_fchmodat(p, &[AT_FDCWD as u64, a[0], a[1], 0, 0, 0])
}

pub fn sys_fchmod(p: &mut Process, a: &[u64; 6]) -> i64 {
    match fd_path(p, a[0] as i32, -EINVAL) {
        Ok(path) => fs::set_attr(&path, true, Some((a[1] & 0o7777) as u16), None, None).map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

pub fn sys_fchmodat(p: &mut Process, a: &[u64; 6]) -> i64 {
    // The system call has no flags argument (glibc's AT_SYMLINK_NOFOLLOW is fchmodat2).
    match path_arg(p, at(a[0]), a[1]) {
        Ok(path) => fs::set_attr(&path, true, Some((a[2] & 0o7777) as u16), None, None).map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

/// New owner and group from `chown`'s arguments (-1: unchanged); ext2's are 16 bits here.
fn owner(path: &str, follow: bool, uid: u64, gid: u64) -> Result<Option<(u16, u16)>, i64> {
    let (uid, gid) = (uid as u32, gid as u32);
    if uid == u32::MAX && gid == u32::MAX {
        return Ok(None);
    }
    if (uid != u32::MAX && uid > 0xffff) || (gid != u32::MAX && gid > 0xffff) {
        return Err(-EINVAL);
    }
    let st = if follow { fs::stat(path) } else { fs::lstat(path) }.map_err(errno)?;
    Ok(Some((if uid == u32::MAX { st.uid } else { uid as u16 }, if gid == u32::MAX { st.gid } else { gid as u16 })))
}

fn chown_path(path: &str, follow: bool, uid: u64, gid: u64) -> i64 {
    match owner(path, follow, uid, gid) {
        Ok(Some(o)) => fs::set_attr(path, follow, None, Some(o), None).map(|_| 0).unwrap_or_else(errno),
        Ok(None) => if follow { fs::stat(path) } else { fs::lstat(path) }.map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

pub fn sys_chown(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_fchownat(p, &[AT_FDCWD as u64, a[0], a[1], a[2], 0, 0])
}

pub fn sys_lchown(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_fchownat(p, &[AT_FDCWD as u64, a[0], a[1], a[2], u64::from(AT_SYMLINK_NOFOLLOW), 0])
}

pub fn sys_fchown(p: &mut Process, a: &[u64; 6]) -> i64 {
    match fd_path(p, a[0] as i32, -EINVAL) {
        Ok(path) => chown_path(&path, true, a[1], a[2]),
        Err(e) => e,
    }
}

pub fn sys_fchownat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let flags = a[4] as u32;
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return -EINVAL;
    }
    match attr_path(p, at(a[0]), a[1], flags) {
        Ok(path) => chown_path(&path, flags & AT_SYMLINK_NOFOLLOW == 0, a[2], a[3]),
        Err(e) => e,
    }
}

const UTIME_NOW: i64 = (1 << 30) - 1;
const UTIME_OMIT: i64 = (1 << 30) - 2;

pub fn sys_utimensat(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (dirfd, pathp, times, flags) = (at(a[0]), a[1], a[2], a[3] as u32);
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return -EINVAL;
    }
    // The modification time asked for (access times are not kept): `None` leaves it.
    let now = (super::dispatch::now_ns() / 1_000_000_000) as u32;
    let mtime = if times == 0 {
        Some(now)
    } else {
        let Some(b) = p.image.space.read(times, 32) else { return -EFAULT };
        let w = |o: usize| i64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        for ns in [w(8), w(24)] {
            if ns != UTIME_NOW && ns != UTIME_OMIT && !(0..1_000_000_000).contains(&ns) {
                return -EINVAL;
            }
        }
        // times[1] is the modification time: seconds at 16, nanoseconds at 24.
        match (w(16), w(24)) {
            (_, UTIME_OMIT) => None,
            (_, UTIME_NOW) => Some(now),
            (s, _) if s < 0 => return -EINVAL,
            (s, _) => Some(s.min(u32::MAX as i64) as u32),
        }
    };
    let path = if pathp == 0 {
        // utimensat(fd, NULL, ...) is futimens.
        if dirfd == AT_FDCWD {
            return -EFAULT;
        }
        fd_path(p, dirfd, -EBADF)
    } else {
        attr_path(p, dirfd, pathp, flags)
    };
    let path = match path {
        Ok(x) => x,
        Err(e) => return e,
    };
    let follow = flags & AT_SYMLINK_NOFOLLOW == 0;
    match mtime {
        Some(t) => fs::set_attr(&path, follow, None, None, Some(t)).map(|_| 0).unwrap_or_else(errno),
        None => if follow { fs::stat(&path) } else { fs::lstat(&path) }.map(|_| 0).unwrap_or_else(errno),
    }
}

pub fn sys_umask(p: &mut Process, a: &[u64; 6]) -> i64 {
    let old = p.files.umask;
    p.files.umask = a[0] as u32 & 0o777;
    i64::from(old)
}

pub fn sys_access(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_faccessat2(p, &[AT_FDCWD as u64, a[0], a[1], 0, 0, 0])
}

pub fn sys_faccessat(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_faccessat2(p, &[a[0], a[1], a[2], 0, 0, 0])
}

const AT_EACCESS: u32 = 0x200;

pub fn sys_faccessat2(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (mode, flags) = (a[2] as u32, a[3] as u32);
    if mode & !7 != 0 || flags & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
        return -EINVAL;
    }
    let path = match attr_path(p, at(a[0]), a[1], flags) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let st = match files::stat(&path, flags & AT_SYMLINK_NOFOLLOW != 0) {
        Ok(s) => s,
        Err(e) => return e,
    };
    // The program runs as root: reading and writing are always allowed; executing needs an
    // execute bit somewhere (or a directory).
    if mode & 1 != 0 && st.mode & S_IFMT != S_IFDIR && st.mode & 0o111 == 0 {
        return -EACCES;
    }
    0
}

// ---------------------------------------------------------------------------------------
// Sizes and syncing

pub fn sys_truncate(p: &mut Process, a: &[u64; 6]) -> i64 {
    let len = a[1] as i64;
    let path = match path_arg(p, AT_FDCWD, a[0]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if len < 0 {
        return -EINVAL;
    }
    match files::stat(&path, false) {
        Ok(st) if st.mode & S_IFMT == S_IFDIR => -EISDIR,
        Ok(st) if st.mode & S_IFMT != S_IFREG => -EINVAL,
        Ok(_) => fs::truncate(&path, len as u64).map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

pub fn sys_ftruncate(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, len) = (a[0] as i32, a[1] as i64);
    let Some(d) = p.files.desc(fd) else { return -EBADF };
    if len < 0 || d.is_dir || d.flags & files::O_ACCMODE == files::O_RDONLY {
        return -EINVAL;
    }
    match fs_fd(p, fd, -EINVAL) {
        Ok(f) => fs::ftruncate(f, len as u64).map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

pub fn sys_fsync(p: &mut Process, a: &[u64; 6]) -> i64 {
    match fs_fd(p, a[0] as i32, -EINVAL) {
        Ok(f) => fs::fsync(f).map(|_| 0).unwrap_or_else(errno),
        Err(e) => e,
    }
}

// ---------------------------------------------------------------------------------------
// statfs, statx

const EXT2_SUPER_MAGIC: u64 = 0xEF53;

fn statfs_bytes() -> Result<[u8; 120], i64> {
    let u = fs::df().map_err(errno)?;
    let mut b = [0u8; 120];
    let fields = [EXT2_SUPER_MAGIC, u.block_size, u.blocks, u.free_blocks, u.free_blocks, u.inodes, u.free_inodes, 0, 255, u.block_size, 0];
    for (i, v) in fields.iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    Ok(b)
}

pub fn sys_statfs(p: &mut Process, a: &[u64; 6]) -> i64 {
    let path = match path_arg(p, AT_FDCWD, a[0]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if !p.image.space.ok(a[1], 120, true) {
        return -EFAULT;
    }
    if let Err(e) = files::stat(&path, false) {
        return e;
    }
    match statfs_bytes() {
        Ok(b) => {
            p.image.space.put(a[1], &b);
            0
        }
        Err(e) => e,
    }
}

pub fn sys_fstatfs(p: &mut Process, a: &[u64; 6]) -> i64 {
    if p.files.slot(a[0] as i32).is_none() {
        return -EBADF;
    }
    if !p.image.space.ok(a[1], 120, true) {
        return -EFAULT;
    }
    match statfs_bytes() {
        Ok(b) => {
            p.image.space.put(a[1], &b);
            0
        }
        Err(e) => e,
    }
}

const AT_STATX_SYNC_TYPE: u32 = 0x6000;
const STATX_RESERVED: u32 = 0x8000_0000;
/// What `statx` fills: type, mode, nlink, uid, gid, atime, mtime, ctime, ino, size, blocks.
const STATX_BASIC_STATS: u32 = 0x7ff;

pub fn sys_statx(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (dirfd, pathp, flags, mask, buf) = (at(a[0]), a[1], a[2] as u32, a[3] as u32, a[4]);
    if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE) != 0 || flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE || mask & STATX_RESERVED != 0 {
        return -EINVAL;
    }
    if !p.image.space.ok(buf, 256, true) {
        return -EFAULT;
    }
    let st = if flags & AT_EMPTY_PATH != 0 && p.image.space.read(pathp, 1).is_some_and(|b| b[0] == 0) {
        if dirfd == AT_FDCWD {
            files::stat(&p.cwd, false)
        } else {
            files::fstat(&p.files, dirfd)
        }
    } else {
        path_arg(p, dirfd, pathp).and_then(|path| files::stat(&path, flags & AT_SYMLINK_NOFOLLOW != 0))
    };
    let st = match st {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut b = [0u8; 256];
    let mut put = |o: usize, v: &[u8]| b[o..o + v.len()].copy_from_slice(v);
    put(0, &STATX_BASIC_STATS.to_le_bytes());
    put(4, &4096u32.to_le_bytes());
    put(16, &(st.nlink as u32).to_le_bytes());
    put(20, &st.uid.to_le_bytes());
    put(24, &st.gid.to_le_bytes());
    put(28, &(st.mode as u16).to_le_bytes());
    put(32, &st.ino.to_le_bytes());
    put(40, &st.size.to_le_bytes());
    put(48, &st.blocks.to_le_bytes());
    for o in [64, 96, 112] {
        put(o, &st.mtime.to_le_bytes());
    }
    p.image.space.put(buf, &b);
    0
}

// ---------------------------------------------------------------------------------------
// Descriptors

pub fn sys_dup(p: &mut Process, a: &[u64; 6]) -> i64 {
    files::dup(&mut p.files, a[0] as i32, None, 0, false)
}

pub fn sys_dup2(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (old, new) = (a[0] as i32, a[1] as i32);
    if old == new {
        return if p.files.slot(old).is_some() { i64::from(old) } else { -EBADF };
    }
    files::dup(&mut p.files, old, Some(new), 0, false)
}

pub fn sys_dup3(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (old, new, flags) = (a[0] as i32, a[1] as i32, a[2] as u32);
    if flags & !files::O_CLOEXEC != 0 || old == new {
        return -EINVAL;
    }
    files::dup(&mut p.files, old, Some(new), 0, flags != 0)
}

pub fn sys_fcntl(p: &mut Process, a: &[u64; 6]) -> i64 {
    files::fcntl(&mut p.files, a[0] as i32, a[1] as u32, a[2])
}

pub fn sys_fchdir(p: &mut Process, a: &[u64; 6]) -> i64 {
    match files::dir_path(&p.files, a[0] as i32) {
        Ok(path) => {
            p.cwd = path;
            0
        }
        Err(e) => e,
    }
}

pub fn sys_pwrite64(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len, off) = (a[0] as i32, a[1], a[2], a[3] as i64);
    if off < 0 {
        return -EINVAL;
    }
    let Some(src) = p.image.space.read(buf, len) else { return -EFAULT };
    let framed = p.framed;
    files::write(&mut p.files, fd, src, framed, Some(off as u64))
}
