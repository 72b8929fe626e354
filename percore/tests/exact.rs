//! Exact, single-threaded checks of what the counters and the reclamation domain report:
//! their accessors, the sloppy counter's give-back hysteresis, the token's visits. Each test
//! names the `cargo mutants` survivors it kills (docs/testing.md, "cargo mutants"): the
//! threaded tests check invariants, which hold for several wrong answers too.
#![cfg(not(loom))]

use percore::counter::{DistributedCounter, SloppyCounter};
use percore::reclaim::Domain;
use percore::spin::{IrqTicketLock, TicketLock};
use percore::spsc::Ring;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Catches: `DistributedCounter::cores` or `slot` answering a constant, and `with_cores`
/// ignoring its argument (cargo mutants: `cores -> 0`, `cores -> 1`, `slot -> Some(1)`).
#[test]
fn distributed_counter_reports_each_slot() {
    let c = DistributedCounter::with_cores(3);
    assert_eq!(c.cores(), 3);
    c.add_on(0, 5);
    c.add_on(2, -2);
    assert_eq!([c.slot(0), c.slot(1), c.slot(2), c.slot(3)], [Some(5), Some(0), Some(-2), None]);
    assert_eq!(c.sum(), 3);
}

/// Catches: the sloppy counter giving spares back at the threshold instead of past it, or
/// keeping the wrong number (its documented rule: past `threshold`, keep `threshold - batch`),
/// and its accessors answering constants (cargo mutants: `>` -> `>=` and `-` -> `/` in
/// `release_on`; `spares -> Some(0|1)`, `batch -> 0|1`, `cores -> 0|1`).
#[test]
fn sloppy_release_gives_back_past_the_threshold_only() {
    let c = SloppyCounter::with_config(3, 8, 3).unwrap();
    assert_eq!((c.cores(), c.threshold(), c.batch()), (3, 8, 3));
    // No spares: the central count takes the 10 and a batch of 3 spares for core 1.
    c.acquire_on(1, 10);
    assert_eq!((c.central(), c.spares(1), c.spares(0), c.spares(3)), (13, Some(3), Some(0), None));
    // 3 + 5 = 8 spares: at the threshold, not past it, so all are kept.
    c.release_on(1, 5);
    assert_eq!((c.central(), c.spares(1)), (13, Some(8)));
    // 9 spares: past it; keep 8 - 3 = 5, give 4 back to the central count.
    c.release_on(1, 1);
    assert_eq!((c.central(), c.spares(1), c.total_spares()), (9, Some(5), 5));
    assert_eq!(c.in_use(), 4);
    assert_eq!(c.reclaim_all(), 4);
    assert_eq!(c.spares(1), Some(0));
}

/// Catches: `Domain::cores` or `visits` answering a constant, and an operation whose end is
/// lost (cargo mutants: `cores -> 0|1`, `visits -> 1`, `Operation::drop -> ()`): the token
/// must stop at a core while an operation there runs, and pass once it has ended.
#[test]
fn the_token_waits_for_an_operation_and_counts_its_visits() {
    let d = Domain::with_cores(3);
    assert_eq!((d.cores(), d.visits()), (3, 0));
    assert!(d.advance(), "no operation anywhere: the visit to core 0 completes");
    assert_eq!(d.visits(), 1);
    let op = d.enter_on(1);
    assert!(!d.advance(), "the token passed core 1 while an operation ran there");
    assert_eq!(d.visits(), 1);
    drop(op);
    assert!(d.advance(), "the token stayed at core 1 after its operation ended");
    assert!(d.advance());
    assert_eq!(d.visits(), 3, "one full round of three cores");
}

