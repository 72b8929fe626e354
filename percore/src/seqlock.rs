//! `SeqLock`: a generation counter for lock-free reads and comparisons, after the dentry name
//! comparison of "An Analysis of Linux Scalability to Many Cores" (seeds/002).
//!
//! Writers take the lock, set the generation to 0 ("being modified"), write, then store the
//! next non-zero generation. Readers remember the generation (0: fall back to the lock), copy
//! the value, check the generation again (changed: fall back to the lock), and only then look
//! at the copy. A reader writes nothing shared, so read-mostly data is read on every core
//! without any cache line changing hands.
//!
//! The copy races with writers by design, so it is made with relaxed atomic word loads (and
//! writers store with relaxed atomic words): a torn copy is detected by the generation check
//! and thrown away without ever being used as a `T`. That is why `T` must be [`SeqData`].
//!
//! For word arrays (`SeqLock<[u64; N]>`, the buffer cache's pages) readers may copy only some
//! word ranges ([`SeqLock::try_read_ranges`]) and writers may store only some words
//! ([`SeqLock::write_words`]): same generation protocol, a fraction of the copying.

use crate::pad::CachePadded;
use crate::spin::TicketLock;
use crate::sync::{fence, AtomicUsize, Ordering};


/// Plain data a seqlock can copy word by word.
///
/// # Safety
/// Every byte of every value is initialised: no padding, no `MaybeUninit` fields (atomic
/// loads of uninitialised bytes are undefined behaviour). Any `Copy` integer, array or
/// `#[repr(C)]` struct of them without padding qualifies.
pub unsafe trait SeqData: Copy + Send + 'static {}

macro_rules! seq_data {
    ($($t:ty),*) => { $(
        // SAFETY: integers have no padding.
        unsafe impl SeqData for $t {}
    )* };
}
seq_data!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);
// SAFETY: an array of padding-free elements has no padding.
unsafe impl<T: SeqData, const N: usize> SeqData for [T; N] {}
// SAFETY: two equal-sized padding-free fields have no padding between or after them.
unsafe impl SeqData for (u64, u64) {}
// SAFETY: as above.
unsafe impl SeqData for (u32, u32) {}
// SAFETY: as above.
unsafe impl SeqData for (usize, usize) {}

/// How a read was served (for tests and statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// The generation was stable and non-zero: no lock taken.
    Optimistic,
    /// A writer was active or intervened: read under the lock.
    Locked,
}

pub struct SeqLock<T: SeqData> {
    generation: CachePadded<AtomicUsize>,
    /// Serialises writers and fallback readers; holds the writers' copy of the generation,
    /// so a writer never reads the shared generation word (only stores it).
    lock: TicketLock<usize>,
    data: storage::Words<T>,
}

// SAFETY: values cross threads only by copy (`T: Send`); the data is written under the lock
// and read with atomic word loads.
unsafe impl<T: SeqData> Sync for SeqLock<T> {}
// SAFETY: moving the lock moves the data with it.
unsafe impl<T: SeqData> Send for SeqLock<T> {}

impl<T: SeqData> SeqLock<T> {
    pub fn new(value: T) -> Self {
        Self { generation: CachePadded::new(AtomicUsize::new(1)), lock: TicketLock::new(1), data: storage::Words::new(value) }
    }

    /// The current generation: 0 while a writer is modifying the value.
    pub fn generation(&self) -> usize {
        self.generation.load(Ordering::Acquire)
    }

    /// The lock-free path alone: `None` if a writer was active or intervened.
    pub fn try_read(&self) -> Option<T> {
        let g1 = self.generation.load(Ordering::Acquire);
        if g1 == 0 {
            return None;
        }
        let copy = self.data.load_racy();
        // Pairs with the writer's release fence: if the copy saw any byte a writer stored
        // after zeroing the generation, the load below sees 0 or a later generation.
        fence(Ordering::Acquire);
        let g2 = self.generation.load(Ordering::Relaxed);
        if g1 == g2 {
            // SAFETY: no writer ran during the copy, so every word came from one complete
            // value of `T`.
            Some(unsafe { copy.assume_init() })
        } else {
            None
        }
    }

    /// Read under the lock (the fallback path).
    pub fn read_locked(&self) -> T {
        let _g = self.lock.lock();
        // SAFETY: writers write only under the lock we hold.
        unsafe { self.data.load_racy().assume_init() }
    }

