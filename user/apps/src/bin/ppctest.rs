//! ppctest: protected procedure calls (docs/ppc.md). A server made with `cfork` registers
//! gates and ends; this program, the client, calls them on its own core. Each test names the
//! kernel bug it catches. Boot with `roles=tc:0-1 init=ppctest` at 2 vCPUs (core 0, where the
//! client runs, time-shares: a tick during a call switches to another context and back).
//! Prints `utest NAME ... ok|FAILED` lines like utest; the kernel's leak check after exit
//! covers every gate and server. `init=ppctest -- application_core call_runs` at 3 vCPUs with
//! `roles=tc:0,ac:1,kc:2` runs the application-core case (and the basic one).
#![no_std]
#![no_main]

extern crate alloc;

use abi::{nr, BatchEntry, Error, ObjName, ObjectId, PpcGate, MAX_CONTEXT_SHARES, MEMID_SELF, SHARE_PRIVATE};
use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};
use libos::cores::{Core, CoreCtx, CoreOpts};
use libos::ppc::{self, Gate};
use libos::{cfork, println, sys, CforkOpts, Child};

libos::main!(main);

#[path = "../common/testkit.rs"]
#[macro_use]
mod testkit;
use testkit::*;

/// A static with one value in the client and another in the server (set after cfork in the
/// server's copy).
static MARK: AtomicU64 = AtomicU64::new(CLIENT_MARK);
const CLIENT_MARK: u64 = 0xC1;
const SERVER_MARK: u64 = 0x5E;
/// Counts the server's calls of `OP_COUNT` (in the server's memory).
static COUNTER: AtomicU64 = AtomicU64::new(0);
/// The nesting test's gates, in the server's memory: gate k calls gate k + 1.
const CHAIN: usize = abi::PPC_MAX_DEPTH as usize + 1;
static CHAIN_GATES: [[AtomicU64; 2]; CHAIN] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; CHAIN];

const OP_MIX: u64 = 1;
const OP_ECHO: u64 = 2;
const OP_MARK: u64 = 3;
const OP_COUNT: u64 = 4;
const OP_FAULT: u64 = 5;
const OP_PANIC: u64 = 6;
const OP_WAIT: u64 = 7;
const OP_ERR: u64 = 8;
const OP_CALLER: u64 = 9;
const OP_BIG: u64 = 10;
const OP_CHAIN: u64 = 11;
const OP_SLOT: u64 = 12;

/// Words of the shared page (`SCRATCH_BASE` in the client, the server and the helpers).
const IN_CALL: usize = 0; // a waiting handler has started (OP_WAIT sets word a3)
const RELEASE: usize = 1; // a waiting handler returns when this is non-zero
const BUSY_RES: usize = 2; // the helper's call of the gate in use (encoded result)
const DEL_RES: usize = 3; // the helper's deletion of the gate in use (encoded result)
const STOP: usize = 4; // spinners return when non-zero
const SPINS: usize = 5; // the spinner's progress
const IN_CALL2: usize = 6;
const NEVER: usize = 7; // never set
const HELPER_DONE: usize = 8;
const BOUND_BUSY_RES: usize = 9; // the helper's bound call of the gate in use (encoded result)