/// Catches: a ticket lock that lets a second taker in while it is held (cargo mutants: `!=`
/// -> `==` in `TicketLock::acquire`'s wait, which the threaded counting test only catches when
/// the two threads happen to collide), and `is_locked` answering a constant. If the other
/// thread is not scheduled within the pause, the check is weaker, never wrong.
#[test]
fn a_held_ticket_lock_blocks_the_next_taker() {
    let lock = Arc::new(TicketLock::new(0u32));
    assert!(!lock.is_locked());
    let g = lock.lock();
    assert!(lock.is_locked());
    let entered = Arc::new(AtomicBool::new(false));
    let (l2, e2) = (lock.clone(), entered.clone());
    let t = thread::spawn(move || {
        let mut g = l2.lock();
        e2.store(true, SeqCst);
        *g += 1;
    });
    thread::sleep(Duration::from_millis(200));
    assert!(!entered.load(SeqCst), "the second taker got in while the lock was held");
    drop(g);
    t.join().unwrap();
    assert!(entered.load(SeqCst) && !lock.is_locked());
    assert_eq!(*lock.lock(), 1);
}

/// Counts its drops: how the reclamation tests see a retired object freed.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Catches: `Domain::retire` dropping the object at once instead of retiring it, and
/// `collect` miscounting (cargo mutants: `retire -> ()`, `collect -> 0|1`).
#[test]
fn a_retired_object_outlives_the_operations_that_could_see_it() {
    let freed = Arc::new(AtomicUsize::new(0));
    let d = Domain::with_cores(1);
    let op = d.enter_on(0);
    d.retire(Box::new(Counted(freed.clone())));
    d.retire(Box::new(Counted(freed.clone())));
    for _ in 0..4 {
        d.advance();
    }
    assert_eq!(d.collect(), 0, "freed while an operation that could see them ran");
    assert_eq!(freed.load(SeqCst), 0);
    drop(op);
    d.synchronize();
    assert_eq!(d.collect(), 2);
    assert_eq!(freed.load(SeqCst), 2);
}

/// Catches: freeing one visit early (cargo mutants: `>` -> `>=` in `collect_on`; the loom
/// model `reclamation_visit_under_way_at_retire_does_not_count` shows why it matters: the
/// visit under way at retire time may have switched before the unlink, so only visits
/// stamp+1 ..= stamp+n count), and `quiescent_point_on`'s count (`-> 0|1`).
#[test]
fn a_retired_object_is_freed_after_n_more_visits_not_before() {
    let freed = Arc::new(AtomicUsize::new(0));
    let d = Domain::with_cores(3);
    d.retire_on(0, Box::new(Counted(freed.clone()))); // stamp 0
    for _ in 0..3 {
        assert!(d.advance());
    }
    assert_eq!(d.collect_on(0), 0, "freed after the visits 1..=2 and the one under way at retire time");
    assert_eq!(d.quiescent_point_on(0), 1, "visits 1..=3 done (token 4): free it");
    d.retire_on(0, Box::new(Counted(freed.clone()))); // stamp 4
    d.retire_on(0, Box::new(Counted(freed.clone())));
    for _ in 0..3 {
        assert!(d.advance());
    }
    assert_eq!(d.quiescent_point_on(0), 2);
    assert_eq!(freed.load(SeqCst), 3);
}

/// Catches: `collect_on` stopping after one batch of 32 (cargo mutants: `<` -> `<=` in its
/// loop).
#[test]
fn collect_frees_more_than_one_batch() {
    let freed = Arc::new(AtomicUsize::new(0));
    let d = Domain::with_cores(1);
    for _ in 0..40 {
        d.retire_on(0, Box::new(Counted(freed.clone())));
    }
    d.synchronize();
    assert_eq!(d.collect_on(0), 40);
    assert_eq!((d.pending_on(0), freed.load(SeqCst)), (0, 40));
}

/// Catches: a visit that never switches the visited core's generation (cargo mutants: `!`
/// deleted from `!v.switched` in `advance`). It would wait for every operation on the core,
/// also those begun after the visit, so a core that always has one running would stop
/// reclamation for ever: an operation begun after a visit started must not hold it up.
#[test]
fn operations_begun_after_a_visit_do_not_hold_it_up() {
    let d = Domain::with_cores(1);
    let old = d.enter_on(0);
    assert!(!d.advance(), "the token passed an operation begun before the visit");
    let new = d.enter_on(0);
    drop(old);
    assert!(d.advance(), "the visit waited for an operation begun after it");
    drop(new);
}

