//! The Linux fuzzer (docs/fuzz.md, "The Linux fuzzer"): linux/progs/linuxfuzz.c, a static
//! Linux program that issues every Linux system-call number (0..=461 and numbers out of range)
//! with random arguments biased towards bad pointers, run on this system through the Linux
//! personality, with and without the kernel's allocation fault injection.
//!
//! `cargo xtask fuzz --linux [--seed S] [--calls N] [--smp K] [--inject SPEC] [--trace]
//! [--timeout SECS]`; `cargo xtask test --only linux-fuzz` runs `CI_RUNS`.
//!
//! A run passes when: the program printed `linuxfuzz: done ... failures=0` having made at
//! least `MIN_CALLS` calls and exited 0 (so the runtime did not crash and every result was
//! one Linux can give); the console shows no kernel panic or exception; the runtime's leak
//! check after the program held (without injection: under injection a clean-up call of the
//! runtime's own may be refused, and the kernel's check is the one that counts); the kernel's
//! check after init held (free pages, kernel heap objects and kernel objects back to their
//! counts, every core answering); and with `--inject`, at least `min_injected` allocations
//! failed by injection.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{ours, progs, ExecOutput, ExecRequest};
use crate::host::outcome::TestTally;

/// A fuzz run must make at least this many calls to count (a run that gives up early is
/// not a pass).
pub const MIN_CALLS: u64 = 1000;

/// One run's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub seed: u64,
    pub calls: u64,
    /// The program's own time bound (it stops issuing calls after this many seconds).
    pub secs: u64,
    pub smp: u32,
    /// `alloc:1/N` or `alloc:seed:S:P`, armed at the program's first instruction.
    pub inject: Option<String>,
    pub min_injected: u64,
    pub trace: bool,
}

impl Run {
    pub fn replay_command(&self) -> String {
        let mut s = format!("cargo xtask fuzz --linux --seed {} --calls {} --smp {}", self.seed, self.calls, self.smp);
        if let Some(i) = &self.inject {
            s += &format!(" --inject {i}");
        }
        s
    }

    fn extra(&self) -> ours::Extra {
        match &self.inject {
            Some(i) => ours::Extra { kernel: format!("inject={i} inject_from=program"), runtime: "--arm-inject".into() },
            None => ours::Extra::default(),
        }
    }

    fn args(&self) -> Vec<String> {
        let mut v = vec![format!("seed={}", self.seed), format!("calls={}", self.calls), format!("secs={}", self.secs)];
        if self.trace {
            v.push("trace".into());
        }
        v
    }
}

/// The CI runs: about 12 s of fuzzing each plus the boot, on an idle 2-core host.
pub fn ci_runs() -> Vec<Run> {
    vec![
        Run { seed: 1, calls: 40_000, secs: 8, smp: 2, inject: None, min_injected: 0, trace: false },
        Run { seed: 2, calls: 30_000, secs: 8, smp: 2, inject: Some("alloc:1/10".into()), min_injected: 20, trace: false },
    ]
}

/// What a passing run did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// The program's `done` line.
    pub done: String,
    pub calls: u64,
    pub injected: u64,
    /// The kernel's `init: injected failures by call number:` line, if any.
    pub injected_by_call: String,
}

