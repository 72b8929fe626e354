//! Core roles (issue 8): application cores take no interrupts and their system calls run on
//! a kernel core; a role change under load loses no request; kernel cores refuse contexts.
//! Boot with `roles=kc:1,ac:2,kc:3 init=roletest` on 4 vCPUs (tests needing more cores than
//! the machine has are skipped). Prints `utest NAME ... ok|FAILED` lines like utest.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{nr, BatchEntry, Error, ObjName, PcoreContext, ROLE_AC, ROLE_KC, ROLE_XC};
use alloc::format;
use alloc::string::String;
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::sys;

libos::main!(main);

const NULLS: u64 = 2000;
const LOAD_NULLS: u64 = 20_000;

/// `pcore_set_role` (no runtime wrapper yet).
fn pcore_set_role(p: ObjName, role: u64) -> Result<u64, Error> {
    // SAFETY: plain integer arguments; no pointers.
    unsafe { sys::call(nr::PCORE_SET_ROLE, p.share, p.object, role, 0, 0, 0) }
}

fn role(core: u64) -> u64 {
    sys::core_stats(core).map(|s| s.role).unwrap_or(u64::MAX)
}

/// On the AC: `NULLS` forwarded null calls; exit code = failures + 1000 * interrupts taken.
fn ac_nulls(_c: &CoreCtx) -> u64 {
    let me = 2;
    let Ok(s0) = sys::core_stats(me) else { return 999_999 };
    let t0 = sys::time_now().unwrap_or(0);
    let mut failures = 0;
    for _ in 0..NULLS {
        if sys::null() != Ok(0) {
            failures += 1;
        }
    }
    let t1 = sys::time_now().unwrap_or(0);
    let Ok(s1) = sys::core_stats(me) else { return 999_998 };
    // Report ticks per call through a second statistic we can read back: pack into the code.
    let ticks = (t1 - t0) / NULLS;
    failures + 1000 * (s1.interrupts - s0.interrupts) + 1_000_000 * ticks.min(1_000_000)
}

const BATCH: usize = 64;

/// `NULLS` null calls in batches of `BATCH`; returns failures.
fn batched_nulls() -> u64 {
    let mut entries = [BatchEntry { nr: nr::NULL, args: [0; 6], result: -1 }; BATCH];
    let mut failures = 0;
    for _ in 0..NULLS / BATCH as u64 {
        // SAFETY: `entries` is a live, writable array of BATCH entries.
        let r = unsafe { sys::call(nr::SYSCALL_BATCH, entries.as_mut_ptr() as u64, BATCH as u64, 0, 0, 0, 0) };
        if r != Ok(BATCH as u64) {
            failures += BATCH as u64;
            continue;
        }
        failures += entries.iter().filter(|e| e.result != 0).count() as u64;
        for e in entries.iter_mut() {
            e.result = -1;
        }
    }
    failures
}

/// On the AC: batched forwarded nulls; exit code = failures + 1_000_000 * ticks per call.
fn ac_batched(_c: &CoreCtx) -> u64 {
    let t0 = sys::time_now().unwrap_or(0);
    let failures = batched_nulls();
    let calls = NULLS / BATCH as u64 * BATCH as u64;
    let ticks = (sys::time_now().unwrap_or(0) - t0) / calls;
    failures + 1_000_000 * ticks.min(1_000_000)
}

/// On the AC under role changes: `LOAD_NULLS` calls; exit code = failures.
fn ac_load(_c: &CoreCtx) -> u64 {
    let mut failures = 0;
    for _ in 0..LOAD_NULLS {
        if sys::null() != Ok(0) {
            failures += 1;
        }
    }
    failures
}

type TestResult = Result<&'static str, String>;

