//! Physical frames: one buddy pool per NUMA node, and in front of it a per-core cache of
//! 4 KiB frames. The common path (allocate or free one page on the core that owns it)
//! touches only the calling core's cache line.
//!
//! A core refills its cache by taking one whole 2 MiB block (`CARVE_ORDER`) from its node's
//! pool and handing its pages out one by one itself (the *carve*), without touching their
//! memory: the pool's lock, its list heads and the free-list links inside free blocks are
//! touched once per 512 pages, not once per page, so the pool's lines cross cores once per
//! 2 MiB a core allocates. Only when the pool has no block of at least `MIN_CARVE_ORDER`
//! (fragmented or nearly full memory) does a refill take `CACHE_BATCH` single frames off the
//! shared lists as before. Freed pages go onto the core's stack of frames (up to
//! `CACHE_CAPACITY`; past that `CACHE_BATCH` go back to the pool under one lock).
//!
//! Frames are 4 KiB (order 0) and 2 MiB (order 9); any order up to `MAX_ORDER` works.
//! The exact number of free pages is the node pools' counts plus every core's cache count
//! (its stack and what is left of its carve).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{phys_to_virt, PAGE_SIZE};
use crate::arch::x86_64::acpi::MAX_NODES;
use crate::percpu::CoreSlots;
use percore::{CachePadded, TicketLock, MAX_CORES};

pub const MAX_ORDER: usize = 10;
pub const LARGE_ORDER: usize = 9;
/// Per-core cache capacity and the batch moved to/from the node pool at a time.
pub const CACHE_CAPACITY: usize = 64;
pub const CACHE_BATCH: usize = 32;
/// A refill takes a block of this order from the pool and carves it locally (2 MiB).
pub const CARVE_ORDER: usize = LARGE_ORDER;
/// The smallest block worth carving; below it a refill takes `CACHE_BATCH` single frames.
pub const MIN_CARVE_ORDER: usize = 5;

const NONE: u64 = u64::MAX;
/// `state[pfn - base]`: FREE_HEAD | order for the first page of a free block; NOT_FREE else.
const NOT_FREE: u8 = 0xFF;
const FREE_HEAD: u8 = 0x80;

/// Intrusive links kept in the first bytes of each free block.
#[repr(C)]
struct FreeLink {
    next: u64,
    prev: u64,
}

struct Buddy {
    base_pfn: u64,
    span: u64,
    state: *mut u8,
    heads: [u64; MAX_ORDER + 1],
    free_pages: u64,
    total_pages: u64,
}

// SAFETY: `state` points at memory owned by this pool; access is serialised by the lock.
unsafe impl Send for Buddy {}

impl Buddy {
    const fn empty() -> Self {
        Self { base_pfn: 0, span: 0, state: core::ptr::null_mut(), heads: [NONE; MAX_ORDER + 1], free_pages: 0, total_pages: 0 }
    }

    fn contains(&self, pfn: u64) -> bool {
        self.span > 0 && pfn >= self.base_pfn && pfn < self.base_pfn + self.span
    }

    fn state(&self, pfn: u64) -> u8 {
        // SAFETY: callers check `contains(pfn)`; the state array covers the whole span.
        unsafe { *self.state.add((pfn - self.base_pfn) as usize) }
    }

    fn set_state(&mut self, pfn: u64, v: u8) {
        // SAFETY: as for `state`.
        unsafe { *self.state.add((pfn - self.base_pfn) as usize) = v }
    }

    fn link(pfn: u64) -> *mut FreeLink {
        phys_to_virt(pfn * PAGE_SIZE) as *mut FreeLink
    }

    fn push(&mut self, pfn: u64, order: usize) {
        let head = self.heads[order];
        // SAFETY: the block at pfn is free and owned by this pool, so its first bytes are ours
        // to use as links; `head`, if any, is another free block of this pool.
        unsafe {
            (*Self::link(pfn)).next = head;
            (*Self::link(pfn)).prev = NONE;
            if head != NONE {
                (*Self::link(head)).prev = pfn;
            }
        }
        self.heads[order] = pfn;
        self.set_state(pfn, FREE_HEAD | order as u8);
    }

