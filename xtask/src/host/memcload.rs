//! A small bounded load generator for memcached's text protocol (and a line client for the
//! project's own epoll server), from the host to a guest port on 127.0.0.1: sets and gets
//! over several connections, every value read back checked against what was last stored.
//!
//! Bounded: at most `requests` requests and `deadline` of wall time; every socket has read
//! and write timeouts; nothing but 127.0.0.1 is ever contacted.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

/// What to send.
#[derive(Debug, Clone)]
pub struct Load {
    pub conns: usize,
    pub requests: u64,
    /// Distinct keys (`k` + a number, padded to `key_len` bytes).
    pub keys: u64,
    pub key_len: usize,
    pub value_len: usize,
    /// One set in this many requests (after every key was set once); the rest are gets.
    pub set_every: u64,
    pub deadline: Duration,
}

impl Default for Load {
    fn default() -> Self {
        Load { conns: 4, requests: 1000, keys: 100, key_len: 16, value_len: 64, set_every: 10, deadline: Duration::from_secs(120) }
    }
}

/// What happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub sets: u64,
    pub gets: u64,
    /// Gets whose value was not the one last stored (or missing): must be 0.
    pub wrong: u64,
    pub elapsed_ms: u64,
}

fn key(i: u64, len: usize) -> String {
    let k = format!("k{i}");
    format!("{k:_<len$}")
}

/// The value of version `v` of key `i`: printable, different for every (key, version).
pub fn value(i: u64, v: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ v.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        })
        .collect()
}

fn connect(port: u16, timeout: Duration) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), timeout).map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Send `req` and read one reply line (without its line end).
fn line(r: &mut BufReader<TcpStream>, req: &[u8]) -> Result<String, String> {
    r.get_mut().write_all(req).map_err(|e| format!("send: {e}"))?;
    let mut l = String::new();
    let n = r.read_line(&mut l).map_err(|e| format!("receive: {e}"))?;
    if n == 0 {
        return Err("the server closed the connection".into());
    }
    Ok(l.trim_end_matches(['\r', '\n']).to_string())
}

