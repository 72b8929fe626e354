//! busybox's own testsuite (`testsuite/` of Debian's busybox 1.35 source package, the same
//! tree the musl build comes from), run by busybox `sh` inside each system with the binary
//! under test: `cargo xtask busybox-tests [--system ours|linux|both] [--binary debian|musl]
//! [--only PATTERN]`.
//!
//! The guest gets the binary as `/bin/busybox` (and a copy as `/bin/sh`, the tests' `#!`),
//! the `.config` it was built with as `/bin/.config` (runtest reads it to skip what the binary
//! lacks: `$bindir` is `/bin`), the testsuite under `/tmp/testsuite`, and a driver script (the
//! shell's standard input) that runs `runtest` once per applet, each bounded by busybox's `timeout`, printing a marker line
//! before each. The host collects `PASS:`/`FAIL:`/`SKIPPED:`/`UNTESTED:` per test from the
//! program's standard output (the serial line it is copied over). Every boot is bounded too;
//! a boot that ends without its end marker gives its unfinished applets as failures.
//!
//! A test that passes on Linux and does not pass on ours (fails, is missing, or its applet
//! timed out) fails the comparison unless `linux/busybox-testsuite-differences.txt` lists it
//! (or its whole applet) with a reason; a listed entry whose tests all agree now fails as
//! stale, so the list holds only what is true.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::command::System;
use super::ExecRequest;
use crate::host::outcome::TestTally;

/// `cargo xtask busybox-tests`.
#[derive(clap::Args, Debug)]
#[command(about = "busybox's own testsuite (Debian's busybox 1.35 source package) run by busybox sh inside each system; \
ours compared with Linux: a test that passes on Linux and not on ours fails unless linux/busybox-testsuite-differences.txt \
lists it with its reason (docs/linux-exec.md)")]
pub struct BusyboxTestsArgs {
    /// Where to run it: both (and compare), ours or linux
    #[arg(long, value_name = "SYSTEM", value_parser = ["ours", "linux", "both"], default_value = "both")]
    pub system: String,
    /// Which binary: debian (busybox-static, unmodified), musl (built from the source package), or both
    #[arg(long, value_name = "BINARY", value_parser = ["debian", "musl", "both"], default_value = "debian")]
    pub binary: String,
    /// Only these applets (comma-separated; `NAME*` for a prefix)
    #[arg(long, value_name = "PATTERN")]
    pub only: Option<String>,
    /// Print every test's outcome
    #[arg(long)]
    pub verbose: bool,
    /// Run runtest with `-v`: a failing test prints its command and the diff of expected
    /// against actual output (see it with `--save`)
    #[arg(long)]
    pub runtest_verbose: bool,
    /// Write each boot's standard output, standard error and console to
    /// DIR/SYSTEM-BINARY.{stdout,stderr,console}
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// Each boot's deadline in seconds (default: 60 s and 30 s an applet, at most an hour;
    /// a full run on a loaded host needs more)
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Boot nothing: compare the standard output `--save DIR` kept of earlier runs
    /// (DIR/SYSTEM-BINARY.stdout), e.g. a Linux run and an ours run made apart
    #[arg(long, value_name = "DIR", conflicts_with = "save")]
    pub saved: Option<PathBuf>,
    /// Start no applet after SECS seconds of the guest's run: the applets left are reported
    /// as not run (on either system, they are left out of the comparison), so a run on a
    /// loaded host still ends with results instead of at its deadline
    #[arg(long, value_name = "SECS")]
    pub budget: Option<u64>,
}

/// How a run reports beyond its counts.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Every test's outcome printed.
    pub verbose: bool,
    /// `runtest -v`.
    pub runtest_verbose: bool,
    /// Where each boot's raw output goes.
    pub save: Option<PathBuf>,
    /// Each boot's deadline, when not the default.
    pub timeout: Option<Duration>,
    /// Read each run's standard output from here (`--saved`) instead of booting.
    pub saved: Option<PathBuf>,
    /// The guest's driver starts no applet after this long (`--budget`).
    pub budget: Option<Duration>,
}

pub fn main(a: BusyboxTestsArgs) -> Result<(), crate::host::outcome::Failure> {
    use crate::host::outcome::Failure;
    let systems = match a.system.as_str() {
        "ours" => vec![System::Ours],
        "linux" => vec![System::Linux],
        _ => vec![System::Linux, System::Ours],
    };
    let binaries = match a.binary.as_str() {
        "both" => vec![Binary::Debian, Binary::Musl],
        b => vec![Binary::parse(b).map_err(Failure::Usage)?],
    };
    let report = Report { verbose: a.verbose, runtest_verbose: a.runtest_verbose, save: a.save.clone(), timeout: a.timeout.map(Duration::from_secs), saved: a.saved.clone(), budget: a.budget.map(Duration::from_secs) };
    let t = run(&systems, &binaries, a.only.as_deref(), &report).map_err(Failure::Work)?;
    println!("busybox-tests: {} passed, {} failed, {} skipped (accepted differences)", t.passed, t.failed, t.skipped);
    if t.failed > 0 {
        return Err(Failure::Work(format!("{} check(s) failed", t.failed)));
    }
    Ok(())
}

