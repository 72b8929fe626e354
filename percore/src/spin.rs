//! Ticket spinlock: FIFO, one cache line, fine for locks that are rarely contended
//! (the NUMA-node page pools, refilled in batches). Contended hot locks want MCS.

use crate::sync::{const_fn_unless_loom, spin_loop, AtomicU32, Ordering};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};

pub struct TicketLock<T: ?Sized> {
    next: AtomicU32,
    serving: AtomicU32,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`.
unsafe impl<T: ?Sized + Send> Sync for TicketLock<T> {}
// SAFETY: moving the lock moves the data with it.
unsafe impl<T: ?Sized + Send> Send for TicketLock<T> {}

pub struct TicketLockGuard<'a, T: ?Sized> {
    lock: &'a TicketLock<T>,
    irq_token: Option<usize>,
    // The interrupt state (and, in the kernel, the lock) belongs to the core that took it.
    _not_send: PhantomData<*const ()>,
}

// SAFETY: sharing the guard only hands out `&T`, which needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for TicketLockGuard<'_, T> {}

impl<T> TicketLock<T> {
    const_fn_unless_loom! {
        pub fn new(value: T) -> Self {
            Self { next: AtomicU32::new(0), serving: AtomicU32::new(0), data: UnsafeCell::new(value) }
        }
    }

    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> TicketLock<T> {
    fn acquire(&self) {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        if self.serving.load(Ordering::Acquire) == ticket {
            return;
        }
        let t0 = crate::cpu::spin_start();
        while self.serving.load(Ordering::Acquire) != ticket {
            spin_loop();
        }
        crate::cpu::spin_end(t0);
    }

    pub fn lock(&self) -> TicketLockGuard<'_, T> {
        self.acquire();
        TicketLockGuard { lock: self, irq_token: None, _not_send: PhantomData }
    }

    pub fn try_lock(&self) -> Option<TicketLockGuard<'_, T>> {
        // Acquire: if the CAS succeeds, the previous holder's release store to `serving`
        // must happen-before our critical section.
        let serving = self.serving.load(Ordering::Acquire);
        self.next
            .compare_exchange(serving, serving.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| TicketLockGuard { lock: self, irq_token: None, _not_send: PhantomData })
    }

    /// Lock with interrupts disabled on this core until the guard drops, so an interrupt
    /// handler that takes the same lock cannot deadlock against us.
    pub fn lock_irqsave(&self) -> TicketLockGuard<'_, T> {
        let token = crate::cpu::irq_save();
        self.acquire();
        TicketLockGuard { lock: self, irq_token: Some(token), _not_send: PhantomData }
    }

    pub fn is_locked(&self) -> bool {
        self.next.load(Ordering::Relaxed) != self.serving.load(Ordering::Relaxed)
    }

    /// Exclusive access without locking: `&mut self` proves no one else holds the lock.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized> Drop for TicketLockGuard<'_, T> {
    fn drop(&mut self) {
        let s = self.lock.serving.load(Ordering::Relaxed);
        self.lock.serving.store(s.wrapping_add(1), Ordering::Release);
        if let Some(t) = self.irq_token {
            crate::cpu::irq_restore(t);
        }
    }
}

impl<T: ?Sized> Deref for TicketLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: holding the guard means we hold the lock.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for TicketLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: holding the guard means we hold the lock exclusively.
        unsafe { &mut *self.lock.data.get() }
    }
}

/// A ticket lock whose `lock()` always disables interrupts (kernel structures that an
/// interrupt handler also touches).
pub struct IrqTicketLock<T: ?Sized>(TicketLock<T>);

impl<T> IrqTicketLock<T> {
    const_fn_unless_loom! {
        pub fn new(value: T) -> Self {
            Self(TicketLock::new(value))
        }
    }
}

impl<T: ?Sized> IrqTicketLock<T> {
    pub fn lock(&self) -> TicketLockGuard<'_, T> {
        self.0.lock_irqsave()
    }

    pub fn try_lock(&self) -> Option<TicketLockGuard<'_, T>> {
        let token = crate::cpu::irq_save();
        match self.0.try_lock() {
            Some(mut g) => {
                g.irq_token = Some(token);
                Some(g)
            }
            None => {
                crate::cpu::irq_restore(token);
                None
            }
        }
    }

    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use super::*;

    fn fake_cycles() -> u64 {
        static T: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        T.fetch_add(1000, std::sync::atomic::Ordering::Relaxed)
    }

    /// A core that has to wait for a ticket lock gets the wait counted, once, with cycles; a
    /// core that never waits gets nothing.
    #[test]
    fn contended_acquisition_is_counted_on_the_waiting_core() {
        crate::cpu::set_cycle_counter(fake_cycles);
        let lock = std::sync::Arc::new(TicketLock::new(0u32));
        let (waiter, holder) = (201, 202);
        crate::cpu::register_thread(holder);
        let g = lock.lock();
        let l2 = lock.clone();
        let t = std::thread::spawn(move || {
            crate::cpu::register_thread(waiter);
            *l2.lock() += 1;
        });
        // Release only once the waiter has its ticket, so it must spin.
        while lock.next.load(Ordering::Relaxed) < 2 {
            std::thread::yield_now();
        }
        drop(g);
        t.join().unwrap();
        let (cycles, waits) = crate::cpu::spin_stats(waiter);
        assert_eq!(waits, 1);
        assert!(cycles > 0);
        assert_eq!(crate::cpu::spin_stats(holder), (0, 0));
    }
}
