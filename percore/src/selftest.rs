//! The stress test that runs on every core: the kernel calls [`SelfTest::run_on_core`] on all
//! its cores at once (then [`SelfTest::check`] on one), and the host runs the same code on
//! threads (tests/stress.rs), so "the same stress runs on all cores inside QEMU".
//!
//! Every core must call `run_on_core` exactly once with its own index: phases are separated
//! by a spinning barrier over all `cores` participants.

extern crate alloc;

use crate::clustered::{ClusteredObject, Policy};
use crate::counter::{DistributedCounter, SloppyCounter};
use crate::mcs::McsLock;
use crate::reclaim::Domain;
use crate::rwlock::RwLock;
use crate::seqlock::SeqLock;
use crate::slab::{HeapBackend, ObjectCache};
use crate::spin::TicketLock;
use crate::sync::{spin_loop, AtomicPtr, AtomicUsize, Ordering};
use crate::CachePadded;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::ptr::NonNull;
use core::sync::atomic::AtomicU64;

/// A failed check: which primitive, and what went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfTestError {
    pub primitive: &'static str,
    pub what: &'static str,
}

const fn fail(primitive: &'static str, what: &'static str) -> SelfTestError {
    SelfTestError { primitive, what }
}

const ALIVE: u64 = 0x600d_600d;
const DEAD: u64 = 0xdead_dead;

struct Node {
    magic: AtomicU64,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.magic.store(DEAD, Ordering::Relaxed);
    }
}

/// Sense-reversing spin barrier.
struct Barrier {
    waiting: AtomicUsize,
    round: AtomicUsize,
    n: usize,
}

impl Barrier {
    fn wait(&self) {
        let round = self.round.load(Ordering::Acquire);
        if self.waiting.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.waiting.store(0, Ordering::Relaxed);
            self.round.store(round.wrapping_add(1), Ordering::Release);
        } else {
            while self.round.load(Ordering::Acquire) == round {
                spin_loop();
            }
        }
    }
}

pub struct SelfTest {
    cores: usize,
    iters: usize,
    barrier: Barrier,
    ticket: TicketLock<u64>,
    mcs: McsLock<u64>,
    rw: RwLock<[u64; 4]>,
    rw_writes: AtomicUsize,
    seq: SeqLock<[u64; 4]>,
    dist: DistributedCounter,
    sloppy: SloppyCounter,
    sloppy_held: AtomicUsize,
    clustered: ClusteredObject<CachePadded<AtomicU64>>,
    domain: Domain,
    shared: AtomicPtr<Node>,
    cache: ObjectCache<HeapBackend>,
    handoff: Vec<CachePadded<AtomicPtr<u8>>>,
}

