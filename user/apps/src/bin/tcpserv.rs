//! tcpserv: Corey's TCP service (seeds/000 §8.2): accept a connection, write 128 bytes,
//! close; on every service core, each with a private smoltcp stack over its own channel of
//! one virtual NIC (docs/net.md).
//!
//! Usage: `tcpserv [mode=dedicated|polling|inline] [kc=CORE] [cores=N] [conns=N] [seconds=S]
//! [port=P] [sockets=K]`
//!
//! - `mode`: who drives the card (abi::net). Default `dedicated` with 2 or more cores, else
//!   `inline` (one core polls the card itself).
//! - `kc`: the kernel core (default: the last core); not used by `inline`.
//! - `cores`: how many service cores, counted from core 0 and skipping the kernel core
//!   (default: every other core).
//! - `conns`: stop after this many connections were served in all (default: run until
//!   `seconds`, or for ever).
//! - `sockets`: listening sockets per core, the most connections a core has open at once
//!   (default 16).
//! - `idle`: what the cores do with nothing to do. `sleep` (default): a service core sleeps
//!   in the kernel after 64 empty polls until the kernel core fills its ring (`CONF_NET_WAIT`;
//!   an IPI) or a timeout (1 ms in Inline mode, where it polls the card itself; 10 ms on core
//!   0, which watches the run's end; 100 ms elsewhere), and the kernel core polls adaptively
//!   (`CONF_NET_KC_IDLE`, docs/net.md). `poll`: every core polls without pause, service cores
//!   and kernel core alike (Corey's configuration, for the papers' comparison).
//! - `api`: how the service cores hold their sockets. `handles` (default, the measured
//!   path): smoltcp handles of the core's stack, driven directly. `fd`: socket descriptors
//!   (`fd::tcp_listen` with `sockets` as the backlog, non-blocking `fd::accept`, `fd::write`,
//!   `fd::close`) on the core's stack attached to the library OS (`net::host`); the same
//!   service through the calls files and pipes use (docs/net.md, "Sockets as descriptors").
//!   Its per-core rx/tx/stall counts are not kept (0), and it marks no insncount regions.
//! - `stats`: print every service core's counts every S seconds (`tcpserv: stats conns=N
//!   ch0=served/resets/rx/tx/stalls ...`; default 0, only at the end).
//!
//! Prints `tcpserv: ready ...` once every core listens, and at the end
//! `tcpserv: done conns=N ...` with each core's counts (the host's load generator and the
//! benchmark read both lines).
#![no_std]
#![no_main]

extern crate alloc;

use abi::{ObjName, ROLE_KC, ROLE_XC};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use libos::net::stack::Stack;
use libos::net::{Mode, Nic};
use libos::println;
use percore::pad::CachePadded;
use libos::net::smoltcp::socket::tcp;

libos::main!(main);

#[path = "../common/calib.rs"]
mod calib;

const MAX_CORES: usize = 16;
const BUFFERS_PER_CHANNEL: u64 = 128;

/// The 128-byte reply: `a..z` repeated, ending in a newline.
const REPLY: [u8; 128] = {
    let mut r = [0u8; 128];
    let mut i = 0;
    while i < 127 {
        r[i] = b'a' + (i % 26) as u8;
        i += 1;
    }
    r[127] = b'\n';
    r
};

/// Per-core counts, each core's on its own lines (written by that core only).
#[derive(Default)]
struct CoreCount {
    served: AtomicU64,
    resets: AtomicU64,
    rx: AtomicU64,
    tx: AtomicU64,
    stalls: AtomicU64,
    ready: AtomicBool,
    exited: AtomicBool,
}

impl CoreCount {
    /// `served/resets/rx frames/tx frames/tx stalls`, as the report lines print them.
    fn fields(&self) -> alloc::string::String {
        alloc::format!(
            "{}/{}/{}/{}/{}",
            self.served.load(Ordering::Relaxed),
            self.resets.load(Ordering::Relaxed),
            self.rx.load(Ordering::Relaxed),
            self.tx.load(Ordering::Relaxed),
            self.stalls.load(Ordering::Relaxed)
        )
    }
}

