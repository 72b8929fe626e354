//! Core identity, supplied by the environment.
//!
//! In the kernel, `cpu_id()` reads the per-CPU area through GS; on the host (feature `std`)
//! it reads a thread-local index registered with [`register_thread`]. Code above this module
//! never cares which.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Upper bound on cores the system supports (xAPIC ids are 8 bits).
pub const MAX_CORES: usize = 256;

static CORE_COUNT: AtomicUsize = AtomicUsize::new(1);
static PROVIDER: AtomicUsize = AtomicUsize::new(0);
static IRQ_SAVE: AtomicUsize = AtomicUsize::new(0);
static IRQ_RESTORE: AtomicUsize = AtomicUsize::new(0);

/// Install the function that returns the calling core's index (0-based, dense).
pub fn set_cpu_id_provider(f: fn() -> usize) {
    PROVIDER.store(f as usize, Ordering::Release);
}

/// Set the number of cores online (the length of every `PerCore` view).
pub fn set_core_count(n: usize) {
    assert!(n >= 1 && n <= MAX_CORES);
    CORE_COUNT.store(n, Ordering::Release);
}

pub fn core_count() -> usize {
    CORE_COUNT.load(Ordering::Acquire)
}

/// The calling core's dense index.
#[inline]
pub fn cpu_id() -> usize {
    let p = PROVIDER.load(Ordering::Acquire);
    if p != 0 {
        // Only `fn() -> usize` values are ever stored in PROVIDER.
        let f: fn() -> usize = unsafe_fn_from_usize(p);
        return f();
    }
    #[cfg(feature = "std")]
    {
        return host::thread_index();
    }
    #[allow(unreachable_code)]
    0
}

/// Install the environment's interrupt save/restore (kernel only). `save` disables
/// interrupts and returns a token; `restore` puts the previous state back.
pub fn set_irq_ops(save: fn() -> usize, restore: fn(usize)) {
    IRQ_SAVE.store(save as usize, Ordering::Release);
    IRQ_RESTORE.store(restore as usize, Ordering::Release);
}

#[inline]
pub(crate) fn irq_save() -> usize {
    let p = IRQ_SAVE.load(Ordering::Acquire);
    if p == 0 {
        return 0;
    }
    let f: fn() -> usize = unsafe_fn_from_usize(p);
    f()
}

#[inline]
pub(crate) fn irq_restore(token: usize) {
    let p = IRQ_RESTORE.load(Ordering::Acquire);
    if p == 0 {
        return;
    }
    let f: fn(usize) = unsafe_fn1_from_usize(p);
    f(token)
}

#[inline(always)]
fn unsafe_fn_from_usize(p: usize) -> fn() -> usize {
    // SAFETY: the only writers store a `fn() -> usize` cast to usize.
    unsafe { core::mem::transmute::<usize, fn() -> usize>(p) }
}

#[inline(always)]
fn unsafe_fn1_from_usize(p: usize) -> fn(usize) {
    // SAFETY: the only writer stores a `fn(usize)` cast to usize.
    unsafe { core::mem::transmute::<usize, fn(usize)>(p) }
}

#[cfg(feature = "std")]
mod host {
    use std::cell::Cell;
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(0) };
    }
    pub fn thread_index() -> usize {
        INDEX.with(|c| c.get())
    }
    pub fn set(i: usize) {
        INDEX.with(|c| c.set(i))
    }
}

/// Host only: bind the calling thread to core index `i` for `cpu_id()`.
#[cfg(feature = "std")]
pub fn register_thread(i: usize) {
    assert!(i < MAX_CORES);
    host::set(i)
}
