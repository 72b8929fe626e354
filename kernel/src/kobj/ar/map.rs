//! Mapping and unmapping: `ar_set_seg`, `ar_set_ar`, `ar_unmap`, write protection for
//! copy-on-write copies, and the list of mappings.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::*;
use crate::kobj::kref::{KLink, KRef};
use crate::kobj::segment::SegMap;
use crate::kobj::{KObject, ObjRef};
use crate::arch::x86_64::paging::{
    index, read_entry, write_entry, PTE_ADDR_MASK, PTE_PRESENT, TABLE_FLAGS,
};
use crate::mm::PAGE_SIZE;
use abi::{ArKind, ArMapping, Error, MAP_EXEC, MAP_READ, MAP_WRITE};
use super::paged::*;

/// `ar_set_seg`: map `[voff, voff + len)` of `ar_obj` to `seg_obj` at `soff`.
pub fn set_seg(ar_obj: &ObjRef, voff: u64, seg_obj: &ObjRef, soff: u64, len: u64, flags: u64) -> Result<(), Error> {
    set_seg_peeked(&crate::kobj::share::Peek::of(ar_obj), voff, &crate::kobj::share::Peek::of(seg_obj), soff, len, flags)
}

/// `set_seg` with both objects borrowed (`Peek`, as the system call has them): a refused
/// mapping (overlap, range, flags) writes no count; only a mapping that is made takes its
/// references.
///
/// Error order (abi `AR_SET_SEG`, docs/objects.md): the arguments (`InvalidArgument`,
/// `Misaligned`, `OutOfRange` of the range), then `Overlap` (the range), then `OutOfRange` of
/// the segment (its size). The range is checked before the segment, so a mapping refused for
/// overlap reads nothing of the segment (so such a refusal commutes with a resize of
/// the segment and shares no line with it).
pub fn set_seg_peeked(ar_obj: &crate::kobj::share::Peek, voff: u64, seg_obj: &crate::kobj::share::Peek, soff: u64, len: u64, flags: u64) -> Result<(), Error> {
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
    if let Some(paged) = &ar.paged {
        return set_seg_paged(ar_obj, ar, paged, voff, seg_obj, seg, soff, len, flags, seg_end);
    }
    // A mapping in the way is refused without the lock: the view is one state of the range
    // during this call, and in it the slot was taken (mappings are never resized in place).
    if let Some(v) = ar.snapshot() {
        if v.recs().any(|m| voff < m.voff + m.len && m.voff < voff + len) {
            return Err(Error::Overlap);
        }
    }
    let mut g = ar.inner.lock();
    if overlaps(&g.maps, voff, len) {
        return Err(Error::Overlap);
    }
    // The size after the overlap, under the lock: no mapping can appear meanwhile.
    if !seg.covers(seg_end) {
        return Err(Error::OutOfRange);
    }
    g.maps.try_reserve(1).map_err(|_| Error::NoMemory)?;
    let seg_ref = seg_obj.counted()?;
    // The reverse link writes no count of the range (`SegMap`, `KLink`).
    let ar_link = KLink::from_raw(ar_obj.as_raw()).ok_or(Error::NoSuchObject)?;
    seg.add_map(SegMap { ar: ar_link, ar_key: ar.key(), voff, soff, len }, ar.rmap_bucket)?;
    if let Err(e) = insert_sorted(&mut g.maps, Mapping { voff, len, flags, target: Target::Seg { obj: seg_ref, soff } }) {
        drop(g);
        seg.remove_map(ar.key(), ar.rmap_bucket, voff);
        return Err(e);
    }
    ar.publish(&g);
    Ok(())
}

