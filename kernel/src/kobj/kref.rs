//! `KRef<T>`: an atomically reference-counted pointer whose allocation can fail with an
//! error instead of a panic (`alloc::sync::Arc::new` aborts on out-of-memory, and a user
//! program must never be able to panic the kernel). `KWeak<T>` does not keep the value
//! alive; `upgrade` fails once the last `KRef` is gone.

use core::alloc::Layout;
use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::NonNull;
use core::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};

use percore::{BorrowSlots, DropState, MAX_CORES};

use super::refcache;

/// `repr(C)`, so the counts come first and the borrow state last: for a value aligned to a
/// cache line (`KObject`) the counts have the first line to themselves and the borrow state
/// (read by every borrow) a line after the value, so a new counted reference (an insert, a
/// mapping) writes no line that a borrower of the object reads.
#[repr(C)]
struct Inner<T> {
    strong: AtomicUsize,
    /// Weak references plus one held collectively by all strong ones.
    weak: AtomicUsize,
    /// Free the allocation only after a reclamation grace period (`KRef::defer_free`).
    deferred: AtomicBool,
    /// Set at creation, never changed, for values whose count is kept per core (`refcache`:
    /// segments made in a shared share, `KObject::create_shared`). Then `strong` is only the
    /// shared part of the count (written when a core's table line is full), the value is
    /// dropped by a review, never by the decrement itself, and every count change writes only
    /// the changing core's table. On the counts' line: every clone and drop of *every* value
    /// reads it, and a plain count's clone or drop writes that line anyway, so a private
    /// object pays one load and a branch, not a line (an earlier layout had it
    /// after the value, a second line per count change).
    percore: bool,
    value: T,
    /// Set at creation for values that may be borrowed (`KRef::borrow_raw`): their last drop
    /// runs the hand-over protocol of `percore::borrow`. (After the value: every borrow
    /// reads it, so it must not share the counts' line.)
    borrowable: bool,
    /// The core that made the value (borrowable values): while `scan_all` is clear, only
    /// this core can have borrowed it, so a last drop on this core scans only its own borrow
    /// slots, at once (before 2026-11-29, the last drop of every private segment read every
    /// core's slot line, 4.58 kernel line transfers per `segment_allocfree` at 4 vCPUs).
    origin: u32,
    /// Set (store-once, SeqCst) by the first borrow on a core other than `origin`, before it
    /// publishes its slot, and by `defer_free` (a value in a shared share is borrowed
    /// everywhere; set there, while publishing, so that a first borrow by another core
    /// writes nothing). A last drop reads it after its orphan mark's fence: clear means no
    /// other core has a slot to scan (`DropState::try_drop_on`; loom:
    /// `origin_only_scan_against_a_remote_borrow`). On the borrow-state line, not the
    /// counts': only borrowers and the last drop read it.
    scan_all: AtomicBool,
    /// Per-core counted values (`percore`): set by the review that found the count's sum
    /// zero with every core's lock held (`refcache`); a borrow's `to_counted` fails after it.
    /// Here, not on the counts' line: every `to_counted` reads it, and an insert into a
    /// shared share writes that line (`defer_free`).
    dead: AtomicBool,
    /// The borrow protocol's side of this value (unused unless `borrowable`).
    drop_state: DropState,
}

impl<T> Inner<T> {
    /// The count: the word, or its sum with every core's delta (`refcache::sum`).
    fn count(&self) -> usize {
        if self.percore {
            return self.sum_percore();
        }
        self.strong.load(Ordering::Acquire)
    }

