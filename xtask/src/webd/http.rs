//! The host's HTTP/1.1 client for webd: one connection to 127.0.0.1 (only), requests written
//! whole, responses read with `Content-Length` framing (webd sends no chunked bodies), every
//! read bounded by a deadline and every response by a size limit, so a server that never
//! stops cannot hold the client. Used by the load generator, the bad-input checker and the
//! runs' filesum checks.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// Nothing listens on the port.
    Refused,
    /// Reset or aborted by the peer.
    Reset,
    /// Connect, or the response, did not come within the timeout.
    Timeout,
    /// Closed before the first byte of a response (what QEMU's user network does when the
    /// guest refuses or has stopped: it accepted on the host side first).
    Empty,
    /// Closed in the middle of a response.
    Closed,
    /// Bytes that are not an HTTP/1.x response (bad status line, headers, framing).
    Malformed,
    /// A status other than the one expected (200 for the load).
    BadStatus,
    /// A 200 whose body is not what the host computed (`--expect-sums`).
    WrongBody,
    /// Any other I/O error.
    Other,
}

impl Failure {
    pub const ALL: [Failure; 9] =
        [Failure::Refused, Failure::Reset, Failure::Timeout, Failure::Empty, Failure::Closed, Failure::Malformed, Failure::BadStatus, Failure::WrongBody, Failure::Other];

    pub fn name(self) -> &'static str {
        match self {
            Failure::Refused => "refused",
            Failure::Reset => "reset",
            Failure::Timeout => "timeout",
            Failure::Empty => "empty",
            Failure::Closed => "closed",
            Failure::Malformed => "malformed",
            Failure::BadStatus => "bad_status",
            Failure::WrongBody => "wrong_body",
            Failure::Other => "other",
        }
    }

    fn of_io(e: &std::io::Error) -> Failure {
        use crate::host::tcpload::Failure as F;
        match crate::host::tcpload::io_failure(e) {
            F::Refused => Failure::Refused,
            F::Reset => Failure::Reset,
            F::Timeout => Failure::Timeout,
            _ => Failure::Other,
        }
    }
}

/// A failure and what happened.
pub type Error = (Failure, String);

/// The most a response head may be (webd's own limit for requests is 8 KiB).
pub const MAX_HEAD: usize = 16 << 10;
/// The most a response body may be: the largest file a run can serve.
pub const MAX_BODY: u64 = super::files::MAX_TOTAL_BYTES;

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The server said `Connection: close` (or spoke HTTP/1.0 without keep-alive).
    pub close: bool,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A request for `target` (`/filesum/f00`): `GET` or `HEAD`, `Connection: close` unless
/// keep-alive.
pub fn request(method: &str, target: &str, keepalive: bool) -> Vec<u8> {
    let conn = if keepalive { "" } else { "Connection: close\r\n" };
    format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{conn}\r\n").into_bytes()
}

/// A client connection and what it has read past the last response.
pub struct Conn {
    pub stream: TcpStream,
    buf: Vec<u8>,
    /// How long the connect took.
    pub connect_time: Duration,
}

pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

impl Conn {
    /// Connect to 127.0.0.1:`port` within `timeout`.
    pub fn open(port: u16, timeout: Duration) -> Result<Conn, Error> {
        let t = Instant::now();
        let stream = TcpStream::connect_timeout(&addr(port), timeout).map_err(|e| (Failure::of_io(&e), format!("connect: {e}")))?;
        Ok(Conn::from_stream(stream, t.elapsed()))
    }

    /// Connect from source port `sport` (bound on 127.0.0.1 first): QEMU's user network keeps
    /// the client's port as the guest-side flow's source port, so the host can choose which
    /// channel (front-end) the flow is steered to. `Ok(None)` if that port is taken here.
    pub fn open_from(port: u16, sport: u16, timeout: Duration) -> Result<Option<Conn>, Error> {
        let t = Instant::now();
        match super::steer::connect_from(sport, port, timeout) {
            Ok(s) => Ok(Some(Conn::from_stream(s, t.elapsed()))),
            Err(e) if e.kind() == ErrorKind::AddrInUse || e.kind() == ErrorKind::AddrNotAvailable => Ok(None),
            Err(e) => Err((Failure::of_io(&e), format!("connect from port {sport}: {e}"))),
        }
    }

