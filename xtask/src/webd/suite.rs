//! The `webd` suite of `cargo xtask test` (also `cargo xtask webd selftest`): our webd at 2
//! vCPUs with a small image (4 files of 64 KiB) in each of the three modes, and random mode
//! at 1 vCPU (no application core); in each boot every
//! file's sum from every front-end (compared with the host's, and with `/stats`' per-core
//! counts), the bad-input cases (`webd check`), and the kernel's verdict after webd stops by
//! itself (init exited 0, nothing leaked). About 12 s a mode here.

use std::path::Path;
use std::time::{Duration, Instant};

use super::check;
use super::http;
use super::load;
use super::files::FileSpec;
use super::run::{self, Artifacts, Running, Sys, WebdBoot};
use crate::host::outcome::TestTally;

/// One boot of ours in `mode`, checked three ways.
fn one_mode(art: &Artifacts, mode: &str, smp: u32) -> TestTally {
    let mut t = Checks::new(format!("webd, {mode} mode, {smp} vCPU{}, 4x64K", if smp == 1 { "" } else { "s" }));
    let mut b = small_boot(Sys::Ours, mode, smp);
    b.requests = Some(run::planned_sum_check(Sys::Ours, SMALL.count, 1, smp) + check::planned_requests());
    // Random mode at 2 vCPUs with no polling window: every core sleeps at its first empty
    // look, so each request's hand-offs (front-end to application core and the reply back)
    // go through a wake, as on a busy host where the windows shrink to nothing. The other
    // boots keep the default window.
    let zero_window = mode == "random" && smp == 2;
    if zero_window {
        // And requests in flight at once, so the front-end finds the application core busy
        // and sums some files itself. `--steal 1` (the default is 2): with 8 connections and
        // a core that sums 64 KiB in ~0.1 ms, the default stole 4-30 times in 64 requests
        // here; at 1 it steals whenever a request arrives with another out, so the check
        // below does not depend on the host's timing.
        b.guest_extra = vec!["--poll-us".into(), "0".into(), "--steal".into(), "1".into()];
        b.requests = b.requests.map(|n| n + STEAL_LOAD.1);
    }
    let Some(r) = t.start(&b, art, "webd ready") else { return t.done() };
    // Catches: a wrong sum (summing code, the wrong file, a torn copy on the application
    // core), a front-end the steering cannot reach or that does not answer, static files
    // served wrong, /stats counting wrong, locality sending a file to a core that is not
    // its home.
    t.record("every file's sum from every front-end, /stats agrees", r.check_sums().verdict());
    // Catches: a parser limit not enforced (431/413/400/405/404 wrong), a path escaping the
    // root, a server that stops serving after bad input or a vanished client.
    let spec = check::CheckSpec { port: r.port, timeout: Duration::from_secs(20), expect: Some(r.sums.clone()), only: Vec::new() };
    t.record(
        "bad input: the right status or a close, and the server keeps serving",
        match check::run(&spec) {
            Ok(rep) if rep.failed() == 0 => Ok(format!("{} cases", rep.passed())),
            Ok(rep) => Err(rep.cases.iter().filter_map(|c| c.ok.as_ref().err().map(|e| format!("{}: {e}", c.name))).collect::<Vec<_>>().join("; ")),
            Err(e) => Err(e),
        },
    );
    // Catches: a server that does not stop after --requests, a leak of pages, kernel heap
    // objects or kernel objects (the NIC, the rings' segments, the application cores'
    // copies), a crash on the way out.
    // Catches: a front-end that sums the wrong file or a torn copy when it steals (a wrong
    // body), a reply counted twice or never (a request unanswered: a timeout).
    if zero_window {
        let ls = load::WebLoadSpec {
            port: r.port,
            conns: STEAL_LOAD.0,
            requests: STEAL_LOAD.1,
            max_time: Duration::from_secs(60),
            timeout: Duration::from_secs(20),
            paths: r.sums.keys().map(|n| format!("/filesum/{n}")).collect(),
            expect: Some(r.sums.clone()),
            ..load::WebLoadSpec::default()
        };
        t.record(
            &format!("{} requests on {} connections at once, every sum right", STEAL_LOAD.1, STEAL_LOAD.0),
            match load::run(&ls) {
                Ok(l) if l.failed() == 0 && l.ok == STEAL_LOAD.1 => Ok(format!("{} right", l.ok)),
                Ok(l) => Err(format!("{} of {} failed ({}){}", l.failed(), l.attempted, l.failure_words(), l.first_failure.map(|f| format!("; first: {f}")).unwrap_or_default())),
                Err(e) => Err(e),
            },
        );
    }
    let o = r.finish(b.requests.unwrap_or(0), Duration::from_secs(60));
    t.record("stops by itself after --requests; init exits 0 and nothing leaked", stopped(&o, Sys::Ours, 4, 10));
    // Catches: random mode's front-end never summing itself with the application core busy
    // (`--steal` lost or its count of requests out never reaching 2: front_sums=0), a
    // front-end that sums everything (the application core summed nothing), and locality
    // mode's front-end reading a home core's files by default (front_sums > 0 there).
    if zero_window || (mode == "locality" && smp > 1) {
        t.record("who sums: random mode's front-end when the application core is busy, locality's never", front_sums_checked(&o, mode));
    }
    // Catches: a front-end that hands a sleeping application core a request without waking
    // it (the request waits out the core's 100 ms sleep: `late` > 0), and wakes that never
    // arrive or are never counted (`woken` = 0: the host's pauses between requests, its
    // connecting after `ready` and the slow bad-input cases, always let the core fall asleep
    // at least once). Counts from the guest, so a slow host cannot fail it.
    if mode != "same-core" && smp > 1 {
        t.record("a request for a sleeping application core wakes it (no request waits out a sleep)", app_sleeps_checked(&o.finished.serial));
    }
    // Catches: an application core that pushes a reply without waking the front-end that
    // sleeps waiting for it (`woken` = 0, and the reply waits for the front-end's timeout or
    // a frame: `late`), and a front-end that never sleeps with a request out.
    if zero_window {
        t.record("a reply for a sleeping front-end wakes it (no reply waits for another wake-up)", front_sleeps_checked(&o.finished.serial));
    }
    t.done()
}

