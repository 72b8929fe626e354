//! The open files a descriptor table holds, and the one trait they share.
//!
//! A table entry (`Kind`, packed in one word of a table record) names an open file of one
//! kind; `Kind::with_file` gives the table layer that open file as a `&dyn FileLike`, and
//! every call that reads, writes, seeks, stats, polls or closes goes through it. A kind does
//! only what it can: the trait's defaults are the "not supported" answers (`NotPermitted` for
//! a stream not open that way, `WrongType` for an offset on something without one, always
//! ready for `poll`). A new kind (Linux's epoll or eventfd) is a variant of `Kind` with its
//! tag in `encode`/`decode`, and a type implementing `FileLike` in its own file of this folder.

use abi::{Error, ObjName, ObjectId, MEMID_SELF};
use core::fmt::Write as _;

use super::window::map;

/// What `fstat` answers (the file system's `Stat`, for every kind).
pub use crate::fs::Stat;

/// File mode bits (`st_mode`'s type) for descriptors that are not `fs` files.
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;

/// Readiness of an open file, as `poll` reports it (Linux's `POLLIN`, `POLLOUT`, `POLLHUP`,
/// `POLLERR`): what a `read` or `write` would do now without waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Ready {
    /// A read returns at once (bytes are waiting, or end of file).
    pub read: bool,
    /// A write takes at least one byte at once (or fails at once: see `error`).
    pub write: bool,
    /// The other side is gone: a pipe read end with no write end open.
    pub hangup: bool,
    /// A write fails: a pipe write end with no read end open (`BrokenPipe`).
    pub error: bool,
}

impl Ready {
    /// A file that never makes a caller wait (POSIX: regular files always poll ready).
    pub const ALWAYS: Ready = Ready { read: true, write: true, hangup: false, error: false };
}