    pub fn from_stream(stream: TcpStream, connect_time: Duration) -> Conn {
        let _ = stream.set_nodelay(true);
        Conn { stream, buf: Vec::new(), connect_time }
    }

    pub fn send(&mut self, bytes: &[u8], timeout: Duration) -> Result<(), Error> {
        self.stream.set_write_timeout(Some(timeout)).map_err(|e| (Failure::Other, format!("set_write_timeout: {e}")))?;
        self.stream.write_all(bytes).map_err(|e| (Failure::of_io(&e), format!("write: {e}")))
    }

    /// Read more bytes into the buffer before `deadline`; Ok(0) at EOF.
    fn fill(&mut self, deadline: Instant) -> Result<usize, Error> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((Failure::Timeout, format!("no complete response in time ({} bytes buffered)", self.buf.len())));
            }
            self.stream.set_read_timeout(Some(left)).map_err(|e| (Failure::Other, format!("set_read_timeout: {e}")))?;
            match self.stream.read(&mut chunk) {
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err((Failure::of_io(&e), format!("read: {e}"))),
            }
        }
    }

    /// Read one response. `head_only`: the request was HEAD (no body whatever the length).
    pub fn read_response(&mut self, deadline: Instant, head_only: bool) -> Result<Response, Error> {
        // The head.
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            if self.buf.len() > MAX_HEAD {
                return Err((Failure::Malformed, format!("a response head of more than {MAX_HEAD} bytes")));
            }
            let was = self.buf.len();
            if self.fill(deadline)? == 0 {
                return Err(if was == 0 { (Failure::Empty, "closed without a response".into()) } else { (Failure::Closed, format!("closed after {was} bytes of a response head")) });
            }
        };
        let (status, headers, http10) = parse_head(&self.buf[..head_end])?;
        let conn_hdr = headers.iter().find(|(k, _)| k == "connection").map(|(_, v)| v.to_ascii_lowercase());
        let close = conn_hdr.as_deref() == Some("close") || (http10 && conn_hdr.as_deref() != Some("keep-alive"));
        let len = match headers.iter().find(|(k, _)| k == "content-length") {
            Some((_, v)) => Some(v.parse::<u64>().map_err(|_| (Failure::Malformed, format!("Content-Length `{v}`")))?),
            None => None,
        };
        if headers.iter().any(|(k, v)| k == "transfer-encoding" && !v.eq_ignore_ascii_case("identity")) {
            return Err((Failure::Malformed, "a Transfer-Encoding webd never sends".into()));
        }
        self.buf.drain(..head_end);
        let no_body = head_only || status == 204 || status == 304 || (100..200).contains(&status);
        let body = if no_body {
            Vec::new()
        } else {
            match len {
                Some(n) if n > MAX_BODY => return Err((Failure::Malformed, format!("Content-Length {n} is more than any file here"))),
                Some(n) => {
                    let n = n as usize;
                    while self.buf.len() < n {
                        let was = self.buf.len();
                        if self.fill(deadline)? == 0 {
                            return Err((Failure::Closed, format!("closed after {was} of {n} body bytes")));
                        }
                    }
                    self.buf.drain(..n).collect()
                }
                // No length: the body runs to EOF (only allowed with close).
                None => {
                    while self.fill(deadline)? > 0 {
                        if self.buf.len() as u64 > MAX_BODY {
                            return Err((Failure::Malformed, "a body without a length that does not end".into()));
                        }
                    }
                    std::mem::take(&mut self.buf)
                }
            }
        };
        Ok(Response { status, headers, body, close: close || (len.is_none() && !no_body) })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A response head: status, headers (names lowercased), and whether it spoke HTTP/1.0.
pub type Head = (u16, Vec<(String, String)>, bool);

/// Parse `HTTP/1.1 200 OK\r\nName: value\r\n...\r\n\r\n`.
pub fn parse_head(head: &[u8]) -> Result<Head, Error> {
    let text = std::str::from_utf8(head).map_err(|_| (Failure::Malformed, "a response head that is not UTF-8".to_string()))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut w = status_line.splitn(3, ' ');
    let version = w.next().unwrap_or("");
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err((Failure::Malformed, format!("status line `{}`", status_line.chars().take(60).collect::<String>()))),
    };
    let code = w.next().unwrap_or("");
    let status: u16 = code.parse().ok().filter(|s| (100..=599).contains(s) && code.len() == 3).ok_or_else(|| (Failure::Malformed, format!("status code `{code}`")))?;
    let mut headers = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':').ok_or_else(|| (Failure::Malformed, format!("header line without `:`: `{}`", l.chars().take(60).collect::<String>())))?;
        if k.is_empty() || k.contains(' ') {
            return Err((Failure::Malformed, format!("header name `{k}`")));
        }
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    Ok((status, headers, http10))
}