fn field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace().find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// Judge one run's output (pure: host-tested).
pub fn check(run: &Run, out: &ExecOutput) -> Result<Summary, Vec<String>> {
    let mut bad = Vec::new();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let c = &out.console;
    for l in stdout.lines().filter(|l| l.starts_with("linuxfuzz: FAILED")) {
        bad.push(l.to_string());
    }
    let done = stdout.lines().find(|l| l.starts_with("linuxfuzz: done")).unwrap_or("").to_string();
    let calls = field(&done, "calls").unwrap_or(0);
    if done.is_empty() {
        bad.push("the program printed no `linuxfuzz: done` line".into());
    } else {
        if field(&done, "failures") != Some(0) {
            bad.push(format!("the program reported failures: {done}"));
        }
        if calls < MIN_CALLS.min(run.calls) {
            bad.push(format!("fuzzed too little: {calls} calls (at least {} wanted)", MIN_CALLS.min(run.calls)));
        }
    }
    if out.status != 0 {
        bad.push(format!("exit status {} (expected 0)", out.status));
    }
    for what in ["KERNEL PANIC", "EXCEPTION", "faulting instead"] {
        if let Some(l) = c.lines().find(|l| l.contains(what)) {
            bad.push(format!("console: {l}"));
        }
    }
    // The runtime's leak check after the program.
    let checks: Vec<&str> = c.lines().filter(|l| l.starts_with("linuxrt: leak check")).collect();
    if checks.is_empty() {
        bad.push("the runtime printed no leak check".into());
    } else if run.inject.is_none() && !checks.iter().all(|l| l.ends_with(": ok")) {
        bad.push(format!("the runtime's leak check: {checks:?}"));
    }
    if !c.contains("init: `linuxrt` exited with code 0") {
        bad.push("the runtime (init) did not exit with code 0".into());
    }
    // The kernel's check after init: every count back, every core answering.
    match c.lines().find_map(|l| l.split("init: free pages ").nth(1)) {
        None => bad.push("no `init: free pages` line (the kernel's leak check)".into()),
        Some(rest) => {
            let nums: Vec<u64> = rest.split(|ch: char| !ch.is_ascii_digit()).filter(|w| !w.is_empty()).filter_map(|w| w.parse().ok()).collect();
            if nums.len() < 6 || nums[0] != nums[1] || nums[2] != nums[3] || nums[4] != nums[5] {
                bad.push(format!("the kernel's leak check: init: free pages {rest}"));
            }
        }
    }
    if c.contains("init: LEAK") {
        bad.push("init: LEAK".into());
    }
    let answered = c.lines().find_map(|l| l.split("init: ").nth(1).filter(|r| r.contains("cores answered")).map(|r| r.to_string()));
    match answered.as_deref().and_then(|r| r.split_whitespace().next()).and_then(|f| f.split_once('/')) {
        Some((a, b)) if a == b => {}
        _ => bad.push(format!("not every core answered: {answered:?}")),
    }
    let injected = c.lines().find_map(|l| l.split("init: ").nth(1)?.strip_suffix(" allocations failed by injection")?.trim().parse::<u64>().ok()).unwrap_or(0);
    let injected_by_call = c.lines().find_map(|l| l.split("init: injected failures by call number:").nth(1)).unwrap_or("").trim().to_string();
    if run.inject.is_some() && injected < run.min_injected {
        bad.push(format!("only {injected} allocations failed by injection (at least {} wanted)", run.min_injected));
    }
    if bad.is_empty() {
        Ok(Summary { done, calls, injected, injected_by_call })
    } else {
        Err(bad)
    }
}

/// Run once on this system; `Err` holds why it failed (with the replay command).
pub fn run_one(kernel: &Path, initrd: &Path, run: &Run) -> Result<Summary, String> {
    let program = progs::build("linuxfuzz", &[])?;
    let req = ExecRequest { program, args: run.args(), files: vec![], stdin: vec![], smp: run.smp, disk: None, timeout: Duration::from_secs(run.secs + 90), net: None };
    let replay = run.replay_command();
    match ours::run_extra(kernel, initrd, &req, 1, &run.extra()) {
        Ok(out) => check(run, &out).map_err(|bad| {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let tail: Vec<&str> = stdout.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
            let console: Vec<&str> = out.console.lines().filter(|l| !l.contains("unimplemented system call")).collect();
            format!("{}\nreplay: {replay}\nstandard output ended:\n{}\nconsole (without the unimplemented-call lines):\n{}", bad.join("\n"), tail.join("\n"), console.join("\n"))
        }),
        Err(e) => Err(format!("{e}\nreplay: {replay}")),
    }
}

/// `cargo xtask fuzz --linux ...`.
pub fn main(run: Run) -> Result<(), String> {
    let (kernel, initrd) = ours::prepare()?;
    let start = Instant::now();
    let r = run_one(&kernel, &initrd, &run);
    match r {
        Ok(s) => {
            println!("{}", s.done);
            if run.inject.is_some() {
                println!("injected {} allocation failures; by call number: {}", s.injected, s.injected_by_call);
            }
            println!("linux fuzz: passed in {:.1} s ({})", start.elapsed().as_secs_f64(), run.replay_command());
            Ok(())
        }
        Err(e) => Err(format!("linux fuzz FAILED after {:.1} s:\n{e}", start.elapsed().as_secs_f64())),
    }
}

