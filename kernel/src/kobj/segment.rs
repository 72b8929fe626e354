//! Segments: physical memory, allocated page by page on first touch (demand-zero) from the
//! NUMA node of the core `memid` named, copied eagerly or copy-on-write.
//!
//! Pages are `KRef<Frame>`: a copy-on-write copy shares the frames, and a write to a frame
//! referenced by more than one segment copies it first. Each segment keeps a reverse map of
//! where it is mapped, so a copy-on-write copy can write-protect the existing mappings.

use alloc::vec::Vec;
use core::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

use super::kref::{KLink, KRef};
use super::share::Peek;
use super::{try_push, KObject, ObjRef};
use crate::mm::{frame, phys_to_virt, PAGE_SIZE};
use crate::mm::nodevec::NodeVec;
use abi::Error;
use percore::TicketLock;

/// Largest segment: 64 GiB (the page vector itself must fit in kernel memory).
pub const MAX_SEGMENT_BYTES: u64 = 64 << 30;

/// One physical page; freed when the last segment holding it lets go.
pub struct Frame {
    pub pa: u64,
}

impl Drop for Frame {
    fn drop(&mut self) {
        frame::free_page(self.pa);
    }
}

/// A place this segment is mapped: `[voff, voff + len)` of an address range, starting at
/// segment offset `soff`. The link to the range writes none of its counts (`KLink`): the
/// range's drop removes this entry (`AddressRange::drop` -> `remove_map`) before its memory
/// can go, so while the entry is here, under the map lock, the range's allocation is alive.
pub struct SegMap {
    pub ar: KLink<KObject>,
    pub ar_key: usize,
    pub voff: u64,
    pub soff: u64,
    pub len: u64,
}

pub struct SegInner {
    nbytes: u64,
    /// From the memory of `memid`'s node, like the pages (`NodeVec`).
    pages: NodeVec<Option<KRef<Frame>>>,
    /// Pins held by devices that DMA into the pages (`pin`): while any is held the pinned
    /// frames stay in place (no shrinking below them, no copy-on-write sharing).
    pins: u32,
    /// The most pages any pin covers (from page 0).
    pinned_pages: usize,
}

pub struct Segment {
    pub node_core: u32,
    /// What readers read without the lock (`nbytes`, the lock-free side of `duplicate` and of
    /// `set_nbytes`' `Busy` check), written only under the lock, on a line apart from it: a
    /// size query or an eager copy writes no line of the segment, so two of them on two cores
    /// (calls that commute) share only lines both read.
    read: ReadLine,
    pub inner: TicketLock<SegInner>,
    /// The reverse map (where the segment is mapped), under a lock of its own on its own
    /// line: making or removing a mapping takes only this lock, so it shares no line with a
    /// grow, which takes only `inner` (issue 19: `segment_set_nbytes` growing x `ar_set_seg` /
    /// `ar_unmap` of one segment). A shrink takes both, `inner` first (it must see every
    /// mapping); so does a copy-on-write copy (it reads the mappings).
    maps: MapLine,
    /// Pages no shrink has gone below: `floor.0` never exceeds the page list's length outside
    /// a shrink (a shrink lowers it, under both locks, before it truncates), and only shrinks
    /// write it. With the map lock held (no shrink running) a mapping ending within it fits,
    /// and a resize below it is a shrink, both known without reading the size, which every
    /// grow writes. Not raised by grows (a later mapping past it reads the size instead).
    floor: Floor,
    /// Per-core counted segments (`refcache`): set (once, SeqCst) by the first count change
    /// on a core other than the segment's origin, before that core writes its delta. While
    /// clear, the origin core's review sums its own table alone (`refcache::review_local`).
    /// On a line of its own: the first remote change writes it, and the origin core reads it
    /// only in its reviews, never in a count change, a borrow or a mapping.
    remote_counts: RemoteLine,
}

#[repr(align(64))]
struct RemoteLine(core::sync::atomic::AtomicBool);

#[repr(align(64))]
struct MapLine(TicketLock<Vec<SegMap>>);

#[repr(align(64))]
struct Floor(AtomicU64);

/// The segment's reader side (a seqlock over the size and the page list, plus summaries).
#[repr(align(64))]
struct ReadLine {
    /// Generation of `nbytes`, the page list's buffer and its slots (which frame each page
    /// is): odd while a writer changes them (under the lock), bumped by two per change.
    seq: AtomicU64,
    /// `SegInner::nbytes`.
    nbytes: AtomicU64,
    /// The page list's buffer (`SegInner::pages.as_ptr()`) and length, as of `seq`.
    pages_ptr: AtomicUsize,
    pages_len: AtomicUsize,
    /// The summaries below on a line of their own: a shrink refused `Busy` reads only them,
    /// so a resize or a write of the pages on another core (which moves `seq`) shares no
    /// line with it.
    summaries: Summaries,
}

