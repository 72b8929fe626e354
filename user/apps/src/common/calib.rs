//! The share-nothing calibration of docs/bench.md for the network servers (tcpserv, webd):
//! every participating core runs the register-only xorshift loop at once, `STEPS` steps, best
//! of 3 rounds; each core's start and end on its own line. The servers print `calib_ops` and
//! `calib_ns` on their `done` line, and the host divides per-core rates by it.

use core::sync::atomic::{AtomicU64, Ordering};
use libos::thread::Barrier;
use percore::pad::CachePadded;

pub const STEPS: u64 = 4_000_000;
const MAX: usize = 64;

pub struct Calibration {
    t: [CachePadded<(AtomicU64, AtomicU64)>; MAX],
    best_ns: AtomicU64,
}

impl Calibration {
    pub const fn new() -> Self {
        Calibration { t: [const { CachePadded::new((AtomicU64::new(0), AtomicU64::new(0))) }; MAX], best_ns: AtomicU64::new(0) }
    }

    /// Run on each of the `n` participants (index `me`), all meeting at `barrier` (made for
    /// `n`). The last one through each round records the round's span.
    pub fn run(&self, barrier: &Barrier, me: usize, n: usize) {
        let n = n.min(MAX);
        for _ in 0..3 {
            barrier.wait();
            let t0 = libos::time::now_ns();
            let mut x = me as u64 + 1;
            for _ in 0..STEPS {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x = core::hint::black_box(x);
            }
            let t1 = libos::time::now_ns();
            if me < MAX {
                self.t[me].0.store(t0, Ordering::Relaxed);
                self.t[me].1.store(t1 | (x & 0), Ordering::Relaxed);
            }
            if barrier.wait() {
                let start = (0..n).map(|c| self.t[c].0.load(Ordering::Relaxed)).min().unwrap_or(0);
                let end = (0..n).map(|c| self.t[c].1.load(Ordering::Relaxed)).max().unwrap_or(0);
                let ns = end.saturating_sub(start);
                let best = self.best_ns.load(Ordering::Relaxed);
                if best == 0 || ns < best {
                    self.best_ns.store(ns, Ordering::Relaxed);
                }
            }
        }
    }

    /// The best round's span in ns (0 if it never ran).
    pub fn best_ns(&self) -> u64 {
        self.best_ns.load(Ordering::Relaxed)
    }
}
