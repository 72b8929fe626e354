//! webd: Corey's web server (seeds/000 §6.2, §8.4; docs/webd.md). **Front-end** cores each run
//! a private smoltcp stack over their own channel of the NIC and parse HTTP; **application**
//! cores own the file data and compute `filesum`; the two talk through one pair of
//! single-producer rings per (front-end, application core) pair (`percore::spsc`), so no lock
//! and no queue is shared by more than two cores.
//!
//! Usage: `webd [--mode random|locality|same-core] [--frontends LIST] [--apps LIST]
//! [--kc CORE] [--net-mode dedicated|polling|inline] [--port P] [--root DIR] [--requests N]
//! [--seconds S] [--warmup N] [--stats S] [--sockets K] [--halt-app CORE:N]`
//! (`key=value` works too). LIST is like `0`, `1,3` or `1-3`.
//!
//! - `mode`: `locality` (default): a file's requests go to its home application core (a hash
//!   of its name, `webcore::home_of`), the core that copied it into its own memory at start;
//!   `random`: any application core sums any file (a pseudo-random one per request);
//!   `same-core`: the front-end sums the file on its own core, in a server process it calls
//!   with a protected procedure call (Tornado).
//! - `frontends` (default: the core webd starts on) and `apps` (default: every other core but
//!   the kernel core). The core webd starts on coordinates; it need not have a role.
//! - `kc`: a kernel core drives the card (Corey's Dedicated configuration); without it the
//!   front-ends poll the card themselves (`inline`).
//! - `root`: the directory of the disk whose files are served (default `/`, all files under
//!   it, loaded into memory at start; boot with `cargo xtask run --disk IMG`).
//! - `requests`/`seconds`: stop after that many requests answered (after `warmup`) or seconds
//!   (default: run until killed).
//! - `halt-app CORE:N`: application core CORE stops after N sums (the bad-input test of an
//!   application core halted while requests are in flight).
//! - `idle`: `sleep` (default): a front-end with nothing to do for `poll-us` (less after the
//!   host descheduled it, `percore::poll`) sleeps in the kernel (`CONF_NET_WAIT`), woken when
//!   the kernel core fills its ring, the card interrupts (Inline) or, with a request out, the
//!   application core that pushes the reply wakes it (`nr::WAKE`); an application core whose
//!   rings stayed empty as long sleeps (`nr::WAIT`) until the front-end that hands it a
//!   request wakes it (`nr::WAKE`); both poll without pause again from the first work on; a
//!   kernel core polls adaptively (docs/net.md). `poll`: every core polls
//!   without pause (Corey's configuration).
//! - `wake`: `on` (default): a front-end wakes the application core it hands a request to if
//!   that core sleeps, and an application core wakes a front-end that sleeps waiting for its
//!   reply (so front-ends may sleep with requests out). `off`: front-ends do not wake sleeping
//!   application cores, which then sleep 1 ms, doubling up to 32 ms, and a request can wait
//!   out such a sleep; a front-end with a request out polls until the reply comes (kept to
//!   measure what the wakes save; `webd: app sleeps` and `webd: front-end sleeps` at the end
//!   count the sleeps).
//! - `poll-us`: how long a front-end or application core polls with nothing arriving before
//!   it sleeps (default 2000; 0: at the first empty look, so every hand-off between cores is
//!   a wake; at most 1000000).
//! - `steal`: a front-end sums a file itself when the application core it would hand the
//!   request to already has this many of its requests unanswered (1..=64; `off` or 0: never,
//!   Corey's configuration). Default 2 in random mode (any core may sum any file there, so the
//!   front-end is one more summer and a request waits behind at most two others), off in
//!   locality mode (the front-end would read the home core's data: Corey's point is that it
//!   does not); same-core mode has no application core.
//!
//! HTTP: GET and HEAD, keep-alive; `/filesum/NAME` answers the decimal sum of the bytes of file
//! `/NAME` (a path from `root`); `/stats` per-core counters as JSON; any other path the file
//! itself. Parsing, routing and limits are `webcore`'s, shared with the Linux baseline.
//!
//! Prints `webd: ready ...` when serving and, at the end, `webd: done requests=N ...` with
//! the share-nothing calibration (`calib_ops`, `calib_ns`) and every core's counts.
#![no_std]
#![no_main]

extern crate alloc;

use abi::{ObjName, ROLE_KC, ROLE_XC};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use libos::net::smoltcp::iface::SocketHandle;
use libos::net::smoltcp::socket::tcp;
use libos::net::stack::Stack;
use libos::net::{Mode as NetMode, Nic};
use libos::println;
use percore::pad::CachePadded;
use percore::spsc::{Consumer, Producer, Ring};
use webcore::http::{self, Method, Parsed, Status};
use webcore::{CoreStats, Route};

libos::main!(main);

#[path = "../common/calib.rs"]
mod calib;

const MAX_FRONTENDS: usize = 16;
const MAX_APPS: usize = 16;
const BUFFERS_PER_CHANNEL: u64 = 128;
/// Messages in flight per (front-end, application core) ring.
const RING_SLOTS: usize = 64;
/// Files and bytes loaded at start (the data lives in memory for the server's life).
const MAX_FILES: usize = 4096;
const MAX_TOTAL_BYTES: usize = 256 << 20;
/// A request whose first byte came this long ago and is still incomplete is dropped
/// (a client dribbling its request cannot hold a socket for ever).
const REQUEST_DEADLINE_NS: u64 = 10_000_000_000;
/// A filesum an application core has not answered in this time is answered 503.
const APP_DEADLINE_NS: u64 = 2_000_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Random,
    Locality,
    SameCore,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "random" => Some(Mode::Random),
            "locality" => Some(Mode::Locality),
            "same-core" => Some(Mode::SameCore),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Random => "random",
            Mode::Locality => "locality",
            Mode::SameCore => "same-core",
        }
    }
}

/// A file served: its name (a path from the served root), its home application core, and
/// its bytes, which the home core copies into its own memory at start (`ptr`/`len`, published
/// before that core says it is ready).
struct File {
    name: String,
    home: usize,
    ptr: AtomicUsize,
    len: usize,
}

impl File {
    fn data(&self) -> &'static [u8] {
        let p = self.ptr.load(Ordering::Acquire);
        if p == 0 || self.len == 0 {
            return &[];
        }
        // SAFETY: `p` is a leaked `Box<[u8]>` of `len` bytes, published by its home core before
        // the server started (Acquire pairs with its Release); never freed or written while
        // the server runs.
        unsafe { core::slice::from_raw_parts(p as *const u8, self.len) }
    }
}

/// Counts of one front-end core, written by that core only, on its own lines.
#[derive(Default)]
struct FrontCount {
    conns: AtomicU64,
    requests: AtomicU64,
    /// Filesums this front-end computed itself because the application core had `--steal`
    /// requests unanswered.
    stolen: AtomicU64,
    bad: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    ready: AtomicBool,
    exited: AtomicBool,
    /// Times the host descheduled this core in the middle of a polling stretch (percore::poll).
    preempted: AtomicU64,
    /// Sleeps taken while a request was out with an application core (`--wake on`, when the
    /// polling window says sleep); those an application core's `wake` ended (it pushed a
    /// reply); and those that ended otherwise with a reply already waiting (`late`: a reply
    /// that waited for the front-end to wake for another reason).
    out_naps: AtomicU64,
    out_woken: AtomicU64,
    out_late: AtomicU64,
}

/// Counts of one application core, written by that core only.
#[derive(Default)]
struct AppCount {
    sums: AtomicU64,
    bytes: AtomicU64,
    ready: AtomicBool,
    /// Cleared when the core stops serving (halted, or the run ended).
    alive: AtomicBool,
    exited: AtomicBool,
    /// Sleeps (`nr::WAIT`) taken; those a front-end's `wake` ended (or came before); and those
    /// that ended by their timeout with a request already waiting in a ring (a request that
    /// waited out the sleep: with wakes on, only a push that raced with the timeout).
    naps: AtomicU64,
    woken: AtomicU64,
    late: AtomicU64,
    /// As a front-end's `preempted`.
    preempted: AtomicU64,
}

