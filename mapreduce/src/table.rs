//! Intermediate storage: one bump arena per worker and, in it, one hash table per reduce
//! partition with the values grouped per key (Metis's layout).
//!
//! The arena is demand-zero memory the platform gave the worker (`Env::arena`): on this
//! system a segment in the worker's own address range (or the layout chosen). Allocations are
//! zero-filled memory no one has used, except `wri`'s value arrays: an array outgrown by its key
//! goes on the arena's free list for its size (a power of two) and the next key growing to that
//! size takes it, uncleared (values are written before they are read). All of it goes back at
//! once when the run ends. Running out is [`crate::Error::NoMemory`], never a fault.
//!
//! A table slot is an [`Entry`]: the key (lower-cased, copied into the arena), its hash, and
//! the values: for `wc` a count; for `wri` an array of byte offsets in ascending order (the
//! worker scans its split front to back), 32-bit (`wri` takes inputs up to 4 GiB), doubled when
//! full. Tables grow by doubling at half load; a grown table's old array stays unused in the
//! arena. (Reusing outgrown value arrays and 32-bit offsets roughly quarter the pages `wri`'s
//! map touches compared with leaving them behind as 64-bit offsets: each first touch is a soft
//! fault on 4 KiB pages, docs/metis.md.)

use core::mem::{align_of, size_of};
use core::ptr;

/// A `wri` offset (bytes from the input's start).
pub type Off = u32;

/// Largest input `wri` indexes (its offsets are [`Off`]s).
pub const MAX_WRI_INPUT: usize = Off::MAX as usize + 1;

/// A worker's bump allocator over `[base, base + cap)`, with free lists for value arrays.
pub struct Arena {
    base: *mut u8,
    cap: usize,
    used: usize,
    /// `free[k]`: outgrown value arrays of `1 << k` offsets, linked through their first 8
    /// bytes (every array has at least [`FIRST_VALS`] offsets: 8 bytes).
    free: [*mut Off; 40],
}

/// The arena is full: `want` more bytes did not fit in `cap`.
#[derive(Debug, Clone, Copy)]
pub struct Full {
    pub cap: usize,
    pub want: usize,
}

impl Arena {
    /// # Safety
    /// `[base, base + cap)` must be zero-filled memory, writable by the calling worker and
    /// used by nothing else for as long as the arena and what it handed out live.
    pub unsafe fn new(base: *mut u8, cap: usize) -> Arena {
        Arena { base, cap, used: 0, free: [ptr::null_mut(); 40] }
    }

    /// An array of `n` offsets, `n` a power of two of at least [`FIRST_VALS`]: an outgrown one
    /// of that size if there is one (not cleared), else fresh arena memory.
    pub fn alloc_vals(&mut self, n: usize) -> Result<*mut Off, Full> {
        let k = n.trailing_zeros() as usize;
        debug_assert!(n.is_power_of_two() && n >= FIRST_VALS as usize);
        if k < self.free.len() && !self.free[k].is_null() {
            let p = self.free[k];
            // SAFETY: `p` is an array `free_vals` was given: at least 8 bytes, 8-aligned, holding
            // the next array of the list.
            self.free[k] = unsafe { ptr::read(p as *const *mut Off) };
            return Ok(p);
        }
        self.alloc::<Off>(n)
    }

    /// Give back an array of `n` offsets (`n` a power of two of at least [`FIRST_VALS`]) that
    /// nothing refers to any more.
    pub fn free_vals(&mut self, p: *mut Off, n: usize) {
        let k = n.trailing_zeros() as usize;
        if k < self.free.len() {
            // SAFETY: the caller's contract: `p` is an unused array of `n >= 2` offsets (8
            // bytes), 8-aligned as every arena allocation.
            unsafe { ptr::write(p as *mut *mut Off, self.free[k]) };
            self.free[k] = p;
        }
    }

    pub fn used(&self) -> usize {
        self.used
    }

    /// Write a zero into every page of the next `bytes` of the arena not yet handed out (at
    /// most up to its end), so that the allocations which follow find their pages present:
    /// the soft faults are taken here, where the caller counts them. Returns the pages
    /// written (the page holding `used` counts when `used` is inside it: the bytes before it
    /// were handed out, but may never have been written, as the unfilled tail of a value
    /// array).
    pub fn prefault(&mut self, bytes: usize) -> usize {
        let end = self.used.saturating_add(bytes).min(self.cap);
        let mut pages = 0;
        let mut off = self.used;
        while off < end {
            // SAFETY: `used <= off < end <= cap`: in the arena, not handed out yet, so it holds
            // zero and no one reads or writes it; writing the zero again changes nothing.
            unsafe { ptr::write_volatile(self.base.add(off), 0) };
            pages += 1;
            off = (off + 1).next_multiple_of(4096);
        }
        pages
    }