    /// One more counted reference (the caller holds one).
    #[inline(always)]
    fn inc(&self) {
        if self.percore {
            self.inc_percore();
        } else {
            self.strong.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `count` of a per-core counted value (out of line, cold).
    #[cold]
    #[inline(never)]
    fn sum_percore(&self) -> usize {
        refcache::sum(&self.counted()).max(0) as usize
    }

    /// `inc` of a per-core counted value: out of line and cold, so the plain count's path
    /// (every other object's clone) stays a test and a locked add.
    #[cold]
    #[inline(never)]
    fn inc_percore(&self) {
        refcache::inc(&self.counted());
    }

    /// The drop of one counted reference of a per-core counted value (out of line, cold:
    /// see `inc_percore`).
    #[cold]
    #[inline(never)]
    fn dec_percore(&self) {
        refcache::dec(&self.counted());
    }

    /// This value's side of `refcache`.
    fn counted(&self) -> refcache::Counted<'_> {
        // SAFETY: only per-core counted values call this, and only kernel objects are made
        // per-core counted (`KObject::create_counted`), so `self` is an `Inner<KObject>`.
        let remote = unsafe { remote_flag(self as *const Self as usize) };
        refcache::Counted { obj: self as *const Self as usize, base: &self.strong, dead: &self.dead, origin: self.origin as usize, remote }
    }
}

/// The count word and dead mark of the per-core counted value at `obj` (for `refcache`'s
/// reviews, which know only addresses).
///
/// # Safety
/// `obj` is the address of an `Inner<KObject>` (only kernel objects are made per-core
/// counted: `KObject::create`) whose allocation is alive. Only the count word and the mark
/// are touched, not the value (which may be in the middle of a borrow's use).
pub(super) unsafe fn percore_parts<'a>(obj: usize) -> (&'a AtomicUsize, &'a AtomicBool) {
    // SAFETY: by the caller's guarantee.
    let inner = unsafe { &*(obj as *const Inner<super::KObject>) };
    (&inner.strong, &inner.dead)
}

/// Flag always set: a per-core counted object that is not a segment (none is made today) is
/// always reviewed with every core's lock.
static ALWAYS_REMOTE: AtomicBool = AtomicBool::new(true);

/// The per-core counted kernel object at `obj`: its origin core and its remote-counts flag
/// (`Segment::remote_counts`).
///
/// # Safety
/// As `percore_parts`.
pub(super) unsafe fn remote_flag<'a>(obj: usize) -> &'a AtomicBool {
    // SAFETY: by the caller's guarantee.
    let inner = unsafe { &*(obj as *const Inner<super::KObject>) };
    match &inner.value.kind {
        super::Kind::Segment(s) => s.remote_counts(),
        _ => &ALWAYS_REMOTE,
    }
}

/// The origin core of the per-core counted kernel object at `obj`.
///
/// # Safety
/// As `percore_parts`.
pub(super) unsafe fn origin_of(obj: usize) -> usize {
    // SAFETY: by the caller's guarantee.
    unsafe { (*(obj as *const Inner<super::KObject>)).origin as usize }
}

/// Drop the per-core counted kernel object at `obj`, which a review declared dead.
///
/// # Safety
/// `obj` is an `Inner<KObject>` (only kernel objects are made per-core counted:
/// `KObject::create`), declared dead by a review, dropped once.
pub(super) unsafe fn drop_percore(obj: usize) {
    // SAFETY: non-null (a table's key); by the caller's guarantee.
    drop_last::<super::KObject>(unsafe { NonNull::new_unchecked(obj as *mut Inner<super::KObject>) });
}

/// Every core's borrow slots (`percore::borrow`): a borrow writes only its own core's line.
static BORROWS: BorrowSlots<MAX_CORES> = BorrowSlots::new();

/// Cores whose slots a last drop scans: every core that can have borrowed is online.
fn borrow_cores() -> usize {
    crate::percpu::online_count().max(crate::percpu::current_index() + 1).min(MAX_CORES)
}

/// A borrow on a core other than the value's origin: set `scan_all` (once; SeqCst, before the
/// borrow publishes its slot). Out of line and cold: a private object's borrows on its own
/// core only compare the core index.
#[cold]
#[inline(never)]
fn mark_borrowed_elsewhere(scan_all: &AtomicBool) {
    if !scan_all.load(Ordering::SeqCst) {
        scan_all.store(true, Ordering::SeqCst);
    }
}

