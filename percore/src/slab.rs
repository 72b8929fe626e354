//! Per-core object cache: the front end of a slab allocator (Tornado section 4; Bonwick's
//! magazines).
//!
//! Each core keeps a magazine of free objects that belong to it. Allocation and free on the
//! home core touch only that core's magazine (its lock is on the core's own line and is only
//! ever contended by the core itself, e.g. a nested interrupt). An empty magazine is refilled
//! first from the objects other cores freed back to this one, then in a batch from the
//! backend; a full one gives half back to the backend. An object freed on a core other than
//! its home is pushed onto the home core's remote-free list (a lock-free stack that the home
//! core empties in one swap), so memory stays with the core (NUMA node) it came from, as in
//! Tornado's allocator, and magazines never hold another core's objects.
//!
//! The per-core locks are taken with interrupts disabled, so interrupt handlers may allocate
//! and free (a kernel heap needs that); on the host this costs nothing.

extern crate alloc;

use crate::per_core::PerCore;
use crate::spin::TicketLock;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use core::alloc::Layout;
use core::ptr::{self, NonNull};

/// Objects a magazine holds.
pub const MAGAZINE_SIZE: usize = 32;
/// Objects fetched from the backend when a magazine runs dry.
const REFILL: usize = MAGAZINE_SIZE / 2;

/// Where objects come from: a slab layer, page allocator or heap.
///
/// # Safety
/// `alloc` returns distinct, writable blocks of `layout()` that stay valid until passed to
/// `free`; `free` accepts every block `alloc` returned, once. The cache writes a link pointer
/// into the first word of free objects.
pub unsafe trait ObjectBackend: Sync {
    /// Size and alignment of every object (at least one pointer of each).
    fn layout(&self) -> Layout;
    /// A fresh object, preferably in memory near `core`; `None` when out of memory.
    fn alloc(&self, core: usize) -> Option<NonNull<u8>>;
    /// Take an object back.
    ///
    /// # Safety
    /// `obj` came from `alloc` of this backend and is not in use.
    unsafe fn free(&self, obj: NonNull<u8>);
    /// The core `obj` belongs to (the one it was allocated for).
    fn home(&self, obj: NonNull<u8>) -> usize;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheError {
    /// Objects must hold a pointer (the free-list link) at pointer alignment.
    ObjectTooSmall { size: usize, align: usize },
}

struct Magazine {
    objs: [*mut u8; MAGAZINE_SIZE],
    len: usize,
}

// SAFETY: the pointers are free objects owned by the cache; whichever core holds the lock
// may hand them out.
unsafe impl Send for Magazine {}

struct CoreCache {
    magazine: TicketLock<Magazine>,
    /// Objects of this core freed by other cores: an intrusive stack through each object's
    /// first word. Pushed with CAS, emptied with one swap, so there is no ABA problem.
    remote: AtomicPtr<u8>,
    remote_frees: AtomicUsize,
}

pub struct ObjectCache<B: ObjectBackend> {
    backend: B,
    cores: PerCore<CoreCache>,
}

/// Counts for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Free objects sitting in magazines.
    pub cached: usize,
    /// Remote frees so far (objects sent home by another core).
    pub remote_frees: usize,
}

impl<B: ObjectBackend> ObjectCache<B> {
    /// A cache with one magazine per online core.
    pub fn new(backend: B) -> Result<Self, CacheError> {
        Self::with_cores(backend, crate::core_count())
    }