static FRONT: [CachePadded<FrontCount>; MAX_FRONTENDS] = [const {
    CachePadded::new(FrontCount {
        conns: AtomicU64::new(0),
        requests: AtomicU64::new(0),
        stolen: AtomicU64::new(0),
        bad: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        ready: AtomicBool::new(false),
        exited: AtomicBool::new(false),
        preempted: AtomicU64::new(0),
        out_naps: AtomicU64::new(0),
        out_woken: AtomicU64::new(0),
        out_late: AtomicU64::new(0),
    })
}; MAX_FRONTENDS];
static APP: [CachePadded<AppCount>; MAX_APPS] = [const {
    CachePadded::new(AppCount {
        sums: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        ready: AtomicBool::new(false),
        alive: AtomicBool::new(false),
        exited: AtomicBool::new(false),
        naps: AtomicU64::new(0),
        woken: AtomicU64::new(0),
        late: AtomicU64::new(0),
        preempted: AtomicU64::new(0),
    })
}; MAX_APPS];
/// Set by an application core just before it sleeps (and cleared by whoever takes it): a
/// front-end that pushed a request and then sees it set wakes the core (`nr::WAKE`). On its
/// own line, written only around sleeps, so the front-ends' look after every push costs no
/// line transfer while the core is busy.
static APP_ASLEEP: [CachePadded<AtomicBool>; MAX_APPS] = [const { CachePadded::new(AtomicBool::new(false)) }; MAX_APPS];
/// Set by a front-end just before it sleeps with a request out at an application core (and
/// cleared by whoever takes it): the application core that pushes a reply and then sees it set
/// wakes the front-end (`nr::WAKE`, which ends its `CONF_NET_WAIT`). One line per front-end,
/// written only around such sleeps, as `APP_ASLEEP`.
static FRONT_ASLEEP: [CachePadded<AtomicBool>; MAX_FRONTENDS] = [const { CachePadded::new(AtomicBool::new(false)) }; MAX_FRONTENDS];
/// `--wake on` (the default): front-ends wake a sleeping application core when they hand it a
/// request, and an application core wakes a front-end that sleeps waiting for its reply (so a
/// front-end may sleep with requests out). `off`: neither; an application core waits out its
/// sleep and a front-end with a request out polls until the reply comes (kept to measure what
/// the wakes save). Written once by `main` before any other core starts.
static WAKE: AtomicBool = AtomicBool::new(true);
/// How long (ns) a front-end or application core polls with nothing arriving before it sleeps
/// (`--poll-us`, default `IDLE_BEFORE_SLEEP_NS`; 0: sleep at the first empty look, so every
/// hand-off between cores goes through a wake). Written once by `main` before any other core
/// starts.
static POLL_NS: AtomicU64 = AtomicU64::new(IDLE_BEFORE_SLEEP_NS);
/// `--steal N`: a front-end sums a file itself when the application core it picked already has
/// N of its requests unanswered (0: never). Written once by `main` before any other core
/// starts.
static STEAL: AtomicU64 = AtomicU64::new(0);
/// The default `--steal` in random mode: the application core always has a next request
/// queued (no idle gap between two sums) and a request waits behind at most two others.
const STEAL_RANDOM: u64 = 2;
/// Set by front-end 0 when the run is over (read by every core: one line, written once).
static STOP: CachePadded<AtomicBool> = CachePadded::new(AtomicBool::new(false));
/// `--idle sleep` (the default): cores with nothing to do sleep instead of polling. Written
/// once by `main` before any other core starts.
static SLEEP: AtomicBool = AtomicBool::new(true);
/// How long a front-end or application core polls with nothing arriving before it sleeps
/// (`--idle sleep`): work arriving more often than this is served by polling, as before.
const IDLE_BEFORE_SLEEP_NS: u64 = 2_000_000;
/// An application core's sleep with `--wake off`: nothing but the timeout wakes it when a
/// front-end pushes a request, so it sleeps 1 ms, then twice as long each time nothing came,
/// up to `APP_SLEEP_MAX_US` (the first request after a long quiet waits at most that long; the
/// core polls again from then on).
const APP_SLEEP_US: u64 = 1_000;
const APP_SLEEP_MAX_US: u64 = 32_000;
/// With `--wake on` the front-end that hands a sleeping core a request wakes it, so the
/// timeout is only a safety net (a front-end that stopped): as long as a front-end's.
const APP_WOKEN_SLEEP_US: u64 = 100_000;
/// A front-end's longest sleep (it is woken by the kernel core or the card's interrupt when a
/// frame comes); the coordinating front-end watches the run's end, so it sleeps less.
const FRONT_SLEEP_US: u64 = 100_000;
const COORDINATOR_SLEEP_US: u64 = 10_000;
/// Set by front-end 0 once the warm-up requests are done: the measured region.
static MEASURING: CachePadded<AtomicBool> = CachePadded::new(AtomicBool::new(false));
static CALIB: calib::Calibration = calib::Calibration::new();
static CALIB_OK: AtomicBool = AtomicBool::new(false);
/// The core `main` runs on (it opened the NIC, and runs that core's role if it has one).
static MAIN_CORE: AtomicU64 = AtomicU64::new(0);

/// What every thread of the server shares, read-only once the server runs.
struct Server {
    mode: Mode,
    files: Vec<File>,
    /// `files` indexes sorted by name, for lookups.
    by_name: Vec<u32>,
    nfront: usize,
    napps: usize,
    /// Front-end cores' and application cores' core numbers (for `/stats`).
    front_cores: Vec<u64>,
    app_cores: Vec<u64>,
    /// Request ring of pair (f, a) at `f * napps + a`, and its reply ring.
    requests: Vec<Ring>,
    replies: Vec<Ring>,
    nic: Option<Nic>,
    /// same-core mode: the share holding the filesum server's gates (`filesum@CORE`).
    gate_share: Option<abi::ObjectId>,
    port: u16,
    sockets: usize,
    target: u64,
    warmup: u64,
    deadline_ns: AtomicU64,
    stats_every_ns: u64,
    /// Application core that stops after this many sums (index, count), for the halt test.
    halt_app: Option<(usize, u64)>,
    calib: libos::thread::Barrier,
}

impl Server {
    fn lookup(&self, name: &str) -> Option<usize> {
        self.by_name.binary_search_by(|&i| self.files[i as usize].name.as_str().cmp(name)).ok().map(|k| self.by_name[k] as usize)
    }

    fn stats(&self) -> Vec<CoreStats> {
        let mut v = Vec::new();
        for (f, &core) in self.front_cores.iter().enumerate() {
            let c = &FRONT[f];
            v.push(CoreStats {
                core: core as u32,
                role: "frontend",
                conns: c.conns.load(Ordering::Relaxed),
                requests: c.requests.load(Ordering::Relaxed),
                bad: c.bad.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                bytes: c.bytes.load(Ordering::Relaxed),
            });
        }
        for (a, &core) in self.app_cores.iter().enumerate() {
            let c = &APP[a];
            v.push(CoreStats { core: core as u32, role: "app", requests: c.sums.load(Ordering::Relaxed), bytes: c.bytes.load(Ordering::Relaxed), ..Default::default() });
        }
        v
    }

    fn total_requests(&self) -> u64 {
        (0..self.nfront).map(|f| FRONT[f].requests.load(Ordering::Relaxed)).sum()
    }

    fn participants(&self) -> usize {
        self.nfront + self.napps
    }
}

/// insncount's region markers (tools/qemu-plugins/marker.h).
fn marker(m: u8) {
    // SAFETY: the kernel's I/O bitmap lets user mode write the marker port; the write has no
    // effect outside a plugin run.
    unsafe { bench::harness::marker_out(m) };
}

// ---------------------------------------------------------------------------------------
// Application cores

