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

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::kref::{KBorrow, KLink, KRef, KWeak};
use super::segment::SegMap;
use super::{cores_in, CoreSet, KObject, ObjRef};
use crate::arch::x86_64::paging::{
    self, alloc_table, entry_span, free_table, index, read_entry, write_entry, PTE_ACCESSED, PTE_ADDR_MASK, PTE_DIRTY,
    PTE_HUGE, PTE_NX, PTE_PRESENT, PTE_USER, PTE_WRITE, TABLE_FLAGS,
};
use crate::mm::PAGE_SIZE;
use abi::{ArKind, ArMapping, Error, ObjType, MAP_EXEC, MAP_READ, MAP_WRITE};
use percore::{TicketLock, MAX_CORES};

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
    /// that creates a table writes nothing but the table entry, issue 17). Rare: only a link
    /// over a slot whose table an earlier mapping made.
    detached: Vec<(u64, u32)>,
}

struct ParentLink {
    parent: KWeak<KObject>,
    /// The parent `AddressRange`'s address (identity while it lives).
    key: usize,
    voff: u64,
}

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
    /// line made it cross cores on every fault (issue 17's audit: one line a range).
    inner: OwnLine<TicketLock<ArInner>>,
    parents: TicketLock<Vec<ParentLink>>,
    /// Cores currently running with this range as their root.
    pub running: CoreSet,
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
            parents: TicketLock::new(Vec::new()),
            running: CoreSet::new(),
        })
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
        while a < rel + len {
            match self.table_at(inner, a, 1, false) {
                Ok(Some(t)) => {
                    let i = index(1, a);
                    let e = read_entry(t, i);
                    if e & PTE_PRESENT != 0 {
                        write_entry(t, i, if only_write { e & !PTE_WRITE } else { 0 });
                        any = true;
                    }
                    a += PAGE_SIZE;
                }
                // No page table here: skip to the next 2 MiB.
                _ => a = (a | (entry_span(2) - 1)) + 1,
            }
        }
        any
    }
}

/// `ar_set_seg`: map `[voff, voff + len)` of `ar_obj` to `seg_obj` at `soff`.
pub fn set_seg(ar_obj: &ObjRef, voff: u64, seg_obj: &ObjRef, soff: u64, len: u64, flags: u64) -> Result<(), Error> {
    set_seg_peeked(&super::share::Peek::of(ar_obj), voff, &super::share::Peek::of(seg_obj), soff, len, flags)
}

/// `set_seg` with both objects borrowed (`Peek`, as the system call has them): a refused
/// mapping (overlap, range, flags) writes no count; only a mapping that is made takes its
/// references.
pub fn set_seg_peeked(ar_obj: &super::share::Peek, voff: u64, seg_obj: &super::share::Peek, soff: u64, len: u64, flags: u64) -> Result<(), Error> {
    let ar = ar_obj.as_ar()?;
    let seg = seg_obj.as_segment()?;
    ar.check_range(voff, len)?;
    if soff % PAGE_SIZE != 0 {
        return Err(Error::Misaligned);
    }
    if flags & !(MAP_READ | MAP_WRITE | MAP_EXEC) != 0 || flags == 0 {
        return Err(Error::InvalidArgument);
    }
    let seg_end = soff.checked_add(len).ok_or(Error::OutOfRange)?;
    if !seg.covers(seg_end) {
        return Err(Error::OutOfRange);
    }
    let mut g = ar.inner.lock();
    if overlaps(&g.maps, voff, len) {
        return Err(Error::Overlap);
    }
    let seg_ref = seg_obj.counted()?;
    // The reverse link writes no count of the range (`SegMap`, `KLink`).
    let ar_link = KLink::from_raw(ar_obj.as_raw()).ok_or(Error::NoSuchObject)?;
    seg.add_map(SegMap { ar: ar_link, ar_key: ar.key(), voff, soff, len })?;
    if let Err(e) = insert_sorted(&mut g.maps, Mapping { voff, len, flags, target: Target::Seg { obj: seg_ref, soff } }) {
        drop(g);
        seg.remove_map(ar.key(), voff);
        return Err(e);
    }
    Ok(())
}

