//! Descriptors: one model for every kind of open file (docs/architecture.md, "The library OS").
//!
//! table (private / process-wide / core-set) -> entry (`Kind`, an open file with its count)
//! -> kind (`file::FileLike`: console, pipe end, in-memory file, `fs` file; later epoll,
//! eventfd). The table layer (`private.rs`, `shared.rs`) allocates descriptors and counts
//! references to open files; it knows nothing of what a kind does. Every call that reads,
//! writes, seeks, stats or polls resolves the descriptor to its entry and calls the kind
//! through the trait; the last close of an open file calls `FileLike::last_close`, and a
//! `dup` into another table `FileLike::opened`. Offsets live in the kind's open file
//! description, once (`file.rs`).
//!
//! An *open file* is a kernel object: a zero-byte segment (metadata only, no page list) whose
//! name says the kind and the object behind it (`c` console,
//! `r`/`w` + ring id for pipe ends, `f` + segment id for in-memory files); the object behind
//! it is held by the same share. The caller chooses the scope of every descriptor:
//!
//! - `Scope::Private`: a slot in this context's *private descriptor table*, user memory right
//!   after the context page (`PrivateTable`), which only this context reads or writes. A
//!   slot points at an open file record (the kernel object, which the context's
//!   `SHARE_PRIVATE` share `Ctx::private_fds` holds, its kind and a reference count). `dup`
//!   into private scope is a free slot and a count incremented, `close` the slot freed and
//!   the count decremented: no system call, no lock, no atomic instruction, and no cache line
//!   another core reads (Corey figure 1, "a per-thread table without contention"). Opening
//!   makes the kernel object; the last close of an open file deletes it (and the pipe ring or
//!   file segment behind it once no private open file uses that any more). Like Linux's fd
//!   table pointing at `struct file`.
//! - `Scope::Table(t)`: a shared table for a named set of cores, made with
//!   `Table::for_cores`; threads the program spawns on those cores get it in their share set,
//!   and no other context can reach it. The descriptor is the open file's kernel object itself.
//! - `Scope::Process`: the process-wide table, in user memory that every thread of the
//!   process maps: a `percore::fdtable::DescTable` (lock-free slot allocation from per-core
//!   bitmap words, open-file records with `fget`-style reference counts) in a heap block of
//!   its own segment, reached through the heap's shared address ranges. `dup` and `close`
//!   make no system call: a few atomic instructions on lines the calling core owns while
//!   its bitmap word has free bits. A process-wide descriptor is `Fd { table: the table's
//!   share, obj: SHARED_FD | generation << 32 | slot }`; the share holds the pipe rings and
//!   file segments behind them. A `cfork`'d child gets the table only when asked
//!   (`cfork_opts_for_table`); otherwise it starts with an empty one (docs/fd.md).
//!
//! File and directory descriptors of `fs` (`open`) are open files of kind `Kind::Fs` in the
//! private or process-wide table, beside consoles, pipes and segment files: `dup`, `close`,
//! `read`, `write`, `read_at`, `write_at`, `lseek`, `fstat`, `poll` work on every kind (each
//! answers what it cannot do with the trait's default error). (Tables for core sets keep kernel objects as
//! descriptors and do not take `fs` files: `Unsupported`.)
//!
//! A private descriptor is `Fd { table: private share, obj: PRIVATE_FD | generation << 32 |
//! slot }`. Another context (another core) gets `NotPermitted` for it without looking at any
//! table (its own private share has another id), and the kernel refuses it the share as well.
//! The slot's generation changes at every close, so a closed descriptor stays invalid
//! (`NoSuchObject`) even after its slot is reused.
//!
//! Pipes are rings in a shared segment (`pipe.rs`); in-memory files are segments (`kinds.rs`).
//! Both are mapped on demand into the context's descriptor window (`window.rs`) and read and
//! written there, without system calls.

use abi::{Error, ObjName, ObjectId, MEMID_SELF, PAGE_SIZE};

mod eventfd;
mod file;
mod kinds;
mod pipe;
mod private;
mod ready;
mod shared;
mod socket;
mod unix;
mod window;