/// The random-mode boot's concurrent load: (connections, requests).
const STEAL_LOAD: (usize, u64) = (8, 64);

/// webd's `front_sums` (filesums a front-end computed itself) against the application cores'
/// sums, from the closing line: random mode must have both (the front-end stole while the
/// core was busy, and the core still summed), locality mode no front-end sum at all.
fn front_sums_checked(o: &run::WebdOutcome, mode: &str) -> Result<String, String> {
    let done = o.done.as_deref().ok_or("no `webd: done` line")?;
    let (front, apps) = parse_sums(done).ok_or_else(|| format!("no front_sums= or app sums in `{done}`"))?;
    let how = format!("front-end {front}, application cores {apps}");
    match mode {
        "locality" if front == 0 => Ok(how),
        "locality" => Err(format!("the front-end summed {front} files in locality mode ({how})")),
        _ if front == 0 => Err(format!("the front-end never summed a file with the application core busy ({how})")),
        _ if apps == 0 => Err(format!("the application core summed nothing ({how})")),
        _ => Ok(how),
    }
}

/// From a `webd: done` line: (`front_sums`, the application cores' sums added up, from their
/// `app<CORE>=sums/bytes` words).
pub fn parse_sums(done: &str) -> Option<(u64, u64)> {
    let mut front = None;
    let mut apps = 0u64;
    for w in done.split_whitespace() {
        if let Some(v) = w.strip_prefix("front_sums=") {
            front = v.parse().ok();
        } else if let Some((core, counts)) = w.strip_prefix("app").and_then(|r| r.split_once('=')) {
            // `app<CORE>=`, not `apps=`.
            if core.parse::<u32>().is_ok() {
                apps += counts.split('/').next()?.parse::<u64>().ok()?;
            }
        }
    }
    Some((front?, apps))
}

