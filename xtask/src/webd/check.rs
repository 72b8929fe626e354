//! `cargo xtask webd check --port P`: the bad input (docs/webd.md) against a running webd, one
//! case at a time. Each case sends something a server must refuse (or, for a few, must still
//! answer right: a dribbled request, HEAD, keep-alive, pipelining) and checks the status the
//! server gives (400/404/405/413/431) or that it closes the connection where closing is the
//! only sane answer; then a good request on a new connection must still get the right answer
//! (the server keeps serving everyone else). With `--expect-sums FILE` the good request is
//! `/filesum/NAME` of the first file and its sum is checked; without, it is `/stats`.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use super::files::Expect;
use super::http::{self, Conn, Failure, Response};

/// The checker's settings.
#[derive(Debug, Clone)]
pub struct CheckSpec {
    pub port: u16,
    /// Per step (connect, a whole response).
    pub timeout: Duration,
    pub expect: Option<BTreeMap<String, Expect>>,
    /// Run only the cases whose name contains one of these (empty: all).
    pub only: Vec<String>,
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: &'static str,
    pub ok: Result<String, String>,
}

/// What the checker did.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    pub cases: Vec<CaseResult>,
    /// Request heads sent in all (good ones included): an upper bound on what the server
    /// can have counted as requests.
    pub requests_sent: u64,
}

impl CheckReport {
    pub fn passed(&self) -> usize {
        self.cases.iter().filter(|c| c.ok.is_ok()).count()
    }

    pub fn failed(&self) -> usize {
        self.cases.len() - self.passed()
    }

    pub fn lines(&self) -> String {
        let mut s = String::new();
        for c in &self.cases {
            match &c.ok {
                Ok(how) => s.push_str(&format!("   ok   {}: {how}\n", c.name)),
                Err(why) => s.push_str(&format!("   FAIL {}: {why}\n", c.name)),
            }
        }
        s.push_str(&format!("{} passed, {} failed\n", self.passed(), self.failed()));
        s
    }
}

/// The context cases run in.
struct Ctx<'a> {
    spec: &'a CheckSpec,
    sent: u64,
    /// The good request's target and how to judge its answer.
    good: (String, Option<u64>),
    /// A file that exists, for static GET and HEAD (with its size), if the sums name one.
    file: Option<(String, Option<u64>)>,
}

impl Ctx<'_> {
    fn open(&self) -> Result<Conn, String> {
        Conn::open(self.spec.port, self.spec.timeout).map_err(|(f, w)| format!("{}: {w}", f.name()))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.spec.timeout
    }

    /// Send raw bytes on a new connection (counting `heads` request heads), read one
    /// response. A write the server cut short (it answered and closed first) is not an error:
    /// what it answered is what counts.
    fn exchange(&mut self, bytes: &[u8], heads: u64) -> Result<(Conn, Result<Response, http::Error>), String> {
        let mut c = self.open()?;
        self.sent += heads;
        let _ = c.send(bytes, self.spec.timeout);
        let r = c.read_response(self.deadline(), false);
        Ok((c, r))
    }

    /// The good request on a fresh connection, its answer checked.
    fn good(&mut self) -> Result<(), String> {
        let (target, sum) = self.good.clone();
        self.sent += 1;
        let r = http::get_once(self.spec.port, &target, self.spec.timeout).map_err(|(f, w)| format!("{}: {w}", f.name()))?;
        judge_good(&target, &r, sum)
    }
}

fn judge_good(target: &str, r: &Response, sum: Option<u64>) -> Result<(), String> {
    if r.status != 200 {
        return Err(format!("{target}: status {}", r.status));
    }
    match sum {
        Some(s) => {
            let got = std::str::from_utf8(&r.body).ok().map(str::trim_end).and_then(|b| b.parse::<u64>().ok());
            if got != Some(s) {
                return Err(format!("{target}: body `{}`, want {s}", String::from_utf8_lossy(&r.body[..r.body.len().min(40)])));
            }
        }
        // /stats: a JSON object.
        None => {
            let b = String::from_utf8_lossy(&r.body);
            if !(b.trim_start().starts_with('{') && b.trim_end().ends_with('}')) {
                return Err(format!("{target}: not a JSON object: `{}`", b.chars().take(60).collect::<String>()));
            }
        }
    }
    Ok(())
}

/// The answer must be one of `statuses`, or (if `close_ok`) the server may close or reset
/// the connection instead of answering.
fn want(r: Result<Response, http::Error>, statuses: &[u16], close_ok: bool) -> Result<String, String> {
    match r {
        Ok(resp) if statuses.contains(&resp.status) => Ok(format!("status {}", resp.status)),
        Ok(resp) => Err(format!("status {}, want {}", resp.status, alts(statuses, close_ok))),
        Err((f @ (Failure::Empty | Failure::Reset | Failure::Closed), _)) if close_ok => Ok(format!("connection {}", if f == Failure::Reset { "reset" } else { "closed" })),
        Err((f, w)) => Err(format!("{}: {w}; want {}", f.name(), alts(statuses, close_ok))),
    }
}

