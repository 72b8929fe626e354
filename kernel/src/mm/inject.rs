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
//!
//! When: `inject_from=boot` (the default) arms injection just before init starts, so the
//! program's own start-up meets it; `inject_from=program` waits for the program to call
//! `inject_ctl(INJECT_ARM)`, so a test program (the fuzzer) arms it once its set-up is done and
//! every injected failure lands in the calls it tests.
//!
//! Each injected failure is counted per core and per system call number (the number the core's
//! `PerCpu::injectable` holds while it runs a call), for `inject_ctl(INJECT_COUNTS)`.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use percore::{CachePadded, MAX_CORES};

const OFF: u8 = 0;
const ONE_IN: u8 = 1;
const RANDOM: u8 = 2;

use crate::percpu::NOT_IN_CALL;

static MODE: AtomicU8 = AtomicU8::new(OFF);
/// A configured mode waiting for `arm` (`inject_from=program`), or `OFF`.
static PENDING: AtomicU8 = AtomicU8::new(OFF);
/// The command line configured injection (so `inject_ctl` has something to arm or count).
static CONFIGURED: AtomicBool = AtomicBool::new(false);
/// Only inside system calls (and not while a system call resolves a page fault).
static SYSCALLS_ONLY: AtomicBool = AtomicBool::new(false);
static PARAM: AtomicU64 = AtomicU64::new(0);
static SEED: AtomicU64 = AtomicU64::new(0);
static STATE: [CachePadded<AtomicU64>; MAX_CORES] = [const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES];
/// Injected failures so far (for reports), per core.
static FAILED: [CachePadded<AtomicU64>; MAX_CORES] = [const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES];
/// Injected failures by system call number, over all cores. Shared lines, but written only
/// when a failure is injected (one allocation in N at most), never on the common path.
static BY_CALL: [AtomicU64; abi::INJECT_CALLS as usize] = [const { AtomicU64::new(0) }; abi::INJECT_CALLS as usize];

/// Parse and apply an `inject=` value: armed now if `armed`, else when the program calls
/// `inject_ctl(INJECT_ARM)` (`arm`).
pub fn configure(spec: &str, armed: bool) -> Result<(), &'static str> {
    let rest = spec.strip_prefix("alloc:").ok_or("inject: expected alloc:1/N or alloc:seed:S:P")?;
    if let Some(n) = rest.strip_prefix("1/") {
        let n: u64 = n.parse().map_err(|_| "inject: N in alloc:1/N is not a number")?;
        if n == 0 {
            return Err("inject: N must be at least 1");
        }
        // Syscalls-only before the mode goes on: no window where any allocation can fail.
        SYSCALLS_ONLY.store(true, Ordering::Relaxed);
        for s in STATE.iter() {
            s.store(0, Ordering::Relaxed);
        }
        PARAM.store(n, Ordering::Relaxed);
        CONFIGURED.store(true, Ordering::Relaxed);
        if armed {
            MODE.store(ONE_IN, Ordering::Release);
        } else {
            PENDING.store(ONE_IN, Ordering::Release);
        }
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
    CONFIGURED.store(true, Ordering::Relaxed);
    if armed {
        MODE.store(RANDOM, Ordering::Release);
    } else {
        PENDING.store(RANDOM, Ordering::Release);
    }
    Ok(())
}

/// Start a configured injection that waits for the program (`inject_ctl(INJECT_ARM)`); a
/// no-op if it is already on. `Err` if the command line configured none.
pub fn arm() -> Result<(), abi::Error> {
    if !CONFIGURED.load(Ordering::Acquire) {
        return Err(abi::Error::Unsupported);
    }
    let pending = PENDING.swap(OFF, Ordering::AcqRel);
    if pending != OFF {
        MODE.store(pending, Ordering::Release);
    }
    Ok(())
}

/// Whether the command line configured injection (armed or waiting).
pub fn configured() -> bool {
    CONFIGURED.load(Ordering::Acquire)
}

/// Injected failures inside system call `nr` so far.
pub fn failures_in_call(nr: usize) -> u64 {
    BY_CALL.get(nr).map_or(0, |c| c.load(Ordering::Relaxed))
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
/// A configured injection still waiting for the program is dropped.
pub fn suspend() -> (u8, u64) {
    PENDING.store(OFF, Ordering::Release);
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
    let call = crate::percpu::this().injectable.load(Ordering::Relaxed);
    if SYSCALLS_ONLY.load(Ordering::Relaxed) && call == NOT_IN_CALL {
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
        if let Some(c) = BY_CALL.get(call as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
    fail
}

/// Forget a configuration (for the kernel test below, which configures as the command line
/// would and must leave the boot as it found it).
fn unconfigure() {
    suspend();
    CONFIGURED.store(false, Ordering::Release);
    SYSCALLS_ONLY.store(false, Ordering::Relaxed);
}

mod ktests {
    use core::sync::atomic::Ordering;

    use crate::mm::frame;
    use crate::ktest::{kassert, ktest};

    ktest! {
    fn injection_waits_for_the_program_and_counts_by_call() {
        // Catches: `inject_from=program` injecting before `inject_ctl(INJECT_ARM)`, arming
        // that never starts it, and failures counted against no call or the wrong one.
        let (pages0, live0) = crate::tests::quiescent_counts();
        let me = crate::percpu::this();
        let nr = abi::nr::SHARE_ALLOC as usize;
        let before = super::failures_in_call(nr);
        super::configure("alloc:1/1", false).map_err(|e| alloc::format!("{e}"))?;
        me.injectable.store(nr as u8, Ordering::Relaxed);
        let waiting = frame::alloc_page();
        let armed = super::arm().is_ok();
        let failed = frame::alloc_page();
        // Outside a system call nothing is injected, even when armed.
        me.injectable.store(crate::percpu::NOT_IN_CALL, Ordering::Relaxed);
        let outside = frame::alloc_page();
        let counted = super::failures_in_call(nr) - before;
        super::unconfigure();
        let (w, f, o) = (waiting.is_some(), failed.is_none(), outside.is_some());
        for p in [waiting, failed, outside].into_iter().flatten() {
            frame::free_page(p);
        }
        kassert!(w, "an allocation failed before the program armed injection");
        kassert!(armed && f, "arming did not start injection (arm ok: {armed})");
        kassert!(o, "an allocation outside a system call failed");
        kassert!(counted == 1, "{counted} failures counted against share_alloc, expected 1");
        kassert!(super::arm() == Err(abi::Error::Unsupported), "arm without a configuration did not say Unsupported");
        let (pages1, live1) = crate::tests::quiescent_counts();
        kassert!(pages1 == pages0 && live1 == live0, "counts moved: pages {pages0}->{pages1}, live {live0}->{live1}");
        Ok(())
    }
    }
}
