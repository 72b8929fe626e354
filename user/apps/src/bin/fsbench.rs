//! fsbench: first measurements of the file system in the library OS (docs/fs.md), on this
//! system only (the suite's rows beside Linux on the same image are not built yet). On a disk
//! made by `cargo xtask fs fstest-image` (any image with `/sub/inner.txt` and `/direct.bin`
//! works):
//!
//! - `stat_same`: every core `stat`s the same path: the lock-free name cache (`fs::names`);
//! - `stat_walk`: the same through the locked walk (`fs::stat_walk`), for comparison;
//! - `read_cached`: `pread` of 32 KiB of a file already in the buffer cache (under the lock).
//!
//! Each runs on 1 core, then on 2 cores at once (a thread on core 1); the line gives ns/op on
//! core 0 and the 2-core/1-core throughput ratio (raw, not calibrated: under TCG it is a hint,
//! not a scalability claim; DESIGN.md "Measurement").
//!
//! Usage: `fsbench -- [iters=N]` (default 20000).
#![no_std]
#![no_main]

extern crate alloc;

use core::sync::atomic::{AtomicU64, Ordering};
use libos::fs;
use libos::println;
use libos::thread::Barrier;

libos::main!(main);

static ITERS: AtomicU64 = AtomicU64::new(20_000);
static WHICH: AtomicU64 = AtomicU64::new(0);
static START: Barrier = Barrier::new(2);

fn op(which: u64) -> bool {
    match which {
        0 => fs::stat("/sub/inner.txt").is_ok_and(|s| s.size == 6),
        1 => fs::stat_walk("/sub/inner.txt").is_ok_and(|s| s.size == 6),
        _ => {
            let mut buf = [0u8; 32 * 1024];
            FD.with(|fd| fs::pread(fd, &mut buf, 0).is_ok_and(|n| n == buf.len()))
        }
    }
}

/// The descriptor `read_cached` uses (opened once by the main context).
struct FdCell(AtomicU64);
impl FdCell {
    fn with<R>(&self, f: impl FnOnce(fs::Fd) -> R) -> R {
        f(fs::Fd(self.0.load(Ordering::Relaxed) as u32))
    }
}
static FD: FdCell = FdCell(AtomicU64::new(0));

/// Run `ITERS` ops; returns elapsed ns (u64::MAX on a wrong answer).
fn run(together: u64) -> u64 {
    let which = WHICH.load(Ordering::Acquire);
    let n = ITERS.load(Ordering::Relaxed);
    if together != 0 {
        START.wait();
    }
    let t0 = libos::time::now_ns();
    for _ in 0..n {
        if !op(which) {
            return u64::MAX;
        }
    }
    libos::time::now_ns() - t0
}

fn main(args: &'static str) -> u64 {
    for w in args.split_whitespace() {
        if let Some(v) = w.strip_prefix("iters=").and_then(libos::parse_u64) {
            ITERS.store(v.max(1), Ordering::Relaxed);
        }
    }
    if let Err(e) = fs::mount() {
        println!("fsbench: mount: {e:?} (boot with --disk IMG)");
        return 1;
    }
    match fs::open("/direct.bin", fs::O_RDONLY) {
        Ok(fd) => FD.0.store(fd.0 as u64, Ordering::Relaxed),
        Err(e) => {
            println!("fsbench: /direct.bin: {e:?}");
            return 1;
        }
    }
    let n = ITERS.load(Ordering::Relaxed);
    let cores = libos::sys::sys_info().map(|s| s.cores).unwrap_or(1);
    for (which, name) in [(0u64, "stat_same"), (1, "stat_walk"), (2, "read_cached")] {
        WHICH.store(which, Ordering::Release);
        op(which); // warm: fill the name cache and the buffer cache
        let one = run(0);
        if one == u64::MAX {
            println!("fsbench: {name}: wrong answer");
            return 1;
        }
        let ns1 = one / n;
        if cores < 2 {
            println!("fsbench: {name} 1 core {ns1} ns/op");
            continue;
        }
        let t = match libos::thread::spawn(1, run, 1) {
            Ok(t) => t,
            Err(e) => {
                println!("fsbench: thread: {e:?}");
                return 1;
            }
        };
        let here = run(1);
        let there = t.join().unwrap_or(u64::MAX);
        if here == u64::MAX || there == u64::MAX {
            println!("fsbench: {name}: wrong answer on 2 cores");
            return 1;
        }
        // Throughput with 2 cores over throughput with 1: 2n ops in max(here, there).
        let ratio_x100 = 2 * one * 100 / here.max(there).max(1);
        println!("fsbench: {name} 1 core {ns1} ns/op; 2 cores {} ns/op each; throughput 2/1 = {}.{:02}", here.max(there) / n, ratio_x100 / 100, ratio_x100 % 100);
    }
    let _ = FD.with(fs::close);
    let (c, d) = fs::cache_stats().unwrap_or_default();
    println!("fsbench: buffer cache {} hits {} misses; disk {} reads", c.hits, c.misses, d.packets_in);
    println!("fsbench: done");
    0
}