impl SelfTest {
    /// A test for `cores` participants doing about `iters` operations per primitive each.
    pub fn new(cores: usize, iters: usize) -> Self {
        let cores = cores.max(1);
        let layout = Layout::new::<[u64; 4]>();
        Self {
            cores,
            iters: iters.max(1),
            barrier: Barrier { waiting: AtomicUsize::new(0), round: AtomicUsize::new(0), n: cores },
            ticket: TicketLock::new(0),
            mcs: McsLock::new(0),
            rw: RwLock::with_reader_slots([0; 4], cores),
            rw_writes: AtomicUsize::new(0),
            seq: SeqLock::new([0; 4]),
            dist: DistributedCounter::with_cores(cores),
            sloppy: SloppyCounter::with_config(cores, 8, 3).expect("batch <= threshold"),
            sloppy_held: AtomicUsize::new(0),
            clustered: ClusteredObject::with_cores(cores, Policy::Clustered(2), |_| CachePadded::new(AtomicU64::new(0)))
                .expect("cluster size is not 0"),
            domain: Domain::with_cores(cores),
            shared: AtomicPtr::new(Box::into_raw(Box::new(Node { magic: AtomicU64::new(ALIVE) }))),
            cache: ObjectCache::with_cores(HeapBackend::new(layout).expect("valid layout"), cores).expect("objects hold a pointer"),
            handoff: (0..cores).map(|_| CachePadded::new(AtomicPtr::new(core::ptr::null_mut()))).collect(),
        }
    }

    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Run every primitive's stress on this core. All `cores` participants must call this
    /// concurrently, each with its own `core` in `0..cores`. Keeps going after a failure (so
    /// the other cores are not left at a barrier) and reports the first one.
    pub fn run_on_core(&self, core: usize) -> Result<(), SelfTestError> {
        let core = core % self.cores;
        let mut first: Option<SelfTestError> = None;
        let mut note = |r: Result<(), SelfTestError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        let n = self.iters;
        self.barrier.wait();

        // Locks: non-atomic read-modify-writes under the lock; lost updates show in check().
        for i in 0..n {
            let mut g = if i % 2 == 0 { self.ticket.lock() } else { self.ticket.lock_irqsave() };
            let v = *g;
            *g = v + 1;
            drop(g);
            if i % 2 == 0 {
                let mut g = self.mcs.lock();
                let v = *g;
                *g = v + 1;
            } else {
                self.mcs.with_lock(|v| *v += 1);
            }
        }
        self.barrier.wait();

        // RW lock: core 0 writes, everyone reads and checks for torn values.
        for i in 0..n {
            if core == 0 && i % 4 == 0 {
                let mut g = self.rw.write();
                let next = g[0] + 1;
                *g = [next; 4];
                self.rw_writes.fetch_add(1, Ordering::Relaxed);
            } else {
                let g = self.rw.read();
                if g.iter().any(|&x| x != g[0]) {
                    note(Err(fail("RwLock", "reader saw a half-written value")));
                }
            }
        }
        self.barrier.wait();

        // SeqLock: core 0 writes (k, 2k, 3k, 4k); everyone reads and compares.
        for i in 0..n {
            if core == 0 && i % 3 == 0 {
                self.seq.write(|v| {
                    let k = v[0] + 1;
                    *v = [k, 2 * k, 3 * k, 4 * k];
                });
            } else {
                let v = self.seq.read();
                if v != [v[0], 2 * v[0], 3 * v[0], 4 * v[0]] {
                    note(Err(fail("SeqLock", "torn read")));
                }
                if !self.seq.compare(|v| v[3] == 4 * v[0]) {
                    note(Err(fail("SeqLock", "compare saw a torn value")));
                }
            }
        }
        self.barrier.wait();

        // Counters and the clustered counter.
        let mut held = 0usize;
        let mut x = core as u64 * 0x9e37_79b9 + 1;
        for _ in 0..n {
            self.dist.add_on(core, 1);
            self.clustered.rep_on(core).fetch_add(1, Ordering::Relaxed);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 4) as usize + 1;
            if x & 16 == 0 || held < v {
                self.sloppy.acquire_on(core, v);
                held += v;
            } else {
                self.sloppy.release_on(core, v);
                held -= v;
            }
            if self.sloppy.central() < held {
                note(Err(fail("SloppyCounter", "central count below references held")));
            }
        }
        self.sloppy_held.fetch_add(held, Ordering::Relaxed);
        self.barrier.wait();

        // Reclamation: core 0 replaces and retires the shared node; the others read it inside
        // operations; everyone moves the token.
        for _ in 0..n {
            if core == 0 {
                let old = self.shared.swap(Box::into_raw(Box::new(Node { magic: AtomicU64::new(ALIVE) })), Ordering::AcqRel);
                // SAFETY: `old` came from `Box::into_raw` and is unlinked.
                self.domain.retire_on(core, unsafe { Box::from_raw(old) });
            } else {
                let _op = self.domain.enter_on(core);
                let p = self.shared.load(Ordering::Acquire);
                // SAFETY: the operation keeps the node alive until `_op` drops.
                if unsafe { (*p).magic.load(Ordering::Relaxed) } != ALIVE {
                    note(Err(fail("reclaim", "read a freed object")));
                }
            }
            self.domain.quiescent_point_on(core);
        }
        self.barrier.wait();

