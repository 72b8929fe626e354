//! `KRef<T>`: an atomically reference-counted pointer whose allocation can fail with an
//! error instead of a panic (`alloc::sync::Arc::new` aborts on out-of-memory, and a user
//! program must never be able to panic the kernel). `KWeak<T>` does not keep the value
//! alive; `upgrade` fails once the last `KRef` is gone.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};

struct Inner<T> {
    strong: AtomicUsize,
    /// Weak references plus one held collectively by all strong ones.
    weak: AtomicUsize,
    /// Free the allocation only after a reclamation grace period (`KRef::defer_free`).
    deferred: AtomicBool,
    value: T,
}

pub struct KRef<T> {
    ptr: NonNull<Inner<T>>,
    _owns: PhantomData<Inner<T>>,
}

pub struct KWeak<T> {
    ptr: NonNull<Inner<T>>,
}

// SAFETY: like Arc: shared ownership across cores needs T: Send + Sync.
unsafe impl<T: Send + Sync> Send for KRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KRef<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for KWeak<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KWeak<T> {}

impl<T> KRef<T> {
    /// Allocate, or give the value back if memory is exhausted.
    pub fn try_new(value: T) -> Result<Self, T> {
        let layout = Layout::new::<Inner<T>>();
        let Some(p) = crate::mm::heap::try_alloc(layout) else { return Err(value) };
        Ok(Self::init_at(p, value))
    }

    /// Allocate from NUMA node `node`'s memory (Corey's `memid`: object metadata lives near
    /// the core that will use it), or give the value back if memory is exhausted.
    pub fn try_new_on_node(value: T, node: usize) -> Result<Self, T> {
        let layout = Layout::new::<Inner<T>>();
        let Some(p) = crate::mm::heap::try_alloc_on_node(layout, node) else { return Err(value) };
        Ok(Self::init_at(p, value))
    }

    /// `p`: a fresh, non-null heap allocation with `Inner<T>`'s layout.
    fn init_at(p: *mut u8, value: T) -> Self {
        let ptr = p as *mut Inner<T>;
        // SAFETY: p is a fresh allocation with Inner<T>'s layout.
        unsafe { ptr.write(Inner { strong: AtomicUsize::new(1), weak: AtomicUsize::new(1), deferred: AtomicBool::new(false), value }) };
        // SAFETY: p is non-null (the allocator returned Some).
        KRef { ptr: unsafe { NonNull::new_unchecked(ptr) }, _owns: PhantomData }
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: a KRef keeps the allocation and the value alive.
        unsafe { self.ptr.as_ref() }
    }

    pub fn strong_count(this: &Self) -> usize {
        this.inner().strong.load(Ordering::Acquire)
    }

    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        a.ptr == b.ptr
    }

    /// Give up this reference as a raw pointer (for tables read without locks); `from_raw`
    /// takes it back.
    pub fn into_raw(this: Self) -> *mut () {
        let p = this.ptr.as_ptr() as *mut ();
        core::mem::forget(this);
        p
    }

    /// This reference's raw pointer, which stays this reference's (`into_raw` without giving
    /// it up).
    pub fn as_raw(this: &Self) -> *mut () {
        this.ptr.as_ptr() as *mut ()
    }

    /// Take back a reference given up by `into_raw`.
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw`, and the reference it stands for is taken back
    /// once.
    pub unsafe fn from_raw(ptr: *mut ()) -> Self {
        // SAFETY: into_raw never returns null.
        KRef { ptr: unsafe { NonNull::new_unchecked(ptr as *mut Inner<T>) }, _owns: PhantomData }
    }

    /// The value behind a raw pointer.
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw` and some reference keeps the value alive for `'a`.
    pub unsafe fn raw_value<'a>(ptr: *mut ()) -> &'a T {
        // SAFETY: by the caller's guarantee the allocation and the value are alive.
        unsafe { &(*(ptr as *const Inner<T>)).value }
    }

    /// A new reference to the value behind a raw pointer.
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw` and the reference it stands for (or another) is
    /// still held while this runs, so the count is at least one.
    pub unsafe fn clone_raw(ptr: *mut ()) -> Self {
        // SAFETY: as the caller guarantees, the allocation is alive with a count of at least one.
        let inner = unsafe { &*(ptr as *const Inner<T>) };
        inner.strong.fetch_add(1, Ordering::Relaxed);
        // SAFETY: non-null, as above.
        KRef { ptr: unsafe { NonNull::new_unchecked(ptr as *mut Inner<T>) }, _owns: PhantomData }
    }

    /// A new reference to the value behind a raw pointer, unless its last reference is
    /// already gone (`None`): for lock-free readers that found `ptr` in a table whose
    /// reference may be dropped meanwhile (a shared share).
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw` and its allocation is not freed while this runs:
    /// it was marked with `defer_free` before the reader could see it, and the reader is
    /// inside a reclamation operation.
    pub unsafe fn try_clone_raw(ptr: *mut ()) -> Option<Self> {
        // SAFETY: by the caller's guarantee the allocation (not necessarily the value) is
        // alive; `into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(ptr as *mut Inner<T>) };
        Self::from_live_allocation(ptr)
    }

    /// A new reference if the value still has one (count raised only from non-zero).
    /// `ptr`'s allocation must be alive (a weak reference, or a deferred free).
    fn from_live_allocation(ptr: NonNull<Inner<T>>) -> Option<Self> {
        // SAFETY: as the callers guarantee, the allocation is alive.
        let inner = unsafe { ptr.as_ref() };
        let mut n = inner.strong.load(Ordering::Relaxed);
        loop {
            if n == 0 {
                return None;
            }
            match inner.strong.compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(KRef { ptr, _owns: PhantomData }),
                Err(now) => n = now,
            }
        }
    }

    /// From now on, free this allocation only after a reclamation grace period (Tornado's
    /// existence guarantee, like Linux's SLAB_TYPESAFE_BY_RCU): set before the reference is
    /// published where lock-free readers can find it, so a reader inside a reclamation
    /// operation may try `try_clone_raw` even after the last reference went.
    pub fn defer_free(this: &Self) {
        this.inner().deferred.store(true, Ordering::Release);
    }

    pub fn downgrade(this: &Self) -> KWeak<T> {
        this.inner().weak.fetch_add(1, Ordering::Relaxed);
        KWeak { ptr: this.ptr }
    }
}