static COUNTS: [CachePadded<CoreCount>; MAX_CORES] = [const {
    CachePadded::new(CoreCount {
        served: AtomicU64::new(0),
        resets: AtomicU64::new(0),
        rx: AtomicU64::new(0),
        tx: AtomicU64::new(0),
        stalls: AtomicU64::new(0),
        ready: AtomicBool::new(false),
        exited: AtomicBool::new(false),
    })
}; MAX_CORES];
/// Set by core 0 when the run is over (read by every core: one line, written once).
static STOP: CachePadded<AtomicBool> = CachePadded::new(AtomicBool::new(false));

struct Job {
    nic: Nic,
    channel: u64,
    port: u16,
    sockets: usize,
    /// Every service core meets here for the share-nothing calibration after the run.
    calib: &'static libos::thread::Barrier,
    /// `idle=sleep`: sleep in the kernel when there is nothing to do, instead of polling.
    sleep: bool,
    /// `api=fd`: serve through socket descriptors (`serve_fd`).
    fd_api: bool,
}

/// When a service core with nothing to do sleeps (`idle=sleep`): after `POLLS_BEFORE_SLEEP`
/// empty polls in a row, and in Inline mode, where nothing but the timeout ends the sleep,
/// only after `INLINE_NS_BEFORE_SLEEP` with nothing arriving, so that traffic with short gaps
/// is served by polling.
#[derive(Default)]
struct Idle {
    polls: u32,
    since: u64,
}

impl Idle {
    /// Empty polls in a row before the core sleeps (the kernel core's IPI wakes it when a
    /// frame comes, Dedicated and Polling).
    const POLLS_BEFORE_SLEEP: u32 = 64;
    /// In Inline mode, also this long with nothing arriving (only a timeout wakes it there).
    const INLINE_NS_BEFORE_SLEEP: u64 = 2_000_000;

    /// The poll found work: count again from 0.
    fn busy(&mut self) {
        self.polls = 0;
    }

    /// The poll found nothing: how long to sleep now (microseconds), if at all. Until the
    /// kernel core brings something (in Inline mode: the card's interrupt), or the timeout:
    /// core 0 also watches the run's end, so it sleeps shorter.
    fn nap_us(&mut self, job: &Job) -> Option<u64> {
        self.polls += 1;
        if self.polls == 1 {
            self.since = libos::time::tsc_ns();
        }
        let long_enough = job.nic.mode != Mode::Inline || libos::time::tsc_ns() - self.since >= Self::INLINE_NS_BEFORE_SLEEP;
        (job.sleep && self.polls >= Self::POLLS_BEFORE_SLEEP && long_enough).then_some(if job.channel == 0 { 10_000 } else { 100_000 })
    }
}

/// The share-nothing calibration (common/calib.rs), run on every service core at once after
/// the connections, only when every service core came up (the barrier counts all of them).
static CALIB: calib::Calibration = calib::Calibration::new();
static CALIB_OK: AtomicBool = AtomicBool::new(false);

