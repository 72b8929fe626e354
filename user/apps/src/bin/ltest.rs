//! ltest: in-QEMU tests of the library OS (threads, cfork, descriptors, the per-core heap),
//! then a few measurements.
//!
//! Prints `utest NAME ... ok` / `... skipped (why)` / `... FAILED: why` per test (the
//! format `xtask test` counts), then `utest: done N passed, N failed, N skipped`, and exits
//! with 0 only if none failed. Measurements print `ltest: measure ...` lines afterwards. Arguments: words
//! select tests whose names contain one of them (default: all); `nomeasure` skips the
//! measurements.
//!
//! ltest runs as init (`init=ltest`) or under the shell (`run -c N ltest`), where the
//! shell's core is taken: `cores::probe` (always run first) finds which other cores are
//! free, and the tests start threads and cfork children on those only.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{ObjName, SegMapping, MAP_READ, MAP_WRITE, MEMID_SELF, PAGE_SIZE};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use libos::fd::{self, Scope};
use libos::layout::SCRATCH_BASE;
use libos::thread::{self, Barrier, Mutex};
use libos::{cfork, println, sys, CforkOpts};

libos::main!(main);

type TestResult = Result<Option<&'static str>, String>;

macro_rules! fail {
    ($($a:tt)*) => {{ let mut s = String::new(); let _ = write!(s, $($a)*); return Err(s) }};
}
macro_rules! ok {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => fail!("{} -> Err({:?})", stringify!($e), e),
        }
    };
}
macro_rules! ensure {
    ($c:expr, $($a:tt)*) => { if !$c { fail!($($a)*) } };
}

fn ncores() -> u64 {
    sys::sys_info().map(|s| s.cores).unwrap_or(1)
}
fn me() -> u64 {
    libos::core_id()
}

/// What `cores::probe` found for each core (`FREE`, `BUSY`; `UNKNOWN` before it ran).
static CORE_STATE: [AtomicU8; 256] = [const { AtomicU8::new(UNKNOWN) }; 256];
const UNKNOWN: u8 = 0;
const FREE: u8 = 1;
const BUSY: u8 = 2;

fn state_of(c: u64) -> u8 {
    CORE_STATE.get(c as usize).map_or(UNKNOWN, |s| s.load(Ordering::Relaxed))
}

/// The other cores we can start contexts on.
fn others() -> Vec<u64> {
    (0..ncores()).filter(|&c| c != me() && state_of(c) == FREE).collect()
}

/// The other cores that run something else (the shell, when it runs us on another core).
fn busy_others() -> Vec<u64> {
    (0..ncores()).filter(|&c| c != me() && state_of(c) == BUSY).collect()
}

/// Why a test that needs another core skips.
fn no_other_core() -> &'static str {
    if ncores() < 2 {
        "1 core"
    } else {
        "no other core is free"
    }
}

