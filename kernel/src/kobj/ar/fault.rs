//! Faults: the walk from a root range through linked ranges to the segment mapping, the
//! page (copied on write where the mapping says so), and its entry.

use core::sync::atomic::Ordering;

use super::*;
use crate::kobj::kref::{KBorrow, KRef};
use crate::kobj::{KObject, ObjRef};
use crate::kobj::segment::CowBreak;
use crate::arch::x86_64::paging::{
    index, read_entry, write_entry, PTE_ACCESSED, PTE_DIRTY, PTE_NX, PTE_PRESENT, PTE_USER, PTE_WRITE,
};
use crate::mm::PAGE_SIZE;
use abi::{Error, MAP_EXEC, MAP_WRITE};
use super::paged::*;

/// A range the fault walk is in, kept alive without writing its count line where possible.
pub(super) enum Held<'r> {
    /// The caller's range (its reference, e.g. the running context's root, outlives the walk).
    Caller(&'r KObject),
    /// A child range borrowed under its parent's lock (`KRef::borrow`: writes only this
    /// core's borrow-slot line, not the range's count line, which every core that links or
    /// walks the range would otherwise write on every `resolve_fault`).
    Borrowed(KBorrow<KObject>),
    /// This core's borrow slots were all taken: a counted reference, as before.
    Counted(ObjRef),
}

impl Held<'_> {
    /// Keep `child` alive past its parent's lock. The caller holds the parent's lock, so the
    /// parent's mapping keeps a counted reference to `child` while the borrow starts.
    pub(super) fn of(child: &ObjRef) -> Held<'static> {
        match KRef::borrow(child) {
            Some(b) => Held::Borrowed(b),
            None => Held::Counted(child.clone()),
        }
    }

    pub(super) fn obj(&self) -> &KObject {
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
            if let Some(paged) = &ar.paged {
                // A 2 MiB range holds only segment mappings: the walk ends here.
                return fault_paged(ar, paged, rel, write, exec);
            }
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
                    // `obj` is the mapping's counted reference, and `g` holds the mapping.
                    let mut broken = None;
                    let r = seg_entry(ar, m, obj, *soff, rel, write, exec, &mut broken).and_then(|(pte, copied)| {
                        let t = ar.table_at(&mut g, rel, 1, true).map_err(|_| FaultError::OutOfMemory)?.ok_or(FaultError::OutOfMemory)?;
                        install_entry(ar, t, rel, pte, copied);
                        Ok(copied)
                    });
                    // After a break the segment holds the new frame whatever followed: the
                    // other mappings' entries are cleared on every path.
                    if let Some(b) = broken {
                        drop(g);
                        drop_stale_entries(b);
                    }
                    return r;
                }
            }
        };
        // Ends the borrow of the range just left (its lock is already let go).
        cur = next;
    }
}

/// The entry a fault at `rel` in segment mapping `m` of range `ar` (of `obj` at `soff`)
/// gets and whether the page was copied (copy-on-write); a break's stale entries go in `broken`
/// in other mappings, which the caller clears (`drop_stale_entries`) after it lets go of the
/// lock that keeps the mapping (and so its counted reference `obj`): the range's, or the
/// mapping's slot's.
#[inline(always)] // the fault path: as inline as it was before it was shared with `fault_paged`
pub(super) fn seg_entry(ar: &AddressRange, m: &Mapping, obj: &ObjRef, soff: u64, rel: u64, write: bool, exec: bool, broken: &mut Option<CowBreak>) -> Result<(u64, bool), FaultError> {
    if (write && m.flags & MAP_WRITE == 0) || (exec && m.flags & MAP_EXEC == 0) {
        return Err(FaultError::Protection);
    }
    let page = (soff + (rel - m.voff)) / PAGE_SIZE;
    let (pa, exclusive, copied) = obj.as_segment().map_err(|_| FaultError::NotMapped)?.fault_page(page, write, (ar.key(), m.voff), broken).map_err(|e| match e {
        Error::NoMemory => FaultError::OutOfMemory,
        _ => FaultError::NotMapped,
    })?;
    let mut pte = pa | PTE_PRESENT | PTE_USER | PTE_ACCESSED;
    if m.flags & MAP_WRITE != 0 && exclusive {
        pte |= PTE_WRITE | PTE_DIRTY;
    }
    if m.flags & MAP_EXEC == 0 && nx_supported() {
        pte |= PTE_NX;
    }
    Ok((pte, copied))
}

/// After a copy-on-write break (`Segment::fault_page`), outside the faulting range's lock:
/// clear the entries the segment's other mappings may hold for the page (each under its own
/// range's or slot's lock, flushed where it was present), then let the old frame go.
#[inline(never)] // rare: only a break of a page mapped more than once
#[cold]
pub(super) fn drop_stale_entries(b: CowBreak) {
    for (ar_obj, map_voff, rel) in b.others.iter() {
        super::map::drop_entry(ar_obj, *map_voff, *rel);
    }
    // The ranges' borrows end first (ending one may drop a range, which takes the segment's
    // bucket lock: none is held here), then the old frame.
    drop(b.others);
    drop(b.old);
}

/// Write `pte` for `rel` into page table `t` of `ar` (under the same lock as `seg_entry`) and
/// count the fault; a copy that replaced a present entry is flushed from every core that may
/// still translate to the shared page.
#[inline(always)] // the fault path: as inline as it was before it was shared with `fault_paged`
pub(super) fn install_entry(ar: &AddressRange, t: u64, rel: u64, pte: u64, copied: bool) {
    let i = index(1, rel);
    let old = read_entry(t, i);
    write_entry(t, i, pte);
    let stats = &crate::percpu::this().stats;
    stats.soft_faults.fetch_add(1, Ordering::Relaxed);
    if copied {
        stats.cow_faults.fetch_add(1, Ordering::Relaxed);
        if old & PTE_PRESENT != 0 {
            flush_cores(&ar.shootdown_targets());
        }
    }
}

/// The fault walk in a 2 MiB range: the page's occupancy word names the page its mapping
/// starts at, whose slot holds the record; the entry is filled under that slot's lock (which
/// keeps the mapping and its segment reference, as the range's lock does in larger ranges).
/// A pending page (a writer between its claim and its final store) is waited for.
#[inline(never)] // kept out of `resolve_fault`'s loop, which larger ranges run per level
pub(super) fn fault_paged(ar: &AddressRange, paged: &Paged, rel: u64, write: bool, exec: bool) -> Result<bool, FaultError> {
    let w = paged.word(rel / PAGE_SIZE).ok_or(FaultError::NotMapped)?;
    loop {
        let v = w.load(Ordering::SeqCst);
        match v & OCC_STATE {
            OCC_FREE => return Err(FaultError::NotMapped),
            OCC_MAPPED => {
                let g = paged.locks[slot_of(occ_start(v))].0.lock();
                // Gone since the word was read (an unmap claimed the page first): read it again.
                let Some(m) = g.iter().find(|m| m.voff <= rel && rel < m.voff + m.len) else { continue };
                let Target::Seg { obj, soff } = &m.target else { return Err(FaultError::NotMapped) };
                let mut broken = None;
                let r = seg_entry(ar, m, obj, *soff, rel, write, exec, &mut broken).map(|(pte, copied)| {
                    install_entry(ar, ar.table, rel, pte, copied);
                    copied
                });
                if let Some(b) = broken {
                    drop(g);
                    drop_stale_entries(b);
                }
                return r;
            }
            _ => core::hint::spin_loop(),
        }
    }
}
