//! The block table of the buffer cache: 4 KiB pages of the disk in one block of memory that
//! holds no pointer, so it can live in a segment mapped at the same address by several cores'
//! root ranges and by cfork'd processes (docs/fs.md, "The buffer cache").
//!
//! Layout (offsets from the table's base, all computed from the slot count):
//!
//! | what | who writes it |
//! | --- | --- |
//! | `Header`: magic, sizes, the fill lock (a `percore` ticket lock: no pointers, so it works between address spaces, which an MCS lock's stack nodes do not) and the clock hand | fill-lock holders |
//! | `CoreStats` per core, each on its own 128-byte line | that core |
//! | `Meta` per slot: dirty, data-class and referenced flags | writers (dirty, under the slot's lock), fill-lock holders, a reader once per eviction cycle (referenced) |
//! | the index: open addressing, one `u64` per entry, `(block + 1) << 20 | slot` | fill-lock holders |
//! | `SeqLock<Page>` per slot: word 0 is the tag (block + 1, 0 = free), then 512 words of data | writers under the slot's lock |
//!
//! **Lookups take no lock and write nothing shared.** A hit loads the index entry for the
//! block (acquire), copies the slot as a seqlock reader (`SeqLock::try_read`: generation,
//! copy, generation) and accepts the copy only if its tag names the block. A slot is filled
//! (tag and data in one seqlock write) before its index entry is published, and emptied
//! (tag 0 in one seqlock write) before its entry is removed, so a reader that copied a slot
//! whose tag names its block holds the whole page as it was at one moment while that slot
//! held that block: never a torn page (the seqlock rejects copies a writer overlapped) and
//! never another block's page (the tag is inside the copy). Anything else (no entry, a tag
//! that changed, a writer in the way) is a miss, and misses are served under the fill lock,
//! where index and slots do not change under the reader. A false miss costs time, never
//! correctness, which is why the index may be rebuilt in place under the fill lock.
//!
//! **Writes to a cached page** take only that slot's seqlock (its ticket lock), check the tag
//! inside the write and set the slot's dirty flag there, so an evictor, which clears the tag
//! inside its own seqlock write only if the page is clean, never drops a write.
//!
//! **No reference counts on pages.** Readers copy, so nothing pins a page: the sloppy
//! reference counts are not needed by this design (they would be a write per lookup; here a
//! lookup writes nothing but, once per eviction cycle, a page's referenced flag).
//!
//! **Misses, eviction and write-back** run under the one fill lock, with the disk I/O: the
//! disk has one request segment per process and one queue lock in the kernel, so misses are
//! serialised there anyway. Eviction is a clock sweep that takes clean pages only; when a
//! sweep finds none, every dirty page is written back in order (data pages, a flush, then the
//! rest, a flush), which keeps the crash rule "data before the metadata naming it".

use core::mem::size_of;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use percore::pad::CachePadded;
use percore::seqlock::{SeqLock, WordsWriter};
use percore::spin::TicketLock;

/// Bytes of one page.
pub const PAGE: usize = 4096;
/// Words of data in a page.
pub const PAGE_WORDS: usize = PAGE / 8;
/// A slot's contents: the tag (block + 1; 0 = free), then the page.
pub type Page = [u64; PAGE_WORDS + 1];
/// Cores with their own statistics line (others share the last one).
pub const STAT_CORES: usize = 64;
const MAGIC: u64 = 0x6263_6163_6865_3031; // "bcache01"
const INDEX_EMPTY: u64 = 0;
const INDEX_TOMB: u64 = u64::MAX;
const SLOT_BITS: u32 = 20;
/// Most slots a table can have (the index packs a slot in 20 bits).
pub const MAX_SLOTS: usize = 1 << SLOT_BITS;
/// Largest block number the index can hold.
pub const MAX_BLOCK: u64 = (1 << (64 - SLOT_BITS)) - 2;