/// `cores::probe`: start a thread on every other core. A free core runs it; a core that
/// runs another context refuses it with `Busy` (one context per core); nothing else is
/// right. Started by the kernel as init, nothing else runs, so every core must be free.
fn cores_probe() -> TestResult {
    for c in (0..ncores()).filter(|&c| c != me()) {
        let state = match thread::spawn(c, trivial, 0) {
            Ok(t) => {
                let code = ok!(t.join());
                ensure!(code == 7, "probe thread on core {c} returned {code}");
                FREE
            }
            Err(abi::Error::Busy) => {
                ensure!(!libos::started_by_kernel(), "core {c} is Busy, but we are init: nothing else runs");
                BUSY
            }
            Err(e) => fail!("thread::spawn on core {c}: {e:?}"),
        };
        if let Some(slot) = CORE_STATE.get(c as usize) {
            slot.store(state, Ordering::Relaxed);
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// Threads

static SUM: AtomicU64 = AtomicU64::new(0);

fn t_add_core(arg: u64) -> u64 {
    // Statics are shared: the parent sees this.
    SUM.fetch_add(libos::core_id() + 1, Ordering::SeqCst);
    // The heap works on this core, and the block the parent passed is readable.
    // SAFETY: `arg` is a `Box<u64>` leaked by the parent for this thread, freed here.
    let b = unsafe { Box::from_raw(arg as *mut u64) };
    let v: Vec<u64> = (0..100).collect();
    *b + v.iter().sum::<u64>()
}

fn threads_share_statics() -> TestResult {
    if others().is_empty() {
        return Ok(Some(no_other_core()));
    }
    SUM.store(0, Ordering::SeqCst);
    let mut ts = Vec::new();
    for c in others() {
        let b = Box::into_raw(Box::new(1000 * c));
        ts.push((c, ok!(thread::spawn(c, t_add_core, b as u64))));
    }
    let mut want = 0;
    for (c, t) in ts {
        let code = ok!(t.join());
        ensure!(code == 1000 * c + 4950, "thread on core {c} returned {code}");
        want += c + 1;
    }
    ensure!(SUM.load(Ordering::SeqCst) == want, "SUM {} want {want}", SUM.load(Ordering::SeqCst));
    Ok(None)
}

static LOCK: Mutex<u64> = Mutex::new(0);
static BAR: Barrier = Barrier::new(2);
const MUTEX_ITERS: u64 = 2000;

fn t_mutex(_: u64) -> u64 {
    BAR.wait();
    for _ in 0..MUTEX_ITERS {
        *LOCK.lock() += 1;
    }
    BAR.wait();
    0
}

fn mutex_and_barrier() -> TestResult {
    if others().is_empty() {
        return Ok(Some(no_other_core()));
    }
    *LOCK.lock() = 0;
    let t = ok!(thread::spawn(others()[0], t_mutex, 0));
    t_mutex(0);
    ensure!(ok!(t.join()) == 0, "thread failed");
    let v = *LOCK.lock();
    ensure!(v == 2 * MUTEX_ITERS, "counter {v}, want {}", 2 * MUTEX_ITERS);
    Ok(None)
}

static SLEEPY_BAR: Barrier = Barrier::new(2);

/// On another core: wait (at most 5 s) until core `waiter` has halted twice more, then
/// arrive at `SLEEPY_BAR` last. Arriving only once the waiter sleeps makes the test a matter
/// of counts, not of how the host schedules the vCPUs.
fn t_arrive_once_waiter_halts(waiter: u64) -> u64 {
    let Ok(h0) = sys::core_stats(waiter).map(|s| s.halts) else { return 1 };
    libos::time::wait_until(5_000, || sys::core_stats(waiter).map(|s| s.halts).unwrap_or(0) >= h0 + 2);
    SLEEPY_BAR.wait();
    7
}

/// A barrier wait that lasts longer than the waits' polling stretch (2 ms) halts the
/// waiter's core, and the last arrival wakes it (`nr::WAKE`) rather than its next timeout.
/// Counts, not times: the waiter's core halted during each wait, and at least one of its
/// halts was ended by a wake. Catches a barrier that spins for ever (no halt) and a last
/// arrival that wakes nobody (no woken halt).
fn barrier_halts_and_is_woken() -> TestResult {
    if others().is_empty() {
        return Ok(Some(no_other_core()));
    }
    let c = me();
    let mut halts = 0;
    let mut woken = 0;
    // Three waits: the last arrival finds the waiter between two halts (and so need not
    // wake it) only rarely, in all three practically never.
    for _ in 0..3 {
        let t = ok!(thread::spawn(others()[0], t_arrive_once_waiter_halts, c));
        let halts0 = ok!(sys::core_stats(c)).halts;
        let woken0 = libos::time::woken_waits();
        SLEEPY_BAR.wait();
        // Before the join, whose own halts a wake may end too.
        woken += libos::time::woken_waits() - woken0;
        let h = ok!(sys::core_stats(c)).halts - halts0;
        ensure!(ok!(t.join()) == 7, "thread failed");
        ensure!(h >= 1, "core {c} never halted in a barrier wait of up to 5 s");
        halts += h;
    }
    ensure!(woken >= 1, "no halt of three barrier waits was ended by the last arrival's wake ({halts} halts)");
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// cfork

static COW_STATIC: AtomicU64 = AtomicU64::new(7);

fn child_fn(arg: u64) -> u64 {
    // SAFETY: `arg` points at a `[u64; 4]` on the parent's heap; our copy of the heap has
    // it at the same address.
    let a = unsafe { &mut *(arg as *mut [u64; 4]) };
    let seen = a[0] + COW_STATIC.load(Ordering::SeqCst);
    // Copy-on-write: these writes must not reach the parent.
    a[0] = 999;
    COW_STATIC.store(555, Ordering::SeqCst);
    let v: Vec<u64> = (0..1000).collect(); // the child's own heap works
    let big = alloc::vec![3u8; 100_000]; // and a large block
    if libos::core_id() != a[1] {
        return 1;
    }
    seen + v.len() as u64 + big[99_999] as u64
}

fn cfork_every_core() -> TestResult {
    let mut tried = 0;
    for c in others() {
        let data = Box::new([42u64, c, 0, 0]);
        let p = &*data as *const [u64; 4] as u64;
        let child = ok!(cfork(c, &CforkOpts::default(), child_fn, p));
        let code = ok!(child.join());
        ensure!(code == 42 + 7 + 1000 + 3, "child on core {c} returned {code}");
        ensure!(data[0] == 42 && COW_STATIC.load(Ordering::SeqCst) == 7, "child's writes reached the parent");
        tried += 1;
    }
    // Our own core runs us, and a busy core (the shell's, when it runs us on another core)
    // runs another context: the kernel refuses a second context there. The refusal comes
    // after cfork copied everything, which must all go again.
    for c in busy_others().into_iter().chain([me()]) {
        let k0 = live_kobjects();
        let r = cfork(c, &CforkOpts::default(), child_fn, 0);
        ensure!(matches!(r, Err(abi::Error::Busy)), "cfork to busy core {c}: {:?}, want Busy", r.map(|_| ()));
        let back = libos::time::wait_until(1000, || live_kobjects() == k0);
        ensure!(back, "cfork to busy core {c}: {} kernel objects more after the refusal", live_kobjects() as i64 - k0 as i64);
    }
    if tried == 0 {
        return Ok(Some(no_other_core()));
    }
    Ok(None)
}

fn child_shared(arg: u64) -> u64 {
    // SAFETY: the shared segment is mapped read-write at SCRATCH_BASE in the child too.
    unsafe { core::ptr::write_volatile(SCRATCH_BASE as *mut u64, arg) };
    0
}

fn cfork_shares_segment() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let c = libos::ctx::ctx();
    let seg = ok!(sys::segment_alloc(c.root_share, "shared", MEMID_SELF, PAGE_SIZE));
    let name = ObjName::new(c.root_share, seg);
    ok!(sys::ar_set_seg(c.root_ar, &SegMapping { voff: SCRATCH_BASE, seg: name, soff: 0, len: PAGE_SIZE, flags: MAP_READ | MAP_WRITE }));
    let r = (|| -> TestResult {
        let child = ok!(cfork(other, &CforkOpts { segments: &[seg], ..Default::default() }, child_shared, 0xabcd));
        ok!(child.join());
        // SAFETY: mapped above.
        let v = unsafe { core::ptr::read_volatile(SCRATCH_BASE as *const u64) };
        ensure!(v == 0xabcd, "shared segment reads {v:#x}");
        Ok(None)
    })();
    let _ = sys::ar_unmap(c.root_ar, SCRATCH_BASE, PAGE_SIZE);
    let _ = sys::share_delobj(name);
    r
}

// ---------------------------------------------------------------------------------------
// Descriptors

fn t_visible(arg: u64) -> u64 {
    // SAFETY: `arg` points at an `Fd` in a static/heap the parent keeps alive.
    let f = unsafe { *(arg as *const fd::Fd) };
    fd::visible(f) as u64
}

fn fd_private_invisible() -> TestResult {
    if others().is_empty() {
        return Ok(Some(no_other_core()));
    }
    let a = ok!(fd::open_console(Scope::Private));
    let d = ok!(fd::dup(a, Scope::Private));
    ok!(fd::close(a));
    ensure!(!fd::visible(a) && fd::visible(d), "after close: a visible={} dup visible={}", fd::visible(a), fd::visible(d));
    ensure!(ok!(fd::kind(d)) == fd::Kind::Console, "dup kind");
    // A closed descriptor has no kind (its slot is free, or reused under a new generation).
    ensure!(fd::kind(a).is_err() && fd::dup(a, Scope::Private).is_err(), "closed descriptor still has a kind");
    ensure!(ok!(fd::write(d, b"")) == 0, "write");
    let boxed = Box::new(d);
    for c in others() {
        let t = ok!(thread::spawn(c, t_visible, &*boxed as *const fd::Fd as u64));
        ensure!(ok!(t.join()) == 0, "private descriptor visible on core {c}");
    }
    ok!(fd::close(d));
    ensure!(!fd::visible(d), "closed dup still visible");
    Ok(None)
}

fn fd_shared_set() -> TestResult {
    if others().is_empty() {
        return Ok(Some(no_other_core()));
    }
    let n = ncores();
    // The set: our core and every odd core; with 2 cores also once with core 1 left out.
    let sets: Vec<Vec<u64>> = alloc::vec![(0..n).filter(|&c| c == me() || c % 2 == 1).collect(), alloc::vec![me()]];
    for set in sets {
        let t = ok!(fd::Table::for_cores(&set));
        let f = ok!(fd::open_console(Scope::Table(t)));
        let d = ok!(fd::dup(f, Scope::Table(t)));
        let boxed = Box::new(d);
        let mut bad = None;
        for c in others() {
            let th = ok!(thread::spawn(c, t_visible, &*boxed as *const fd::Fd as u64));
            let vis = ok!(th.join()) == 1;
            if vis != set.contains(&c) {
                bad = Some((c, vis));
            }
        }
        ok!(fd::Table::destroy(t));
        if let Some((c, vis)) = bad {
            fail!("set {set:?}: core {c} visible={vis}");
        }
    }
    // Process-wide: every core sees it.
    let p = ok!(fd::open_console(Scope::Process));
    let boxed = Box::new(p);
    for c in others() {
        let th = ok!(thread::spawn(c, t_visible, &*boxed as *const fd::Fd as u64));
        ensure!(ok!(th.join()) == 1, "process-wide descriptor invisible on core {c}");
    }
    ok!(fd::close(p));
    Ok(None)
}

fn t_pipe_writer(arg: u64) -> u64 {
    // SAFETY: as in `t_visible`.
    let w = unsafe { *(arg as *const fd::Fd) };
    let msg = b"hello through a pipe";
    let mut sent = 0;
    while sent < msg.len() {
        match fd::write(w, &msg[sent..]) {
            Ok(n) => sent += n,
            Err(_) => return 1,
        }
    }
    fd::unmap_all();
    0
}

fn fd_pipe_and_file() -> TestResult {
    let (r, w) = ok!(fd::pipe(Scope::Process));
    // A shared descriptor's kind comes back from its kernel object's name.
    match (ok!(fd::kind(r)), ok!(fd::kind(w))) {
        (fd::Kind::PipeRead(a), fd::Kind::PipeWrite(b)) => ensure!(a == b && a != 0, "pipe ends name rings {a:#x} and {b:#x}"),
        other => return Err(alloc::format!("pipe ends have kinds {other:?}")),
    }
    let boxed = Box::new(w);
    let want = b"hello through a pipe";
    let mut got = Vec::new();
    if let Some(&other) = others().first() {
        let t = ok!(thread::spawn(other, t_pipe_writer, &*boxed as *const fd::Fd as u64));
        let ok = libos::time::wait_until(10_000, || {
            let mut b = [0u8; 8];
            if let Ok(n) = fd::read(r, &mut b) {
                got.extend_from_slice(&b[..n]);
            }
            got.len() >= want.len()
        });
        ensure!(ok!(t.join()) == 0 && ok, "pipe: writer failed or timed out ({} bytes)", got.len());
    } else {
        ensure!(t_pipe_writer(&*boxed as *const fd::Fd as u64) == 0, "write");
        let mut b = [0u8; 64];
        let n = ok!(fd::read(r, &mut b));
        got.extend_from_slice(&b[..n]);
    }
    ensure!(got == want, "pipe read {:?}", core::str::from_utf8(&got));
    ensure!(fd::write(r, b"x").is_err(), "wrote to a read end");
    let f = ok!(fd::mem_file(Scope::Private, 3 * PAGE_SIZE));
    ok!(fd::write_at(f, 5000, b"file bytes"));
    let mut b = [0u8; 10];
    ok!(fd::read_at(f, 5000, &mut b));
    ensure!(&b == b"file bytes", "file read back {:?}", b);
    let f2 = ok!(fd::dup(f, Scope::Process));
    ensure!(ok!(fd::kind(f2)) == ok!(fd::kind(f)), "shared dup of a file has kind {:?}, the original {:?}", fd::kind(f2), fd::kind(f));
    ok!(fd::read_at(f2, 5000, &mut b));
    ensure!(&b == b"file bytes", "dup'ed file reads {:?}", b);
    for x in [r, w, f, f2] {
        ok!(fd::close(x));
    }
    fd::unmap_all();
    Ok(None)
}

fn live_kobjects() -> u64 {
    sys::sys_info().map(|s| s.live_kobjects).unwrap_or(0)
}

fn my_syscalls() -> u64 {
    sys::core_stats(me()).map(|s| s.syscalls).unwrap_or(0)
}

/// The private table: dup and close are counts in user memory (no system call), the last
/// close deletes the open file's kernel object, stale and made-up descriptors are refused,
/// a full table is `Busy` and changes nothing, private pipes give their ring back.
fn fd_private_table() -> TestResult {
    ok!(fd::table(Scope::Private));
    let c0 = fd::private_counts();
    let k0 = live_kobjects();
    let a = ok!(fd::open_console(Scope::Private));
    let obj = ok!(fd::object(a));
    ensure!(live_kobjects() == k0 + 1, "open made {} kernel objects", live_kobjects() - k0);
    ensure!(ok!(sys::obj_stat(obj)).obj_type == abi::ObjType::Segment as u32, "open file object type");
    let ds = [ok!(fd::dup(a, Scope::Private)), ok!(fd::dup(a, Scope::Private)), ok!(fd::dup(a, Scope::Private))];
    let c1 = fd::private_counts();
    ensure!(
        c1.descriptors == c0.descriptors + 4 && c1.open_files == c0.open_files + 1,
        "after open + 3 dups: {c1:?} (before {c0:?})"
    );
    ensure!(live_kobjects() == k0 + 1, "dup made kernel objects");
    ensure!(ds.iter().all(|&d| d != a && fd::object(d) == Ok(obj)), "dups share the open file");
    // No system calls: the difference of two back-to-back readings is the reading's own cost.
    let (b0, b1) = (my_syscalls(), my_syscalls());
    let s0 = my_syscalls();
    for _ in 0..100 {
        let d = ok!(fd::dup(ds[0], Scope::Private));
        ok!(fd::close(d));
    }
    let s1 = my_syscalls();
    ensure!(s1 - s0 == b1 - b0, "100 private dup+close pairs made {} system calls", (s1 - s0) - (b1 - b0));
    ok!(fd::close(a));
    ensure!(ok!(fd::kind(ds[0])) == fd::Kind::Console && sys::obj_stat(obj).is_ok(), "first close ended the open file");
    // Closed twice, used after close: refused, nothing changes.
    ensure!(fd::close(a) == Err(abi::Error::NoSuchObject), "second close: {:?}", fd::close(a));
    ensure!(fd::kind(a).is_err() && fd::dup(a, Scope::Private).is_err() && fd::dup(a, Scope::Process).is_err() && !fd::visible(a), "closed descriptor still usable");
    ensure!(fd::write(a, b"x").is_err() && fd::read(a, &mut [0u8; 1]).is_err(), "closed descriptor reads or writes");
    // A slot never opened, a slot out of range, and the raw kernel object in the private
    // share (only the table may delete it).
    let t = a.table;
    for bad in [fd::Fd { table: t, obj: fd::PRIVATE_FD | (fd::PRIVATE_SLOTS as u64 - 1) }, fd::Fd { table: t, obj: fd::PRIVATE_FD | 100_000 }, fd::Fd { table: t, obj: obj.object }] {
        ensure!(fd::close(bad).is_err() && fd::kind(bad).is_err() && !fd::visible(bad), "made-up descriptor {bad:?} accepted");
    }
    ensure!(sys::obj_stat(obj).is_ok(), "a refused close deleted the open file");
    // The slot of a closed descriptor is reused under a new generation: the old one stays dead.
    let b = ok!(fd::open_console(Scope::Private));
    ensure!(b.obj & 0xffff_ffff == a.obj & 0xffff_ffff && b != a, "slot reuse: {a:?} then {b:?}");
    ensure!(fd::close(a).is_err() && fd::visible(b), "stale descriptor reached the slot's new open file");
    ok!(fd::close(b));
    for d in &ds[..2] {
        ok!(fd::close(*d));
    }
    ensure!(sys::obj_stat(obj).is_ok() && live_kobjects() == k0 + 1, "open file gone with a descriptor left");
    ok!(fd::close(ds[2]));
    ensure!(sys::obj_stat(obj).err() == Some(abi::Error::NoSuchObject), "last close left the kernel object: {:?}", sys::obj_stat(obj));
    ensure!(live_kobjects() == k0 && fd::private_counts() == c0, "after the last close: {} kernel objects more, {:?}", live_kobjects() - k0, fd::private_counts());

    // Table full.
    let e = ok!(fd::open_console(Scope::Private));
    let mut held = alloc::vec![e];
    let err = loop {
        match fd::dup(e, Scope::Private) {
            Ok(d) => held.push(d),
            Err(x) => break x,
        }
        if held.len() > fd::PRIVATE_SLOTS {
            fail!("more than {} private descriptors", fd::PRIVATE_SLOTS);
        }
    };
    let full = fd::private_counts();
    ensure!(err == abi::Error::Busy && full.descriptors as usize == fd::PRIVATE_SLOTS, "table full: {err:?} at {full:?}");
    let k1 = live_kobjects();
    ensure!(fd::open_console(Scope::Private) == Err(abi::Error::Busy) && fd::pipe(Scope::Private).is_err(), "open in a full table");
    ensure!(live_kobjects() == k1 && fd::private_counts() == full, "a refused open changed something");
    for d in held {
        ok!(fd::close(d));
    }
    ensure!(live_kobjects() == k0 && fd::private_counts() == c0, "full table closed: {} kernel objects more", live_kobjects() - k0);

    // A private pipe: the ring goes with the last end that uses it.
    let (r, w) = ok!(fd::pipe(Scope::Private));
    ensure!(live_kobjects() == k0 + 3, "pipe made {} kernel objects", live_kobjects() - k0);
    let r2 = ok!(fd::dup(r, Scope::Private));
    ok!(fd::close(r));
    ensure!(ok!(fd::write(w, b"ring")) == 4, "private pipe write");
    let mut buf = [0u8; 8];
    ensure!(ok!(fd::read(r2, &mut buf)) == 4 && &buf[..4] == b"ring", "private pipe read {buf:?}");
    // Dup'ed out to the process table, the ring outlives the private ends there.
    let pw = ok!(fd::dup(w, Scope::Process));
    ok!(fd::close(w));
    ok!(fd::close(r2));
    ensure!(fd::private_counts() == c0, "pipe ends left: {:?}", fd::private_counts());
    // No read end is left anywhere (the private ones closed): EPIPE.
    ensure!(fd::write(pw, b"more") == Err(abi::Error::BrokenPipe), "write with no read end: {:?}", fd::write(pw, b"more"));
    ok!(fd::close(pw));
    // Shared to private: a new private open file, whose close gives the private share's
    // reference to the ring back.
    let (sr, sw) = ok!(fd::pipe(Scope::Process));
    let k2 = live_kobjects();
    let mr = ok!(fd::dup(sr, Scope::Private));
    ensure!(ok!(fd::write(sw, b"xy")) == 2 && ok!(fd::read(mr, &mut buf)) == 2, "shared pipe read through a private dup");
    ok!(fd::close(mr));
    ensure!(live_kobjects() == k2, "private dup of a shared pipe left {} objects", live_kobjects() - k2);
    for x in [sr, sw] {
        ok!(fd::close(x));
    }
    fd::unmap_all();
    Ok(None)
}

#[derive(Clone, Copy)]
struct Foreign {
    fd: fd::Fd,
    obj: ObjName,
}

/// In another context on another core (a thread or a cfork child): the main context's
/// private descriptor is nothing here (every call is refused, the kernel refuses its object
/// too), while this context's own private table, which may hand out the very same slot
/// number, works. Leaves one descriptor open on purpose: the context's teardown must take
/// its kernel object.
fn t_foreign_private(arg: u64) -> u64 {
    // SAFETY: `arg` points at a `Foreign` the parent keeps alive until the join.
    let f = unsafe { *(arg as *const Foreign) };
    let mut bad = 0;
    let np = |r: Result<(), abi::Error>| r != Err(abi::Error::NotPermitted);
    bad |= fd::visible(f.fd) as u64;
    bad |= (np(fd::kind(f.fd).map(|_| ())) as u64) << 1;
    bad |= (np(fd::dup(f.fd, Scope::Private).map(|_| ())) as u64) << 2;
    bad |= (np(fd::dup(f.fd, Scope::Process).map(|_| ())) as u64) << 3;
    bad |= (np(fd::write(f.fd, b"x").map(|_| ())) as u64) << 4;
    bad |= (np(fd::read(f.fd, &mut [0u8; 1]).map(|_| ())) as u64) << 5;
    bad |= (np(fd::close(f.fd)) as u64) << 6;
    bad |= (sys::obj_stat(f.obj).is_ok() as u64) << 7;
    let Ok(mine) = fd::open_console(Scope::Private) else { return 1 << 8 };
    let Ok(d) = fd::dup(mine, Scope::Private) else { return 1 << 9 };
    bad |= ((fd::kind(d) != Ok(fd::Kind::Console)) as u64) << 10;
    let (first, second) = (fd::close(mine), fd::close(mine));
    bad |= ((first.is_err() || second != Err(abi::Error::NoSuchObject)) as u64) << 11;
    // A slot that is open in *this* table, named with the foreign table: refused by the
    // table id alone (the foreign table is never looked up, and is not even mapped here).
    let forged = fd::Fd { table: f.fd.table, obj: d.obj };
    bad |= (np(fd::kind(forged).map(|_| ())) as u64) << 12;
    bad |= (np(fd::close(forged)) as u64) << 13;
    bad |= ((fd::kind(d) != Ok(fd::Kind::Console)) as u64) << 14;
    bad
}

fn fd_private_other_core() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    ok!(fd::table(Scope::Private));
    let c0 = fd::private_counts();
    let a = ok!(fd::open_console(Scope::Private));
    let d = ok!(fd::dup(a, Scope::Private));
    let boxed = Box::new(Foreign { fd: d, obj: ok!(fd::object(d)) });
    let k0 = live_kobjects();
    for c in others() {
        let t = ok!(thread::spawn(c, t_foreign_private, &*boxed as *const Foreign as u64));
        let bad = ok!(t.join());
        ensure!(bad == 0, "core {c}: checks failed, bit mask {bad:#x}");
        // The thread ended with a private descriptor open: its share went with it.
        let back = libos::time::wait_until(1000, || live_kobjects() == k0);
        ensure!(back, "core {c}: {} kernel objects more after the thread ended", live_kobjects() as i64 - k0 as i64);
    }
    // A cfork child (a copy of this context's memory, but a fresh context segment): the
    // parent's private descriptors are not inherited.
    let child = ok!(cfork(other, &CforkOpts::default(), t_foreign_private, &*boxed as *const Foreign as u64));
    let bad = ok!(child.join());
    ensure!(bad == 0, "cfork child: checks failed, bit mask {bad:#x}");
    let back = libos::time::wait_until(1000, || live_kobjects() == k0);
    ensure!(back, "{} kernel objects more after the cfork child ended", live_kobjects() as i64 - k0 as i64);
    ensure!(fd::private_counts().descriptors == c0.descriptors + 2 && ok!(fd::kind(d)) == fd::Kind::Console, "our table changed: {:?}", fd::private_counts());
    ok!(fd::close(a));
    ok!(fd::close(d));
    ensure!(fd::private_counts() == c0, "counts {:?}", fd::private_counts());
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// The process-wide descriptor table (user memory, `percore::fdtable`)

/// Bad, closed, twice-closed and made-up process-wide descriptors are refused; a full table
/// refuses opens and dups and loses nothing; counts come back after every close; no kernel
/// object is made for a console descriptor. Catches: a stale descriptor reaching its slot's
/// next open file, a double close freeing twice, a full table leaking a slot or record, the
/// table share's raw objects accepted as descriptors.
fn fd_proc_table() -> TestResult {
    let t = ok!(fd::table(Scope::Process));
    let c0 = fd::proc_counts();
    let k0 = live_kobjects();
    let a = ok!(fd::open_console(Scope::Process));
    ensure!(a.table == t && a.obj & fd::SHARED_FD != 0, "process-wide descriptor {a:?}");
    let d = ok!(fd::dup(a, Scope::Process));
    ensure!(d != a && ok!(fd::kind(d)) == fd::Kind::Console && fd::visible(d), "dup {d:?}");
    ensure!(live_kobjects() == k0, "a console open or dup made {} kernel objects", live_kobjects() - k0);
    ensure!(fd::proc_counts() == (c0.0 + 2, c0.1 + 1), "counts after open+dup {:?} (before {c0:?})", fd::proc_counts());
    ok!(fd::close(a));
    ensure!(fd::close(a) == Err(abi::Error::NoSuchObject), "second close: {:?}", fd::close(a));
    ensure!(fd::kind(a).is_err() && !fd::visible(a) && fd::dup(a, Scope::Process).is_err() && fd::dup(a, Scope::Private).is_err(), "closed descriptor still usable");
    ensure!(fd::write(a, b"x").is_err() && fd::fstat(a).is_err(), "closed descriptor writes or stats");
    ensure!(ok!(fd::kind(d)) == fd::Kind::Console, "closing one descriptor ended the open file");
    // The slot comes back (this core's word), with a new generation: the stale one is refused.
    let b = ok!(fd::open_console(Scope::Process));
    ensure!(fd::close(a).is_err() && fd::visible(b), "stale descriptor reached the slot's new open file");
    for bad in [
        fd::Fd { table: t, obj: fd::SHARED_FD | fd::SHARED_SLOTS as u64 },
        fd::Fd { table: t, obj: fd::SHARED_FD | 0xffff_ffff },
        fd::Fd { table: t, obj: fd::SHARED_FD | (b.obj & 0xffff_ffff) | ((b.obj >> 32 & 0x3fff_ffff) ^ 1) << 32 },
        fd::Fd { table: t ^ 1, obj: b.obj },
        fd::Fd { table: t, obj: b.obj & !fd::SHARED_FD },
    ] {
        ensure!(fd::close(bad).is_err() && fd::kind(bad).is_err() && !fd::visible(bad) && fd::dup(bad, Scope::Process).is_err(), "made-up descriptor {bad:?} accepted");
    }
    ensure!(fd::visible(b) && fd::visible(d), "refused descriptors changed real ones");
    let st = ok!(fd::fstat(d));
    ensure!(st.mode & 0o170000 == fd::S_IFCHR, "console fstat mode {:o}", st.mode);
    // Fill the table.
    let mut held = Vec::new();
    let err = loop {
        match fd::dup(d, Scope::Process) {
            Ok(x) => held.push(x),
            Err(e) => break e,
        }
        if held.len() > fd::SHARED_SLOTS {
            fail!("more than {} process-wide descriptors", fd::SHARED_SLOTS);
        }
    };
    let full = fd::proc_counts();
    ensure!(err == abi::Error::Busy && full.0 as usize == fd::SHARED_SLOTS, "table full: {err:?} at {full:?}");
    ensure!(fd::open_console(Scope::Process) == Err(abi::Error::Busy) && fd::pipe(Scope::Process).is_err(), "open in a full table");
    ensure!(fd::proc_counts() == full && live_kobjects() == k0, "a refused open changed the table: {:?}", fd::proc_counts());
    for x in held {
        ok!(fd::close(x));
    }
    ok!(fd::close(b));
    ok!(fd::close(d));
    ensure!(fd::proc_counts() == c0, "after the last close: {:?}, before {c0:?}", fd::proc_counts());
    // Private <-> process-wide for a console: new open files, each closed with its last descriptor.
    let p = ok!(fd::open_console(Scope::Private));
    let s = ok!(fd::dup(p, Scope::Process));
    let p2 = ok!(fd::dup(s, Scope::Private));
    ok!(fd::close(p));
    ensure!(ok!(fd::kind(s)) == fd::Kind::Console && ok!(fd::kind(p2)) == fd::Kind::Console, "cross-table dups");
    ok!(fd::close(s));
    ok!(fd::close(p2));
    ensure!(fd::proc_counts() == c0, "cross-table dups left {:?}", fd::proc_counts());
    Ok(None)
}

const CONC_ITERS: u64 = 3000;
static CONC_BAR: AtomicU64 = AtomicU64::new(0);
/// Contexts taking part in `fd_proc_concurrent` (at most 64).
static CONC_N: AtomicU64 = AtomicU64::new(1);
static CONC_HANDOFF: [AtomicU64; 1] = [const { AtomicU64::new(0) }; 1];

/// One core's part of `fd_proc_concurrent`: dup the common descriptor, open its own, close
/// both, and close a descriptor the previous core dup'ed (handed over through a static), so
/// closes also happen on other cores than the dup. Returns a bit mask of failed checks.
fn t_proc_churn(arg: u64) -> u64 {
    // SAFETY: `arg` points at the common descriptor, kept alive by the parent until joins.
    let common = unsafe { *(arg as *const fd::Fd) };
    let n = CONC_N.load(Ordering::SeqCst) as usize;
    CONC_BAR.fetch_add(1, Ordering::SeqCst);
    libos::time::wait_until(5000, || CONC_BAR.load(Ordering::SeqCst) as usize >= n);
    let mut bad = 0;
    for i in 0..CONC_ITERS {
        let Ok(x) = fd::dup(common, Scope::Process) else { return bad | 1 };
        let Ok(own) = fd::open_console(Scope::Process) else { return bad | 2 };
        bad |= ((fd::kind(x) != Ok(fd::Kind::Console)) as u64) << 2;
        if i % 4 == 0 {
            // Hand `x` over; close what was handed over last (often by another core).
            let old = CONC_HANDOFF[0].swap(x.obj, Ordering::AcqRel);
            if old != 0 {
                bad |= (fd::close(fd::Fd { table: common.table, obj: old }).is_err() as u64) << 3;
            }
        } else {
            bad |= (fd::close(x).is_err() as u64) << 4;
        }
        bad |= (fd::close(own).is_err() as u64) << 5;
        bad |= ((fd::close(own) != Err(abi::Error::NoSuchObject)) as u64) << 6;
    }
    bad
}

/// Every core dups and closes process-wide descriptors at once (the common open file and
/// their own), closing some on another core than the one that dup'ed them. Catches: lost
/// updates of the bitmaps or counts (a leaked or doubly-used slot), a close freeing the
/// common open file while descriptors still name it.
fn fd_proc_concurrent() -> TestResult {
    let cores: Vec<u64> = others().into_iter().take(63).collect();
    if cores.is_empty() {
        return Ok(Some(no_other_core()));
    }
    let c0 = fd::proc_counts();
    let common = ok!(fd::open_console(Scope::Process));
    for h in &CONC_HANDOFF {
        h.store(0, Ordering::SeqCst);
    }
    CONC_BAR.store(0, Ordering::SeqCst);
    CONC_N.store(cores.len() as u64 + 1, Ordering::SeqCst);
    let boxed = Box::new(common);
    let arg = &*boxed as *const fd::Fd as u64;
    let mut ts = Vec::new();
    for &c in &cores {
        ts.push(ok!(thread::spawn(c, t_proc_churn, arg)));
    }
    let mine = t_proc_churn(arg);
    let mut bad = mine;
    for t in ts {
        bad |= ok!(t.join());
    }
    ensure!(bad == 0, "checks failed, bit mask {bad:#x}");
    for h in &CONC_HANDOFF {
        let left = h.swap(0, Ordering::SeqCst);
        if left != 0 {
            ok!(fd::close(fd::Fd { table: common.table, obj: left }));
        }
    }
    ensure!(ok!(fd::kind(common)) == fd::Kind::Console, "the common open file went");
    ensure!(fd::proc_counts() == (c0.0 + 1, c0.1 + 1), "after the churn: {:?}, before {c0:?} (+1 +1 expected)", fd::proc_counts());
    ok!(fd::close(common));
    ensure!(fd::proc_counts() == c0, "after the last close: {:?}", fd::proc_counts());
    Ok(None)
}

/// A cfork child that did not get the table: the parent's process-wide descriptor is
/// refused, and its own process-wide table works. Returns a bit mask of failed checks.
fn child_proc_unshared(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor (a copy of the parent's heap).
    let parent = unsafe { *(arg as *const fd::Fd) };
    let mut bad = 0;
    bad |= fd::visible(parent) as u64;
    bad |= (fd::close(parent).is_ok() as u64) << 1;
    bad |= (fd::dup(parent, Scope::Process).is_ok() as u64) << 2;
    let Ok(own) = fd::open_console(Scope::Process) else { return bad | 1 << 3 };
    bad |= ((own.table == parent.table) as u64) << 4;
    bad |= ((fd::proc_counts() != (1, 1)) as u64) << 5;
    bad |= (fd::close(own).is_err() as u64) << 6;
    bad
}

/// A cfork child given the table: dups the parent's descriptor and leaves the dup open for
/// the parent (returned as the exit code).
fn child_proc_shared(arg: u64) -> u64 {
    // SAFETY: as in `child_proc_unshared`.
    let parent = unsafe { *(arg as *const fd::Fd) };
    if fd::kind(parent) != Ok(fd::Kind::Console) {
        return 1;
    }
    match fd::dup(parent, Scope::Process) {
        Ok(d) => d.obj,
        Err(_) => 2,
    }
}

/// cfork'd processes share the process-wide table only when asked. Catches: a child
/// writing the parent's table through a copy it should not have (or a table shared by
/// default), and a shared table whose dups the parent cannot see.
fn fd_proc_cfork() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let c0 = fd::proc_counts();
    let a = ok!(fd::open_console(Scope::Process));
    let boxed = Box::new(a);
    let arg = &*boxed as *const fd::Fd as u64;
    let child = ok!(cfork(other, &CforkOpts::default(), child_proc_unshared, arg));
    let bad = ok!(child.join());
    ensure!(bad == 0, "unshared child: checks failed, bit mask {bad:#x}");
    ensure!(fd::proc_counts() == (c0.0 + 1, c0.1 + 1) && fd::visible(a), "the unshared child changed our table: {:?}", fd::proc_counts());
    let (share, seg) = ok!(fd::cfork_share_table());
    let child = ok!(cfork(other, &CforkOpts { shares: &[share], segments: &[seg], ..Default::default() }, child_proc_shared, arg));
    let code = ok!(child.join());
    ensure!(code > 2, "shared child failed: {code}");
    let d = fd::Fd { table: a.table, obj: code };
    ensure!(fd::proc_counts() == (c0.0 + 2, c0.1 + 1) && ok!(fd::kind(d)) == fd::Kind::Console, "the child's dup is not in our table: {:?}", fd::proc_counts());
    ok!(fd::close(d));
    ok!(fd::close(a));
    ensure!(fd::proc_counts() == c0, "counts {:?}", fd::proc_counts());
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// Pipe semantics (POSIX): EPIPE, EOF, blocking reads, ends counted across tables, the ring
// freed with the last end.

/// A write with no read end open fails (`BrokenPipe`); a read of an empty pipe with no write
/// end open is end of file (0), after the bytes still waiting; both table kinds. Catches:
/// writes that ignore the read count (planted: the check removed: the write took 1 byte),
/// EOF before the waiting bytes (planted: reads answering 0 once no writer is left, before
/// the ring: "read after the last writer: 0").
fn fd_pipe_epipe_eof() -> TestResult {
    for scope in [Scope::Process, Scope::Private] {
        let (r, w) = ok!(fd::pipe(scope));
        ok!(fd::close(r));
        ensure!(fd::write(w, b"x") == Err(abi::Error::BrokenPipe), "{scope:?}: write after the read end closed: {:?}", fd::write(w, b"x"));
        ok!(fd::close(w));
        let (r, w) = ok!(fd::pipe(scope));
        ensure!(ok!(fd::write(w, b"drain me")) == 8, "{scope:?}: write");
        ok!(fd::close(w));
        let mut b = [0u8; 5];
        ensure!(fd::read(r, &mut b) == Ok(5) && &b == b"drain", "read after the last writer: {:?} {b:?}", fd::read(r, &mut [0u8; 0]));
        ensure!(fd::read(r, &mut b) == Ok(3) && &b[..3] == b" me", "second read after the last writer: {b:?}");
        for i in 0..3 {
            ensure!(fd::read(r, &mut b) == Ok(0), "{scope:?}: read {i} of a drained pipe with no writer: {:?}", fd::read(r, &mut b));
        }
        ok!(fd::close(r));
    }
    fd::unmap_all();
    Ok(None)
}

static PIPE_ACTED: AtomicU64 = AtomicU64::new(0);

/// On another core: wait, then write "wake" (step 1), wait, then close the write end (step 2).
fn t_pipe_late_writer(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor, alive until this thread is joined.
    let w = unsafe { *(arg as *const fd::Fd) };
    libos::time::wait_until(30, || false);
    PIPE_ACTED.store(1, Ordering::SeqCst);
    if fd::write(w, b"wake") != Ok(4) {
        return 1;
    }
    libos::time::wait_until(30, || false);
    PIPE_ACTED.store(2, Ordering::SeqCst);
    let r = fd::close(w).is_err() as u64 * 2;
    fd::unmap_all();
    r
}

/// A read of an empty pipe waits while a write end is open: until a writer on another core
/// writes, then until that writer closes (0). Bounded: the writer acts after 30 ms each time.
/// Each wait sleeps on the ring's waiters word and is ended by the writer's wake, not by the
/// nap's timeout. Catches: a read answering 0 for "empty" while a writer is open (planted:
/// the wait loop removed: "read returned Ok(0) before the writer wrote (step 0)"); a wait
/// that spins ("the read did not sleep"); a write or a close that wakes no sleeper (planted:
/// no `notify` after the write's put: "the read's naps were not woken").
fn fd_pipe_blocking_read() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let (r, w) = ok!(fd::pipe(Scope::Process));
    PIPE_ACTED.store(0, Ordering::SeqCst);
    let boxed = Box::new(w);
    let t = ok!(thread::spawn(other, t_pipe_late_writer, &*boxed as *const fd::Fd as u64));
    let mut b = [0u8; 16];
    for (want, step_want, what) in [(4, 1, "wrote"), (0, 2, "closed")] {
        let before = fd::wait_counts();
        let n = fd::read(r, &mut b);
        let after = fd::wait_counts();
        let step = PIPE_ACTED.load(Ordering::SeqCst);
        ensure!(n == Ok(want) && (want == 0 || &b[..4] == b"wake") && step >= step_want, "read returned {n:?} before the writer {what} (step {step})");
        ensure!(after.naps > before.naps, "the read did not sleep until the writer {what}");
        ensure!(after.woken > before.woken, "the read's naps were not woken when the writer {what} ({} naps)", after.naps - before.naps);
    }
    ensure!(ok!(t.join()) == 0, "writer thread failed");
    ok!(fd::close(r));
    fd::unmap_all();
    Ok(None)
}

/// Dup'ed ends keep the pipe open until the last close, within a table (same open file) and
/// across tables (a new end). Catches: a close of one descriptor dropping the end while a
/// dup is left (planted: `drop_end` at every private close: "Private: write with a
/// same-table dup of the read end left: Err(BrokenPipe)"), a dup within a table counted as a
/// new end (planted: `add_end` in the process-wide `dup`: "Process: write after the read
/// end's last dup closed: Ok(1)").
fn fd_pipe_dup_keeps_open() -> TestResult {
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let r_same = ok!(fd::dup(r, Scope::Process));
    let r_priv = ok!(fd::dup(r, Scope::Private));
    let w_priv = ok!(fd::dup(w, Scope::Private));
    ok!(fd::close(r));
    ensure!(fd::write(w, b"a") == Ok(1), "write with a dup'ed read end left: {:?}", fd::write(w, b"a"));
    ok!(fd::close(r_same));
    ensure!(fd::write(w_priv, b"b") == Ok(1), "write with the private read end left: {:?}", fd::write(w_priv, b"b"));
    ok!(fd::close(w));
    let mut b = [0u8; 4];
    ensure!(fd::read(r_priv, &mut b) == Ok(2) && &b[..2] == b"ab", "read {b:?}");
    ensure!(fd::write(w_priv, b"c") == Ok(1), "write through the last write end");
    ok!(fd::close(w_priv));
    ensure!(fd::read(r_priv, &mut b) == Ok(1) && fd::read(r_priv, &mut b) == Ok(0), "EOF after the last write end closed");
    ok!(fd::close(r_priv));
    // Dups inside one table (either kind) are one end: it goes with the last of them.
    for scope in [Scope::Process, Scope::Private] {
        let (r, w) = ok!(fd::pipe(scope));
        let r2 = ok!(fd::dup(r, scope));
        ok!(fd::close(r));
        ensure!(fd::write(w, b"a") == Ok(1), "{scope:?}: write with a same-table dup of the read end left: {:?}", fd::write(w, b"a"));
        ok!(fd::close(r2));
        ensure!(fd::write(w, b"a") == Err(abi::Error::BrokenPipe), "{scope:?}: write after the read end's last dup closed: {:?}", fd::write(w, b"a"));
        ok!(fd::close(w));
    }
    fd::unmap_all();
    Ok(None)
}

/// The ring goes with the last end (kernel objects counted), in both table kinds, whichever
/// end closes last, dup'ed across tables too; never while an end is open. Catches: a ring left
/// in the process-wide table's share (planted: no `free_ring`: "1 kernel objects left"), a
/// ring freed with an end still open (planted: free at the first close: "write after the
/// other end closed: Err(NoSuchObject)").
fn fd_pipe_ring_freed() -> TestResult {
    ok!(fd::table(Scope::Private));
    ok!(fd::table(Scope::Process));
    let k0 = live_kobjects();
    for scope in [Scope::Process, Scope::Private] {
        for read_first in [true, false] {
            let (r, w) = ok!(fd::pipe(scope));
            ensure!(ok!(fd::write(w, b"zz")) == 2, "write");
            let (first, last) = if read_first { (r, w) } else { (w, r) };
            ok!(fd::close(first));
            ensure!(live_kobjects() > k0, "{scope:?}: the ring went with one end open");
            let mut b = [0u8; 2];
            let used = if read_first { fd::write(w, b"q").map(|_| ()) } else { fd::read(r, &mut b).map(|_| ()) };
            ensure!(used == Ok(()) || used == Err(abi::Error::BrokenPipe), "{scope:?}: use after the other end closed: {used:?}");
            ok!(fd::close(last));
            ensure!(live_kobjects() == k0, "{scope:?} (read end first: {read_first}): {} kernel objects left", live_kobjects() - k0);
        }
    }
    // A process-wide pipe dup'ed into the private table, the process-wide ends closed first:
    // the private end frees the ring from both tables.
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let pr = ok!(fd::dup(r, Scope::Private));
    ok!(fd::close(r));
    ok!(fd::close(w));
    ensure!(live_kobjects() > k0, "the ring went with a private end open");
    ok!(fd::close(pr));
    ensure!(live_kobjects() == k0, "dup'ed pipe: {} kernel objects left", live_kobjects() - k0);
    fd::unmap_all();
    Ok(None)
}

/// On another core: take a private read end of the parent's pipe (a dup of its process-wide
/// one) and end without closing it.
fn t_keep_read_end(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor, alive until this thread is joined.
    let r = unsafe { *(arg as *const fd::Fd) };
    fd::dup(r, Scope::Private).is_err() as u64
}

/// A context that ends without closing its private descriptors has them closed at its end
/// (`fd::close_private_at_exit`): here the pipe's last read end is a thread's private dup,
/// so once the thread is over a write gets `BrokenPipe`, and the last close frees the ring.
/// Catches: no close at a context's end (planted: the call in `thread_start` removed:
/// "write after the last reader's thread ended: Ok(1)").
fn fd_pipe_end_dropped_at_exit() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let freed0 = fd::rings_freed();
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let boxed = Box::new(r);
    let t = ok!(thread::spawn(other, t_keep_read_end, &*boxed as *const fd::Fd as u64));
    ensure!(ok!(t.join()) == 0, "the thread could not dup the read end");
    ok!(fd::close(r));
    let got = fd::write(w, b"x");
    ensure!(got == Err(abi::Error::BrokenPipe), "write after the last reader's thread ended: {got:?} (its private read end was not dropped)");
    ok!(fd::close(w));
    ensure!(fd::rings_freed() == freed0 + 1, "rings freed {} -> {} (want one more: the ring goes with its last end)", freed0, fd::rings_freed());
    fd::unmap_all();
    Ok(None)
}

/// Bytes `fd_pipe_write_blocks_when_full` writes in one call: more than a ring holds.
const FULL_WRITE: usize = fd::PIPE_BYTES as usize + 4096;

fn full_write_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// On another core: wait 30 ms (the writer fills the ring meanwhile), then read to the end of
/// file. 0 if exactly `FULL_WRITE` bytes came, in order; else 1 + what went wrong.
fn t_pipe_slow_reader(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor, alive until this thread is joined.
    let r = unsafe { *(arg as *const fd::Fd) };
    libos::time::wait_until(30, || false);
    let mut got = 0usize;
    let mut b = [0u8; 4096];
    loop {
        match fd::read(r, &mut b) {
            Ok(0) => break,
            Ok(n) => {
                if (0..n).any(|i| b[i] != full_write_byte(got + i)) {
                    return 2;
                }
                got += n;
            }
            Err(_) => return 3,
        }
    }
    fd::unmap_all();
    if got == FULL_WRITE { 0 } else { 1 }
}

/// A write of more than the ring holds waits for the reader and returns every byte (POSIX
/// blocking write); the reader on another core gets them all, in order, then end of file.
/// Then a write into a full pipe whose last reader closes returns what it wrote, and a write
/// of at most `PIPE_BUF` bytes goes in whole. Catches: a write that returns the bytes that fit
/// (planted: the wait loop removed: "one write of 69632 bytes returned Ok(65280)"); a small
/// write taken in pieces (planted: `whole` always false: "the reader's first read got 65280
/// bytes").
fn fd_pipe_write_blocks_when_full() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let boxed = Box::new(r);
    let t = ok!(thread::spawn(other, t_pipe_slow_reader, &*boxed as *const fd::Fd as u64));
    let data: alloc::vec::Vec<u8> = (0..FULL_WRITE).map(full_write_byte).collect();
    let n = fd::write(w, &data);
    ok!(fd::close(w));
    let rc = ok!(t.join());
    ensure!(n == Ok(FULL_WRITE), "one write of {FULL_WRITE} bytes returned {n:?}");
    ensure!(rc == 0, "the reader saw {} (1 wrong count, 2 wrong byte, 3 error)", rc);
    ok!(fd::close(r));
    // The only read end closes (on another core, after 30 ms) while the write waits for room.
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let boxed = Box::new(r);
    let t = ok!(thread::spawn(other, t_close_late, &*boxed as *const fd::Fd as u64));
    let n = fd::write(w, &data);
    ensure!(ok!(t.join()) == 0, "the closing thread failed");
    let cap = fd::PIPE_BYTES as usize - 256;
    ensure!(n == Ok(cap), "a write into a pipe whose reader closed while it waited: {n:?} (want the {cap} bytes that fit)");
    ensure!(fd::write(w, b"x") == Err(abi::Error::BrokenPipe), "the next write: {:?}", fd::write(w, b"x"));
    ok!(fd::close(w));
    // A small write into a ring with room for 10 bytes waits and goes in whole: the reader's
    // first read (30 ms later, into a buffer larger than the ring) finds only the first write.
    let (r, w) = ok!(fd::pipe(Scope::Process));
    ensure!(fd::write(w, &data[..cap - 10]) == Ok(cap - 10), "filling the ring");
    PROBE_FIRST.store(u64::MAX, Ordering::SeqCst);
    let boxed = Box::new(r);
    let t = ok!(thread::spawn(other, t_probe_reader, &*boxed as *const fd::Fd as u64));
    let n = fd::write(w, &[7u8; 100]);
    ok!(fd::close(w));
    let rc = ok!(t.join());
    let first = PROBE_FIRST.load(Ordering::SeqCst);
    ensure!(n == Ok(100) && rc == 0, "small write {n:?}, reader {rc} (1 wrong total, 2 error)");
    ensure!(first == (cap - 10) as u64, "the reader's first read got {first} bytes: the 100-byte write went in pieces (want {} then 100)", cap - 10);
    ok!(fd::close(r));
    fd::unmap_all();
    Ok(None)
}

/// The byte count of `t_probe_reader`'s first read.
static PROBE_FIRST: AtomicU64 = AtomicU64::new(0);

/// On another core: wait 30 ms, read once into a buffer larger than the ring (recording how
/// much came), then read to the end of file: 0 if `cap - 10 + 100` bytes came in all.
fn t_probe_reader(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor, alive until this thread is joined.
    let r = unsafe { *(arg as *const fd::Fd) };
    libos::time::wait_until(30, || false);
    let mut b = alloc::vec![0u8; fd::PIPE_BYTES as usize + 256];
    let mut total = 0usize;
    loop {
        match fd::read(r, &mut b) {
            Ok(0) => break,
            Ok(n) => {
                if total == 0 {
                    PROBE_FIRST.store(n as u64, Ordering::SeqCst);
                }
                total += n;
            }
            Err(_) => return 2,
        }
    }
    fd::unmap_all();
    (total != fd::PIPE_BYTES as usize - 256 - 10 + 100) as u64
}

/// On another core: wait 30 ms, then close the descriptor `arg` points at.
fn t_close_late(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's descriptor, alive until this thread is joined.
    let r = unsafe { *(arg as *const fd::Fd) };
    libos::time::wait_until(30, || false);
    let rc = fd::close(r).is_err() as u64;
    fd::unmap_all();
    rc
}

const CLOSE_RACES: u64 = 300;
static RACE_GO: AtomicU64 = AtomicU64::new(0);
static RACE_DONE: AtomicU64 = AtomicU64::new(0);
static RACE_W: AtomicU64 = AtomicU64::new(0);
static RACE_BAD: AtomicU64 = AtomicU64::new(0);

/// On another core: close round `i`'s write end as soon as the round starts.
fn t_close_racer(table: u64) -> u64 {
    for i in 1..=CLOSE_RACES {
        libos::time::wait_until(10_000, || RACE_GO.load(Ordering::Acquire) == i);
        let w = fd::Fd { table, obj: RACE_W.load(Ordering::Acquire) };
        if fd::close(w).is_err() {
            RACE_BAD.fetch_add(1, Ordering::Relaxed);
        }
        RACE_DONE.store(i, Ordering::Release);
    }
    fd::unmap_all();
    0
}

/// The last read end and the last write end closed at once on two cores, 300 times: every
/// ring freed exactly once (`rings_freed`), none left (kernel objects), both closes succeed.
/// Catches (planted: the free decided by two separate looks, "my half is 0, then the word is
/// 0", which both closers can see): "300 rounds freed 3xx rings".
fn fd_pipe_close_race() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let table = ok!(fd::table(Scope::Process));
    let (k0, f0) = (live_kobjects(), fd::rings_freed());
    RACE_GO.store(0, Ordering::SeqCst);
    RACE_DONE.store(0, Ordering::SeqCst);
    RACE_BAD.store(0, Ordering::SeqCst);
    let t = ok!(thread::spawn(other, t_close_racer, table));
    for i in 1..=CLOSE_RACES {
        let (r, w) = ok!(fd::pipe(Scope::Process));
        RACE_W.store(w.obj, Ordering::Release);
        RACE_GO.store(i, Ordering::Release);
        if fd::close(r).is_err() {
            RACE_BAD.fetch_add(1, Ordering::Relaxed);
        }
        ensure!(libos::time::wait_until(10_000, || RACE_DONE.load(Ordering::Acquire) == i), "the racer did not finish round {i} in 10 s");
    }
    ensure!(ok!(t.join()) == 0, "racer failed");
    let freed = fd::rings_freed() - f0;
    ensure!(RACE_BAD.load(Ordering::SeqCst) == 0, "{} closes failed", RACE_BAD.load(Ordering::SeqCst));
    ensure!(freed == CLOSE_RACES, "{CLOSE_RACES} rounds freed {freed} rings");
    ensure!(live_kobjects() == k0, "{} kernel objects left", live_kobjects() - k0);
    fd::unmap_all();
    Ok(None)
}