/// Catches: `IrqTicketLock::is_locked` and `spsc::Ring::capacity` answering constants (cargo
/// mutants: `is_locked -> true|false`, `capacity -> 0|1`).
#[test]
fn irq_ticket_lock_and_ring_report_their_state() {
    let l = IrqTicketLock::new(());
    assert!(!l.is_locked());
    {
        let _g = l.lock();
        assert!(l.is_locked());
    }
    assert!(!l.is_locked());
    assert_eq!((Ring::new(5).capacity(), Ring::new(0).capacity()), (5, 1));
}

/// Catches: `Consumer::ready` looking at the wrong slot (cargo mutants: `%` -> `/` in its
/// index): over three laps of the ring, `ready` must say exactly whether `pop` would succeed.
#[test]
fn ready_agrees_with_pop_over_several_laps() {
    use percore::spsc::{Consumer, Producer};
    let r = Ring::new(4);
    let (mut p, mut c) = (Producer::new(&r), Consumer::new(&r));
    for i in 0..12u64 {
        assert!(!c.ready(), "ready before message {i} was sent");
        assert!(p.push(i, i + 100));
        assert!(c.ready(), "not ready after message {i} was sent");
        assert_eq!(c.pop(), Some((i, i + 100)));
    }
    assert!(!c.ready() && c.pop().is_none());
}

/// Catches: `Producer::in_flight` miscounting (cargo mutants: `-> 0|1`, `-` -> `+` or `/`): it
/// is the messages sent less the consumer's count as the producer last read it (which it
/// reads only when the ring looks full).
#[test]
fn in_flight_counts_from_the_producers_last_reading() {
    use percore::spsc::{Consumer, Producer};
    let r = Ring::new(4);
    let (mut p, mut c) = (Producer::new(&r), Consumer::new(&r));
    for i in 0..4 {
        assert!(p.push(i, 0));
    }
    assert_eq!(p.in_flight(), 4);
    assert!(c.pop().is_some() && c.pop().is_some());
    // Not read yet: the producer still counts 4.
    assert_eq!(p.in_flight(), 4);
    // Full as far as it knows: it reads the consumer's count (2) and sends a fifth.
    assert!(p.push(4, 0));
    assert_eq!(p.in_flight(), 3);
}

