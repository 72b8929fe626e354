//! TC time-sharing (docs/roles.md): several contexts on one TC core make progress together, a
//! halted queued context is removed and gives its memory back, contexts ending in any order
//! (or by a fault) leave nothing behind, the core counts its switches, and bad input gets its
//! documented error. Prints `utest NAME ... ok|FAILED|skipped` lines like utest.
//!
//! The tests follow the roles in effect (`core_stats(c).role`, what the shell's `cores`
//! command shows), not fixed core numbers: the time-shared core is the lowest TC other than
//! ours, and `tc_thread_on_own_tc` runs only when our own core is a TC too. `cargo xtask
//! test` boots `roles=tc:0-1` on 3 vCPUs (all seven run) and `roles=tc:2` on 3 vCPUs (all but
//! the own-core case), and fails a skip the placement should have prevented.
//!
//! The contexts share one page (`SCRATCH_BASE` in every root range, ours included): counters
//! and flags. A context on the TC cannot see another one run except through that page, and
//! on one core the others only run when it is switched out, so a change it observes in
//! another's counter is a switch away and back.
#![no_std]
#![no_main]

use abi::{PcoreStat, EXIT_FAULT_BASE, ROLE_KC, ROLE_TC, TC_MAX_QUEUED};
use core::sync::atomic::{AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::{println, sys};

libos::main!(main);

#[path = "../common/testkit.rs"]
#[macro_use]
mod testkit;
use testkit::*;

/// The time-shared core the tests use: the lowest TC other than ours, found by `main` from
/// the roles in effect; `NO_TC` if there is none.
static TC_CORE: AtomicU64 = AtomicU64::new(NO_TC);
const NO_TC: u64 = u64::MAX;

fn tc() -> u64 {
    TC_CORE.load(Ordering::Relaxed)
}
/// Words of the shared page.
const COUNT: usize = 0; // COUNT + i: context i's progress counter (up to 32 contexts)
const DONE: usize = 32; // DONE + i: context i has seen every other one progress
const STOP: usize = 64; // spinners return when this is non-zero
const MARK: usize = 65; // MARK + i: context i has run at all
const EXITS: usize = 100; // how many contexts have ended (exit-order test)
const ORDER: usize = 101; // ORDER + i: context i's place in the exit order
const GO: usize = 120; // exit-order contexts start counting when this is non-zero
const ALIVE: usize = 121; // exit-order contexts not yet ended
/// Exit-order place meaning "fault instead".
const FAULT: u64 = 0xFF;
/// Changes of every other context's counter each context must see.
const ROUNDS: u64 = 5;
/// How long a context keeps trying before it reports failure (generous: TCG on a loaded
/// host; the test does not depend on it being short).
const CHILD_DEADLINE_MS: u64 = 240_000;
const JOIN_MS: u64 = 300_000;


/// On the TC: count, and watch the other `n - 1` contexts' counters; done when each has
/// changed `ROUNDS` times and every context says so. Exit code 0, or 1000 + the fewest
/// changes seen if the deadline passed.
fn progress(c: &CoreCtx) -> u64 {
    let sh = shared();
    let (me, n) = ((c.arg & 0xFF) as usize, (c.arg >> 8) as usize);
    sh[MARK + me].store(1, Ordering::Release);
    let mut last = [0u64; 32];
    let mut seen = [0u64; 32];
    for j in 0..n {
        last[j] = sh[COUNT + j].load(Ordering::Acquire);
    }
    let end = libos::time::ticks() + CHILD_DEADLINE_MS * libos::time::tsc_per_ms();
    loop {
        sh[COUNT + me].fetch_add(1, Ordering::AcqRel);
        for j in (0..n).filter(|&j| j != me) {
            let v = sh[COUNT + j].load(Ordering::Acquire);
            if v != last[j] {
                seen[j] += 1;
                last[j] = v;
            }
        }
        if (0..n).all(|j| j == me || seen[j] >= ROUNDS) {
            sh[DONE + me].store(1, Ordering::Release);
        }
        if (0..n).all(|j| sh[DONE + j].load(Ordering::Acquire) == 1) {
            return 0;
        }
        if libos::time::ticks() > end {
            return 1000 + (0..n).filter(|&j| j != me).map(|j| seen[j]).min().unwrap_or(0);
        }
    }
}

/// On the TC: mark that we ran, count until `STOP`; exit code 0.
fn spinner(c: &CoreCtx) -> u64 {
    let sh = shared();
    let me = c.arg as usize;
    sh[MARK + me].store(1, Ordering::Release);
    while sh[STOP].load(Ordering::Acquire) == 0 {
        sh[COUNT + me].fetch_add(1, Ordering::AcqRel);
    }
    0
}

/// On the TC, once `GO` is set: count until it is our turn to end (`EXITS` equals our
/// place, arg >> 8) and we have been switched out and back at least once since `GO` (a change
/// in another context's counter since our last look), or we are the last one alive; then end
/// with 10 + index. With place `FAULT`, fault at once instead.
fn counter(c: &CoreCtx) -> u64 {
    let sh = shared();
    let (me, place) = ((c.arg & 0xFF) as usize, c.arg >> 8);
    sh[MARK + me].store(1, Ordering::Release);
    if place == FAULT {
        // A write to an unmapped page: the kernel ends this context with a fault code.
        // SAFETY: deliberately invalid; the fault ends the context, nothing is corrupted.
        unsafe { core::ptr::write_volatile(0x1000 as *mut u64, 1) };
    }
    while sh[GO].load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let snapshot = || -> [u64; 8] { core::array::from_fn(|j| if j == me { 0 } else { sh[COUNT + j].load(Ordering::Acquire) }) };
    let mut last = snapshot();
    let mut resumed = false;
    loop {
        sh[COUNT + me].fetch_add(1, Ordering::AcqRel);
        let now = snapshot();
        if now != last {
            resumed = true;
            last = now;
        }
        let alone = sh[ALIVE].load(Ordering::Acquire) == 1;
        if sh[EXITS].load(Ordering::Acquire) == place && (resumed || alone) {
            break;
        }
    }
    sh[ORDER + me].store(sh[EXITS].load(Ordering::Acquire), Ordering::Release);
    sh[ALIVE].fetch_sub(1, Ordering::AcqRel);
    sh[EXITS].fetch_add(1, Ordering::AcqRel);
    10 + me as u64
}

/// Yields in one `yield_pair` context.
const YIELDS: u64 = 200;

/// On the TC, with a 1 Hz tick: count, `pcore_yield`, and see whether the other context
/// counted meanwhile, `YIELDS` times; exit code = how many times it had + 1000 * the
/// nanoseconds per switch (two switches per yield that found the other one queued).
fn yielder(c: &CoreCtx) -> u64 {
    let sh = shared();
    let me = c.arg as usize;
    let other = 1 - me;
    sh[MARK + me].store(1, Ordering::Release);
    while sh[MARK + other].load(Ordering::Acquire) == 0 {
        let _ = raw(abi::nr::PCORE_YIELD, [0; 6]);
    }
    let mut progressed = 0;
    let t0 = libos::time::now_ns();
    for _ in 0..YIELDS {
        sh[COUNT + me].fetch_add(1, Ordering::AcqRel);
        let before = sh[COUNT + other].load(Ordering::Acquire);
        let _ = raw(abi::nr::PCORE_YIELD, [0; 6]);
        if sh[COUNT + other].load(Ordering::Acquire) != before {
            progressed += 1;
        }
    }
    let per_switch = (libos::time::now_ns() - t0) / (2 * YIELDS);
    // Keep yielding until the other one is done too, so its last yields find us queued.
    sh[DONE + me].store(1, Ordering::Release);
    while sh[DONE + other].load(Ordering::Acquire) == 0 {
        sh[COUNT + me].fetch_add(1, Ordering::AcqRel);
        let _ = raw(abi::nr::PCORE_YIELD, [0; 6]);
    }
    progressed + 1000 * per_switch
}

fn switches() -> u64 {
    sys::core_stats(tc()).map(|s| s.context_switches).unwrap_or(0)
}

fn stat(c: &Core) -> PcoreStat {
    sys::pcore_stat(c.pcore).unwrap_or_default()
}

/// Whether the placement has a TC other than our core (and it still is one).
fn is_tc() -> bool {
    tc() != NO_TC && sys::core_stats(tc()).map(|s| s.role) == Ok(ROLE_TC)
}

/// The lowest core other than ours whose role is TC, from the roles in effect.
fn find_tc() -> u64 {
    let me = libos::core_id();
    (0..cores()).find(|&c| c != me && role_of(c) == ROLE_TC).unwrap_or(NO_TC)
}

/// Why a test that needs a TC other than ours skips.
const NEEDS_TC: &str = "needs a TC core other than the test's own";

fn t_three_progress() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    let page = SharedPage::new("tc-shared")?;
    let sw0 = switches();
    let ticks0 = sys::core_stats(tc()).map(|s| s.timer_ticks).unwrap_or(0);
    let mut cs = [page.core(tc())?, page.core(tc())?, page.core(tc())?];
    for (i, c) in cs.iter_mut().enumerate() {
        // A second, third context on a TC is queued, not refused (`Busy` before).
        ok!(c.start(progress, i as u64 | (3 << 8)));
    }
    for (i, c) in cs.iter_mut().enumerate() {
        let code = ok!(c.join(JOIN_MS));
        ensure!(code == 0, "context {i} ended with {code} (1000 + fewest changes of another's counter it saw)");
    }
    let sw = switches() - sw0;
    let ticks = sys::core_stats(tc()).map(|s| s.timer_ticks).unwrap_or(0) - ticks0;
    // Each context saw each other one run ROUNDS times while it was switched out.
    ensure!(sw >= 2 * ROUNDS, "only {sw} context switches on TC {}", tc());
    ensure!(ticks > 0, "TC {} took no timer ticks", tc());
    println!("tctest: 3 contexts on TC {}, each saw the others progress {ROUNDS} times: {sw} switches, {ticks} ticks", tc());
    Ok(Pass::Ok)
}

