//! The per-core heap (global allocator).
//!
//! Core `c` allocates only from its own heap range: a `Span512G` address range at
//! `arena() + (1 + c) * 512 GiB`, held in a per-core share, made at start-up for every
//! online core and linked into the root range of every context of the program (threads
//! included), so a block is readable everywhere but only its owner core maps memory into it.
//!
//! - Small blocks (up to 64 KiB, power-of-two size classes 16..65536) come from chunks: segments of 1 MiB
//!   and up, allocated in the core's share and mapped in its range. Their pages are touched
//!   when the chunk is mapped (the demand-zero faults happen at growth, not inside the code
//!   that first uses a block).
//! - Large blocks get a segment of their own, with one header page in front (the segment id
//!   and length); freeing unmaps and deletes it, so the pages go back to the kernel at once.
//! - A free on the owner core pushes onto the owner's free list: no lock, no atomic
//!   read-modify-write (the state is the owner's alone). A free from another core pushes the
//!   block onto the owner's remote-free list, a lock-free stack (compare-and-swap push);
//!   the owner takes the whole list with one swap (so there is no ABA problem) when its free
//!   list runs dry and in `trim`.
//! - `trim` gives every chunk back when the core's heap is empty (no live block).
//!
//! Contexts started with `cores::Core` see the image read-only and must not allocate.

