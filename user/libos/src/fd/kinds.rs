//! The kinds of open file (`Kind`) and the `FileLike` of each: `with_file` is the dispatch
//! from an entry to its open file. The console, in-memory files and `fs` files are here;
//! pipes are in `pipe.rs`. Also the kernel-object names a core-set table keeps kinds in.

use abi::{Error, ObjName, ObjectId, MEMID_SELF};
use core::fmt::Write as _;

use super::file::{made_up_stat, FileLike, Kind, Stat, S_IFCHR};
use super::pipe::PipeEnd;
use super::window::map;

/// Run `f` on the open file entry `k` names: the one place that knows every kind. (Generic,
/// so each call site's dispatch is a `match` the compiler can see through.)
#[inline]
pub(super) fn with_file<R>(k: Kind, f: impl FnOnce(&dyn FileLike) -> R) -> R {
    match k {
        Kind::Console => f(&Console),
        Kind::PipeRead(ring) => f(&PipeEnd { ring, write: false }),
        Kind::PipeWrite(ring) => f(&PipeEnd { ring, write: true }),
        Kind::File(seg) => f(&SegFile(seg)),
        Kind::Fs(i) => f(&FsFile(crate::fs::Fd(i))),
        Kind::Event(seg) => f(&super::eventfd::EventFd(seg)),
        Kind::Socket(id) => f(&super::socket::SocketFile(id)),
        Kind::Unix(id) => f(&super::unix::UnixEnd::of(id)),
        Kind::UnixSock(page) => f(&super::unix::UnixSock(page)),
    }
}

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
        Kind::Event(id) => write!(n, "fd:e{id:x}"),
        Kind::Socket(id) => write!(n, "fd:s{id:x}"),
        Kind::Unix(id) => write!(n, "fd:u{id:x}"),
        Kind::UnixSock(id) => write!(n, "fd:U{id:x}"),
    };
    n
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
        (b'e', false) => Some(Kind::Event(id)),
        (b'u', false) => Some(Kind::Unix(id)),
        (b'U', false) => Some(Kind::UnixSock(id)),
        _ => None,
    }
}

/// Make the kernel object of an open file of kind `k` in `share`.
pub(super) fn make_object(share: ObjectId, k: Kind) -> Result<ObjectId, Error> {
    if let Kind::Fs(_) | Kind::Socket(_) = k {
        // Each kernel-object descriptor is its own open file, with no count to tell when
        // `fs`'s descriptor may close: file-system files live in the private and the
        // process-wide tables only. Sockets live in private tables only (`socket.rs`).
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
pub(super) fn shared_kind(table: ObjectId, obj: ObjectId) -> Result<Kind, Error> {
    let mut buf = [0u8; abi::MAX_NAME];
    let n = crate::sys::obj_get_name(ObjName::new(table, obj), &mut buf)? as usize;
    parse_kind(&buf[..n.min(buf.len())]).ok_or(Error::WrongType)
}

/// The kind of a descriptor. Errors if this context cannot use it: another context's

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