/// Free pages and live kernel objects, once frees deferred to a quiescent point are done.
fn settled(want: (u64, u64)) -> (u64, u64) {
    let now = || sys::sys_info().map(|s| (s.free_pages, s.live_kobjects)).unwrap_or((0, 0));
    let mut last = now();
    libos::time::wait_until(2000, || {
        last = now();
        last == want
    });
    last
}

/// Run `f`; what it took must come back (a second run must give everything back if the
/// first warmed a kernel cache).
fn no_leak(f: fn() -> TestResult) -> TestResult {
    let now = || sys::sys_info().map(|s| (s.free_pages, s.live_kobjects)).unwrap_or((0, 0));
    let before = now();
    let r = f()?;
    let after = settled(before);
    if after == before {
        return Ok(r);
    }
    println!("tctest: first run: free pages, kernel objects {before:?} -> {after:?}; running again");
    let before2 = now();
    f()?;
    let after2 = settled(before2);
    ensure!(after2 == before2, "free pages, kernel objects {before2:?} -> {after2:?} on a second run");
    Ok(r)
}

fn halt_queued() -> TestResult {
    let page = SharedPage::new("tc-shared")?;
    let sh = shared();
    let mut a = page.core(tc())?;
    let mut b = page.core(tc())?;
    // C is queued beside B and must not be halted with it (catches a halt that ends every
    // queued context: mutant `tc_halt_halts_every_queued`).
    let mut c = page.core(tc())?;
    // A runs with one tick a second, so B and C stay queued behind it for a while.
    ok!(sys::pcore_set_interval(a.pcore, 1));
    ok!(a.start(spinner, 0));
    ensure!(libos::time::wait_until(JOIN_MS, || sh[MARK].load(Ordering::Acquire) == 1), "A never ran");
    ok!(b.start(spinner, 1));
    ok!(c.start(spinner, 2));
    let queued = stat(&b).runs == 0;
    // One context per pcore object: running B's pcore again while it is queued is refused.
    let ctx = b.context(spinner, 1);
    err!(sys::pcore_run(b.pcore, &ctx), abi::Error::Busy);
    ok!(sys::pcore_halt(b.pcore, 77));
    let st = ok!(b.wait(JOIN_MS));
    ensure!(st.exit_code == 77, "B ended with {}, want 77", st.exit_code);
    ensure!(st.runs == 1, "B's pcore counts {} runs, want 1", st.runs);
    if queued {
        ensure!(sh[MARK + 1].load(Ordering::Acquire) == 0, "B ran although it was halted while queued");
    }
    sh[STOP].store(1, Ordering::Release);
    let code = ok!(a.join(JOIN_MS));
    ensure!(code == 0, "A ended with {code}");
    let code = ok!(c.join(JOIN_MS));
    ensure!(code == 0, "C, queued beside the halted B, ended with {code}, want 0 (halted with B?)");
    if !queued {
        println!("tctest: note: B had started before the halt (a tick came early)");
    }
    Ok(Pass::Ok)
}

