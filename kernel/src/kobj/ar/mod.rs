//! Address ranges: page-table subtrees (Corey section 4, DESIGN "Kernel objects").
//!
//! A range owns one top table page at its level (root = PML4, 512 GiB = PDPT, 1 GiB = page
//! directory, 2 MiB = page table) plus the intermediate tables it creates below it. Its
//! mappings are segment mappings, filled lazily by faults, and links to child ranges: the
//! child's top table page is written straight into this range's tables, so every root that
//! reaches the child shares the child's page-table pages, and a fault filled by one core is
//! seen by all with no soft fault of their own.
//!
//! TLB shootdowns go to the cores whose *running* root reaches the range (the range's own
//! `running` set, plus its parents', transitively). A private root that runs on one core
//! flushes locally and sends no IPI.
//!
//! This file: the range itself (its tables, its mappings, its shootdown set) and its
//! teardown. Beside it: `paged` (the lock-free view of the mappings and 2 MiB ranges'
//! per-slot writers), `map` (mapping and unmapping), `fault` (the fault walk and
//! copy-on-write).

pub mod fault;
mod map;
mod paged;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::kref::{KRef, KWeak};
use super::{cores_in, CoreSet, KObject, ObjRef};
use crate::arch::x86_64::paging::{
    self, alloc_table, entry_span, free_table, index, read_entry, write_entry, PTE_ADDR_MASK,
    PTE_HUGE, PTE_PRESENT, PTE_WRITE, TABLE_FLAGS,
};
use crate::mm::nodevec::NodeVec;
use crate::mm::PAGE_SIZE;
use abi::{ArKind, Error};
use percore::{SeqLock, TicketLock, MAX_CORES};

pub enum Target {
    Seg { obj: ObjRef, soff: u64 },
    Ar(ObjRef),
}

pub struct Mapping {
    pub voff: u64,
    pub len: u64,
    pub flags: u64,
    pub target: Target,
}

struct ArInner {
    /// Sorted by `voff`, non-overlapping.
    maps: Vec<Mapping>,
    /// Intermediate tables of ours that `set_ar` unhooked from the tree (a child range's table
    /// took their entry), with their levels: freed, with the tables below them, in `Drop`.
    /// The tables still in the tree need no list: `Drop` finds them by walking it (so a fault
    /// that creates a table writes nothing but the table entry). Rare: only a link
    /// over a slot whose table an earlier mapping made.
    detached: Vec<(u64, u32)>,
}

struct ParentLink {
    parent: KWeak<KObject>,
    /// The parent `AddressRange`'s address (identity while it lives).
    key: usize,
    voff: u64,
}

pub use map::{mappings, set_ar, set_seg, set_seg_peeked, unmap, write_protect};
use paged::*;

/// A value on cache lines of its own (its size is a multiple of the line): see
/// `AddressRange::inner`.
#[repr(align(64))]
struct OwnLine<T>(T);

impl<T> core::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

