//! Anonymous memory mappings, POSIX-shaped: `mmap`, `munmap`, `mprotect` (docs/libos.md).
//!
//! **Where mappings go.** POSIX mappings are process-wide: every thread sees them. A mapping
//! in a context's root range would be that context's only, so mappings go in the top half of
//! the calling core's heap range (`heap::window(c) + WINDOW_OFF ..`, 256 GiB per core): the
//! heap ranges are linked into the root range of every context of the program (threads
//! included, `libos::thread`), so a mapping made on any core is seen on all, and the heap
//! stays below `WINDOW_OFF`. A mapping's address tells which core's window (and record) it
//! is in, so `munmap`/`mprotect` from another core change the owner core's range and
//! record, under the owner's lock. Two cores mapping at once take different locks and
//! change different ranges.
//!
//! **Records.** Each core keeps a sorted table of its window's mappings (`Map`: window
//! offset, length, segment, offset in the segment, protection) under a ticket lock; every
//! `mmap` allocates one demand-zero segment in the core's heap share. The kernel has no call
//! that changes a mapping's protection, so `mprotect` and a partial `munmap` unmap the
//! affected kernel mappings whole and map the pieces that stay again, from the same segment
//! at the right offsets (up to three pieces per mapping). `PROT_NONE` keeps the record and
//! the segment without a kernel mapping, so the contents survive a later `PROT_READ`. A
//! segment is deleted when no record uses it any more.
//!
//! **Errors** (`abi::Error`, as the descriptor layer's): `InvalidArgument` (`EINVAL`) for a
//! zero length, an unaligned address, unknown protection bits, or a range outside one core's
//! window; `NoMemory` (`ENOMEM`) when the window or the table is full, the kernel is out of
//! memory, or `mprotect` names pages that are not mapped. A call that fails changes nothing
//! (kernel mappings it made are undone and segments it allocated deleted).
//!
//! Not done: pages of a partly unmapped mapping stay allocated (its segment is kept whole)
//! until its last piece goes (Linux frees them at once); file mappings, `MAP_FIXED`, hints;
//! contexts started with `cores::Core` (read-only image) and cfork children (the table is a
//! copy naming the parent's segments) must not use this module.

use crate::layout::{HEAP_CORES, HEAP_SPAN};
use abi::{Error, ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use percore::pad::CachePadded;
use percore::spin::TicketLock;

pub const PROT_NONE: u64 = 0;
pub const PROT_READ: u64 = 1;
pub const PROT_WRITE: u64 = 2;

/// Offset of the mapping window in each core's heap range (its top half).
pub const WINDOW_OFF: u64 = crate::layout::MMAP_WINDOW_OFF;
/// Size of one core's window.
pub const WINDOW_LEN: u64 = HEAP_SPAN - WINDOW_OFF;
/// Records per core (pieces of mappings count one each).
pub const MAX_MAPS: usize = 64;

/// One contiguous piece of a mapping: window-relative offsets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Map {
    /// Offset in the core's heap range (`WINDOW_OFF <= off`).
    off: u64,
    len: u64,
    seg: ObjectId,
    /// Offset of `off` in the segment.
    soff: u64,
    prot: u64,
}

impl Map {
    fn end(&self) -> u64 {
        self.off + self.len
    }

    /// The part `[lo, hi)` of this piece (inside it) with protection `prot`.
    fn piece(&self, lo: u64, hi: u64, prot: u64) -> Map {
        Map { off: lo, len: hi - lo, seg: self.seg, soff: self.soff + (lo - self.off), prot }
    }
}

/// One core's records, sorted by `off`, non-overlapping.
#[derive(Clone, Copy)]
struct Maps {
    /// The core's heap range (`heap::range_of`), copied at the table's first `mmap`: a call
    /// from another core then reads only this table, not the heap's line of the owner core,
    /// which the owner writes whenever it allocates (a conflict the POSIX checker showed).
    range: ObjName,
    n: usize,
    m: [Map; MAX_MAPS],
}

impl Maps {
    const EMPTY: Maps = Maps { range: ObjName { share: 0, object: 0 }, n: 0, m: [Map { off: 0, len: 0, seg: 0, soff: 0, prot: 0 }; MAX_MAPS] };

    fn live(&self) -> &[Map] {
        &self.m[..self.n]
    }