    pub fn with_cores(backend: B, cores: usize) -> Result<Self, CacheError> {
        let l = backend.layout();
        if l.size() < core::mem::size_of::<*mut u8>() || l.align() < core::mem::align_of::<*mut u8>() {
            return Err(CacheError::ObjectTooSmall { size: l.size(), align: l.align() });
        }
        Ok(Self {
            backend,
            cores: PerCore::with_cores(cores, |_| CoreCache {
                magazine: TicketLock::new(Magazine { objs: [ptr::null_mut(); MAGAZINE_SIZE], len: 0 }),
                remote: AtomicPtr::new(ptr::null_mut()),
                remote_frees: AtomicUsize::new(0),
            }),
        })
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn layout(&self) -> Layout {
        self.backend.layout()
    }

    /// An object for the calling core.
    #[inline]
    pub fn alloc(&self) -> Option<NonNull<u8>> {
        self.alloc_on(crate::cpu_id())
    }

    pub fn alloc_on(&self, core: usize) -> Option<NonNull<u8>> {
        let slot = self.cores.slot_of(core);
        let cc = self.cores.on(slot);
        let mut m = cc.magazine.lock_irqsave();
        if m.len > 0 {
            m.len -= 1;
            return NonNull::new(m.objs[m.len]);
        }
        // Refill: our objects that other cores freed first, then the backend.
        let mut list = cc.remote.swap(ptr::null_mut(), Ordering::Acquire);
        while !list.is_null() {
            // SAFETY: objects on the remote stack are free and hold the next link in their
            // first word (written by `free_on` before its releasing CAS, which our acquire
            // swap synchronises with).
            let next = unsafe { (list as *mut *mut u8).read() };
            if m.len < MAGAZINE_SIZE {
                let i = m.len;
                m.objs[i] = list;
                m.len += 1;
            } else {
                // SAFETY: a free object of this backend.
                unsafe { self.backend.free(NonNull::new_unchecked(list)) };
            }
            list = next;
        }
        if m.len == 0 {
            for _ in 0..REFILL {
                match self.backend.alloc(slot) {
                    Some(p) => {
                        let i = m.len;
                        m.objs[i] = p.as_ptr();
                        m.len += 1;
                    }
                    None => break,
                }
            }
        }
        if m.len == 0 {
            return None;
        }
        m.len -= 1;
        NonNull::new(m.objs[m.len])
    }

    /// Free an object on the calling core.
    ///
    /// # Safety
    /// `obj` came from this cache's `alloc` and is no longer used.
    #[inline]
    pub unsafe fn free(&self, obj: NonNull<u8>) {
        // SAFETY: forwarded from the caller.
        unsafe { self.free_on(crate::cpu_id(), obj) }
    }

    /// # Safety
    /// As for [`free`](Self::free).
    pub unsafe fn free_on(&self, core: usize, obj: NonNull<u8>) {
        let slot = self.cores.slot_of(core);
        let home = self.cores.slot_of(self.backend.home(obj));
        if home != slot {
            // Send it home: push onto the home core's remote stack.
            let cc = self.cores.on(home);
            let mut head = cc.remote.load(Ordering::Relaxed);
            loop {
                // SAFETY: the object is free and large enough for a pointer (checked at
                // construction); nobody else touches it until the CAS publishes it.
                unsafe { (obj.as_ptr() as *mut *mut u8).write(head) };
                match cc.remote.compare_exchange_weak(head, obj.as_ptr(), Ordering::Release, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => head = now,
                }
            }
            cc.remote_frees.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let cc = self.cores.on(slot);
        let mut m = cc.magazine.lock_irqsave();
        if m.len == MAGAZINE_SIZE {
            // Full: give the older half back to the backend.
            for i in 0..MAGAZINE_SIZE / 2 {
                // SAFETY: magazine entries are free objects of this backend.
                unsafe { self.backend.free(NonNull::new_unchecked(m.objs[i])) };
            }
            m.objs.copy_within(MAGAZINE_SIZE / 2.., 0);
            m.len = MAGAZINE_SIZE - MAGAZINE_SIZE / 2;
        }
        let i = m.len;
        m.objs[i] = obj.as_ptr();
        m.len += 1;
    }

    /// Give every cached object back to the backend (magazines and remote-free lists).
    pub fn drain(&self) {
        for cc in self.cores.iter() {
            let mut m = cc.magazine.lock_irqsave();
            for i in 0..m.len {
                // SAFETY: magazine entries are free objects of this backend.
                unsafe { self.backend.free(NonNull::new_unchecked(m.objs[i])) };
            }
            m.len = 0;
            let mut list = cc.remote.swap(ptr::null_mut(), Ordering::Acquire);
            while !list.is_null() {
                // SAFETY: as in `alloc_on`.
                let next = unsafe { (list as *mut *mut u8).read() };
                // SAFETY: a free object of this backend.
                unsafe { self.backend.free(NonNull::new_unchecked(list)) };
                list = next;
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        let mut s = CacheStats::default();
        for cc in self.cores.iter() {
            s.cached += cc.magazine.lock_irqsave().len;
            s.remote_frees += cc.remote_frees.load(Ordering::Relaxed);
        }
        s
    }
}

impl<B: ObjectBackend> Drop for ObjectCache<B> {
    fn drop(&mut self) {
        self.drain();
    }
}

/// A backend on the global allocator (the kernel heap, or the host's), recording each
/// object's home core in a header word before it. For host tests, and for a kernel heap
/// before it has per-core slabs of its own.
pub struct HeapBackend {
    object: Layout,
    /// Offset of the object inside its allocation (header size rounded up to alignment).
    offset: usize,
    full: Layout,
    live: AtomicUsize,
}

impl HeapBackend {
    /// Objects of `object` layout (size and alignment raised to at least a pointer's).
    pub fn new(object: Layout) -> Result<Self, core::alloc::LayoutError> {
        let object = Layout::from_size_align(
            object.size().max(core::mem::size_of::<usize>()),
            object.align().max(core::mem::align_of::<usize>()),
        )?;
        let offset = object.align().max(core::mem::size_of::<usize>());
        let full = Layout::from_size_align(offset + object.size(), object.align())?;
        Ok(Self { object, offset, full, live: AtomicUsize::new(0) })
    }

    /// Objects allocated and not yet freed back to the heap.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }
}

// SAFETY: `alloc` hands out distinct heap blocks of `object` layout (offset keeps alignment,
// the allocation covers offset + size); `free` returns them to the heap.
unsafe impl ObjectBackend for HeapBackend {
    fn layout(&self) -> Layout {
        self.object
    }

    fn alloc(&self, core: usize) -> Option<NonNull<u8>> {
        // SAFETY: `full` has non-zero size.
        let base = unsafe { alloc::alloc::alloc(self.full) };
        let base = NonNull::new(base)?;
        // SAFETY: `offset` < `full.size()`, and the header word before the object is inside
        // the allocation and aligned (offset is a multiple of the word size and alignment).
        unsafe {
            let obj = base.as_ptr().add(self.offset);
            (obj.sub(core::mem::size_of::<usize>()) as *mut usize).write(core);
            self.live.fetch_add(1, Ordering::Relaxed);
            Some(NonNull::new_unchecked(obj))
        }
    }

    unsafe fn free(&self, obj: NonNull<u8>) {
        // SAFETY: `obj` came from `alloc`, so its allocation starts `offset` bytes earlier.
        unsafe { alloc::alloc::dealloc(obj.as_ptr().sub(self.offset), self.full) };
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    fn home(&self, obj: NonNull<u8>) -> usize {
        // SAFETY: every object this backend made has its home in the word before it.
        unsafe { (obj.as_ptr().sub(core::mem::size_of::<usize>()) as *const usize).read() }
    }
}

/// Where a [`PageSlab`] gets its pages: the kernel's per-core (per-NUMA-node) page allocator.
///
/// # Safety
/// `alloc_page` returns distinct, writable pages of `page_size()` bytes, aligned to
/// `page_size()` (a power of two), that stay valid for the rest of the program (slab pages are
/// never handed back).
pub unsafe trait PageSource: Sync {
    fn page_size(&self) -> usize;
    /// A page near `core`, or `None` when out of memory.
    fn alloc_page(&self, core: usize) -> Option<NonNull<u8>>;
}

/// Page header: the home core of every object carved from the page.
#[repr(C)]
struct PageHeader {
    home: usize,
}

/// One core's slab state: objects freed back to it, and the page being carved.
struct SlabCore {
    free: *mut u8,
    bump: usize,
    end: usize,
}

// SAFETY: the pointers are free memory owned by the slab; any core holding the lock may use it.
unsafe impl Send for SlabCore {}

/// A slab backend for [`ObjectCache`] over pages: each core carves objects from its own pages,
/// whose header names the home core, so `home()` is one load from the page start (Tornado's
/// "extra check on each free to determine the home cluster"). Objects freed to the backend
/// go on their home core's list and are reused before new pages are carved. This is what a
/// kernel heap puts under one `ObjectCache` per size class.
pub struct PageSlab<P: PageSource> {
    source: P,
    object: Layout,
    first: usize,
    cores: PerCore<TicketLock<SlabCore>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlabError {
    /// The page size is not a power of two, or too small for the header and one object.
    BadPage { page_size: usize },
    /// Objects must hold a pointer at pointer alignment.
    ObjectTooSmall { size: usize, align: usize },
}

impl<P: PageSource> PageSlab<P> {
    pub fn new(source: P, object: Layout, cores: usize) -> Result<Self, SlabError> {
        let page = source.page_size();
        if object.size() < core::mem::size_of::<*mut u8>() || object.align() < core::mem::align_of::<*mut u8>() {
            return Err(SlabError::ObjectTooSmall { size: object.size(), align: object.align() });
        }
        let object = object.pad_to_align();
        let first = core::mem::size_of::<PageHeader>().next_multiple_of(object.align());
        if !page.is_power_of_two() || first + object.size() > page || object.align() > page {
            return Err(SlabError::BadPage { page_size: page });
        }
        Ok(Self {
            source,
            object,
            first,
            cores: PerCore::with_cores(cores, |_| TicketLock::new(SlabCore { free: ptr::null_mut(), bump: 0, end: 0 })),
        })
    }

    pub fn source(&self) -> &P {
        &self.source
    }
}

// SAFETY: objects are carved from distinct page ranges (bump pointer under the core's lock) or
// reused after `free`; each is `object` sized and aligned (pages are page-aligned and `first`
// and the stride keep alignment); pages are never returned, so objects stay valid.
unsafe impl<P: PageSource> ObjectBackend for PageSlab<P> {
    fn layout(&self) -> Layout {
        self.object
    }

    fn alloc(&self, core: usize) -> Option<NonNull<u8>> {
        let slot = self.cores.slot_of(core);
        let mut c = self.cores.on(slot).lock_irqsave();
        if let Some(p) = NonNull::new(c.free) {
            // SAFETY: free objects hold the next link in their first word.
            c.free = unsafe { (p.as_ptr() as *const *mut u8).read() };
            return Some(p);
        }
        if c.bump + self.object.size() > c.end || c.bump == 0 {
            let page = self.source.alloc_page(slot)?;
            // SAFETY: a fresh page-aligned page of at least header + one object.
            unsafe { (page.as_ptr() as *mut PageHeader).write(PageHeader { home: slot }) };
            c.bump = page.as_ptr() as usize + self.first;
            c.end = page.as_ptr() as usize + self.source.page_size();
        }
        let p = c.bump as *mut u8;
        c.bump += self.object.size();
        NonNull::new(p)
    }

    unsafe fn free(&self, obj: NonNull<u8>) {
        let home = self.home(obj);
        let mut c = self.cores.on(home).lock_irqsave();
        // SAFETY: the object is free and holds a pointer (checked at construction).
        unsafe { (obj.as_ptr() as *mut *mut u8).write(c.free) };
        c.free = obj.as_ptr();
    }

    fn home(&self, obj: NonNull<u8>) -> usize {
        let page = obj.as_ptr() as usize & !(self.source.page_size() - 1);
        // SAFETY: every object lives in a slab page whose header we wrote at its start.
        unsafe { (*(page as *const PageHeader)).home }
    }
}
