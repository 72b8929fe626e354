//! The kernel heap: per-core slab caches for small sizes (Tornado section 4), frames for
//! large ones.
//!
//! Every slab has a home core. Allocation and free on the home core touch only that core's
//! lists, with interrupts off and no lock. A free from another core pushes the object onto
//! the home core's lock-free remote-free stack for that size class; the home core takes the
//! whole stack in one swap when it next runs short (or on `trim`), so objects return to the
//! core whose cache they came from and no slab list is ever shared.
//!
//! A core keeps one set of class caches per NUMA node (up to `HEAP_NODES`): the usual one
//! holds local memory, and `try_alloc_on_node` serves kernel-object metadata from the node
//! that a system call's `memid` names (Corey). The slab records its node, so a free returns
//! the object to the cache it came from.
//!
//! Allocation failure is a null pointer from `GlobalAlloc` and `None` from `try_alloc`,
//! never a panic inside the allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicI64, AtomicPtr, Ordering};

use super::frame;
use super::{phys_to_virt, virt_to_phys, PAGE_SIZE};
use crate::arch::x86_64::cpu::without_interrupts;
use crate::percpu::CoreSlots;
use percore::{CachePadded, MAX_CORES};

pub const CLASS_SIZES: [usize; 8] = [16, 32, 64, 128, 256, 512, 1024, 2048];
pub const CLASSES: usize = CLASS_SIZES.len();
const SLAB_MAGIC: u32 = 0x51AB_CAFE;
/// NUMA nodes a core keeps class caches for (slot = node). Metadata for a node past these
/// comes from the local node; a core on such a node keeps its local caches in the last slot.
pub const HEAP_NODES: usize = 16;

/// Slab order per class: one page up to 256 bytes, four pages above, so a slab holds at
/// least seven objects.
const fn slab_order(class: usize) -> usize {
    if CLASS_SIZES[class] <= 256 {
        0
    } else {
        2
    }
}

const fn slab_bytes(class: usize) -> usize {
    (PAGE_SIZE as usize) << slab_order(class)
}

/// Objects start after the header, at an offset aligned to the object size (so every object
/// is naturally aligned up to its size).
const fn first_object_offset(class: usize) -> usize {
    let hdr = core::mem::size_of::<SlabHeader>();
    let size = CLASS_SIZES[class];
    (hdr + size - 1) / size * size
}

const fn capacity(class: usize) -> usize {
    (slab_bytes(class) - first_object_offset(class)) / CLASS_SIZES[class]
}

#[repr(C)]
struct FreeObject {
    next: *mut FreeObject,
}

/// A slab's header, two cache lines. The first holds what the slab is (written when it is
/// made, poisoned when it goes): a free on another core reads it to find the home core, and
/// reads nothing else of the slab. The second holds the home core's list state, which every
/// allocation and local free writes. On one line, a remote free's read of `home` shared a
/// line with the home core's next allocation from the same slab (heap false sharing between
/// two calls that touch different objects: docs/commute.md).
#[repr(C, align(64))]
struct SlabHeader {
    magic: u32,
    class: u16,
    home: u16,
    /// Which of the home core's per-node caches the slab belongs to.
    node: u16,
    _identity_line: [u8; 54],
    in_use: u32,
    on_partial: u16,
    free: *mut FreeObject,
    next: *mut SlabHeader,
    prev: *mut SlabHeader,
}

const _: () = assert!(core::mem::offset_of!(SlabHeader, in_use) == 64 && core::mem::size_of::<SlabHeader>() == 128);

/// One core's state for one size class. Touched only by the owning core, interrupts off.
struct ClassCache {
    partial: *mut SlabHeader,
    slabs: usize,
}

/// A core's slab caches. `remote` heads are written by other cores, so they sit on their own
/// cache line apart from the owner's lists.
pub struct SlabCaches {
    /// Per node (index: NUMA node), per size class.
    classes: UnsafeCell<[[ClassCache; CLASSES]; HEAP_NODES]>,
    remote: CachePadded<[AtomicPtr<FreeObject>; CLASSES]>,
    /// Objects allocated minus objects freed by this core (may go negative; the sum over
    /// cores is exact).
    live: CachePadded<AtomicI64>,
    /// Pages held by this core's slabs.
    slab_pages: AtomicI64,
}