/// One kind of open file. `at` is the table share the descriptor is in: the kernel objects
/// behind the open file (a pipe ring, a file segment) are named through it. Offsets: a kind
/// that has one keeps it in its open file description, once (an `fs` file: `fs`'s
/// description, which every `dup` of it shares, in any table); streams (console, pipes) and
/// segment files have none.
pub trait FileLike {
    /// Read at the open file's offset, or what is waiting for a stream. Default: not open
    /// for reading (`NotPermitted`, POSIX `EBADF`).
    fn read(&self, at: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        let _ = (at, buf);
        Err(Error::NotPermitted)
    }
    /// Write at the open file's offset (or append, for a stream). Default: not open for
    /// writing (`NotPermitted`).
    fn write(&self, at: ObjectId, data: &[u8]) -> Result<usize, Error> {
        let _ = (at, data);
        Err(Error::NotPermitted)
    }
    /// Read at `off`, the offset unchanged. Default: no offsets (`WrongType`, POSIX `ESPIPE`).
    fn read_at(&self, at: ObjectId, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
        let _ = (at, off, buf);
        Err(Error::WrongType)
    }
    /// Write at `off`, the offset unchanged. Default: `WrongType`.
    fn write_at(&self, at: ObjectId, off: u64, data: &[u8]) -> Result<usize, Error> {
        let _ = (at, off, data);
        Err(Error::WrongType)
    }
    /// Move the offset (`fs::SEEK_SET`, `SEEK_CUR`, `SEEK_END`); the new offset. Default:
    /// `WrongType` (`ESPIPE`).
    fn seek(&self, at: ObjectId, off: i64, whence: u32) -> Result<u64, Error> {
        let _ = (at, off, whence);
        Err(Error::WrongType)
    }
    /// `fstat`: an `fs` file's inode, or one made up from what the descriptor names.
    fn stat(&self, at: ObjectId) -> Result<Stat, Error>;
    /// What a read or write would do now. Default: always ready.
    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let _ = at;
        Ok(Ready::ALWAYS)
    }
    /// A new open file for the same thing as this one is being made in table `at` (a `dup`
    /// into another table): count it where the kind counts its users (a pipe end), or make
    /// what it will hold (an `fs` file: a new `fs` descriptor of the same open file
    /// description, so the two share one offset). `Some(entry)` when the new open file holds
    /// another entry than this one. An error leaves nothing counted or made. Default: the same
    /// entry, nothing to count.
    fn opened(&self, at: ObjectId) -> Result<Option<Kind>, Error> {
        let _ = at;
        Ok(None)
    }
    /// The last reference of an open file of this kind went: release what it holds (a pipe
    /// end, an `fs` descriptor). `Ok(true)`: this freed the object behind it (a pipe's last
    /// end freed the ring). Called once per open file, whichever table it was in; the table's
    /// own kernel objects are the table's business. Default: nothing held.
    fn last_close(&self, at: ObjectId) -> Result<bool, Error> {
        let _ = at;
        Ok(false)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
/// A table entry: which open file it is. Packed in one word (`encode`) in the private and
/// process-wide tables, and in a kernel object's name (`kind_name`) in a core-set table.
pub enum Kind {
    /// The console (`console.rs`): a stream, reads and writes.
    Console,
    /// A pipe's read or write end: its ring, a segment (`pipe.rs`).
    PipeRead(ObjectId),
    PipeWrite(ObjectId),
    /// An in-memory file: a segment, read and written at offsets (no offset of its own).
    File(ObjectId),
    /// A file or directory of the mounted file system: `fs`'s descriptor (one per open file
    /// of this table; it holds `fs`'s open file description, offset included).
    Fs(u32),
}

impl Kind {
    /// Run `f` on the open file this entry names. (Generic, so each call site's dispatch is a
    /// `match` the compiler can see through.)
    #[inline]
    pub fn with_file<R>(self, f: impl FnOnce(&dyn FileLike) -> R) -> R {
        match self {
            Kind::Console => f(&Console),
            Kind::PipeRead(ring) => f(&super::pipe::PipeEnd { ring, write: false }),
            Kind::PipeWrite(ring) => f(&super::pipe::PipeEnd { ring, write: true }),
            Kind::File(seg) => f(&SegFile(seg)),
            Kind::Fs(i) => f(&FsFile(crate::fs::Fd(i))),
        }
    }

    /// The pipe ring or file segment behind the descriptor, if any.
    pub(super) fn behind(self) -> Option<ObjectId> {
        match self {
            Kind::Console | Kind::Fs(_) => None,
            Kind::PipeRead(id) | Kind::PipeWrite(id) | Kind::File(id) => Some(id),
        }
    }
}


// ---------------------------------------------------------------------------------------
// Open files as kernel objects

struct NameBuf {
    buf: [u8; abi::MAX_NAME],
    len: usize,
}

impl core::fmt::Write for NameBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let b = s.as_bytes();
        if self.len + b.len() > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(())
    }
}

fn kind_name(k: Kind) -> NameBuf {
    let mut n = NameBuf { buf: [0; abi::MAX_NAME], len: 0 };
    let _ = match k {
        // Not through `core::fmt`: console descriptors are the ones opened most.
        Kind::Console => n.write_str("fd:c"),
        Kind::PipeRead(id) => write!(n, "fd:r{id:x}"),
        Kind::PipeWrite(id) => write!(n, "fd:w{id:x}"),
        Kind::File(id) => write!(n, "fd:f{id:x}"),
        Kind::Fs(i) => write!(n, "fd:F{i:x}"),
    };
    n
}

/// `Kind` packed in a word for the private table: the tag in the top byte, the id (object
/// ids fit in 48 bits: `(core + 1) << 40 | sequence`) below.
pub(super) fn encode(k: Kind) -> u64 {
    match k {
        Kind::Console => 1 << 56,
        Kind::PipeRead(id) => 2 << 56 | id,
        Kind::PipeWrite(id) => 3 << 56 | id,
        Kind::File(id) => 4 << 56 | id,
        Kind::Fs(i) => 5 << 56 | i as u64,
    }
}

