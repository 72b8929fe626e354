//! The guest half of the commutativity checker (docs/commute.md): runs the two-core test of
//! each selected case of `testdefs::commute_cases` (one table for host and guest, in
//! `crates/testdefs`), so one boot runs many cases under the sharing audit.
//!
//! `init=commute -- [calls=a,b,...] [pick=I,J-K,...]`: the cases whose both calls are in
//! `calls` (default: all), or only the listed case indices. For each case, on core 0:
//! build the fixture afresh, let both cores settle, then call A runs on core 0 and call B on
//! a thread on core 1, each between its own vCPU's region markers (start 1, stop 2); once both
//! are done core 0 executes the epoch marker (5), which makes the sharing plugin report the
//! lines one core wrote and the other touched during the case, and tears the fixture down.
//! Prints `commute-case i=N a=RESULT b=RESULT` per case (results in the model's format, so the
//! host checks them against the model) and `commute-done cases=N` at the end.
#![no_std]
#![no_main]

extern crate alloc;

use testdefs::commute_cases as cases;

use abi::{ArKind, ArMapping, Error, ObjName, ObjectId, SegMapping, COPY_EAGER, COPY_ON_WRITE, MAP_READ, MAP_WRITE, MEMID_SELF};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use cases::{Case, Name, Op, Sym, FIXTURE_SEG_PAGES, NEW_SEG_BYTES, PAGE, SYMS};
use core::fmt::Write;
use core::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use libos::sys;

libos::main!(main);

#[path = "../common/marker.rs"]
mod marker;


/// The fixture's object ids, by `Sym` (index in `SYMS`).
#[derive(Clone, Copy, Default)]
struct Fixture {
    ids: [ObjectId; 6],
}

impl Fixture {
    fn id(&self, s: Sym) -> ObjectId {
        self.ids[SYMS.iter().position(|x| *x == s).unwrap_or(0)]
    }
    fn name(&self, n: Name) -> ObjName {
        ObjName::new(self.id(n.0), self.id(n.1))
    }
}

/// What one call returned: the encoded result and the values it wrote (stat, list, name,
/// mappings).
#[derive(Clone, Copy)]
struct Raw {
    code: i64,
    vals: [u64; RAW_VALS],
    n: usize,
}

const RAW_VALS: usize = 32;

impl Raw {
    fn new() -> Raw {
        Raw { code: 0, vals: [0; RAW_VALS], n: 0 }
    }
}

fn enc<T>(r: Result<T, Error>, ok: impl FnOnce(T) -> i64) -> i64 {
    match r {
        Ok(v) => ok(v),
        Err(e) => -(e as i64),
    }
}