pub use eventfd::{EFD_CLOEXEC, EFD_NONBLOCK, EFD_SEMAPHORE};
pub use file::{FileLike, Kind, Ready, Stat, WakeOn, S_IFCHR, S_IFIFO, S_IFSOCK};
pub use ready::{wait_counts, WaitCounts, POLL_NAP_US};
pub use pipe::{rings_freed, PIPE_BUF, PIPE_BYTES};
pub use private::{close_private_at_exit, private_counts, PrivateCounts, PrivateTable, PRIVATE_FD, PRIVATE_SLOTS};
pub(crate) use shared::{after_cfork, shared_with_child};
pub use shared::{cfork_share_table, proc_counts, shares_for_core, Table, SHARED_FD, SHARED_SLOTS};
pub use unix::{BOUND as UNIX_BOUND, FRESH as UNIX_FRESH, LISTENING as UNIX_LISTENING, MAX_BACKLOG as UNIX_MAX_BACKLOG, NAME_MAX as UNIX_NAME_MAX};
pub use window::unmap_all;

use file::decode;
use kinds::{shared_kind, with_file};
use private::PrivateTable as Private;
use shared::{home, table_error, ProcTable};

/// Where a descriptor lives (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    Private,
    /// A table made with `Table::for_cores`.
    Table(ObjectId),
    Process,
}

/// A descriptor: `<table, object>` (for a private descriptor, `<private share, slot>`: see
/// the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fd {
    pub table: ObjectId,
    pub obj: ObjectId,
}