/// The CI stage (`linux-fuzz`).
pub fn ci(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    let mut t = TestTally::default();
    for run in ci_runs() {
        let start = Instant::now();
        match run_one(kernel, initrd, &run) {
            Ok(s) => {
                println!(
                    "   linux fuzz seed {} at {} vCPUs{}: ok in {:.1} s: {}{}",
                    run.seed,
                    run.smp,
                    run.inject.as_ref().map(|i| format!(", inject {i}")).unwrap_or_default(),
                    start.elapsed().as_secs_f64(),
                    s.done,
                    if run.inject.is_some() { format!("; injected {} ({})", s.injected, s.injected_by_call) } else { String::new() }
                );
                t.passed += 1;
            }
            Err(e) => {
                println!("   FAILED: linux fuzz seed {} at {} vCPUs: {e}", run.seed, run.smp);
                t.failed += 1;
            }
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> ExecOutput {
        ExecOutput {
            stdout: b"linuxfuzz: done seed=1 calls=5000 ok=10 errors=4990 skipped=3 numbers=440 paths=500 ms=300 failures=0\n".to_vec(),
            stderr: vec![],
            status: 0,
            console: "[0] init: starting `linuxrt` on core 0\nlinuxrt: leak check (run 1, first): kernel objects 15 -> 15, free pages 1 -> 1 (+0 in the buffer cache): ok\n\
                      [0] init: `linuxrt` exited with code 0\n[0] init: 40 allocations failed by injection\n[0] init: injected failures by call number: 1:40\n\
                      [0] init: 2/2 cores answered an active message\n[0] init: free pages 100 -> 100, kernel heap objects 4 -> 4, kernel objects 0 -> 0\n"
                .into(),
            files: vec![],
        }
    }

    /// Catches: a run passing with a leak, a panic, a crash of the runtime, a fuzzer that did
    /// nothing, an undocumented result, or injection that never happened.
    #[test]
    fn a_run_passes_only_when_everything_held() {
        let run = Run { seed: 1, calls: 5000, secs: 10, smp: 2, inject: None, min_injected: 0, trace: false };
        let s = check(&run, &good()).unwrap();
        assert_eq!(s.calls, 5000);
        let inj = Run { inject: Some("alloc:1/10".into()), min_injected: 20, ..run.clone() };
        assert_eq!(check(&inj, &good()).unwrap().injected, 40);
        assert!(check(&Run { min_injected: 41, ..inj.clone() }, &good()).is_err());
        let with = |f: &dyn Fn(&mut ExecOutput)| {
            let mut o = good();
            f(&mut o);
            check(&run, &o)
        };
        assert!(with(&|o| o.console = o.console.replace("free pages 100 -> 100", "free pages 100 -> 99")).is_err());
        assert!(with(&|o| o.console = o.console.replace("kernel objects 0 -> 0", "kernel objects 0 -> 1")).is_err());
        assert!(with(&|o| o.console = o.console.replace("heap objects 4 -> 4", "heap objects 4 -> 5")).is_err());
        assert!(with(&|o| o.console = o.console.replace("2/2 cores", "1/2 cores")).is_err());
        assert!(with(&|o| o.console = o.console.replace(": ok\n", ": LEAK\n")).is_err());
        assert!(with(&|o| o.console.push_str("[1] KERNEL PANIC: panicked at x\n")).is_err());
        assert!(with(&|o| o.console.push_str("libos: exit(1): pcore_halt failed: NoMemory; faulting instead\n")).is_err());
        assert!(with(&|o| o.console = o.console.replace("exited with code 0", "exited with code 65542")).is_err());
        assert!(with(&|o| o.status = 139).is_err());
        assert!(with(&|o| o.stdout = b"linuxfuzz: done seed=1 calls=12 failures=0\n".to_vec()).is_err());
        assert!(with(&|o| o.stdout = b"linuxfuzz: done seed=1 calls=5000 failures=1\n".to_vec()).is_err());
        assert!(with(&|o| o.stdout.clear()).is_err());
        // Under injection the runtime's own check may fail; the kernel's may not.
        let mut o = good();
        o.console = o.console.replace(": ok\n", ": LEAK\n");
        assert!(check(&inj, &o).is_ok());
        o.console = o.console.replace("kernel objects 0 -> 0", "kernel objects 0 -> 2");
        assert!(check(&inj, &o).is_err());
    }

    #[test]
    fn the_replay_command_names_the_run() {
        let run = Run { seed: 7, calls: 100, secs: 5, smp: 4, inject: Some("alloc:1/10".into()), min_injected: 1, trace: false };
        assert_eq!(run.replay_command(), "cargo xtask fuzz --linux --seed 7 --calls 100 --smp 4 --inject alloc:1/10");
        assert_eq!(run.extra().kernel, "inject=alloc:1/10 inject_from=program");
        assert_eq!(run.extra().runtime, "--arm-inject");
    }
}
