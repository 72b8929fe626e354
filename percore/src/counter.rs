//! Counters that many cores update: Tornado figure 1 and the sloppy counters of seeds/002.
//!
//! - [`DistributedCounter`]: one padded slot per core, updates touch only the local slot,
//!   reads sum all slots. For statistics and event counts, read rarely.
//! - [`SloppyCounter`]: a central count plus per-core spare references. A core hands out its
//!   spares without touching the central count, takes a batch from the central count when it
//!   runs out, and gives spares back past a threshold. The invariant
//!   `sum(spares) + in_use == central` holds whenever no update is in flight; while one is,
//!   `central >= sum(spares) + in_use`, so the central count never under-reports references
//!   (an object is never thought free while in use).

use crate::per_core::PerCore;
use crate::pad::CachePadded;
use crate::sync::{AtomicUsize, Ordering};

/// Per-core counter, summed on read.
pub struct DistributedCounter {
    // Two's-complement deltas in `usize`: wrapping sums give the signed total.
    slots: PerCore<AtomicUsize>,
}

impl DistributedCounter {
    pub fn new() -> Self {
        Self::with_cores(crate::core_count())
    }

    pub fn with_cores(cores: usize) -> Self {
        Self { slots: PerCore::with_cores(cores, |_| AtomicUsize::new(0)) }
    }

    /// Add `delta` (may be negative) on the calling core.
    #[inline]
    pub fn add(&self, delta: i64) {
        self.add_on(crate::cpu_id(), delta)
    }

    #[inline]
    pub fn add_on(&self, core: usize, delta: i64) {
        // An RMW rather than load+store: stays exact if an interrupt handler (or, on the host,
        // another thread with the same index) updates the same slot. It is uncontended and the
        // line stays in this core's cache, so it costs no coherence traffic.
        self.slots.on(core).fetch_add(delta as usize, Ordering::Relaxed);
    }

    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// The total over all cores (a snapshot that may miss updates in flight).
    pub fn sum(&self) -> i64 {
        self.slots.iter().fold(0usize, |acc, s| acc.wrapping_add(s.load(Ordering::Relaxed))) as i64
    }

    /// Core `i`'s own contribution.
    pub fn slot(&self, i: usize) -> Option<i64> {
        self.slots.get(i).map(|s| s.load(Ordering::Relaxed) as i64)
    }

    pub fn cores(&self) -> usize {
        self.slots.len()
    }
}

impl Default for DistributedCounter {
    fn default() -> Self {
        Self::new()
    }
}

/// Errors from building a [`SloppyCounter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SloppyConfigError {
    /// `batch` must be at least 1 and at most `threshold`, or a refill would overflow the
    /// spares past the threshold at once.
    BadBatch { batch: usize, threshold: usize },
}

/// Reference counter with per-core spares (seeds/002, "Sloppy counters").
pub struct SloppyCounter {
    central: CachePadded<AtomicUsize>,
    spares: PerCore<AtomicUsize>,
    threshold: usize,
    batch: usize,
}

impl SloppyCounter {
    /// One spare slot per online core; refill batches of `threshold / 2` (at least 1).
    pub fn new(threshold: usize) -> Self {
        let threshold = threshold.max(1);
        Self::with_config(crate::core_count(), threshold, (threshold / 2).max(1)).expect("batch <= threshold by construction")
    }

    /// `cores` spare slots; a core keeps at most `threshold` spares after a release and takes
    /// `batch` extra references from the central count when it runs out.
    pub fn with_config(cores: usize, threshold: usize, batch: usize) -> Result<Self, SloppyConfigError> {
        if batch == 0 || batch > threshold {
            return Err(SloppyConfigError::BadBatch { batch, threshold });
        }
        Ok(Self {
            central: CachePadded::new(AtomicUsize::new(0)),
            spares: PerCore::with_cores(cores, |_| AtomicUsize::new(0)),
            threshold,
            batch,
        })
    }

    /// Take `v` references on the calling core.
    #[inline]
    pub fn acquire(&self, v: usize) {
        self.acquire_on(crate::cpu_id(), v)
    }

    /// Return `v` references on the calling core.
    #[inline]
    pub fn release(&self, v: usize) {
        self.release_on(crate::cpu_id(), v)
    }

    pub fn acquire_on(&self, core: usize, v: usize) {
        let local = self.spares.on(core);
        // Fast path: hand out local spares. A CAS loop rather than load+store so a nested
        // interrupt (or a host thread sharing the index) cannot lose an update.
        let mut s = local.load(Ordering::Relaxed);
        while s >= v {
            match local.compare_exchange_weak(s, s - v, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => s = now,
            }
        }
        // Slow path: take what we need plus a batch of spares from the central count. The
        // central count goes up first, so it is never below sum(spares) + in_use.
        self.central.fetch_add(v + self.batch, Ordering::AcqRel);
        local.fetch_add(self.batch, Ordering::AcqRel);
    }

    pub fn release_on(&self, core: usize, v: usize) {
        let local = self.spares.on(core);
        // Release ordering: our uses of the object happen before whoever later gathers the
        // spares and finds the count at zero.
        let mut s = local.fetch_add(v, Ordering::AcqRel) + v;
        // Past the threshold: give back all but `threshold - batch` spares, leaving room for
        // a few more releases before the next give-back (hysteresis).
        let keep = self.threshold - self.batch;
        while s > self.threshold {
            match local.compare_exchange_weak(s, keep, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    // Spares leave first, then the central count: central stays an upper bound.
                    self.central.fetch_sub(s - keep, Ordering::AcqRel);
                    return;
                }
                Err(now) => s = now,
            }
        }
    }

    /// Move every core's spares back to the central count and return the central count,
    /// which is then the exact number of references in use (if no update ran meanwhile).
    /// This is how "is it zero?" is answered before freeing.
    pub fn reclaim_all(&self) -> usize {
        for local in self.spares.iter() {
            let s = local.swap(0, Ordering::AcqRel);
            if s != 0 {
                self.central.fetch_sub(s, Ordering::AcqRel);
            }
        }
        self.central.load(Ordering::Acquire)
    }

    /// The central count (references in use plus all spares).
    pub fn central(&self) -> usize {
        self.central.load(Ordering::Acquire)
    }

    /// Core `i`'s spare references.
    pub fn spares(&self, i: usize) -> Option<usize> {
        self.spares.get(i).map(|s| s.load(Ordering::Acquire))
    }

    /// Sum of all cores' spares.
    pub fn total_spares(&self) -> usize {
        self.spares.iter().map(|s| s.load(Ordering::Acquire)).sum()
    }

    /// References in use: `central - sum(spares)`, exact when no update is in flight.
    pub fn in_use(&self) -> usize {
        // Spares first: the central count only grows before spares do, so this order keeps
        // the estimate from going negative under concurrent refills.
        let spares = self.total_spares();
        self.central().saturating_sub(spares)
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    pub fn batch(&self) -> usize {
        self.batch
    }

    pub fn cores(&self) -> usize {
        self.spares.len()
    }
}