/// `repr(transparent)`: one `NonNull` word, so `Option<KRef<T>>` is that word with null for
/// `None` (segment page slots are read as words without their lock).
#[repr(transparent)]
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
        Ok(Self::init_at(p, value, false, false))
    }

    /// Allocate from NUMA node `node`'s memory (Corey's `memid`: object metadata lives near
    /// the core that will use it), or give the value back if memory is exhausted.
    #[inline]
    pub fn try_new_on_node(value: T, node: usize) -> Result<Self, T> {
        let layout = Layout::new::<Inner<T>>();
        let Some(p) = crate::mm::heap::try_alloc_on_node(layout, node) else { return Err(value) };
        Ok(Self::init_at(p, value, false, false))
    }

    /// `try_new_on_node` for a value that system calls may borrow (`borrow_raw`) instead of
    /// taking counted references (kernel objects).
    pub fn try_new_borrowable_on_node(value: T, node: usize) -> Result<Self, T> {
        let layout = Layout::new::<Inner<T>>();
        let Some(p) = crate::mm::heap::try_alloc_on_node(layout, node) else { return Err(value) };
        Ok(Self::init_at(p, value, true, false))
    }

    /// `try_new_borrowable_on_node` for a value whose count is kept per core (`refcache`).
    pub fn try_new_percore_on_node(value: T, node: usize) -> Result<Self, T> {
        let layout = Layout::new::<Inner<T>>();
        let Some(p) = crate::mm::heap::try_alloc_on_node(layout, node) else { return Err(value) };
        Ok(Self::init_at(p, value, true, true))
    }

    /// `p`: a fresh, non-null heap allocation with `Inner<T>`'s layout.
    fn init_at(p: *mut u8, value: T, borrowable: bool, percore: bool) -> Self {
        let ptr = p as *mut Inner<T>;
        let inner = Inner { strong: AtomicUsize::new(1), weak: AtomicUsize::new(1), deferred: AtomicBool::new(false), value, borrowable, origin: if borrowable { crate::percpu::current_index() as u32 } else { 0 }, scan_all: AtomicBool::new(false), percore, dead: AtomicBool::new(false), drop_state: DropState::new() };
        // SAFETY: p is a fresh allocation with Inner<T>'s layout.
        unsafe { ptr.write(inner) };
        // SAFETY: p is non-null (the allocator returned Some).
        KRef { ptr: unsafe { NonNull::new_unchecked(ptr) }, _owns: PhantomData }
    }

    fn inner(&self) -> &Inner<T> {
        // SAFETY: a KRef keeps the allocation and the value alive.
        unsafe { self.ptr.as_ref() }
    }

    pub fn strong_count(this: &Self) -> usize {
        this.inner().count()
    }

    /// Weak references, plus one for the strong ones together (for tests).
    pub fn weak_count(this: &Self) -> usize {
        this.inner().weak.load(Ordering::Acquire)
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

    /// Where the value behind a raw pointer is, without making a reference to it (for
    /// optimistic readers that check afterwards that it was alive: `Segment::duplicate`).
    ///
    /// # Safety
    /// `ptr` is (or was) a `KRef::<T>` pointer; the result is only an address computation.
    pub unsafe fn raw_value_ptr(ptr: *mut ()) -> *const T {
        // SAFETY: no memory is read: the field's address within the allocation.
        unsafe { core::ptr::addr_of!((*(ptr as *const Inner<T>)).value) }
    }

    /// A new reference to the value behind a raw pointer.
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw` and the reference it stands for (or another) is
    /// still held while this runs, so the count is at least one.
    pub unsafe fn clone_raw(ptr: *mut ()) -> Self {
        // SAFETY: as the caller guarantees, the allocation is alive with a count of at least one.
        let inner = unsafe { &*(ptr as *const Inner<T>) };
        inner.inc();
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
    #[inline]
    fn from_live_allocation(ptr: NonNull<Inner<T>>) -> Option<Self> {
        // SAFETY: as the callers guarantee, the allocation is alive.
        let inner = unsafe { ptr.as_ref() };
        if inner.percore {
            return Self::from_live_percore(ptr);
        }
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

    /// `from_live_allocation` of a per-core counted value: out of line and cold, so the plain
    /// path stays small enough to inline (inline, it pushed `Peek::counted` out of
    /// line, +26 guest instructions per `share_global` op).
    #[cold]
    #[inline(never)]
    fn from_live_percore(ptr: NonNull<Inner<T>>) -> Option<Self> {
        // SAFETY: as `from_live_allocation`'s callers guarantee, the allocation is alive.
        let inner = unsafe { ptr.as_ref() };
        // Not `then_some(KRef { .. })`: that would build the reference, and drop it (a
        // decrement never matched by an increment) when the object is dead.
        if !refcache::try_inc(&inner.counted()) {
            return None;
        }
        Some(KRef { ptr, _owns: PhantomData })
    }

    /// From now on, free this allocation only after a reclamation grace period (Tornado's
    /// existence guarantee, like Linux's SLAB_TYPESAFE_BY_RCU): set before the reference is
    /// published where lock-free readers can find it, so a reader inside a reclamation
    /// operation may try `try_clone_raw` even after the last reference went.
    pub fn defer_free(this: &Self) {
        // Stored only once: a value inserted into a second shared share (or again) writes no
        // line that its borrowers' `to_counted` or other cores' counts read.
        if !this.inner().deferred.load(Ordering::Relaxed) {
            this.inner().deferred.store(true, Ordering::Release);
        }
        // Borrowed from any core from now on: last drops scan every core (`scan_all`).
        if !this.inner().scan_all.load(Ordering::Relaxed) {
            this.inner().scan_all.store(true, Ordering::SeqCst);
        }
    }

    /// Borrow the value behind `ptr` without touching its count (`percore::borrow`): publish
    /// it in one of this core's borrow slots, then check that no last drop has begun
    /// (`DropState::is_live`: the borrow reads neither the count nor its line). `Ok(borrow)` keeps the value alive until the borrow is dropped, whatever
    /// happens to its counted references meanwhile (their last drop hands the drop to the last
    /// borrower). `Err(Some(b))`: the value has no counted reference left; `b` must be dropped
    /// (it may be the one to drop the value), outside any reclamation operation.
    /// `Err(None)`: this core has no free slot; take a counted reference instead.
    ///
    /// # Safety
    /// `ptr` came from `KRef::<T>::into_raw` of a value made by `try_new_borrowable_on_node`,
    /// and its allocation is not freed while this runs (a counted reference is held, or the
    /// caller is inside a reclamation operation and the value was `defer_free`d).
    #[inline]
    pub unsafe fn borrow_raw(ptr: *mut ()) -> Result<KBorrow<T>, Option<KBorrow<T>>> {
        // SAFETY: non-null (`into_raw`), alive by the caller's guarantee.
        let ptr = unsafe { NonNull::new_unchecked(ptr as *mut Inner<T>) };
        // SAFETY: as above.
        let inner = unsafe { ptr.as_ref() };
        if !inner.borrowable {
            return Err(None); // its last drop would not wait for borrowers
        }
        let core = crate::percpu::current_index();
        // Before the publication (see `scan_all`): a last drop that then reads the flag
        // clear has its orphan mark seen by this borrow's check below.
        if core != inner.origin as usize {
            mark_borrowed_elsewhere(&inner.scan_all);
        }
        let Some(slot) = BORROWS.publish(core, ptr.as_ptr() as *mut ()) else { return Err(None) };
        let b = KBorrow { ptr, core, slot };
        // After the publication's fence (the protocol's Dekker pairing with `drop_last`, which
        // marks the value orphaned, fences, then scans the slots).
        if !inner.drop_state.is_live() {
            return Err(Some(b));
        }
        Ok(b)
    }

    /// Borrow the value of a reference the caller holds (which keeps the count above zero
    /// while the borrow starts); `None` if this core has no free slot.
    #[inline]
    pub fn borrow(this: &Self) -> Option<KBorrow<T>> {
        // SAFETY: `this` is a counted reference, so the allocation is alive and the count is
        // at least one; a borrowable value (checked by `borrow_raw` in debug builds).
        match unsafe { Self::borrow_raw(this.ptr.as_ptr() as *mut ()) } {
            Ok(b) => Some(b),
            Err(Some(b)) => {
                // Cannot happen while `this` is held; end it properly anyway.
                drop(b);
                None
            }
            Err(None) => None,
        }
    }

    pub fn downgrade(this: &Self) -> KWeak<T> {
        this.inner().weak.fetch_add(1, Ordering::Relaxed);
        KWeak { ptr: this.ptr }
    }
}

impl<T> Clone for KRef<T> {
    fn clone(&self) -> Self {
        self.inner().inc();
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
        if self.inner().percore {
            self.inner().dec_percore();
            return;
        }
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
        let inner = unsafe { ptr.as_ref() };
        if inner.percore {
            // Dropped by a review (`refcache`), never here.
            inner.dec_percore();
            return None;
        }
        if inner.strong.fetch_sub(1, Ordering::Release) != 1 {
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
    // SAFETY: the value is not dropped yet, so the allocation is alive.
    let inner = unsafe { ptr.as_ref() };
    if inner.borrowable {
        // Mark it orphaned now; scan the other cores' borrow slots later, at this core's next
        // system call (`scan_orphans`), so a last drop reads no line another core writes
        // (two commuting calls, one freeing an object while the other borrows
        // another, would otherwise share every core's slot line). If the list is full (or
        // in use, from an interrupt), scan now.
        inner.drop_state.orphan();
        // Only borrowed on this core (its origin), if at all: its own slots are the only ones
        // to scan, now (no other core's line read, nothing deferred). SeqCst after the orphan
        // mark's fence: see `scan_all`.
        if !inner.scan_all.load(Ordering::SeqCst) && inner.origin as usize == crate::percpu::current_index() {
            if inner.drop_state.try_drop_on(&BORROWS, inner.origin as usize, ptr.as_ptr() as *mut ()) {
                drop_value(ptr);
            }
            return; // else a borrower on this core holds it and drops it when its borrow ends
        }
        if defer_scan(ptr.as_ptr() as *mut (), scan_orphan::<T>) {
            // The list's entry keeps the allocation alive (one weak count).
            return;
        }
        if !inner.drop_state.try_drop(&BORROWS, borrow_cores(), ptr.as_ptr() as *mut ()) {
            return; // a borrower still holds it and drops it when its borrow ends (`KBorrow`)
        }
    }
    drop_value(ptr);
}

/// An orphaned value on a core's list (`defer_scan`): scan the slots, drop the value if no
/// borrower holds it and none won the drop first, then give up the list's weak count.
///
/// # Safety
/// `p` is an `Inner<T>` put on the list by `drop_last` with one weak count of the list's own,
/// taken off the list once.
unsafe fn scan_orphan<T>(p: *mut ()) {
    // SAFETY: non-null; the list's weak count keeps the allocation alive.
    let ptr = unsafe { NonNull::new_unchecked(p as *mut Inner<T>) };
    // SAFETY: as above.
    let inner = unsafe { ptr.as_ref() };
    if inner.drop_state.try_drop(&BORROWS, borrow_cores(), p) {
        drop_value(ptr);
    }
    release_weak(ptr);
}

/// Orphans a core has not scanned yet (`drop_last`).
const ORPHANS: usize = 32;

struct Orphans {
    n: usize,
    items: [(usize, usize); ORPHANS],
}

/// One core's list, on its own line: only its core pushes and scans it (and `scan_all_orphans`
/// at quiescent points).
struct OrphanList {
    /// Entries waiting (read without the lock by `scan_orphans`' quick test, the only part of
    /// the list a system call with nothing deferred reads).
    waiting: AtomicUsize,
    list: percore::TicketLock<Orphans>,
}

static ORPHAN_LISTS: [percore::CachePadded<OrphanList>; MAX_CORES] =
    [const { percore::CachePadded::new(OrphanList { waiting: AtomicUsize::new(0), list: percore::TicketLock::new(Orphans { n: 0, items: [(0, 0); ORPHANS] }) }) }; MAX_CORES];

/// Put an orphaned value (`p`, scanned by `scan`) on this core's list, with one weak count of
/// the list's own. `false` if the list is full or in use (the caller scans now).
fn defer_scan(p: *mut (), scan: unsafe fn(*mut ())) -> bool {
    // Only inside a system call (`PerCpu::in_call`): a drop in the kernel's own code (a
    // context's exit, a test) still scans at once.
    let area = crate::percpu::this();
    if !area.in_call.load(Ordering::Relaxed) {
        return false;
    }
    let me = &ORPHAN_LISTS[area.index % MAX_CORES];
    let Some(mut l) = me.list.try_lock() else { return false };
    if l.n == ORPHANS {
        return false;
    }
    // SAFETY: `p` is an `Inner<_>` whose value is not dropped yet, so its allocation is
    // alive; every Inner starts with the strong then the weak count (`repr(C)`).
    let weak = unsafe { &(*(p as *const Inner<()>)).weak };
    weak.fetch_add(1, Ordering::Relaxed);
    let n = l.n;
    l.items[n] = (p as usize, scan as usize);
    l.n = n + 1;
    me.waiting.store(n + 1, Ordering::Release);
    area.orphans_pending.store(true, Ordering::Release);
    true
}

/// Scan the orphans core `core` left (`drop_last`): drop those no borrower holds.
#[inline]
fn scan_orphans_of(core: usize) {
    if ORPHAN_LISTS[core % MAX_CORES].waiting.load(Ordering::Acquire) != 0 {
        scan_waiting(core);
    }
}

/// `scan_orphans_of` once its quick test found entries. Out of line and cold: inlined into
/// the system-call path, the 512-byte copy of the list below gave `syscall_dispatch` a stack
/// frame and five saved registers on every call.
#[cold]
#[inline(never)]
fn scan_waiting(core: usize) {
    let me = &ORPHAN_LISTS[core % MAX_CORES];
    let (items, n) = {
        let Some(mut l) = me.list.try_lock() else { return };
        let taken = (l.items, l.n);
        l.n = 0;
        me.waiting.store(0, Ordering::Release);
        if let Some(a) = crate::percpu::get(core) {
            a.orphans_pending.store(false, Ordering::Release);
        }
        taken
    };
    for &(p, scan) in &items[..n] {
        // SAFETY: `scan` is the `scan_orphan::<T>` stored with `p` by `defer_scan` (a plain
        // function pointer kept as an integer), and the entry was taken off the list above,
        // once.
        unsafe {
            let scan: unsafe fn(*mut ()) = core::mem::transmute::<usize, unsafe fn(*mut ())>(scan);
            scan(p as *mut ());
        }
    }
}

/// Scan this core's orphans: in the idle loop, outside any lock or reclamation operation
/// (dropping a value may free and take locks).
#[inline]
pub fn scan_orphans() {
    refcache::review_own();
    scan_orphans_of(crate::percpu::current_index());
}

/// Whether orphans earlier calls on this core (`area`) left wait for their scan: one byte of
/// the core's own area (`PerCpu::orphans_pending`), which the caller holds already. The system-call path tests this and, only if set, calls
/// `scan_deferred` out of line before `call_begins`.
#[inline(always)]
pub fn orphans_waiting(area: &crate::percpu::PerCpu) -> bool {
    area.orphans_pending.load(Ordering::Relaxed)
}

/// Scan the orphans earlier calls on this core left (`orphans_waiting` said there are some).
#[cold]
#[inline(never)]
pub fn scan_deferred(area: &crate::percpu::PerCpu) {
    // Cleared first: the review and the scans below run outside a call (`in_call` is not
    // set yet), so what they drop is scanned at once and sets nothing again.
    area.orphans_pending.store(false, Ordering::Relaxed);
    if refcache::waiting(area.index) {
        refcache::review_own();
    }
    scan_orphans_of(area.index);
    if ORPHAN_LISTS[area.index % MAX_CORES].waiting.load(Ordering::Acquire) != 0 {
        area.orphans_pending.store(true, Ordering::Relaxed); // the list was busy: next call
    }
}

/// A system call starts on this core (`area`): defer the scans of this call's last drops
/// (`drop_last`) to the next call. The caller has scanned what earlier calls left
/// (`orphans_waiting`/`scan_deferred`).
#[inline(always)]
pub fn call_begins(area: &crate::percpu::PerCpu) {
    area.in_call.store(true, Ordering::Relaxed);
}

/// The system call ends: last drops outside calls scan at once again. `area` as above.
#[inline(always)]
pub fn call_ends(area: &crate::percpu::PerCpu) {
    area.in_call.store(false, Ordering::Relaxed);
}

/// Scan every core's orphans (quiescent points: exact object and memory counts).
pub fn scan_all_orphans() {
    refcache::review_all();
    for core in 0..borrow_cores() {
        scan_orphans_of(core);
    }
}

/// Drop the value whose last strong reference (and, if it was borrowed, last borrow) is gone,
/// then the weak count the strong ones held together.
fn drop_value<T>(ptr: NonNull<Inner<T>>) {
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

/// A link to a value that neither keeps it alive nor writes any of its counts: for a reverse
/// link whose holder the value's own drop removes, under a lock the link's users hold, before
/// the allocation can be freed (a segment's reverse map entry for an address range:
/// `AddressRange::drop` removes its entries under their bucket's lock, and the value is
/// dropped before its allocation is freed). It was a `KWeak`, whose making and dropping wrote
/// the range's count line, which every `obj_stat` and every counted reference of the range
/// also touch (conflicts of `ar_set_seg` / `ar_unmap` x `obj_stat` / `share_addobj` of the
/// range). Making or dropping one writes nothing; using it is `unsafe` (`KRef::borrow_raw` /
/// `try_clone_raw` on `as_raw`, under that lock).
pub struct KLink<T> {
    ptr: NonNull<Inner<T>>,
}

impl<T> KLink<T> {
    /// A link to the value behind `raw` (a `KRef::into_raw` / `as_raw` pointer). Only stores
    /// the pointer.
    pub fn from_raw(raw: *mut ()) -> Option<Self> {
        NonNull::new(raw as *mut Inner<T>).map(|ptr| KLink { ptr })
    }

    /// The linked value's raw pointer, in `KRef::into_raw`'s form.
    pub fn as_raw(&self) -> *mut () {
        self.ptr.as_ptr() as *mut ()
    }
}

// SAFETY: only a pointer; every use goes through `KRef`'s unsafe raw functions, whose callers
// guarantee the allocation is alive, and shares the value across cores like `KRef` (T: Send +
// Sync).
unsafe impl<T: Send + Sync> Send for KLink<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KLink<T> {}

/// A borrowed value (`KRef::borrow_raw`): derefs to it, keeps it alive without a count, and
/// ends the borrow when dropped (dropping the value if its last counted reference went during
/// the borrow and this was the last borrower). Ends on any core (it remembers the slot).
pub struct KBorrow<T> {
    ptr: NonNull<Inner<T>>,
    core: usize,
    slot: usize,
}

impl<T> KBorrow<T> {
    /// A counted reference to the borrowed value, if it still has one (for a call that keeps
    /// the object: an insert, a mapping).
    #[inline]
    pub fn to_counted(&self) -> Option<KRef<T>> {
        KRef::from_live_allocation(self.ptr)
    }

    /// The value's counted references (the borrow is not one).
    pub fn strong_count(&self) -> usize {
        // SAFETY: the borrow keeps the allocation alive.
        unsafe { self.ptr.as_ref() }.count()
    }

    /// The raw pointer, in `KRef::into_raw`'s form.
    pub fn as_raw(&self) -> *mut () {
        self.ptr.as_ptr() as *mut ()
    }
}

impl<T> Deref for KBorrow<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the borrow keeps the value alive (`percore::borrow`).
        &unsafe { self.ptr.as_ref() }.value
    }
}

impl<T> Drop for KBorrow<T> {
    fn drop(&mut self) {
        // SAFETY: the borrow keeps the allocation alive until here.
        let inner = unsafe { self.ptr.as_ref() };
        if inner.drop_state.end_borrow(&BORROWS, self.core, self.slot, borrow_cores(), self.ptr.as_ptr() as *mut ()) {
            last_borrow_ends(self.ptr);
        }
    }
}

/// A borrow's end that is also the value's last drop (rare): out of line, so the common end
/// of a borrow keeps a small frame (inlined, the value's whole drop cost every borrow's end
/// four saved registers).
#[cold]
#[inline(never)]
fn last_borrow_ends<T>(ptr: NonNull<Inner<T>>) {
    drop_value(ptr);
}

// SAFETY: like KRef: the borrow shares the value across cores.
unsafe impl<T: Send + Sync> Send for KBorrow<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for KBorrow<T> {}