/// Which busybox binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// Debian's busybox-static, unmodified (`progs::busybox_static`).
    Debian,
    /// busybox 1.35 built from the same source package with musl-gcc (`progs::busybox_musl`).
    Musl,
}

impl Binary {
    pub fn parse(s: &str) -> Result<Binary, String> {
        match s {
            "debian" => Ok(Binary::Debian),
            "musl" => Ok(Binary::Musl),
            _ => Err(format!("--binary {s}: one of debian, musl")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Binary::Debian => "debian",
            Binary::Musl => "musl",
        }
    }
    /// The binary and its `.config`.
    fn files(self) -> Result<(PathBuf, PathBuf), String> {
        match self {
            Binary::Debian => Ok((super::progs::busybox_static()?, super::progs::busybox_static_config()?)),
            Binary::Musl => {
                let b = super::progs::busybox_musl()?;
                let c = b.with_file_name(".config");
                Ok((b, c))
            }
        }
    }
}

/// The applets of the bounded run in `cargo xtask test`: text tools whose tests are quick on
/// Linux (a few seconds together) and cover the shell's pipes, redirections, command
/// substitution and file writes, and file tools whose old-style tests (`sh -x -e` scripts)
/// link, rename, remove, make directories, set times and compare files.
pub const CI_APPLETS: &[&str] = &[
    "basename", "cat", "cmp", "cut", "dirname", "du", "echo", "expr", "head", "ln", "mkdir", "mv", "printf", "rm", "rmdir", "sed", "sort", "touch", "tr", "uniq", "wc",
];

/// How one test came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// `SKIPPED:` or `UNTESTED:` (the binary lacks a feature the test needs).
    Skip,
    /// The applet's run did not finish (its `timeout`, or the boot's end) before this test
    /// reported: only recorded for an applet with no result at all.
    Unfinished,
    /// The driver did not start the applet: the run's time budget (`--budget`) was spent.
    NotRun,
}

/// The results of one boot: per applet, its tests in order (name, outcome).
pub type Results = BTreeMap<String, Vec<(String, Outcome)>>;

/// The driver script the guest's busybox `sh` runs: each applet's `runtest`, bounded.
/// With `links`, the script first links every applet of the binary into /bin (a busybox built
/// without FEATURE_SH_STANDALONE, the musl one, finds applets on PATH only; runtest itself
/// runs tr, grep, sed, ln before its own links are on PATH).
pub fn driver(applets: &[String], per_applet: Duration, links: bool, runtest_verbose: bool, budget: Option<Duration>) -> String {
    let mut s = String::from("#!/bin/sh\n# busybox's testsuite, one runtest per applet (written by cargo xtask busybox-tests)\ncd /tmp/testsuite || exit 99\n");
    if let Some(b) = budget {
        s.push_str(&format!("bbsuite_end=$(( $(busybox date +%s) + {} ))\n", b.as_secs()));
    }
    if links {
        // The applet list as runtest reads it: the words after "Currently defined functions:"
        // in the binary's usage text (this build has no `--list`).
        s.push_str("busybox 2>&1 | { while read -r l; do [ \"$l\" = 'Currently defined functions:' ] && break; done; while read -r l; do for a in $l; do a=${a%,}; [ -e \"/bin/$a\" ] || busybox ln -s busybox \"/bin/$a\"; done; done; }\n");
    }
    s.push_str("export bindir=/bin tsdir=/tmp/testsuite\n");
    let v = if runtest_verbose { "-v " } else { "" };
    for a in applets {
        let one = format!("echo 'bbsuite-applet {a}'\ntimeout {} sh ./runtest {v}'{a}' </dev/null 2>&1\necho \"bbsuite-done {a} $?\"\n", per_applet.as_secs());
        if budget.is_some() {
            s.push_str(&format!("if [ \"$(busybox date +%s)\" -lt \"$bbsuite_end\" ]; then\n{one}else\necho 'bbsuite-notrun {a}'\nfi\n"));
        } else {
            s.push_str(&one);
        }
    }
    s.push_str("echo bbsuite-end\n");
    s
}