/// One request on a fresh connection, the response read whole: (response, time).
pub fn get_once(port: u16, target: &str, timeout: Duration) -> Result<Response, Error> {
    let mut c = Conn::open(port, timeout)?;
    c.send(&request("GET", target, false), timeout)?;
    c.read_response(Instant::now() + timeout, false)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-shot server on 127.0.0.1 that reads until the end of the request head and then
    /// writes `reply` (and closes). Returns the port.
    pub(crate) fn canned(reply: &'static [u8]) -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let Ok((mut s, _)) = l.accept() else { return };
            let mut got = Vec::new();
            let mut b = [0u8; 1024];
            while find(&got, b"\r\n\r\n").is_none() {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&b[..n]),
                }
            }
            let _ = s.write_all(reply);
        });
        port
    }

    #[test]
    fn requests_are_well_formed() {
        assert_eq!(request("GET", "/filesum/f00", true), b"GET /filesum/f00 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        assert_eq!(request("HEAD", "/x", false), b"HEAD /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn responses_are_framed_by_length_and_bad_ones_named() {
        let (s, h, old) = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nX-A:  b \r\n\r\n").unwrap();
        assert_eq!((s, old), (404, false));
        assert_eq!(h, [("content-length".to_string(), "3".to_string()), ("x-a".to_string(), "b".to_string())]);
        for bad in [&b"HTTP/2 200 OK\r\n\r\n"[..], b"HTTP/1.1 20 OK\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nnocolon\r\n\r\n", b"junk\r\n\r\n"] {
            assert_eq!(parse_head(bad).unwrap_err().0, Failure::Malformed, "{}", String::from_utf8_lossy(bad));
        }
        // Two pipelined responses in one read, then EOF.
        let port = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
        let mut c = Conn::open(port, Duration::from_secs(2)).unwrap();
        c.send(&request("GET", "/", true), Duration::from_secs(2)).unwrap();
        let d = Instant::now() + Duration::from_secs(2);
        let r = c.read_response(d, false).unwrap();
        assert_eq!((r.status, &r.body[..], r.close), (200, &b"hello"[..], false));
        let r = c.read_response(d, false).unwrap();
        assert_eq!((r.status, &r.body[..], r.close), (200, &b"hi"[..], true));
        assert_eq!(c.read_response(d, false).unwrap_err().0, Failure::Empty);
        // Cut short in the body.
        let port = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort");
        assert_eq!(get_once(port, "/", Duration::from_secs(2)).unwrap_err().0, Failure::Closed);
        // HEAD: a length but no body.
        let port = canned(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n");
        let mut c = Conn::open(port, Duration::from_secs(2)).unwrap();
        c.send(&request("HEAD", "/", true), Duration::from_secs(2)).unwrap();
        let r = c.read_response(Instant::now() + Duration::from_secs(2), true).unwrap();
        assert_eq!((r.status, r.header("content-length"), r.body.len()), (200, Some("50"), 0));
        // Chunked is refused (webd never sends it, so it is a bug if it does).
        let port = canned(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert_eq!(get_once(port, "/", Duration::from_secs(2)).unwrap_err().0, Failure::Malformed);
        // Nobody there.
        let free = crate::host::vm::free_port().unwrap();
        assert_eq!(get_once(free, "/", Duration::from_secs(2)).unwrap_err().0, Failure::Refused);
    }

    #[test]
    fn a_silent_server_times_out_on_the_deadline() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let h = std::thread::spawn(move || {
            let s = l.accept();
            std::thread::sleep(Duration::from_millis(1500));
            drop(s);
        });
        let t = Instant::now();
        assert_eq!(get_once(port, "/", Duration::from_millis(300)).unwrap_err().0, Failure::Timeout);
        assert!(t.elapsed() < Duration::from_secs(1));
        h.join().unwrap();
    }
}
