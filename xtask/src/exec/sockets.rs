//! Servers under `cargo xtask exec --net`, driven from the host (`cargo xtask exec --sockets`):
//!
//! - the socket conformance case: linux/progs/epollserv.c (a single-threaded epoll TCP
//!   server of ours) on each system, sent the same lines by a bounded host client
//!   (`host::memcload::lines`); its replies, its standard output and its status must be the
//!   same on both;
//! - memcached 1.6.18 from Debian's source (`debsrc`) under a bounded load
//!   (`host::memcload::memcached`, every value read back checked), on the systems asked for.
//!
//! Each server runs in a thread of this process through the ordinary exec path (a forward
//! from a free host port), the client waits for it to answer, talks, and ends it (`QUIT`,
//! memcached's `shutdown` with `-A`); the guest's timeout bounds everything.

use std::time::Duration;

use super::command::System;
use super::{ExecOutput, ExecRequest};
use crate::host::memcload;
use crate::host::vm::{free_port, Forward, NetConfig};

/// The guest port the servers listen on.
pub const GUEST_PORT: u16 = 11211;

/// Run `req` on `system` with a forward from a free host port to `GUEST_PORT`, and `client`
/// against that host port once the server answers `probe` with `want`.
pub fn serve<T: Send + 'static>(
    system: System,
    req: ExecRequest,
    probe: &'static [u8],
    want: &'static str,
    client: impl FnOnce(u16) -> Result<T, String> + Send + 'static,
) -> Result<(ExecOutput, T), String> {
    // Built before the clock starts (the first build takes minutes).
    match system {
        System::Ours => super::ours::prepare().map(|_| ())?,
        System::Linux => super::linux::prepare()?,
    }
    super::check_request(&req)?;
    let host = free_port()?;
    let req = ExecRequest { net: Some(NetConfig { forwards: vec![Forward { host, guest: GUEST_PORT }] }), ..req };
    let within = req.timeout;
    let guest = std::thread::spawn(move || system.run(&req));
    let talk = memcload::wait_ready(host, probe, want, within, || guest.is_finished()).and_then(|()| client(host));
    let out = guest.join().map_err(|_| "the guest's thread panicked".to_string())??;
    match talk {
        Ok(t) => Ok((out, t)),
        Err(e) => Err(format!("{}: {e}; the server wrote:\n{}{}\nconsole:\n{}", system.name(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), tail(&out.console))),
    }
}

fn tail(s: &str) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(20)..].join("\n")
}

/// The lines the conformance case sends (the last ends the server).
pub const SCRIPT: [&str; 8] = ["ECHO hello, sockets", "SET alpha 1", "SET beta two", "GET alpha", "GET gamma", "bogus command", "CHECKS", "QUIT"];

/// What the epoll server did on one system: its replies, standard output and status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpollRun {
    pub replies: Vec<String>,
    pub stdout: String,
    pub status: i32,
}

pub fn epollserv(system: System, smp: u32) -> Result<EpollRun, String> {
    let program = super::progs::build("epollserv", &[])?;
    let req = ExecRequest { program, args: vec![GUEST_PORT.to_string(), "100".into()], files: vec![], stdin: vec![], smp, disk: None, timeout: Duration::from_secs(120), net: None };
    let (out, replies) = serve(system, req, b"ECHO ready\n", "ready", |port| memcload::lines(port, &SCRIPT))?;
    Ok(EpollRun { replies, stdout: String::from_utf8_lossy(&out.stdout).into_owned(), status: out.status })
}

/// The host CPU the guest's QEMU process used over an idle stretch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IdleCost {
    /// The stretch's wall time.
    pub seconds: f64,
    /// QEMU's user + system CPU time over it, in percent of one host CPU.
    pub cpu_percent: f64,
    /// The host's one-minute load average at the stretch's start and end.
    pub load: (f64, f64),
}

/// The processes this process started whose command name starts with `qemu` (the guest's
/// QEMU: `exec` runs one guest at a time).
fn qemu_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { return false };
            let comm = &stat[open + 1..close];
            // After the name: state, then the parent's pid.
            let ppid = stat[close + 1..].split_whitespace().nth(1).and_then(|v| v.parse::<u32>().ok());
            comm.starts_with("qemu") && ppid == Some(me)
        })
        .collect()
}