/// Parse a boot's standard output: the per-test lines between the markers. An applet whose
/// marker was printed but whose `bbsuite-done` was not (the boot ended), or whose runtest
/// ended with no result and a failing status (killed by `timeout`: 124 or 143; or never
/// started: the shell could not fork), is `Unfinished`.
pub fn parse(out: &str, applets: &[String]) -> Results {
    let mut r: Results = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut finished: Vec<String> = Vec::new();
    for line in out.lines() {
        if let Some(a) = line.strip_prefix("bbsuite-applet ") {
            current = Some(a.trim().to_string());
            r.entry(a.trim().to_string()).or_default();
            continue;
        }
        if let Some(a) = line.strip_prefix("bbsuite-notrun ") {
            let a = a.trim().to_string();
            r.entry(a.clone()).or_default().push(("(not started: the run's time budget was spent)".into(), Outcome::NotRun));
            finished.push(a);
            current = None;
            continue;
        }
        if let Some(rest) = line.strip_prefix("bbsuite-done ") {
            let mut w = rest.split_whitespace();
            let a = w.next().unwrap_or_default().to_string();
            let st: i32 = w.next().and_then(|s| s.parse().ok()).unwrap_or(-1);
            let tests = r.entry(a.clone()).or_default();
            if tests.is_empty() && (st == 124 || st == 143) {
                tests.push(("(the whole applet: killed by its timeout)".into(), Outcome::Unfinished));
            } else if tests.is_empty() && st != 0 {
                // runtest did not run (the shell could not start it) or reported nothing.
                tests.push((format!("(the whole applet: no result, status {st})"), Outcome::Unfinished));
            }
            finished.push(a);
            current = None;
            continue;
        }
        let Some(a) = &current else { continue };
        let (outcome, name) = if let Some(n) = line.strip_prefix("PASS: ") {
            (Outcome::Pass, n)
        } else if let Some(n) = line.strip_prefix("FAIL: ") {
            (Outcome::Fail, n)
        } else if let Some(n) = line.strip_prefix("SKIPPED: ").or_else(|| line.strip_prefix("UNTESTED: ")) {
            (Outcome::Skip, n)
        } else {
            continue;
        };
        r.entry(a.clone()).or_default().push((name.trim_end().to_string(), outcome));
    }
    for a in applets {
        if !finished.contains(a) {
            let tests = r.entry(a.clone()).or_default();
            tests.push(("(the run ended before this applet finished)".into(), Outcome::Unfinished));
        }
    }
    r
}

/// The applets that have tests in the tree (a `NAME.tests` file or a `NAME/` directory of
/// old-style tests) and that `binary`'s `.config` builds, sorted.
pub fn tested_applets(testsuite: &Path, config: &str) -> Result<Vec<String>, String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(testsuite).map_err(|e| format!("{}: {e}", testsuite.display()))?.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        let applet = if let Some(a) = n.strip_suffix(".tests") {
            a.to_string()
        } else if e.path().is_dir() {
            n
        } else {
            continue;
        };
        // `all_sourcecode` checks busybox's sources (not in the image); `busybox` the binary's
        // own options (kept). An applet the config does not build is runtest's SKIP anyway;
        // leaving it out keeps the boots short.
        if applet.starts_with("all_") {
            continue;
        }
        let sym = format!("CONFIG_{}=y", applet.to_uppercase().replace(['.', '-'], "_"));
        if applet == "busybox" || config.lines().any(|l| l == sym) {
            v.push(applet);
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

/// The request that runs `applets` of busybox's testsuite with `binary`.
pub fn request(binary: Binary, applets: &[String], timeout: Duration, runtest_verbose: bool, budget: Option<Duration>) -> Result<ExecRequest, String> {
    let (bin, config) = binary.files()?;
    let tree = super::progs::busybox_source()?;
    let ts = tree.join("testsuite");
    let mut files = vec![("/bin/.config".to_string(), config), ("/bin/sh".to_string(), bin.clone())];
    let mut stack = vec![ts.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?.flatten() {
            let p = e.path();
            let ft = e.file_type().map_err(|e| format!("{}: {e}", p.display()))?;
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let rel = p.strip_prefix(&ts).map_err(|e| e.to_string())?.to_string_lossy().to_string();
                files.push((format!("/tmp/testsuite/{rel}"), p));
            }
        }
    }
    files.sort();
    // Generous: at a host load of about 20 (TCG), runtest of one text applet took more than
    // 120 s on both systems, and busybox's `timeout` kills runtest only: the test script it
    // started goes on and its results land under the next applet's marker. The boot's own
    // deadline bounds the whole run.
    let per_applet = Duration::from_secs(300);
    // The driver is the shell's standard input (`sh -s`): a script file would need the
    // shell to move its descriptor (fcntl F_DUPFD) before the first line runs; each runtest
    // gets /dev/null as its input so that nothing it starts reads the driver.
    Ok(ExecRequest {
        program: bin,
        args: vec!["sh".into(), "-s".into()],
        files,
        stdin: driver(applets, per_applet, binary == Binary::Musl, runtest_verbose, budget).into_bytes(),
        smp: 1,
        disk: None,
        net: None,
        timeout,
    })
}

