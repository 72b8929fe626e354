//! Files (issue 16; docs/fs.md): POSIX-shaped library calls over an ext2 file system on the
//! first virtio-blk disk.
//!
//! | layer | file |
//! | --- | --- |
//! | library calls: `mount`, `open`, `read`, `pread`, `lseek`, `close`, `fstat`, `stat`, `readdir`, `df`, `sync` | this file |
//! | ext2 on-disk format (our own; also compiled into `cargo xtask fs`) | `ext2.rs` |
//! | buffer cache and block device object client | `disk.rs` |
//! | the device object | kernel `dev/blk.rs`, contract `abi/src/blk.rs` |
//!
//! **First version.** One mounted file system per process, under one MCS lock (`FS`), with a
//! per-process buffer cache. Descriptors here are indexes into this module's own table of open
//! files (`Fd`), not yet slots of the `fd` module's tables; the lock-free name cache,
//! shared buffer cache and per-core open-file lists are not built yet (docs/fs.md says what is
//! missing). A context that uses the file system on another core maps the request segment
//! there on first use.

pub mod disk;
pub mod ext2;
pub mod ext2_write;

use alloc::vec::Vec;

use crate::thread::Mutex;
use disk::{BlockDevice, Cache, CacheStats};
use ext2::{Ext2, Inode};
pub use ext2::{DirEntry, FsError, Stat, FT_DIR, FT_REG, S_IFDIR, S_IFMT, S_IFREG};

pub type Result<T> = core::result::Result<T, FsError>;

/// Open flags (Linux's values).
pub const O_RDONLY: u32 = 0;
pub const O_WRONLY: u32 = 1;
pub const O_RDWR: u32 = 2;
pub const O_ACCMODE: u32 = 3;
pub const O_CREAT: u32 = 0x40;
pub const O_EXCL: u32 = 0x80;
pub const O_TRUNC: u32 = 0x200;
pub const O_APPEND: u32 = 0x400;

/// `lseek` origins.
pub const SEEK_SET: u32 = 0;
pub const SEEK_CUR: u32 = 1;
pub const SEEK_END: u32 = 2;

/// Most files open at once in one process.
pub const MAX_OPEN: usize = 256;

/// A descriptor of this module's open-file table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fd(pub u32);

struct OpenFile {
    ino: u32,
    off: u64,
    flags: u32,
}

struct Mounted {
    fs: Ext2<Cache>,
    files: Vec<Option<OpenFile>>,
}

static FS: Mutex<Option<Mounted>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Mounted) -> Result<R>) -> Result<R> {
    let mut g = FS.lock();
    let m = g.as_mut().ok_or(FsError::NoDevice)?;
    f(m)
}

/// Mount the ext2 file system on the first disk (a block device object and its request
/// segment in the process share). `NoDevice` without a disk or when another process holds it.
pub fn mount() -> Result<()> {
    let mut g = FS.lock();
    if g.is_some() {
        return Ok(());
    }
    let dev = BlockDevice::open(crate::process::proc_share()).map_err(|e| match e {
        abi::Error::NoMemory => FsError::NoMemory,
        _ => FsError::NoDevice,
    })?;
    // On an error the cache (and with it the device object) is dropped, which frees both.
    let fs = Ext2::mount(Cache::new(dev))?;
    *g = Some(Mounted { fs, files: Vec::new() });
    Ok(())
}

pub fn mounted() -> bool {
    FS.lock().is_some()
}

/// Write everything back, then free the device object. Open descriptors become invalid.
pub fn unmount() -> Result<()> {
    let mut g = FS.lock();
    let Some(m) = g.as_mut() else { return Ok(()) };
    let r = m.fs.dev.sync();
    *g = None;
    r
}

fn file(m: &mut Mounted, fd: Fd) -> Result<&mut OpenFile> {
    m.files.get_mut(fd.0 as usize).and_then(|f| f.as_mut()).ok_or(FsError::BadDescriptor)
}

/// Open `path`. Only reading is supported so far: write access is `ReadOnly`.
pub fn open(path: &str, flags: u32) -> Result<Fd> {
    with(|m| {
        if flags & O_ACCMODE != O_RDONLY || flags & (O_CREAT | O_TRUNC | O_APPEND) != 0 {
            return Err(FsError::ReadOnly);
        }
        let ino = m.fs.resolve(path.as_bytes())?;
        let slot = match m.files.iter().position(|f| f.is_none()) {
            Some(i) => i,
            None if m.files.len() < MAX_OPEN => {
                m.files.push(None);
                m.files.len() - 1
            }
            None => return Err(FsError::NoMemory),
        };
        m.files[slot] = Some(OpenFile { ino: ino.ino, off: 0, flags });
        Ok(Fd(slot as u32))
    })
}

