//! The lock-free view of a range's mappings, and 2 MiB ranges' per-slot writers and page
//! occupancy words (`Paged`).

use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicU64, Ordering};

use super::*;
use crate::mm::nodevec::NodeVec;
use abi::{ArMapping, Error, ObjType};
use percore::TicketLock;

/// Mappings the lock-free view (`AddressRange::view`) holds; a range with more is read under
/// its lock (the view then says `VIEW_OVERFLOW`).
pub(super) const VIEW_MAPS: usize = 16;
/// Words of one mapping in the view: voff, len, flags, target id, target type, soff.
pub(super) const VIEW_REC: usize = 6;
/// The view: word 0 is the number of mappings (or `VIEW_OVERFLOW`), then the records by voff.
pub(super) const VIEW_WORDS: usize = 1 + VIEW_MAPS * VIEW_REC;
pub(super) const VIEW_OVERFLOW: u64 = u64::MAX;
/// Optimistic reads of the view before a reader falls back to the range's lock.
pub(super) const VIEW_TRIES: usize = 4;

/// One mapping as the view records it (what `ar_get` reports and the overlap checks need).
#[derive(Clone, Copy)]
pub(super) struct ViewRec {
    pub(super) voff: u64,
    pub(super) len: u64,
    pub(super) flags: u64,
    pub(super) target: u64,
    pub(super) target_type: u64,
    pub(super) soff: u64,
}

impl ViewRec {
    pub(super) fn of(m: &Mapping) -> ViewRec {
        let (target, target_type, soff) = match &m.target {
            Target::Seg { obj, soff } => (obj.id, ObjType::Segment as u64, *soff),
            Target::Ar(obj) => (obj.id, ObjType::AddressRange as u64, 0),
        };
        ViewRec { voff: m.voff, len: m.len, flags: m.flags, target, target_type, soff }
    }

    pub(super) fn words(&self) -> [u64; VIEW_REC] {
        [self.voff, self.len, self.flags, self.target, self.target_type, self.soff]
    }

    pub(super) fn from_words(w: &[u64]) -> ViewRec {
        ViewRec { voff: w[0], len: w[1], flags: w[2], target: w[3], target_type: w[4], soff: w[5] }
    }

    pub(super) fn to_abi(self) -> ArMapping {
        ArMapping { voff: self.voff, len: self.len, target: self.target, target_type: self.target_type as u32, _pad: 0, soff: self.soff, flags: self.flags }
    }
}

/// A consistent copy of a range's mappings taken without its lock (`AddressRange::snapshot`).
pub(super) struct View {
    pub(super) words: [u64; VIEW_WORDS],
}

impl View {
    pub(super) fn recs(&self) -> impl Iterator<Item = ViewRec> + '_ {
        // `snapshot` returns only views whose count is at most VIEW_MAPS.
        self.words[1..1 + self.words[0] as usize * VIEW_REC].chunks_exact(VIEW_REC).map(ViewRec::from_words)
    }
}

/// Pages of a 2 MiB range, each with an occupancy word (`Paged::occ`).
pub(super) const OCC_PAGES: usize = 512;
/// Occupancy states (the word's low two bits). The word also holds, from bit
/// `OCC_VERSION_SHIFT` up, a version that every store bumps, so an unchanged word was not
/// changed and changed back (`occ_collect`'s double collect); for a mapped page, the page its
/// mapping starts at (bits 3-11: where its record is, `slot_of`); for a pending page, whether
/// it was mapped when claimed (`OCC_WAS_MAPPED`, with that start), so a refused claim puts
/// back exactly what it took.
pub(super) const OCC_FREE: u64 = 0;
/// A writer has claimed the page (`Paged::claim_free`, `claim_all`) and will make it mapped or
/// free: wait for it.
pub(super) const OCC_PENDING: u64 = 1;
pub(super) const OCC_MAPPED: u64 = 2;
pub(super) const OCC_STATE: u64 = 3;
pub(super) const OCC_WAS_MAPPED: u64 = 1 << 2;
pub(super) const OCC_START_SHIFT: u32 = 3;
pub(super) const OCC_START_MASK: u64 = 0x1FF;
pub(super) const OCC_VERSION_SHIFT: u32 = 12;