fn serve(job: &Job) -> Result<(), abi::Error> {
    if job.fd_api {
        return serve_fd(job);
    }
    if job.channel != 0 {
        job.nic.map_here()?;
    }
    let chan = job.nic.channel(job.channel);
    let mut stack = Stack::new(chan, 0x5eed ^ (job.channel << 32) ^ libos::time::ticks());
    let mut handles = Vec::new();
    for _ in 0..job.sockets {
        let rx = tcp::SocketBuffer::new(alloc::vec![0u8; 1024]);
        let tx = tcp::SocketBuffer::new(alloc::vec![0u8; 1024]);
        let mut s = tcp::Socket::new(rx, tx);
        // A connection that hears nothing for 2 s is dropped: half-open connections from a SYN
        // flood would otherwise hold every listening socket for ever (smoltcp keeps
        // SYN-RECEIVED until told otherwise), and the service would stop answering.
        s.set_timeout(Some(libos::net::smoltcp::time::Duration::from_secs(2)));
        s.listen(job.port).map_err(|_| abi::Error::InvalidArgument)?;
        handles.push((stack.sockets.add(s), false));
    }
    if job.channel == 0 {
        stack.dev.announce();
    }
    let me = &COUNTS[job.channel as usize];
    me.ready.store(true, Ordering::Release);
    let mut next_check = 0u64;
    let mut next_stats = libos::time::tsc_ns() + STATS_EVERY_NS.load(Ordering::Relaxed);
    let mut last = libos::net::ChannelStats::default();
    let (mut after_work, mut measured, mut counting) = (true, false, false);
    let mut idle = Idle::default();
    while !STOP.load(Ordering::Relaxed) {
        if job.channel == 0 {
            // Core 0 ends the run: it reads the others' counts about once a millisecond.
            if let Some(now) = check_due(&mut next_check) {
                let served = served_total();
                if !MEASURING.load(Ordering::Relaxed) && served >= WARMUP.load(Ordering::Relaxed) {
                    MEASURING.store(true, Ordering::Relaxed);
                    // SAFETY: the kernel's I/O bitmap lets user mode write the marker port.
                    unsafe { bench::harness::marker_out(MARKER_START_ALL) };
                }
                let every = STATS_EVERY_NS.load(Ordering::Relaxed);
                if every > 0 && now >= next_stats {
                    next_stats = now + every;
                    print_counts("tcpserv: stats", NSERVICE.load(Ordering::Relaxed) as usize);
                }
                if served >= TARGET.load(Ordering::Relaxed) || now >= DEADLINE_NS.load(Ordering::Relaxed) {
                    if MEASURING.load(Ordering::Relaxed) {
                        // SAFETY: as above.
                        unsafe { bench::harness::marker_out(MARKER_STOP_ALL) };
                    }
                    STOP.store(true, Ordering::Release);
                }
            }
        }
        // Skip the stack when it has nothing to do, and tell the instruction counter which
        // polls worked: inside the measured region (after the warm-up) a service core counts
        // only its busy stretches (insncount's per-vCPU markers), so its instructions per
        // connection are the work, not the time it spent waiting for the next packet.
        let busy = after_work || stack.has_work();
        if MEASURING.load(Ordering::Relaxed) && !STOP.load(Ordering::Relaxed) {
            if !measured {
                measured = true;
                counting = true; // MARKER_START_ALL turned every vCPU on
            }
            if busy != counting {
                // SAFETY: the kernel's I/O bitmap lets user mode write the marker port.
                unsafe { bench::harness::marker_out(if busy { MARKER_START_CPU } else { MARKER_STOP_CPU }) };
                counting = busy;
            }
        }
        if !busy {
            if let Some(us) = idle.nap_us(job) {
                stack.wait_idle(us);
            }
            continue;
        }
        idle.busy();
        after_work = stack.poll();
        for (h, sent) in handles.iter_mut() {
            let s = stack.sockets.get_mut::<tcp::Socket>(*h);
            match s.state() {
                tcp::State::Established | tcp::State::CloseWait if !*sent => {
                    if s.can_send() && s.send_slice(&REPLY) == Ok(REPLY.len()) {
                        *sent = true;
                        s.close();
                        after_work = true;
                    }
                }
                tcp::State::Closed | tcp::State::TimeWait => {
                    if *sent {
                        me.served.fetch_add(1, Ordering::Relaxed);
                    } else if s.state() == tcp::State::Closed {
                        me.resets.fetch_add(1, Ordering::Relaxed);
                    }
                    *sent = false;
                    after_work = true;
                    s.abort();
                    s.set_timeout(Some(libos::net::smoltcp::time::Duration::from_secs(2)));
                    let _ = s.listen(job.port);
                }
                _ => {}
            }
        }
        // Published only when they change: core 0 reads these lines, so an idle poll must
        // not write them (the sharing audit saw 22 000 writes per connection before).
        let st = stack.dev.chan.borrow().stats;
        if st.rx_frames != last.rx_frames || st.tx_frames != last.tx_frames || st.tx_stalls != last.tx_stalls {
            me.rx.store(st.rx_frames, Ordering::Relaxed);
            me.tx.store(st.tx_frames, Ordering::Relaxed);
            me.stalls.store(st.tx_stalls, Ordering::Relaxed);
            last = st;
        }
    }
    if counting {
        // SAFETY: as above.
        unsafe { bench::harness::marker_out(MARKER_STOP_CPU) };
    }
    // One last poll sends what the stack still holds (FINs, ACKs).
    stack.poll();
    // Only when every service core came up: the barrier counts all of them.
    if CALIB_OK.load(Ordering::Acquire) {
        CALIB.run(job.calib, job.channel as usize, NSERVICE.load(Ordering::Relaxed) as usize);
    }
    if job.channel != 0 {
        let _ = job.nic.unmap_here();
    }
    Ok(())
}

