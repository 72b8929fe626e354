//! The HTTP load generator for webd (`cargo xtask webd load`): 127.0.0.1 only, `conns`
//! connections at once (one thread each, keep-alive unless asked not to), at most `requests`
//! requests in all (the network load generator's `Tickets`) and none started after
//! `max_time`; every request has its own timeout. Each response is read whole (Content-Length
//! framing, bounded) and checked: status 200, and with expected sums the body of
//! `/filesum/NAME` must be the decimal sum and the body of `/NAME` must have the file's size
//! and sum. Failures are counted by kind ([`Failure`]); latency is per good request, from
//! its first byte written (or its connect, when it opens one) to its last byte read.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use super::files::{filesum, Expect};
use super::http::{self, Conn, Failure};
use crate::net::load::{percentile, Tickets};

/// Every loop here is bounded.
pub const MAX_REQUESTS: u64 = 10_000_000;
pub const MAX_CONNS: usize = 256;
pub const MAX_SECONDS: u64 = 3600;

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
        if self.port == 0 {
            return Err("--port: need a port (1..=65535)".into());
        }
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            return Err(format!("--requests: {} is not in 1..={MAX_REQUESTS}", self.requests));
        }
        if self.conns == 0 || self.conns > MAX_CONNS {
            return Err(format!("--conns: {} is not in 1..={MAX_CONNS}", self.conns));
        }
        if self.max_time.is_zero() || self.max_time > Duration::from_secs(MAX_SECONDS) {
            return Err(format!("--seconds: {:?} is not in (0, {MAX_SECONDS}] s", self.max_time));
        }
        if self.timeout.is_zero() {
            return Err("--timeout: must be more than 0".into());
        }
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
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.ok as f64 / s
        } else {
            0.0
        }
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
            crate::bench::json::num((self.requests_per_s() * 100.0).round() / 100.0),
            crate::bench::json::num((self.elapsed.as_secs_f64() * 1e6).round() / 1e6),
            self.stopped_by_time,
            self.connects,
            self.body_bytes,
            us(self.percentile(50.0)),
            us(self.percentile(90.0)),
            us(self.percentile(99.0)),
            us(self.latencies.last().copied()),
            fails.join(","),
            chans.join(","),
            self.first_failure.as_deref().map(crate::bench::json::quote).unwrap_or_else(|| "null".into())
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

/// Open connection number `k` of thread `t`: steered if asked (skipping source ports in use
/// here), otherwise from a port the host picks.
fn connect(spec: &WebLoadSpec, k: u64, next_port: &mut dyn Iterator<Item = u16>) -> Result<(Conn, Option<u64>), http::Error> {
    if spec.steer.is_empty() {
        return Conn::open(spec.port, spec.timeout).map(|c| (c, None));
    }
    let ch = spec.steer[(k % spec.steer.len() as u64) as usize];
    for _ in 0..256 {
        let Some(sport) = next_port.next() else { break };
        if super::steer::channel_of(sport, crate::net::SERVICE_PORT, spec.steer_channels) != ch {
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
    let ready = Barrier::new(threads);
    // The clock starts when every keep-alive connection is open (or has failed to open).
    let start_cell = std::sync::OnceLock::new();
    let tickets_cell: std::sync::OnceLock<Tickets> = std::sync::OnceLock::new();
    let results: Vec<ThreadResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (ready, start_cell, tickets_cell) = (&ready, &start_cell, &tickets_cell);
                sc.spawn(move || {
                    let mut r = ThreadResult::default();
                    // Source ports for steered connections: each thread its own stride of
                    // the range, so threads never race for one port.
                    let mut ports = (40000u16..=60999).rev().skip(t).step_by(threads);
                    let mut conn_no = t as u64;
                    let fail = |r: &mut ThreadResult, (f, why): http::Error| {
                        *r.failures.entry(f).or_insert(0) += 1;
                        r.first_failure.get_or_insert(format!("{}: {why}", f.name()));
                    };
                    let mut conn: Option<(Conn, Option<u64>)> = None;
                    let mut pending_connect = Duration::ZERO;
                    if keepalive {
                        match connect(spec, conn_no, &mut ports) {
                            Ok(c) => {
                                r.connects += 1;
                                conn = Some(c);
                            }
                            // Counted against this thread's first request below.
                            Err(e) => r.pending = Some(e),
                        }
                        conn_no += threads as u64;
                    }
                    ready.wait();
                    let start = *start_cell.get_or_init(Instant::now);
                    let tickets = tickets_cell.get_or_init(|| Tickets::new(spec.requests, start + spec.max_time));
                    while let Some(ticket) = tickets.take() {
                        r.attempted += 1;
                        let t0 = Instant::now();
                        r.first_start.get_or_insert(t0);
                        // A connect failure saved from before the clock counts for this one.
                        if let Some(e) = r.pending.take() {
                            fail(&mut r, e);
                            r.last_end = Some(Instant::now());
                            continue;
                        }
                        if conn.is_none() {
                            match connect(spec, conn_no, &mut ports) {
                                Ok(c) => {
                                    r.connects += 1;
                                    pending_connect = c.0.connect_time;
                                    conn = Some(c);
                                }
                                Err(e) => {
                                    fail(&mut r, e);
                                    r.last_end = Some(Instant::now());
                                    conn_no += threads as u64;
                                    continue;
                                }
                            }
                            conn_no += threads as u64;
                        }
                        let (c, ch) = conn.as_mut().expect("a connection is open here");
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
                                r.latencies.push(end - t0 + std::mem::take(&mut pending_connect));
                                r.body_bytes += resp.body.len() as u64;
                                if let Some(ch) = ch {
                                    *r.per_channel.entry(ch).or_insert(0) += 1;
                                }
                                if resp.close || !keepalive {
                                    conn = None;
                                }
                            }
                            Err(e) => {
                                fail(&mut r, e);
                                // After any failure the connection's state is unknown: a new one.
                                conn = None;
                                pending_connect = Duration::ZERO;
                            }
                        }
                    }
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
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