    fn unlink(&mut self, pfn: u64, order: usize) {
        // SAFETY: pfn is the head of a free block on list `order` (checked by the caller via
        // `state`), so its links are valid.
        unsafe {
            let FreeLink { next, prev } = core::ptr::read(Self::link(pfn));
            if prev != NONE {
                (*Self::link(prev)).next = next;
            } else {
                self.heads[order] = next;
            }
            if next != NONE {
                (*Self::link(next)).prev = prev;
            }
        }
        self.set_state(pfn, NOT_FREE);
    }

    fn alloc(&mut self, order: usize) -> Option<u64> {
        let mut o = order;
        while o <= MAX_ORDER && self.heads[o] == NONE {
            o += 1;
        }
        if o > MAX_ORDER {
            return None;
        }
        let pfn = self.heads[o];
        self.unlink(pfn, o);
        // Split down, returning the upper halves to the free lists.
        while o > order {
            o -= 1;
            self.push(pfn + (1 << o), o);
        }
        self.free_pages -= 1 << order;
        Some(pfn)
    }

    /// A block for a core to carve: of order `max` if the pool can give one, else the
    /// largest free block of order at least `min`. Returns its first frame and order.
    fn alloc_carve(&mut self, max: usize, min: usize) -> Option<(u64, usize)> {
        if (max..=MAX_ORDER).any(|o| self.heads[o] != NONE) {
            return self.alloc(max).map(|pfn| (pfn, max));
        }
        let order = (min..max).rev().find(|&o| self.heads[o] != NONE)?;
        self.alloc(order).map(|pfn| (pfn, order))
    }

    fn free(&mut self, mut pfn: u64, mut order: usize) {
        self.free_pages += 1 << order;
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            if !self.contains(buddy) || self.state(buddy) != FREE_HEAD | order as u8 {
                break;
            }
            self.unlink(buddy, order);
            pfn = pfn.min(buddy);
            order += 1;
        }
        self.push(pfn, order);
    }
}

struct NodePool {
    buddy: TicketLock<Buddy>,
}

static NODES: [CachePadded<NodePool>; MAX_NODES] =
    [const { CachePadded::new(NodePool { buddy: TicketLock::new(Buddy::empty()) }) }; MAX_NODES];
static NODE_COUNT: AtomicUsize = AtomicUsize::new(1);

/// Which node owns which physical range, for frees.
#[derive(Clone, Copy)]
struct Span {
    start_pfn: u64,
    end_pfn: u64,
    node: u32,
}
const MAX_SPANS: usize = 256;
struct SpanTable {
    spans: [Span; MAX_SPANS],
    count: usize,
}
struct SpanCell(UnsafeCell<SpanTable>);
// SAFETY: written only during single-threaded boot (`init`), read-only afterwards.
unsafe impl Sync for SpanCell {}
static SPANS: SpanCell = SpanCell(UnsafeCell::new(SpanTable {
    spans: [Span { start_pfn: 0, end_pfn: 0, node: 0 }; MAX_SPANS],
    count: 0,
}));

fn spans() -> &'static [Span] {
    // SAFETY: see SpanCell; after boot the table is immutable.
    let t = unsafe { &*SPANS.0.get() };
    &t.spans[..t.count]
}

pub fn node_of(pa: u64) -> Option<usize> {
    let pfn = pa / PAGE_SIZE;
    spans().iter().find(|s| pfn >= s.start_pfn && pfn < s.end_pfn).map(|s| s.node as usize)
}

pub fn node_count() -> usize {
    NODE_COUNT.load(Ordering::Relaxed)
}

/// A usable physical range assigned to a node.
#[derive(Clone, Copy, Debug)]
pub struct NodeRange {
    pub start: u64,
    pub end: u64,
    pub node: u32,
}