/// `api=fd`: the same service through socket descriptors. Core 0 ends the run as in `serve`
/// (its check every millisecond); a connection counts as served once its reply is written
/// and its descriptor closed (the FIN goes out in the background; the stack is polled until
/// every closed connection is gone before the core stops).
fn serve_fd(job: &Job) -> Result<(), abi::Error> {
    use libos::fd::{self, Scope};
    use libos::net::host;
    if job.channel != 0 {
        job.nic.map_here()?;
    }
    let stack = Stack::new(job.nic.channel(job.channel), 0x5eed ^ (job.channel << 32) ^ libos::time::ticks());
    if job.channel == 0 {
        stack.dev.announce();
    }
    host::attach(Box::new(stack))?;
    let backlog = job.sockets.min(host::MAX_BACKLOG);
    let l = fd::tcp_listen(Scope::Private, job.port, backlog)?;
    fd::set_nonblocking(l, true)?;
    let me = &COUNTS[job.channel as usize];
    me.ready.store(true, Ordering::Release);
    let mut next_check = 0u64;
    let mut idle = Idle::default();
    let mut failed = None;
    while !STOP.load(Ordering::Relaxed) {
        if job.channel == 0 {
            if let Some(now) = check_due(&mut next_check) {
                let served = served_total();
                if served >= TARGET.load(Ordering::Relaxed) || now >= DEADLINE_NS.load(Ordering::Relaxed) {
                    STOP.store(true, Ordering::Release);
                }
            }
        }
        let mut busy = host::poll()?;
        loop {
            match fd::accept(l) {
                Ok(c) => {
                    busy = true;
                    let wrote = fd::write(c, &REPLY) == Ok(REPLY.len());
                    let closed = fd::close(c).is_ok();
                    let count = if wrote && closed { &me.served } else { &me.resets };
                    count.fetch_add(1, Ordering::Relaxed);
                }
                Err(abi::Error::WouldBlock) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if failed.is_some() {
            break;
        }
        if busy {
            idle.busy();
            continue;
        }
        if let Some(us) = idle.nap_us(job) {
            host::with_host(|h| h.wait_idle(us))?;
        }
    }
    // The closed connections' goodbyes (FIN, ACK) finish; only the listener's sockets stay.
    libos::time::wait_until(500, || host::poll().is_ok() && host::counts().is_ok_and(|(_, socks)| socks <= backlog));
    let _ = fd::close(l);
    let _ = host::poll();
    let _ = host::detach();
    if CALIB_OK.load(Ordering::Acquire) {
        CALIB.run(job.calib, job.channel as usize, NSERVICE.load(Ordering::Relaxed) as usize);
    }
    if job.channel != 0 {
        let _ = job.nic.unmap_here();
    }
    failed.map_or(Ok(()), Err)
}

fn thread_main(arg: u64) -> u64 {
    // SAFETY: `arg` is a `Box<Job>` leaked by `main` for this thread, which owns it now.
    let job = unsafe { Box::from_raw(arg as *mut Job) };
    let r = serve(&job);
    COUNTS[job.channel as usize].exited.store(true, Ordering::Release);
    match r {
        Ok(()) => 0,
        Err(e) => {
            println!("tcpserv: channel {}: {e:?}", job.channel);
            1
        }
    }
}

struct Opts {
    mode: Mode,
    kc: u64,
    cores: u64,
    conns: u64,
    seconds: u64,
    port: u16,
    sockets: usize,
    warmup: u64,
    stats: u64,
    sleep: bool,
    fd_api: bool,
}

fn parse(args: &str, ncores: u64) -> Result<Opts, alloc::string::String> {
    let mut o = Opts {
        mode: if ncores >= 2 { Mode::Dedicated } else { Mode::Inline },
        kc: ncores.saturating_sub(1),
        cores: 0,
        conns: 0,
        seconds: 0,
        port: 80,
        sockets: 16,
        warmup: 0,
        stats: 0,
        sleep: true,
        fd_api: false,
    };
    for w in args.split_whitespace() {
        let (k, v) = w.split_once('=').ok_or_else(|| alloc::format!("{w:?} is not key=value"))?;
        let num = || libos::parse_u64(v).ok_or_else(|| alloc::format!("{k}={v:?}: not a number"));
        match k {
            "mode" => o.mode = Mode::parse(v).ok_or_else(|| alloc::format!("mode={v:?}: dedicated, polling or inline"))?,
            "kc" => o.kc = num()?,
            "cores" => o.cores = num()?,
            "conns" => o.conns = num()?,
            "warmup" => o.warmup = num()?,
            "stats" => o.stats = num()?,
            "idle" => {
                o.sleep = match v {
                    "poll" => false,
                    "sleep" => true,
                    _ => return Err(alloc::format!("idle={v:?}: poll or sleep")),
                }
            }
            "api" => {
                o.fd_api = match v {
                    "handles" => false,
                    "fd" => true,
                    _ => return Err(alloc::format!("api={v:?}: handles or fd")),
                }
            }
            "seconds" => o.seconds = num()?,
            "port" => o.port = u16::try_from(num()?).map_err(|_| alloc::format!("port={v}: above 65535"))?,
            "sockets" => o.sockets = num()?.clamp(1, 256) as usize,
            _ => return Err(alloc::format!("unknown option {k:?}")),
        }
    }
    if o.mode != Mode::Inline && (o.kc >= ncores || o.kc == 0) {
        return Err(alloc::format!("kc={}: the kernel core must be one of cores 1..{} (mode=inline needs none)", o.kc, ncores));
    }
    Ok(o)
}

fn main(args: &'static str) -> u64 {
    let ncores = libos::sys::sys_info().map(|i| i.cores).unwrap_or(1);
    let o = match parse(args, ncores) {
        Ok(o) => o,
        Err(e) => {
            println!("tcpserv: {e}");
            println!("usage: tcpserv [mode=dedicated|polling|inline] [kc=CORE] [cores=N] [conns=N] [seconds=S] [port=P] [sockets=K] [warmup=W] [stats=S] [idle=poll|sleep] [api=handles|fd]");
            return 2;
        }
    };
    // Service cores: from core 0 up, skipping the kernel core.
    let mut service: Vec<u64> = (0..ncores).filter(|&c| o.mode == Mode::Inline || c != o.kc).collect();
    service.truncate(MAX_CORES);
    if o.cores > 0 {
        service.truncate(o.cores as usize);
    }
    if service.is_empty() {
        println!("tcpserv: no service core left");
        return 2;
    }
    let proc_share = libos::process::proc_share();
    let nic = match Nic::open(proc_share, service.len() as u64, BUFFERS_PER_CHANNEL, o.mode) {
        Ok(n) => n,
        Err(e) => {
            println!("tcpserv: cannot open the network card: {e:?} (boot with `cargo xtask run --net`)");
            return 1;
        }
    };
    if !o.sleep && o.mode != Mode::Inline {
        // Pure polling: the kernel core never sleeps either.
        if let Err(e) = nic.set_kc_idle(0) {
            println!("tcpserv: cannot make the kernel core poll without pause: {e:?}");
        }
    }
    let root = libos::root_share();
    let mut kc: Option<ObjName> = None;
    if o.mode != Mode::Inline {
        let made = libos::sys::pcore_alloc(root, "net-kc", o.kc).map(|p| ObjName::new(root, p)).and_then(|p| {
            libos::sys::pcore_set_role(p, ROLE_KC)?;
            Ok(p)
        });
        match made.and_then(|p| nic.attach(p).map(|()| p)) {
            Ok(p) => kc = Some(p),
            Err(e) => {
                println!("tcpserv: cannot make core {} the card's kernel core: {e:?}", o.kc);
                let _ = nic.unmap_here();
                let _ = nic.close();
                return 1;
            }
        }
    }
    let calib: &'static libos::thread::Barrier = Box::leak(Box::new(libos::thread::Barrier::new(service.len() as u64)));
    NSERVICE.store(service.len() as u64, Ordering::Relaxed);
    WARMUP.store(o.warmup, Ordering::Relaxed);
    STATS_EVERY_NS.store(o.stats.saturating_mul(1_000_000_000), Ordering::Relaxed);
    let mut threads = Vec::new();
    let mut failed = false;
    for (ch, &core) in service.iter().enumerate().skip(1) {
        let job = Box::into_raw(Box::new(Job { nic, channel: ch as u64, port: o.port, sockets: o.sockets, calib, sleep: o.sleep, fd_api: o.fd_api }));
        match libos::thread::spawn(core, thread_main, job as u64) {
            Ok(t) => threads.push(t),
            Err(e) => {
                // SAFETY: the thread never started; the job is still ours.
                drop(unsafe { Box::from_raw(job) });
                println!("tcpserv: cannot start core {core}: {e:?}");
                failed = true;
                break;
            }
        }
    }
    let start = libos::time::now_ns();
    // Every core's halts from here to the end (`tcpserv: halts` line): what the idle mode did.
    let halts_at = |c: u64| libos::sys::core_stats(c).map(|s| (s.halts, s.halted_cycles)).unwrap_or((0, 0));
    let halts0: Vec<(u64, u64)> = (0..ncores).map(halts_at).collect();
    if !failed {
        // Core 0 serves channel 0 itself once the other cores listen.
        let n = service.len();
        let up = libos::time::wait_until(30_000, || (1..n).all(|c| COUNTS[c].ready.load(Ordering::Acquire) || COUNTS[c].exited.load(Ordering::Acquire)));
        if up && (1..n).all(|c| COUNTS[c].ready.load(Ordering::Acquire)) {
            CALIB_OK.store(true, Ordering::Release);
            DEADLINE_NS.store(if o.seconds > 0 { start + o.seconds * 1_000_000_000 } else { u64::MAX }, Ordering::Relaxed);
            TARGET.store(if o.conns > 0 { o.conns } else { u64::MAX }, Ordering::Relaxed);
            NSERVICE.store(n as u64, Ordering::Relaxed);
            println!(
                "tcpserv: ready mode={} cores={} kc={} port={} sockets={} idle={}",
                o.mode.name(),
                n,
                if o.mode == Mode::Inline { -1 } else { o.kc as i64 },
                o.port,
                o.sockets,
                if o.sleep { "sleep" } else { "poll" }
            );
            if let Err(e) = serve(&Job { nic, channel: 0, port: o.port, sockets: o.sockets, calib, sleep: o.sleep, fd_api: o.fd_api }) {
                println!("tcpserv: channel 0: {e:?}");
                code_fail();
            }
        } else {
            println!("tcpserv: service cores did not come up");
            code_fail();
        }
    }
    STOP.store(true, Ordering::Release);
    let mut code = if failed || FAILED.load(Ordering::Relaxed) { 1 } else { 0 };
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
    let total: u64 = (0..service.len()).map(|c| COUNTS[c].served.load(Ordering::Relaxed)).sum();
    let mut line = alloc::format!(
        "tcpserv: done conns={total} mode={} cores={} service_cores={} ms={elapsed_ms} calib_ops={} calib_ns={} dev_in={} dev_out={} dev_drops={} dev_errors={}",
        o.mode.name(),
        service.len(),
        service.len(),
        calib::STEPS * service.len() as u64,
        CALIB.best_ns(),
        st.packets_in,
        st.packets_out,
        st.drops,
        st.errors
    );
    for (c, core) in service.iter().enumerate() {
        line.push_str(&alloc::format!(" core{core}={}", COUNTS[c].fields()));
    }
    println!("{line}");
    println!("tcpserv: per core: served/resets/rx frames/tx frames/tx stalls");
    // How often each core halted during the run and for how long (ms): service cores and the
    // kernel core halt with `idle=sleep`, and poll without halting with `idle=poll`.
    let tpm = libos::time::tsc_per_ms().max(1);
    let mut line = alloc::format!("tcpserv: halts idle={}", if o.sleep { "sleep" } else { "poll" });
    for (c, &(h0, t0)) in halts0.iter().enumerate() {
        let (h1, t1) = halts_at(c as u64);
        let role = if service.contains(&(c as u64)) { "service" } else if kc.is_some() && c as u64 == o.kc { "kc" } else { "other" };
        line.push_str(&alloc::format!(" core{c}={role}:{}/{}", h1.saturating_sub(h0), t1.saturating_sub(t0) / tpm));
    }
    println!("{line}");
    code
}

static FAILED: AtomicBool = AtomicBool::new(false);
/// `stats=S`: core 0 prints every core's counts every S seconds (0: never).
static STATS_EVERY_NS: AtomicU64 = AtomicU64::new(0);

/// One line of every service core's counts: served/resets/rx frames/tx frames/tx stalls.
fn print_counts(prefix: &str, n: usize) {
    let total: u64 = (0..n).map(|c| COUNTS[c].served.load(Ordering::Relaxed)).sum();
    let mut line = alloc::format!("{prefix} conns={total}");
    for c in 0..n {
        line.push_str(&alloc::format!(" ch{c}={}", COUNTS[c].fields()));
    }
    println!("{line}");
}

fn code_fail() {
    FAILED.store(true, Ordering::Relaxed);
}

/// insncount's region markers (tools/qemu-plugins/marker.h): every vCPU, from one core.
const MARKER_START_CPU: u8 = 1;
const MARKER_STOP_CPU: u8 = 2;
const MARKER_START_ALL: u8 = 3;
const MARKER_STOP_ALL: u8 = 4;
static MEASURING: AtomicBool = AtomicBool::new(false);
static WARMUP: AtomicU64 = AtomicU64::new(0);
static DEADLINE_NS: AtomicU64 = AtomicU64::new(u64::MAX);
static TARGET: AtomicU64 = AtomicU64::new(u64::MAX);
static NSERVICE: AtomicU64 = AtomicU64::new(1);

/// Core 0's check of the run's end, about once a millisecond: the time now (ns) when one is
/// due (and the next one then set), else `None`.
fn check_due(next_check: &mut u64) -> Option<u64> {
    let now = libos::time::tsc_ns();
    (now >= *next_check).then(|| {
        *next_check = now + 1_000_000;
        now
    })
}

/// Connections every service core has served so far (core 0 reads it to end the run).
fn served_total() -> u64 {
    let n = NSERVICE.load(Ordering::Relaxed) as usize;
    (0..n).map(|c| COUNTS[c].served.load(Ordering::Relaxed)).sum()
}