/// What the disk under the table does (the table calls it under the fill lock only).
pub trait BlockIo {
    /// Read page `block` (fewer bytes than `PAGE` for a short last page).
    fn read_page(&mut self, block: u64, buf: &mut [u8]) -> Result<(), IoError>;
    fn write_page(&mut self, block: u64, buf: &[u8]) -> Result<(), IoError>;
    fn flush(&mut self) -> Result<(), IoError>;
    /// Bytes of page `block` that exist on the disk.
    fn page_len(&self, block: u64) -> usize;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoError {
    Io,
    NoMemory,
}

/// The clock hand and counts kept under the fill lock.
struct Sweep {
    hand: usize,
    tombs: usize,
}

#[repr(C)]
struct Header {
    magic: u64,
    slots: u64,
    index_len: u64,
    fill: TicketLock<Sweep>,
}

/// One core's counters (only that core adds to them; atomics because a cfork'd child and a
/// thread of its parent may run on the same core).
#[derive(Default)]
pub struct CoreStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub writebacks: AtomicU64,
    pub disk_reads: AtomicU64,
    pub evictions: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
    pub disk_reads: u64,
    pub evictions: u64,
}

/// Each slot's on its own 128 bytes (session 12): every write into a page stores its slot's
/// `dirty`, and with 24-byte records the slots of pages different cores write (each core's
/// directory, its inode-table block) shared lines, 4 of the 7 lines `fs_create_private` still
/// shared per op once the file system's one lock was split (docs/results.md, "Session 12").
#[derive(Default)]
#[repr(align(128))]
struct Meta {
    /// 1 while the page differs from the disk (set inside the slot's seqlock write).
    dirty: AtomicU32,
    /// 1 if the dirty page is file data (written back before the other dirty pages).
    data: AtomicU32,
    /// Set by hits (only when clear), cleared by the clock hand.
    referenced: AtomicU32,
    /// A copy of the page's tag, changed only under the fill lock (as the tag is), so the
    /// sweeps read it without copying pages.
    tag: AtomicU64,
}

/// Where each part of a table of `slots` pages lies, and its total size.
#[derive(Clone, Copy, Debug)]
struct Layout {
    stats: usize,
    meta: usize,
    index: usize,
    index_len: usize,
    pages: usize,
    bytes: usize,
}