#[repr(align(64))]
struct Summaries {
    /// The end of the furthest mapping (`soff + len`, 0 with none): a shrink below it fails
    /// `Busy`. Stored only when it changes, so making a mapping inside it writes no line a
    /// reader reads. Stored under the map lock (the other fields of `ReadLine` under `inner`).
    map_end: AtomicU64,
    /// `SegInner::pinned_pages` (0 while nothing is pinned); stored under `inner`.
    pinned: AtomicU64,
}

impl ReadLine {
    fn new(g: &SegInner) -> ReadLine {
        ReadLine {
            seq: AtomicU64::new(0),
            nbytes: AtomicU64::new(g.nbytes),
            pages_ptr: AtomicUsize::new(g.pages.as_ptr() as usize),
            pages_len: AtomicUsize::new(g.pages.len()),
            summaries: Summaries { map_end: AtomicU64::new(0), pinned: AtomicU64::new(0) },
        }
    }
}

/// A page slot read without the lock must be one word holding the frame's `KRef` pointer
/// (null for an absent page): `KRef` is `repr(transparent)` over a `NonNull`.
const _: () = assert!(core::mem::size_of::<Option<KRef<Frame>>>() == core::mem::size_of::<usize>());

fn pages_for(nbytes: u64) -> u64 {
    nbytes.div_ceil(PAGE_SIZE)
}

/// A zeroed page from the NUMA node of core `home` (the segment's `memid`).
#[inline]
fn zeroed_page(home: u32) -> Result<KRef<Frame>, Error> {
    let pa = frame::alloc_page_for_core(home as usize).ok_or(Error::NoMemory)?;
    // SAFETY: a page we just allocated, mapped in the physical window.
    unsafe { core::ptr::write_bytes(phys_to_virt(pa) as *mut u8, 0, PAGE_SIZE as usize) };
    KRef::try_new_on_node(Frame { pa }, super::node_of_core(home)).map_err(|f| {
        drop(f);
        Error::NoMemory
    })
}

fn copy_of(src: &Frame, home: u32) -> Result<KRef<Frame>, Error> {
    copy_of_pa(src.pa, home)
}

/// A new frame holding a copy of the page at `src_pa`: a page of RAM, in the physical window
/// (the caller keeps it alive, or, for the lock-free copy, checks afterwards that it was).
fn copy_of_pa(src_pa: u64, home: u32) -> Result<KRef<Frame>, Error> {
    let pa = frame::alloc_page_for_core(home as usize).ok_or(Error::NoMemory)?;
    // SAFETY: both are pages of RAM in the physical window and distinct (the new one was just
    // allocated, so it is not the source).
    unsafe {
        core::ptr::copy_nonoverlapping(phys_to_virt(src_pa) as *const u8, phys_to_virt(pa) as *mut u8, PAGE_SIZE as usize)
    };
    KRef::try_new_on_node(Frame { pa }, super::node_of_core(home)).map_err(|f| {
        drop(f);
        Error::NoMemory
    })
}

/// `n` absent pages, the list in the memory of core `home`'s node.
///
/// The capacity is the whole cache lines the buffer takes anyway (`NodeVec` rounds every
/// buffer up to lines), not exactly `n`: a grow within them (a 2-page segment grown to 3)
/// then neither allocates a new list nor frees the old one on the core that made it (a
/// remote free writes that core's per-core free list, which its own next allocation reads:
/// issue 19, `segment_alloc` x `segment_set_nbytes`).
fn page_vec(n: u64, home: u32) -> Result<NodeVec<Option<KRef<Frame>>>, Error> {
    let mut v = NodeVec::new(super::node_of_core(home));
    v.try_reserve(n as usize).map_err(|_| Error::NoMemory)?;
    v.resize_with(n as usize, || None);
    Ok(v)
}