/// A cfork child (sharing the process-wide table) holding its own end of the parent's pipe:
/// a private dup in the child. Returns a bit mask of failed checks.
fn child_pipe_end(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's two descriptors (the child's copy of its heap).
    let [r, w] = unsafe { *(arg as *const [fd::Fd; 2]) };
    let mut bad = 0;
    let Ok(mine) = fd::dup(r, Scope::Private) else { return 1 };
    // The shared table's read end closed: the child's private end keeps the pipe open.
    bad |= (fd::close(r).is_err() as u64) << 1;
    bad |= ((fd::write(w, b"d") != Ok(1)) as u64) << 2;
    let mut b = [0u8; 8];
    bad |= ((fd::read(mine, &mut b) != Ok(4) || &b[..4] != b"abcd") as u64) << 3;
    bad |= (fd::close(mine).is_err() as u64) << 4;
    // The child's end was the last read end.
    bad |= ((fd::write(w, b"e") != Err(abi::Error::BrokenPipe)) as u64) << 5;
    fd::unmap_all();
    bad
}

/// Ends held by a cfork child count (the counts live in the ring, which both processes map).
/// Catches: ends counted per process (planted: the child's private dup not counted:
/// "child checks failed, bit mask 0x..." with the write after the close refused).
fn fd_pipe_cfork_end() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let (r, w) = ok!(fd::pipe(Scope::Process));
    ensure!(ok!(fd::write(w, b"abc")) == 3, "write");
    let boxed = Box::new([r, w]);
    let (share, seg) = ok!(fd::cfork_share_table());
    let child = ok!(cfork(other, &CforkOpts { shares: &[share], segments: &[seg], ..Default::default() }, child_pipe_end, &*boxed as *const [fd::Fd; 2] as u64));
    let bad = ok!(child.join());
    ensure!(bad == 0, "child checks failed, bit mask {bad:#x}");
    ensure!(fd::write(w, b"f") == Err(abi::Error::BrokenPipe), "parent's write after the child's end closed: {:?}", fd::write(w, b"f"));
    ok!(fd::close(w));
    fd::unmap_all();
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// Heap