pub(super) fn decode(w: u64) -> Option<Kind> {
    let id = w & ((1 << 56) - 1);
    match w >> 56 {
        1 => Some(Kind::Console),
        2 => Some(Kind::PipeRead(id)),
        3 => Some(Kind::PipeWrite(id)),
        4 => Some(Kind::File(id)),
        5 if id <= u32::MAX as u64 => Some(Kind::Fs(id as u32)),
        _ => None,
    }
}

/// The kind an open file's name says (`kind_name`'s inverse), read as bytes: this is on every
/// shared `dup`'s path.
fn parse_kind(name: &[u8]) -> Option<Kind> {
    let [b'f', b'd', b':', k, rest @ ..] = name else { return None };
    if rest.len() > 16 {
        return None;
    }
    let mut id = 0u64;
    for &c in rest {
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        id = id << 4 | digit as u64;
    }
    match (k, rest.is_empty()) {
        (b'c', true) => Some(Kind::Console),
        (b'r', false) => Some(Kind::PipeRead(id)),
        (b'w', false) => Some(Kind::PipeWrite(id)),
        (b'f', false) => Some(Kind::File(id)),
        _ => None,
    }
}

/// Make the kernel object of an open file of kind `k` in `share`.
pub(super) fn make_object(share: ObjectId, k: Kind) -> Result<ObjectId, Error> {
    if let Kind::Fs(_) = k {
        // Each kernel-object descriptor is its own open file, with no count to tell when
        // `fs`'s descriptor may close: file-system files live in the private and the
        // process-wide tables only.
        return Err(Error::Unsupported);
    }
    if k.behind().is_some_and(|id| id >> 56 != 0) {
        // Not a kernel object id (they fit in 48 bits); `encode` could not hold it.
        return Err(Error::InvalidArgument);
    }
    let n = kind_name(k);
    // Zero bytes: the record is its name and its place in the share, no page list.
    crate::sys::segment_alloc_bytes(share, &n.buf[..n.len], MEMID_SELF, 0)
}

/// Open a new open file of kind `k` in `scope`, whose table is `t`. A pipe end is a new end

/// The kind of a shared descriptor, from its kernel object's name (a system call).
pub(super) fn shared_kind(fd: super::Fd) -> Result<Kind, Error> {
    let mut buf = [0u8; abi::MAX_NAME];
    let n = crate::sys::obj_get_name(ObjName::new(fd.table, fd.obj), &mut buf)? as usize;
    parse_kind(&buf[..n.min(buf.len())]).ok_or(Error::WrongType)
}

/// The kind of a descriptor. Errors if this context cannot use it: another context's



// ---------------------------------------------------------------------------------------
// The kinds without a file of their own

/// The console: `console::write_all` and the kernel's console read.
struct Console;

impl FileLike for Console {
    fn read(&self, _: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        crate::sys::console_read(buf).map(|n| n as usize)
    }
    fn write(&self, _: ObjectId, data: &[u8]) -> Result<usize, Error> {
        crate::console::write_all(data);
        Ok(data.len())
    }
    fn stat(&self, _: ObjectId) -> Result<Stat, Error> {
        Ok(made_up_stat(S_IFCHR | 0o620, 0))
    }
}

/// A `Stat` for a descriptor that is not an `fs` file (`ino` 0).
pub(super) fn made_up_stat(mode: u16, size: u64) -> Stat {
    Stat { ino: 0, mode, links: 1, uid: 0, gid: 0, size, blocks512: 0, mtime: 0 }
}

/// An in-memory file (a segment in the table's share), mapped in the descriptor window. A
/// stream read or write is at offset 0 (it keeps no offset); `read_at`/`write_at` at any.
struct SegFile(ObjectId);