impl<T> Clone for KRef<T> {
    fn clone(&self) -> Self {
        self.inner().strong.fetch_add(1, Ordering::Relaxed);
        KRef { ptr: self.ptr, _owns: PhantomData }
    }
}

impl<T> Deref for KRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner().value
    }
}

fn release_weak<T>(ptr: NonNull<Inner<T>>) {
    // SAFETY: the caller owns one weak count, so the allocation is alive.
    let inner = unsafe { ptr.as_ref() };
    if inner.weak.fetch_sub(1, Ordering::Release) == 1 {
        fence(Ordering::Acquire);
        if inner.deferred.load(Ordering::Acquire) {
            // SAFETY: the last reference of either kind is gone, so only lock-free readers
            // that found the pointer before it was unlinked can still look at the allocation;
            // they are inside reclamation operations, which the grace period waits for.
            unsafe { super::share::retire(ptr.as_ptr() as *mut (), free_inner::<T>) };
        } else {
            crate::mm::heap::free(ptr.as_ptr() as *mut u8, Layout::new::<Inner<T>>());
        }
    }
}

/// Free an `Inner<T>` allocation whose value was dropped.
///
/// # Safety
/// `p` is such an allocation, which nobody can reach any more, freed once.
unsafe fn free_inner<T>(p: *mut ()) {
    crate::mm::heap::free(p as *mut u8, Layout::new::<Inner<T>>());
}

impl<T> Drop for KRef<T> {
    /// Inline: dropping a reference that is not the last is one locked decrement on nearly
    /// every system call's path; only the last one calls out.
    #[inline]
    fn drop(&mut self) {
        if self.inner().strong.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        drop_last(self.ptr);
    }
}

impl<T> KRef<T> {
    /// Give up this reference. If it was the last, the value is not dropped here: it comes
    /// back as a `KLast`, which drops it when it goes, so the caller chooses where (a path
    /// that runs with interrupts off frees with them on: `syscall::ppc_return_entry`).
    #[inline(always)]
    pub fn release(this: Self) -> Option<KLast<T>> {
        let ptr = this.ptr;
        core::mem::forget(this);
        // SAFETY: `this` was a counted reference: the allocation is alive until the count
        // reaches zero here.
        if unsafe { ptr.as_ref() }.strong.fetch_sub(1, Ordering::Release) != 1 {
            return None;
        }
        Some(KLast { ptr })
    }
}

/// A value whose last strong reference was given up (`KRef::release`): nothing else can
/// reach it. Dropping this drops the value.
pub struct KLast<T> {
    ptr: NonNull<Inner<T>>,
}

impl<T> Drop for KLast<T> {
    fn drop(&mut self) {
        drop_last(self.ptr);
    }
}

/// The last strong reference to `ptr`'s value is gone: drop the value, then the weak count
/// the strong ones held together.
#[cold]
#[inline(never)]
fn drop_last<T>(ptr: NonNull<Inner<T>>) {
    fence(Ordering::Acquire);
    // SAFETY: the caller was the last strong reference: nobody else can reach the value.
    unsafe { core::ptr::drop_in_place(&mut (*ptr.as_ptr()).value) };
    release_weak(ptr);
}

impl<T> KWeak<T> {
    pub fn upgrade(&self) -> Option<KRef<T>> {
        // A KWeak keeps the allocation (not the value) alive.
        KRef::from_live_allocation(self.ptr)
    }

    pub fn ptr_eq_strong(&self, s: &KRef<T>) -> bool {
        self.ptr == s.ptr
    }
}

impl<T> Clone for KWeak<T> {
    fn clone(&self) -> Self {
        // SAFETY: as in upgrade.
        unsafe { self.ptr.as_ref() }.weak.fetch_add(1, Ordering::Relaxed);
        KWeak { ptr: self.ptr }
    }
}

impl<T> Drop for KWeak<T> {
    fn drop(&mut self) {
        release_weak(self.ptr);
    }
}
