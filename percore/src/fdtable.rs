//! A descriptor table many cores use at once, in plain shared memory: slots (descriptors)
//! naming open-file records with reference counts, allocated from bitmaps without a lock.
//!
//! The library OS keeps its process-wide descriptor table in one of these (user/libos/src/fd.rs,
//! docs/fd.md): a descriptor is `generation << 32 | slot`, the caller's word. The protocol:
//!
//! - **Allocation** takes a clear bit of a bitmap (`slot_used`, `file_used`) with a
//!   compare-and-swap, scanning from a word the caller chooses (its core: each core then
//!   takes bits of its own 128-byte-padded word, and the slots and records that word covers
//!   are lines only that core writes, while it has free bits there).
//! - **A slot word** is `USED | generation << 32 | file`. `close` swaps it (compare-and-swap)
//!   for `generation + 1` without `USED`, so of two closes of one descriptor exactly one
//!   wins, and a descriptor closed once never names the slot again (until the 30-bit
//!   generation wraps, 2^30 closes of one slot later), whatever opened the slot since.
//! - **Reference counts**: each open-file record counts the slots naming it, plus the
//!   transient references of calls under way. `get` takes one the way Linux's `fget` does:
//!   increment only if not zero, then re-read the slot word; if it changed (the descriptor
//!   was closed meanwhile, and its record maybe reused) the reference is dropped again and
//!   the descriptor is refused. The record's kind and owner are written before its count
//!   becomes 1 (release) and read after taking a reference (acquire), so they are stable
//!   while the caller holds one; the last `release` returns them so the caller can free what
//!   is behind, and only then gives the record's bit back.
//!
//! All-zero memory is a valid empty table (every field is an atomic integer), so a table can
//! live in zero-filled shared memory that several processes map (`zeroed_is_empty`).
//! Model-checked in tests/loom.rs (`fdtable_*`).

use crate::pad::CachePadded;
use crate::sync::{AtomicU64, Ordering};

/// Bit of a slot word: the slot is open.
const USED: u64 = 1 << 63;
/// Generations are 30 bits, so a descriptor leaves bits 62 and 63 to the caller.
pub const GEN_MASK: u64 = (1 << 30) - 1;

/// Why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// No free slot (or no free open-file record).
    Full,
    /// Not an open descriptor: out of range, closed, or closed and reused.
    BadDescriptor,
}

/// What the last reference to an open-file record held: its kind and owner words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freed {
    pub kind: u64,
    pub owner: u64,
}

/// One open-file record (a `struct file`): what it is, whose it is, and how many hold it.
#[repr(C)]
pub struct Record {
    kind: AtomicU64,
    owner: AtomicU64,
    refs: AtomicU64,
    _pad: u64,
}

/// A table of `N` descriptors and `N` open-file records; `W` bitmap words (`W * 64 >= N`).
#[repr(C)]
pub struct DescTable<const W: usize, const N: usize> {
    slot_used: [CachePadded<AtomicU64>; W],
    file_used: [CachePadded<AtomicU64>; W],
    slots: [AtomicU64; N],
    files: [Record; N],
}

fn split(d: u64) -> (usize, u64) {
    ((d & 0xffff_ffff) as usize, (d >> 32) & GEN_MASK)
}

impl<const W: usize, const N: usize> DescTable<W, N> {
    /// An empty table (the same as all-zero memory).
    pub fn new() -> Self {
        assert!(W * 64 >= N && N <= u32::MAX as usize, "DescTable<{W}, {N}>: bitmap too small");
        Self {
            slot_used: core::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            file_used: core::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            slots: core::array::from_fn(|_| AtomicU64::new(0)),
            files: core::array::from_fn(|_| Record { kind: AtomicU64::new(0), owner: AtomicU64::new(0), refs: AtomicU64::new(0), _pad: 0 }),
        }
    }

    /// Take a clear bit of `words` (below `N`), starting at word `start % W`.
    fn take(words: &[CachePadded<AtomicU64>; W], start: usize) -> Option<usize> {
        for k in 0..W {
            let i = (start + k) % W;
            let w = &words[i];
            let mut cur = w.load(Ordering::Relaxed);
            loop {
                let b = cur.trailing_ones() as usize;
                if b == 64 || i * 64 + b >= N {
                    break;
                }
                match w.compare_exchange_weak(cur, cur | 1 << b, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => return Some(i * 64 + b),
                    Err(now) => cur = now,
                }
            }
        }
        None
    }

