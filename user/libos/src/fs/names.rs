//! The path-name cache: `stat` of a path that was looked up before, answered without the file
//! system's lock and without writing any line another core reads (MOSBENCH's fix for the
//! dentry cache, seeds/002: lock-free comparison against a generation counter instead of a
//! lock and a reference count per entry).
//!
//! **Layout.** A fixed table of slots, each on its own 256 bytes (two pairs of 128-byte
//! lines), keyed by the whole path (at most `MAX_PATH` bytes; longer paths are not cached): a
//! sequence number (odd while the slot is written), the mount epoch the entry was made at, the
//! path, the `Stat` the locked walk found, and the *chain*: the inodes the walk went through
//! (the root, every directory on the path, the file itself; at most `CHAIN` of them) with the
//! generation of each one's stripe when the entry was made.
//!
//! **Generations per inode, not one for the whole cache.** `GENS` is a table of
//! `STRIPES` counters, each on its own line, keyed by inode number (`stripe`: a multiplicative hash). A word's
//! low 16 bits count the changes running on inodes of that stripe, the bits above count the
//! changes finished. Every change to the file system names, before it starts, the inodes whose
//! directory entries or `Stat` it may change (`fs::with_change_on`: the parent directories of
//! the paths it touches and the inodes they name, or the file a descriptor names) and runs
//! `begin` on them (an increment of each stripe's running count, then a full fence), and `end`
//! after (each running count back down and the finished count up, release). A change this
//! cannot name beforehand (an error while naming them, `openat`'s relative paths) and mount /
//! unmount move the *epoch* instead (`begin_change`/`end_change`: odd while running), which
//! every entry and per-core descriptor also checks. So a create in `/a` writes `/a`'s stripe
//! only, and a lookup of `/b/x` reads the epoch, `/`, `/b` and `x`'s stripes only: the two
//! share no line unless two of those inodes share a stripe (then the lookup misses for
//! nothing, and is still right).
//!
//! **Why a reader is right without a lock.** Entries are filled under the file system's lock
//! with no change running, so an entry names a state in which its `Stat` was true and each
//! chain word has no change running. A reader takes the epoch `e` (odd: miss), reads the slot
//! as a seqlock reader (the sequence number before and after, equal and even, so the copy is
//! not torn), accepts it only if the entry's epoch is `e` and the path matches byte for byte,
//! then loads each chain inode's stripe word and accepts only if every one equals the entry's
//! and the epoch is still `e`. What a path resolves to and its `Stat` depend only on the
//! entries of the directories on the chain and on the final inode, and every change to either
//! runs `begin` on that inode first (`fs::with_change_on`; paths through a symbolic link, `.`
//! or `..` are not cached, so the chain is the whole walk). So at the moment the reader loaded
//! the first stripe word, no change to any chain inode had started since the entry was made
//! (a later word equal to the entry's is unchanged at that earlier moment too; a change that
//! is running makes the word differ): the `Stat` is what a locked `stat` would have returned
//! then. All of it is loads: no line is written by a reader except its own core's hit
//! counter.
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
/// Most inodes on a cached path's chain (the root, up to four directories, the file).
pub const CHAIN: usize = 6;
/// Generation stripes (at most 256: a chain stores each stripe number in a byte).
pub const STRIPES: usize = 256;
/// A stripe word's running-change count (low bits) and one finished change (the bits above).
const RUNNING: u64 = 0xFFFF;
const FINISHED: u64 = 1 << 16;

#[repr(align(256))]
struct Slot {
    seq: AtomicU64,
    epoch: AtomicU64,
    len: AtomicU64,
    /// Chain length in byte 0, stripe numbers of the chain's inodes in bytes 1..=CHAIN.
    chain: AtomicU64,
    path: [AtomicU64; WORDS],
    stat: [AtomicU64; 4],
    /// The stripe words of the chain's inodes when the entry was made.
    gens: [AtomicU64; CHAIN],
}

impl Slot {
    const fn new() -> Slot {
        Slot { seq: AtomicU64::new(0), epoch: AtomicU64::new(u64::MAX), len: AtomicU64::new(0), chain: AtomicU64::new(0), path: [const { AtomicU64::new(0) }; WORDS], stat: [const { AtomicU64::new(0) }; 4], gens: [const { AtomicU64::new(0) }; CHAIN] }
    }
}