/// The image every boot of the suite serves: 4 files of 64 KiB.
const SMALL: FileSpec = FileSpec { count: 4, size: 64 << 10 };

/// A boot of `system`'s webd in `mode` at `smp` vCPUs serving `SMALL`, every other choice
/// the default (placement, requests, options).
fn small_boot(system: Sys, mode: &str, smp: u32) -> WebdBoot {
    WebdBoot { system, mode: mode.into(), files: SMALL, smp, mem_mib: 512, frontends: None, apps: None, kc: None, requests: None, warmup: 0, extra: Vec::new(), guest_extra: Vec::new() }
}

/// One boot's checks: each prints `ok`/`FAIL` with what it checked, and the boot's closing
/// line gives the counts and the time.
struct Checks {
    name: String,
    t0: Instant,
    tally: TestTally,
}

impl Checks {
    fn new(name: String) -> Checks {
        println!("== {name}");
        Checks { name, t0: Instant::now(), tally: TestTally::default() }
    }

    fn record(&mut self, what: &str, r: Result<String, String>) {
        match r {
            Ok(how) => {
                self.tally.passed += 1;
                println!("   ok   {what}: {how}");
            }
            Err(why) => {
                self.tally.failed += 1;
                println!("   FAIL {what}: {why}");
            }
        }
    }

    /// Boot `b` and wait until webd is ready; a failure is recorded (`ready` names that
    /// check) with the serial's last lines, and gives `None`.
    fn start(&mut self, b: &WebdBoot, art: &Artifacts, ready: &str) -> Option<Running> {
        let p = match run::prepare(b, art) {
            Ok(p) => p,
            Err(e) => {
                self.record("boot", Err(e));
                return None;
            }
        };
        match Running::start(&p, Duration::from_secs(120), false) {
            Ok(r) => Some(r),
            Err(nr) => {
                print_tail(&nr.finished.serial, 8);
                self.record(ready, Err(nr.why));
                None
            }
        }
    }

    fn done(self) -> TestTally {
        println!("   {}: {} passed, {} failed ({:.1} s)", self.name, self.tally.passed, self.tally.failed, self.t0.elapsed().as_secs_f64());
        self.tally
    }
}

/// The last `n` lines of a guest's serial output, indented.
fn print_tail(serial: &str, n: usize) {
    for l in serial.lines().rev().take(n).collect::<Vec<_>>().into_iter().rev() {
        println!("   | {l}");
    }
}

/// The verdict on how webd stopped (`WebdOutcome::verdict`), with the first `words` words of
/// its closing line; a failure prints the serial's last `tail` lines.
fn stopped(o: &run::WebdOutcome, system: Sys, words: usize, tail: usize) -> Result<String, String> {
    let v = o.verdict(system).map(|()| o.done.clone().unwrap_or_default().split_whitespace().take(words).collect::<Vec<_>>().join(" "));
    if v.is_err() && tail > 0 {
        print_tail(&o.finished.serial, tail);
    }
    v
}

/// webd's `webd: app sleeps wake=on app<CORE>=naps/woken/late ...` line: per application
/// core (core, naps, woken, late).
pub fn parse_app_sleeps(serial: &str) -> Option<(bool, Vec<(u32, u64, u64, u64)>)> {
    let line = serial.lines().rev().find_map(|l| l.trim().strip_prefix("webd: app sleeps wake="))?;
    let mut words = line.split_whitespace();
    let wake = words.next()? == "on";
    let mut v = Vec::new();
    for w in words {
        let (core, counts) = w.strip_prefix("app")?.split_once('=')?;
        let n: Vec<u64> = counts.split('/').map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let [naps, woken, late] = n[..] else { return None };
        v.push((core.parse().ok()?, naps, woken, late));
    }
    Some((wake, v))
}