/// An application core: copy its home files into its own memory, then answer filesums from
/// every front-end's ring until the run ends.
fn app_main(arg: u64) -> u64 {
    // SAFETY: `arg` is `&'static Server as *const _ as u64 | index << 48`, set by `main`.
    let (srv, me) = unsafe { unpack(arg) };
    let count = &APP[me];
    // Place this core's files (locality and random modes place alike: what differs is who
    // gets the requests).
    for f in srv.files.iter().filter(|f| f.home == me) {
        let src = f.data();
        let copy: Box<[u8]> = Box::from(src);
        f.ptr.store(Box::leak(copy).as_ptr() as usize, Ordering::Release);
    }
    count.alive.store(true, Ordering::Release);
    count.ready.store(true, Ordering::Release);
    let mut ins: Vec<Consumer<'static>> = (0..srv.nfront).map(|f| Consumer::new(&srv.requests[f * srv.napps + me])).collect();
    let mut outs: Vec<Producer<'static>> = (0..srv.nfront).map(|f| Producer::new(&srv.replies[f * srv.napps + me])).collect();
    let halt_after = match srv.halt_app {
        Some((a, n)) if a == me => n,
        _ => u64::MAX,
    };
    let (mut sums, mut bytes) = (0u64, 0u64);
    let (mut counting, mut measured) = (false, false);
    let sleep = SLEEP.load(Ordering::Relaxed);
    let wake = WAKE.load(Ordering::Relaxed);
    let first_nap = if wake { APP_WOKEN_SLEEP_US } else { APP_SLEEP_US };
    // Poll 2 ms before sleeping, less once the host has descheduled this core mid-stretch
    // (percore::poll: then a wake-up is faster than waiting for the host to run a poller).
    let mut window = percore::poll::PollWindow::new(POLL_NS.load(Ordering::Relaxed), 1_000_000);
    let mut nap_us = first_nap;
    // The last sleep ended by its timeout, not by a wake: work found now waited it out.
    let mut after_timeout = false;
    let (mut naps, mut woken, mut late) = (0u64, 0u64, 0u64);
    'run: while !STOP.load(Ordering::Relaxed) {
        if !measured && MEASURING.load(Ordering::Relaxed) {
            // MARK_START_ALL turned this vCPU on: it counts until it next finds no work.
            measured = true;
            counting = true;
        }
        let mut worked = false;
        for f in 0..srv.nfront {
            if !ins[f].ready() {
                continue;
            }
            // Only the work is counted: per-CPU markers around it once the run is measured.
            if measured && !counting {
                marker(bench::harness::MARK_START_CPU);
                counting = true;
            }
            let before = sums;
            while outs[f].has_room() {
                let Some((tag, idx)) = ins[f].pop() else { break };
                let sum = match srv.files.get(idx as usize) {
                    Some(file) => {
                        let d = file.data();
                        bytes += d.len() as u64;
                        webcore::filesum(d)
                    }
                    // A front-end never sends an index it did not look up; u64::MAX says
                    // "no such file" should one ever arrive.
                    None => u64::MAX,
                };
                let _ = outs[f].push(tag, sum);
                sums += 1;
                worked = true;
                if sums >= halt_after {
                    println!("webd: application core {} halts after {sums} sums (--halt-app)", srv.app_cores[me]);
                    if wake {
                        wake_front(srv, f);
                    }
                    break 'run;
                }
            }
            if wake && sums != before {
                wake_front(srv, f);
            }
        }
        if worked {
            if after_timeout {
                late += 1;
                count.late.store(late, Ordering::Relaxed);
            }
            after_timeout = false;
            window.worked();
            nap_us = first_nap;
            count.sums.store(sums, Ordering::Relaxed);
            count.bytes.store(bytes, Ordering::Relaxed);
        } else {
            if counting {
                marker(bench::harness::MARK_STOP_CPU);
                counting = false;
            }
            if sleep {
                if window.empty(libos::time::tsc_ns()) {
                    after_timeout = false;
                    // Announce the sleep, then look once more: a front-end pushes, fences and
                    // then reads the flag, so either we see its request here or it sees the
                    // flag and wakes us (a wake before the `wait` makes it return at once).
                    let asleep = &APP_ASLEEP[me];
                    asleep.store(true, Ordering::Relaxed);
                    core::sync::atomic::fence(Ordering::SeqCst);
                    if ins.iter().any(|c| c.ready()) {
                        asleep.store(false, Ordering::Relaxed);
                        continue;
                    }
                    let r = libos::sys::wait(0, nap_us).unwrap_or(0);
                    window.woke();
                    // Not ours to clear any more: a front-end took it and sent a wake.
                    let claimed = !asleep.swap(false, Ordering::AcqRel);
                    naps += 1;
                    if r & abi::WAIT_WOKEN != 0 || claimed {
                        woken += 1;
                    } else {
                        after_timeout = true;
                    }
                    count.naps.store(naps, Ordering::Relaxed);
                    count.preempted.store(window.preemptions(), Ordering::Relaxed);
                    count.woken.store(woken, Ordering::Relaxed);
                    if !wake {
                        // Nothing wakes us: a short sleep, longer the longer nothing comes.
                        nap_us = (nap_us * 2).min(APP_SLEEP_MAX_US);
                    }
                }
            }
        }
    }
    if counting {
        marker(bench::harness::MARK_STOP_CPU);
    }
    count.sums.store(sums, Ordering::Relaxed);
    count.bytes.store(bytes, Ordering::Relaxed);
    count.preempted.store(window.preemptions(), Ordering::Relaxed);
    count.alive.store(false, Ordering::Release);
    // A halted core still joins the calibration at the end (the barrier counts every core).
    while !STOP.load(Ordering::Relaxed) {
        libos::time::sleep_ms(1);
    }
    if CALIB_OK.load(Ordering::Acquire) {
        CALIB.run(&srv.calib, srv.nfront + me, srv.participants());
    }
    count.exited.store(true, Ordering::Release);
    0
}

// ---------------------------------------------------------------------------------------
// Front-end cores

/// One connection's state on a front-end (one per listening socket).
struct Conn {
    h: SocketHandle,
    /// Bumped each time the socket is reused: a reply tagged with an old generation is for a
    /// connection that is gone.
    gen: u32,
    inbuf: Vec<u8>,
    /// Response head (and small bodies) still to send, then a file's bytes.
    out: Vec<u8>,
    out_at: usize,
    body: &'static [u8],
    body_at: usize,
    keep_alive: bool,
    head_only: bool,
    /// Close once the output is sent.
    close_after: bool,
    /// A filesum is with an application core (index), since `sent_ns`.
    waiting: Option<usize>,
    sent_ns: u64,
    /// A filesum to send when the ring has room: (file index, application core).
    pending: Option<(usize, usize)>,
    /// When the request now arriving began (0: none).
    req_start_ns: u64,
    established: bool,
}

impl Conn {
    fn new(h: SocketHandle) -> Conn {
        Conn {
            h,
            gen: 0,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_at: 0,
            body: &[],
            body_at: 0,
            keep_alive: true,
            head_only: false,
            close_after: false,
            waiting: None,
            sent_ns: 0,
            pending: None,
            req_start_ns: 0,
            established: false,
        }
    }

    fn reset(&mut self) {
        self.gen = self.gen.wrapping_add(1) & 0xFFFF_FFFF;
        self.inbuf.clear();
        self.out.clear();
        self.out_at = 0;
        self.body = &[];
        self.body_at = 0;
        self.keep_alive = true;
        self.head_only = false;
        self.close_after = false;
        self.waiting = None;
        self.pending = None;
        self.req_start_ns = 0;
        self.established = false;
    }

    fn output_done(&self) -> bool {
        self.out_at >= self.out.len() && self.body_at >= self.body.len()
    }

    fn tag(&self, i: usize) -> u64 {
        i as u64 | (self.gen as u64) << 16
    }
}

/// A front-end core's private state.
struct Front {
    srv: &'static Server,
    me: usize,
    conns: Vec<Conn>,
    to_apps: Vec<Producer<'static>>,
    from_apps: Vec<Consumer<'static>>,
    /// Per application core, this front-end's requests pushed and not yet answered (what
    /// `--steal` compares with; a reply popped counts, whether or not its connection is
    /// still there).
    out: Vec<u64>,
    /// `--steal`, read once (0: never sum here while an application core lives).
    steal: u64,
    stolen: u64,
    rng: u64,
    /// same-core mode: this core's gate into the filesum server.
    gate: Option<libos::ppc::Gate>,
    requests: u64,
    bad: u64,
    errors: u64,
    bytes: u64,
    conn_count: u64,
}

fn socket(stack: &mut Stack, h: SocketHandle) -> &mut tcp::Socket<'static> {
    stack.sockets.get_mut::<tcp::Socket>(h)
}

fn listen(s: &mut tcp::Socket<'static>, port: u16) {
    // Silence for 5 s drops a connection (half-open connections would hold sockets for ever).
    s.set_timeout(Some(libos::net::smoltcp::time::Duration::from_secs(5)));
    let _ = s.listen(port);
}

impl Front {
    fn publish(&self) {
        let c = &FRONT[self.me];
        c.requests.store(self.requests, Ordering::Relaxed);
        c.stolen.store(self.stolen, Ordering::Relaxed);
        c.bad.store(self.bad, Ordering::Relaxed);
        c.errors.store(self.errors, Ordering::Relaxed);
        c.bytes.store(self.bytes, Ordering::Relaxed);
        c.conns.store(self.conn_count, Ordering::Relaxed);
    }

    fn respond(&mut self, i: usize, status: Status, body: &[u8], file: &'static [u8], content_type: &str) {
        let c = &mut self.conns[i];
        let len = body.len() + file.len();
        http::response_head(&mut c.out, status, len, content_type, c.keep_alive);
        if !c.head_only {
            c.out.extend_from_slice(body);
            c.body = file;
            c.body_at = 0;
        }
        self.bytes += (c.out.len() + c.body.len()) as u64;
        if !c.keep_alive {
            c.close_after = true;
        }
        if status == Status::Ok {
            self.requests += 1;
        } else if status.code() >= 500 {
            self.errors += 1;
        } else {
            self.bad += 1;
        }
    }

    fn reject(&mut self, i: usize, status: Status) {
        let c = &mut self.conns[i];
        http::error_response(&mut c.out, status);
        self.bytes += c.out.len() as u64;
        c.close_after = true;
        c.inbuf.clear();
        if status.code() >= 500 {
            self.errors += 1;
        } else {
            self.bad += 1;
        }
    }

