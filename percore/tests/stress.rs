//! Host stress tests with real threads: every primitive with 2 threads (the machine's core
//! count) and with 8 (more threads than cores, so holders get preempted mid-operation).
//! Sizes are iteration counts, never durations: the tests assert behaviour, not timing.
#![cfg(not(loom))]

use percore::clustered::{ClusteredObject, Policy};
use percore::counter::{DistributedCounter, SloppyCounter};
use percore::cpu;
use percore::mcs::McsLock;
use percore::reclaim::Domain;
use percore::rwlock::RwLock;
use percore::seqlock::{ReadPath, SeqLock};
use percore::slab::{HeapBackend, ObjectCache};
use percore::spin::{IrqTicketLock, TicketLock};
use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;

const THREAD_COUNTS: [usize; 2] = [2, 8];

/// Per-thread iterations: `per_thread` with 2 threads, a tenth of it when oversubscribed
/// (a FIFO lock hands over to descheduled waiters there, so each hand-off can cost a time
/// slice on a busy 2-core machine).
fn iters_for(n: usize, per_thread: usize) -> usize {
    if n <= 2 {
        per_thread
    } else {
        per_thread / 10
    }
}

/// Run `f(core)` on `n` threads, each registered as core `core`, started together.
fn on_cores<T: Send + 'static>(n: usize, f: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let f = Arc::new(f);
    let barrier = Arc::new(Barrier::new(n));
    let hs: Vec<_> = (0..n)
        .map(|core| {
            let (f, barrier) = (f.clone(), barrier.clone());
            thread::spawn(move || {
                cpu::register_thread(core);
                barrier.wait();
                f(core)
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().expect("worker panicked")).collect()
}

#[test]
fn ticket_lock_counts_exactly() {
    for n in THREAD_COUNTS {
        let iters = iters_for(n, 50_000);
        let lock = Arc::new(TicketLock::new(0u64));
        let l = lock.clone();
        on_cores(n, move |core| {
            for i in 0..iters {
                if i % 7 == 0 {
                    if let Some(mut g) = l.try_lock() {
                        *g += 1;
                        continue;
                    }
                }
                let mut g = if core % 2 == 0 { l.lock() } else { l.lock_irqsave() };
                // A non-atomic read-modify-write: lost updates show up in the total.
                let v = *g;
                *g = v + 1;
            }
        });
        assert_eq!(*lock.lock(), (n * iters) as u64);
        assert!(!lock.is_locked());
    }
    let l = IrqTicketLock::new(1);
    *l.lock() += 1;
    assert_eq!(*l.lock(), 2);
    let g = l.lock();
    assert!(l.try_lock().is_none());
    drop(g);
    assert!(l.try_lock().is_some());
}

#[test]
fn mcs_lock_counts_exactly() {
    for n in THREAD_COUNTS {
        let iters = iters_for(n, 50_000);
        let lock = Arc::new(McsLock::new(0u64));
        let l = lock.clone();
        on_cores(n, move |core| {
            for i in 0..iters {
                match (core + i) % 3 {
                    0 => {
                        let mut g = l.lock();
                        let v = *g;
                        *g = v + 1;
                    }
                    1 => l.with_lock(|v| *v += 1),
                    _ if i % 2 == 0 => {
                        let mut g = l.lock_irqsave();
                        *g += 1;
                    }
                    _ => loop {
                        if let Some(mut g) = l.try_lock() {
                            *g += 1;
                            break;
                        }
                        thread::yield_now();
                    },
                }
            }
        });
        assert_eq!(*lock.lock(), (n * iters) as u64);
        assert!(!lock.is_locked());
    }
}

#[test]
fn mcs_nested_many_locks() {
    // Twelve locks held at once by each thread, released out of order: queue nodes live only
    // on the acquiring frame, so nesting depth is unbounded.
    let locks: Arc<Vec<McsLock<u64>>> = Arc::new((0..12).map(|_| McsLock::new(0)).collect());
    let l = locks.clone();
    on_cores(4, move |_| {
        for _ in 0..500 {
            let mut guards: Vec<_> = l.iter().map(|m| m.lock()).collect();
            for g in guards.iter_mut() {
                **g += 1;
            }
            // Release out of order (middle first).
            let mid = guards.remove(6);
            drop(mid);
            drop(guards);
        }
    });
    for m in locks.iter() {
        assert_eq!(*m.lock(), 4 * 500);
    }
}

#[test]
fn rwlock_readers_never_see_a_half_write() {
    for n in THREAD_COUNTS {
        let lock = Arc::new(RwLock::with_reader_slots([0u64; 8], n));
        let writes = Arc::new(AtomicUsize::new(0));
        let (l, w) = (lock.clone(), writes.clone());
        let reads: usize = on_cores(n, move |core| {
            let mut reads = 0;
            for i in 0..iters_for(n, 10_000) {
                if core == 0 && i % 4 == 0 || core == 1 && i % 50 == 0 {
                    let mut g = if i % 8 == 0 { l.write_irqsave() } else { l.write() };
                    let next = g[0] + 1;
                    for x in g.iter_mut() {
                        *x = next;
                    }
                    w.fetch_add(1, Ordering::Relaxed);
                } else {
                    let g = if i % 5 == 0 { l.read_irqsave() } else { l.read() };
                    let first = g[0];
                    assert!(g.iter().all(|&x| x == first), "torn read under RwLock: {:?}", *g);
                    reads += 1;
                }
            }
            reads
        })
        .into_iter()
        .sum();
        assert!(reads > 0);
        assert_eq!(lock.read()[7], writes.load(Ordering::Relaxed) as u64);
        assert!(!lock.is_write_locked());
    }
}

#[test]
fn seqlock_reads_are_consistent() {
    for n in THREAD_COUNTS {
        let s = Arc::new(SeqLock::new([0u64, 0, 0, 0]));
        let s2 = s.clone();
        let results = on_cores(n, move |core| {
            let (mut optimistic, mut locked) = (0usize, 0usize);
            for i in 0..iters_for(n, 20_000) as u64 {
                if core == 0 && i % 3 == 0 {
                    s2.write(|v| {
                        let k = v[0] + 1;
                        *v = [k, 2 * k, 3 * k, 4 * k];
                    });
                } else {
                    let (v, path) = s2.read_traced();
                    assert_eq!([v[0], 2 * v[0], 3 * v[0], 4 * v[0]], v, "torn seqlock read");
                    match path {
                        ReadPath::Optimistic => optimistic += 1,
                        ReadPath::Locked => locked += 1,
                    }
                    if let Some(v) = s2.try_read() {
                        assert_eq!(v[3], 4 * v[0]);
                    }
                    assert!(s2.compare(|v| v[1] == 2 * v[0]));
                }
            }
            (optimistic, locked)
        });
        let optimistic: usize = results.iter().map(|r| r.0).sum();
        assert!(optimistic > 0, "the lock-free path never succeeded");
        let writes = (iters_for(n, 20_000) as u64).div_ceil(3);
        assert_eq!(s.read()[0], writes);
        assert_eq!(s.generation() as u64, 1 + writes);
        assert_eq!(s.read_traced().1, ReadPath::Optimistic);
    }
}

#[test]
fn seqlock_odd_sizes() {
    // Byte-wise and 4-byte-wise copies.
    let a = SeqLock::new([1u8, 2, 3]);
    a.write(|v| v[1] = 9);
    assert_eq!(a.read(), [1, 9, 3]);
    let b = SeqLock::new([7u32; 3]);
    b.set([1, 2, 3]);
    assert_eq!(b.try_read(), Some([1, 2, 3]));
}

#[test]
fn distributed_counter_sums_exactly() {
    for n in THREAD_COUNTS {
        let c = Arc::new(DistributedCounter::with_cores(n));
        let c2 = c.clone();
        on_cores(n, move |core| {
            for i in 0..10_000i64 {
                if i % 10 == 9 {
                    c2.add(-1);
                } else {
                    c2.inc();
                }
            }
            assert!(c2.slot(core).unwrap() > 0);
        });
        assert_eq!(c.sum(), n as i64 * 8_000);
    }
}

#[test]
fn sloppy_counter_invariant_under_threads() {
    for n in THREAD_COUNTS {
        let c = Arc::new(SloppyCounter::with_config(n, 8, 3).unwrap());
        let c2 = c.clone();
        let held: usize = on_cores(n, move |core| {
            let mut held = 0usize;
            let mut x = core as u64 + 1;
            for _ in 0..50_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let v = (x >> 60) as usize % 4 + 1;
                if (x >> 40) & 1 == 0 || held < v {
                    c2.acquire(v);
                    held += v;
                } else {
                    c2.release(v);
                    held -= v;
                }
                // Never below what is in use, whatever other cores are doing.
                assert!(c2.central() >= held);
            }
            held
        })
        .into_iter()
        .sum();
        assert_eq!(c.total_spares() + held, c.central());
        assert_eq!(c.in_use(), held);
        for core in 0..n {
            assert!(c.spares(core).unwrap() <= c.threshold() + c.batch());
        }
        assert_eq!(c.reclaim_all(), held);
    }
}

#[test]
fn clustered_counter_policies() {
    for (policy, reps) in [(Policy::Shared, 1), (Policy::PerCore, 8), (Policy::Clustered(2), 4), (Policy::Clustered(3), 3)] {
        let created = Arc::new(AtomicUsize::new(0));
        let c = created.clone();
        let obj = Arc::new(
            ClusteredObject::with_cores(8, policy, move |_| {
                c.fetch_add(1, Ordering::Relaxed);
                AtomicU64::new(0)
            })
            .unwrap(),
        );
        let o = obj.clone();
        on_cores(8, move |core| {
            for i in 0..5_000 {
                o.rep().fetch_add(1, Ordering::Relaxed);
                if core == 0 && i == 2_500 {
                    // Discarded translations are rebuilt by misses, with the same reps.
                    o.flush_translations();
                }
            }
        });
        let mut sum = 0;
        obj.for_each_rep(|_, r| sum += r.load(Ordering::Relaxed));
        assert_eq!(sum, 8 * 5_000, "{policy:?}");
        assert_eq!(obj.rep_count(), reps, "{policy:?}");
        assert_eq!(created.load(Ordering::Relaxed), reps, "{policy:?}");
        assert!(obj.misses() >= 8, "{policy:?}");
        let mut visited = 0;
        obj.update_all(|_, r| {
            r.store(0, Ordering::Relaxed);
            visited += 1;
        });
        assert_eq!(visited, reps);
    }
    assert!(ClusteredObject::<u8>::with_cores(4, Policy::Clustered(0), |_| 0).is_err());
}

const ALIVE: u64 = 0x600d_600d;
const DEAD: u64 = 0xdead_dead;

struct Node {
    magic: AtomicU64,
    freed: Arc<AtomicUsize>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.magic.store(DEAD, Ordering::Relaxed);
        self.freed.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn reclamation_frees_only_after_readers() {
    for n in THREAD_COUNTS {
        let freed = Arc::new(AtomicUsize::new(0));
        let domain = Arc::new(Domain::with_cores(n));
        let node = |freed: &Arc<AtomicUsize>| Box::into_raw(Box::new(Node { magic: AtomicU64::new(ALIVE), freed: freed.clone() }));
        let shared = Arc::new(AtomicPtr::new(node(&freed)));
        let done = Arc::new(AtomicBool::new(false));
        let replaced = 300usize;
        let (d, s, f, dn) = (domain.clone(), shared.clone(), freed.clone(), done.clone());
        on_cores(n, move |core| {
            if core == 0 {
                for _ in 0..replaced {
                    let old = s.swap(node(&f), Ordering::AcqRel);
                    // SAFETY: `old` is unlinked and came from `Box::into_raw`.
                    d.retire(unsafe { Box::from_raw(old) });
                    d.quiescent_point_on(core);
                }
                dn.store(true, Ordering::Release);
            } else {
                let mut reads = 0u64;
                while !dn.load(Ordering::Acquire) || reads < 1_000 {
                    {
                        let _op = d.enter();
                        let p = s.load(Ordering::Acquire);
                        // SAFETY: the operation keeps the node alive.
                        let m = unsafe { (*p).magic.load(Ordering::Relaxed) };
                        assert_eq!(m, ALIVE, "read a freed node");
                        reads += 1;
                    }
                    // Every core passes the token on at its quiescent points.
                    d.quiescent_point_on(core);
                }
            }
        });
        domain.synchronize();
        domain.collect_on(0);
        assert_eq!(domain.pending_on(0), 0);
        assert_eq!(freed.load(Ordering::Relaxed), replaced);
        // SAFETY: the last node, still linked; no threads remain.
        drop(unsafe { Box::from_raw(shared.load(Ordering::Acquire)) });
        assert!(domain.visits() > 0);
    }
}

#[test]
fn reclamation_domain_drop_frees_pending() {
    let freed = Arc::new(AtomicUsize::new(0));
    let d = Domain::with_cores(2);
    d.retire_on(1, Box::new(Node { magic: AtomicU64::new(ALIVE), freed: freed.clone() }));
    assert_eq!(d.collect_on(1), 0, "freed before any token visit");
    assert_eq!(d.pending_on(1), 1);
    drop(d);
    assert_eq!(freed.load(Ordering::Relaxed), 1);
}

#[test]
fn object_cache_with_remote_frees() {
    for n in THREAD_COUNTS {
        let backend = HeapBackend::new(Layout::new::<[u64; 4]>()).unwrap();
        let cache = Arc::new(ObjectCache::with_cores(backend, n).unwrap());
        // Each thread passes half its objects to the next thread to free (remote frees).
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<usize>()).unzip();
        let txs = Arc::new(txs);
        let rxs: Arc<Vec<std::sync::Mutex<mpsc::Receiver<usize>>>> = Arc::new(rxs.into_iter().map(std::sync::Mutex::new).collect());
        let c = cache.clone();
        on_cores(n, move |core| {
            let mut mine = Vec::new();
            for i in 0..4_000u64 {
                let p = c.alloc().expect("heap backend never runs out here").as_ptr() as *mut [u64; 4];
                let tag = ((core as u64) << 32) | i;
                // SAFETY: a fresh object of the cache's layout, ours alone until freed.
                unsafe { p.write([tag, !tag, tag, !tag]) };
                if i % 2 == 0 {
                    txs[(core + 1) % txs.len()].send(p as usize).unwrap();
                } else {
                    mine.push(p);
                }
                if mine.len() > 40 {
                    for p in mine.drain(..) {
                        // SAFETY: our object; checks nobody else was handed it meanwhile.
                        unsafe {
                            let v = p.read();
                            assert_eq!(v[1], !v[0], "object handed out twice");
                            c.free(std::ptr::NonNull::new_unchecked(p as *mut u8));
                        }
                    }
                }
            }
            for p in mine {
                // SAFETY: as above.
                unsafe { c.free(std::ptr::NonNull::new_unchecked(p as *mut u8)) };
            }
            // Free what the previous core sent us (objects whose home is that core).
            let rx = rxs[core].lock().unwrap();
            let mut got = 0;
            while got < 2_000 {
                let p = rx.recv().unwrap() as *mut [u64; 4];
                // SAFETY: handed to us by its allocating thread, which no longer uses it.
                unsafe {
                    let v = p.read();
                    assert_eq!(v[3], !v[2]);
                    c.free(std::ptr::NonNull::new_unchecked(p as *mut u8));
                }
                got += 1;
            }
        });
        let stats = cache.stats();
        assert_eq!(stats.remote_frees, n * 2_000);
        let cache = Arc::try_unwrap(cache).ok().expect("threads are gone");
        assert!(cache.backend().live() >= stats.cached);
        cache.drain();
        assert_eq!(cache.backend().live(), 0, "every object back in the heap after drain");
    }
}

#[test]
fn object_cache_rejects_tiny_objects() {
    struct Tiny;
    // SAFETY: never hands out anything.
    unsafe impl percore::slab::ObjectBackend for Tiny {
        fn layout(&self) -> Layout {
            Layout::new::<u8>()
        }
        fn alloc(&self, _core: usize) -> Option<std::ptr::NonNull<u8>> {
            None
        }
        unsafe fn free(&self, _obj: std::ptr::NonNull<u8>) {}
        fn home(&self, _obj: std::ptr::NonNull<u8>) -> usize {
            0
        }
    }
    assert!(ObjectCache::with_cores(Tiny, 2).is_err());
}

#[test]
fn per_core_slots_are_padded_and_readable() {
    let pc = percore::PerCore::with_cores(4, |i| AtomicUsize::new(i * 10));
    let addrs: Vec<usize> = pc.iter().map(|s| s as *const _ as usize).collect();
    for w in addrs.windows(2) {
        assert!(w[1] - w[0] >= 128, "slots share a 128-byte line pair");
    }
    assert_eq!(pc.iter().map(|s| s.load(Ordering::Relaxed)).sum::<usize>(), 60);
    assert_eq!(pc.on(5).load(Ordering::Relaxed), 10, "cores past the slots wrap");
    assert!(pc.get(4).is_none());
}

#[test]
fn kernel_selftest_on_threads() {
    // The routine the kernel runs on all its cores, here on 2 and 8 threads.
    for n in THREAD_COUNTS {
        let t = Arc::new(percore::selftest::SelfTest::new(n, iters_for(n, 2_000)));
        let t2 = t.clone();
        let results = on_cores(n, move |core| t2.run_on_core(core));
        for r in results {
            assert_eq!(r, Ok(()));
        }
        assert_eq!(t.check(), Ok(()));
    }
}

/// Pages from the host heap, page-aligned, counted.
struct HostPages {
    pages: AtomicUsize,
}

// SAFETY: distinct page-aligned 4 KiB blocks that are never freed (leaked for the test).
unsafe impl percore::slab::PageSource for HostPages {
    fn page_size(&self) -> usize {
        4096
    }
    fn alloc_page(&self, _core: usize) -> Option<std::ptr::NonNull<u8>> {
        self.pages.fetch_add(1, Ordering::Relaxed);
        // SAFETY: non-zero size.
        std::ptr::NonNull::new(unsafe { std::alloc::alloc(Layout::from_size_align(4096, 4096).unwrap()) })
    }
}

#[test]
fn object_cache_over_page_slabs() {
    use percore::slab::{ObjectBackend, PageSlab, SlabError};
    assert_eq!(
        PageSlab::new(HostPages { pages: AtomicUsize::new(0) }, Layout::from_size_align(5000, 8).unwrap(), 2).err(),
        Some(SlabError::BadPage { page_size: 4096 })
    );
    let n = 2;
    let slab = PageSlab::new(HostPages { pages: AtomicUsize::new(0) }, Layout::new::<[u64; 6]>(), n).unwrap();
    let cache = Arc::new(ObjectCache::with_cores(slab, n).unwrap());
    let c = cache.clone();
    // Bounded, so the live set stays small and reuse (not new pages) must serve most allocs.
    let (tx, rx) = mpsc::sync_channel::<usize>(32);
    let tx = std::sync::Mutex::new(Some(tx));
    let rx = std::sync::Mutex::new(rx);
    on_cores(n, move |core| {
        if core == 0 {
            // Allocate, tag, send every other object to core 1 to free (remote frees).
            let tx = tx.lock().unwrap().take().unwrap();
            let mut mine = Vec::new();
            for i in 0..20_000u64 {
                let p = c.alloc().unwrap();
                assert_eq!(c.backend().home(p), 0, "objects carved on core 0 live in core 0's pages");
                // SAFETY: a fresh object of 48 bytes.
                unsafe { (p.as_ptr() as *mut [u64; 6]).write([i; 6]) };
                if i % 2 == 0 {
                    tx.send(p.as_ptr() as usize).unwrap();
                } else {
                    mine.push(p);
                }
                if mine.len() == 64 {
                    for p in mine.drain(..) {
                        // SAFETY: ours, unused from here on.
                        unsafe { c.free(p) };
                    }
                }
            }
        } else {
            let rx = rx.lock().unwrap();
            while let Ok(p) = rx.recv() {
                let p = p as *mut [u64; 6];
                // SAFETY: handed over by core 0, which no longer uses it.
                unsafe {
                    let v = p.read();
                    assert!(v.iter().all(|&x| x == v[0]), "object overwritten while in use");
                    c.free(std::ptr::NonNull::new_unchecked(p as *mut u8));
                }
            }
        }
    });
    assert_eq!(cache.stats().remote_frees, 10_000);
    // Reuse keeps the page count near the live set (about 32 in the channel, 64 held, the
    // magazines), far below 20 000 objects' worth (235 pages).
    let pages = cache.backend().source().pages.load(Ordering::Relaxed);
    eprintln!("page slab: {pages} pages");
    assert!(pages < 40, "{pages} pages for a small live set: freed objects are not reused");
}

/// Raw retires wait for operations that began before them, and collect frees them in order
/// once the token has cleared them, without freeing anything early.
#[test]
fn raw_retire_waits_for_older_operations() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static FREED: AtomicUsize = AtomicUsize::new(0);
    unsafe fn count_free(p: *mut ()) {
        // SAFETY: every pointer retired below is a Box<u64> made for this test.
        drop(unsafe { Box::from_raw(p as *mut u64) });
        FREED.fetch_add(1, Ordering::SeqCst);
    }
    let d = percore::Domain::with_cores(2);
    let op = d.enter_on(1); // an operation on core 1 that began before the retires
    for i in 0..3u64 {
        let p = Box::into_raw(Box::new(i)) as *mut ();
        // SAFETY: p is a fresh Box<u64>, unlinked from everything; count_free frees it once.
        unsafe { d.try_retire_raw_on(0, p, count_free) }.expect("list can grow");
    }
    for _ in 0..10 {
        d.advance();
    }
    assert_eq!(d.collect_on(0), 0, "freed while an older operation still ran");
    assert_eq!(d.pending_on(0), 3);
    drop(op);
    d.synchronize();
    assert_eq!(d.collect_on(0), 3);
    assert_eq!(FREED.load(Ordering::SeqCst), 3);
    assert_eq!(d.pending_on(0), 0);
    // Within the room made up front only: the list never grows.
    let d = percore::Domain::with_cores(1);
    d.reserve_on(0, 2).expect("room");
    let mut kept = Vec::new();
    loop {
        let p = Box::into_raw(Box::new(7u64)) as *mut ();
        // SAFETY: as above.
        match unsafe { d.try_retire_raw_in_room_on(0, p, count_free) } {
            Ok(_) => {}
            Err(()) => {
                kept.push(p);
                break;
            }
        }
        assert!(d.pending_on(0) <= 64, "the list grew past its room");
    }
    assert!(d.pending_on(0) >= 2, "the reserved room was used");
    d.synchronize();
    let before = FREED.load(Ordering::SeqCst);
    let n = d.collect_on(0);
    assert_eq!(FREED.load(Ordering::SeqCst), before + n);
    for p in kept {
        // SAFETY: refused above, so still ours; a Box<u64>.
        unsafe { count_free(p) };
    }
}
