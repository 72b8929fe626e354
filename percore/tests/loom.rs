//! Loom model checks of the percore protocols. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p percore --release --test loom` (or `cargo xtask test`).
//!
//! Under `cfg(loom)` the crate's atomics are loom's (src/sync.rs), so these check the very
//! code the kernel runs. Protected data are loom cells: loom reports any access that is not
//! ordered by the primitive's happens-before edges, so a lock that lets two holders in, or a
//! release without the right ordering, fails here.
//!
//! The preemption bound (3 for two threads, less for three; `LOOM_MAX_PREEMPTIONS` lowers it) keeps the run to
//! a few minutes on a 2-core machine; most concurrency bugs need only 2 preemptions.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use percore::borrow::{BorrowSlots, DropState};
use percore::clustered::{ClusteredObject, Policy};
use percore::counter::SloppyCounter;
use percore::mcs::McsLock;
use percore::reclaim::Domain;
use percore::rwlock::RwLock;
use percore::seqlock::{ReadPath, SeqLock};
use percore::seqparts::SeqParts;

/// A loom cell that may be shared: the primitive under test is what must make the accesses
/// safe, and loom reports any access it failed to order.
struct SyncCell<T>(UnsafeCell<T>);
// SAFETY: test data; every access goes through loom's race detector.
unsafe impl<T: Send> Sync for SyncCell<T> {}
impl<T> SyncCell<T> {
    fn new(v: T) -> Self {
        Self(UnsafeCell::new(v))
    }
    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        self.0.with(f)
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        self.0.with_mut(f)
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Run a two-thread model twice, each role once on the spawned thread and once on the main
/// thread. Loom's partial-order reduction remembers one last access per atomic, so a thread
/// that loads a word before storing it can hide an earlier load by the other thread and
/// prune interleavings; with both placements the reader also runs after the writer, where
/// loom explores every store its loads may read.
fn model_pair<S: Send + Sync + 'static>(setup: fn() -> S, a: fn(&S), b: fn(&S), check: fn(&S)) {
    for swap in [false, true] {
        model(move || {
            let s = Arc::new(setup());
            let s2 = s.clone();
            let (spawned, main) = if swap { (b, a) } else { (a, b) };
            let t = thread::spawn(move || spawned(&s2));
            main(&s);
            t.join().unwrap();
            check(&s);
        });
    }
}

#[test]
fn built_for_model_checking() {
    // Without `--cfg loom` on the library these models would check nothing.
    assert!(percore::MODEL_CHECKED);
}