pub struct AddressRange {
    pub kind: ArKind,
    pub level: u32,
    /// Physical address of the top table page.
    pub table: u64,
    pub node_core: u32,
    /// On its own line: the faults of the range's own core write the lock, and other cores
    /// read the object's name, type and the fields above (a link, `obj_stat`); sharing their
    /// line made it cross cores on every fault (the sharing audit: one line a range).
    inner: OwnLine<TicketLock<ArInner>>,
    /// The mappings again, as plain words behind a generation counter (`SeqLock`), written
    /// under `inner`'s lock after every change of `maps` (`publish`): `ar_get`, an `ar_unmap`
    /// with nothing to remove and an `ar_set_seg` refused for overlap read it and write no
    /// shared line (they all took the range's lock before, so two `ar_get`s of one
    /// range bounced its lock line). In a line-aligned buffer of its own (one element), not
    /// inline: every kernel object is as large as the largest `Kind`, and an inline view
    /// (about 900 bytes) would grow them all if it made ranges the largest; its own lines
    /// also keep it apart from
    /// `running` and `parents`, which change on context switches and links. The fault walk
    /// still takes the lock: it must keep the mapping's segment alive while it uses it, which
    /// the copied words cannot.
    view: NodeVec<SeqLock<[u64; VIEW_WORDS]>>,
    /// 2 MiB ranges only: per-page occupancy words and per-slot writers (`Paged`), used
    /// instead of `inner`'s `maps` and `view` (which stay empty). An `ar_unmap` of free pages
    /// and an `ar_set_seg` over a mapped page read only their pages' words
    /// (`Paged::occ_collect`); a mapping made or removed claims its pages' words and writes
    /// its start page's slot; so none of them writes or reads a line that a map or unmap of
    /// pages less than 64 pages away writes. Larger ranges keep none (a word per page of a
    /// 1 GiB span would be 2 MiB): their writers take `inner`'s lock.
    paged: Option<Paged>,
    parents: TicketLock<Vec<ParentLink>>,
    /// Cores currently running with this range as their root.
    pub running: CoreSet,
    /// The bucket of a segment's reverse map that this range's mappings go in
    /// (`Segment::add_map` / `remove_map`): from a per-core count of ranges made, so ranges
    /// made one after another on one core (a process's R and Q) get different buckets and
    /// their mappings of one segment share no line.
    pub rmap_bucket: usize,
}

/// The bucket of a new range (`AddressRange::rmap_bucket`): from the count of ranges made on
/// this core (in its per-core statistics, written only by this core, so making ranges on two
/// cores shares nothing).
fn next_rmap_bucket() -> usize {
    let c = crate::percpu::this();
    let k = c.stats.ranges_made.fetch_add(1, Ordering::Relaxed);
    (k as usize + c.index) % super::segment::RMAP_BUCKETS
}

/// Why a fault could not be resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultError {
    NotMapped,
    Protection,
    OutOfMemory,
}

fn level_of(kind: ArKind) -> u32 {
    match kind {
        ArKind::Root => 4,
        ArKind::Span512G => 3,
        ArKind::Span1G => 2,
        ArKind::Span2M => 1,
    }
}

fn nx_supported() -> bool {
    crate::arch::x86_64::boot::efer_extra() & (1 << 11) != 0
}

fn overlaps(maps: &[Mapping], voff: u64, len: u64) -> bool {
    maps.iter().any(|m| voff < m.voff + m.len && m.voff < voff + len)
}

fn insert_sorted(maps: &mut Vec<Mapping>, m: Mapping) -> Result<(), Error> {
    maps.try_reserve(1).map_err(|_| Error::NoMemory)?;
    let pos = maps.partition_point(|x| x.voff < m.voff);
    maps.insert(pos, m);
    Ok(())
}

/// Flush the TLBs of the cores in `bits`: locally by reloading CR3, elsewhere by IPI.
pub fn flush_cores(bits: &[u64; MAX_CORES / 64]) {
    let me = crate::percpu::current_index();
    let stats = &crate::percpu::this().stats;
    if bits[me / 64] & (1 << (me % 64)) != 0 {
        crate::arch::x86_64::cpu::flush_tlb_local();
        stats.tlb_flushes_local.fetch_add(1, Ordering::Relaxed);
    }
    let others = cores_in(bits).filter(move |&c| c != me);
    let n = others.clone().count();
    if n == 0 {
        return;
    }
    stats.shootdown_ipis_sent.fetch_add(n as u64, Ordering::Relaxed);
    crate::smp::run_on(
        &|_| {
            crate::arch::x86_64::cpu::flush_tlb_local();
            let s = &crate::percpu::this().stats;
            s.tlb_flushes_local.fetch_add(1, Ordering::Relaxed);
            s.shootdown_ipis_received.fetch_add(1, Ordering::Relaxed);
        },
        others,
        false,
    );
}