impl Segment {
    pub fn new(nbytes: u64, node_core: u32) -> Result<Segment, Error> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(Error::OutOfRange);
        }
        Ok(Self::from_inner(node_core, SegInner { nbytes, pages: page_vec(pages_for(nbytes), node_core)?, pins: 0, pinned_pages: 0 }))
    }

    fn from_inner(node_core: u32, g: SegInner) -> Segment {
        let floor = Floor(AtomicU64::new(g.pages.len() as u64));
        Segment { node_core, read: ReadLine::new(&g), inner: TicketLock::new(g), maps: MapLine(TicketLock::new(Vec::new())), floor, remote_counts: RemoteLine(core::sync::atomic::AtomicBool::new(false)) }
    }

    /// Whether the pages reach `end` bytes, read without a lock: from the floor, else from the
    /// size (`ar::set_seg`'s check before it takes any lock; `add_map` checks again under the
    /// map lock). A mapping inside the floor reads no line a grow writes.
    pub fn covers(&self, end: u64) -> bool {
        end <= self.floor.0.load(Ordering::Acquire) * PAGE_SIZE || end <= self.nbytes().div_ceil(PAGE_SIZE) * PAGE_SIZE
    }

    /// The flag `refcache` keeps for this segment (see `remote_counts`).
    pub fn remote_counts(&self) -> &core::sync::atomic::AtomicBool {
        &self.remote_counts.0
    }

    pub fn nbytes(&self) -> u64 {
        self.read.nbytes.load(Ordering::Acquire)
    }

    /// A writer (holding the lock) starts changing the size, the page list or a slot: readers
    /// that started before fall back to the lock. Returns the generation for `end_write`.
    fn begin_write(&self) -> u64 {
        let s = self.read.seq.load(Ordering::Relaxed);
        self.read.seq.store(s + 1, Ordering::Relaxed);
        // The odd generation is visible before any change it covers.
        fence(Ordering::Release);
        s
    }

    /// The writer is done: publish the size and the page list (`g` is the locked state), then
    /// the next even generation.
    fn end_write(&self, g: &SegInner, s: u64) {
        self.read.nbytes.store(g.nbytes, Ordering::Relaxed);
        self.read.pages_ptr.store(g.pages.as_ptr() as usize, Ordering::Relaxed);
        self.read.pages_len.store(g.pages.len(), Ordering::Relaxed);
        self.read.seq.store(s + 2, Ordering::Release);
    }

    /// Store the mapping summary if it changed (`maps`: the list under the map lock, the
    /// only writer of `map_end`).
    fn publish_map_end(&self, maps: &[SegMap]) {
        let end = maps.iter().map(|m| m.soff + m.len).max().unwrap_or(0);
        if self.read.summaries.map_end.load(Ordering::Relaxed) != end {
            self.read.summaries.map_end.store(end, Ordering::Release);
        }
    }

    /// Store the pin summary if it changed (`g` is the locked state, the only writer of
    /// `pinned`).
    fn publish_pinned(&self, g: &SegInner) {
        let pinned = if g.pins > 0 { g.pinned_pages as u64 } else { 0 };
        if self.read.summaries.pinned.load(Ordering::Relaxed) != pinned {
            self.read.summaries.pinned.store(pinned, Ordering::Release);
        }
    }

    /// Whether shrinking to `n` pages is refused because a mapping or a pin reaches past it,
    /// read without the lock. Each summary is stored under the lock together with the change
    /// it sums up, so a refusal is right at the moment the summary was read.
    fn shrink_busy_unlocked(&self, n: usize) -> bool {
        (n as u64) * PAGE_SIZE < self.read.summaries.map_end.load(Ordering::Acquire) || (n as u64) < self.read.summaries.pinned.load(Ordering::Acquire)
    }

    pub fn set_nbytes(&self, nbytes: u64) -> Result<(), Error> {
        if nbytes > MAX_SEGMENT_BYTES {
            return Err(Error::OutOfRange);
        }
        let n = pages_for(nbytes) as usize;
        // Below the floor it is a shrink (see `floor`): one under a mapping or a pin fails
        // without taking a lock or reading the size, so two such calls on two cores (they
        // commute), or one and a grow, share no line written. A grow reads neither the
        // summaries nor the map list (it cannot end below a mapping).
        if (n as u64) < self.floor.0.load(Ordering::Acquire) && self.shrink_busy_unlocked(n) {
            return Err(Error::Busy);
        }
        let mut g = self.inner.lock();
        if n > g.pages.len() {
            let extra = n - g.pages.len();
            // `try_reserve` may move the list and free the old buffer: the generation moves
            // first, so a lock-free reader still reading the old buffer gives up before it
            // uses anything it read there.
            let s = self.begin_write();
            let reserved = g.pages.try_reserve(extra);
            if reserved.is_ok() {
                g.pages.resize_with(n, || None);
                g.nbytes = nbytes;
            }
            self.end_write(&g, s);
            reserved.map_err(|_| Error::NoMemory)?;
        } else {
            // A shrink (or a change inside the last page): no mapping may be made or removed
            // meanwhile, so it holds the map lock too (`inner` first, as everywhere).
            let maps = self.maps.0.lock();
            let mapped_end = maps.iter().map(|m| m.soff + m.len).max().unwrap_or(0);
            if (n as u64) * PAGE_SIZE < mapped_end || (g.pins > 0 && n < g.pinned_pages) {
                return Err(Error::Busy);
            }
            // Lowered before the pages go: `add_map`, which trusts it, waits for the map lock.
            if (n as u64) < self.floor.0.load(Ordering::Relaxed) {
                self.floor.0.store(n as u64, Ordering::Release);
            }
            let s = self.begin_write();
            // Frees the pages past the end in place (no allocation; freeing a frame takes
            // only the page allocator's locks).
            g.pages.truncate(n);
            g.nbytes = nbytes;
            self.end_write(&g, s);
            drop(maps);
        }
        Ok(())
    }

    /// Split `[offset, offset + len)` into per-page pieces `(page index, offset in page,
    /// bytes, bytes done before)` after checking it lies inside the segment.
    fn pieces(nbytes: u64, offset: u64, len: usize) -> Result<impl Iterator<Item = (usize, usize, usize, usize)>, Error> {
        let end = offset.checked_add(len as u64).ok_or(Error::OutOfRange)?;
        if end > nbytes {
            return Err(Error::OutOfRange);
        }
        let mut done = 0usize;
        Ok(core::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let pos = offset + done as u64;
            let in_page = (pos % PAGE_SIZE) as usize;
            let n = (PAGE_SIZE as usize - in_page).min(len - done);
            let piece = ((pos / PAGE_SIZE) as usize, in_page, n, done);
            done += n;
            Some(piece)
        }))
    }

    /// Write `data` into the segment at `offset`, allocating pages as needed. For the
    /// kernel's own use (loading programs, start information); bounds are checked.
    pub fn write_bytes(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        let mut g = self.inner.lock();
        let pieces = Self::pieces(g.nbytes, offset, data.len())?;
        // The whole write is one change for lock-free readers: a copy sees all of it or none.
        let s = self.begin_write();
        let r = (|| {
            for (idx, in_page, n, done) in pieces {
                if g.pages[idx].is_none() {
                    g.pages[idx] = Some(zeroed_page(self.node_core)?);
                }
                let pa = g.pages[idx].as_ref().map(|f| f.pa).unwrap_or(0);
                // SAFETY: the page belongs to this segment (held under the lock) and the copy
                // stays within it.
                unsafe { core::ptr::copy_nonoverlapping(data[done..].as_ptr(), (phys_to_virt(pa) as *mut u8).add(in_page), n) };
            }
            Ok(())
        })();
        self.end_write(&g, s);
        r
    }

    /// Read `buf.len()` bytes at `offset` (absent pages read as zero).
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let g = self.inner.lock();
        for (idx, in_page, n, done) in Self::pieces(g.nbytes, offset, buf.len())? {
            match &g.pages[idx] {
                // SAFETY: the page belongs to this segment (held under the lock).
                Some(f) => unsafe { core::ptr::copy_nonoverlapping((phys_to_virt(f.pa) as *const u8).add(in_page), buf[done..].as_mut_ptr(), n) },
                None => buf[done..done + n].fill(0),
            }
        }
        Ok(())
    }

    /// The frame for page `idx`, allocated on first touch, copied first if `write` and it is
    /// shared with another segment. Returns (physical address, may be mapped writable,
    /// whether a copy-on-write copy happened).
    pub fn fault_page(&self, idx: u64, write: bool) -> Result<(u64, bool, bool), Error> {
        let mut g = self.inner.lock();
        let slot = g.pages.get_mut(idx as usize).ok_or(Error::OutOfRange)?;
        let mut copied = false;
        // A new frame in the slot is a change for lock-free readers (`duplicate`): made first,
        // then put in under an odd generation.
        let fresh = match slot {
            None => Some(zeroed_page(self.node_core)?),
            Some(f) if write && KRef::strong_count(f) > 1 => {
                copied = true;
                Some(copy_of(f, self.node_core)?)
            }
            Some(_) => None,
        };
        if let Some(fresh) = fresh {
            let s = self.begin_write();
            // The frame it replaces (a copy-on-write original) is dropped after the generation
            // moves on; a reader that saw it still checks the generation before using it.
            let old = g.pages[idx as usize].replace(fresh);
            self.end_write(&g, s);
            drop(old);
        }
        let f = g.pages[idx as usize].as_ref().ok_or(Error::NoMemory)?;
        Ok((f.pa, KRef::strong_count(f) == 1, copied))
    }

    /// Duplicate: `cow == false` copies every present page now; `cow == true` shares them.
    /// Returns the copy and, for copy-on-write, where this segment is mapped (so the caller
    /// can write-protect those mappings outside this segment's lock).
    ///
    /// Each range comes back borrowed (`Peek::of_link`), not counted: a copy-on-write copy
    /// writes no count line of the ranges it protects. The caller ends the borrows after this
    /// returns (ending one may drop a range whose last reference went meanwhile, and that drop
    /// takes this segment's lock to remove its entry).
    pub fn duplicate(&self, cow: bool, node_core: u32) -> Result<(Segment, Vec<(Peek, u64, u64)>), Error> {
        // An eager copy first tries the reader side, which writes no line of this segment.
        // (A copy-on-write copy of a segment with pages takes a count of every frame and
        // reads the mappings: locked.)
        //
        // A copy-on-write copy of a segment with no page present tries it too (`empty_only`):
        // with no frame there is nothing to share and no mapping can hold a writable entry
        // for one, so the copy is an empty segment of the same size and needs neither the
        // locks nor the mappings (a page a fault puts in after the generation check is the
        // source's own). Issue 19: copies of an untouched segment and their write protection.
        if let Some(r) = self.duplicate_eager_unlocked(node_core, cow) {
            return r.map(|copy| (copy, Vec::new()));
        }
        // Declared before the lock's guard, so dropped after it on every path (see above).
        let mut maps = Vec::new();
        let g = self.inner.lock();
        // A pinned page is written by a device behind the page tables' back: sharing it
        // copy-on-write would let that write reach the copy.
        if cow && g.pins > 0 {
            return Err(Error::Busy);
        }
        let mut pages = page_vec(g.pages.len() as u64, node_core)?;
        for (i, p) in g.pages.iter().enumerate() {
            if let Some(f) = p {
                pages[i] = Some(if cow { f.clone() } else { copy_of(f, node_core)? });
            }
        }
        if cow {
            // Under the map lock, after the frames were shared above: a mapping made before
            // this is in the list (and gets write-protected by the caller); one made after it
            // faults its pages in later and finds them shared (`fault_page` maps a shared
            // frame read-only), so none is missed although `add_map` does not take `inner`.
            let list = self.maps.0.lock();
            maps.try_reserve(list.len()).map_err(|_| Error::NoMemory)?;
            for m in list.iter() {
                // SAFETY: the entry is in the map list and the lock is held, so the range's
                // drop has not removed it yet and its allocation is alive (`SegMap`).
                if let Some(p) = unsafe { Peek::of_link(&m.ar) } {
                    maps.push((p, m.voff, m.len));
                }
            }
        }
        let copy = Self::from_inner(node_core, SegInner { nbytes: g.nbytes, pages, pins: 0, pinned_pages: 0 });
        Ok((copy, maps))
    }

    /// Whether the generation is still `g1` (every read since then saw one state).
    fn unchanged_since(&self, g1: u64) -> bool {
        // Reads before this check are ordered before the generation load.
        fence(Ordering::Acquire);
        self.read.seq.load(Ordering::Relaxed) == g1
    }

    /// An eager copy without the lock (seqlock reader): `None` if a writer was active or
    /// intervened (the caller takes the lock), else the copy or an allocation error. Writes no
    /// line of this segment, so copies of one source on several cores do not conflict.
    ///
    /// Every address it dereferences was, at a generation check made before the dereference,
    /// part of this segment (the page list's buffer, a slot's `Inner<Frame>`, a frame): heap
    /// and frames are in the physical window, which stays mapped after a free, so a value read
    /// after a writer freed it is garbage but never a fault, and the final check throws away
    /// a copy made from it (its new pages are freed by the drop). Slots are read with atomic
    /// word loads while writers store them plainly under the lock (the kernel's seqlock
    /// pattern: x86-64 word stores are single-copy atomic; a racing value is never used
    /// unchecked). The writers' side of the rule: every writer moves the generation before
    /// it frees anything a reader may dereference (the list's old buffer in `set_nbytes`'
    /// grow, frames and their records in its shrink, a replaced frame in `fault_page`).
    /// With `empty_only` it gives up (`None`) at the first present page instead of copying.
    fn duplicate_eager_unlocked(&self, node_core: u32, empty_only: bool) -> Option<Result<Segment, Error>> {
        let r = &self.read;
        let g1 = r.seq.load(Ordering::Acquire);
        if g1 & 1 != 0 {
            return None;
        }
        let nbytes = r.nbytes.load(Ordering::Relaxed);
        let ptr = r.pages_ptr.load(Ordering::Relaxed) as *const AtomicUsize;
        let len = r.pages_len.load(Ordering::Relaxed);
        // The buffer, its length and the size belong together only if nothing changed.
        if !self.unchanged_since(g1) || len as u64 != pages_for(nbytes) {
            return None;
        }
        let mut pages = match page_vec(len as u64, node_core) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        for (i, out) in pages.iter_mut().enumerate() {
            // SAFETY: `i < len`, and at the check above `ptr` was the live buffer of `len`
            // slots (a freed buffer stays mapped: see the function's comment). A slot is one
            // pointer-sized word (const assertion at `ReadLine`), aligned as a pointer.
            let raw = unsafe { (*ptr.add(i)).load(Ordering::Relaxed) };
            if raw == 0 {
                continue;
            }
            if empty_only {
                return None; // a present page: a copy-on-write copy shares it, under the lock
            }
            // The slot held a live frame reference at this check.
            if !self.unchanged_since(g1) {
                return None;
            }
            // SAFETY: `raw` was this segment's `KRef<Frame>` pointer at the check (the slot
            // word is `KRef`'s `NonNull`), so its allocation is kernel heap memory; a volatile
            // read of the plain `u64` there cannot fault even if it was freed since.
            let pa = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*KRef::<Frame>::raw_value_ptr(raw as *mut ())).pa)) };
            // The frame was still this segment's when its address was read.
            if !self.unchanged_since(g1) {
                return None;
            }
            match copy_of_pa(pa, node_core) {
                Ok(f) => *out = Some(f),
                Err(e) => return Some(Err(e)),
            }
        }
        // Nothing changed while the frames were copied: the copy is of one state.
        if !self.unchanged_since(g1) {
            return None;
        }
        Some(Ok(Self::from_inner(node_core, SegInner { nbytes, pages, pins: 0, pinned_pages: 0 })))
    }

    /// `duplicate_eager_unlocked` for the kernel tests (it must succeed while the lock is
    /// held by someone else).
    pub fn copy_without_lock(&self, node_core: u32) -> Option<Result<Segment, Error>> {
        self.duplicate_eager_unlocked(node_core, false)
    }

    /// The copy-on-write form (`empty_only`) for the kernel tests: a copy while no page is
    /// present, `None` once one is.
    pub fn cow_copy_without_lock(&self, node_core: u32) -> Option<Result<Segment, Error>> {
        self.duplicate_eager_unlocked(node_core, true)
    }

    /// The same, started while a writer (this test, holding the lock) is between
    /// `begin_write` and `end_write`: must give up (`None`), freeing what it made.
    pub fn copy_without_lock_during_write(&self, node_core: u32) -> Option<Result<Segment, Error>> {
        let g = self.inner.lock();
        let s = self.begin_write();
        let r = self.duplicate_eager_unlocked(node_core, false);
        self.end_write(&g, s);
        r
    }

    /// Record a mapping of `[m.soff, m.soff + m.len)`. `OutOfRange` if that reaches past the
    /// segment's pages: checked here, under the map lock a shrink holds, because the caller's
    /// own check (`ar::set_seg_peeked`) is made without it, and a shrink between the two
    /// would otherwise leave a mapping past the end. Takes only the map lock: with it held no
    /// shrink runs, so the pages reach the floor and the published list length (a grow
    /// publishes the length only after the pages are there).
    pub fn add_map(&self, m: SegMap) -> Result<(), Error> {
        let mut maps = self.maps.0.lock();
        let end = m.soff.checked_add(m.len).ok_or(Error::OutOfRange)?;
        if end > self.floor.0.load(Ordering::Acquire) * PAGE_SIZE && end > self.read.pages_len.load(Ordering::Acquire) as u64 * PAGE_SIZE {
            return Err(Error::OutOfRange);
        }
        try_push(&mut maps, m)?;
        self.publish_map_end(&maps);
        Ok(())
    }

    /// Forget the mapping of address range `ar_key` at `voff`.
    pub fn remove_map(&self, ar_key: usize, voff: u64) {
        let mut maps = self.maps.0.lock();
        if let Some(i) = maps.iter().position(|m| m.ar_key == ar_key && m.voff == voff) {
            let m = maps.swap_remove(i);
            self.publish_map_end(&maps);
            drop(maps);
            drop(m);
        }
    }

    /// Run `f` on page `idx` seen as 512 atomic words (allocated if absent), under the
    /// segment's lock so the page is neither freed nor replaced meanwhile. For kernel code
    /// that shares memory with user mode through a segment (a syscall ring, which user mode
    /// writes through its own mapping at the same time, hence atomics). `OutOfRange` past the
    /// end; `Busy` if the page is shared copy-on-write with another segment: the kernel never
    /// writes into a page another segment sees.
    pub fn with_shared_page<R>(&self, idx: u64, f: impl FnOnce(&[core::sync::atomic::AtomicU64; 512]) -> R) -> Result<R, Error> {
        let mut g = self.inner.lock();
        let slot = g.pages.get_mut(idx as usize).ok_or(Error::OutOfRange)?;
        if slot.is_none() {
            let fresh = zeroed_page(self.node_core)?;
            let s = self.begin_write();
            g.pages[idx as usize] = Some(fresh);
            self.end_write(&g, s);
        }
        let f_ref = g.pages[idx as usize].as_ref().ok_or(Error::NoMemory)?;
        if KRef::strong_count(f_ref) > 1 {
            return Err(Error::Busy);
        }
        // SAFETY: the frame belongs to this segment alone (count 1) and cannot go while we hold
        // the lock; it is a whole 4 KiB page in the physical window, suitably aligned, and
        // every access through the view is atomic (user mode writes it concurrently).
        let words = unsafe { &*(phys_to_virt(f_ref.pa) as *const [core::sync::atomic::AtomicU64; 512]) };
        Ok(f(words))
    }

    /// Pin the first `npages` pages for a device: allocate the absent ones and return each
    /// page's physical address. Until `unpin`, none of those frames is freed or replaced
    /// (shrinking below them and copy-on-write copies are `Busy`), so the device may keep the
    /// addresses. `OutOfRange` if the segment is shorter; `Busy` if a page is shared
    /// copy-on-write with another segment already (a device write would reach it).
    pub fn pin(&self, npages: usize) -> Result<Vec<u64>, Error> {
        let mut g = self.inner.lock();
        if npages > g.pages.len() {
            return Err(Error::OutOfRange);
        }
        let mut pas = Vec::new();
        pas.try_reserve_exact(npages).map_err(|_| Error::NoMemory)?;
        for i in 0..npages {
            if g.pages[i].is_none() {
                let fresh = zeroed_page(self.node_core)?;
                let s = self.begin_write();
                g.pages[i] = Some(fresh);
                self.end_write(&g, s);
            }
            let f = g.pages[i].as_ref().ok_or(Error::NoMemory)?;
            if KRef::strong_count(f) > 1 {
                return Err(Error::Busy);
            }
            pas.push(f.pa);
        }
        g.pins = g.pins.checked_add(1).ok_or(Error::Busy)?;
        g.pinned_pages = g.pinned_pages.max(npages);
        self.publish_pinned(&g);
        Ok(pas)
    }

    /// Give back a pin taken by `pin`.
    pub fn unpin(&self) {
        let mut g = self.inner.lock();
        g.pins = g.pins.saturating_sub(1);
        if g.pins == 0 {
            g.pinned_pages = 0;
        }
        self.publish_pinned(&g);
    }

    /// Where the page list is (for the test that it is on `memid`'s node).
    pub fn page_list_addr(&self) -> u64 {
        self.inner.lock().pages.as_ptr() as u64
    }

    pub fn resident_pages(&self) -> usize {
        self.inner.lock().pages.iter().filter(|p| p.is_some()).count()
    }
}