fn alts(statuses: &[u16], close_ok: bool) -> String {
    let mut s: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    if close_ok {
        s.push("a closed connection".into());
    }
    s.join(" or ")
}

type CaseFn = fn(&mut Ctx) -> Result<String, String>;

/// Every case: (name, the most requests it sends, what it does). The names are what `--only`
/// matches; the counts tell the guest how many requests to expect ([`planned_requests`]).
const CASES: &[(&str, u64, CaseFn)] = &[
    ("request line of one word", 1, |c| {
        let (_, r) = c.exchange(b"GARBAGE\r\n\r\n", 1)?;
        want(r, &[400], false)
    }),
    ("request line without a version", 1, |c| {
        let (_, r) = c.exchange(b"GET /stats\r\n\r\n", 1)?;
        want(r, &[400], true)
    }),
    ("request line with an unknown version", 1, |c| {
        let (_, r) = c.exchange(b"GET /stats HTTP/7.1\r\nHost: x\r\n\r\n", 1)?;
        want(r, &[400, 505], false)
    }),
    ("request line with extra words", 1, |c| {
        let (_, r) = c.exchange(b"GET /stats HTTP/1.1 extra\r\nHost: x\r\n\r\n", 1)?;
        want(r, &[400], false)
    }),
    ("binary bytes", 1, |c| {
        let (_, r) = c.exchange(b"\x00\x01\x02\xff\xfe GET\x7f\r\n\r\n", 1)?;
        want(r, &[400], true)
    }),
    ("request line over 8 KiB", 1, |c| {
        let mut req = b"GET /".to_vec();
        req.extend(std::iter::repeat_n(b'a', 9000));
        req.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        let (_, r) = c.exchange(&req, 1)?;
        want(r, &[400, 414, 431], true)
    }),
    ("a header over 8 KiB", 1, |c| {
        let mut req = b"GET /stats HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
        req.extend(std::iter::repeat_n(b'b', 9000));
        req.extend_from_slice(b"\r\n\r\n");
        let (_, r) = c.exchange(&req, 1)?;
        want(r, &[431], true)
    }),
    ("10 000 headers", 1, |c| {
        let mut req = b"GET /stats HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..10_000 {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        let (_, r) = c.exchange(&req, 1)?;
        want(r, &[431], true)
    }),
    ("100 small headers (under 8 KiB)", 1, |c| {
        // Many headers that fit: either served or refused as too many (431), never a crash.
        let mut req = b"GET /stats HTTP/1.1\r\nHost: x\r\n".to_vec();
        for i in 0..100 {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        let (_, r) = c.exchange(&req, 1)?;
        want(r, &[200, 431], false)
    }),
    ("a header line without a colon", 1, |c| {
        let (_, r) = c.exchange(b"GET /stats HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", 1)?;
        want(r, &[400], false)
    }),
    ("a request dribbled one byte per 100 ms", 1, |c| {
        let (target, sum) = c.good.clone();
        let req = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
        // Bounded: at most 40 bytes, 4 s.
        if req.len() > 40 {
            return Err(format!("the dribbled request is {} bytes, more than the 40 allowed", req.len()));
        }
        let mut conn = c.open()?;
        c.sent += 1;
        for b in req.as_bytes() {
            conn.stream.write_all(std::slice::from_ref(b)).map_err(|e| format!("write after the server stopped reading: {e}"))?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let r = conn.read_response(c.deadline(), false).map_err(|(f, w)| format!("{}: {w}", f.name()))?;
        judge_good(&target, &r, sum).map(|()| format!("{} bytes over {:.1} s, then the right answer", req.len(), req.len() as f64 * 0.1))
    }),
    ("`..` in the path", 6, |c| {
        let mut got = Vec::new();
        for t in ["/../f00", "/filesum/../f00", "/a/../../etc/passwd", "/filesum/..", "/%2e%2e/%2e%2e/etc/passwd", "/filesum/%2e%2e%2ff00"] {
            let (_, r) = c.exchange(&http::request("GET", t, false), 1)?;
            got.push(want(r, &[400, 404], false).map_err(|e| format!("{t}: {e}"))?);
        }
        Ok(got.join(", "))
    }),
    ("absolute paths", 5, |c| {
        let mut got = Vec::new();
        for t in ["http://127.0.0.1/f00", "//etc/passwd", "/filesum//etc/passwd", "/filesum/", "*"] {
            let (_, r) = c.exchange(&http::request("GET", t, false), 1)?;
            got.push(want(r, &[400, 404], false).map_err(|e| format!("{t}: {e}"))?);
        }
        Ok(got.join(", "))
    }),
    ("names that do not exist", 4, |c| {
        let mut got = Vec::new();
        for t in ["/no-such-file", "/filesum/no-such-file", "/f00.bak", "/filesum/f00/x"] {
            let (_, r) = c.exchange(&http::request("GET", t, false), 1)?;
            got.push(want(r, &[404], false).map_err(|e| format!("{t}: {e}"))?);
        }
        Ok(got.join(", "))
    }),
    ("methods other than GET and HEAD", 7, |c| {
        let mut got = Vec::new();
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"] {
            let (_, r) = c.exchange(format!("{m} /stats HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").as_bytes(), 1)?;
            got.push(want(r, &[405], false).map_err(|e| format!("{m}: {e}"))?);
        }
        // A method name in the wrong case is another method, or not a method.
        let (_, r) = c.exchange(b"get /stats HTTP/1.1\r\nHost: x\r\n\r\n", 1)?;
        got.push(want(r, &[400, 405], false).map_err(|e| format!("get: {e}"))?);
        Ok(got.join(", "))
    }),
    ("GET with a body", 3, |c| {
        let (_, r) = c.exchange(b"GET /stats HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 1)?;
        let a = want(r, &[400, 413], true)?;
        let (_, r) = c.exchange(b"GET /stats HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 1)?;
        let b = want(r, &[400, 413, 501], true)?;
        let (_, r) = c.exchange(b"GET /stats HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 1)?;
        let d = want(r, &[400, 413], true)?;
        Ok(format!("Content-Length: {a}; chunked: {b}; bad length: {d}"))
    }),
    ("HEAD: the length, no body, the connection still in step", 2, |c| {
        let target = c.file.as_ref().map(|(n, _)| format!("/{n}")).unwrap_or_else(|| "/stats".into());
        let size = c.file.as_ref().and_then(|(_, s)| *s);
        let mut conn = c.open()?;
        c.sent += 2;
        let e = |(f, w): http::Error| format!("{}: {w}", f.name());
        conn.send(&http::request("HEAD", &target, true), c.spec.timeout).map_err(e)?;
        let h = conn.read_response(c.deadline(), true).map_err(e)?;
        if h.status != 200 {
            return Err(format!("HEAD {target}: status {}", h.status));
        }
        let len = h.header("content-length").and_then(|v| v.parse::<u64>().ok());
        if len.is_none() || (size.is_some() && len != size) {
            return Err(format!("HEAD {target}: Content-Length {:?}, want {:?}", h.header("content-length"), size));
        }
        // A body after the head would be read as the next response's start.
        let (good, sum) = c.good.clone();
        conn.send(&http::request("GET", &good, true), c.spec.timeout).map_err(e)?;
        let r = conn.read_response(c.deadline(), false).map_err(|(f, w)| format!("the GET after HEAD: {}: {w}", f.name()))?;
        judge_good(&good, &r, sum).map_err(|w| format!("the GET after HEAD: {w}"))?;
        Ok(format!("Content-Length {}, no body", len.unwrap_or(0)))
    }),
    ("keep-alive: three requests on one connection", 3, |c| {
        let (good, sum) = c.good.clone();
        let mut conn = c.open()?;
        for i in 0..3 {
            c.sent += 1;
            conn.send(&http::request("GET", &good, true), c.spec.timeout).map_err(|(f, w)| format!("request {i}: {}: {w}", f.name()))?;
            let r = conn.read_response(c.deadline(), false).map_err(|(f, w)| format!("request {i}: {}: {w}", f.name()))?;
            judge_good(&good, &r, sum).map_err(|w| format!("request {i}: {w}"))?;
            if r.close {
                return Err(format!("request {i}: the server closed a keep-alive connection"));
            }
        }
        Ok("3 answers".into())
    }),
    ("pipelined: three requests in one write", 3, |c| {
        let (good, sum) = c.good.clone();
        let mut conn = c.open()?;
        let mut req = Vec::new();
        for _ in 0..3 {
            req.extend(http::request("GET", &good, true));
        }
        c.sent += 3;
        conn.send(&req, c.spec.timeout).map_err(|(f, w)| format!("{}: {w}", f.name()))?;
        for i in 0..3 {
            let r = conn.read_response(c.deadline(), false).map_err(|(f, w)| format!("answer {i}: {}: {w}", f.name()))?;
            judge_good(&good, &r, sum).map_err(|w| format!("answer {i}: {w}"))?;
        }
        Ok("3 answers in order".into())
    }),
    ("a client that vanishes mid-response", 32, |c| {
        // Many pipelined requests for the largest answer there is, a few bytes read, then a
        // reset: the server's writes meet a dead connection.
        let target = c.file.as_ref().map(|(n, _)| format!("/{n}")).unwrap_or_else(|| "/stats".into());
        let conn = c.open()?;
        let mut req = Vec::new();
        for _ in 0..32 {
            req.extend(http::request("GET", &target, true));
        }
        c.sent += 32;
        let mut conn = conn;
        conn.send(&req, c.spec.timeout).map_err(|(f, w)| format!("{}: {w}", f.name()))?;
        let mut b = [0u8; 64];
        conn.stream.set_read_timeout(Some(c.spec.timeout)).map_err(|e| e.to_string())?;
        let n = std::io::Read::read(&mut conn.stream, &mut b).map_err(|e| format!("no first bytes: {e}"))?;
        crate::host::tcpload::reset_on_close(&conn.stream).map_err(|e| format!("SO_LINGER: {e}"))?;
        drop(conn);
        Ok(format!("read {n} bytes of 32 answers for {target}, then reset"))
    }),
    ("a request cut off by the client", 1, |c| {
        let mut conn = c.open()?;
        c.sent += 1;
        conn.stream.write_all(b"GET /sta").map_err(|e| e.to_string())?;
        conn.stream.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
        // The server may answer 400 or just close; it must not answer 200 to half a request.
        want(conn.read_response(c.deadline(), false), &[400], true)
    }),
    ("a connection that says nothing and leaves", 1, |c| {
        let conn = c.open()?;
        c.sent += 1;
        drop(conn);
        Ok("closed".into())
    }),
];

/// The most requests a full `run` sends: every case's, a good request after each, and the
/// first good request.
pub fn planned_requests() -> u64 {
    1 + CASES.iter().map(|(_, heads, _)| heads + 1).sum::<u64>()
}

/// Run the cases (or the ones `--only` names), each followed by the good request.
pub fn run(spec: &CheckSpec) -> Result<CheckReport, String> {
    if spec.port == 0 {
        return Err("webd check: --port P is required".into());
    }
    let first = spec.expect.as_ref().and_then(|m| m.iter().next().map(|(n, e)| (n.clone(), *e)));
    let good = match &first {
        Some((n, e)) => (format!("/filesum/{n}"), Some(e.sum)),
        None => ("/stats".to_string(), None),
    };
    let file = first.map(|(n, e)| (n, e.size));
    let mut ctx = Ctx { spec, sent: 0, good, file };
    let mut report = CheckReport::default();
    // The server must answer the good request before any case, or nothing below means much.
    let pre = ctx.good();
    report.cases.push(CaseResult { name: "the good request, before anything else", ok: pre.map(|()| format!("{} answered", ctx.good.0)) });
    for (name, heads, f) in CASES {
        if !spec.only.is_empty() && !spec.only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let before = ctx.sent;
        let mut r = f(&mut ctx);
        // The declared count is what the guest is told to expect: it must hold.
        if ctx.sent - before > *heads {
            r = Err(format!("the checker sent {} requests, its table says at most {heads}", ctx.sent - before));
        }
        if let Ok(how) = &r {
            // The server keeps serving: a good request on a new connection.
            r = match ctx.good() {
                Ok(()) => Ok(format!("{how}; then a good request answered")),
                Err(e) => Err(format!("{how}; but then a good request on a new connection failed: {e}")),
            };
        }
        report.cases.push(CaseResult { name, ok: r });
    }
    report.requests_sent = ctx.sent;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_status_or_close() {
        let resp = |s| Ok(Response { status: s, headers: Vec::new(), body: Vec::new(), close: false });
        assert!(want(resp(400), &[400], false).is_ok());
        assert!(want(resp(200), &[400], true).unwrap_err().contains("want 400 or a closed connection"));
        assert!(want(Err((Failure::Empty, "x".into())), &[431], true).is_ok());
        assert!(want(Err((Failure::Empty, "x".into())), &[431], false).is_err(), "a close is not a status when one is owed");
        assert!(want(Err((Failure::Timeout, "x".into())), &[431], true).is_err(), "a hang is never fine");
        let good = Response { status: 200, headers: Vec::new(), body: b"12345".to_vec(), close: false };
        assert!(judge_good("/filesum/f", &good, Some(12345)).is_ok());
        assert!(judge_good("/filesum/f", &good, Some(12346)).is_err());
        assert!(judge_good("/stats", &good, None).is_err(), "not JSON");
        let stats = Response { body: b"{\"cores\":[]}\n".to_vec(), ..good };
        assert!(judge_good("/stats", &stats, None).is_ok());
    }

    #[test]
    fn case_names_are_unique() {
        for (i, (a, heads, _)) in CASES.iter().enumerate() {
            assert!(CASES[..i].iter().all(|(b, _, _)| a != b), "{a}");
            assert!(*heads > 0, "{a}: every case may be counted as a request");
        }
        assert_eq!(planned_requests(), 1 + CASES.len() as u64 + CASES.iter().map(|c| c.1).sum::<u64>());
    }
}