impl AddressRange {
    pub fn new(kind: ArKind, node_core: u32) -> Result<AddressRange, Error> {
        let node = super::node_of_core(node_core);
        let paged = match kind {
            ArKind::Span2M => Some(Paged {
                occ: NodeVec::try_from_fn(OCC_PAGES, node, |_| AtomicU64::new(OCC_FREE)).map_err(|_| Error::NoMemory)?,
                locks: NodeVec::try_from_fn(SLOTS, node, |_| SlotLock(TicketLock::new(Vec::new()))).map_err(|_| Error::NoMemory)?,
                views: NodeVec::try_from_fn(SLOTS, node, |_| SlotView::new()).map_err(|_| Error::NoMemory)?,
            }),
            _ => None,
        };
        // A 2 MiB range answers from its slots: no range-wide view.
        let view_len = if paged.is_some() { 0 } else { 1 };
        let view = NodeVec::try_from_fn(view_len, node, |_| SeqLock::new([0; VIEW_WORDS])).map_err(|_| Error::NoMemory)?;
        let table = alloc_table(node_core).ok_or(Error::NoMemory)?;
        if kind == ArKind::Root {
            paging::copy_kernel_half(table);
        }
        Ok(AddressRange {
            kind,
            level: level_of(kind),
            table,
            node_core,
            inner: OwnLine(TicketLock::new(ArInner { maps: Vec::new(), detached: Vec::new() })),
            view,
            paged,
            parents: TicketLock::new(Vec::new()),
            running: CoreSet::new(),
            rmap_bucket: next_rmap_bucket(),
        })
    }

    /// Copy `maps` into the view. The caller holds `inner`'s lock (the `_inner` argument says
    /// so) and calls this after every change of `maps`, before letting the lock go, so the
    /// view never runs ahead of or behind the mappings the fault walk sees. Stores only the
    /// words that changed (an appended mapping writes its record and the count, not the
    /// records before it).
    fn publish(&self, inner: &ArInner) {
        let Some(view) = self.view.first() else { return };
        view.write_words(|w| {
            if inner.maps.len() > VIEW_MAPS {
                w.set(0, VIEW_OVERFLOW);
                return;
            }
            for (i, m) in inner.maps.iter().enumerate() {
                for (k, &word) in ViewRec::of(m).words().iter().enumerate() {
                    let at = 1 + i * VIEW_REC + k;
                    if w.get(at) != Some(word) {
                        w.set(at, word);
                    }
                }
            }
            if w.get(0) != Some(inner.maps.len() as u64) {
                w.set(0, inner.maps.len() as u64);
            }
        });
    }

    /// The mappings as one consistent copy taken without the lock (it writes nothing shared),
    /// or `None` if writers kept intervening or the range has more than `VIEW_MAPS` mappings:
    /// then the caller takes the lock.
    fn snapshot(&self) -> Option<View> {
        for _ in 0..VIEW_TRIES {
            if let Some(words) = self.view.first()?.try_read() {
                if words[0] as usize <= VIEW_MAPS {
                    return Some(View { words });
                }
                return None; // VIEW_OVERFLOW
            }
            core::hint::spin_loop();
        }
        None
    }

    fn key(&self) -> usize {
        self as *const AddressRange as usize
    }

    fn check_range(&self, voff: u64, len: u64) -> Result<(), Error> {
        if len == 0 {
            return Err(Error::InvalidArgument);
        }
        if voff % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 {
            return Err(Error::Misaligned);
        }
        let end = voff.checked_add(len).ok_or(Error::OutOfRange)?;
        if end > self.kind.span() {
            return Err(Error::OutOfRange);
        }
        if self.kind == ArKind::Root && voff < abi::USER_BASE {
            return Err(Error::OutOfRange); // page 0 stays unmapped: null is never valid
        }
        Ok(())
    }

