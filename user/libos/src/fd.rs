//! Descriptors: an open/dup/close API over kernel objects, with a per-context table in user
//! memory for private descriptors and shares as tables for shared ones.
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
//! `read`, `write`, `fstat` work on every kind. (Tables for core sets keep kernel objects as
//! descriptors and do not take `fs` files: `Unsupported`.)
//!
//! A private descriptor is `Fd { table: private share, obj: PRIVATE_FD | generation << 32 |
//! slot }`. Another context (another core) gets `NotPermitted` for it without looking at any
//! table (its own private share has another id), and the kernel refuses it the share as well.
//! The slot's generation changes at every close, so a closed descriptor stays invalid
//! (`NoSuchObject`) even after its slot is reused.
//!
//! Pipes are rings in a shared segment (a spin lock word, head and tail counters, the count of
//! open read and write ends, then the data) with POSIX's answers: a write with no read end
//! open is `BrokenPipe`, a read of an empty pipe is 0 (end of file) with no write end open and
//! waits while one is, and the last end to close frees the ring (docs/fd.md, "Pipes"); files
//! are segments. Both are mapped on demand into the context's descriptor window
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

/// A descriptor: `<table, object>` (for a private descriptor, `<private share, slot>`: see
/// the module comment).
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
    /// A file or directory of the mounted file system: `fs`'s descriptor (one per open file
    /// of this table; it holds `fs`'s open file description, offset included).
    Fs(u32),
}

impl Kind {
    /// The pipe ring or file segment behind the descriptor, if any.
    fn behind(self) -> Option<ObjectId> {
        match self {
            Kind::Console | Kind::Fs(_) => None,
            Kind::PipeRead(id) | Kind::PipeWrite(id) | Kind::File(id) => Some(id),
        }
    }
}

const MAX_TABLES: usize = 8;
static TABLES: [AtomicU64; MAX_TABLES] = [const { AtomicU64::new(0) }; MAX_TABLES];
static TABLE_CORES: [AtomicU64; MAX_TABLES] = [const { AtomicU64::new(0) }; MAX_TABLES];
/// The process-wide table: its share (which holds pipe rings and files behind its
/// descriptors), the address of its `ProcTable` and the heap segment that memory is.
static PROC_TABLE: AtomicU64 = AtomicU64::new(0);
static PROC_MEM: AtomicU64 = AtomicU64::new(0);
static PROC_SEG: AtomicU64 = AtomicU64::new(0);

/// Descriptors of the process-wide table (Linux's default `RLIMIT_NOFILE`, as the private
/// table).
pub const SHARED_SLOTS: usize = 1024;
/// The process-wide table: 16 bitmap words (each on its own line pair), 1024 slots, 1024
/// open-file records.
type ProcTable = percore::fdtable::DescTable<{ SHARED_SLOTS / 64 }, SHARED_SLOTS>;
/// Bit 62 of `Fd::obj` marks a descriptor of the process-wide table (bits 32..61 are the
/// slot's generation, 0..31 the slot).
pub const SHARED_FD: u64 = 1 << 62;

/// Pipe ring size (one segment): 256 bytes of header, then data.
pub const PIPE_BYTES: u64 = 64 << 10;
/// Header: the lock, head and tail words in the first 128-byte line pair, the ends word in
/// the second (a close, which writes the ends word, shares no line with a read or write of a
/// pipe holding bytes: they do not commute-conflict), data from the third on.
const PIPE_HDR: u64 = 256;
/// Header word 16 (byte 128) of a ring: its open ends (open files of kind
/// `PipeRead`/`PipeWrite` in any table), read ends in the low half, write ends in the high
/// half. One word, so that the decrement that takes the ring to "no end open" is one atomic
/// step only one closer sees (see `drop_end`).
const ENDS_WORD: usize = 16;
const READ_END: u64 = 1;
const WRITE_END: u64 = 1 << 32;
/// Writes of at most this many bytes to a pipe are atomic (POSIX `PIPE_BUF`, Linux's value).
pub const PIPE_BUF: usize = 4096;
/// A reader of an empty pipe with a writer spins this many times between looks, then yields
/// the core (`pcore_yield`: on a time-shared core the writer may be the one waiting to run).
const READ_SPINS: u32 = 256;

// ---------------------------------------------------------------------------------------
// The private descriptor table

/// Bit 63 of `Fd::obj` marks a private descriptor. Kernel object ids are `(core + 1) << 40 |
/// sequence`, so no kernel-object descriptor has it.
pub const PRIVATE_FD: u64 = 1 << 63;
/// Slot generations are 31 bits (bit 63 of the descriptor is the mark).
const GEN_MASK: u32 = 0x7fff_ffff;

/// Slots (descriptors) of a context's private table; the table is full at this many open
/// private descriptors (`Busy`). Also the most open files it can hold, since every open file
/// has at least one slot. Linux's default limit (`RLIMIT_NOFILE`'s soft value). The table's
/// pages are demand-zero: a context pays for the pages its descriptors touch, not for the
/// limit.
pub const PRIVATE_SLOTS: usize = 1024;
const WORDS: usize = PRIVATE_SLOTS / 64;

