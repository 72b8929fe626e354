//! Scalable reader-writer lock in the MCS family (Corey section 2 used one for shares).
//!
//! Readers announce themselves in a per-core counter on its own cache line and never write a
//! shared word, so read acquisitions on different cores do not bounce a line between them:
//! the read side scales with cores. Writers queue on an MCS lock (each spins on its own node),
//! then raise a writer flag and wait for each core's reader count to drain. Waiting readers
//! spin on the writer flag, which they only read.
//!
//! The reader/writer handshake is a store-then-load (Dekker) pattern: a reader increments
//! its count then checks the flag; a writer sets the flag then checks the counts. With both
//! sides `SeqCst` at least one of them sees the other.
//!
//! Writers are preferred: a stream of writers can starve readers, the right trade for
//! read-mostly structures such as shares, where writes are rare.

extern crate alloc;

use crate::mcs::{McsGuard, McsLock};
use crate::pad::CachePadded;
use crate::sync::{dekker_fence, spin_loop, AtomicBool, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

pub struct RwLock<T: ?Sized> {
    writers: McsLock<()>,
    writer_active: CachePadded<AtomicBool>,
    readers: Box<[CachePadded<AtomicUsize>]>,
    data: UnsafeCell<T>,
}

// SAFETY: readers share `&T` across threads (needs `T: Sync`); writers get `&mut T` from any
// thread (needs `T: Send`).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}
// SAFETY: moving the lock moves the data with it.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}

impl<T> RwLock<T> {
    /// One reader slot per online core ([`crate::core_count`]).
    pub fn new(value: T) -> Self {
        Self::with_reader_slots(value, crate::core_count())
    }

    /// `slots` reader counters (at least 1). Cores beyond `slots` share slots by index modulo
    /// `slots`: still correct, less scalable. Each slot costs 128 bytes.
    pub fn with_reader_slots(value: T, slots: usize) -> Self {
        let slots = slots.max(1);
        let readers: Vec<CachePadded<AtomicUsize>> = (0..slots).map(|_| CachePadded::new(AtomicUsize::new(0))).collect();
        Self {
            writers: McsLock::new(()),
            writer_active: CachePadded::new(AtomicBool::new(false)),
            readers: readers.into_boxed_slice(),
            data: UnsafeCell::new(value),
        }
    }

    /// Like `new`, but out-of-memory gives the value back instead of aborting (the kernel
    /// must not panic when a user program exhausts memory).
    pub fn try_new(value: T) -> Result<Self, T> {
        let slots = crate::core_count().max(1);
        let mut readers: Vec<CachePadded<AtomicUsize>> = Vec::new();
        if readers.try_reserve_exact(slots).is_err() {
            return Err(value);
        }
        readers.extend((0..slots).map(|_| CachePadded::new(AtomicUsize::new(0))));
        Ok(Self {
            writers: McsLock::new(()),
            writer_active: CachePadded::new(AtomicBool::new(false)),
            // The capacity is exact, so this conversion does not reallocate.
            readers: readers.into_boxed_slice(),
            data: UnsafeCell::new(value),
        })
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    pub fn reader_slots(&self) -> usize {
        self.readers.len()
    }

    /// Readers holding the lock through slot `slot` now (0 for a slot that does not exist):
    /// what shows that a core's readers stay on its own line.
    pub fn readers_in(&self, slot: usize) -> usize {
        self.readers.get(slot).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    fn read_acquire(&self, slot: usize) {
        let count = &self.readers[slot];
        loop {
            count.fetch_add(1, Ordering::SeqCst);
            dekker_fence();
            if !self.writer_active.load(Ordering::SeqCst) {
                return;
            }
            // A writer is in or about to be: step back so it can drain us, and wait on the
            // flag (read-only spinning; the line stays shared until the writer clears it).
            count.fetch_sub(1, Ordering::Release);
            let t0 = crate::cpu::spin_start();
            while self.writer_active.load(Ordering::Relaxed) {
                spin_loop();
            }
            crate::cpu::spin_end(t0);
        }
    }

    fn write_acquire(&self) -> McsGuard<'_, ()> {
        let queue = self.writers.lock();
        self.writer_active.store(true, Ordering::SeqCst);
        dekker_fence();
        let mut t0 = None;
        for count in self.readers.iter() {
            // Acquire pairs with each reader's releasing decrement, so their reads happen
            // before our writes.
            while count.load(Ordering::SeqCst) != 0 {
                t0.get_or_insert_with(crate::cpu::spin_start);
                spin_loop();
            }
        }
        if let Some(t0) = t0 {
            crate::cpu::spin_end(t0);
        }
        queue
    }

    /// Shared access. Uses the calling core's reader slot.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.read_on(crate::cpu_id())
    }

    /// Shared access through reader slot `core % reader_slots()` (explicit core index for
    /// callers that already know it, and for model checking).
    pub fn read_on(&self, core: usize) -> RwLockReadGuard<'_, T> {
        let slot = core % self.readers.len();
        self.read_acquire(slot);
        RwLockReadGuard { lock: self, slot, irq_token: None, _not_send: PhantomData }
    }

    /// Shared access with interrupts disabled on this core until the guard drops.
    pub fn read_irqsave(&self) -> RwLockReadGuard<'_, T> {
        let token = crate::cpu::irq_save();
        let slot = crate::cpu_id() % self.readers.len();
        self.read_acquire(slot);
        RwLockReadGuard { lock: self, slot, irq_token: Some(token), _not_send: PhantomData }
    }

    /// Exclusive access.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        let queue = self.write_acquire();
        RwLockWriteGuard { lock: self, queue: Some(queue), irq_token: None }
    }

    /// Exclusive access with interrupts disabled on this core until the guard drops.
    pub fn write_irqsave(&self) -> RwLockWriteGuard<'_, T> {
        let token = crate::cpu::irq_save();
        let queue = self.write_acquire();
        RwLockWriteGuard { lock: self, queue: Some(queue), irq_token: Some(token) }
    }

    /// Is a writer holding or draining the lock?
    pub fn is_write_locked(&self) -> bool {
        self.writer_active.load(Ordering::Relaxed)
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    slot: usize,
    irq_token: Option<usize>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard only hands out `&T`, which needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        // Release: our reads happen before a writer that sees the count drop.
        self.lock.readers[self.slot].fetch_sub(1, Ordering::Release);
        if let Some(t) = self.irq_token {
            crate::cpu::irq_restore(t);
        }
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: our slot count is non-zero and no writer was active when we checked, so no
        // writer gets past its drain loop until we drop.
        unsafe { &*self.lock.data.get() }
    }
}

pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    queue: Option<McsGuard<'a, ()>>,
    irq_token: Option<usize>,
}

// SAFETY: sharing the guard only hands out `&T`, which needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        // Release: our writes happen before any reader that sees the flag clear.
        self.lock.writer_active.store(false, Ordering::Release);
        // The next queued writer (if any) raises the flag again.
        drop(self.queue.take());
        if let Some(t) = self.irq_token {
            crate::cpu::irq_restore(t);
        }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: we hold the writer queue head and every reader slot drained.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}