    /// Optimistic read, falling back to the lock at once if it fails (as the dentry code
    /// does: a failed optimistic read means a writer is busy right now).
    pub fn read(&self) -> T {
        self.read_traced().0
    }

    pub fn read_traced(&self) -> (T, ReadPath) {
        match self.try_read() {
            Some(v) => (v, ReadPath::Optimistic),
            None => (self.read_locked(), ReadPath::Locked),
        }
    }

    /// The dentry comparison: copy, check the generation, then compare the copy; fall back to
    /// comparing under the lock. `matches` never sees a torn value.
    pub fn compare(&self, matches: impl Fn(&T) -> bool) -> bool {
        match self.try_read() {
            Some(v) => matches(&v),
            None => {
                let _g = self.lock.lock();
                // SAFETY: as in `read_locked`.
                let v = unsafe { self.data.load_racy().assume_init() };
                matches(&v)
            }
        }
    }

    /// Modify the value under the lock; readers see generation 0 meanwhile, then a new one.
    pub fn write<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut gen = self.lock.lock();
        let old_gen = *gen;
        self.generation.store(0, Ordering::Relaxed);
        // Orders the zero before every data store below, for readers' acquire fence.
        fence(Ordering::Release);
        // SAFETY: only writers store, and we hold the lock.
        let mut value = unsafe { self.data.load_racy().assume_init() };
        let r = f(&mut value);
        self.data.store_racy(value);
        // Skip 0 on wrap-around: 0 means "being modified".
        let next = match old_gen.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        *gen = next;
        // Release: a reader that sees `next` sees the whole new value.
        self.generation.store(next, Ordering::Release);
        r
    }

    /// [`write`](Self::write) with interrupts disabled on this core: needed when readers run in
    /// interrupt handlers, which would otherwise find the generation at 0, fall back to the
    /// lock, and spin on the writer they interrupted.
    pub fn write_irqsave<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let _irq = crate::cpu::IrqGuard::new();
        self.write(f)
    }

    pub fn set(&self, value: T) {
        self.write(|v| *v = value)
    }
}

impl<const N: usize> SeqLock<[u64; N]> {
    /// The lock-free path for parts of a word array: each `(first, out)` gets words
    /// `first .. first + out.len()`, all copied inside one generation window, so together they
    /// are one value's words (a page's tag and the few words a caller wants, without copying
    /// the whole array). `false` if a writer was active or intervened, or a range is out of
    /// bounds: then the `out`s hold garbage and must not be used.
    pub fn try_read_ranges(&self, ranges: &mut [(usize, &mut [u64])]) -> bool {
        if ranges.iter().any(|(f, o)| f.checked_add(o.len()).is_none_or(|e| e > N)) {
            return false;
        }
        let g1 = self.generation.load(Ordering::Acquire);
        if g1 == 0 {
            return false;
        }
        for (first, out) in ranges.iter_mut() {
            self.data.load_words_racy(*first, out);
        }
        // As in `try_read`: pairs with the writer's release fence.
        fence(Ordering::Acquire);
        self.generation.load(Ordering::Relaxed) == g1
    }

    /// A ranged write: modify the value under the lock, storing only the words `f` sets
    /// (a 128-byte inode in a 4 KiB page: 16 stores, not 513 loads and 513 stores, and only
    /// the cache lines holding those words change, so a reader on another core keeps the
    /// rest). Readers see generation 0 meanwhile, then a new one, exactly as for
    /// [`write`](Self::write), and they are unchanged: a reader's copy of any word that `f`
    /// stored fails its generation check (the argument of `try_read`), and a word `f` did not
    /// store still holds what the previous writer left. So an accepted copy is one value of
    /// the array, as before, whatever words it covers.
    ///
    /// `f` may also decide to store nothing (a tag that does not match); the generation still
    /// moves, which costs readers a retry, never a wrong copy.
    pub fn write_words<R>(&self, f: impl FnOnce(&mut WordsWriter<'_, N>) -> R) -> R {
        let mut gen = self.lock.lock();
        let old_gen = *gen;
        self.generation.store(0, Ordering::Relaxed);
        // As in `write`: orders the zero before every data store `f` makes.
        fence(Ordering::Release);
        let r = f(&mut WordsWriter { data: &self.data });
        let next = match old_gen.wrapping_add(1) {
            0 => 1,
            g => g,
        };
        *gen = next;
        // Release: a reader that sees `next` sees every word `f` stored.
        self.generation.store(next, Ordering::Release);
        r
    }
}

/// The writer's side of [`SeqLock::write_words`]: it exists only inside the lock, so its
/// loads see the value as the last writer left it, and its stores are the only ones.
/// Indexes out of the array are refused (`None`, `false`), never a panic.
pub struct WordsWriter<'a, const N: usize> {
    data: &'a storage::Words<[u64; N]>,
}