/// Run `op` on the fixture. Everything the call needs is prepared by the caller's stack here;
/// nothing is allocated on the heap (the region holds the call alone).
fn exec(op: Op, fx: &Fixture, raw: &mut Raw) {
    raw.n = 0;
    raw.code = match op {
        Op::Null => enc(sys::null(), |v| v as i64),
        Op::TimeNow => enc(sys::time_now(), |_| 0),
        Op::PcoreCurrent => enc(sys::pcore_current(), |v| (v == libos::ctx::ctx().pcore.object) as i64),
        Op::SelfShares => {
            let mut ids = [0u64; RAW_VALS];
            let r = sys::self_shares(&mut ids);
            if let Ok(n) = r {
                // The first id is the caller's root share: the result names the caller.
                raw.vals[0] = (ids[0] == libos::ctx::ctx().root_share) as u64;
                raw.n = n as usize;
            }
            enc(r, |v| v as i64)
        }
        Op::ObjStat(n) => enc(sys::obj_stat(fx.name(n)), |st| {
            raw.vals[0] = st.obj_type as u64;
            raw.vals[1] = st.refs;
            raw.n = 2;
            0
        }),
        Op::ObjGetName(n) => {
            let mut buf = [0u8; 32];
            let r = sys::obj_get_name(fx.name(n), &mut buf);
            for (i, chunk) in buf.chunks(8).enumerate() {
                raw.vals[i] = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            }
            raw.n = 4;
            enc(r, |v| v as i64)
        }
        Op::ShareAlloc(p) => enc(sys::share_alloc(fx.id(p), "new", MEMID_SELF, 0), |v| v as i64),
        Op::ShareAddobj { dst, src } => enc(sys::share_addobj(fx.id(dst), fx.name(src)), |v| v as i64),
        Op::ShareDelobj(n) => enc(sys::share_delobj(fx.name(n)), |v| v as i64),
        Op::ShareList(s) => {
            let mut ids = [0u64; RAW_VALS];
            let r = sys::share_list(fx.id(s), &mut ids);
            if let Ok(n) = r {
                raw.vals = ids;
                raw.n = n as usize;
            }
            enc(r, |v| v as i64)
        }
        Op::SegmentAlloc(s) => enc(sys::segment_alloc(fx.id(s), "new", MEMID_SELF, NEW_SEG_BYTES), |v| v as i64),
        Op::SegmentCopy { dst, src } => enc(sys::segment_copy(fx.id(dst), fx.name(src), "new", COPY_EAGER), |v| v as i64),
        Op::SegmentCopyCow { dst, src } => enc(sys::segment_copy(fx.id(dst), fx.name(src), "new", COPY_ON_WRITE), |v| v as i64),
        Op::SegmentGetNbytes(n) => enc(sys::segment_get_nbytes(fx.name(n)), |v| v as i64),
        Op::SegmentSetNbytes(n, pages) => enc(sys::segment_set_nbytes(fx.name(n), pages * PAGE), |v| v as i64),
        Op::ArAlloc(s) => enc(sys::ar_alloc(fx.id(s), "new", MEMID_SELF, ArKind::Span2M), |v| v as i64),
        Op::ArSetSeg { ar, voff, seg, soff, len } => {
            let m = SegMapping { voff: voff * PAGE, seg: fx.name(seg), soff: soff * PAGE, len: len * PAGE, flags: MAP_READ | MAP_WRITE };
            enc(sys::ar_set_seg(fx.name(ar), &m), |v| v as i64)
        }
        Op::ArGet(n) => {
            let mut maps = [ArMapping::default(); RAW_VALS / 4];
            let r = sys::ar_get(fx.name(n), &mut maps);
            if let Ok(k) = r {
                for (i, m) in maps[..k as usize].iter().enumerate() {
                    raw.vals[4 * i..4 * i + 4].copy_from_slice(&[m.voff, m.len, m.target, m.soff]);
                }
                raw.n = 4 * k as usize;
            }
            enc(r, |v| v as i64)
        }
        Op::ArUnmap { ar, voff, len } => enc(sys::ar_unmap(fx.name(ar), voff * PAGE, len * PAGE), |v| v as i64),
    };
}

/// A result in the model's format (`xtask/src/commute/model.rs`).
fn format(op: Op, raw: &Raw, fx: &Fixture, new_a: Option<u64>, new_b: Option<u64>) -> String {
    if raw.code < 0 {
        return match Error::from_code(-raw.code) {
            Some(e) => alloc::format!("E:{e:?}"),
            None => alloc::format!("E:{}", -raw.code),
        };
    }
    let label = |id: u64| -> String {
        if let Some(s) = SYMS.iter().find(|s| fx.id(**s) == id) {
            s.name().to_string()
        } else if Some(id) == new_a {
            "newA".into()
        } else if Some(id) == new_b {
            "newB".into()
        } else {
            alloc::format!("?{id}")
        }
    };
    let v = raw.code as u64;
    match op {
        Op::TimeNow => "t".into(),
        Op::PcoreCurrent => (if v == 1 { "self" } else { "other" }).into(),
        Op::SelfShares => (if raw.vals[0] == 1 { "own" } else { "other" }).into(),
        Op::ObjStat(_) => {
            let t = match raw.vals[0] {
                1 => "share",
                2 => "segment",
                3 => "ar",
                _ => "other",
            };
            alloc::format!("{t}/refs={}", raw.vals[1])
        }
        Op::ObjGetName(_) => {
            let mut bytes = Vec::new();
            for w in &raw.vals[..4] {
                bytes.extend_from_slice(&w.to_le_bytes());
            }
            String::from_utf8_lossy(&bytes[..(v as usize).min(32)]).into_owned()
        }
        Op::ShareAlloc(_) | Op::SegmentAlloc(_) | Op::SegmentCopy { .. } | Op::SegmentCopyCow { .. } | Op::ArAlloc(_) => label(v),
        Op::ShareList(_) => {
            let mut l: Vec<String> = raw.vals[..raw.n].iter().map(|&id| label(id)).collect();
            l.sort();
            alloc::format!("[{}]", l.join(","))
        }
        Op::ArGet(_) => {
            let l: Vec<String> = raw.vals[..raw.n]
                .chunks(4)
                .map(|m| alloc::format!("{}+{}:{}@{}", m[0] / PAGE, m[1] / PAGE, label(m[2]), m[3] / PAGE))
                .collect();
            alloc::format!("[{}]", l.join(","))
        }
        _ => v.to_string(),
    }
}