/// Build the node pools from page-aligned, non-overlapping ranges. Single-threaded boot only.
/// Returns the number of pages put into the pools.
pub fn init(ranges: &[NodeRange], nodes: usize) -> Result<u64, &'static str> {
    NODE_COUNT.store(nodes.max(1), Ordering::Relaxed);
    crate::arch::x86_64::paging::set_table_frames(alloc_page_for_core, free_page);
    // SAFETY: single-threaded boot; nothing reads SPANS yet.
    let table = unsafe { &mut *SPANS.0.get() };
    let mut total = 0;
    for node in 0..nodes.max(1) {
        let mine = ranges.iter().filter(|r| r.node as usize == node && r.end > r.start);
        let (lo, hi) = mine.clone().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.start), hi.max(r.end)));
        if hi == 0 {
            continue;
        }
        let (base_pfn, span) = (lo / PAGE_SIZE, (hi - lo) / PAGE_SIZE);
        // The state array comes out of the node's largest range.
        let meta_bytes = (span + PAGE_SIZE - 1) & !(PAGE_SIZE - 1);
        let host = mine.clone().max_by_key(|r| r.end - r.start).ok_or("no memory range")?;
        if host.end - host.start <= meta_bytes {
            return Err("node has too little memory for its page map");
        }
        let state = phys_to_virt(host.start) as *mut u8;
        // SAFETY: [host.start, host.start + meta_bytes) is usable RAM in the physical window that
        // no one else owns (it is excluded from the free lists below).
        unsafe { core::ptr::write_bytes(state, NOT_FREE, span as usize) };
        let mut b = NODES[node].buddy.lock();
        *b = Buddy { base_pfn, span, state, heads: [NONE; MAX_ORDER + 1], free_pages: 0, total_pages: 0 };
        for r in mine {
            let start = if r.start == host.start { r.start + meta_bytes } else { r.start };
            let (mut pfn, end_pfn) = (start / PAGE_SIZE, r.end / PAGE_SIZE);
            if table.count < MAX_SPANS {
                table.spans[table.count] = Span { start_pfn: pfn, end_pfn, node: node as u32 };
                table.count += 1;
            }
            while pfn < end_pfn {
                // Largest aligned block that fits.
                let mut order = MAX_ORDER;
                while order > 0 && (pfn & ((1 << order) - 1) != 0 || pfn + (1 << order) > end_pfn) {
                    order -= 1;
                }
                b.free(pfn, order);
                b.total_pages += 1 << order;
                pfn += 1 << order;
            }
        }
        total += b.free_pages;
    }
    Ok(total)
}

/// Per-core cache of order-0 frames: a stack of single frames (`frames[..count]`) and the
/// rest of the block being carved (`carve_next..carve_end`, physical addresses; empty when
/// equal). Only its owner changes them, with interrupts off; they are atomic so other cores
/// can read the exact free total.
pub struct FrameCache {
    frames: UnsafeCell<[u64; CACHE_CAPACITY]>,
    count: AtomicUsize,
    carve_next: AtomicU64,
    carve_end: AtomicU64,
}

// SAFETY: `frames` is only accessed by the owning core with interrupts disabled.
unsafe impl Sync for FrameCache {}

/// Every core's frame cache, each on its own cache lines (the allocator owns them; the per-CPU
/// area knows nothing of them).
static FRAME_CACHES: CoreSlots<FrameCache> = CoreSlots::new([const { CachePadded::new(FrameCache::new()) }; MAX_CORES]);

impl FrameCache {
    pub const fn new() -> Self {
        Self { frames: UnsafeCell::new([0; CACHE_CAPACITY]), count: AtomicUsize::new(0), carve_next: AtomicU64::new(0), carve_end: AtomicU64::new(0) }
    }

    /// Free pages this cache holds: its stack and the uncarved rest of its block. Exact
    /// when its owner is not allocating at the same moment.
    pub fn len(&self) -> usize {
        let carved_left = self.carve_end.load(Ordering::Relaxed).saturating_sub(self.carve_next.load(Ordering::Relaxed)) / PAGE_SIZE;
        self.count.load(Ordering::Relaxed) + carved_left as usize
    }
}