/// Look up the segment behind an object.
pub fn of(obj: &ObjRef) -> Result<&Segment, Error> {
    obj.as_segment()
}

// Session 12 (issue 19, helper segshare): a mapping's reverse link writes no count of the
// range, and the range's drop removes it.
mod segshare_tests {
    use super::*;
    use crate::{kassert, ktest};

    ktest! {
    fn segment_reverse_link_counts_nothing() {
        use crate::kobj::ar::{self, AddressRange};
        use crate::kobj::{Kind, KObject};
        use abi::{ArKind, MAP_READ, MAP_WRITE};
        let err = |e: Error| alloc::format!("{e:?}");
        let before = crate::tests::quiescent_counts();
        let me = crate::percpu::current_index() as u32;
        let seg = KObject::create(b"ktest-link-seg", me, Kind::Segment(Segment::new(2 * PAGE_SIZE, me).map_err(err)?)).map_err(err)?;
        let range = KObject::create(b"ktest-link-ar", me, Kind::Ar(AddressRange::new(ArKind::Span2M, me).map_err(err)?)).map_err(err)?;
        let (strong0, weak0) = (KRef::strong_count(&range), KRef::weak_count(&range));
        ar::set_seg(&range, 0, &seg, 0, 2 * PAGE_SIZE, MAP_READ | MAP_WRITE).map_err(err)?;
        let (strong1, weak1) = (KRef::strong_count(&range), KRef::weak_count(&range));
        kassert!((strong1, weak1) == (strong0, weak0), "mapping changed the range's counts: ({strong0}, {weak0}) -> ({strong1}, {weak1})");
        // No page present yet: a copy-on-write copy is an empty segment of the same size,
        // made without the locks, with no mapping to protect.
        {
            let s = seg.as_segment().map_err(err)?;
            let copy = s.cow_copy_without_lock(me).ok_or("the copy of an untouched segment gave up")?.map_err(err)?;
            kassert!(copy.nbytes() == 2 * PAGE_SIZE && copy.resident_pages() == 0, "the empty copy has {} bytes, {} pages", copy.nbytes(), copy.resident_pages());
            let (copy2, maps) = s.duplicate(true, me).map_err(err)?;
            kassert!(maps.is_empty(), "a copy of an untouched segment gave {} mappings to protect", maps.len());
            drop((copy, copy2, maps));
            // With a page present it gives up: that copy shares the frame, under the lock.
            s.write_bytes(0, b"x").map_err(err)?;
            let r = s.cow_copy_without_lock(me);
            kassert!(r.is_none(), "the lock-free copy-on-write copy went on past a present page");
            drop(r);
        }
        {
            // A copy-on-write copy finds the range through the link, borrowed: no count moves.
            let (copy, maps) = seg.as_segment().map_err(err)?.duplicate(true, me).map_err(err)?;
            kassert!(maps.len() == 1, "{} mappings found, expected 1", maps.len());
            let (p, voff, len) = &maps[0];
            kassert!(p.is(&range) && *voff == 0 && *len == 2 * PAGE_SIZE, "the mapping found is not the range's");
            let strong2 = KRef::strong_count(&range);
            kassert!(strong2 == strong0, "the copy took a count of the range: {strong0} -> {strong2}");
            drop(maps);
            drop(copy);
        }
        // The range goes first: its drop removes the entry, so the segment no longer names it
        // (a copy-on-write copy would otherwise follow a link to freed memory).
        drop(range);
        crate::kobj::share::reclaim_all();
        let (copy, maps) = seg.as_segment().map_err(err)?.duplicate(true, me).map_err(err)?;
        kassert!(maps.is_empty(), "{} mappings left after the range's drop", maps.len());
        let r = seg.as_segment().map_err(err)?.set_nbytes(0);
        kassert!(r.is_ok(), "shrinking after the range's drop gave {r:?}");
        drop(maps);
        drop(copy);
        drop(seg);
        crate::tests::nothing_leaked_since(before)
    }
    }
    ktest! {
    fn segment_mappings_race_resizes() {
        // Mappings (`add_map` / `remove_map`: the map lock only, the fit read from the floor)
        // race resizes (a grow takes `inner` only; a shrink takes both and lowers the floor
        // first). While a mapping of page 1 is recorded the segment must keep its 2 pages:
        // a shrink to 1 page meanwhile is refused `Busy`, and a mapping made after a shrink
        // is refused `OutOfRange`. With one core the two sides alternate on it.
        use core::sync::atomic::AtomicBool;
        use crate::kobj::Kind;
        let err = |e: Error| alloc::format!("{e:?}");
        let before = crate::tests::quiescent_counts();
        let seg = Segment::new(2 * PAGE_SIZE, 0).map_err(err)?;
        let holder = KObject::create(b"ktest-race-map", 0, Kind::Segment(Segment::new(0, 0).map_err(err)?)).map_err(err)?;
        let link = || KLink::from_raw(KRef::as_raw(&holder));
        let (bad, mapped, refused, shrunk) = (AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0));
        let done = AtomicBool::new(false);
        let map_once = || {
            let Some(ar) = link() else { return };
            match seg.add_map(SegMap { ar, ar_key: 7, voff: 0, soff: PAGE_SIZE, len: PAGE_SIZE }) {
                Ok(()) => {
                    mapped.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..2 {
                        if seg.nbytes() < 2 * PAGE_SIZE {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                        core::hint::spin_loop();
                    }
                    seg.remove_map(7, 0);
                    // Unmapped for a while: room for the other core's shrink.
                    for _ in 0..500 {
                        core::hint::spin_loop();
                    }
                }
                Err(Error::OutOfRange) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
            }
        };
        let resize_once = || {
            match seg.set_nbytes(PAGE_SIZE) {
                Ok(()) => {
                    shrunk.fetch_add(1, Ordering::Relaxed);
                    // Shrunk for a while: room for the other core's (refused) mapping.
                    for _ in 0..500 {
                        core::hint::spin_loop();
                    }
                }
                Err(Error::Busy) => {}
                Err(_) => {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
            }
            if seg.set_nbytes(2 * PAGE_SIZE).is_err() {
                bad.fetch_add(1, Ordering::Relaxed);
            }
        };
        let cores = crate::percpu::online_count();
        crate::smp::run_on_all(&|i| {
            if cores == 1 {
                for k in 0..2000 {
                    resize_once();
                    if k % 2 == 0 {
                        // Between a shrink and the grow back: the mapping must not fit.
                        let _ = seg.set_nbytes(PAGE_SIZE);
                    }
                    map_once();
                }
            } else if i == 0 {
                let deadline = crate::time::Deadline::after_ms(400);
                let mut n = 0;
                while !deadline.expired() || n < 500 {
                    resize_once();
                    n += 1;
                }
                done.store(true, Ordering::Release);
            } else if i == 1 {
                while !done.load(Ordering::Acquire) {
                    map_once();
                }
            }
        });
        let (bad, mapped, refused, shrunk) = (bad.into_inner(), mapped.into_inner(), refused.into_inner(), shrunk.into_inner());
        kassert!(bad == 0, "{bad} wrong outcomes ({mapped} mapped, {refused} refused, {shrunk} shrinks)");
        kassert!(mapped > 0 && shrunk > 0, "the race never mapped ({mapped}) or never shrank ({shrunk})");
        drop(seg);
        drop(holder);
        crate::tests::nothing_leaked_since(before)
    }
    }
}