pub struct NameCache {
    /// Moved only by mount, unmount and changes that cannot name their inodes (odd while one
    /// runs): never by an ordinary create, unlink, write...
    epoch: CachePadded<AtomicU64>,
    slots: [Slot; SLOTS],
    hits: [CachePadded<AtomicU64>; 64],
    misses: [CachePadded<AtomicU64>; 64],
}

pub static NAMES: NameCache = NameCache {
    epoch: CachePadded::new(AtomicU64::new(0)),
    slots: [const { Slot::new() }; SLOTS],
    hits: [const { CachePadded::new(AtomicU64::new(0)) }; 64],
    misses: [const { CachePadded::new(AtomicU64::new(0)) }; 64],
};

/// The generation stripes (module comment), each on its own line.
static GENS: [CachePadded<AtomicU64>; STRIPES] = [const { CachePadded::new(AtomicU64::new(0)) }; STRIPES];

/// Inode `ino`'s stripe: Fibonacci hashing (the top 8 bits of a 32-bit product), not
/// `ino % STRIPES`: ext2 groups hold a power of two of inodes, and cores drawing their reserves
/// from different groups got inodes a multiple of 256 apart, so every core's files shared one
/// stripe (seen in the sharing audit of `fs_create_private`: one line written twice per op
/// by all four vCPUs).
pub(crate) fn stripe(ino: u32) -> usize {
    const _: () = assert!(STRIPES == 256);
    (ino.wrapping_mul(0x9E37_79B9) >> 24) as usize
}

/// What a per-core descriptor's `Stat` and lock-free reads were true at: the epoch and the
/// file's stripe word (`open_files`). Both with no change running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub epoch: u64,
    pub gen: u64,
}

/// The stamp of inode `ino` now, if no change runs on it (nor one that moves the epoch).
pub fn stamp(ino: u32) -> Option<Stamp> {
    let epoch = NAMES.epoch.load(Ordering::Acquire);
    let gen = GENS[stripe(ino)].load(Ordering::Acquire);
    (epoch & 1 == 0 && gen & RUNNING == 0).then_some(Stamp { epoch, gen })
}

/// No change to `ino` (nor of the epoch) started since `s` was taken. Loads made before this
/// call are ordered before its checks (acquire fence): if true, they saw the state of `s`.
pub fn still(ino: u32, s: Stamp) -> bool {
    fence(Ordering::Acquire);
    s.epoch & 1 == 0 && s.gen & RUNNING == 0 && GENS[stripe(ino)].load(Ordering::Acquire) == s.gen && NAMES.epoch.load(Ordering::Acquire) == s.epoch
}

/// A change to the inodes `inos` starts (their directory entries or `Stat`): every name-cache
/// entry whose chain holds one, and every per-core descriptor of one, stops being used. The
/// full fence orders the increments before anything the change reads or writes (the
/// per-core lists `unlink` scans, the cache pages it writes). Runs under the file system's
/// lock today; the count (not a flag) keeps it right if two changes on one stripe overlap.
pub fn begin(inos: &[u32]) {
    for &i in inos {
        GENS[stripe(i)].fetch_add(1, Ordering::Relaxed);
    }
    fence(Ordering::SeqCst);
}