/// Mix four arguments so that any two swapped, dropped or truncated give another value.
fn mix(a0: u64, a1: u64, a2: u64, a3: u64) -> u64 {
    (a0.rotate_left(7) ^ a1.rotate_left(19) ^ a2.rotate_left(37) ^ a3.wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 1
}

/// The server's handler.
fn handler(a0: u64, a1: u64, a2: u64, a3: u64) -> Result<u64, Error> {
    match a0 & 0xFF {
        OP_MIX => Ok(mix(a0, a1, a2, a3)),
        OP_ECHO => Ok(a1),
        OP_MARK => Ok(MARK.load(Ordering::Relaxed)),
        OP_COUNT => Ok(COUNTER.fetch_add(1, Ordering::Relaxed) + 1),
        OP_FAULT => {
            // SAFETY: deliberately writes an unmapped page: the fault must end the call.
            unsafe { core::ptr::write_volatile(0x10 as *mut u64, 1) };
            Ok(0)
        }
        OP_PANIC => panic!("ppctest: a handler panics on purpose"),
        OP_WAIT => {
            let sh = shared();
            sh[a3 as usize].store(1, Ordering::Release);
            let end = libos::time::ticks() + a2 * libos::time::tsc_per_ms();
            while sh[a1 as usize].load(Ordering::Acquire) == 0 {
                if libos::time::ticks() > end {
                    return Err(Error::Busy);
                }
                core::hint::spin_loop();
            }
            Ok(MARK.load(Ordering::Relaxed))
        }
        OP_ERR => Err(Error::NotFound),
        OP_CALLER => sys::pcore_current(),
        OP_BIG => Ok(1 << 63),
        OP_CHAIN => {
            // Gate a1 of the chain: call gate a1 + 1 until a2 is reached; count the depth.
            if a1 >= a2 {
                return Ok(a1);
            }
            let next = (a1 + 1) as usize;
            let g = CHAIN_GATES.get(next).ok_or(Error::OutOfRange)?;
            let gate = Gate { name: ObjName::new(g[0].load(Ordering::Relaxed), g[1].load(Ordering::Relaxed)), core: 0 };
            gate.call(OP_CHAIN, a1 + 1, a2, 0)
        }
        OP_SLOT => {
            // The client's bound slot a1, from inside the call (another identity): neither
            // callable nor removable. Ok(1) if both are refused as they must be.
            let call = Gate { name: ObjName::new(abi::PPC_BOUND, a1), core: 0 }.call(OP_MARK, 0, 0, 0);
            let unbind = sys::ppc_unbind(a1);
            if call == Err(Error::NoSuchObject) && unbind == Err(Error::NoSuchObject) {
                Ok(1)
            } else {
                Err(Error::NotPermitted)
            }
        }
        _ => Err(Error::InvalidArgument),
    }
}

/// What the server gets from the client (its copy of this block, made by cfork).
struct ServerCfg {
    /// Where the gates go (the client's share, in the server's share set).
    p: ObjectId,
    cores: [u64; 2],
    ncores: usize,
}

/// The server (a cfork child): gates `t@CORE` in `p`, and the chain `c0`..`c4` for core 0
/// (`c0` in `p`, `ck` in a share of its own that gate `k - 1`'s handler can reach). Then it
/// ends: the gates keep its address range and process share alive.
fn server_main(arg: u64) -> u64 {
    MARK.store(SERVER_MARK, Ordering::Relaxed);
    // SAFETY: the client passed the address of a `ServerCfg` it allocated before cfork
    // copied its heap, so our copy holds it there.
    let cfg = unsafe { &*(arg as *const ServerCfg) };
    let served = match ppc::serve_cores(cfg.p, "t", &cfg.cores[..cfg.ncores], handler) {
        Ok(v) => v,
        Err(e) => return 100 + e as u64,
    };
    for s in served {
        let _ = s.keep();
    }
    let root = libos::ctx::ctx().root_share;
    let mut next_share = 0;
    for k in (0..CHAIN).rev() {
        let share = if k == 0 {
            cfg.p
        } else {
            match sys::share_alloc(root, "chain", MEMID_SELF, 0) {
                Ok(s) => s,
                Err(e) => return 200 + e as u64,
            }
        };
        let mut name = *b"c0";
        name[1] = b'0' + k as u8;
        let more: &[ObjectId] = if next_share != 0 { &[next_share] } else { &[] };
        match ppc::register_with(share, core::str::from_utf8(&name).unwrap_or("c"), 0, handler, more) {
            Ok(s) => {
                let g = s.keep();
                CHAIN_GATES[k][0].store(g.name.share, Ordering::Relaxed);
                CHAIN_GATES[k][1].store(g.name.object, Ordering::Relaxed);
            }
            Err(e) => return 300 + e as u64,
        }
        next_share = share;
    }
    0
}

/// A running server: its gates in `p`, deleted (with `p`) on drop.
struct Server {
    p: ObjectId,
    gates: [Option<Gate>; 2],
    chain: Option<Gate>,
    _child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        for g in self.gates.iter().flatten().chain(self.chain.iter()) {
            let _ = g.delete();
        }
        libos::process::del_share(self.p);
    }
}

/// Start a server on core `on` with gates for core 0 (and 1 if there is one), and wait
/// until it has registered them and ended.
fn server(page: &SharedPage) -> Result<Server, Msg> {
    let n = cores().min(2) as usize;
    let on = if n > 1 { 1 } else { 0 };
    let p = ok!(libos::process::new_share("ppc", MEMID_SELF));
    let cfg = Box::new(ServerCfg { p, cores: [0, 1], ncores: n });
    let opts = CforkOpts { shares: &[p], segments: &[page.seg.object], ..Default::default() };
    let mut child = match cfork(on, &opts, server_main, &*cfg as *const ServerCfg as u64) {
        Ok(c) => c,
        Err(e) => {
            libos::process::del_share(p);
            fail!("cfork -> {e:?}");
        }
    };
    let code = ok!(child.join_timeout(60_000));
    let mut s = Server { p, gates: [None, None], chain: None, _child: child };
    ensure!(code == 0, "the server exited with {code}");
    for c in 0..n {
        s.gates[c] = Some(ok!(Gate::find(p, "t", c as u64)));
    }
    s.chain = Some(ok!(Gate::find_named(p, "c0")));
    Ok(s)
}

