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
//! | `Meta` per slot: the referenced flag and a copy of the tag | fill-lock holders, a reader once per eviction cycle (referenced) |
//! | the index: open addressing, one `u64` per entry, `(block + 1) << 20 | slot` | fill-lock holders |
//! | `Page` (`percore::SeqParts`) per slot: 16 part lines (each part's generation, writers' lock, dirty and data flags), the tag line (block + 1, 0 = free), then 512 words of data, 256 bytes per part | writers under their parts' locks; the tag only under all 16 |
//!
//! **Lookups take no lock and write nothing shared.** A hit loads the index entry for the
//! block (acquire), copies the slot as a seqlock reader (`SeqParts::try_read`: the
//! generations of the parts holding the words it wants, the copy with the tag, the same
//! generations again) and accepts the copy only if its tag names the block. A slot is filled
//! (tag and data in one write of every part) before its index entry is published, and emptied
//! (tag 0 in one write of every part) before its entry is removed, so a reader that copied a slot
//! whose tag names its block holds the whole page as it was at one moment while that slot
//! held that block: never a torn page (the seqlock rejects copies a writer overlapped) and
//! never another block's page (the tag is inside the copy). Anything else (no entry, a tag
//! that changed, a writer in the way) is a miss, and misses are served under the fill lock,
//! where index and slots do not change under the reader. A false miss costs time, never
//! correctness, which is why the index may be rebuilt in place under the fill lock.
//!
//! **Writes to a cached page** lock only the parts (256 bytes each: one ext2 inode) holding
//! the bytes they write, check the tag inside the write and set those parts' dirty flags
//! there, so an evictor, which clears the tag with every part locked only if no part is dirty,
//! never drops a write. A write of one inode bumps only its part's
//! generation: a lock-free reader of another inode of the same inode-table block neither
//! retries nor shares a line with it (one seqlock per page before: 1 594 of the POSIX
//! commutativity cases conflicted on that word; docs/history/2026-11-29.md, "One seqlock per
//! 256-byte part of a cache page").
//!
//! **No reference counts on pages.** Readers copy, so nothing pins a page: sloppy reference
//! counts (MOSBENCH's) are not needed by this design (they would be a write per lookup; here a
//! lookup writes nothing but, once per eviction cycle, a page's referenced flag).
//!
//! **Misses, eviction and write-back** run under the one fill lock, with the disk I/O: the
//! disk has one request segment per process and one queue lock in the kernel, so misses are
//! serialised there anyway. Eviction is a clock sweep that takes clean pages only; when a
//! sweep finds none, every dirty page is written back in order (data pages, a flush, then the
//! rest, a flush), which keeps the crash rule "data before the metadata naming it".

#![no_std]

extern crate alloc;

use core::mem::size_of;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use percore::pad::CachePadded;
use percore::seqparts::{PartsWriter, SeqParts};
use percore::spin::TicketLock;

/// Bytes of one page.
pub const PAGE: usize = 4096;
/// Words of data in a page.
pub const PAGE_WORDS: usize = PAGE / 8;
/// Bytes of one part of a page: the largest ext2 inode (256 bytes), so that two inodes of one
/// inode-table block never share a part (with 128-byte inodes two do: a writer of one then
/// costs a reader of the other a retry, as before, no more). A directory record lies in one
/// or a few parts.
pub const PART: usize = 256;
/// Words of one part.
pub const PART_WORDS: usize = PART / 8;
/// Parts of a page.
pub const PARTS: usize = PAGE / PART;
/// A slot: the tag (block + 1; 0 = free) and the page, under one seqlock per 256-byte part
/// (docs/fs.md, "The buffer cache").
pub type Page = SeqParts<PART_WORDS, PARTS>;
/// A part's flags (`SeqParts::flags`): the part differs from the disk.
const DIRTY: u32 = 1;
/// A part's flags: the page is file data (written back before the other dirty pages).
const DATA: u32 = 2;
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
    /// Read page `block` (its `page_len` bytes) into `words`, as little-endian words; words
    /// past a short last page are left as they are. By default through `read_page` and a
    /// byte buffer; a device that copies straight into the words saves the buffer's zeroing
    /// and the conversion, on every miss (`Table::slot_for`).
    fn read_page_words(&mut self, block: u64, words: &mut [u64; PAGE_WORDS]) -> Result<(), IoError> {
        let n = self.page_len(block).min(PAGE);
        let mut bytes = [0u8; PAGE];
        self.read_page(block, &mut bytes[..n])?;
        for (w, c) in words.iter_mut().zip(bytes[..n].chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        }
        Ok(())
    }
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

