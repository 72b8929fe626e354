//! The core scheduler on core 0 (NIX's asymmetric scheduling; `kernel/src/coresched.rs`).
//! Boot with `sched=core0 init=schedtest` on 4 vCPUs: this program runs on core 0, cores 1-3
//! are the pool. Checks: a grant and its release, exhaustion (`Busy`) and reuse, cores that
//! run a context are not granted, the locality and role arguments, bad arguments, two
//! owners getting disjoint cores (and `pcore_run` on the other's core refused), an owner's
//! cores coming back when its context ends, requests racing from three cores never
//! granting one core twice, and a request forwarded from an AC through a kernel core. `init=schedtest -- off` (no `sched=`) checks that the calls are
//! `Unsupported`; `-- bench` measures a grant round trip (request + release) from core 0
//! and from core 1. Prints `utest NAME ... ok|FAILED` lines like utest.
//!
//! Contexts on other cores talk to this one through one shared page (`SCRATCH_BASE`).
#![no_std]
#![no_main]

use abi::{nr, Error, ObjName, CORE_ALL, GRANT_ROLE_ANY, NEAR_CALLER, ROLE_AC, ROLE_KC, ROLE_TC, ROLE_XC};
use core::sync::atomic::Ordering;
use libos::cores::CoreCtx;
use libos::{println, sys};

libos::main!(main);

#[path = "../common/testkit.rs"]
#[macro_use]
mod testkit;
use testkit::*;

/// Words of the shared page.
const B_CORE: usize = 0; // the core B got (or 1000 + error code)
const B_ASKED: usize = 1; // B made its first request
const A_DONE: usize = 2; // A made its requests: B may go on
const B_BUSY: usize = 3; // B's second request (encoded result)
const B_REL: usize = 4; // B releasing A's core (encoded result)
const A_CORE2: usize = 6; // A's second core
const GO: usize = 10; // racers start
const HOLD: usize = 16; // HOLD + core: racer holding it (1 + racer), 0 = none
const ERRS: usize = 32; // ERRS + racer: problems seen
const GRANTS: usize = 40; // GRANTS + racer: grants it got
const BUSIES: usize = 48; // BUSIES + racer: Busy answers it got
const FINISHED: usize = 56; // racers done
const STOP: usize = 60; // spinners return
const BENCH_NS: usize = 64; // remote bench result
const JOIN_MS: u64 = 120_000;
const WAIT_MS: u64 = 60_000;
const RACE_ROUNDS: u64 = 300;
const BENCH_ROUNDS: u64 = 2000;


fn encode(r: Result<u64, Error>) -> u64 {
    abi::encode(r) as u64
}

fn decode(v: u64) -> Result<u64, Error> {
    abi::decode(v as i64)
}

fn wait_word(i: usize) -> bool {
    libos::time::wait_until(WAIT_MS, || shared()[i].load(Ordering::Acquire) != 0)
}

fn granted_to(core: u64) -> u64 {
    sys::core_stats(core).map(|s| s.granted_to).unwrap_or(u64::MAX)
}

fn sched_messages() -> u64 {
    sys::core_stats(0).map(|s| s.sched_messages).unwrap_or(0)
}

/// No core is granted to anyone.
fn none_granted() -> Result<(), Msg> {
    for c in 0..cores() {
        let g = granted_to(c);
        ensure!(g == 0, "core {c} is still granted to {g:#x}");
    }
    Ok(())
}

/// Whatever a test leaves granted is released, so the next one starts from a full pool.
fn cleanup() {
    let _ = sys::core_release(CORE_ALL);
}

fn request1(role: u64, near: u64) -> Result<u64, Error> {
    let mut c = [0u64; 1];
    sys::core_request(&mut c, role, near).map(|_| c[0])
}

