//! Booting webd on either system and talking to it while it runs: `cargo xtask webd run`,
//! the `webd` suite of `cargo xtask test` and the `webd_filesum` benchmark rows all go
//! through [`prepare`], [`Running::start`] and [`Running::finish`].
//!
//! The guest is told how many requests to expect (`--requests N`, plus `--warmup W`) and
//! stops by itself after them, printing `webd: done ...` (ours then exits to the kernel, which
//! checks for leaks and sets QEMU's exit status; Linux powers off). N is an upper bound on
//! what the host will send (the bad-input checker declares each case's requests); whatever
//! the guest has not counted when the host is done (it may count refused requests or not) is
//! made up with good requests, one at a time, until `webd: done` appears (bounded by N).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::{self, Expect, FileSpec, Made};
use super::http::{self, Conn};
use super::{check, load, steer};
use crate::host::json::{self, Value};
use crate::host::qemu::{Finished, Session, WaitEnd};
use crate::guest::tcp_accept::words;
use crate::host::vm::{BootMedium, VmConfig};

/// The guest's readiness line (prefix; ` key=value` words follow).
pub const READY: &str = "webd: ready";
/// The guest's last line (prefix; ` key=value` words follow).
pub const DONE: &str = "webd: done";
/// A guest line saying it cannot run the configuration asked for (then a benchmark cell is
/// `unavailable` with that line).
pub const UNAVAILABLE: &str = "webd: unavailable";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sys {
    Ours,
    Linux,
}

impl Sys {
    pub fn name(self) -> &'static str {
        match self {
            Sys::Ours => "ours",
            Sys::Linux => "linux",
        }
    }
}

/// webd's modes (docs/webd.md).
pub const MODES: [&str; 3] = ["random", "locality", "same-core"];

/// What to boot.
#[derive(Debug, Clone)]
pub struct WebdBoot {
    pub system: Sys,
    pub mode: String,
    pub files: FileSpec,
    pub smp: u32,
    pub mem_mib: u64,
    /// Ours: `--frontends`, `--apps`, `--kc` (None: [`default_placement`]).
    pub frontends: Option<String>,
    pub apps: Option<String>,
    pub kc: Option<u32>,
    /// The guest stops after this many requests past the warm-up (None: it serves until
    /// stopped).
    pub requests: Option<u64>,
    pub warmup: u64,
    /// More QEMU arguments (a measurement plugin).
    pub extra: Vec<String>,
    /// More arguments for the guest's webd (ours), e.g. `--halt-app 2:1`.
    pub guest_extra: Vec<String>,
}

/// Ours' default placement at `smp` vCPUs: core 0 is the front-end (driving the card itself:
/// net mode inline), every other core an application core; one vCPU: no application core
/// (`None`: webd's random mode then sums on the front-end; a core cannot be both, and webd
/// refuses `--apps 0` beside `--frontends 0`).
pub fn default_placement(smp: u32) -> (String, Option<String>) {
    let apps = (smp > 1).then(|| (1..smp).map(|c| c.to_string()).collect::<Vec<_>>().join(","));
    ("0".to_string(), apps)
}

/// A list of cores (`0,2,3` or `1-3`) as numbers.
pub fn parse_cores(s: &str) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |x: &str| x.trim().parse::<u32>().map_err(|_| format!("`{s}` is not a list of cores (e.g. 0,2 or 1-3)"));
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > 255 {
                    return Err(format!("`{part}` is not a range of cores"));
                }
                v.extend(a..=b);
            }
            None => v.push(num(part)?),
        }
    }
    if v.is_empty() {
        return Err(format!("`{s}` names no core"));
    }
    Ok(v)
}

/// The system's boot artifacts, built once by the caller.
#[derive(Debug, Clone)]
pub enum Artifacts {
    /// Our kernel and program archive.
    Ours { kernel: PathBuf, initrd: PathBuf },
    /// Debian's kernel as the baseline boots it (PVH vmlinux) and the static `webd-linux`.
    Linux { kernel: PathBuf, webd: PathBuf },
}

impl Artifacts {
    /// Build what `system` needs (the kernel and programs, or fetch Debian's kernel and build
    /// `webd-linux`).
    pub fn build(system: Sys) -> Result<Artifacts, String> {
        Ok(match system {
            Sys::Ours => Artifacts::Ours { kernel: crate::host::env::build_kernel()?, initrd: crate::host::user::build_initrd()? },
            Sys::Linux => Artifacts::Linux { kernel: crate::guest::linux_sys::guest_kernel()?, webd: crate::guest::linux_sys::build_static("bench", "webd-linux")? },
        })
    }
}