/// Run `applets` on `system`; a boot that fails outright (timed out, no report) gives every
/// applet as unfinished, with the reason.
pub fn run_on(system: System, binary: Binary, applets: &[String], timeout: Duration, report: &Report) -> Result<(Results, Option<String>), String> {
    if let Some(dir) = &report.saved {
        let f = dir.join(format!("{}-{}.stdout", system.name(), binary.name()));
        let text = std::fs::read(&f).map_err(|e| format!("--saved: {}: {e}", f.display()))?;
        let text = String::from_utf8_lossy(&text);
        let why = (!text.contains("bbsuite-end")).then(|| format!("the saved run {} has no end marker", f.display()));
        return Ok((parse(&text, applets), why));
    }
    let req = request(binary, applets, timeout, report.runtest_verbose, report.budget)?;
    let result = system.run(&req);
    if let Some(dir) = &report.save {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let base = dir.join(format!("{}-{}", system.name(), binary.name()));
        let (o, e, c) = match &result {
            Ok(out) => (out.stdout.clone(), out.stderr.clone(), out.console.clone()),
            Err(e) => (Vec::new(), Vec::new(), e.clone()),
        };
        for (ext, bytes) in [("stdout", o), ("stderr", e), ("console", c.into_bytes())] {
            let f = base.with_extension(ext);
            std::fs::write(&f, bytes).map_err(|e| format!("{}: {e}", f.display()))?;
        }
    }
    match result {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            // A driver that never reached its end says why (the shell's message, its status).
            let why = (!text.contains("bbsuite-end")).then(|| {
                let tail = |b: &[u8]| String::from_utf8_lossy(b).lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join(" / ");
                format!("the driver ended with status {} before its end marker; stdout ended: {}; stderr ended: {}", out.status, tail(&out.stdout), tail(&out.stderr))
            });
            Ok((parse(&text, applets), why))
        }
        Err(e) => Ok((parse("", applets), Some(e))),
    }
}

/// Counts of one system's results.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub pass: usize,
    pub fail: usize,
    pub skip: usize,
    pub unfinished: usize,
    /// Applets not started (`--budget`).
    pub not_run: usize,
}

pub fn counts(r: &Results) -> Counts {
    let mut c = Counts::default();
    for t in r.values().flatten() {
        match t.1 {
            Outcome::Pass => c.pass += 1,
            Outcome::Fail => c.fail += 1,
            Outcome::Skip => c.skip += 1,
            Outcome::Unfinished => c.unfinished += 1,
            Outcome::NotRun => c.not_run += 1,
        }
    }
    c
}

/// One entry of the differences file: an applet (every test of it) or one test
/// (`APPLET: TEST NAME`), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub applet: String,
    /// `None`: the whole applet.
    pub test: Option<String>,
    pub reason: String,
    /// `Some`: the entry holds for this binary only (its group's reason starts with
    /// `(debian)` or `(musl)`); `None`: for both.
    pub binary: Option<Binary>,
}

impl Listed {
    fn holds_for(&self, binary: Binary) -> bool {
        self.binary.map_or(true, |b| b == binary)
    }
}

pub fn differences_file() -> PathBuf {
    crate::host::env::workspace_root().join("linux").join("busybox-testsuite-differences.txt")
}

/// Parse the differences file: `# comments`, `reason: TEXT` starting a group, then one entry
/// a line: `APPLET` or `APPLET: TEST NAME`. A reason that starts with `(debian)` or `(musl)`
/// makes its group's entries hold for that binary only (an applet whose tests all pass with
/// one binary and none run with the other). An entry before any reason, or listed twice for
/// the same binary, is an error.
pub fn parse_listed(text: &str) -> Result<Vec<Listed>, String> {
    let mut out: Vec<Listed> = Vec::new();
    for (at, reason, line) in super::conformance::reason_groups(text, &differences_file().display().to_string())? {
        let (applet, test) = match line.split_once(": ") {
            Some((a, t)) => (a.trim().to_string(), Some(t.trim().to_string())),
            None => (line.clone(), None),
        };
        if applet.is_empty() || applet.contains(char::is_whitespace) {
            return Err(format!("{at}: `{applet}` is not an applet name"));
        }
        let binary = if reason.starts_with("(debian) ") {
            Some(Binary::Debian)
        } else if reason.starts_with("(musl) ") {
            Some(Binary::Musl)
        } else {
            None
        };
        if out.iter().any(|l| l.applet == applet && l.test == test && (l.binary.is_none() || binary.is_none() || l.binary == binary)) {
            return Err(format!("{at}: `{line}` is listed twice"));
        }
        out.push(Listed { applet, test, reason, binary });
    }
    Ok(out)
}

/// The comparison of one binary's runs: per test that passed on Linux, whether ours passed,
/// and what the list says.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Passed on Linux.
    pub linux_pass: usize,
    /// Of those, passed on ours too.
    pub both_pass: usize,
    /// Passed on Linux, not on ours, listed (applet, test, reason).
    pub accepted: Vec<(String, String, String)>,
    /// Passed on Linux, not on ours, not listed.
    pub unlisted: Vec<(String, String)>,
    /// Listed entries that no longer differ (all their tests pass on ours, or none ran on
    /// Linux in this run's applets).
    pub stale: Vec<String>,
    /// Per listed entry: whether it excused a difference here (`used`), and whether its
    /// applet ran (`judged`); `run` combines them over both binaries, since one list serves
    /// both.
    pub used: Vec<bool>,
    pub judged: Vec<bool>,
    /// Applets left out: one of the systems did not start them (`--budget`).
    pub not_compared: Vec<String>,
}