/// The word after `old` with `state` and `extra` (start bits, `OCC_WAS_MAPPED`): the version
/// one higher.
pub(super) fn occ_word(old: u64, state: u64, extra: u64) -> u64 {
    (((old >> OCC_VERSION_SHIFT) + 1) << OCC_VERSION_SHIFT) | extra | state
}

/// The start page a mapped (or pending, was-mapped) word records.
pub(super) fn occ_start(v: u64) -> u64 {
    (v >> OCC_START_SHIFT) & OCC_START_MASK
}

/// Slots of a 2 MiB range: the record of a mapping lives in the slot of the page it starts
/// at, `page % SLOTS`, so mappings starting less than 64 pages apart have slots of their own
/// (lock, record list, view), as their pages' occupancy words have lines of their own.
pub(super) const SLOTS: usize = 64;

pub(super) fn slot_of(page: u64) -> usize {
    (page % SLOTS as u64) as usize
}

/// A slot's view: the number of its mappings (0, 1 or `VIEW_OVERFLOW`), then one record.
pub(super) const SLOT_VIEW_WORDS: usize = 1 + VIEW_REC;

/// A slot's writer lock and records, on a line of its own: written by the slot's writers and
/// by faults on its mappings.
#[repr(align(64))]
pub(super) struct SlotLock(pub(super) TicketLock<Vec<Mapping>>);

/// A slot's records again as plain words behind a generation (`ar_get` reads them without a
/// lock). Not a `percore::SeqLock`: that has its own writer lock and a 128-byte generation,
/// three lines a slot; this one is written only under the slot's lock, so a generation word on
/// the same line as the words is enough (the writer and reader protocol is `SeqLock`'s, see
/// `SlotView::publish` and `Paged::mappings`). One line.
#[repr(align(64))]
pub(super) struct SlotView {
    /// Odd while the slot's writer stores the words; two more per change.
    pub(super) gen: AtomicU64,
    pub(super) words: [AtomicU64; SLOT_VIEW_WORDS],
}

impl SlotView {
    pub(super) fn new() -> SlotView {
        SlotView { gen: AtomicU64::new(0), words: [const { AtomicU64::new(0) }; SLOT_VIEW_WORDS] }
    }

    /// Copy the slot's records (`maps`, under the slot's lock: the caller holds the guard)
    /// into its view, as `SeqLock::write` does: an odd generation first, ordered before the
    /// words by a release fence, then the words, then the next even generation (release).
    pub(super) fn publish(&self, maps: &[Mapping]) {
        let g = self.begin();
        self.end(g, maps);
    }

    /// The first half of `publish`: readers that meet the slot from now on retry. A change of
    /// several slots (an unmap of several mappings) begins them all before it ends any, so a
    /// reader that saw one slot's new words sees every other slot's generation moved since
    /// (`Paged::mappings` checks them all again): no reader sees half of it.
    pub(super) fn begin(&self) -> u64 {
        let g = self.gen.load(Ordering::Relaxed); // only lock holders store it
        self.gen.store(g + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        g
    }

    /// The second half of `publish` (`g` from `begin`).
    pub(super) fn end(&self, g: u64, maps: &[Mapping]) {
        let v = self;
        match maps {
            [] => v.words[0].store(0, Ordering::Relaxed),
            [m] => {
                for (k, &w) in ViewRec::of(m).words().iter().enumerate() {
                    v.words[1 + k].store(w, Ordering::Relaxed);
                }
                v.words[0].store(1, Ordering::Relaxed);
            }
            _ => v.words[0].store(VIEW_OVERFLOW, Ordering::Relaxed),
        }
        v.gen.store(g + 2, Ordering::Release);
    }
}

/// What a 2 MiB range has instead of the one lock, `Vec` and view of larger ranges:
/// per-page occupancy words, which are also the writers' per-page
/// claims, and `SLOTS` slots of records. A mapping made or removed writes only its own pages'
/// words and its start page's slot, so two writers on pages less than 64 apart share no line
/// (a 2 MiB range holds only segment mappings: no range is linked below the lowest level).
pub(super) struct Paged {
    /// A word per page (`occ_index`).
    pub(super) occ: NodeVec<AtomicU64>,
    /// Slot `i`'s lock and records, and its view: two arrays of 64 lines, each one page (a
    /// single frame comes from the core's own cache; a two-page buffer would go to the node's
    /// shared free lists, which made two `ar_alloc`s on two cores share lines).
    pub(super) locks: NodeVec<SlotLock>,
    pub(super) views: NodeVec<SlotView>,
}

/// Where page `p`'s occupancy word is: the pages go round the 64 lines of the 4 KiB array,
/// so pages less than 64 apart (a core's own page and its neighbour's) are on different lines.
pub(super) fn occ_index(p: usize) -> usize {
    (p % 64) * 8 + p / 64
}

/// Why the occupancy words could not say that some pages were all free (`occ_collect`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Probe {
    /// Some page was mapped when it was read.
    Mapped,
    /// A writer was busy or intervened: claim the pages (which waits for it).
    Ask,
}