/// The change `begin(inos)` started is done (the same `inos`).
pub fn end(inos: &[u32]) {
    for &i in inos {
        GENS[stripe(i)].fetch_add(FINISHED - 1, Ordering::Release);
    }
}

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
        self.lookup_stamp(path).map(|(st, _)| st)
    }

    /// `lookup`, with the file's stamp the answer was true at: `open` publishes a per-core
    /// slot and then checks the file's stamp is still that (`open_files`).
    pub fn lookup_stamp(&self, path: &[u8]) -> Option<(Stat, Stamp)> {
        let r = self.try_lookup(path);
        let c = core_slot();
        let counter = if r.is_some() { &self.hits[c] } else { &self.misses[c] };
        // Only this core writes its counter: a load and a store, no locked instruction.
        counter.store(counter.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        r
    }

    /// The current epoch (odd while a mount, an unmount or a change that could not name its
    /// inodes runs).
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn try_lookup(&self, path: &[u8]) -> Option<(Stat, Stamp)> {
        if path.len() > MAX_PATH {
            return None;
        }
        let e1 = self.epoch.load(Ordering::Acquire);
        if e1 & 1 != 0 {
            return None;
        }
        let s = &self.slots[hash(path)];
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 != 0 {
            return None;
        }
        let epoch = s.epoch.load(Ordering::Relaxed);
        let len = s.len.load(Ordering::Relaxed);
        let chain = s.chain.load(Ordering::Relaxed);
        let mut words = [0u64; WORDS];
        for (w, a) in words.iter_mut().zip(&s.path) {
            *w = a.load(Ordering::Relaxed);
        }
        let mut st = [0u64; 4];
        for (w, a) in st.iter_mut().zip(&s.stat) {
            *w = a.load(Ordering::Relaxed);
        }
        let mut gens = [0u64; CHAIN];
        for (w, a) in gens.iter_mut().zip(&s.gens) {
            *w = a.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != s1 {
            return None;
        }
        let n = (chain & 0xff) as usize;
        if epoch != e1 || n == 0 || n > CHAIN || len != path.len() as u64 || (0..WORDS).any(|w| words[w] != word(path, w)) {
            return None;
        }
        // The chain's stripes, after the copy (the acquire fence above orders the loads).
        for (i, g) in gens.iter().enumerate().take(n) {
            let k = (chain >> (8 * (i + 1))) as u8 as usize;
            if GENS[k].load(Ordering::Acquire) != *g {
                return None;
            }
        }
        if self.epoch.load(Ordering::Acquire) != e1 {
            return None;
        }
        Some((unpack(st), Stamp { epoch: e1, gen: gens[n - 1] }))
    }

    /// Remember `stat` of `path`, reached through the inodes `chain` (the root first, the file
    /// last; `fs::name_chain`). Only under the file system's lock, with no change running;
    /// nothing is cached if the chain is empty or too long, or if a change seems to run.
    pub fn insert(&self, path: &[u8], chain: &[u32], stat: &Stat) {
        if path.len() > MAX_PATH || chain.is_empty() || chain.len() > CHAIN || chain.last() != Some(&stat.ino) {
            return;
        }
        let e = self.epoch.load(Ordering::Relaxed);
        let mut packed = chain.len() as u64;
        let mut gens = [0u64; CHAIN];
        for (i, &ino) in chain.iter().enumerate() {
            packed |= (stripe(ino) as u64) << (8 * (i + 1));
            gens[i] = GENS[stripe(ino)].load(Ordering::Relaxed);
        }
        if e & 1 != 0 || gens.iter().any(|g| g & RUNNING != 0) {
            return;
        }
        let s = &self.slots[hash(path)];
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.epoch.store(e, Ordering::Relaxed);
        s.len.store(path.len() as u64, Ordering::Relaxed);
        s.chain.store(packed, Ordering::Relaxed);
        for (w, a) in s.path.iter().enumerate() {
            a.store(word(path, w), Ordering::Relaxed);
        }
        for (w, a) in pack(stat).iter().zip(&s.stat) {
            a.store(*w, Ordering::Relaxed);
        }
        for (w, a) in gens.iter().zip(&s.gens) {
            a.store(*w, Ordering::Relaxed);
        }
        s.seq.store(seq + 2, Ordering::Release);
    }

    /// A change that moves the epoch starts (mount, unmount, a change whose inodes could not
    /// be named): every entry and per-core descriptor stops being used.
    pub fn begin_change(&self) {
        let g = self.epoch.load(Ordering::Relaxed);
        self.epoch.store(g | 1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// The change is done: entries made from now on are good.
    pub fn end_change(&self) {
        let g = self.epoch.load(Ordering::Relaxed);
        self.epoch.store((g | 1) + 1, Ordering::Release);
    }

    /// Hits and misses counted on core `c`.
    pub fn counts(&self, c: usize) -> (u64, u64) {
        let c = c.min(63);
        (self.hits[c].load(Ordering::Relaxed), self.misses[c].load(Ordering::Relaxed))
    }
}