impl Server {
    fn gate(&self, core: u64) -> Gate {
        self.gates[core as usize].unwrap_or(Gate { name: ObjName::default(), core })
    }
}

fn live_kobjects() -> u64 {
    sys::sys_info().map(|s| s.live_kobjects).unwrap_or(0)
}

fn page() -> Result<SharedPage, Msg> {
    SharedPage::new("ppc-page")
}

/// The words of `shared()` that name the gate a helper core calls (`call_from_core`).
const GATE_SHARE: usize = 20;
const GATE_OBJECT: usize = 21;

/// The gate `call_from_core` published, for the helper running on `core`.
fn published_gate(core: u64) -> Gate {
    let sh = shared();
    Gate { name: ObjName::new(sh[GATE_SHARE].load(Ordering::Relaxed), sh[GATE_OBJECT].load(Ordering::Relaxed)), core }
}

/// A helper core that will call `s`'s gate for `core` (named to it through `shared()`,
/// `published_gate`): prepared on `core` with the server's share and `pg` mapped, not yet
/// started.
fn call_from_core(core: u64, s: &Server, pg: &SharedPage) -> Result<(Gate, Core), Msg> {
    let g = s.gate(core);
    let sh = shared();
    sh[GATE_SHARE].store(g.name.share, Ordering::Relaxed);
    sh[GATE_OBJECT].store(g.name.object, Ordering::Relaxed);
    let h = ok!(Core::prepare(core, &CoreOpts { shares: &[s.p], ..Default::default() }));
    ok!(pg.map_into(h.root_ar));
    Ok((g, h))
}

/// Catches: a register call that takes a bad entry, stack, core, share list or root range;
/// a private share of another core in a gate (its lock-free table used from two cores); a
/// gate that holds a share holding it (a reference cycle that never frees); objects left
/// behind by refused registrations.
fn register_refuses_bad_input() -> TestResult {
    let k0 = live_kobjects();
    {
        let q = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "q", MEMID_SELF, 0))));
        let dst = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "dst", MEMID_SELF, 0))));
        let mut shares = [0; MAX_CONTEXT_SHARES];
        shares[0] = q.0.object;
        let good = PpcGate { entry: 0x40_0000, stack_top: 0x7000_0000_0000, cookie: 0, core: 0, root_ar: rar(), nshares: 1, shares };
        let reg = |g: &PpcGate, dst: ObjectId| sys::ppc_register(dst, "g", g);
        err!(reg(&PpcGate { entry: 0, ..good }, dst.0.object), Error::BadAddress);
        err!(reg(&PpcGate { entry: abi::USER_END, ..good }, dst.0.object), Error::BadAddress);
        err!(reg(&PpcGate { stack_top: u64::MAX & !15, ..good }, dst.0.object), Error::BadAddress);
        err!(reg(&PpcGate { stack_top: 0x7000_0000_0008, ..good }, dst.0.object), Error::Misaligned);
        err!(reg(&PpcGate { core: 4096, ..good }, dst.0.object), Error::NoSuchCore);
        err!(reg(&PpcGate { core: cores(), ..good }, dst.0.object), Error::NoSuchCore);
        err!(reg(&PpcGate { nshares: 0, ..good }, dst.0.object), Error::InvalidArgument);
        err!(reg(&PpcGate { nshares: MAX_CONTEXT_SHARES as u64 + 1, ..good }, dst.0.object), Error::InvalidArgument);
        let mut bad = shares;
        bad[0] = 0xdead;
        err!(reg(&PpcGate { shares: bad, ..good }, dst.0.object), Error::ShareNotReachable);
        err!(reg(&PpcGate { root_ar: ObjName::new(root(), 0xdead), ..good }, dst.0.object), Error::NoSuchObject);
        let small = Del(ObjName::new(root(), ok!(sys::ar_alloc(root(), "small", MEMID_SELF, abi::ArKind::Span2M))));
        err!(reg(&PpcGate { root_ar: small.0, ..good }, dst.0.object), Error::InvalidArgument);
        err!(reg(&good, 0xdead), Error::ShareNotReachable);
        // SAFETY: a bad pointer the kernel must refuse; it writes nothing through it.
        err!(unsafe { sys::call(nr::PPC_REGISTER, dst.0.object, 0, 0, 8, 0, 0) }, Error::BadAddress);
        // A gate holding the share it is put in, or a share that holds that one.
        err!(reg(&good, q.0.object), Error::InvalidArgument);
        let inner = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "inner", MEMID_SELF, 0))));
        ok!(sys::share_addobj(q.0.object, inner.0));
        let inner = inner.0.object;
        err!(reg(&good, inner), Error::InvalidArgument);
        if cores() > 1 {
            // A private share of core 0 in a gate for core 1.
            let private = Del(ObjName::new(root(), ok!(sys::share_alloc(root(), "priv", MEMID_SELF, SHARE_PRIVATE))));
            let mut ps = shares;
            ps[0] = private.0.object;
            err!(reg(&PpcGate { shares: ps, core: 1, ..good }, dst.0.object), Error::NotPermitted);
            // The same share is fine for a gate of its own core.
            let g = Del(ObjName::new(dst.0.object, ok!(reg(&PpcGate { shares: ps, ..good }, dst.0.object))));
            drop(g);
        }
        // A good one, then the cycles share_addobj must refuse: the gate's share holding the
        // gate, or holding a share that holds the gate.
        let g = Del(ObjName::new(dst.0.object, ok!(reg(&good, dst.0.object))));
        let st = ok!(sys::obj_stat(g.0));
        ensure!(st.obj_type == abi::ObjType::Gate as u32 && st.home_core == 0, "gate stat {st:?}");
        err!(sys::share_addobj(q.0.object, g.0), Error::InvalidArgument);
        err!(sys::share_addobj(inner, g.0), Error::InvalidArgument);
        err!(sys::share_addobj(q.0.object, dst.0), Error::InvalidArgument);
        // Elsewhere it may go: the root share.
        ok!(sys::share_addobj(root(), g.0));
        ok!(sys::share_delobj(ObjName::new(root(), g.0.object)));
        drop(g);
    }
    let k1 = live_kobjects();
    ensure!(k1 == k0, "kernel objects {k0} -> {k1}: a refused or deleted gate left something");
    Ok(Pass::Ok)
}