/// Every application core was woken at least once and no request waited out a sleep.
fn app_sleeps_checked(serial: &str) -> Result<String, String> {
    let (wake, cores) = parse_app_sleeps(serial).ok_or("no `webd: app sleeps` line")?;
    if !wake {
        return Err("webd ran with wake=off".into());
    }
    if cores.is_empty() {
        return Err("no application core in `webd: app sleeps`".into());
    }
    let mut bad = Vec::new();
    for &(core, naps, woken, late) in &cores {
        if late > 0 {
            bad.push(format!("core {core}: {late} of {naps} sleeps ended by their timeout with a request waiting"));
        }
        if woken == 0 {
            bad.push(format!("core {core}: never woken ({naps} sleeps)"));
        }
    }
    let all = cores.iter().map(|(c, n, w, l)| format!("core {c}: {n} sleeps, {w} woken, {l} late")).collect::<Vec<_>>().join(", ");
    if bad.is_empty() {
        Ok(all)
    } else {
        Err(format!("{} ({all})", bad.join("; ")))
    }
}

/// webd's `webd: front-end sleeps with a request out wake=on fe<CORE>=naps/woken/late ...`
/// line: per front-end (core, naps, woken, late).
pub fn parse_front_sleeps(serial: &str) -> Option<(bool, Vec<(u32, u64, u64, u64)>)> {
    let line = serial.lines().rev().find_map(|l| l.trim().strip_prefix("webd: front-end sleeps with a request out wake="))?;
    let mut words = line.split_whitespace();
    let wake = words.next()? == "on";
    let mut v = Vec::new();
    for w in words {
        let (core, counts) = w.strip_prefix("fe")?.split_once('=')?;
        let n: Vec<u64> = counts.split('/').map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let [naps, woken, late] = n[..] else { return None };
        v.push((core.parse().ok()?, naps, woken, late));
    }
    Some((wake, v))
}

/// Every front-end slept with a request out and was woken by an application core, and at
/// most one such sleep in ten ended otherwise with the reply already there (`late`). Not 0:
/// a frame or the front-end's timer can end its sleep in the few instructions between an
/// application core's push and its look at the flag, more so when the host deschedules that
/// core in between; without the wake nearly every such sleep is late.
fn front_sleeps_checked(serial: &str) -> Result<String, String> {
    let (wake, cores) = parse_front_sleeps(serial).ok_or("no `webd: front-end sleeps` line")?;
    if !wake {
        return Err("webd ran with wake=off".into());
    }
    if cores.is_empty() {
        return Err("no front-end in `webd: front-end sleeps`".into());
    }
    let mut bad = Vec::new();
    for &(core, naps, woken, late) in &cores {
        if naps == 0 {
            bad.push(format!("front-end {core}: never slept with a request out"));
        } else if woken == 0 {
            bad.push(format!("front-end {core}: never woken by an application core ({naps} sleeps)"));
        }
        if late * 10 > naps {
            bad.push(format!("front-end {core}: {late} of {naps} sleeps ended with a reply waiting that woke nobody"));
        }
    }
    let all = cores.iter().map(|(c, n, w, l)| format!("front-end {c}: {n} sleeps with a request out, {w} woken, {l} late")).collect::<Vec<_>>().join(", ");
    if bad.is_empty() {
        Ok(all)
    } else {
        Err(format!("{} ({all})", bad.join("; ")))
    }
}