/// QEMU's host CPU over `stretch` of wall time during which the host sends nothing.
fn idle_cost(stretch: std::time::Duration) -> Result<IdleCost, String> {
    let pid = match qemu_children()[..] {
        [pid] => pid,
        ref v => return Err(format!("idle stretch: expected one QEMU child process, found {}", v.len())),
    };
    let load0 = crate::bench::load1().unwrap_or(f64::NAN);
    let t0 = (std::time::Instant::now(), crate::idle::cpu_ticks(pid)?);
    std::thread::sleep(stretch);
    let t1 = (std::time::Instant::now(), crate::idle::cpu_ticks(pid)?);
    let load1 = crate::bench::load1().unwrap_or(f64::NAN);
    let seconds = (t1.0 - t0.0).as_secs_f64();
    let cpu_s = t1.1.saturating_sub(t0.1) as f64 / crate::idle::clock_ticks_per_s() as f64;
    Ok(IdleCost { seconds, cpu_percent: 100.0 * cpu_s / seconds, load: (load0, load1) })
}

/// The runtime's readiness-wait counts from ours' console (`linuxrt: readiness waits: ...`).
pub fn wait_counts_line(console: &str) -> Option<&str> {
    console.lines().find(|l| l.starts_with("linuxrt: readiness waits:"))
}

/// The runtime's readiness-wait counts: `(sleeps, ended by a wake, on the card)`, from
/// `linuxrt: readiness waits: S sleeps, W ended by a wake, C on the card`.
pub fn wait_counts(console: &str) -> Option<(u64, u64, u64)> {
    let rest = wait_counts_line(console)?.strip_prefix("linuxrt: readiness waits: ")?;
    let mut n = rest.split(", ").map(|part| part.split(' ').next().and_then(|v| v.parse::<u64>().ok()));
    Some((n.next()??, n.next()??, n.next()??))
}

/// Requests of the CI's memcached check.
const CI_IDLE_REQUESTS: u64 = 500;

/// memcached under `load` on `system` with `threads` worker threads.
pub fn memcached(system: System, smp: u32, threads: u32, load: memcload::Load) -> Result<(memcload::Report, ExecOutput), String> {
    memcached_idle(system, smp, threads, load, std::time::Duration::ZERO).map(|(r, o, _)| (r, o))
}

/// `memcached`, then (if `idle` is not zero) `idle` with no connection open, QEMU's host CPU
/// measured over it, before the `shutdown`.
pub fn memcached_idle(system: System, smp: u32, threads: u32, load: memcload::Load, idle: std::time::Duration) -> Result<(memcload::Report, ExecOutput, Option<IdleCost>), String> {
    let program = super::debsrc::memcached()?;
    // -c 60: this system's descriptor table has 64 slots (memcached sets RLIMIT_NOFILE to
    // its connection limit and exits if it cannot); -u root: both guests run it as root;
    // -A: the client ends it with `shutdown`.
    let args = ["-t", &threads.to_string(), "-U", "0", "-p", &GUEST_PORT.to_string(), "-u", "root", "-A", "-c", "60"].iter().map(|s| s.to_string()).collect();
    let req = ExecRequest { program, args, files: vec![], stdin: vec![], smp, disk: None, timeout: load.deadline + idle + Duration::from_secs(60), net: None };
    let (out, (rep, cost)) = serve(system, req, b"version\r\n", "VERSION", move |port| {
        let rep = memcload::memcached(port, &load)?;
        // The load's connections are closed: give the guest a moment to finish their
        // goodbyes, so the stretch holds no work of theirs.
        let cost = if idle.is_zero() {
            None
        } else {
            std::thread::sleep(Duration::from_secs(1));
            Some(idle_cost(idle)?)
        };
        // Ends memcached (-A allows it); the connection just closes.
        let _ = memcload::lines(port, &["shutdown\r"]);
        Ok((rep, cost))
    })?;
    Ok((rep, out, cost))
}

