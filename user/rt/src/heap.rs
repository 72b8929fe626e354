//! TEMPORARY global allocator, for the first program only: a spin-locked size-class heap in
//! segments the runtime allocates and maps itself at `layout::HEAP_BASE`, growing by mapping
//! another segment after the last. It is neither per-core nor NUMA-aware; the per-core malloc
//! of issue 5 replaces it.
//!
//! Heap pages are touched when their segment is mapped, so their demand-zero faults happen
//! then and not inside whatever first uses the memory (tests that compare free-page counts
//! around an operation are not disturbed by heap growth they did not cause).
//!
//! Contexts started on other cores see the image read-only and must not allocate.

use crate::layout::{HEAP_BASE, HEAP_END};
use abi::{ObjName, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// Smallest growth step.
const CHUNK: u64 = 1 << 20;
/// Size classes 16..=2048 bytes; larger requests take whole pages.
const CLASSES: usize = 8;
const MIN_CLASS: usize = 16;

struct FreeBlock {
    next: *mut FreeBlock,
    /// Pages in this block (large free list only).
    pages: u64,
}

struct State {
    /// Bump pointer and end of mapped heap.
    next: u64,
    mapped_end: u64,
    small: [*mut FreeBlock; CLASSES],
    large: *mut FreeBlock,
    segments: u64,
}

pub struct Heap {
    lock: AtomicBool,
    state: UnsafeCell<State>,
}

// SAFETY: `state` is only touched with `lock` held.
unsafe impl Sync for Heap {}

impl Heap {
    pub const fn new() -> Self {
        Self {
            lock: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                next: HEAP_BASE,
                mapped_end: HEAP_BASE,
                small: [core::ptr::null_mut(); CLASSES],
                large: core::ptr::null_mut(),
                segments: 0,
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        while self.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            core::hint::spin_loop();
        }
        // SAFETY: the lock gives exclusive access to `state` until it is released below.
        let r = f(unsafe { &mut *self.state.get() });
        self.lock.store(false, Ordering::Release);
        r
    }

    /// Bytes of address space mapped for the heap so far.
    pub fn mapped_bytes(&self) -> u64 {
        self.with(|s| s.mapped_end - HEAP_BASE)
    }
}

impl Default for Heap {
    fn default() -> Self {
        Self::new()
    }
}

fn class_of(size: usize) -> Option<usize> {
    let size = size.max(MIN_CLASS).next_power_of_two();
    let idx = size.trailing_zeros() as usize - MIN_CLASS.trailing_zeros() as usize;
    (idx < CLASSES).then_some(idx)
}

impl State {
    /// Map at least `bytes` more heap. Returns false when out of memory or address space.
    fn grow(&mut self, bytes: u64) -> bool {
        let len = bytes.max(CHUNK).next_multiple_of(CHUNK);
        if self.mapped_end + len > HEAP_END {
            return false;
        }
        let root = crate::root_share();
        let si = crate::start_info();
        let Ok(seg) = crate::sys::segment_alloc(root, "rt-heap", MEMID_SELF, len) else { return false };
        let m = SegMapping { voff: self.mapped_end, seg: ObjName::new(root, seg), soff: 0, len, flags: MAP_READ | MAP_WRITE };
        if crate::sys::ar_set_seg(ObjName::new(root, si.root_ar), &m).is_err() {
            let _ = crate::sys::share_delobj(ObjName::new(root, seg));
            return false;
        }
        let mut p = self.mapped_end;
        while p < self.mapped_end + len {
            // SAFETY: `p` lies in the writable mapping just made; touching it takes the
            // demand-zero fault now (see the module comment).
            unsafe { core::ptr::write_volatile(p as *mut u8, 0) };
            p += PAGE_SIZE;
        }
        self.mapped_end += len;
        self.segments += 1;
        true
    }

    fn bump(&mut self, size: u64, align: u64) -> *mut u8 {
        let start = self.next.next_multiple_of(align);
        let end = start + size;
        if end > self.mapped_end && !self.grow(end - self.mapped_end) {
            return core::ptr::null_mut();
        }
        self.next = end;
        start as *mut u8
    }

    fn alloc(&mut self, layout: Layout) -> *mut u8 {
        if layout.align() <= 2048 {
            if let Some(c) = class_of(layout.size().max(layout.align())) {
                let head = self.small[c];
                if !head.is_null() {
                    // SAFETY: free-list blocks are heap memory we handed out and got back;
                    // their first word is the `next` link.
                    self.small[c] = unsafe { (*head).next };
                    return head as *mut u8;
                }
                let size = (MIN_CLASS << c) as u64;
                return self.bump(size, size);
            }
        }
        let pages = (layout.size() as u64).div_ceil(PAGE_SIZE).max(1);
        if layout.align() as u64 <= PAGE_SIZE {
            // First fit in the large free list, exact page counts only (keeps it simple).
            let mut link: *mut *mut FreeBlock = &mut self.large;
            // SAFETY: every block on the large list is page-aligned heap memory whose first
            // bytes hold a `FreeBlock`, written by `dealloc`.
            unsafe {
                while !(*link).is_null() {
                    if (**link).pages == pages {
                        let b = *link;
                        *link = (*b).next;
                        return b as *mut u8;
                    }
                    link = &mut (**link).next;
                }
            }
        }
        self.bump(pages * PAGE_SIZE, (layout.align() as u64).max(PAGE_SIZE))
    }

    fn dealloc(&mut self, ptr: *mut u8, layout: Layout) {
        if layout.align() <= 2048 {
            if let Some(c) = class_of(layout.size().max(layout.align())) {
                let b = ptr as *mut FreeBlock;
                // SAFETY: `ptr` is a block of class `c` (at least 16 bytes, 16-aligned) that
                // the caller gives back; we reuse its first word as the link.
                unsafe { (*b).next = self.small[c] };
                self.small[c] = b;
                return;
            }
        }
        let pages = (layout.size() as u64).div_ceil(PAGE_SIZE).max(1);
        let b = ptr as *mut FreeBlock;
        // SAFETY: `ptr` is a page-aligned block of `pages` pages given back by the caller.
        unsafe {
            (*b).next = self.large;
            (*b).pages = pages;
        }
        self.large = b;
    }
}

// SAFETY: `alloc` returns blocks of at least `layout.size()` bytes aligned to
// `layout.align()` from memory mapped only for the heap, never handed out twice until
// `dealloc` returns them; all state is behind the spin lock.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.with(|s| s.alloc(layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.with(|s| s.dealloc(ptr, layout))
    }
}

#[cfg(target_os = "none")]
#[global_allocator]
pub static HEAP: Heap = Heap::new();