/// `ar_set_ar`: link the whole of `child_obj` into `ar_obj` at `voff`.
pub fn set_ar(ar_obj: &ObjRef, voff: u64, child_obj: &ObjRef) -> Result<(), Error> {
    let ar = ar_obj.as_ar()?;
    let child = child_obj.as_ar()?;
    if KRef::ptr_eq(ar_obj, child_obj) || child.kind == ArKind::Root || child.level >= ar.level {
        return Err(Error::InvalidArgument);
    }
    let span = child.kind.span();
    if voff % span != 0 {
        return Err(Error::Misaligned);
    }
    let end = voff.checked_add(span).ok_or(Error::OutOfRange)?;
    if end > ar.kind.span() || (ar.kind == ArKind::Root && voff < abi::USER_BASE) {
        return Err(Error::OutOfRange);
    }
    let mut g = ar.inner.lock();
    if overlaps(&g.maps, voff, span) {
        return Err(Error::Overlap);
    }
    child.parents.lock().try_reserve(1).map_err(|_| Error::NoMemory)?;
    g.maps.try_reserve(1).map_err(|_| Error::NoMemory)?;
    g.detached.try_reserve(1).map_err(|_| Error::NoMemory)?;
    let t = ar.table_at(&mut g, voff, child.level + 1, true)?.ok_or(Error::NoMemory)?;
    let idx = index(child.level + 1, voff);
    let old = read_entry(t, idx);
    let was_present = old & PTE_PRESENT != 0;
    write_entry(t, idx, child.table | TABLE_FLAGS);
    if was_present {
        // Ours (no mapping overlaps, so no child's table was here): off the tree now, so
        // `Drop`'s walk would miss it and what hangs below it.
        g.detached.push((old & PTE_ADDR_MASK, child.level));
    }
    insert_sorted(&mut g.maps, Mapping { voff, len: span, flags: MAP_READ | MAP_WRITE | MAP_EXEC, target: Target::Ar(child_obj.clone()) })?;
    child.parents.lock().push(ParentLink { parent: KRef::downgrade(ar_obj), key: ar.key(), voff });
    if was_present {
        // An old intermediate table of ours was replaced: drop cached translations through it.
        flush_cores(&ar.shootdown_targets());
    }
    Ok(())
}

/// `ar_unmap`: remove every mapping inside `[voff, voff + len)`.
pub fn unmap(ar_obj: &KObject, voff: u64, len: u64) -> Result<(), Error> {
    let ar = ar_obj.as_ar()?;
    if len == 0 {
        return Err(Error::InvalidArgument);
    }
    if voff % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 {
        return Err(Error::Misaligned);
    }
    let end = voff.checked_add(len).ok_or(Error::OutOfRange)?;
    if end > ar.kind.span() {
        return Err(Error::OutOfRange);
    }
    let removed: Vec<Mapping>;
    {
        let mut g = ar.inner.lock();
        if g.maps.iter().any(|m| m.voff < end && voff < m.voff + m.len && (m.voff < voff || m.voff + m.len > end)) {
            return Err(Error::Overlap);
        }
        // Move the mappings inside the range out, without allocating more than one vector.
        let inside = |m: &Mapping| m.voff >= voff && m.voff + m.len <= end;
        let mut gone: Vec<Mapping> = Vec::new();
        gone.try_reserve(g.maps.iter().filter(|m| inside(m)).count()).map_err(|_| Error::NoMemory)?;
        let mut i = 0;
        while i < g.maps.len() {
            if inside(&g.maps[i]) {
                gone.push(g.maps.remove(i));
            } else {
                i += 1;
            }
        }
        let mut flush = false;
        for m in &gone {
            match &m.target {
                Target::Seg { .. } => flush |= ar.clear_leaves(&mut g, m.voff, m.len, false),
                Target::Ar(child_obj) => {
                    if let Ok(child) = child_obj.as_ar() {
                        if let Ok(Some(t)) = ar.table_at(&mut g, m.voff, child.level + 1, false) {
                            write_entry(t, index(child.level + 1, m.voff), 0);
                            flush = true;
                        }
                    }
                }
            }
        }
        if flush {
            flush_cores(&ar.shootdown_targets());
        }
        removed = gone;
    }
    // Reverse links go after the flush, outside this range's lock.
    for m in &removed {
        match &m.target {
            Target::Seg { obj, .. } => {
                if let Ok(seg) = obj.as_segment() {
                    seg.remove_map(ar.key(), m.voff);
                }
            }
            Target::Ar(child_obj) => {
                if let Ok(child) = child_obj.as_ar() {
                    let mut p = child.parents.lock();
                    if let Some(i) = p.iter().position(|l| l.key == ar.key() && l.voff == m.voff) {
                        let link = p.swap_remove(i);
                        drop(p);
                        drop(link);
                    }
                }
            }
        }
    }
    drop(removed);
    Ok(())
}