/// Compare ours with Linux over `applets` of `binary`. A listed entry is judged only when its
/// applet ran with a binary it holds for.
pub fn compare(linux: &Results, ours: &Results, listed: &[Listed], applets: &[String], binary: Binary) -> Comparison {
    let mut c = Comparison::default();
    let mut used: Vec<bool> = vec![false; listed.len()];
    let not_run = |r: &Results, a: &String| r.get(a).is_some_and(|t| t.iter().any(|x| x.1 == Outcome::NotRun));
    for a in applets {
        if not_run(linux, a) || not_run(ours, a) {
            c.not_compared.push(a.clone());
            continue;
        }
        let ours_tests = ours.get(a).cloned().unwrap_or_default();
        for (name, o) in linux.get(a).into_iter().flatten() {
            if *o != Outcome::Pass {
                continue;
            }
            c.linux_pass += 1;
            if ours_tests.iter().any(|(n, oo)| n == name && *oo == Outcome::Pass) {
                c.both_pass += 1;
                continue;
            }
            let hit = listed
                .iter()
                .position(|l| l.holds_for(binary) && l.applet == *a && l.test.as_deref() == Some(name.as_str()))
                .or_else(|| listed.iter().position(|l| l.holds_for(binary) && l.applet == *a && l.test.is_none()));
            match hit {
                Some(i) => {
                    used[i] = true;
                    c.accepted.push((a.clone(), name.clone(), listed[i].reason.clone()));
                }
                None => c.unlisted.push((a.clone(), name.clone())),
            }
        }
    }
    c.judged = listed.iter().map(|l| l.holds_for(binary) && applets.contains(&l.applet) && !c.not_compared.contains(&l.applet)).collect();
    for ((l, u), j) in listed.iter().zip(&used).zip(&c.judged) {
        if !u && *j {
            c.stale.push(entry_name(l));
        }
    }
    c.used = used;
    c
}

fn entry_name(l: &Listed) -> String {
    match &l.test {
        Some(t) => format!("{}: {t}", l.applet),
        None => l.applet.clone(),
    }
}

fn print_results(system: &str, binary: Binary, r: &Results, err: &Option<String>) {
    let c = counts(r);
    println!(
        "busybox-tests {} ({} busybox): {} passed, {} failed, {} skipped, {} unfinished{}",
        system,
        binary.name(),
        c.pass,
        c.fail,
        c.skip,
        c.unfinished,
        if c.not_run > 0 { format!(", {} applets not started (time budget)", c.not_run) } else { String::new() }
    );
    if let Some(e) = err {
        let first: Vec<&str> = e.lines().take(6).collect();
        println!("  the run failed: {}", first.join("\n    "));
    }
}