/// `set_seg_peeked` in a 2 MiB range: the pages' occupancy words decide overlap (claimed,
/// free to pending, so no other writer can map them meanwhile), and the record goes into the
/// start page's slot. Writes only those words, that slot and the segment's lines.
#[allow(clippy::too_many_arguments)]
pub(super) fn set_seg_paged(
    ar_obj: &crate::kobj::share::Peek,
    ar: &AddressRange,
    paged: &Paged,
    voff: u64,
    seg_obj: &crate::kobj::share::Peek,
    seg: &crate::kobj::segment::Segment,
    soff: u64,
    len: u64,
    flags: u64,
    seg_end: u64,
) -> Result<(), Error> {
    let (first, last) = (voff / PAGE_SIZE, (voff + len) / PAGE_SIZE);
    // Without writing anything: a mapped page refuses at once (the segment is not read); with
    // every page free, a segment too small refuses if the pages were still free when its size
    // was read (the second collect finds the same versions: no word changed in between, so
    // both facts held at one instant). Otherwise the claims below decide.
    match paged.occ_collect(first, last) {
        Err(Probe::Mapped) => return Err(Error::Overlap),
        Ok(sum) if !seg.covers(seg_end) && paged.occ_collect(first, last) == Ok(sum) => return Err(Error::OutOfRange),
        _ => {}
    }
    paged.claim_free(first, last)?;
    // The pages are ours: nobody maps them now, so the segment's answers stand as they are.
    let made = (|| {
        let fits = seg.covers(seg_end);
        if !fits {
            return Err(Error::OutOfRange);
        }
        let seg_ref = seg_obj.counted()?;
        // The reverse link writes no count of the range (`SegMap`, `KLink`).
        let ar_link = KLink::from_raw(ar_obj.as_raw()).ok_or(Error::NoSuchObject)?;
        let slot = slot_of(first);
        let mut g = paged.locks[slot].0.lock();
        // Room first, so that once the segment knows the mapping the push cannot fail.
        g.try_reserve(1).map_err(|_| Error::NoMemory)?;
        seg.add_map(SegMap { ar: ar_link, ar_key: ar.key(), voff, soff, len }, ar.rmap_bucket)?;
        g.push(Mapping { voff, len, flags, target: Target::Seg { obj: seg_ref, soff } });
        paged.views[slot].publish(&g);
        Ok(())
    })();
    match made {
        Ok(()) => paged.settle(first, last, OCC_MAPPED, first),
        Err(_) => paged.settle(first, last, OCC_FREE, 0),
    }
    made
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
    ar.publish(&g);
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
    if let Some(paged) = &ar.paged {
        return unmap_paged(ar, paged, voff, end);
    }
    // Nothing to remove, or a mapping straddling an end: answered without the lock from the
    // view, one state of the range during this call.
    if let Some(v) = ar.snapshot() {
        if v.recs().any(|m| m.voff < end && voff < m.voff + m.len && (m.voff < voff || m.voff + m.len > end)) {
            return Err(Error::Overlap);
        }
        if !v.recs().any(|m| m.voff < end && voff < m.voff + m.len) {
            return Ok(());
        }
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
        if !gone.is_empty() {
            ar.publish(&g);
        }
        removed = gone;
    }
    forget_reverse_links(ar, &removed);
    drop(removed);
    Ok(())
}

/// `unmap` in a 2 MiB range: every page of `[voff, end)` is claimed (so no mapping there can
/// be made or removed by another writer meanwhile), each mapping inside is removed from its
/// start page's slot, and the pages are set free. Writes only those pages' words and those
/// slots.
pub(super) fn unmap_paged(ar: &AddressRange, paged: &Paged, voff: u64, end: u64) -> Result<(), Error> {
    let (first, last) = (voff / PAGE_SIZE, end / PAGE_SIZE);
    // Nothing to remove: answered from the pages' words, writing nothing.
    if paged.occ_collect(first, last).is_ok() {
        return Ok(());
    }
    paged.claim_all(first, last);
    let was = |p: u64| -> Option<u64> {
        let v = paged.word(p)?.load(Ordering::Relaxed);
        (v & OCC_STATE == OCC_PENDING && v & OCC_WAS_MAPPED != 0).then(|| occ_start(v))
    };
    // A mapping straddles the start if the first page's began before it, and the end if the
    // last page's mapping reaches past it: its record says (it stays while we hold its last
    // page; its slot is the one the removal below takes anyway, and the page after the end,
    // which a neighbour's writer may be changing, is not read).
    let straddles_start = was(first).is_some_and(|s| s < first);
    let straddles_end = was(last - 1).is_some_and(|s| {
        let g = paged.locks[slot_of(s)].0.lock();
        g.iter().find(|m| m.voff == s * PAGE_SIZE).is_some_and(|m| m.voff + m.len > end)
    });
    if straddles_start || straddles_end {
        paged.restore(first, last);
        return Err(Error::Overlap);
    }
    // Every mapping met starts inside now: one per page that is its own start. Their slots
    // are locked in ascending order (as `Paged::mappings`' fallback does; everyone else holds
    // one slot lock at a time), all begun before any is ended: one change for readers.
    let starts = || (first..last).filter(move |&p| was(p) == Some(p));
    let mut slots_used = 0u64;
    for p in starts() {
        slots_used |= 1 << slot_of(p);
    }
    let mut gone: Vec<Mapping> = Vec::new();
    let mut held = Vec::new();
    if gone.try_reserve(starts().count()).is_err() || held.try_reserve(slots_used.count_ones() as usize).is_err() {
        paged.restore(first, last);
        return Err(Error::NoMemory);
    }
    for slot in (0..SLOTS).filter(|&i| slots_used & (1 << i) != 0) {
        let g = paged.locks[slot].0.lock();
        let gen = paged.views[slot].begin();
        held.push((slot, g, gen));
    }
    let mut flush = false;
    for p in starts() {
        let Some((_, g, _)) = held.iter_mut().find(|(slot, _, _)| *slot == slot_of(p)) else { continue };
        let Some(i) = g.iter().position(|m| m.voff == p * PAGE_SIZE) else { continue };
        let m = g.swap_remove(i);
        // Under the slot's lock, as a fault on the mapping fills its entries: a fault that
        // took the lock first has written its entry by now, and one that comes after finds
        // no mapping.
        flush |= clear_leaves_of_table(ar.table, m.voff, m.len, false);
        gone.push(m);
    }
    if flush {
        flush_cores(&ar.shootdown_targets());
    }
    for (slot, g, gen) in held.iter() {
        paged.views[*slot].end(*gen, g);
    }
    drop(held);
    paged.settle(first, last, OCC_FREE, 0);
    forget_reverse_links(ar, &gone);
    drop(gone);
    Ok(())
}

