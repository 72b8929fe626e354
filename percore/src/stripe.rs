//! Striped try-locks: `N` one-word locks, each on a cache line of its own, keyed by a hash of
//! an object's number, with the acquisition rule that keeps several of them deadlock-free.
//!
//! Used by the library OS's file system for its directory locks (docs/fs.md, "Create and
//! unlink"): a change on the per-directory side locks the stripe of every inode it changes,
//! the first (its parent directory) waiting and every later one (an unlink's victim, a link's
//! target) only if it is free. A change refused a later stripe gives up before writing
//! anything, drops what it holds and runs again under a lock that excludes every
//! per-directory change (the file system's exclusive side). Two changes each holding one
//! stripe and wanting the other's therefore never wait for each other: only the first
//! acquisition of a change waits, and a change that waits holds no stripe yet.
//!
//! Model-checked in `tests/loom.rs` (`stripe_*`): mutual exclusion per stripe, and two
//! changes taking two stripes in opposite orders, falling back to an exclusive lock, finish
//! with both their effects (with every acquisition waiting, the model deadlocks).

use crate::pad::CachePadded;
use crate::sync::{spin_loop, AtomicU32, Ordering};

/// `N` striped locks (`N` a power of two).
pub struct StripeLocks<const N: usize> {
    words: [CachePadded<AtomicU32>; N],
}

/// A later acquisition found its stripe held: the caller must give up what it holds (nothing
/// written yet) and run the operation another way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeBusy;

impl<const N: usize> StripeLocks<N> {
    const BITS: u32 = {
        assert!(N.is_power_of_two() && N > 1 && N <= 1 << 16, "StripeLocks: N must be a power of two in 2..=65536");
        N.trailing_zeros()
    };

    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Self { words: [const { CachePadded::new(AtomicU32::new(0)) }; N] }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        Self { words: core::array::from_fn(|_| CachePadded::new(AtomicU32::new(0))) }
    }

    /// The stripe of object number `key`: a multiplicative (Fibonacci) hash, so numbers a power
    /// of two apart (ext2 groups' inodes, per-core reserves) spread over the stripes instead of
    /// landing on one, as `key % N` would put them.
    pub fn stripe_of(key: u32) -> usize {
        (key.wrapping_mul(0x9E37_79B1) >> (32 - Self::BITS)) as usize
    }

    /// Take stripe `s` if it is free. Reads the line first, so a refused attempt does not
    /// take it exclusive from its holder's core.
    pub fn try_lock(&self, s: usize) -> bool {
        let w = &self.words[s];
        w.load(Ordering::Relaxed) == 0 && w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Take stripe `s`, waiting for its holder. Only for an operation's first stripe (see the
    /// module's rule): a caller that already holds a stripe uses `acquire_later`.
    pub fn lock(&self, s: usize) {
        let t0 = crate::cpu::spin_start();
        while !self.try_lock(s) {
            spin_loop();
        }
        crate::cpu::spin_end(t0);
    }

    /// An operation's acquisition of stripe `s` after `held` others: the first waits, a later
    /// one is taken only if it is free.
    pub fn acquire(&self, s: usize, held: usize) -> Result<(), StripeBusy> {
        if held == 0 {
            self.lock(s);
            Ok(())
        } else if self.try_lock(s) {
            Ok(())
        } else {
            Err(StripeBusy)
        }
    }

    /// Release stripe `s`: everything written under it happens-before the next holder's
    /// critical section.
    pub fn unlock(&self, s: usize) {
        self.words[s].store(0, Ordering::Release);
    }

    /// Whether stripe `s` is held (a diagnostic; stale as soon as it returns).
    pub fn is_locked(&self, s: usize) -> bool {
        self.words[s].load(Ordering::Relaxed) != 0
    }
}

#[cfg(not(loom))]
impl<const N: usize> Default for StripeLocks<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stripes_spread_numbers_a_power_of_two_apart() {
        // ext2 groups are 2^k inodes apart: `ino % 64` would put these on one stripe.
        let mut seen = [false; 64];
        for g in 0..64u32 {
            seen[StripeLocks::<64>::stripe_of(1 + g * 8192)] = true;
        }
        assert!(seen.iter().filter(|s| **s).count() >= 32, "multiplicative hash spreads group-aligned numbers");
        for k in [0u32, 1, 2, 12, 8193, u32::MAX] {
            assert!(StripeLocks::<64>::stripe_of(k) < 64);
        }
    }

    #[test]
    fn later_acquisition_refuses_a_held_stripe_and_first_takes_a_free_one() {
        let l = StripeLocks::<4>::new();
        assert_eq!(l.acquire(1, 0), Ok(()));
        assert!(l.is_locked(1));
        assert_eq!(l.acquire(1, 1), Err(StripeBusy));
        assert_eq!(l.acquire(2, 1), Ok(()));
        assert!(!l.try_lock(2));
        l.unlock(1);
        l.unlock(2);
        assert!(!l.is_locked(1) && !l.is_locked(2));
        assert!(l.try_lock(1));
    }
}