/// The Linux baseline's initramfs for a file set: `webd-linux` as /init, the NIC's modules,
/// the files at /files/NAME. `target/webd/linux-SPEC.cpio`.
pub fn linux_initramfs(webd: &Path, made: &Made) -> Result<PathBuf, String> {
    let k = crate::guest::linux::fetch_kernel()?;
    let mut more = crate::guest::linux_net::module_entries(crate::guest::linux_net::net_modules(&k)?);
    more.extend(files::initramfs_entries(made)?);
    let out = files::work_dir().join(format!("linux-{}.cpio", made.spec.name()));
    crate::guest::linux::build_initramfs_with(webd, more, &out)?;
    Ok(out)
}

/// A boot ready to start: QEMU's arguments, the forwarded port, the files' sums.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub args: Vec<String>,
    pub port: u16,
    pub made: Made,
    pub system: Sys,
    /// The guest's arguments (after `--`).
    pub guest_args: String,
    /// Warm-up plus `--requests`, if told.
    pub goal: Option<u64>,
}

/// Make the files (and the image or initramfs), pick a port, and build QEMU's arguments.
pub fn prepare(b: &WebdBoot, art: &Artifacts) -> Result<Prepared, String> {
    if !MODES.contains(&b.mode.as_str()) {
        return Err(format!("--mode: `{}` is not one of {}", b.mode, MODES.join(", ")));
    }
    let made = files::make(&b.files)?;
    let net = crate::host::vm::NetConfig::service()?;
    let port = net.host_port(crate::host::vm::SERVICE_PORT).ok_or("no forward to the service port")?;
    let mut guest = format!("--mode {}", b.mode);
    let mut cfg = match art {
        Artifacts::Ours { kernel, initrd } => {
            let (df, da) = default_placement(b.smp);
            // Same-core mode has no application cores (the front-end sums through a protected
            // procedure call on its own core): no --apps unless asked for (webd refuses it).
            let same_core = b.mode == "same-core";
            let (f, a) = (b.frontends.clone().unwrap_or(df), b.apps.clone().or(if same_core { None } else { da }));
            for (what, list) in [("--frontends", Some(&f)), ("--apps", a.as_ref())] {
                let Some(list) = list else { continue };
                if let Some(c) = parse_cores(list).map_err(|e| format!("{what}: {e}"))?.iter().find(|&&c| c >= b.smp) {
                    return Err(format!("{what}: core {c} is not among the {} vCPUs", b.smp));
                }
            }
            guest.push_str(&format!(" --frontends {f}"));
            if let Some(a) = a {
                guest.push_str(&format!(" --apps {a}"));
            }
            if let Some(k) = b.kc {
                guest.push_str(&format!(" --kc {k}"));
            }
            VmConfig { medium: Some(BootMedium::Kernel(kernel.clone())), initrd: Some(initrd.clone()), disk: Some(files::image(&made)?), ..VmConfig::default() }
        }
        Artifacts::Linux { kernel, webd } => {
            if b.frontends.is_some() || b.apps.is_some() || b.kc.is_some() {
                return Err("--frontends/--apps/--kc: the Linux baseline runs one thread per vCPU, each serving and summing".into());
            }
            let initrd = linux_initramfs(webd, &made)?;
            VmConfig { extra: vec!["-kernel".into(), kernel.display().to_string(), "-initrd".into(), initrd.display().to_string()], ..VmConfig::default() }
        }
    };
    if let Some(n) = b.requests {
        guest.push_str(&format!(" --requests {n} --warmup {}", b.warmup));
    }
    for w in &b.guest_extra {
        guest.push(' ');
        guest.push_str(w);
    }
    match art {
        Artifacts::Ours { .. } => cfg.cmdline = format!("init=webd -- {guest}"),
        Artifacts::Linux { .. } => cfg.extra.extend(["-append".into(), format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable -- {guest}")]),
    }
    cfg.smp = b.smp;
    cfg.mem_mib = b.mem_mib;
    cfg.net = Some(net);
    cfg.extra.extend(b.extra.iter().cloned());
    cfg.validate()?;
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    Ok(Prepared { args, port, made, system: b.system, guest_args: guest, goal: b.requests.map(|n| n + b.warmup) })
}

/// A guest line that means webd will not come up or has failed.
fn guest_failed(line: &str) -> bool {
    line.starts_with("webd-error") || line.starts_with(UNAVAILABLE) || line.starts_with("workload-error") || line.contains("KERNEL PANIC") || line.contains("init: cannot start `webd`")
}

fn last_line(serial: &str) -> String {
    serial.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string()).unwrap_or_else(|| "(no output)".into())
}

/// A booted webd the host talks to.
pub struct Running {
    pub session: Session,
    pub port: u16,
    pub ready: String,
    /// Front-end cores, in channel order (from the ready line).
    pub frontends: Vec<u32>,
    pub apps: Vec<u32>,
    pub sums: BTreeMap<String, Expect>,
    pub sums_path: PathBuf,
    pub system: Sys,
    pub timeout: Duration,
    /// The guest's stop count: warm-up plus `--requests` (None: it was told none).
    pub goal: Option<u64>,
}

/// Why a boot did not come up.
#[derive(Debug)]
pub struct NotReady {
    pub why: String,
    /// The guest said so itself (`webd: unavailable ...` or the kernel could not start it).
    pub unavailable: bool,
    pub finished: Finished,
}

impl Running {
    /// Start QEMU and wait (at most `ready_timeout`) for `webd: ready`.
    pub fn start(p: &Prepared, ready_timeout: Duration, echo: bool) -> Result<Running, NotReady> {
        let mut s = match Session::start(&p.args, echo) {
            Ok(s) => s,
            Err(e) => return Err(NotReady { why: e, unavailable: false, finished: Finished { serial: String::new(), stderr: String::new(), exit_code: None, killed: false, elapsed: Duration::ZERO } }),
        };
        let r = s.wait_for(&|l| l.starts_with(READY) || guest_failed(l), s.start + ready_timeout);
        let why = match r {
            Ok(l) if l.starts_with(READY) => {
                let w = words(&l);
                let list = |k: &str| w.iter().find(|(kk, _)| kk == k).and_then(|(_, v)| parse_cores(v).ok()).unwrap_or_default();
                let (frontends, apps) = (list("frontends"), list("apps"));
                if frontends.is_empty() {
                    format!("the ready line names no front-end: {l}")
                } else {
                    return Ok(Running { session: s, port: p.port, ready: l.clone(), frontends, apps, sums: p.made.sums.clone(), sums_path: p.made.sums_path.clone(), system: p.system, timeout: Duration::from_secs(20), goal: p.goal });
                }
            }
            Ok(l) => format!("the guest failed before `{READY}`: {l}"),
            Err(WaitEnd::Exited(code)) => format!("the guest stopped (QEMU status {code:?}) without printing `{READY}`; last line: {}", last_line(&s.serial)),
            Err(WaitEnd::TimedOut) => format!("no `{READY}` within {} s; last line: {}", ready_timeout.as_secs(), last_line(&s.serial)),
        };
        let finished = s.finish(Instant::now() + Duration::from_secs(10));
        let unavailable = finished.serial.lines().any(|l| l.starts_with(UNAVAILABLE) || l.contains("init: cannot start `webd`"));
        let mut why = why;
        // What webd itself said last (a refused option, a missing disk) is the likeliest why.
        if let Some(l) = finished.serial.lines().rev().find(|l| l.starts_with("webd") && !l.starts_with(READY)) {
            if !why.contains(l.trim()) {
                why.push_str(&format!("; webd said: {}", l.trim()));
            }
        }
        if let Some(q) = finished.stderr.lines().find(|l| !l.trim().is_empty()) {
            why.push_str(&format!("; QEMU: {}", q.trim()));
        }
        Err(NotReady { why, unavailable, finished })
    }

    /// `http://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    /// The guest's `done` line already seen?
    fn done_line(&self) -> Option<String> {
        self.session.serial.lines().find(|l| l.starts_with(DONE)).map(|l| l.trim().to_string())
    }

    /// Wait for `webd: done` after the host has sent its requests. If the guest has counted
    /// fewer than it was told to expect (it did not count every refused request), good
    /// requests make up the difference, one at a time, at most `told` of them. Then wait for
    /// QEMU to exit.
    pub fn finish(mut self, told: u64, done_timeout: Duration) -> WebdOutcome {
        let mut problem = None;
        // `/stats` counts as an answered request and needs no application core (one may be
        // halted on purpose: the suite's halt test).
        let target = String::from("/stats");
        let mut topped = 0u64;
        let mut done = self.done_line();
        if done.is_none() {
            // First give the guest a moment to count what it has answered.
            done = self.session.wait_for(&|l| l.starts_with(DONE) || guest_failed(l), Instant::now() + Duration::from_millis(300)).ok();
        }
        let mut conn: Option<Conn> = None;
        // The quick way: /stats says how many the front-ends have counted (200 answers, the
        // /stats request itself one of them); send the rest on one connection at once.
        if done.is_none() && told > 0 {
            if let (Ok(r), Some(goal)) = (http::get_once(self.port, "/stats", self.timeout), self.goal) {
                if let Ok(m) = parse_stats(&r.body) {
                    let counted: u64 = m.values().filter(|(role, _)| role == "frontend").map(|(_, n)| n).sum::<u64>() + 1;
                    let missing = goal.saturating_sub(counted).min(told);
                    if let Ok(mut c) = Conn::open(self.port, self.timeout) {
                        for _ in 0..missing {
                            topped += 1;
                            if self.get_on(&mut c, &target).is_err() {
                                break;
                            }
                        }
                    }
                    done = self.session.wait_for(&|l| l.starts_with(DONE) || guest_failed(l), Instant::now() + Duration::from_secs(2)).ok();
                }
            }
        }
        while done.is_none() && topped < told {
            if conn.is_none() {
                conn = Conn::open(self.port, self.timeout).ok();
            }
            let ok = conn.as_mut().map(|c| c.send(&http::request("GET", &target, true), self.timeout).and_then(|()| c.read_response(Instant::now() + self.timeout, false)).is_ok()).unwrap_or(false);
            if !ok {
                conn = None;
            }
            topped += 1;
            match self.session.wait_for(&|l| l.starts_with(DONE) || guest_failed(l), Instant::now() + Duration::from_millis(if ok { 30 } else { 300 })) {
                Ok(l) => done = Some(l),
                Err(WaitEnd::Exited(_)) => break,
                Err(WaitEnd::TimedOut) => {}
            }
        }
        drop(conn);
        if done.is_none() {
            done = match self.session.wait_for(&|l| l.starts_with(DONE) || guest_failed(l), Instant::now() + done_timeout) {
                Ok(l) => Some(l),
                Err(WaitEnd::Exited(code)) => {
                    problem = Some(format!("the guest stopped (QEMU status {code:?}) without `{DONE}`"));
                    None
                }
                Err(WaitEnd::TimedOut) => {
                    problem = Some(format!("no `{DONE}` within {} s of the host's last request ({topped} good requests sent to make up the count)", done_timeout.as_secs()));
                    None
                }
            };
        }
        if let Some(l) = &done {
            if !l.starts_with(DONE) {
                problem = Some(format!("the guest failed: {l}"));
                done = None;
            }
        }
        let finished = self.session.finish(Instant::now() + done_timeout);
        WebdOutcome { ready: self.ready, done, finished, problem, topped_up: topped }
    }
}

/// How a boot ended.
#[derive(Debug)]
pub struct WebdOutcome {
    pub ready: String,
    pub done: Option<String>,
    pub finished: Finished,
    pub problem: Option<String>,
    /// Good requests sent after the host's own to make up the guest's count.
    pub topped_up: u64,
}

impl WebdOutcome {
    /// The guest's words from its ready and done lines (done wins).
    pub fn guest_words(&self) -> Vec<(String, String)> {
        let mut w: Vec<(String, String)> = Vec::new();
        for line in std::iter::once(&self.ready).chain(self.done.iter()) {
            for (k, v) in words(line) {
                match w.iter_mut().find(|(kk, _)| *kk == k) {
                    Some(e) => e.1 = v,
                    None => w.push((k, v)),
                }
            }
        }
        w
    }

    /// The system's own verdict on the run: ours exits through the kernel's leak check (QEMU
    /// status [`crate::host::vm::QEMU_EXIT_SUCCESS`]: init exited 0 and nothing leaked); Linux
    /// powers off (status 0). No panic or oops on the serial line either way.
    pub fn verdict(&self, system: Sys) -> Result<(), String> {
        if let Some(p) = &self.problem {
            return Err(p.clone());
        }
        let bad = self.finished.serial.lines().find(|l| ["KERNEL PANIC", "panicked", "Oops", "BUG:", "WARNING:", "LEAK"].iter().any(|w| l.contains(w)));
        if let Some(l) = bad {
            return Err(format!("the serial line says: {}", l.trim()));
        }
        let want = match system {
            Sys::Ours => crate::host::vm::QEMU_EXIT_SUCCESS,
            Sys::Linux => 0,
        };
        if self.finished.killed || self.finished.exit_code != Some(want) {
            let leak = self.finished.serial.lines().find(|l| l.contains("init: free pages")).unwrap_or("").trim().to_string();
            return Err(format!("QEMU exit {:?} (want {want}){}{}", self.finished.exit_code, if self.finished.killed { ", killed at the deadline" } else { "" }, if leak.is_empty() { String::new() } else { format!("; {leak}") }));
        }
        Ok(())
    }
}

// ---- checks while it runs ----

/// What `--check` found.
#[derive(Debug, Clone, Default)]
pub struct SumCheck {
    /// Requests the check sent.
    pub sent: u64,
    /// Lines for the report.
    pub lines: Vec<String>,
    pub failures: Vec<String>,
}

impl SumCheck {
    /// The report's lines if nothing failed, else the failures.
    pub fn verdict(&self) -> Result<String, String> {
        if self.failures.is_empty() {
            Ok(self.lines.join("; "))
        } else {
            Err(self.failures.join("; "))
        }
    }
}

/// Requests [`Running::check_sums`] will send at most, for the guest's count.
pub fn planned_sum_check(system: Sys, nfiles: u64, nfrontends: u64, smp: u32) -> u64 {
    match system {
        // Per front-end: every file's sum, one static file, /stats.
        Sys::Ours => nfrontends * (nfiles + 2),
        // LINUX_CONNS_PER_CPU connections per vCPU, each every file and one static file; /stats.
        Sys::Linux => LINUX_CONNS_PER_CPU * smp as u64 * (nfiles + 1) + 1,
    }
}

/// The kernel spreads SO_REUSEPORT connections by a hash the host cannot compute; with 8
/// connections per thread, a thread missing all of them has probability 2^-(8·T-1)-ish.
const LINUX_CONNS_PER_CPU: u64 = 8;

/// Per-core counters from a `/stats` body: core → (role, requests).
pub fn parse_stats(body: &[u8]) -> Result<BTreeMap<u32, (String, u64)>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "/stats: not UTF-8".to_string())?;
    let v = json::parse(text.trim()).map_err(|e| format!("/stats: not JSON ({e}): {}", text.chars().take(80).collect::<String>()))?;
    let Some(Value::Arr(cores)) = v.get("cores") else { return Err("/stats: no `cores` array".into()) };
    let mut m = BTreeMap::new();
    for c in cores {
        let (Some(Value::Num(core)), Some(Value::Str(role)), Some(Value::Num(req))) = (c.get("core"), c.get("role"), c.get("requests")) else {
            return Err("/stats: a core without core/role/requests".into());
        };
        m.insert(*core as u32, (role.clone(), *req as u64));
    }
    Ok(m)
}

