//! The shared descriptor tables: the process-wide one (a `percore::fdtable::DescTable` in
//! user memory every thread of the process maps: lock-free slots from per-core bitmap words,
//! `fget`-style counted open-file records) and the tables of named core sets (a share whose
//! objects are the descriptors). docs/fd.md.

use abi::{Error, ObjName, ObjectId, MEMID_SELF, PAGE_SIZE};
use core::sync::atomic::{AtomicU64, Ordering};

use super::file::{encode, Kind};

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
pub(super) type ProcTable = percore::fdtable::DescTable<{ SHARED_SLOTS / 64 }, SHARED_SLOTS>;
/// Bit 62 of `Fd::obj` marks a descriptor of the process-wide table (bits 32..61 are the
/// slot's generation, 0..31 the slot).
pub const SHARED_FD: u64 = 1 << 62;

/// The process-wide table, if this process has one.
#[inline]
pub(super) fn proc_table() -> Option<&'static ProcTable> {
    let p = PROC_MEM.load(Ordering::Acquire) as *const ProcTable;
    // SAFETY: `PROC_MEM` is 0 or the address of a `ProcTable` made by `table(Process)` in a
    // heap block that is never freed, mapped in every context of the process (the heap
    // ranges are linked into each one's root range) and, in a cfork child, either the same
    // segment (shared when asked) or reset to 0 (`after_cfork`). All its fields are atomics.
    unsafe { p.as_ref() }
}

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

/// The process-wide table's share, made (with the table) on first use.
pub(super) fn proc_share() -> Result<ObjectId, Error> {
    let t = PROC_TABLE.load(Ordering::Acquire);
    if t != 0 {
        return Ok(t);
    }
    new_proc_table()
}

/// The process-wide table's share, 0 before it exists (acquire: after a last close, which
/// frees what the open file held through it).
pub(super) fn proc_share_now_acquire() -> ObjectId {
    PROC_TABLE.load(Ordering::Acquire)
}

/// The process-wide table's share, 0 before it exists.
#[inline]
pub(super) fn proc_share_now() -> ObjectId {
    PROC_TABLE.load(Ordering::Relaxed)
}

/// Every shared table's share (the core-set tables', the process-wide one's; 0 for none):
/// where a freed pipe ring may still be held.
pub(super) fn all_table_shares() -> impl Iterator<Item = ObjectId> {
    TABLES.iter().map(|x| x.load(Ordering::Acquire)).chain([PROC_TABLE.load(Ordering::Acquire)])
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
    let share = proc_share()?;
    Ok((share, PROC_SEG.load(Ordering::Relaxed)))
}

/// Whether a `cfork` child given `shares` and `segments` (`CforkOpts`) shares the
/// process-wide table (both its share and its segment listed).
pub(crate) fn shared_with_child(shares: &[ObjectId], segments: &[ObjectId]) -> bool {
    let (t, seg) = (PROC_TABLE.load(Ordering::Acquire), PROC_SEG.load(Ordering::Relaxed));
    t != 0 && shares.contains(&t) && segments.contains(&seg)
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

/// This core's starting word in the process-wide table's bitmaps.
#[inline]
pub(super) fn home() -> usize {
    crate::ctx::core_id()
}

/// A new open file of kind `k` in the process-wide table; the descriptor's `obj`.
pub(super) fn open_proc(k: Kind) -> Result<u64, Error> {
    let tbl = proc_table().ok_or(Error::NoSuchObject)?;
    let d = tbl.open(home(), encode(k), crate::process::proc_share()).map_err(table_error)?;
    Ok(SHARED_FD | d)
}

#[inline]
pub(super) fn table_error(e: percore::fdtable::TableError) -> Error {
    match e {
        percore::fdtable::TableError::Full => Error::Busy,
        percore::fdtable::TableError::BadDescriptor => Error::NoSuchObject,
    }
}