fn t_off() -> TestResult {
    let mut c = [0u64; 1];
    err!(sys::core_request(&mut c, GRANT_ROLE_ANY, NEAR_CALLER), Error::Unsupported);
    err!(sys::core_request(&mut [], 99, 1 << 40), Error::Unsupported);
    err!(sys::core_release(1), Error::Unsupported);
    err!(sys::core_release(CORE_ALL), Error::Unsupported);
    none_granted()?;
    ensure!(sched_messages() == 0, "core 0 counted {} scheduler messages with the scheduler off", sched_messages());
    Ok(Pass::Ok)
}

fn t_basic() -> TestResult {
    let m0 = sched_messages();
    let c = ok!(request1(GRANT_ROLE_ANY, NEAR_CALLER));
    ensure!((1..cores()).contains(&c), "granted core {c}, want one of 1..{}", cores());
    ensure!(granted_to(c) == root(), "core {c} granted to {:#x}, want our root share {:#x}", granted_to(c), root());
    ensure!(ok!(sys::core_release(c)) == 1, "release did not report one core");
    ensure!(granted_to(c) == 0, "core {c} still granted after release");
    err!(sys::core_release(c), Error::NotFound);
    let m = sched_messages() - m0;
    // A request and a release went through core 0's mailbox (the refused second release
    // did not: the caller sees from the table that it holds nothing).
    ensure!(m == 2, "core 0 ran {m} scheduler messages, want 2");
    none_granted()?;
    Ok(Pass::Ok)
}

fn t_exhaust_reuse() -> TestResult {
    let n = cores() - 1;
    let mut all = [0u64; 8];
    let all = &mut all[..n as usize];
    ensure!(ok!(sys::core_request(all, GRANT_ROLE_ANY, NEAR_CALLER)) == n, "short grant");
    let mut seen = [false; 8];
    for &c in all.iter() {
        ensure!((1..cores()).contains(&c) && !seen[c as usize], "grant {all:?} is not the {n} cores 1..");
        seen[c as usize] = true;
    }
    err!(request1(GRANT_ROLE_ANY, NEAR_CALLER), Error::Busy);
    let back = all[n as usize - 1];
    ok!(sys::core_release(back));
    let again = ok!(request1(GRANT_ROLE_ANY, NEAR_CALLER));
    ensure!(again == back, "after releasing core {back} the next grant was {again}");
    ensure!(ok!(sys::core_release(CORE_ALL)) == n, "CORE_ALL did not release {n} cores");
    none_granted()?;
    ensure!(ok!(sys::core_request(all, GRANT_ROLE_ANY, NEAR_CALLER)) == n, "pool not whole again");
    cleanup();
    none_granted()?;
    Ok(Pass::Ok)
}

/// On another core: spin until `STOP`.
fn spinner(_c: &CoreCtx) -> u64 {
    while shared()[STOP].load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    0
}

fn t_skips_busy() -> TestResult {
    let page = SharedPage::new("sched-shared")?;
    let busy = cores() - 1;
    // A context started on a core nobody was granted (allowed: the scheduler does not own
    // every core, only the ones it grants).
    let mut sp = page.core(busy)?;
    ok!(sp.start(spinner, 0));
    let n = cores() - 1;
    let mut all = [0u64; 8];
    // The busy core is not free: asking for every core fails as a whole...
    let r = sys::core_request(&mut all[..n as usize], GRANT_ROLE_ANY, NEAR_CALLER);
    let r2 = sys::core_request(&mut all[..n as usize - 1], GRANT_ROLE_ANY, busy);
    shared()[STOP].store(1, Ordering::Release);
    let code = ok!(sp.join(JOIN_MS));
    ensure!(code == 0, "spinner ended with {code}");
    err!(r, Error::Busy);
    // ...and the others are granted without it, even when asked for near it.
    ok!(r2);
    ensure!(all[..n as usize - 1].iter().all(|&c| c != busy && c != 0), "granted {:?}, which includes the busy core {busy}", &all[..n as usize - 1]);
    cleanup();
    none_granted()?;
    Ok(Pass::Ok)
}

fn t_near() -> TestResult {
    for want in 1..cores() {
        let c = ok!(request1(GRANT_ROLE_ANY, want));
        ensure!(c == want, "asked near core {want}, got {c} (a free core is nearest to itself)");
        ok!(sys::core_release(c));
    }
    none_granted()?;
    Ok(Pass::Ok)
}