impl Running {
    fn get_on(&self, c: &mut Conn, target: &str) -> Result<http::Response, String> {
        c.send(&http::request("GET", target, true), self.timeout).map_err(|(f, w)| format!("{target}: {}: {w}", f.name()))?;
        c.read_response(Instant::now() + self.timeout, false).map_err(|(f, w)| format!("{target}: {}: {w}", f.name()))
    }

    /// `/filesum/NAME` of every file from every front-end, compared with the host's sums; one
    /// static file's bytes too; then `/stats` must show each front-end answered what was sent
    /// to it. Ours: each front-end reached by steering (source ports whose 4-tuple hash
    /// lands on its channel). Linux: enough connections that every thread is hit.
    pub fn check_sums(&self) -> SumCheck {
        let mut out = SumCheck::default();
        let names: Vec<String> = self.sums.keys().cloned().collect();
        let first = names.first().cloned().unwrap_or_default();
        let n = self.frontends.len() as u64;
        let mut sent_to: BTreeMap<u32, u64> = BTreeMap::new();
        // One connection per front-end (ours) or many (Linux), each asking for everything.
        let conns: Vec<(Option<usize>, Result<Conn, String>)> = match self.system {
            Sys::Ours => (0..self.frontends.len())
                .map(|i| {
                    let c = steer::ports_for(i as u64, n, crate::host::vm::SERVICE_PORT)
                        .find_map(|sport| match Conn::open_from(self.port, sport, self.timeout) {
                            Ok(Some(c)) => Some(Ok(c)),
                            Ok(None) => None,
                            Err((f, w)) => Some(Err(format!("{}: {w}", f.name()))),
                        })
                        .unwrap_or_else(|| Err("no free source port".into()));
                    (Some(i), c)
                })
                .collect(),
            Sys::Linux => (0..LINUX_CONNS_PER_CPU * self.frontends.len() as u64).map(|_| (None, Conn::open(self.port, self.timeout).map_err(|(f, w)| format!("{}: {w}", f.name())))).collect(),
        };
        for (fe, c) in conns {
            let who = match fe {
                Some(i) => format!("front-end core {} (channel {i})", self.frontends[i]),
                None => "a connection".to_string(),
            };
            let mut c = match c {
                Ok(c) => c,
                Err(e) => {
                    out.failures.push(format!("{who}: connect: {e}"));
                    continue;
                }
            };
            let mut good = 0u64;
            let mut bad = Vec::new();
            for name in &names {
                out.sent += 1;
                let want = self.sums[name].sum;
                match self.get_on(&mut c, &format!("/filesum/{name}")) {
                    Ok(r) if r.status == 200 && std::str::from_utf8(&r.body).ok().and_then(|b| b.trim_end().parse::<u64>().ok()) == Some(want) => good += 1,
                    Ok(r) => bad.push(format!("/filesum/{name}: status {} body `{}`, want {want}", r.status, String::from_utf8_lossy(&r.body[..r.body.len().min(30)]))),
                    Err(e) => {
                        bad.push(e);
                        break;
                    }
                }
            }
            if bad.is_empty() && !first.is_empty() {
                out.sent += 1;
                let e = self.sums[&first];
                match self.get_on(&mut c, &format!("/{first}")) {
                    Ok(r) if r.status == 200 && Some(r.body.len() as u64) == e.size.or(Some(r.body.len() as u64)) && files::filesum(&r.body) == e.sum => good += 1,
                    Ok(r) => bad.push(format!("/{first}: status {}, {} bytes summing to {}, want {:?} bytes summing to {}", r.status, r.body.len(), files::filesum(&r.body), e.size, e.sum)),
                    Err(e) => bad.push(e),
                }
            }
            if let Some(i) = fe {
                *sent_to.entry(self.frontends[i]).or_insert(0) += good;
                if bad.is_empty() {
                    out.lines.push(format!("{who}: {} sums and /{first} right", names.len()));
                }
            }
            for b in bad {
                out.failures.push(format!("{who}: {b}"));
            }
        }
        // The counters: every front-end served, and (ours) each what was steered to it.
        out.sent += 1;
        let stats = http::get_once(self.port, "/stats", self.timeout).map_err(|(f, w)| format!("/stats: {}: {w}", f.name())).and_then(|r| parse_stats(&r.body));
        match stats {
            Err(e) => out.failures.push(e),
            Ok(m) => {
                for &fe in &self.frontends {
                    let got = m.get(&fe).map(|(_, r)| *r).unwrap_or(0);
                    let want = sent_to.get(&fe).copied().unwrap_or(1);
                    if got < want {
                        out.failures.push(format!("/stats: front-end core {fe} answered {got} requests, the host sent it {want}{}", if self.system == Sys::Ours { " (steering by the 4-tuple hash did not reach it)" } else { "" }));
                    }
                }
                // Locality: every file is summed on its home application core
                // (webcore::home_of over the application cores in order), so each
                // application core has summed at least its files' share of what was sent.
                let mode = words(&self.ready).into_iter().find(|(k, _)| k == "mode").map(|(_, v)| v).unwrap_or_default();
                if mode == "locality" && !self.apps.is_empty() && self.system == Sys::Ours {
                    let asked = self.frontends.len() as u64;
                    let mut want: BTreeMap<u32, u64> = BTreeMap::new();
                    for name in &names {
                        let home = self.apps[webcore::home_of(&format!("/{name}"), self.apps.len())];
                        *want.entry(home).or_insert(0) += asked;
                    }
                    for (core, w) in want {
                        let got = m.get(&core).map(|(_, r)| *r).unwrap_or(0);
                        if got < w {
                            out.failures.push(format!("/stats: application core {core} summed {got} times, but {w} requests were for files whose home it is (locality mode)"));
                        }
                    }
                }
                let per: Vec<String> = m.iter().map(|(c, (role, r))| format!("core{c}={role}:{r}")).collect();
                out.lines.push(format!("/stats: {}", per.join(" ")));
            }
        }
        out
    }
}