    /// Choose the application core for a filesum of file `idx`; `None` if no live core can
    /// take it (locality: its home core is halted).
    fn pick_app(&mut self, idx: usize) -> Option<usize> {
        let n = self.srv.napps;
        match self.srv.mode {
            Mode::Locality => {
                let a = self.srv.files[idx].home;
                APP[a].alive.load(Ordering::Relaxed).then_some(a)
            }
            Mode::Random | Mode::SameCore => {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let start = (self.rng % n as u64) as usize;
                (0..n).map(|k| (start + k) % n).find(|&a| APP[a].alive.load(Ordering::Relaxed))
            }
        }
    }

    fn handle(&mut self, i: usize, req: http::Request, now: u64) {
        let c = &mut self.conns[i];
        c.keep_alive = req.keep_alive;
        c.head_only = req.method == Method::Head;
        match webcore::route(&req.path) {
            Route::Stats => {
                let body = webcore::stats_json(self.srv.mode.name(), &self.srv.stats());
                self.respond(i, Status::Ok, body.as_bytes(), &[], "application/json");
            }
            Route::FileSum(name) => match self.srv.lookup(name) {
                None => self.respond(i, Status::NotFound, b"no such file\n", &[], "text/plain"),
                Some(idx) => {
                    if self.srv.mode == Mode::SameCore {
                        self.same_core(i, idx);
                        return;
                    }
                    if self.srv.napps == 0 {
                        // Random mode with no application core: sum here, from the copy
                        // loaded at start.
                        let mut digits = [0u8; 20];
                        let s = fmt_u64(webcore::filesum(self.srv.files[idx].data()), &mut digits);
                        self.respond(i, Status::Ok, s, &[], "text/plain");
                        return;
                    }
                    match self.pick_app(idx) {
                        None => self.respond(i, Status::Unavailable, b"application core halted\n", &[], "text/plain"),
                        Some(a) => {
                            if self.steal > 0 && self.out[a] >= self.steal {
                                // Count the replies already back before deciding.
                                self.take_replies();
                            }
                            if self.steal > 0 && self.out[a] >= self.steal {
                                // The application core has `steal` of our requests queued: sum
                                // here rather than queue another behind them. In random mode
                                // any core may sum any file; in locality mode (only with an
                                // explicit `--steal`) this reads the home core's copy.
                                let mut digits = [0u8; 20];
                                let s = fmt_u64(webcore::filesum(self.srv.files[idx].data()), &mut digits);
                                self.stolen += 1;
                                self.respond(i, Status::Ok, s, &[], "text/plain");
                                return;
                            }
                            self.conns[i].pending = Some((idx, a));
                            self.conns[i].sent_ns = now;
                            self.dispatch(i);
                        }
                    }
                }
            },
            Route::File(path) => match self.srv.lookup(path) {
                None => self.respond(i, Status::NotFound, b"no such file\n", &[], "text/plain"),
                Some(idx) => {
                    let f = &self.srv.files[idx];
                    let ty = if f.name.ends_with(".html") { "text/html" } else if f.name.ends_with(".txt") { "text/plain" } else { "application/octet-stream" };
                    self.respond(i, Status::Ok, &[], f.data(), ty);
                }
            },
        }
    }

    /// `same-core` mode: sum on this core, in the server process, through this core's gate
    /// (a protected procedure call: no other core takes part).
    fn same_core(&mut self, i: usize, idx: usize) {
        let r = match self.gate {
            Some(g) => g.call(idx as u64, 0, 0, 0),
            None => Err(abi::Error::NotFound),
        };
        match r {
            Ok(sum) => {
                let mut digits = [0u8; 20];
                let s = fmt_u64(sum, &mut digits);
                self.respond(i, Status::Ok, s, &[], "text/plain");
            }
            Err(_) => self.respond(i, Status::InternalError, b"filesum server call failed\n", &[], "text/plain"),
        }
    }

    /// Send the connection's pending filesum if its application core's ring has room.
    fn dispatch(&mut self, i: usize) {
        let Some((idx, a)) = self.conns[i].pending else { return };
        let tag = self.conns[i].tag(i);
        if self.to_apps[a].push(tag, idx as u64) {
            self.out[a] += 1;
            self.conns[i].pending = None;
            self.conns[i].waiting = Some(a);
            if WAKE.load(Ordering::Relaxed) {
                wake_app(self.srv, a);
            }
        }
    }

    /// Take every reply waiting in the reply rings. Returns whether there was one.
    fn take_replies(&mut self) -> bool {
        let mut any = false;
        for a in 0..self.srv.napps {
            while let Some((tag, sum)) = self.from_apps[a].pop() {
                self.out[a] = self.out[a].saturating_sub(1);
                self.reply(tag, sum);
                any = true;
            }
        }
        any
    }

    /// A filesum came back.
    fn reply(&mut self, tag: u64, sum: u64) {
        let i = (tag & 0xFFFF) as usize;
        let Some(c) = self.conns.get(i) else { return };
        if c.gen != (tag >> 16) as u32 || c.waiting.is_none() {
            return; // the connection went away meanwhile
        }
        self.conns[i].waiting = None;
        if sum == u64::MAX {
            self.respond(i, Status::InternalError, b"bad file index\n", &[], "text/plain");
            return;
        }
        let mut digits = [0u8; 20];
        let s = fmt_u64(sum, &mut digits);
        self.respond(i, Status::Ok, s, &[], "text/plain");
    }

    /// Move one connection along. Returns whether anything happened.
    fn service(&mut self, stack: &mut Stack, i: usize, now: u64) -> bool {
        let port = self.srv.port;
        let h = self.conns[i].h;
        let s = socket(stack, h);
        match s.state() {
            tcp::State::Closed | tcp::State::TimeWait => {
                let c = &mut self.conns[i];
                if c.established {
                    if c.waiting.is_some() || c.pending.is_some() || !c.output_done() {
                        // The client vanished mid-request or mid-response.
                        self.errors += 1;
                    }
                    self.conn_count += 1;
                }
                c.reset();
                s.abort();
                listen(s, port);
                return true;
            }
            tcp::State::Listen | tcp::State::SynReceived | tcp::State::SynSent => return false,
            _ => {}
        }
        let mut worked = false;
        let c = &mut self.conns[i];
        if !c.established {
            c.established = true;
            worked = true;
        }
        // 1. Output first: the head, then the file's bytes, as the send buffer takes them.
        while c.out_at < c.out.len() {
            match s.send_slice(&c.out[c.out_at..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    c.out_at += n;
                    worked = true;
                }
            }
        }
        if c.out_at >= c.out.len() {
            c.out.clear();
            c.out_at = 0;
            while c.body_at < c.body.len() {
                match s.send_slice(&c.body[c.body_at..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        c.body_at += n;
                        worked = true;
                    }
                }
            }
        }
        if !c.output_done() {
            return worked;
        }
        c.body = &[];
        c.body_at = 0;
        if c.close_after {
            if s.state() != tcp::State::FinWait1 && s.state() != tcp::State::FinWait2 && s.state() != tcp::State::LastAck && s.state() != tcp::State::Closing {
                s.close();
                worked = true;
            }
            return worked;
        }
        // 2. A request with an application core: wait (its deadline is checked by `expire`).
        if c.waiting.is_some() || c.pending.is_some() {
            return worked;
        }
        // 3. Read and parse the next request.
        let cap = http::MAX_HEADER_BYTES + 1;
        while c.inbuf.len() < cap && s.can_recv() {
            let room = cap - c.inbuf.len();
            let before = c.inbuf.len();
            c.inbuf.resize(before + room.min(2048), 0);
            match s.recv_slice(&mut c.inbuf[before..]) {
                Ok(n) => {
                    c.inbuf.truncate(before + n);
                    if n == 0 {
                        break;
                    }
                    worked = true;
                }
                Err(_) => {
                    c.inbuf.truncate(before);
                    break;
                }
            }
        }
        if c.inbuf.is_empty() {
            if s.state() == tcp::State::CloseWait {
                s.close(); // the client is done and so are we
                worked = true;
            }
            return worked;
        }
        if c.req_start_ns == 0 {
            c.req_start_ns = now;
        }
        match http::parse(&c.inbuf) {
            Parsed::Partial => {
                if s.state() == tcp::State::CloseWait || now.saturating_sub(c.req_start_ns) > REQUEST_DEADLINE_NS {
                    // Half a request and then silence or a closed half: give up on it.
                    c.inbuf.clear();
                    self.errors += 1;
                    s.abort();
                    return true;
                }
                worked
            }
            Parsed::Reject(st) => {
                self.reject(i, st);
                true
            }
            Parsed::Request(req) => {
                let c = &mut self.conns[i];
                c.inbuf.drain(..req.consumed);
                c.req_start_ns = if c.inbuf.is_empty() { 0 } else { now };
                self.handle(i, req, now);
                true
            }
        }
    }