fn t_role() -> TestResult {
    let c = ok!(request1(ROLE_TC, NEAR_CALLER));
    let role = ok!(sys::core_stats(c)).role;
    ensure!(role == ROLE_TC, "granted core {c} is {}, want TC", abi::role_name(role));
    ok!(sys::core_release(c));
    // Back to XC through the scheduler too.
    let d = ok!(request1(ROLE_XC, c));
    ensure!(d == c, "asked near {c}, got {d}");
    ensure!(ok!(sys::core_stats(c)).role == ROLE_XC, "core {c} did not become XC again");
    ok!(sys::core_release(c));
    // An AC needs a kernel core; there is none here: refused, nothing granted, no role
    // changed.
    let roles: [u64; 8] = core::array::from_fn(|i| sys::core_stats(i as u64).map(|s| s.role).unwrap_or(99));
    err!(request1(ROLE_AC, NEAR_CALLER), Error::NoSuchCore);
    let mut two = [0u64; 2];
    err!(sys::core_request(&mut two, ROLE_AC, NEAR_CALLER), Error::NoSuchCore);
    for i in 0..cores() {
        ensure!(sys::core_stats(i).map(|s| s.role).unwrap_or(99) == roles[i as usize], "core {i} changed role on a refused request");
    }
    none_granted()?;
    Ok(Pass::Ok)
}