    /// The table at `stop_level` covering `rel`, walking down from the top and creating
    /// missing intermediate tables if `create`. The caller holds `inner`'s lock (the `_inner`
    /// argument says so): the tables change only under it. A created table is recorded only
    /// by its entry; `Drop` finds it by walking the tree (`free_below`).
    #[inline] // on the fault path, where its constant arguments fold away
    fn table_at(&self, _inner: &mut ArInner, rel: u64, stop_level: u32, create: bool) -> Result<Option<u64>, Error> {
        let mut t = self.table;
        let mut lvl = self.level;
        while lvl > stop_level {
            let idx = index(lvl, rel);
            let e = read_entry(t, idx);
            if e & PTE_PRESENT == 0 {
                if !create {
                    return Ok(None);
                }
                let nt = alloc_table(self.node_core).ok_or(Error::NoMemory)?;
                write_entry(t, idx, nt | TABLE_FLAGS);
                t = nt;
            } else if e & PTE_HUGE != 0 {
                return Err(Error::InvalidArgument);
            } else {
                t = e & PTE_ADDR_MASK;
            }
            lvl -= 1;
        }
        Ok(Some(t))
    }

    /// Cores whose running root reaches this range.
    pub fn shootdown_targets(&self) -> [u64; MAX_CORES / 64] {
        const MAX_PARENTS: usize = 32;
        let mut bits = self.running.snapshot();
        // Take the parents out of the lock before recursing (dropping the last reference to a
        // parent runs its Drop, which takes our `parents` lock).
        let mut parents: [Option<KRef<KObject>>; MAX_PARENTS] = [const { None }; MAX_PARENTS];
        let mut too_many = false;
        {
            let g = self.parents.lock();
            let mut n = 0;
            for p in g.iter() {
                if let Some(k) = p.parent.upgrade() {
                    if n == MAX_PARENTS {
                        too_many = true;
                        drop(k);
                        break;
                    }
                    parents[n] = Some(k);
                    n += 1;
                }
            }
        }
        if too_many {
            // Conservative and correct: every online core.
            for c in 0..crate::percpu::online_count() {
                bits[c / 64] |= 1 << (c % 64);
            }
            return bits;
        }
        for p in parents.iter().flatten() {
            if let Ok(ar) = p.as_ar() {
                let b = ar.shootdown_targets();
                for i in 0..bits.len() {
                    bits[i] |= b[i];
                }
            }
        }
        bits
    }

    /// Clear the leaf entries of `[rel, rel + len)`; returns true if any was present.
    fn clear_leaves(&self, inner: &mut ArInner, rel: u64, len: u64, only_write: bool) -> bool {
        let mut any = false;
        let mut a = rel;
        let end = rel + len;
        while a < end {
            // The next 2 MiB boundary (or the end): the leaves up to it are in one table,
            // found once (a walk from the top per page made a write protection of an 8 MiB
            // mapping 2 048 walks).
            let stop = ((a | (entry_span(2) - 1)) + 1).min(end);
            if let Ok(Some(t)) = self.table_at(inner, a, 1, false) {
                any |= clear_leaves_of_table(t, a, stop - a, only_write);
            }
            // No page table here: nothing to clear up to the next 2 MiB.
            a = stop;
        }
        any
    }
}

/// Clear the leaf entries of `[rel, rel + len)` in page table `t` (a 2 MiB range's top
/// table: its entries are the leaves); returns true if any was present. The caller holds the
/// lock of the slot of the mapping there.
fn clear_leaves_of_table(t: u64, rel: u64, len: u64, only_write: bool) -> bool {
    let mut any = false;
    let mut a = rel;
    while a < rel + len {
        let i = index(1, a);
        let e = read_entry(t, i);
        if e & PTE_PRESENT != 0 {
            write_entry(t, i, if only_write { e & !PTE_WRITE } else { 0 });
            any = true;
        }
        a += PAGE_SIZE;
    }
    any
}