    /// `n` zeroed `T`s (T must be valid as all-zero bytes; every user here is).
    pub fn alloc<T>(&mut self, n: usize) -> Result<*mut T, Full> {
        let bytes = n.checked_mul(size_of::<T>()).ok_or(Full { cap: self.cap, want: usize::MAX })?;
        let start = self.used.next_multiple_of(align_of::<T>().max(8));
        let end = start.checked_add(bytes).filter(|&e| e <= self.cap).ok_or(Full { cap: self.cap, want: bytes })?;
        self.used = end;
        // SAFETY: `start <= cap`, inside the arena given to `new`.
        Ok(unsafe { self.base.add(start) } as *mut T)
    }
}

/// One key and its values. All-zero is the empty slot (`klen == 0`: words are never empty).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Entry {
    pub hash: u64,
    pub key: *const u8,
    pub klen: usize,
    /// `wc`: the count. `wri`: how many offsets `vals` holds.
    pub count: u64,
    /// `wri`: the offsets (capacity `cap`), ascending.
    pub vals: *mut Off,
    pub cap: u64,
}

impl Entry {
    /// The key's bytes.
    ///
    /// # Safety
    /// The entry must be a filled slot whose arena is still mapped where it was.
    pub unsafe fn key(&self) -> &[u8] {
        // SAFETY: the caller's contract: `key` points at `klen` bytes in a live arena.
        unsafe { core::slice::from_raw_parts(self.key, self.klen) }
    }
    /// # Safety
    /// As for [`key`](Self::key), and the entry is from a `wri` run.
    pub unsafe fn vals(&self) -> &[Off] {
        if self.count == 0 {
            return &[];
        }
        // SAFETY: the caller's contract: `vals` holds `count` initialised offsets.
        unsafe { core::slice::from_raw_parts(self.vals, self.count as usize) }
    }
}

/// Two stored keys' order, bytewise: the order of `<[u8]>::cmp`, written out. Keys are words of
/// a few bytes, and reduce's sort and merge compare them many times per key, nearly always
/// deciding in the first bytes. `<[u8]>::cmp` calls the platform's `memcmp`, and on this
/// system's bare-metal target that is compiler_builtins' (16-byte blocks, then a closure for
/// the tail): 52 instructions a call on Metis's keys against musl's 15, which made ours'
/// reduce run 1.46× Linux's instructions (docs/results.md, "Model time"). Eight bytes at a
/// time (big-endian, so the integers order as the bytes), then the tail byte by byte, then the
/// shorter key first.
#[inline]
pub fn key_cmp(a: &[u8], b: &[u8]) -> core::cmp::Ordering {
    let n = a.len().min(b.len());
    let (a, b, la, lb) = (&a[..n], &b[..n], a.len(), b.len());
    let mut i = 0;
    while i + 8 <= n {
        let p = u64::from_be_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
        let q = u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if p != q {
            return p.cmp(&q);
        }
        i += 8;
    }
    while i < n {
        if a[i] != b[i] {
            return a[i].cmp(&b[i]);
        }
        i += 1;
    }
    la.cmp(&lb)
}

/// Whether the stored (lower-case) `key` is `word` lower-cased; same lengths. Eight bytes at a
/// time: every byte of a word is a letter, so OR-ing 0x20 into each lower-cases all eight.
#[inline]
fn same_word(key: &[u8], word: &[u8]) -> bool {
    const LOWER: u64 = 0x2020_2020_2020_2020;
    let mut k = key.chunks_exact(8);
    let mut w = word.chunks_exact(8);
    for (a, b) in (&mut k).zip(&mut w) {
        // `chunks_exact(8)` gives exactly 8 bytes.
        let (a, b) = (u64::from_ne_bytes(a.try_into().unwrap_or([0; 8])), u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
        if a != b | LOWER {
            return false;
        }
    }
    k.remainder().iter().zip(w.remainder()).all(|(&a, &b)| a == crate::words::lower(b))
}

/// One partition's hash table in one worker's arena (open addressing, linear probing).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Table {
    pub slots: *mut Entry,
    /// Number of slots, a power of two (0 until first use).
    pub cap: usize,
    /// Filled slots (distinct keys).
    pub len: usize,
    /// Values added (`wri`: offsets held by all the entries; `wc`: words counted). With `len`,
    /// it bounds what reducing this table writes ([`reduce_bound`]).
    pub vals: u64,
}

/// Most bytes the reduce phase writes into the reducer's arena for one partition whose tables
/// (over all workers) hold `keys` entries and `vals` values, allocated one after the other
/// from any arena position ([`Arena::alloc`] pads every allocation to 8 bytes): the sorted
/// references and the result entries (`keys` each), and for `wri` the joined offset arrays
/// (one per result key, together at most `vals` offsets). `reduce_phase` allocates exactly
/// these and nothing else; the host tests check the bound against what it used.
pub fn reduce_bound(app: crate::App, keys: usize, vals: u64, ref_bytes: usize) -> usize {
    let pad = |b: usize| b + 7;
    let mut b = pad(keys * ref_bytes) + pad(keys * size_of::<Entry>());
    if app == crate::App::Wri {
        b += vals as usize * size_of::<Off>() + keys * 7;
    }
    b
}