/// Each slot's on its own 128 bytes: with 24-byte records the slots of pages
/// different cores use (each core's directory, its inode-table block) shared lines. The dirty
/// and data flags a write stores live in the flags word of each part of the page
/// (`DIRTY`, `DATA`), on the part's own line, so two writers of different inodes of one page
/// store no common line.
#[derive(Default)]
#[repr(align(128))]
struct Meta {
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
    let bytes = align(pages + slots * size_of::<Page>(), PAGE);
    Layout { stats, meta, index, index_len, pages, bytes }
}

/// Bytes a table of `slots` pages takes.
#[inline]
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
                ((base + lay.pages) as *mut Page).add(s).write(Page::new());
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
    #[inline]
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
    #[inline]
    pub fn placeholder() -> Table {
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

    fn page(&self, s: usize) -> &Page {
        // SAFETY: as `meta`.
        unsafe { &*((self.base + self.lay.pages) as *const Page).add(s) }
    }

    /// Whether any part of slot `s`'s page has `bit` in its flags.
    fn any_flag(&self, s: usize, bit: u32) -> bool {
        let p = self.page(s);
        (0..PARTS).any(|k| p.flags(k).is_some_and(|f| f.load(Ordering::Acquire) & bit != 0))
    }

    /// Whether slot `s`'s page differs from the disk.
    fn is_dirty(&self, s: usize) -> bool {
        self.any_flag(s, DIRTY)
    }

    /// Empty slot `s` (tag 0) if its page is clean, in one write of every part (so every
    /// lock-free reader of any part sees the tag change); `false` if it is dirty. Fill lock
    /// held (the tag and `Meta::tag` change only there).
    fn evict_if_clean(&self, s: usize) -> bool {
        // Under every part's lock, where writers set `DIRTY`: none can dirty it meanwhile.
        self.page(s).write_all(|p| {
            if (0..PARTS).any(|k| p_flags(p, k) & DIRTY != 0) {
                return false;
            }
            // The tag alone: a reader checks it inside its window, so the stale data words
            // need not be touched.
            p.set_tag(0)
        })
    }

    fn index(&self, i: usize) -> &AtomicU64 {
        // SAFETY: as `header`; `i` is masked by `index_len - 1`.
        unsafe { &*((self.base + self.lay.index) as *const AtomicU64).add(i & (self.lay.index_len - 1)) }
    }

    /// The slot the index names for `block`, if any (lock-free; may miss while the fill lock's
    /// holder changes the index).
    #[inline]
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
        // Only the tag and the words holding the bytes asked for, in one window of the parts
        // holding them (a writer of another part of the page does not disturb it).
        let (first, end) = (at / 8, (at + buf.len()).div_ceil(8));
        // SAFETY: any bytes are a valid `u64` and the reverse; `align_to_mut` gives the
        // aligned middle part only.
        let (head, mid, tail) = unsafe { buf.align_to_mut::<u64>() };
        if head.is_empty() && tail.is_empty() && at.is_multiple_of(8) {
            // Whole aligned words (pages and inodes into heap buffers): copy straight into
            // the caller's buffer; a failed window leaves garbage there that the slow path
            // overwrites, and nobody looks at it before that.
            if self.page(s).try_read(first, mid) != Some(block + 1) {
                return false;
            }
            self.hit(core, s);
            return true;
        }
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
        if self.page(s).try_read(first, words) != Some(block + 1) {
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
    /// A ranged write (`SeqParts::write`): only the words holding the bytes written are
    /// stored, so an inode or a directory entry costs a few stores, not a copy of the page in
    /// and out, and only its cache lines change; and only the parts (256 bytes each) holding
    /// them are locked and their generations bumped, so a lock-free reader of another inode of
    /// the same page is not disturbed, and a writer of another inode shares no line with it.
    pub fn try_write(&self, core: usize, block: u64, at: usize, data: &[u8], is_data: bool) -> bool {
        if !in_page(at, data.len()) || data.is_empty() {
            return false;
        }
        let Some(s) = self.find(block) else { return false };
        let done = self.page(s).write(at / 8, (at + data.len()).div_ceil(8), |p| {
            // The tag changes only under every part's lock: stable while we hold ours.
            if p.tag() != block + 1 {
                return false;
            }
            copy_in(p, at, data);
            mark_dirty(p, is_data);
            true
        }) == Some(true);
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
        let (s, _) = self.slot_for(core, &mut sw, io, block, Fill::Disk)?;
        // Under the fill lock the slot keeps its block; a writer may still be in it, so read
        // as a seqlock reader (falling back to the parts' locks).
        if buf.is_empty() {
            return Ok(());
        }
        if at >= PAGE || buf.len() > PAGE - at {
            return Err(IoError::Io);
        }
        let (first, end) = (at / 8, (at + buf.len()).div_ceil(8));
        let mut words = [0u64; PAGE_WORDS];
        self.page(s).read(first, &mut words[..end - first]);
        copy_words_out(&words[..end - first], at % 8, buf);
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
        if data.is_empty() {
            return Ok(());
        }
        let whole = at == 0 && data.len() == PAGE;
        let mut sw = self.header().fill.lock();
        let fill = if whole { Fill::Bytes(data, is_data) } else { Fill::Disk };
        let (s, done) = self.slot_for(core, &mut sw, io, block, fill)?;
        if done {
            return Ok(());
        }
        // Under the fill lock nobody evicts the slot, so its tag still names `block`.
        self.page(s).write(at / 8, (at + data.len()).div_ceil(8), |p| {
            copy_in(p, at, data);
            mark_dirty(p, is_data);
        });
        Ok(())
    }

    /// The slot holding `block`, filled (from the disk, or with a whole page's bytes) if it
    /// was not cached; and whether it was filled with the bytes (then it is dirty already and
    /// the caller's write is done). Fill lock held.
    fn slot_for(&self, core: usize, sw: &mut Sweep, io: &mut dyn BlockIo, block: u64, fill: Fill<'_>) -> Result<(usize, bool), IoError> {
        if block > MAX_BLOCK {
            return Err(IoError::Io);
        }
        if let Some(s) = self.find(block) {
            // Under the fill lock the index is exact: an entry names a slot holding its block.
            if self.meta(s).tag.load(Ordering::Relaxed) == block + 1 {
                return Ok((s, false));
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
        // Zero past a short last page.
        let mut p = [0u64; PAGE_WORDS];
        let from_disk;
        let flags = match fill {
            Fill::Disk => {
                io.read_page_words(block, &mut p)?;
                st.disk_reads.fetch_add(1, Ordering::Relaxed);
                from_disk = true;
                0
            }
            // A whole page written: its bytes go in with the tag, dirty, in the one write that
            // fills the slot. (An earlier version published the slot zeroed and the bytes
            // were written after: a lock-free reader that found the index entry in between read
            // 4 KiB of zeros for a block that never held them.)
            Fill::Bytes(data, is_data) => {
                from_disk = false;
                for (w, c) in p.iter_mut().zip(data.chunks_exact(8)) {
                    *w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                }
                if is_data {
                    DIRTY | DATA
                } else {
                    DIRTY
                }
            }
        };
        // Fill before publishing: a reader that finds the entry finds the page whole. Every
        // part locked and bumped (the tag changes), every word stored, the flags set.
        self.page(s).write_all(|w| {
            w.set_tag(block + 1);
            w.set_words(0, &p);
            for k in w.parts() {
                set_flags(w, k, flags);
            }
        });
        let m = self.meta(s);
        m.referenced.store(1, Ordering::Relaxed);
        m.tag.store(block + 1, Ordering::Relaxed);
        self.index_insert(sw, block, s);
        Ok((s, !from_disk))
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
                // Take the page only if it is clean.
                if self.evict_if_clean(s) {
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
                if !self.is_dirty(s) {
                    continue;
                }
                if want_data.is_some_and(|d| d != self.any_flag(s, DATA)) {
                    continue;
                }
                let tag = self.meta(s).tag.load(Ordering::Relaxed);
                if tag == 0 || only.is_some_and(|(a, b)| tag - 1 < a || tag > b) {
                    continue;
                }
                dirty.try_reserve(1).map_err(|_| IoError::NoMemory)?;
                dirty.push((tag - 1, s));
            }
            dirty.sort_unstable();
            let mut bytes = [0u8; PAGE];
            let mut words = [0u64; PAGE_WORDS];
            for (block, s) in dirty {
                let page = self.page(s);
                // Clear first, part by part: a write that lands after this sets its part's
                // flags again and is written next time; one before it is in the copy below
                // (its flags store was after its data, and this swap acquires it).
                let mut had = 0;
                for k in 0..PARTS {
                    if let Some(f) = page.flags(k) {
                        had |= f.swap(0, Ordering::AcqRel);
                    }
                }
                // The whole page, validated against every part (or under every part's lock).
                if page.read(0, &mut words) != Some(block + 1) {
                    continue;
                }
                for (c, w) in bytes.chunks_exact_mut(8).zip(words.iter()) {
                    c.copy_from_slice(&w.to_le_bytes());
                }
                let n = io.page_len(block).min(PAGE);
                if let Err(e) = io.write_page(block, &bytes[..n]) {
                    // Still to be written (with its class): part 0 carries it.
                    if let Some(f) = page.flags(0) {
                        f.fetch_or(had & (DIRTY | DATA), Ordering::Release);
                    }
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
    #[inline]
    pub fn note_data(&self, block: u64) {
        if let Some(s) = self.find(block) {
            if let Some(f) = self.page(s).flags(0) {
                f.fetch_or(DATA, Ordering::Relaxed);
            }
        }
    }

    /// Dirty pages now.
    pub fn dirty_pages(&self) -> usize {
        (0..self.slots).filter(|&s| self.is_dirty(s)).count()
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
            if self.evict_if_clean(s) {
                m.tag.store(0, Ordering::Relaxed);
                self.index_remove(&mut sw, tag - 1);
            }
        }
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

/// Store `data` at byte `at` of the page (caller: `in_page`, and `p` holds the parts of those
/// bytes), inside a ranged seqlock write: one store per word the bytes cover, whole words as
/// they are, the partly covered first and last words read, merged and stored whole (readers
/// copy words, so a word is the unit a reader sees change). Nothing else of the page is stored.
fn copy_in(p: &mut PartsWriter<'_, PART_WORDS, PARTS>, at: usize, data: &[u8]) {
    let end = at + data.len();
    let mut i = at;
    if !i.is_multiple_of(8) && i < end {
        // The partly covered first word.
        let (k, n) = (i % 8, (8 - i % 8).min(end - i));
        let mut w = p.get(i / 8).unwrap_or(0).to_le_bytes();
        w[k..k + n].copy_from_slice(&data[..n]);
        p.set(i / 8, u64::from_le_bytes(w));
        i += n;
    }
    // Whole words.
    let whole = (end - i) / 8;
    for (k, c) in data[i - at..i - at + whole * 8].chunks_exact(8).enumerate() {
        p.set(i / 8 + k, u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    }
    i += whole * 8;
    if i < end {
        // The partly covered last word.
        let mut w = p.get(i / 8).unwrap_or(0).to_le_bytes();
        w[..end - i].copy_from_slice(&data[i - at..]);
        p.set(i / 8, u64::from_le_bytes(w));
    }
}

/// What fills a slot for a block that is not cached.
enum Fill<'a> {
    /// The block's bytes on the disk.
    Disk,
    /// A whole page the caller writes (`PAGE` bytes), and whether it is file data.
    Bytes(&'a [u8], bool),
}

/// Part `k`'s flags, seen by a writer holding it (0 if it does not).
fn p_flags(p: &PartsWriter<'_, PART_WORDS, PARTS>, k: usize) -> u32 {
    p.flags(k).map_or(0, |f| f.load(Ordering::Acquire))
}

/// Set part `k`'s flags to `v` (a writer holding it).
fn set_flags(p: &PartsWriter<'_, PART_WORDS, PARTS>, k: usize, v: u32) {
    if let Some(f) = p.flags(k) {
        f.store(v, Ordering::Release);
    }
}

/// Mark the parts a writer holds dirty (and file data), inside its write: an evictor checks
/// the flags with every part locked, so it never drops the write. Always a read-modify-write
/// after the data (never skipped when the bit looks set already): a write-back clears the
/// flags with a swap and then copies the page, and it is this release that makes it see the
/// data, or else sets the bit again after the swap.
fn mark_dirty(p: &PartsWriter<'_, PART_WORDS, PARTS>, is_data: bool) {
    let bits = if is_data { DIRTY | DATA } else { DIRTY };
    for k in p.parts() {
        if let Some(f) = p.flags(k) {
            f.fetch_or(bits, Ordering::Release);
        }
    }
}

/// Unit tests of the table's internals (the index); `tests/table.rs` tests it through its
/// public interface.
#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;

    /// Memory for a table (leaked: tables live as long as their mapping, here the test).
    fn table(slots: usize) -> Table {
        let bytes = table_bytes(slots);
        let mem = std::alloc::Layout::from_size_align(bytes, 4096).unwrap();
        // SAFETY: a fresh allocation of `bytes`, 4096-aligned, used only through the table.
        unsafe {
            let base = std::alloc::alloc_zeroed(mem) as usize;
            Table::init(base, bytes, slots).unwrap()
        }
    }

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
        let t = table(1);
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
