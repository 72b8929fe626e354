//! Clustered objects (Tornado section 3).
//!
//! A clustered object looks like one object to its callers but is made of representatives
//! ("reps"), each serving some of the cores. A call resolves to the calling core's rep through
//! that core's translation-table entry; the first call on a core misses (the entry is empty),
//! and the object's miss handler finds or creates the rep for that core and installs it.
//! The policy decides how cores map to reps: one shared rep, one per core, or one per cluster
//! of K consecutive cores.
//!
//! Tornado keeps one translation table per processor, indexed by object, at the same virtual
//! address on every processor. Here the table is transposed: each object carries its entries,
//! one padded slot per core ([`PerCore`]), so an entry is read only by its own core and
//! never shares a line with another core's entry. The backing copy of the reps (Tornado's
//! miss handler's own record of "the existence and location of the reps") is the `reps`
//! array, so translation entries can be discarded at any time ([`flush_translations`]) and
//! are rebuilt by misses.
//!
//! [`flush_translations`]: ClusteredObject::flush_translations

extern crate alloc;

use crate::per_core::PerCore;
use crate::spin::TicketLock;
use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr;

/// How cores map to representatives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// One rep for all cores (a plain shared object reached through the same machinery).
    Shared,
    /// One rep per core.
    PerCore,
    /// One rep per cluster of `k` consecutive cores (`k >= 1`).
    Clustered(usize),
}

/// Errors from building a clustered object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterError {
    /// `Policy::Clustered(0)`.
    EmptyCluster,
}

impl Policy {
    /// The rep index serving core slot `core`.
    pub fn rep_index(self, core: usize) -> usize {
        match self {
            Policy::Shared => 0,
            Policy::PerCore => core,
            Policy::Clustered(k) => core / k.max(1),
        }
    }

    /// How many reps `cores` cores can need.
    pub fn rep_count(self, cores: usize) -> usize {
        match self {
            Policy::Shared => 1,
            Policy::PerCore => cores,
            Policy::Clustered(k) => cores.div_ceil(k.max(1)),
        }
    }
}

/// What the miss handler is told when it must create a rep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepInfo {
    /// Index of the rep being created (0 for `Shared`, the core for `PerCore`, the cluster for
    /// `Clustered`).
    pub index: usize,
    /// The core whose first access missed (a NUMA-aware handler allocates near it).
    pub core: usize,
}

type MissHandler<R> = Box<dyn Fn(RepInfo) -> R + Send + Sync>;

pub struct ClusteredObject<R> {
    /// Per-core translation entries: null until this core's first access (a miss).
    table: PerCore<AtomicPtr<R>>,
    /// The backing copy: every rep ever created, by rep index.
    reps: Box<[AtomicPtr<R>]>,
    /// Serialises rep creation (misses) and whole-object updates that must reach every rep.
    miss_lock: TicketLock<()>,
    miss_handler: MissHandler<R>,
    policy: Policy,
    misses: AtomicUsize,
}

// SAFETY: reps are shared between cores (`R: Sync`) and created/dropped by whichever core
// misses or drops the object (`R: Send`).
unsafe impl<R: Send + Sync> Sync for ClusteredObject<R> {}
// SAFETY: as above; the raw pointers are owned boxes.
unsafe impl<R: Send + Sync> Send for ClusteredObject<R> {}

impl<R: Send + Sync> ClusteredObject<R> {
    /// A clustered object over the online cores ([`crate::core_count`]).
    pub fn new(policy: Policy, miss_handler: impl Fn(RepInfo) -> R + Send + Sync + 'static) -> Result<Self, ClusterError> {
        Self::with_cores(crate::core_count(), policy, miss_handler)
    }

    pub fn with_cores(
        cores: usize,
        policy: Policy,
        miss_handler: impl Fn(RepInfo) -> R + Send + Sync + 'static,
    ) -> Result<Self, ClusterError> {
        if policy == Policy::Clustered(0) {
            return Err(ClusterError::EmptyCluster);
        }
        let table = PerCore::with_cores(cores, |_| AtomicPtr::new(ptr::null_mut()));
        let nreps = policy.rep_count(table.len());
        let reps: Vec<AtomicPtr<R>> = (0..nreps).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Ok(Self {
            table,
            reps: reps.into_boxed_slice(),
            miss_lock: TicketLock::new(()),
            miss_handler: Box::new(miss_handler),
            policy,
            misses: AtomicUsize::new(0),
        })
    }

    /// The calling core's rep.
    #[inline]
    pub fn rep(&self) -> &R {
        self.rep_on(crate::cpu_id())
    }

    /// Core `core`'s rep: one load from its translation entry, or a miss.
    #[inline]
    pub fn rep_on(&self, core: usize) -> &R {
        let p = self.table.on(core).load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: entries only ever hold reps from `reps`, which live until `self` drops.
            return unsafe { &*p };
        }
        self.miss(core)
    }

    #[cold]
    fn miss(&self, core: usize) -> &R {
        let slot = self.table.slot_of(core);
        let index = self.policy.rep_index(slot);
        let rep = {
            let _g = self.miss_lock.lock();
            self.misses.fetch_add(1, Ordering::Relaxed);
            let existing = self.reps[index].load(Ordering::Acquire);
            if !existing.is_null() {
                existing
            } else {
                // Created under the lock: exactly one rep per index, however many cores miss
                // at once.
                let created = Box::into_raw(Box::new((self.miss_handler)(RepInfo { index, core })));
                self.reps[index].store(created, Ordering::Release);
                created
            }
        };
        // Release: a core that later reads this entry sees the rep fully built.
        self.table.on(slot).store(rep, Ordering::Release);
        // SAFETY: as in `rep_on`.
        unsafe { &*rep }
    }

    /// Visit every rep created so far (a snapshot: a rep created concurrently may be missed;
    /// use [`update_all`](Self::update_all) when that matters).
    pub fn for_each_rep(&self, mut f: impl FnMut(usize, &R)) {
        for (i, r) in self.reps.iter().enumerate() {
            let p = r.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: reps live until `self` drops.
                f(i, unsafe { &*p });
            }
        }
    }

    /// Visit every rep with rep creation held off, for updates that must reach all reps:
    /// a rep created after this returns is made by the miss handler, which must build it from
    /// state the update has already changed.
    pub fn update_all(&self, f: impl FnMut(usize, &R)) {
        let _g = self.miss_lock.lock();
        self.for_each_rep(f);
    }

    /// Empty every translation entry; the next access on each core misses and re-resolves.
    /// Reps are kept (this is Tornado's discarding of translation-table pages).
    pub fn flush_translations(&self) {
        for e in self.table.iter() {
            e.store(ptr::null_mut(), Ordering::Release);
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Reps created so far.
    pub fn rep_count(&self) -> usize {
        self.reps.iter().filter(|r| !r.load(Ordering::Acquire).is_null()).count()
    }

    /// Misses handled so far.
    pub fn misses(&self) -> usize {
        self.misses.load(Ordering::Relaxed)
    }
}

impl<R> Drop for ClusteredObject<R> {
    fn drop(&mut self) {
        for r in self.reps.iter() {
            let p = r.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: made by `Box::into_raw` in `miss`; `&mut self` means no one holds a
                // reference to any rep.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}