/// Catches: arguments lost or swapped on the way in, a result mangled on the way out, a
/// handler that runs in the client's address space instead of the server's (the static
/// differs), state that does not persist in the server between calls, errors not passed
/// back, a caller the handler cannot identify.
fn call_runs_the_handler_in_the_server() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let g = ok!(s.gate(0).bind());
    let patterns = [0u64, 1, u64::MAX, i64::MAX as u64, 0x0123_4567_89AB_CDEF, 0xAAAA_5555_AAAA_5555];
    for (i, &x) in patterns.iter().enumerate() {
        let (a0, a1, a2, a3) = (OP_MIX | (x << 8), x.rotate_left(i as u32 * 9), !x, x ^ 0xF0F0);
        let got = ok!(g.call(a0, a1, a2, a3));
        ensure!(got == mix(a0, a1, a2, a3), "mix({a0:#x}, {a1:#x}, {a2:#x}, {a3:#x}) = {got:#x}, want {:#x}", mix(a0, a1, a2, a3));
    }
    ensure!(ok!(g.call(OP_ECHO, i64::MAX as u64, 0, 0)) == i64::MAX as u64, "echo of the largest result");
    let mark = ok!(g.call(OP_MARK, 0, 0, 0));
    ensure!(mark == SERVER_MARK, "the handler read {mark:#x}: not the server's memory");
    ensure!(MARK.load(Ordering::Relaxed) == CLIENT_MARK, "the client's static changed");
    for want in 1..=3 {
        let n = ok!(g.call(OP_COUNT, 0, 0, 0));
        ensure!(n == want, "server counter {n}, want {want}");
    }
    ensure!(COUNTER.load(Ordering::Relaxed) == 0, "the client's counter moved: the handler wrote our memory");
    err!(g.call(OP_ERR, 0, 0, 0), Error::NotFound);
    err!(g.call(OP_BIG, 0, 0, 0), Error::OutOfRange);
    let who = ok!(g.call(OP_CALLER, 0, 0, 0));
    ensure!(who == ok!(sys::pcore_current()), "pcore_current in the handler: {who:#x}, not the caller");
    // Through the share it was registered in, as well as through our root share.
    ensure!(ok!(s.gate(0).call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "call through the server's share");
    ok!(g.unbind());
    Ok(Pass::Ok)
}