fn t_halt_queued() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    no_leak(halt_queued)
}

/// Four contexts end in a given order (one by a fault at once), each after being switched
/// out and back, so the one that ends is at the head, the middle or the tail of the run queue;
/// twice, with different orders.
fn exit_orders() -> TestResult {
    let cases: [[u64; 4]; 2] = [[2, 0, 1, FAULT], [0, 2, FAULT, 1]];
    for places in cases {
        let page = SharedPage::new("tc-shared")?;
        let sh = shared();
        sh[ALIVE].store(places.iter().filter(|&&p| p != FAULT).count() as u64, Ordering::Release);
        let mut cs = [page.core(tc())?, page.core(tc())?, page.core(tc())?, page.core(tc())?];
        for (i, c) in cs.iter_mut().enumerate() {
            ok!(c.start(counter, i as u64 | (places[i] << 8)));
        }
        sh[GO].store(1, Ordering::Release);
        for (i, c) in cs.iter_mut().enumerate() {
            let code = ok!(c.join(JOIN_MS));
            let want = if places[i] == FAULT { EXIT_FAULT_BASE + 14 } else { 10 + i as u64 };
            ensure!(code == want, "context {i} ended with {code:#x}, want {want:#x}");
            if places[i] != FAULT {
                let got = sh[ORDER + i].load(Ordering::Acquire);
                ensure!(got == places[i], "context {i} ended in place {got}, want {}", places[i]);
            }
        }
    }
    Ok(Pass::Ok)
}