impl Paged {
    pub(super) fn word(&self, page: u64) -> Option<&AtomicU64> {
        self.occ.get(occ_index(usize::try_from(page).ok()?))
    }

    /// The pages `[first, last)` read without a lock (writes nothing): `Ok` with the sum of
    /// their versions if every one was free at one instant during the call, `Mapped` if one
    /// was mapped when read, `Ask` if one was pending (or out of the range, or a writer
    /// intervened). Several pages are read twice (a double collect): versions only grow, so
    /// equal sums mean no word changed between the collects. A caller that collects again
    /// later and gets the same sum knows the pages stayed free in between.
    pub(super) fn occ_collect(&self, first: u64, last: u64) -> Result<u64, Probe> {
        let collect = || -> Result<u64, Probe> {
            let mut sum = 0u64;
            for p in first..last {
                let v = self.word(p).ok_or(Probe::Ask)?.load(Ordering::SeqCst);
                match v & OCC_STATE {
                    OCC_FREE => sum = sum.wrapping_add(v >> OCC_VERSION_SHIFT),
                    OCC_MAPPED => return Err(Probe::Mapped),
                    _ => return Err(Probe::Ask),
                }
            }
            Ok(sum)
        };
        match collect() {
            Err(p) => Err(p),
            Ok(sum) if last - first == 1 => Ok(sum),
            Ok(sum) => match collect() {
                Ok(again) if again == sum => Ok(sum),
                Err(Probe::Mapped) => Err(Probe::Mapped),
                _ => Err(Probe::Ask),
            },
        }
    }

    /// Claim the pages `[first, last)` for a mapping (free to pending), in ascending order,
    /// waiting for pages another writer holds (every claimer goes up, so no two wait for each
    /// other; nobody waits for a claim while holding a slot lock). `Overlap` (with the pages
    /// taken so far given back) if one is mapped.
    pub(super) fn claim_free(&self, first: u64, last: u64) -> Result<(), Error> {
        for p in first..last {
            let w = self.word(p).ok_or(Error::OutOfRange)?;
            loop {
                let v = w.load(Ordering::SeqCst);
                match v & OCC_STATE {
                    OCC_FREE => {
                        if w.compare_exchange(v, occ_word(v, OCC_PENDING, 0), Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                            break;
                        }
                    }
                    OCC_MAPPED => {
                        self.restore(first, p);
                        return Err(Error::Overlap);
                    }
                    _ => core::hint::spin_loop(),
                }
            }
        }
        Ok(())
    }

