//! HTTP/1.1 requests: an incremental parser with hard limits, and the response head.
//!
//! The parser is called with everything a connection has received so far that is not yet
//! consumed. It never copies the buffer and never allocates except for the decoded target. It
//! answers as early as the bytes allow: a request line that cannot be valid is rejected before
//! its headers arrive, and a header block that has passed a limit is rejected before it ends,
//! so a client that sends 10 000 headers or an endless header costs the server at most
//! `MAX_HEADER_BYTES` of buffer.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

/// The most bytes a request line plus headers may take, the blank line included.
pub const MAX_HEADER_BYTES: usize = 8192;
/// The most header lines a request may have.
pub const MAX_HEADERS: usize = 64;
/// The longest request target accepted (longer: 414 would be the code; we answer 431-free 400).
pub const MAX_TARGET: usize = 1024;

/// A response status the server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    HeadersTooLarge,
    InternalError,
    Unavailable,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::PayloadTooLarge => 413,
            Status::HeadersTooLarge => 431,
            Status::InternalError => 500,
            Status::Unavailable => 503,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::PayloadTooLarge => "Payload Too Large",
            Status::HeadersTooLarge => "Request Header Fields Too Large",
            Status::InternalError => "Internal Server Error",
            Status::Unavailable => "Service Unavailable",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
}

/// One parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The target's path, percent-decoded, query removed, `.` and empty segments dropped;
    /// always starts with `/`, never holds a `..` segment or a NUL.
    pub path: String,
    /// Whether the connection stays open after the response (HTTP/1.1 unless
    /// `Connection: close`; HTTP/1.0 only with `Connection: keep-alive`).
    pub keep_alive: bool,
    /// Bytes of the buffer this request took (request line, headers, blank line).
    pub consumed: usize,
}

/// What the bytes received so far say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole request yet, and nothing wrong so far: read more.
    Partial,
    Request(Request),
    /// The request is bad: answer with this status and close the connection.
    Reject(Status),
}

/// Parse the request at the start of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    // The request line.
    let Some(line_end) = find_crlf(buf, 0) else {
        // An incomplete first line: reject it now if what is there cannot start a request.
        if buf.len() >= MAX_HEADER_BYTES {
            return Parsed::Reject(Status::HeadersTooLarge);
        }
        return match early_line_check(buf) {
            Ok(()) => Parsed::Partial,
            Err(s) => Parsed::Reject(s),
        };
    };
    if line_end + 2 > MAX_HEADER_BYTES {
        return Parsed::Reject(Status::HeadersTooLarge);
    }
    let (method, target, http10) = match request_line(&buf[..line_end]) {
        Ok(x) => x,
        Err(s) => return Parsed::Reject(s),
    };

    // The headers, up to the blank line.
    let mut at = line_end + 2;
    let mut nheaders = 0usize;
    let mut conn_close = false;
    let mut conn_keep = false;
    loop {
        let Some(end) = find_crlf(buf, at) else {
            // Past the header count, only the blank line may still come.
            let more_headers = nheaders >= MAX_HEADERS && !matches!(&buf[at..], [] | [b'\r']);
            if buf.len() >= MAX_HEADER_BYTES || more_headers {
                return Parsed::Reject(Status::HeadersTooLarge);
            }
            // A partial header line is checked as far as it goes.
            if buf.len() > at && (buf[at] == b' ' || buf[at] == b'\t') {
                return Parsed::Reject(Status::BadRequest);
            }
            return Parsed::Partial;
        };
        if end + 2 > MAX_HEADER_BYTES {
            return Parsed::Reject(Status::HeadersTooLarge);
        }
        if end == at {
            at += 2;
            break;
        }
        nheaders += 1;
        if nheaders > MAX_HEADERS {
            return Parsed::Reject(Status::HeadersTooLarge);
        }
        let line = &buf[at..end];
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Parsed::Reject(Status::BadRequest);
        };
        let name = &line[..colon];
        // A token: no spaces (also rules out obsolete line folding), no controls.
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Parsed::Reject(Status::BadRequest);
        }
        let value = trim(&line[colon + 1..]);
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Parsed::Reject(Status::BadRequest);
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            match parse_decimal(value) {
                Some(0) => {}
                Some(_) => return Parsed::Reject(Status::PayloadTooLarge),
                None => return Parsed::Reject(Status::BadRequest),
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // GET and HEAD carry no body; a framed one is refused rather than skipped.
            return Parsed::Reject(Status::PayloadTooLarge);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for opt in value.split(|&b| b == b',') {
                let opt = trim(opt);
                if opt.eq_ignore_ascii_case(b"close") {
                    conn_close = true;
                } else if opt.eq_ignore_ascii_case(b"keep-alive") {
                    conn_keep = true;
                }
            }
        }
        at = end + 2;
    }
    let Some(method) = method else {
        return Parsed::Reject(Status::MethodNotAllowed);
    };
    let path = match decode_target(target) {
        Ok(p) => p,
        Err(s) => return Parsed::Reject(s),
    };
    let keep_alive = if http10 { conn_keep && !conn_close } else { !conn_close };
    Parsed::Request(Request { method, path, keep_alive, consumed: at })
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    if buf.len() < from + 2 {
        return None;
    }
    buf[from..].windows(2).position(|w| w == b"\r\n").map(|p| p + from)
}