    fn give(words: &[CachePadded<AtomicU64>; W], i: usize) {
        words[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
    }

    /// Put file `f` (whose reference the caller hands over) in a new slot.
    fn install(&self, start: usize, f: usize) -> Option<u64> {
        let s = Self::take(&self.slot_used, start)?;
        // The slot is ours since its bit is; its word holds the generation the last close left.
        let generation = (self.slots[s].load(Ordering::Relaxed) >> 32) & GEN_MASK;
        self.slots[s].store(USED | generation << 32 | f as u64, Ordering::Release);
        Some(generation << 32 | s as u64)
    }

    /// A new open-file record of `kind` and `owner` with one descriptor naming it.
    pub fn open(&self, start: usize, kind: u64, owner: u64) -> Result<u64, TableError> {
        let f = Self::take(&self.file_used, start).ok_or(TableError::Full)?;
        let r = &self.files[f];
        r.kind.store(kind, Ordering::Relaxed);
        r.owner.store(owner, Ordering::Relaxed);
        r.refs.store(1, Ordering::Release);
        match self.install(start, f) {
            Some(d) => Ok(d),
            None => {
                // Nobody else can have taken a reference: no slot ever named this record.
                r.refs.store(0, Ordering::Relaxed);
                Self::give(&self.file_used, f);
                Err(TableError::Full)
            }
        }
    }

    /// Take a reference to the open file descriptor `d` names. `Err(Some(_))`: the
    /// descriptor was closed under us and the reference we briefly held was the last of the
    /// record it named by then, whose contents the caller must free (the descriptor is bad).
    pub fn get(&self, d: u64) -> Result<usize, (TableError, Option<Freed>)> {
        let (s, g) = split(d);
        let bad = (TableError::BadDescriptor, None);
        let slot = self.slots.get(s).ok_or(bad)?;
        let w = slot.load(Ordering::Acquire);
        if w & USED == 0 || (w >> 32) & GEN_MASK != g {
            return Err(bad);
        }
        let f = (w & 0xffff_ffff) as usize;
        let refs = &self.files.get(f).ok_or(bad)?.refs;
        let mut n = refs.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                // Being freed: the slot must have been closed already.
                return Err(bad);
            }
            match refs.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        if slot.load(Ordering::Acquire) != w {
            return Err((TableError::BadDescriptor, self.release(f)));
        }
        Ok(f)
    }

    /// The kind and owner words of record `f` (the caller holds a reference).
    pub fn record(&self, f: usize) -> (u64, u64) {
        let r = &self.files[f];
        (r.kind.load(Ordering::Relaxed), r.owner.load(Ordering::Relaxed))
    }

    /// Drop a reference to record `f`; the last one frees the record and returns what it held.
    pub fn release(&self, f: usize) -> Option<Freed> {
        let r = &self.files[f];
        if r.refs.fetch_sub(1, Ordering::AcqRel) != 1 {
            return None;
        }
        let freed = Freed { kind: r.kind.load(Ordering::Relaxed), owner: r.owner.load(Ordering::Relaxed) };
        Self::give(&self.file_used, f);
        Some(freed)
    }

    /// A second descriptor for the open file `d` names. `Err((_, Some(freed)))` as in `get`,
    /// or when the table is full and the descriptor was closed meanwhile.
    pub fn dup(&self, d: u64, start: usize) -> Result<u64, (TableError, Option<Freed>)> {
        let f = self.get(d)?;
        self.install(start, f).ok_or_else(|| (TableError::Full, self.release(f)))
    }