impl<const N: usize> WordsWriter<'_, N> {
    /// Word `i`, or `None` if `i >= N`.
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < N).then(|| self.data.load_word(i))
    }

    /// Store `v` in word `i` (one relaxed atomic store); `false` (nothing stored) if `i >= N`.
    pub fn set(&mut self, i: usize, v: u64) -> bool {
        if i >= N {
            return false;
        }
        self.data.store_word(i, v);
        true
    }

    /// Store `words` from word `first` on; `false` (nothing stored) if they do not fit.
    pub fn set_words(&mut self, first: usize, words: &[u64]) -> bool {
        if first.checked_add(words.len()).is_none_or(|e| e > N) {
            return false;
        }
        for (k, &w) in words.iter().enumerate() {
            self.data.store_word(first + k, w);
        }
        true
    }
}

#[cfg(not(loom))]
pub(crate) mod storage {
    use super::SeqData;
    use core::cell::UnsafeCell;
    use core::mem::{align_of, size_of, MaybeUninit};
    use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

    /// The value, read and written with relaxed atomics of the widest size its alignment
    /// allows, so concurrent readers and a writer never form a data race.
    pub(crate) struct Words<T>(UnsafeCell<T>);

    impl<T: SeqData> Words<T> {
        pub(crate) fn new(v: T) -> Self {
            Self(UnsafeCell::new(v))
        }

        pub(crate) fn load_racy(&self) -> MaybeUninit<T> {
            let mut out = MaybeUninit::<T>::uninit();
            let src = self.0.get() as *const u8;
            let dst = out.as_mut_ptr() as *mut u8;
            let n = size_of::<T>();
            // SAFETY: `src` points at a live, fully initialised `T` (`SeqData`), accessed only
            // atomically by concurrent parties; `dst` is our own buffer of the same size. Each
            // chunk is naturally aligned because `T`'s alignment is at least the chunk size.
            unsafe {
                if align_of::<T>() >= 8 && n.is_multiple_of(8) {
                    for i in (0..n).step_by(8) {
                        let v = AtomicU64::from_ptr(src.add(i) as *mut u64).load(Ordering::Relaxed);
                        (dst.add(i) as *mut u64).write(v);
                    }
                } else if align_of::<T>() >= 4 && n.is_multiple_of(4) {
                    for i in (0..n).step_by(4) {
                        let v = AtomicU32::from_ptr(src.add(i) as *mut u32).load(Ordering::Relaxed);
                        (dst.add(i) as *mut u32).write(v);
                    }
                } else {
                    for i in 0..n {
                        let v = AtomicU8::from_ptr(src.add(i) as *mut u8).load(Ordering::Relaxed);
                        dst.add(i).write(v);
                    }
                }
            }
            out
        }

        /// Words `first ..` of a `T` that is a `u64` array (bounds checked by the caller).
        pub(crate) fn load_words_racy(&self, first: usize, out: &mut [u64]) {
            debug_assert!((first + out.len()) * 8 <= size_of::<T>() && align_of::<T>() >= 8);
            let src = self.0.get() as *const u64;
            // Eight words per step (the fixed inner loop is unrolled): a page copy is about
            // two instructions a word instead of four or five.
            let mut chunks = out.chunks_exact_mut(8);
            let mut i = first;
            for c in &mut chunks {
                for (k, o) in c.iter_mut().enumerate() {
                    // SAFETY: `i + k` is inside the array (caller), naturally aligned, and
                    // accessed only atomically by concurrent parties.
                    *o = unsafe { AtomicU64::from_ptr(src.add(i + k) as *mut u64) }.load(Ordering::Relaxed);
                }
                i += 8;
            }
            for (k, o) in chunks.into_remainder().iter_mut().enumerate() {
                // SAFETY: as above.
                *o = unsafe { AtomicU64::from_ptr(src.add(i + k) as *mut u64) }.load(Ordering::Relaxed);
            }
        }

