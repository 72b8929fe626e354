//! The open files a descriptor table holds, and the one trait they share.
//!
//! A table entry (`Kind`, packed in one word of a table record) names an open file of one
//! kind; `kinds::with_file` gives the table layer that open file as a `&dyn FileLike`, and
//! every call that reads, writes, seeks, stats, polls or closes goes through it. A kind does
//! only what it can: the trait's defaults are the "not supported" answers (`NotPermitted` for
//! a stream not open that way, `WrongType` for an offset on something without one, always
//! ready for `poll`, nothing to sleep on). A new kind is a variant of `Kind` with its tag in
//! `encode`/`decode`, a type implementing `FileLike` in its own file of this folder, and its
//! arm in `kinds::with_file` (the eventfd, `eventfd.rs`, is the worked example: one file, one
//! variant, one arm, one tag). Readiness and waking: `poll` and `wake_on` (`ready.rs`).

use abi::{Error, ObjectId};

pub use super::ready::WakeOn;

/// What `fstat` answers (the file system's `Stat`, for every kind).
pub use crate::fs::Stat;

/// File mode bits (`st_mode`'s type) for descriptors that are not `fs` files.
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;
pub const S_IFSOCK: u16 = 0o140000;

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
    /// What a read or write would do now, without waiting. Loads only for a kind with a
    /// waiters word; a socket's moves its core's stack forward first (its state changes only
    /// when that core polls it). Default: always ready.
    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let _ = at;
        Ok(Ready::ALWAYS)
    }
    /// How a waiter (`fd::poll_wait`, a blocking call) hears that `poll`'s answer may have
    /// changed: the waiters word of the object (`ready.rs`: whoever changes the state wakes
    /// the cores whose bits are in it), `WakeOn::Poll` for an object nothing can wake a sleeper
    /// for (look again soon), `WakeOn::Nothing` when only the caller's own calls change it.
    /// A kind with a word must `ready::notify` it after every change that can make a `poll`
    /// answer go from not ready to ready (bytes in, room made, the other side gone). Default:
    /// `Nothing` (always ready).
    fn wake_on(&self, at: ObjectId) -> Result<WakeOn, Error> {
        let _ = at;
        Ok(WakeOn::Nothing)
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

/// A table entry: which open file it is. Packed in one word (`encode`) in the private and
/// process-wide tables, and in a kernel object's name (`kinds::kind_name`) in a core-set table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// An eventfd (`eventfd.rs`): a page in the table's share holding its counter, its flags,
    /// its open-file count and its waiters word.
    Event(ObjectId),
    /// A TCP socket (`socket.rs`): `core << 48 | generation << 24 | slot` in the socket table
    /// of the core whose stack holds the connection (`net::host`). Private tables only.
    Socket(u64),
    /// One side of a local stream connection (`unix.rs`): its pair segment, side B with
    /// `unix::SIDE_B` set.
    Unix(u64),
    /// A local stream socket that is not connected (made, bound or listening): its page
    /// (`unix.rs`).
    UnixSock(ObjectId),
}

impl Kind {
    /// The pipe ring or file segment behind the descriptor, if any.
    pub(super) fn behind(self) -> Option<ObjectId> {
        match self {
            Kind::Console | Kind::Fs(_) | Kind::Socket(_) => None,
            Kind::PipeRead(id) | Kind::PipeWrite(id) | Kind::File(id) | Kind::Event(id) | Kind::UnixSock(id) => Some(id),
            Kind::Unix(id) => Some(id & (super::unix::SIDE_B - 1)),
        }
    }
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
        Kind::Event(id) => 6 << 56 | id,
        Kind::Socket(id) => 7 << 56 | id,
        Kind::Unix(id) => 8 << 56 | id,
        Kind::UnixSock(id) => 9 << 56 | id,
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
        6 => Some(Kind::Event(id)),
        7 => Some(Kind::Socket(id)),
        8 => Some(Kind::Unix(id)),
        9 => Some(Kind::UnixSock(id)),
        _ => None,
    }
}

/// A `Stat` for a descriptor that is not an `fs` file (`ino` 0).
pub(super) fn made_up_stat(mode: u16, size: u64) -> Stat {
    Stat { ino: 0, mode, links: 1, uid: 0, gid: 0, size, blocks512: 0, mtime: 0 }
}