#[derive(Clone, Copy)]
#[repr(C)]
struct Slot {
    /// Index of the open file in `PrivateTable::files`.
    file: u32,
    /// Bumped at every close (masked by `GEN_MASK`).
    generation: u32,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct OpenFile {
    /// The kernel object (in `Ctx::private_fds`).
    obj: ObjectId,
    /// `encode(Kind)`.
    kind: u64,
}

/// A context's private descriptor table, at `arena() + PAGE_SIZE` in the context's own
/// segment (`ctx::CTX_BYTES`). Only the owner context maps it, reads it or writes it, so it
/// needs no lock; every field is a plain integer, valid for any bits.
#[repr(C)]
pub struct PrivateTable {
    slot_used: [u64; WORDS],
    file_used: [u64; WORDS],
    slots: [Slot; PRIVATE_SLOTS],
    files: [OpenFile; PRIVATE_SLOTS],
    /// Slots pointing at each open file.
    refs: [u32; PRIVATE_SLOTS],
}

/// Counts of this context's private table (for tests and tools).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PrivateCounts {
    /// Descriptors (slots in use).
    pub descriptors: u32,
    /// Open files (kernel objects the table holds).
    pub open_files: u32,
}

/// This context's private table. Callers first check that this context has a context page
/// (`try_ctx`) and must not hold two results at once.
fn private_table() -> &'static mut PrivateTable {
    let p = (crate::ctx::arena() + PAGE_SIZE) as *mut PrivateTable;
    // SAFETY: every library-OS context maps its own context segment (`CTX_BYTES` bytes,
    // read-write) at `arena()`, and the table lies after the first page of it; no other
    // context maps that segment, one context runs on one core at a time, and callers hold
    // one reference at a time. All fields are integers, valid for any bit pattern.
    unsafe { &mut *p }
}

fn take_bit(bits: &mut [u64; WORDS]) -> Option<usize> {
    for (i, w) in bits.iter_mut().enumerate() {
        if *w != u64::MAX {
            let b = w.trailing_ones() as usize;
            *w |= 1 << b;
            return Some(i * 64 + b);
        }
    }
    None
}

fn clear_bit(bits: &mut [u64; WORDS], i: usize) {
    bits[i / 64] &= !(1 << (i % 64));
}