fn t_ac_forwarding() -> TestResult {
    let info = sys::sys_info().map_err(|e| format!("sys_info: {e:?}"))?;
    if info.cores < 3 || role(1) != ROLE_KC || role(2) != ROLE_AC {
        return Ok("skipped: needs roles=kc:1,ac:2");
    }
    let kc0 = sys::core_stats(1).map_err(|e| format!("{e:?}"))?;
    let mut c = Core::prepare(2, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    c.start(ac_nulls, 0).map_err(|e| format!("start: {e:?}"))?;
    let code = c.join(60_000).map_err(|e| format!("join: {e:?}"))?;
    let kc1 = sys::core_stats(1).map_err(|e| format!("{e:?}"))?;
    let failures = code % 1000;
    let interrupts = (code / 1000) % 1000;
    let ticks = code / 1_000_000;
    if failures != 0 {
        return Err(format!("{failures} forwarded calls failed"));
    }
    if interrupts != 0 {
        return Err(format!("the AC took {interrupts} interrupts while it ran"));
    }
    let served = kc1.syscalls_served - kc0.syscalls_served;
    if served < NULLS {
        return Err(format!("the KC served {served} calls, want at least {NULLS}"));
    }
    // Batched forwarding: one round trip per BATCH calls.
    c.start(ac_batched, 0).map_err(|e| format!("start: {e:?}"))?;
    let bcode = c.join(60_000).map_err(|e| format!("join: {e:?}"))?;
    if bcode % 1_000_000 != 0 {
        return Err(format!("{} batched forwarded calls failed", bcode % 1_000_000));
    }
    let bticks = bcode / 1_000_000;
    // Local cost on this (XC) core, for comparison.
    let t0 = sys::time_now().unwrap_or(0);
    for _ in 0..NULLS {
        let _ = sys::null();
    }
    let local = (sys::time_now().unwrap_or(0) - t0) / NULLS;
    let t0 = sys::time_now().unwrap_or(0);
    let lfail = batched_nulls();
    let lbatched = (sys::time_now().unwrap_or(0) - t0) / (NULLS / BATCH as u64 * BATCH as u64);
    if lfail != 0 {
        return Err(format!("{lfail} local batched calls failed"));
    }
    let tpm = libos::start_info().tsc_per_ms.max(1);
    let ns = |t: u64| t * 1_000_000 / tpm;
    libos::println!(
        "roletest: null system call ns/call (TCG, emulated): local {} | local batched x{BATCH} {} | forwarded to a KC {} | forwarded batched x{BATCH} {} (KC served {served})",
        ns(local),
        ns(lbatched),
        ns(ticks),
        ns(bticks)
    );
    Ok("")
}

fn t_role_change_under_load() -> TestResult {
    let info = sys::sys_info().map_err(|e| format!("sys_info: {e:?}"))?;
    if info.cores < 4 || role(1) != ROLE_KC || role(2) != ROLE_AC || role(3) != ROLE_KC {
        return Ok("skipped: needs roles=kc:1,ac:2,kc:3");
    }
    let root = libos::root_share();
    let p1 = ObjName::new(root, sys::pcore_alloc(root, "kc1", 1).map_err(|e| format!("{e:?}"))?);
    let mut c = Core::prepare(2, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    c.start(ac_load, 0).map_err(|e| format!("start: {e:?}"))?;
    let mut changes = 0;
    while c.halted().map_err(|e| format!("{e:?}"))?.is_none() {
        let to = if changes % 2 == 0 { ROLE_XC } else { ROLE_KC };
        pcore_set_role(p1, to).map_err(|e| format!("pcore_set_role: {e:?}"))?;
        changes += 1;
        let t = sys::time_now().unwrap_or(0);
        while sys::time_now().unwrap_or(0) < t + libos::start_info().tsc_per_ms * 2 {}
    }
    let failures = c.join(60_000).map_err(|e| format!("join: {e:?}"))?;
    // Leave core 1 a kernel core.
    let _ = pcore_set_role(p1, ROLE_KC);
    let _ = sys::share_delobj(p1);
    if failures != 0 {
        return Err(format!("{failures} of {LOAD_NULLS} calls failed across {changes} role changes"));
    }
    if changes < 2 {
        return Err(format!("only {changes} role changes happened during the load"));
    }
    libos::println!("roletest: {LOAD_NULLS} forwarded calls, {changes} role changes of a serving KC, none lost");
    Ok("")
}

fn t_kc_refuses_contexts() -> TestResult {
    let info = sys::sys_info().map_err(|e| format!("sys_info: {e:?}"))?;
    if info.cores < 2 || role(1) != ROLE_KC {
        return Ok("skipped: needs roles=kc:1");
    }
    let c = Core::prepare(1, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    let ctx: PcoreContext = c.context(ac_load, 0);
    match sys::pcore_run(c.pcore, &ctx) {
        Err(Error::NotPermitted) => {}
        r => return Err(format!("pcore_run on a KC -> {r:?}, want NotPermitted")),
    }
    let mut ctx2 = ctx;
    ctx2.role = ROLE_KC;
    match sys::pcore_run(c.pcore, &ctx2) {
        Err(Error::InvalidArgument) | Err(Error::NotPermitted) => {}
        r => return Err(format!("pcore_run with role KC -> {r:?}")),
    }
    match pcore_set_role(c.pcore, 77) {
        Err(Error::InvalidArgument) => {}
        r => return Err(format!("pcore_set_role(77) -> {r:?}, want InvalidArgument")),
    }
    Ok("")
}

/// `roletest bench` at 2 vCPUs with `roles=kc:1`: null-call cost on this core as an XC
/// (local), then as an AC (forwarded to the KC), each plain and batched.
fn bench() -> u64 {
    if role(1) != ROLE_KC {
        libos::println!("roletest bench: needs roles=kc:1");
        return 1;
    }
    let root = libos::root_share();
    let Ok(p0) = sys::pcore_current() else { return 1 };
    let me = ObjName::new(root, p0);
    let tpm = libos::start_info().tsc_per_ms.max(1);
    let measure = |batched: bool| -> (u64, u64) {
        let t0 = sys::time_now().unwrap_or(0);
        let failures = if batched {
            batched_nulls()
        } else {
            (0..NULLS).filter(|_| sys::null() != Ok(0)).count() as u64
        };
        let calls = if batched { NULLS / BATCH as u64 * BATCH as u64 } else { NULLS };
        ((sys::time_now().unwrap_or(0) - t0) * 1_000_000 / tpm / calls, failures)
    };
    let (local, f0) = measure(false);
    let (local_b, f1) = measure(true);
    if let Err(e) = pcore_set_role(me, ROLE_AC) {
        libos::println!("roletest bench: cannot become an AC: {e:?}");
        return 1;
    }
    let (fwd, f2) = measure(false);
    let (fwd_b, f3) = measure(true);
    let back = pcore_set_role(me, ROLE_XC);
    let per_sec = |ns: u64| if ns == 0 { 0 } else { 1_000_000_000 / ns };
    libos::println!("roletest bench: null system call, {NULLS} calls each, batches of {BATCH} (TCG, emulated timing)");
    libos::println!("roletest bench: local           {local:>8} ns/call {:>10} calls/s", per_sec(local));
    libos::println!("roletest bench: local batched   {local_b:>8} ns/call {:>10} calls/s", per_sec(local_b));
    libos::println!("roletest bench: forwarded       {fwd:>8} ns/call {:>10} calls/s", per_sec(fwd));
    libos::println!("roletest bench: forwarded batch {fwd_b:>8} ns/call {:>10} calls/s", per_sec(fwd_b));
    let failures = f0 + f1 + f2 + f3;
    if failures != 0 || back.is_err() {
        libos::println!("roletest bench: {failures} calls failed; role back to XC: {back:?}");
        return 1;
    }
    0
}

fn main(args: &'static str) -> u64 {
    if args.split_whitespace().next() == Some("bench") {
        return bench();
    }
    let tests: [(&str, fn() -> TestResult); 3] =
        [("ac_forwarding", t_ac_forwarding), ("role_change_under_load", t_role_change_under_load), ("kc_refuses_contexts", t_kc_refuses_contexts)];
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in tests {
        match f() {
            Ok("") => {
                passed += 1;
                libos::println!("utest {name} ... ok");
            }
            Ok(note) => {
                passed += 1;
                libos::println!("utest {name} ... ok ({note})");
            }
            Err(why) => {
                failed += 1;
                libos::println!("utest {name} ... FAILED: {why}");
            }
        }
    }
    libos::println!("utest: done {passed} passed, {failed} failed");
    if failed == 0 { 0 } else { 1 }
}
