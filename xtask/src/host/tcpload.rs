//! The load generator for the TCP accept service (Corey §8.2): connections to 127.0.0.1 only,
//! bounded in count, concurrency and time (it always stops by itself), each reply read to EOF
//! and checked against the 128 expected bytes. Used by `cargo xtask net load`, by the
//! `tcp_accept` benchmark and by tests. Its core ([`drive`]: bounded work tickets over a set of
//! threads, the clock started when all are ready), its failure kinds and its percentiles are
//! also the HTTP load generator's (webd/load.rs), which adds requests on the connections.

use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// Length of the service's reply.
pub const REPLY_LEN: usize = 128;

/// The reply the service sends on every connection: byte i = b'a' + i % 26 for i < 127, then
/// a newline.
pub fn expected_reply() -> [u8; REPLY_LEN] {
    let mut r = [0u8; REPLY_LEN];
    for (i, b) in r.iter_mut().enumerate() {
        *b = b'a' + (i % 26) as u8;
    }
    r[REPLY_LEN - 1] = b'\n';
    r
}

/// Connections open at once by default. QEMU's user-mode network (libslirp) listens on the
/// forwarded host port with a backlog of 1, so with more than 2 connects in flight the host
/// kernel drops SYNs and the client waits out the 1 s SYN retransmission (measured here:
/// concurrency 4 gave one 1.04 s connection per 600, stretching the round's wall time; 2 gave
/// none). Such connects are counted as `slow_connects`.
pub const DEFAULT_CONCURRENCY: usize = 2;

/// A connect that took this long waited for a SYN retransmission.
pub const SLOW_CONNECT: Duration = Duration::from_millis(900);

/// The most one run may ask for: every loop here is bounded.
pub const MAX_CONNS: u64 = 10_000_000;
pub const MAX_CONCURRENCY: usize = 256;
pub const MAX_SECONDS: u64 = 3600;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// The port on 127.0.0.1 (the only address this generator connects to).
    pub port: u16,
    /// Connections to open in all, at most.
    pub conns: u64,
    /// Connections open at once (one thread each).
    pub concurrency: usize,
    /// No new connection starts after this much time.
    pub max_time: Duration,
    /// Per connection: connect, and then the whole reply, must each come within this.
    pub timeout: Duration,
    /// Every `abort_every`-th connection (0: none) is reset by the client right after connect
    /// (SO_LINGER 0, close), without reading: the server's write or close meets a reset. Not a
    /// failure; counted as `aborted`. A fault injection for the guest's error paths.
    pub abort_every: u64,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec { port: 0, conns: 1000, concurrency: DEFAULT_CONCURRENCY, max_time: Duration::from_secs(30), timeout: Duration::from_secs(5), abort_every: 0 }
    }
}

impl LoadSpec {
    pub fn validate(&self) -> Result<(), String> {
        check_port(self.port)?;
        check_count("--conns", self.conns, MAX_CONNS)?;
        check_count("--concurrency", self.concurrency as u64, MAX_CONCURRENCY as u64)?;
        check_times(self.max_time, self.timeout)
    }
}

/// A load spec's port: not 0. (The checks here are every load generator's: this one's and
/// webd's.)
pub fn check_port(port: u16) -> Result<(), String> {
    if port == 0 {
        return Err("--port: need a port (1..=65535)".into());
    }
    Ok(())
}

/// A count given with `option`: in 1..=`max`.
pub fn check_count(option: &str, n: u64, max: u64) -> Result<(), String> {
    if n == 0 || n > max {
        return Err(format!("{option}: {n} is not in 1..={max}"));
    }
    Ok(())
}

/// The time bounds: `--seconds` in (0, [`MAX_SECONDS`]] and a `--timeout` above 0.
pub fn check_times(max_time: Duration, timeout: Duration) -> Result<(), String> {
    if max_time.is_zero() || max_time > Duration::from_secs(MAX_SECONDS) {
        return Err(format!("--seconds: {max_time:?} is not in (0, {MAX_SECONDS}] s"));
    }
    if timeout.is_zero() {
        return Err("--timeout: must be more than 0".into());
    }
    Ok(())
}