    /// Answer 503 for filesums an application core has not answered in time or cannot
    /// answer (halted).
    fn expire(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            let stuck = match (c.waiting, c.pending) {
                (Some(a), _) | (None, Some((_, a))) => !APP[a].alive.load(Ordering::Relaxed) || now.saturating_sub(c.sent_ns) > APP_DEADLINE_NS,
                _ => false,
            };
            if stuck {
                let c = &mut self.conns[i];
                c.waiting = None;
                c.pending = None;
                c.keep_alive = false;
                self.respond(i, Status::Unavailable, b"application core did not answer\n", &[], "text/plain");
            }
        }
    }
}

fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

fn front_main(arg: u64) -> u64 {
    // SAFETY: as in `app_main`.
    let (srv, me) = unsafe { unpack(arg) };
    let r = serve(srv, me);
    FRONT[me].exited.store(true, Ordering::Release);
    match r {
        Ok(()) => 0,
        Err(e) => {
            println!("webd: front-end {}: {e:?}", srv.front_cores[me]);
            1
        }
    }
}

fn serve(srv: &'static Server, me: usize) -> Result<(), abi::Error> {
    let nic = srv.nic.ok_or(abi::Error::NotFound)?;
    // The main thread opened the NIC in its own root range; every other core maps it.
    let on_main_core = libos::core_id() == MAIN_CORE.load(Ordering::Relaxed);
    if !on_main_core {
        nic.map_here()?;
    }
    let chan = nic.channel(me as u64);
    let mut stack = Stack::new(chan, 0x7eb ^ ((me as u64) << 32) ^ libos::time::ticks());
    let mut f = Front {
        srv,
        me,
        conns: Vec::new(),
        to_apps: (0..srv.napps).map(|a| Producer::new(&srv.requests[me * srv.napps + a])).collect(),
        from_apps: (0..srv.napps).map(|a| Consumer::new(&srv.replies[me * srv.napps + a])).collect(),
        out: alloc::vec![0; srv.napps],
        steal: STEAL.load(Ordering::Relaxed),
        stolen: 0,
        rng: 0x9e37_79b9_7f4a_7c15 ^ (me as u64 + 1),
        gate: None,
        requests: 0,
        bad: 0,
        errors: 0,
        bytes: 0,
        conn_count: 0,
    };
    if let Some(share) = srv.gate_share {
        let core = srv.front_cores[me];
        f.gate = Some(libos::ppc::Gate::find(share, GATE_SERVICE, core)?.bind()?);
    }
    for _ in 0..srv.sockets {
        let rx = tcp::SocketBuffer::new(alloc::vec![0u8; 4096]);
        let tx = tcp::SocketBuffer::new(alloc::vec![0u8; 16384]);
        let mut s = tcp::Socket::new(rx, tx);
        listen(&mut s, srv.port);
        if !s.is_listening() {
            return Err(abi::Error::InvalidArgument);
        }
        let h = stack.sockets.add(s);
        f.conns.push(Conn::new(h));
    }
    if me == 0 {
        stack.dev.announce();
    }
    FRONT[me].ready.store(true, Ordering::Release);
    let mut next_check = 0u64;
    let mut next_stats = libos::time::tsc_ns() + srv.stats_every_ns;
    let mut after_work = true;
    let (mut measured, mut counting) = (false, false);
    let sleep = SLEEP.load(Ordering::Relaxed);
    let wake = WAKE.load(Ordering::Relaxed);
    // As an application core's: 2 ms of polling, none for a while after the host took this
    // core away mid-stretch (percore::poll).
    let mut window = percore::poll::PollWindow::new(POLL_NS.load(Ordering::Relaxed), 1_000_000);
    let (mut out_naps, mut out_woken, mut out_late) = (0u64, 0u64, 0u64);
    while !STOP.load(Ordering::Relaxed) {
        let now = libos::time::tsc_ns();
        if now >= next_check {
            next_check = now + 1_000_000;
            f.expire(now);
            f.publish();
            if me == 0 {
                coordinate(srv, now, &mut next_stats);
            }
        }
        let replies = f.from_apps.iter().any(|c| c.ready());
        let busy = after_work || replies || stack.has_work();
        // Inside the measured region a front-end counts only its busy stretches (per-CPU
        // markers), as tcpserv's service cores do.
        if MEASURING.load(Ordering::Relaxed) && !STOP.load(Ordering::Relaxed) {
            if !measured {
                measured = true;
                counting = true; // MARK_START_ALL turned every vCPU on
            }
            if busy != counting {
                marker(if busy { bench::harness::MARK_START_CPU } else { bench::harness::MARK_STOP_CPU });
                counting = busy;
            }
        }
        if !busy {
            // Every empty look goes to the window (a gap between two is the host's doing).
            let stretch_over = window.empty(now);
            // A request still to be handed over (its ring was full) keeps us polling. One
            // with an application core does too with `--wake off`; with wakes on, the core
            // that pushes its reply wakes us (FRONT_ASLEEP), so we may sleep: on a busy host
            // a front-end polling for a reply is what the host deschedules, and the reply
            // then waits for the host to run it again; a halted vCPU is run soon after the
            // wake-up IPI.
            let out = f.conns.iter().any(|c| c.waiting.is_some());
            let pending = f.conns.iter().any(|c| c.pending.is_some());
            if sleep && stretch_over && !pending && (wake || !out) {
                // Woken by the kernel core filling our ring (Dedicated, Polling), the card's
                // interrupt (Inline), or (requests out) an application core's `wake`.
                let asleep = &FRONT_ASLEEP[me];
                if out {
                    // Announce, fence, look once more: an application core pushes a reply,
                    // fences, then reads the flag (`wake_front`), so either we see its reply
                    // here or it sees the flag and wakes us (a wake before the halt is kept
                    // by the kernel and ends the next one at once).
                    asleep.store(true, Ordering::Relaxed);
                    core::sync::atomic::fence(Ordering::SeqCst);
                    if f.from_apps.iter().any(|c| c.ready()) {
                        asleep.store(false, Ordering::Relaxed);
                        continue;
                    }
                }
                stack.wait_idle(if me == 0 { COORDINATOR_SLEEP_US } else { FRONT_SLEEP_US });
                window.woke();
                if out {
                    // Not ours to clear any more: an application core took it and woke us.
                    let claimed = !asleep.swap(false, Ordering::AcqRel);
                    out_naps += 1;
                    if claimed {
                        out_woken += 1;
                    } else if f.from_apps.iter().any(|c| c.ready()) {
                        out_late += 1;
                    }
                    let c = &FRONT[me];
                    c.out_naps.store(out_naps, Ordering::Relaxed);
                    c.out_woken.store(out_woken, Ordering::Relaxed);
                    c.out_late.store(out_late, Ordering::Relaxed);
                }
                FRONT[me].preempted.store(window.preemptions(), Ordering::Relaxed);
            }
            continue;
        }
        window.worked();
        after_work = stack.poll();
        if f.take_replies() {
            after_work = true;
        }
        for i in 0..f.conns.len() {
            if f.conns[i].pending.is_some() {
                f.dispatch(i);
            }
            if f.service(&mut stack, i, now) {
                after_work = true;
            }
        }
    }
    if counting {
        marker(bench::harness::MARK_STOP_CPU);
    }
    FRONT[me].preempted.store(window.preemptions(), Ordering::Relaxed);
    f.publish();
    // One last poll sends what the stack still holds (FINs, ACKs).
    stack.poll();
    if CALIB_OK.load(Ordering::Acquire) {
        CALIB.run(&srv.calib, me, srv.participants());
    }
    if !on_main_core {
        let _ = nic.unmap_here();
    }
    Ok(())
}

/// Front-end 0 watches the run: the warm-up, `--stats`, and the end.
fn coordinate(srv: &Server, now: u64, next_stats: &mut u64) {
    let done = srv.total_requests();
    if !MEASURING.load(Ordering::Relaxed) && done >= srv.warmup {
        MEASURING.store(true, Ordering::Relaxed);
        marker(bench::harness::MARK_START_ALL);
    }
    if srv.stats_every_ns > 0 && now >= *next_stats {
        *next_stats = now + srv.stats_every_ns;
        println!("webd: stats {}", counts_line(srv));
    }
    if done >= srv.warmup.saturating_add(srv.target) || now >= srv.deadline_ns.load(Ordering::Relaxed) {
        if MEASURING.load(Ordering::Relaxed) {
            marker(bench::harness::MARK_STOP_ALL);
        }
        STOP.store(true, Ordering::Release);
        for a in 0..srv.napps {
            wake_app(srv, a);
        }
    }
}

/// After handing application core `a` work (or the end of the run): wake it if it sleeps.
/// The fence orders the push before the look at the flag (the core's side: flag, fence, look
/// at the rings); the swap makes one front-end the waker.
fn wake_app(srv: &Server, a: usize) {
    core::sync::atomic::fence(Ordering::SeqCst);
    let asleep = &APP_ASLEEP[a];
    if asleep.load(Ordering::Relaxed) && asleep.swap(false, Ordering::AcqRel) {
        let _ = libos::sys::wake(srv.app_cores[a]);
    }
}