const STRESS_BLOCKS: usize = 1500;
const MAXC: usize = 16;
static SLOTS: [[(AtomicU64, AtomicU64); STRESS_BLOCKS]; MAXC] = [const { [const { (AtomicU64::new(0), AtomicU64::new(0)) }; STRESS_BLOCKS] }; MAXC];
static STRESS_BAR: AtomicU64 = AtomicU64::new(0);
static STRESS_N: AtomicU64 = AtomicU64::new(0);

fn stress_wait(phase: u64) {
    let n = STRESS_N.load(Ordering::SeqCst);
    STRESS_BAR.fetch_add(1, Ordering::SeqCst);
    // These waits spin: the leak check's exact counts need every core awake in the window
    // (with halting waits it saw ~800 kernel slab objects more after than before).
    while STRESS_BAR.load(Ordering::SeqCst) < phase * n {
        core::hint::spin_loop();
    }
}

fn size_of_block(i: usize) -> usize {
    if i % 100 == 99 {
        100_000 // a large block (over the 64 KiB largest size class): its own segment
    } else {
        16 + (i * 37) % 3000
    }
}

static STRESS_DONE: AtomicU64 = AtomicU64::new(0);

/// Each participant (index `k` = core) allocates (two thirds of the blocks are kept for
/// another core), frees the kept blocks of core k+1 (remote frees), then frees its own
/// rest. Returns the number of corrupt blocks seen.
fn stress_body(k: u64) -> u64 {
    let n = STRESS_N.load(Ordering::SeqCst);
    let k = k as usize;
    let mut local: Vec<Box<[u8]>> = Vec::new();
    for i in 0..STRESS_BLOCKS {
        let mut b = alloc::vec![0u8; size_of_block(i)].into_boxed_slice();
        b[0] = k as u8;
        if i % 3 == 0 {
            local.push(b); // freed locally below
        } else {
            let len = b.len();
            let p = Box::into_raw(b) as *mut u8 as u64;
            SLOTS[k][i].0.store(p, Ordering::Relaxed);
            SLOTS[k][i].1.store(len as u64, Ordering::Relaxed);
        }
    }
    drop(local);
    stress_wait(2);
    let victim = (k + 1) % n as usize;
    let mut bad = 0;
    for slot in SLOTS[victim].iter() {
        let p = slot.0.swap(0, Ordering::Relaxed);
        if p != 0 {
            let len = slot.1.load(Ordering::Relaxed) as usize;
            // SAFETY: `p`/`len` describe a `Box<[u8]>` leaked by core `victim` above; we
            // are the only core that takes it (swap to 0).
            let b = unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(p as *mut u8, len)) };
            if b[0] != victim as u8 {
                bad += 1;
            }
        }
    }
    stress_wait(3);
    bad
}

