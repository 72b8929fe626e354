//! `cargo xtask fuzz` and `cargo xtask soak`: boot the kernel with `init=fuzz` (the system-call
//! fuzzer, user/apps/src/bin/fuzz.rs), judge the run, and on any failure print the seed and
//! the command that replays it. See docs/fuzz.md.
//!
//! A run passes when the program printed its `fuzz: done` line with no failure, the kernel
//! neither panicked nor took an exception, QEMU did not time out, every core answered an
//! active message, and free pages, kernel heap objects and kernel objects came back to their
//! values before init (the kernel's `init:` lines); and it did the work asked: at least the
//! calls asked for, and with `--inject`, at least one failure injected inside a system call
//! (`FuzzOpts::min_injected`). A run that fuzzed nothing never passes.

use crate::host::args::{at_least_one, number};
use crate::host::qemu::{boot_captured, BootOutput};
use crate::host::vm::{BootMedium, VmConfig};
use crate::host::outcome::TestTally;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `abi::EXIT_FAULT_BASE`: a context killed by exception vector V exits with this + V.
const EXIT_FAULT_BASE: u64 = 0x1_0000;


/// One fuzz run's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FuzzOpts {
    pub calls: u64,
    pub seed: u64,
    pub smp: u32,
    pub inject: Option<String>,
    /// Inject from before the program starts (`inject_from=boot`), testing its start-up,
    /// instead of from the end of the fuzzer's set-up.
    pub inject_from_boot: bool,
    /// With `inject`: fewer failures injected inside system calls than this fails the run.
    pub min_injected: u64,
    pub planted_bug: bool,
    pub trace: bool,
    pub timeout: Option<Duration>,
    /// Boot with the network card, so the fuzzer also makes virtual NICs over it and feeds
    /// their calls bad arguments (docs/net.md).
    pub net: bool,
    /// Attach a blank 4 MiB scratch disk (`--scratch-disk`): the fuzzer then makes block
    /// device objects and disk requests too (abi::blk), writing anywhere on it.
    pub scratch_disk: bool,
}

impl Default for FuzzOpts {
    fn default() -> Self {
        Self {
            calls: 100_000,
            seed: 1,
            smp: 4,
            inject: None,
            inject_from_boot: false,
            min_injected: 1,
            planted_bug: false,
            trace: false,
            timeout: None,
            net: false,
            scratch_disk: false,
        }
    }
}

/// A blank scratch disk for the fuzzer (recreated each run).
fn scratch_disk() -> Result<PathBuf, String> {
    let p = crate::host::env::target_dir().join("fuzz-scratch-disk.img");
    let f = std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    f.set_len(4 << 20).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(p)
}

/// Check an injection spec the way the kernel parses it (`alloc:1/N`, `alloc:seed:S:P`), so a
/// typo is a one-line error here and not a silently uninjected run.
pub fn check_inject(spec: &str) -> Result<(), String> {
    let bad = || format!("--inject: `{spec}` is not alloc:1/N or alloc:seed:S:P");
    let rest = spec.strip_prefix("alloc:").ok_or_else(bad)?;
    if let Some(n) = rest.strip_prefix("1/") {
        let n: u64 = n.parse().map_err(|_| bad())?;
        if n == 0 {
            return Err("--inject: N in alloc:1/N must be at least 1".into());
        }
        return Ok(());
    }
    let mut parts = rest.strip_prefix("seed:").ok_or_else(bad)?.split(':');
    let _s: u64 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let p: u64 = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    if parts.next().is_some() {
        return Err(bad());
    }
    if p > 100 {
        return Err("--inject: P in alloc:seed:S:P is a percentage, 0..=100".into());
    }
    Ok(())
}

impl From<crate::fuzz::FuzzArgs> for FuzzOpts {
    fn from(a: crate::fuzz::FuzzArgs) -> FuzzOpts {
        FuzzOpts {
            calls: a.calls,
            seed: a.seed,
            smp: a.smp,
            inject: a.inject,
            inject_from_boot: a.inject_from == "boot",
            min_injected: 1,
            planted_bug: a.planted_bug,
            trace: a.trace,
            timeout: a.timeout.map(|s| Duration::from_secs(s.max(1))),
            net: a.net,
            scratch_disk: a.scratch_disk,
        }
    }
}

/// `cargo xtask fuzz ARGS` as cli.rs declares it (one-line errors).
#[cfg(test)]
pub fn parse_opts(args: &[String]) -> Result<FuzzOpts, String> {
    crate::host::args::parse_args::<FuzzArgs>("fuzz", args).map(Into::into)
}

impl FuzzOpts {
    /// The command that runs exactly this configuration again.
    pub fn replay_command(&self) -> String {
        let mut s = format!("cargo xtask fuzz --seed {} --calls {} --smp {}", self.seed, self.calls, self.smp);
        if let Some(i) = &self.inject {
            s += &format!(" --inject {i}");
            if self.inject_from_boot {
                s += " --inject-from boot";
            }
        }
        if self.planted_bug {
            s += " --planted-bug";
        }
        if self.net {
            s += " --net";
        }
        s
    }

    pub fn cmdline(&self) -> String {
        let mut s = String::new();
        let from = if self.inject_from_boot { "boot" } else { "program" };
        if let Some(i) = &self.inject {
            s += &format!("inject={i} inject_from={from} ");
        }
        s += &format!("init=fuzz -- seed={} calls={}", self.seed, self.calls);
        if let Some(i) = &self.inject {
            s += &format!(" inject={i} inject_from={from}");
        }
        if self.trace {
            s += " trace";
        }
        s
    }

    /// A limit generous for TCG on a busy 2-core host: start-up plus a slow call rate. More
    /// vCPUs than host cores share them, and their cross-core work (TLB shootdowns, active
    /// messages) waits on vCPUs that are not running, so the limit grows with the vCPU count:
    /// 100,000 calls at 8 vCPUs took 30 s to 3 min on a 2-core host with a load average of
    /// 15-20 (the old limit, 90 s, killed such runs as hangs).
    pub fn effective_timeout(&self) -> Duration {
        self.timeout.unwrap_or_else(|| {
            let rate = if self.trace { 100 } else { 1_000 };
            Duration::from_secs(60 + self.calls * self.smp.max(2) as u64 / (2 * rate))
        })
    }
}