    fn push(&mut self, e: Map) -> Result<(), Error> {
        if self.n == MAX_MAPS {
            return Err(Error::NoMemory);
        }
        self.m[self.n] = e;
        self.n += 1;
        Ok(())
    }

    /// First fit: the lowest window offset with `len` free bytes, and where it goes in the table.
    fn find_gap(&self, len: u64) -> Option<(u64, usize)> {
        let mut at = WINDOW_OFF;
        for (i, e) in self.live().iter().enumerate() {
            if e.off - at >= len {
                return Some((at, i));
            }
            at = e.end();
        }
        (HEAP_SPAN - at >= len).then_some((at, self.n))
    }

    fn insert(&mut self, i: usize, e: Map) {
        self.m.copy_within(i..self.n, i + 1);
        self.m[i] = e;
        self.n += 1;
    }

    fn uses(&self, seg: ObjectId) -> bool {
        self.live().iter().any(|e| e.seg == seg)
    }
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_CORE: CachePadded<TicketLock<Maps>> = CachePadded::new(TicketLock::new(Maps::EMPTY));
static MAPS: [CachePadded<TicketLock<Maps>>; HEAP_CORES] = [EMPTY_CORE; HEAP_CORES];

fn flags_of(prot: u64) -> u64 {
    // x86-64 pages cannot be write-only: PROT_WRITE maps read-write (as Linux does).
    if prot & PROT_WRITE != 0 {
        MAP_READ | MAP_WRITE
    } else if prot & PROT_READ != 0 {
        MAP_READ
    } else {
        0
    }
}

fn check_prot(prot: u64) -> Result<(), Error> {
    if prot & !(PROT_READ | PROT_WRITE) != 0 {
        return Err(Error::InvalidArgument);
    }
    Ok(())
}

/// Map a piece into the kernel range `r` (nothing for `PROT_NONE`).
fn map_piece(r: ObjName, e: &Map) -> Result<(), Error> {
    if e.prot == PROT_NONE {
        return Ok(());
    }
    let m = SegMapping { voff: e.off, seg: ObjName::new(r.share, e.seg), soff: e.soff, len: e.len, flags: flags_of(e.prot) };
    crate::sys::ar_set_seg(r, &m).map(|_| ())
}

/// Remove every kernel mapping in `[e.off, e.end())`.
fn unmap_span(r: ObjName, e: &Map) -> Result<(), Error> {
    crate::sys::ar_unmap(r, e.off, e.len).map(|_| ())
}

/// `mmap(NULL, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)`: `len` bytes (rounded up to
/// pages) of zeroed memory, seen by every context of the process; returns its address.
pub fn mmap(len: u64, prot: u64) -> Result<u64, Error> {
    check_prot(prot)?;
    if len == 0 {
        return Err(Error::InvalidArgument);
    }
    if len > WINDOW_LEN {
        return Err(Error::NoMemory);
    }
    let len = len.next_multiple_of(PAGE_SIZE);
    let c = crate::ctx::try_ctx().map(|x| x.core as usize).ok_or(Error::Unsupported)?;
    if c >= crate::heap::cores() {
        return Err(Error::Unsupported);
    }
    // Segments are demand-zero: refuse up front what the kernel could not back later.
    if !crate::heap::memory_for(len) {
        return Err(Error::NoMemory);
    }
    let mut maps = MAPS[c].lock();
    if maps.n == MAX_MAPS {
        return Err(Error::NoMemory);
    }
    let (off, at) = maps.find_gap(len).ok_or(Error::NoMemory)?;
    if maps.n == 0 {
        maps.range = crate::heap::range_of(c);
    }
    let share = maps.range.share;
    let seg = crate::sys::segment_alloc(share, "mmap", MEMID_SELF, len)?;
    let e = Map { off, len, seg, soff: 0, prot };
    if let Err(err) = map_piece(maps.range, &e) {
        let _ = crate::sys::share_delobj(ObjName::new(share, seg));
        return Err(err);
    }
    maps.insert(at, e);
    Ok(crate::heap::window(c) + off)
}

/// Which core's window holds `[addr, addr + len)` and the window offset of `addr`, with `len`
/// rounded up to pages. `InvalidArgument` for an unaligned address, a zero length, or a
/// range that is not inside one core's window.
fn locate(addr: u64, len: u64) -> Result<(usize, u64, u64), Error> {
    if len == 0 || !addr.is_multiple_of(PAGE_SIZE) {
        return Err(Error::InvalidArgument);
    }
    let len = len.checked_next_multiple_of(PAGE_SIZE).ok_or(Error::InvalidArgument)?;
    let base = crate::ctx::arena() + HEAP_SPAN;
    let rel = addr.checked_sub(base).ok_or(Error::InvalidArgument)?;
    let c = (rel / HEAP_SPAN) as usize;
    let off = rel % HEAP_SPAN;
    if c >= crate::heap::cores() || off < WINDOW_OFF || len > HEAP_SPAN - off {
        return Err(Error::InvalidArgument);
    }
    Ok((c, off, len))
}

/// Replace the records overlapping `[lo, hi)`: the parts outside keep their protection, the
/// part inside gets `new` (`None`: removed). Kernel mappings follow; on a failure every
/// changed record's kernel mapping is put back as it was and nothing changes.
fn rewrite(maps: &mut Maps, lo: u64, hi: u64, new: Option<u64>) -> Result<(), Error> {
    let r = maps.range;
    let mut out = Maps::EMPTY;
    out.range = r;
    for e in maps.live() {
        if e.end() <= lo || e.off >= hi {
            out.push(*e)?;
            continue;
        }
        if e.off < lo {
            out.push(e.piece(e.off, lo, e.prot))?;
        }
        if let Some(p) = new {
            out.push(e.piece(e.off.max(lo), e.end().min(hi), p))?;
        }
        if e.end() > hi {
            out.push(e.piece(hi, e.end(), e.prot))?;
        }
    }
    // Kernel side, record by record: unmap it whole, map the pieces that stay.
    let affected = |e: &Map| e.end() > lo && e.off < hi;
    let mut failed = None;
    let mut done = 0;
    for (i, e) in maps.live().iter().enumerate() {
        if !affected(e) {
            continue;
        }
        let r = unmap_span(r, e).and_then(|_| {
            for p in out.live().iter().filter(|p| p.seg == e.seg && p.off >= e.off && p.end() <= e.end()) {
                map_piece(r, p)?;
            }
            Ok(())
        });
        done = i + 1;
        if let Err(err) = r {
            failed = Some(err);
            break;
        }
    }
    if let Some(err) = failed {
        // Put back every record handled so far (including the one that failed).
        for e in maps.live()[..done].iter().filter(|e| affected(e)) {
            let _ = unmap_span(r, e);
            let _ = map_piece(r, e);
        }
        return Err(err);
    }
    for e in maps.live().iter().filter(|e| affected(e)) {
        if !out.uses(e.seg) {
            // Several old records may name the segment: delete it once.
            let _ = crate::sys::share_delobj(ObjName::new(r.share, e.seg));
        }
    }
    *maps = out;
    Ok(())
}

/// `munmap(addr, len)`: remove the mappings in `[addr, addr + len)` (pages that are not
/// mapped are no error, as in POSIX); the parts of a mapping outside the range stay.
pub fn munmap(addr: u64, len: u64) -> Result<(), Error> {
    let (c, off, len) = locate(addr, len)?;
    let mut maps = MAPS[c].lock();
    rewrite(&mut maps, off, off + len, None)
}

/// `mprotect(addr, len, prot)`: change the protection of `[addr, addr + len)`, which must be
/// mapped throughout (`NoMemory` otherwise, POSIX's `ENOMEM`). Contents are kept. A zero
/// length is no error if `addr` is aligned (as on Linux).
pub fn mprotect(addr: u64, len: u64, prot: u64) -> Result<(), Error> {
    check_prot(prot)?;
    // A zero length changes nothing and is no error (Linux; POSIX leaves it open).
    if len == 0 {
        return if addr.is_multiple_of(PAGE_SIZE) { Ok(()) } else { Err(Error::InvalidArgument) };
    }
    let (c, off, len) = locate(addr, len)?;
    let mut maps = MAPS[c].lock();
    // Covered without holes?
    let mut at = off;
    for e in maps.live() {
        if e.end() <= at || at >= off + len {
            continue;
        }
        if e.off > at {
            break;
        }
        at = e.end();
    }
    if at < off + len {
        return Err(Error::NoMemory);
    }
    rewrite(&mut maps, off, off + len, Some(prot))
}

/// Records (pieces of mappings) in core `c`'s window: for tests that check nothing leaks.
pub fn records(c: usize) -> usize {
    if c >= HEAP_CORES {
        return 0;
    }
    MAPS[c].lock().n
}
