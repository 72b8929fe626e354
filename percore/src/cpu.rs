//! Core identity, supplied by the environment.
//!
//! In the kernel, `cpu_id()` reads the per-CPU area through GS; on the host (feature `std`)
//! it reads a thread-local index registered with `register_thread`. Code above this module
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
    assert!((1..=MAX_CORES).contains(&n));
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

static CYCLES: AtomicUsize = AtomicUsize::new(0);

/// Install the environment's cycle counter (the kernel's TSC), which times lock spinning
/// (`spin_stats`). Without one nothing is timed or counted.
pub fn set_cycle_counter(f: fn() -> u64) {
    CYCLES.store(f as usize, Ordering::Release);
}

/// The cycle counter, or 0 if the environment installed none.
#[inline]
pub fn cycles() -> u64 {
    let p = CYCLES.load(Ordering::Acquire);
    if p == 0 {
        return 0;
    }
    // SAFETY: the only writer stores a `fn() -> u64` cast to usize.
    let f = unsafe { core::mem::transmute::<usize, fn() -> u64>(p) };
    f()
}

/// Per-core lock spin statistics (NIX's measuring framework): cycles this core spent
/// waiting for a lock another core held, and how many acquisitions had to wait. Each core
/// writes only its own line. Plain `core` atomics even under loom: they are counters, not
/// part of any protocol the models check.
struct SpinStat {
    cycles: core::sync::atomic::AtomicU64,
    waits: core::sync::atomic::AtomicU64,
}

static SPIN: [crate::CachePadded<SpinStat>; MAX_CORES] = [const {
    crate::CachePadded::new(SpinStat { cycles: core::sync::atomic::AtomicU64::new(0), waits: core::sync::atomic::AtomicU64::new(0) })
}; MAX_CORES];

/// A lock's slow path: the cycle count when it started waiting (0 if nothing is timed).
#[inline]
pub(crate) fn spin_start() -> u64 {
    cycles()
}

/// A lock's slow path is over: count the wait on the calling core.
#[inline]
pub(crate) fn spin_end(start: u64) {
    if start == 0 {
        return;
    }
    if let Some(s) = SPIN.get(cpu_id()) {
        s.cycles.fetch_add(cycles().saturating_sub(start), core::sync::atomic::Ordering::Relaxed);
        s.waits.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    }
}

/// `(cycles spent spinning, acquisitions that waited)` on core `core` since boot, over every
/// lock of this crate (ticket, MCS, reader-writer).
pub fn spin_stats(core: usize) -> (u64, u64) {
    SPIN.get(core)
        .map(|s| (s.cycles.load(core::sync::atomic::Ordering::Relaxed), s.waits.load(core::sync::atomic::Ordering::Relaxed)))
        .unwrap_or((0, 0))
}

/// Install the environment's interrupt save/restore (kernel only). `save` disables
/// interrupts and returns a token; `restore` puts the previous state back.
pub fn set_irq_ops(save: fn() -> usize, restore: fn(usize)) {
    IRQ_SAVE.store(save as usize, Ordering::Release);
    IRQ_RESTORE.store(restore as usize, Ordering::Release);
}

/// Disable interrupts on this core (through the environment's hook) and return a token for
/// [`irq_restore`]. Without a hook (host builds) this does nothing and returns 0.
#[inline]
pub fn irq_save() -> usize {
    let p = IRQ_SAVE.load(Ordering::Acquire);
    if p == 0 {
        return 0;
    }
    let f: fn() -> usize = unsafe_fn_from_usize(p);
    f()
}

/// Put back the interrupt state that [`irq_save`] returned `token` for.
#[inline]
pub fn irq_restore(token: usize) {
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

/// Interrupts off on this core until dropped (restores the state found at creation).
pub struct IrqGuard {
    token: usize,
    // Interrupt state belongs to the core that saved it.
    _not_send: core::marker::PhantomData<*const ()>,
}

impl IrqGuard {
    #[inline]
    pub fn new() -> Self {
        Self { token: irq_save(), _not_send: core::marker::PhantomData }
    }
}

impl Default for IrqGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for IrqGuard {
    #[inline]
    fn drop(&mut self) {
        irq_restore(self.token)
    }
}

#[cfg(feature = "std")]
mod host {
    use std::cell::Cell;
    // Under loom every modelled thread runs on one OS thread, so the index must be loom's
    // thread-local to stay per modelled thread.
    #[cfg(not(loom))]
    std::thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(0) };
    }
    #[cfg(loom)]
    loom::thread_local! {
        static INDEX: Cell<usize> = Cell::new(0);
    }
    pub fn thread_index() -> usize {
        INDEX.with(|c| c.get())
    }
    pub fn set(i: usize) {
        INDEX.with(|c| c.set(i))
    }
}

/// Host only: bind the calling thread to core index `i` for `cpu_id()`. Threads that never
/// register read index 0; every primitive stays correct then (several threads on one
/// index only lose locality), because none relies on a core index being exclusive.
#[cfg(feature = "std")]
pub fn register_thread(i: usize) {
    assert!(i < MAX_CORES);
    host::set(i)
}