/// What a run showed.
#[derive(Debug, Default)]
pub struct Verdict {
    pub passed: bool,
    /// Why it failed (one line), or empty.
    pub reason: String,
    /// The program's `fuzz: done` line.
    pub done_line: Option<String>,
    /// The kernel's invariant lines after init exited.
    pub invariants: Vec<String>,
    pub calls: u64,
    pub calls_per_s: u64,
    pub per_vcpu: u64,
    pub error_paths: u64,
    /// Lines describing the failure: the program's failure report or the kernel's crash.
    pub evidence: Vec<String>,
    pub killed_by_injection: bool,
    /// The program's `fuzz: cost` lines (where the time went).
    pub costs: Vec<String>,
    /// The (call, error) pairs the run reached, from its `fuzz: paths` lines.
    pub error_pairs: Vec<(String, String)>,
    /// Failures injected inside system calls while the program fuzzed (`injected=`).
    pub injected: u64,
    /// The same by system call, from the program's `fuzz: injected CALL: N` lines.
    pub injected_by_call: Vec<(String, u64)>,
}

fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// A run that passed `judge` but did less than asked fails: fewer calls than `o.calls` (the
/// program stopped early or counted wrong), or with injection fewer than `o.min_injected`
/// failures injected inside system calls (injection never reached the fuzzed calls).
pub fn require_work(v: &mut Verdict, o: &FuzzOpts) {
    if !v.passed {
        return;
    }
    if v.calls < o.calls {
        v.passed = false;
        v.reason = format!("fuzzed too little: {} calls made, {} asked", v.calls, o.calls);
    } else if o.inject.is_some() && v.injected_by_call.iter().map(|(_, n)| n).sum::<u64>() != v.injected {
        // Every failure injected from the command line is inside some system call, so the
        // per-call counts add up to the total (else the kernel lost track of the call).
        v.passed = false;
        v.reason = format!(
            "injection report inconsistent: {} failures injected, {} counted against system calls",
            v.injected,
            v.injected_by_call.iter().map(|(_, n)| n).sum::<u64>()
        );
    } else if o.inject.is_some() && v.injected < o.min_injected {
        v.passed = false;
        v.reason = format!(
            "injection reached too little: {} failures injected inside system calls, at least {} required{}",
            v.injected,
            o.min_injected,
            if v.injected == 0 && !o.inject_from_boot { " (was injection armed? see the program's `armed=`)" } else { "" }
        );
    }
}

/// Judge a fuzz boot from its serial output and exit status.
pub fn judge(serial: &str, timed_out: bool, exit_ok: bool, injecting: bool, smp: u32) -> Verdict {
    let mut v = Verdict::default();
    let lines: Vec<&str> = serial.lines().collect();
    v.done_line = lines.iter().find(|l| l.contains("fuzz: done")).map(|l| l.trim().to_string());
    if let Some(d) = &v.done_line {
        v.calls = field(d, "calls").unwrap_or(0);
        v.calls_per_s = field(d, "calls_per_s").unwrap_or(0);
        v.per_vcpu = field(d, "per_vcpu").unwrap_or(0);
        v.error_paths = field(d, "error_paths").unwrap_or(0);
        v.injected = field(d, "injected").unwrap_or(0);
    }
    // `fuzz: injected CALL: N` (one line per call that met an injected failure).
    for l in &lines {
        let Some(rest) = l.split("fuzz: injected ").nth(1) else { continue };
        let Some((call, n)) = rest.rsplit_once(": ") else { continue };
        if let Ok(n) = n.trim().parse() {
            v.injected_by_call.push((call.to_string(), n));
        }
    }
    v.costs = lines.iter().filter(|l| l.contains("fuzz: cost")).map(|l| l.trim().to_string()).collect();
    // `fuzz: paths CALL: ok, ERROR, ...` (one line per call).
    for l in &lines {
        let Some(rest) = l.split("fuzz: paths ").nth(1) else { continue };
        let Some((call, results)) = rest.split_once(": ") else { continue };
        for r in results.split(", ").map(str::trim).filter(|r| !r.is_empty() && *r != "ok") {
            v.error_pairs.push((call.to_string(), r.to_string()));
        }
    }
    v.invariants = lines.iter().filter(|l| l.contains("init: ") && !l.contains("init: starting")).map(|l| l.trim().to_string()).collect();
    let crash = lines.iter().position(|l| l.contains("KERNEL PANIC") || l.contains("] EXCEPTION "));
    let program_failure = lines.iter().position(|l| l.contains("fuzz: FAILED"));
    let leak = lines.iter().any(|l| l.contains("init: LEAK"));
    let exit_line = lines.iter().find(|l| l.contains("exited with code")).map(|l| l.trim().to_string());
    let answered = lines.iter().find(|l| l.contains("cores answered an active message"));
    let all_answered = answered.is_some_and(|l| l.contains(&format!("{smp}/{smp} cores answered")));
    let exit_code = exit_line.as_ref().and_then(|l| l.rsplit("code ").next()?.trim().parse::<u64>().ok());
    // The library OS gives up at start-up when injection takes its first pages, and exits
    // with code 1.
    let startup_oom = lines.iter().any(|l| l.contains("libos: start-up failed: out of memory")) && exit_code == Some(1);
    // A demand-zero page fault the kernel had no page for (EXIT_FAULT_BASE + 14).
    let killed = exit_code == Some(EXIT_FAULT_BASE + 14);
    // The program ended on an invalid opcode (EXIT_FAULT_BASE + 6): a Rust abort, or libos
    // `exit` failing to halt the context and falling back to `ud2`. Never allowed: whatever
    // the program meets (NoMemory included), it must end with the code it chose.
    let exit_fault = lines.iter().find(|l| l.contains("libos: exit(") && l.contains("faulting instead"));
    let aborted = exit_code == Some(EXIT_FAULT_BASE + 6);
    if let Some(i) = crash {
        let l = lines[i];
        let at = l.find("KERNEL PANIC").or_else(|| l.find("EXCEPTION")).unwrap_or(0);
        let at = l[..at].rfind('[').filter(|&b| at - b <= 6).unwrap_or(at);
        v.reason = format!("kernel crash: {}", l[at..].trim());
        v.evidence = lines[i.saturating_sub(20)..(i + 30).min(lines.len())].iter().map(|l| l.to_string()).collect();
    } else if let Some(i) = program_failure {
        v.reason = format!("the fuzzer saw an undocumented result: {}", lines[i].trim());
        v.evidence = lines[i..].iter().take_while(|l| !l.contains("fuzz: paths")).take(40).map(|l| l.to_string()).collect();
    } else if timed_out {
        v.reason = "timed out (a hang, or a much slower host than expected)".into();
        v.evidence = lines.iter().rev().take(15).rev().map(|l| l.to_string()).collect();
    } else if leak {
        v.reason = "leak: pages or objects did not come back after init exited".into();
    } else if !all_answered {
        v.reason = format!("not every core answered an active message: {}", answered.map(|l| l.trim()).unwrap_or("(no line)"));
    } else if aborted || exit_fault.is_some() {
        v.reason = format!(
            "the program ended with an invalid-opcode fault (an abort, or libos exit falling back to ud2): {}",
            exit_fault.map(|l| l.trim()).or(exit_line.as_deref()).unwrap_or("no exit line")
        );
        v.evidence = lines.iter().rev().take(15).rev().map(|l| l.to_string()).collect();
    } else if (killed || startup_oom) && injecting && v.done_line.is_none() {
        // Injection stopped the program before it fuzzed (core 0 took a demand-zero fault the
        // kernel had no page for, or the library OS's start-up gave up on NoMemory), and it
        // ended cleanly. Still a failure: nothing was fuzzed. `exit_without_memory` expects
        // exactly this.
        v.killed_by_injection = true;
        v.reason = format!(
            "fuzzed nothing: injection stopped the program before it fuzzed ({}); nothing leaked",
            if startup_oom { "the library OS's start-up ran out of memory" } else { "core 0 got no page for a fault" }
        );
    } else if v.done_line.is_none() {
        v.reason = format!("the fuzzer did not finish ({})", exit_line.as_deref().unwrap_or("no exit line"));
        v.evidence = lines.iter().rev().take(15).rev().map(|l| l.to_string()).collect();
    } else if !exit_ok {
        v.reason = format!("kernel exit status not success ({})", exit_line.as_deref().unwrap_or("no exit line"));
        v.evidence = lines.iter().rev().take(15).rev().map(|l| l.to_string()).collect();
    } else {
        v.passed = true;
    }
    v
}