// ---- `cargo xtask webd run` ----

/// `webd run`'s options (options.rs) as the boot and its phases; `--load`'s sums file is
/// read here.
pub fn options(a: crate::webd::options::WebdRunArgs) -> Result<(WebdBoot, RunPhases), String> {
    let b = WebdBoot {
        system: if a.system == "linux" { Sys::Linux } else { Sys::Ours },
        mode: a.mode,
        files: a.files,
        smp: a.smp,
        mem_mib: a.mem,
        frontends: a.frontends,
        apps: a.apps,
        kc: a.kc,
        requests: None,
        warmup: 0,
        extra: Vec::new(),
        guest_extra: Vec::new(),
    };
    let load = match a.load {
        Some(l) => Some(super::load::options(l)?),
        None => None,
    };
    let ph = RunPhases { check: a.check, bad_input: a.bad_input, load, timeout: Duration::from_secs(a.timeout), requests: a.requests };
    Ok((b, ph))
}

#[derive(Debug)]
pub struct RunPhases {
    check: bool,
    bad_input: bool,
    load: Option<load::WebLoadSpec>,
    timeout: Duration,
    requests: Option<u64>,
}

/// Requests the phases will send at most (what the guest is told to expect).
fn planned(b: &WebdBoot, ph: &RunPhases, nfrontends: u64) -> u64 {
    let mut n = 0;
    if ph.check {
        n += planned_sum_check(b.system, b.files.count, nfrontends, b.smp);
    }
    if ph.bad_input {
        n += check::planned_requests();
    }
    if let Some(l) = &ph.load {
        n += l.requests;
    }
    n
}

