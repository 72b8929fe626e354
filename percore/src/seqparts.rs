//! `SeqParts`: a seqlock split into parts, one generation word per part (which is also the
//! part's writers' lock), each on a cache line of its own, for a word array that different
//! writers change in different places (the buffer cache's 4 KiB pages: sixteen 256-byte
//! inodes, directory records; docs/fs.md, "The buffer cache").
//!
//! With one [`SeqLock`](crate::seqlock::SeqLock) per page, a writer of one inode bumps the
//! page's one generation word, which every lock-free reader of any inode of that page reads:
//! a reader of inode B and a writer of inode A share that line, and the reader retries
//! whenever the writer ran during its copy. Here the array's `W * P` words are `P` parts of
//! `W` words; a writer locks and bumps only the parts its words lie in, a reader validates
//! only the parts its words lie in. Plus one `tag` word on a line of its own, which every
//! reader copies and only a writer of *all* parts ([`SeqParts::write_all`]) changes (the
//! buffer cache's "which block this page holds").
//!
//! **The generation is the lock** (Linux's `seqcount` with a spinning writer): even = no
//! writer, odd = a writer is in the part. A writer takes a part by moving its generation from
//! an even `g` to `g + 1` (compare-and-swap, acquire) and leaves it by storing `g + 2`
//! (release). So a part's generation only grows, by one per step, and a writer needs no copy
//! of it and no second word.
//!
//! **Why a copy is never torn.** Writer of parts `lo..=hi`: take them in ascending order (so
//! two writers of overlapping ranges cannot deadlock), a release fence, the data stores, then
//! each part's `g + 2` (release). Reader of words in parts `lo..=hi`: load each part's
//! generation (acquire; odd = a writer is in: fail), copy the words (and the tag), an acquire
//! fence, load each generation again; the copy counts only if every one is unchanged. For
//! each part this is exactly `SeqLock`'s argument: if the copy saw any store a writer of part
//! `k` made, that store came after the writer's odd generation in part `k` (its release
//! fence), so the reader's second load of part `k`'s generation (after its acquire fence)
//! sees that odd value or a later one, and the copy is thrown away. So an accepted copy saw
//! no store of any writer of any of its parts that was not already complete when the reader's
//! first generation loads ran, and no writer of those parts completed a store in between: all
//! its words are the values they had at one moment. A writer of several parts cannot be seen
//! half done: the reader fails on any part whose stores it saw while that part was odd or
//! moved on, and a writer that finished before the first loads is seen whole (the acquire
//! loads of its new generations). The tag: only `write_all` stores it, and `write_all` takes
//! every part, so whatever parts a reader validates cover it. The lock-free reader writes
//! nothing.
//!
//! "Every one unchanged" is checked as one sum: the second loads must all be even and add up
//! to what the first loads added up to. A part's generation never decreases (each load sees
//! the same or a later value of the word), so equal sums of values each at least the earlier
//! one mean every value is the earlier one; unless the differences add up to 2^64, i.e. 2^64
//! writes of the parts during one copy. So the reader keeps one word, not one per part.
//!
//! Checked by loom (`seqparts_*` in tests/loom.rs) and by the buffer cache's host tests.

use crate::sync::{fence, spin_loop, AtomicU32, AtomicUsize, Ordering};

/// One part's generation (and lock: odd while a writer holds the part) and a flags word for
/// the user (the buffer cache's dirty and data bits), on one 64-byte line: a writer of this
/// part writes only this line of the part words, and a reader of another part never reads it.
#[repr(C, align(64))]
pub struct Part {
    generation: AtomicUsize,
    flags: AtomicU32,
}

/// The tag on a line of its own: read by every reader, written only with all parts locked.
#[repr(C, align(64))]
struct TagLine {
    tag: crate::seqlock::storage::Words<[u64; 1]>,
}

/// `P` parts of `W` words each, and a tag word. The data begins on a 64-byte line (the
/// struct is 64-byte aligned and the part words and the tag fill whole lines), so with `W` a
/// multiple of 8 no line holds words of two parts.
#[repr(C)]
pub struct SeqParts<const W: usize, const P: usize> {
    parts: [Part; P],
    tag: TagLine,
    data: crate::seqlock::storage::Words<[[u64; W]; P]>,
}