/// Run and compare; the tally counts, per binary: each system's run that completed (a pass),
/// and the comparison (a pass, or a fail for unlisted or stale entries).
pub fn run(systems: &[System], binaries: &[Binary], only: Option<&str>, report: &Report) -> Result<TestTally, String> {
    let listed = parse_listed(&std::fs::read_to_string(differences_file()).map_err(|e| format!("{}: {e}", differences_file().display()))?)?;
    let mut tally = TestTally::default();
    // Over the binaries compared: which entries excused something, which were judged.
    let (mut any_used, mut any_judged) = (vec![false; listed.len()], vec![false; listed.len()]);
    let mut compared = false;
    if systems.contains(&System::Linux) && report.saved.is_none() {
        super::linux::prepare()?;
    }
    for &binary in binaries {
        let (_, config) = binary.files()?;
        let config_text = std::fs::read_to_string(&config).map_err(|e| format!("{}: {e}", config.display()))?;
        let ts = super::progs::busybox_source()?.join("testsuite");
        let mut applets = tested_applets(&ts, &config_text)?;
        if let Some(p) = only {
            let pats: Vec<&str> = p.split(',').collect();
            applets.retain(|a| pats.iter().any(|p| a == p || (p.ends_with('*') && a.starts_with(p.trim_end_matches('*')))));
        }
        if applets.is_empty() {
            return Err(format!("--only {}: no tested applet of the {} busybox matches", only.unwrap_or(""), binary.name()));
        }
        // One boot per system: both at once (each guest is one vCPU of TCG).
        // With a budget: the last applet may start just before it ends and run its full
        // timeout (300 s), and the boot and the links come before. 420 s was too little for
        // ours on a host at load 20: its boot was killed at budget + 420 s with its output
        // lost (a killed boot keeps nothing), so the margin is generous.
        let timeout = report.timeout.unwrap_or_else(|| match report.budget {
            Some(b) => b + Duration::from_secs(1200),
            None => Duration::from_secs(60 + 30 * applets.len() as u64).min(Duration::from_secs(3600)),
        });
        let runs: Vec<(System, Result<(Results, Option<String>), String>)> = std::thread::scope(|s| {
            let hs: Vec<_> = systems.iter().map(|&sys| { let applets = &applets; (sys, s.spawn(move || run_on(sys, binary, applets, timeout, report))) }).collect();
            hs.into_iter().map(|(sys, h)| (sys, h.join().unwrap_or_else(|_| Err("the run's thread panicked".into())))).collect()
        });
        let mut by_system: BTreeMap<&str, Results> = BTreeMap::new();
        for (sys, r) in runs {
            let (res, err) = r?;
            print_results(sys.name(), binary, &res, &err);
            if report.verbose {
                for (a, tests) in &res {
                    for (n, o) in tests {
                        println!("    {} {a}: {n}: {o:?}", sys.name());
                    }
                }
            }
            // Linux is the oracle: its run must complete (no applet unfinished).
            if sys == System::Linux {
                let c = counts(&res);
                if err.is_some() || c.unfinished > 0 || c.pass == 0 {
                    println!("  busybox-tests linux ({}): FAILED: the oracle's run did not complete", binary.name());
                    tally.add(TestTally::FAIL);
                } else {
                    tally.add(TestTally::PASS);
                }
            }
            by_system.insert(sys.name(), res);
        }
        if let (Some(l), Some(o)) = (by_system.get("linux"), by_system.get("ours")) {
            let c = compare(l, o, &listed, &applets, binary);
            let pct = if c.linux_pass == 0 { 0.0 } else { 100.0 * c.both_pass as f64 / c.linux_pass as f64 };
            if !c.not_compared.is_empty() {
                println!("  not compared ({} applets not started on one of the systems, time budget): {}", c.not_compared.len(), c.not_compared.join(" "));
            }
            println!(
                "busybox-tests ({} busybox, {} applets): ours passes {} of the {} tests that pass on Linux ({pct:.1} %); {} listed differences, {} unlisted",
                binary.name(),
                applets.len() - c.not_compared.len(),
                c.both_pass,
                c.linux_pass,
                c.accepted.len(),
                c.unlisted.len(),
            );
            compared = true;
            for i in 0..listed.len() {
                any_used[i] |= c.used[i];
                any_judged[i] |= c.judged[i];
            }
            let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, _, r) in &c.accepted {
                *by_reason.entry(r.as_str()).or_default() += 1;
            }
            for (r, n) in &by_reason {
                println!("  listed: {n} tests: {r}");
            }
            for (a, t) in &c.unlisted {
                println!("  FAILED: {a}: {t}: passes on Linux, not on ours, and is not listed in {}", differences_file().display());
            }
            if c.unlisted.is_empty() {
                tally.add(TestTally::PASS);
            } else {
                tally.add(TestTally::FAIL);
            }
            if !c.accepted.is_empty() {
                tally.add(TestTally { passed: 0, failed: 0, skipped: 1 });
            }
        }
    }
    // A listed entry whose applet ran with some binary and that excused nothing with any is
    // stale.
    if compared {
        let stale: Vec<String> = listed.iter().enumerate().filter(|(i, _)| any_judged[*i] && !any_used[*i]).map(|(_, l)| entry_name(l)).collect();
        for s in &stale {
            println!("  FAILED: `{s}` is listed in {} but no longer differs: remove it", differences_file().display());
        }
        tally.add(if stale.is_empty() { TestTally::PASS } else { TestTally::FAIL });
    }
    Ok(tally)
}

/// The bounded part for `cargo xtask test`: [`CI_APPLETS`] of the Debian binary on both
/// systems, and beside them (at once) busybox as the first program of a boot
/// ([`init_check`]).
pub fn ci() -> Result<TestTally, String> {
    std::thread::scope(|s| {
        let init = s.spawn(init_check);
        let mut t = run(&[System::Linux, System::Ours], &[Binary::Debian], Some(&CI_APPLETS.join(",")), &Report::default())?;
        match init.join().unwrap_or_else(|_| Err("the check's thread panicked".into())) {
            Ok(()) => {
                println!("busybox-tests: busybox sh as the first program (init=/bin/busybox -- sh, input on the console): ok");
                t.add(TestTally::PASS);
            }
            Err(e) => {
                println!("  FAILED: busybox sh as the first program (init=/bin/busybox -- sh): {e}");
                t.add(TestTally::FAIL);
            }
        }
        Ok(t)
    })
}

/// What [`init_check`] types: the shell must expand and run it (arithmetic, a command
/// substitution that forks), and exit with 7.
const INIT_INPUT: &str = "echo bb-init-$((6*7)) $(basename /a/b/leaf); exit 7\n";