/// Why a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection was refused (nothing listens on the host port).
    Refused,
    /// Reset or aborted by the peer, before or after bytes arrived.
    Reset,
    /// Connect or the reply took longer than the timeout.
    Timeout,
    /// Closed without a byte of reply. (QEMU's user-mode network accepts on the host side and
    /// then closes the host socket when the guest refuses, so a guest not listening looks so.)
    Empty,
    /// A reply that is not exactly the 128 expected bytes.
    WrongBytes,
    /// Any other I/O error.
    Other,
}

/// Failures counted by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    pub refused: u64,
    pub reset: u64,
    pub timeout: u64,
    pub empty: u64,
    pub wrong_bytes: u64,
    pub other: u64,
}

impl Failures {
    fn add(&mut self, f: Failure) {
        match f {
            Failure::Refused => self.refused += 1,
            Failure::Reset => self.reset += 1,
            Failure::Timeout => self.timeout += 1,
            Failure::Empty => self.empty += 1,
            Failure::WrongBytes => self.wrong_bytes += 1,
            Failure::Other => self.other += 1,
        }
    }

    fn merge(&mut self, o: &Failures) {
        self.refused += o.refused;
        self.reset += o.reset;
        self.timeout += o.timeout;
        self.empty += o.empty;
        self.wrong_bytes += o.wrong_bytes;
        self.other += o.other;
    }

    pub fn total(&self) -> u64 {
        self.refused + self.reset + self.timeout + self.empty + self.wrong_bytes + self.other
    }

    /// `refused=0 reset=0 timeout=0 empty=0 wrong_bytes=0 other=0`
    pub fn words(&self) -> String {
        format!(
            "refused={} reset={} timeout={} empty={} wrong_bytes={} other={}",
            self.refused, self.reset, self.timeout, self.empty, self.wrong_bytes, self.other
        )
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub port: u16,
    /// Connections started.
    pub attempted: u64,
    /// Connections that delivered exactly the expected reply and EOF.
    pub ok: u64,
    pub failures: Failures,
    /// From the first connection's start to the last one's end.
    pub elapsed: Duration,
    /// Latency of each good connection (connect to EOF), sorted.
    pub latencies: Vec<Duration>,
    /// The first failure's description, for the report.
    pub first_failure: Option<String>,
    /// The time bound stopped the run before `conns` connections started.
    pub stopped_by_time: bool,
    /// Good connections whose connect took [`SLOW_CONNECT`] or more (a retransmitted SYN).
    pub slow_connects: u64,
    /// Connections the client reset on purpose (`abort_every`).
    pub aborted: u64,
}

impl LoadReport {
    /// Good connections per second of the run.
    pub fn conns_per_s(&self) -> f64 {
        per_second(self.ok, self.elapsed)
    }

    /// The `p`-th percentile (0..=100, nearest rank) of the good connections' latency.
    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies, p)
    }

    /// The human report, two lines.
    pub fn summary(&self) -> String {
        let ms = |d: Option<Duration>| d.map(|d| format!("{:.2}ms", d.as_secs_f64() * 1e3)).unwrap_or_else(|| "-".into());
        let mut s = format!(
            "load: 127.0.0.1:{} attempted={} ok={} failed={} ({}) slow_connects={} aborted={} seconds={:.2} conns_per_s={:.1}{}\n",
            self.port,
            self.attempted,
            self.ok,
            self.failures.total(),
            self.failures.words(),
            self.slow_connects,
            self.aborted,
            self.elapsed.as_secs_f64(),
            self.conns_per_s(),
            if self.stopped_by_time { " (stopped by the time bound)" } else { "" }
        );
        s.push_str(&format!(
            "load: latency p50={} p90={} p99={} max={}\n",
            ms(self.percentile(50.0)),
            ms(self.percentile(90.0)),
            ms(self.percentile(99.0)),
            ms(self.latencies.last().copied())
        ));
        if let Some(f) = &self.first_failure {
            s.push_str(&format!("load: first failure: {f}\n"));
        }
        s
    }
}

