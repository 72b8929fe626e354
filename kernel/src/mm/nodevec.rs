//! `NodeVec`: a growable array whose buffer comes from one NUMA node's memory.
//!
//! Corey's rule is that an object's metadata comes from the memory `memid` names. The object
//! itself is allocated there (`KRef::try_new_on_node`), but a `Vec` inside it (a share's hash
//! table, a segment's page list) would come from whichever core grows it. Stable Rust has no
//! allocator parameter for `Vec`, so this is the small part of it those objects use, with
//! every allocation fallible and made with `heap::try_alloc_on_node`.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::{self, NonNull};

use super::heap;

pub struct NodeVec<T> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    node: usize,
    _owns: PhantomData<T>,
}

// SAFETY: a NodeVec owns its elements like a Vec does; sending or sharing it is sound when
// sending or sharing the elements is.
unsafe impl<T: Send> Send for NodeVec<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for NodeVec<T> {}

/// The allocation could not be made (out of memory, or a size that overflows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoMemory;

impl<T> NodeVec<T> {
    /// An empty vector whose buffer will come from NUMA node `node`.
    pub const fn new(node: usize) -> Self {
        NodeVec { ptr: NonNull::dangling(), len: 0, cap: 0, node, _owns: PhantomData }
    }

    /// The buffer's layout, rounded up to whole cache lines and line-aligned (the heap then
    /// serves it from the 64-byte class or larger): these buffers belong to kernel objects
    /// that other cores read (a segment's page list, a share's table), so none may share a
    /// line with another object's buffer, where one core's free or write would land on a line
    /// another core's call reads (heap false sharing, docs/commute.md). Allocation and free
    /// both go through here, so they agree on the size class.
    fn layout(cap: usize) -> Result<Layout, NoMemory> {
        Layout::array::<T>(cap).and_then(|l| l.align_to(64)).map(|l| l.pad_to_align()).map_err(|_| NoMemory)
    }

    /// Room for at least `extra` more elements.
    #[inline]
    pub fn try_reserve(&mut self, extra: usize) -> Result<(), NoMemory> {
        let need = self.len.checked_add(extra).ok_or(NoMemory)?;
        if need <= self.cap || core::mem::size_of::<T>() == 0 {
            return Ok(());
        }
        // Whole cache lines: a buffer that grows (a segment's page list on `segment_set_nbytes`)
        // would otherwise share its line with another heap object that another core's call
        // reads (`[heap]` false sharing between commuting calls, docs/commute.md).
        let per_line = (64 / core::mem::size_of::<T>().max(1)).max(1);
        let cap = need.max(self.cap * 2).max(4).next_multiple_of(per_line);
        let layout = Self::layout(cap)?;
        let fresh = heap::try_alloc_on_node(layout, self.node).ok_or(NoMemory)? as *mut T;
        if self.cap > 0 {
            // SAFETY: the old buffer holds `len` initialised elements and the new one has
            // room for them; the two do not overlap. The old buffer came from
            // `try_alloc_on_node` with this layout, and its elements were moved out.
            unsafe {
                ptr::copy_nonoverlapping(self.ptr.as_ptr(), fresh, self.len);
                heap::free(self.ptr.as_ptr() as *mut u8, Self::layout(self.cap).map_err(|_| NoMemory)?);
            }
        }
        // SAFETY: the allocator never returns null on success.
        self.ptr = unsafe { NonNull::new_unchecked(fresh) };
        self.cap = cap;
        Ok(())
    }

    /// `n` elements made by `f`, in a buffer of exactly that capacity.
    pub fn try_from_fn(n: usize, node: usize, mut f: impl FnMut(usize) -> T) -> Result<Self, NoMemory> {
        let mut v = NodeVec::new(node);
        if n > 0 && core::mem::size_of::<T>() != 0 {
            let fresh = heap::try_alloc_on_node(Self::layout(n)?, node).ok_or(NoMemory)? as *mut T;
            // SAFETY: non-null, as above.
            v.ptr = unsafe { NonNull::new_unchecked(fresh) };
            v.cap = n;
        }
        for i in 0..n {
            v.push_within_capacity(f(i));
        }
        Ok(v)
    }

    fn push_within_capacity(&mut self, value: T) {
        assert!(self.len < self.cap || core::mem::size_of::<T>() == 0, "NodeVec: no room reserved");
        // SAFETY: `len < cap`, so the slot is inside the buffer and not initialised.
        unsafe { self.ptr.as_ptr().add(self.len).write(value) };
        self.len += 1;
    }

    /// Grow to `n` elements made by `f` (room must have been reserved: this never allocates
    /// and so cannot fail), or shrink to `n`.
    pub fn resize_with(&mut self, n: usize, mut f: impl FnMut() -> T) {
        if n <= self.len {
            self.truncate(n);
            return;
        }
        while self.len < n {
            self.push_within_capacity(f());
        }
    }

    /// Grow to `n` elements of all-zero bytes with one `memset` (room must have been
    /// reserved; a no-op if the vector has `n` or more). A segment's page list is a `None` per
    /// page of its size (2 048 for an 8 MiB stack); one by one they cost about six
    /// instructions each.
    ///
    /// # Safety
    /// All-zero bytes must be a valid `T` (for example `Option` of a `repr(transparent)`
    /// `NonNull` wrapper, whose zero is `None`).
    pub unsafe fn grow_zeroed(&mut self, n: usize) {
        if n <= self.len {
            return;
        }
        assert!(n <= self.cap || core::mem::size_of::<T>() == 0, "NodeVec: no room reserved");
        // SAFETY: `len..n` is inside the buffer (`n <= cap`) and not initialised; the caller
        // promises zero bytes are a valid `T`, so those slots are initialised after this.
        unsafe { ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, n - self.len) };
        self.len = n;
    }

    /// Forget every element without dropping it (the buffer stays).
    ///
    /// # Safety
    /// No element may need its drop to run (a list of `None`s whose `Some`s were taken out).
    pub unsafe fn forget_all(&mut self) {
        self.len = 0;
    }

    /// Drop the elements past `n`.
    pub fn truncate(&mut self, n: usize) {
        while self.len > n {
            self.len -= 1;
            // SAFETY: the element at the old `len - 1` was initialised and is now outside
            // the vector, so it is dropped exactly once.
            unsafe { ptr::drop_in_place(self.ptr.as_ptr().add(self.len)) };
        }
    }
}

impl<T> Deref for NodeVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` elements from `ptr` are initialised (a dangling, aligned pointer for
        // an empty vector is a valid empty slice).
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for NodeVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is unique.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for NodeVec<T> {
    fn drop(&mut self) {
        self.truncate(0);
        if self.cap > 0 && core::mem::size_of::<T>() != 0 {
            if let Ok(layout) = Self::layout(self.cap) {
                // SAFETY: the buffer came from `try_alloc_on_node` with this layout and holds
                // no element any more.
                heap::free(self.ptr.as_ptr() as *mut u8, layout);
            }
        }
    }
}