    /// Claim every page of `[first, last)` for an unmap, free or mapped (a mapped page's
    /// word keeps its start, `OCC_WAS_MAPPED`), in ascending order, waiting as `claim_free`.
    /// The pages must lie in the range (checked by the caller).
    pub(super) fn claim_all(&self, first: u64, last: u64) {
        for p in first..last {
            let Some(w) = self.word(p) else { continue };
            loop {
                let v = w.load(Ordering::SeqCst);
                let next = match v & OCC_STATE {
                    OCC_FREE => occ_word(v, OCC_PENDING, 0),
                    OCC_MAPPED => occ_word(v, OCC_PENDING, OCC_WAS_MAPPED | (occ_start(v) << OCC_START_SHIFT)),
                    _ => {
                        core::hint::spin_loop();
                        continue;
                    }
                };
                if w.compare_exchange(v, next, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    break;
                }
            }
        }
    }

    /// Store the final state of claimed pages `[first, last)`: free, or mapped by the mapping
    /// starting at `start`. SeqCst: a probe on another core that starts after this store (in
    /// real time) sees it or a later one.
    pub(super) fn settle(&self, first: u64, last: u64, state: u64, start: u64) {
        let extra = if state == OCC_MAPPED { start << OCC_START_SHIFT } else { 0 };
        for p in first..last {
            if let Some(w) = self.word(p) {
                let v = w.load(Ordering::Relaxed); // claimed: only we store it
                w.store(occ_word(v, state, extra), Ordering::SeqCst);
            }
        }
    }

    /// Give claimed pages `[first, last)` back as they were.
    pub(super) fn restore(&self, first: u64, last: u64) {
        for p in first..last {
            if let Some(w) = self.word(p) {
                let v = w.load(Ordering::Relaxed); // claimed: only we store it
                let back = if v & OCC_WAS_MAPPED != 0 { occ_word(v, OCC_MAPPED, occ_start(v) << OCC_START_SHIFT) } else { occ_word(v, OCC_FREE, 0) };
                w.store(back, Ordering::SeqCst);
            }
        }
    }

    /// `ar_get` of a 2 MiB range: every slot's view, read without a lock (writes nothing),
    /// as one state of the range: all generations are read in a first pass with the words,
    /// then checked unchanged in a second, so every slot held its words through the instant
    /// between the passes. Writers that keep intervening, or a slot with more than one
    /// mapping (its view says `VIEW_OVERFLOW`), send it to the locks: all slots, in order.
    pub(super) fn mappings(&self) -> Result<Vec<ArMapping>, Error> {
        let mut v: Vec<ArMapping> = Vec::new();
        let mut gens = [0u64; SLOTS];
        'tries: for _ in 0..VIEW_TRIES {
            v.clear();
            for (i, view) in self.views.iter().enumerate() {
                let g = view.gen.load(Ordering::Acquire);
                if g & 1 != 0 {
                    core::hint::spin_loop();
                    continue 'tries;
                }
                gens[i] = g;
                match view.words[0].load(Ordering::Relaxed) {
                    0 => {}
                    1 => {
                        let mut w = [0u64; VIEW_REC];
                        for (k, x) in w.iter_mut().enumerate() {
                            *x = view.words[1 + k].load(Ordering::Relaxed);
                        }
                        v.try_reserve(1).map_err(|_| Error::NoMemory)?;
                        v.push(ViewRec::from_words(&w).to_abi());
                    }
                    _ => break 'tries, // VIEW_OVERFLOW
                }
            }
            // As in `SeqLock::try_read`: pairs with `publish`'s release fence.
            fence(Ordering::Acquire);
            if self.views.iter().zip(gens.iter()).all(|(view, &g)| view.gen.load(Ordering::Relaxed) == g) {
                v.sort_unstable_by_key(|m| m.voff);
                return Ok(v);
            }
        }
        let mut guards = Vec::new();
        guards.try_reserve(SLOTS).map_err(|_| Error::NoMemory)?;
        for lock in self.locks.iter() {
            guards.push(lock.0.lock());
        }
        v.clear();
        v.try_reserve(guards.iter().map(|g| g.len()).sum()).map_err(|_| Error::NoMemory)?;
        for g in &guards {
            v.extend(g.iter().map(|m| ViewRec::of(m).to_abi()));
        }
        drop(guards);
        v.sort_unstable_by_key(|m| m.voff);
        Ok(v)
    }
}