/// After pushing replies to front-end `f`: wake it if it sleeps waiting for them. The fence
/// orders the push before the look at the flag (the front-end's side: flag, fence, look at its
/// reply rings); the swap makes one application core the waker.
fn wake_front(srv: &Server, f: usize) {
    core::sync::atomic::fence(Ordering::SeqCst);
    let asleep = &FRONT_ASLEEP[f];
    if asleep.load(Ordering::Relaxed) && asleep.swap(false, Ordering::AcqRel) {
        let _ = libos::sys::wake(srv.front_cores[f]);
    }
}

/// The front-ends' sleeps with a request out: `fe<CORE>=naps/woken/late` (see `FrontCount`).
fn front_sleeps_line(srv: &Server) -> String {
    let mut line = String::new();
    for (f, &core) in srv.front_cores.iter().enumerate() {
        let c = &FRONT[f];
        line.push_str(&alloc::format!(" fe{core}={}/{}/{}", c.out_naps.load(Ordering::Relaxed), c.out_woken.load(Ordering::Relaxed), c.out_late.load(Ordering::Relaxed)));
    }
    line
}

/// The application cores' sleeps: `app<CORE>=naps/woken/late` (see `AppCount`).
fn sleeps_line(srv: &Server) -> String {
    let mut line = String::new();
    for (a, &core) in srv.app_cores.iter().enumerate() {
        let c = &APP[a];
        line.push_str(&alloc::format!(" app{core}={}/{}/{}", c.naps.load(Ordering::Relaxed), c.woken.load(Ordering::Relaxed), c.late.load(Ordering::Relaxed)));
    }
    line
}

/// Per core, the times the host descheduled it mid-stretch: ` fe<CORE>=N ... app<CORE>=N`.
fn preempted_line(srv: &Server) -> String {
    let mut line = String::new();
    for (f, &core) in srv.front_cores.iter().enumerate() {
        line.push_str(&alloc::format!(" fe{core}={}", FRONT[f].preempted.load(Ordering::Relaxed)));
    }
    for (a, &core) in srv.app_cores.iter().enumerate() {
        line.push_str(&alloc::format!(" app{core}={}", APP[a].preempted.load(Ordering::Relaxed)));
    }
    line
}

/// Every core's counts: `fe<CORE>=conns/requests/bad/errors/bytes app<CORE>=sums/bytes`.
fn counts_line(srv: &Server) -> String {
    let mut line = String::new();
    for s in srv.stats() {
        if s.role == "frontend" {
            line.push_str(&alloc::format!(" fe{}={}/{}/{}/{}/{}", s.core, s.conns, s.requests, s.bad, s.errors, s.bytes));
        } else {
            line.push_str(&alloc::format!(" app{}={}/{}", s.core, s.requests, s.bytes));
        }
    }
    line
}

/// # Safety
/// `arg` must come from `pack` with a `Server` that lives for the program's life.
unsafe fn unpack(arg: u64) -> (&'static Server, usize) {
    let ptr = (arg & ((1 << 48) - 1)) as *const Server;
    // SAFETY: the caller's promise: `main` leaked the server, so it lives for ever.
    (unsafe { &*ptr }, (arg >> 48) as usize)
}

fn pack(srv: &'static Server, index: usize) -> u64 {
    srv as *const Server as u64 | (index as u64) << 48
}

// ---------------------------------------------------------------------------------------
// same-core mode: the filesum server behind protected procedure calls

/// The gates' name: `filesum@CORE` (`libos::ppc::serve_cores`).
const GATE_SERVICE: &str = "filesum";

/// The filesum server's file table: (address, length) of each file's bytes, by the index the
/// front-ends look up. In the server process these statics are its own copy (cfork copies
/// the image copy-on-write), set before it registers its gates; the handler reads them.
static PPC_FILES: [(AtomicUsize, AtomicUsize); MAX_FILES] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_FILES];
static PPC_NFILES: AtomicUsize = AtomicUsize::new(0);

/// The gate's handler: the sum of file `idx`'s bytes. Runs on the calling front-end's core in
/// the server's address space; it touches no heap (libos::ppc's rule for handlers).
fn ppc_filesum(idx: u64, _: u64, _: u64, _: u64) -> Result<u64, abi::Error> {
    let n = PPC_NFILES.load(Ordering::Acquire);
    if idx as usize >= n {
        return Err(abi::Error::NotFound);
    }
    let (p, len) = (&PPC_FILES[idx as usize].0, &PPC_FILES[idx as usize].1);
    let (p, len) = (p.load(Ordering::Relaxed), len.load(Ordering::Relaxed));
    if p == 0 || len == 0 {
        return Ok(0);
    }
    // SAFETY: the server process leaked this copy of the file (`filesum_server`) and never
    // frees or writes it; the handler runs in that process's address range.
    let data = unsafe { core::slice::from_raw_parts(p as *const u8, len) };
    Ok(webcore::filesum(data))
}

/// The cfork'd child: copy every file into its own memory, publish the table, register one
/// gate per front-end core, and end (the gates stay, holding its address range).
fn filesum_server(arg: u64) -> u64 {
    // SAFETY: as in `app_main`; `srv` is the child's copy-on-write copy of the parent's.
    let (srv, _) = unsafe { unpack(arg) };
    for (i, f) in srv.files.iter().enumerate() {
        let copy: Box<[u8]> = Box::from(f.data());
        PPC_FILES[i].1.store(copy.len(), Ordering::Relaxed);
        PPC_FILES[i].0.store(Box::leak(copy).as_ptr() as usize, Ordering::Relaxed);
    }
    PPC_NFILES.store(srv.files.len(), Ordering::Release);
    let Some(share) = srv.gate_share else { return 1 };
    match libos::ppc::serve_cores(share, GATE_SERVICE, &srv.front_cores, ppc_filesum) {
        Ok(gates) => {
            for g in gates {
                g.keep();
            }
            0
        }
        Err(e) => {
            println!("webd: filesum server: cannot register its gates: {e:?}");
            1
        }
    }
}

/// Start the filesum server on a core other than this one and wait for its gates.
fn start_filesum_server(srv: &'static Server, o: &Opts, here: u64) -> Result<(), String> {
    let ncores = libos::sys::sys_info().map(|i| i.cores).unwrap_or(1);
    let core = (0..ncores).find(|&c| c != here && Some(c) != o.kc).ok_or_else(|| String::from("same-core mode needs a second core to start its server on"))?;
    let share = srv.gate_share.ok_or_else(|| String::from("no gate share"))?;
    // The NIC's channel segment is pinned (no copy-on-write copy of it can be made): the
    // child maps it as it is, and never touches it.
    let nic_seg = srv.nic.map(|n| n.seg.object);
    let segments: &[abi::ObjectId] = match &nic_seg {
        Some(s) => core::slice::from_ref(s),
        None => &[],
    };
    let opts = libos::cfork::CforkOpts { shares: core::slice::from_ref(&share), segments, ..Default::default() };
    let child = libos::cfork::cfork(core, &opts, filesum_server, pack(srv, 0)).map_err(|e| alloc::format!("cfork on core {core}: {e:?}"))?;
    match child.join() {
        Ok(0) => Ok(()),
        Ok(code) => Err(alloc::format!("it exited with code {code}")),
        Err(e) => Err(alloc::format!("{e:?}")),
    }
}

// ---------------------------------------------------------------------------------------
// Start-up

struct Opts {
    mode: Mode,
    frontends: Vec<u64>,
    apps: Vec<u64>,
    kc: Option<u64>,
    net_mode: Option<NetMode>,
    port: u16,
    root: String,
    requests: u64,
    seconds: u64,
    warmup: u64,
    stats: u64,
    sockets: usize,
    halt_app: Option<(u64, u64)>,
    sleep: bool,
    wake: bool,
    /// Polling window before sleeping, microseconds.
    poll_us: u64,
    /// `--steal` (None: the mode's default).
    steal: Option<u64>,
}

const USAGE: &str = "usage: webd [--mode random|locality|same-core] [--frontends LIST] [--apps LIST] [--kc CORE] \
[--net-mode dedicated|polling|inline] [--port P] [--root DIR] [--requests N] [--seconds S] [--warmup N] [--stats S] \
[--sockets K] [--halt-app CORE:N] [--idle sleep|poll] [--wake on|off] [--poll-us US] [--steal N|off]   (LIST: 0 | 1,3 | 1-3)";

fn parse_list(v: &str) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    for part in v.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (libos::parse_u64(a)?, libos::parse_u64(b)?);
                if a > b || b - a > 255 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(libos::parse_u64(part)?),
        }
    }
    let mut sorted = out.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == out.len() && !out.is_empty()).then_some(out)
}