/// The `p`-th percentile (0..=100, nearest rank) of `sorted` (ascending); None if empty.
/// Shared with the HTTP load generator (xtask/src/webd/load.rs).
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// `count` things done in `elapsed`, per second (0 for an empty run). Shared with the HTTP
/// load generator.
pub fn per_second(count: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        count as f64 / s
    } else {
        0.0
    }
}

/// The work tickets of a bounded load: at most `count` are handed out, none after
/// `deadline`. Every load thread takes its next piece of work here, so the count is exact
/// however many threads there are, and no new work starts after the time bound. Shared with
/// the HTTP load generator.
pub struct Tickets {
    next: AtomicU64,
    count: u64,
    deadline: Instant,
}

impl Tickets {
    pub fn new(count: u64, deadline: Instant) -> Tickets {
        Tickets { next: AtomicU64::new(0), count, deadline }
    }

    /// The next ticket number (0, 1, ...), or None once `count` are out or the deadline passed.
    pub fn take(&self) -> Option<u64> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        (Instant::now() < self.deadline && ticket < self.count).then_some(ticket)
    }
}

/// The core both load generators (this one, TCP, and webd's HTTP one on top of it) run on:
/// `threads` workers, each first made by `prepare(i)` (the HTTP generator opens its
/// keep-alive connection there), then, once every worker is ready, the clock starts and each
/// takes [`Tickets`] (at most `count` in all, none after `max_time`) and does `work(worker,
/// ticket)` for each. Returns the workers (a worker whose thread panicked is left out) and
/// when the clock started.
pub fn drive<W: Send>(threads: usize, count: u64, max_time: Duration, prepare: impl Fn(usize) -> W + Sync, work: impl Fn(&mut W, u64) + Sync) -> (Vec<W>, Instant) {
    let threads = threads.max(1);
    let ready = Barrier::new(threads);
    let start_cell = OnceLock::new();
    let tickets_cell: OnceLock<Tickets> = OnceLock::new();
    let workers = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (ready, start_cell, tickets_cell, prepare, work) = (&ready, &start_cell, &tickets_cell, &prepare, &work);
                sc.spawn(move || {
                    let mut w = prepare(i);
                    ready.wait();
                    let start = *start_cell.get_or_init(Instant::now);
                    let tickets = tickets_cell.get_or_init(|| Tickets::new(count, start + max_time));
                    while let Some(ticket) = tickets.take() {
                        work(&mut w, ticket);
                    }
                    w
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    // Every worker passed the barrier, so the clock has started (unless all of them panicked
    // before it: then no work was done, and now is as good a start as any).
    let start = start_cell.get().copied().unwrap_or_else(Instant::now);
    (workers, start)
}

pub(crate) fn io_failure(e: &std::io::Error) -> Failure {
    match e.kind() {
        ErrorKind::ConnectionRefused => Failure::Refused,
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => Failure::Reset,
        ErrorKind::TimedOut | ErrorKind::WouldBlock => Failure::Timeout,
        _ => Failure::Other,
    }
}

/// One connection: connect, read to EOF (at most a little more than the reply, so a server
/// that never stops sending cannot keep us), check the bytes.
/// Returns the latency (connect to EOF) and the connect's own time.
fn one(addr: &SocketAddr, timeout: Duration, expected: &[u8]) -> Result<(Duration, Duration), (Failure, String)> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(addr, timeout).map_err(|e| (io_failure(&e), format!("connect: {e}")))?;
    let connected = start.elapsed();
    let _ = s.set_nodelay(true);
    let mut got = Vec::with_capacity(expected.len());
    let mut buf = [0u8; 512];
    loop {
        let left = timeout.checked_sub(start.elapsed()).filter(|d| !d.is_zero()).ok_or((Failure::Timeout, format!("no EOF within {timeout:?} ({} bytes read)", got.len())))?;
        s.set_read_timeout(Some(left)).map_err(|e| (Failure::Other, format!("set_read_timeout: {e}")))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.len() > expected.len() {
                    return Err((Failure::WrongBytes, format!("more than {} bytes", expected.len())));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err((io_failure(&e), format!("read after {} bytes: {e}", got.len()))),
        }
    }
    let latency = start.elapsed();
    if got.is_empty() {
        return Err((Failure::Empty, "closed without a reply".into()));
    }
    if got != expected {
        let at = got.iter().zip(expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
        return Err((Failure::WrongBytes, format!("{} bytes, first difference at byte {at}", got.len())));
    }
    Ok((latency, connected))
}

/// SO_LINGER on with a zero timeout: closing the socket sends a reset. std has no stable
/// setter, so the libc call std itself links against.
pub(crate) fn reset_on_close(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Linger {
        onoff: i32,
        linger: i32,
    }
    extern "C" {
        fn setsockopt(fd: i32, level: i32, name: i32, val: *const Linger, len: u32) -> i32;
    }
    const SOL_SOCKET: i32 = 1;
    const SO_LINGER: i32 = 13;
    let l = Linger { onoff: 1, linger: 0 };
    // SAFETY: a valid socket descriptor owned by `s`, and a pointer to a live struct of the
    // length passed.
    let rc = unsafe { setsockopt(s.as_raw_fd(), SOL_SOCKET, SO_LINGER, &l, std::mem::size_of::<Linger>() as u32) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Connect and reset at once (see `LoadSpec::abort_every`).
fn abort_one(addr: &SocketAddr, timeout: Duration) -> Result<(), (Failure, String)> {
    let s = TcpStream::connect_timeout(addr, timeout).map_err(|e| (io_failure(&e), format!("connect: {e}")))?;
    reset_on_close(&s).map_err(|e| (Failure::Other, format!("SO_LINGER: {e}")))
}

/// What one load thread saw.
#[derive(Default)]
struct ThreadResult {
    started: u64,
    latencies: Vec<Duration>,
    failures: Failures,
    first_failure: Option<String>,
    slow_connects: u64,
    aborted: u64,
}

/// Run the load: `concurrency` threads take connection tickets until `conns` are taken or
/// `max_time` has passed, then the in-flight ones finish (each bounded by `timeout`).
pub fn run(spec: &LoadSpec) -> Result<LoadReport, String> {
    spec.validate()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, spec.port));
    let expected = expected_reply();
    let (per_thread, start) = drive(
        spec.concurrency,
        spec.conns,
        spec.max_time,
        |_| ThreadResult::default(),
        |t, ticket| {
            t.started += 1;
            let result = if spec.abort_every > 0 && ticket % spec.abort_every == spec.abort_every - 1 {
                abort_one(&addr, spec.timeout).map(|()| {
                    t.aborted += 1;
                })
            } else {
                one(&addr, spec.timeout, &expected).map(|(d, connect)| {
                    t.latencies.push(d);
                    t.slow_connects += u64::from(connect >= SLOW_CONNECT);
                })
            };
            if let Err((f, why)) = result {
                t.failures.add(f);
                t.first_failure.get_or_insert(format!("{f:?}: {why}"));
            }
        },
    );
    let elapsed = start.elapsed();
    let mut r = LoadReport {
        port: spec.port,
        attempted: 0,
        ok: 0,
        failures: Failures::default(),
        elapsed,
        latencies: Vec::new(),
        first_failure: None,
        stopped_by_time: false,
        slow_connects: 0,
        aborted: 0,
    };
    for t in per_thread {
        r.slow_connects += t.slow_connects;
        r.aborted += t.aborted;
        r.attempted += t.started;
        r.ok += t.latencies.len() as u64;
        r.latencies.extend(t.latencies);
        r.failures.merge(&t.failures);
        if r.first_failure.is_none() {
            r.first_failure = t.first_failure;
        }
    }
    r.latencies.sort();
    r.stopped_by_time = r.attempted < spec.conns;
    Ok(r)
}


#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    /// How the test server answers.
    #[derive(Clone, Copy)]
    pub(crate) enum Serve {
        Good,
        /// The reply with one byte changed.
        Wrong,
        /// 127 of the 128 bytes.
        Short,
        /// Close at once, nothing written.
        Empty,
        /// Write half the reply, then reset (SO_LINGER 0).
        Reset,
        /// Accept and say nothing until the client gives up.
        Silent,
    }

    /// A tiny server on 127.0.0.1: serves `n` connections (a bounded loop) as `how` says, then
    /// stops. Returns the port.
    pub(crate) fn server(n: usize, how: Serve) -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for _ in 0..n {
                let Ok((mut s, _)) = l.accept() else { return };
                let mut reply = expected_reply();
                match how {
                    Serve::Good => {
                        let _ = s.write_all(&reply);
                    }
                    Serve::Wrong => {
                        reply[40] = b'!';
                        let _ = s.write_all(&reply);
                    }
                    Serve::Short => {
                        let _ = s.write_all(&reply[..REPLY_LEN - 1]);
                    }
                    Serve::Empty => {}
                    Serve::Reset => {
                        let _ = s.write_all(&reply[..64]);
                        reset_on_close(&s).unwrap();
                    }
                    Serve::Silent => held.push(s),
                }
            }
            // Silent connections stay open until the client has timed out.
            std::thread::sleep(Duration::from_secs(2));
        });
        port
    }

    fn spec(port: u16, conns: u64, concurrency: usize) -> LoadSpec {
        LoadSpec { port, conns, concurrency, max_time: Duration::from_secs(20), timeout: Duration::from_millis(500), abort_every: 0 }
    }

    #[test]
    fn the_reply_is_the_alphabet_then_a_newline() {
        let r = expected_reply();
        assert_eq!(&r[..28], b"abcdefghijklmnopqrstuvwxyzab");
        assert_eq!(r[126], b'a' + (126 % 26) as u8);
        assert_eq!(r[127], b'\n');
    }

    #[test]
    fn good_server_all_ok_and_counted_once() {
        let port = server(200, Serve::Good);
        let r = run(&spec(port, 200, 4)).unwrap();
        assert_eq!((r.attempted, r.ok, r.failures.total()), (200, 200, 0), "{}", r.summary());
        assert_eq!(r.latencies.len(), 200);
        assert!(r.conns_per_s() > 0.0);
        let (p50, p99, max) = (r.percentile(50.0).unwrap(), r.percentile(99.0).unwrap(), *r.latencies.last().unwrap());
        assert!(p50 <= p99 && p99 <= max);
        assert!(!r.stopped_by_time);
    }

    #[test]
    fn each_failure_kind_is_counted_as_itself() {
        for (how, kind) in [
            (Serve::Wrong, "wrong_bytes"),
            (Serve::Short, "wrong_bytes"),
            (Serve::Empty, "empty"),
            (Serve::Reset, "reset"),
            (Serve::Silent, "timeout"),
        ] {
            let port = server(3, how);
            let r = run(&spec(port, 3, 3)).unwrap();
            assert_eq!(r.ok, 0, "{kind}: {}", r.summary());
            assert!(r.failures.words().contains(&format!("{kind}=3")), "{kind}: {}", r.summary());
            assert_eq!(r.failures.total(), 3, "{kind}: {}", r.summary());
        }
        // Nothing listens on a port just freed: refused.
        let port = crate::host::vm::free_port().unwrap();
        let r = run(&spec(port, 2, 1)).unwrap();
        assert_eq!(r.failures.refused, 2, "{}", r.summary());
    }

    #[test]
    fn aborted_connections_are_counted_apart() {
        let port = server(30, Serve::Good);
        let r = run(&LoadSpec { abort_every: 3, ..spec(port, 30, 2) }).unwrap();
        assert_eq!((r.attempted, r.aborted, r.ok, r.failures.total()), (30, 10, 20, 0), "{}", r.summary());
        assert_eq!(r.latencies.len(), 20, "an aborted connection has no latency");
    }

    #[test]
    fn bounded_by_time_and_count() {
        // Silent server, 1 s time bound, 400 ms timeout: it stops after ~1.4 s with far fewer
        // than the million connections asked for.
        let port = server(100, Serve::Silent);
        let s = LoadSpec { port, conns: 1_000_000, concurrency: 2, max_time: Duration::from_secs(1), timeout: Duration::from_millis(400), abort_every: 0 };
        let t = Instant::now();
        let r = run(&s).unwrap();
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert!(r.stopped_by_time && r.attempted < 20, "{}", r.summary());
        let port = server(5, Serve::Good);
        assert_eq!(run(&spec(port, 5, 8)).unwrap().attempted, 5, "never more than --conns");
    }
}