/// Write-protect `[voff, voff + len)` of a range (for copy-on-write copies of a segment).
pub fn write_protect(ar_obj: &KObject, voff: u64, len: u64) {
    let Ok(ar) = ar_obj.as_ar() else { return };
    let mut g = ar.inner.lock();
    if ar.clear_leaves(&mut g, voff, len, true) {
        flush_cores(&ar.shootdown_targets());
    }
}

/// `ar_get`: the mappings, by `voff`.
pub fn mappings(ar_obj: &KObject) -> Result<Vec<ArMapping>, Error> {
    let ar = ar_obj.as_ar()?;
    let g = ar.inner.lock();
    let mut v = Vec::new();
    v.try_reserve(g.maps.len()).map_err(|_| Error::NoMemory)?;
    for m in &g.maps {
        let (target, target_type, soff) = match &m.target {
            Target::Seg { obj, soff } => (obj.id, ObjType::Segment as u32, *soff),
            Target::Ar(obj) => (obj.id, ObjType::AddressRange as u32, 0),
        };
        v.push(ArMapping { voff: m.voff, len: m.len, target, target_type, _pad: 0, soff, flags: m.flags });
    }
    Ok(v)
}

/// A range the fault walk is in, kept alive without writing its count line where possible.
enum Held<'r> {
    /// The caller's range (its reference, e.g. the running context's root, outlives the walk).
    Caller(&'r KObject),
    /// A child range borrowed under its parent's lock (`KRef::borrow`: writes only this
    /// core's borrow-slot line, not the range's count line, which every core that links or
    /// walks the range would otherwise write: issue 17's `resolve_fault` lines).
    Borrowed(KBorrow<KObject>),
    /// This core's borrow slots were all taken: a counted reference, as before.
    Counted(ObjRef),
}

impl Held<'_> {
    /// Keep `child` alive past its parent's lock. The caller holds the parent's lock, so the
    /// parent's mapping keeps a counted reference to `child` while the borrow starts.
    fn of(child: &ObjRef) -> Held<'static> {
        match KRef::borrow(child) {
            Some(b) => Held::Borrowed(b),
            None => Held::Counted(child.clone()),
        }
    }

    fn obj(&self) -> &KObject {
        match self {
            Held::Caller(o) => o,
            Held::Borrowed(b) => b,
            Held::Counted(r) => r,
        }
    }
}