fn align(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

fn layout(slots: usize) -> Layout {
    let stats = align(size_of::<Header>(), 128);
    let meta = align(stats + STAT_CORES * size_of::<CachePadded<CoreStats>>(), 128);
    let index = align(meta + slots * size_of::<Meta>(), 128);
    let index_len = (slots * 2).next_power_of_two();
    let pages = align(index + index_len * 8, 128);
    let bytes = align(pages + slots * size_of::<SeqLock<Page>>(), PAGE);
    Layout { stats, meta, index, index_len, pages, bytes }
}

/// Bytes a table of `slots` pages takes.
pub fn table_bytes(slots: usize) -> usize {
    layout(slots).bytes
}

/// A block table at a fixed address (see the module comment). Copyable: it is only the
/// address; the memory belongs to the segment mapped there.
#[derive(Clone, Copy)]
pub struct Table {
    base: usize,
    slots: usize,
    lay: Layout,
}

fn hash(block: u64, len: usize) -> usize {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize & (len - 1)
}

fn entry(block: u64, slot: usize) -> u64 {
    ((block + 1) << SLOT_BITS) | slot as u64
}

impl Table {
    /// Build an empty table in `bytes` bytes at `base`.
    ///
    /// # Safety
    /// `[base, base + bytes)` is mapped writable, 128-byte aligned, and nothing else uses it
    /// while this runs; afterwards it is used only through `Table`s (of any process) made by
    /// `attach` at the same address.
    pub unsafe fn init(base: usize, bytes: usize, slots: usize) -> Option<Table> {
        let lay = layout(slots);
        if slots == 0 || slots > MAX_SLOTS || lay.bytes > bytes || !base.is_multiple_of(128) {
            return None;
        }
        // SAFETY (for every write below): inside the region the caller gave us, each at an
        // offset `layout` aligned for its type.
        unsafe {
            (base as *mut Header).write(Header { magic: 0, slots: slots as u64, index_len: lay.index_len as u64, fill: TicketLock::new(Sweep { hand: 0, tombs: 0 }) });
            for c in 0..STAT_CORES {
                ((base + lay.stats) as *mut CachePadded<CoreStats>).add(c).write(CachePadded::new(CoreStats::default()));
            }
            for s in 0..slots {
                ((base + lay.meta) as *mut Meta).add(s).write(Meta::default());
                ((base + lay.pages) as *mut SeqLock<Page>).add(s).write(SeqLock::new([0; PAGE_WORDS + 1]));
            }
            for i in 0..lay.index_len {
                ((base + lay.index) as *mut AtomicU64).add(i).write(AtomicU64::new(INDEX_EMPTY));
            }
            (*(base as *const Header as *mut Header)).magic = MAGIC;
        }
        Some(Table { base, slots, lay })
    }

    /// A table another party built at `base` (`init`), or `None` if there is none.
    ///
    /// # Safety
    /// `[base, base + 4096)` is mapped readable, and if it holds a table, the whole table is
    /// mapped (as `init` requires).
    pub unsafe fn attach(base: usize) -> Option<Table> {
        // SAFETY: the header is mapped (caller).
        let h = unsafe { &*(base as *const Header) };
        if h.magic != MAGIC {
            return None;
        }
        let lay = layout(h.slots as usize);
        (lay.index_len as u64 == h.index_len).then_some(Table { base, slots: h.slots as usize, lay })
    }

    /// A table that holds nothing, for a `Cache` under construction; never used before `init`
    /// replaces it.
    pub(crate) fn placeholder() -> Table {
        Table { base: 0, slots: 0, lay: layout(1) }
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    fn header(&self) -> &Header {
        // SAFETY: `init` built it; it lives as long as the mapping the `Table` stands for.
        unsafe { &*(self.base as *const Header) }
    }

    fn stats_of(&self, core: usize) -> &CoreStats {
        // SAFETY: as `header`; `core` is clamped into the array.
        unsafe { &*((self.base + self.lay.stats) as *const CachePadded<CoreStats>).add(core.min(STAT_CORES - 1)) }
    }

    fn meta(&self, s: usize) -> &Meta {
        // SAFETY: as `header`; callers pass `s < slots` (slots come from the index or the hand).
        unsafe { &*((self.base + self.lay.meta) as *const Meta).add(s) }
    }

    fn page(&self, s: usize) -> &SeqLock<Page> {
        // SAFETY: as `meta`.
        unsafe { &*((self.base + self.lay.pages) as *const SeqLock<Page>).add(s) }
    }

    fn index(&self, i: usize) -> &AtomicU64 {
        // SAFETY: as `header`; `i` is masked by `index_len - 1`.
        unsafe { &*((self.base + self.lay.index) as *const AtomicU64).add(i & (self.lay.index_len - 1)) }
    }

    /// The slot the index names for `block`, if any (lock-free; may miss while the fill lock's
    /// holder changes the index).
    fn find(&self, block: u64) -> Option<usize> {
        let h = hash(block, self.lay.index_len);
        for i in 0..self.lay.index_len {
            let e = self.index(h + i).load(Ordering::Acquire);
            if e == INDEX_EMPTY {
                return None;
            }
            if e != INDEX_TOMB && e >> SLOT_BITS == block + 1 {
                let s = (e & ((1 << SLOT_BITS) - 1)) as usize;
                return (s < self.slots).then_some(s);
            }
        }
        None
    }

    /// The counters, summed over cores.
    pub fn stats(&self) -> Stats {
        let mut t = Stats::default();
        for c in 0..STAT_CORES {
            let s = self.stats_of(c);
            t.hits += s.hits.load(Ordering::Relaxed);
            t.misses += s.misses.load(Ordering::Relaxed);
            t.writebacks += s.writebacks.load(Ordering::Relaxed);
            t.disk_reads += s.disk_reads.load(Ordering::Relaxed);
            t.evictions += s.evictions.load(Ordering::Relaxed);
        }
        t
    }

    /// Copy `buf.len()` bytes of page `block` from byte `at` on, without a lock. `false` if
    /// the page is not cached (or a writer or evictor was in the way): call `read` then.
    pub fn try_read(&self, core: usize, block: u64, at: usize, buf: &mut [u8]) -> bool {
        let Some(s) = self.find(block) else { return false };
        if at >= PAGE || buf.len() > PAGE - at {
            return false;
        }
        // Only the tag and the words holding the bytes asked for, in one seqlock window.
        let (first, end) = (at / 8, (at + buf.len()).div_ceil(8));
        // SAFETY: any bytes are a valid `u64` and the reverse; `align_to_mut` gives the
        // aligned middle part only.
        let (head, mid, tail) = unsafe { buf.align_to_mut::<u64>() };
        if head.is_empty() && tail.is_empty() && at.is_multiple_of(8) {
            // Whole aligned words (pages and inodes into heap buffers): copy straight into
            // the caller's buffer; a failed window leaves garbage there that the slow path
            // overwrites, and nobody looks at it before that.
            let mut tag = [0u64; 1];
            if !self.page(s).try_read_ranges(&mut [(0, &mut tag), (1 + first, mid)]) || tag[0] != block + 1 {
                return false;
            }
            self.hit(core, s);
            return true;
        }
        let mut tag = [0u64; 1];
        // A few words (an inode's fields, a block pointer, a byte) through a small buffer:
        // clearing a page-sized one costs more than the copy.
        let mut small = [0u64; 16];
        let mut big;
        let words: &mut [u64] = if end - first <= small.len() {
            &mut small[..end - first]
        } else {
            big = [0u64; PAGE_WORDS];
            &mut big[..end - first]
        };
        if !self.page(s).try_read_ranges(&mut [(0, &mut tag), (1 + first, words)]) || tag[0] != block + 1 {
            return false;
        }
        copy_words_out(words, at % 8, buf);
        self.hit(core, s);
        true
    }

    fn hit(&self, core: usize, s: usize) {
        let m = self.meta(s);
        // Written once per clock cycle, not per hit.
        if m.referenced.load(Ordering::Relaxed) == 0 {
            m.referenced.store(1, Ordering::Relaxed);
        }
        self.stats_of(core).hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Write into cached page `block` under only its slot's lock. `false` if it is not cached
    /// (or `[at, at + data.len())` is not inside a page: `write` then says so).
    ///
    /// A ranged write (`SeqLock::write_words`): only the words holding the bytes written are
    /// stored, so an inode or a directory entry costs a few stores, not a copy of the page in
    /// and out, and only its cache lines change.
    pub fn try_write(&self, core: usize, block: u64, at: usize, data: &[u8], is_data: bool) -> bool {
        if !in_page(at, data.len()) {
            return false;
        }
        let Some(s) = self.find(block) else { return false };
        let m = self.meta(s);
        let done = self.page(s).write_words(|p| {
            if p.get(0) != Some(block + 1) {
                return false;
            }
            copy_in(p, at, data);
            // Inside the slot's lock: an evictor checks `dirty` under the same lock.
            if is_data {
                m.data.store(1, Ordering::Relaxed);
            }
            m.dirty.store(1, Ordering::Release);
            true
        });
        if done {
            self.stats_of(core).hits.fetch_add(1, Ordering::Relaxed);
        }
        done
    }

    /// `try_read`, else read the page from the disk into the cache (under the fill lock).
    pub fn read(&self, core: usize, io: &mut dyn BlockIo, block: u64, at: usize, buf: &mut [u8]) -> Result<(), IoError> {
        if self.try_read(core, block, at, buf) {
            return Ok(());
        }
        let mut sw = self.header().fill.lock();
        let s = self.slot_for(core, &mut sw, io, block, true)?;
        // Under the fill lock the slot keeps its block; a writer may still be in it, so read
        // as a seqlock reader (falling back to the slot's lock).
        let p = self.page(s).read();
        copy_out(&p, at, buf);
        Ok(())
    }

    /// `try_write`, else bring the page in (read from the disk unless `whole`) and write it.
    pub fn write(&self, core: usize, io: &mut dyn BlockIo, block: u64, at: usize, data: &[u8], is_data: bool) -> Result<(), IoError> {
        if self.try_write(core, block, at, data, is_data) {
            return Ok(());
        }
        if !in_page(at, data.len()) {
            return Err(IoError::Io);
        }
        let whole = at == 0 && data.len() == PAGE;
        let mut sw = self.header().fill.lock();
        let s = self.slot_for(core, &mut sw, io, block, !whole)?;
        let m = self.meta(s);
        // Under the fill lock nobody evicts the slot, so its tag still names `block`.
        self.page(s).write_words(|p| {
            copy_in(p, at, data);
            if is_data {
                m.data.store(1, Ordering::Relaxed);
            }
            m.dirty.store(1, Ordering::Release);
        });
        Ok(())
    }

    /// The slot holding `block`, filled from the disk (or zeroed if `!fill`) if it was not
    /// cached. Fill lock held.
    fn slot_for(&self, core: usize, sw: &mut Sweep, io: &mut dyn BlockIo, block: u64, fill: bool) -> Result<usize, IoError> {
        if block > MAX_BLOCK {
            return Err(IoError::Io);
        }
        if let Some(s) = self.find(block) {
            // Under the fill lock the index is exact: an entry names a slot holding its block.
            if self.meta(s).tag.load(Ordering::Relaxed) == block + 1 {
                return Ok(s);
            }
            // Not reachable unless the shared memory was overwritten: drop the stale entry.
            self.index_remove(sw, block);
        }
        let st = self.stats_of(core);
        st.misses.fetch_add(1, Ordering::Relaxed);
        let s = self.free_slot(core, sw, io)?;
        // Rebuild a tombstone-heavy index now, while `s` holds nothing: a rebuild after its
        // tag is set would index it too, and the insert below would add a second entry that
        // outlives its eviction (found by the host test's reader getting another block).
        if sw.tombs > self.lay.index_len / 4 {
            self.index_rebuild(sw);
        }
        let mut p: Page = [0; PAGE_WORDS + 1];
        p[0] = block + 1;
        if fill {
            let mut bytes = [0u8; PAGE];
            let n = io.page_len(block).min(PAGE);
            io.read_page(block, &mut bytes[..n])?;
            st.disk_reads.fetch_add(1, Ordering::Relaxed);
            for (w, c) in p[1..].iter_mut().zip(bytes.chunks_exact(8)) {
                *w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            }
        }
        // Fill before publishing: a reader that finds the entry finds the page whole. Every
        // word is stored, none loaded (`set` would copy the old page out first).
        self.page(s).write_words(|w| w.set_words(0, &p));
        let m = self.meta(s);
        m.dirty.store(0, Ordering::Relaxed);
        m.data.store(0, Ordering::Relaxed);
        m.referenced.store(1, Ordering::Relaxed);
        m.tag.store(block + 1, Ordering::Relaxed);
        self.index_insert(sw, block, s);
        Ok(s)
    }

    fn index_insert(&self, sw: &mut Sweep, block: u64, s: usize) {
        let h = hash(block, self.lay.index_len);
        for i in 0..self.lay.index_len {
            let e = self.index(h + i).load(Ordering::Relaxed);
            if e == INDEX_EMPTY || e == INDEX_TOMB {
                if e == INDEX_TOMB {
                    sw.tombs -= 1;
                }
                // Release: the page was filled (above) before the entry that names it.
                self.index(h + i).store(entry(block, s), Ordering::Release);
                return;
            }
        }
        // Unreachable: the index has at least twice as many entries as there are slots, and
        // tombstones are rebuilt away at a quarter of it.
    }

    fn index_remove(&self, sw: &mut Sweep, block: u64) {
        let h = hash(block, self.lay.index_len);
        for i in 0..self.lay.index_len {
            let e = self.index(h + i).load(Ordering::Relaxed);
            if e == INDEX_EMPTY {
                return;
            }
            if e != INDEX_TOMB && e >> SLOT_BITS == block + 1 {
                self.index(h + i).store(INDEX_TOMB, Ordering::Release);
                sw.tombs += 1;
                return;
            }
        }
    }

    /// Empty the index and insert every cached page again (lock-free readers meanwhile miss
    /// and wait for the fill lock).
    fn index_rebuild(&self, sw: &mut Sweep) {
        for i in 0..self.lay.index_len {
            self.index(i).store(INDEX_EMPTY, Ordering::Release);
        }
        sw.tombs = 0;
        for s in 0..self.slots {
            let tag = self.meta(s).tag.load(Ordering::Relaxed);
            if tag != 0 {
                self.index_insert(sw, tag - 1, s);
            }
        }
    }

    /// A free slot: one never used, or a clean page the clock hand evicts. If two sweeps find
    /// no clean page, every dirty page is written back in order and the sweep runs again.
    fn free_slot(&self, core: usize, sw: &mut Sweep, io: &mut dyn BlockIo) -> Result<usize, IoError> {
        for round in 0..2 {
            for _ in 0..2 * self.slots {
                let s = sw.hand;
                sw.hand = (sw.hand + 1) % self.slots;
                let m = self.meta(s);
                let tag = m.tag.load(Ordering::Relaxed);
                if tag == 0 {
                    return Ok(s);
                }
                if m.referenced.load(Ordering::Relaxed) != 0 {
                    m.referenced.store(0, Ordering::Relaxed);
                    continue;
                }
                // Take the page only if it is clean, checked under the slot's lock, where
                // writers set `dirty`.
                let taken = self.page(s).write_words(|p| {
                    if m.dirty.load(Ordering::Acquire) != 0 {
                        return false;
                    }
                    // The tag alone: a reader checks it inside its window, so the stale data
                    // words need not be touched.
                    p.set(0, 0)
                });
                if taken {
                    m.tag.store(0, Ordering::Relaxed);
                    self.index_remove(sw, tag - 1);
                    self.stats_of(core).evictions.fetch_add(1, Ordering::Relaxed);
                    return Ok(s);
                }
            }
            if round == 0 {
                self.write_back_locked(core, io, None)?;
            }
        }
        Err(IoError::NoMemory)
    }

    /// Write dirty pages back in order: the data pages, a flush, then the others, a flush.
    /// With `only`, just the pages in `[first, end)` (no flush, no ordering: the caller's).
    fn write_back_locked(&self, core: usize, io: &mut dyn BlockIo, only: Option<(u64, u64)>) -> Result<(), IoError> {
        let pass = |io: &mut dyn BlockIo, want_data: Option<bool>| -> Result<(), IoError> {
            let mut dirty: alloc::vec::Vec<(u64, usize)> = alloc::vec::Vec::new();
            for s in 0..self.slots {
                let m = self.meta(s);
                if m.dirty.load(Ordering::Acquire) == 0 {
                    continue;
                }
                if want_data.is_some_and(|d| d != (m.data.load(Ordering::Relaxed) != 0)) {
                    continue;
                }
                let tag = m.tag.load(Ordering::Relaxed);
                if tag == 0 || only.is_some_and(|(a, b)| tag - 1 < a || tag > b) {
                    continue;
                }
                dirty.try_reserve(1).map_err(|_| IoError::NoMemory)?;
                dirty.push((tag - 1, s));
            }
            dirty.sort_unstable();
            let mut bytes = [0u8; PAGE];
            for (block, s) in dirty {
                let m = self.meta(s);
                // Clear first: a write that lands after this sets it again and is written
                // next time; one before it is in the copy below (its dirty store was after
                // its data, and this swap acquires it).
                m.dirty.swap(0, Ordering::AcqRel);
                m.data.store(0, Ordering::Relaxed);
                let p = self.page(s).read();
                if p[0] != block + 1 {
                    continue;
                }
                for (c, w) in bytes.chunks_exact_mut(8).zip(p[1..].iter()) {
                    c.copy_from_slice(&w.to_le_bytes());
                }
                let n = io.page_len(block).min(PAGE);
                if let Err(e) = io.write_page(block, &bytes[..n]) {
                    m.dirty.store(1, Ordering::Release);
                    return Err(e);
                }
                self.stats_of(core).writebacks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        };
        match only {
            Some(_) => pass(io, None),
            None => {
                pass(io, Some(true))?;
                io.flush()?;
                pass(io, None)?;
                io.flush()
            }
        }
    }

    /// Write back every dirty page in order (data first) and flush.
    pub fn sync(&self, core: usize, io: &mut dyn BlockIo) -> Result<(), IoError> {
        let _g = self.header().fill.lock();
        self.write_back_locked(core, io, None)
    }

    /// Write back the dirty pages in `[first, end)` (no flush).
    pub fn sync_pages(&self, core: usize, io: &mut dyn BlockIo, first: u64, end: u64) -> Result<(), IoError> {
        let _g = self.header().fill.lock();
        self.write_back_locked(core, io, Some((first, end)))
    }

    /// Mark page `block` as file data if it is cached and dirty (written back first).
    pub fn note_data(&self, block: u64) {
        if let Some(s) = self.find(block) {
            self.meta(s).data.store(1, Ordering::Relaxed);
        }
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        (0..self.slots).filter(|&s| self.meta(s).dirty.load(Ordering::Relaxed) != 0).count()
    }

    /// Pages holding a block now.
    pub fn cached_pages(&self) -> usize {
        (0..self.slots).filter(|&s| self.meta(s).tag.load(Ordering::Relaxed) != 0).count()
    }

    /// Drop every clean page (tests: the next reads go to the disk). Dirty pages stay.
    pub fn drop_clean(&self) {
        let mut sw = self.header().fill.lock();
        for s in 0..self.slots {
            let m = self.meta(s);
            let tag = m.tag.load(Ordering::Relaxed);
            if tag == 0 {
                continue;
            }
            let taken = self.page(s).write_words(|p| {
                if m.dirty.load(Ordering::Acquire) != 0 {
                    return false;
                }
                p.set(0, 0)
            });
            if taken {
                m.tag.store(0, Ordering::Relaxed);
                self.index_remove(&mut sw, tag - 1);
            }
        }
    }
}

fn copy_out(p: &Page, at: usize, buf: &mut [u8]) {
    if at.is_multiple_of(8) && buf.len().is_multiple_of(8) && at + buf.len() <= PAGE {
        // Whole words (pages, inodes, descriptors): one 8-byte store each.
        for (c, w) in buf.chunks_exact_mut(8).zip(&p[1 + at / 8..]) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        return;
    }
    let end = (at + buf.len()).min(PAGE);
    let mut i = at;
    while i < end {
        let w = p[1 + i / 8].to_le_bytes();
        let k = i % 8;
        let n = (8 - k).min(end - i);
        buf[i - at..i - at + n].copy_from_slice(&w[k..k + n]);
        i += n;
    }
}

/// Bytes `skip ..` of `words` (little-endian) into `buf`.
fn copy_words_out(words: &[u64], skip: usize, buf: &mut [u8]) {
    if skip == 0 && buf.len().is_multiple_of(8) {
        for (c, w) in buf.chunks_exact_mut(8).zip(words) {
            c.copy_from_slice(&w.to_le_bytes());
        }
        return;
    }
    let mut done = 0;
    for (i, w) in words.iter().enumerate() {
        let b = w.to_le_bytes();
        let from = if i == 0 { skip } else { 0 };
        let n = (8 - from).min(buf.len() - done);
        buf[done..done + n].copy_from_slice(&b[from..from + n]);
        done += n;
        if done == buf.len() {
            break;
        }
    }
}

/// Whether bytes `[at, at + len)` lie inside one page.
fn in_page(at: usize, len: usize) -> bool {
    at.checked_add(len).is_some_and(|e| e <= PAGE)
}

/// Store `data` at byte `at` of the page (caller: `in_page`), inside a ranged seqlock write:
/// one store per word the bytes cover, whole words as they are, the partly covered first and
/// last words read, merged and stored whole (readers copy words, so a word is the unit a
/// reader sees change). Nothing else of the page is stored.
fn copy_in(p: &mut WordsWriter<'_, { PAGE_WORDS + 1 }>, at: usize, data: &[u8]) {
    let end = at + data.len();
    let mut i = at;
    if !i.is_multiple_of(8) && i < end {
        // The partly covered first word.
        let (k, n) = (i % 8, (8 - i % 8).min(end - i));
        let mut w = p.get(1 + i / 8).unwrap_or(0).to_le_bytes();
        w[k..k + n].copy_from_slice(&data[..n]);
        p.set(1 + i / 8, u64::from_le_bytes(w));
        i += n;
    }
    // Whole words.
    let whole = (end - i) / 8;
    for (k, c) in data[i - at..i - at + whole * 8].chunks_exact(8).enumerate() {
        p.set(1 + i / 8 + k, u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    }
    i += whole * 8;
    if i < end {
        // The partly covered last word.
        let mut w = p.get(1 + i / 8).unwrap_or(0).to_le_bytes();
        w[..end - i].copy_from_slice(&data[i - at..]);
        p.set(1 + i / 8, u64::from_le_bytes(w));
    }
}

/// Unit tests, compiled on the host by `percore/tests/bcache.rs` (which includes this file).
#[cfg(test)]
mod tests {
    use super::*;

    struct Zero;
    impl BlockIo for Zero {
        fn read_page(&mut self, block: u64, buf: &mut [u8]) -> Result<(), IoError> {
            buf.fill(block as u8);
            Ok(())
        }
        fn write_page(&mut self, _: u64, _: &[u8]) -> Result<(), IoError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), IoError> {
            Ok(())
        }
        fn page_len(&self, _: u64) -> usize {
            PAGE
        }
    }

    /// Catches: a lock-free hit that trusts the index entry without checking the page's tag
    /// inside its seqlock window. The state made here by hand (an entry for block 5 naming a
    /// slot that now holds block 9) is what a reader sees when it loaded the entry just before
    /// the slot was evicted and refilled, and what a stale duplicate entry (the index-rebuild
    /// bug of the first cut) left behind for good.
    #[test]
    fn a_hit_checks_the_tag_not_just_the_index() {
        let t = crate::table(1);
        let mut io = Zero;
        let mut b = alloc::vec![0u8; 64];
        t.read(0, &mut io, 5, 0, &mut b).unwrap();
        assert!(b.iter().all(|&x| x == 5));
        t.drop_clean();
        t.read(0, &mut io, 9, 0, &mut b).unwrap();
        let mut sw = Sweep { hand: 0, tombs: 0 };
        t.index_insert(&mut sw, 5, 0);
        b.fill(0);
        assert!(!t.try_read(0, 5, 0, &mut b), "block 9's page served as block 5");
        assert!(!t.try_read(0, 5, 3, &mut b[..5]), "unaligned path: block 9's page served as block 5");
    }
}