/// An application core halted while requests are in flight (`--halt-app 2:1`, locality mode
/// at 3 vCPUs, application cores 1 and 2): the files whose home is core 2 get 503 once it
/// stops, the others keep their right sums, and webd still stops cleanly with nothing leaked.
/// Catches: a front-end that waits for ever on a dead core (the request times out here), a
/// wrong answer instead of 503, a halted core's files answered by nobody or by the wrong core,
/// a leak of the halted core's rings or copies.
fn halted_app(art: &Artifacts) -> TestTally {
    let mut t = Checks::new("webd, an application core halted mid-run, 3 vCPUs".into());
    let b = WebdBoot { frontends: Some("0".into()), apps: Some("1,2".into()), requests: Some(40), guest_extra: vec!["--halt-app".into(), "2:1".into()], ..small_boot(Sys::Ours, "locality", 3) };
    let Some(r) = t.start(&b, art, "webd ready") else { return t.done() };
    let (mut right, mut unavailable, mut wrong) = (0u32, 0u32, Vec::new());
    let mut halted_files = 0;
    for round in 0..3 {
        for (file, want) in &r.sums {
            let home = r.apps.get(webcore::home_of(&format!("/{file}"), r.apps.len())).copied();
            if round == 0 && home == Some(2) {
                halted_files += 1;
            }
            match http::get_once(r.port, &format!("/filesum/{file}"), Duration::from_secs(10)) {
                Ok(resp) if resp.status == 200 && String::from_utf8_lossy(&resp.body).trim() == want.sum.to_string() => right += 1,
                Ok(resp) if resp.status == 503 && home == Some(2) => unavailable += 1,
                Ok(resp) => wrong.push(format!("{file} (home core {home:?}): {} {:?}", resp.status, String::from_utf8_lossy(&resp.body))),
                Err(e) => wrong.push(format!("{file}: {e:?}")),
            }
        }
    }
    let expect_unavailable = halted_files > 0;
    t.record(
        "the halted core's files get 503, the others their sums",
        if !wrong.is_empty() {
            Err(wrong.join("; "))
        } else if expect_unavailable && unavailable == 0 {
            Err(format!("{halted_files} files live on the halted core and none got 503"))
        } else if !expect_unavailable {
            Err("no file lives on core 2 (the hash changed?): the test checks nothing".into())
        } else {
            Ok(format!("{right} right sums, {unavailable} answered 503"))
        },
    );
    let o = r.finish(40, Duration::from_secs(60));
    t.record("stops by itself; init exits 0 and nothing leaked", stopped(&o, Sys::Ours, 3, 0));
    t.done()
}

/// Linux's answers checked too: `webd-linux` (random mode, the baseline's only one) on
/// Debian's kernel at 2 vCPUs with the same small image, every file's sum over several
/// connections per vCPU compared with the host's, `/stats` agreeing, then its stop after
/// `--requests` and a clean power-off. Catches: the baseline summing differently from ours
/// (the comparison would time different work), a file missing from its initramfs, a thread
/// that answers wrong, a guest that does not stop by itself. About 15 s here.
pub fn ci_tests_linux() -> Result<TestTally, String> {
    let mut t = Checks::new("webd on the Linux guest, random mode, 2 vCPUs, 4x64K".into());
    let art = Artifacts::build(Sys::Linux)?;
    let mut b = small_boot(Sys::Linux, "random", 2);
    b.requests = Some(run::planned_sum_check(Sys::Linux, SMALL.count, 1, 2));
    let Some(r) = t.start(&b, &art, "webd-linux ready") else { return Ok(t.done()) };
    t.record("every file's sum from every thread, /stats agrees", r.check_sums().verdict());
    let o = r.finish(b.requests.unwrap_or(0), Duration::from_secs(60));
    t.record("stops by itself after --requests; powers off cleanly", stopped(&o, Sys::Linux, 4, 10));
    Ok(t.done())
}

/// The suite: our webd in each mode, and the halted application core.
pub fn ci_tests(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    let art = Artifacts::Ours { kernel: kernel.to_path_buf(), initrd: initrd.to_path_buf() };
    let mut total = TestTally::default();
    for mode in run::MODES {
        total.add(one_mode(&art, mode, 2));
    }
    // One vCPU: no application core; random mode's front-end sums itself (catches a default
    // placement or a webd that cannot start without an application core).
    total.add(one_mode(&art, "random", 1));
    total.add(halted_app(&art));
    total.add(two_frontends(&art));
    Ok(total)
}