#[test]
fn mcs_mutual_exclusion_two_threads() {
    model(|| {
        let lock = Arc::new(McsLock::new(UnsafeCell::new(0usize)));
        let ts: Vec<_> = (0..2)
            .map(|i| {
                let lock = lock.clone();
                thread::spawn(move || {
                    if i == 0 {
                        let g = lock.lock();
                        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                        // a data race here is exactly what loom would report.
                        g.with_mut(|p| unsafe { *p += 1 });
                    } else {
                        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                        // a data race here is exactly what loom would report.
                        lock.with_lock(|c| c.with_mut(|p| unsafe { *p += 1 }));
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        let g = lock.lock();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        assert_eq!(g.with(|p| unsafe { *p }), 2);
        assert!(lock.is_locked());
        drop(g);
        assert!(!lock.is_locked());
    });
}

#[test]
fn mcs_three_threads_queue_handoff() {
    // Three contenders make a real queue (a waiter behind a waiter).
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(2).min(2));
    b.check(|| {
        let lock = Arc::new(McsLock::new(UnsafeCell::new(0usize)));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                // a data race here is exactly what loom would report.
                thread::spawn(move || lock.lock().with_mut(|p| unsafe { *p += 1 }))
            })
            .collect();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        lock.lock().with_mut(|p| unsafe { *p += 1 });
        for t in ts {
            t.join().unwrap();
        }
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        assert_eq!(lock.lock().with(|p| unsafe { *p }), 3);
    });
}

#[test]
fn mcs_try_lock() {
    model(|| {
        let lock = Arc::new(McsLock::new(UnsafeCell::new(0usize)));
        let l2 = lock.clone();
        let t = thread::spawn(move || {
            if let Some(g) = l2.try_lock() {
                // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                // a data race here is exactly what loom would report.
                g.with_mut(|p| unsafe { *p += 1 });
                true
            } else {
                false
            }
        });
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        lock.lock().with_mut(|p| unsafe { *p += 1 });
        let took = t.join().unwrap();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        assert_eq!(lock.lock().with(|p| unsafe { *p }), 1 + took as usize);
    });
}

#[test]
fn rwlock_writer_excludes_reader() {
    model_pair(
        || RwLock::with_reader_slots(SyncCell::new((0usize, 0usize)), 2),
        |l| {
            let g = l.read_on(1);
            // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
            // a data race here is exactly what loom would report.
            let (a, b) = g.with(|p| unsafe { *p });
            assert_eq!(b, 2 * a, "reader saw a half-written pair");
        },
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        |l| l.write().with_mut(|p| unsafe { *p = (1, 2) }),
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        |l| assert_eq!(l.read_on(0).with(|p| unsafe { *p }), (1, 2)),
    );
}

#[test]
fn rwlock_two_readers_one_writer() {
    let mut b = loom::model::Builder::new();
    // Readers that meet the writer back off and spin on its flag; with three threads and two
    // preemptions loom's paths through those spins exceed its branch limit, so this one
    // explores with one preemption (the two-thread RW models above use three).
    b.preemption_bound = Some(b.preemption_bound.unwrap_or(1).min(1));
    b.check(|| {
        let lock = Arc::new(RwLock::with_reader_slots(SyncCell::new((0usize, 0usize)), 2));
        let readers: Vec<_> = (0..2)
            .map(|core| {
                let l = lock.clone();
                thread::spawn(move || {
                    let g = l.read_on(core);
                    // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                    // a data race here is exactly what loom would report.
                    let (a, b) = g.with(|p| unsafe { *p });
                    assert_eq!(b, 2 * a);
                })
            })
            .collect();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        lock.write().with_mut(|p| unsafe { *p = (3, 6) });
        for r in readers {
            r.join().unwrap();
        }
    });
}

#[test]
fn rwlock_two_writers() {
    model(|| {
        let lock = Arc::new(RwLock::with_reader_slots(SyncCell::new(0usize), 2));
        let l2 = lock.clone();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        let t = thread::spawn(move || l2.write().with_mut(|p| unsafe { *p += 1 }));
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        lock.write().with_mut(|p| unsafe { *p += 1 });
        t.join().unwrap();
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        assert_eq!(lock.read_on(0).with(|p| unsafe { *p }), 2);
    });
}

#[test]
fn seqlock_read_path_never_torn() {
    model_pair(
        || SeqLock::new((1u64, 2u64)),
        |s| {
            s.set((2, 4));
            s.write(|v| *v = (3, 6));
        },
        |s| {
            // The optimistic path either fails or returns a value some writer stored whole.
            if let Some((a, b)) = s.try_read() {
                assert_eq!(b, 2 * a, "torn optimistic read");
            }
            let ((a, b), _path) = s.read_traced();
            assert_eq!(b, 2 * a);
            assert!(s.compare(|&(a, b)| b == 2 * a));
        },
        |s| {
            let (v, path) = s.read_traced();
            assert_eq!(v, (3, 6));
            assert_eq!(path, ReadPath::Optimistic, "quiescent read must not need the lock");
            assert_eq!(s.generation(), 3);
        },
    );
}

#[test]
fn seqlock_partial_read_never_torn() {
    // A buffer-cache page in miniature: word 0 a tag, words 1..3 data the tag's writer stored
    // whole (tag t: data t, 2t, 3t). A reader copying the tag and one data word in one window
    // sees them from one value or fails.
    model_pair(
        || SeqLock::new([1u64, 1, 2, 3]),
        |s| {
            s.set([2, 2, 4, 6]);
            s.write(|v| *v = [3, 3, 6, 9]);
        },
        |s| {
            let (mut tag, mut w) = ([0u64; 1], [0u64; 1]);
            if s.try_read_ranges(&mut [(0, &mut tag), (2, &mut w)]) {
                assert_eq!(w[0], 2 * tag[0], "torn partial read");
            }
            assert!(!s.try_read_ranges(&mut [(3, &mut [0u64; 2])]), "out of bounds accepted");
        },
        |s| {
            let (mut tag, mut w) = ([0u64; 1], [0u64; 3]);
            assert!(s.try_read_ranges(&mut [(0, &mut tag), (1, &mut w)]), "quiescent partial read failed");
            assert_eq!((tag[0], w), (3, [3, 6, 9]));
        },
    );
}

#[test]
fn seqlock_ranged_writes_never_torn() {
    // A page in miniature written by ranged writes (`write_words`): word 0 the tag, range A
    // words 1-2, range B words 3-4. The first write changes the tag and range A together (a
    // refill: tag 2, A 2), the second only range B (B 3), the third only word 4 of range B
    // and then word 3 (B 4, stored in the other order). Every value readers may accept:
    //   [1, 1, 1, 1, 1]  [2, 2, 2, 1, 1]  [2, 2, 2, 3, 3]  [2, 2, 2, 4, 4]
    // A copy in one window is one of those: never a range mixing two writes' words, never
    // a tag with the other tag's range A, never words the writer had not finished.
    const STATES: [[u64; 5]; 4] = [[1, 1, 1, 1, 1], [2, 2, 2, 1, 1], [2, 2, 2, 3, 3], [2, 2, 2, 4, 4]];
    model_pair(
        || SeqLock::new([1u64; 5]),
        |s| {
            s.write_words(|w| {
                assert!(w.set(0, 2) && w.set_words(1, &[2, 2]));
            });
            s.write_words(|w| assert!(w.set_words(3, &[3, 3])));
            s.write_words(|w| {
                assert_eq!(w.get(3), Some(3), "a writer sees the last write");
                assert!(w.set(4, 4) && w.set(3, 4));
                assert!(!w.set(5, 9) && w.get(5).is_none(), "out of bounds accepted");
            });
        },
        |s| {
            // Whole value, then the tag with range B only (the words between not copied).
            if let Some(v) = s.try_read() {
                assert!(STATES.contains(&v), "torn ranged write: {v:?}");
            }
            let (mut tag, mut b) = ([0u64; 1], [0u64; 2]);
            if s.try_read_ranges(&mut [(0, &mut tag), (3, &mut b)]) {
                assert!(STATES.iter().any(|st| st[0] == tag[0] && st[3..] == b), "torn partial copy: tag {tag:?}, B {b:?}");
            }
        },
        |s| {
            let (v, path) = s.read_traced();
            assert_eq!(v, [2, 2, 2, 4, 4]);
            assert_eq!(path, ReadPath::Optimistic, "quiescent read must not need the lock");
            assert_eq!(s.generation(), 4);
        },
    );
}

#[test]
fn seqparts_reads_never_torn() {
    // A buffer-cache page in miniature split into three one-word parts (`SeqParts<1, 3>`).
    // The writer: words 0-1 (parts 0 and 1, a record straddling two parts) to 2; words 1-2
    // (parts 1 and 2) to 3; then every part with a new tag (a refill: tag 7, words 4). Every
    // value a reader may accept, as (tag, words):
    //   (0, [0, 0, 0])  (0, [2, 2, 0])  (0, [2, 3, 3])  (7, [4, 4, 4])
    // A copy of any words in one window is one of those: never a straddling write half seen,
    // never a tag with the other tag's words, never words of a writer still in its parts.
    const STATES: [(u64, [u64; 3]); 4] = [(0, [0, 0, 0]), (0, [2, 2, 0]), (0, [2, 3, 3]), (7, [4, 4, 4])];
    fn ok(tag: u64, first: usize, w: &[u64]) -> bool {
        STATES.iter().any(|(t, st)| *t == tag && st[first..first + w.len()] == *w)
    }
    model_pair(
        SeqParts::<1, 3>::new,
        |s| {
            s.write(0, 2, |p| assert!(p.set_words(0, &[2, 2]))).unwrap();
            s.write(1, 3, |p| {
                assert_eq!(p.get(1), Some(2), "a writer sees the last write");
                assert!(p.set(2, 3) && p.set(1, 3));
                assert!(!p.set(0, 9), "a store outside the writer's parts accepted");
            })
            .unwrap();
            s.write_all(|p| assert!(p.set_tag(7) && p.set_words(0, &[4, 4, 4])));
        },
        |s| {
            let mut two = [0u64; 2];
            if let Some(tag) = s.try_read(0, &mut two) {
                assert!(ok(tag, 0, &two), "torn read of parts 0-1: tag {tag}, {two:?}");
            }
            let mut one = [0u64; 1];
            if let Some(tag) = s.try_read(2, &mut one) {
                assert!(ok(tag, 2, &one), "torn read of part 2: tag {tag}, {one:?}");
            }
        },
        |s| {
            let mut all = [0u64; 3];
            assert_eq!(s.try_read(0, &mut all), Some(7), "quiescent read must not fail");
            assert_eq!(all, [4, 4, 4]);
            assert_eq!((s.generation(0), s.generation(1), s.generation(2)), (Some(4), Some(6), Some(4)));
        },
    );
}

#[test]
fn sloppy_counter_invariant() {
    model(|| {
        // Threshold 2, batch 1: both the refill and the give-back paths run.
        let c = Arc::new(SloppyCounter::with_config(2, 2, 1).unwrap());
        let ts: Vec<_> = (0..2)
            .map(|core| {
                let c = c.clone();
                thread::spawn(move || {
                    let mut held = 0;
                    let steps: &[(bool, usize)] = if core == 1 {
                        &[(true, 1), (true, 2), (false, 3), (true, 1)]
                    } else {
                        &[(true, 1), (true, 2), (false, 3)]
                    };
                    for &(acquire, v) in steps {
                        if acquire {
                            c.acquire_on(core, v);
                            held += v;
                        } else {
                            c.release_on(core, v);
                            held -= v;
                        }
                        // In flight, the central count never drops below what is in use:
                        // at least what this thread holds.
                        assert!(c.central() >= held, "central count under-reports");
                    }
                    held
                })
            })
            .collect();
        let in_use: usize = ts.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(in_use, 1);
        assert_eq!(c.total_spares() + in_use, c.central());
        for core in 0..2 {
            assert!(c.spares(core).unwrap() <= c.threshold());
        }
        assert_eq!(c.reclaim_all(), in_use);
        assert_eq!(c.total_spares(), 0);
    });
}

#[test]
fn sloppy_counter_release_orders_before_zero() {
    // The last user's release happens before the reclaimer that finds the count at zero
    // (so it may free the object): checked with a loom cell written by the user.
    model(|| {
        let c = Arc::new(SloppyCounter::with_config(2, 2, 1).unwrap());
        let data = Arc::new(UnsafeCell::new(0usize));
        c.acquire_on(0, 1);
        let (c2, d2) = (c.clone(), data.clone());
        let user = thread::spawn(move || {
            // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
            // a data race here is exactly what loom would report.
            d2.with_mut(|p| unsafe { *p = 7 });
            c2.release_on(1, 1);
        });
        c.release_on(0, 0);
        if c.reclaim_all() == 0 {
            // Count at zero: the user is done with the object, so we may touch it.
            // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
            // a data race here is exactly what loom would report.
            data.with_mut(|p| unsafe { *p = 0 });
        }
        user.join().unwrap();
    });
}

#[test]
fn clustered_shared_miss_creates_one_rep() {
    model(|| {
        let created = Arc::new(AtomicUsize::new(0));
        let c2 = created.clone();
        let obj = Arc::new(
            ClusteredObject::with_cores(2, Policy::Shared, move |info| {
                c2.fetch_add(1, Ordering::Relaxed);
                info.index
            })
            .unwrap(),
        );
        let o2 = obj.clone();
        let t = thread::spawn(move || o2.rep_on(1) as *const usize as usize);
        let mine = obj.rep_on(0) as *const usize as usize;
        let theirs = t.join().unwrap();
        assert_eq!(mine, theirs, "one shared rep");
        assert_eq!(created.load(Ordering::Relaxed), 1);
        assert_eq!(obj.rep_count(), 1);
    });
}

#[test]
fn clustered_per_core_and_cluster_policies() {
    model(|| {
        // 4 cores in clusters of 2: cores 0 and 1 share rep 0; core 2 gets rep 1.
        let created = Arc::new(AtomicUsize::new(0));
        let c2 = created.clone();
        let obj = Arc::new(
            ClusteredObject::with_cores(4, Policy::Clustered(2), move |info| {
                c2.fetch_add(1, Ordering::Relaxed);
                AtomicUsize::new(info.index)
            })
            .unwrap(),
        );
        let o2 = obj.clone();
        let t = thread::spawn(move || {
            let r = o2.rep_on(1);
            r.fetch_add(10, Ordering::Relaxed);
            r as *const AtomicUsize as usize
        });
        let a = obj.rep_on(0) as *const AtomicUsize as usize;
        let b = obj.rep_on(2) as *const AtomicUsize as usize;
        let other = t.join().unwrap();
        assert_eq!(a, other);
        assert_ne!(a, b);
        assert_eq!(created.load(Ordering::Relaxed), 2);
        let mut sum = 0;
        obj.for_each_rep(|_, r| sum += r.load(Ordering::Relaxed));
        assert_eq!(sum, 0 + 10 + 1);
    });
}

struct Node {
    value: UnsafeCell<usize>,
}

impl Drop for Node {
    fn drop(&mut self) {
        // Freeing writes the node: loom flags it if a reader's access is not ordered before.
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        self.value.with_mut(|p| unsafe { *p = usize::MAX });
    }
}

struct Reclaim {
    domain: Domain,
    shared: AtomicPtr<Node>,
}

impl Drop for Reclaim {
    fn drop(&mut self) {
        // SAFETY: the last owner; the current node came from `Box::into_raw`.
        drop(unsafe { Box::from_raw(self.shared.load(Ordering::Acquire)) });
    }
}

#[test]
fn reclamation_never_frees_under_a_reader() {
    model_pair(
        || Reclaim {
            domain: Domain::with_cores(2),
            shared: AtomicPtr::new(Box::into_raw(Box::new(Node { value: UnsafeCell::new(1) }))),
        },
        // Reader on core 0.
        |r| {
            let _op = r.domain.enter_on(0);
            let p = r.shared.load(Ordering::Acquire);
            // SAFETY: the operation keeps whatever we loaded alive until `_op` drops.
            let v = unsafe { (*p).value.with(|v| *v) };
            assert!(v == 1 || v == 2, "read a freed node");
        },
        // Writer on core 1: unlink the old node, retire it, drive the token until it is freed.
        |r| {
            let old = r.shared.swap(Box::into_raw(Box::new(Node { value: UnsafeCell::new(2) })), Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and is no longer reachable.
            r.domain.retire_on(1, unsafe { Box::from_raw(old) });
            loop {
                r.domain.advance();
                if r.domain.collect_on(1) == 1 {
                    break;
                }
                thread::yield_now();
            }
        },
        |r| assert_eq!(r.domain.pending_on(1), 0),
    );
}

#[test]
fn reclamation_visit_under_way_at_retire_does_not_count() {
    // The token's visit to core 0 switches generations while an older operation keeps it
    // from completing; a reader then starts in the new generation and loads the pointer
    // before the writer unlinks it. That visit completes after the retire, but it never
    // waited for the new-generation reader, so it must not count towards the free.
    model_pair(
        || Reclaim {
            domain: Domain::with_cores(2),
            shared: AtomicPtr::new(Box::into_raw(Box::new(Node { value: UnsafeCell::new(1) }))),
        },
        |r| {
            let old_op = r.domain.enter_on(0);
            // If the token is at core 0, this switches its generation and cannot finish the
            // visit while `old_op` lives. (Elsewhere, it may move the token: also fine.)
            r.domain.advance();
            let op = r.domain.enter_on(0);
            let p = r.shared.load(Ordering::Acquire);
            drop(old_op);
            // SAFETY: `op` keeps whatever we loaded alive until it drops.
            let v = unsafe { (*p).value.with(|v| *v) };
            assert!(v == 1 || v == 2, "read a freed node");
            drop(op);
        },
        |r| {
            let old = r.shared.swap(Box::into_raw(Box::new(Node { value: UnsafeCell::new(2) })), Ordering::AcqRel);
            // SAFETY: `old` came from `Box::into_raw` and is no longer reachable.
            r.domain.retire_on(1, unsafe { Box::from_raw(old) });
            while r.domain.collect_on(1) == 0 {
                r.domain.advance();
                thread::yield_now();
            }
        },
        |r| assert_eq!(r.domain.pending_on(1), 0),
    );
}

#[test]
fn ticket_lock_mutual_exclusion() {
    model_pair(
        || percore::TicketLock::new(SyncCell::new(0usize)),
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        |l| l.lock().with_mut(|p| unsafe { *p += 1 }),
        |l| {
            if let Some(g) = l.try_lock() {
                // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                // a data race here is exactly what loom would report.
                g.with_mut(|p| unsafe { *p += 10 });
            } else {
                // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
                // a data race here is exactly what loom would report.
                l.lock_irqsave().with_mut(|p| unsafe { *p += 10 });
            }
        },
        // SAFETY: loom's cell is accessed under the lock (or protocol) this model checks;
        // a data race here is exactly what loom would report.
        |l| assert_eq!(l.lock().with(|p| unsafe { *p }), 11),
    );
}

/// The SPSC ring with two slots and three messages: the producer must wrap and wait for the
/// consumer; every message arrives once, in order, untorn (a tag stored before the words, or
/// a consumed count published before the slot is read, lets loom find a torn or lost one).
#[test]
fn spsc_ring_wraps_without_loss() {
    use percore::spsc::{Consumer, Producer, Ring};
    loom::model(|| {
        let r = Arc::new(Ring::new(2));
        let r2 = r.clone();
        let t = thread::spawn(move || {
            let mut p = Producer::new(&r2);
            let mut i = 0u64;
            while i < 3 {
                if p.push(i + 1, (i + 1) * 100) {
                    i += 1;
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut c = Consumer::new(&r);
        let mut next = 1u64;
        while next <= 3 {
            match c.pop() {
                Some(m) => {
                    assert_eq!(m, (next, next * 100));
                    next += 1;
                }
                None => thread::yield_now(),
            }
        }
        t.join().unwrap();
    });
}

/// Descriptor table (src/fdtable.rs): a dup racing a close of the same descriptor. Whatever
/// the interleaving, the record is freed exactly once, after its last descriptor, and both
/// slots and the record are free at the end (a plain increment instead of increment-if-not-
/// zero, or no re-read of the slot word, lets loom find a double free or a leak).
#[test]
fn fdtable_dup_races_close() {
    use percore::fdtable::DescTable;
    use std::sync::atomic::AtomicUsize as StdUsize;
    type T = DescTable<1, 2>;
    model(|| {
        let t = Arc::new(T::new());
        let d = t.open(0, 5, 1).unwrap();
        let frees = Arc::new(StdUsize::new(0));
        let (t2, f2) = (t.clone(), frees.clone());
        let h = thread::spawn(move || match t2.dup(d, 0) {
            Ok(d2) => {
                if t2.close(d2).unwrap().is_some() {
                    f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err((_, freed)) => {
                if freed.is_some() {
                    f2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        if let Some(f) = t.close(d).unwrap() {
            assert_eq!((f.kind, f.owner), (5, 1));
            frees.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        h.join().unwrap();
        assert_eq!(frees.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(t.counts(), (0, 0));
    });
}

/// Two closes of one descriptor: exactly one succeeds and frees the record.
#[test]
fn fdtable_double_close_one_wins() {
    use percore::fdtable::{DescTable, TableError};
    model(|| {
        let t = Arc::new(DescTable::<1, 2>::new());
        let d = t.open(0, 5, 0).unwrap();
        let t2 = t.clone();
        let h = thread::spawn(move || t2.close(d));
        let a = t.close(d);
        let b = h.join().unwrap();
        let ok = [a, b].iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1);
        assert!([a, b].contains(&Err(TableError::BadDescriptor)) && [a, b].iter().any(|r| matches!(r, Ok(Some(_)))));
        assert_eq!(t.counts(), (0, 0));
    });
}

/// A stale descriptor looked up while its slot and record are reused by a new open: the
/// lookup either refuses it or reaches the old record, never the new one.
#[test]
fn fdtable_stale_lookup_never_reaches_the_new_file() {
    use percore::fdtable::DescTable;
    model(|| {
        let t = Arc::new(DescTable::<1, 1>::new());
        let d = t.open(0, 1, 0).unwrap();
        let t2 = t.clone();
        let h = thread::spawn(move || {
            let freed = t2.close(d).unwrap();
            let new = if freed.is_some() { t2.open(0, 2, 0).ok() } else { None };
            (freed.is_some(), new)
        });
        let mut freed_here = false;
        match t.get(d) {
            Ok(f) => {
                assert_eq!(t.record(f).0, 1, "a stale descriptor reached the new open file");
                freed_here = t.release(f).is_some();
            }
            Err((_, freed)) => freed_here |= freed.is_some(),
        }
        let (freed_there, new) = h.join().unwrap();
        assert!(freed_here ^ freed_there, "the old record was freed {} times", freed_here as u8 + freed_there as u8);
        if let Some(n) = new {
            let f = t.get(n).unwrap();
            assert_eq!(t.record(f).0, 2);
            t.release(f);
        }
    });
}

/// An object of the borrow protocol (percore::borrow): a counted reference count, the drop
/// state, the value (a loom cell: any use not ordered before the drop is a reported race) and
/// how many times it was dropped.
struct Borrowed {
    slots: BorrowSlots<2>,
    strong: AtomicUsize,
    state: DropState,
    value: SyncCell<u64>,
    drops: AtomicUsize,
}

const OBJ: *mut () = 0x40 as *mut ();

impl Borrowed {
    fn new(strong: usize) -> Borrowed {
        Borrowed { slots: BorrowSlots::new(), strong: AtomicUsize::new(strong), state: DropState::new(), value: SyncCell::new(42), drops: AtomicUsize::new(0) }
    }
    fn drop_value(&self) {
        // SAFETY: loom's cell; the protocol must order this after every borrower's use.
        self.value.with_mut(|p| unsafe { *p = 0 });
        self.drops.fetch_add(1, Ordering::Relaxed);
    }
    /// Drop one counted reference as the kernel's `KRef` does; the last one runs the protocol.
    fn put(&self) {
        if self.strong.fetch_sub(1, Ordering::Release) == 1 {
            loom::sync::atomic::fence(Ordering::Acquire);
            if self.state.last_reference_gone(&self.slots, 2, OBJ) {
                self.drop_value();
            }
        }
    }
    /// Borrow on `core`: publish, check the count, use the value, end. With `upgrade`, also
    /// take a counted reference from the borrow (only from a count above zero) and drop it.
    fn borrow(&self, core: usize, upgrade: bool) {
        let slot = self.slots.publish(core, OBJ).expect("a free slot");
        if self.strong.load(Ordering::SeqCst) > 0 {
            // SAFETY: loom's cell; a borrow that saw a count above zero may read the value.
            let v = self.value.with(|p| unsafe { *p });
            assert_eq!(v, 42, "a borrower saw a dropped value");
            if upgrade {
                let mut n = self.strong.load(Ordering::Relaxed);
                while n > 0 {
                    match self.strong.compare_exchange(n, n + 1, Ordering::Acquire, Ordering::Relaxed) {
                        Ok(_) => {
                            self.put();
                            break;
                        }
                        Err(m) => n = m,
                    }
                }
            }
        }
        if self.state.end_borrow(&self.slots, core, slot, 2, OBJ) {
            self.drop_value();
        }
    }
}

/// The last drop on one core against a borrow on another: the value is dropped exactly once,
/// never while the borrower uses it (fails if `publish` loses its fence or the last drop skips
/// the scan).
#[test]
fn borrow_against_the_last_drop() {
    model_pair(|| Borrowed::new(1), |o| o.put(), |o| o.borrow(1, false), |o| {
        assert_eq!(o.drops.load(Ordering::Relaxed), 1, "dropped exactly once");
        assert!(o.state.is_dropped());
    });
}

/// A borrower that takes a counted reference from its borrow and drops it (maybe the last
/// one, while it still borrows), against the owner's last drop.
#[test]
fn borrow_upgrade_against_the_last_drop() {
    model_pair(|| Borrowed::new(1), |o| o.put(), |o| o.borrow(1, true), |o| {
        assert_eq!(o.drops.load(Ordering::Relaxed), 1, "dropped exactly once");
    });
}

/// Two borrowers on two cores while a third party (the main thread, after them) drops the
/// last reference: the last borrower out, or the dropper, drops once.
#[test]
fn two_borrowers_then_the_last_drop() {
    model(|| {
        let o = Arc::new(Borrowed::new(1));
        let o2 = o.clone();
        let t = thread::spawn(move || o2.borrow(1, false));
        o.borrow(0, false);
        o.put();
        t.join().unwrap();
        assert_eq!(o.drops.load(Ordering::Relaxed), 1);
    });
}

impl Borrowed {
    /// The kernel's last drop (kernel/src/kobj/kref.rs): mark orphaned now, scan later (the
    /// core's next system call), as `orphan` then `try_drop`.
    fn put_deferred(&self) {
        if self.strong.fetch_sub(1, Ordering::Release) == 1 {
            loom::sync::atomic::fence(Ordering::Acquire);
            self.state.orphan();
            // ... the rest of the call, then the next call's scan:
            if self.state.try_drop(&self.slots, 2, OBJ) {
                self.drop_value();
            }
        }
    }
    /// The kernel's borrow: publish, then check the drop state (not the count), use, end.
    fn borrow_checking_state(&self, core: usize) {
        let slot = self.slots.publish(core, OBJ).expect("a free slot");
        if self.state.is_live() {
            // SAFETY: loom's cell; a borrow that saw the value live may read it.
            let v = self.value.with(|p| unsafe { *p });
            assert_eq!(v, 42, "a borrower saw a dropped value");
        }
        if self.state.end_borrow(&self.slots, core, slot, 2, OBJ) {
            self.drop_value();
        }
    }
}

/// The kernel's variant: a borrow that checks the drop state against a last drop whose scan is
/// deferred (`DropState::orphan`, later `try_drop`): dropped exactly once, never under a
/// borrower's use (fails if `orphan` loses its fence or `is_live` is checked before publishing).
#[test]
fn state_checked_borrow_against_a_deferred_scan() {
    model_pair(|| Borrowed::new(1), |o| o.put_deferred(), |o| o.borrow_checking_state(1), |o| {
        assert_eq!(o.drops.load(Ordering::Relaxed), 1, "dropped exactly once");
        assert!(o.state.is_dropped());
    });
}

/// The library OS's directory locks (percore::stripe, used by user/libos/src/fs/mod.rs):
/// what the per-directory side and the exclusive side of its file system do, with two
/// "cores", two stripes and a counter per stripe. A per-directory change holds its core's
/// lock (an MCS lock per core), takes its first stripe waiting and its second only if free;
/// refused, it releases everything and runs as an exclusive change, which takes every core's
/// lock in order and no stripe. Both changes must land (no lost update: loom reports a race
/// on a counter written under the wrong lock) and the model must end (with the second stripe
/// also waiting, the two changes hold one stripe each and wait for the other's forever:
/// loom runs out of branches).
struct StripeFs {
    cores: [McsLock<()>; 2],
    stripes: percore::StripeLocks<2>,
    counts: [SyncCell<u32>; 2],
}

impl StripeFs {
    fn new() -> Self {
        Self { cores: [McsLock::new(()), McsLock::new(())], stripes: percore::StripeLocks::new(), counts: [SyncCell::new(0), SyncCell::new(0)] }
    }

    /// Add 1 to both stripes' counts, stripe `first` first, as core `core`.
    fn change(&self, core: usize, first: usize) {
        let order = [first, 1 - first];
        {
            let _own = self.cores[core].lock();
            let mut held = 0;
            for &s in &order {
                if self.stripes.acquire(s, held).is_err() {
                    break;
                }
                held += 1;
            }
            if held == 2 {
                for c in &self.counts {
                    // SAFETY: loom's cell, written under both stripes; loom reports a race.
                    c.with_mut(|p| unsafe { *p += 1 });
                }
            }
            for &s in &order[..held] {
                self.stripes.unlock(s);
            }
            if held == 2 {
                return;
            }
        }
        // The exclusive side: every core's lock in order, no stripe.
        let _a = self.cores[0].lock();
        let _b = self.cores[1].lock();
        for c in &self.counts {
            // SAFETY: loom's cell, written with every core's lock held.
            c.with_mut(|p| unsafe { *p += 1 });
        }
    }
}

#[test]
fn stripe_changes_in_opposite_orders_fall_back_and_both_land() {
    model_pair(StripeFs::new, |f| f.change(0, 0), |f| f.change(1, 1), |f| {
        for c in &f.counts {
            // SAFETY: loom's cell; both threads have been joined.
            assert_eq!(c.with(|p| unsafe { *p }), 2, "both changes landed on both stripes");
        }
    });
}

/// One stripe, two holders (first acquisitions, both waiting) adding to one count: mutual
/// exclusion, and the release orders the first holder's write before the second's (a
/// `Relaxed` unlock or a lock that lets both in makes loom report the race).
#[test]
fn stripe_mutual_exclusion() {
    fn add(f: &StripeFs, n: u32) {
        f.stripes.acquire(1, 0).expect("a first acquisition waits");
        // SAFETY: loom's cell, written under stripe 1.
        f.counts[1].with_mut(|p| unsafe { *p += n });
        f.stripes.unlock(1);
    }
    model_pair(StripeFs::new, |f| add(f, 1), |f| add(f, 10), |f| {
        // SAFETY: loom's cell; both threads have been joined.
        assert_eq!(f.counts[1].with(|p| unsafe { *p }), 11);
        assert!(!f.stripes.is_locked(1));
    });
}

/// The kernel's last drop of an object that no core but its origin
/// (core 0) borrowed scans only core 0's slots (`DropState::try_drop_on`); a borrower on
/// another core first stores the object's `remote` flag, and the last drop reads it after its
/// orphan mark's fence (then it scans every core). Borrowers check `is_live`, as the kernel
/// does. Planted once: the borrower's flag store moved after its `is_live`
/// check; loom failed it with "Causality violation: Concurrent read and write accesses to
/// `UnsafeCell`" (the borrower's read of the value racing the origin-only drop).
struct OriginBorrowed {
    inner: Borrowed,
    remote: loom::sync::atomic::AtomicBool,
}

impl OriginBorrowed {
    fn put(&self) {
        let o = &self.inner;
        if o.strong.fetch_sub(1, Ordering::Release) == 1 {
            loom::sync::atomic::fence(Ordering::Acquire);
            o.state.orphan();
            let won = if self.remote.load(Ordering::SeqCst) { o.state.try_drop(&o.slots, 2, OBJ) } else { o.state.try_drop_on(&o.slots, 0, OBJ) };
            if won {
                o.drop_value();
            }
        }
    }
    fn borrow_remote(&self) {
        let o = &self.inner;
        if !self.remote.load(Ordering::SeqCst) {
            self.remote.store(true, Ordering::SeqCst);
        }
        let slot = o.slots.publish(1, OBJ).expect("a free slot");
        if o.state.is_live() {
            // SAFETY: loom's cell; a borrow that saw the object live may read the value.
            let v = o.value.with(|p| unsafe { *p });
            assert_eq!(v, 42, "a borrower saw a dropped value");
        }
        if o.state.end_borrow(&o.slots, 1, slot, 2, OBJ) {
            o.drop_value();
        }
    }
}

#[test]
fn origin_only_scan_against_a_remote_borrow() {
    model_pair(
        || OriginBorrowed { inner: Borrowed::new(1), remote: loom::sync::atomic::AtomicBool::new(false) },
        |o| o.put(),
        |o| o.borrow_remote(),
        |o| {
            assert_eq!(o.inner.drops.load(Ordering::Relaxed), 1, "dropped exactly once");
            assert!(o.inner.state.is_dropped());
        },
    );
}
