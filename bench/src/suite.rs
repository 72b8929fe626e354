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
        name if crate::catalog::uses_files(name) => files(p, params, n),
        "selftest_hang" => go(&|_, gate| {
            gate.start();
            loop {
                core::hint::spin_loop();
            }
        }),
        _ => Err(Error::Unsupported("benchmark listed in the catalog but not in the suite")),
    }
}

/// A path in the benchmark tree, built without allocating: `prefix`, then `w` in decimal if
/// given, then `suffix`.
struct TreePath {
    buf: [u8; 64],
    len: usize,
}

impl TreePath {
    fn new(prefix: &str, w: Option<usize>, suffix: &str) -> TreePath {
        let mut t = TreePath { buf: [0; 64], len: 0 };
        t.push(prefix.as_bytes());
        if let Some(mut w) = w {
            let mut digits = [0u8; 20];
            let mut k = digits.len();
            loop {
                k -= 1;
                digits[k] = b'0' + (w % 10) as u8;
                w /= 10;
                if w == 0 {
                    break;
                }
            }
            t.push(&digits[k..]);
        }
        t.push(suffix.as_bytes());
        t
    }
    fn push(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
    /// `self` with `w` in decimal appended.
    fn with_worker(mut self, w: usize) -> TreePath {
        let t = TreePath::new("", Some(w), "");
        let (b, n) = (t.buf, t.len);
        self.push(&b[..n]);
        self
    }
    fn as_str(&self) -> &str {
        // Built from `&str` pieces and ASCII digits, cut only if over 64 bytes (the tree's
        // paths are far shorter), so always UTF-8.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

/// `iters` calls of `size_of` (a `stat` or `fstat` of a file of `size` bytes) between the
/// gate's marks; their sizes are summed, and a sum other than `size * iters` is the error
/// `wrong`. Inlined, so the timed loop is the one written out.
#[inline(always)]
fn timed_sizes<P: Platform>(gate: &Gate<'_, P>, iters: usize, size: u64, wrong: &'static str, size_of: impl Fn() -> Result<u64, Error>) -> Result<u64, Error> {
    gate.start();
    let mut sum = 0u64;
    for _ in 0..iters {
        sum = sum.wrapping_add(size_of()?);
    }
    gate.stop();
    if sum != size * iters as u64 {
        return Err(Error::Check(wrong));
    }
    Ok(iters as u64)
}

/// The file-system rows (docs/fs.md) over the tree of catalog `FS_*`. Every read is checked
/// against the tree's known bytes and every `stat`/`fstat` against its size.
fn files<P: Platform>(p: &P, params: &Params, n: usize) -> Result<Outcome, Error> {
    use crate::catalog::{fs_file_byte, FS_FILE_BYTES, FS_MAX_WORKERS, FS_PRIVATE_DIR, FS_SHARED_DIR, FS_SHARED_FILE};
    let spec = params.spec;
    let iters = params.count("iters")?;
    if n > FS_MAX_WORKERS {
        return Err(Error::Param("more workers than the benchmark tree has directories (64)"));
    }
    p.fs_prepare()?;
    let size = FS_FILE_BYTES as u64;
    let own = |w: usize| TreePath::new(FS_PRIVATE_DIR, Some(w), "/f");
    let go = |work: &(dyn Fn(usize, &Gate<'_, P>) -> Result<u64, Error> + Sync)| run_workers(p, spec.placement, spec.shape, n, marks(params), work);
    match spec.name {
        "fs_stat_same" => go(&|_, gate| {
            // Once before the clock: the first lookup of a name may fill a cache.
            if p.fs_stat(FS_SHARED_FILE)? != size {
                return Err(Error::Check("stat gave a wrong size"));
            }
            timed_sizes(gate, iters, size, "stat gave a wrong size", || p.fs_stat(FS_SHARED_FILE))
        }),
        "fs_open_same" | "fs_open_private" => go(&|w, gate| {
            let mine = own(w);
            let path = if spec.name == "fs_open_same" { FS_SHARED_FILE } else { mine.as_str() };
            let once = || -> Result<u8, Error> {
                let fd = p.fs_open(path)?;
                let mut b = [0u8; 1];
                let r = p.fs_read(fd, &mut b);
                p.fs_close(fd)?;
                if r? != 1 {
                    return Err(Error::Check("read of 1 byte gave another count"));
                }
                Ok(b[0])
            };
            once()?;
            gate.start();
            let mut sum = 0u64;
            for _ in 0..iters {
                sum += once()? as u64;
            }
            gate.stop();
            if sum != fs_file_byte(0) as u64 * iters as u64 {
                return Err(Error::Check("read gave a wrong byte"));
            }
            Ok(iters as u64)
        }),
        "fs_openclose_same" => go(&|_, gate| {
            p.fs_close(p.fs_open(FS_SHARED_FILE)?)?;
            gate.start();
            for _ in 0..iters {
                let fd = p.fs_open(FS_SHARED_FILE)?;
                p.fs_close(fd)?;
            }
            gate.stop();
            Ok(iters as u64)
        }),
        "fs_create_private" | "fs_create_shared" => go(&|w, gate| {
            let name = if spec.name == "fs_create_private" { TreePath::new(FS_PRIVATE_DIR, Some(w), "/new") } else { TreePath::new(FS_SHARED_DIR, None, "/new").with_worker(w) };
            let path = name.as_str();
            gate.start();
            for _ in 0..iters {
                let fd = p.fs_create(path)?;
                p.fs_close(fd)?;
                p.fs_unlink(path)?;
            }
            gate.stop();
            Ok(iters as u64)
        }),
        "fs_read_cached" => go(&|w, gate| {
            let fd = p.fs_open(own(w).as_str())?;
            let mut buf = alloc::vec![0u8; FS_FILE_BYTES];
            let r = (|| {
                // Once before the clock, so every block is in the cache.
                p.fs_pread(fd, &mut buf, 0)?;
                gate.start();
                let mut total = 0usize;
                for _ in 0..iters {
                    total += p.fs_pread(fd, &mut buf, 0)?;
                }
                gate.stop();
                if total != FS_FILE_BYTES * iters || buf.iter().enumerate().any(|(i, &b)| b != fs_file_byte(i)) {
                    return Err(Error::Check("pread gave wrong bytes or a short count"));
                }
                Ok(iters as u64)
            })();
            p.fs_close(fd)?;
            r
        }),
        _ => go(&|w, gate| {
            // fstat_shared / fstat_private: the worker's own descriptor of one shared file or of
            // its own file.
            let mine = own(w);
            let path = if spec.name == "fstat_shared" { FS_SHARED_FILE } else { mine.as_str() };
            let fd = p.fs_open(path)?;
            let r = (|| {
                p.fs_fstat(fd)?;
                timed_sizes(gate, iters, size, "fstat gave a wrong size", || p.fs_fstat(fd))
            })();
            p.fs_close(fd)?;
            r
        }),
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

    /// Catches: a worker's path in the file rows built wrong (digits reversed, a worker's
    /// number lost, a name past 64 bytes not cut but overflowing).
    #[test]
    fn tree_paths_are_built_without_allocating() {
        assert_eq!(TreePath::new("/bench/c", Some(0), "/f").as_str(), "/bench/c0/f");
        assert_eq!(TreePath::new("/bench/c", Some(63), "/new").as_str(), "/bench/c63/new");
        assert_eq!(TreePath::new("/bench/shared", None, "/new").with_worker(120).as_str(), "/bench/shared/new120");
        assert_eq!(TreePath::new(&"x".repeat(70), Some(1), "").as_str().len(), 64);
    }

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
