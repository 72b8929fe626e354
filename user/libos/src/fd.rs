//! Descriptors on shares: an open/dup/close API whose descriptor tables are shares.
//!
//! A descriptor is a kernel object (an empty one-page segment that is never touched, so it
//! costs metadata only) in a *table*, which is a share; the descriptor's kind and the object
//! behind it are in its name (`c` console, `r`/`w` + ring id for pipe ends, `f` + segment id
//! for in-memory files), and the object behind it is held by the same table. The caller
//! chooses the scope of every descriptor, which is the table it goes in:
//!
//! - `Scope::Private`: the context's private table, a `SHARE_PRIVATE` share held by its root
//!   share. Only this core can use it and the kernel takes no lock for it: `dup`/`close` here
//!   write no cache line another core reads (Corey figure 1, the fix).
//! - `Scope::Cores(&[..])`: a shared table for a named set of cores, made with
//!   `Table::for_cores`; threads the program spawns on those cores get it in their share set,
//!   and no other context can reach it.
//! - `Scope::Process`: the process-wide table, held by the process share, which every thread
//!   has.
//!
//! Pipes are rings in a shared segment (a spin lock word, head and tail counters, then the
//! data); files are segments. Both are mapped on demand into the context's descriptor window
//! (`layout::MAPWIN_OFF`) and read and written there, without system calls.

use crate::layout::{MAPWIN_OFF, MAPWIN_SLOT};
use abi::{Error, ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE, SHARE_PRIVATE};
use core::fmt::Write as _;
use core::sync::atomic::{AtomicU64, Ordering};

/// Where a descriptor lives (see the module comment).
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    Private,
    /// A table made with `Table::for_cores`.
    Table(ObjectId),
    Process,
}

/// A descriptor: `<table, object>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fd {
    pub table: ObjectId,
    pub obj: ObjectId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Console,
    PipeRead(ObjectId),
    PipeWrite(ObjectId),
    File(ObjectId),
}

const MAX_TABLES: usize = 8;
static TABLES: [AtomicU64; MAX_TABLES] = [const { AtomicU64::new(0) }; MAX_TABLES];
static TABLE_CORES: [AtomicU64; MAX_TABLES] = [const { AtomicU64::new(0) }; MAX_TABLES];
static PROC_TABLE: AtomicU64 = AtomicU64::new(0);

/// Pipe ring size (one segment): 64 bytes of header, then data.
pub const PIPE_BYTES: u64 = 64 << 10;
const PIPE_HDR: u64 = 64;

/// A descriptor table shared by a named set of cores.
pub struct Table;

impl Table {
    /// Make a table for `cores` (each < 64). Threads spawned on those cores get it.
    pub fn for_cores(cores: &[u64]) -> Result<ObjectId, Error> {
        let mut mask = 0u64;
        for &c in cores {
            if c >= 64 {
                return Err(Error::InvalidArgument);
            }
            mask |= 1 << c;
        }
        let slot = TABLES.iter().position(|t| t.load(Ordering::Relaxed) == 0).ok_or(Error::Busy)?;
        let t = crate::sys::share_alloc(crate::ctx::ctx().root_share, "fds-cores", MEMID_SELF, 0)?;
        TABLE_CORES[slot].store(mask, Ordering::Relaxed);
        TABLES[slot].store(t, Ordering::Release);
        Ok(t)
    }

    /// Delete a table made with `for_cores` (and every descriptor in it).
    pub fn destroy(t: ObjectId) -> Result<(), Error> {
        let slot = TABLES.iter().position(|x| x.load(Ordering::Relaxed) == t).ok_or(Error::NoSuchObject)?;
        TABLES[slot].store(0, Ordering::Release);
        crate::sys::share_delobj(ObjName::new(crate::ctx::ctx().root_share, t)).map(|_| ())
    }
}

/// Tables a thread on `core` gets in its share set.
pub fn shares_for_core(core: u64) -> [ObjectId; MAX_TABLES] {
    let mut out = [0; MAX_TABLES];
    for i in 0..MAX_TABLES {
        if core < 64 && TABLE_CORES[i].load(Ordering::Relaxed) & (1 << core) != 0 {
            out[i] = TABLES[i].load(Ordering::Acquire);
        }
    }
    out
}