fn parse(args: &str, ncores: u64, here: u64) -> Result<Opts, String> {
    let mut o = Opts {
        mode: Mode::Locality,
        frontends: alloc::vec![here],
        apps: Vec::new(),
        kc: None,
        net_mode: None,
        port: 80,
        root: String::from("/"),
        requests: 0,
        seconds: 0,
        warmup: 0,
        stats: 0,
        sockets: 16,
        halt_app: None,
        sleep: true,
        wake: true,
        poll_us: IDLE_BEFORE_SLEEP_NS / 1_000,
        steal: None,
    };
    let mut apps_given = false;
    let mut words = args.split_whitespace();
    while let Some(w) = words.next() {
        let w = w.strip_prefix("--").unwrap_or(w);
        let (k, v) = match w.split_once('=') {
            Some((k, v)) => (k, v),
            None => (w, words.next().ok_or_else(|| alloc::format!("--{w} needs a value"))?),
        };
        let num = || libos::parse_u64(v).ok_or_else(|| alloc::format!("{k}={v:?}: not a number"));
        let list = || parse_list(v).ok_or_else(|| alloc::format!("{k}={v:?}: a core list like 0, 1,3 or 1-3, without repeats"));
        match k {
            "mode" => o.mode = Mode::parse(v).ok_or_else(|| alloc::format!("mode={v:?}: random, locality or same-core"))?,
            "frontends" => o.frontends = list()?,
            "apps" => {
                o.apps = list()?;
                apps_given = true;
            }
            "kc" => o.kc = Some(num()?),
            "net-mode" => o.net_mode = Some(NetMode::parse(v).ok_or_else(|| alloc::format!("net-mode={v:?}: dedicated, polling or inline"))?),
            "port" => o.port = u16::try_from(num()?).ok().filter(|&p| p > 0).ok_or_else(|| alloc::format!("port={v}: 1..=65535"))?,
            "root" => o.root = String::from(v),
            "requests" => o.requests = num()?,
            "seconds" => o.seconds = num()?,
            "warmup" => o.warmup = num()?,
            "stats" => o.stats = num()?,
            "sockets" => o.sockets = num()?.clamp(1, 256) as usize,
            "idle" => {
                o.sleep = match v {
                    "poll" => false,
                    "sleep" => true,
                    _ => return Err(alloc::format!("idle={v:?}: poll or sleep")),
                }
            }
            "wake" => {
                o.wake = match v {
                    "on" => true,
                    "off" => false,
                    _ => return Err(alloc::format!("wake={v:?}: on or off")),
                }
            }
            "steal" => {
                o.steal = Some(match v {
                    "off" => 0,
                    _ => Some(num()?).filter(|&n| n <= RING_SLOTS as u64).ok_or_else(|| alloc::format!("steal={v}: off or 0..={RING_SLOTS}"))?,
                })
            }
            "poll-us" => o.poll_us = Some(num()?).filter(|&us| us <= 1_000_000).ok_or_else(|| alloc::format!("poll-us={v}: at most 1000000"))?,
            "halt-app" => {
                let (c, n) = v.split_once(':').ok_or_else(|| alloc::format!("halt-app={v:?}: CORE:N"))?;
                let (Some(c), Some(n)) = (libos::parse_u64(c), libos::parse_u64(n)) else {
                    return Err(alloc::format!("halt-app={v:?}: CORE:N"));
                };
                o.halt_app = Some((c, n));
            }
            _ => return Err(alloc::format!("unknown option {k:?}")),
        }
    }
    let in_range = |c: &u64| *c < ncores;
    if !o.frontends.iter().all(in_range) || !o.apps.iter().all(in_range) || o.kc.is_some_and(|k| k >= ncores) {
        return Err(alloc::format!("a core number is past the last core ({})", ncores - 1));
    }
    if !apps_given && o.mode != Mode::SameCore {
        o.apps = (0..ncores).filter(|c| !o.frontends.contains(c) && Some(*c) != o.kc && *c != here).collect();
    }
    if o.mode == Mode::SameCore {
        if apps_given && !o.apps.is_empty() {
            return Err(String::from("same-core mode has no application cores (drop --apps)"));
        }
        o.apps.clear();
    } else if o.apps.is_empty() && (apps_given || o.mode != Mode::Random) {
        // Random mode without application cores (one core, or every core a front-end): each
        // front-end sums on its own core, as the Linux baseline's threads do.
        return Err(alloc::format!(
            "no application core left (give --apps, or boot more cores; {} with no application core: random or same-core mode)",
            if o.mode == Mode::Locality { "locality mode needs one, only random mode runs" } else { "random mode runs" }
        ));
    }
    if o.frontends.len() > MAX_FRONTENDS || o.apps.len() > MAX_APPS {
        return Err(alloc::format!("at most {MAX_FRONTENDS} front-ends and {MAX_APPS} application cores"));
    }
    if o.frontends.iter().any(|c| o.apps.contains(c) || Some(*c) == o.kc) || o.apps.iter().any(|c| Some(*c) == o.kc) {
        return Err(String::from("front-ends, application cores and the kernel core must be different cores"));
    }
    if o.apps.contains(&here) {
        return Err(alloc::format!("core {here}, where webd runs, can be a front-end but not an application core"));
    }
    if let Some((c, _)) = o.halt_app {
        if !o.apps.contains(&c) {
            return Err(alloc::format!("halt-app: core {c} is not an application core"));
        }
    }
    let net_mode = o.net_mode.unwrap_or(if o.kc.is_some() { NetMode::Dedicated } else { NetMode::Inline });
    if net_mode != NetMode::Inline && o.kc.is_none() {
        return Err(alloc::format!("net-mode={} needs a kernel core (--kc CORE)", net_mode.name()));
    }
    o.net_mode = Some(net_mode);
    Ok(o)
}

/// Every regular file under `root` (recursively), at most `MAX_FILES` and `MAX_TOTAL_BYTES`:
/// (name relative to `root`, starting with `/`; bytes).
fn load_files(root: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    use libos::fs;
    fs::mount().map_err(|e| alloc::format!("cannot mount the disk: {e:?} (boot with `cargo xtask run --disk IMG`)"))?;
    let base = root.trim_end_matches('/');
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut dirs = alloc::vec![String::new()];
    while let Some(rel) = dirs.pop() {
        let dir = alloc::format!("{base}{rel}/");
        let entries = fs::readdir(if dir.is_empty() { "/" } else { &dir }).map_err(|e| alloc::format!("{dir}: {e:?}"))?;
        for e in entries {
            let Ok(name) = core::str::from_utf8(&e.name) else { continue };
            if name == "." || name == ".." || name == "lost+found" {
                continue;
            }
            let child = alloc::format!("{rel}/{name}");
            if e.file_type == fs::FT_DIR {
                dirs.push(child);
            } else if e.file_type == fs::FT_REG {
                if out.len() >= MAX_FILES {
                    return Err(alloc::format!("more than {MAX_FILES} files under {root}"));
                }
                let data = fs::read_all(&alloc::format!("{base}{child}"), MAX_TOTAL_BYTES - total).map_err(|e| alloc::format!("{child}: {e:?} (more than {} MiB in all?)", MAX_TOTAL_BYTES >> 20))?;
                total += data.len();
                out.push((child, data));
            }
        }
    }
    // Everything is in memory now: let the disk go (its request segment is pinned, so a
    // cfork'd filesum server could not copy this address range while it is mapped, and the
    // shell may want the disk back).
    let _ = fs::unmount();
    Ok(out)
}

