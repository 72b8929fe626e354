//! In-kernel tests of the lock-free view (`AddressRange::view`), here rather than in
//! tests.rs so that file's tail stays free for other work.

use super::fault::resolve_fault;
use super::{mappings, set_seg, unmap, FaultError, VIEW_MAPS};
use crate::arch::x86_64::paging::{index, read_entry, PTE_PRESENT};
use super::AddressRange;
use crate::kobj::{segment::Segment, KObject, Kind, ObjRef};
use crate::mm::PAGE_SIZE;
use crate::ktest::{kassert, ktest};
use crate::{percpu, smp};
use abi::{ArKind, ArMapping, Error, MAP_READ, MAP_WRITE};
use alloc::string::String;
use core::sync::atomic::{AtomicUsize, Ordering};

fn err(e: Error) -> String {
    alloc::format!("{e:?}")
}

/// `ar_get`'s answer is sorted by voff and no two mappings overlap.
fn well_formed(v: &[ArMapping]) -> bool {
    v.windows(2).all(|w| w[0].voff + w[0].len <= w[1].voff)
}

fn new_range(me: u32, kind: ArKind) -> Result<ObjRef, String> {
    KObject::create(b"ktest-view-ar", me, Kind::Ar(AddressRange::new(kind, me).map_err(err)?)).map_err(err)
}

/// Both ways of answering without the lock: a 2 MiB range's occupancy words, and a larger
/// range's view.
const KINDS: [ArKind; 2] = [ArKind::Span2M, ArKind::Span1G];

// Catches: a change of the mappings that is not copied into the view (`publish` left out
// of `set_seg` or `unmap`: a core's own mapping is missing from, or stays in, `ar_get`'s
// answer), a lock-free overlap check that refuses a disjoint slot (a core's own slot
// fails), a lock-free no-op unmap that claims success while the slot is mapped (the slot
// is still in `ar_get`'s answer afterwards), and two cores both mapping the shared slot
// (`ar_get` shows overlapping mappings, or more wins than unmaps), and an occupancy word
// left mapped by an unmap (planted once, 2026-11-29: `OCC_MAPPED` for `OCC_FREE` in
// `unmap` fails check 10; so did leaving `publish` out of `unmap`), and an unmap that
// leaves the page's entry behind while other cores map and probe (planted once: no
// `clear_leaves` in `unmap` fails check 13). Every core maps, faults,
// reads and unmaps its own pages and races the others for page 100, on a 2 MiB range
// (occupancy words) and on a 1 GiB range (the view).
ktest! {
fn ar_view_disjoint_and_same_slot_from_several_cores() -> Outcome {
    let cores = percpu::online_count().min(4);
    if cores < 2 {
        return Ok(crate::ktest::Outcome::Skipped("needs two cores".into()));
    }
    for kind in KINDS {
        disjoint_and_same_slot(cores, kind).map_err(|e| alloc::format!("{kind:?}: {e}"))?;
    }
    Ok(crate::ktest::Outcome::Ran)
}
}