fn t_exit_any_order() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    no_leak(exit_orders)
}

fn t_yield() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    let page = SharedPage::new("tc-shared")?;
    let mut cs = [page.core(tc())?, page.core(tc())?];
    for (i, c) in cs.iter_mut().enumerate() {
        // One tick a second: nearly every switch must come from pcore_yield.
        ok!(sys::pcore_set_interval(c.pcore, 1));
        ok!(c.start(yielder, i as u64));
    }
    let (mut seen, mut ns) = ([0u64; 2], [0u64; 2]);
    for (i, c) in cs.iter_mut().enumerate() {
        let code = ok!(c.join(JOIN_MS));
        (seen[i], ns[i]) = (code % 1000, code / 1000);
        ensure!(seen[i] >= YIELDS / 2, "context {i}: the other one ran during only {} of {YIELDS} yields", seen[i]);
    }
    // The cost of a null system call on this core, in the same run, for scale.
    let n0 = libos::time::now_ns();
    for _ in 0..1000 {
        let _ = sys::null();
    }
    let null_ns = ((libos::time::now_ns() - n0) / 1000).max(1);
    println!(
        "tctest: pcore_yield ping-pong (TCG, emulated wall clock): the other ran in {}+{} of {} yields; {} and {} ns per switch; null call {null_ns} ns; switch/null ratio {}",
        seen[0],
        seen[1],
        2 * YIELDS,
        ns[0],
        ns[1],
        ns[0].min(ns[1]) / null_ns
    );
    // Anywhere but on a TC with something queued, pcore_yield does nothing.
    ok!(raw(abi::nr::PCORE_YIELD, [0; 6]));
    Ok(Pass::Ok)
}

fn t_queue_full() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    let page = SharedPage::new("tc-shared")?;
    let sh = shared();
    // One running plus TC_MAX_QUEUED queued: the next one is refused.
    let mut cs: [Option<Core>; TC_MAX_QUEUED + 2] = [const { None }; TC_MAX_QUEUED + 2];
    for (i, slot) in cs.iter_mut().enumerate() {
        *slot = Some(page.core(tc())?);
        let c = slot.as_mut().ok_or_else(|| Msg::new(format_args!("no core")))?;
        let r = c.start(spinner, i as u64);
        if i <= TC_MAX_QUEUED {
            ok!(r);
        } else {
            err!(r, abi::Error::Busy);
            *slot = None;
        }
    }
    // All of them share the core: every one runs.
    let all_ran = libos::time::wait_until(JOIN_MS, || (0..=TC_MAX_QUEUED).all(|i| sh[MARK + i].load(Ordering::Acquire) == 1));
    sh[STOP].store(1, Ordering::Release);
    for (i, c) in cs.iter_mut().enumerate().filter_map(|(i, c)| Some((i, c.as_mut()?))) {
        let code = ok!(c.join(JOIN_MS));
        ensure!(code == 0, "spinner {i} ended with {code}");
    }
    ensure!(all_ran, "not every one of {} contexts ran", TC_MAX_QUEUED + 1);
    Ok(Pass::Ok)
}

fn role_of(core: u64) -> u64 {
    sys::core_stats(core).map(|s| s.role).unwrap_or(u64::MAX)
}

fn triple(x: u64) -> u64 {
    3 * x + 1
}