/// Reverse links of removed mappings go after the flush, outside the range's locks.
pub(super) fn forget_reverse_links(ar: &AddressRange, removed: &[Mapping]) {
    for m in removed {
        match &m.target {
            Target::Seg { obj, .. } => {
                if let Ok(seg) = obj.as_segment() {
                    seg.remove_map(ar.key(), ar.rmap_bucket, m.voff);
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
}

/// Write-protect `[voff, voff + len)` of a range (for copy-on-write copies of a segment).
pub fn write_protect(ar_obj: &KObject, voff: u64, len: u64) {
    let Ok(ar) = ar_obj.as_ar() else { return };
    if let Some(paged) = &ar.paged {
        // `voff` is where the mapping starts (the segment's `SegMap`): its slot's lock is the
        // one a fault on it holds while it fills an entry.
        let _g = paged.locks[slot_of(voff / PAGE_SIZE)].0.lock();
        if clear_leaves_of_table(ar.table, voff, len, true) {
            flush_cores(&ar.shootdown_targets());
        }
        return;
    }
    let mut g = ar.inner.lock();
    if ar.clear_leaves(&mut g, voff, len, true) {
        flush_cores(&ar.shootdown_targets());
    }
}

/// Clear the entry of the page at `rel` of a range, if it has one, in the mapping that starts
/// at `map_voff` (a copy-on-write break's stale entry: `fault::drop_stale_entries`), and
/// flush it where it was present. The next access faults and finds the segment's new frame.
pub(super) fn drop_entry(ar_obj: &KObject, map_voff: u64, rel: u64) {
    let Ok(ar) = ar_obj.as_ar() else { return };
    if let Some(paged) = &ar.paged {
        // The mapping's slot's lock: the one a fault on it holds while it fills an entry.
        let _g = paged.locks[slot_of(map_voff / PAGE_SIZE)].0.lock();
        if clear_leaves_of_table(ar.table, rel, PAGE_SIZE, false) {
            flush_cores(&ar.shootdown_targets());
        }
        return;
    }
    let mut g = ar.inner.lock();
    if ar.clear_leaves(&mut g, rel, PAGE_SIZE, false) {
        flush_cores(&ar.shootdown_targets());
    }
}

/// `ar_get`: the mappings, by `voff`. Read from the view without the lock (writes no shared
/// line) unless writers keep intervening or the range has more than `VIEW_MAPS` mappings.
pub fn mappings(ar_obj: &KObject) -> Result<Vec<ArMapping>, Error> {
    let ar = ar_obj.as_ar()?;
    if let Some(paged) = &ar.paged {
        return paged.mappings();
    }
    if let Some(view) = ar.snapshot() {
        let mut v = Vec::new();
        v.try_reserve(view.words[0] as usize).map_err(|_| Error::NoMemory)?;
        v.extend(view.recs().map(ViewRec::to_abi));
        return Ok(v);
    }
    let g = ar.inner.lock();
    let mut v = Vec::new();
    v.try_reserve(g.maps.len()).map_err(|_| Error::NoMemory)?;
    v.extend(g.maps.iter().map(|m| ViewRec::of(m).to_abi()));
    Ok(v)
}