/// Fault injection for allocation-failure tests (see `mm::inject`).
pub fn set_fail_one_in(n: u64) {
    super::inject::set_fail_one_in(n);
}

fn injected_failure() -> bool {
    super::inject::should_fail()
}

fn local_node() -> usize {
    crate::percpu::this().node as usize
}

/// Allocate `order` contiguous frames from the pools, local node first, then the others.
fn pool_alloc(order: usize) -> Option<u64> {
    let nodes = node_count();
    let home = local_node();
    (0..nodes).map(|i| (home + i) % nodes).find_map(|n| NODES[n].buddy.lock_irqsave().alloc(order)).map(|pfn| pfn * PAGE_SIZE)
}

fn pool_free(pa: u64, order: usize) {
    let node = node_of(pa).unwrap_or(0);
    NODES[node].buddy.lock_irqsave().free(pa / PAGE_SIZE, order);
}

/// Allocate one 4 KiB frame (its contents are whatever the last owner left); returns its
/// physical address.
pub fn alloc_page() -> Option<u64> {
    if injected_failure() {
        return None;
    }
    let cache = FRAME_CACHES.this();
    crate::arch::x86_64::cpu::without_interrupts(|| {
        // SAFETY: only this core touches its cache, and interrupts are off.
        let frames = unsafe { &mut *cache.frames.get() };
        let mut n = cache.count.load(Ordering::Relaxed);
        if n == 0 {
            let (next, end) = (cache.carve_next.load(Ordering::Relaxed), cache.carve_end.load(Ordering::Relaxed));
            if next < end {
                cache.carve_next.store(next + PAGE_SIZE, Ordering::Relaxed);
                return Some(next);
            }
            // Refill under one lock acquisition, local node first: a block to carve if the
            // pool has one, else a batch of single frames.
            let nodes = node_count();
            let home = local_node();
            for i in 0..nodes {
                let mut b = NODES[(home + i) % nodes].buddy.lock();
                if let Some((pfn, order)) = b.alloc_carve(CARVE_ORDER, MIN_CARVE_ORDER) {
                    drop(b);
                    let pa = pfn * PAGE_SIZE;
                    // The first page is the caller's; the rest is this core's to carve.
                    cache.carve_end.store(pa + (PAGE_SIZE << order), Ordering::Relaxed);
                    cache.carve_next.store(pa + PAGE_SIZE, Ordering::Relaxed);
                    return Some(pa);
                }
                while n < CACHE_BATCH {
                    match b.alloc(0) {
                        Some(pfn) => {
                            frames[n] = pfn * PAGE_SIZE;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n > 0 {
                    break;
                }
            }
            if n == 0 {
                return None;
            }
        }
        n -= 1;
        cache.count.store(n, Ordering::Relaxed);
        Some(frames[n])
    })
}

/// Give the frames [start, end) (page-aligned physical addresses, all free and of one node)
/// back to their pool as the largest naturally aligned blocks that fit.
fn pool_free_range(start: u64, end: u64) {
    let (mut pfn, end_pfn) = (start / PAGE_SIZE, end / PAGE_SIZE);
    while pfn < end_pfn {
        let mut order = MAX_ORDER;
        while order > 0 && (pfn & ((1 << order) - 1) != 0 || pfn + (1 << order) > end_pfn) {
            order -= 1;
        }
        pool_free(pfn * PAGE_SIZE, order);
        pfn += 1 << order;
    }
}

/// Return a 4 KiB frame. Frames of another node go straight back to their node's pool so a
/// core's cache only ever holds local memory.
pub fn free_page(pa: u64) {
    debug_assert!(pa % PAGE_SIZE == 0);
    if node_of(pa).unwrap_or(0) != local_node() {
        pool_free(pa, 0);
        return;
    }
    let cache = FRAME_CACHES.this();
    crate::arch::x86_64::cpu::without_interrupts(|| {
        // SAFETY: only this core touches its cache, and interrupts are off.
        let frames = unsafe { &mut *cache.frames.get() };
        let mut n = cache.count.load(Ordering::Relaxed);
        if n == CACHE_CAPACITY {
            let mut b = NODES[local_node()].buddy.lock();
            for _ in 0..CACHE_BATCH {
                n -= 1;
                b.free(frames[n] / PAGE_SIZE, 0);
            }
        }
        frames[n] = pa;
        cache.count.store(n + 1, Ordering::Relaxed);
    })
}

/// One 4 KiB frame from the NUMA node of core `core` (Corey's `memid`): through this core's
/// cache when that is our node, else straight from that node's pool (falling back to any).
pub fn alloc_page_for_core(core: usize) -> Option<u64> {
    let node = crate::percpu::get(core).map(|c| c.node as usize).unwrap_or_else(local_node);
    if node == local_node() {
        return alloc_page();
    }
    if injected_failure() {
        return None;
    }
    let nodes = node_count();
    (0..nodes).map(|i| (node + i) % nodes).find_map(|n| NODES[n].buddy.lock_irqsave().alloc(0)).map(|pfn| pfn * PAGE_SIZE)
}

/// Allocate 2^order contiguous frames from NUMA node `node` (Corey's `memid` placement),
/// falling back to the other nodes when it has none.
pub fn alloc_frames_on(order: usize, node: usize) -> Option<u64> {
    if node == local_node() || node >= node_count() {
        return alloc_frames(order);
    }
    if order > MAX_ORDER || injected_failure() {
        return None;
    }
    let nodes = node_count();
    (0..nodes).map(|i| (node + i) % nodes).find_map(|n| NODES[n].buddy.lock_irqsave().alloc(order)).map(|pfn| pfn * PAGE_SIZE)
}

/// Allocate 2^order contiguous, naturally aligned frames.
pub fn alloc_frames(order: usize) -> Option<u64> {
    if order > MAX_ORDER {
        return None;
    }
    if order == 0 {
        return alloc_page();
    }
    if injected_failure() {
        return None;
    }
    pool_alloc(order)
}

pub fn free_frames(pa: u64, order: usize) {
    if order == 0 {
        free_page(pa)
    } else {
        pool_free(pa, order)
    }
}

/// A 2 MiB frame.
pub fn alloc_large() -> Option<u64> {
    alloc_frames(LARGE_ORDER)
}

pub fn free_large(pa: u64) {
    free_frames(pa, LARGE_ORDER)
}

/// Give this core's cached frames back to the node pool: its stack and the rest of its carve
/// (whole blocks, so the buddy can merge them back into the 2 MiB block they came from).
pub fn drain_local_cache() {
    let cache = FRAME_CACHES.this();
    crate::arch::x86_64::cpu::without_interrupts(|| {
        // SAFETY: only this core touches its cache, and interrupts are off.
        let frames = unsafe { &mut *cache.frames.get() };
        let n = cache.count.load(Ordering::Relaxed);
        for &pa in &frames[..n] {
            pool_free(pa, 0);
        }
        cache.count.store(0, Ordering::Relaxed);
        let (next, end) = (cache.carve_next.load(Ordering::Relaxed), cache.carve_end.load(Ordering::Relaxed));
        cache.carve_next.store(end, Ordering::Relaxed);
        if next < end {
            pool_free_range(next, end);
        }
    })
}

/// Exact count of free 4 KiB pages: node pools plus every core's cache. Exact when no other
/// core is allocating at the same moment (leak checks run at quiescent points).
pub fn free_pages() -> u64 {
    let pools: u64 = (0..node_count()).map(|n| NODES[n].buddy.lock_irqsave().free_pages).sum();
    let caches: u64 = crate::percpu::all().map(|c| FRAME_CACHES.of(c).len() as u64).sum();
    pools + caches
}

/// (free, total) pages of one node's pool (per-core caches not included).
pub fn node_stats(node: usize) -> (u64, u64) {
    let b = NODES[node].buddy.lock_irqsave();
    (b.free_pages, b.total_pages)
}

pub fn total_pages() -> u64 {
    (0..node_count()).map(|n| node_stats(n).1).sum()
}