/// Free the tables below table `t` (at `level`) reached through its first `entries` entries:
/// every present entry of a table above level 1 is an intermediate table of this range's own
/// (child ranges' tables are unhooked before this runs; level-1 entries are segment pages,
/// which the segments own). Recursion depth is at most three.
fn free_below(t: u64, level: u32, entries: usize) {
    if level <= 1 {
        return;
    }
    let mut i = 0;
    loop {
        // Skip the empty entries eight at a time (most of a table is empty).
        i = crate::arch::x86_64::paging::next_nonzero(t, i, entries);
        if i >= entries {
            break;
        }
        let e = read_entry(t, i);
        i += 1;
        if e & PTE_PRESENT == 0 || e & PTE_HUGE != 0 {
            continue;
        }
        let sub = e & PTE_ADDR_MASK;
        free_below(sub, level - 1, 512);
        free_table(sub);
    }
}

/// Called as an address range is freed, before its page tables go: the kernel cores that
/// keep it loaded (`roles::LoadedRoot`; they are in its `running` set and hold no reference) load
/// the kernel's root, which they do before answering any active message.
fn evict_loaded_root(running: &super::CoreSet) {
    let me = percore::cpu_id();
    let bits = running.snapshot();
    let cores = super::cores_in(&bits).filter(move |&c| c != me);
    if cores.clone().next().is_some() {
        crate::smp::run_on(&|_| {}, cores, false);
    }
}

impl Drop for AddressRange {
    fn drop(&mut self) {
        // Kernel cores may keep this range loaded between requests without a reference.
        evict_loaded_root(&self.running);
        // This core may be one of them: a kernel core that upgraded a ring's weak reference
        // to its range holds the last reference when the owner exits during the batch, and
        // drops it here with the root still loaded (`evict_loaded_root` skips the calling
        // core). Its page tables are freed below and reused by any core at once, so leave
        // them first. A stale CR3 here was roletest's intermittent silent stop (triple fault)
        // and its page faults in `serve_rings`.
        if crate::arch::x86_64::cpu::read_cr3() & !0xFFF == self.table {
            crate::arch::x86_64::paging::load_kernel_root();
        }
        let key = self.key();
        if let Some(paged) = &self.paged {
            for lock in paged.locks.iter() {
                for m in core::mem::take(&mut *lock.0.lock()) {
                    if let Target::Seg { obj, .. } = &m.target {
                        if let Ok(seg) = obj.as_segment() {
                            seg.remove_map(key, self.rmap_bucket, m.voff);
                        }
                    }
                }
            }
        }
        let mut inner = self.inner.lock();
        for m in core::mem::take(&mut inner.maps) {
            match &m.target {
                Target::Seg { obj, .. } => {
                    if let Ok(seg) = obj.as_segment() {
                        seg.remove_map(key, self.rmap_bucket, m.voff);
                    }
                }
                Target::Ar(child_obj) => {
                    if let Ok(child) = child_obj.as_ar() {
                        // Unhook the child's table first: the walk below frees every table
                        // it reaches, and the child's are the child's.
                        if let Ok(Some(t)) = self.table_at(&mut inner, m.voff, child.level + 1, false) {
                            write_entry(t, index(child.level + 1, m.voff), 0);
                        }
                        let mut p = child.parents.lock();
                        if let Some(i) = p.iter().position(|l| l.key == key && l.voff == m.voff) {
                            let link = p.swap_remove(i);
                            drop(p);
                            drop(link);
                        }
                    }
                }
            }
        }
        for &(t, level) in &inner.detached {
            free_below(t, level, 512);
            free_table(t);
        }
        // A root's upper half is the kernel's, shared by every root: not ours to free.
        free_below(self.table, self.level, if self.kind == ArKind::Root { 256 } else { 512 });
        free_table(self.table);
    }
}

/// In-kernel tests of the lock-free view (`AddressRange::view`), here rather than in
/// tests.rs so that file's tail stays free for other work.
mod ktests;

/// In-kernel tests of the per-slot writers of 2 MiB ranges (`Paged`).
mod slot_ktests;