/// Two front-end cores, so two RX channels (3 vCPUs: front-ends 0 and 1, application core 2):
/// the host opens one connection whose 4-tuple hash steers it to each channel, and every sum
/// must come back from each, with `/stats` counting each front-end's requests.
/// Catches: received frames put on the wrong channel's RX ring (e.g. every frame on channel
/// 0, not the channel `net_steer` picks: front-end 1 then answers nothing), which the
/// one-front-end boots above cannot see.
fn two_frontends(art: &Artifacts) -> TestTally {
    let mut t = Checks::new("webd, two front-end channels, 3 vCPUs".into());
    let mut b = WebdBoot { frontends: Some("0,1".into()), apps: Some("2".into()), ..small_boot(Sys::Ours, "locality", 3) };
    b.requests = Some(run::planned_sum_check(Sys::Ours, SMALL.count, 2, 3));
    let Some(r) = t.start(&b, art, "webd ready") else { return t.done() };
    if r.frontends.len() != 2 {
        t.record("two front-ends", Err(format!("webd reports front-ends {:?}", r.frontends)));
    }
    t.record("every file's sum from each front-end's channel, /stats agrees", r.check_sums().verdict());
    let o = r.finish(b.requests.unwrap_or(0), Duration::from_secs(60));
    t.record("stops by itself after --requests; init exits 0 and nothing leaked", stopped(&o, Sys::Ours, 4, 0));
    t.done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_sleeps_line_is_read_and_judged() {
        let good = "x\nwebd: app sleeps wake=on app1=7/5/0 app2=3/3/0\nwebd: app sleeps: app=naps/woken/late\n";
        assert_eq!(parse_app_sleeps(good), Some((true, vec![(1, 7, 5, 0), (2, 3, 3, 0)])));
        assert!(app_sleeps_checked(good).is_ok());
        // A request that waited out a sleep, a core never woken, wakes off, no line at all.
        assert!(app_sleeps_checked("webd: app sleeps wake=on app1=7/5/1\n").unwrap_err().contains("core 1: 1 of 7"));
        assert!(app_sleeps_checked("webd: app sleeps wake=on app1=4/0/0\n").unwrap_err().contains("never woken"));
        assert!(app_sleeps_checked("webd: app sleeps wake=off app1=4/2/0\n").is_err());
        assert!(app_sleeps_checked("webd: done\n").is_err());
        assert_eq!(parse_app_sleeps("webd: app sleeps wake=on app1=4/0\n"), None);
    }

    #[test]
    fn front_sums_are_read() {
        assert_eq!(parse_sums("webd: done requests=80 errors=0 front_sums=30 mode=random frontends=1 apps=1 fe0=9/80/0/0/100 app1=50/3276800"), Some((30, 50)));
        assert_eq!(parse_sums("webd: done requests=80 front_sums=0 app1=5/10 app2=7/14"), Some((0, 12)));
        // No front_sums word (a webd from before it), or a malformed application count.
        assert_eq!(parse_sums("webd: done requests=80 app1=50/3276800"), None);
        assert_eq!(parse_sums("webd: done front_sums=1 app1=x/3"), None);
    }

    #[test]
    fn front_sleeps_line_is_read_and_judged() {
        let good = "x\nwebd: front-end sleeps with a request out wake=on fe0=40/38/1\nwebd: front-end sleeps: fe=naps/woken/late\n";
        assert_eq!(parse_front_sleeps(good), Some((true, vec![(0, 40, 38, 1)])));
        assert!(front_sleeps_checked(good).is_ok());
        // Replies that woke nobody, a front-end never woken or never asleep, wakes off, no line.
        assert!(front_sleeps_checked("webd: front-end sleeps with a request out wake=on fe0=40/30/5\n").unwrap_err().contains("5 of 40"));
        assert!(front_sleeps_checked("webd: front-end sleeps with a request out wake=on fe0=4/0/0\n").unwrap_err().contains("never woken"));
        assert!(front_sleeps_checked("webd: front-end sleeps with a request out wake=on fe0=0/0/0\n").unwrap_err().contains("never slept"));
        assert!(front_sleeps_checked("webd: front-end sleeps with a request out wake=off fe0=4/2/0\n").is_err());
        assert!(front_sleeps_checked("webd: done\n").is_err());
    }
}
