//! Allocation fault injection (`inject=` on the command line): make page and slab
//! allocations fail so every failure path can be exercised. Off by default; when on, each
//! core keeps its own counter or random state, so injection adds no shared cache line.
//!
//! - `inject=alloc:1/N`: every N-th allocation on each core fails.
//! - `inject=alloc:seed:S:P`: each allocation fails with probability P percent, from a
//!   per-core generator seeded with S (reproducible for the same seed and schedule).
//!
//! From the command line, injection applies to allocations made by system calls only, which
//! must then return `NoMemory` and free what they took. Page faults are left alone: a fault
//! cannot return an error, so failing one only kills the program, which tests nothing.
//! Kernel tests (`set_fail_one_in`) inject everywhere.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use percore::{CachePadded, MAX_CORES};

const OFF: u8 = 0;
const ONE_IN: u8 = 1;
const RANDOM: u8 = 2;

static MODE: AtomicU8 = AtomicU8::new(OFF);
/// Only inside system calls (and not while a system call resolves a page fault).
static SYSCALLS_ONLY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
static PARAM: AtomicU64 = AtomicU64::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static STATE: [CachePadded<AtomicU64>; MAX_CORES] = [const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES];
/// Injected failures so far (for reports), per core.
static FAILED: [CachePadded<AtomicU64>; MAX_CORES] = [const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES];

/// Parse and apply an `inject=` value.
pub fn configure(spec: &str) -> Result<(), &'static str> {
    let rest = spec.strip_prefix("alloc:").ok_or("inject: expected alloc:1/N or alloc:seed:S:P")?;
    if let Some(n) = rest.strip_prefix("1/") {
        let n: u64 = n.parse().map_err(|_| "inject: N in alloc:1/N is not a number")?;
        if n == 0 {
            return Err("inject: N must be at least 1");
        }
        set_fail_one_in(n);
        SYSCALLS_ONLY.store(true, Ordering::Relaxed);
        return Ok(());
    }
    let mut parts = rest.strip_prefix("seed:").ok_or("inject: expected alloc:1/N or alloc:seed:S:P")?.split(':');
    let seed: u64 = parts.next().and_then(|s| s.parse().ok()).ok_or("inject: S in alloc:seed:S:P is not a number")?;
    let p: u64 = parts.next().and_then(|s| s.parse().ok()).ok_or("inject: P in alloc:seed:S:P is not a number")?;
    if p > 100 || parts.next().is_some() {
        return Err("inject: P is a percentage, 0..=100");
    }
    SEED.store(seed, Ordering::Relaxed);
    for (i, s) in STATE.iter().enumerate() {
        s.store(seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(i as u64 + 1)) | 1, Ordering::Relaxed);
    }
    PARAM.store(p, Ordering::Relaxed);
    SYSCALLS_ONLY.store(true, Ordering::Relaxed);
    MODE.store(RANDOM, Ordering::Release);
    Ok(())
}

/// Fail every `n`-th allocation on each core (0 turns injection off).
pub fn set_fail_one_in(n: u64) {
    SYSCALLS_ONLY.store(false, Ordering::Relaxed);
    for s in STATE.iter() {
        s.store(0, Ordering::Relaxed);
    }
    PARAM.store(n, Ordering::Relaxed);
    MODE.store(if n == 0 { OFF } else { ONE_IN }, Ordering::Release);
}

/// Turn injection off (before leak checks) and return what was on, for `restore`.
pub fn suspend() -> (u8, u64) {
    (MODE.swap(OFF, Ordering::AcqRel), PARAM.load(Ordering::Relaxed))
}

pub fn restore(saved: (u8, u64)) {
    PARAM.store(saved.1, Ordering::Relaxed);
    MODE.store(saved.0, Ordering::Release);
}

pub fn enabled() -> bool {
    MODE.load(Ordering::Relaxed) != OFF
}

pub fn failures() -> u64 {
    FAILED.iter().map(|f| f.load(Ordering::Relaxed)).sum()
}

/// Should this allocation fail? Cheap when off (one relaxed load).
#[inline]
pub fn should_fail() -> bool {
    let mode = MODE.load(Ordering::Relaxed);
    if mode == OFF {
        return false;
    }
    if SYSCALLS_ONLY.load(Ordering::Relaxed) && !crate::percpu::this().injectable.load(Ordering::Relaxed) {
        return false;
    }
    let me = percore::cpu_id();
    let st = &STATE[me];
    let fail = match mode {
        ONE_IN => {
            let n = PARAM.load(Ordering::Relaxed);
            let c = st.fetch_add(1, Ordering::Relaxed) + 1;
            n != 0 && c % n == 0
        }
        _ => {
            let mut x = st.load(Ordering::Relaxed);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            st.store(x, Ordering::Relaxed);
            x % 100 < PARAM.load(Ordering::Relaxed)
        }
    };
    if fail {
        FAILED[me].fetch_add(1, Ordering::Relaxed);
    }
    fail
}
