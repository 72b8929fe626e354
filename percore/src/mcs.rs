//! MCS queue lock (Mellor-Crummey and Scott; Corey figure 3).
//!
//! Each waiter spins on its own queue node, so a release writes one cache line that only the
//! next waiter reads: the cost of a contended hand-off does not grow with the number of
//! waiting cores, unlike the ticket lock where every waiter re-reads the shared `serving`
//! word after each release.
//!
//! A queue node must stay put while it is in the queue, which a guard returned by value
//! cannot promise for a node inside itself. So:
//! - [`McsLock::lock`] takes a node from a small pool owned by the calling core (kernel) or
//!   thread (host), falling back to a heap node if all are in use (deep nesting);
//! - [`McsLock::with_lock`] keeps the node on the caller's stack for the closure's duration,
//!   the cheapest form.

extern crate alloc;

use crate::sync::{const_fn_unless_loom, spin_loop, AtomicBool, AtomicPtr, Ordering};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr;

/// One waiter's place in an MCS queue.
pub struct McsNode {
    next: AtomicPtr<McsNode>,
    locked: AtomicBool,
}

impl McsNode {
    const_fn_unless_loom! {
        pub fn new() -> Self {
            Self { next: AtomicPtr::new(ptr::null_mut()), locked: AtomicBool::new(false) }
        }
    }
}

impl Default for McsNode {
    fn default() -> Self {
        Self::new()
    }
}

