//! Core roles (docs/roles.md): application cores take no interrupts and their system calls run on
//! a kernel core; a role change under load loses no request; kernel cores refuse contexts.
//!
//! The tests follow the roles in effect (read per core with `core_stats`, as the shell's
//! `cores` command shows them), not fixed core numbers: each picks the cores it needs from the
//! running placement and reports `skipped (needs ...)` if the placement lacks them. Under
//! `roles=kc:1,ac:2,kc:3` on 4 vCPUs all six run; under `roles=kc:3,ac:1-2` all but
//! `role_change_under_load` and `forwarding_after_the_serving_kc_leaves` (which need a second
//! kernel core to take over). `cargo xtask
//! test` boots both and fails a skip the placement should have prevented (docs/testing.md).
//! Prints `utest NAME ... ok|FAILED|skipped` lines like utest.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{
    nr, BatchEntry, Error, ObjName, PcoreContext, DEVICE_SYSCALL_RING, MEMID_SELF, RING_ATTACHED, RING_DETACHED, RING_STOPPED,
    ROLE_AC, ROLE_KC, ROLE_XC, SHARE_PRIVATE,
};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::ring::{Ring, RingError};
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

/// The roles in effect at the start of the run, one per online core, as the shell's `cores`
/// command reads them (`core_stats(c).role`).
struct Placement {
    roles: Vec<u64>,
    /// The core this program runs on (never picked as a test's AC or KC).
    me: u64,
}

impl Placement {
    fn read() -> Result<Placement, String> {
        let n = sys::sys_info().map_err(|e| format!("sys_info: {e:?}"))?.cores;
        let roles = (0..n).map(|c| sys::core_stats(c).map(|s| s.role).map_err(|e| format!("core_stats({c}): {e:?}"))).collect::<Result<Vec<_>, _>>()?;
        Ok(Placement { roles, me: libos::core_id() })
    }

    /// The cores other than ours that have `role`, lowest first.
    fn with(&self, role: u64) -> Vec<u64> {
        (0..self.roles.len() as u64).filter(|&c| c != self.me && self.roles[c as usize] == role).collect()
    }

    fn first(&self, role: u64) -> Option<u64> {
        self.with(role).first().copied()
    }

    /// `0:XC 1:KC 2:AC 3:KC`, for the log.
    fn describe(&self) -> String {
        let mut s = String::new();
        for (c, &r) in self.roles.iter().enumerate() {
            s.push_str(&format!("{}{c}:{}", if c == 0 { "" } else { " " }, abi::role_name(r)));
        }
        s
    }
}

/// Syscalls served so far by each core in `kcs`, summed.
fn served_by(kcs: &[u64]) -> Result<u64, String> {
    kcs.iter().map(|&k| sys::core_stats(k).map(|s| s.syscalls_served).map_err(|e| format!("core_stats({k}): {e:?}"))).sum()
}