/// Threads created and joined on our own core (a TC: the thread is queued behind us and
/// runs when the join yields), then the same on the other TC, side by side.
fn t_thread_on_own_tc() -> TestResult {
    let me = libos::core_id();
    if role_of(me) != ROLE_TC || !is_tc() {
        return Ok(Pass::Skipped("needs the test's own core and another to be TCs"));
    }
    const N: u64 = 30;
    let mut per_op = [0u64; 2];
    for (k, core) in [me, tc()].into_iter().enumerate() {
        let t0 = libos::time::now_ns();
        for i in 0..N {
            let t = ok!(libos::thread::spawn(core, triple, i));
            let code = ok!(t.join());
            ensure!(code == 3 * i + 1, "thread {i} on core {core} returned {code}");
        }
        per_op[k] = (libos::time::now_ns() - t0) / N;
    }
    println!(
        "tctest: thread create+join (TCG, emulated wall clock): on our own TC {} us, on another core {} us, ratio {}.{:02}",
        per_op[0] / 1000,
        per_op[1] / 1000,
        per_op[0] / per_op[1].max(1),
        per_op[0] * 100 / per_op[1].max(1) % 100
    );
    Ok(Pass::Ok)
}

fn t_bad_input() -> TestResult {
    if !is_tc() {
        return Ok(Pass::Skipped(NEEDS_TC));
    }
    // An XC keeps one context: a second pcore_run there is Busy (our core if it is an XC,
    // since it runs us; else another XC with a spinner on it).
    let me = libos::core_id();
    let other_xc = (0..cores()).find(|&c| c != me && role_of(c) == abi::ROLE_XC);
    if role_of(me) == abi::ROLE_XC {
        let mut x = ok!(Core::prepare(me, &CoreOpts::default()));
        err!(x.start(spinner, 0), abi::Error::Busy);
    } else if let Some(x) = other_xc {
        let page = SharedPage::new("tc-shared")?;
        let sh = shared();
        let mut a = ok!(Core::prepare(x, &CoreOpts::default()));
        ok!(page.map_into(a.root_ar));
        let mut b = ok!(Core::prepare(x, &CoreOpts::default()));
        ok!(a.start(spinner, 0));
        let r = b.start(spinner, 1);
        sh[STOP].store(1, Ordering::Release);
        let code = ok!(a.join(JOIN_MS));
        err!(r, abi::Error::Busy);
        ensure!(code == 0, "the XC's spinner ended with {code}");
    } else {
        println!("tctest: no XC core in this placement: the XC's one-context check is not made");
    }
    // A kernel core runs no contexts, time-shared or not. The TC becomes a KC once idle.
    let mut k = ok!(Core::prepare(tc(), &CoreOpts::default()));
    let mut set = Err(abi::Error::Busy);
    libos::time::wait_until(JOIN_MS, || {
        set = raw(abi::nr::PCORE_SET_ROLE, [k.pcore.share, k.pcore.object, ROLE_KC, 0, 0, 0]);
        set != Err(abi::Error::Busy)
    });
    ok!(set);
    let r = k.start(spinner, 0);
    let mut ctx = k.context(spinner, 0);
    ctx.role = ROLE_TC;
    let r2 = sys::pcore_run(k.pcore, &ctx);
    let back = raw(abi::nr::PCORE_SET_ROLE, [k.pcore.share, k.pcore.object, ROLE_TC, 0, 0, 0]);
    err!(r, abi::Error::NotPermitted);
    err!(r2, abi::Error::NotPermitted);
    ok!(back);
    err!(sys::pcore_set_interval(k.pcore, 10_001), abi::Error::InvalidArgument);
    drop(k);
    Ok(Pass::Ok)
}

fn main(_args: &'static str) -> u64 {
    TC_CORE.store(find_tc(), Ordering::Relaxed);
    let roles: [&str; 8] = core::array::from_fn(|c| if (c as u64) < cores() { abi::role_name(role_of(c as u64)) } else { "" });
    let shown = &roles[..cores().min(8) as usize];
    match tc() {
        NO_TC => println!("tctest: roles in effect (first 8 cores): {shown:?}; tests on core {}, no other TC core", libos::core_id()),
        t => println!("tctest: roles in effect (first 8 cores): {shown:?}; tests on core {}, time-shared core {t}", libos::core_id()),
    }
    let tests: [(&str, fn() -> TestResult); 7] = [
        ("tc_three_progress", t_three_progress),
        ("tc_halt_queued", t_halt_queued),
        ("tc_exit_any_order", t_exit_any_order),
        ("tc_yield", t_yield),
        ("tc_queue_full", t_queue_full),
        ("tc_thread_on_own_tc", t_thread_on_own_tc),
        ("tc_bad_input", t_bad_input),
    ];
    let mut tally = Tally::default();
    for (name, f) in tests {
        tally.record(name, f());
    }
    tally.finish()
}