/// Which table a descriptor is in, as seen from this context.
enum Where {
    /// A kernel-object descriptor in a shared table (the kernel decides who may use it).
    Shared,
    /// Open slot `1` of this context's private table `0`.
    Private(&'static mut Private, usize),
    /// Descriptor `1` (`generation << 32 | slot`) of the process-wide table `0`.
    Proc(&'static ProcTable, u64),
}

fn resolve(fd: Fd) -> Result<Where, Error> {
    if fd.obj & SHARED_FD != 0 && fd.obj & PRIVATE_FD == 0 {
        let t = shared::proc_table().ok_or(Error::NoSuchObject)?;
        // Another process's (or a forgotten) table: not reachable from here.
        return if fd.table == shared::proc_share_now() { Ok(Where::Proc(t, fd.obj & !SHARED_FD)) } else { Err(Error::NotPermitted) };
    }
    let mine = crate::ctx::try_ctx().map_or(0, |c| c.private_fds);
    if fd.obj & PRIVATE_FD == 0 {
        if fd.table == shared::proc_share_now() {
            // The rings and files the process-wide table's share holds are not descriptors.
            return Err(Error::NoSuchObject);
        }
        // Through this context's private share the raw kernel objects behind the table
        // (open files, pipe rings) are reachable; only the table may change them.
        return if mine != 0 && fd.table == mine { Err(Error::NoSuchObject) } else { Ok(Where::Shared) };
    }
    if mine == 0 || fd.table != mine {
        // Another context's private descriptor: its table is not even mapped here.
        return Err(Error::NotPermitted);
    }
    let t = private::private_table();
    let slot = t.slot_of(fd.obj).ok_or(Error::NoSuchObject)?;
    Ok(Where::Private(t, slot))
}

/// The table of a scope (made on first use for the private and process tables). For
/// `Scope::Private` this is the share holding the private open files' kernel objects.
pub fn table(scope: Scope) -> Result<ObjectId, Error> {
    match scope {
        Scope::Table(t) => Ok(t),
        Scope::Private => private::private_share(),
        Scope::Process => shared::proc_share(),
    }
}

/// A new open file in `scope` (table `t`) holding `k`, which it owns from here: if it cannot
/// be made, `FileLike::last_close` releases what `k` holds (an `fs` descriptor is closed, a
/// counted pipe end dropped).
fn open_new(scope: Scope, t: ObjectId, k: Kind) -> Result<Fd, Error> {
    open_counted(scope, t, k).inspect_err(|_| {
        let _ = with_file(k, |file| file.last_close(t));
    })
}

/// Put a new open file holding `k` in `scope`'s table `t` (what `k` holds is the caller's
/// until this succeeds). A private open file is a record of the context's table, a
/// process-wide one a record of the shared table, a core-set one a kernel object.
pub(super) fn open_counted(scope: Scope, t: ObjectId, k: Kind) -> Result<Fd, Error> {
    match scope {
        Scope::Private => Ok(Fd { table: t, obj: private::open_private(t, k)? }),
        Scope::Process => Ok(Fd { table: t, obj: shared::open_proc(k)? }),
        Scope::Table(_) => Ok(Fd { table: t, obj: kinds::make_object(t, k)? }),
    }
}

/// Open the console.
pub fn open_console(scope: Scope) -> Result<Fd, Error> {
    open_new(scope, table(scope)?, Kind::Console)
}

/// A pipe: `(read end, write end)`, both in `scope`. The ring is a segment in the table.
pub fn pipe(scope: Scope) -> Result<(Fd, Fd), Error> {
    let t = table(scope)?;
    // Both ends counted before either exists: nobody else can name the ring yet, and from
    // here on every way out goes through `drop_end`, whose last call frees the ring.
    let ring = pipe::new_ring(t)?;
    let r = open_counted(scope, t, Kind::PipeRead(ring));
    let w = open_counted(scope, t, Kind::PipeWrite(ring));
    match (r, w) {
        (Ok(r), Ok(w)) => Ok((r, w)),
        (r, w) => {
            let err = r.and(w).err().unwrap_or(Error::NoMemory);
            // The end that did not open first (it only has its count), then the one that did
            // (by `close`, which drops the last count and frees the ring).
            for (res, write) in [(r, false), (w, true)] {
                if res.is_err() {
                    let _ = pipe::drop_end(t, ring, pipe::PipeEnd { ring, write }.unit());
                }
            }
            for fd in [r.ok(), w.ok()].into_iter().flatten() {
                let _ = close(fd);
            }
            Err(err)
        }
    }
}

/// An in-memory file of `bytes` (a segment; grows on write up to the window slot size).
pub fn mem_file(scope: Scope, bytes: u64) -> Result<Fd, Error> {
    let t = table(scope)?;
    let seg = crate::sys::segment_alloc(t, "file", MEMID_SELF, bytes.max(PAGE_SIZE))?;
    open_new(scope, t, Kind::File(seg)).inspect_err(|_| {
        let _ = crate::sys::share_delobj(ObjName::new(t, seg));
    })
}

/// Open the file or directory `path` of the mounted file system (`fs::open`'s flags) as a
/// descriptor in `scope` (private or process-wide; a core-set table is `Unsupported`).
pub fn open(scope: Scope, path: &str, flags: u32) -> Result<Fd, crate::fs::FsError> {
    use crate::fs::FsError;
    if let Scope::Table(_) = scope {
        return Err(FsError::Unsupported("file-system descriptors in a core-set table"));
    }
    let t = table(scope).map_err(|_| FsError::NoMemory)?;
    let f = crate::fs::open(path, flags)?;
    // On an error `open_new` closes `f` (the open file owned it).
    open_new(scope, t, Kind::Fs(f.0)).map_err(|e| match e {
        Error::Busy | Error::NoMemory => FsError::NoMemory,
        _ => FsError::InvalidArgument,
    })
}

/// The kind of a descriptor. Errors if this context cannot use it: another context's
/// private descriptor is `NotPermitted`, a closed one `NoSuchObject`; for shared ones the
/// kernel's answer (`ShareNotReachable`, `NoSuchObject`, ...).
pub fn kind(fd: Fd) -> Result<Kind, Error> {
    on_kind(fd, Ok)
}

/// Run `f` on the kind of a descriptor, its open file held (in the process-wide table, a
/// reference: a close by another thread meanwhile frees it only after `f`).
fn on_kind<R>(fd: Fd, f: impl FnOnce(Kind) -> Result<R, Error>) -> Result<R, Error> {
    match resolve(fd)? {
        Where::Private(t, slot) => f(t.kind_of(t.file_of(slot)).ok_or(Error::WrongType)?),
        Where::Proc(t, d) => with_proc(t, d, f),
        Where::Shared => f(shared_kind(fd.table, fd.obj)?),
    }
}

/// Run `f` on the open file a descriptor names (`on_kind`, then the kind's `FileLike`).
fn on_file<R>(fd: Fd, f: impl FnOnce(&dyn FileLike) -> Result<R, Error>) -> Result<R, Error> {
    on_kind(fd, |k| with_file(k, f))
}

/// Read from a descriptor; returns the bytes read (`FileLike::read`). A pipe: what is
/// waiting (up to `buf`'s length); if nothing is, 0 (end of file) when no write end is open
/// anywhere, else it waits until bytes arrive or the last write end closes (POSIX blocking
/// read). An `fs` file: from its offset, which moves.
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, Error> {
    on_file(fd, |f| f.read(fd.table, buf))
}

/// Write to a descriptor; returns the bytes written (`FileLike::write`). A pipe takes every
/// byte, waiting while it is full, unless its last read end goes: then the bytes written
/// before that, or `BrokenPipe` if none were (POSIX blocking write, as Linux).
pub fn write(fd: Fd, data: &[u8]) -> Result<usize, Error> {
    on_file(fd, |f| f.write(fd.table, data))
}

/// Read a file at offset `off` (its offset unchanged); `WrongType` for a stream.
pub fn read_at(fd: Fd, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
    on_file(fd, |f| f.read_at(fd.table, off, buf))
}

/// Write a file at offset `off` (its offset unchanged); `WrongType` for a stream.
pub fn write_at(fd: Fd, off: u64, data: &[u8]) -> Result<usize, Error> {
    on_file(fd, |f| f.write_at(fd.table, off, data))
}

/// Move a descriptor's offset (`fs::SEEK_SET`, `SEEK_CUR`, `SEEK_END`); returns the new
/// offset. The offset is its open file description's, so every `dup` of it (in any table)
/// sees the move. `WrongType` (POSIX `ESPIPE`) for what has no offset: console, pipes,
/// in-memory files.
pub fn lseek(fd: Fd, off: i64, whence: u32) -> Result<u64, Error> {
    on_file(fd, |f| f.seek(fd.table, off, whence))
}

/// `fstat` of any descriptor: an `fs` file's inode; a console (character device), pipe
/// (FIFO, size: bytes waiting) or segment file (regular, size: its bytes) made up from what
/// the descriptor names (`ino` 0).
pub fn fstat(fd: Fd) -> Result<Stat, Error> {
    on_file(fd, |f| f.stat(fd.table))
}

/// What a `read` or `write` of the descriptor would do now, without waiting (`poll`'s
/// answer for one descriptor). Pipes report their ring and ends; consoles, files and
/// in-memory files are always ready.
pub fn poll(fd: Fd) -> Result<Ready, Error> {
    on_file(fd, |f| f.poll(fd.table))
}

/// How a waiter hears that `poll(fd)`'s answer may have changed (`FileLike::wake_on`).
pub fn wake_on(fd: Fd) -> Result<WakeOn, Error> {
    on_file(fd, |f| f.wake_on(fd.table))
}

/// An eventfd (`eventfd.rs`: Linux's counter semantics) with counter `init` and `flags`
/// (`EFD_SEMAPHORE`, `EFD_NONBLOCK`, `EFD_CLOEXEC`), in `scope`: a page in the table, freed
/// by the last close of its last open file, in whichever table.
pub fn eventfd(scope: Scope, init: u32, flags: u32) -> Result<Fd, Error> {
    let t = table(scope)?;
    let seg = eventfd::new_event(t, init, flags)?;
    open_counted(scope, t, Kind::Event(seg)).inspect_err(|_| {
        // Its one count was for this open file: dropping it frees the page.
        let _ = pipe::drop_end(t, seg, 1);
    })
}

// ---------------------------------------------------------------------------------------
// Waiting for readiness over any kinds (the protocol: `ready.rs`)

/// One descriptor of a `poll_wait`: what the caller waits for, and (after the call) what is
/// ready (`Ready`; `hangup` and `error` are reported whether asked for or not, as POSIX's
/// `POLLHUP` and `POLLERR`).
#[derive(Clone, Copy, Debug)]
pub struct PollFd {
    pub fd: Fd,
    /// Wait for `Ready::read`.
    pub read: bool,
    /// Wait for `Ready::write`.
    pub write: bool,
    /// Set by `poll_wait`.
    pub ready: Ready,
}

impl PollFd {
    pub fn new(fd: Fd, read: bool, write: bool) -> PollFd {
        PollFd { fd, read, write, ready: Ready::default() }
    }

    /// Whether `ready` answers what this entry waits for (or reports a hang-up or error).
    pub fn fired(&self) -> bool {
        (self.read && self.ready.read) || (self.write && self.ready.write) || self.ready.hangup || self.ready.error
    }
}

/// POSIX `poll` over any descriptors (files, pipes, sockets, eventfds, in any table): look at
/// every one (`fd::poll`); if none fired, put this core's bit in every waiters word and look
/// once more, then sleep until a wake or a nap's end, and look again; until one fires or
/// `timeout_ms` passes (`None`: no limit). Returns how many fired (0: the time ran out); each
/// entry's `ready` says what. A descriptor this context cannot use fails the call (its error),
/// as a closed one is `POLLNVAL` in POSIX.
pub fn poll_wait(fds: &mut [PollFd], timeout_ms: Option<u64>) -> Result<usize, Error> {
    let per_ms = crate::time::tsc_per_ms().max(1);
    let end = timeout_ms.map(|ms| crate::time::ticks().saturating_add(ms.saturating_mul(per_ms)));
    let bit = ready::my_bit();
    let look = |fds: &mut [PollFd]| -> Result<usize, Error> {
        let mut n = 0;
        for p in fds.iter_mut() {
            p.ready = poll(p.fd)?;
            n += p.fired() as usize;
        }
        Ok(n)
    };
    loop {
        let n = look(fds)?;
        if n != 0 {
            return Ok(n);
        }
        let now = crate::time::ticks();
        if end.is_some_and(|e| now >= e) {
            return Ok(0);
        }
        // Register on every word; note whether something can only be looked at.
        let mut poll_only = false;
        for p in fds.iter() {
            match wake_on(p.fd)? {
                WakeOn::Word(w) => {
                    w.fetch_or(bit, core::sync::atomic::Ordering::SeqCst);
                }
                WakeOn::Poll => poll_only = true,
                WakeOn::Nothing => {}
            }
        }
        let n = look(fds);
        let fired = n.as_ref().map_or(true, |&n| n != 0);
        if !fired {
            let left_us = end.map_or(u64::MAX, |e| ((e.saturating_sub(now)) as u128 * 1000 / per_ms as u128) as u64);
            ready::nap(left_us.min(if poll_only { POLL_NAP_US } else { ready::WORD_NAP_US }));
        }
        // Leave no bit behind: a later change must not wake this core for nothing.
        for p in fds.iter() {
            if let Ok(WakeOn::Word(w)) = wake_on(p.fd) {
                w.fetch_and(!bit, core::sync::atomic::Ordering::Relaxed);
            }
        }
        if fired {
            return n;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sockets (`socket.rs`; docs/net.md "Sockets as descriptors")

/// The socket id of a descriptor (`WrongType` for any other kind).
fn socket_of(fd: Fd) -> Result<u64, Error> {
    match kind(fd)? {
        Kind::Socket(id) => Ok(id),
        _ => Err(Error::WrongType),
    }
}

/// A descriptor in `scope` for socket `id` (which it owns from here: on an error its slot
/// goes). Private or process-wide scope (`Unsupported` for a core-set table).
fn open_socket(scope: Scope, id: impl FnOnce() -> Result<u64, Error>) -> Result<Fd, Error> {
    if let Scope::Table(_) = scope {
        // A socket's state is its core's: a core-set table's descriptors are kernel objects
        // that any core of the set may close, and a last close must reach the stack. The
        // process-wide table is the threads' of one process (a Linux program's threads on
        // one core; another core's call is `WrongCore`).
        return Err(Error::Unsupported);
    }
    let t = table(scope)?;
    open_new(scope, t, Kind::Socket(id()?))
}

/// A listening TCP socket on `port` of this core's stack (`net::host::attach`), with
/// `backlog` (1..=64) connections that can complete their handshake before `accept` takes
/// them. Private or process-wide scope (`Unsupported` otherwise).
pub fn tcp_listen(scope: Scope, port: u16, backlog: usize) -> Result<Fd, Error> {
    open_socket(scope, || socket::listen(port, backlog))
}

/// A TCP connection from local port `local_port` of this core's stack to `ip:port`. Returns
/// at once; a read or write waits for the handshake (a non-blocking one: `WouldBlock`), and
/// `poll` says writable once it is done. Private or process-wide scope.
pub fn tcp_connect(scope: Scope, ip: [u8; 4], port: u16, local_port: u16) -> Result<Fd, Error> {
    open_socket(scope, || socket::connect(ip, port, local_port))
}

/// A TCP socket of this core's stack that neither listens nor connects yet (what a Linux
/// program's `socket` makes): `tcp_listen_on` or `tcp_connect_from` makes it one or the
/// other; until then reads and writes are `InvalidArgument` and `poll` says writable and hung
/// up. Private or process-wide scope.
pub fn tcp_socket(scope: Scope) -> Result<Fd, Error> {
    open_socket(scope, socket::unbound)
}

/// Make an unbound socket (`tcp_socket`) a listener on `port` with `backlog` (1..=64).
pub fn tcp_listen_on(fd: Fd, port: u16, backlog: usize) -> Result<(), Error> {
    socket::listen_unbound(socket_of(fd)?, port, backlog)
}

/// Make an unbound socket (`tcp_socket`) a connection from `local_port` to `ip:port`,
/// started (as `tcp_connect`).
pub fn tcp_connect_from(fd: Fd, ip: [u8; 4], port: u16, local_port: u16) -> Result<(), Error> {
    socket::connect_unbound(socket_of(fd)?, ip, port, local_port)
}

/// The next connection of a listening socket, as a new private descriptor: waits for one
/// (a non-blocking listener: `WouldBlock`). `InvalidArgument` for a connection's descriptor.
pub fn accept(fd: Fd) -> Result<Fd, Error> {
    accept_in(fd, Scope::Private)
}

/// `accept`, the new descriptor in `scope` (private or process-wide).
pub fn accept_in(fd: Fd, scope: Scope) -> Result<Fd, Error> {
    let id = socket_of(fd)?;
    open_socket(scope, || socket::accept(id))
}

/// Make a socket's calls answer `WouldBlock` instead of waiting (`on`), or wait again.
pub fn set_nonblocking(fd: Fd, on: bool) -> Result<(), Error> {
    socket::set_nonblocking(socket_of(fd)?, on)
}

/// Run `f` on a TCP connection descriptor's smoltcp socket (endpoints, shutdown, options:
/// what the Linux socket calls need beyond read and write). `WrongType` for another kind,
/// `InvalidArgument` for a listener.
pub fn with_tcp<R>(fd: Fd, f: impl FnOnce(&mut smoltcp::socket::tcp::Socket<'static>) -> R) -> Result<R, Error> {
    socket::with_tcp(socket_of(fd)?, f)
}

/// Whether this context can use the descriptor.
pub fn visible(fd: Fd) -> bool {
    match resolve(fd) {
        Ok(Where::Private(..)) => true,
        Ok(Where::Proc(t, d)) => with_proc(t, d, |_| Ok(())).is_ok(),
        Ok(Where::Shared) => crate::sys::obj_stat(ObjName::new(fd.table, fd.obj)).is_ok(),
        Err(_) => false,
    }
}

/// The kernel object of the open file behind a descriptor (for a kernel-object descriptor,
/// the descriptor itself; for a process-wide one, the pipe ring or file segment behind it),
/// for `obj_stat` and friends. `Unsupported` for open files without one (`fs` files, and the
/// console in the process-wide table).
pub fn object(fd: Fd) -> Result<ObjName, Error> {
    match resolve(fd)? {
        Where::Private(t, slot) => match t.object_of(t.file_of(slot)) {
            0 => Err(Error::Unsupported),
            obj => Ok(ObjName::new(fd.table, obj)),
        },
        Where::Proc(t, d) => with_proc(t, d, |k| k.behind().map(|id| ObjName::new(fd.table, id)).ok_or(Error::Unsupported)),
        Where::Shared => Ok(ObjName::new(fd.table, fd.obj)),
    }
}

/// A new descriptor for the same open file in `scope` (which may differ from `fd`'s). Inside
/// one private or process-wide table it shares the open file (no system call); any other
/// combination opens a new open file in `scope`'s table for the same thing
/// (`FileLike::opened`: a new counted end of the same pipe, a new `fs` descriptor of the same
/// open file description, so the offset stays shared as POSIX `dup` shares it), adding the
/// pipe ring or file segment behind it to that table.
pub fn dup(fd: Fd, scope: Scope) -> Result<Fd, Error> {
    let k = match resolve(fd)? {
        Where::Proc(t, d) => {
            if let Scope::Process = scope {
                // The fast path: a slot for the same open file, no system call.
                return match t.dup(d, home()) {
                    Ok(new) => Ok(Fd { table: fd.table, obj: SHARED_FD | new }),
                    Err((e, freed)) => {
                        if let Some(x) = freed {
                            let _ = proc_last_close(x);
                        }
                        Err(table_error(e))
                    }
                };
            }
            with_proc(t, d, Ok)?
        }
        Where::Private(t, slot) => {
            let f = t.file_of(slot);
            if let Scope::Private = scope {
                let new = t.new_slot(f)?;
                return Ok(Fd { table: fd.table, obj: t.fd_obj(new) });
            }
            t.kind_of(f).ok_or(Error::WrongType)?
        }
        Where::Shared => shared_kind(fd.table, fd.obj)?,
    };
    let t = table(scope)?;
    match (k, scope) {
        // A core-set table's open file is a kernel object with no count to tell when `fs`'s
        // descriptor may close: file-system files live in the other two tables only.
        (Kind::Fs(_), Scope::Table(_)) => return Err(Error::Unsupported),
        // A socket's state is its core's: only private tables, which no other core reads,
        // hold it (`socket.rs`).
        (Kind::Socket(_), Scope::Table(_)) => return Err(Error::Unsupported),
        _ => {}
    }
    let mut added = None;
    if t != fd.table {
        if let Some(id) = k.behind() {
            match crate::sys::share_addobj(t, ObjName::new(fd.table, id)) {
                Ok(_) => added = Some(id),
                Err(Error::AlreadyExists) => {}
                Err(e) => return Err(e),
            }
        }
    }
    let opened = with_file(k, |file| file.opened(t)).map(|new| new.unwrap_or(k));
    opened.and_then(|new| open_new(scope, t, new)).inspect_err(|_| {
        if let Some(id) = added {
            let _ = crate::sys::share_delobj(ObjName::new(t, id));
        }
    })
}

/// Close a descriptor. A private one frees its slot, and the last descriptor of a private
/// open file deletes the open file's kernel object (`private::last_close`). A shared one
/// deletes its kernel object; a file segment behind it stays in its table until the table
/// goes. The last close of an open file releases what its kind holds
/// (`FileLike::last_close`: a pipe end is dropped, and the last end of a pipe frees its ring;
/// an `fs` descriptor is closed).
pub fn close(fd: Fd) -> Result<(), Error> {
    match resolve(fd)? {
        Where::Private(t, slot) => private::close_private(fd.table, t, slot),
        Where::Proc(t, d) => match t.close(d) {
            Ok(None) => Ok(()),
            Ok(Some(x)) => proc_last_close(x),
            Err(e) => Err(table_error(e)),
        },
        Where::Shared => {
            // The kind first (the name goes with the object); only the caller whose delete
            // succeeds releases what it held, so two racing closes drop a pipe end once.
            let k = shared_kind(fd.table, fd.obj);
            crate::sys::share_delobj(ObjName::new(fd.table, fd.obj))?;
            match k {
                Ok(k) => with_file(k, |file| file.last_close(fd.table)).map(|_| ()),
                _ => Ok(()),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Local stream sockets (`unix.rs`)

/// What a local stream socket descriptor is (`unix_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnixState {
    /// Not connected: `UNIX_FRESH`, `UNIX_BOUND` or `UNIX_LISTENING`.
    Sock(u64),
    /// A connection; `true` for the side `accept` made (its name is the listener's).
    Conn { accepted: bool },
}

/// A local stream socket that is not connected yet, in `scope` (any table).
pub fn unix_socket(scope: Scope) -> Result<Fd, Error> {
    let t = table(scope)?;
    let page = unix::new_sock(t)?;
    open_counted(scope, t, Kind::UnixSock(page)).inspect_err(|_| {
        let _ = with_file(Kind::UnixSock(page), |f| f.last_close(t));
    })
}

/// Two connected local stream sockets (`socketpair`), both in `scope`.
pub fn unix_pair(scope: Scope) -> Result<(Fd, Fd), Error> {
    let t = table(scope)?;
    unix::pair(t, |k| open_counted(scope, t, k))
}

fn unix_page(fd: Fd) -> Result<ObjectId, Error> {
    match kind(fd)? {
        Kind::UnixSock(p) => Ok(p),
        _ => Err(Error::WrongType),
    }
}

/// What a local stream socket descriptor is, and its name (into `name`: a bound or listening
/// socket's own, a connection's listener's; its length). `WrongType` for another kind.
pub fn unix_info(fd: Fd, name: &mut [u8]) -> Result<(UnixState, usize), Error> {
    match kind(fd)? {
        Kind::UnixSock(p) => unix::sock_state(fd.table, p, name).map(|(s, n)| (UnixState::Sock(s), n)),
        Kind::Unix(id) => unix::pair_name(fd.table, id, name).map(|n| (UnixState::Conn { accepted: id & unix::SIDE_B != 0 }, n)),
        _ => Err(Error::WrongType),
    }
}

/// Give a fresh local socket `name`, findable through rendezvous share `rv` (a share every
/// process that may connect has: the Linux personality's session share). `AlreadyExists`:
/// a socket of `rv` has the name; `InvalidArgument`: this one has a name already.
pub fn unix_bind(fd: Fd, rv: ObjectId, name: &[u8]) -> Result<(), Error> {
    unix::bind(fd.table, unix_page(fd)?, rv, name)
}

/// Make a bound local socket listen (or change a listener's backlog).
pub fn unix_listen(fd: Fd, backlog: u64) -> Result<(), Error> {
    unix::listen(fd.table, unix_page(fd)?, backlog)
}

/// A new connection to the socket of rendezvous share `rv` listening on `name`, as a
/// descriptor in `scope`. `NotFound`: nothing has the name; `NotPermitted`: it does not
/// listen; `WouldBlock`: its queue is full.
pub fn unix_connect(scope: Scope, rv: ObjectId, name: &[u8]) -> Result<Fd, Error> {
    let t = table(scope)?;
    unix::connect(t, rv, name, |k| open_counted(scope, t, k))
}

/// The next connection of a listening local socket, as a descriptor in `scope`; waits for
/// one unless `nonblocking` (`WouldBlock`). `InvalidArgument` if it does not listen.
pub fn unix_accept(fd: Fd, scope: Scope, nonblocking: bool) -> Result<Fd, Error> {
    let page = unix_page(fd)?;
    let t = table(scope)?;
    unix::accept(fd.table, page, t, nonblocking, |k| open_counted(scope, t, k))
}

/// `shutdown` of a local connection (0 reads, 1 writes, 2 both). `WrongType` for another
/// kind (a socket that is not connected included).
pub fn unix_shutdown(fd: Fd, how: u32) -> Result<(), Error> {
    match kind(fd)? {
        Kind::Unix(id) => unix::shutdown(fd.table, id, how),
        _ => Err(Error::WrongType),
    }
}

/// Write to a local connection without waiting: what fits now (`WouldBlock`: nothing).
pub fn unix_write_now(fd: Fd, data: &[u8]) -> Result<usize, Error> {
    match kind(fd)? {
        Kind::Unix(id) => unix::write_now(fd.table, id, data),
        _ => Err(Error::WrongType),
    }
}

/// Whether a local connection reads no more (its `POLLRDHUP`); `false` for other kinds.
pub fn unix_read_shut(fd: Fd) -> bool {
    match kind(fd) {
        Ok(Kind::Unix(id)) => unix::read_shut(fd.table, id).unwrap_or(false),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// The process-wide table's entries and their kinds

/// The last reference to an open file of the process-wide table is gone: close what it held
/// (`FileLike::last_close`: a pipe end is dropped, the last end of a ring frees it). A file
/// segment stays in the table's share until the table goes (another open file may name it).
#[cold]
fn proc_last_close(freed: percore::fdtable::Freed) -> Result<(), Error> {
    match decode(freed.kind) {
        // `fs` state is per process: a cfork child sharing the table cannot close the
        // parent's `fs` descriptor (it stays open in the parent until unmount; docs/fd.md).
        Some(Kind::Fs(_)) if freed.owner != crate::process::proc_share() => Ok(()),
        Some(k) => with_file(k, |file| file.last_close(shared::proc_share_now_acquire())).map(|_| ()),
        None => Ok(()),
    }
}

/// Run `f` on the kind of process-wide descriptor `d`, holding a reference to its open file.
fn with_proc<R>(tbl: &ProcTable, d: u64, f: impl FnOnce(Kind) -> Result<R, Error>) -> Result<R, Error> {
    let file = match tbl.get(d) {
        Ok(file) => file,
        Err((e, freed)) => {
            if let Some(x) = freed {
                let _ = proc_last_close(x);
            }
            return Err(table_error(e));
        }
    };
    let (kind, owner) = tbl.record(file);
    let r = match decode(kind) {
        Some(Kind::Fs(_)) if owner != crate::process::proc_share() => Err(Error::NotPermitted),
        Some(k) => f(k),
        None => Err(Error::WrongType),
    };
    if let Some(x) = tbl.release(file) {
        // Closed by another thread while we used it: we were the last.
        let closed = proc_last_close(x);
        r.and_then(|v| closed.map(|_| v))
    } else {
        r
    }
}