// SAFETY: the data is plain words, written by the parts' lock holders with atomic word stores
// and read with atomic word loads.
unsafe impl<const W: usize, const P: usize> Sync for SeqParts<W, P> {}
// SAFETY: moving it moves the data with it.
unsafe impl<const W: usize, const P: usize> Send for SeqParts<W, P> {}

/// A reader's window: the parts `lo..=hi` and the sum of their generations as `begin` saw them.
pub struct ReadWindow {
    lo: usize,
    hi: usize,
    sum: usize,
}

impl<const W: usize, const P: usize> Default for SeqParts<W, P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const W: usize, const P: usize> SeqParts<W, P> {
    /// Words of data.
    pub const WORDS: usize = W * P;

    /// All words 0, tag 0, flags 0.
    pub fn new() -> Self {
        Self {
            parts: core::array::from_fn(|_| Part { generation: AtomicUsize::new(0), flags: AtomicU32::new(0) }),
            tag: TagLine { tag: crate::seqlock::storage::Words::new([0]) },
            data: crate::seqlock::storage::Words::new([[0; W]; P]),
        }
    }

    /// The parts holding words `[first, end)`: `None` if the range is out of the array. An
    /// empty range in the array is the part of `first` (a reader of the tag alone).
    #[inline]
    fn parts_of(first: usize, end: usize) -> Option<(usize, usize)> {
        if W == 0 || P == 0 || first > end || end > W * P || first >= W * P {
            return None;
        }
        Some((first / W, end.max(first + 1).div_ceil(W) - 1))
    }

    /// Part `k`'s generation (odd while a writer holds the part); `None` past the parts.
    pub fn generation(&self, k: usize) -> Option<usize> {
        self.parts.get(k).map(|p| p.generation.load(Ordering::Acquire))
    }

    /// Part `k`'s flags word (the user's; a writer of the part may set it inside its write,
    /// where a `write_all` holder sees it stable); `None` past the parts.
    pub fn flags(&self, k: usize) -> Option<&AtomicU32> {
        self.parts.get(k).map(|p| &p.flags)
    }

    /// The sum of parts `lo..=hi`'s generations, and their bitwise or (one test for all at
    /// the end: any odd generation leaves its low bit in it).
    #[inline(always)]
    fn gen_sum(&self, lo: usize, hi: usize, order: Ordering) -> (usize, usize) {
        if lo == hi {
            // One part (an inode, a record, a few bytes): the common case.
            let g = self.parts[lo].generation.load(order);
            return (g, g);
        }
        let (mut sum, mut any) = (0usize, 0usize);
        if lo == 0 && hi + 1 == P {
            // Every part (a whole page: file data, write-back): a loop of constant length,
            // which the compiler unrolls.
            for p in &self.parts {
                let g = p.generation.load(order);
                any |= g;
                sum = sum.wrapping_add(g);
            }
        } else {
            for p in &self.parts[lo..=hi] {
                let g = p.generation.load(order);
                any |= g;
                sum = sum.wrapping_add(g);
            }
        }
        (sum, any)
    }

    /// Start a lock-free read of words `[first, end)`: `None` if a writer is in one of their
    /// parts (or the range is out of the array).
    #[inline]
    pub fn begin(&self, first: usize, end: usize) -> Option<ReadWindow> {
        let (lo, hi) = Self::parts_of(first, end)?;
        let (sum, any) = self.gen_sum(lo, hi, Ordering::Acquire);
        (any & 1 == 0).then_some(ReadWindow { lo, hi, sum })
    }

    /// Copy the tag and words `first .. first + out.len()` inside window `w` (racy: use the
    /// copy only if [`validate`](Self::validate) then says yes). Words outside the window's
    /// parts are not copied (`None`).
    #[inline]
    pub fn copy_racy(&self, w: &ReadWindow, first: usize, out: &mut [u64]) -> Option<u64> {
        let (lo, hi) = Self::parts_of(first, first + out.len())?;
        if lo < w.lo || hi > w.hi {
            return None;
        }
        let tag = self.tag.tag.load_word(0);
        self.data.load_words_racy(first, out);
        Some(tag)
    }

    /// Whether no writer touched the window's parts since `begin`: then everything copied in
    /// it is one moment's words.
    #[inline]
    pub fn validate(&self, w: &ReadWindow) -> bool {
        // Pairs with the writers' release fence (module comment).
        fence(Ordering::Acquire);
        let (sum, any) = self.gen_sum(w.lo, w.hi, Ordering::Relaxed);
        any & 1 == 0 && sum == w.sum
    }