fn disjoint_and_same_slot(cores: usize, kind: ArKind) -> Result<(), String> {
    let (pages0, live0) = crate::tests::quiescent_counts();
    let me = percpu::current_index() as u32;
    let seg = KObject::create(b"ktest-view-seg", me, Kind::Segment(Segment::new(8 * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
    let ar = new_range(me, kind)?;
    let wrong = AtomicUsize::new(0);
    let first_wrong = AtomicUsize::new(0);
    let shared_wins = AtomicUsize::new(0);
    const ROUNDS: usize = 400;
    const SHARED: u64 = 100 * PAGE_SIZE;
    let note = |what: usize| {
        wrong.fetch_add(1, Ordering::Relaxed);
        let _ = first_wrong.compare_exchange(0, what, Ordering::Relaxed, Ordering::Relaxed);
    };
    smp::run_on_all(&|i| {
        if i >= cores {
            return;
        }
        // Pages 4i and 4i + 1 are this core's mapping, 4i + 2 and 4i + 3 stay empty.
        let own = 4 * i as u64 * PAGE_SIZE;
        let soff = 2 * i as u64 * PAGE_SIZE;
        let map_own = || set_seg(&ar, own, &seg, soff, 2 * PAGE_SIZE, MAP_READ | MAP_WRITE);
        for r in 0..ROUNDS {
            if map_own().is_err() {
                note(1);
                return;
            }
            match mappings(&ar) {
                Ok(v) if well_formed(&v) && v.iter().filter(|m| m.voff == own && m.len == 2 * PAGE_SIZE && m.soff == soff && m.target == seg.id).count() == 1 => {}
                _ => note(2),
            }
            // The same slot again, or overlapping its second page: refused.
            if set_seg(&ar, own + PAGE_SIZE, &seg, 0, PAGE_SIZE, MAP_READ) != Err(Error::Overlap) {
                note(3);
            }
            // An unmap straddling our mapping's end is refused; one of the empty pages
            // after it is a no-op that leaves our mapping in place.
            if unmap(&ar, own + PAGE_SIZE, 2 * PAGE_SIZE) != Err(Error::Overlap) {
                note(4);
            }
            if unmap(&ar, own + 2 * PAGE_SIZE, 2 * PAGE_SIZE).is_err() {
                note(5);
            }
            if r % 2 == 0 {
                // The whole slot: removes our mapping; map it again for the rest of the round.
                if unmap(&ar, own, 4 * PAGE_SIZE).is_err() || map_own().is_err() {
                    note(10);
                    return;
                }
            }
            if r % 3 == 0 && set_seg(&ar, SHARED, &seg, 0, PAGE_SIZE, MAP_READ).is_ok() {
                shared_wins.fetch_add(1, Ordering::Relaxed);
                match mappings(&ar) {
                    Ok(v) if well_formed(&v) && v.iter().filter(|m| m.voff == SHARED).count() == 1 => {}
                    _ => note(6),
                }
                if unmap(&ar, SHARED, PAGE_SIZE).is_err() {
                    note(7);
                }
            }
            // A write fault on our second page fills its entry (under the range's lock, as
            // the other cores' lock-free refusals and no-ops go on).
            if resolve_fault(&ar, own + PAGE_SIZE, true, false) != Ok(false) {
                note(11);
            }
            if unmap(&ar, own, 2 * PAGE_SIZE).is_err() {
                note(8);
                return;
            }
            match mappings(&ar) {
                Ok(v) if well_formed(&v) && !v.iter().any(|m| m.voff == own) => {}
                _ => note(9),
            }
            // The unmap took the entry with it: the page is not mapped, and in a 2 MiB
            // range (whose top table is the page table) its entry is clear.
            if resolve_fault(&ar, own + PAGE_SIZE, false, false) != Err(FaultError::NotMapped) {
                note(12);
            }
            if kind == ArKind::Span2M && ar.as_ar().is_ok_and(|a| read_entry(a.table, index(1, own + PAGE_SIZE)) & PTE_PRESENT != 0) {
                note(13);
            }
        }
    });
    kassert!(wrong.load(Ordering::Relaxed) == 0, "{} wrong results (first: check {})", wrong.load(Ordering::Relaxed), first_wrong.load(Ordering::Relaxed));
    kassert!(shared_wins.load(Ordering::Relaxed) > 0, "nobody ever mapped the shared slot");
    let left = mappings(&ar).map_err(err)?;
    kassert!(left.is_empty(), "{} mappings left after every core unmapped its own", left.len());
    drop(ar);
    drop(seg);
    crate::tests::nothing_leaked_since((pages0, live0))
}

// Catches: a view that holds more mappings than it has room for (truncated or garbage
// records in `ar_get`'s answer past `VIEW_MAPS`), a range past `VIEW_MAPS` whose overlap
// and no-op checks stop working, a view not republished when the count drops back
// under `VIEW_MAPS` (stale records after the unmaps), and occupancy words of two pages
// that share a word (planted once, 2026-11-29: `occ_index` without `+ p / 64` fails with
// a false overlap; so did a publish that truncates to `VIEW_MAPS` records).
ktest! {
fn ar_view_past_its_capacity_falls_back_to_the_lock() {
    for kind in KINDS {
        past_capacity(kind).map_err(|e| alloc::format!("{kind:?}: {e}"))?;
    }
    Ok(())
}
}

fn past_capacity(kind: ArKind) -> Result<(), String> {
    let me = percpu::current_index() as u32;
    let (pages0, live0) = crate::tests::quiescent_counts();
    let n = VIEW_MAPS as u64 + 4;
    let seg = KObject::create(b"ktest-view-seg2", me, Kind::Segment(Segment::new(2 * n * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
    let ar = new_range(me, kind)?;
    // Two-page mappings at every fourth page, mapped from the top down (each insert at
    // the front, so every record moves).
    for k in (0..n).rev() {
        set_seg(&ar, 4 * k * PAGE_SIZE, &seg, 2 * k * PAGE_SIZE, 2 * PAGE_SIZE, MAP_READ).map_err(err)?;
        let v = mappings(&ar).map_err(err)?;
        kassert!(v.len() as u64 == n - k && well_formed(&v), "after mapping {k}: {} mappings", v.len());
        kassert!(v[0].voff == 4 * k * PAGE_SIZE && v[0].soff == 2 * k * PAGE_SIZE && v[0].target == seg.id, "first mapping after mapping {k}: voff {:#x}", v[0].voff);
    }
    for k in 0..n {
        let at = 4 * k * PAGE_SIZE;
        let r = set_seg(&ar, at + PAGE_SIZE, &seg, 0, PAGE_SIZE, MAP_READ);
        kassert!(r == Err(Error::Overlap), "mapping over the second page of {k}: {r:?}");
        let r = unmap(&ar, at + PAGE_SIZE, 2 * PAGE_SIZE);
        kassert!(r == Err(Error::Overlap), "straddling unmap of {k}: {r:?}");
        let r = unmap(&ar, at + 2 * PAGE_SIZE, 2 * PAGE_SIZE);
        kassert!(r == Ok(()), "unmap of the gap after {k}: {r:?}");
    }
    // Unmap from the bottom: the count crosses VIEW_MAPS on the way down.
    for k in 0..n {
        unmap(&ar, 4 * k * PAGE_SIZE, 2 * PAGE_SIZE).map_err(err)?;
        let v = mappings(&ar).map_err(err)?;
        kassert!(v.len() as u64 == n - k - 1 && well_formed(&v), "after unmapping {k}: {} mappings", v.len());
        kassert!(v.first().is_none_or(|m| m.voff == 4 * (k + 1) * PAGE_SIZE), "first mapping after unmapping {k}: voff {:#x}", v[0].voff);
    }
    drop(ar);
    drop(seg);
    crate::tests::nothing_leaked_since((pages0, live0))
}

// Catches: a mapping allowed to run past its segment's end (faults there would find no
// page), on either path: the lock-free 2 MiB range and the locked larger range. Each path
// refuses twice (`Segment::covers` early, and the segment's page words as the mapping
// registers), so only a bug in both fails this; the catalog's `segment_map_past_its_pages`
// plants the second. A mapping that ends exactly at the segment's end is made.
ktest! {
fn ar_mapping_past_the_segment_end_is_refused() {
    for kind in KINDS {
        past_segment_end(kind).map_err(|e| alloc::format!("{kind:?}: {e}"))?;
    }
    Ok(())
}
}

fn past_segment_end(kind: ArKind) -> Result<(), String> {
    let me = percpu::current_index() as u32;
    let (pages0, live0) = crate::tests::quiescent_counts();
    let seg = KObject::create(b"ktest-seg-end", me, Kind::Segment(Segment::new(2 * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
    let ar = new_range(me, kind)?;
    for (soff, len) in [(PAGE_SIZE, 2 * PAGE_SIZE), (0, 3 * PAGE_SIZE), (2 * PAGE_SIZE, PAGE_SIZE)] {
        let r = set_seg(&ar, 8 * PAGE_SIZE, &seg, soff, len, MAP_READ);
        kassert!(r == Err(Error::OutOfRange), "mapping {len:#x} bytes at segment offset {soff:#x} of a 2-page segment: {r:?}");
        kassert!(mappings(&ar).map_err(err)?.is_empty(), "a refused mapping left a record");
    }
    set_seg(&ar, 8 * PAGE_SIZE, &seg, PAGE_SIZE, PAGE_SIZE, MAP_READ).map_err(err)?;
    kassert!(mappings(&ar).map_err(err)?.len() == 1, "the mapping that ends at the segment's end is missing");
    unmap(&ar, 8 * PAGE_SIZE, PAGE_SIZE).map_err(err)?;
    drop(ar);
    drop(seg);
    crate::tests::nothing_leaked_since((pages0, live0))
}

// Catches: a core of the bitmap skipped or given twice, or a core given that is not in it,
// by the iterator TLB shootdowns use (`flush_cores`, `evict_loaded_root`): cores at the
// ends of every word, an empty word between set ones, the last core, and the empty set.
ktest! {
fn cores_in_gives_exactly_the_set_cores_in_order() {
    let sets: [&[usize]; 4] = [&[], &[0], &[0, 1, 63, 64, 130, 191, 255], &[5, 200]];
    for want in sets {
        let mut bits = [0u64; percore::MAX_CORES / 64];
        for &c in want {
            bits[c / 64] |= 1 << (c % 64);
        }
        let got: alloc::vec::Vec<usize> = crate::kobj::cores_in(&bits).collect();
        kassert!(got == want, "cores_in of {want:?} gave {got:?}");
        // The clone continues from where it was taken.
        let mut it = crate::kobj::cores_in(&bits);
        let first = it.next();
        let rest: alloc::vec::Vec<usize> = it.clone().collect();
        kassert!(first == want.first().copied() && rest[..] == want[want.len().min(1)..], "a clone after one step gave {rest:?}");
    }
    Ok(())
}
}