/// RFC 9110 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, &d| n * 10 + (d - b'0') as u64))
}

/// A first line still arriving: bytes that no request line can start with are rejected
/// at once (a binary blob, a control character), so garbage does not wait for a CRLF.
fn early_line_check(buf: &[u8]) -> Result<(), Status> {
    for &b in buf {
        if b == b'\n' || (b < 0x20 && b != b'\r') || b >= 0x7F {
            return Err(Status::BadRequest);
        }
    }
    if buf.len() > MAX_TARGET + 32 && !buf.contains(&b' ') {
        return Err(Status::BadRequest);
    }
    Ok(())
}

/// `METHOD SP target SP HTTP/1.x`. The method is `None` when it is a valid token but not
/// GET or HEAD (405 once the headers are in, so the connection is in a known state).
fn request_line(line: &[u8]) -> Result<(Option<Method>, &[u8], bool), Status> {
    if line.iter().any(|&b| b < 0x20 || b >= 0x7F) {
        return Err(Status::BadRequest);
    }
    let mut parts = line.split(|&b| b == b' ');
    let (Some(m), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(Status::BadRequest);
    };
    if m.is_empty() || !m.iter().all(|&b| is_tchar(b)) {
        return Err(Status::BadRequest);
    }
    let method = match m {
        b"GET" => Some(Method::Get),
        b"HEAD" => Some(Method::Head),
        _ => None,
    };
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        _ => return Err(Status::BadRequest),
    };
    if target.is_empty() || target.len() > MAX_TARGET {
        return Err(Status::BadRequest);
    }
    Ok((method, target, http10))
}