pub fn command(mut b: WebdBoot, ph: RunPhases) -> Result<(), String> {
    let nfrontends = match b.system {
        Sys::Ours => parse_cores(&b.frontends.clone().unwrap_or_else(|| default_placement(b.smp).0))?.len() as u64,
        Sys::Linux => b.smp as u64,
    };
    let phases = ph.check || ph.bad_input || ph.load.is_some();
    b.requests = if phases { Some(planned(&b, &ph, nfrontends)) } else { ph.requests };
    let art = Artifacts::build(b.system)?;
    let p = prepare(&b, &art)?;
    println!("webd: {} booting: {} vCPU(s), files {} (sums in {}), guest `{}`", b.system.name(), b.smp, b.files.name(), p.made.sums_path.display(), p.guest_args);
    let r = match Running::start(&p, ph.timeout.min(Duration::from_secs(300)), true) {
        Ok(r) => r,
        Err(nr) => return Err(format!("webd run: {}", nr.why)),
    };
    println!("webd: {}  (the files' sums: {})", r.url(), r.sums_path.display());
    let mut failed = Vec::new();
    if ph.check {
        let c = r.check_sums();
        for l in &c.lines {
            println!("webd check: {l}");
        }
        for f in &c.failures {
            println!("webd check: FAIL {f}");
        }
        if !c.failures.is_empty() {
            failed.push(format!("--check: {} failure(s)", c.failures.len()));
        } else {
            println!("webd check: every sum from every front-end is the host's");
        }
    }
    if ph.bad_input {
        let spec = check::CheckSpec { port: r.port, timeout: Duration::from_secs(20), expect: Some(r.sums.clone()), only: Vec::new() };
        let rep = check::run(&spec)?;
        print!("{}", rep.lines());
        if rep.failed() > 0 {
            failed.push(format!("--bad-input: {} case(s) failed", rep.failed()));
        }
    }
    if let Some(mut l) = ph.load.clone() {
        l.port = r.port;
        if l.paths == ["/"] {
            l.paths = r.sums.keys().map(|n| format!("/filesum/{n}")).collect();
        }
        if l.expect.is_none() {
            l.expect = Some(r.sums.clone());
        }
        // Ours with several front-ends: spread the connections over them by steering.
        if b.system == Sys::Ours && r.frontends.len() > 1 && l.steer.is_empty() {
            l.steer_channels = r.frontends.len() as u64;
            l.steer = (0..l.steer_channels).collect();
        }
        let rep = load::run(&l)?;
        print!("{}", rep.table());
        println!("{}", rep.json());
        if rep.failed() > 0 {
            failed.push(format!("--load: {} of {} requests failed", rep.failed(), rep.attempted));
        }
    }
    if !phases && b.requests.is_none() {
        println!("webd: serving until the guest stops or --timeout ({} s)", ph.timeout.as_secs());
        let f = r.session.finish(Instant::now() + ph.timeout);
        println!("webd: guest ran {:.1} s{}", f.elapsed.as_secs_f64(), if f.killed { " (killed at --timeout)" } else { "" });
        return Ok(());
    }
    let told = b.requests.unwrap_or(0);
    let o = r.finish(told, Duration::from_secs(60));
    if o.topped_up > 0 {
        println!("webd: {} good request(s) sent to make up the guest's count", o.topped_up);
    }
    match o.verdict(b.system) {
        Ok(()) => println!("webd: {} stopped by itself, cleanly ({})", b.system.name(), o.done.as_deref().unwrap_or("")),
        Err(e) => failed.push(format!("the guest's end: {e}")),
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("webd run: {}", failed.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists_and_placement() {
        assert_eq!(parse_cores("0,2,3").unwrap(), [0, 2, 3]);
        assert_eq!(parse_cores("1-3").unwrap(), [1, 2, 3]);
        assert!(parse_cores("").is_err());
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("a").is_err());
        assert_eq!(default_placement(2), ("0".to_string(), Some("1".to_string())));
        assert_eq!(default_placement(4), ("0".to_string(), Some("1,2,3".to_string())));
        assert_eq!(default_placement(1), ("0".to_string(), None));
    }

    #[test]
    fn stats_bodies_parse() {
        let body = br#"{"mode":"random","cores":[{"core":0,"role":"frontend","conns":1,"requests":7,"bad":0,"errors":0,"bytes":9},{"core":1,"role":"app","conns":0,"requests":5,"bad":0,"errors":0,"bytes":9}]}"#;
        let m = parse_stats(body).unwrap();
        assert_eq!(m[&0], ("frontend".to_string(), 7));
        assert_eq!(m[&1], ("app".to_string(), 5));
        assert!(parse_stats(b"{}").is_err());
        assert!(parse_stats(b"nope").is_err());
    }

    #[test]
    fn run_options() {
        let a = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        // The whole path of `cargo xtask webd run ...`: clap (options.rs), then `options`.
        let parse_run = |args: Vec<String>| -> Result<(WebdBoot, RunPhases), String> {
            match crate::host::args::parse_args::<crate::webd::options::WebdArgs>("webd", &[&["run".to_string()], &args[..]].concat())? {
                crate::webd::options::WebdArgs { command: crate::webd::options::WebdCommand::Run(r) } => options(r),
                other => panic!("{other:?}"),
            }
        };
        let (b, ph) = parse_run(a("--system linux --mode random --files 8x1M --smp 2 --check")).unwrap();
        assert_eq!((b.system, b.files.count, b.files.size, ph.check), (Sys::Linux, 8, 1 << 20, true));
        assert!(parse_run(a("--mode sideways")).unwrap_err().contains("--mode"));
        assert!(parse_run(a("--system bsd")).unwrap_err().contains("--system"));
        assert!(parse_run(a("--files 8")).unwrap_err().contains("--files"));
        assert!(parse_run(a("--smp 0")).unwrap_err().contains("--smp"));
        assert!(parse_run(a("--smp x")).unwrap_err().contains("--smp"));
        assert!(parse_run(a("--mem lots")).unwrap_err().contains("--mem"));
        // `--load "..."` is parsed as `webd load`'s options, and its errors name the option.
        let e = parse_run(vec!["--load".into(), "--conns many".into()]).unwrap_err();
        assert!(e.contains("--load") && e.contains("--conns"), "{e}");
        let e = parse_run(vec!["--load".into(), "--bogus 1".into()]).unwrap_err();
        assert!(e.contains("--bogus"), "{e}");
        let (_, ph) = parse_run(vec!["--load".into(), "--conns 4 --requests 20".into()]).unwrap();
        assert_eq!(ph.load.map(|l| (l.conns, l.requests)), Some((4, 20)));
        // The guest is told an upper bound of what the phases send.
        let (b, ph) = parse_run(a("--files 4x64K --check --bad-input")).unwrap();
        assert_eq!(planned(&b, &ph, 1), 4 + 2 + check::planned_requests());
    }
}