        // Object cache: allocate, tag, hand half to the next core to free (remote frees).
        let next = (core + 1) % self.cores;
        let mut mine: Vec<NonNull<u8>> = Vec::new();
        for i in 0..n as u64 {
            let Some(p) = self.cache.alloc_on(core) else {
                note(Err(fail("ObjectCache", "allocation failed")));
                break;
            };
            let tag = ((core as u64) << 32) | i;
            // SAFETY: a fresh object of the cache's layout ([u64; 4]), ours until freed.
            unsafe { (p.as_ptr() as *mut [u64; 4]).write([tag, !tag, tag, !tag]) };
            if i % 2 == 0 {
                // Hand-off slot: wait until the next core took the previous one.
                while self.handoff[next]
                    .compare_exchange(core::ptr::null_mut(), p.as_ptr(), Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
                {
                    self.take_handoff(core, &mut note);
                    spin_loop();
                }
            } else {
                mine.push(p);
            }
            self.take_handoff(core, &mut note);
            if mine.len() >= 16 {
                for p in mine.drain(..) {
                    // SAFETY: our object, from this cache, no longer used.
                    unsafe {
                        let v = (p.as_ptr() as *const [u64; 4]).read();
                        if v[1] != !v[0] {
                            note(Err(fail("ObjectCache", "object handed out twice")));
                        }
                        self.cache.free_on(core, p);
                    }
                }
            }
        }
        for p in mine {
            // SAFETY: as above.
            unsafe { self.cache.free_on(core, p) };
        }
        // Drain our hand-off slot until every core has finished handing off.
        self.barrier_with_handoff(core, &mut note);
        self.take_handoff(core, &mut note);
        self.barrier.wait();
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn take_handoff(&self, core: usize, note: &mut impl FnMut(Result<(), SelfTestError>)) {
        let p = self.handoff[core].swap(core::ptr::null_mut(), Ordering::AcqRel);
        if let Some(p) = NonNull::new(p) {
            // SAFETY: handed to us by its allocating core, which no longer uses it.
            unsafe {
                let v = (p.as_ptr() as *const [u64; 4]).read();
                if v[3] != !v[2] {
                    note(Err(fail("ObjectCache", "remote object corrupted")));
                }
                self.cache.free_on(core, p);
            }
        }
    }

    /// A barrier during which we keep emptying our hand-off slot (a neighbour may still be
    /// waiting for it).
    fn barrier_with_handoff(&self, core: usize, note: &mut impl FnMut(Result<(), SelfTestError>)) {
        let b = &self.barrier;
        let round = b.round.load(Ordering::Acquire);
        if b.waiting.fetch_add(1, Ordering::AcqRel) + 1 == b.n {
            b.waiting.store(0, Ordering::Relaxed);
            b.round.store(round.wrapping_add(1), Ordering::Release);
        } else {
            while b.round.load(Ordering::Acquire) == round {
                self.take_handoff(core, note);
                spin_loop();
            }
        }
    }

    /// After every core returned from `run_on_core`: check the totals.
    pub fn check(&self) -> Result<(), SelfTestError> {
        let total = (self.cores * self.iters) as u64;
        if *self.ticket.lock() != total {
            return Err(fail("TicketLock", "lost update"));
        }
        if *self.mcs.lock() != total {
            return Err(fail("McsLock", "lost update"));
        }
        if self.rw.read()[3] != self.rw_writes.load(Ordering::Relaxed) as u64 {
            return Err(fail("RwLock", "lost write"));
        }
        if self.seq.read()[0] != self.iters.div_ceil(3) as u64 {
            return Err(fail("SeqLock", "lost write"));
        }
        if self.dist.sum() != total as i64 {
            return Err(fail("DistributedCounter", "wrong sum"));
        }
        let held = self.sloppy_held.load(Ordering::Relaxed);
        if self.sloppy.total_spares() + held != self.sloppy.central() || self.sloppy.reclaim_all() != held {
            return Err(fail("SloppyCounter", "invariant broken at rest"));
        }
        let mut sum = 0;
        self.clustered.for_each_rep(|_, r| sum += r.load(Ordering::Relaxed));
        if sum != total || self.clustered.rep_count() != self.cores.div_ceil(2) {
            return Err(fail("ClusteredObject", "wrong sum or rep count"));
        }
        self.domain.synchronize();
        self.domain.collect_on(0);
        if self.domain.pending_on(0) != 0 {
            return Err(fail("reclaim", "retired objects not freed after a full circulation"));
        }
        if self.cores > 1 && self.cache.stats().remote_frees == 0 {
            return Err(fail("ObjectCache", "no remote frees happened"));
        }
        Ok(())
    }
}

impl Drop for SelfTest {
    fn drop(&mut self) {
        let p = self.shared.load(Ordering::Acquire);
        // SAFETY: the live node came from `Box::into_raw`; `&mut self` means no readers.
        drop(unsafe { Box::from_raw(p) });
    }
}