pub fn close(fd: Fd) -> Result<()> {
    with(|m| {
        let f = m.files.get_mut(fd.0 as usize).ok_or(FsError::BadDescriptor)?;
        f.take().map(|_| ()).ok_or(FsError::BadDescriptor)
    })
}

fn inode_of(m: &mut Mounted, fd: Fd) -> Result<(Inode, u64)> {
    let (ino, off) = {
        let f = file(m, fd)?;
        (f.ino, f.off)
    };
    Ok((m.fs.inode(ino)?, off))
}

/// Read from the descriptor's offset, advancing it. 0 at the end of the file.
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize> {
    with(|m| {
        let (ino, off) = inode_of(m, fd)?;
        if ino.is_dir() {
            return Err(FsError::IsDir);
        }
        let n = m.fs.read(&ino, off, buf)?;
        file(m, fd)?.off = off + n as u64;
        Ok(n)
    })
}

/// Read at `off` without moving the descriptor's offset.
pub fn pread(fd: Fd, buf: &mut [u8], off: u64) -> Result<usize> {
    with(|m| {
        let (ino, _) = inode_of(m, fd)?;
        if ino.is_dir() {
            return Err(FsError::IsDir);
        }
        m.fs.read(&ino, off, buf)
    })
}

/// Move the offset; returns the new one. A negative result is `InvalidArgument`.
pub fn lseek(fd: Fd, off: i64, whence: u32) -> Result<u64> {
    with(|m| {
        let (ino, cur) = inode_of(m, fd)?;
        let base = match whence {
            SEEK_SET => 0,
            SEEK_CUR => cur,
            SEEK_END => ino.size,
            _ => return Err(FsError::InvalidArgument),
        };
        let new = (base as i64).checked_add(off).filter(|v| *v >= 0).ok_or(FsError::InvalidArgument)? as u64;
        file(m, fd)?.off = new;
        Ok(new)
    })
}

pub fn fstat(fd: Fd) -> Result<Stat> {
    with(|m| {
        let (ino, _) = inode_of(m, fd)?;
        Ok(Ext2::<Cache>::stat_of(&ino))
    })
}

pub fn stat(path: &str) -> Result<Stat> {
    with(|m| {
        let ino = m.fs.resolve(path.as_bytes())?;
        Ok(Ext2::<Cache>::stat_of(&ino))
    })
}

/// Every entry of the directory `path`, `.` and `..` included, in on-disk order.
pub fn readdir(path: &str) -> Result<Vec<DirEntry>> {
    with(|m| {
        let dir = m.fs.resolve(path.as_bytes())?;
        m.fs.read_dir(&dir)
    })
}

/// Read a whole file (at most `max` bytes).
pub fn read_all(path: &str, max: usize) -> Result<Vec<u8>> {
    let fd = open(path, O_RDONLY)?;
    let mut out = Vec::new();
    let mut chunk = alloc::vec![0u8; 16384];
    let r = loop {
        match read(fd, &mut chunk) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if out.len() + n > max {
                    break Err(FsError::NoMemory);
                }
                out.extend_from_slice(&chunk[..n]);
            }
            Err(e) => break Err(e),
        }
    };
    let _ = close(fd);
    r.map(|()| out)
}

/// Space on the file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub block_size: u64,
    pub blocks: u64,
    pub free_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
}

pub fn df() -> Result<Usage> {
    with(|m| {
        let (fb, b, fi, i) = m.fs.usage();
        Ok(Usage { block_size: m.fs.bs, blocks: b, free_blocks: fb, inodes: i, free_inodes: fi })
    })
}

/// Write every dirty cache page to the disk and flush it.
pub fn sync() -> Result<()> {
    with(|m| m.fs.dev.sync())
}

/// The cache's counters and the device's (requests and bytes each way).
pub fn cache_stats() -> Result<(CacheStats, abi::DeviceStat)> {
    with(|m| {
        let st = crate::sys::device_stat(m.fs.dev.dev.dev).map_err(|_| FsError::Io)?;
        Ok((m.fs.dev.stats, st))
    })
}