/// On the AC: `NULLS` forwarded null calls; exit code = failures + 1000 * interrupts taken.
fn ac_nulls(c: &CoreCtx) -> u64 {
    let me = c.core;
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

/// `Ok(None)`: passed; `Ok(Some(what))`: skipped, the placement lacks `what`.
type TestResult = Result<Option<&'static str>, String>;

/// Where the tests map syscall rings (in the scratch window).
const RING_VA: u64 = libos::layout::SCRATCH_BASE + (64 << 20);
const RING_SLOTS: u64 = 64;
const RING_WAIT_MS: u64 = 30_000;

/// Wait (at most 30 s) for a ring's status to become `want`.
fn ring_status_becomes(r: &Ring, want: u32) -> bool {
    libos::time::wait_until(30_000, || r.status() == want)
}

/// Submit `n` (at most 64) null calls as one batch, then collect them; returns the failures.
fn ring_batch(r: &mut Ring, n: u64) -> Result<u64, String> {
    let reqs = [(nr::NULL, [0u64; 6]); 64];
    r.submit_batch(&reqs[..n as usize]).map_err(|e| format!("submit_batch: {e:?}"))?;
    let mut failures = 0;
    for _ in 0..n {
        let (_, res) = r.wait(RING_WAIT_MS).map_err(|e| format!("wait: {e:?}"))?;
        if res != Ok(0) {
            failures += 1;
        }
    }
    Ok(failures)
}

fn t_syscall_ring(p: &Placement) -> TestResult {
    let Some(k) = p.first(ROLE_KC) else { return Ok(Some("needs a kernel core")) };
    let info = sys::sys_info().map_err(|e| format!("sys_info: {e:?}"))?;
    let root = libos::root_share();
    let objs_before = info.live_kobjects;
    // Requests can name objects through shared shares only: make one (held by the root
    // share, so the ring's identity includes it).
    let sh = sys::share_alloc(root, "ring-objs", MEMID_SELF, 0).map_err(|e| format!("share_alloc: {e:?}"))?;
    let pk = ObjName::new(root, sys::pcore_alloc(root, "kc", k).map_err(|e| format!("{e:?}"))?);
    let r = ring_checks(sh, pk, k);
    let _ = sys::share_delobj(pk);
    let _ = sys::share_delobj(ObjName::new(root, sh));
    r?;
    // Everything the rings used is gone once the kernel core lets go of it.
    let gone = libos::time::wait_until(30_000, || sys::sys_info().is_ok_and(|i| i.live_kobjects == objs_before));
    if !gone {
        let now = sys::sys_info().map(|i| i.live_kobjects).unwrap_or(0);
        return Err(format!("kernel objects: {objs_before} before the ring tests, {now} after"));
    }
    Ok(None)
}

/// On the AC: a ring of its own, served by kernel core `c.arg`; batches of null calls and a
/// call that names an object of its share. Exit code: failures + 1000 * interrupts taken.
fn ac_ring(c: &CoreCtx) -> u64 {
    let Ok(p) = sys::pcore_alloc(c.share, "kc", c.arg) else { return 999_998 };
    let p3 = ObjName::new(c.share, p);
    let mut failures = 0;
    let mut interrupts = 0;
    match Ring::create(c.share, c.root_ar, RING_VA, RING_SLOTS) {
        Ok(mut r) => {
            if r.attach(p3).is_err() {
                failures += 100;
            }
            // Interrupts are counted while the ring is used (unmapping it at the end
            // sends this core a TLB shootdown, on purpose).
            let Ok(s0) = sys::core_stats(c.core) else { return 999_999 };
            for _ in 0..8 {
                failures += ring_batch(&mut r, 32).unwrap_or(32);
            }
            // Its own root range, named through its own share, from the KC.
            let mut st = abi::ObjStat::default();
            match r.call(nr::OBJ_STAT, [c.root_ar.share, c.root_ar.object, &mut st as *mut _ as u64, 0, 0, 0], RING_WAIT_MS) {
                Ok(Ok(0)) if st.id == c.root_ar.object => {}
                _ => failures += 1,
            }
            let Ok(s1) = sys::core_stats(c.core) else { return 999_997 };
            interrupts = s1.interrupts - s0.interrupts;
        }
        Err(_) => failures += 500,
    }
    let _ = sys::share_delobj(p3);
    failures + 1000 * interrupts
}

fn t_syscall_ring_from_ac(p: &Placement) -> TestResult {
    let (Some(a), Some(k)) = (p.first(ROLE_AC), p.first(ROLE_KC)) else { return Ok(Some("needs an application core and a kernel core")) };
    let kc0 = sys::core_stats(k).map_err(|e| format!("{e:?}"))?;
    let mut c = Core::prepare(a, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    c.start(ac_ring, k).map_err(|e| format!("start: {e:?}"))?;
    let code = c.join(120_000).map_err(|e| format!("join: {e:?}"))?;
    let kc1 = sys::core_stats(k).map_err(|e| format!("{e:?}"))?;
    if code % 1000 != 0 {
        return Err(format!("{} ring calls from the AC failed", code % 1000));
    }
    if code / 1000 != 0 {
        return Err(format!("the AC took {} interrupts while using its ring", code / 1000));
    }
    if kc1.syscalls_served - kc0.syscalls_served < 8 * 32 + 1 {
        return Err(format!("KC {k} served {} calls, want at least {}", kc1.syscalls_served - kc0.syscalls_served, 8 * 32 + 1));
    }
    Ok(None)
}

/// The ring tests on kernel core `k`, named through `p1`.
fn ring_checks(sh: u64, p1: ObjName, k: u64) -> Result<(), String> {
    let root = libos::root_share();
    let kc0 = sys::core_stats(k).map_err(|e| format!("{e:?}"))?;
    let mut r = Ring::create_here(sh, RING_VA, RING_SLOTS).map_err(|e| format!("Ring::create: {e:?}"))?;
    if r.status() != RING_DETACHED {
        return Err(format!("a new ring's status is {}, want detached", r.status()));
    }
    // A slot forged before the ring is served: a state that is no protocol state.
    // SAFETY: the slot lies in the ring mapping; nothing else writes it while detached.
    unsafe {
        let s = r.next_slot_raw();
        core::ptr::write_volatile(&mut (*s).nr, nr::NULL as u32);
        core::ptr::write_volatile(&mut (*s).state, 7);
    }
    r.submitted_raw();
    r.attach(p1).map_err(|e| format!("pcore_add_device: {e:?}"))?;
    if !ring_status_becomes(&r, RING_ATTACHED) {
        return Err(format!("status {} after attaching to a KC", r.status()));
    }
    match r.wait(RING_WAIT_MS) {
        Ok((_, Err(Error::InvalidArgument))) => {}
        x => return Err(format!("malformed slot -> {x:?}, want InvalidArgument")),
    }
    // Requests complete through the KC, in this context's address space and shares.
    let call = |r: &mut Ring, n: u64, a: [u64; 6]| r.call(n, a, RING_WAIT_MS).map_err(|e| format!("ring call {n}: {e:?}"));
    if call(&mut r, nr::NULL, [0; 6])? != Ok(0) {
        return Err("null through the ring failed".into());
    }
    let seg = ObjName::new(sh, sys::segment_alloc(sh, "ring-seg", MEMID_SELF, 3 * abi::PAGE_SIZE).map_err(|e| format!("{e:?}"))?);
    let got = call(&mut r, nr::SEGMENT_GET_NBYTES, [seg.share, seg.object, 0, 0, 0, 0])?;
    if got != Ok(3 * abi::PAGE_SIZE) {
        return Err(format!("segment_get_nbytes through the ring -> {got:?}"));
    }
    let mut st = abi::ObjStat::default();
    let got = call(&mut r, nr::OBJ_STAT, [seg.share, seg.object, &mut st as *mut _ as u64, 0, 0, 0])?;
    if got != Ok(0) || st.id != seg.object {
        return Err(format!("obj_stat through the ring -> {got:?}, id {:#x} want {:#x}", st.id, seg.object));
    }
    // Forged requests: the root share and a private share are this core's, never the
    // ring's; a kernel pointer; a call that acts on a core; a nested batch; no such call.
    let in_root = ObjName::new(root, sys::segment_alloc(root, "ring-root-seg", MEMID_SELF, abi::PAGE_SIZE).map_err(|e| format!("{e:?}"))?);
    // A private share of this core, held by the root share (so this core names it) and by
    // the shared share (so a ring request can try to).
    let psh = sys::share_alloc(root, "ring-private", MEMID_SELF, SHARE_PRIVATE).map_err(|e| format!("{e:?}"))?;
    sys::share_addobj(sh, ObjName::new(root, psh)).map_err(|e| format!("share_addobj: {e:?}"))?;
    let in_private = ObjName::new(psh, sys::segment_alloc(psh, "p", MEMID_SELF, abi::PAGE_SIZE).map_err(|e| format!("{e:?}"))?);
    let refusals: [(&str, u64, [u64; 6], &[Error]); 6] = [
        ("object in the root share", nr::SEGMENT_GET_NBYTES, [in_root.share, in_root.object, 0, 0, 0, 0], &[Error::ShareNotReachable]),
        ("object in another core's private share", nr::SEGMENT_GET_NBYTES, [in_private.share, in_private.object, 0, 0, 0, 0], &[Error::NotPermitted]),
        ("kernel pointer", nr::OBJ_STAT, [seg.share, seg.object, 0xffff_8000_0000_0000, 0, 0, 0], &[Error::BadAddress]),
        ("pcore_current", nr::PCORE_CURRENT, [0; 6], &[Error::NotPermitted]),
        ("nested batch", nr::SYSCALL_BATCH, [0, 0, 0, 0, 0, 0], &[Error::InvalidArgument]),
        ("unknown call", 9999, [0; 6], &[Error::NoSuchCall]),
    ];
    for (what, n, a, want) in refusals {
        match call(&mut r, n, a)? {
            Err(e) if want.contains(&e) => {}
            got => return Err(format!("{what} through the ring -> {got:?}, want {want:?}")),
        }
    }
    // The same names work locally: the refusals come from the ring's identity.
    sys::segment_get_nbytes(in_root).map_err(|e| format!("local root-share lookup: {e:?}"))?;
    sys::segment_get_nbytes(in_private).map_err(|e| format!("local private lookup: {e:?}"))?;
    for o in [in_private, ObjName::new(sh, psh), ObjName::new(root, psh), in_root, seg] {
        let _ = sys::share_delobj(o);
    }
    // Batching: 32 requests, one doorbell at most.
    let f = ring_batch(&mut r, 32)?;
    if f != 0 {
        return Err(format!("{f} of 32 batched ring calls failed"));
    }
    // Overflow: the ring holds RING_SLOTS requests until their results are collected.
    for i in 0..RING_SLOTS {
        r.submit(nr::NULL, [0; 6]).map_err(|e| format!("submit {i} of {RING_SLOTS}: {e:?}"))?;
    }
    match r.submit(nr::NULL, [0; 6]) {
        Err(RingError::Full) => {}
        x => return Err(format!("submit to a full ring -> {x:?}, want Full")),
    }
    for _ in 0..RING_SLOTS {
        match r.wait(RING_WAIT_MS) {
            Ok((_, Ok(0))) => {}
            x => return Err(format!("collecting a full ring: {x:?}")),
        }
    }
    let st = sys::device_stat(r.dev).map_err(|e| format!("device_stat: {e:?}"))?;
    let want = 1 + 3 + refusals.len() as u64 + 32 + RING_SLOTS;
    if st.kind != DEVICE_SYSCALL_RING || st.buffers != want {
        return Err(format!("device_stat: kind {} completed {}, want {DEVICE_SYSCALL_RING} and {want}", st.kind, st.buffers));
    }
    let kc1 = sys::core_stats(k).map_err(|e| format!("{e:?}"))?;
    if kc1.syscalls_served - kc0.syscalls_served < want {
        return Err(format!("the KC served {} calls, want at least {want}", kc1.syscalls_served - kc0.syscalls_served));
    }
    // The KC stops being one: requests get an error, none hangs or runs later.
    pcore_set_role(p1, ROLE_XC).map_err(|e| format!("to XC: {e:?}"))?;
    if !ring_status_becomes(&r, RING_STOPPED) {
        let _ = pcore_set_role(p1, ROLE_KC);
        return Err(format!("status {} after the KC stopped, want stopped", r.status()));
    }
    r.submit(nr::NULL, [0; 6]).map_err(|e| format!("submit: {e:?}"))?;
    let stopped = r.wait(RING_WAIT_MS);
    pcore_set_role(p1, ROLE_KC).map_err(|e| format!("back to KC: {e:?}"))?;
    if stopped != Err(RingError::NotServed(RING_STOPPED)) || r.in_flight() != 0 {
        return Err(format!("call to a stopped KC -> {stopped:?} ({} in flight), want NotServed(stopped)", r.in_flight()));
    }
    if !ring_status_becomes(&r, RING_ATTACHED) {
        return Err(format!("status {} after the core became a KC again", r.status()));
    }
    if call(&mut r, nr::NULL, [0; 6])? != Ok(0) {
        return Err("null after the KC came back failed".into());
    }
    // Detached: an error, not a hang.
    r.detach().map_err(|e| format!("pcore_del_device: {e:?}"))?;
    if r.status() != RING_DETACHED {
        return Err(format!("status {} after pcore_del_device", r.status()));
    }
    match r.call(nr::NULL, [0; 6], RING_WAIT_MS) {
        Err(RingError::NotServed(RING_DETACHED)) => {}
        x => return Err(format!("call on a detached ring -> {x:?}")),
    }
    match libos::ring::pcore_del_device(p1, r.dev) {
        Err(Error::NotFound) => {}
        x => return Err(format!("detaching twice -> {x:?}, want NotFound")),
    }
    // Freed with requests in flight: the KC finishes what it took and nothing leaks (the
    // caller checks the object count).
    r.attach(p1).map_err(|e| format!("pcore_add_device again: {e:?}"))?;
    match libos::ring::pcore_add_device(p1, r.dev) {
        Err(Error::Busy) => {}
        x => return Err(format!("attaching twice -> {x:?}, want Busy")),
    }
    for _ in 0..RING_SLOTS {
        r.submit(nr::NULL, [0; 6]).map_err(|e| format!("submit: {e:?}"))?;
    }
    r.kick().map_err(|e| format!("kick: {e:?}"))?;
    drop(r);
    Ok(())
}

fn t_ac_forwarding(p: &Placement) -> TestResult {
    let kcs = p.with(ROLE_KC);
    let Some(a) = p.first(ROLE_AC).filter(|_| !kcs.is_empty()) else { return Ok(Some("needs an application core and a kernel core")) };
    // The calls go to whichever kernel core the AC's slot names: count them all.
    let kc0 = served_by(&kcs)?;
    let mut c = Core::prepare(a, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    c.start(ac_nulls, 0).map_err(|e| format!("start: {e:?}"))?;
    let code = c.join(60_000).map_err(|e| format!("join: {e:?}"))?;
    let kc1 = served_by(&kcs)?;
    let failures = code % 1000;
    let interrupts = (code / 1000) % 1000;
    let ticks = code / 1_000_000;
    if failures != 0 {
        return Err(format!("{failures} forwarded calls failed"));
    }
    if interrupts != 0 {
        return Err(format!("the AC took {interrupts} interrupts while it ran"));
    }
    let served = kc1 - kc0;
    if served < NULLS {
        return Err(format!("the KCs {kcs:?} served {served} calls, want at least {NULLS}"));
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
        "roletest: null system call ns/call (TCG, emulated): local {} | local batched x{BATCH} {} | forwarded from AC {a} to a KC {} | forwarded batched x{BATCH} {} (KCs {kcs:?} served {served})",
        ns(local),
        ns(lbatched),
        ns(ticks),
        ns(bticks)
    );
    Ok(None)
}

/// An AC under load while the kernel cores take turns to stop being kernel cores and come
/// back (one at a time, so another is always there to adopt the AC's requests): the KC
/// serving the AC is among them whichever it is.
fn t_role_change_under_load(p: &Placement) -> TestResult {
    let kcs = p.with(ROLE_KC);
    let Some(a) = p.first(ROLE_AC).filter(|_| kcs.len() >= 2) else { return Ok(Some("needs an application core and two kernel cores")) };
    let root = libos::root_share();
    let mut pk = Vec::new();
    for &k in &kcs {
        match sys::pcore_alloc(root, "kc", k) {
            Ok(o) => pk.push(ObjName::new(root, o)),
            Err(e) => {
                for o in pk {
                    let _ = sys::share_delobj(o);
                }
                return Err(format!("pcore_alloc({k}): {e:?}"));
            }
        }
    }
    let r = role_changes(a, &kcs, &pk);
    // Leave every kernel core a kernel core.
    for &o in &pk {
        let _ = pcore_set_role(o, ROLE_KC);
        let _ = sys::share_delobj(o);
    }
    r
}

fn role_changes(a: u64, kcs: &[u64], pk: &[ObjName]) -> TestResult {
    let served0 = kcs.iter().map(|&k| sys::core_stats(k).map(|s| s.syscalls_served).unwrap_or(0)).collect::<Vec<_>>();
    let mut c = Core::prepare(a, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    c.start(ac_load, 0).map_err(|e| format!("start: {e:?}"))?;
    let mut changes = 0;
    while c.halted().map_err(|e| format!("{e:?}"))?.is_none() {
        let which = (changes / 2) % pk.len();
        let to = if changes % 2 == 0 { ROLE_XC } else { ROLE_KC };
        pcore_set_role(pk[which], to).map_err(|e| format!("pcore_set_role(core {}, {}): {e:?}", kcs[which], abi::role_name(to)))?;
        changes += 1;
        let t = sys::time_now().unwrap_or(0);
        while sys::time_now().unwrap_or(0) < t + libos::start_info().tsc_per_ms * 2 {}
    }
    let failures = c.join(60_000).map_err(|e| format!("join: {e:?}"))?;
    if failures != 0 {
        return Err(format!("{failures} of {LOAD_NULLS} calls failed across {changes} role changes"));
    }
    if changes < 2 {
        return Err(format!("only {changes} role changes happened during the load"));
    }
    let served: Vec<u64> = kcs.iter().zip(&served0).map(|(&k, s0)| sys::core_stats(k).map(|s| s.syscalls_served).unwrap_or(0) - s0).collect();
    libos::println!("roletest: {LOAD_NULLS} calls forwarded from AC {a}, {changes} role changes of the KCs {kcs:?} in turn (served {served:?}), none lost");
    Ok(None)
}

/// On the AC: three forwarded null calls; exit code = failures.
fn ac_three(_c: &CoreCtx) -> u64 {
    (0..3).filter(|_| sys::null() != Ok(0)).count() as u64
}

/// Run `ac_three` on the AC `c` and read its exit code: the failed calls, or a fault (the
/// context's own start-up calls are forwarded too, and the library OS stops on their failure).
fn three_calls_on(c: &mut Core, when: &str) -> Result<(), String> {
    c.start(ac_three, 0).map_err(|e| format!("start: {e:?}"))?;
    match c.join(60_000).map_err(|e| format!("join: {e:?}"))? {
        0 => Ok(()),
        n if n <= 3 => Err(format!("{n} of 3 forwarded calls failed {when}")),
        code if code >= abi::EXIT_FAULT_BASE => Err(format!("the AC's context ended by fault vector {} {when} (its forwarded start-up calls failed)", code - abi::EXIT_FAULT_BASE)),
        code => Err(format!("the AC's context exited with {code} {when}")),
    }
}

/// The kernel core that serves the AC stops being one while the AC is idle, and the other
/// kernel cores have gone to sleep meanwhile: the AC's next calls must go to (and wake) a
/// kernel core, not to the core it used before. Catches: an AC that keeps naming a former
/// kernel core as its server (mutant `ac_forwards_to_former_kc`): its wake-up then goes to
/// that core, no sleeping kernel core takes the request, and each call waits out its deadline.
fn t_forwarding_after_the_serving_kc_leaves(p: &Placement) -> TestResult {
    let kcs = p.with(ROLE_KC);
    let Some(a) = p.first(ROLE_AC).filter(|_| kcs.len() >= 2) else { return Ok(Some("needs an application core and two kernel cores")) };
    let per_kc = || -> Result<Vec<u64>, String> { kcs.iter().map(|&k| served_by(&[k])).collect() };
    // Which kernel core serves the AC now: the one whose count moves.
    let s0 = per_kc()?;
    let mut c = Core::prepare(a, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
    three_calls_on(&mut c, "before any role change")?;
    let s1 = per_kc()?;
    let Some(i) = (0..kcs.len()).max_by_key(|&i| s1[i] - s0[i]).filter(|&i| s1[i] > s0[i]) else {
        return Err(format!("no kernel core of {kcs:?} counted the AC's calls"));
    };
    let ks = kcs[i];
    let root = libos::root_share();
    let pk = ObjName::new(root, sys::pcore_alloc(root, "kc", ks).map_err(|e| format!("pcore_alloc({ks}): {e:?}"))?);
    let r = (|| -> TestResult {
        pcore_set_role(pk, ROLE_XC).map_err(|e| format!("pcore_set_role(core {ks}, XC): {e:?}"))?;
        // Long enough for the remaining kernel cores to stop polling and halt.
        let t = sys::time_now().unwrap_or(0);
        while sys::time_now().unwrap_or(0) < t + libos::start_info().tsc_per_ms * 200 {}
        three_calls_on(&mut c, &format!("after core {ks}, which served the AC, stopped being a kernel core"))?;
        Ok(None)
    })();
    let _ = pcore_set_role(pk, ROLE_KC);
    let _ = sys::share_delobj(pk);
    r
}

fn t_kc_refuses_contexts(p: &Placement) -> TestResult {
    let Some(k) = p.first(ROLE_KC) else { return Ok(Some("needs a kernel core")) };
    let c = Core::prepare(k, &CoreOpts::default()).map_err(|e| format!("prepare: {e:?}"))?;
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
    Ok(None)
}

#[path = "../common/marker.rs"]
mod marker;


/// `roletest bench [rounds=N] [verbose] [path=NAME]` at 2 vCPUs with `roles=kc:1`: null-call
/// cost on this core as an XC (local), as an AC (forwarded to the KC through its slot), each
/// plain and batched, and through a syscall ring served by the KC (one at a time, batches of
/// `RING_BATCH` submitted then collected, and pipelined). The paths run interleaved, `rounds`
/// times, and each reports its fastest round: on a loaded host a vCPU hand-off can wait for
/// the host scheduler, and the minimum is the round the interference spared least. `verbose`
/// prints every round. `path=NAME` (one of `PATH_KEYS`) runs that path only, once to warm up
/// and `repeat=N` times (default 1) between the plugins' region markers on every vCPU, for
/// `insncount` (and long enough for a host profiler).
fn bench(args: &str) -> u64 {
    if role(1) != ROLE_KC {
        libos::println!("roletest bench: needs roles=kc:1");
        return 1;
    }
    let rounds = args.split_whitespace().find_map(|w| w.strip_prefix("rounds=")?.parse::<u64>().ok()).unwrap_or(5).max(1);
    let verbose = args.split_whitespace().any(|w| w == "verbose");
    let repeat = args.split_whitespace().find_map(|w| w.strip_prefix("repeat=")?.parse::<u64>().ok()).unwrap_or(1).max(1);
    let only = args.split_whitespace().find_map(|w| w.strip_prefix("path="));
    let only = match only.map(|n| PATH_KEYS.iter().position(|&k| k == n)) {
        None => None,
        Some(Some(i)) => Some(i),
        Some(None) => {
            libos::println!("roletest bench: unknown path (one of {PATH_KEYS:?})");
            return 1;
        }
    };
    let root = libos::root_share();
    let Ok(p0) = sys::pcore_current() else { return 1 };
    let me = ObjName::new(root, p0);
    let mut best = [u64::MAX; PATHS];
    let mut failures = 0;
    let sh = match sys::share_alloc(root, "ring-bench", MEMID_SELF, 0) {
        Ok(s) => s,
        Err(e) => {
            libos::println!("roletest bench: share_alloc: {e:?}");
            return 1;
        }
    };
    let r = (|| -> Result<(), String> {
        let p1 = ObjName::new(root, sys::pcore_alloc(root, "kc1", 1).map_err(|e| format!("{e:?}"))?);
        let mut ring = Ring::create_here(sh, RING_VA, RING_SLOTS).map_err(|e| format!("Ring::create: {e:?}"))?;
        ring.attach(p1).map_err(|e| format!("pcore_add_device: {e:?}"))?;
        if let Some(i) = only {
            run_path(i, me, &mut ring)?;
            marker::region_all(true);
            let (mut ns, mut f) = (0, 0);
            for _ in 0..repeat {
                let (n, fr) = run_path(i, me, &mut ring)?;
                ns += n;
                f += fr;
            }
            marker::region_all(false);
            failures += f;
            libos::println!("bench name=roles_{} ops={} ns_per_op={}", PATH_KEYS[i], path_calls(i) * repeat, ns / repeat);
        } else {
            for _ in 0..rounds {
                let mut ns = [0u64; PATHS];
                for (i, n) in ns.iter_mut().enumerate() {
                    let f;
                    (*n, f) = run_path(i, me, &mut ring)?;
                    failures += f;
                }
                if verbose {
                    libos::println!("roletest bench: round {ns:?}");
                }
                for (b, n) in best.iter_mut().zip(ns) {
                    *b = (*b).min(n);
                }
            }
        }
        drop(ring);
        let _ = sys::share_delobj(p1);
        Ok(())
    })();
    let _ = sys::share_delobj(ObjName::new(root, sh));
    if let Err(e) = r {
        libos::println!("roletest bench: {e}");
        return 1;
    }
    if only.is_none() {
        let per_sec = |ns: u64| if ns == 0 { 0 } else { 1_000_000_000 / ns };
        let local = best[0];
        libos::println!(
            "roletest bench: null system call, {NULLS} calls per path per round, fastest of {rounds} interleaved rounds; batches of {BATCH}, ring batches of {RING_BATCH} (TCG, emulated timing)"
        );
        libos::println!("roletest bench: path              ns/call    calls/s  throughput vs local");
        for (name, ns) in PATH_NAMES.iter().zip(best) {
            let ratio = if ns == 0 { 0.0 } else { local as f64 / ns as f64 };
            libos::println!("roletest bench: {name} {ns:>8} {:>10}  {ratio:.3}", per_sec(ns));
        }
    }
    if failures != 0 {
        libos::println!("roletest bench: {failures} calls failed");
        return 1;
    }
    0
}

const PATHS: usize = 7;
const PATH_NAMES: [&str; PATHS] =
    ["local          ", "local batched  ", "forwarded      ", "forwarded batch", "ring x1        ", "ring batch     ", "ring pipelined "];
const PATH_KEYS: [&str; PATHS] = ["local", "local_batch", "forwarded", "forwarded_batch", "ring1", "ring_batch", "ring_pipelined"];

const RING_BATCH: u64 = 32;

/// Calls path `i` makes.
fn path_calls(i: usize) -> u64 {
    match i {
        1 | 3 => NULLS / BATCH as u64 * BATCH as u64,
        5 | 6 => NULLS / RING_BATCH * RING_BATCH,
        _ => NULLS,
    }
}

/// Run path `i` (`PATH_KEYS`) once: (ns per call, failures). Forwarded paths switch this
/// core (`me`) to an AC for the measurement; ring paths run on it as an XC (submitting needs
/// no system call, so the submitter's role does not matter).
fn run_path(i: usize, me: ObjName, r: &mut Ring) -> Result<(u64, u64), String> {
    let tpm = libos::start_info().tsc_per_ms.max(1);
    let plain = || (0..NULLS).filter(|_| sys::null() != Ok(0)).count() as u64;
    if i >= 4 {
        failures_warm(r)?;
    }
    if i == 2 || i == 3 {
        pcore_set_role(me, ROLE_AC).map_err(|e| format!("cannot become an AC: {e:?}"))?;
    }
    let t0 = sys::time_now().unwrap_or(0);
    let failures = match i {
        0 | 2 => plain(),
        1 | 3 => batched_nulls(),
        4 => (0..NULLS).filter(|_| r.call(nr::NULL, [0; 6], RING_WAIT_MS) != Ok(Ok(0))).count() as u64,
        5 => {
            let mut f = 0;
            for _ in 0..NULLS / RING_BATCH {
                f += ring_batch(r, RING_BATCH)?;
            }
            f
        }
        _ => ring_pipelined(r, NULLS / RING_BATCH)?,
    };
    let t1 = sys::time_now().unwrap_or(0);
    if i == 2 || i == 3 {
        pcore_set_role(me, ROLE_XC).map_err(|e| format!("back to XC: {e:?}"))?;
    }
    Ok(((t1 - t0) * 1_000_000 / tpm / path_calls(i), failures))
}

/// One batch through the ring before a ring path is timed: wakes the KC if it slept.
fn failures_warm(r: &mut Ring) -> Result<(), String> {
    match ring_batch(r, RING_BATCH)? {
        0 => Ok(()),
        f => Err(format!("{f} ring calls failed while warming up")),
    }
}

/// `batches` batches of `RING_BATCH` null calls through the ring, pipelined: a new batch goes
/// in whenever one fits, while the KC runs the previous one. Returns the failures.
fn ring_pipelined(r: &mut Ring, batches: u64) -> Result<u64, String> {
    let reqs = [(nr::NULL, [0u64; 6]); RING_BATCH as usize];
    let (mut submitted, mut collected, mut failures, mut misses) = (0, 0, 0, 0u32);
    while collected < batches * RING_BATCH {
        if submitted < batches * RING_BATCH && r.slots() - r.in_flight() >= RING_BATCH && r.submit_batch(&reqs).is_ok() {
            submitted += RING_BATCH;
            r.kick().map_err(|e| format!("kick: {e:?}"))?;
        }
        match r.poll() {
            Some((_, res)) => {
                collected += 1;
                failures += (res != Ok(0)) as u64;
            }
            None if r.status() != RING_ATTACHED => return Err(format!("ring status {} while pipelining", r.status())),
            // A pause per 16 misses, as `Ring::wait` does.
            None => {
                misses = misses.wrapping_add(1);
                if misses % 16 == 0 {
                    core::hint::spin_loop();
                }
            }
        }
    }
    Ok(failures)
}

fn main(args: &'static str) -> u64 {
    if args.split_whitespace().next() == Some("bench") {
        return bench(args);
    }
    let placement = match Placement::read() {
        Ok(p) => p,
        Err(why) => {
            libos::println!("utest placement ... FAILED: {why}");
            libos::println!("utest: done 0 passed, 1 failed, 0 skipped");
            return 1;
        }
    };
    libos::println!("roletest: roles in effect: {} (roletest on core {})", placement.describe(), placement.me);
    let tests: [(&str, fn(&Placement) -> TestResult); 6] = [
        ("ac_forwarding", t_ac_forwarding),
        ("role_change_under_load", t_role_change_under_load),
        ("kc_refuses_contexts", t_kc_refuses_contexts),
        ("syscall_ring", t_syscall_ring),
        ("syscall_ring_from_ac", t_syscall_ring_from_ac),
        ("forwarding_after_the_serving_kc_leaves", t_forwarding_after_the_serving_kc_leaves),
    ];
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, f) in tests {
        match f(&placement) {
            Ok(None) => {
                passed += 1;
                libos::println!("utest {name} ... ok");
            }
            Ok(Some(needs)) => {
                skipped += 1;
                libos::println!("utest {name} ... skipped ({needs}; roles: {})", placement.describe());
            }
            Err(why) => {
                failed += 1;
                libos::println!("utest {name} ... FAILED: {why}");
            }
        }
    }
    // Lock spinning over the whole run (the core roles' instrumentation; informational).
    let tpm = libos::time::tsc_per_ms().max(1);
    let ncores = sys::sys_info().map(|i| i.cores).unwrap_or(0);
    for c in 0..ncores {
        if let Ok(st) = sys::core_stats(c) {
            libos::println!(
                "roletest: core {c} ({}): {} lock acquisitions waited, {} us spinning (TSC, emulated)",
                abi::role_name(st.role),
                st.lock_spin_waits,
                st.lock_spin_cycles * 1000 / tpm
            );
        }
    }
    libos::println!("utest: done {passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 && passed > 0 { 0 } else { 1 }
}
