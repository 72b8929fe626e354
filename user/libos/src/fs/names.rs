//! The path-name cache: `stat` of a path that was looked up before, answered without the file
//! system's lock and without writing any line another core reads (MOSBENCH's fix for the
//! dentry cache, seeds/002: lock-free comparison against a generation counter instead of a
//! lock and a reference count per entry).
//!
//! **Layout.** A fixed table of slots, each on its own 128-byte pair of lines, keyed by the whole
//! path (at most `MAX_PATH` bytes; longer paths are not cached): a sequence number (odd while
//! the slot is written), the file-system generation the entry was made at, the path, and the
//! `Stat` the locked walk found. Plus one generation counter for the whole cache.
//!
//! **Why a reader is right without a lock.** Every change to the file system (create, write,
//! truncate, mkdir, unlink, rename, ...) runs under the file system's lock and moves the
//! generation from even to odd before it changes anything and back to even after
//! (`begin_change`/`end_change`). Entries are filled under the same lock, so an entry's
//! generation is even and names a state in which its `Stat` was true. A reader takes the
//! generation `g` (odd: a change is running, miss), reads the slot as a seqlock reader (the
//! sequence number before and after, equal and even, so the copy is not torn), accepts it only
//! if the entry's generation is `g` and the path matches byte for byte, and reads the generation
//! again: still `g` means no change started since, so the `Stat` is what a locked `stat` would
//! have returned at that moment. All of it is loads: no line is written by a reader except its
//! own core's hit counter. Any change empties the whole cache at once (one increment); a
//! read-mostly workload (many cores `stat`ing the same paths) is what it is for.
//!
//! The table lives in the process's static memory: shared by its threads on every core, not by
//! other processes (each has its own file system, as the buffer cache).

use core::sync::atomic::{fence, AtomicU64, Ordering};
use percore::pad::CachePadded;

use super::ext2::Stat;

/// Slots in the table (a power of two).
pub const SLOTS: usize = 256;
/// Longest path cached, in bytes.
pub const MAX_PATH: usize = 64;
const WORDS: usize = MAX_PATH / 8;

#[repr(align(128))]
struct Slot {
    seq: AtomicU64,
    gen: AtomicU64,
    len: AtomicU64,
    path: [AtomicU64; WORDS],
    stat: [AtomicU64; 4],
}

impl Slot {
    const fn new() -> Slot {
        Slot { seq: AtomicU64::new(0), gen: AtomicU64::new(u64::MAX), len: AtomicU64::new(0), path: [const { AtomicU64::new(0) }; WORDS], stat: [const { AtomicU64::new(0) }; 4] }
    }
}

pub struct NameCache {
    gen: CachePadded<AtomicU64>,
    slots: [Slot; SLOTS],
    hits: [CachePadded<AtomicU64>; 64],
    misses: [CachePadded<AtomicU64>; 64],
}

pub static NAMES: NameCache = NameCache {
    gen: CachePadded::new(AtomicU64::new(0)),
    slots: [const { Slot::new() }; SLOTS],
    hits: [const { CachePadded::new(AtomicU64::new(0)) }; 64],
    misses: [const { CachePadded::new(AtomicU64::new(0)) }; 64],
};

fn hash(path: &[u8]) -> usize {
    // FNV-1a.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    (h ^ (h >> 32)) as usize % SLOTS
}

fn word(path: &[u8], w: usize) -> u64 {
    let mut b = [0u8; 8];
    let start = (w * 8).min(path.len());
    let end = (w * 8 + 8).min(path.len());
    b[..end - start].copy_from_slice(&path[start..end]);
    u64::from_le_bytes(b)
}

pub(crate) fn pack(s: &Stat) -> [u64; 4] {
    [
        s.ino as u64 | (s.mode as u64) << 32 | (s.links as u64) << 48,
        s.size,
        s.uid as u64 | (s.gid as u64) << 16 | (s.blocks512 as u64) << 32,
        s.mtime as u64,
    ]
}

pub(crate) fn unpack(w: [u64; 4]) -> Stat {
    Stat {
        ino: w[0] as u32,
        mode: (w[0] >> 32) as u16,
        links: (w[0] >> 48) as u16,
        size: w[1],
        uid: w[2] as u16,
        gid: (w[2] >> 16) as u16,
        blocks512: (w[2] >> 32) as u32,
        mtime: w[3] as u32,
    }
}

fn core_slot() -> usize {
    crate::ctx::ctx().core.min(63) as usize
}

impl NameCache {
    /// `stat` of `path` if cached and still true; loads only (and this core's hit counter).
    pub fn lookup(&self, path: &[u8]) -> Option<Stat> {
        self.lookup_gen(path).map(|(st, _)| st)
    }

    /// `lookup`, with the (even) generation the answer was true at: `open` publishes a
    /// per-core slot and then checks the generation is still that (`open_files`).
    pub fn lookup_gen(&self, path: &[u8]) -> Option<(Stat, u64)> {
        let r = self.try_lookup(path);
        let c = core_slot();
        let counter = if r.is_some() { &self.hits[c] } else { &self.misses[c] };
        // Only this core writes its counter: a load and a store, no locked instruction.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        r
    }

    /// The current generation (odd while a change runs).
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    fn try_lookup(&self, path: &[u8]) -> Option<(Stat, u64)> {
        if path.len() > MAX_PATH {
            return None;
        }
        let g1 = self.gen.load(Ordering::Acquire);
        if g1 & 1 != 0 {
            return None;
        }
        let s = &self.slots[hash(path)];
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let gen = s.gen.load(Ordering::Relaxed);
        let len = s.len.load(Ordering::Relaxed);
        let mut words = [0u64; WORDS];
        for (w, a) in words.iter_mut().zip(&s.path) {
            *w = a.load(Ordering::Relaxed);
        }
        let mut st = [0u64; 4];
        for (w, a) in st.iter_mut().zip(&s.stat) {
            *w = a.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        if gen != g1 || len != path.len() as u64 || (0..WORDS).any(|w| words[w] != word(path, w)) {
            return None;
        }
        if self.gen.load(Ordering::Acquire) != g1 {
            return None;
        }
        Some((unpack(st), g1))
    }

    /// Remember `stat` of `path`. Only under the file system's lock, with no change running.
    pub fn insert(&self, path: &[u8], stat: &Stat) {
        if path.len() > MAX_PATH {
            return;
        }
        let g = self.gen.load(Ordering::Relaxed);
        let s = &self.slots[hash(path)];
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.gen.store(g, Ordering::Relaxed);
        s.len.store(path.len() as u64, Ordering::Relaxed);
        for (w, a) in s.path.iter().enumerate() {
            a.store(word(path, w), Ordering::Relaxed);
        }
        for (w, a) in pack(stat).iter().zip(&s.stat) {
            a.store(*w, Ordering::Relaxed);
        }
        s.seq.store(seq + 2, Ordering::Release);
    }

    /// A change to the file system starts (under its lock): every entry stops being used.
    pub fn begin_change(&self) {
        let g = self.gen.load(Ordering::Relaxed);
        self.gen.store(g | 1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The change is done: entries made from now on are good.
    pub fn end_change(&self) {
        let g = self.gen.load(Ordering::Relaxed);
        self.gen.store((g | 1) + 1, Ordering::Release);
    }

    /// Hits and misses counted on core `c`.
    pub fn counts(&self, c: usize) -> (u64, u64) {
        let c = c.min(63);
        (self.hits[c].load(Ordering::Relaxed), self.misses[c].load(Ordering::Relaxed))
    }
}