// SAFETY: `classes` is only touched by the owning core with interrupts off; the rest is atomic.
unsafe impl Sync for SlabCaches {}

/// Every core's slab caches, each on its own cache lines (the allocator owns them; the per-CPU
/// area knows nothing of them).
static SLABS: CoreSlots<SlabCaches> = CoreSlots::new([const { CachePadded::new(SlabCaches::new()) }; MAX_CORES]);

impl SlabCaches {
    pub const fn new() -> Self {
        Self {
            classes: UnsafeCell::new([const { [const { ClassCache { partial: null_mut(), slabs: 0 } }; CLASSES] }; HEAP_NODES]),
            remote: CachePadded::new([const { AtomicPtr::new(null_mut()) }; CLASSES]),
            live: CachePadded::new(AtomicI64::new(0)),
            slab_pages: AtomicI64::new(0),
        }
    }
}

fn class_for(layout: Layout) -> Option<usize> {
    let need = layout.size().max(layout.align()).max(1);
    CLASS_SIZES.iter().position(|&s| s >= need)
}

fn slab_of(ptr: *mut u8, class: usize) -> *mut SlabHeader {
    (ptr as usize & !(slab_bytes(class) - 1)) as *mut SlabHeader
}

fn push_partial(cc: &mut ClassCache, s: *mut SlabHeader) {
    // SAFETY: s is a live slab owned by this core.
    unsafe {
        (*s).prev = null_mut();
        (*s).next = cc.partial;
        if !cc.partial.is_null() {
            (*cc.partial).prev = s;
        }
        (*s).on_partial = 1;
    }
    cc.partial = s;
}

fn remove_partial(cc: &mut ClassCache, s: *mut SlabHeader) {
    // SAFETY: s is on this core's partial list, so its neighbours are live slabs of ours.
    unsafe {
        if !(*s).prev.is_null() {
            (*(*s).prev).next = (*s).next;
        } else {
            cc.partial = (*s).next;
        }
        if !(*s).next.is_null() {
            (*(*s).next).prev = (*s).prev;
        }
        (*s).on_partial = 0;
        (*s).next = null_mut();
        (*s).prev = null_mut();
    }
}

/// A new slab for cache slot `slot`, with frames from NUMA node `frames_node`.
fn new_slab(class: usize, home: usize, slot: usize, frames_node: usize, caches: &SlabCaches) -> Option<*mut SlabHeader> {
    let pa = frame::alloc_frames_on(slab_order(class), frames_node)?;
    let base = phys_to_virt(pa) as *mut u8;
    let size = CLASS_SIZES[class];
    let first = first_object_offset(class);
    let cap = capacity(class);
    // SAFETY: the frames were just allocated for this slab; we initialise the header and
    // thread every object slot onto the free list.
    unsafe {
        let s = base as *mut SlabHeader;
        let mut free: *mut FreeObject = null_mut();
        for i in (0..cap).rev() {
            let obj = base.add(first + i * size) as *mut FreeObject;
            (*obj).next = free;
            free = obj;
        }
        s.write(SlabHeader {
            magic: SLAB_MAGIC,
            class: class as u16,
            home: home as u16,
            in_use: 0,
            on_partial: 0,
            node: slot as u16,
            _identity_line: [0; 54],
            free,
            next: null_mut(),
            prev: null_mut(),
        });
        caches.slab_pages.fetch_add(1 << slab_order(class), Ordering::Relaxed);
        Some(s)
    }
}

fn release_slab(class: usize, s: *mut SlabHeader, caches: &SlabCaches) {
    // SAFETY: the slab is empty and unlinked; poisoning the magic catches stale frees.
    unsafe { (*s).magic = 0 };
    caches.slab_pages.fetch_sub(1 << slab_order(class), Ordering::Relaxed);
    frame::free_frames(virt_to_phys(s as u64), slab_order(class));
}