/// Wait until a server on `port` answers `probe` with a line starting with `want` (QEMU's
/// forward accepts connections before the guest listens, then drops them), up to `within`,
/// or until `gone` says the server ended.
pub fn wait_ready(port: u16, probe: &[u8], want: &str, within: Duration, gone: impl Fn() -> bool) -> Result<(), String> {
    let end = Instant::now() + within;
    let mut last = String::new();
    while Instant::now() < end {
        if gone() {
            return Err("the server ended before it answered".into());
        }
        match connect(port, Duration::from_secs(2)).and_then(|s| line(&mut BufReader::new(s), probe)) {
            Ok(l) if l.starts_with(want) => return Ok(()),
            Ok(l) => last = format!("answered {l:?}"),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(format!("no server answered on 127.0.0.1:{port} within {} s (last: {last})", within.as_secs()))
}

/// memcached's text protocol: `load.requests` sets and gets, each get checked.
pub fn memcached(port: u16, load: &Load) -> Result<Report, String> {
    let start = Instant::now();
    let io = Duration::from_secs(20);
    let mut conns: Vec<BufReader<TcpStream>> = (0..load.conns.max(1)).map(|_| connect(port, io).map(BufReader::new)).collect::<Result<_, _>>()?;
    let keys = load.keys.max(1);
    let mut version: Vec<Option<u64>> = vec![None; keys as usize];
    let mut rep = Report::default();
    for n in 0..load.requests {
        if start.elapsed() > load.deadline {
            return Err(format!("deadline of {} s passed after {n} requests", load.deadline.as_secs()));
        }
        let c = &mut conns[(n % load.conns.max(1) as u64) as usize];
        let i = (n.wrapping_mul(2_654_435_761)) % keys;
        let k = key(i, load.key_len);
        let set = version[i as usize].is_none() || n % load.set_every.max(1) == 0;
        if set {
            let v = version[i as usize].map_or(0, |v| v + 1);
            let val = value(i, v, load.value_len);
            let mut req = format!("set {k} 0 0 {}\r\n", val.len()).into_bytes();
            req.extend_from_slice(&val);
            req.extend_from_slice(b"\r\n");
            let l = line(c, &req)?;
            if l != "STORED" {
                return Err(format!("set {k}: {l:?}"));
            }
            version[i as usize] = Some(v);
            rep.sets += 1;
        } else {
            let l = line(c, format!("get {k}\r\n").as_bytes())?;
            rep.gets += 1;
            let want = version[i as usize].map(|v| value(i, v, load.value_len));
            if l == "END" {
                rep.wrong += 1;
                continue;
            }
            let parts: Vec<&str> = l.split(' ').collect();
            if parts.len() != 4 || parts[0] != "VALUE" || parts[1] != k {
                return Err(format!("get {k}: {l:?}"));
            }
            let len: usize = parts[3].parse().map_err(|_| format!("get {k}: {l:?}"))?;
            let mut data = vec![0u8; len + 2];
            std::io::Read::read_exact(c, &mut data).map_err(|e| format!("get {k}: {e}"))?;
            let mut end = String::new();
            c.read_line(&mut end).map_err(|e| format!("get {k}: {e}"))?;
            if end.trim_end() != "END" || &data[len..] != b"\r\n" {
                return Err(format!("get {k}: no END after the value"));
            }
            if Some(&data[..len]) != want.as_deref() {
                rep.wrong += 1;
            }
        }
    }
    // Malformed commands: an error line each, and the connection keeps serving.
    let c = &mut conns[0];
    for bad in [&b"bogus\r\n"[..], b"get\r\n", b"set k 0 0 notanumber\r\n"] {
        let l = line(c, bad)?;
        if !l.contains("ERROR") {
            return Err(format!("{:?}: answered {l:?}, not an error", String::from_utf8_lossy(bad)));
        }
    }
    if line(c, b"version\r\n")?.split(' ').next() != Some("VERSION") {
        return Err("the server stopped answering after malformed commands".into());
    }
    rep.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(rep)
}

/// Send each line of `script` on one connection of the epoll server and collect the replies
/// (one line each); `QUIT` ends it.
pub fn lines(port: u16, script: &[&str]) -> Result<Vec<String>, String> {
    let mut c = BufReader::new(connect(port, Duration::from_secs(20))?);
    script.iter().map(|l| line(&mut c, format!("{l}\n").as_bytes())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values() {
        assert_eq!(key(7, 6), "k7____");
        assert_eq!(value(1, 0, 8).len(), 8);
        assert_ne!(value(1, 0, 8), value(1, 1, 8));
        assert_ne!(value(1, 0, 8), value(2, 0, 8));
        assert_eq!(value(3, 4, 16), value(3, 4, 16));
    }

    /// Against a tiny in-process memcached that forgets one key: the client counts it wrong
    /// (a client that checked nothing would report 0).
    #[test]
    fn a_wrong_value_is_counted() {
        use std::collections::HashMap;
        use std::io::Read;
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s);
            let mut store: HashMap<String, Vec<u8>> = HashMap::new();
            loop {
                let mut cmd = String::new();
                if r.read_line(&mut cmd).unwrap_or(0) == 0 {
                    return;
                }
                let w: Vec<String> = cmd.split_whitespace().map(String::from).collect();
                let reply: Vec<u8> = match w.first().map(String::as_str) {
                    Some("set") if w.len() == 5 && w[4].parse::<usize>().is_ok() => {
                        let mut d = vec![0u8; w[4].parse::<usize>().unwrap() + 2];
                        r.read_exact(&mut d).unwrap();
                        d.truncate(d.len() - 2);
                        if w[1].starts_with("k3_") {
                            d[0] ^= 1; // the planted corruption
                        }
                        store.insert(w[1].clone(), d);
                        b"STORED\r\n".to_vec()
                    }
                    Some("get") if w.len() == 2 => match store.get(&w[1]) {
                        Some(v) => [format!("VALUE {} 0 {}\r\n", w[1], v.len()).into_bytes(), v.clone(), b"\r\nEND\r\n".to_vec()].concat(),
                        None => b"END\r\n".to_vec(),
                    },
                    Some("version") => b"VERSION 1\r\n".to_vec(),
                    _ => b"ERROR\r\n".to_vec(),
                };
                r.get_mut().write_all(&reply).unwrap();
            }
        });
        let load = Load { conns: 1, requests: 200, keys: 5, ..Load::default() };
        let rep = memcached(port, &load).unwrap();
        assert_eq!(rep.sets + rep.gets, 200);
        assert!(rep.wrong > 0, "{rep:?}");
        drop(server);
    }
}