/// Catches: a gate that runs on a core it does not serve (its per-core state, stack and
/// identity used from two cores).
fn call_from_another_core_is_refused() -> TestResult {
    if cores() < 2 {
        fail!("needs 2 cores (boot at 2 vCPUs)");
    }
    let pg = page()?;
    let s = server(&pg)?;
    err!(s.gate(1).call(OP_MARK, 0, 0, 0), Error::WrongCore);
    ensure!(ok!(s.gate(0).call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "the gate for this core after the refusal");
    Ok(Pass::Ok)
}

/// Catches: unchecked names (a missing object, an unreachable share, an object that is not
/// a gate), `ppc_return` accepted outside a call (returning to a caller that does not exist),
/// and `ppc_call` run from a batch, whose entry has no frame to return through.
fn bad_names_and_misuse() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let g = s.gate(0);
    err!(Gate { name: ObjName::new(g.name.share, 0xdead), core: 0 }.call(OP_MARK, 0, 0, 0), Error::NoSuchObject);
    err!(Gate { name: ObjName::new(0xdead, g.name.object), core: 0 }.call(OP_MARK, 0, 0, 0), Error::ShareNotReachable);
    let seg = Del(ObjName::new(root(), ok!(sys::segment_alloc(root(), "notgate", MEMID_SELF, 4096))));
    err!(Gate { name: seg.0, core: 0 }.call(OP_MARK, 0, 0, 0), Error::WrongType);
    err!(sys::ppc_return_outside_call(5), Error::NotPermitted);
    let mut batch = [
        BatchEntry { nr: nr::PPC_CALL, args: [g.name.share, g.name.object, OP_MARK, 0, 0, 0], result: 0 },
        BatchEntry { nr: nr::PPC_RETURN, args: [1, 0, 0, 0, 0, 0], result: 0 },
    ];
    // SAFETY: `batch` is a live array of two entries the kernel fills in.
    ok!(unsafe { sys::call(nr::SYSCALL_BATCH, batch.as_mut_ptr() as u64, 2, 0, 0, 0, 0) });
    ensure!(batch[0].result == abi::encode(Err(Error::NotPermitted)), "ppc_call in a batch: {}", batch[0].result);
    ensure!(batch[1].result == abi::encode(Err(Error::NotPermitted)), "ppc_return in a batch: {}", batch[1].result);
    ensure!(ok!(g.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "the gate after the refusals");
    Ok(Pass::Ok)
}

/// Catches: a handler's fault ending the client's context (or panicking the kernel) instead
/// of the call; a call that ends without giving the client back its root range (the next
/// load of our own memory would fault or read the server's); a gate left busy after an
/// abort.
fn faulting_handler_ends_the_call_only() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let g = ok!(s.gate(0).bind());
    let aborts0 = ok!(sys::core_stats(0)).ppc_aborts;
    err!(g.call(OP_FAULT, 0, 0, 0), Error::CallAborted);
    ensure!(MARK.load(Ordering::Relaxed) == CLIENT_MARK, "our own static after the abort");
    err!(g.call(OP_PANIC, 0, 0, 0), Error::CallAborted);
    let aborts1 = ok!(sys::core_stats(0)).ppc_aborts;
    ensure!(aborts1 == aborts0 + 2, "ppc_aborts {aborts0} -> {aborts1}, want +2");
    for _ in 0..3 {
        ensure!(ok!(g.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "the gate after an abort");
    }
    ok!(g.unbind());
    Ok(Pass::Ok)
}

/// On core 0 beside the client (time-shared): once the client's handler is running, call
/// the same gate (must be Busy), delete it (the call in progress keeps it), let the handler
/// go.
fn busy_helper(c: &CoreCtx) -> u64 {
    let sh = shared();
    let _ = c;
    while sh[IN_CALL].load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let name = published_gate(0).name;
    let r = Gate { name, core: 0 }.call(OP_MARK, 0, 0, 0);
    sh[BUSY_RES].store(abi::encode(r) as u64, Ordering::Relaxed);
    // The same through a slot this context binds (its own slots, not the client's).
    let r = Gate { name, core: 0 }.bind().and_then(|b| {
        let r = b.call(OP_MARK, 0, 0, 0);
        b.unbind()?;
        r
    });
    sh[BOUND_BUSY_RES].store(abi::encode(r) as u64, Ordering::Relaxed);
    let d = sys::share_delobj(name);
    sh[DEL_RES].store(abi::encode(d) as u64, Ordering::Relaxed);
    sh[RELEASE].store(1, Ordering::Release);
    0
}

/// Catches: a context switch in the middle of a call that saves or restores the wrong root
/// range (the handler, resumed, reads the client's memory or faults), a second call of a
/// gate in use (two calls on one stack), and a gate freed while a call runs in it.
fn preempted_call_busy_gate_and_delete_during_call() -> TestResult {
    if ok!(sys::core_stats(0)).role != abi::ROLE_TC {
        fail!("core 0 must be a TC (boot with roles=tc:0-1)");
    }
    let pg = page()?;
    let s = server(&pg)?;
    let (g, mut helper) = call_from_core(0, &s, &pg)?;
    let sh = shared();
    let sw0 = ok!(sys::core_stats(0)).context_switches;
    ok!(helper.start(busy_helper, 0));
    let r = g.call(OP_WAIT, RELEASE as u64, 60_000, IN_CALL as u64);
    let sw1 = ok!(sys::core_stats(0)).context_switches;
    ensure!(r == Ok(SERVER_MARK), "the preempted call returned {r:?}, want Ok({SERVER_MARK:#x})");
    ensure!(ok!(helper.join(60_000)) == 0, "helper exit code");
    ensure!(sw1 >= sw0 + 2, "context switches {sw0} -> {sw1}: the call was never switched out and back");
    let busy = abi::decode(sh[BUSY_RES].load(Ordering::Relaxed) as i64);
    ensure!(busy == Err(Error::Busy), "a call of the gate in use: {busy:?}, want Busy");
    let busy = abi::decode(sh[BOUND_BUSY_RES].load(Ordering::Relaxed) as i64);
    ensure!(busy == Err(Error::Busy), "a bound call of the gate in use: {busy:?}, want Busy");
    let del = abi::decode(sh[DEL_RES].load(Ordering::Relaxed) as i64);
    ensure!(del.is_ok(), "deleting the gate during the call: {del:?}");
    err!(g.call(OP_MARK, 0, 0, 0), Error::NoSuchObject);
    Ok(Pass::Ok)
}

/// On core 0: call the gate with a handler that waits for ever (until halted).
fn stuck_caller(c: &CoreCtx) -> u64 {
    let sh = shared();
    let _ = c;
    let r = published_gate(0).call(OP_WAIT, NEVER as u64, 600_000, IN_CALL2 as u64);
    sh[HELPER_DONE].store(1, Ordering::Release);
    abi::encode(r) as u64
}

/// Catches: a client halted in the middle of a call that leaves the gate busy for ever, or
/// leaks the identities the call swapped (the kernel's leak check at exit), or frees the
/// server's root range while the gate still uses it.
fn halted_client_gives_the_gate_back() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let (g, mut stuck) = call_from_core(0, &s, &pg)?;
    let sh = shared();
    ok!(stuck.start(stuck_caller, 0));
    let started = libos::time::wait_until(60_000, || {
        let _ = sys::pcore_yield();
        sh[IN_CALL2].load(Ordering::Acquire) != 0
    });
    ensure!(started, "the stuck caller's handler never started");
    err!(g.call(OP_MARK, 0, 0, 0), Error::Busy);
    ok!(sys::pcore_halt(stuck.pcore, 77));
    let code = ok!(stuck.join(60_000));
    ensure!(code == 77, "the stuck caller ended with {code}, want 77 (halted in the call)");
    ensure!(sh[HELPER_DONE].load(Ordering::Acquire) == 0, "the stuck call returned instead of ending with its context");
    ensure!(ok!(g.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "the gate after its caller was halted in a call");
    Ok(Pass::Ok)
}

fn spinner(_c: &CoreCtx) -> u64 {
    let sh = shared();
    while sh[STOP].load(Ordering::Acquire) == 0 {
        sh[SPINS].fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// Catches: anything a call takes and does not give back (pages, heap objects, references:
/// exact counts after 100 000 calls), with a timer tick and another context on the core so
/// that some calls are switched out and back in the middle.
fn many_calls_leak_nothing() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let g = ok!(s.gate(0).bind());
    let mut spin = ok!(Core::prepare(0, &CoreOpts::default()));
    ok!(pg.map_into(spin.root_ar));
    ok!(spin.start(spinner, 0));
    // Counts are taken once the spinner has run (its first run faults in its stack and page
    // tables) and calls have been switched out and back already.
    let ran = libos::time::wait_until(60_000, || {
        let _ = sys::pcore_yield();
        shared()[SPINS].load(Ordering::Relaxed) != 0
    });
    ensure!(ran, "the spinner never ran");
    for i in 0..2000 {
        ensure!(ok!(g.call(OP_ECHO, i, 0, 0)) == i, "warm-up");
    }
    let before = ok!(sys::sys_info());
    let sw0 = ok!(sys::core_stats(0)).context_switches;
    let mut bad = 0u64;
    for i in 0..100_000u64 {
        match g.call(OP_ECHO, i, 0, 0) {
            Ok(v) if v == i => {}
            _ => bad += 1,
        }
    }
    let sw1 = ok!(sys::core_stats(0)).context_switches;
    let after = ok!(sys::sys_info());
    shared()[STOP].store(1, Ordering::Release);
    ensure!(ok!(spin.join(60_000)) == 0, "spinner");
    ensure!(bad == 0, "{bad} of 100000 calls returned the wrong value");
    ensure!(
        after.free_pages as i64 + after.slab_pages == before.free_pages as i64 + before.slab_pages
            && after.kernel_objects == before.kernel_objects
            && after.live_kobjects == before.live_kobjects,
        "after 100000 calls: free pages {}+{} -> {}+{}, heap objects {} -> {}, kernel objects {} -> {}",
        before.free_pages,
        before.slab_pages,
        after.free_pages,
        after.slab_pages,
        before.kernel_objects,
        after.kernel_objects,
        before.live_kobjects,
        after.live_kobjects
    );
    ensure!(sw1 > sw0, "no context switch during 100000 calls on a TC with a spinner ({sw0} -> {sw1})");
    ok!(g.unbind());
    println!("ppctest: 100000 calls, {} context switches meanwhile", sw1 - sw0);
    Ok(Pass::Ok)
}

/// Catches: a bound slot that takes something other than a gate for this core (a gate of
/// another core run here; a segment entered as a gate), a slot number used unchecked (out of
/// range, empty, after unbind), slots that are never exhausted or leak what they hold, a
/// gate freed while bound (deleted from its share, then called through the slot), and a
/// handler that can call or unbind its client's slots (the other side of the call).
fn bound_slots() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let k0 = live_kobjects();
    let slot = |n: u64| Gate { name: ObjName::new(abi::PPC_BOUND, n), core: 0 };
    // Binding: only gates of this core, by a name that resolves.
    let seg = Del(ObjName::new(root(), ok!(sys::segment_alloc(root(), "notgate", MEMID_SELF, 4096))));
    err!(sys::ppc_bind(seg.0), Error::WrongType);
    drop(seg);
    err!(sys::ppc_bind(ObjName::new(s.p, 0xdead)), Error::NoSuchObject);
    err!(sys::ppc_bind(ObjName::new(0xdead, s.gate(0).name.object)), Error::ShareNotReachable);
    err!(sys::ppc_bind(ObjName::new(abi::PPC_BOUND, 0)), Error::ShareNotReachable);
    if cores() > 1 {
        err!(s.gate(1).bind(), Error::WrongCore);
    }
    // Slots that hold nothing, or do not exist.
    for n in [0, abi::PPC_BOUND_SLOTS - 1, abi::PPC_BOUND_SLOTS, u64::MAX] {
        err!(slot(n).call(OP_MARK, 0, 0, 0), Error::NoSuchObject);
        err!(sys::ppc_unbind(n), Error::NoSuchObject);
    }
    // Fill every slot, then one more.
    let mut held = [0u64; abi::PPC_BOUND_SLOTS as usize];
    for h in held.iter_mut() {
        let b = ok!(s.gate(0).bind());
        ensure!(b.is_bound() && b.name.object < abi::PPC_BOUND_SLOTS, "bind gave {:?}", b.name);
        *h = b.name.object;
    }
    err!(s.gate(0).bind(), Error::Busy);
    for (i, &h) in held.iter().enumerate() {
        ensure!(ok!(slot(h).call(OP_ECHO, i as u64, 0, 0)) == i as u64, "call through slot {h}");
        ok!(sys::ppc_unbind(h));
        err!(sys::ppc_unbind(h), Error::NoSuchObject);
        err!(slot(h).call(OP_MARK, 0, 0, 0), Error::NoSuchObject);
    }
    // The handler (another identity in this context) can neither call nor unbind our slot.
    let b = ok!(s.gate(0).bind());
    ensure!(ok!(b.call(OP_SLOT, b.name.object, 0, 0)) == 1, "the handler reached the client's slot");
    ensure!(ok!(b.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "our slot after the handler tried it");
    ok!(b.unbind());
    // A bound gate outlives its name: deleted from its share, it still answers through the
    // slot, and goes once unbound.
    let b = ok!(s.gate(0).bind());
    let named = s.gate(0);
    ok!(named.delete());
    err!(named.call(OP_MARK, 0, 0, 0), Error::NoSuchObject);
    ensure!(ok!(b.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "a bound gate deleted from its share");
    let k1 = live_kobjects();
    ok!(b.unbind());
    let k2 = live_kobjects();
    ensure!(k2 < k1, "kernel objects {k1} -> {k2}: the unbound, deleted gate was not freed");
    ensure!(k2 < k0, "kernel objects {k0} -> {k2}: slots kept something");
    Ok(Pass::Ok)
}

/// Catches: nested calls that lose the outer call's caller (the inner return going to the
/// client), a depth that is not bounded (`PPC_MAX_DEPTH`), and a refused nested call that
/// leaves the outer calls broken.
fn nested_calls_and_depth() -> TestResult {
    let pg = page()?;
    let s = server(&pg)?;
    let Some(c0) = s.chain else { fail!("no chain") };
    let depth = abi::PPC_MAX_DEPTH - 1;
    let r = c0.call(OP_CHAIN, 0, depth, 0);
    ensure!(r == Ok(depth), "{} nested calls: {r:?}", depth + 1);
    err!(c0.call(OP_CHAIN, 0, depth + 1, 0), Error::Busy);
    ensure!(c0.call(OP_CHAIN, 0, 3, 0) == Ok(3), "four nested calls after the refusal");
    ensure!(ok!(c0.call(OP_MARK, 0, 0, 0)) == SERVER_MARK, "the first gate of the chain");
    Ok(Pass::Ok)
}

/// On the application core: call the gate for this core (the call must run here, not be
/// forwarded), including a handler that makes a system call (which is forwarded, in the
/// handler's identity).
fn ac_client(_c: &CoreCtx) -> u64 {
    let sh = shared();
    let g = published_gate(1);
    sh[30].store(abi::encode(g.call(OP_MARK, 0, 0, 0)) as u64, Ordering::Relaxed);
    sh[31].store(abi::encode(g.call(OP_CALLER, 0, 0, 0)) as u64, Ordering::Relaxed);
    sh[32].store(abi::encode(g.call(OP_MIX | (7 << 8), 1, 2, 3)) as u64, Ordering::Relaxed);
    sh[33].store(sys::pcore_current().unwrap_or(0), Ordering::Relaxed);
    // Bound on the AC: the bind is forwarded to the kernel core, which must check the gate
    // against the AC's core and fill the AC's context's slot; the call by slot runs here.
    let r = g.bind().and_then(|b| {
        let r = b.call(OP_MARK, 0, 0, 0);
        b.unbind()?;
        r
    });
    sh[34].store(abi::encode(r) as u64, Ordering::Relaxed);
    0
}

/// Catches: a protected procedure call from an application core sent to a kernel core
/// (which cannot switch the AC's address space), a handler's own system calls, which an
/// AC forwards, run in the caller's identity instead of the handler's, and a forwarded
/// `ppc_bind` checked against the kernel core instead of the AC (`WrongCore`) or filling the
/// kernel core's context instead of the AC's.
fn calls_on_an_application_core() -> TestResult {
    if cores() < 3 || ok!(sys::core_stats(1)).role != abi::ROLE_AC {
        fail!("needs core 1 to be an AC and a kernel core (boot with roles=tc:0,ac:1,kc:2 at 3 vCPUs)");
    }
    let pg = page()?;
    let s = server(&pg)?;
    let (_, mut h) = call_from_core(1, &s, &pg)?;
    let sh = shared();
    let mut ctx = h.context(ac_client, 0);
    ctx.role = abi::ROLE_AC;
    ok!(sys::pcore_run(h.pcore, &ctx));
    ensure!(ok!(h.join(60_000)) == 0, "the AC client's exit code");
    let mark = abi::decode(sh[30].load(Ordering::Relaxed) as i64);
    ensure!(mark == Ok(SERVER_MARK), "call on the AC: {mark:?}");
    let who = abi::decode(sh[31].load(Ordering::Relaxed) as i64);
    let me = sh[33].load(Ordering::Relaxed);
    ensure!(who == Ok(me), "pcore_current forwarded from the handler: {who:?}, the caller is {me:#x}");
    let m = abi::decode(sh[32].load(Ordering::Relaxed) as i64);
    ensure!(m == Ok(mix(OP_MIX | (7 << 8), 1, 2, 3)), "arguments on the AC: {m:?}");
    let b = abi::decode(sh[34].load(Ordering::Relaxed) as i64);
    ensure!(b == Ok(SERVER_MARK), "a forwarded bind and a call by slot on the AC: {b:?}");
    Ok(Pass::Ok)
}

fn main(args: &'static str) -> u64 {
    let mut t = Tally::default();
    let tests: [(&str, fn() -> TestResult); 9] = [
        ("ppc::register_refuses_bad_input", register_refuses_bad_input),
        ("ppc::call_runs_the_handler_in_the_server", call_runs_the_handler_in_the_server),
        ("ppc::call_from_another_core_is_refused", call_from_another_core_is_refused),
        ("ppc::bad_names_and_misuse", bad_names_and_misuse),
        ("ppc::faulting_handler_ends_the_call_only", faulting_handler_ends_the_call_only),
        ("ppc::preempted_call_busy_gate_and_delete_during_call", preempted_call_busy_gate_and_delete_during_call),
        ("ppc::halted_client_gives_the_gate_back", halted_client_gives_the_gate_back),
        ("ppc::many_calls_leak_nothing", many_calls_leak_nothing),
        ("ppc::bound_slots", bound_slots),
    ];
    for (name, f) in tests {
        if selected(args, name) {
            t.record(name, f());
        }
    }
    if selected(args, "ppc::nested_calls_and_depth") {
        t.record("ppc::nested_calls_and_depth", nested_calls_and_depth());
    }
    // Only when asked for by name: it needs an AC and a kernel core (its own boot).
    if args.contains("application_core") {
        t.record("ppc::calls_on_an_application_core", calls_on_an_application_core());
    }
    t.finish()
}