/// busybox as the first program of a boot, as a user starts it (docs/linux-exec.md): `cargo
/// xtask run --smp 1 --disk IMG --cmdline "init=/bin/busybox -- sh"` (this xtask binary) with
/// [`INIT_INPUT`] piped in, on an image holding Debian's binary as /bin/busybox. The kernel
/// runs it with the Linux runtime, whose standard input is the console: the shell must print
/// `bb-init-42 leaf` (not in the input it echoes), exit with 7, and the runtime's leak check
/// must pass.
pub fn init_check() -> Result<(), String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let bin = super::progs::busybox_static()?;
    let dir = crate::host::env::target_dir().join("linux-exec").join(format!("init-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("root");
    for d in ["bin", "tmp"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| format!("{}: {e}", root.join(d).display()))?;
    }
    std::fs::copy(&bin, root.join("bin/busybox")).map_err(|e| format!("{}: {e}", bin.display()))?;
    let img = dir.join("root.img");
    let result = (|| {
        crate::host::ext2img::mkimage(&root, &img, None)?;
        let exe = std::env::current_exe().map_err(|e| format!("this xtask binary: {e}"))?;
        let mut child = Command::new(exe)
            .args(["run", "--smp", "1", "--timeout", "240", "--cmdline", "init=/bin/busybox -- sh", "--disk"])
            .arg(&img)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `xtask run`: {e}"))?;
        // `run` reads its input to the end before it sends it: closed here.
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(INIT_INPUT.as_bytes()).map_err(|e| format!("writing to `xtask run`: {e}"))?;
        drop(stdin);
        let out = child.wait_with_output().map_err(|e| format!("`xtask run`: {e}"))?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        judge_init(&text)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// [`init_check`]'s verdict on the boot's output.
fn judge_init(text: &str) -> Result<(), String> {
    let tail = || text.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n    ");
    let line_is = |want: &str| text.lines().any(|l| l.trim_end() == want);
    if !line_is("bb-init-42 leaf") {
        return Err(format!("the shell did not print `bb-init-42 leaf`; the output ended:\n    {}", tail()));
    }
    if !text.contains("init: `linuxrt` exited with code 7") {
        return Err(format!("busybox did not exit with the status 7 it was told; the output ended:\n    {}", tail()));
    }
    if !text.lines().any(|l| l.starts_with("linuxrt: leak check") && l.trim_end().ends_with(": ok")) {
        return Err(format!("the runtime's leak check did not pass; the output ended:\n    {}", tail()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn results_are_parsed_per_applet() {
        let out = "noise\nbbsuite-applet cat\nPASS: cat-prints-a-file\nFAIL: cat-n\nbbsuite-done cat 1\n\
                   bbsuite-applet sed\nPASS: sed n\nSKIPPED: sed -z\nUNTESTED: sed-x\nPASS: not-here\nbbsuite-done sed 0\n\
                   bbsuite-applet wc\nbbsuite-done wc 124\nbbsuite-applet tr\nPASS: tr 1\n";
        let r = parse(out, &v(&["cat", "sed", "wc", "tr", "xargs"]));
        // An applet whose runtest never started (no fork): no result, its status.
        let nofork = parse("bbsuite-applet cut\nbbsuite-done cut 2\nbbsuite-applet od\nbbsuite-done od 0\n", &v(&["cut", "od"]));
        assert_eq!(nofork["cut"], vec![("(the whole applet: no result, status 2)".to_string(), Outcome::Unfinished)]);
        assert!(nofork["od"].is_empty());
        assert_eq!(r["cat"], vec![("cat-prints-a-file".to_string(), Outcome::Pass), ("cat-n".to_string(), Outcome::Fail)]);
        assert_eq!(r["sed"].iter().filter(|t| t.1 == Outcome::Skip).count(), 2);
        assert_eq!(r["sed"].len(), 4);
        // Killed by its timeout before any result; the boot ended inside tr; xargs never began.
        assert_eq!(r["wc"], vec![("(the whole applet: killed by its timeout)".to_string(), Outcome::Unfinished)]);
        assert_eq!(r["tr"].last().unwrap().1, Outcome::Unfinished);
        assert_eq!(r["xargs"].len(), 1);
        assert_eq!(counts(&r), Counts { pass: 4, fail: 1, skip: 2, unfinished: 3, not_run: 0 });
        // A result line outside any applet's markers is not counted.
        assert!(parse("PASS: stray\n", &[]).is_empty());
    }

    #[test]
    fn a_difference_fails_unless_listed_and_a_stale_entry_fails() {
        let linux = parse("bbsuite-applet cat\nPASS: a\nPASS: b\nFAIL: c\nbbsuite-done cat 1\nbbsuite-applet sed\nPASS: s\nbbsuite-done sed 0\n", &v(&["cat", "sed"]));
        let ours = parse("bbsuite-applet cat\nPASS: a\nFAIL: b\nPASS: c\nbbsuite-done cat 1\nbbsuite-applet sed\nbbsuite-done sed 124\n", &v(&["cat", "sed"]));
        let apps = v(&["cat", "sed"]);
        // Nothing listed: cat's b and sed's s are unlisted differences; c (fails on Linux) is
        // not compared.
        let c = compare(&linux, &ours, &[], &apps, Binary::Debian);
        assert_eq!((c.linux_pass, c.both_pass), (3, 1));
        assert_eq!(c.unlisted, vec![("cat".to_string(), "b".to_string()), ("sed".to_string(), "s".to_string())]);
        let listed = parse_listed("reason: no fork yet\nsed\nreason: one test\ncat: b\n").unwrap();
        let c = compare(&linux, &ours, &listed, &apps, Binary::Debian);
        assert!(c.unlisted.is_empty() && c.stale.is_empty(), "{c:?}");
        assert_eq!(c.accepted.len(), 2);
        // A listed test that passes on ours now is stale; an entry for an applet that did not
        // run is not judged.
        let listed = parse_listed("reason: r\ncat: a\ncat: b\nsed\ngrep\n").unwrap();
        let c = compare(&linux, &ours, &listed, &apps, Binary::Debian);
        assert_eq!(c.stale, vec!["cat: a".to_string()]);
        // An entry for the other binary neither excuses a difference nor is judged; one for
        // this binary does both.
        let listed = parse_listed("reason: (musl) nothing runs\nsed\ncat: b\nreason: (debian) r\ncat: a\n").unwrap();
        let c = compare(&linux, &ours, &listed, &apps, Binary::Debian);
        assert_eq!(c.unlisted, vec![("cat".to_string(), "b".to_string()), ("sed".to_string(), "s".to_string())]);
        assert_eq!(c.judged, vec![false, false, true]);
        assert_eq!(c.stale, vec!["cat: a".to_string()]);
        let c = compare(&linux, &ours, &listed, &apps, Binary::Musl);
        assert!(c.unlisted.is_empty() && c.stale.is_empty(), "{c:?}");
        // An applet one system did not start (its time budget) is not compared, and the
        // entries for it are not judged.
        let ours_cut = parse("bbsuite-applet cat\nPASS: a\nPASS: b\nPASS: c\nbbsuite-done cat 0\nbbsuite-notrun sed\n", &apps);
        assert_eq!(counts(&ours_cut).not_run, 1);
        let listed = parse_listed("reason: r\nsed\n").unwrap();
        let c = compare(&linux, &ours_cut, &listed, &apps, Binary::Debian);
        assert_eq!(c.not_compared, vec!["sed".to_string()]);
        assert_eq!((c.linux_pass, c.both_pass), (2, 2));
        assert!(c.unlisted.is_empty() && c.stale.is_empty() && c.judged == vec![false], "{c:?}");
    }

    #[test]
    fn the_list_refuses_bad_lines() {
        assert!(parse_listed("cat\n").unwrap_err().contains("before any"));
        assert!(parse_listed("reason:\n").unwrap_err().contains("no text"));
        assert!(parse_listed("reason: r\ncat\ncat\n").unwrap_err().contains("twice"));
        assert!(parse_listed("reason: r\ncat\nreason: (musl) m\ncat\n").unwrap_err().contains("twice"));
        assert_eq!(parse_listed("reason: (debian) d\ncat\nreason: (musl) m\ncat\n").unwrap()[1].binary, Some(Binary::Musl));
        assert!(parse_listed("reason: r\nbad name\n").unwrap_err().contains("not an applet"));
        assert_eq!(parse_listed("# c\n\nreason: r\nsed: sed n (x)\n").unwrap()[0].test.as_deref(), Some("sed n (x)"));
    }

    #[test]
    fn the_init_check_judges_output_and_status() {
        let good = "init: starting `linuxrt` on core 0\n/ # echo bb-init-$((6*7)) $(basename /a/b/leaf); exit 7\nbb-init-42 leaf\n\
                    linuxrt: leak check (run 1, first): kernel objects 17 -> 17, free pages 1 -> 1 (+0 in the buffer cache): ok\n[0] init: `linuxrt` exited with code 7\n";
        judge_init(good).unwrap();
        // Only the echoed input (the shell read nothing or printed nothing): a failure.
        assert!(judge_init(&good.replace("bb-init-42 leaf\n", "")).unwrap_err().contains("did not print"));
        assert!(judge_init(&good.replace("code 7", "code 0")).unwrap_err().contains("status 7"));
        assert!(judge_init(&good.replace(": ok\n", ": LEAK\n")).unwrap_err().contains("leak check"));
        assert!(INIT_INPUT.ends_with('\n') && !INIT_INPUT.contains("bb-init-42"));
    }

    #[test]
    fn the_repository_s_list_parses() {
        let text = std::fs::read_to_string(differences_file()).unwrap();
        parse_listed(&text).unwrap();
    }

    #[test]
    fn the_driver_bounds_each_applet() {
        let s = driver(&v(&["cat", "sed"]), Duration::from_secs(30), false, false, None);
        assert!(!s.contains("--list"));
        assert!(!s.contains("bbsuite_end"));
        assert!(driver(&v(&["cat"]), Duration::from_secs(30), true, false, None).contains("busybox ln -s busybox"));
        assert!(driver(&v(&["cat"]), Duration::from_secs(30), false, true, None).contains("sh ./runtest -v 'cat'"));
        let b = driver(&v(&["cat"]), Duration::from_secs(30), false, false, Some(Duration::from_secs(600)));
        assert!(b.contains("bbsuite_end=$(( $(busybox date +%s) + 600 ))"));
        assert!(b.contains("then\necho 'bbsuite-applet cat'") && b.contains("else\necho 'bbsuite-notrun cat'\nfi"));
        assert!(!s.contains("ln -s"));
        assert!(s.contains("timeout 30 sh ./runtest 'cat'"));
        assert!(s.contains("echo \"bbsuite-done sed $?\""));
        assert!(s.trim_end().ends_with("echo bbsuite-end"));
    }
}