fn t_bad_args() -> TestResult {
    let n = cores();
    let mut buf = [0u64; 16];
    let p = buf.as_mut_ptr() as u64;
    let req = |a: [u64; 6]| raw(nr::CORE_REQUEST, a);
    err!(req([0, GRANT_ROLE_ANY, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    // Core 0 is never granted: `cores` is more than could ever be free.
    err!(req([n, GRANT_ROLE_ANY, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    err!(req([u64::MAX, GRANT_ROLE_ANY, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    err!(req([1 << 40, GRANT_ROLE_ANY, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    err!(req([1, ROLE_KC, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    err!(req([1, 7, NEAR_CALLER, p, 0, 0]), Error::InvalidArgument);
    err!(req([1, GRANT_ROLE_ANY, n, p, 0, 0]), Error::NoSuchCore);
    err!(req([1, GRANT_ROLE_ANY, 1 << 40, p, 0, 0]), Error::NoSuchCore);
    // Buffers that cannot take the answer: nothing is granted.
    err!(req([1, GRANT_ROLE_ANY, NEAR_CALLER, 0, 0, 0]), Error::BadAddress);
    err!(req([1, GRANT_ROLE_ANY, NEAR_CALLER, 0xFFFF_8000_0000_0000, 0, 0]), Error::BadAddress);
    err!(req([1, GRANT_ROLE_ANY, NEAR_CALLER, 0x0000_8000_0000_0000 - 4, 0, 0]), Error::BadAddress);
    err!(req([1, GRANT_ROLE_ANY, NEAR_CALLER, 0x10_0000_0000, 0, 0]), Error::BadAddress); // unmapped
    err!(req([2, GRANT_ROLE_ANY, NEAR_CALLER, main as *const () as usize as u64, 0, 0]), Error::BadAddress); // read-only text
    none_granted()?;
    // Releases of cores we do not hold.
    err!(sys::core_release(n), Error::NoSuchCore);
    err!(sys::core_release(1 << 50), Error::NoSuchCore);
    err!(sys::core_release(0), Error::NotFound);
    err!(sys::core_release(1), Error::NotFound);
    ensure!(ok!(sys::core_release(CORE_ALL)) == 0, "CORE_ALL released something we did not hold");
    // Garbage in every register.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..200 {
        let mut a = [0u64; 6];
        for v in a.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *v = x;
        }
        // Small counts sometimes, so some garbage reaches the buffer check and the grant.
        if x & 1 == 0 {
            a[0] &= 3;
        }
        if x & 2 == 0 {
            a[3] = p;
        }
        let r = req(a);
        let r2 = raw(nr::CORE_RELEASE, [a[1], a[0], a[2], 0, 0, 0]);
        if r.is_ok() {
            let _ = sys::core_release(CORE_ALL);
        }
        let _ = r2;
    }
    cleanup();
    none_granted()?;
    Ok(Pass::Ok)
}

/// Context B of `t_two_owners`, on A's first core.
fn owner_b(_c: &CoreCtx) -> u64 {
    let sh = shared();
    let mut one = [0u64; 1];
    let r = sys::core_request(&mut one, GRANT_ROLE_ANY, NEAR_CALLER);
    sh[B_CORE].store(r.map(|_| one[0]).unwrap_or_else(|e| 1000 + e as u64), Ordering::Release);
    sh[B_ASKED].store(1, Ordering::Release);
    if !libos::time::wait_until(WAIT_MS, || sh[A_DONE].load(Ordering::Acquire) != 0) {
        return 2;
    }
    sh[B_BUSY].store(encode(sys::core_request(&mut one, GRANT_ROLE_ANY, NEAR_CALLER)), Ordering::Release);
    let a2 = sh[A_CORE2].load(Ordering::Acquire);
    sh[B_REL].store(encode(sys::core_release(a2)), Ordering::Release);
    // Ends holding its core: the kernel gives it back.
    0
}

fn t_two_owners() -> TestResult {
    if cores() < 4 {
        return Ok(Pass::Skipped("needs 4 cores"));
    }
    let page = SharedPage::new("sched-shared")?;
    let sh = shared();
    let a1 = ok!(request1(GRANT_ROLE_ANY, NEAR_CALLER));
    let mut b = page.core(a1)?;
    // Our own granted core: ours to run.
    ok!(b.start(owner_b, a1));
    ensure!(wait_word(B_ASKED), "context B never asked");
    let b1 = sh[B_CORE].load(Ordering::Acquire);
    ensure!(b1 < 1000, "B's request failed: {:?}", Error::from_code((b1 - 1000) as i64));
    ensure!(b1 != a1 && b1 != 0 && b1 < cores(), "B got core {b1}; A holds {a1}");
    let b_owner = granted_to(b1);
    ensure!(b_owner != 0 && b_owner != root(), "core {b1} is granted to {b_owner:#x}, not to B (A is {:#x})", root());
    let a2 = ok!(request1(GRANT_ROLE_ANY, NEAR_CALLER));
    ensure!(a2 != a1 && a2 != b1, "A's second core {a2} is not new (A {a1}, B {b1})");
    // B's core is B's: A may make a pcore for it but not run it.
    let mut other = page.core(b1)?;
    err!(other.start(spinner, 0), Error::NotPermitted);
    drop(other);
    sh[A_CORE2].store(a2, Ordering::Release);
    sh[A_DONE].store(1, Ordering::Release);
    let code = ok!(b.join(JOIN_MS));
    ensure!(code == 0, "B ended with {code}");
    // The pool was empty (A two, B one of three): B's second request was refused, and B
    // cannot release A's core.
    err!(decode(sh[B_BUSY].load(Ordering::Acquire)), Error::Busy);
    err!(decode(sh[B_REL].load(Ordering::Acquire)), Error::NotFound);
    ensure!(granted_to(a2) == root(), "A's core {a2} lost its grant");
    // B ended holding b1: it is free again, and ours for the asking.
    ensure!(granted_to(b1) == 0, "core {b1} still granted to {:#x} after B ended", granted_to(b1));
    let again = ok!(request1(GRANT_ROLE_ANY, b1));
    ensure!(again == b1, "asked for B's old core {b1}, got {again}");
    drop(b);
    cleanup();
    none_granted()?;
    Ok(Pass::Ok)
}

/// On an AC: ask for a core (the call is forwarded to the kernel core), check it is ours,
/// give it back. Exit code: the core got, or 100 + the error, or 200 + a failed check.
fn from_ac(c: &CoreCtx) -> u64 {
    let fwd0 = sys::core_stats(c.core).map(|s| s.syscalls_forwarded).unwrap_or(0);
    let mut one = [0u64; 1];
    if let Err(e) = sys::core_request(&mut one, GRANT_ROLE_ANY, NEAR_CALLER) {
        return 100 + e as u64;
    }
    if granted_to(one[0]) != c.root_share {
        return 201;
    }
    if sys::core_release(one[0]) != Ok(1) {
        return 202;
    }
    if sys::core_stats(c.core).map(|s| s.syscalls_forwarded).unwrap_or(0) < fwd0 + 4 {
        return 203; // the calls did not go through the kernel core
    }
    one[0]
}

fn t_from_ac() -> TestResult {
    if cores() < 4 {
        return Ok(Pass::Skipped("needs 4 cores"));
    }
    let page = SharedPage::new("sched-shared")?;
    let kc = cores() - 1;
    let kc_pcore = ObjName::new(root(), ok!(sys::pcore_alloc(root(), "sched-kc", kc)));
    let _del = Del(kc_pcore);
    ok!(sys::pcore_set_role(kc_pcore, ROLE_KC));
    let r = (|| -> TestResult {
        // A kernel core is never granted; an AC grant now works.
        let ac = ok!(request1(ROLE_AC, 1));
        ensure!(ac == 1, "asked near core 1, got {ac}");
        ensure!(ok!(sys::core_stats(ac)).role == ROLE_AC, "core {ac} did not become an AC");
        let mut b = page.core(ac)?;
        ok!(b.start(from_ac, 0));
        let code = ok!(b.join(JOIN_MS));
        ensure!(code != 0 && code != ac && code != kc && code < cores(), "the AC's request ended with {code} (core, 100 + error, or 200 + check)");
        drop(b);
        // Back to an XC through the scheduler.
        ok!(sys::core_release(ac));
        ensure!(ok!(request1(ROLE_XC, ac)) == ac, "could not take core {ac} back");
        ok!(sys::core_release(ac));
        Ok(Pass::Ok)
    })();
    ok!(sys::pcore_set_role(kc_pcore, ROLE_XC));
    r?;
    none_granted()?;
    Ok(Pass::Ok)
}

/// One racer: `RACE_ROUNDS` times ask for a core, check nobody else holds it, give it back.
fn race(me: usize, owner: u64) {
    let sh = shared();
    let mut errs = 0;
    for _ in 0..RACE_ROUNDS {
        let mut one = [0u64; 1];
        match sys::core_request(&mut one, GRANT_ROLE_ANY, NEAR_CALLER) {
            Ok(_) => {
                let c = one[0] as usize;
                sh[GRANTS + me].fetch_add(1, Ordering::Relaxed);
                if c == 0 || c >= 8 || sh[HOLD + c].compare_exchange(0, 1 + me as u64, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    errs += 1; // granted a core someone else holds
                    continue;
                }
                if granted_to(c as u64) != owner {
                    errs += 1;
                }
                for _ in 0..50 {
                    core::hint::spin_loop();
                }
                sh[HOLD + c].store(0, Ordering::Release);
                if sys::core_release(c as u64) != Ok(1) {
                    errs += 1;
                }
            }
            Err(Error::Busy) => {
                sh[BUSIES + me].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => errs += 1,
        }
    }
    sh[ERRS + me].store(errs, Ordering::Release);
    sh[FINISHED].fetch_add(1, Ordering::AcqRel);
}

fn racer(c: &CoreCtx) -> u64 {
    while shared()[GO].load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    race(c.arg as usize, c.root_share);
    0
}

fn t_race() -> TestResult {
    if cores() < 4 {
        return Ok(Pass::Skipped("needs 4 cores"));
    }
    let page = SharedPage::new("sched-shared")?;
    let sh = shared();
    // Racers on cores 1 and 2 (not granted: started directly), and us on core 0; the pool
    // is core 3 alone, so every round is a contest.
    let mut rs = [page.core(1)?, page.core(2)?];
    for (i, r) in rs.iter_mut().enumerate() {
        ok!(r.start(racer, 1 + i as u64));
    }
    sh[GO].store(1, Ordering::Release);
    race(0, root());
    for r in rs.iter_mut() {
        let code = ok!(r.join(JOIN_MS));
        ensure!(code == 0, "racer ended with {code}");
    }
    let mut total = 0;
    for i in 0..3 {
        let e = sh[ERRS + i].load(Ordering::Acquire);
        ensure!(e == 0, "racer {i} saw {e} double grants or failed releases");
        total += sh[GRANTS + i].load(Ordering::Acquire);
    }
    let busy: u64 = (0..3).map(|i| sh[BUSIES + i].load(Ordering::Acquire)).sum();
    println!("schedtest: 3 racers x {RACE_ROUNDS} requests for 1 free core: {total} grants, {busy} Busy, no double grant");
    ensure!(total > 0, "no racer ever got the free core");
    ensure!(total + busy == 3 * RACE_ROUNDS, "{total} grants + {busy} Busy != {} requests", 3 * RACE_ROUNDS);
    none_granted()?;
    Ok(Pass::Ok)
}

/// `BENCH_ROUNDS` grant round trips (request + release of one core); ns per round trip.
fn bench_loop() -> u64 {
    let t0 = libos::time::ticks();
    for _ in 0..BENCH_ROUNDS {
        let mut one = [0u64; 1];
        if sys::core_request(&mut one, GRANT_ROLE_ANY, NEAR_CALLER).is_err() || sys::core_release(one[0]).is_err() {
            return u64::MAX;
        }
    }
    libos::time::ticks_to_ns(libos::time::ticks() - t0) / BENCH_ROUNDS
}

fn bench_remote(_c: &CoreCtx) -> u64 {
    shared()[BENCH_NS].store(bench_loop(), Ordering::Release);
    0
}

fn t_bench() -> TestResult {
    let page = SharedPage::new("sched-shared")?;
    let t0 = libos::time::ticks();
    for _ in 0..BENCH_ROUNDS {
        ok!(sys::null());
    }
    let null_ns = libos::time::ticks_to_ns(libos::time::ticks() - t0) / BENCH_ROUNDS;
    let local = bench_loop();
    ensure!(local != u64::MAX, "a local grant failed");
    let mut r = page.core(1)?;
    ok!(r.start(bench_remote, 0));
    ensure!(ok!(r.join(JOIN_MS)) == 0, "remote bench failed");
    let remote = shared()[BENCH_NS].load(Ordering::Acquire);
    ensure!(remote != u64::MAX, "a remote grant failed");
    println!("schedtest: bench {BENCH_ROUNDS} rounds: null call {null_ns} ns; grant round trip (request + release) from core 0 {local} ns, from core 1 {remote} ns");
    none_granted()?;
    Ok(Pass::Ok)
}

fn main(args: &'static str) -> u64 {
    let mut tally = Tally::default();
    let words = || args.split_whitespace();
    if words().any(|w| w == "off") {
        tally.record("sched_off", t_off());
        return tally.finish();
    }
    if words().any(|w| w == "bench") {
        tally.record("sched_bench", t_bench());
        return tally.finish();
    }
    // Everything below needs the scheduler on.
    if sys::core_release(CORE_ALL) == Err(Error::Unsupported) {
        tally.record("sched_on", Err(Msg::new(format_args!("core_release is Unsupported: boot with sched=core0"))));
        return tally.finish();
    }
    let tests: [(&str, fn() -> TestResult); 9] = [
        ("sched_basic", t_basic),
        ("sched_exhaust_reuse", t_exhaust_reuse),
        ("sched_skips_busy", t_skips_busy),
        ("sched_near", t_near),
        ("sched_role", t_role),
        ("sched_bad_args", t_bad_args),
        ("sched_two_owners", t_two_owners),
        ("sched_race", t_race),
        ("sched_from_ac", t_from_ac),
    ];
    for (name, f) in tests {
        if selected(args, name) {
            tally.record(name, f());
            cleanup();
        }
    }
    tally.finish()
}