/// The home core's cache of `class` for `node`.
///
/// # Safety
/// Only the owning core calls this, with interrupts off, and keeps no other reference to
/// the same cache meanwhile.
#[allow(clippy::mut_from_ref)]
unsafe fn cache_of(caches: &SlabCaches, node: usize, class: usize) -> &mut ClassCache {
    // SAFETY: by the caller's guarantee.
    unsafe { &mut (*caches.classes.get())[node][class] }
}

/// Free on the home core. Keeps at most one empty slab per class and node; more go back to
/// frames. Must run on the home core with interrupts off.
fn free_local(class: usize, obj: *mut u8, caches: &SlabCaches) {
    let s = slab_of(obj, class);
    // SAFETY: obj came from slab s (its address lies in s, which is one of ours); the object
    // is no longer used by its owner, so we can store the link in it. The cache is ours
    // (home core, interrupts off, as the caller guarantees).
    unsafe {
        let cc = cache_of(caches, (*s).node as usize, class);
        let o = obj as *mut FreeObject;
        (*o).next = (*s).free;
        (*s).free = o;
        (*s).in_use -= 1;
        if (*s).on_partial == 0 {
            push_partial(cc, s);
        } else if (*s).in_use == 0 && cc.partial != s {
            // An empty slab that is not the first partial one: give its memory back.
            remove_partial(cc, s);
            cc.slabs -= 1;
            release_slab(class, s, caches);
        }
    }
}

/// Take every object other cores freed into this core's slabs of `class` (any node). Home
/// core, interrupts off.
fn drain_remote(class: usize, caches: &SlabCaches) {
    let mut o = caches.remote[class].swap(null_mut(), Ordering::Acquire);
    while !o.is_null() {
        // SAFETY: every object on the stack was pushed by `free` and belongs to one of our slabs.
        let next = unsafe { (*o).next };
        free_local(class, o as *mut u8, caches);
        o = next;
    }
}

/// From this core's cache slot `slot` of `class`; a new slab takes frames from `frames_node`.
fn alloc_small(class: usize, slot: usize, frames_node: usize) -> *mut u8 {
    let (caches, me) = SLABS.this_and_index();
    without_interrupts(|| {
        // SAFETY: the owning core with interrupts off is the only user of `classes`; the
        // reference is not used across drain_remote, which takes its own.
        if unsafe { cache_of(caches, slot, class) }.partial.is_null() {
            drain_remote(class, caches);
        }
        // SAFETY: as above.
        let cc = unsafe { cache_of(caches, slot, class) };
        if cc.partial.is_null() {
            match new_slab(class, me, slot, frames_node, caches) {
                Some(s) => {
                    cc.slabs += 1;
                    push_partial(cc, s);
                }
                None => return null_mut(),
            }
        }
        let s = cc.partial;
        // SAFETY: slabs on the partial list have at least one free object.
        unsafe {
            let o = (*s).free;
            (*s).free = (*o).next;
            (*s).in_use += 1;
            if (*s).free.is_null() {
                remove_partial(cc, s);
            }
            caches.live.fetch_add(1, Ordering::Relaxed);
            o as *mut u8
        }
    })
}