    /// The lock-free read: the tag, and words `first .. first + out.len()` into `out`; `None`
    /// if a writer of one of their parts was in the way (then `out` holds garbage) or the
    /// range is out of the array.
    #[inline]
    pub fn try_read(&self, first: usize, out: &mut [u64]) -> Option<u64> {
        let w = self.begin(first, first + out.len())?;
        let tag = self.copy_racy(&w, first, out)?;
        self.validate(&w).then_some(tag)
    }

    /// Take part `k`: its generation from even to odd.
    fn lock_part(&self, k: usize) {
        let g = &self.parts[k].generation;
        loop {
            let v = g.load(Ordering::Relaxed);
            if v & 1 == 0 && g.compare_exchange_weak(v, v.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
            spin_loop();
        }
    }

    /// Leave part `k` (held): its next even generation. Release: a reader that sees it sees
    /// every word stored under it.
    fn unlock_part(&self, k: usize) {
        let g = &self.parts[k].generation;
        // Only the holder stores the word while it is odd.
        g.store(g.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
    }

    fn write_parts<R>(&self, lo: usize, hi: usize, all: bool, f: impl FnOnce(&mut PartsWriter<'_, W, P>) -> R) -> R {
        for k in lo..=hi {
            self.lock_part(k);
        }
        // Orders the odd generations before every data store `f` makes, for readers' acquire
        // fence.
        fence(Ordering::Release);
        let r = f(&mut PartsWriter { lock: self, first: lo * W, end: (hi + 1) * W, all });
        for k in lo..=hi {
            self.unlock_part(k);
        }
        r
    }

    /// Read under the parts' locks (the fallback path; it bumps their generations as a write
    /// does, so lock-free readers meanwhile retry); `None` if out of the array.
    pub fn read_locked(&self, first: usize, out: &mut [u64]) -> Option<u64> {
        let (lo, hi) = Self::parts_of(first, first + out.len())?;
        Some(self.write_parts(lo, hi, false, |p| {
            p.lock.data.load_words_racy(first, out);
            p.tag()
        }))
    }

    /// `try_read`, falling back to the locks.
    pub fn read(&self, first: usize, out: &mut [u64]) -> Option<u64> {
        self.try_read(first, out).or_else(|| self.read_locked(first, out))
    }

    /// A ranged write: lock and bump only the parts holding words `[first, end)`; `f` may load
    /// and store words of those parts (others are refused) and load the tag. `None` (nothing
    /// locked, `f` not called) if the range is out of the array.
    pub fn write<R>(&self, first: usize, end: usize, f: impl FnOnce(&mut PartsWriter<'_, W, P>) -> R) -> Option<R> {
        let (lo, hi) = Self::parts_of(first, end)?;
        Some(self.write_parts(lo, hi, false, f))
    }

    /// A write of the whole array with every part locked: the only writer that may set the tag.
    pub fn write_all<R>(&self, f: impl FnOnce(&mut PartsWriter<'_, W, P>) -> R) -> R {
        if W == 0 || P == 0 {
            // Nothing to lock; a writer with an empty range refuses every store.
            return f(&mut PartsWriter { lock: self, first: 0, end: 0, all: false });
        }
        self.write_parts(0, P - 1, true, f)
    }
}

/// The writer's side: exists only with its parts locked; loads and stores only their words
/// (and the tag: loads always, stores only for `write_all`). Out-of-range indexes are refused
/// (`None`, `false`), never a panic.
pub struct PartsWriter<'a, const W: usize, const P: usize> {
    lock: &'a SeqParts<W, P>,
    first: usize,
    end: usize,
    all: bool,
}

impl<const W: usize, const P: usize> PartsWriter<'_, W, P> {
    /// The tag (stable while any part is locked: only `write_all` stores it).
    pub fn tag(&self) -> u64 {
        self.lock.tag.tag.load_word(0)
    }

    /// Set the tag; `false` (nothing stored) unless this is a `write_all`.
    pub fn set_tag(&mut self, v: u64) -> bool {
        if self.all {
            self.lock.tag.tag.store_word(0, v);
        }
        self.all
    }

    /// The parts this writer holds.
    pub fn parts(&self) -> core::ops::Range<usize> {
        if W == 0 {
            return 0..0;
        }
        self.first / W..self.end / W
    }

    /// Part `k`'s flags word if this writer holds part `k` (`SeqParts::flags`).
    pub fn flags(&self, k: usize) -> Option<&AtomicU32> {
        self.parts().contains(&k).then(|| &self.lock.parts[k].flags)
    }

    /// Word `i`, or `None` if it is not in a locked part.
    pub fn get(&self, i: usize) -> Option<u64> {
        (self.first..self.end).contains(&i).then(|| self.lock.data.load_word(i))
    }

    /// Store `v` in word `i`; `false` (nothing stored) if it is not in a locked part.
    pub fn set(&mut self, i: usize, v: u64) -> bool {
        if !(self.first..self.end).contains(&i) {
            return false;
        }
        self.lock.data.store_word(i, v);
        true
    }

    /// Store `words` from word `first` on; `false` (nothing stored) unless all lie in locked
    /// parts.
    pub fn set_words(&mut self, first: usize, words: &[u64]) -> bool {
        if first < self.first || first.checked_add(words.len()).is_none_or(|e| e > self.end) {
            return false;
        }
        for (k, &w) in words.iter().enumerate() {
            self.lock.data.store_word(first + k, w);
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Deterministic, one thread: a window opened on part 2 survives writes of parts 0 and 5
    /// and fails on a write of part 2 and on a write that straddles into it.
    /// Catches (planted once): a write that bumps every part's generation (the one-word
    /// seqlock's behaviour): the first `validate` fails.
    #[test]
    fn a_write_of_one_part_leaves_another_parts_window_valid() {
        let s: SeqParts<4, 8> = SeqParts::new();
        let w = s.begin(8, 12).unwrap();
        s.write(0, 4, |p| assert!(p.set_words(0, &[1, 2, 3, 4]))).unwrap();
        s.write(20, 21, |p| assert!(p.set(20, 9))).unwrap();
        let mut out = [0u64; 4];
        assert_eq!(s.copy_racy(&w, 8, &mut out), Some(0));
        assert!(s.validate(&w), "a write of parts 0 and 5 invalidated a reader of part 2");
        assert_eq!(s.generation(2), Some(0));
        s.write(9, 10, |p| assert!(p.set(9, 5))).unwrap();
        assert!(!s.validate(&w), "a write of part 2 did not invalidate its reader");
        let w = s.begin(8, 12).unwrap();
        // Words 7..9: the end of part 1 and the start of part 2.
        s.write(7, 9, |p| assert!(p.set_words(7, &[6, 6]))).unwrap();
        assert!(!s.validate(&w), "a write straddling parts 1 and 2 did not invalidate a reader of part 2");
        assert_eq!(s.try_read(6, &mut out), Some(0));
        assert_eq!(out, [0, 6, 6, 5]);
    }

    /// A writer stores only inside its parts; only `write_all` sets the tag; ranges out of the
    /// array are refused, never a panic.
    #[test]
    fn writers_stay_inside_their_parts() {
        let s: SeqParts<4, 2> = SeqParts::new();
        s.write(1, 2, |p| {
            assert_eq!(p.parts(), 0..1);
            assert!(!p.set(4, 1), "a store outside the locked part accepted");
            assert!(!p.set_words(3, &[1, 1]), "a run leaving the locked part accepted");
            assert!(p.get(4).is_none());
            assert!(!p.set_tag(3), "a ranged writer set the tag");
            assert!(p.flags(1).is_none() && p.flags(0).is_some());
        })
        .unwrap();
        assert!(s.write(8, 9, |_| ()).is_none());
        assert!(s.write(3, 2, |_| ()).is_none());
        assert!(s.try_read(7, &mut [0; 2]).is_none());
        assert!(s.read(8, &mut []).is_none());
        s.write_all(|p| assert!(p.set_tag(3) && p.set_words(0, &[1; 8])));
        let mut out = [0u64; 8];
        assert_eq!(s.read(0, &mut out), Some(3));
        assert_eq!(out, [1; 8]);
        assert_eq!((s.generation(0), s.generation(1)), (Some(4), Some(2)));
        // Data begins on a line of its own (with W a multiple of 8, no line holds two parts').
        let big: SeqParts<32, 16> = SeqParts::new();
        let off = core::ptr::addr_of!(big.data) as usize - core::ptr::addr_of!(big) as usize;
        assert_eq!(off % 64, 0);
        assert_eq!(core::mem::size_of::<Part>(), 64);
    }
}