/// A thread's part: wait for the start, run, give the heap back, wait until the main
/// context has counted free pages (so thread set-up and tear-down are outside the window).
fn t_stress(k: u64) -> u64 {
    stress_wait(1);
    let bad = stress_body(k);
    // Every remote free to us was posted before barrier 3: drain and give chunks back. A
    // thread's heap holds nothing else, so it must be empty now.
    let code = if !libos::heap::trim() { 1000 + libos::heap::live_blocks() } else { bad };
    stress_wait(4);
    while STRESS_DONE.load(Ordering::SeqCst) == 0 {
        core::hint::spin_loop();
    }
    code
}

/// What the leak check compares: pages not in use (free pages plus the pages the kernel
/// heap's slabs hold: how many slab pages are held depends on when each core drains the
/// frees other cores sent it, like this heap's remote-free lists), slab objects, and
/// kernel objects. Each is an exact count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MemCount {
    pages: i64,
    slab_objects: i64,
    kobjects: u64,
}

fn mem_count() -> MemCount {
    let s = sys::sys_info().unwrap_or_default();
    MemCount { pages: s.free_pages as i64 + s.slab_pages, slab_objects: s.kernel_objects, kobjects: s.live_kobjects }
}

/// The main context's part. The window is exact: it opens when every thread has arrived at
/// barrier 1 (set up, not yet allocating: nobody passes barrier 1 before we arrive) and
/// closes at barrier 4, after every core (this one too) has drained its remote-free list and
/// trimmed. Every page and object the work took must be back by then unless something leaks.
fn stress_main(n: u64) -> (MemCount, MemCount, u64) {
    while STRESS_BAR.load(Ordering::SeqCst) < n - 1 {
        core::hint::spin_loop();
    }
    let before = mem_count();
    stress_wait(1);
    let bad = stress_body(0);
    // This core still has live blocks (the test's own), so `trim` keeps its chunks, but it
    // takes the remote-free list: large blocks other cores freed give their pages back now.
    libos::heap::trim();
    stress_wait(4);
    (before, mem_count(), bad)
}