fn free_small(ptr: *mut u8, class: usize) {
    let s = slab_of(ptr, class);
    // SAFETY: ptr was returned by alloc_small for this class, so s is its live slab header.
    let (magic, home) = unsafe { ((*s).magic, (*s).home as usize) };
    if magic != SLAB_MAGIC {
        crate::log::kprintln!("heap: free of {ptr:p} with a bad slab header (double free or wrong size)");
        return;
    }
    let (caches, me) = SLABS.this_and_index();
    caches.live.fetch_sub(1, Ordering::Relaxed);
    if home == me {
        // We are the home core; interrupts off.
        without_interrupts(|| free_local(class, ptr, caches));
    } else {
        let Some(owner) = SLABS.get(home) else { return };
        let head = &owner.remote[class];
        let o = ptr as *mut FreeObject;
        let mut cur = head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the object is ours to write until it is published by the CAS.
            unsafe { (*o).next = cur };
            match head.compare_exchange_weak(cur, o, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
    }
}

fn large_order(layout: Layout) -> usize {
    let bytes = layout.size().max(layout.align());
    let pages = (bytes + PAGE_SIZE as usize - 1) / PAGE_SIZE as usize;
    pages.next_power_of_two().trailing_zeros() as usize
}

/// Allocate, or `None` when memory is exhausted.
pub fn try_alloc(layout: Layout) -> Option<*mut u8> {
    if super::inject::should_fail() {
        return None;
    }
    let p = match class_for(layout) {
        Some(class) => {
            let local = crate::percpu::this().node as usize;
            alloc_small(class, local.min(HEAP_NODES - 1), local)
        }
        None => frame::alloc_frames(large_order(layout)).map(|pa| phys_to_virt(pa) as *mut u8).unwrap_or(null_mut()),
    };
    if p.is_null() {
        None
    } else {
        Some(p)
    }
}

/// Allocate from NUMA node `node`'s memory (falling back to other nodes when it has none),
/// through this core's cache for that node; freed with `free` like any other allocation.
/// Nodes past `HEAP_NODES` get local memory.
#[inline]
pub fn try_alloc_on_node(layout: Layout, node: usize) -> Option<*mut u8> {
    let local = crate::percpu::this().node as usize;
    if node == local {
        return try_alloc(layout); // the common case: the object is for a core of this node
    }
    try_alloc_on_other_node(layout, node, local)
}

fn try_alloc_on_other_node(layout: Layout, node: usize, local: usize) -> Option<*mut u8> {
    if node >= HEAP_NODES || local >= HEAP_NODES || node >= frame::node_count() {
        return try_alloc(layout);
    }
    if super::inject::should_fail() {
        return None;
    }
    let p = match class_for(layout) {
        Some(class) => alloc_small(class, node, node),
        None => frame::alloc_frames_on(large_order(layout), node).map(|pa| phys_to_virt(pa) as *mut u8).unwrap_or(null_mut()),
    };
    (!p.is_null()).then_some(p)
}

/// Free memory from `try_alloc` with the same layout.
pub fn free(ptr: *mut u8, layout: Layout) {
    match class_for(layout) {
        Some(class) => free_small(ptr, class),
        None => frame::free_frames(virt_to_phys(ptr as u64), large_order(layout)),
    }
}

/// On this core: take back remote frees and release every empty slab. Used before exact
/// leak checks and when memory runs low.
pub fn trim_local() {
    let caches = SLABS.this();
    without_interrupts(|| {
        for class in 0..CLASSES {
            drain_remote(class, caches);
            for node in 0..HEAP_NODES {
                // SAFETY: owning core, interrupts off; drain_remote's reference has ended.
                let cc = unsafe { cache_of(caches, node, class) };
                let mut s = cc.partial;
                while !s.is_null() {
                    // SAFETY: s is on our partial list.
                    let (next, empty) = unsafe { ((*s).next, (*s).in_use == 0) };
                    if empty {
                        remove_partial(cc, s);
                        cc.slabs -= 1;
                        release_slab(class, s, caches);
                    }
                    s = next;
                }
            }
        }
    })
}

/// Objects currently allocated from slabs, summed over all cores.
pub fn live_objects() -> i64 {
    crate::percpu::all().map(|c| SLABS.of(c).live.load(Ordering::Relaxed)).sum()
}

/// Pages held by slabs, summed over all cores.
pub fn slab_pages() -> i64 {
    crate::percpu::all().map(|c| SLABS.of(c).slab_pages.load(Ordering::Relaxed)).sum()
}

pub struct KernelHeap;

// SAFETY: alloc returns memory of at least the layout's size and alignment or null; dealloc
// accepts exactly what alloc returned with the same layout.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        try_alloc(layout).unwrap_or(null_mut())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        free(ptr, layout)
    }
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap;