pub struct McsLock<T: ?Sized> {
    tail: AtomicPtr<McsNode>,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`.
unsafe impl<T: ?Sized + Send> Sync for McsLock<T> {}
// SAFETY: moving the lock moves the data with it.
unsafe impl<T: ?Sized + Send> Send for McsLock<T> {}

impl<T> McsLock<T> {
    const_fn_unless_loom! {
        pub fn new(value: T) -> Self {
            Self { tail: AtomicPtr::new(ptr::null_mut()), data: UnsafeCell::new(value) }
        }
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> McsLock<T> {
    /// Enqueue `node` and wait until it reaches the head.
    ///
    /// # Safety
    /// `node` must stay valid and unmoved, and not be used for anything else, until the
    /// matching `release`.
    #[inline]
    unsafe fn acquire(&self, node: *const McsNode) {
        // SAFETY: the caller lends us the node exclusively.
        let n = unsafe { &*node };
        n.next.store(ptr::null_mut(), Ordering::Relaxed);
        // AcqRel: Release publishes the node's initialisation to our successor (which finds
        // the node through this swap); Acquire pairs with the releasing CAS of a holder that
        // left the queue empty.
        let prev = self.tail.swap(node as *mut McsNode, Ordering::AcqRel);
        if !prev.is_null() {
            // Only a queued waiter needs the flag, and nobody can clear it before we link
            // ourselves below (the release store orders the two), so the uncontended path
            // skips this store.
            n.locked.store(true, Ordering::Relaxed);
            // SAFETY: `prev` is the node of a holder or waiter ahead of us; it cannot leave
            // the queue (and so its node stays valid) until it has seen our link below.
            unsafe { (*prev).next.store(node as *mut McsNode, Ordering::Release) };
            // Spin on our own node only: the predecessor hands over by clearing `locked`.
            while n.locked.load(Ordering::Acquire) {
                spin_loop();
            }
        }
    }

    /// Try to take the lock only if nobody holds or waits for it.
    ///
    /// # Safety
    /// As for `acquire`, if it returns true.
    unsafe fn try_acquire(&self, node: *const McsNode) -> bool {
        // SAFETY: the caller lends us the node exclusively.
        let n = unsafe { &*node };
        n.next.store(ptr::null_mut(), Ordering::Relaxed);
        self.tail
            .compare_exchange(ptr::null_mut(), node as *mut McsNode, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Pass the lock to the next waiter, or mark it free.
    ///
    /// # Safety
    /// `node` is the node this holder acquired with.
    #[inline]
    unsafe fn release(&self, node: *const McsNode) {
        // SAFETY: our node stays valid until we return.
        let n = unsafe { &*node };
        let mut next = n.next.load(Ordering::Acquire);
        if next.is_null() {
            // No known successor: if we are still the tail, the queue becomes empty.
            if self
                .tail
                .compare_exchange(node as *mut McsNode, ptr::null_mut(), Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
            // A successor swapped itself in but has not linked yet: wait for the link.
            loop {
                next = n.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                spin_loop();
            }
        }
        // SAFETY: the successor spins until this store, so its node is valid here.
        unsafe { (*next).locked.store(false, Ordering::Release) };
    }

    /// Take the lock with a queue node from the calling core's (host: thread's) pool.
    pub fn lock(&self) -> McsGuard<'_, T> {
        let node = NodeHandle::take();
        // SAFETY: the handle owns the node until the guard drops, which releases first.
        unsafe { self.acquire(node.ptr()) };
        McsGuard { lock: self, node, irq_token: None, _not_send: PhantomData }
    }

    /// As [`lock`](Self::lock) with interrupts disabled on this core until the guard drops.
    pub fn lock_irqsave(&self) -> McsGuard<'_, T> {
        // Interrupts go off before we take a pool node, so a handler on this core cannot
        // race us for the same node.
        let token = crate::cpu::irq_save();
        let node = NodeHandle::take();
        // SAFETY: as in `lock`.
        unsafe { self.acquire(node.ptr()) };
        McsGuard { lock: self, node, irq_token: Some(token), _not_send: PhantomData }
    }

    pub fn try_lock(&self) -> Option<McsGuard<'_, T>> {
        let node = NodeHandle::take();
        // SAFETY: on success the handle owns the node until the guard drops.
        if unsafe { self.try_acquire(node.ptr()) } {
            Some(McsGuard { lock: self, node, irq_token: None, _not_send: PhantomData })
        } else {
            None
        }
    }

    /// Run `f` under the lock with the queue node on this stack frame (no pool lookup).
    pub fn with_lock<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        struct Release<'a, T: ?Sized> {
            lock: &'a McsLock<T>,
            node: *const McsNode,
        }
        impl<T: ?Sized> Drop for Release<'_, T> {
            fn drop(&mut self) {
                // SAFETY: `node` is the node we acquired with, still on the frame below.
                unsafe { self.lock.release(self.node) }
            }
        }
        let node = McsNode::new();
        // SAFETY: `node` lives on this frame until after the `Release` guard (declared after
        // it, so dropped before it) has released the lock, also when `f` unwinds.
        unsafe { self.acquire(&node) };
        let _release = Release { lock: self, node: &node };
        // SAFETY: we hold the lock.
        f(unsafe { &mut *self.data.get() })
    }

    pub fn is_locked(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

pub struct McsGuard<'a, T: ?Sized> {
    lock: &'a McsLock<T>,
    node: NodeHandle,
    irq_token: Option<usize>,
    // Pool nodes and interrupt state belong to the core (thread) that took them.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard only hands out `&T`, which needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for McsGuard<'_, T> {}

impl<T: ?Sized> Drop for McsGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: we acquired with this node.
        unsafe { self.lock.release(self.node.ptr()) };
        self.node.give_back();
        if let Some(t) = self.irq_token {
            crate::cpu::irq_restore(t);
        }
    }
}

impl<T: ?Sized> Deref for McsGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: holding the guard means we hold the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for McsGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: holding the guard means we hold the lock exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}

/// An MCS lock whose `lock()` always disables interrupts.
pub struct IrqMcsLock<T: ?Sized>(McsLock<T>);

impl<T> IrqMcsLock<T> {
    const_fn_unless_loom! {
        pub fn new(value: T) -> Self {
            Self(McsLock::new(value))
        }
    }
}

impl<T: ?Sized> IrqMcsLock<T> {
    pub fn lock(&self) -> McsGuard<'_, T> {
        self.0.lock_irqsave()
    }
    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}

// ---- queue-node pools ---------------------------------------------------------------------

/// Nodes per pool: the depth of MCS locks one core (thread) can hold at once before falling
/// back to heap nodes. Eight nodes of 16 bytes fill one 128-byte line pair.
const POOL_NODES: usize = 8;

pub(crate) struct NodePool {
    nodes: [McsNode; POOL_NODES],
    /// Bit i set: node i is in use. Only the owning core (thread) touches it, with interrupts
    /// possibly nesting in between; a handler that takes and returns a node restores the mask
    /// before we resume, so plain load/store suffices.
    used: core::sync::atomic::AtomicU32,
}

impl NodePool {
    const_fn_unless_loom! {
        fn new() -> Self {
            // `[const { .. }; N]` would do, but loom's nodes are not const.
            Self {
                nodes: [McsNode::new(), McsNode::new(), McsNode::new(), McsNode::new(),
                        McsNode::new(), McsNode::new(), McsNode::new(), McsNode::new()],
                used: core::sync::atomic::AtomicU32::new(0),
            }
        }
    }
}

enum NodeHandle {
    Pool { pool: *const NodePool, index: u32 },
    Heap(*mut McsNode),
}

impl NodeHandle {
    #[inline]
    fn take() -> Self {
        let pool = pools::current();
        // SAFETY: pools live for the rest of the program (static in the kernel, leaked per
        // thread on the host).
        let p = unsafe { &*pool };
        let used = p.used.load(core::sync::atomic::Ordering::Relaxed);
        let free = !used & ((1u32 << POOL_NODES) - 1);
        if free != 0 {
            let index = free.trailing_zeros();
            p.used.store(used | (1 << index), core::sync::atomic::Ordering::Relaxed);
            NodeHandle::Pool { pool, index }
        } else {
            NodeHandle::Heap(alloc::boxed::Box::into_raw(alloc::boxed::Box::new(McsNode::new())))
        }
    }

    fn ptr(&self) -> *const McsNode {
        match *self {
            // SAFETY: the pool outlives the handle and `index < POOL_NODES`.
            NodeHandle::Pool { pool, index } => unsafe { &(*pool).nodes[index as usize] as *const McsNode },
            NodeHandle::Heap(p) => p,
        }
    }

    #[inline]
    fn give_back(&mut self) {
        match *self {
            NodeHandle::Pool { pool, index } => {
                // SAFETY: the pool outlives the handle.
                let p = unsafe { &*pool };
                let used = p.used.load(core::sync::atomic::Ordering::Relaxed);
                p.used.store(used & !(1 << index), core::sync::atomic::Ordering::Relaxed);
            }
            NodeHandle::Heap(node) => {
                // SAFETY: made by `Box::into_raw` in `take`, released from the queue already.
                drop(unsafe { alloc::boxed::Box::from_raw(node) });
            }
        }
    }
}

#[cfg(all(loom, not(feature = "std")))]
compile_error!("cfg(loom) needs the `std` feature (loom's threads are host threads)");

#[cfg(feature = "std")]
mod pools {
    use super::NodePool;
    // Host: one pool per thread, leaked so that a node stays valid even if a guard is
    // forgotten and its thread exits while the node is queued (a few hundred bytes per
    // thread ever created).
    #[cfg(not(loom))]
    std::thread_local! {
        // A `const` initialiser makes each access a plain TLS load (no lazy-init state).
        static POOL: std::cell::Cell<*const NodePool> = const { std::cell::Cell::new(std::ptr::null()) };
    }
    #[cfg(not(loom))]
    #[inline]
    pub(super) fn current() -> *const NodePool {
        POOL.with(|p| {
            let mut pool = p.get();
            if pool.is_null() {
                pool = Box::leak(Box::new(NodePool::new()));
                p.set(pool);
            }
            pool
        })
    }
    #[cfg(loom)]
    loom::thread_local! {
        static POOL: &'static NodePool = Box::leak(Box::new(NodePool::new()));
    }
    #[cfg(loom)]
    pub(super) fn current() -> *const NodePool {
        POOL.with(|p| *p as *const NodePool)
    }
}

#[cfg(not(feature = "std"))]
mod pools {
    use super::NodePool;
    use crate::{CachePadded, MAX_CORES};
    // Kernel: one pool per core. A guard must be dropped on the core that took it, which
    // holds because kernel code holding a spinlock is not migrated.
    static POOLS: [CachePadded<NodePool>; MAX_CORES] = [const { CachePadded::new(NodePool::new()) }; MAX_CORES];
    pub(super) fn current() -> *const NodePool {
        &*POOLS[crate::cpu_id() % MAX_CORES] as *const NodePool
    }
}