/// The table of a scope (made on first use for the private and process tables).
pub fn table(scope: Scope) -> Result<ObjectId, Error> {
    match scope {
        Scope::Table(t) => Ok(t),
        Scope::Private => {
            let c = crate::ctx::ctx();
            if c.private_fds == 0 {
                c.private_fds = crate::sys::share_alloc(c.root_share, "fds-private", MEMID_SELF, SHARE_PRIVATE)?;
            }
            Ok(c.private_fds)
        }
        Scope::Process => {
            let t = PROC_TABLE.load(Ordering::Acquire);
            if t != 0 {
                return Ok(t);
            }
            let t = crate::process::new_share("fds-proc", MEMID_SELF)?;
            match PROC_TABLE.compare_exchange(0, t, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => Ok(t),
                Err(other) => {
                    crate::process::del_share(t);
                    Ok(other)
                }
            }
        }
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
        // Not through `core::fmt`: console descriptors are the ones dup'ed in hot loops.
        Kind::Console => n.write_str("fd:c"),
        Kind::PipeRead(id) => write!(n, "fd:r{id:x}"),
        Kind::PipeWrite(id) => write!(n, "fd:w{id:x}"),
        Kind::File(id) => write!(n, "fd:f{id:x}"),
    };
    n
}

/// `Kind` packed in a word for the private kind cache: the tag in the top byte, the id
/// (object ids fit in 48 bits: `(core + 1) << 40 | sequence`) below.
fn encode(k: Kind) -> u64 {
    match k {
        Kind::Console => 1 << 56,
        Kind::PipeRead(id) => 2 << 56 | id,
        Kind::PipeWrite(id) => 3 << 56 | id,
        Kind::File(id) => 4 << 56 | id,
    }
}

fn decode(w: u64) -> Option<Kind> {
    let id = w & ((1 << 56) - 1);
    match w >> 56 {
        1 => Some(Kind::Console),
        2 => Some(Kind::PipeRead(id)),
        3 => Some(Kind::PipeWrite(id)),
        4 => Some(Kind::File(id)),
        _ => None,
    }
}

/// The cached kind of a descriptor in this context's private table.
fn cached_kind(fd: Fd) -> Option<Kind> {
    let c = crate::ctx::try_ctx()?;
    if fd.table == 0 || fd.table != c.private_fds {
        return None;
    }
    c.private_kinds.iter().find(|e| e.0 == fd.obj).and_then(|e| decode(e.1))
}

fn cache_kind(fd: Fd, k: Kind) {
    let Some(c) = crate::ctx::try_ctx() else { return };
    if fd.table != c.private_fds || id_too_big(k) {
        return;
    }
    if let Some(e) = c.private_kinds.iter_mut().find(|e| e.0 == 0) {
        *e = (fd.obj, encode(k));
    }
}

fn id_too_big(k: Kind) -> bool {
    matches!(k, Kind::PipeRead(id) | Kind::PipeWrite(id) | Kind::File(id) if id >> 56 != 0)
}

fn uncache_kind(fd: Fd) {
    let Some(c) = crate::ctx::try_ctx() else { return };
    if fd.table != c.private_fds {
        return;
    }
    if let Some(e) = c.private_kinds.iter_mut().find(|e| e.0 == fd.obj) {
        *e = (0, 0);
    }
}

fn parse_kind(name: &[u8]) -> Option<Kind> {
    let s = core::str::from_utf8(name).ok()?.strip_prefix("fd:")?;
    let (k, rest) = s.split_at(1);
    let id = if rest.is_empty() { 0 } else { u64::from_str_radix(rest, 16).ok()? };
    match k {
        "c" => Some(Kind::Console),
        "r" => Some(Kind::PipeRead(id)),
        "w" => Some(Kind::PipeWrite(id)),
        "f" => Some(Kind::File(id)),
        _ => None,
    }
}

/// Make a descriptor of kind `k` in `table`.
fn make(table: ObjectId, k: Kind) -> Result<Fd, Error> {
    let n = kind_name(k);
    // SAFETY-free: the name is ASCII we just wrote.
    let name = core::str::from_utf8(&n.buf[..n.len]).map_err(|_| Error::InvalidArgument)?;
    let obj = crate::sys::segment_alloc(table, name, MEMID_SELF, PAGE_SIZE)?;
    let fd = Fd { table, obj };
    cache_kind(fd, k);
    Ok(fd)
}

/// Open the console.
pub fn open_console(scope: Scope) -> Result<Fd, Error> {
    make(table(scope)?, Kind::Console)
}