use crate::layout::{HEAP_CORES, HEAP_SPAN};
use abi::{ArKind, ObjName, ObjectId, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use percore::pad::CachePadded;

const CLASSES: usize = 13;
const MIN_CLASS: usize = 16;
const MAX_SMALL: usize = MIN_CLASS << (CLASSES - 1);
const CHUNK: u64 = 1 << 20;
const MAX_CHUNKS: usize = 48;
/// Tag in a remote-freed block's second word: a large block (else the size class).
const LARGE_TAG: u64 = u64::MAX;
const HOLES: usize = 32;

#[repr(C)]
struct Block {
    next: *mut Block,
    tag: u64,
}

/// Owner-only state of one core's heap.
struct Local {
    free: [*mut Block; CLASSES],
    bump: u64,
    bump_end: u64,
    /// Next free offset in the heap range (addresses are not reused until `trim`).
    next_off: u64,
    /// Blocks handed out and not yet freed (small and large).
    live: u64,
    chunks: [ObjectId; MAX_CHUNKS],
    chunk_off: [u64; MAX_CHUNKS],
    chunk_len: [u64; MAX_CHUNKS],
    nchunks: usize,
    /// Address-space extents of freed large blocks, `(offset, len)`, reused first-fit so
    /// that allocate/free cycles do not walk across the range (new page tables each time).
    holes: [(u64, u64); HOLES],
}

pub struct CoreHeap {
    share: AtomicU64,
    range: AtomicU64,
    remote: AtomicPtr<Block>,
    /// Statistics: local and remote frees seen.
    pub remote_frees: AtomicU64,
    local: UnsafeCell<Local>,
}

// SAFETY: `local` is only touched by the owner core (checked with the context page's core
// index on every entry); the other fields are atomics.
unsafe impl Sync for CoreHeap {}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: CachePadded<CoreHeap> = CachePadded::new(CoreHeap {
    share: AtomicU64::new(0),
    range: AtomicU64::new(0),
    remote: AtomicPtr::new(core::ptr::null_mut()),
    remote_frees: AtomicU64::new(0),
    local: UnsafeCell::new(Local {
        free: [core::ptr::null_mut(); CLASSES],
        bump: 0,
        bump_end: 0,
        next_off: 0,
        live: 0,
        chunks: [0; MAX_CHUNKS],
        chunk_off: [0; MAX_CHUNKS],
        chunk_len: [0; MAX_CHUNKS],
        nchunks: 0,
        holes: [(0, 0); HOLES],
    }),
});

static HEAPS: [CachePadded<CoreHeap>; HEAP_CORES] = [EMPTY; HEAP_CORES];
static NHEAPS: AtomicU64 = AtomicU64::new(0);

/// Base address of core `c`'s heap range.
pub fn window(c: usize) -> u64 {
    crate::ctx::arena() + (1 + c as u64) * HEAP_SPAN
}

/// Cores with a heap range.
pub fn cores() -> usize {
    NHEAPS.load(Ordering::Relaxed) as usize
}

/// `<share, range>` of core `c`'s heap.
pub fn range_of(c: usize) -> ObjName {
    ObjName::new(HEAPS[c].share.load(Ordering::Relaxed), HEAPS[c].range.load(Ordering::Relaxed))
}

/// Set up a heap range for each of `ncores` cores (shares held by `proc_share`) and link
/// them into `root_ar`. Called once by the first context of a program.
pub(crate) fn init(proc_share: ObjectId, root_ar: ObjName, ncores: usize) -> Result<(), abi::Error> {
    let n = ncores.min(HEAP_CORES);
    for c in 0..n {
        let _ = proc_share;
        let share = crate::process::new_share("heap", c as u64)?;
        let range = crate::sys::ar_alloc(share, "heap", c as u64, ArKind::Span512G)?;
        crate::sys::ar_set_ar(root_ar, window(c), ObjName::new(share, range))?;
        HEAPS[c].share.store(share, Ordering::Relaxed);
        HEAPS[c].range.store(range, Ordering::Relaxed);
        NHEAPS.store(c as u64 + 1, Ordering::Release);
    }
    Ok(())
}

/// Map the calling core's first chunk now (start-up), so programs that compare free pages
/// around their work do not count the heap's first growth.
pub(crate) fn pregrow() {
    if let Some(c) = me() {
        // SAFETY: we are core `c`, the owner of `HEAPS[c].local`.
        let l = unsafe { &mut *HEAPS[c].local.get() };
        if l.nchunks == 0 {
            HEAPS[c].grow(l, window(c));
        }
    }
}

/// After cfork: the child's copies of the heap ranges are in `share`, linked in `root_ar`.
pub(crate) fn rebind(share: ObjectId, root_ar: ObjName) -> Result<(), abi::Error> {
    let mut maps = [abi::ArMapping::default(); 96];
    let n = crate::sys::ar_get(root_ar, &mut maps)? as usize;
    for c in 0..cores() {
        let w = window(c);
        if let Some(m) = maps[..n].iter().find(|m| m.voff == w && m.target_type == abi::ObjType::AddressRange as u32) {
            HEAPS[c].share.store(share, Ordering::Relaxed);
            HEAPS[c].range.store(m.target, Ordering::Relaxed);
            // SAFETY: called by the child before anything else runs in its address space;
            // the copied heap state is ours alone now. Chunk segments were copied into
            // `share` under new ids: look them up by offset.
            let l = unsafe { &mut *HEAPS[c].local.get() };
            let mut inner = [abi::ArMapping::default(); MAX_CHUNKS + 64];
            let k = crate::sys::ar_get(ObjName::new(share, m.target), &mut inner).unwrap_or(0) as usize;
            for i in 0..l.nchunks {
                if let Some(im) = inner[..k].iter().find(|im| im.voff == l.chunk_off[i]) {
                    l.chunks[i] = im.target;
                }
            }
        }
    }
    Ok(())
}

fn class_of(size: usize) -> usize {
    let size = size.max(MIN_CLASS).next_power_of_two();
    size.trailing_zeros() as usize - MIN_CLASS.trailing_zeros() as usize
}

/// Which core's heap holds `addr` (None: not a heap address).
fn owner_of(addr: u64) -> Option<usize> {
    let a = crate::ctx::arena();
    if addr < a + HEAP_SPAN {
        return None;
    }
    let c = ((addr - a) / HEAP_SPAN - 1) as usize;
    (c < cores()).then_some(c)
}

fn me() -> Option<usize> {
    if !crate::process::ready() {
        return None;
    }
    let c = crate::ctx::try_ctx()?.core as usize;
    (c < cores()).then_some(c)
}

impl CoreHeap {
    fn name(&self) -> (ObjectId, ObjName) {
        let share = self.share.load(Ordering::Relaxed);
        (share, ObjName::new(share, self.range.load(Ordering::Relaxed)))
    }

    /// Map a new segment of `len` bytes at the next free offset (aligned to `align`).
    fn map_segment(&self, l: &mut Local, len: u64, align: u64, name: &str) -> Option<(ObjectId, u64)> {
        if !memory_for(len) {
            return None;
        }
        let (share, range) = self.name();
        // A hole left by a freed large block, if one fits (first fit, taken whole).
        let hole = l.holes.iter().position(|&(o, hl)| hl >= len && o.is_multiple_of(align.max(PAGE_SIZE)));
        let off = match hole {
            Some(i) => l.holes[i].0,
            None => l.next_off.next_multiple_of(align.max(PAGE_SIZE)),
        };
        // The top of the range is `libos::mman`'s window (anonymous mmap): stay below it.
        if off + len > crate::layout::MMAP_WINDOW_OFF {
            return None;
        }
        let seg = crate::sys::segment_alloc(share, name, MEMID_SELF, len).ok()?;
        let m = SegMapping { voff: off, seg: ObjName::new(share, seg), soff: 0, len, flags: MAP_READ | MAP_WRITE };
        if crate::sys::ar_set_seg(range, &m).is_err() {
            let _ = crate::sys::share_delobj(ObjName::new(share, seg));
            return None;
        }
        match hole {
            Some(i) => l.holes[i] = (0, 0),
            None => l.next_off = off + len,
        }
        Some((seg, off))
    }

    fn grow(&self, l: &mut Local, base: u64) -> bool {
        if l.nchunks == MAX_CHUNKS {
            return false;
        }
        let len = CHUNK << l.nchunks.min(6);
        let Some((seg, off)) = self.map_segment(l, len, PAGE_SIZE, "heap") else { return false };
        let mut p = base + off;
        while p < base + off + len {
            // SAFETY: `p` is in the writable mapping just made; touching it now takes the
            // demand-zero fault at growth time (see the module comment).
            unsafe { core::ptr::write_volatile(p as *mut u8, 0) };
            p += PAGE_SIZE;
        }
        l.chunks[l.nchunks] = seg;
        l.chunk_off[l.nchunks] = off;
        l.chunk_len[l.nchunks] = len;
        l.nchunks += 1;
        l.bump = base + off;
        l.bump_end = base + off + len;
        true
    }

    /// Take the remote-free list and free every block on it locally.
    fn drain(&self, l: &mut Local, base: u64) {
        let mut b = self.remote.swap(core::ptr::null_mut(), Ordering::Acquire);
        while !b.is_null() {
            // SAFETY: blocks on the remote list were pushed by `dealloc` on other cores;
            // the swap above gave us the whole list, so nobody else reads these words.
            let (next, tag) = unsafe { ((*b).next, (*b).tag) };
            if tag == LARGE_TAG {
                self.free_large(l, b as u64);
            } else {
                self.free_small(l, b as *mut u8, tag as usize);
            }
            b = next;
        }
        let _ = base;
    }

    fn alloc_small(&self, l: &mut Local, base: u64, class: usize) -> *mut u8 {
        if l.free[class].is_null() {
            self.drain(l, base);
        }
        let head = l.free[class];
        if !head.is_null() {
            // SAFETY: free-list blocks are heap memory handed back to us; their first word
            // is the link.
            l.free[class] = unsafe { (*head).next };
            l.live += 1;
            return head as *mut u8;
        }
        let size = (MIN_CLASS << class) as u64;
        let mut start = l.bump.next_multiple_of(size);
        if start + size > l.bump_end {
            if !self.grow(l, base) {
                return core::ptr::null_mut();
            }
            start = l.bump.next_multiple_of(size);
        }
        l.bump = start + size;
        l.live += 1;
        start as *mut u8
    }

    fn free_small(&self, l: &mut Local, p: *mut u8, class: usize) {
        let b = p as *mut Block;
        // SAFETY: `p` is a block of class `class` (at least 16 bytes) handed back to us.
        unsafe { (*b).next = l.free[class] };
        l.free[class] = b;
        l.live -= 1;
    }

    fn alloc_large(&self, l: &mut Local, base: u64, layout: Layout) -> *mut u8 {
        let align = (layout.align() as u64).max(PAGE_SIZE);
        let body = (layout.size() as u64).next_multiple_of(PAGE_SIZE);
        if align > PAGE_SIZE {
            // The header page sits right below the (aligned) body: start past a gap.
            l.next_off = (l.next_off + PAGE_SIZE).next_multiple_of(align) - PAGE_SIZE;
            if l.holes.iter().any(|h| h.1 != 0) {
                // Holes are page-aligned only: do not let one be picked for this block.
                let Some((seg, off)) = self.map_fresh(l, body + PAGE_SIZE) else { return core::ptr::null_mut() };
                return self.finish_large(l, base, seg, off, body);
            }
        }
        let Some((seg, off)) = self.map_segment(l, body + PAGE_SIZE, PAGE_SIZE, "heap-large") else { return core::ptr::null_mut() };
        self.finish_large(l, base, seg, off, body)
    }

    fn map_fresh(&self, l: &mut Local, len: u64) -> Option<(ObjectId, u64)> {
        let saved = l.holes;
        l.holes = [(0, 0); HOLES];
        let r = self.map_segment(l, len, PAGE_SIZE, "heap-large");
        l.holes = saved;
        r
    }

    fn finish_large(&self, l: &mut Local, base: u64, seg: ObjectId, off: u64, body: u64) -> *mut u8 {
        let hdr = (base + off) as *mut u64;
        // SAFETY: the header page is the first page of the mapping just made.
        unsafe {
            hdr.write(seg);
            hdr.add(1).write(body + PAGE_SIZE);
        }
        l.live += 1;
        (base + off + PAGE_SIZE) as *mut u8
    }

    fn free_large(&self, l: &mut Local, p: u64) {
        let hdr = (p - PAGE_SIZE) as *const u64;
        // SAFETY: `alloc_large` wrote the segment id and length in the page below `p`.
        let (seg, len) = unsafe { (hdr.read(), hdr.add(1).read()) };
        let (share, range) = self.name();
        let base = p - PAGE_SIZE;
        let off = base - (range_base(self));
        let _ = crate::sys::ar_unmap(range, off, len);
        let _ = crate::sys::share_delobj(ObjName::new(share, seg));
        if off + len == l.next_off {
            l.next_off = off;
        } else if let Some(h) = l.holes.iter_mut().find(|h| h.1 == 0) {
            *h = (off, len);
        }
        l.live -= 1;
    }

    /// Give every chunk back if no block is live. Returns whether the heap is now empty.
    fn trim(&self, l: &mut Local, base: u64) -> bool {
        self.drain(l, base);
        if l.live != 0 {
            return false;
        }
        let (share, range) = self.name();
        for i in 0..l.nchunks {
            let _ = crate::sys::ar_unmap(range, l.chunk_off[i], l.chunk_len[i]);
            let _ = crate::sys::share_delobj(ObjName::new(share, l.chunks[i]));
        }
        l.nchunks = 0;
        l.free = [core::ptr::null_mut(); CLASSES];
        l.bump = 0;
        l.bump_end = 0;
        l.next_off = 0;
        l.holes = [(0, 0); HOLES];
        true
    }
}

/// Pages the heap leaves free when it grows: for the kernel (page tables, objects) and for
/// the per-core frame caches of other cores, which count as free but this core cannot take:
/// up to 64 single frames and the rest of a 2 MiB block being carved (512 pages) per core
/// (kernel `mm/frame.rs`).
const RESERVE_PAGES: u64 = 1024;
const RESERVE_PAGES_PER_CORE: u64 = 64 + 512;

/// Whether the kernel has `len` bytes of free memory to spare for a heap segment. Segments
/// are demand-zero: without this check a program that asks for more than there is gets the
/// segment, and then its context is ended by a page fault on a page the kernel cannot
/// supply. With it the allocation fails (null), which the program can handle (`try_reserve`)
/// or which ends it with the allocation-error panic. That matters most for a program the
/// shell runs on its own core, in the shell's context: a fault there would end the shell
/// too. The check and the use are not atomic: programs on other cores taking memory at the
/// same moment can still make a fault happen.
pub(crate) fn memory_for(len: u64) -> bool {
    let Ok(si) = crate::sys::sys_info() else { return true };
    let reserve = RESERVE_PAGES + RESERVE_PAGES_PER_CORE * si.cores;
    si.free_pages >= len.div_ceil(PAGE_SIZE) + reserve
}

fn range_base(h: &CoreHeap) -> u64 {
    let idx = (h as *const CoreHeap as usize - HEAPS.as_ptr() as usize) / core::mem::size_of::<CachePadded<CoreHeap>>();
    window(idx)
}

/// The segment of a large block (more than 64 KiB, from this allocator): its own segment,
/// which `cfork` can map in a child as it is (`CforkOpts::segments`) instead of copying it.
///
/// # Safety
/// `p` must be a live block this allocator returned for a layout larger than the largest
/// small class (`alloc_large` wrote the segment id in the page below it).
pub(crate) unsafe fn large_block_segment(p: *const u8) -> ObjectId {
    // SAFETY: the caller's contract: the header page below `p` is mapped and holds the id.
    unsafe { ((p as u64 - PAGE_SIZE) as *const u64).read() }
}

/// Blocks larger than this get a segment of their own.
pub const LARGEST_SMALL: usize = MAX_SMALL;

/// Return the calling core's unused heap memory to the kernel if none of its blocks is live
/// (after draining frees other cores sent). Returns whether its heap is empty.
pub fn trim() -> bool {
    let Some(c) = me() else { return true };
    // SAFETY: the owner core (us) is the only one that touches `local`.
    let l = unsafe { &mut *HEAPS[c].local.get() };
    HEAPS[c].trim(l, window(c))
}

/// Blocks the calling core has handed out and not got back (frees other cores sent and
/// this core has not drained yet still count).
pub fn live_blocks() -> u64 {
    let Some(c) = me() else { return 0 };
    // SAFETY: owner-only state, read by the owner.
    unsafe { (*HEAPS[c].local.get()).live }
}

/// Remote frees sent to core `c`'s heap so far.
pub fn remote_frees(c: usize) -> u64 {
    HEAPS.get(c).map(|h| h.remote_frees.load(Ordering::Relaxed)).unwrap_or(0)
}

pub struct Heap;

// SAFETY: `alloc` returns blocks of at least `layout.size()` bytes aligned to
// `layout.align()` (size classes are powers of two aligned to their size; large blocks are
// page-aligned or better) from memory mapped only for the heap, never handed out twice until
// freed. Each core's free lists are touched only by that core; other cores only push onto
// the lock-free remote list.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(c) = me() else { return core::ptr::null_mut() };
        let h = &HEAPS[c];
        // SAFETY: we are core `c`, the only core that touches `HEAPS[c].local`.
        let l = unsafe { &mut *h.local.get() };
        let size = layout.size().max(layout.align());
        if size <= MAX_SMALL {
            h.alloc_small(l, window(c), class_of(size))
        } else {
            h.alloc_large(l, window(c), layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(owner) = owner_of(ptr as u64) else { return };
        let size = layout.size().max(layout.align());
        let tag = if size <= MAX_SMALL { class_of(size) as u64 } else { LARGE_TAG };
        let h = &HEAPS[owner];
        if me() == Some(owner) {
            // SAFETY: we are the owner core.
            let l = unsafe { &mut *h.local.get() };
            if tag == LARGE_TAG {
                h.free_large(l, ptr as u64);
            } else {
                h.free_small(l, ptr, tag as usize);
            }
            return;
        }
        // Remote free: push onto the owner's lock-free list.
        let b = ptr as *mut Block;
        // SAFETY: the block is at least 16 bytes (classes start at 16; a large block's body
        // is a page) and is ours until pushed.
        unsafe { (*b).tag = tag };
        let mut head = h.remote.load(Ordering::Relaxed);
        loop {
            // SAFETY: as above; the block is not visible to anyone before the CAS succeeds.
            unsafe { (*b).next = head };
            match h.remote.compare_exchange_weak(head, b, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(cur) => head = cur,
            }
        }
        h.remote_frees.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(target_os = "none")]
#[global_allocator]
pub static HEAP: Heap = Heap;
