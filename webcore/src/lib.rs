//! webd's server logic, shared by both systems (Corey section 6.2): the HTTP/1.1 request
//! parser with its limits, the router, response heads, `filesum`, the locality hash that gives
//! each file a home core, and the `/stats` JSON. The transport (per-core smoltcp stacks on our
//! system, threads and sockets on Linux) and where file data lives are the servers' own.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod http;
mod sum;

pub use sum::filesum;

use alloc::string::String;
use core::fmt::Write;

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    /// `/filesum/NAME`: the decimal sum of the bytes of file `/NAME` (a path from the served
    /// root, starting with `/`), as the whole body. An empty name is `/`, which is no file.
    FileSum(&'a str),
    /// `/stats`: per-core counters as JSON.
    Stats,
    /// Anything else: the file at that path.
    File(&'a str),
}

/// Route a decoded path (`http::Request::path`: starts with `/`, no `..`).
pub fn route(path: &str) -> Route<'_> {
    if path == "/stats" {
        return Route::Stats;
    }
    if path == "/filesum" {
        return Route::FileSum("/");
    }
    if let Some(rest) = path.strip_prefix("/filesum/") {
        // `rest` has no leading slash: the path is decoded and its empty segments dropped.
        return Route::FileSum(&path[path.len() - rest.len() - 1..]);
    }
    Route::File(path)
}

/// The home core of a file in locality mode: FNV-1a of its name, modulo the application
/// cores. The same name always lands on the same core, so each core's cache holds only its
/// own files (Corey's filesum "locality" mode).
pub fn home_of(name: &str, napps: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    if napps == 0 {
        0
    } else {
        (h % napps as u64) as usize
    }
}

/// One core's counters, as `/stats` shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub core: u32,
    /// `frontend` or `app`.
    pub role: &'static str,
    /// Connections accepted (front-ends).
    pub conns: u64,
    /// Requests answered 200 (front-ends), or filesums computed (application cores).
    pub requests: u64,
    /// Requests refused with a 4xx status.
    pub bad: u64,
    /// Requests that failed inside the server (5xx), and connections reset or timed out.
    pub errors: u64,
    /// Response bytes queued for sending (front-ends) or file bytes summed (application cores).
    pub bytes: u64,
}

/// The `/stats` body: `{"mode":"M","cores":[{"core":0,"role":"frontend",...},...]}`.
pub fn stats_json(mode: &str, cores: &[CoreStats]) -> String {
    let mut s = String::new();
    let _ = write!(s, "{{\"mode\":\"{}\",\"cores\":[", json_safe(mode));
    for (i, c) in cores.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"core\":{},\"role\":\"{}\",\"conns\":{},\"requests\":{},\"bad\":{},\"errors\":{},\"bytes\":{}}}",
            c.core,
            json_safe(c.role),
            c.conns,
            c.requests,
            c.bad,
            c.errors,
            c.bytes
        );
    }
    s.push_str("]}\n");
    s
}

/// Names here are the servers' own constants; anything outside plain ASCII letters, digits
/// and `-_.` is dropped rather than escaped.
fn json_safe(s: &str) -> impl core::fmt::Display + '_ {
    struct Safe<'a>(&'a str);
    impl core::fmt::Display for Safe<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            for c in self.0.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)) {
                f.write_char(c)?;
            }
            Ok(())
        }
    }
    Safe(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/stats"), Route::Stats);
        assert_eq!(route("/filesum/a/b.txt"), Route::FileSum("/a/b.txt"));
        assert_eq!(route("/filesum"), Route::FileSum("/"));
        assert_eq!(route("/filesumx"), Route::File("/filesumx"));
        assert_eq!(route("/index.html"), Route::File("/index.html"));
        assert_eq!(route("/"), Route::File("/"));
    }

    #[test]
    fn homes_spread_and_repeat() {
        let mut per = [0usize; 4];
        for i in 0..400 {
            let name = alloc::format!("/f{i}");
            let h = home_of(&name, 4);
            assert_eq!(h, home_of(&name, 4));
            per[h] += 1;
        }
        // FNV over 400 names: every core gets a fair part (a constant or broken hash fails).
        assert!(per.iter().all(|&n| (60..=140).contains(&n)), "{per:?}");
        assert_eq!(home_of("/x", 0), 0);
        assert_eq!(home_of("/x", 1), 0);
    }

    #[test]
    fn stats_json_is_well_formed() {
        let cores = [
            CoreStats { core: 0, role: "frontend", conns: 3, requests: 7, bad: 1, errors: 0, bytes: 99 },
            CoreStats { core: 1, role: "app", requests: 7, bytes: 1 << 20, ..Default::default() },
        ];
        let s = stats_json("loc\"ality", &cores);
        assert_eq!(
            s,
            "{\"mode\":\"locality\",\"cores\":[{\"core\":0,\"role\":\"frontend\",\"conns\":3,\"requests\":7,\"bad\":1,\"errors\":0,\"bytes\":99},\
             {\"core\":1,\"role\":\"app\",\"conns\":0,\"requests\":7,\"bad\":0,\"errors\":0,\"bytes\":1048576}]}\n"
        );
    }
}
