//! Atomics and spinning, switched to `loom`'s model-checked versions under `cfg(loom)`.
//!
//! Every primitive whose protocol is model-checked takes its atomics from here, so the loom
//! tests check the very code the kernel runs. Global configuration (the core count and the
//! environment's function pointers in `cpu`) stays on `core` atomics: it is set once at boot
//! and is not part of any protocol.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// One iteration of a busy-wait loop. Under loom this yields, which tells the model checker
/// that the thread cannot make progress until another one runs.
///
/// On the host (`std`), threads are not cores: the holder or the next waiter of a lock may be
/// descheduled, and pure spinning then burns the rest of the time slice (with more threads
/// than cores a FIFO lock can crawl). So a host waiter yields its core to the OS every
/// `HOST_YIELD_EVERY` spins. The kernel spins purely: its lock holders are not preempted.
#[inline(always)]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    {
        core::hint::spin_loop();
        #[cfg(feature = "std")]
        host_backoff();
    }
    #[cfg(loom)]
    loom::thread::yield_now();
}

#[cfg(all(feature = "std", not(loom)))]
const HOST_YIELD_EVERY: u32 = 128;

#[cfg(all(feature = "std", not(loom)))]
#[inline(always)]
fn host_backoff() {
    use std::cell::Cell;
    std::thread_local! {
        static SPINS: Cell<u32> = const { Cell::new(0) };
    }
    SPINS.with(|s| {
        let n = s.get().wrapping_add(1);
        s.set(n);
        if n % HOST_YIELD_EVERY == 0 {
            std::thread::yield_now();
        }
    });
}

/// `const fn` outside loom (so kernel statics can hold the primitive), a plain `fn` under
/// loom (whose atomics have no `const` constructor). The body is written once.
macro_rules! const_fn_unless_loom {
    ($(#[$m:meta])* $vis:vis fn $name:ident $($rest:tt)*) => {
        #[cfg(not(loom))]
        $(#[$m])* $vis const fn $name $($rest)*
        #[cfg(loom)]
        $(#[$m])* $vis fn $name $($rest)*
    };
}
pub(crate) use const_fn_unless_loom;

/// The second half of a store-then-load (Dekker) handshake written with `SeqCst` accesses,
/// placed between the store (or RMW) and the load.
///
/// With `SeqCst` on both sides, the C11 model already orders each thread's store before its
/// load in the single total order. Where a handshake also has to order the thread's *later*
/// non-`SeqCst` loads (the reclamation protocol's pointer loads after `enter`), C11 wants a
/// `SeqCst` fence. On x86-64 the locked RMW or `xchg` that a `SeqCst` RMW or store compiles to
/// is a full barrier already, so there this is nothing; elsewhere it is `fence(SeqCst)`. Loom
/// models `SeqCst` accesses only as `AcqRel` (loom README, "Unsupported features") but does
/// model `fence(SeqCst)`, so under loom it is the fence too.
#[inline(always)]
pub(crate) fn dekker_fence() {
    #[cfg(any(loom, not(target_arch = "x86_64")))]
    fence(Ordering::SeqCst);
}