fn build(planted_bug: bool) -> Result<(PathBuf, PathBuf), String> {
    let kernel = if planted_bug { crate::host::env::build_kernel_with(&["planted-bug"])? } else { crate::host::env::build_kernel()? };
    let initrd = crate::host::user::build_initrd()?;
    crate::host::env::ensure_qemu()?;
    Ok((kernel, initrd))
}

/// Boot one fuzz run and judge it.
pub fn run_once(kernel: &Path, initrd: &Path, o: &FuzzOpts, echo: bool) -> Result<(Verdict, BootOutput), String> {
    let cfg = VmConfig {
        smp: o.smp,
        mem_mib: 512,
        cmdline: o.cmdline(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(o.effective_timeout()),
        net: if o.net { Some(crate::host::vm::NetConfig::service()?) } else { None },
        disk: if o.scratch_disk { Some(scratch_disk()?) } else { None },
        ..Default::default()
    };
    let out = boot_captured(&cfg, None, echo)?;
    let mut v = judge(&out.serial, out.timed_out, out.kernel_exit_ok(), o.inject.is_some(), o.smp);
    if !v.passed && v.done_line.is_none() && v.evidence.is_empty() {
        // The guest printed none of the lines the verdict looks for: say how QEMU ended (an
        // exit code the kernel did not choose, or none: killed by a signal) and what the
        // serial port had, so a run that died before or inside the fuzzer can be told apart.
        v.reason += &format!(
            " [QEMU exit code {}, {} serial lines, {:.1} s]",
            out.exit_code.map_or("none (a signal)".to_string(), |c| c.to_string()),
            out.serial.lines().count(),
            out.elapsed.as_secs_f64()
        );
        v.evidence = out.serial.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().map(|l| l.to_string()).collect();
        v.evidence.extend(out.stderr.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev().map(|l| format!("QEMU stderr: {l}")));
    }
    require_work(&mut v, o);
    Ok((v, out))
}

/// Print a run's report; returns Err with the one-line reason if it failed.
pub fn report(o: &FuzzOpts, v: &Verdict, out: &BootOutput) -> Result<(), String> {
    let secs = out.elapsed.as_secs_f64();
    if let Some(d) = &v.done_line {
        println!("   {d}");
    }
    for l in v.costs.iter().chain(&v.invariants) {
        println!("   {l}");
    }
    if v.calls > 0 {
        println!(
            "   {} calls on {} vCPUs: {} calls/s in the guest ({} per vCPU), {} distinct (call, error) paths; boot to exit {:.1} s",
            v.calls, o.smp, v.calls_per_s, v.per_vcpu, v.error_paths, secs
        );
    }
    if o.inject.is_some() && v.done_line.is_some() {
        println!("   {}", injection_summary(v));
    }
    if v.passed {
        return Ok(());
    }
    // With the planted-bug kernel a crash is the expected finding, not a test failure.
    println!("   {}: {}", if o.planted_bug { "found" } else { "FAILED" }, v.reason);
    for l in &v.evidence {
        println!("   | {l}");
    }
    println!("   seed: {}", o.seed);
    println!("   replay: {}", o.replay_command());
    if v.reason.starts_with("kernel crash") && !o.trace {
        println!("   (add --trace to print every call before it is issued and see the one that crashed the kernel)");
    }
    Err(format!("fuzz failed with seed {}: {}", o.seed, v.reason))
}

/// What injection reached, in one line: the failures injected inside system calls by call, and
/// the (call, error) paths the run saw (`NoMemory` ones counted apart).
pub fn injection_summary(v: &Verdict) -> String {
    let mut by: Vec<&(String, u64)> = v.injected_by_call.iter().collect();
    by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let calls: Vec<String> = by.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let nomem = v.error_pairs.iter().filter(|(_, e)| e == "out of memory").count();
    format!(
        "injected {} failures inside system calls, in {} calls: {}; {} distinct (call, error) paths, {} of them (call, out of memory)",
        v.injected,
        by.len(),
        if calls.is_empty() { "none".to_string() } else { calls.join(", ") },
        v.error_pairs.len(),
        nomem
    )
}

/// `cargo xtask fuzz`.
pub fn main(o: FuzzOpts) -> Result<(), String> {
    let (kernel, initrd) = build(o.planted_bug)?;
    let what = format!(
        "{} calls, seed {}, {} vCPUs{}{}",
        o.calls,
        o.seed,
        o.smp,
        o.inject.as_ref().map(|i| format!(", inject {i} from {}", if o.inject_from_boot { "boot" } else { "the end of set-up" })).unwrap_or_default(),
        if o.planted_bug { ", planted-bug kernel" } else { "" }
    );
    println!("== fuzz: {what}");
    // Progress while the guest runs (its calls are counted only at the end): a status line
    // redrawn each second on a terminal, a plain line a minute otherwise, and with --trace
    // (the guest's lines stream to stdout) plain lines only.
    let progress = crate::host::progress::Progress::with_terminal("fuzz", 1, std::io::IsTerminal::is_terminal(&std::io::stderr()) && !o.trace);
    progress.start(1, &format!("{what}, limit {}", crate::host::progress::duration(o.effective_timeout())));
    let run = run_once(&kernel, &initrd, &o, o.trace);
    progress.finish(&match &run {
        Ok((v, out)) => format!("fuzz: run ended after {}: {} calls, {}", crate::host::progress::duration(out.elapsed), v.calls, if v.passed { "passed" } else { "failed" }),
        Err(e) => format!("fuzz: run failed: {e}"),
    });
    drop(progress);
    let (v, out) = run?;
    report(&o, &v, &out)
}

/// The CI fuzz's progress line before run `n` of `total`: the runs, calls and failures so far.
fn ci_progress(n: usize, total: usize, what: &str, calls: u64, failures: usize, start: Instant) -> String {
    format!("{}; {calls} calls and {failures} failure(s) so far", crate::host::progress::line("== fuzz", n, total, what, start.elapsed(), n - 1))
}

// ---------------------------------------------------------------------------------------
// CI

/// One CI fuzz run: vCPUs, calls, injection, network card.
struct CiRun {
    smp: u32,
    calls: u64,
    inject: Option<&'static str>,
    net: bool,
}

/// The CI fuzz runs. Injection is armed once the fuzzer's set-up is done, at 2, 4 (with the
/// network card), 5 and 8 vCPUs; each injection run must inject at least `CI_MIN_INJECTED`
/// failures inside system calls (rates and call counts chosen for several times that, in
/// well under a minute each on an idle 2-core host).
const CI_RUNS: [CiRun; 6] = [
    CiRun { smp: 4, calls: 100_000, inject: None, net: false },
    CiRun { smp: 2, calls: 40_000, inject: Some("alloc:1/20"), net: false },
    CiRun { smp: 5, calls: 50_000, inject: Some("alloc:1/50"), net: false },
    CiRun { smp: 8, calls: 40_000, inject: Some("alloc:1/20"), net: false },
    // With the network card, so virtual NICs are made and misused too.
    CiRun { smp: 4, calls: 100_000, inject: None, net: true },
    CiRun { smp: 4, calls: 100_000, inject: Some("alloc:seed:1:2"), net: true },
];

/// Each CI injection run must inject at least this many failures inside system calls.
pub const CI_MIN_INJECTED: u64 = 100;

/// The CI part: the fuzz runs of `CI_RUNS`, the exit-without-memory check and the planted-bug
/// demonstration. (`user_tests` runs the isolation suite; its `utest` lines are counted like
/// utest's.)
pub fn ci_fuzz(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    let mut t = TestTally::default();
    let (start, mut calls) = (Instant::now(), 0u64);
    let total = CI_RUNS.len() + 2;
    for (i, r) in CI_RUNS.iter().enumerate() {
        let o = FuzzOpts {
            calls: r.calls,
            seed: 1,
            smp: r.smp,
            inject: r.inject.map(str::to_string),
            min_injected: CI_MIN_INJECTED,
            timeout: Some(Duration::from_secs(150)),
            net: r.net,
            ..Default::default()
        };
        let what = format!(
            "{} calls at {} vCPUs{}{}",
            o.calls,
            o.smp,
            r.inject.map(|i| format!(", inject={i} (at least {CI_MIN_INJECTED} injected)")).unwrap_or_default(),
            if r.net { ", with the network card" } else { "" }
        );
        println!("{}", ci_progress(i + 1, total, &what, calls, t.failed, start));
        let (mut v, mut out) = run_once(kernel, initrd, &o, false)?;
        if !v.passed && out.exit_code.is_none() && !out.timed_out {
            // QEMU itself ended by a signal mid-run (not the guest's exit, not our timeout):
            // the emulator failed, not the kernel, so the run says nothing either way. Say so,
            // with what QEMU printed, and run the stage once more; a second such end fails.
            // (Seen in 3 of about 30 CI runs, only in this stage with the network card,
            // 1.1 s in, after ordinary progress; not reproduced in 4 replays.)
            println!("   QEMU ended by a signal after {:.1} s ({} serial lines); its stderr: {}", out.elapsed.as_secs_f64(), out.serial.lines().count(), out.stderr.lines().last().unwrap_or("(nothing)"));
            println!("   running this stage once more");
            (v, out) = run_once(kernel, initrd, &o, false)?;
        }
        calls += v.calls;
        match report(&o, &v, &out) {
            Ok(()) => t.passed += 1,
            Err(_) => t.failed += 1,
        }
    }
    println!("{}", ci_progress(total - 1, total, "exit with every allocation failing", calls, t.failed, start));
    t.add(exit_without_memory(kernel, initrd)?);
    println!("{}", ci_progress(total, total, "the planted-bug kernel", calls, t.failed, start));
    t.add(planted_bug_demo(initrd)?);
    Ok(t)
}

/// Every allocation a system call makes fails (`inject=alloc:1/1`): the library OS's start-up
/// gives up at its first one, and the program must still end cleanly with exit code 1 (libos
/// `exit` must not need memory to halt the context; before it named its pcore through the
/// allocating `self_shares` and fell back to `ud2`, EXIT_FAULT_BASE + 6). Deterministic: with
/// every allocation failing, the outcome does not depend on the schedule.
pub fn exit_without_memory(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    println!("== fuzz: exit with every allocation failing (inject=alloc:1/1, 2 vCPUs)");
    let o = FuzzOpts {
        calls: 1000,
        seed: 1,
        smp: 2,
        inject: Some("alloc:1/1".into()),
        inject_from_boot: true,
        timeout: Some(Duration::from_secs(90)),
        ..Default::default()
    };
    let (v, out) = run_once(kernel, initrd, &o, false)?;
    let clean_exit = out.serial.lines().any(|l| l.contains("init: `fuzz` exited with code 1"));
    let gave_up = out.serial.contains("libos: start-up failed: out of memory");
    // The fuzz verdict is "fuzzed nothing" (a failure for a fuzz run), with nothing worse
    // found first: no crash, leak, deaf core or abort.
    if !v.passed && v.killed_by_injection && clean_exit && gave_up {
        println!("   ok: start-up gave up on NoMemory and the program exited with code 1; nothing leaked, every core answered");
        return Ok(TestTally::PASS);
    }
    let _ = report(&o, &v, &out);
    if v.passed || !v.killed_by_injection {
        println!("   FAILED: expected the library OS to give up at start-up and exit with code 1 (start-up failed: {gave_up}, exit code 1: {clean_exit})");
    }
    Ok(TestTally::FAIL)
}

/// `abi::MAX_NAME`, the name length the planted bug forgets to check.
const MAX_NAME: usize = 32;

/// Whether `serial` shows the planted bug itself, not just any crash: a kernel panic in
/// kernel/src/syscall.rs whose message is the slice index of a name longer than `MAX_NAME`
/// (`range end index N out of range for slice of length 32`, N > 32), the bug `read_name`
/// has with the `planted-bug` feature. Another crash the fuzzer happens to find first (a
/// different bug, or the planted one changed into something else) does not count.
pub fn shows_planted_bug(serial: &str) -> bool {
    let lines: Vec<&str> = serial.lines().collect();
    lines.iter().enumerate().any(|(i, l)| {
        if !(l.contains("KERNEL PANIC: panicked at kernel/src/syscall.rs:")) {
            return false;
        }
        // The message is the panic line's next line.
        let Some(msg) = lines.get(i + 1).map(|m| m.trim()) else { return false };
        let want_tail = format!(" out of range for slice of length {MAX_NAME}");
        let Some(index) = msg.strip_prefix("range end index ").and_then(|m| m.strip_suffix(want_tail.as_str())) else { return false };
        index.parse::<usize>().is_ok_and(|n| n > MAX_NAME)
    })
}

/// The fuzzer must find the planted bug (names skip their length check, so a long name panics
/// the kernel), recognised by its own panic message (`shows_planted_bug`), and report it with
/// the seed and the replay command.
pub fn planted_bug_demo(initrd: &Path) -> Result<TestTally, String> {
    println!("== fuzz: planted-bug kernel (the fuzzer must find it)");
    let kernel = crate::host::env::build_kernel_with(&["planted-bug"])?;
    let o = FuzzOpts { calls: 20_000, seed: 7, smp: 2, planted_bug: true, timeout: Some(Duration::from_secs(90)), ..Default::default() };
    let (v, out) = run_once(&kernel, initrd, &o, false)?;
    let reported = report(&o, &v, &out);
    let msg = reported.err().unwrap_or_default();
    let crashed = v.reason.starts_with("kernel crash");
    let planted = shows_planted_bug(&out.serial);
    let found = crashed && planted && msg.contains(&format!("seed {}", o.seed)) && !out.timed_out;
    if found {
        println!("   ok: the planted bug (a name longer than {MAX_NAME} bytes indexing past its buffer) crashed the kernel and was reported with seed {} and `{}`", o.seed, o.replay_command());
        Ok(TestTally::PASS)
    } else if crashed && !planted {
        println!("   FAILED: the kernel crashed, but not with the planted bug's panic (a slice index past a {MAX_NAME}-byte name in kernel/src/syscall.rs): {}", v.reason);
        Ok(TestTally::FAIL)
    } else {
        println!("   FAILED: the fuzzer did not find the planted bug (verdict: {})", if v.passed { "passed" } else { v.reason.as_str() });
        Ok(TestTally::FAIL)
    }
}

// ---------------------------------------------------------------------------------------
// Soak

/// `cargo xtask soak --minutes M [--smp K]`: fuzz without and with injection (new seeds each
/// round) and the memory benchmarks, in turns until the time is up.
pub fn soak(minutes: u64, smp: u32) -> Result<(), String> {
    let (kernel, initrd) = build(false)?;
    let deadline = Instant::now() + Duration::from_secs(minutes * 60);
    let (mut runs, mut failures, mut panics, mut hangs, mut leaks) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut calls, mut guest_ms_weighted) = (0u64, 0u64);
    let (mut inject_runs, mut nothing_fuzzed, mut injected) = (0u64, 0u64, 0u64);
    let mut injected_min = u64::MAX;
    let mut injected_by_call: std::collections::BTreeMap<String, u64> = Default::default();
    let (mut min_paths, mut max_paths) = (u64::MAX, 0u64);
    let mut all_pairs = std::collections::BTreeSet::new();
    let mut last_invariants: Vec<String> = Vec::new();
    let mut round = 0u64;
    println!("== soak: {minutes} min at {smp} vCPUs");
    while Instant::now() < deadline {
        round += 1;
        let seed = 1000 + round;
        // Injection is armed once the fuzzer's set-up is done, so every seed fuzzes under it.
        let inject_job = ("fuzz+inject", Some(FuzzOpts { calls: 100_000, seed, smp, inject: Some(format!("alloc:seed:{seed}:2")), ..Default::default() }), "");
        let jobs: std::collections::VecDeque<(&str, Option<FuzzOpts>, &str)> = [
            ("fuzz", Some(FuzzOpts { calls: 200_000, seed, smp, ..Default::default() }), ""),
            inject_job,
            ("memclone", None, "init=memclone -- 8m"),
            ("mempass", None, "init=mempass -- 8m"),
        ]
        .into();
        for (what, fo, cmd) in jobs {
            if Instant::now() >= deadline {
                break;
            }
            runs += 1;
            // Progress (plain lines: one run takes tens of seconds).
            println!("== soak: [run {runs}, round {round}] {what}; {} left, {calls} fuzz calls and {failures} failure(s) so far", crate::host::progress::duration(deadline.saturating_duration_since(Instant::now())));
            match fo {
                Some(o) => {
                    let (v, out) = run_once(&kernel, &initrd, &o, false)?;
                    calls += v.calls;
                    inject_runs += o.inject.is_some() as u64;
                    nothing_fuzzed += v.killed_by_injection as u64;
                    if o.inject.is_some() && v.done_line.is_some() {
                        injected += v.injected;
                        injected_min = injected_min.min(v.injected);
                        for (c, n) in &v.injected_by_call {
                            *injected_by_call.entry(c.clone()).or_default() += n;
                        }
                    }
                    if v.done_line.is_some() {
                        min_paths = min_paths.min(v.error_paths);
                        max_paths = max_paths.max(v.error_paths);
                    }
                    all_pairs.extend(v.error_pairs.iter().cloned());
                    guest_ms_weighted += (v.calls * 1000).checked_div(v.calls_per_s).unwrap_or(0);
                    if !v.invariants.is_empty() {
                        last_invariants = v.invariants.clone();
                    }
                    let status = if v.passed { "ok".to_string() } else { format!("FAILED: {}", v.reason) };
                    let inj = o.inject.as_ref().map(|i| format!(" {i} ({} injected)", v.injected)).unwrap_or_default();
                    println!("   round {round} {what} seed {seed}{inj}: {} calls, {} calls/s, {} error paths; {status}", v.calls, v.calls_per_s, v.error_paths);
                    if !v.passed {
                        failures += 1;
                        if v.reason.starts_with("kernel crash") {
                            panics += 1;
                        }
                        if out.timed_out {
                            hangs += 1;
                        }
                        if v.reason.starts_with("leak") {
                            leaks += 1;
                        }
                        let _ = report(&o, &v, &out);
                    }
                }
                None => {
                    let cfg = VmConfig {
                        smp,
                        cmdline: cmd.into(),
                        medium: Some(BootMedium::Kernel(kernel.clone())),
                        initrd: Some(initrd.clone()),
                        timeout: Some(Duration::from_secs(300)),
                        ..Default::default()
                    };
                    let out = boot_captured(&cfg, None, false)?;
                    let v = judge(&out.serial, out.timed_out, out.kernel_exit_ok(), false, smp);
                    let crashed = v.reason.starts_with("kernel crash");
                    let leaked = v.reason.starts_with("leak");
                    let ok = out.kernel_exit_ok() && !out.timed_out && !crashed && !leaked;
                    let result = out.serial.lines().find(|l| l.contains(": result")).unwrap_or("").trim().to_string();
                    println!("   round {round} {what}: {}{}", if ok { "ok" } else { "FAILED" }, if result.is_empty() { String::new() } else { format!(" ({result})") });
                    if !ok {
                        failures += 1;
                        panics += crashed as u64;
                        hangs += out.timed_out as u64;
                        leaks += leaked as u64;
                        for l in out.serial.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev() {
                            println!("   | {l}");
                        }
                    }
                }
            }
        }
    }
    let rate = (calls * 1000).checked_div(guest_ms_weighted).unwrap_or(0);
    println!("== soak summary: {runs} runs in {round} rounds, {failures} failed: {panics} panics, {hangs} hangs, {leaks} leaks");
    println!("   {calls} fuzz calls, {rate} calls/s in the guest ({} per vCPU; TCG, emulated)", rate / smp as u64);
    if max_paths > 0 {
        println!("   distinct (call, error) paths: {min_paths}..{max_paths} per fuzz run, {} over the whole soak", all_pairs.len());
    }
    println!(
        "   {inject_runs} fuzz runs with injection ({nothing_fuzzed} fuzzed nothing: failures); {injected} failures injected inside system calls, at least {} in each run that fuzzed",
        if injected_min == u64::MAX { 0 } else { injected_min }
    );
    if !injected_by_call.is_empty() {
        let mut by: Vec<_> = injected_by_call.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1));
        println!("   injected by call: {}", by.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", "));
    }
    for l in &last_invariants {
        println!("   last fuzz run: {l}");
    }
    if failures > 0 {
        Err(format!("soak: {failures} of {runs} runs failed"))
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The command lines of `fuzz` and `soak`

fn inject_spec(v: &str) -> Result<String, String> {
    crate::fuzz::check_inject(v).map(|()| v.to_string()).map_err(|e| e.trim_start_matches("--inject: ").to_string())
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct FuzzArgs {
    /// Calls in all, shared out over the cores (at least 1)
    #[arg(long, allow_negative_numbers = true, value_name = "N", default_value = "100000", value_parser = at_least_one)]
    pub calls: u64,
    /// The seed (decimal or 0x hex); a failure prints it and the replay command
    #[arg(long, allow_negative_numbers = true, value_name = "S", default_value = "1", value_parser = number)]
    pub seed: u64,
    /// vCPUs, 1..=32 (the fuzzer's core limit)
    #[arg(long, allow_negative_numbers = true, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub smp: u32,
    /// Allocation fault injection: alloc:1/N (every Nth) or alloc:seed:S:P (P percent, seeded)
    #[arg(long, value_name = "SPEC", value_parser = inject_spec)]
    pub inject: Option<String>,
    /// When injection starts: `program` (once the fuzzer's set-up is done, so every injected failure meets a fuzzed call) or `boot` (before the program starts: tests its start-up, which then fuzzes nothing and fails)
    #[arg(long, value_name = "WHEN", default_value = "program", value_parser = ["program", "boot"])]
    pub inject_from: String,
    /// Boot the kernel with the planted bug (a name length left unchecked): the fuzzer must find it
    #[arg(long)]
    pub planted_bug: bool,
    /// Boot with the network card: virtual NICs are made and misused too
    #[arg(long)]
    pub net: bool,
    /// Attach a blank scratch disk: block device objects and disk requests too
    #[arg(long)]
    pub scratch_disk: bool,
    /// Print every call before it is issued (to see the one that crashed the kernel)
    #[arg(long)]
    pub trace: bool,
    /// Fuzz the Linux personality instead: linux/progs/linuxfuzz.c under the runtime (xtask/src/exec/fuzz.rs); --seed, --calls, --smp, --inject, --trace and --timeout (the program's own time bound) apply
    #[arg(long)]
    pub linux: bool,
    /// Kill the run after SECS (default: from the call count)
    #[arg(long, allow_negative_numbers = true, value_name = "SECS", value_parser = number)]
    pub timeout: Option<u64>,
}

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct SoakArgs {
    /// How long, in minutes (at least 1)
    #[arg(long, allow_negative_numbers = true, value_name = "M", value_parser = at_least_one)]
    pub minutes: u64,
    /// vCPUs, 1..=32
    #[arg(long, allow_negative_numbers = true, value_name = "K", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub smp: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: the planted-bug demonstration passing on any crash (a different bug, or a
    /// planted bug that no longer is the one documented).
    #[test]
    fn the_planted_bug_is_recognised_by_its_own_panic() {
        let planted = "fuzz: seed=7 calls=20000 cores=2\n[1] KERNEL PANIC: panicked at kernel/src/syscall.rs:46:28:\nrange end index 41 out of range for slice of length 32\n[1]   backtrace:\n";
        assert!(shows_planted_bug(planted));
        // Another panic in the same file, another slice, a page fault, no crash at all.
        assert!(!shows_planted_bug(&planted.replace("range end index 41 out of range for slice of length 32", "called `Option::unwrap()` on a `None` value")));
        assert!(!shows_planted_bug(&planted.replace("length 32", "length 4096")));
        assert!(!shows_planted_bug(&planted.replace("index 41", "index 12")));
        assert!(!shows_planted_bug(&planted.replace("kernel/src/syscall.rs", "kernel/src/mm/frame.rs")));
        assert!(!shows_planted_bug("[0] EXCEPTION 14 (page fault) at 0x10\n  #0 kernel::syscall::dispatch\n"));
        assert!(!shows_planted_bug("fuzz: done seed=7\n"));
    }

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn options_parse_and_replay() {
        let o = parse_opts(&args(&["--calls", "5000", "--seed", "0x2a", "--smp", "2", "--inject", "alloc:1/7", "--planted-bug"])).unwrap();
        assert_eq!((o.calls, o.seed, o.smp), (5000, 42, 2));
        assert_eq!(o.replay_command(), "cargo xtask fuzz --seed 42 --calls 5000 --smp 2 --inject alloc:1/7 --planted-bug");
        assert!(o.cmdline().starts_with("inject=alloc:1/7 inject_from=program init=fuzz -- seed=42 calls=5000"), "{}", o.cmdline());
        assert_eq!(parse_opts(&[]).unwrap(), FuzzOpts::default());
        // From boot: the kernel and the program are told, and the replay keeps it.
        let b = parse_opts(&args(&["--inject", "alloc:1/7", "--inject-from", "boot"])).unwrap();
        assert!(b.inject_from_boot);
        assert!(b.cmdline().starts_with("inject=alloc:1/7 inject_from=boot init=fuzz"), "{}", b.cmdline());
        assert!(b.cmdline().ends_with("inject=alloc:1/7 inject_from=boot"), "{}", b.cmdline());
        assert!(b.replay_command().ends_with("--inject alloc:1/7 --inject-from boot"), "{}", b.replay_command());
        assert!(parse_opts(&args(&["--inject-from", "later"])).is_err());
    }

    #[test]
    fn bad_options_are_one_line_errors() {
        for bad in [
            &["--calls"][..],
            &["--calls", "x"],
            &["--calls", "0"],
            &["--smp", "0"],
            &["--smp", "99"],
            &["--inject", "alloc:1/0"],
            &["--inject", "pages:1/5"],
            &["--inject", "alloc:seed:1:200"],
            &["--inject", "alloc:seed:1"],
            &["--bogus"],
        ] {
            let e = parse_opts(&args(bad)).unwrap_err();
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
        assert!(check_inject("alloc:seed:3:2").is_ok());
    }

    /// Catches progress that counts the run about to start as done, or drops the totals.
    #[test]
    fn ci_progress_names_runs_calls_and_failures() {
        let l = ci_progress(3, 6, "100000 calls at 4 vCPUs", 200_000, 1, Instant::now());
        assert!(l.starts_with("== fuzz: [3/6] 100000 calls at 4 vCPUs; 0s elapsed"), "{l}");
        assert!(l.ends_with("; 200000 calls and 1 failure(s) so far"), "{l}");
    }

    const DONE: &str = "fuzz: done seed=1 cores=2 calls=1000 ok=300 errors=700 ms=10 wall_ms=12 calls_per_s=100000 per_vcpu=50000 paths=90 error_paths=80 restarts=0 setup_failed=0 failures=0\n";
    const GOOD_TAIL: &str = "[0] init: `fuzz` exited with code 0\n[0] init: 2/2 cores answered an active message\n[0] init: free pages 10 -> 10, kernel heap objects 5 -> 5, kernel objects 3 -> 3\n";

    #[test]
    fn error_paths_are_read_from_the_paths_lines() {
        let serial = format!("fuzz: paths obj_stat: ok, share not reachable, bad address\nfuzz: paths null: ok\n{DONE}{GOOD_TAIL}");
        let v = judge(&serial, false, true, false, 2);
        let want = [("obj_stat", "share not reachable"), ("obj_stat", "bad address")].map(|(a, b)| (a.to_string(), b.to_string()));
        assert_eq!(v.error_pairs, want);
    }

    #[test]
    fn a_clean_run_passes() {
        let v = judge(&format!("{DONE}{GOOD_TAIL}"), false, true, false, 2);
        assert!(v.passed, "{}", v.reason);
        assert_eq!((v.calls, v.calls_per_s, v.error_paths), (1000, 100000, 80));
        assert_eq!(v.invariants.len(), 3);
    }

    #[test]
    fn failures_are_caught() {
        let panic = format!("fuzz: seed=1\n[1] KERNEL PANIC: range end index 40 out of range\n");
        let v = judge(&panic, false, false, false, 2);
        assert!(!v.passed && v.reason.starts_with("kernel crash"));
        let prog = format!("fuzz: FAILED seed=1 core=1 attempt=0 call #5: obj_stat -> -99 (undocumented error code)\n{DONE}{GOOD_TAIL}");
        assert!(!judge(&prog, false, false, false, 2).passed);
        let leak = format!("{DONE}{GOOD_TAIL}[0] init: LEAK: memory or objects were not returned\n");
        assert!(judge(&leak, false, false, false, 2).reason.starts_with("leak"));
        let deaf = DONE.to_string() + &GOOD_TAIL.replace("2/2", "1/2");
        assert!(!judge(&deaf, false, false, false, 2).passed);
        assert!(judge(DONE, true, false, false, 2).reason.starts_with("timed out"));
        assert!(!judge("", false, true, false, 2).passed);
        // Killed by an injected page fault before fuzzing: never a pass, but recognised as
        // injection's doing (and not a crash) only under injection.
        let killed = GOOD_TAIL.replace("code 0", "code 65550");
        let v = judge(&killed, false, false, true, 2);
        assert!(!v.passed && v.killed_by_injection && v.reason.starts_with("fuzzed nothing"), "{}", v.reason);
        let v = judge(&killed, false, false, false, 2);
        assert!(!v.passed && !v.killed_by_injection);
    }

    #[test]
    fn startup_oom_fails_as_fuzzing_nothing() {
        let oom = format!("libos: start-up failed: out of memory\n{}", GOOD_TAIL.replace("code 0", "code 1"));
        let v = judge(&oom, false, false, true, 2);
        assert!(!v.passed && v.killed_by_injection && v.reason.contains("start-up ran out of memory"), "{}", v.reason);
        assert!(!v.reason.contains('\n'));
        assert!(!judge(&oom, false, false, false, 2).passed);
        // The same start-up failure, but exit could not halt the context.
        let ud2 = format!(
            "libos: start-up failed: out of memory\nlibos: exit(1): pcore_halt failed: NoMemory; faulting instead\n{}",
            GOOD_TAIL.replace("code 0", "code 65542")
        );
        let v = judge(&ud2, false, false, true, 2);
        assert!(!v.passed && v.reason.contains("invalid-opcode"), "{}", v.reason);
    }

    /// Catches: a pass without work (an `ok (nothing fuzzed)`), a run that stopped
    /// early, and injection that never reached a system call.
    #[test]
    fn a_run_that_did_less_than_asked_fails() {
        let o = FuzzOpts { calls: 1000, smp: 2, ..Default::default() };
        let mut v = judge(&format!("{DONE}{GOOD_TAIL}"), false, true, false, 2);
        require_work(&mut v, &o);
        assert!(v.passed, "{}", v.reason);
        let mut v = judge(&format!("{DONE}{GOOD_TAIL}"), false, true, false, 2);
        require_work(&mut v, &FuzzOpts { calls: 1001, ..o.clone() });
        assert!(!v.passed && v.reason.starts_with("fuzzed too little: 1000 calls made, 1001 asked"), "{}", v.reason);
        // Injection asked, none injected (DONE has no injected= field): fails.
        let inj = FuzzOpts { inject: Some("alloc:1/50".into()), ..o.clone() };
        let mut v = judge(&format!("{DONE}{GOOD_TAIL}"), false, true, true, 2);
        require_work(&mut v, &inj);
        assert!(!v.passed && v.reason.starts_with("injection reached too little: 0 failures"), "{}", v.reason);
        // Enough injected: passes; fewer than the minimum: fails.
        let done = DONE.replace("failures=0", "injected=120 armed=1 failures=0");
        let serial = format!("fuzz: injected 120 allocation failures inside system calls\nfuzz: injected share_alloc: 100\nfuzz: injected call 99: 20\n{done}{GOOD_TAIL}");
        let mut v = judge(&serial, false, true, true, 2);
        require_work(&mut v, &FuzzOpts { min_injected: 100, ..inj.clone() });
        assert!(v.passed, "{}", v.reason);
        assert_eq!(v.injected, 120);
        assert_eq!(v.injected_by_call, vec![("share_alloc".to_string(), 100), ("call 99".to_string(), 20)]);
        assert!(injection_summary(&v).starts_with("injected 120 failures inside system calls, in 2 calls: share_alloc 100, call 99 20;"), "{}", injection_summary(&v));
        let mut v = judge(&serial.replace("call 99: 20", "call 99: 19"), false, true, true, 2);
        require_work(&mut v, &FuzzOpts { min_injected: 100, ..inj.clone() });
        assert!(!v.passed && v.reason.starts_with("injection report inconsistent: 120 failures injected, 119 counted"), "{}", v.reason);
        let mut v = judge(&serial, false, true, true, 2);
        require_work(&mut v, &FuzzOpts { min_injected: 121, ..inj });
        assert!(!v.passed && v.reason.contains("120 failures injected inside system calls, at least 121 required"), "{}", v.reason);
        // A failure found first is not hidden by the work check.
        let mut v = judge(&format!("{DONE}{GOOD_TAIL}[0] init: LEAK: x\n"), false, true, false, 2);
        require_work(&mut v, &FuzzOpts { calls: 5000, ..o });
        assert!(v.reason.starts_with("leak"), "{}", v.reason);
    }

    #[test]
    fn an_abort_after_the_run_is_flagged_even_under_injection() {
        let aborted = format!("{DONE}{}", GOOD_TAIL.replace("code 0", "code 65542"));
        for injecting in [false, true] {
            let v = judge(&aborted, false, false, injecting, 2);
            assert!(!v.passed && v.reason.contains("invalid-opcode"), "{}", v.reason);
        }
    }

    #[test]
    fn a_halted_worker_is_flagged() {
        let halted = format!("fuzz: FAILED seed=1 core=2: the worker ended with code 0xd1ad462e02983ecb\n{DONE}{}", GOOD_TAIL.replace("code 0", "code 1"));
        assert!(!judge(&halted, false, false, false, 2).passed);
        let bug = format!("fuzz: FAILED seed=1 core=3 attempt=0 call #7: pcore_run (fuzzer bug: a call that halts or runs a harness pcore (not issued))\n{DONE}{GOOD_TAIL}");
        assert!(!judge(&bug, false, true, false, 2).passed);
    }
}