/// A pipe: `(read end, write end)`, both in `scope`. The ring is a segment in the table.
pub fn pipe(scope: Scope) -> Result<(Fd, Fd), Error> {
    let t = table(scope)?;
    let ring = crate::sys::segment_alloc(t, "pipe-ring", MEMID_SELF, PIPE_BYTES)?;
    let r = make(t, Kind::PipeRead(ring));
    let w = make(t, Kind::PipeWrite(ring));
    match (r, w) {
        (Ok(r), Ok(w)) => Ok((r, w)),
        (r, w) => {
            for fd in [r.ok(), w.ok()].into_iter().flatten() {
                let _ = close(fd);
            }
            let _ = crate::sys::share_delobj(ObjName::new(t, ring));
            Err(Error::NoMemory)
        }
    }
}

/// An in-memory file of `bytes` (a segment; grows on write up to the window slot size).
pub fn mem_file(scope: Scope, bytes: u64) -> Result<Fd, Error> {
    let t = table(scope)?;
    let seg = crate::sys::segment_alloc(t, "file", MEMID_SELF, bytes.max(PAGE_SIZE))?;
    make(t, Kind::File(seg)).inspect_err(|_| {
        let _ = crate::sys::share_delobj(ObjName::new(t, seg));
    })
}

/// The kind of a descriptor (`NotPermitted`/`ShareNotReachable`/`NoSuchObject` if this
/// context cannot see it).
pub fn kind(fd: Fd) -> Result<Kind, Error> {
    if let Some(k) = cached_kind(fd) {
        return Ok(k);
    }
    let mut buf = [0u8; abi::MAX_NAME];
    let n = crate::sys::obj_get_name(ObjName::new(fd.table, fd.obj), &mut buf)? as usize;
    parse_kind(&buf[..n.min(buf.len())]).ok_or(Error::WrongType)
}

/// Whether this context can see (name) the descriptor.
pub fn visible(fd: Fd) -> bool {
    crate::sys::obj_stat(ObjName::new(fd.table, fd.obj)).is_ok()
}

/// A new descriptor for the same object in `scope` (which may differ from `fd`'s).
pub fn dup(fd: Fd, scope: Scope) -> Result<Fd, Error> {
    let k = kind(fd)?;
    let t = table(scope)?;
    if t != fd.table {
        if let Kind::PipeRead(id) | Kind::PipeWrite(id) | Kind::File(id) = k {
            match crate::sys::share_addobj(t, ObjName::new(fd.table, id)) {
                Ok(_) | Err(Error::AlreadyExists) => {}
                Err(e) => return Err(e),
            }
        }
    }
    make(t, k)
}

/// Close a descriptor. The object behind it stays in the table until the table goes.
/// (Private descriptors must be closed here, not with `share_delobj`: their kinds are
/// cached in the context page.)
pub fn close(fd: Fd) -> Result<(), Error> {
    crate::sys::share_delobj(ObjName::new(fd.table, fd.obj))?;
    uncache_kind(fd);
    Ok(())
}

/// Map a segment into this context's descriptor window (cached per context).
fn map(seg: ObjName) -> Result<(u64, u64), Error> {
    let c = crate::ctx::ctx();
    let base = crate::ctx::arena() + MAPWIN_OFF;
    let len = crate::sys::segment_get_nbytes(seg)?.next_multiple_of(PAGE_SIZE).min(MAPWIN_SLOT);
    if let Some(i) = c.mapped.iter().position(|&m| m == seg.object) {
        return Ok((base + i as u64 * MAPWIN_SLOT, len));
    }
    let i = c.mapped.iter().position(|&m| m == 0).ok_or(Error::Busy)?;
    let va = base + i as u64 * MAPWIN_SLOT;
    crate::sys::ar_set_seg(c.root_ar, &SegMapping { voff: va, seg, soff: 0, len, flags: MAP_READ | MAP_WRITE })?;
    c.mapped[i] = seg.object;
    Ok((va, len))
}

/// Unmap every segment this context mapped for descriptors.
pub fn unmap_all() {
    let c = crate::ctx::ctx();
    let base = crate::ctx::arena() + MAPWIN_OFF;
    for i in 0..c.mapped.len() {
        if c.mapped[i] != 0 {
            let _ = crate::sys::ar_unmap(c.root_ar, base + i as u64 * MAPWIN_SLOT, MAPWIN_SLOT);
            c.mapped[i] = 0;
        }
    }
}