fn main(args: &'static str) -> u64 {
    let ncores = libos::sys::sys_info().map(|i| i.cores).unwrap_or(1);
    let here = libos::core_id();
    MAIN_CORE.store(here, Ordering::Relaxed);
    let o = match parse(args, ncores, here) {
        Ok(o) => o,
        Err(e) => {
            println!("webd: {e}");
            println!("{USAGE}");
            return 2;
        }
    };
    let loaded = match load_files(&o.root) {
        Ok(f) => f,
        Err(e) => {
            println!("webd: {e}");
            return 1;
        }
    };
    let napps = o.apps.len();
    let mut files: Vec<File> = Vec::with_capacity(loaded.len());
    for (name, data) in &loaded {
        files.push(File { home: webcore::home_of(name, napps.max(1)), ptr: AtomicUsize::new(data.as_ptr() as usize), len: data.len(), name: name.clone() });
    }
    let mut by_name: Vec<u32> = (0..files.len() as u32).collect();
    by_name.sort_by(|&a, &b| files[a as usize].name.cmp(&files[b as usize].name));
    let total_bytes: usize = files.iter().map(|f| f.len).sum();
    let nfront = o.frontends.len();
    let pairs = nfront * napps;
    let net_mode = o.net_mode.unwrap_or(NetMode::Inline);
    let nic = match Nic::open(libos::process::proc_share(), nfront as u64, BUFFERS_PER_CHANNEL, net_mode) {
        Ok(n) => n,
        Err(e) => {
            println!("webd: cannot open the network card: {e:?} (boot with `cargo xtask run --net`)");
            return 1;
        }
    };
    SLEEP.store(o.sleep, Ordering::Relaxed);
    WAKE.store(o.wake, Ordering::Relaxed);
    POLL_NS.store(o.poll_us * 1_000, Ordering::Relaxed);
    let steal = o.steal.unwrap_or(if o.mode == Mode::Random { STEAL_RANDOM } else { 0 });
    STEAL.store(steal, Ordering::Relaxed);
    if !o.sleep && o.kc.is_some() {
        // Pure polling: the kernel core never sleeps either.
        if let Err(e) = nic.set_kc_idle(0) {
            println!("webd: cannot make the kernel core poll without pause: {e:?}");
        }
    }
    let root = libos::root_share();
    let mut kc: Option<ObjName> = None;
    if let Some(core) = o.kc {
        let made = libos::sys::pcore_alloc(root, "webd-kc", core).map(|p| ObjName::new(root, p)).and_then(|p| {
            libos::sys::pcore_set_role(p, ROLE_KC)?;
            Ok(p)
        });
        match made.and_then(|p| nic.attach(p).map(|()| p)) {
            Ok(p) => kc = Some(p),
            Err(e) => {
                println!("webd: cannot make core {core} the card's kernel core: {e:?}");
                let _ = nic.unmap_here();
                let _ = nic.close();
                return 1;
            }
        }
    }
    // same-core mode: a share for the filesum server's gates, which every front-end can name.
    let gate_share = if o.mode == Mode::SameCore {
        match libos::process::new_share("webd-gates", abi::MEMID_SELF) {
            Ok(s) => Some(s),
            Err(e) => {
                println!("webd: cannot make the gates' share: {e:?}");
                let _ = nic.unmap_here();
                let _ = nic.close();
                return 1;
            }
        }
    } else {
        None
    };
    let srv: &'static Server = Box::leak(Box::new(Server {
        mode: o.mode,
        files,
        by_name,
        nfront,
        napps,
        front_cores: o.frontends.clone(),
        app_cores: o.apps.clone(),
        requests: (0..pairs).map(|_| Ring::new(RING_SLOTS)).collect(),
        replies: (0..pairs).map(|_| Ring::new(RING_SLOTS)).collect(),
        nic: Some(nic),
        gate_share,
        port: o.port,
        sockets: o.sockets,
        target: if o.requests > 0 { o.requests } else { u64::MAX },
        warmup: o.warmup,
        deadline_ns: AtomicU64::new(u64::MAX),
        stats_every_ns: o.stats.saturating_mul(1_000_000_000),
        halt_app: o.halt_app.map(|(c, n)| (o.apps.iter().position(|&a| a == c).unwrap_or(0), n)),
        calib: libos::thread::Barrier::new((nfront + napps) as u64),
    }));

    // Application cores first: each copies its files into its own memory before any request.
    let mut threads = Vec::new();
    let mut failed = false;
    for (a, &core) in o.apps.iter().enumerate() {
        match libos::thread::spawn(core, app_main, pack(srv, a)) {
            Ok(t) => threads.push(t),
            Err(e) => {
                println!("webd: cannot start application core {core}: {e:?}{}", if e == abi::Error::Busy { " (another program runs there; from the shell on 2 cores: `run -c 0 webd --apps 1`)" } else { "" });
                failed = true;
                break;
            }
        }
    }
    if !failed && !libos::time::wait_until(60_000, || (0..napps).all(|a| APP[a].ready.load(Ordering::Acquire) || APP[a].exited.load(Ordering::Acquire))) {
        println!("webd: application cores did not come up");
        failed = true;
    }
    // same-core mode: the filesum server, a cfork'd process with its own copy of the files,
    // registers a gate on every front-end core and ends; its gates keep its address range.
    if !failed && o.mode == Mode::SameCore {
        if let Err(e) = start_filesum_server(srv, &o, here) {
            println!("webd: the filesum server did not start: {e}");
            failed = true;
        }
    }
    // Each file's bytes are now in their owner's memory (application cores' or the filesum
    // server's); the loaded copies go, except that same-core mode serves static files from
    // them.
    let _static_files = if o.mode == Mode::SameCore || napps == 0 { Some(loaded) } else { drop(loaded); None };
    let mut main_front: Option<usize> = None;
    if !failed {
        for (f, &core) in o.frontends.iter().enumerate() {
            if core == here {
                main_front = Some(f);
                continue;
            }
            let extra: &[abi::ObjectId] = match &srv.gate_share {
                Some(g) => core::slice::from_ref(g),
                None => &[],
            };
            match libos::thread::spawn_with(core, front_main, pack(srv, f), extra) {
                Ok(t) => threads.push(t),
                Err(e) => {
                    println!("webd: cannot start front-end core {core}: {e:?}");
                    failed = true;
                    break;
                }
            }
        }
    }
    let start = libos::time::now_ns();
    if !failed {
        let up = libos::time::wait_until(30_000, || (0..nfront).all(|f| main_front == Some(f) || FRONT[f].ready.load(Ordering::Acquire) || FRONT[f].exited.load(Ordering::Acquire)));
        if up && (0..nfront).all(|f| main_front == Some(f) || FRONT[f].ready.load(Ordering::Acquire)) {
            CALIB_OK.store(true, Ordering::Release);
            srv.deadline_ns.store(if o.seconds > 0 { libos::time::tsc_ns() + o.seconds * 1_000_000_000 } else { u64::MAX }, Ordering::Relaxed);
            println!(
                "webd: ready mode={} port={} frontends={} apps={} kc={} net={} files={} bytes={} steal={}",
                o.mode.name(),
                o.port,
                join(&o.frontends),
                if o.apps.is_empty() { String::from("-") } else { join(&o.apps) },
                o.kc.map(|k| k as i64).unwrap_or(-1),
                net_mode.name(),
                srv.files.len(),
                total_bytes,
                steal
            );
        } else {
            println!("webd: front-end cores did not come up");
            failed = true;
        }
    }
    let mut code = 0;
    if !failed {
        match main_front {
            Some(f) => {
                if let Err(e) = serve(srv, f) {
                    println!("webd: front-end 0: {e:?}");
                    code = 1;
                }
                FRONT[f].exited.store(true, Ordering::Release);
            }
            // This core is not a front-end: front-end 0 runs elsewhere and ends the run.
            None => {
                while !STOP.load(Ordering::Acquire) {
                    libos::time::spin_ms(10);
                }
            }
        }
    }
    if failed {
        code = 1;
    }
    STOP.store(true, Ordering::Release);
    for a in 0..srv.napps {
        wake_app(srv, a);
    }
    for t in threads {
        match t.join() {
            Ok(0) => {}
            _ => code = 1,
        }
    }
    let elapsed_ms = (libos::time::now_ns() - start) / 1_000_000;
    let st = libos::sys::device_stat(nic.dev).unwrap_or_default();
    if let Some(p) = kc {
        let _ = nic.detach(p);
        let _ = libos::sys::pcore_set_role(p, ROLE_XC);
        let _ = libos::sys::share_delobj(p);
    }
    let _ = nic.unmap_here();
    let _ = nic.close();
    let requests = srv.total_requests().saturating_sub(o.warmup.min(srv.total_requests()));
    let errors: u64 = (0..nfront).map(|f| FRONT[f].errors.load(Ordering::Relaxed)).sum();
    let stolen: u64 = (0..nfront).map(|f| FRONT[f].stolen.load(Ordering::Relaxed)).sum();
    println!(
        "webd: done requests={requests} errors={errors} front_sums={stolen} mode={} frontends={nfront} apps={napps} ms={elapsed_ms} calib_ops={} calib_ns={} calib_cores={} dev_in={} dev_out={} dev_drops={}{}",
        o.mode.name(),
        calib::STEPS * (nfront + napps) as u64,
        CALIB.best_ns(),
        nfront + napps,
        st.packets_in,
        st.packets_out,
        st.drops,
        counts_line(srv)
    );
    println!("webd: per core: fe=conns/requests/bad/errors/bytes app=sums/bytes");
    if napps > 0 {
        println!("webd: app sleeps wake={}{}", if WAKE.load(Ordering::Relaxed) { "on" } else { "off" }, sleeps_line(srv));
        println!("webd: app sleeps: app=naps/woken/late");
        println!("webd: front-end sleeps with a request out wake={}{}", if WAKE.load(Ordering::Relaxed) { "on" } else { "off" }, front_sleeps_line(srv));
        println!("webd: front-end sleeps: fe=naps/woken/late");
        println!("webd: polling stretches the host cut short (percore::poll):{}", preempted_line(srv));
    }
    code
}

fn join(v: &[u64]) -> String {
    let mut s = String::new();
    for (i, c) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&alloc::format!("{c}"));
    }
    s
}