fn new_id(op: Op, raw: &Raw) -> Option<u64> {
    match op {
        Op::ShareAlloc(_) | Op::SegmentAlloc(_) | Op::SegmentCopy { .. } | Op::SegmentCopyCow { .. } | Op::ArAlloc(_) if raw.code > 0 => Some(raw.code as u64),
        _ => None,
    }
}

fn build_fixture() -> Result<Fixture, Error> {
    let sa = libos::process::new_share("sa", MEMID_SELF)?;
    let sb = match libos::process::new_share("sb", MEMID_SELF) {
        Ok(s) => s,
        Err(e) => {
            libos::process::del_share(sa);
            return Err(e);
        }
    };
    let mut fx = Fixture::default();
    fx.ids[0] = sa;
    fx.ids[1] = sb;
    let rest = (|| -> Result<(), Error> {
        let x = sys::segment_alloc(sa, "x", MEMID_SELF, FIXTURE_SEG_PAGES * PAGE)?;
        sys::share_addobj(sb, ObjName::new(sa, x))?;
        let y = sys::segment_alloc(sa, "y", MEMID_SELF, FIXTURE_SEG_PAGES * PAGE)?;
        let r = sys::ar_alloc(sa, "r", MEMID_SELF, ArKind::Span2M)?;
        sys::ar_set_seg(ObjName::new(sa, r), &SegMapping { voff: 0, seg: ObjName::new(sa, x), soff: 0, len: PAGE, flags: MAP_READ | MAP_WRITE })?;
        let q = sys::ar_alloc(sa, "q", MEMID_SELF, ArKind::Span2M)?;
        fx.ids[2..].copy_from_slice(&[x, y, r, q]);
        Ok(())
    })();
    if let Err(e) = rest {
        teardown(&fx);
        return Err(e);
    }
    Ok(fx)
}

/// Drop the fixture's shares: everything a case made lives in them and goes with them.
fn teardown(fx: &Fixture) {
    libos::process::del_share(fx.ids[0]);
    libos::process::del_share(fx.ids[1]);
}

// The handshake between core 0 and the worker on core 1 (user memory: outside the region's
// kernel-only audit, and outside the region in time anyway).
static PHASE: AtomicU64 = AtomicU64::new(0);
static WORKER_DONE: AtomicU64 = AtomicU64::new(0);
static CASE: AtomicUsize = AtomicUsize::new(0);
static FIX: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
static RAW_CODE: AtomicI64 = AtomicI64::new(0);
static RAW_N: AtomicUsize = AtomicUsize::new(0);
static RAW: [AtomicU64; RAW_VALS] = [const { AtomicU64::new(0) }; RAW_VALS];
/// PHASE value that ends the worker.
const QUIT: u64 = u64::MAX;

/// Phases: 2k+1 = settle before case k (both cores make a system call, so work a previous
/// case left, such as remote frees, is done outside the region); 2k+2 = run case k.
fn wait_phase(p: u64) -> bool {
    loop {
        let v = PHASE.load(Ordering::Acquire);
        if v == QUIT {
            return false;
        }
        if v == p {
            return true;
        }
        core::hint::spin_loop();
    }
}

fn wait_done(p: u64) {
    while WORKER_DONE.load(Ordering::Acquire) != p {
        core::hint::spin_loop();
    }
}

fn worker(_arg: u64) -> u64 {
    let mut p = 1;
    loop {
        if !wait_phase(p) {
            return 0;
        }
        if p % 2 == 1 {
            let _ = sys::null();
            let _ = sys::null();
        } else {
            let mut fx = Fixture::default();
            for (i, f) in FIX.iter().enumerate() {
                fx.ids[i] = f.load(Ordering::Relaxed);
            }
            let Some(case) = testdefs::pairs::case(cases::CALLS, CASE.load(Ordering::Relaxed)) else { return 1 };
            let mut raw = Raw::new();
            marker::region(true);
            exec(case.b, &fx, &mut raw);
            marker::region(false);
            RAW_CODE.store(raw.code, Ordering::Relaxed);
            RAW_N.store(raw.n, Ordering::Relaxed);
            for (i, v) in raw.vals.iter().enumerate() {
                RAW[i].store(*v, Ordering::Relaxed);
            }
        }
        WORKER_DONE.store(p, Ordering::Release);
        p += 1;
    }
}