/// Resolve a fault at `rel` (relative to `root_obj`): find the segment mapping through any
/// linked ranges, get (or copy) the page, and write the entry into the tables of the range
/// that holds the mapping. Returns whether a copy-on-write copy happened.
///
/// The walk takes no counted reference: the caller's reference keeps `root_obj` alive; each
/// child range is borrowed (`Held::of`) while its parent's lock holds the mapping that
/// counts it, and the parent's lock is let go only after that; the segment is used under the
/// lock of the range whose mapping counts it. So a walk racing an `ar_unmap` of a parent
/// either finds the mapping gone (`NotMapped`) or keeps the child alive until it is done
/// (the child's last drop is handed to the borrow's end, `percore::borrow`).
pub fn resolve_fault(root_obj: &KObject, rel: u64, write: bool, exec: bool) -> Result<bool, FaultError> {
    let mut cur = Held::Caller(root_obj);
    let mut rel = rel;
    loop {
        let next = {
            let ar = cur.obj().as_ar().map_err(|_| FaultError::NotMapped)?;
            let mut g = ar.inner.lock();
            let Some(m) = g.maps.iter().find(|m| m.voff <= rel && rel < m.voff + m.len) else {
                return Err(FaultError::NotMapped);
            };
            match &m.target {
                Target::Ar(child) => {
                    let next = Held::of(child);
                    rel -= m.voff;
                    next // the lock goes here, after the borrow began
                }
                Target::Seg { obj, soff } => {
                    if (write && m.flags & MAP_WRITE == 0) || (exec && m.flags & MAP_EXEC == 0) {
                        return Err(FaultError::Protection);
                    }
                    let flags = m.flags;
                    let page = (soff + (rel - m.voff)) / PAGE_SIZE;
                    // `obj` is the mapping's counted reference, and `g` holds the mapping.
                    let (pa, exclusive, copied) =
                        obj.as_segment().map_err(|_| FaultError::NotMapped)?.fault_page(page, write).map_err(|e| match e {
                            Error::NoMemory => FaultError::OutOfMemory,
                            _ => FaultError::NotMapped,
                        })?;
                    let mut pte = pa | PTE_PRESENT | PTE_USER | PTE_ACCESSED;
                    if flags & MAP_WRITE != 0 && exclusive {
                        pte |= PTE_WRITE | PTE_DIRTY;
                    }
                    if flags & MAP_EXEC == 0 && nx_supported() {
                        pte |= PTE_NX;
                    }
                    let t = ar.table_at(&mut g, rel, 1, true).map_err(|_| FaultError::OutOfMemory)?.ok_or(FaultError::OutOfMemory)?;
                    let i = index(1, rel);
                    let old = read_entry(t, i);
                    write_entry(t, i, pte);
                    let stats = &crate::percpu::this().stats;
                    stats.soft_faults.fetch_add(1, Ordering::Relaxed);
                    if copied {
                        stats.cow_faults.fetch_add(1, Ordering::Relaxed);
                        if old & PTE_PRESENT != 0 {
                            // Other cores may still translate to the shared page.
                            flush_cores(&ar.shootdown_targets());
                        }
                    }
                    return Ok(copied);
                }
            }
        };
        // Ends the borrow of the range just left (its lock is already let go).
        cur = next;
    }
}

/// Free the tables below table `t` (at `level`) reached through its first `entries` entries:
/// every present entry of a table above level 1 is an intermediate table of this range's own
/// (child ranges' tables are unhooked before this runs; level-1 entries are segment pages,
/// which the segments own). Recursion depth is at most three.
fn free_below(t: u64, level: u32, entries: usize) {
    if level <= 1 {
        return;
    }
    for i in 0..entries {
        let e = read_entry(t, i);
        if e & PTE_PRESENT == 0 || e & PTE_HUGE != 0 {
            continue;
        }
        let sub = e & PTE_ADDR_MASK;
        free_below(sub, level - 1, 512);
        free_table(sub);
    }
}

impl Drop for AddressRange {
    fn drop(&mut self) {
        // Kernel cores may keep this range loaded between requests without a reference.
        crate::roles::evict_loaded_root(&self.running);
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
        let mut inner = self.inner.lock();
        for m in core::mem::take(&mut inner.maps) {
            match &m.target {
                Target::Seg { obj, .. } => {
                    if let Ok(seg) = obj.as_segment() {
                        seg.remove_map(key, m.voff);
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
