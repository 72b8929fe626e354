//! The HTTP load generator for webd (`cargo xtask webd load`): 127.0.0.1 only, `conns`
//! connections at once (one thread each, keep-alive unless asked not to), at most `requests`
//! requests in all (on the TCP load generator's core, `net::load::drive`) and none started after
//! `max_time`; every request has its own timeout. Each response is read whole (Content-Length
//! framing, bounded) and checked: status 200, and with expected sums the body of
//! `/filesum/NAME` must be the decimal sum and the body of `/NAME` must have the file's size
//! and sum. Failures are counted by kind ([`Failure`]); latency is per good request, from
//! its first byte written (or its connect, when it opens one) to its last byte read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::files::{filesum, Expect};
use super::http::{self, Conn, Failure};
use crate::host::tcpload::{check_count, check_port, check_times, drive, per_second, percentile};

/// Every loop here is bounded.
pub const MAX_REQUESTS: u64 = 10_000_000;
pub const MAX_CONNS: usize = 256;

#[derive(Debug, Clone)]
pub struct WebLoadSpec {
    pub port: u16,
    /// Connections open at once (a thread each).
    pub conns: usize,
    /// Requests in all, at most.
    pub requests: u64,
    /// No request starts after this.
    pub max_time: Duration,
    /// Per request (and per connect).
    pub timeout: Duration,
    /// Request targets, used in turn: request `i` asks for `paths[i % len]`.
    pub paths: Vec<String>,
    /// One request per connection (`Connection: close`) instead of keep-alive.
    pub no_keepalive: bool,
    /// The files' sizes and sums (`--expect-sums`): bodies are checked against them.
    pub expect: Option<BTreeMap<String, Expect>>,
    /// Connections are steered to these channels in turn (connection `k` from a source port
    /// that hashes to `steer[k % len]` of `steer_channels`); empty: the host's own ports.
    pub steer: Vec<u64>,
    pub steer_channels: u64,
}

impl Default for WebLoadSpec {
    fn default() -> Self {
        WebLoadSpec {
            port: 0,
            conns: 2,
            requests: 1000,
            max_time: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            paths: vec!["/".into()],
            no_keepalive: false,
            expect: None,
            steer: Vec::new(),
            steer_channels: 1,
        }
    }
}

impl WebLoadSpec {
    pub fn validate(&self) -> Result<(), String> {
        check_port(self.port)?;
        check_count("--requests", self.requests, MAX_REQUESTS)?;
        check_count("--conns", self.conns as u64, MAX_CONNS as u64)?;
        check_times(self.max_time, self.timeout)?;
        if self.paths.is_empty() {
            return Err("--path: no path to ask for".into());
        }
        for p in &self.paths {
            if !p.starts_with('/') || p.bytes().any(|b| b <= b' ' || b == 0x7f) {
                return Err(format!("--path: `{p}` is not a request target (it must start with / and hold no spaces or control bytes)"));
            }
        }
        if !self.steer.is_empty() && self.steer.iter().any(|&c| c >= self.steer_channels) {
            return Err(format!("steering: channels {:?} of {}", self.steer, self.steer_channels));
        }
        Ok(())
    }
}