    /// Close descriptor `d`: its slot is free at once; returns the record's contents if this
    /// was its last reference.
    pub fn close(&self, d: u64) -> Result<Option<Freed>, TableError> {
        let (s, g) = split(d);
        let slot = self.slots.get(s).ok_or(TableError::BadDescriptor)?;
        let mut w = slot.load(Ordering::Relaxed);
        loop {
            if w & USED == 0 || (w >> 32) & GEN_MASK != g {
                return Err(TableError::BadDescriptor);
            }
            let next = ((g + 1) & GEN_MASK) << 32;
            match slot.compare_exchange_weak(w, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        Self::give(&self.slot_used, s);
        Ok(self.release((w & 0xffff_ffff) as usize))
    }

    /// Open descriptors and records (a snapshot; exact when nothing is under way).
    pub fn counts(&self) -> (u32, u32) {
        let ones = |b: &[CachePadded<AtomicU64>; W]| b.iter().map(|w| w.load(Ordering::Relaxed).count_ones()).sum();
        (ones(&self.slot_used), ones(&self.file_used))
    }

    /// Whether all-zero memory is an empty table of this type: true for `core`'s atomics
    /// (plain integers). Callers that place a table in zero-filled memory assert this.
    pub const fn zeroed_is_empty() -> bool {
        !cfg!(loom)
    }
}

impl<const W: usize, const N: usize> Default for DescTable<W, N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    type T = DescTable<2, 100>;

    #[test]
    fn open_dup_close_free_the_record_once() {
        // Catches: a record freed while a descriptor still names it, or never freed.
        let t = T::new();
        let a = t.open(0, 7, 9).unwrap();
        let b = t.dup(a, 0).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.counts(), (2, 1));
        assert_eq!(t.close(a), Ok(None));
        assert_eq!(t.close(b), Ok(Some(Freed { kind: 7, owner: 9 })));
        assert_eq!(t.counts(), (0, 0));
    }

    #[test]
    fn closed_descriptor_stays_bad_after_reuse() {
        // Catches: a stale descriptor reaching the slot's next open file (use after close).
        let t = T::new();
        let a = t.open(0, 1, 0).unwrap();
        t.close(a).unwrap();
        let b = t.open(0, 2, 0).unwrap();
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff, "the slot is reused");
        assert_eq!(t.close(a), Err(TableError::BadDescriptor));
        assert_eq!(t.get(a).err(), Some((TableError::BadDescriptor, None)));
        assert_eq!(t.dup(a, 0).err(), Some((TableError::BadDescriptor, None)));
        let f = t.get(b).unwrap();
        assert_eq!(t.record(f), (2, 0));
        assert_eq!(t.release(f), None);
        assert_eq!(t.close(b), Ok(Some(Freed { kind: 2, owner: 0 })));
    }

    #[test]
    fn made_up_descriptors_are_refused() {
        // Catches: an index past the table read as a slot.
        let t = T::new();
        for d in [100, 1 << 31, u64::MAX, 5 | 3 << 32] {
            assert_eq!(t.close(d), Err(TableError::BadDescriptor));
            assert!(t.get(d).is_err());
        }
    }

    #[test]
    fn full_table_changes_nothing() {
        // Catches: a refused open or dup that leaks a slot or record, or bits past N handed out.
        let t = T::new();
        let a = t.open(1, 1, 0).unwrap();
        let mut held = std::vec![a];
        loop {
            match t.dup(a, 1) {
                Ok(d) => held.push(d),
                Err((e, freed)) => {
                    assert_eq!((e, freed), (TableError::Full, None));
                    break;
                }
            }
        }
        assert_eq!(held.len(), 100);
        assert!(held.iter().all(|&d| (d & 0xffff_ffff) < 100));
        assert_eq!(t.open(0, 1, 0), Err(TableError::Full));
        assert_eq!(t.counts(), (100, 1));
        for d in held {
            t.close(d).unwrap();
        }
        assert_eq!(t.counts(), (0, 0));
    }

    #[test]
    fn threads_dup_and_close_without_losing_counts() {
        // Catches: lost updates in the bitmaps or counts under contention.
        let t = std::sync::Arc::new(DescTable::<4, 256>::new());
        let root = t.open(0, 3, 0).unwrap();
        let hs: std::vec::Vec<_> = (0..4)
            .map(|c| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let d = t.dup(root, c).unwrap();
                        let e = t.open(c, 4, c as u64).unwrap();
                        assert_eq!(t.close(d), Ok(None));
                        assert_eq!(t.close(e), Ok(Some(Freed { kind: 4, owner: c as u64 })));
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(t.counts(), (1, 1));
        assert_eq!(t.close(root), Ok(Some(Freed { kind: 3, owner: 0 })));
    }
}