fn ring_lock(hdr: *const AtomicU64) {
    // SAFETY: `hdr` points at the ring's first word, mapped read-write.
    let l = unsafe { &*hdr };
    while l.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        core::hint::spin_loop();
    }
}

fn ring_unlock(hdr: *const AtomicU64) {
    // SAFETY: as in `ring_lock`.
    unsafe { &*hdr }.store(0, Ordering::Release);
}

/// Write to a descriptor; returns the bytes taken (a full pipe takes fewer, maybe 0).
pub fn write(fd: Fd, data: &[u8]) -> Result<usize, Error> {
    match kind(fd)? {
        Kind::Console => {
            crate::console::write_all(data);
            Ok(data.len())
        }
        Kind::PipeWrite(ring) => {
            let (va, _) = map(ObjName::new(fd.table, ring))?;
            let cap = PIPE_BYTES - PIPE_HDR;
            let hdr = va as *const AtomicU64;
            ring_lock(hdr);
            // SAFETY: the ring header words are mapped read-write at `va`; data bytes follow.
            let n = unsafe {
                let head = &*(va as *const AtomicU64).add(1);
                let tail = &*(va as *const AtomicU64).add(2);
                let (h, t) = (head.load(Ordering::Relaxed), tail.load(Ordering::Relaxed));
                let n = (cap - (h - t)).min(data.len() as u64);
                for i in 0..n {
                    *((va + PIPE_HDR + (h + i) % cap) as *mut u8) = data[i as usize];
                }
                head.store(h + n, Ordering::Release);
                n
            };
            ring_unlock(hdr);
            Ok(n as usize)
        }
        Kind::File(seg) => pwrite(fd, seg, 0, data),
        Kind::PipeRead(_) => Err(Error::NotPermitted),
    }
}

/// Read from a descriptor; returns the bytes read (0: nothing waiting).
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, Error> {
    match kind(fd)? {
        Kind::Console => crate::sys::console_read(buf).map(|n| n as usize),
        Kind::PipeRead(ring) => {
            let (va, _) = map(ObjName::new(fd.table, ring))?;
            let cap = PIPE_BYTES - PIPE_HDR;
            let hdr = va as *const AtomicU64;
            ring_lock(hdr);
            // SAFETY: as in `write`.
            let n = unsafe {
                let head = &*(va as *const AtomicU64).add(1);
                let tail = &*(va as *const AtomicU64).add(2);
                let (h, t) = (head.load(Ordering::Acquire), tail.load(Ordering::Relaxed));
                let n = (h - t).min(buf.len() as u64);
                for i in 0..n {
                    buf[i as usize] = *((va + PIPE_HDR + (t + i) % cap) as *const u8);
                }
                tail.store(t + n, Ordering::Release);
                n
            };
            ring_unlock(hdr);
            Ok(n as usize)
        }
        Kind::File(seg) => pread(fd, seg, 0, buf),
        Kind::PipeWrite(_) => Err(Error::NotPermitted),
    }
}

fn pwrite(fd: Fd, seg: ObjectId, off: u64, data: &[u8]) -> Result<usize, Error> {
    let (va, len) = map(ObjName::new(fd.table, seg))?;
    let n = (len.saturating_sub(off)).min(data.len() as u64) as usize;
    // SAFETY: `[va + off, va + off + n)` lies in the file's read-write mapping.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), (va + off) as *mut u8, n) };
    Ok(n)
}

fn pread(fd: Fd, seg: ObjectId, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
    let (va, len) = map(ObjName::new(fd.table, seg))?;
    let n = (len.saturating_sub(off)).min(buf.len() as u64) as usize;
    // SAFETY: as in `pwrite`.
    unsafe { core::ptr::copy_nonoverlapping((va + off) as *const u8, buf.as_mut_ptr(), n) };
    Ok(n)
}

/// Write a file at offset `off`.
pub fn write_at(fd: Fd, off: u64, data: &[u8]) -> Result<usize, Error> {
    match kind(fd)? {
        Kind::File(seg) => pwrite(fd, seg, off, data),
        _ => Err(Error::WrongType),
    }
}

/// Read a file at offset `off`.
pub fn read_at(fd: Fd, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
    match kind(fd)? {
        Kind::File(seg) => pread(fd, seg, off, buf),
        _ => Err(Error::WrongType),
    }
}