/// Origin-form targets only (`/a/b?q`): percent-decoded, query dropped, `.` and empty
/// segments removed; a `..` segment, a NUL, or a target that is not origin-form is 400.
fn decode_target(target: &[u8]) -> Result<String, Status> {
    if target[0] != b'/' {
        // Absolute-form (`http://host/x`) and asterisk-form are not served: no proxying.
        return Err(Status::BadRequest);
    }
    let path = match target.iter().position(|&b| b == b'?' || b == b'#') {
        Some(q) => &target[..q],
        None => target,
    };
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        if b == b'%' {
            let hex = |c: u8| (c as char).to_digit(16);
            let (Some(&h), Some(&l)) = (path.get(i + 1), path.get(i + 2)) else {
                return Err(Status::BadRequest);
            };
            let (Some(h), Some(l)) = (hex(h), hex(l)) else {
                return Err(Status::BadRequest);
            };
            decoded.push((h * 16 + l) as u8);
            i += 3;
        } else {
            decoded.push(b);
            i += 1;
        }
    }
    if decoded.iter().any(|&b| b == 0 || b == b'\\') {
        return Err(Status::BadRequest);
    }
    let Ok(decoded) = core::str::from_utf8(&decoded) else {
        return Err(Status::BadRequest);
    };
    let mut out = String::with_capacity(decoded.len());
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(Status::BadRequest),
            s => {
                out.push('/');
                out.push_str(s);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Append a response head: status line, `Content-Length`, `Content-Type`, `Connection`.
pub fn response_head(out: &mut Vec<u8>, status: Status, content_length: usize, content_type: &str, keep_alive: bool) {
    let mut s = String::new();
    let _ = write!(
        s,
        "HTTP/1.1 {} {}\r\nServer: webd\r\nContent-Length: {}\r\nContent-Type: {}\r\nConnection: {}\r\n\r\n",
        status.code(),
        status.reason(),
        content_length,
        content_type,
        if keep_alive { "keep-alive" } else { "close" }
    );
    out.extend_from_slice(s.as_bytes());
}

/// A whole error response: head plus a one-line text body; always `Connection: close`.
pub fn error_response(out: &mut Vec<u8>, status: Status) {
    let mut body = String::new();
    let _ = writeln!(body, "{} {}", status.code(), status.reason());
    response_head(out, status, body.len(), "text/plain", false);
    out.extend_from_slice(body.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn req(s: &str) -> Parsed {
        parse(s.as_bytes())
    }

    fn ok(p: Parsed) -> Request {
        match p {
            Parsed::Request(r) => r,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    #[test]
    fn simple_get_keeps_alive_and_counts_its_bytes() {
        let s = "GET /filesum/a HTTP/1.1\r\nHost: x\r\n\r\nGET /next";
        let r = ok(req(s));
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, "/filesum/a");
        assert!(r.keep_alive);
        assert_eq!(&s[r.consumed..], "GET /next");
    }

    #[test]
    fn connection_rules_by_version() {
        assert!(!ok(req("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")).keep_alive);
        assert!(!ok(req("GET / HTTP/1.0\r\n\r\n")).keep_alive);
        assert!(ok(req("HEAD / HTTP/1.0\r\nconnection: Keep-Alive\r\n\r\n")).keep_alive);
        assert!(!ok(req("GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n")).keep_alive);
    }

    #[test]
    fn partial_until_the_blank_line() {
        let full = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
        for i in 0..full.len() {
            assert_eq!(parse(&full.as_bytes()[..i]), Parsed::Partial, "prefix {i}");
        }
        assert!(matches!(req(full), Parsed::Request(_)));
    }

    #[test]
    fn paths_are_decoded_and_confined() {
        assert_eq!(ok(req("GET /a//./b%2Fc?x=1 HTTP/1.1\r\n\r\n")).path, "/a/b/c");
        assert_eq!(ok(req("GET /?q HTTP/1.1\r\n\r\n")).path, "/");
        for bad in ["/../etc/passwd", "/a/../../b", "/%2e%2e/x", "/a%00b", "/%zz", "/%4", "http://h/x", "*", "a/b", "/a\\..\\b"] {
            assert_eq!(req(&format!("GET {bad} HTTP/1.1\r\n\r\n")), Parsed::Reject(Status::BadRequest), "{bad}");
        }
    }

    #[test]
    fn methods_other_than_get_and_head_are_405() {
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
            assert_eq!(req(&format!("{m} / HTTP/1.1\r\n\r\n")), Parsed::Reject(Status::MethodNotAllowed), "{m}");
        }
    }

    #[test]
    fn malformed_request_lines_are_400() {
        for bad in ["GET /\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n", "GET / HTTP/2.0\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n", "\r\n\r\n", "GET / HTTP/1.1 extra\r\n\r\n"] {
            assert_eq!(req(bad), Parsed::Reject(Status::BadRequest), "{bad:?}");
        }
        // Garbage is refused before any line end arrives.
        assert_eq!(parse(b"\x16\x03\x01\x02"), Parsed::Reject(Status::BadRequest));
        assert_eq!(parse(b"GET /\n"), Parsed::Reject(Status::BadRequest));
    }

    #[test]
    fn bad_headers_are_400() {
        for bad in ["NoColon", " folded: x", "Bad Name: x", ": empty"] {
            assert_eq!(req(&format!("GET / HTTP/1.1\r\n{bad}\r\n\r\n")), Parsed::Reject(Status::BadRequest), "{bad}");
        }
        assert_eq!(parse(b"GET / HTTP/1.1\r\n folded"), Parsed::Reject(Status::BadRequest));
    }

    #[test]
    fn bodies_are_refused() {
        assert_eq!(req("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"), Parsed::Reject(Status::PayloadTooLarge));
        assert_eq!(req("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), Parsed::Reject(Status::PayloadTooLarge));
        assert_eq!(req("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), Parsed::Reject(Status::BadRequest));
        assert!(matches!(req("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), Parsed::Request(_)));
    }

    #[test]
    fn header_limits_are_431_before_the_end() {
        // One huge header, still arriving.
        let mut big = String::from("GET / HTTP/1.1\r\nX: ");
        big.extend(core::iter::repeat('a').take(MAX_HEADER_BYTES));
        assert_eq!(req(&big), Parsed::Reject(Status::HeadersTooLarge));
        // 10 000 small headers: refused once the count passes the limit, without the end.
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..10_000 {
            many.push_str(&format!("H{i}: v\r\n"));
        }
        assert_eq!(req(&many), Parsed::Reject(Status::HeadersTooLarge));
        let mut exactly = String::from("GET / HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS {
            exactly.push_str(&format!("H{i}: v\r\n"));
        }
        exactly.push_str("\r\n");
        assert!(matches!(req(&exactly), Parsed::Request(_)));
    }

    #[test]
    fn error_responses_close() {
        let mut out = Vec::new();
        error_response(&mut out, Status::NotFound);
        let s = core::str::from_utf8(&out).unwrap();
        assert!(s.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(s.contains("Connection: close\r\n"));
        assert!(s.ends_with("\r\n\r\n404 Not Found\n"));
        assert!(s.contains("Content-Length: 14\r\n"));
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// No input makes the parser panic, and whatever it accepts is confined.
            #[test]
            fn never_panics_and_confines(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
                if let Parsed::Request(r) = parse(&bytes) {
                    prop_assert!(r.path.starts_with('/'));
                    prop_assert!(!r.path.split('/').any(|s| s == ".."));
                    prop_assert!(r.consumed <= bytes.len());
                }
            }

            /// A valid request split anywhere is Partial before the split and whole after.
            #[test]
            fn any_prefix_of_a_valid_request_is_partial(name in "[a-z0-9_.-]{1,20}", cut in 0usize..60) {
                prop_assume!(name != "." && name != "..");
                let s = format!("GET /filesum/{name} HTTP/1.1\r\nHost: h\r\n\r\n");
                let cut = cut.min(s.len() - 1);
                prop_assert_eq!(parse(&s.as_bytes()[..cut]), Parsed::Partial);
                let r = ok(parse(s.as_bytes()));
                prop_assert_eq!(r.path, format!("/filesum/{name}"));
            }
        }
    }
}