impl FileLike for SegFile {
    fn read(&self, at: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        pread(at, self.0, 0, buf)
    }
    fn write(&self, at: ObjectId, data: &[u8]) -> Result<usize, Error> {
        pwrite(at, self.0, 0, data)
    }
    fn read_at(&self, at: ObjectId, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
        pread(at, self.0, off, buf)
    }
    fn write_at(&self, at: ObjectId, off: u64, data: &[u8]) -> Result<usize, Error> {
        pwrite(at, self.0, off, data)
    }
    fn stat(&self, at: ObjectId) -> Result<Stat, Error> {
        Ok(made_up_stat(crate::fs::S_IFREG | 0o644, crate::sys::segment_get_nbytes(ObjName::new(at, self.0))?))
    }
}

/// A file or directory of the mounted file system: `fs`'s descriptor, whose open file
/// description holds the offset (shared by every `dup`, in any table: `fs::dup`).
struct FsFile(crate::fs::Fd);

impl FileLike for FsFile {
    fn read(&self, _: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        crate::fs::read(self.0, buf).map_err(fs_error)
    }
    fn write(&self, _: ObjectId, data: &[u8]) -> Result<usize, Error> {
        crate::fs::write(self.0, data).map_err(fs_error)
    }
    fn read_at(&self, _: ObjectId, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
        crate::fs::pread(self.0, buf, off).map_err(fs_error)
    }
    fn write_at(&self, _: ObjectId, off: u64, data: &[u8]) -> Result<usize, Error> {
        crate::fs::pwrite(self.0, data, off).map_err(fs_error)
    }
    fn seek(&self, _: ObjectId, off: i64, whence: u32) -> Result<u64, Error> {
        crate::fs::lseek(self.0, off, whence).map_err(fs_error)
    }
    fn stat(&self, _: ObjectId) -> Result<Stat, Error> {
        crate::fs::fstat(self.0).map_err(fs_error)
    }
    fn opened(&self, _: ObjectId) -> Result<Option<Kind>, Error> {
        crate::fs::dup(self.0).map(|j| Some(Kind::Fs(j.0))).map_err(fs_error)
    }
    fn last_close(&self, _: ObjectId) -> Result<bool, Error> {
        crate::fs::close(self.0).map(|_| false).map_err(fs_error)
    }
}

/// `fs` errors as system-call errors, for calls that work on every kind.
fn fs_error(e: crate::fs::FsError) -> Error {
    use crate::fs::FsError as F;
    match e {
        F::Io | F::Corrupt(_) => Error::Io,
        F::NotFound => Error::NotFound,
        F::BadDescriptor => Error::NoSuchObject,
        F::NoMemory | F::NoSpace => Error::NoMemory,
        F::Unsupported(_) => Error::Unsupported,
        F::ReadOnly => Error::NotPermitted,
        F::NoDevice => Error::NotFound,
        F::IsDir | F::NotDir => Error::WrongType,
        F::Exists => Error::AlreadyExists,
        F::NameTooLong => Error::NameTooLong,
        F::InvalidArgument | F::NotEmpty | F::TooManyLinks => Error::InvalidArgument,
        // Internal to `fs` (retried there); never returned by it.
        F::Contended => Error::Busy,
    }
}

fn pwrite(at: ObjectId, seg: ObjectId, off: u64, data: &[u8]) -> Result<usize, Error> {
    let (va, len) = map(ObjName::new(at, seg))?;
    let n = (len.saturating_sub(off)).min(data.len() as u64) as usize;
    // SAFETY: `[va + off, va + off + n)` lies in the file's read-write mapping.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), (va + off) as *mut u8, n) };
    Ok(n)
}

fn pread(at: ObjectId, seg: ObjectId, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
    let (va, len) = map(ObjName::new(at, seg))?;
    let n = (len.saturating_sub(off)).min(buf.len() as u64) as usize;
    // SAFETY: as in `pwrite`.
    unsafe { core::ptr::copy_nonoverlapping((va + off) as *const u8, buf.as_mut_ptr(), n) };
    Ok(n)
}