/// Catches: a clustered object that never frees its reps, or frees only the empty slots
/// (cargo mutants: `<impl Drop for ClusteredObject<R>>::drop` -> `()`, `delete !` in it).
#[test]
fn a_clustered_object_frees_every_rep_it_made_once() {
    use percore::clustered::{ClusteredObject, Policy};
    struct Rep(Arc<AtomicUsize>);
    impl Drop for Rep {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let d = dropped.clone();
    let obj = ClusteredObject::with_cores(4, Policy::PerCore, move |_| Rep(d.clone())).unwrap();
    // Reps for cores 0 and 2 only: slots 1 and 3 stay empty and must not be "freed".
    obj.rep_on(0);
    obj.rep_on(2);
    assert_eq!(obj.rep_count(), 2);
    assert_eq!(dropped.load(SeqCst), 0, "no rep is dropped while the object lives");
    drop(obj);
    assert_eq!(dropped.load(SeqCst), 2, "each rep made is dropped exactly once with the object");
}

/// Catches: `flush_translations` leaving the per-core entries in place (cargo mutants:
/// `ClusteredObject<R>::flush_translations` -> `()`): after a flush the next access on every
/// core misses again, and finds the rep it had (reps are kept).
#[test]
fn flushing_translations_makes_each_core_miss_once_more() {
    use percore::clustered::{ClusteredObject, Policy};
    let obj = ClusteredObject::with_cores(3, Policy::Shared, |info| info.index * 10 + 7).unwrap();
    let first: *const usize = obj.rep_on(1);
    obj.rep_on(1);
    obj.rep_on(2);
    assert_eq!(obj.misses(), 2, "one miss per core before the flush");
    obj.flush_translations();
    let again: *const usize = obj.rep_on(1);
    obj.rep_on(2);
    assert_eq!(obj.misses(), 4, "each core misses once more after the flush");
    assert_eq!(first, again, "the flush keeps the reps: the miss finds the same one");
    assert_eq!(obj.rep_count(), 1);
}

/// Waits up to 2 s for `cond` (a thread we started reaching a point). A slow host only
/// makes the wait longer; a condition that never holds fails the test that needed it.
fn eventually(cond: impl Fn() -> bool) -> bool {
    for _ in 0..400 {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    cond()
}

/// Catches: an MCS lock whose `acquire` lets a taker in while the lock is held (cargo
/// mutants: `McsLock<T>::acquire` -> `()`), a queue that loses a waiter or hands the lock to
/// two, and `is_locked` / `has_waiters` / `try_lock` answering wrongly. Two waiters queue
/// behind the holder; each must wait, and both get in, one after the other, once it lets go.
#[test]
fn a_held_mcs_lock_queues_the_next_takers() {
    use percore::McsLock;
    let lock = Arc::new(McsLock::new(0u32));
    assert!(!lock.is_locked() && !lock.has_waiters());
    let g = lock.lock();
    assert!(lock.is_locked());
    assert!(lock.try_lock().is_none(), "try_lock on a held lock");
    let inside = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let takers: Vec<_> = (0..2)
        .map(|_| {
            let (l, i, s) = (lock.clone(), inside.clone(), started.clone());
            thread::spawn(move || {
                s.fetch_add(1, SeqCst);
                let mut g = l.lock();
                // Exclusive: nobody else is inside while we are.
                assert_eq!(i.fetch_add(1, SeqCst), 0, "two holders of an MCS lock at once");
                *g += 1;
                thread::sleep(Duration::from_millis(20));
                i.fetch_sub(1, SeqCst);
            })
        })
        .collect();
    assert!(eventually(|| started.load(SeqCst) == 2 && lock.has_waiters()), "the takers never queued");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(inside.load(SeqCst), 0, "a taker got in while the lock was held");
    drop(g);
    for t in takers {
        t.join().unwrap();
    }
    assert!(!lock.is_locked() && !lock.has_waiters());
    assert_eq!(*lock.lock(), 2);
}

/// Catches: a reader-writer lock that lets a reader in under a writer, or a writer in
/// under a reader (the writer's drain of the per-core reader counts), and `is_write_locked`
/// answering a constant. Readers on different slots share.
#[test]
fn a_reader_writer_lock_excludes_across_modes_only() {
    use percore::RwLock;
    let lock = Arc::new(RwLock::with_reader_slots(0u32, 4));
    assert!(!lock.is_write_locked());
    // Two readers on two slots at once: fine.
    let r0 = lock.read_on(0);
    let r1 = lock.read_on(1);
    assert_eq!(*r0 + *r1, 0);
    // A writer must wait for both.
    let wrote = Arc::new(AtomicBool::new(false));
    let (l, w) = (lock.clone(), wrote.clone());
    let writer = thread::spawn(move || {
        let mut g = l.write();
        w.store(true, SeqCst);
        *g += 1;
    });
    assert!(eventually(|| lock.is_write_locked()), "the writer never announced itself");
    drop(r0);
    thread::sleep(Duration::from_millis(100));
    assert!(!wrote.load(SeqCst), "the writer got in while a reader held the lock");
    drop(r1);
    writer.join().unwrap();
    assert!(wrote.load(SeqCst) && !lock.is_write_locked());
    // A held writer keeps a reader out.
    let g = lock.write();
    let read = Arc::new(AtomicBool::new(false));
    let (l, r) = (lock.clone(), read.clone());
    let reader = thread::spawn(move || {
        let v = *l.read_on(2);
        r.store(true, SeqCst);
        v
    });
    thread::sleep(Duration::from_millis(100));
    assert!(!read.load(SeqCst), "a reader got in under a writer");
    drop(g);
    assert_eq!(reader.join().unwrap(), 1, "the reader sees the writer's update");
}

/// Catches: `PerCore::slot_of` mapping cores past the slot count wrongly (cargo mutants:
/// `<` -> `<=` and `<` -> `==`, which index one past the end for core == len, `%` -> `/`),
/// `is_empty` answering `true`, `get_mut` answering `None`. (`is_empty -> false` is
/// equivalent: a `PerCore` always has at least one slot.)
#[test]
fn per_core_slots_wrap_past_the_slot_count() {
    use percore::PerCore;
    let mut v = PerCore::with_cores(3, |i| i * 10);
    assert_eq!((v.len(), v.is_empty()), (3, false));
    assert_eq!([v.slot_of(0), v.slot_of(2), v.slot_of(3), v.slot_of(4), v.slot_of(7)], [0, 2, 0, 1, 1]);
    assert_eq!((*v.on(3), *v.on(5), *v.on(8)), (0, 20, 20));
    *v.get_mut(1).expect("slot 1 exists") += 1;
    assert_eq!(v.get(1), Some(&11));
    assert!(v.get_mut(3).is_none() && v.get(3).is_none());
    let zero = PerCore::with_cores(0, |_| 0u8);
    assert_eq!(zero.len(), 1, "at least one slot");
}

/// Catches: `RwLock::reader_slots` answering a constant (cargo mutants: `-> 0`, `-> 1`).
#[test]
fn a_reader_writer_lock_reports_its_reader_slots() {
    use percore::RwLock;
    assert_eq!(RwLock::with_reader_slots(0u8, 5).reader_slots(), 5);
    assert_eq!(RwLock::with_reader_slots(0u8, 2).reader_slots(), 2);
}

/// Catches: `IrqMcsLock::is_locked` and `McsLock::has_waiters` answering constants.
#[test]
fn irq_mcs_lock_reports_its_state() {
    use percore::IrqMcsLock;
    let l = IrqMcsLock::new(1u8);
    assert!(!l.is_locked());
    let g = l.lock();
    assert!(l.is_locked());
    drop(g);
    assert!(!l.is_locked());
}

/// Catches: `SeqLock::compare` answering `true` whatever the value (cargo mutants:
/// `compare -> true`): the lock-free name comparison of the path caches depends on it.
#[test]
fn a_seqlock_comparison_sees_the_value() {
    let s = percore::SeqLock::new([1u64, 2]);
    assert!(s.compare(|v| *v == [1, 2]));
    assert!(!s.compare(|v| *v == [1, 3]));
    s.set([1, 3]);
    assert!(s.compare(|v| *v == [1, 3]) && !s.compare(|v| *v == [1, 2]));
}

/// Catches: the object cache accepting objects that cannot hold its free-list link, when
/// only one of size and alignment is too small (cargo mutants: `||` -> `&&` in
/// `ObjectCache::with_cores`).
#[test]
fn an_object_cache_refuses_objects_too_small_for_its_link() {
    use percore::slab::CacheError;
    use std::alloc::Layout;
    use std::ptr::NonNull;
    struct Never(Layout);
    // SAFETY: `alloc` never hands out a block, so there is nothing to keep valid or free.
    unsafe impl percore::ObjectBackend for Never {
        fn layout(&self) -> Layout {
            self.0
        }
        fn alloc(&self, _core: usize) -> Option<NonNull<u8>> {
            None
        }
        unsafe fn free(&self, _obj: NonNull<u8>) {
            unreachable!("nothing was allocated")
        }
        fn home(&self, _obj: NonNull<u8>) -> usize {
            0
        }
    }
    let cases = [(4, 8, false), (16, 1, false), (8, 8, true), (32, 16, true)];
    for (size, align, ok) in cases {
        let r = percore::ObjectCache::with_cores(Never(Layout::from_size_align(size, align).unwrap()), 2);
        match (r, ok) {
            (Ok(_), true) => {}
            (Err(CacheError::ObjectTooSmall { size: s, align: a }), false) => assert_eq!((s, a), (size, align)),
            (r, _) => panic!("size {size} align {align}: {:?}", r.map(|_| ())),
        }
    }
}

/// A heap backend that counts what the cache takes from it and gives back.
struct CountingBackend {
    inner: percore::HeapBackend,
    allocs: Arc<AtomicUsize>,
    frees: Arc<AtomicUsize>,
}

// SAFETY: every call is forwarded to `HeapBackend`, which keeps the contract; the counters
// only observe.
unsafe impl percore::ObjectBackend for CountingBackend {
    fn layout(&self) -> std::alloc::Layout {
        self.inner.layout()
    }
    fn alloc(&self, core: usize) -> Option<std::ptr::NonNull<u8>> {
        self.allocs.fetch_add(1, SeqCst);
        self.inner.alloc(core)
    }
    unsafe fn free(&self, obj: std::ptr::NonNull<u8>) {
        self.frees.fetch_add(1, SeqCst);
        // SAFETY: forwarded from the cache, which frees only what `alloc` gave it, once.
        unsafe { self.inner.free(obj) }
    }
    fn home(&self, obj: std::ptr::NonNull<u8>) -> usize {
        self.inner.home(obj)
    }
}

fn counting_cache(cores: usize) -> (percore::ObjectCache<CountingBackend>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (allocs, frees) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let backend = CountingBackend {
        inner: percore::HeapBackend::new(std::alloc::Layout::new::<[u64; 2]>()).unwrap(),
        allocs: allocs.clone(),
        frees: frees.clone(),
    };
    (percore::ObjectCache::with_cores(backend, cores).unwrap(), allocs, frees)
}

/// Catches: the object cache's allocation fast path skipped (cargo mutants: `>` -> `<` in
/// `alloc_on`: every allocation then drains the remote-free list, writing that shared line),
/// remote frees not refilling an empty magazine (`<` -> `==`, `<` -> `>`: they go to the
/// backend instead), `stats` not summing (`+=` -> `*=`), and a drop that gives nothing back
/// (`drop` -> `()`).
#[test]
fn the_object_cache_recycles_local_and_remote_frees_and_gives_all_back() {
    use std::collections::HashSet;
    let (cache, allocs, frees) = counting_cache(2);
    // Empty core 0's magazine: the first allocation fills it from the backend.
    let mine: Vec<_> = (0..64).map(|_| cache.alloc_on(0).unwrap()).collect();
    let from_backend = allocs.load(SeqCst);
    assert!(from_backend >= mine.len());
    // Drain what is still in the magazine so it is empty.
    let mut extra = Vec::new();
    while cache.stats().cached > 0 {
        extra.push(cache.alloc_on(0).unwrap());
    }
    let before = allocs.load(SeqCst);
    // Core 1 frees core 0's objects: they go to core 0's remote list, not the backend.
    for &p in &mine {
        // SAFETY: allocated above from this cache, freed once.
        unsafe { cache.free_on(1, p) };
    }
    assert_eq!(cache.stats().remote_frees, mine.len());
    assert_eq!(frees.load(SeqCst), 0);
    // Core 0's next allocation refills from its remote list: one of those, no backend call.
    let set: HashSet<usize> = mine.iter().map(|p| p.as_ptr() as usize).collect();
    let got = cache.alloc_on(0).unwrap();
    assert!(set.contains(&(got.as_ptr() as usize)), "the refill did not come from the remote frees");
    assert_eq!(allocs.load(SeqCst), before, "a refill from remote frees must not call the backend");
    let cached = cache.stats().cached;
    assert!(cached > 0, "the remote frees are cached on core 0");
    // A local free, then a remote one of another core-0 object: the fast path returns the
    // object just freed locally and leaves the remote list for when the magazine runs dry.
    let remote_one = cache.alloc_on(0).unwrap();
    // SAFETY: `got` and `remote_one` came from this cache, each freed once.
    unsafe {
        cache.free_on(0, got);
        cache.free_on(1, remote_one);
    }
    let again = cache.alloc_on(0).unwrap();
    assert_eq!(again, got, "the magazine is last in, first out, and used before the remote list");
    extra.push(cache.alloc_on(0).unwrap());
    let other = cache.alloc_on(1).unwrap();
    let on_1 = cache.stats().cached - cached;
    assert!(on_1 > 0, "core 1's magazine counts in stats: {on_1}");
    // SAFETY: all from this cache, each freed once.
    unsafe {
        cache.free_on(0, again);
        cache.free_on(1, other);
        for p in extra {
            cache.free_on(0, p);
        }
    }
    drop(cache);
    assert_eq!(frees.load(SeqCst), allocs.load(SeqCst), "dropping the cache gives every object back");
}

/// Catches: a slab that opens a new page while the current one still has room for exactly
/// one more object (cargo mutants: `>` -> `>=` in `PageSlab::alloc`).
#[test]
fn a_slab_fills_its_page_to_the_last_object() {
    use percore::slab::{ObjectBackend, PageSlab, PageSource};
    use std::alloc::Layout;
    struct Pages(AtomicUsize);
    // SAFETY: distinct page-aligned 4 KiB blocks, never freed (leaked for the test).
    unsafe impl PageSource for Pages {
        fn page_size(&self) -> usize {
            4096
        }
        fn alloc_page(&self, _core: usize) -> Option<std::ptr::NonNull<u8>> {
            self.0.fetch_add(1, SeqCst);
            // SAFETY: non-zero size.
            std::ptr::NonNull::new(unsafe { std::alloc::alloc(Layout::from_size_align(4096, 4096).unwrap()) })
        }
    }
    // 8-byte header, then 73 objects of 56 bytes fill the 4096-byte page exactly.
    let slab = PageSlab::new(Pages(AtomicUsize::new(0)), Layout::from_size_align(56, 8).unwrap(), 1).unwrap();
    for _ in 0..73 {
        slab.alloc(0).unwrap();
    }
    assert_eq!(slab.source().0.load(SeqCst), 1, "73 objects fit one page");
    slab.alloc(0).unwrap();
    assert_eq!(slab.source().0.load(SeqCst), 2);
    // Each object names the core it was carved for (cargo mutants: `home -> 0`).
    let two = PageSlab::new(Pages(AtomicUsize::new(0)), Layout::from_size_align(56, 8).unwrap(), 2).unwrap();
    let (a, b) = (two.alloc(0).unwrap(), two.alloc(1).unwrap());
    assert_eq!((two.home(a), two.home(b)), (0, 1));
}

/// Catches: readers of one core counted in another core's slot (cargo mutants: `%` -> `/` in
/// `RwLock::read_on` and `read_irqsave`, which put every core below the slot count on slot 0:
/// still a correct lock, but every reader writes one shared line, the cost this lock exists to
/// avoid). Cores past the slot count wrap.
#[test]
fn each_core_reads_through_its_own_slot() {
    use percore::RwLock;
    let lock = RwLock::with_reader_slots(0u8, 4);
    let g3 = lock.read_on(3);
    let g6 = lock.read_on(6);
    assert_eq!((0..5).map(|s| lock.readers_in(s)).collect::<Vec<_>>(), [0, 0, 1, 1, 0]);
    drop((g3, g6));
    percore::cpu::register_thread(1);
    let g = lock.read_irqsave();
    assert_eq!((lock.readers_in(0), lock.readers_in(1)), (0, 1), "read_irqsave uses the calling core's slot");
    drop(g);
    assert_eq!(lock.readers_in(1), 0);
}

/// Catches: a generation mask that lets a closed descriptor name its slot again after a few
/// reuses (cargo mutants: `- 1` -> `+ 1` in `GEN_MASK`, a mask of bits 0 and 30: the
/// generation goes 0, 1, 0, ...).
#[test]
fn a_closed_descriptor_stays_refused_across_reuses_of_its_slot() {
    use percore::fdtable::{DescTable, TableError};
    let t = Box::new(DescTable::<1, 4>::new());
    let first = t.open(0, 1, 2).unwrap();
    t.close(first).unwrap();
    // Every descriptor this slot gave out so far: none may come back or answer again (cargo
    // mutants also: `+` -> `|` in `close`'s next generation, which sticks at the mask).
    let mut closed = vec![first];
    for round in 1..=5 {
        let d = t.open(0, 1, 2).unwrap();
        assert_eq!(d & 0xffff_ffff, first & 0xffff_ffff, "round {round}: the same slot is reused");
        assert!(!closed.contains(&d), "round {round}: a reused slot gave a closed descriptor back");
        for &old in &closed {
            assert!(matches!(t.get(old), Err((TableError::BadDescriptor, _))), "round {round}: closed descriptor {old:#x} answers");
        }
        t.close(d).unwrap();
        closed.push(d);
    }
    assert_eq!(t.counts(), (0, 0));
}

/// Catches: `close` accepting a descriptor whose slot was never opened, when its generation
/// happens to match (cargo mutants: `&` -> `|` in `w & USED == 0`): it would give back a slot
/// bit and a record reference nobody held.
#[test]
fn closing_a_never_opened_slot_is_refused_and_changes_nothing() {
    use percore::fdtable::{DescTable, TableError};
    let t = Box::new(DescTable::<1, 4>::new());
    assert_eq!(t.close(0), Err(TableError::BadDescriptor), "slot 0, generation 0, never opened");
    assert_eq!(t.close(3), Err(TableError::BadDescriptor));
    let d = t.open(0, 7, 8).unwrap();
    assert_eq!(t.close(1), Err(TableError::BadDescriptor), "a neighbour of an open slot");
    // A never-opened slot's word is 0: generation 0, record 0, which `d` holds. `get` must
    // refuse it all the same (cargo mutants: `&` -> `|` in `get`'s `w & USED == 0`).
    assert!(matches!(t.get(1), Err((TableError::BadDescriptor, None))), "get of a never-opened slot");
    assert_eq!(t.counts(), (1, 1), "the refused closes took nothing");
    assert_eq!(t.close(d), Ok(Some(percore::fdtable::Freed { kind: 7, owner: 8 })));
    assert_eq!(t.counts(), (0, 0));
}

/// Catches: an allocation scan that does not start at the caller's word or does not reach
/// every word (cargo mutants: `%` -> `/` and `+` -> `*` in `DescTable::take`): a core's
/// descriptors come from its own bitmap word, and a table is full only when every word is.
#[test]
fn descriptors_come_from_the_callers_word_and_fill_every_word() {
    use percore::fdtable::{DescTable, TableError};
    let t = Box::new(DescTable::<2, 128>::new());
    let on1 = t.open(1, 0, 0).unwrap();
    assert!((on1 & 0xffff_ffff) >= 64, "start word 1 gives a slot of word 1, got {}", on1 & 0xffff_ffff);
    t.close(on1).unwrap();
    let mut all = Vec::new();
    while let Ok(d) = t.open(0, 0, 0) {
        all.push(d);
    }
    assert_eq!(all.len(), 128, "every slot of both words is handed out from start 0");
    assert_eq!(t.open(1, 0, 0), Err(TableError::Full));
    for d in all {
        t.close(d).unwrap();
    }
}

/// Catches: `zeroed_is_empty` saying no outside loom (cargo mutants: `-> false`, `delete !`),
/// which the library OS asserts at compile time before it places its process-wide table in
/// zero-filled shared memory; and checks the claim itself on a zero-filled table. (`-> true`
/// is equivalent outside loom.)
#[test]
fn a_zero_filled_descriptor_table_is_an_empty_one() {
    use percore::fdtable::DescTable;
    type T = DescTable<2, 100>;
    assert!(T::zeroed_is_empty());
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: `layout` is `T`'s and non-zero in size; `zeroed_is_empty` says all-zero bytes
    // are a valid `T` (every field an integer atomic); the box frees it with the same layout.
    let t: Box<T> = unsafe { Box::from_raw(std::alloc::alloc_zeroed(layout) as *mut T) };
    assert_eq!(t.counts(), (0, 0));
    let d = t.open(1, 3, 4).unwrap();
    assert_eq!(t.counts(), (1, 1));
    assert!(t.close(d).unwrap().is_some());
}