/// `cargo xtask exec --sockets`: the conformance case on the systems asked for (compared when
/// both ran), then memcached under a bounded load.
pub fn command(systems: &[System], smp: u32, requests: u64, idle_secs: u64) -> Result<(), String> {
    if idle_secs > 0 {
        return idle_command(systems, smp, requests, idle_secs);
    }
    let mut runs = Vec::new();
    for &s in systems {
        let r = epollserv(s, smp)?;
        println!("epollserv on {}: status {}, replies {:?}", s.name(), r.status, r.replies);
        runs.push((s, r));
    }
    if let [(_, a), (_, b)] = &runs[..] {
        let same = a.replies == b.replies && a.status == b.status && normalized(&a.stdout) == normalized(&b.stdout);
        if !same {
            return Err(format!("epollserv differs between the systems:\nours:  {a:?}\nlinux: {b:?}"));
        }
        println!("epollserv: the same replies, output and status on both systems");
    }
    for &s in systems {
        let load = memcload::Load { requests, ..memcload::Load::default() };
        match memcached(s, smp, 2, load) {
            Ok((rep, out)) => {
                println!("memcached on {} ({smp} vCPUs, -t 2): {} sets, {} gets, {} wrong values, {} ms, status {}", s.name(), rep.sets, rep.gets, rep.wrong, rep.elapsed_ms, out.status);
                if rep.wrong != 0 {
                    return Err(format!("memcached on {}: {} values read back wrong", s.name(), rep.wrong));
                }
            }
            Err(e) => {
                // What stopped it: the first line, and the runtime's reports (unimplemented calls, status).
                println!("memcached on {}: did not serve: {}", s.name(), e.lines().next().unwrap_or(""));
                for l in e.lines().filter(|l| l.contains("unimplemented system call") || l.starts_with("linuxrt:")) {
                    println!("  {l}");
                }
            }
        }
    }
    Ok(())
}

/// `exec --sockets --idle-secs S`: memcached under the load, then idle for S seconds with
/// QEMU's host CPU measured, on each system asked for.
fn idle_command(systems: &[System], smp: u32, requests: u64, idle_secs: u64) -> Result<(), String> {
    for &s in systems {
        let load = memcload::Load { requests, ..memcload::Load::default() };
        let (rep, out, cost) = memcached_idle(s, smp, 2, load, Duration::from_secs(idle_secs))?;
        if rep.wrong != 0 {
            return Err(format!("memcached on {}: {} values read back wrong", s.name(), rep.wrong));
        }
        let c = cost.ok_or("no idle stretch measured")?;
        println!(
            "memcached on {} ({smp} vCPUs, -t 2): {} requests in {} ms, 0 wrong; then idle {:.1} s: QEMU used {:.2} % of a host CPU (host load {:.1}-{:.1}); status {}",
            s.name(),
            rep.sets + rep.gets,
            rep.elapsed_ms,
            c.seconds,
            c.cpu_percent,
            c.load.0,
            c.load.1,
            out.status
        );
        if let Some(l) = wait_counts_line(&out.console) {
            println!("  {l}");
        }
    }
    Ok(())
}

/// The replies Linux gives to [`SCRIPT`] (the oracle: the Linux guest's answers, checked on
/// both systems, so a fault both share still fails).
pub const LINUX_REPLIES: [&str; 8] = [
    "hello, sockets",
    "STORED",
    "STORED",
    "VALUE 1",
    "MISSING",
    "ERROR",
    "bind-in-use=EADDRINUSE accept-not-listening=EINVAL recv-unconnected=ENOTCONN so-error=ok bind-bad-pointer=EFAULT getsockopt-bad-option=ENOPROTOOPT epoll-ctl-closed=EBADF epoll-ctl-self=EINVAL epoll-wait-zero-max=EINVAL read-closed=EBADF",
    "BYE",
];

/// What the server prints: its port, the checks, the connections served, its goodbye. How
/// many connections reached it varies (the readiness probe may connect more than once while
/// the guest comes up): at least the probe's and the script's, written as `N`.
fn expected_stdout() -> String {
    format!("listening on port {GUEST_PORT}\nchecks {}\nserved N connections\nbye\n", LINUX_REPLIES[6])
}

/// The server's output with the count of connections served replaced by `N` (when at least 2).
fn normalized(stdout: &str) -> String {
    stdout
        .lines()
        .map(|l| match l.strip_prefix("served ").and_then(|r| r.strip_suffix(" connections")).and_then(|n| n.parse::<u64>().ok()) {
            Some(n) if n >= 2 => "served N connections".to_string(),
            _ => l.to_string(),
        })
        .map(|l| l + "\n")
        .collect()
}