        /// Word `i` of a `T` that is a `u64` array (`i` checked by the caller).
        pub(crate) fn load_word(&self, i: usize) -> u64 {
            debug_assert!((i + 1) * 8 <= size_of::<T>() && align_of::<T>() >= 8);
            // SAFETY: `i` is inside the array (caller), naturally aligned, and accessed only
            // atomically by concurrent parties.
            unsafe { AtomicU64::from_ptr((self.0.get() as *mut u64).add(i)) }.load(Ordering::Relaxed)
        }

        /// Store word `i` of a `u64` array (`i` checked by the caller; lock holder only).
        pub(crate) fn store_word(&self, i: usize, v: u64) {
            debug_assert!((i + 1) * 8 <= size_of::<T>() && align_of::<T>() >= 8);
            // SAFETY: as in `load_word`; only the lock holder stores.
            unsafe { AtomicU64::from_ptr((self.0.get() as *mut u64).add(i)) }.store(v, Ordering::Relaxed)
        }

        pub(crate) fn store_racy(&self, v: T) {
            let src = &v as *const T as *const u8;
            let dst = self.0.get() as *mut u8;
            let n = size_of::<T>();
            // SAFETY: as in `load_racy`, with the roles swapped; only the lock holder stores.
            unsafe {
                if align_of::<T>() >= 8 && n.is_multiple_of(8) {
                    for i in (0..n).step_by(8) {
                        AtomicU64::from_ptr(dst.add(i) as *mut u64).store((src.add(i) as *const u64).read(), Ordering::Relaxed);
                    }
                } else if align_of::<T>() >= 4 && n.is_multiple_of(4) {
                    for i in (0..n).step_by(4) {
                        AtomicU32::from_ptr(dst.add(i) as *mut u32).store((src.add(i) as *const u32).read(), Ordering::Relaxed);
                    }
                } else {
                    for i in 0..n {
                        AtomicU8::from_ptr(dst.add(i)).store(src.add(i).read(), Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

#[cfg(loom)]
pub(crate) mod storage {
    //! Under loom the value lives in loom atomics, one per 8 bytes, so the model checker sees
    //! (and permutes) every word a reader copies.
    use super::SeqData;
    use core::mem::{size_of, MaybeUninit};
    use loom::sync::atomic::{AtomicU64, Ordering};

    pub(crate) struct Words<T> {
        words: Box<[AtomicU64]>,
        _t: core::marker::PhantomData<T>,
    }

    fn to_words<T: SeqData>(v: &T) -> Vec<u64> {
        let mut buf = vec![0u64; size_of::<T>().div_ceil(8)];
        // SAFETY: `buf` has at least `size_of::<T>()` bytes; `T` is fully initialised.
        unsafe { core::ptr::copy_nonoverlapping(v as *const T as *const u8, buf.as_mut_ptr() as *mut u8, size_of::<T>()) };
        buf
    }

    impl<T: SeqData> Words<T> {
        pub(crate) fn new(v: T) -> Self {
            let words = to_words(&v).into_iter().map(AtomicU64::new).collect();
            Self { words, _t: core::marker::PhantomData }
        }
        pub(crate) fn load_racy(&self) -> MaybeUninit<T> {
            let buf: Vec<u64> = self.words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
            let mut out = MaybeUninit::<T>::uninit();
            // SAFETY: `buf` holds at least `size_of::<T>()` initialised bytes.
            unsafe { core::ptr::copy_nonoverlapping(buf.as_ptr() as *const u8, out.as_mut_ptr() as *mut u8, size_of::<T>()) };
            out
        }
        pub(crate) fn load_words_racy(&self, first: usize, out: &mut [u64]) {
            for (o, w) in out.iter_mut().zip(&self.words[first..]) {
                *o = w.load(Ordering::Relaxed);
            }
        }
        pub(crate) fn load_word(&self, i: usize) -> u64 {
            self.words[i].load(Ordering::Relaxed)
        }
        pub(crate) fn store_word(&self, i: usize, v: u64) {
            self.words[i].store(v, Ordering::Relaxed)
        }
        pub(crate) fn store_racy(&self, v: T) {
            for (w, x) in self.words.iter().zip(to_words(&v)) {
                w.store(x, Ordering::Relaxed);
            }
        }
    }
}