/// What a response must be for path `p`, if the expected sums say anything about it.
fn check_body(path: &str, body: &[u8], expect: &BTreeMap<String, Expect>) -> Result<(), String> {
    if let Some(name) = path.strip_prefix("/filesum/") {
        if let Some(e) = expect.get(name) {
            let got = std::str::from_utf8(body).ok().map(str::trim_end).and_then(|s| s.parse::<u64>().ok());
            if got != Some(e.sum) {
                return Err(format!("{path}: body `{}`, want {}", String::from_utf8_lossy(&body[..body.len().min(40)]), e.sum));
            }
        }
    } else if let Some(e) = expect.get(path.trim_start_matches('/')) {
        if e.size.is_some_and(|s| s != body.len() as u64) || filesum(body) != e.sum {
            return Err(format!("{path}: {} bytes summing to {}, want {:?} bytes summing to {}", body.len(), filesum(body), e.size, e.sum));
        }
    }
    Ok(())
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct WebLoadReport {
    pub port: u16,
    pub conns: usize,
    pub keepalive: bool,
    pub attempted: u64,
    pub ok: u64,
    pub failures: BTreeMap<Failure, u64>,
    /// From the start of the first request to the end of the last (connections opened
    /// before the clock starts in keep-alive mode are not in it).
    pub elapsed: Duration,
    /// Good requests' latencies, sorted.
    pub latencies: Vec<Duration>,
    pub first_failure: Option<String>,
    pub stopped_by_time: bool,
    /// Connections opened (keep-alive: one per thread plus one after each close).
    pub connects: u64,
    /// Body bytes received in good responses.
    pub body_bytes: u64,
    /// Good responses per channel steered to (empty without steering).
    pub per_channel: BTreeMap<u64, u64>,
}

impl WebLoadReport {
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    pub fn requests_per_s(&self) -> f64 {
        per_second(self.ok, self.elapsed)
    }

    pub fn percentile(&self, p: f64) -> Option<Duration> {
        percentile(&self.latencies, p)
    }

    /// Failures by kind, every kind named: `refused=0 reset=0 ...`.
    pub fn failure_words(&self) -> String {
        Failure::ALL.iter().map(|f| format!("{}={}", f.name(), self.failures.get(f).copied().unwrap_or(0))).collect::<Vec<_>>().join(" ")
    }

    /// The human report: a small table.
    pub fn table(&self) -> String {
        let ms = |d: Option<Duration>| d.map(|d| format!("{:.2} ms", d.as_secs_f64() * 1e3)).unwrap_or_else(|| "-".into());
        let mut s = format!(
            "webd load: 127.0.0.1:{}, {} connection(s), keep-alive {}\n",
            self.port,
            self.conns,
            if self.keepalive { "on" } else { "off" }
        );
        s.push_str(&format!("  {:<10} {} attempted, {} ok, {} failed{}\n", "requests", self.attempted, self.ok, self.failed(), if self.stopped_by_time { " (stopped by the time bound)" } else { "" }));
        s.push_str(&format!("  {:<10} {:.1} requests/s over {:.2} s, {} body bytes, {} connect(s)\n", "rate", self.requests_per_s(), self.elapsed.as_secs_f64(), self.body_bytes, self.connects));
        s.push_str(&format!(
            "  {:<10} p50 {}  p90 {}  p99 {}  max {}\n",
            "latency",
            ms(self.percentile(50.0)),
            ms(self.percentile(90.0)),
            ms(self.percentile(99.0)),
            ms(self.latencies.last().copied())
        ));
        s.push_str(&format!("  {:<10} {}\n", "errors", self.failure_words()));
        if !self.per_channel.is_empty() {
            let c: Vec<String> = self.per_channel.iter().map(|(k, v)| format!("ch{k}={v}")).collect();
            s.push_str(&format!("  {:<10} {}\n", "steered", c.join(" ")));
        }
        if let Some(f) = &self.first_failure {
            s.push_str(&format!("  {:<10} {f}\n", "first"));
        }
        s
    }

    /// The same as one JSON object.
    pub fn json(&self) -> String {
        let us = |d: Option<Duration>| d.map(|d| d.as_micros().to_string()).unwrap_or_else(|| "null".into());
        let fails: Vec<String> = Failure::ALL.iter().map(|f| format!("\"{}\":{}", f.name(), self.failures.get(f).copied().unwrap_or(0))).collect();
        let chans: Vec<String> = self.per_channel.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!(
            "{{\"port\":{},\"conns\":{},\"keepalive\":{},\"attempted\":{},\"ok\":{},\"failed\":{},\"requests_per_s\":{},\"seconds\":{},\"stopped_by_time\":{},\"connects\":{},\"body_bytes\":{},\"latency_us\":{{\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}},\"errors\":{{{}}},\"per_channel\":{{{}}},\"first_failure\":{}}}",
            self.port,
            self.conns,
            self.keepalive,
            self.attempted,
            self.ok,
            self.failed(),
            crate::host::json::num((self.requests_per_s() * 100.0).round() / 100.0),
            crate::host::json::num((self.elapsed.as_secs_f64() * 1e6).round() / 1e6),
            self.stopped_by_time,
            self.connects,
            self.body_bytes,
            us(self.percentile(50.0)),
            us(self.percentile(90.0)),
            us(self.percentile(99.0)),
            us(self.latencies.last().copied()),
            fails.join(","),
            chans.join(","),
            self.first_failure.as_deref().map(crate::host::json::quote).unwrap_or_else(|| "null".into())
        )
    }
}

#[derive(Default)]
struct ThreadResult {
    attempted: u64,
    latencies: Vec<Duration>,
    failures: BTreeMap<Failure, u64>,
    first_failure: Option<String>,
    connects: u64,
    body_bytes: u64,
    per_channel: BTreeMap<u64, u64>,
    first_start: Option<Instant>,
    last_end: Option<Instant>,
    /// A keep-alive connect that failed before the clock started.
    pending: Option<http::Error>,
}

/// One load thread's state: its tally, its source ports, its connection (kept alive between
/// requests unless asked not to) and the connect time the next good request carries.
struct Worker {
    r: ThreadResult,
    ports: Box<dyn Iterator<Item = u16> + Send>,
    conn_no: u64,
    conn: Option<(Conn, Option<u64>)>,
    pending_connect: Duration,
}

/// Open connection number `k` of thread `t`: steered if asked (skipping source ports in use
/// here), otherwise from a port the host picks.
fn connect(spec: &WebLoadSpec, k: u64, next_port: &mut dyn Iterator<Item = u16>) -> Result<(Conn, Option<u64>), http::Error> {
    if spec.steer.is_empty() {
        return Conn::open(spec.port, spec.timeout).map(|c| (c, None));
    }
    let ch = spec.steer[(k % spec.steer.len() as u64) as usize];
    for _ in 0..256 {
        let Some(sport) = next_port.next() else { break };
        if super::steer::channel_of(sport, crate::host::vm::SERVICE_PORT, spec.steer_channels) != ch {
            continue;
        }
        if let Some(c) = Conn::open_from(spec.port, sport, spec.timeout)? {
            return Ok((c, Some(ch)));
        }
    }
    Err((Failure::Other, format!("no free source port steering to channel {ch}")))
}

/// Run the load.
pub fn run(spec: &WebLoadSpec) -> Result<WebLoadReport, String> {
    spec.validate()?;
    let keepalive = !spec.no_keepalive;
    let threads = spec.conns.min(spec.requests as usize).max(1);
    let fail = |r: &mut ThreadResult, (f, why): http::Error| {
        *r.failures.entry(f).or_insert(0) += 1;
        r.first_failure.get_or_insert(format!("{}: {why}", f.name()));
    };
    // The clock starts when every keep-alive connection is open (or has failed to open): the
    // connects are the workers' preparation.
    let prepare = |t: usize| {
        let mut w = Worker {
            r: ThreadResult::default(),
            // Source ports for steered connections: each thread its own stride of the
            // range, so threads never race for one port.
            ports: Box::new((40000u16..=60999).rev().skip(t).step_by(threads)),
            conn_no: t as u64,
            conn: None,
            pending_connect: Duration::ZERO,
        };
        if keepalive {
            match connect(spec, w.conn_no, &mut w.ports) {
                Ok(c) => {
                    w.r.connects += 1;
                    w.conn = Some(c);
                }
                // Counted against this thread's first request below.
                Err(e) => w.r.pending = Some(e),
            }
            w.conn_no += threads as u64;
        }
        w
    };
    let work = |w: &mut Worker, ticket: u64| {
        let r = &mut w.r;
        r.attempted += 1;
        let t0 = Instant::now();
        r.first_start.get_or_insert(t0);
        // A connect failure saved from before the clock counts for this one.
        if let Some(e) = r.pending.take() {
            fail(r, e);
            r.last_end = Some(Instant::now());
            return;
        }
        if w.conn.is_none() {
            match connect(spec, w.conn_no, &mut w.ports) {
                Ok(c) => {
                    r.connects += 1;
                    w.pending_connect = c.0.connect_time;
                    w.conn = Some(c);
                }
                Err(e) => {
                    fail(r, e);
                    r.last_end = Some(Instant::now());
                    w.conn_no += threads as u64;
                    return;
                }
            }
            w.conn_no += threads as u64;
        }
        let (c, ch) = w.conn.as_mut().expect("a connection is open here");
        let ch = *ch;
        let path = &spec.paths[(ticket % spec.paths.len() as u64) as usize];
        let outcome = c.send(&http::request("GET", path, keepalive), spec.timeout).and_then(|()| c.read_response(t0 + spec.timeout, false)).and_then(|resp| {
            if resp.status != 200 {
                return Err((Failure::BadStatus, format!("{path}: status {}", resp.status)));
            }
            if let Some(e) = &spec.expect {
                check_body(path, &resp.body, e).map_err(|w| (Failure::WrongBody, w))?;
            }
            Ok(resp)
        });
        let end = Instant::now();
        r.last_end = Some(end);
        match outcome {
            Ok(resp) => {
                r.latencies.push(end - t0 + std::mem::take(&mut w.pending_connect));
                r.body_bytes += resp.body.len() as u64;
                if let Some(ch) = ch {
                    *r.per_channel.entry(ch).or_insert(0) += 1;
                }
                if resp.close || !keepalive {
                    w.conn = None;
                }
            }
            Err(e) => {
                fail(r, e);
                // After any failure the connection's state is unknown: a new one.
                w.conn = None;
                w.pending_connect = Duration::ZERO;
            }
        }
    };
    let (workers, _) = drive(threads, spec.requests, spec.max_time, prepare, work);
    let results: Vec<ThreadResult> = workers.into_iter().map(|w| w.r).collect();
    let mut rep = WebLoadReport {
        port: spec.port,
        conns: spec.conns,
        keepalive,
        attempted: 0,
        ok: 0,
        failures: BTreeMap::new(),
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        first_failure: None,
        stopped_by_time: false,
        connects: 0,
        body_bytes: 0,
        per_channel: BTreeMap::new(),
    };
    let (mut first, mut last): (Option<Instant>, Option<Instant>) = (None, None);
    for t in results {
        rep.attempted += t.attempted;
        rep.ok += t.latencies.len() as u64;
        rep.latencies.extend(t.latencies);
        for (k, v) in t.failures {
            *rep.failures.entry(k).or_insert(0) += v;
        }
        if rep.first_failure.is_none() {
            rep.first_failure = t.first_failure;
        }
        rep.connects += t.connects;
        rep.body_bytes += t.body_bytes;
        for (k, v) in t.per_channel {
            *rep.per_channel.entry(k).or_insert(0) += v;
        }
        first = match (first, t.first_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        last = match (last, t.last_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    rep.latencies.sort();
    rep.elapsed = match (first, last) {
        (Some(a), Some(b)) => b.saturating_duration_since(a),
        _ => Duration::ZERO,
    };
    rep.stopped_by_time = rep.attempted < spec.requests;
    Ok(rep)
}

/// `webd load`'s options (also `webd run --load "..."`, where the port may be left out) as a
/// spec; the files they name are read here. Not yet validated ([`WebLoadSpec::validate`]).
pub fn options(a: crate::webd::options::WebdLoadArgs) -> Result<WebLoadSpec, String> {
    let mut spec = WebLoadSpec::default();
    if let Some(p) = a.port {
        spec.port = p;
    }
    if let Some(c) = a.conns {
        spec.conns = c.min(usize::MAX as u64) as usize;
    }
    if let Some(n) = a.requests {
        spec.requests = n;
    }
    if let Some(s) = a.seconds {
        spec.max_time = Duration::from_secs(s);
    }
    if let Some(t) = a.timeout {
        spec.timeout = Duration::from_secs(t);
    }
    if let Some(p) = a.path {
        spec.paths = p.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
    }
    if let Some(p) = a.paths_file {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("webd load: --paths-file {}: {e}", p.display()))?;
        spec.paths = text.lines().map(str::trim).filter(|s| !s.is_empty() && !s.starts_with('#')).map(String::from).collect();
    }
    spec.no_keepalive = a.no_keepalive;
    if let Some(f) = a.expect_sums {
        spec.expect = Some(super::files::read_sums(&f)?);
    }
    if let Some(n) = a.steer {
        spec.steer_channels = n;
        spec.steer = (0..n).collect();
    }
    Ok(spec)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpListener, TcpStream};

    /// How the test server misbehaves.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Serve {
        /// `/filesum/NAME` → `1000 + len(NAME)`, `/stats` → `{}`, anything else 404.
        Good,
        /// Every filesum answer one too high.
        WrongSum,
        /// Status 503 for everything.
        Unavailable,
        /// Close after every response, whatever the request said.
        CloseEach,
    }

    fn answer(target: &str, how: Serve) -> (u16, String) {
        if how == Serve::Unavailable {
            return (503, "busy".into());
        }
        match target.strip_prefix("/filesum/") {
            Some(n) => (200, (1000 + n.len() as u64 + u64::from(how == Serve::WrongSum)).to_string()),
            None if target == "/stats" => (200, "{}".into()),
            None => (404, "no".into()),
        }
    }

    fn serve_conn(mut s: TcpStream, how: Serve) {
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                buf.drain(..end + 4);
                let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (st, body) = answer(&target, how);
                let close = how == Serve::CloseEach || head.contains("Connection: close");
                let r = format!("HTTP/1.1 {st} X\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n{body}", body.len(), if close { "close" } else { "keep-alive" });
                if s.write_all(r.as_bytes()).is_err() || close {
                    return;
                }
            }
            match s.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
    }

    /// A small keep-alive HTTP server on 127.0.0.1 for `n` connections (a thread each).
    pub(crate) fn server(n: usize, how: Serve) -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for _ in 0..n {
                let Ok((s, _)) = l.accept() else { return };
                std::thread::spawn(move || serve_conn(s, how));
            }
        });
        port
    }

    fn sums() -> BTreeMap<String, Expect> {
        ["a", "bb", "ccc"].iter().map(|n| (n.to_string(), Expect { size: None, sum: 1000 + n.len() as u64 })).collect()
    }

    fn spec(port: u16, conns: usize, requests: u64) -> WebLoadSpec {
        WebLoadSpec { port, conns, requests, timeout: Duration::from_secs(2), paths: vec!["/filesum/a".into(), "/filesum/bb".into(), "/filesum/ccc".into()], expect: Some(sums()), ..WebLoadSpec::default() }
    }

    #[test]
    fn keepalive_load_is_counted_exactly_and_checked() {
        let port = server(3, Serve::Good);
        let r = run(&spec(port, 3, 300)).unwrap();
        assert_eq!((r.attempted, r.ok, r.failed(), r.connects), (300, 300, 0, 3), "{}", r.table());
        assert!(!r.stopped_by_time);
        assert!(r.percentile(50.0).unwrap() <= r.percentile(99.0).unwrap());
        assert_eq!(r.body_bytes, 100 * 4 * 3, "every body read whole");
        let j = crate::host::json::parse(&r.json()).unwrap();
        assert!(matches!(j.get("ok"), Some(crate::host::json::Value::Num(n)) if *n == 300.0));
        assert!(matches!(j.get("errors").and_then(|e| e.get("wrong_body")), Some(crate::host::json::Value::Num(n)) if *n == 0.0));
        // Without keep-alive: a connection per request.
        let port = server(20, Serve::Good);
        let r = run(&WebLoadSpec { no_keepalive: true, ..spec(port, 2, 20) }).unwrap();
        assert_eq!((r.ok, r.connects), (20, 20), "{}", r.table());
        // A server that closes after each answer even on keep-alive: reconnects, no failure.
        let port = server(12, Serve::CloseEach);
        let r = run(&spec(port, 2, 12)).unwrap();
        assert_eq!((r.ok, r.failed()), (12, 0), "{}", r.table());
    }

    #[test]
    fn wrong_sums_and_statuses_are_failures_of_their_kind() {
        // After a failure the client opens a new connection: the server takes enough.
        let port = server(10, Serve::WrongSum);
        let r = run(&spec(port, 1, 5)).unwrap();
        assert_eq!((r.ok, r.failures.get(&Failure::WrongBody).copied()), (0, Some(5)), "{}", r.table());
        assert!(r.first_failure.as_deref().unwrap().contains("want 1001"), "{:?}", r.first_failure);
        // Without expected sums a wrong number is not noticed (nothing to compare with).
        let port = server(1, Serve::WrongSum);
        assert_eq!(run(&WebLoadSpec { expect: None, ..spec(port, 1, 5) }).unwrap().ok, 5);
        let port = server(10, Serve::Unavailable);
        let r = run(&spec(port, 1, 4)).unwrap();
        assert_eq!(r.failures.get(&Failure::BadStatus).copied(), Some(4), "{}", r.table());
        let free = crate::host::vm::free_port().unwrap();
        let r = run(&spec(free, 2, 4)).unwrap();
        assert_eq!(r.failures.get(&Failure::Refused).copied(), Some(4), "{}", r.table());
        // Static files: size and sum of the body.
        let body = b"hello";
        let mut e = BTreeMap::new();
        e.insert("h".to_string(), Expect { size: Some(5), sum: filesum(body) });
        assert!(check_body("/h", body, &e).is_ok());
        assert!(check_body("/h", b"hellp", &e).is_err());
        assert!(check_body("/h", b"hell", &e).is_err());
        assert!(check_body("/other", b"x", &e).is_ok(), "a file the sums do not name is not judged");
    }

    #[test]
    fn bounded_by_time_and_steered_by_port() {
        // A server that accepts and never answers: the time bound stops new requests, the
        // per-request timeout ends the ones in flight.
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for _ in 0..50 {
                let Ok((s, _)) = l.accept() else { return };
                held.push(s);
            }
        });
        let t = std::time::Instant::now();
        let r = run(&WebLoadSpec { max_time: Duration::from_secs(1), timeout: Duration::from_millis(400), requests: 1_000_000, ..spec(port, 2, 1) }).unwrap();
        // Bounded, not fast: a loaded host may stretch the 1 s bound, never to half a minute.
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
        assert!(r.stopped_by_time && r.attempted < 20 && r.ok == 0, "{}", r.table());
        // Steering: connection k from a port of channel steer[k % 2], counted per channel.
        // One connection per request on one thread, so the connections are numbered 0..40 in
        // order whatever the host's scheduling (with two threads sharing the tickets, one
        // thread could take all of them, and its connections are all of one parity).
        let port = server(40, Serve::Good);
        let r = run(&WebLoadSpec { steer: vec![0, 1], steer_channels: 2, no_keepalive: true, ..spec(port, 1, 40) }).unwrap();
        assert_eq!(r.ok, 40, "{}", r.table());
        assert_eq!(r.per_channel.values().sum::<u64>(), 40);
        assert_eq!(r.per_channel.get(&0).copied(), Some(20), "connections alternate channels: {:?}", r.per_channel);
        assert_eq!(r.per_channel.get(&1).copied(), Some(20), "connections alternate channels: {:?}", r.per_channel);
    }
}