/// `cargo xtask test` suite `linux-sockets`: the epoll server on both systems (replies,
/// output, status as Linux's; on ours also the runtime's leak check), and memcached on each
/// system under a small checked load (every value read back checked; on ours the leak check).
pub fn ci_tests() -> Result<crate::host::outcome::TestTally, String> {
    let mut t = crate::host::outcome::TestTally::default();
    let mut check = |name: &str, bad: Vec<String>| {
        if bad.is_empty() {
            println!("   {name}: ok");
            t.passed += 1;
        } else {
            println!("   FAILED: {name}: {}", bad.join("; "));
            t.failed += 1;
        }
    };
    for system in [System::Ours, System::Linux] {
        let name = format!("epollserv on {}", system.name());
        let program = super::progs::build("epollserv", &[])?;
        let req = ExecRequest { program, args: vec![GUEST_PORT.to_string(), "100".into()], files: vec![], stdin: vec![], smp: 1, disk: None, timeout: Duration::from_secs(90), net: None };
        match serve(system, req, b"ECHO ready\n", "ready", |port| memcload::lines(port, &SCRIPT)) {
            Ok((out, replies)) => {
                let mut bad = Vec::new();
                if replies != LINUX_REPLIES {
                    bad.push(format!("replies {replies:?}"));
                }
                let so = normalized(&String::from_utf8_lossy(&out.stdout));
                if so != expected_stdout() {
                    bad.push(format!("standard output {so:?}"));
                }
                if out.status != 0 {
                    bad.push(format!("status {}", out.status));
                }
                if system == System::Ours && !out.console.lines().any(|l| l.starts_with("linuxrt: leak check") && l.ends_with(": ok")) {
                    let leak: Vec<&str> = out.console.lines().filter(|l| l.starts_with("linuxrt:")).collect();
                    bad.push(format!("no `leak check ... ok` line from the runtime: {leak:?}"));
                }
                check(&name, bad);
            }
            Err(e) => check(&name, vec![e]),
        }
    }
    // memcached (Debian's source, unmodified) on both systems, 2 vCPUs, two worker threads,
    // a small checked load; on ours the runtime's leak check after memcached's `shutdown`.
    // On ours its threads' waits with sockets must sleep on the card's wait (the runtime's
    // count of such sleeps is not 0). How often they sleep is not checked: memcached's
    // threads time-share core 0, and a wait returns at once while another context is queued
    // there (docs/net.md, "Linux programs' sockets"), so an idle memcached still wakes
    // thousands of times a second.
    for system in [System::Ours, System::Linux] {
        let load = memcload::Load { requests: CI_IDLE_REQUESTS, conns: 4, deadline: Duration::from_secs(60), ..memcload::Load::default() };
        let name = format!("memcached on {} (2 vCPUs, -t 2, 500 checked requests)", system.name());
        match memcached_idle(system, 2, 2, load, Duration::ZERO) {
            Ok((rep, out, _)) => {
                let mut bad = Vec::new();
                if rep.wrong != 0 || rep.sets + rep.gets != CI_IDLE_REQUESTS {
                    bad.push(format!("{rep:?}"));
                }
                if system == System::Ours {
                    match wait_counts(&out.console) {
                        Some((sleeps, _, on_card)) if on_card > 0 => {
                            println!("   memcached on ours: {sleeps} readiness-wait sleeps, {on_card} of them on the card");
                        }
                        Some((sleeps, _, _)) => bad.push(format!("{sleeps} readiness-wait sleeps, none on the card: a wait with sockets napped instead of sleeping on the card's wait")),
                        None => bad.push("no `linuxrt: readiness waits:` line".into()),
                    }
                }
                if out.status != 0 {
                    bad.push(format!("status {}", out.status));
                }
                if system == System::Ours && !out.console.lines().any(|l| l.starts_with("linuxrt: leak check") && l.ends_with(": ok")) {
                    let leak: Vec<&str> = out.console.lines().filter(|l| l.starts_with("linuxrt:") || l.starts_with("linux:")).collect();
                    bad.push(format!("no `leak check ... ok` line from the runtime: {leak:?}"));
                }
                check(&name, bad);
            }
            Err(e) => check(&name, vec![e]),
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_counts_are_read_from_the_runtimes_line() {
        let c = "x\nlinuxrt: readiness waits: 1234 sleeps, 5 ended by a wake, 1200 on the card\nlinuxrt: leak check";
        assert_eq!(wait_counts(c), Some((1234, 5, 1200)));
        assert_eq!(wait_counts("linuxrt: readiness waits: many sleeps"), None);
        assert_eq!(wait_counts("nothing"), None);
    }

    #[test]
    fn the_served_count_is_normalized_only_when_plausible() {
        let s = |n: &str| format!("listening on port {GUEST_PORT}\nchecks {}\nserved {n} connections\nbye\n", LINUX_REPLIES[6]);
        assert_eq!(normalized(&s("2")), expected_stdout());
        assert_eq!(normalized(&s("5")), expected_stdout());
        // Fewer than the probe's and the script's connections is wrong, as is no count.
        assert_ne!(normalized(&s("1")), expected_stdout());
        assert_ne!(normalized(&s("x")), expected_stdout());
    }
}