/// One run; returns the counts at the start and at the end of the work.
fn stress_once() -> Result<(MemCount, MemCount), String> {
    // Participant k works on SLOTS[k]: we are 0, the threads on the free cores 1.. .
    let cores: Vec<u64> = core::iter::once(me()).chain(others()).take(MAXC).collect();
    let n = cores.len() as u64;
    STRESS_N.store(n, Ordering::SeqCst);
    STRESS_BAR.store(0, Ordering::SeqCst);
    STRESS_DONE.store(0, Ordering::SeqCst);
    let mut ts = Vec::with_capacity(cores.len());
    for (k, &c) in cores.iter().enumerate().skip(1) {
        match thread::spawn(c, t_stress, k as u64) {
            Ok(t) => ts.push((c, t)),
            Err(e) => {
                STRESS_DONE.store(1, Ordering::SeqCst);
                fail!("spawn on {c}: {e:?}")
            }
        }
    }
    let (before, after, mine) = stress_main(n);
    STRESS_DONE.store(1, Ordering::SeqCst);
    ensure!(mine == 0, "core {} freed {mine} corrupt blocks", me());
    for (c, t) in ts {
        let code = ok!(t.join());
        ensure!(code == 0, "core {c}: code {code} (1000+ = live blocks left)");
    }
    Ok((before, after))
}