const FIRST_CAP: usize = 64;
pub const FIRST_VALS: u64 = 2;

impl Table {
    /// The filled slots.
    ///
    /// # Safety
    /// The table's arena must still be mapped where it was, and no worker may be inserting.
    pub unsafe fn entries(&self) -> impl Iterator<Item = &Entry> {
        let all: &[Entry] = if self.cap == 0 {
            &[]
        } else {
            // SAFETY: `slots` holds `cap` entries (zeroed or filled) in a live arena.
            unsafe { core::slice::from_raw_parts(self.slots, self.cap) }
        };
        all.iter().filter(|e| e.klen != 0)
    }

    fn grow(&mut self, arena: &mut Arena) -> Result<(), Full> {
        let ncap = if self.cap == 0 { FIRST_CAP } else { self.cap * 2 };
        let new = arena.alloc::<Entry>(ncap)?;
        // Touch every page of the new array now: a page no entry lands in would otherwise be
        // first touched by a reducer scanning the table, and that demand-zero fault would be
        // charged to reading another worker's data.
        // The array rarely starts on a page boundary, so it is one byte per page it spans
        // (from its first byte, then each page start up to its end), not every 4096th byte
        // from its start, which missed the last page of an array crossing a boundary.
        let bytes = ncap * core::mem::size_of::<Entry>();
        let start = new as usize;
        let mut at = start;
        while at < start + bytes {
            // SAFETY: `start <= at < start + bytes`, inside the array just allocated; writing
            // the zero it holds.
            unsafe { ptr::write_volatile(at as *mut u8, 0) };
            at = (at + 1).next_multiple_of(4096);
        }
        for i in 0..self.cap {
            // SAFETY: `i < cap`: a slot of the old array.
            let e = unsafe { *self.slots.add(i) };
            if e.klen == 0 {
                continue;
            }
            let mut j = e.hash as usize & (ncap - 1);
            // SAFETY: `j < ncap`, in the new zeroed array; at most half of it is filled, so
            // probing finds an empty slot.
            unsafe {
                while (*new.add(j)).klen != 0 {
                    j = (j + 1) & (ncap - 1);
                }
                *new.add(j) = e;
            }
        }
        self.slots = new;
        self.cap = ncap;
        Ok(())
    }

    /// Find the slot of the word `input[start..end]` (hash `h`), adding it (key copied
    /// lower-case into the arena) if it is new.
    fn slot(&mut self, arena: &mut Arena, input: &[u8], start: usize, end: usize, h: u64) -> Result<*mut Entry, Full> {
        if (self.len + 1) * 2 > self.cap {
            self.grow(arena)?;
        }
        let word = &input[start..end];
        let mask = self.cap - 1;
        let mut j = h as usize & mask;
        loop {
            // SAFETY: `j < cap`.
            let e = unsafe { &mut *self.slots.add(j) };
            if e.klen == 0 {
                let key = arena.alloc::<u8>(word.len())?;
                for (i, &b) in word.iter().enumerate() {
                    // SAFETY: `key` has `word.len()` bytes.
                    unsafe { *key.add(i) = crate::words::lower(b) };
                }
                *e = Entry { hash: h, key, klen: word.len(), count: 0, vals: ptr::null_mut(), cap: 0 };
                self.len += 1;
                return Ok(e);
            }
            // SAFETY: a filled slot of a live arena (ours).
            if e.hash == h && e.klen == word.len() && same_word(unsafe { e.key() }, word) {
                return Ok(e);
            }
            j = (j + 1) & mask;
        }
    }

    /// `wc`: count one occurrence.
    pub fn add_count(&mut self, arena: &mut Arena, input: &[u8], start: usize, end: usize, h: u64) -> Result<(), Full> {
        let e = self.slot(arena, input, start, end, h)?;
        // SAFETY: `slot` returned a live slot of this table.
        unsafe { (*e).count += 1 };
        self.vals += 1;
        Ok(())
    }

    /// `wri`: append the offset `start`.
    pub fn add_offset(&mut self, arena: &mut Arena, input: &[u8], start: usize, end: usize, h: u64) -> Result<(), Full> {
        let e = self.slot(arena, input, start, end, h)?;
        // SAFETY: `slot` returned a live slot of this table; `vals` has `cap` entries.
        unsafe {
            let e = &mut *e;
            if e.count == e.cap {
                let ncap = if e.cap == 0 { FIRST_VALS } else { e.cap * 2 };
                let nv = arena.alloc_vals(ncap as usize)?;
                if e.count > 0 {
                    ptr::copy_nonoverlapping(e.vals, nv, e.count as usize);
                    arena.free_vals(e.vals, e.cap as usize);
                }
                e.vals = nv;
                e.cap = ncap;
            }
            // `start < input.len() <= MAX_WRI_INPUT` (checked before map).
            *e.vals.add(e.count as usize) = start as Off;
            e.count += 1;
        }
        self.vals += 1;
        Ok(())
    }
}
