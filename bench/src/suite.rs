//! The benchmarks, written once against [`Platform`]. Each returns the run's [`Outcome`]; a
//! benchmark that can check its own result (the counters) does, and fails if it is wrong.

use core::sync::atomic::{AtomicU64, Ordering};

use crate::catalog::MAX_CORES;
use crate::harness::{run_workers, Gate, Marks, Outcome, PAGE};
use crate::params::Params;
use crate::{Error, MapKind, Platform, Scope};

/// Run the benchmark `params` names with `params.workers` workers (0: one per core).
pub fn run<P: Platform>(p: &P, params: &Params) -> Result<Outcome, Error> {
    let spec = params.spec;
    let n = if spec.kernel_core { spec.workers(p.cores()) } else if params.workers == 0 { p.cores() } else { params.workers };
    let go = |work: &(dyn Fn(usize, &Gate<'_, P>) -> Result<u64, Error> + Sync)| run_workers(p, spec.placement, spec.shape, n, marks(params), work);
    match spec.name {
        "memclone_threads" | "memclone_procs" => {
            let pages = params.count("pages")?;
            go(&|_, gate| {
                let mem = p.map(pages * PAGE, MapKind::Private)?;
                gate.start();
                touch_pages(mem, pages);
                gate.stop();
                p.unmap(mem, pages * PAGE)?;
                Ok(pages as u64)
            })
        }
        "mempass_threads" | "mempass_procs" => {
            let pages = params.count("pages")?;
            // Threads share a private mapping by being one address space; processes need a
            // shared one, and then each takes its own soft fault per page (Corey figure 7b).
            let kind = if spec.placement == crate::Placement::Threads { MapKind::Private } else { MapKind::Shared };
            let buf = p.map(pages * PAGE, kind)?;
            let buf_addr = buf as usize;
            let r = go(&|_, gate| {
                gate.start();
                touch_pages(buf_addr as *mut u8, pages);
                gate.stop();
                Ok(pages as u64)
            });
            p.unmap(buf, pages * PAGE)?;
            r
        }
        "dupclose" | "dupclose_private" => {
            let iters = params.count("iters")?;
            let scope = if spec.name == "dupclose" { Scope::Process } else { Scope::Worker };
            go(&|_, gate| {
                p.desc_scope(scope)?;
                let d = p.desc_open()?;
                gate.start();
                for _ in 0..iters {
                    let x = p.desc_dup(d)?;
                    p.desc_close(x)?;
                }
                gate.stop();
                p.desc_close(d)?;
                Ok(iters as u64)
            })
        }
        "share_global" | "share_local" => {
            let iters = params.count("iters")?;
            let scope = if spec.name == "share_global" { Scope::Process } else { Scope::Worker };
            go(&|_, gate| {
                let share = p.share_open(scope)?;
                // Corey adds a per-core segment; the worker's own object plays that part.
                let obj = p.object_create(PAGE)?;
                gate.start();
                for _ in 0..iters {
                    let id = p.share_add(share, obj)?;
                    p.share_del(share, id)?;
                }
                gate.stop();
                p.object_destroy(obj)?;
                Ok(iters as u64)
            })
        }
        "segment_allocfree" => {
            let iters = params.count("iters")?;
            let bytes = params.get("bytes")? as usize;
            go(&|_, gate| {
                gate.start();
                for _ in 0..iters {
                    let seg = p.segment_alloc(bytes)?;
                    p.segment_free(seg)?;
                }
                gate.stop();
                Ok(iters as u64)
            })
        }
        "counter_shared" | "counter_array" | "counter_padded" | "counter_sloppy" | "counter_clustered" => counters(p, params, n),
        "thread_mt" | "thread_mp" => {
            let iters = params.count("iters")?;
            go(&|_, gate| {
                gate.start();
                for _ in 0..iters {
                    p.thread_create_join()?;
                }
                gate.stop();
                Ok(iters as u64)
            })
        }
        "pagefault_mt" | "pagefault_mp" => {
            let (pages, rounds) = (params.count("pages")?, params.count("rounds")?);
            go(&|_, gate| {
                // The worker's own object, resident before the clock starts: every fault in the
                // loop is in-core (Tornado: independent, separately mapped regions).
                let obj = p.object_create(pages * PAGE)?;
                gate.start();
                for _ in 0..rounds {
                    let m = p.object_map(obj, pages * PAGE)?;
                    touch_pages(m, pages);
                    p.unmap(m, pages * PAGE)?;
                }
                gate.stop();
                p.object_destroy(obj)?;
                Ok((pages * rounds) as u64)
            })
        }
        "stat_mt" | "stat_mp" => {
            let iters = params.count("iters")?;
            go(&|_, gate| {
                let obj = p.object_create(PAGE)?;
                gate.start();
                for _ in 0..iters {
                    p.stat(obj)?;
                }
                gate.stop();
                p.object_destroy(obj)?;
                Ok(iters as u64)
            })
        }
        "nullsyscall" => {
            let iters = params.count("iters")?;
            go(&|_, gate| {
                let want = p.null_expected();
                gate.start();
                // Each call's result is summed (one add per call) and checked after the loop.
                let mut sum = 0u64;
                for _ in 0..iters {
                    sum = sum.wrapping_add(p.null_syscall());
                }
                gate.stop();
                null_results_ok(sum, want, iters)?;
                Ok(iters as u64)
            })
        }
        "nullsyscall_forwarded" | "nullsyscall_batched" => {
            let iters = params.count("iters")?;
            let batch = if spec.name == "nullsyscall_batched" { params.count("batch")? } else { 1 };
            let rounds = iters / batch;
            if rounds == 0 {
                return Err(Error::Param("iters is smaller than batch"));
            }
            let ops = (rounds * batch) as u64;
            go(&|_, gate| {
                p.forward_begin()?;
                gate.start();
                let mut r = Ok(());
                let want = p.null_expected();
                let mut sum = 0u64;
                if batch == 1 {
                    // The same loop as `nullsyscall`, only on an application core.
                    for _ in 0..rounds {
                        sum = sum.wrapping_add(p.null_syscall());
                    }
                } else {
                    for _ in 0..rounds {
                        r = p.null_syscall_batch(batch);
                        if r.is_err() {
                            break;
                        }
                    }
                }
                gate.stop();
                // Roles are restored on every path, errors included.
                let served = p.forward_end();
                r?;
                if batch == 1 {
                    null_results_ok(sum, want, rounds)?;
                }
                // One forwarded system call per batch (the batch is one round trip).
                if served? < ops / batch as u64 {
                    return Err(Error::Check("the kernel core served fewer calls than were forwarded"));
                }
                Ok(ops)
            })
        }
        "pagefault_zero" => {
            let (pages, rounds) = (params.count("pages")?, params.count("rounds")?);
            go(&|_, gate| {
                gate.start();
                for _ in 0..rounds {
                    let m = p.map(pages * PAGE, MapKind::Private)?;
                    touch_pages(m, pages);
                    p.unmap(m, pages * PAGE)?;
                }
                gate.stop();
                Ok((pages * rounds) as u64)
            })
        }
        "calib" => {
            let iters = params.count("iters")?;
            go(&|w, gate| {
                gate.start();
                let x = xorshift_loop(w as u64 + 1, iters as u64);
                gate.stop();
                core::hint::black_box(x);
                Ok(iters as u64)
            })
        }
        "metis_wc" | "metis_wri" | "metis_wrmem" => crate::metis::row(p, params, n),
        "selftest_hang" => go(&|_, gate| {
            gate.start();
            loop {
                core::hint::spin_loop();
            }
        }),
        _ => Err(Error::Unsupported("benchmark listed in the catalog but not in the suite")),
    }
}

/// The region markers of a run: none for the unmarked calibration; every vCPU for a
/// kernel-core benchmark (its one worker's calls run on the kernel core, whose polling and
/// serving count); otherwise each worker's own vCPU.
fn marks(params: &Params) -> Marks {
    match (params.marked, params.spec.kernel_core) {
        (false, _) => Marks::Off,
        (true, true) => Marks::AllVcpus,
        (true, false) => Marks::PerWorker,
    }
}

/// Write one byte in each page: the first write to a demand-zero page, or to a fresh mapping
/// of a resident page, is one page fault.
/// After `calls` null calls that should each have returned `want`, their wrapping sum must be
/// `calls * want`. One add per call keeps the loop as cheap as a discarded result; a failed
/// call (ours: `u64::MAX`) or a wrong value makes the sum differ (a set of wrong values that
/// cancel exactly modulo 2^64 would slip through; no plausible bug gives one).
fn null_results_ok(sum: u64, want: u64, calls: usize) -> Result<(), Error> {
    if sum == want.wrapping_mul(calls as u64) {
        Ok(())
    } else {
        Err(Error::Check("a null system call returned something other than its success value"))
    }
}

fn touch_pages(mem: *mut u8, pages: usize) {
    for i in 0..pages {
        // SAFETY: callers pass a live mapping of at least `pages` pages.
        unsafe { core::ptr::write_volatile(mem.add(i * PAGE), i as u8 | 1) };
    }
}

/// Register-only work for the share-nothing calibration: no loads, no stores, no kernel.
fn xorshift_loop(mut x: u64, iters: u64) -> u64 {
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = core::hint::black_box(x);
    }
    x
}

/// Tornado figure 1 and MOSBENCH's sloppy counter: the same increment on different layouts.
/// Every variant checks afterwards that no update was lost.
fn counters<P: Platform>(p: &P, params: &Params, n: usize) -> Result<Outcome, Error> {
    let spec = params.spec;
    let iters = params.count("iters")? as u64;
    // One 128-byte line pair per possible worker (the adjacent-line prefetcher pairs lines).
    const LINE: usize = 128;
    let bytes = (MAX_CORES + 1) * LINE;
    let bytes = bytes.div_ceil(PAGE) * PAGE;
    let mem = p.map(bytes, MapKind::Private)?;
    let base = mem as usize;
    // SAFETY (for every `at` below): offsets stay inside the `bytes`-long live mapping, are
    // 8-byte aligned, and the memory is only ever accessed atomically.
    let at = |off: usize| -> &AtomicU64 { unsafe { &*((base + off) as *const AtomicU64) } };
    let go = |work: &(dyn Fn(usize, &Gate<'_, P>) -> Result<u64, Error> + Sync)| run_workers(p, spec.placement, spec.shape, n, marks(params), work);
    let (r, total) = match spec.name {
        "counter_shared" => {
            let r = go(&|_, g| {
                g.start();
                for _ in 0..iters {
                    at(0).fetch_add(1, Ordering::Relaxed);
                }
                g.stop();
                Ok(iters)
            });
            (r, at(0).load(Ordering::Relaxed))
        }
        "counter_array" | "counter_padded" => {
            let stride = if spec.name == "counter_array" { 8 } else { LINE };
            let r = go(&|w, g| {
                let c = at(w * stride);
                g.start();
                for _ in 0..iters {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                g.stop();
                Ok(iters)
            });
            (r, (0..n).map(|w| at(w * stride).load(Ordering::Relaxed)).sum())
        }
        "counter_sloppy" => {
            let batch = params.count("batch")? as u64;
            // Line 0 is the central counter; line w+1 is worker w's local count.
            let r = go(&|w, g| {
                let local = at((w + 1) * LINE);
                g.start();
                for _ in 0..iters {
                    if local.fetch_add(1, Ordering::Relaxed) + 1 == batch {
                        local.store(0, Ordering::Relaxed);
                        at(0).fetch_add(batch, Ordering::Relaxed);
                    }
                }
                g.stop();
                // Fold what is left locally into the central count (outside the timing).
                at(0).fetch_add(local.swap(0, Ordering::Relaxed), Ordering::Relaxed);
                Ok(iters)
            });
            (r, at(0).load(Ordering::Relaxed))
        }
        _ => {
            // counter_clustered: the mapping is the translation table (worker -> rep address);
            // each worker maps and first-touches its own rep, so the rep is allocated by, and
            // near, the core that updates it. Every update goes through the table, as a
            // clustered-object call does.
            let r = go(&|w, g| {
                let rep = p.map(PAGE, MapKind::Private)?;
                at(w * 8).store(rep as u64, Ordering::Release);
                g.start();
                for _ in 0..iters {
                    let rep = at(w * 8).load(Ordering::Relaxed) as usize;
                    // SAFETY: the rep page stays mapped until after the sum below.
                    unsafe { &*(rep as *const AtomicU64) }.fetch_add(1, Ordering::Relaxed);
                }
                g.stop();
                Ok(iters)
            });
            let mut sum = 0;
            for w in 0..n {
                let rep = at(w * 8).load(Ordering::Acquire) as usize;
                if rep != 0 {
                    // SAFETY: a non-zero entry is a live rep page mapped by worker `w`.
                    sum += unsafe { &*(rep as *const AtomicU64) }.load(Ordering::Relaxed);
                    p.unmap(rep as *mut u8, PAGE)?;
                }
            }
            (r, sum)
        }
    };
    p.unmap(mem, bytes)?;
    let out = r?;
    if total != iters * n as u64 {
        return Err(Error::Check("counter total differs from workers x iters"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: the null-call loop discarding what the call returned.
    #[test]
    fn null_results_are_checked_after_the_loop() {
        assert!(null_results_ok(0, 0, 1000).is_ok());
        assert!(null_results_ok(1234 * 1000, 1234, 1000).is_ok());
        // One failed call among 1000 (ours returns u64::MAX for an error), or one wrong pid.
        assert!(null_results_ok(u64::MAX, 0, 1000).is_err());
        assert!(null_results_ok(1234 * 999 + 1, 1234, 1000).is_err());
        // Every call failing.
        assert!(null_results_ok(u64::MAX.wrapping_mul(1000), 0, 1000).is_err());
    }
}
