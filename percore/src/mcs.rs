//! MCS queue lock (Mellor-Crummey and Scott; Corey figure 3), with the uncontended fast path
//! of Linux's qspinlock.
//!
//! Waiters queue on per-waiter nodes and each spins on its own node, so a contended release
//! does not make every waiter re-read a shared word (the ticket lock's cost, which grows
//! with the number of waiting cores). Only the waiter at the head of the queue watches the
//! lock word itself. An uncontended acquire is one compare-and-swap on the lock word and a
//! release one plain store, the cost of a test-and-set lock; the queue is used only when
//! the lock is held.
//!
//! A waiter leaves the queue as soon as it owns the lock word, handing the head position to
//! its successor, so its queue node is only needed during `acquire` and lives on that stack
//! frame: guards carry no node, nothing is allocated, and any depth of nesting works.

use crate::sync::{const_fn_unless_loom, spin_loop, AtomicBool, AtomicPtr, Ordering};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr;

/// One waiter's place in the queue (on the waiter's stack).
struct QueueNode {
    next: AtomicPtr<QueueNode>,
    /// Set while a predecessor is still ahead of us in the queue.
    waiting: AtomicBool,
}

pub struct McsLock<T: ?Sized> {
    /// The lock itself: held or not.
    locked: AtomicBool,
    /// Last waiter in the queue, or null when nobody waits.
    tail: AtomicPtr<QueueNode>,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`.
unsafe impl<T: ?Sized + Send> Sync for McsLock<T> {}
// SAFETY: moving the lock moves the data with it.
unsafe impl<T: ?Sized + Send> Send for McsLock<T> {}

impl<T> McsLock<T> {
    const_fn_unless_loom! {
        pub fn new(value: T) -> Self {
            Self { locked: AtomicBool::new(false), tail: AtomicPtr::new(ptr::null_mut()), data: UnsafeCell::new(value) }
        }
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> McsLock<T> {
    /// Take the lock word if free. Acquire pairs with the previous holder's release store.
    #[inline]
    fn try_take(&self) -> bool {
        self.locked.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    #[inline]
    fn acquire(&self) {
        // Fast path: nobody queued and the lock free. (With waiters queued we do not barge
        // past them.)
        if self.tail.load(Ordering::Relaxed).is_null() && self.try_take() {
            return;
        }
        self.acquire_queued();
    }

    #[cold]
    fn acquire_queued(&self) {
        let t0 = crate::cpu::spin_start();
        self.acquire_queued_untimed();
        crate::cpu::spin_end(t0);
    }

    fn acquire_queued_untimed(&self) {
        let node = QueueNode { next: AtomicPtr::new(ptr::null_mut()), waiting: AtomicBool::new(true) };
        let me = &node as *const QueueNode as *mut QueueNode;
        // AcqRel: Release publishes our node's initialisation to the successor that finds it
        // through this swap; Acquire makes a predecessor's node initialisation visible to us.
        let prev = self.tail.swap(me, Ordering::AcqRel);
        if !prev.is_null() {
            // SAFETY: a predecessor's node stays valid until it has handed the head position
            // on, which it does only after it has seen this link.
            unsafe { (*prev).next.store(me, Ordering::Release) };
            // Spin on our own node until we are the head.
            while node.waiting.load(Ordering::Acquire) {
                spin_loop();
            }
        }
        // Head of the queue: only we (and fast-path attempts while the queue empties) watch
        // the lock word.
        loop {
            if !self.locked.load(Ordering::Relaxed) && self.try_take() {
                break;
            }
            spin_loop();
        }
        // We own the lock: leave the queue, making our successor the head.
        let mut next = node.next.load(Ordering::Acquire);
        if next.is_null() {
            if self.tail.compare_exchange(me, ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return;
            }
            // A successor swapped itself in but has not linked yet: wait for the link, since
            // it will write into our node.
            loop {
                next = node.next.load(Ordering::Acquire);
                if !next.is_null() {
                    break;
                }
                spin_loop();
            }
        }
        // SAFETY: the successor spins on its node until this store, so the node is valid.
        unsafe { (*next).waiting.store(false, Ordering::Release) };
    }

    #[inline]
    fn release(&self) {
        // Release: our critical section happens before the next holder's.
        self.locked.store(false, Ordering::Release);
    }

    /// Take the lock.
    #[inline]
    pub fn lock(&self) -> McsGuard<'_, T> {
        self.acquire();
        McsGuard { lock: self, irq_token: None, _not_send: PhantomData }
    }

    /// As [`lock`](Self::lock) with interrupts disabled on this core until the guard drops.
    pub fn lock_irqsave(&self) -> McsGuard<'_, T> {
        let token = crate::cpu::irq_save();
        self.acquire();
        McsGuard { lock: self, irq_token: Some(token), _not_send: PhantomData }
    }

    /// Take the lock only if it is free and nobody is queued for it.
    pub fn try_lock(&self) -> Option<McsGuard<'_, T>> {
        if self.tail.load(Ordering::Relaxed).is_null() && self.try_take() {
            Some(McsGuard { lock: self, irq_token: None, _not_send: PhantomData })
        } else {
            None
        }
    }

    /// Run `f` under the lock.
    pub fn with_lock<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut g = self.lock();
        f(&mut g)
    }

    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }

    /// Are cores queued waiting for the lock?
    pub fn has_waiters(&self) -> bool {
        !self.tail.load(Ordering::Relaxed).is_null()
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

pub struct McsGuard<'a, T: ?Sized> {
    lock: &'a McsLock<T>,
    irq_token: Option<usize>,
    // Interrupt state belongs to the core that saved it.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard only hands out `&T`, which needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for McsGuard<'_, T> {}

impl<T: ?Sized> Drop for McsGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.release();
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