fn bit(bits: &[u64; WORDS], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

impl PrivateTable {
    fn fd_obj(&self, slot: usize) -> ObjectId {
        PRIVATE_FD | (self.slots[slot].generation as u64) << 32 | slot as u64
    }

    /// The slot a private descriptor names, if it is open (same generation).
    fn slot_of(&self, obj: ObjectId) -> Option<usize> {
        let slot = (obj & 0xffff_ffff) as usize;
        let generation = (obj >> 32) & GEN_MASK as u64;
        (slot < PRIVATE_SLOTS && bit(&self.slot_used, slot) && self.slots[slot].generation as u64 == generation).then_some(slot)
    }

    fn file_of(&self, slot: usize) -> usize {
        self.slots[slot].file as usize
    }

    /// A new slot for open file `file`.
    fn new_slot(&mut self, file: usize) -> Result<usize, Error> {
        let s = take_bit(&mut self.slot_used).ok_or(Error::Busy)?;
        self.slots[s].file = file as u32;
        self.refs[file] += 1;
        Ok(s)
    }
}

/// Which table a descriptor is in, as seen from this context.
enum Where {
    /// A kernel-object descriptor in a shared table (the kernel decides who may use it).
    Shared,
    /// Open slot `1` of this context's private table `0`.
    Private(&'static mut PrivateTable, usize),
    /// Descriptor `1` (`generation << 32 | slot`) of the process-wide table `0`.
    Proc(&'static ProcTable, u64),
}

/// The process-wide table, if this process has one.
fn proc_table() -> Option<&'static ProcTable> {
    let p = PROC_MEM.load(Ordering::Acquire) as *const ProcTable;
    // SAFETY: `PROC_MEM` is 0 or the address of a `ProcTable` made by `table(Process)` in a
    // heap block that is never freed, mapped in every context of the process (the heap
    // ranges are linked into each one's root range) and, in a cfork child, either the same
    // segment (shared when asked) or reset to 0 (`after_cfork`). All its fields are atomics.
    unsafe { p.as_ref() }
}

fn resolve(fd: Fd) -> Result<Where, Error> {
    if fd.obj & SHARED_FD != 0 && fd.obj & PRIVATE_FD == 0 {
        let t = proc_table().ok_or(Error::NoSuchObject)?;
        // Another process's (or a forgotten) table: not reachable from here.
        return if fd.table == PROC_TABLE.load(Ordering::Relaxed) { Ok(Where::Proc(t, fd.obj & !SHARED_FD)) } else { Err(Error::NotPermitted) };
    }
    let mine = crate::ctx::try_ctx().map_or(0, |c| c.private_fds);
    if fd.obj & PRIVATE_FD == 0 {
        if fd.table == PROC_TABLE.load(Ordering::Relaxed) {
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
    let t = private_table();
    let slot = t.slot_of(fd.obj).ok_or(Error::NoSuchObject)?;
    Ok(Where::Private(t, slot))
}

/// Open a private descriptor for a new open file of kind `k` in `share` (the private share).
fn open_private(share: ObjectId, k: Kind) -> Result<Fd, Error> {
    let t = private_table();
    // Room first: a full table changes nothing and makes no kernel object.
    let slot = take_bit(&mut t.slot_used).ok_or(Error::Busy)?;
    let Some(file) = take_bit(&mut t.file_used) else {
        clear_bit(&mut t.slot_used, slot);
        return Err(Error::Busy);
    };
    // An `fs` file needs no kernel object: `fs`'s descriptor is what the open file holds.
    let made = if let Kind::Fs(_) = k { Ok(0) } else { make_object(share, k) };
    match made {
        Ok(obj) => {
            t.files[file] = OpenFile { obj, kind: encode(k) };
            t.refs[file] = 1;
            t.slots[slot].file = file as u32;
            Ok(Fd { table: share, obj: t.fd_obj(slot) })
        }
        Err(e) => {
            clear_bit(&mut t.slot_used, slot);
            clear_bit(&mut t.file_used, file);
            Err(e)
        }
    }
}

fn close_private(share: ObjectId, t: &mut PrivateTable, slot: usize) -> Result<(), Error> {
    clear_bit(&mut t.slot_used, slot);
    t.slots[slot].generation = t.slots[slot].generation.wrapping_add(1) & GEN_MASK;
    let f = t.file_of(slot);
    t.refs[f] -= 1;
    if t.refs[f] != 0 {
        return Ok(());
    }
    last_close(share, t, f)
}

/// Close every descriptor left in the calling context's private table, because the context
/// is ending: a thread or a cfork child whose function returned, or a program whose `main`
/// returned. Each pipe end goes, so a reader in another context reads end of file and a writer
/// gets `BrokenPipe` instead of waiting forever, and the last end frees the ring. A file
/// system descriptor's open file goes too, so a file unlinked while open is freed. Before
/// session 14 nothing closed them, and a pipe whose last reader's thread ended without `close`
/// never reported `BrokenPipe`. Errors are ignored: the context ends whatever they say.
/// Returns how many descriptors it closed.
///
/// Not called by a context that ends any other way: `exit` called from inside a function,
/// a fault, or a halt from outside. `exit` runs in `cores::Core` contexts too, which have no
/// context page to look at.
pub fn close_private_at_exit() -> usize {
    let Some(c) = crate::ctx::try_ctx() else { return 0 };
    let share = c.private_fds;
    if share == 0 {
        return 0;
    }
    let t = private_table();
    let mut closed = 0;
    for slot in 0..PRIVATE_SLOTS {
        if t.slot_used[slot / 64] != 0 && bit(&t.slot_used, slot) {
            let _ = close_private(share, t, slot);
            closed += 1;
        }
    }
    if closed != 0 {
        // The rings the closes mapped to count their ends down.
        unmap_all();
    }
    closed
}

/// The last descriptor of private open file `f` closed: delete its kernel object, and the
/// pipe ring or file segment behind it if no other private open file uses that (it stays
/// alive in any shared table it was dup'ed into, which holds its own reference).
#[cold]
fn last_close(share: ObjectId, t: &mut PrivateTable, f: usize) -> Result<(), Error> {
    clear_bit(&mut t.file_used, f);
    let OpenFile { obj, kind } = t.files[f];
    if let Some(Kind::Fs(i)) = decode(kind) {
        return crate::fs::close(crate::fs::Fd(i)).map_err(fs_error);
    }
    let r = crate::sys::share_delobj(ObjName::new(share, obj)).map(|_| ());
    let Some(k) = decode(kind) else { return r };
    if end_of(k).is_some() {
        // This open file was one end of its ring: the last end anywhere frees the ring (from
        // every table holding it, this private share included).
        match drop_end(share, k) {
            Ok(true) => return r,
            Ok(false) => {}
            Err(e) => return r.and(Err(e)),
        }
    }
    let Some(id) = k.behind() else { return r };
    let used = (0..PRIVATE_SLOTS)
        .filter(|&i| t.file_used[i / 64] != 0 && bit(&t.file_used, i))
        .any(|i| decode(t.files[i].kind).and_then(Kind::behind) == Some(id));
    if used {
        return r;
    }
    unmap_one(id);
    r.and(crate::sys::share_delobj(ObjName::new(share, id)).map(|_| ()))
}

/// Counts of this context's private table (zero before the first private descriptor).
pub fn private_counts() -> PrivateCounts {
    match crate::ctx::try_ctx() {
        Some(c) if c.private_fds != 0 => {
            let t = private_table();
            let ones = |b: &[u64; WORDS]| b.iter().map(|w| w.count_ones()).sum();
            PrivateCounts { descriptors: ones(&t.slot_used), open_files: ones(&t.file_used) }
        }
        _ => PrivateCounts::default(),
    }
}

// ---------------------------------------------------------------------------------------
// Tables

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

/// The table of a scope (made on first use for the private and process tables). For
/// `Scope::Private` this is the share holding the private open files' kernel objects.
pub fn table(scope: Scope) -> Result<ObjectId, Error> {
    match scope {
        Scope::Table(t) => Ok(t),
        Scope::Private => {
            let c = crate::ctx::ctx();
            if c.private_fds == 0 {
                let s = crate::sys::share_alloc(c.root_share, "fds-private", MEMID_SELF, SHARE_PRIVATE)?;
                // Empty the table: the context segment is demand-zero when new, but this does
                // not depend on it. (Slots and files are read only where the bitmaps say.)
                let t = private_table();
                t.slot_used = [0; WORDS];
                t.file_used = [0; WORDS];
                c.private_fds = s;
            }
            Ok(c.private_fds)
        }
        Scope::Process => {
            let t = PROC_TABLE.load(Ordering::Acquire);
            if t != 0 {
                return Ok(t);
            }
            new_proc_table()
        }
    }
}

/// Bytes of the process-wide table's heap block: more than the heap's largest small block,
/// so that it is a segment of its own (which `cfork` can share).
const PROC_BLOCK: usize = {
    let n = core::mem::size_of::<ProcTable>().next_multiple_of(PAGE_SIZE as usize);
    if n > crate::heap::LARGEST_SMALL {
        n
    } else {
        crate::heap::LARGEST_SMALL + PAGE_SIZE as usize
    }
};

/// Make the process-wide table (its share and its memory); one wins if two threads race.
#[cold]
fn new_proc_table() -> Result<ObjectId, Error> {
    const _: () = assert!(ProcTable::zeroed_is_empty());
    let layout = core::alloc::Layout::from_size_align(PROC_BLOCK, PAGE_SIZE as usize).map_err(|_| Error::InvalidArgument)?;
    let share = crate::process::new_share("fds-proc", MEMID_SELF)?;
    // SAFETY: a non-zero-sized layout.
    let mem = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if mem.is_null() {
        crate::process::del_share(share);
        return Err(Error::NoMemory);
    }
    // Claim the table before publishing the memory: a racing thread that loses frees its own.
    match PROC_TABLE.compare_exchange(0, share, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            // SAFETY: `mem` is a live large block of this allocator (`PROC_BLOCK` is larger
            // than its largest small class).
            PROC_SEG.store(unsafe { crate::heap::large_block_segment(mem) }, Ordering::Relaxed);
            // All-zero memory is an empty table (asserted above); it is never freed.
            PROC_MEM.store(mem as u64, Ordering::Release);
            Ok(share)
        }
        Err(other) => {
            // SAFETY: allocated above with `layout`, never published.
            unsafe { alloc::alloc::dealloc(mem, layout) };
            crate::process::del_share(share);
            // The winner publishes its memory right after its swap.
            while PROC_MEM.load(Ordering::Acquire) == 0 {
                core::hint::spin_loop();
            }
            Ok(other)
        }
    }
}

/// Counts of the process-wide table: `(descriptors, open files)` (zero before it exists).
pub fn proc_counts() -> (u32, u32) {
    proc_table().map_or((0, 0), |t| t.counts())
}

/// The table share and segment a caller lists in `CforkOpts::shares` and
/// `CforkOpts::segments` so that the child shares this process's process-wide table
/// (descriptors either opens or closes are the other's too). Made on first use.
pub fn cfork_share_table() -> Result<(ObjectId, ObjectId), Error> {
    let share = table(Scope::Process)?;
    Ok((share, PROC_SEG.load(Ordering::Relaxed)))
}

/// Whether `opts` shares the process-wide table with a `cfork` child (both its share and its
/// segment listed).
pub(crate) fn shared_with_child(opts: &crate::cfork::CforkOpts) -> bool {
    let (t, seg) = (PROC_TABLE.load(Ordering::Acquire), PROC_SEG.load(Ordering::Relaxed));
    t != 0 && opts.shares.contains(&t) && opts.segments.contains(&seg)
}

/// In a new `cfork` child: keep the process-wide table if the parent shared it, else forget
/// the copy (the child's process-wide table starts empty when first used; the parent's
/// descriptors are `NotPermitted` here). The copy's memory goes with the child's heap.
pub(crate) fn after_cfork(shared: bool) {
    if !shared {
        PROC_MEM.store(0, Ordering::Relaxed);
        PROC_SEG.store(0, Ordering::Relaxed);
        PROC_TABLE.store(0, Ordering::Release);
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
fn encode(k: Kind) -> u64 {
    match k {
        Kind::Console => 1 << 56,
        Kind::PipeRead(id) => 2 << 56 | id,
        Kind::PipeWrite(id) => 3 << 56 | id,
        Kind::File(id) => 4 << 56 | id,
        Kind::Fs(i) => 5 << 56 | i as u64,
    }
}

fn decode(w: u64) -> Option<Kind> {
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
fn make_object(share: ObjectId, k: Kind) -> Result<ObjectId, Error> {
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
/// of its ring (counted; `NoSuchObject` if the ring's last end closed meanwhile).
fn open_in(scope: Scope, t: ObjectId, k: Kind) -> Result<Fd, Error> {
    if end_of(k).is_none() {
        return open_counted(scope, t, k);
    }
    add_end(t, k)?;
    open_counted(scope, t, k).inspect_err(|_| {
        let _ = drop_end(t, k);
    })
}

/// `open_in` for an open file whose pipe end (if it is one) is already counted.
fn open_counted(scope: Scope, t: ObjectId, k: Kind) -> Result<Fd, Error> {
    match scope {
        Scope::Private => open_private(t, k),
        Scope::Process => open_proc(t, k),
        Scope::Table(_) => Ok(Fd { table: t, obj: make_object(t, k)? }),
    }
}

/// This core's starting word in the process-wide table's bitmaps.
fn home() -> usize {
    crate::ctx::core_id()
}

/// A new open file of kind `k` in the process-wide table `t` (its share).
fn open_proc(t: ObjectId, k: Kind) -> Result<Fd, Error> {
    let tbl = proc_table().ok_or(Error::NoSuchObject)?;
    let d = tbl.open(home(), encode(k), crate::process::proc_share()).map_err(table_error)?;
    Ok(Fd { table: t, obj: SHARED_FD | d })
}

fn table_error(e: percore::fdtable::TableError) -> Error {
    match e {
        percore::fdtable::TableError::Full => Error::Busy,
        percore::fdtable::TableError::BadDescriptor => Error::NoSuchObject,
    }
}

/// The last reference to an open file of the process-wide table is gone: close what it held.
/// A pipe end is dropped (the last end of a ring frees it); a file segment stays in the
/// table's share until the table goes (another open file may name it).
#[cold]
fn proc_last_close(freed: percore::fdtable::Freed) -> Result<(), Error> {
    match decode(freed.kind) {
        Some(k) if end_of(k).is_some() => drop_end(PROC_TABLE.load(Ordering::Acquire), k).map(|_| ()),
        // `fs` state is per process: a cfork child sharing the table cannot close the
        // parent's `fs` descriptor (it stays open in the parent until unmount; docs/fd.md).
        Some(Kind::Fs(i)) if freed.owner == crate::process::proc_share() => crate::fs::close(crate::fs::Fd(i)).map_err(fs_error),
        _ => Ok(()),
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

/// Open the console.
pub fn open_console(scope: Scope) -> Result<Fd, Error> {
    open_in(scope, table(scope)?, Kind::Console)
}

/// A pipe: `(read end, write end)`, both in `scope`. The ring is a segment in the table.
pub fn pipe(scope: Scope) -> Result<(Fd, Fd), Error> {
    let t = table(scope)?;
    let ring = crate::sys::segment_alloc(t, "pipe-ring", MEMID_SELF, PIPE_BYTES)?;
    // Both ends counted before either exists: nobody else can name the ring yet, and from
    // here on every way out goes through `drop_end`, whose last call frees the ring.
    match with_ends(t, ring, |ends| ends.store(READ_END | WRITE_END, Ordering::Release)) {
        Ok(()) => {}
        Err(e) => {
            let _ = crate::sys::share_delobj(ObjName::new(t, ring));
            return Err(e);
        }
    }
    let r = open_counted(scope, t, Kind::PipeRead(ring));
    let w = open_counted(scope, t, Kind::PipeWrite(ring));
    match (r, w) {
        (Ok(r), Ok(w)) => Ok((r, w)),
        (r, w) => {
            let err = r.and(w).err().unwrap_or(Error::NoMemory);
            // The end that did not open first (it only has its count), then the one that did
            // (by `close`, which drops the last count and frees the ring).
            for (res, k) in [(r, Kind::PipeRead(ring)), (w, Kind::PipeWrite(ring))] {
                if res.is_err() {
                    let _ = drop_end(t, k);
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
    open_in(scope, t, Kind::File(seg)).inspect_err(|_| {
        let _ = crate::sys::share_delobj(ObjName::new(t, seg));
    })
}

/// The kind of a shared descriptor, from its kernel object's name (a system call).
fn shared_kind(fd: Fd) -> Result<Kind, Error> {
    let mut buf = [0u8; abi::MAX_NAME];
    let n = crate::sys::obj_get_name(ObjName::new(fd.table, fd.obj), &mut buf)? as usize;
    parse_kind(&buf[..n.min(buf.len())]).ok_or(Error::WrongType)
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
        Where::Private(t, slot) => f(decode(t.files[t.file_of(slot)].kind).ok_or(Error::WrongType)?),
        Where::Proc(t, d) => with_proc(t, d, f),
        Where::Shared => f(shared_kind(fd)?),
    }
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
    open_in(scope, t, Kind::Fs(f.0)).map_err(|e| {
        let _ = crate::fs::close(f);
        match e {
            Error::Busy | Error::NoMemory => FsError::NoMemory,
            _ => FsError::InvalidArgument,
        }
    })
}

/// File mode bits (`st_mode`'s type) for descriptors that are not `fs` files.
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;

/// `fstat` of any descriptor: an `fs` file's inode; a console (character device), pipe
/// (FIFO, size: bytes waiting) or segment file (regular, size: its bytes) made up from what
/// the descriptor names (`ino` 0).
pub fn fstat(fd: Fd) -> Result<crate::fs::Stat, Error> {
    on_kind(fd, |k| {
        let st = |mode: u16, size: u64| crate::fs::Stat { ino: 0, mode, links: 1, uid: 0, gid: 0, size, blocks512: 0, mtime: 0 };
        match k {
            Kind::Fs(i) => crate::fs::fstat(crate::fs::Fd(i)).map_err(fs_error),
            Kind::Console => Ok(st(S_IFCHR | 0o620, 0)),
            Kind::PipeRead(ring) | Kind::PipeWrite(ring) => {
                let (va, _) = map(ObjName::new(fd.table, ring))?;
                // SAFETY: the ring's header words are mapped at `va` (see `write`).
                let (h, t) = unsafe { ((*(va as *const AtomicU64).add(1)).load(Ordering::Acquire), (*(va as *const AtomicU64).add(2)).load(Ordering::Acquire)) };
                Ok(st(S_IFIFO | 0o600, h.wrapping_sub(t)))
            }
            Kind::File(seg) => Ok(st(crate::fs::S_IFREG | 0o644, crate::sys::segment_get_nbytes(ObjName::new(fd.table, seg))?)),
        }
    })
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
        Where::Private(t, slot) => match t.files[t.file_of(slot)].obj {
            0 => Err(Error::Unsupported),
            obj => Ok(ObjName::new(fd.table, obj)),
        },
        Where::Proc(t, d) => with_proc(t, d, |k| k.behind().map(|id| ObjName::new(fd.table, id)).ok_or(Error::Unsupported)),
        Where::Shared => Ok(ObjName::new(fd.table, fd.obj)),
    }
}

/// A new descriptor for the same object in `scope` (which may differ from `fd`'s). Private
/// to private shares the open file (no system call); any other combination opens a new open
/// file in `scope`'s table, adding the pipe ring or file segment behind it to that table.
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
            decode(t.files[f].kind).ok_or(Error::WrongType)?
        }
        Where::Shared => shared_kind(fd)?,
    };
    let t = table(scope)?;
    if let Kind::Fs(i) = k {
        // Another table's open file: a new `fs` descriptor of the same open file description
        // (the offset stays shared, as POSIX `dup` shares it), closed with that open file.
        if let Scope::Table(_) = scope {
            return Err(Error::Unsupported);
        }
        let j = crate::fs::dup(crate::fs::Fd(i)).map_err(fs_error)?;
        return open_in(scope, t, Kind::Fs(j.0)).inspect_err(|_| {
            let _ = crate::fs::close(j);
        });
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
    open_in(scope, t, k).inspect_err(|_| {
        if let Some(id) = added {
            let _ = crate::sys::share_delobj(ObjName::new(t, id));
        }
    })
}

/// Close a descriptor. A private one frees its slot, and the last descriptor of a private
/// open file deletes the open file's kernel object (see `last_close`). A shared one deletes
/// its kernel object; a file segment behind it stays in its table until the table goes. The
/// last close of a pipe end's open file drops the end (`drop_end`): the last end of a pipe
/// frees its ring.
pub fn close(fd: Fd) -> Result<(), Error> {
    match resolve(fd)? {
        Where::Private(t, slot) => close_private(fd.table, t, slot),
        Where::Proc(t, d) => match t.close(d) {
            Ok(None) => Ok(()),
            Ok(Some(x)) => proc_last_close(x),
            Err(e) => Err(table_error(e)),
        },
        Where::Shared => {
            // The kind first (the name goes with the object); only the caller whose delete
            // succeeds drops the end, so two racing closes drop it once.
            let k = shared_kind(fd);
            crate::sys::share_delobj(ObjName::new(fd.table, fd.obj))?;
            match k {
                Ok(k) if end_of(k).is_some() => drop_end(fd.table, k).map(|_| ()),
                _ => Ok(()),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading and writing

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

/// Unmap segment `seg` from this context's descriptor window, if it is mapped there.
fn unmap_one(seg: ObjectId) {
    let c = crate::ctx::ctx();
    if let Some(i) = c.mapped.iter().position(|&m| m == seg) {
        let _ = crate::sys::ar_unmap(c.root_ar, crate::ctx::arena() + MAPWIN_OFF + i as u64 * MAPWIN_SLOT, MAPWIN_SLOT);
        c.mapped[i] = 0;
    }
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

// ---------------------------------------------------------------------------------------
// Pipe ends: counted in the ring, the last one frees it
//
// An *end* is an open file of kind `PipeRead`/`PipeWrite` in any table (a private open file,
// a record of the process-wide table, a core-set table's kernel object): `dup` inside a table
// shares the open file and counts nothing, `dup` into another table opens a new open file
// and counts a new end, the last close of an open file drops its end. (A `cfork` child
// copies no private table: it gets a new context page; a process-wide table is either
// forgotten in the child, so the child holds none of its ends, or shared, so both processes
// hold the same records. Neither makes ends to count.)
//
// Freeing exactly once: both counts are halves of one word, changed only by atomic
// read-modify-writes. `drop_end` is a `fetch_sub`, and the word's modification order is
// total, so exactly one `fetch_sub` returns the value that leaves the word at 0 (two cores
// closing the last read end and the last write end at once: one of the two sees the other's
// half already 0 in the value it replaced, the other does not). New ends are added only by
// `add_end`, which refuses a word that is 0 (an open file that can be dup'ed holds an end,
// so the word is not 0 while it exists; a stale `dup` racing the last close gets
// `NoSuchObject`), and `pipe` stores the first value before any descriptor names the ring.
// So once the word is 0 it stays 0, the one caller that took it there frees the ring, and
// nothing is freed while any end is open (each open end is ≥ 1 in the word).

/// The pipe end an open file of kind `k` is: its ring and its unit in the ends word.
fn end_of(k: Kind) -> Option<(ObjectId, u64)> {
    match k {
        Kind::PipeRead(ring) => Some((ring, READ_END)),
        Kind::PipeWrite(ring) => Some((ring, WRITE_END)),
        _ => None,
    }
}

/// Run `f` on the ends word of ring `ring` in table share `t`. A ring this context had not
/// mapped is mapped for the call only: a context that opens or closes ends of many pipes it
/// never reads or writes (another context frees them) does not fill its window.
fn with_ends<R>(t: ObjectId, ring: ObjectId, f: impl FnOnce(&AtomicU64) -> R) -> Result<R, Error> {
    // Already mapped (the usual case for a context that used the pipe): no system call.
    if let Some(i) = crate::ctx::ctx().mapped.iter().position(|&m| m == ring) {
        return Ok(f(ends_at(crate::ctx::arena() + MAPWIN_OFF + i as u64 * MAPWIN_SLOT)));
    }
    let (va, _) = map(ObjName::new(t, ring))?;
    let r = f(ends_at(va));
    unmap_one(ring);
    Ok(r)
}

/// The ends word of the ring mapped at `va` (by `map`).
fn ends_at(va: u64) -> &'static AtomicU64 {
    // SAFETY: `va` is where `map` mapped the ring read-write, in this call or earlier (its
    // window slot, found in `ctx.mapped`); at least one page, and the word is at byte 128. Callers use the reference only while that mapping stays: inside
    // `with_ends`' closure (unmapped after it), or inside `read`/`write`, which unmap nothing
    // before they return. Every user of the ring touches this word atomically only.
    unsafe { &*(va as *const AtomicU64).add(ENDS_WORD) }
}

/// Count a new end `k` of its ring (in table share `t`), unless the ring's last end is gone.
fn add_end(t: ObjectId, k: Kind) -> Result<(), Error> {
    let Some((ring, unit)) = end_of(k) else { return Ok(()) };
    with_ends(t, ring, |ends| {
        let mut cur = ends.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return Err(Error::NoSuchObject);
            }
            match ends.compare_exchange_weak(cur, cur + unit, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    })?
}

/// Drop end `k` of its ring (in table share `t`); the last end frees the ring. `Ok(true)`:
/// this call freed it. The release half orders this end's writes before a reader's
/// acquire load that sees the count fall (a reader seeing no writer then sees every byte).
fn drop_end(t: ObjectId, k: Kind) -> Result<bool, Error> {
    let Some((ring, unit)) = end_of(k) else { return Ok(false) };
    let before = with_ends(t, ring, |ends| ends.fetch_sub(unit, Ordering::AcqRel))?;
    // Each end is counted once when it opens and dropped once when its open file goes.
    debug_assert!(before / unit % (1 << 32) != 0, "pipe end dropped twice: {before:#x}");
    if before != unit {
        return Ok(false);
    }
    RINGS_FREED.fetch_add(1, Ordering::Relaxed);
    free_ring(t, ring);
    Ok(true)
}

/// Rings this process freed (`drop_end` took their ends word to 0), for tests: each ring
/// must be freed exactly once.
static RINGS_FREED: AtomicU64 = AtomicU64::new(0);

/// Rings this process has freed (see `RINGS_FREED`).
pub fn rings_freed() -> u64 {
    RINGS_FREED.load(Ordering::Relaxed)
}

/// No end of `ring` is open: take it out of every table that may hold it (the closer's, the
/// process-wide one, the core-set ones; a private share holds a ring only while one of its
/// open files names it, and the last of those is the closer) and out of this context's window.
/// Another context that mapped the ring keeps its memory until it unmaps (`unmap_all`).
#[cold]
fn free_ring(t: ObjectId, ring: ObjectId) {
    unmap_one(ring);
    let _ = crate::sys::share_delobj(ObjName::new(t, ring));
    let others = TABLES.iter().map(|x| x.load(Ordering::Acquire)).chain([PROC_TABLE.load(Ordering::Acquire)]);
    for other in others.filter(|&o| o != 0 && o != t) {
        // `NoSuchObject` where the ring was never added: nothing to do.
        let _ = crate::sys::share_delobj(ObjName::new(other, ring));
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

/// Write to a descriptor; returns the bytes written. A pipe takes every byte, waiting while
/// it is full, unless its last read end goes: then the bytes written before that, or
/// `BrokenPipe` if none were (POSIX blocking write, as Linux).
pub fn write(fd: Fd, data: &[u8]) -> Result<usize, Error> {
    on_kind(fd, |k| match k {
        Kind::Fs(i) => crate::fs::write(crate::fs::Fd(i), data).map_err(fs_error),
        Kind::Console => {
            crate::console::write_all(data);
            Ok(data.len())
        }
        Kind::PipeWrite(ring) => {
            let (va, _) = map(ObjName::new(fd.table, ring))?;
            let ends = ends_at(va);
            if ends.load(Ordering::Acquire) & (WRITE_END - 1) == 0 {
                // No read end open anywhere: nobody will ever read these bytes (POSIX EPIPE;
                // there are no signals, so no SIGPIPE).
                return Err(Error::BrokenPipe);
            }
            // At most `PIPE_BUF` bytes go in at once, never interleaved with another
            // writer's (POSIX): such a write waits until the ring has room for all of it.
            let whole = data.len() <= PIPE_BUF;
            let mut done = ring_put(va, data, whole);
            let mut spins = 0u32;
            // A full ring: wait for a reader to make room (POSIX blocking write: every byte
            // is written before it returns), unless the last read end goes meanwhile; then
            // what was written so far, or `BrokenPipe` if nothing was (as Linux).
            while done < data.len() {
                if ends.load(Ordering::Acquire) & (WRITE_END - 1) == 0 {
                    return if done == 0 { Err(Error::BrokenPipe) } else { Ok(done) };
                }
                let n = ring_put(va, &data[done..], whole);
                if n != 0 {
                    done += n;
                    spins = 0;
                    continue;
                }
                pipe_wait(&mut spins);
            }
            Ok(done)
        }
        Kind::File(seg) => pwrite(fd, seg, 0, data),
        Kind::PipeRead(_) => Err(Error::NotPermitted),
    })
}

/// Read from a descriptor; returns the bytes read. A pipe: what is waiting (up to `buf`'s
/// length); if nothing is, 0 (end of file) when no write end is open anywhere, else it waits
/// until bytes arrive or the last write end closes (POSIX blocking read).
pub fn read(fd: Fd, buf: &mut [u8]) -> Result<usize, Error> {
    on_kind(fd, |k| match k {
        Kind::Fs(i) => crate::fs::read(crate::fs::Fd(i), buf).map_err(fs_error),
        Kind::Console => crate::sys::console_read(buf).map(|n| n as usize),
        Kind::PipeRead(ring) => {
            let (va, _) = map(ObjName::new(fd.table, ring))?;
            let n = ring_take(va, buf);
            if n != 0 || buf.is_empty() {
                // Bytes waiting (the common case): the ends word is not touched, so a read
                // shares no line with a close of another end.
                return Ok(n);
            }
            let ends = ends_at(va);
            let mut spins = 0u32;
            loop {
                // The count before the bytes: a writer's bytes are in the ring before its
                // close drops the count (release in `drop_end`), so "no writer" seen here
                // and then an empty ring means no byte will ever come.
                let writers = ends.load(Ordering::Acquire) >> 32;
                let n = ring_take(va, buf);
                if n != 0 || writers == 0 {
                    return Ok(n);
                }
                pipe_wait(&mut spins);
            }
        }
        Kind::File(seg) => pread(fd, seg, 0, buf),
        Kind::PipeWrite(_) => Err(Error::NotPermitted),
    })
}

/// The ring mapped at `va` under its lock: `f` gets its data bytes (`PIPE_BYTES - PIPE_HDR`
/// of them, used circularly), the head (bytes ever put) and the tail (bytes ever taken), and
/// returns the new head and tail.
fn with_ring<R>(va: u64, f: impl FnOnce(&mut [u8], u64, u64) -> (u64, u64, R)) -> R {
    let cap = (PIPE_BYTES - PIPE_HDR) as usize;
    let hdr = va as *const AtomicU64;
    ring_lock(hdr);
    // SAFETY: the ring is mapped read-write at `va` (`map`): header words 1 and 2 are the head
    // and tail, `cap` data bytes follow the header. The ring lock, held until below, keeps
    // every other context's `with_ring` out of them, so this is the only reference to them.
    let (head, tail, bytes) = unsafe { (&*(va as *const AtomicU64).add(1), &*(va as *const AtomicU64).add(2), core::slice::from_raw_parts_mut((va + PIPE_HDR) as *mut u8, cap)) };
    let (h, t) = (head.load(Ordering::Acquire), tail.load(Ordering::Acquire));
    let (h2, t2, r) = f(bytes, h, t);
    head.store(h2, Ordering::Release);
    tail.store(t2, Ordering::Release);
    ring_unlock(hdr);
    r
}

/// One step of waiting on a pipe's other side: spin `READ_SPINS` times, then yield the core
/// (on a time-shared core the other side may be the one waiting to run).
fn pipe_wait(spins: &mut u32) {
    *spins += 1;
    if *spins < READ_SPINS {
        core::hint::spin_loop();
    } else {
        *spins = 0;
        let _ = crate::sys::pcore_yield();
    }
}

/// Put as many bytes of `data` as fit into the ring mapped at `va` (with `whole`, all of
/// them or none); returns how many.
fn ring_put(va: u64, data: &[u8], whole: bool) -> usize {
    with_ring(va, |bytes, h, t| {
        let cap = bytes.len() as u64;
        let room = cap - (h - t);
        let n = if whole && room < data.len() as u64 { 0 } else { room.min(data.len() as u64) };
        for i in 0..n {
            bytes[((h + i) % cap) as usize] = data[i as usize];
        }
        (h + n, t, n as usize)
    })
}

/// Take up to `buf.len()` waiting bytes out of the ring mapped at `va`.
fn ring_take(va: u64, buf: &mut [u8]) -> usize {
    with_ring(va, |bytes, h, t| {
        let cap = bytes.len() as u64;
        let n = (h - t).min(buf.len() as u64);
        for i in 0..n {
            buf[i as usize] = bytes[((t + i) % cap) as usize];
        }
        (h, t + n, n as usize)
    })
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
    on_kind(fd, |k| match k {
        Kind::File(seg) => pwrite(fd, seg, off, data),
        Kind::Fs(i) => crate::fs::pwrite(crate::fs::Fd(i), data, off).map_err(fs_error),
        _ => Err(Error::WrongType),
    })
}

/// Read a file at offset `off`.
pub fn read_at(fd: Fd, off: u64, buf: &mut [u8]) -> Result<usize, Error> {
    on_kind(fd, |k| match k {
        Kind::File(seg) => pread(fd, seg, off, buf),
        Kind::Fs(i) => crate::fs::pread(crate::fs::Fd(i), buf, off).map_err(fs_error),
        _ => Err(Error::WrongType),
    })
}