fn heap_stress_no_leak() -> TestResult {
    // The first run grows this core's heap (which keeps its chunks: it has live blocks) and
    // the kernel's caches; every later run must end with exactly the counts it started with.
    stress_once()?;
    for run in 1..=3 {
        let (before, after) = stress_once()?;
        ensure!(before == after, "run {run}: leak: {before:?} before, {after:?} after");
    }
    let rf: u64 = (0..ncores() as usize).map(libos::heap::remote_frees).sum();
    ensure!(others().is_empty() || rf > 0, "no remote frees happened");
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// Measurements (TCG: functional numbers, not a scalability claim)

fn measure_malloc_local() {
    let iters = 20_000u64;
    let t0 = libos::time::ticks();
    for i in 0..iters {
        let b = Box::new(i);
        core::hint::black_box(&b);
    }
    let dt = libos::time::ticks() - t0;
    println!("ltest: measure malloc_free_local ns_per_op={} iters={iters}", libos::time::ticks_to_ns(dt) / iters);
}

static REMOTE_PTRS: [AtomicU64; 5000] = [const { AtomicU64::new(0) }; 5000];

fn t_alloc_many(_: u64) -> u64 {
    for p in REMOTE_PTRS.iter() {
        p.store(Box::into_raw(Box::new(0u64)) as u64, Ordering::Relaxed);
    }
    0
}

fn t_drain(_: u64) -> u64 {
    let t0 = libos::time::ticks();
    libos::heap::trim();
    libos::time::ticks_to_ns(libos::time::ticks() - t0)
}

fn measure_remote_free() {
    let Some(&c) = others().first() else { return };
    let Ok(t) = thread::spawn(c, t_alloc_many, 0) else { return };
    let _ = t.join();
    let t0 = libos::time::ticks();
    for p in REMOTE_PTRS.iter() {
        // SAFETY: each pointer is a `Box<u64>` the thread leaked; freed once here.
        drop(unsafe { Box::from_raw(p.swap(0, Ordering::Relaxed) as *mut u64) });
    }
    let dt = libos::time::ticks() - t0;
    let drain = thread::spawn(c, t_drain, 0).ok().and_then(|t| t.join().ok()).unwrap_or(0);
    let n = REMOTE_PTRS.len() as u64;
    println!(
        "ltest: measure free_remote ns_per_op={} owner_drain_ns_per_block={} blocks={n}",
        libos::time::ticks_to_ns(dt) / n,
        drain / n
    );
}

fn trivial(_: u64) -> u64 {
    7
}

fn measure_cfork() {
    let Some(&c) = others().first() else { return };
    let runs = 5u64;
    let t0 = libos::time::ticks();
    for _ in 0..runs {
        if let Ok(ch) = cfork(c, &CforkOpts::default(), trivial, 0) {
            let _ = ch.join();
        }
    }
    let dt = libos::time::ticks() - t0;
    let t1 = libos::time::ticks();
    for _ in 0..runs {
        if let Ok(t) = thread::spawn(c, trivial, 0) {
            let _ = t.join();
        }
    }
    let dt2 = libos::time::ticks() - t1;
    println!(
        "ltest: measure cfork_join_us={} thread_spawn_join_us={} runs={runs}",
        libos::time::ticks_to_ns(dt) / runs / 1000,
        libos::time::ticks_to_ns(dt2) / runs / 1000
    );
}

static DUP_GO: AtomicU64 = AtomicU64::new(0);
const DUP_ITERS: u64 = 2000;

fn dup_close_loop(_: u64) -> u64 {
    let Ok(f) = fd::open_console(Scope::Private) else { return u64::MAX };
    // Warm-up (untimed): the emulator translates the loop's code on its first run, which
    // would otherwise be charged to whichever measurement comes first.
    for _ in 0..DUP_ITERS {
        match fd::dup(f, Scope::Private) {
            Ok(d) => {
                let _ = fd::close(d);
            }
            Err(_) => return u64::MAX,
        }
    }
    while DUP_GO.load(Ordering::Acquire) == 0 {
        core::hint::spin_loop();
    }
    let t0 = libos::time::ticks();
    for _ in 0..DUP_ITERS {
        match fd::dup(f, Scope::Private) {
            Ok(d) => {
                let _ = fd::close(d);
            }
            Err(_) => return u64::MAX,
        }
    }
    let ns = libos::time::ticks_to_ns(libos::time::ticks() - t0);
    let _ = fd::close(f);
    ns
}

/// Sums over `cores`: system calls, local TLB flushes, shootdown IPIs sent, IPIs received.
fn core_counters(cores: &[u64]) -> [u64; 4] {
    let mut out = [0; 4];
    for &c in cores {
        if let Ok(s) = sys::core_stats(c) {
            out[0] += s.syscalls;
            out[1] += s.tlb_flushes_local;
            out[2] += s.shootdown_ipis_sent;
            out[3] += s.ipis_received;
        }
    }
    out
}

fn measure_dup_close() {
    // We and the free cores.
    let all: Vec<u64> = core::iter::once(me()).chain(others()).collect();
    for ncore in [1, all.len() as u64] {
        let cores = &all[..ncore as usize];
        DUP_GO.store(0, Ordering::SeqCst);
        let ts: Vec<_> = cores[1..].iter().filter_map(|&c| thread::spawn(c, dup_close_loop, 0).ok()).collect();
        libos::time::spin_ms(20);
        let s0 = core_counters(cores);
        DUP_GO.store(1, Ordering::SeqCst);
        let mut per = Vec::new();
        per.push(dup_close_loop(0));
        for t in ts {
            per.push(t.join().unwrap_or(u64::MAX));
        }
        let s1 = core_counters(cores);
        let worst = per.iter().copied().max().unwrap_or(1).max(1);
        let ops = DUP_ITERS * 1_000_000_000 / worst;
        // What the kernel did meanwhile, per pair (includes the thread start-up and join).
        let pairs = DUP_ITERS * ncore;
        let d: Vec<u64> = (0..4).map(|i| s1[i] - s0[i]).collect();
        println!(
            "ltest: measure fd_dup_close_private cores={ncore} per_core_ops_per_s={ops} (slowest core; dup+close pairs) syscalls_per_pair={}.{:02} tlb_flushes={} shootdown_ipis={} ipis_received={}",
            d[0] / pairs,
            d[0] * 100 / pairs % 100,
            d[1],
            d[2],
            d[3]
        );
        if ncore == all.len() as u64 {
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// Eventfds, sockets and readiness: one descriptor model for every kind

/// Read an eventfd's 8 bytes as a number.
fn ev_read(f: fd::Fd) -> Result<u64, abi::Error> {
    let mut b = [0u8; 8];
    fd::read(f, &mut b).map(|_| u64::from_ne_bytes(b))
}

fn ev_write(f: fd::Fd, v: u64) -> Result<usize, abi::Error> {
    fd::write(f, &v.to_ne_bytes())
}

/// Linux's eventfd counter, in both tables and dup'ed across them: a read returns the count
/// and resets it, a write adds, `EFD_SEMAPHORE` reads 1 at a time, `EFD_NONBLOCK` answers
/// `WouldBlock` where a call would wait (an empty counter; a sum past `u64::MAX - 1`), bad
/// sizes and `u64::MAX` are `InvalidArgument`, `poll` follows the counter, and the last close
/// frees the page (kernel objects counted). Catches: the semaphore mode ignored ("semaphore:
/// first read Ok(2)"), a read that does not reset ("second read Ok(3)"), a counter per open
/// file instead of per eventfd ("the dup read Ok(0)"), a page left after the last close
/// ("1 kernel objects left").
fn fd_eventfd_counter() -> TestResult {
    ok!(fd::table(Scope::Private));
    ok!(fd::table(Scope::Process));
    let k0 = live_kobjects();
    for scope in [Scope::Private, Scope::Process] {
        let e = ok!(fd::eventfd(scope, 3, fd::EFD_NONBLOCK));
        ensure!(ok!(fd::poll(e)) == fd::Ready { read: true, write: true, hangup: false, error: false }, "{scope:?}: poll with 3: {:?}", fd::poll(e));
        let got = ev_read(e);
        ensure!(got == Ok(3), "{scope:?}: first read {got:?}");
        let got = ev_read(e);
        ensure!(got == Err(abi::Error::WouldBlock), "{scope:?}: second read {got:?}");
        ensure!(!ok!(fd::poll(e)).read, "{scope:?}: readable at 0");
        ensure!(ev_write(e, 5) == Ok(8) && ev_write(e, 2) == Ok(8), "{scope:?}: writes");
        let mut small = [0u8; 7];
        ensure!(fd::read(e, &mut small) == Err(abi::Error::InvalidArgument), "{scope:?}: 7-byte read");
        ensure!(fd::write(e, &[1u8; 7]) == Err(abi::Error::InvalidArgument), "{scope:?}: 7-byte write");
        ensure!(ev_write(e, u64::MAX) == Err(abi::Error::InvalidArgument), "{scope:?}: write of u64::MAX");
        // A dup into the other table is the same eventfd: one counter.
        let other = if let Scope::Private = scope { Scope::Process } else { Scope::Private };
        let d = ok!(fd::dup(e, other));
        let got = ev_read(d);
        ensure!(got == Ok(7), "{scope:?}: the dup read {got:?}");
        // Full: u64::MAX - 1 is the most it holds.
        ensure!(ev_write(e, u64::MAX - 1) == Ok(8), "{scope:?}: write up to the limit");
        let got = ev_write(d, 1);
        ensure!(got == Err(abi::Error::WouldBlock) && !ok!(fd::poll(d)).write, "{scope:?}: write past the limit {got:?}");
        ensure!(ev_read(d) == Ok(u64::MAX - 1), "{scope:?}: read the limit");
        ok!(fd::close(e));
        ensure!(ev_write(d, 9) == Ok(8) && ev_read(d) == Ok(9), "{scope:?}: the dup after the first closed");
        ok!(fd::close(d));
        ensure!(live_kobjects() == k0, "{scope:?}: {} kernel objects left", live_kobjects() - k0);
        // Semaphore mode: 1 at a time.
        let s = ok!(fd::eventfd(scope, 2, fd::EFD_SEMAPHORE | fd::EFD_NONBLOCK));
        let got = ev_read(s);
        ensure!(got == Ok(1), "{scope:?}: semaphore: first read {got:?}");
        let got = ev_read(s);
        ensure!(got == Ok(1), "{scope:?}: semaphore: second read {got:?}");
        let got = ev_read(s);
        ensure!(got == Err(abi::Error::WouldBlock), "{scope:?}: semaphore: third read {got:?}");
        ok!(fd::close(s));
        ensure!(fd::eventfd(scope, 0, 0x40).is_err(), "{scope:?}: an unknown flag accepted");
    }
    ensure!(live_kobjects() == k0, "{} kernel objects left", live_kobjects() - k0);
    fd::unmap_all();
    Ok(None)
}

/// On another core: wait 30 ms, then write 5 to the eventfd, then (after 30 ms more) write
/// "x" into the pipe.
fn t_late_event(arg: u64) -> u64 {
    // SAFETY: `arg` points at the parent's two descriptors, alive until this thread is joined.
    let [e, w] = unsafe { *(arg as *const [fd::Fd; 2]) };
    libos::time::wait_until(30, || false);
    let mut bad = (ev_write(e, 5) != Ok(8)) as u64;
    libos::time::wait_until(30, || false);
    bad |= ((fd::write(w, b"x") != Ok(1)) as u64) << 1;
    fd::unmap_all();
    bad
}

/// A blocking eventfd read sleeps until a writer on another core adds, and is woken by it
/// (not by a timeout). Catches: a write that wakes no sleeper (planted: no `notify` after the
/// add: "0 of the naps were woken").
fn fd_eventfd_blocking_read() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let e = ok!(fd::eventfd(Scope::Process, 0, 0));
    let (r, w) = ok!(fd::pipe(Scope::Process));
    let arg = Box::new([e, w]);
    let before = fd::wait_counts();
    let t = ok!(thread::spawn(other, t_late_event, &*arg as *const [fd::Fd; 2] as u64));
    let got = ev_read(e);
    let after = fd::wait_counts();
    ensure!(got == Ok(5), "blocking read {got:?}");
    ensure!(after.naps > before.naps, "the read did not sleep ({} naps)", after.naps - before.naps);
    ensure!(after.woken > before.woken, "0 of the naps were woken ({} naps)", after.naps - before.naps);
    ensure!(ok!(t.join()) == 0, "writer thread failed");
    for x in [e, r, w] {
        ok!(fd::close(x));
    }
    fd::unmap_all();
    Ok(None)
}

/// Attach a loopback stack on this core (once per program): sockets at 127.0.0.1.
fn loopback() -> Result<(), String> {
    match libos::net::host::attach(Box::new(libos::net::host::LoopStack::new())) {
        Ok(()) | Err(abi::Error::AlreadyExists) => Ok(()),
        Err(e) => Err(alloc::format!("attach a loopback stack: {e:?}")),
    }
}

/// A connected pair of loopback sockets (client, server) and the listener.
fn socket_pair(port: u16, local: u16) -> Result<(fd::Fd, fd::Fd, fd::Fd), String> {
    loopback()?;
    let l = fd::tcp_listen(Scope::Private, port, 2).map_err(|e| alloc::format!("listen: {e:?}"))?;
    let c = fd::tcp_connect(Scope::Private, [127, 0, 0, 1], port, local).map_err(|e| alloc::format!("connect: {e:?}"))?;
    let s = fd::accept(l).map_err(|e| alloc::format!("accept: {e:?}"))?;
    Ok((l, c, s))
}

/// A TCP connection over loopback, both ends descriptors: `write` on one is `read` on the
/// other through the calls files and pipes use, `poll` and `fstat` answer for sockets, a
/// non-blocking read with nothing is `WouldBlock`, a listener is no stream, the peer's close
/// reads as end of file, a private socket is not usable from another core, and a socket
/// descriptor may be duplicated into the process-wide table. Every slot and smoltcp socket is gone
/// after the closes. Catches: a read that ignores the peer's close (planted: no `Ok(0)`
/// branch: the test waits, then "read after the peer closed" fails by its timeout), a
/// socket left in the stack after close ("(1, 1) slots/sockets left").
fn fd_socket_loopback() -> TestResult {
    let (l, c, s) = socket_pair(7001, 40001)?;
    ensure!(ok!(fd::write(c, b"hello")) == 5, "client write");
    let mut b = [0u8; 16];
    ensure!(fd::read(s, &mut b) == Ok(5) && &b[..5] == b"hello", "server read {b:?}");
    ensure!(ok!(fd::write(s, b"world!")) == 6, "server write");
    ensure!(ok!(fd::poll(c)).read, "client not readable with bytes waiting");
    ensure!(fd::read(c, &mut b) == Ok(6) && &b[..6] == b"world!", "client read {b:?}");
    ensure!(ok!(fd::fstat(s)).mode & 0o170000 == fd::S_IFSOCK, "fstat mode {:o}", ok!(fd::fstat(s)).mode);
    ensure!(fd::read(l, &mut b) == Err(abi::Error::InvalidArgument), "read of a listener: {:?}", fd::read(l, &mut b));
    ok!(fd::set_nonblocking(s, true));
    ensure!(fd::read(s, &mut b) == Err(abi::Error::WouldBlock), "non-blocking read with nothing: {:?}", fd::read(s, &mut b));
    ensure!(fd::lseek(s, 0, 0) == Err(abi::Error::WrongType), "lseek on a socket");
    // A socket may be in the process-wide table too (a threaded Linux program's descriptors
    // move there at its first clone); its calls still answer on its own core only.
    let sp = ok!(fd::dup(s, Scope::Process));
    ensure!(ok!(fd::fstat(sp)).mode & 0o170000 == fd::S_IFSOCK, "the process-wide dup is no socket");
    ok!(fd::close(sp));
    // Not from another core (its private table, and its stack, are this core's).
    if let Some(&other) = others().first() {
        let boxed = Box::new(s);
        let t = ok!(thread::spawn(other, t_visible, &*boxed as *const fd::Fd as u64));
        ensure!(ok!(t.join()) == 0, "a private socket is visible on core {other}");
    }
    // A same-table dup keeps the connection; the client's close reaches the server as EOF.
    let s2 = ok!(fd::dup(s, Scope::Private));
    ok!(fd::close(s));
    ok!(fd::set_nonblocking(s2, false));
    ok!(fd::close(c));
    let eof = fd::read(s2, &mut b);
    ensure!(eof == Ok(0), "read after the peer closed: {eof:?}");
    ensure!(ok!(fd::poll(s2)).read, "not readable at end of file");
    ok!(fd::close(s2));
    ok!(fd::close(l));
    let left = libos::time::wait_until(2_000, || {
        let _ = libos::net::host::poll();
        libos::net::host::counts() == Ok((0, 0))
    });
    ensure!(left, "{:?} slots/sockets left", libos::net::host::counts());
    Ok(None)
}

/// `poll_wait` over a pipe, a socket and an eventfd sleeps until a writer on another core
/// changes one of them, reports that one only, and a wait with nothing coming ends at its
/// timeout with 0. Without the socket the sleep is ended by the wake itself. Catches: a pipe
/// write that wakes no sleeper (planted: no `notify` in the pipe's write: "pipe round: 0 of N
/// naps were woken"), a `poll_wait` that spins (`naps` unchanged: "did not sleep"), a
/// readiness reported for the wrong descriptor.
fn fd_poll_sleeps_and_is_woken() -> TestResult {
    let Some(&other) = others().first() else { return Ok(Some(no_other_core())) };
    let (l, c, s) = socket_pair(7002, 40002)?;
    let e = ok!(fd::eventfd(Scope::Process, 0, 0));
    let (r, w) = ok!(fd::pipe(Scope::Process));
    // Nothing is coming: the timeout, with 0.
    let mut set = [fd::PollFd::new(r, true, false), fd::PollFd::new(s, true, false), fd::PollFd::new(e, true, false)];
    let t0 = libos::time::now_ns();
    let n = ok!(fd::poll_wait(&mut set, Some(20)));
    let ms = (libos::time::now_ns() - t0) / 1_000_000;
    ensure!(n == 0 && ms >= 20, "an idle poll_wait returned {n} after {ms} ms");
    let arg = Box::new([e, w]);
    let t = ok!(thread::spawn(other, t_late_event, &*arg as *const [fd::Fd; 2] as u64));
    // Round 1, with the socket: the eventfd fires.
    let before = fd::wait_counts();
    let n = ok!(fd::poll_wait(&mut set, Some(5_000)));
    let after = fd::wait_counts();
    ensure!(n == 1 && set[2].fired() && !set[0].fired() && !set[1].fired(), "socket round: {n} fired: {set:?}");
    ensure!(after.naps > before.naps, "socket round: did not sleep");
    ensure!(ev_read(e) == Ok(5), "the eventfd after the poll");
    // Round 2, pipe and eventfd: the pipe write wakes the sleeper.
    let mut set2 = [fd::PollFd::new(r, true, false), fd::PollFd::new(e, true, false)];
    let before = fd::wait_counts();
    let n = ok!(fd::poll_wait(&mut set2, Some(5_000)));
    let after = fd::wait_counts();
    ensure!(n == 1 && set2[0].fired() && !set2[1].fired(), "pipe round: {n} fired: {set2:?}");
    ensure!(after.naps > before.naps, "pipe round: did not sleep");
    ensure!(after.woken > before.woken, "pipe round: 0 of {} naps were woken", after.naps - before.naps);
    ensure!(ok!(t.join()) == 0, "writer thread failed");
    for x in [r, w, e, c, s, l] {
        ok!(fd::close(x));
    }
    fd::unmap_all();
    Ok(None)
}

/// 10 000 sockets (listening and connecting) and 10 000 eventfds opened and closed: nothing
/// runs out and nothing is left (socket slots, smoltcp sockets, private table, kernel
/// objects). Catches: a close that keeps the smoltcp socket (planted: no `remove` in
/// `free_slot`: "after 10000: (0, N) slots/sockets"), a slot never reused ("Busy" before the
/// end), an eventfd page never freed (kernel objects grow).
fn fd_open_close_10000() -> TestResult {
    loopback()?;
    // Connections earlier tests closed finish their goodbye first (FIN, ACK).
    let settled = libos::time::wait_until(2_000, || {
        let _ = libos::net::host::poll();
        libos::net::host::counts() == Ok((0, 0))
    });
    ensure!(settled, "before: {:?} slots/sockets", libos::net::host::counts());
    ok!(fd::table(Scope::Private));
    let k0 = live_kobjects();
    let p0 = fd::private_counts();
    for i in 0..10_000u32 {
        let l = match fd::tcp_listen(Scope::Private, 7100, 1) {
            Ok(l) => l,
            Err(e) => fail!("listen {i}: {e:?}"),
        };
        let c = match fd::tcp_connect(Scope::Private, [127, 0, 0, 1], 7999, 20000 + (i % 20000) as u16) {
            Ok(c) => c,
            Err(e) => fail!("connect {i}: {e:?}"),
        };
        let e = match fd::eventfd(Scope::Private, i, 0) {
            Ok(e) => e,
            Err(x) => fail!("eventfd {i}: {x:?}"),
        };
        for x in [l, c, e] {
            if let Err(x) = fd::close(x) {
                fail!("close {i}: {x:?}");
            }
        }
    }
    let counts = libos::net::host::counts();
    ensure!(counts == Ok((0, 0)), "after 10000: {counts:?} slots/sockets");
    ensure!(fd::private_counts() == p0, "private table {:?} -> {:?}", p0, fd::private_counts());
    ensure!(live_kobjects() == k0, "{} kernel objects left", live_kobjects() as i64 - k0 as i64);
    fd::unmap_all();
    Ok(None)
}


const TESTS: &[(&str, fn() -> TestResult)] = &[
    ("thread::shares_statics", threads_share_statics),
    ("thread::mutex_and_barrier", mutex_and_barrier),
    ("thread::barrier_halts_and_is_woken", barrier_halts_and_is_woken),
    ("cfork::every_core", cfork_every_core),
    ("cfork::shares_segment", cfork_shares_segment),
    ("fd::private_invisible", fd_private_invisible),
    ("fd::shared_set", fd_shared_set),
    ("fd::pipe_and_file", fd_pipe_and_file),
    ("fd::private_table", fd_private_table),
    ("fd::private_other_core", fd_private_other_core),
    ("fd::proc_table", fd_proc_table),
    ("fd::proc_concurrent", fd_proc_concurrent),
    ("fd::proc_cfork", fd_proc_cfork),
    ("fd::pipe_epipe_eof", fd_pipe_epipe_eof),
    ("fd::pipe_blocking_read", fd_pipe_blocking_read),
    ("fd::pipe_dup_keeps_open", fd_pipe_dup_keeps_open),
    ("fd::pipe_ring_freed", fd_pipe_ring_freed),
    ("fd::pipe_cfork_end", fd_pipe_cfork_end),
    ("fd::pipe_close_race", fd_pipe_close_race),
    ("fd::pipe_end_dropped_at_exit", fd_pipe_end_dropped_at_exit),
    ("fd::pipe_write_blocks_when_full", fd_pipe_write_blocks_when_full),
    ("fd::eventfd_counter", fd_eventfd_counter),
    ("fd::eventfd_blocking_read", fd_eventfd_blocking_read),
    ("fd::socket_loopback", fd_socket_loopback),
    ("fd::poll_sleeps_and_is_woken", fd_poll_sleeps_and_is_woken),
    ("fd::open_close_10000", fd_open_close_10000),
    ("heap::stress_no_leak", heap_stress_no_leak),
];

fn main(args: &'static str) -> u64 {
    let words: Vec<&str> = args.split_whitespace().filter(|w| *w != "nomeasure").collect();
    let (mut pass, mut failed, mut skipped) = (0, 0, 0);
    // Always first: the other tests use the free cores it finds.
    match cores_probe() {
        Ok(_) => {
            println!("utest cores::probe ... ok (free: {:?}, busy: {:?})", others(), busy_others());
            pass += 1;
        }
        Err(m) => {
            println!("utest cores::probe ... FAILED: {m}");
            failed += 1;
        }
    }
    for (name, f) in TESTS {
        if !words.is_empty() && !words.iter().any(|w| name.contains(w)) {
            continue;
        }
        match f() {
            Ok(None) => {
                println!("utest {name} ... ok");
                pass += 1;
            }
            Ok(Some(why)) => {
                println!("utest {name} ... skipped ({why})");
                skipped += 1;
            }
            Err(m) => {
                println!("utest {name} ... FAILED: {m}");
                failed += 1;
            }
        }
    }
    println!("utest: done {pass} passed, {failed} failed, {skipped} skipped");
    if !args.split_whitespace().any(|w| w == "nomeasure") {
        measure_malloc_local();
        measure_remote_free();
        measure_cfork();
        measure_dup_close();
    }
    if failed == 0 {
        0
    } else {
        1
    }
}