/// Parse `pick=I,J-K`.
fn parse_pick(v: &str, n: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in v.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (a.parse::<usize>().map_err(|_| alloc::format!("pick: `{part}`"))?, b.parse::<usize>().map_err(|_| alloc::format!("pick: `{part}`"))?);
        if a > b || b >= n {
            return Err(alloc::format!("pick: `{part}` out of range (0..{n})"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

fn select(args: &str) -> Result<Vec<Case>, String> {
    let n = testdefs::pairs::count(cases::CALLS);
    let mut calls: Option<Vec<&str>> = None;
    let mut pick: Option<Vec<usize>> = None;
    for w in args.split_whitespace() {
        if let Some(v) = w.strip_prefix("calls=") {
            let l: Vec<&str> = v.split(',').filter(|c| !c.is_empty()).collect();
            if let Some(bad) = l.iter().find(|c| !cases::CALLS.iter().any(|k| k.name == **c)) {
                return Err(alloc::format!("calls: unknown call `{bad}`"));
            }
            calls = Some(l);
        } else if let Some(v) = w.strip_prefix("pick=") {
            pick = Some(parse_pick(v, n)?);
        } else {
            return Err(alloc::format!("unknown argument `{w}` (calls=a,b,... pick=I,J-K)"));
        }
    }
    let mut out = Vec::new();
    testdefs::pairs::for_each_case(cases::CALLS, |c| {
        let by_calls = calls.as_ref().is_none_or(|l| l.contains(&c.call_a) && l.contains(&c.call_b));
        let by_pick = pick.as_ref().is_none_or(|p| p.contains(&c.index));
        if by_calls && by_pick {
            out.push(c);
        }
    });
    Ok(out)
}

fn main(args: &'static str) -> u64 {
    let selected = match select(args) {
        Ok(s) => s,
        Err(e) => {
            libos::println!("commute-error {e}");
            return 2;
        }
    };
    if libos::start_info().cores < 2 {
        libos::println!("commute-error needs 2 cores");
        return 2;
    }
    let thread = match libos::thread::spawn(1, worker, 0) {
        Ok(t) => t,
        Err(e) => {
            libos::println!("commute-error spawn: {}", e.as_str());
            return 2;
        }
    };
    let mut failed = 0;
    for (k, case) in selected.iter().enumerate() {
        let settle = 2 * k as u64 + 1;
        let run = settle + 1;
        let fx = match build_fixture() {
            Ok(f) => f,
            Err(e) => {
                libos::println!("commute-error fixture for case {}: {}", case.index, e.as_str());
                failed += 1;
                break;
            }
        };
        for (i, f) in FIX.iter().enumerate() {
            f.store(fx.ids[i], Ordering::Relaxed);
        }
        CASE.store(case.index, Ordering::Relaxed);
        PHASE.store(settle, Ordering::Release);
        let _ = sys::null();
        let _ = sys::null();
        wait_done(settle);
        let mut raw = Raw::new();
        PHASE.store(run, Ordering::Release);
        marker::region(true);
        exec(case.a, &fx, &mut raw);
        marker::region(false);
        wait_done(run);
        marker::epoch();
        let mut braw = Raw::new();
        braw.code = RAW_CODE.load(Ordering::Relaxed);
        braw.n = RAW_N.load(Ordering::Relaxed);
        for (i, v) in RAW.iter().enumerate() {
            braw.vals[i] = v.load(Ordering::Relaxed);
        }
        let (na, nb) = (new_id(case.a, &raw), new_id(case.b, &braw));
        let mut line = String::new();
        let _ = write!(line, "commute-case i={} a={} b={}", case.index, format(case.a, &raw, &fx, na, nb), format(case.b, &braw, &fx, na, nb));
        libos::println!("{line}");
        teardown(&fx);
    }
    PHASE.store(QUIT, Ordering::Release);
    let _ = thread.join();
    libos::println!("commute-done cases={} errors={failed}", selected.len());
    failed
}
