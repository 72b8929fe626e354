//! `cargo xtask test`: host tests, loom model checks, plugin tests, then every test boot (the
//! in-kernel tests at several vCPU counts, the user-program suites, the shell, fuzz, network,
//! files, Metis, large and broken boots, the ISO). Prints the closing line `N passed, N
//! failed, N skipped` and fails on any failure or timeout, naming the suites that failed.
//!
//! Three outcomes (docs/testing.md). Every test line is `ktest|utest NAME ... ok`, `...
//! FAILED: why` or `... skipped (why)`, and every run ends with `done N passed, N failed, N
//! skipped`. A skip is not a pass: each suite is booted with the configuration its tests need
//! and declares (`Expect`) which tests may skip there and which must pass; a skip it did not
//! declare fails, and so do a run that ran no test, a missing closing line, a closing line
//! that disagrees with the lines, a crash, a timeout, and a `boot: error:` line (a
//! command-line option such as `roles=` that the kernel could not apply).
//!
//! Adding a suite is one line in [`run`]: `r.user(SMP, "CMDLINE", Expect::ALL)?` for a
//! user-program suite, or `r.suite(NAME, |a| ...)?` for anything else.

use crate::host::args::{core_list, CoreList};
use crate::host::qemu::{boot_captured, BootOutput};
use crate::host::vm::{BootMedium, VmConfig};
use crate::host::outcome::TestTally;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Hard limit for one kernel boot in the test matrix. Generous: TCG with 8 vCPUs on a
/// 2-core host is slow, and a busy CI machine is slower; a hang still ends here.
const BOOT_TIMEOUT: Duration = Duration::from_secs(240);

/// What a suite declares about the tests its boot runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expect {
    /// Tests (full names, as printed) that may report a skip under this boot. Any other skip
    /// is a failure: the boot was made to give the test what it needs.
    pub may_skip: &'static [&'static str],
    /// Tests that must have run and passed under this boot (what the boot is for).
    pub must_pass: &'static [&'static str],
}

impl Expect {
    /// Every test the program runs must run: none may skip.
    pub const ALL: Expect = Expect { may_skip: &[], must_pass: &[] };
}

/// The test lines and closing lines of one run's output.
#[derive(Debug, Default)]
pub struct Outcomes {
    pub passed: Vec<String>,
    /// (name, why)
    pub failed: Vec<(String, String)>,
    /// (name, reason)
    pub skipped: Vec<(String, String)>,
    /// Each closing line's (passed, failed, skipped); skipped is None on an old-style line.
    pub closing: Vec<(usize, usize, Option<usize>)>,
}

/// `N passed, M failed[, K skipped]` after `done `.
fn parse_closing(rest: &str) -> Option<(usize, usize, Option<usize>)> {
    let count = |word: &str| -> Option<usize> {
        let words: Vec<&str> = rest.split(|c: char| c == ',' || c.is_whitespace()).filter(|w| !w.is_empty()).collect();
        let i = words.iter().position(|w| *w == word)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    Some((count("passed")?, count("failed")?, count("skipped")))
}

/// The text in the first parentheses of `s`, or all of it.
fn in_parens(s: &str) -> String {
    match (s.find('('), s.rfind(')')) {
        (Some(a), Some(b)) if b > a => s[a + 1..b].to_string(),
        _ => s.trim().to_string(),
    }
}

/// Parse `ktest`/`utest` lines: `PREFIX NAME ... ok[ (note)]`, `... FAILED: why`, `...
/// skipped (why)`, and `PREFIX: done N passed, N failed, N skipped`. An old-style `... ok
/// (skipped: why)` is a skip, not a pass.
pub fn parse_outcomes(serial: &str) -> Outcomes {
    let mut o = Outcomes::default();
    for line in serial.lines() {
        let Some(idx) = line.find("ktest").or_else(|| line.find("utest")) else { continue };
        let rest = &line[idx + 5..];
        if let Some(done) = rest.strip_prefix(": done ") {
            if let Some(c) = parse_closing(done) {
                o.closing.push(c);
            }
            continue;
        }
        let Some(rest) = rest.strip_prefix(' ') else { continue };
        let Some((name, result)) = rest.split_once(" ... ") else { continue };
        let (name, result) = (name.trim().to_string(), result.trim());
        if let Some(after) = result.strip_prefix("ok") {
            let note = after.trim_start();
            if note.starts_with("(skipped") {
                o.skipped.push((name, in_parens(note).trim_start_matches("skipped").trim_start_matches(':').trim().to_string()));
            } else {
                o.passed.push(name);
            }
        } else if let Some(why) = result.strip_prefix("skipped") {
            o.skipped.push((name, in_parens(why)));
        } else if let Some(why) = result.strip_prefix("FAILED") {
            o.failed.push((name, why.trim_start_matches(':').trim().to_string()));
        }
    }
    o
}

/// The verdict on one test run: its counts (every problem counted as one failure) and the
/// problems, one line each.
#[derive(Debug, Default)]
pub struct Verdict {
    pub tally: TestTally,
    pub problems: Vec<String>,
}

/// How a test boot ended.
#[derive(Clone, Copy, Debug)]
pub struct Ending {
    pub timed_out: bool,
    /// The kernel's verdict: QEMU's exit status says success (the tests or the program
    /// passed, nothing leaked, every command-line option applied).
    pub exit_ok: bool,
}

impl Ending {
    pub fn of(out: &BootOutput) -> Ending {
        Ending { timed_out: out.timed_out, exit_ok: out.kernel_exit_ok() }
    }
}

/// Lines that fail any test boot whatever its tests say: a command-line option the kernel
/// could not apply (`boot: error:`), a kernel panic or exception.
pub fn boot_problems(serial: &str) -> Vec<String> {
    serial
        .lines()
        .filter(|l| l.contains("boot: error:") || l.contains("KERNEL PANIC") || l.contains("] EXCEPTION "))
        .map(|l| l.trim().to_string())
        .collect()
}

/// Judge a test run's output against what its suite declared (see the module comment).
pub fn judge_run(serial: &str, end: Ending, expect: &Expect) -> Verdict {
    let o = parse_outcomes(serial);
    let mut v = Verdict::default();
    v.tally.passed = o.passed.len();
    for (name, why) in &o.failed {
        v.tally.failed += 1;
        v.problems.push(format!("{name}: {why}"));
    }
    for (name, why) in &o.skipped {
        if expect.may_skip.contains(&name.as_str()) {
            v.tally.skipped += 1;
        } else {
            v.tally.failed += 1;
            v.problems.push(format!("{name} skipped ({why}), but this boot is configured to run it"));
        }
    }
    let problem = |p: String, v: &mut Verdict| {
        v.tally.failed += 1;
        v.problems.push(p);
    };
    // A required test that failed, or skipped without leave, is counted above already.
    for name in expect.must_pass {
        let ran = o.passed.iter().any(|p| p == name) || o.failed.iter().any(|(f, _)| f == name);
        let skipped = o.skipped.iter().any(|(n, _)| n == name);
        if skipped && expect.may_skip.contains(name) {
            problem(format!("{name} must pass under this boot, and skipped"), &mut v);
        } else if !ran && !skipped {
            problem(format!("{name} must pass under this boot, and did not run"), &mut v);
        }
    }
    if o.passed.is_empty() && o.failed.is_empty() {
        problem(format!("no test ran ({} skipped)", o.skipped.len()), &mut v);
    }
    if o.closing.is_empty() {
        problem("no closing `done N passed, N failed, N skipped` line: the run stopped early".into(), &mut v);
    } else {
        let (p, f, s) = o.closing.iter().fold((0, 0, 0), |(p, f, s), c| (p + c.0, f + c.1, s + c.2.unwrap_or(0)));
        if (p, f, s) != (o.passed.len(), o.failed.len(), o.skipped.len()) {
            problem(
                format!("the closing line says {p} passed, {f} failed, {s} skipped, the lines {} passed, {} failed, {} skipped", o.passed.len(), o.failed.len(), o.skipped.len()),
                &mut v,
            );
        }
    }
    for l in boot_problems(serial) {
        problem(l, &mut v);
    }
    if end.timed_out {
        problem("timed out".into(), &mut v);
    } else if !end.exit_ok && v.tally.failed == 0 {
        problem("the kernel's exit status says failure, though no test failed".into(), &mut v);
    }
    v
}

/// The guest suites' failure lines of this run, repeated at its end: a long run's log is
/// often kept only in part (its head and tail), and the tail must say which test failed.
static FAILURE_LINES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn note_failure(line: String) {
    if let Ok(mut v) = FAILURE_LINES.lock() {
        v.push(line);
    }
}

/// The noted failure lines, each cut to `width` characters, at most `most` of them.
fn failure_summary(lines: &[String], width: usize, most: usize) -> Vec<String> {
    let mut out: Vec<String> = lines.iter().take(most).map(|l| {
        let l = l.replace('\n', " ");
        if l.chars().count() > width { format!("{}...", l.chars().take(width).collect::<String>()) } else { l }
    }).collect();
    if lines.len() > most {
        out.push(format!("(and {} more above)", lines.len() - most));
    }
    out
}

/// Print a verdict's problems (and, if any, the run's last serial lines); return its tally.
fn report(what: &str, v: &Verdict, serial: &str, last_lines: usize) -> TestTally {
    for p in &v.problems {
        println!("   FAILED: {what}: {p}");
        note_failure(format!("{what}: {p}"));
    }
    if !v.problems.is_empty() {
        for l in serial.lines().rev().take(last_lines).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    v.tally
}

fn parse_cargo_test_output(out: &str) -> TestTally {
    let mut t = TestTally::default();
    for line in out.lines() {
        // "test result: ok. 12 passed; 0 failed; 0 ignored; ..."
        if let Some(rest) = line.trim().strip_prefix("test result: ") {
            for part in rest.split(';') {
                let words: Vec<&str> = part.split_whitespace().collect();
                let n = |w: &str| words.iter().position(|x| *x == w).and_then(|i| i.checked_sub(1)).and_then(|i| words[i].parse::<usize>().ok());
                if let Some(p) = n("passed") {
                    t.passed += p;
                }
                if let Some(f) = n("failed") {
                    t.failed += f;
                }
                // An `#[ignore]`d host test does not run: a skip.
                if let Some(i) = n("ignored") {
                    t.skipped += i;
                }
            }
        }
    }
    t
}

fn host_tests() -> Result<TestTally, String> {
    println!("== host: cargo test");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(crate::host::env::workspace_root())
        .args(["test", "--workspace", "--exclude", "kernel", "--exclude", "apps", "--exclude", "libos"])
        .output()
        .map_err(|e| format!("cannot run cargo test: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut t = parse_cargo_test_output(&stdout);
    for line in stdout.lines().filter(|l| l.contains("FAILED") || l.contains("panicked")) {
        println!("   {line}");
    }
    if !out.status.success() && t.failed == 0 {
        // A build failure or crash: count it, and show why.
        eprintln!("{stderr}");
        t.failed += 1;
    }
    println!("   host: {} passed, {} failed, {} ignored", t.passed, t.failed, t.skipped);
    Ok(t)
}

/// The in-kernel tests a small boot may skip: first those that need two or more NUMA nodes
/// (placement by node), then those that need a second core (remote frees). A one-node,
/// one-core boot may skip them all.
const NUMA_AND_TWO_CORE_KTESTS: &[&str] = &[
    "kernel::tests::numa_pages_come_from_the_local_node",
    "kernel::tests::object_metadata_comes_from_the_memid_node",
    "kernel::tests::segment_pages_come_from_the_memid_node",
    "kernel::tests::remote_frees_are_reused_without_a_trim",
    "kernel::tests::fault_walk_races_the_unmap_of_its_parent_link",
    "kernel::tests::kernel_core_has_left_its_loop_when_set_role_returns",
    "kernel::kobj::ar::ktests::ar_view_disjoint_and_same_slot_from_several_cores",
    "kernel::kobj::ar::slot_ktests::ar_slots_neighbouring_writers_and_overlapping_claims",
    "kernel::kobj::ar::slot_ktests::ar_slots_get_sees_one_state_of_the_range",
];
/// The NUMA placement tests: they skip on one node.
const NUMA_KTESTS: &[&str] = NUMA_AND_TWO_CORE_KTESTS.split_at(3).0;
/// The tests that need a second core: they skip at 1 vCPU only.
const TWO_CORE_KTESTS: &[&str] = NUMA_AND_TWO_CORE_KTESTS.split_at(3).1;

/// What the in-kernel test boot at `smp` vCPUs and `numa_nodes` nodes declares: on one node
/// the NUMA placement tests may skip (nothing to place), over two or more they must pass; at
/// one vCPU the two-core tests may skip, at two or more they must pass.
fn kernel_expect(smp: u32, numa_nodes: u32) -> Expect {
    match (numa_nodes >= 2, smp >= 2) {
        (true, true) => Expect { may_skip: &[], must_pass: NUMA_AND_TWO_CORE_KTESTS },
        (true, false) => Expect { may_skip: TWO_CORE_KTESTS, must_pass: NUMA_KTESTS },
        (false, true) => Expect { may_skip: NUMA_KTESTS, must_pass: TWO_CORE_KTESTS },
        (false, false) => Expect { may_skip: NUMA_AND_TWO_CORE_KTESTS, must_pass: &[] },
    }
}

fn kernel_tests(kernel: &Path, smp: u32, numa_nodes: u32) -> Result<TestTally, String> {
    let cfg = VmConfig {
        smp,
        numa_nodes,
        mem_mib: 512,
        cmdline: "test".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    };
    if numa_nodes > 0 {
        println!("== kernel tests at {smp} vCPU(s), {numa_nodes} NUMA nodes");
    } else {
        println!("== kernel tests at {smp} vCPU(s)");
    }
    let out = boot_captured(&cfg, None, false)?;
    if let Some(l) = out.serial.lines().find(|l| l.contains("boot: ")) {
        println!("   {}", l.trim());
    }
    let v = judge_run(&out.serial, Ending::of(&out), &kernel_expect(smp, numa_nodes));
    let t = report(&format!("kernel tests at {smp} vCPUs"), &v, &out.serial, 15);
    println!("   {smp} vCPU(s): {} passed, {} failed, {} skipped ({:.1} s)", t.passed, t.failed, t.skipped, out.elapsed.as_secs_f64());
    Ok(t)
}

/// A boot that must stop cleanly with a failure exit and print `expect` on the console.
fn bad_boot(kernel: &Path, what: &str, mut cfg: VmConfig, expect: &str) -> Result<TestTally, String> {
    cfg.medium = Some(BootMedium::Kernel(kernel.to_path_buf()));
    cfg.timeout = Some(Duration::from_secs(120));
    let out = boot_captured(&cfg, None, false)?;
    let code = out.exit_code;
    let ok = !out.timed_out && code == Some(crate::host::vm::QEMU_EXIT_FAILURE) && out.serial.contains(expect);
    if ok {
        let line = out.serial.lines().find(|l| l.contains(expect)).unwrap_or("").trim();
        println!("   bad boot `{what}` stops cleanly: {line}");
        Ok(TestTally::PASS)
    } else {
        println!(
            "   FAILED: bad boot `{what}`: timed out={} exit={:?}, expected a line containing `{expect}`; serial:\n{}",
            out.timed_out, code, out.serial
        );
        note_failure(format!("bad boot `{what}`: timed out={} exit={code:?}", out.timed_out));
        Ok(TestTally::FAIL)
    }
}

fn bad_boot_conditions(kernel: &Path) -> Result<TestTally, String> {
    println!("== bad boot conditions");
    let with = |smp: u32, cmdline: &str| VmConfig { smp, cmdline: cmdline.into(), ..Default::default() };
    let cases = [
        ("--mem 16M", VmConfig { mem_mib: 16, ..with(1, "") }, "boot: failed: too little memory"),
        // q35 always builds ACPI tables; the i440FX machine can go without.
        ("no ACPI", VmConfig { machine: "pc,acpi=off".into(), ..with(1, "") }, "boot: failed: no ACPI"),
        ("32-bit CPU", VmConfig { cpu: "qemu32".into(), ..with(1, "") }, "boot: failed: CPU lacks"),
        // A deliberate kernel page fault must be reported with its symbolized backtrace.
        ("crash=pagefault", with(2, "crash=pagefault"), "deliberate_page_fault"),
        ("crash=panic", with(1, "crash=panic"), "KERNEL PANIC"),
        // A placement that cannot be applied (core 4 of 0-3): one `boot: error:` line, nothing
        // applied, and the boot's exit says failure (so a test run under it cannot pass).
        ("roles=kc:4,ac:1-2 at 4 vCPUs", with(4, "roles=kc:4,ac:1-2"), "boot: error: roles=kc:4,ac:1-2 not applied: cores 4-4 are not all online"),
    ];
    let mut t = TestTally::default();
    for (what, cfg, expect) in cases {
        t.add(bad_boot(kernel, what, cfg, expect)?);
    }
    Ok(t)
}

/// A user-program test boot: `cmdline` (with `init=PROG`) at `smp` vCPUs, its `utest` lines
/// judged against `expect` (the kernel's leak check after the program exited is in the exit
/// status: a failure there fails the boot, a pass adds no test). `net` adds the network card, `disk` a disk image.
pub struct UserBoot<'a> {
    pub smp: u32,
    pub cmdline: &'a str,
    pub expect: Expect,
    /// With the network card (a forwarded service port, chosen when the boot starts).
    pub net: bool,
    pub disk: Option<PathBuf>,
}

impl<'a> UserBoot<'a> {
    pub fn new(smp: u32, cmdline: &'a str, expect: Expect) -> UserBoot<'a> {
        UserBoot { smp, cmdline, expect, net: false, disk: None }
    }
}

pub fn user_boot(kernel: &Path, initrd: &Path, b: UserBoot) -> Result<TestTally, String> {
    let (smp, cmdline) = (b.smp, b.cmdline);
    let cfg = VmConfig {
        disk: b.disk,
        smp,
        cmdline: cmdline.into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(BOOT_TIMEOUT),
        net: if b.net { Some(crate::host::vm::NetConfig::service()?) } else { None },
        ..Default::default()
    };
    println!("== user tests ({cmdline}) at {smp} vCPU(s)");
    let out = boot_captured(&cfg, None, false)?;
    let end = Ending::of(&out);
    // The kernel's leak check after the program exited is part of the boot's verdict: a
    // failure exit is a problem in `v`, a clean one is not counted as a test of its own.
    let v = judge_run(&out.serial, end, &b.expect);
    if let Some(l) = out.serial.lines().find(|l| l.contains("roles in effect")) {
        println!("   {}", l.trim());
    }
    let t = report(&format!("`{cmdline}` at {smp} vCPUs"), &v, &out.serial, 12);
    if let Some(l) = out.serial.lines().find(|l| l.contains("init: free pages")) {
        println!("   {}", l.trim());
    }
    println!("   {smp} vCPU(s): {} passed, {} failed, {} skipped ({:.1} s)", t.passed, t.failed, t.skipped, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Each benchmark program runs to a clean exit with nothing leaked.

fn program_runs(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    println!("== user programs");
    let mut t = TestTally::default();
    let programs = crate::host::user::program_names()?;
    let runs: [(&str, &str, u32); 3] = [("hello", "hello -- one two", 2), ("memclone", "memclone -- 4M 2", 2), ("mempass", "mempass -- 4M 2", 2)];
    for (prog, cmd, smp) in runs {
        // Every program this suite runs is part of the tree: one missing from the archive is
        // a broken build, not a skip.
        if !programs.iter().any(|p| p == prog) {
            println!("   FAILED: no `{prog}` program in the archive (programs: {})", programs.join(", "));
            t.failed += 1;
            continue;
        }
        let cfg = VmConfig {
            smp,
            cmdline: format!("init={cmd}"),
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            initrd: Some(initrd.to_path_buf()),
            timeout: Some(BOOT_TIMEOUT),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false)?;
        let exit_line = out.serial.lines().find(|l| l.contains("exited with code")).unwrap_or("").trim().to_string();
        if out.kernel_exit_ok() && !out.timed_out {
            println!("   {prog}: {exit_line}");
            t.passed += 1;
        } else {
            println!("   FAILED: `init={cmd}` at {smp} vCPUs (timed out={}):\n{}", out.timed_out, out.serial);
            t.failed += 1;
        }
    }
    Ok(t)
}

/// A boot of `kernel` with the program archive `initrd` at `smp` vCPUs into the shell, which
/// reads its commands from the serial input.
fn shell_boot(kernel: &Path, initrd: &Path, smp: u32) -> VmConfig {
    VmConfig {
        smp,
        cmdline: "init=sh".into(),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    }
}

/// The shell (`init=sh`) with commands on its serial input: programs run on chosen cores
/// (its own included), bad input gets one line each and the shell keeps going, `halt` ends
/// it with nothing leaked.
fn shell_smoke(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    println!("== shell smoke test");
    // The initrd holds only the programs' loadable bytes (user::loadable_image): about 10 MB.
    let cfg = VmConfig { mem_mib: 192, ..shell_boot(kernel, initrd, 2) };
    // Input sent while the kernel boots can lose its first bytes (the UART is reset): lead
    // with blank lines, which the shell ignores.
    let input = format!("{}run -c 0,1 hello a b\nfoo\nrun -c 7 hello\nrun -c 1,x hello\nrun nosuch\ncores\nstat\nobjs\ngrant 1\nrun -c 1 hog\nrun -c 0 hog\nrun -c 1 hello after\nstat\nsleep 2000\nstat\nhalt\n", "\n".repeat(16));
    let out = boot_captured(&cfg, Some(&input), false)?;
    let checks: [(&str, &dyn Fn(&str) -> bool); 12] = [
        ("program output on both cores", &|s| s.lines().filter(|l| l.trim() == "arg 0: a").count() == 2),
        ("exit line from the shell's own core", &|s| s.contains("sh: hello on core 0 exited with code 0")),
        ("exit line from another core", &|s| s.contains("sh: hello on core 1 exited with code 0")),
        ("unknown command", &|s| s.contains("sh: unknown command `foo`")),
        ("bad core lists", &|s| s.matches("sh: bad core list").count() == 2),
        ("unknown program", &|s| s.contains("sh: no such program `nosuch`")),
        ("cores, stat, objs", &|s| s.contains("core 1: XC") && s.contains("soft_faults") && s.contains("segment  image")),
        ("grant without sched=core0", &|s| s.contains("sh: grant: unsupported")),
        ("out of memory, then keeps going", &|s| s.contains("sh: hog on core 1 exited with code") && s.contains("arg 0: after")),
        // On the shell's own core the program runs in the shell's context: running out of
        // memory must be a failed allocation (exit 2 from hog), not a fault ending the shell.
        ("out of memory on the shell's core", &|s| s.contains("sh: hog on core 0 exited with code 2") && s.contains("arg 0: after")),
        ("halt: clean exit, no leak", &|s| s.contains("sh: halt") && s.contains("init: `sh` exited with code 0")),
        // `sleep 2000` between two `stat`s: the shell's core and the idle core each spent at
        // least half of it halted (the kernel's own count, `halted_ms`), whatever the host's
        // speed. Catches an idle loop or a sleep that polls instead of halting.
        ("idle cores halt (halted_ms over `sleep 2000`)", &|s| cores_halted_between_last_stats(s, 1000).is_ok()),
    ];
    let mut t = TestTally::default();
    for (what, check) in checks {
        if check(&out.serial) {
            t.passed += 1;
        } else {
            println!("   FAILED: shell: {what}");
            if what.starts_with("idle cores halt") {
                if let Err(e) = cores_halted_between_last_stats(&out.serial, 1000) {
                    println!("   | {e}");
                }
            }
            t.failed += 1;
        }
    }
    if out.timed_out || !out.kernel_exit_ok() {
        println!("   FAILED: shell: timed out={} exit={:?}", out.timed_out, out.exit_code);
        t.failed += 1;
    }
    if t.failed > 0 {
        for l in out.serial.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   shell: {} passed, {} failed ({:.1} s)", t.passed, t.failed, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Boot `tcpserv` in `mode` with the card, open 40 connections from the host (after one
/// warm-up), and check every reply, the guest's count, and its leak check.
fn tcp_service(kernel: &Path, initrd: &Path, smp: u32, mode: &str, extra: &str) -> Result<TestTally, String> {
    use crate::guest::tcp_accept::{self, AcceptSpec};
    let name = format!("tcp service, {mode}{extra}, {smp} vCPUs");
    println!("== {name}");
    let net = crate::host::vm::NetConfig::service()?;
    let port = net.host_port(crate::host::vm::SERVICE_PORT).ok_or("no forward to the service port")?;
    let spec = AcceptSpec { conns: 40, rounds: 1, warmup: 1, ..AcceptSpec::default() };
    let cfg = VmConfig {
        smp,
        cmdline: format!("init=tcpserv -- mode={mode} conns={} warmup=1{extra}", spec.guest_conns()),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        initrd: Some(initrd.to_path_buf()),
        net: Some(net),
        ..Default::default()
    };
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let o = tcp_accept::run(&args, port, &spec, false)?;
    let mut t = TestTally::default();
    let mut check = |what: &str, ok: bool, detail: String| {
        if ok {
            t.passed += 1;
        } else {
            t.failed += 1;
            println!("   FAILED: {name}: {what}: {detail}");
        }
    };
    let good: u64 = o.rounds.iter().map(|r| r.ok).sum();
    let bad: u64 = o.rounds.iter().map(|r| r.failures.total()).sum();
    check("every reply is the 128 bytes", o.problem.is_none() && good == spec.conns && bad == 0, format!("{good} good, {bad} failed, problem {:?}", o.problem));
    let words = o.guest_words();
    let served = words.iter().find(|(k, _)| k == "conns").map(|(_, v)| v.clone()).unwrap_or_default();
    check("the guest counted every connection", served == spec.guest_conns().to_string(), format!("conns={served:?}"));
    // tcpserv sleeps when idle by default: every service core (and the kernel core) halted
    // during the run, counted by the kernel, and the service cores still served (the checks
    // above). Catches a service core or kernel core that polls despite `idle=sleep`.
    let halts = tcpserv_halts(&o.finished.serial);
    let not_halted: Vec<String> = halts.iter().filter(|h| h.role != "other" && h.halts == 0).map(|h| format!("core {} ({})", h.core, h.role)).collect();
    check(
        "service and kernel cores halted while idle (idle=sleep)",
        !halts.is_empty() && halts.iter().any(|h| h.role == "service") && not_halted.is_empty(),
        format!("never halted: {not_halted:?}; halts line: {:?}", o.finished.serial.lines().find(|l| l.starts_with("tcpserv: halts"))),
    );
    // The kernel's own verdict (init exited 0 and its leak check found nothing) is QEMU's
    // exit status, as for every other boot of the suite.
    let leak = o.finished.serial.lines().find(|l| l.contains("init: free pages")).unwrap_or("").to_string();
    let clean = o.finished.exit_code == Some(crate::host::vm::QEMU_EXIT_SUCCESS);
    check("exit 0 and nothing leaked", clean, format!("QEMU exit {:?}, {leak:?}", o.finished.exit_code));
    if t.failed > 0 {
        for l in o.finished.serial.lines().rev().take(10).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   {name}: {} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// The shell's `stat` tables: per core, `(halts, halted_ms)` (the last two columns).
fn shell_stat_tables(serial: &str) -> Vec<Vec<(u64, u64)>> {
    let mut tables = Vec::new();
    let mut cur: Option<Vec<(u64, u64)>> = None;
    for l in serial.lines() {
        // The header may follow the prompt on the same line.
        if l.contains("core  role  syscalls") && l.trim_end().ends_with("halts  halted_ms") {
            if let Some(t) = cur.take() {
                tables.push(t);
            }
            cur = Some(Vec::new());
            continue;
        }
        let Some(t) = cur.as_mut() else { continue };
        let w: Vec<&str> = l.split_whitespace().collect();
        match (w.first().and_then(|c| c.parse::<u64>().ok()), w.len()) {
            (Some(_), n) if n >= 3 => match (w[n - 2].parse(), w[n - 1].parse()) {
                (Ok(h), Ok(ms)) => t.push((h, ms)),
                _ => tables.push(cur.take().unwrap_or_default()),
            },
            _ => tables.push(cur.take().unwrap_or_default()),
        }
    }
    tables.extend(cur);
    tables
}

/// Between the last two `stat` tables every core spent at least `min_ms` more halted.
fn cores_halted_between_last_stats(serial: &str, min_ms: u64) -> Result<(), String> {
    let t = shell_stat_tables(serial);
    let [.., a, b] = t.as_slice() else { return Err(format!("want two `stat` tables, found {}", t.len())) };
    if a.is_empty() || a.len() != b.len() {
        return Err(format!("`stat` tables of {} and {} cores", a.len(), b.len()));
    }
    let short: Vec<String> = a.iter().zip(b).enumerate().filter(|(_, (x, y))| y.1.saturating_sub(x.1) < min_ms).map(|(c, (x, y))| format!("core {c}: {} ms halted", y.1.saturating_sub(x.1))).collect();
    if short.is_empty() {
        Ok(())
    } else {
        Err(format!("cores that did not halt for {min_ms} ms: {}", short.join(", ")))
    }
}

/// One core's entry of tcpserv's `tcpserv: halts idle=.. core0=ROLE:HALTS/MS ...` line.
#[derive(Debug, PartialEq)]
struct CoreHalts {
    core: u32,
    role: String,
    halts: u64,
    halted_ms: u64,
}

fn tcpserv_halts(serial: &str) -> Vec<CoreHalts> {
    let Some(line) = serial.lines().find(|l| l.starts_with("tcpserv: halts")) else { return Vec::new() };
    line.split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            let core = k.strip_prefix("core")?.parse().ok()?;
            let (role, counts) = v.split_once(':')?;
            let (h, ms) = counts.split_once('/')?;
            Some(CoreHalts { core, role: role.to_string(), halts: h.parse().ok()?, halted_ms: ms.parse().ok()? })
        })
        .collect()
}

/// `ltest` run by the shell (a cfork-under-the-shell bug once broke it): once on the shell's own
/// core (inside the shell's context, where cfork must leave the shell's mappings alone) and
/// once on core 1 (where core 0, the shell's, is busy: `Busy` for threads and cfork there,
/// the tests use core 2). Every `utest` line counts; both runs must exit 0, the second must
/// have found core 0 busy, and `halt` must end cleanly with nothing leaked.
fn shell_ltest(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    println!("== ltest under the shell at 3 vCPUs (its core, then another)");
    let cfg = shell_boot(kernel, initrd, 3);
    // Blank lines first: input sent while the kernel boots can lose bytes (see shell_smoke).
    let input = format!("{}run -c 0 ltest nomeasure\nrun -c 1 ltest nomeasure\nhalt\n", "\n".repeat(16));
    let out = boot_captured(&cfg, Some(&input), false)?;
    // Two runs of ltest, two closing lines; core 2 is free for both, so nothing may skip.
    let v = judge_run(&out.serial, Ending::of(&out), &Expect::ALL);
    let mut t = report("shell ltest", &v, &out.serial, 0);
    let checks: [(&str, &dyn Fn(&str) -> bool); 5] = [
        ("both runs finished", &|s| s.matches("utest: done").count() == 2),
        ("exit 0 on the shell's core", &|s| s.contains("sh: ltest on core 0 exited with code 0")),
        ("exit 0 on another core", &|s| s.contains("sh: ltest on core 1 exited with code 0")),
        ("the shell's core found busy from core 1", &|s| s.contains("cores::probe ... ok (free: [2], busy: [0])")),
        ("halt: clean exit, no leak", &|s| s.contains("sh: halt") && s.contains("init: `sh` exited with code 0")),
    ];
    for (what, check) in checks {
        if check(&out.serial) {
            t.passed += 1;
        } else {
            println!("   FAILED: shell ltest: {what}");
            t.failed += 1;
        }
    }
    if t.failed > 0 {
        for l in out.serial.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev() {
            println!("   | {l}");
        }
    }
    println!("   shell ltest: {} passed, {} failed, {} skipped ({:.1} s)", t.passed, t.failed, t.skipped, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Large configurations: every core online and every node found (boot only, no tests).
fn summary_boots(kernel: &Path) -> Result<TestTally, String> {
    println!("== boot summary at large configurations");
    let mut t = TestTally::default();
    for (smp, numa, mem) in [(64u32, 8u32, 1024u64), (16, 0, 512), (5, 3, 600)] {
        let cfg = VmConfig {
            smp,
            numa_nodes: numa,
            mem_mib: mem,
            medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
            timeout: Some(Duration::from_secs(120)),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false)?;
        let want_cores = format!("boot: {smp}/{smp} cores online");
        let want_nodes = format!(" {} NUMA nodes", numa.max(1));
        let line = out.serial.lines().find(|l| l.contains("cores online")).unwrap_or("").trim().to_string();
        if line.contains(&want_cores) && line.contains(&want_nodes) && out.kernel_exit_ok() {
            println!("   {line}");
            t.passed += 1;
        } else {
            println!("   FAILED: {smp} vCPUs / {numa} nodes: got `{line}`, timed out={}", out.timed_out);
            t.failed += 1;
        }
    }
    Ok(t)
}

/// The GRUB ISO must reach the same summary line under SeaBIOS and under OVMF (UEFI).
fn iso_boots() -> Result<TestTally, String> {
    println!("== ISO boots (GRUB Multiboot2)");
    let iso = crate::host::env::target_dir().join("os-test.iso");
    // The ISO carries the program archive as a Multiboot2 module: run a program from it.
    crate::host::iso::build_iso_with(&iso, "init=hello -- from-iso")?;
    crate::host::iso::ensure_ovmf()?;
    let mut t = TestTally::default();
    for uefi in [false, true] {
        let cfg = VmConfig {
            smp: 2,
            medium: Some(BootMedium::Iso { path: iso.clone(), uefi }),
            timeout: Some(Duration::from_secs(180)),
            ..Default::default()
        };
        let out = boot_captured(&cfg, None, false)?;
        let firmware = if uefi { "OVMF" } else { "SeaBIOS" };
        let line = out.serial.lines().find(|l| l.contains("boot: 2/2 cores online"));
        let ran = out.serial.contains("arg 0: from-iso");
        if let (Some(l), true, true, true) = (line, out.kernel_exit_ok(), out.serial.contains("via Multiboot2"), ran) {
            println!("   {firmware}: {} (and ran `hello` from the module)", l.trim());
            t.passed += 1;
        } else {
            println!("   FAILED: ISO under {firmware}: timed out={} exit={:?}; serial:\n{}", out.timed_out, out.exit_code, out.serial);
            t.failed += 1;
        }
    }
    Ok(t)
}

/// The kernel and the program archive, built when the first suite that boots needs them.
#[derive(Default)]
pub struct Artifacts {
    kernel: Option<PathBuf>,
    initrd: Option<PathBuf>,
}

impl Artifacts {
    pub fn kernel(&mut self) -> Result<PathBuf, String> {
        if self.kernel.is_none() {
            let k = crate::host::env::build_kernel()?;
            crate::host::env::ensure_qemu()?;
            self.kernel = Some(k);
        }
        Ok(self.kernel.clone().unwrap_or_default())
    }

    pub fn initrd(&mut self) -> Result<PathBuf, String> {
        if self.initrd.is_none() {
            self.initrd = Some(crate::host::user::build_initrd()?);
        }
        Ok(self.initrd.clone().unwrap_or_default())
    }
}

/// Runs the suites `--only` selects (all by default), in order, and keeps the totals and the
/// names of the suites that failed.
struct Runner {
    only: Vec<String>,
    list: bool,
    /// With `list`: print each selected suite (`--list`), or only collect its name.
    print_list: bool,
    /// With `list`: the names of the selected suites, in order.
    listed: Vec<String>,
    art: Artifacts,
    total: TestTally,
    failed_suites: Vec<String>,
    ran: usize,
    /// How many suites this run selects (for the progress line; 0: not known).
    planned: usize,
    start: Instant,
    /// Every suite at the default vCPU counts (no `--only`, `--host-only` or other `--smp`):
    /// a run whose counts go into the README and docs/testing.md.
    full: bool,
}

impl Runner {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| name.contains(p.as_str()))
    }

    /// Run suite `name` if selected.
    fn suite(&mut self, name: &str, f: impl FnOnce(&mut Artifacts) -> Result<TestTally, String>) -> Result<(), String> {
        self.suite_declaring(name, "", f)
    }

    /// `suite`, with what the suite declares (for `--list`).
    fn suite_declaring(&mut self, name: &str, declares: &str, f: impl FnOnce(&mut Artifacts) -> Result<TestTally, String>) -> Result<(), String> {
        if !self.wants(name) {
            return Ok(());
        }
        if self.list {
            if self.print_list {
                println!("{name}{}{declares}", if declares.is_empty() { "" } else { ": " });
            }
            self.listed.push(name.to_string());
            return Ok(());
        }
        // Progress: suite n of the selected ones, elapsed, a rough estimate (suites differ).
        if self.planned > 0 {
            println!("{}", crate::host::progress::line("== test", self.ran + 1, self.planned.max(self.ran + 1), &format!("suite `{name}`"), self.start.elapsed(), self.ran));
        }
        let t0 = Instant::now();
        let t = f(&mut self.art).map_err(|e| format!("suite `{name}`: {e}"))?;
        self.ran += 1;
        if t.failed > 0 {
            self.failed_suites.push(name.to_string());
        }
        println!("   [suite `{name}`: {} passed, {} failed, {} skipped, {:.0} s]", t.passed, t.failed, t.skipped, t0.elapsed().as_secs_f64());
        self.total.add(t);
        Ok(())
    }

    /// A user-program suite: `cmdline` (with `init=PROG`) booted at `smp` vCPUs.
    fn user(&mut self, smp: u32, cmdline: &'static str, expect: Expect) -> Result<(), String> {
        self.user_boot(UserBoot::new(smp, cmdline, expect))
    }

    fn user_boot(&mut self, b: UserBoot<'static>) -> Result<(), String> {
        let name = user_suite_name(b.cmdline, b.smp);
        let declares = describe_expect(&b.expect);
        self.suite_declaring(&name, &declares, |a| {
            let (k, i) = (a.kernel()?, a.initrd()?);
            user_boot(&k, &i, b)
        })
    }

    fn finish(self) -> Result<(), String> {
        if self.list {
            return Ok(());
        }
        if self.ran == 0 {
            return Err(format!("no suite matches --only {:?} (see `cargo xtask test --list`)", self.only));
        }
        println!("== {} suite(s) in {:.0} s", self.ran, self.start.elapsed().as_secs_f64());
        if !self.failed_suites.is_empty() {
            println!("failed suites: {}", self.failed_suites.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", "));
            let lines = FAILURE_LINES.lock().map(|v| v.clone()).unwrap_or_default();
            for l in failure_summary(&lines, 300, 20) {
                println!("   failed: {l}");
            }
        }
        let t = self.total;
        if self.full {
            let c = RunCounts { tally: t, suites: self.ran, seconds: self.start.elapsed().as_secs(), date: crate::host::date::today() };
            if let Err(e) = record_counts(&c) {
                println!("test counts: {e}");
                if t.failed == 0 {
                    return Err(format!("the test counts could not be recorded: {e}"));
                }
            }
        }
        println!("{} passed, {} failed, {} skipped", t.passed, t.failed, t.skipped);
        if t.failed > 0 {
            Err(format!("{} test(s) failed in {}", t.failed, self.failed_suites.join(", ")))
        } else if t.passed == 0 {
            Err("no test ran".into())
        } else {
            Ok(())
        }
    }
}

/// `PROG smp=N [OPTION...] [-- ARGS]` from a kernel command line with `init=PROG`.
fn user_suite_name(cmdline: &str, smp: u32) -> String {
    let (opts, args) = match cmdline.split_once(" -- ") {
        Some((o, a)) => (o, Some(a)),
        None => (cmdline, None),
    };
    let prog = opts.split_whitespace().find_map(|w| w.strip_prefix("init=")).unwrap_or("?");
    let mut name = format!("{prog} smp={smp}");
    for w in opts.split_whitespace().filter(|w| !w.starts_with("init=")) {
        name.push(' ');
        name.push_str(w);
    }
    if let Some(a) = args {
        name.push_str(" -- ");
        name.push_str(a);
    }
    name
}

fn describe_expect(e: &Expect) -> String {
    let mut d = String::from("every test must run");
    if !e.may_skip.is_empty() {
        d = format!("may skip {}", e.may_skip.join(", "));
    }
    if !e.must_pass.is_empty() {
        d.push_str(&format!("; must pass {}", e.must_pass.join(", ")));
    }
    d
}

/// utest's tests that need a second core (`need_cores(2)`): they skip at 1 vCPU only.
const UTEST_ONE_CORE: &[&str] = &[
    "pcore_run_and_halt",
    "pcore_run_errors",
    "pcore_run_busy",
    "pcore_halt_remote",
    "pcore_not_allocated",
    "share_not_given_unreachable",
    "unmap_then_touch_faults_child",
    "shared_range_no_fault_on_b",
    "shared_unmap_shootdown",
    "mman_two_cores",
    "join_halts_and_is_woken",
];

/// roletest's six tests; `role_change_under_load` and `forwarding_after_the_serving_kc_leaves`
/// need two kernel cores.
const ROLETEST_ALL: &[&str] =
    &["ac_forwarding", "role_change_under_load", "forwarding_after_the_serving_kc_leaves", "kc_refuses_contexts", "syscall_ring", "syscall_ring_from_ac"];
const ROLETEST_TWO_KCS: &[&str] = &["role_change_under_load", "forwarding_after_the_serving_kc_leaves"];
const ROLETEST_ONE_KC: &[&str] = &["ac_forwarding", "kc_refuses_contexts", "syscall_ring", "syscall_ring_from_ac"];

/// tctest's seven tests; `tc_thread_on_own_tc` needs the test's own core to be a TC too.
const TCTEST_ALL: &[&str] =
    &["tc_three_progress", "tc_halt_queued", "tc_exit_any_order", "tc_yield", "tc_queue_full", "tc_thread_on_own_tc", "tc_bad_input"];
const TCTEST_OTHER_TC: &[&str] = &["tc_three_progress", "tc_halt_queued", "tc_exit_any_order", "tc_yield", "tc_queue_full", "tc_bad_input"];

pub fn run(args: &crate::test::TestArgs) -> Result<(), String> {
    let (smp_list, host_only, only, list) = (args.smp.0.clone(), args.host_only, args.only.clone(), args.list);
    let mut r = Runner::new(only.clone(), list);
    r.full = only.is_empty() && !host_only && smp_list == [1, 2, 4, 8];
    if !list {
        let mut count = Runner::new(only, true);
        count.print_list = false;
        let _ = run_suites(&mut count, &smp_list, host_only);
        r.planned = count.listed.len();
    }
    run_suites(&mut r, &smp_list, host_only)?;
    r.finish()
}

impl Runner {
    fn new(only: Vec<String>, list: bool) -> Runner {
        Runner {
            only,
            list,
            print_list: true,
            listed: Vec::new(),
            art: Artifacts::default(),
            total: TestTally::default(),
            failed_suites: Vec::new(),
            ran: 0,
            planned: 0,
            start: Instant::now(),
            full: false,
        }
    }
}

/// The closing counts of a full run, as `target/test-counts.txt` keeps them and the README and
/// docs/testing.md quote them.
#[derive(Clone, Debug, PartialEq)]
pub struct RunCounts {
    pub tally: TestTally,
    pub suites: usize,
    pub seconds: u64,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
}

/// Where a full run leaves its closing counts (one line, [`RunCounts::line`]).
pub fn counts_file() -> PathBuf {
    crate::host::env::target_dir().join("test-counts.txt")
}

/// The files that quote the last full run's counts, between [`COUNTS_OPEN`] and
/// [`COUNTS_CLOSE`].
pub const COUNTS_DOCS: [&str; 2] = ["README.md", "docs/testing.md"];
pub const COUNTS_OPEN: &str = "<!-- test-counts: written by `cargo xtask test` after a full green run -->";
pub const COUNTS_CLOSE: &str = "<!-- /test-counts -->";

/// `1199` as `1 199` (the docs' grouping).
fn grouped(n: usize) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

impl RunCounts {
    /// The counts file's line: `passed=N failed=N skipped=N suites=N seconds=N date=D`.
    pub fn line(&self) -> String {
        format!("passed={} failed={} skipped={} suites={} seconds={} date={}", self.tally.passed, self.tally.failed, self.tally.skipped, self.suites, self.seconds, self.date)
    }

    #[cfg(test)]
    pub fn parse(line: &str) -> Result<RunCounts, String> {
        let get = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('='))).ok_or(format!("test counts: no `{k}=` in {line:?}"));
        let num = |k: &str| get(k)?.parse::<u64>().map_err(|e| format!("test counts: {k}: {e}"));
        Ok(RunCounts {
            tally: TestTally { passed: num("passed")? as usize, failed: num("failed")? as usize, skipped: num("skipped")? as usize },
            suites: num("suites")? as usize,
            seconds: num("seconds")?,
            date: get("date")?.to_string(),
        })
    }

    /// What the docs say between the markers.
    pub fn sentence(&self) -> String {
        let t = self.tally;
        format!(
            "{} tests ({} passed, {} failed, {} allowed skips) in {} suites, {} s of suites, on {}",
            grouped(t.passed + t.failed + t.skipped),
            grouped(t.passed),
            grouped(t.failed),
            grouped(t.skipped),
            self.suites,
            grouped(self.seconds as usize),
            self.date
        )
    }
}

/// `text` with the span between the markers replaced by `sentence`; an error unless the
/// markers occur exactly once each, in order.
pub fn replace_counts(text: &str, sentence: &str) -> Result<String, String> {
    let (Some(a), Some(b)) = (text.find(COUNTS_OPEN), text.find(COUNTS_CLOSE)) else {
        return Err("no test-counts markers".into());
    };
    if text.matches(COUNTS_OPEN).count() != 1 || text.matches(COUNTS_CLOSE).count() != 1 || b < a {
        return Err("the test-counts markers must occur once each, in order".into());
    }
    Ok(format!("{}{sentence}{}", &text[..a + COUNTS_OPEN.len()], &text[b..]))
}

/// The text between the markers.
#[cfg(test)]
pub fn quoted_counts(text: &str) -> Option<&str> {
    let a = text.find(COUNTS_OPEN)? + COUNTS_OPEN.len();
    let b = text[a..].find(COUNTS_CLOSE)? + a;
    Some(&text[a..b])
}

/// A full run's counts: always into [`counts_file`]; after a green run also into the README
/// and docs/testing.md, so the figures there are the last green full run's, not typed by hand.
fn record_counts(c: &RunCounts) -> Result<(), String> {
    let f = counts_file();
    std::fs::write(&f, format!("{}\n", c.line())).map_err(|e| format!("{}: {e}", f.display()))?;
    if c.tally.failed > 0 {
        println!("test counts: {} (not quoted in the docs: the run failed)", f.display());
        return Ok(());
    }
    let root = crate::host::env::workspace_root();
    for doc in COUNTS_DOCS {
        let p = root.join(doc);
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let new = replace_counts(&text, &c.sentence()).map_err(|e| format!("{doc}: {e}"))?;
        if new != text {
            std::fs::write(&p, new).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    println!("test counts: {}; {} quote it: {}", f.display(), COUNTS_DOCS.join(" and "), c.sentence());
    Ok(())
}

/// The names of every suite of a default `cargo xtask test` run, in order (nothing runs or is
/// printed). `cargo xtask mutants` checks its `--only` patterns against them.
pub fn suite_names() -> Vec<String> {
    let mut r = Runner::new(Vec::new(), true);
    r.print_list = false;
    // Listing runs no suite body, so it cannot fail.
    let _ = run_suites(&mut r, &[1, 2, 4, 8], false);
    r.listed
}

/// `cargo xtask fs test`: the file-system suite alone.
pub fn fs_command() -> Result<(), String> {
    let kernel = crate::host::env::build_kernel()?;
    let initrd = crate::host::user::build_initrd()?;
    let t = fs_suite(&kernel, &initrd)?;
    println!("{} passed, {} failed", t.passed, t.failed);
    if t.failed == 0 {
        Ok(())
    } else {
        Err("fs test failed".into())
    }
}

/// The file-system suite: `init=fstest` on a fresh image of its files (fs.rs makes it), then
/// fs.rs's checks of what the guest left there.
fn fs_suite(kernel: &Path, initrd: &Path) -> Result<TestTally, String> {
    let img = crate::fs::ci_image()?;
    // Two requesting cores and a kernel core need 3 vCPUs: that test runs in the next boot.
    let two = Expect { may_skip: &["fs_blk_dedicated_two_cores"], must_pass: &[] };
    let mut t = user_boot(kernel, initrd, UserBoot { disk: Some(img.clone()), ..UserBoot::new(2, "init=fstest", two) })?;
    // The disk's Dedicated mode with two requesting cores and a kernel core (abi::blk).
    let three = Expect { may_skip: &[], must_pass: &["fs_blk_dedicated_two_cores", "fs_blk_dedicated_refuses_bad_entries", "fs_blk_dedicated_kernel_core_removed", "fs_blk_dedicated_given_up_write_not_replayed", "fs_blk_dedicated_mount"] };
    t.add(user_boot(kernel, initrd, UserBoot { disk: Some(img.clone()), ..UserBoot::new(3, "init=fstest -- fs_blk_dedicated", three) })?);
    t.add(kernel_disk_tests(kernel, &img)?);
    t.add(crate::fs::ci_after_boots(kernel, initrd, &img)?);
    Ok(t)
}

/// The in-kernel driver tests that need a disk (`ktest! { on_request ... }` in
/// kernel/src/dev/ktests.rs: the kernel test boots have none), on the suite's image (they only
/// read it).
fn kernel_disk_tests(kernel: &Path, img: &Path) -> Result<TestTally, String> {
    let cfg = VmConfig {
        smp: 2,
        mem_mib: 512,
        cmdline: "test=kernel::dev::ktests".into(),
        disk: Some(img.to_path_buf()),
        medium: Some(BootMedium::Kernel(kernel.to_path_buf())),
        timeout: Some(BOOT_TIMEOUT),
        ..Default::default()
    };
    println!("== kernel driver tests with the disk at 2 vCPU(s)");
    let out = boot_captured(&cfg, None, false)?;
    let expect = Expect { may_skip: &[], must_pass: &["kernel::dev::ktests::disk_kernel_core_sleeps_when_idle_and_wakes_for_a_request"] };
    let v = judge_run(&out.serial, Ending::of(&out), &expect);
    let t = report("kernel driver tests with a disk", &v, &out.serial, 15);
    println!("   2 vCPU(s): {} passed, {} failed, {} skipped ({:.1} s)", t.passed, t.failed, t.skipped, out.elapsed.as_secs_f64());
    Ok(t)
}

/// Every suite of `cargo xtask test`, in order, through `r` (which runs or lists the ones
/// `--only` selects).
fn run_suites(r: &mut Runner, smp_list: &[u32], host_only: bool) -> Result<(), String> {
    r.suite("host", |_| host_tests())?;
    r.suite("loom", |_| {
        println!("== loom model checks");
        crate::percore_tasks::loom_tests()
    })?;
    r.suite("plugins", |_| {
        println!("== plugin tests");
        crate::plugins::tests()
    })?;
    if host_only {
        return Ok(());
    }
    for &smp in smp_list {
        r.suite_declaring(&format!("kernel smp={smp}"), &describe_expect(&kernel_expect(smp, 0)), |a| kernel_tests(&a.kernel()?, smp, 0))?;
    }
    r.suite_declaring("kernel smp=4 numa=2", &describe_expect(&kernel_expect(4, 2)), |a| kernel_tests(&a.kernel()?, 4, 2))?;
    r.user(1, "init=utest", Expect { may_skip: UTEST_ONE_CORE, must_pass: &[] })?;
    r.user(2, "init=utest", Expect::ALL)?;
    r.user(4, "init=utest", Expect::ALL)?;
    // The library OS (docs/libos.md): threads, cfork, descriptors on shares, the per-core heap.
    // At 4 vCPUs too: the heap stress's leak check drains every core's remote-free list
    // before it counts, so it is exact however the vCPUs are scheduled (docs/libos.md).
    r.user(2, "init=ltest -- nomeasure", Expect::ALL)?;
    r.user(4, "init=ltest -- nomeasure", Expect::ALL)?;
    r.suite("shell", |a| shell_smoke(&a.kernel()?, &a.initrd()?))?;
    r.suite("shell-ltest", |a| shell_ltest(&a.kernel()?, &a.initrd()?))?;
    // The shell's file commands on a disk image, the image then checked on the host.
    r.suite("shell-files", |a| crate::fs::shell_files(&a.kernel()?, &a.initrd()?))?;
    // Core roles under two placements: kernel cores on either side of an application core
    // (every test runs), and one kernel core serving two application cores (all but the two
    // role-change tests, which need a second kernel core to take over).
    r.user(4, "roles=kc:1,ac:2,kc:3 init=roletest", Expect { may_skip: &[], must_pass: ROLETEST_ALL })?;
    r.user(4, "roles=kc:3,ac:1-2 init=roletest", Expect { may_skip: ROLETEST_TWO_KCS, must_pass: ROLETEST_ONE_KC })?;
    // TC time-sharing under two placements: the test's own core and core 1 TCs (every test
    // runs), and one TC beside the test's XC core (all but the own-core case).
    r.user(3, "roles=tc:0-1 init=tctest", Expect { may_skip: &[], must_pass: TCTEST_ALL })?;
    r.user(3, "roles=tc:2 init=tctest", Expect { may_skip: &["tc_thread_on_own_tc"], must_pass: TCTEST_OTHER_TC })?;
    // Protected procedure calls (docs/ppc.md): a cfork'd server's gates called on the
    // client's core, which time-shares (a tick switches away in the middle of calls).
    r.user(2, "roles=tc:0-1 init=ppctest", Expect::ALL)?;
    // And from an application core (its calls run on the AC itself; the handler's other
    // system calls go to the kernel core), with the basic case beside it.
    r.user(
        3,
        "roles=tc:0,ac:1,kc:2 init=ppctest -- application_core call_runs",
        Expect { may_skip: &[], must_pass: &["ppc::calls_on_an_application_core", "ppc::call_runs_the_handler_in_the_server"] },
    )?;
    // The core scheduler on core 0 (NIX): grants, exhaustion, owners, races; and off by
    // default.
    r.user(4, "sched=core0 init=schedtest", Expect::ALL)?;
    r.user(2, "init=schedtest -- off", Expect::ALL)?;
    // Nothing a program does may break the kernel (docs/fuzz.md): isolation attacks (3
    // vCPUs adds the forwarded-call case), a short fuzz with and without allocation
    // injection (at 2, 4, 5 and 8 vCPUs: fuzz::CI_RUNS), and the planted-bug demonstration.
    r.user(2, "init=isolation", Expect { may_skip: &["forwarded_calls_name_kernel_core_objects"], must_pass: &[] })?;
    r.user(3, "init=isolation", Expect { may_skip: &[], must_pass: &["forwarded_calls_name_kernel_core_objects"] })?;
    r.suite("fuzz", |a| crate::fuzz::ci_fuzz(&a.kernel()?, &a.initrd()?))?;
    // The commutativity checker (docs/commute.md): a seeded sample of commuting
    // system-call pairs on two cores under the sharing audit; a case conflict-free in the
    // checked-in baseline that now shares a kernel line fails.
    r.suite("commute", |_| crate::commute::kernel::ci_tests())?;
    // The sample's check shown to catch a planted regression (kernel feature
    // `planted-conflict`: a global counter bumped by every `segment_alloc`), on every run.
    r.suite("commute-planted", |_| crate::commute::kernel::planted_ci_test())?;
    // The same for the POSIX calls on the library OS (`commute --system ours --ci`): a seeded
    // sample checked against xtask/src/commute/baseline-posix-ours.txt.
    r.suite("commute-posix ours", |_| crate::commute::posix::ci_tests(&["ours"]))?;
    // The same sample on Linux, judged on results only (the model against a real POSIX kernel;
    // Linux's shared lines vary between runs: posix.rs, `check_results_only`).
    r.suite("commute-posix linux", |_| crate::commute::posix::ci_tests_linux_results())?;
    // The network (docs/net.md): the card's device object under bad input, then Corey's TCP
    // service served to the host in each configuration, every reply checked.
    r.user_boot(UserBoot { net: true, ..UserBoot::new(2, "init=nettest", Expect::ALL) })?;
    for (smp, mode) in [(2u32, "dedicated"), (3, "polling"), (2, "inline")] {
        r.suite(&format!("tcp-service smp={smp} mode={mode}"), |a| tcp_service(&a.kernel()?, &a.initrd()?, smp, mode, ""))?;
    }
    // The same service through socket descriptors (`api=fd`: fd::tcp_listen/accept/write/close).
    r.suite("tcp-service smp=2 mode=dedicated api=fd", |a| tcp_service(&a.kernel()?, &a.initrd()?, 2, "dedicated", " api=fd"))?;
    // webd (docs/webd.md): each mode, every sum from every front-end, bad input, no leak.
    r.suite("webd", |a| crate::webd::suite::ci_tests(&a.kernel()?, &a.initrd()?))?;
    // The same sums from the Linux baseline's webd (its answers are checked too).
    r.suite("webd-linux", |_| crate::webd::suite::ci_tests_linux())?;
    // The network (docs/net-host.md): the Linux baseline's TCP service and the frame fuzzer.
    r.suite("net-qemu", |_| crate::net::qemu_tests())?;
    // Files (docs/fs.md): the disk's device object under bad input, ext2 read byte for byte
    // in the library OS, corrupt metadata; the image is still clean afterwards.
    r.suite("fs", |a| fs_suite(&a.kernel()?, &a.initrd()?))?;
    r.suite("programs", |a| program_runs(&a.kernel()?, &a.initrd()?))?;
    r.suite("linux-abi", |a| crate::exec::abi_suite::ci_tests(&a.kernel()?, &a.initrd()?))?;
    // The Linux personality under the Linux fuzzer (docs/fuzz.md, "The Linux fuzzer"): every
    // Linux call number with bad arguments, without and with allocation fault injection.
    r.suite("linux-fuzz", |a| crate::exec::fuzz::ci(&a.kernel()?, &a.initrd()?))?;
    // Metis MapReduce (docs/metis.md): wc, wri, wrmem equal to the host reference.
    r.suite("metis", |a| crate::metis::ci_check(&a.kernel()?))?;
    // Exact instructions per operation of the measured paths against the committed baseline
    // (docs/insngate.md): two boots at 1 vCPU.
    r.suite("insngate", |a| crate::insngate::ci_check(&a.kernel()?, &a.initrd()?))?;
    // The same check of the Linux baseline's metis (small inputs).
    r.suite("metis-linux", |_| crate::metis::ci_check_linux())?;
    // Unmodified static Linux programs (docs/linux-exec.md): the conformance suite's bounded
    // part, each case on the Linux guest (checked against what a Linux user expects) and on
    // this system (compared with Linux; linux/accepted-differences.txt lists what may differ).
    r.suite("linux-conformance", |_| crate::exec::conformance::ci_tests())?;
    // busybox's own testsuite, a bounded part (a few text applets, Debian's binary) on both
    // systems: a test that passes on Linux and not on ours fails unless
    // linux/busybox-testsuite-differences.txt lists it (docs/linux-exec.md).
    r.suite("busybox-testsuite", |_| crate::exec::bbsuite::ci())?;
    // Sockets and readiness for Linux programs (docs/linux-abi.md): an epoll server of ours
    // on both systems against Linux's replies, memcached on the Linux guest, values checked.
    r.suite("linux-sockets", |_| crate::exec::sockets::ci_tests())?;
    // The cycle model's 2-core smoke run (docs/model.md): two exact boots, identical, and the
    // model's numbers against xtask/src/model/smoke-expected.txt.
    r.suite("model-smoke", |_| crate::model::ci_check())?;
    r.suite("summary-boots", |a| summary_boots(&a.kernel()?))?;
    r.suite("gdb-stub", |a| crate::host::gdb::ci_check(&a.kernel()?))?;
    r.suite("bad-boots", |a| bad_boot_conditions(&a.kernel()?))?;
    r.suite("iso", |_| iso_boots())?;
    // report.html in a real browser (headless Chromium, installed on demand; a missing or
    // failing browser fails the suite): redrawn from a recorded results.json, printed to PDF
    // and drawn to PNG (docs/bench.md, "Checking the report").
    r.suite("report-browser", |_| crate::bench::report_check::ci_check())?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The command line of `test`

#[derive(clap::Args, Debug, Clone, PartialEq)]
#[command(args_override_self = true)]
pub struct TestArgs {
    /// vCPU counts for the in-kernel test boots, each 1..=255
    #[arg(long, value_name = "LIST", default_value = "1,2,4,8", value_parser = core_list)]
    pub smp: CoreList,
    /// Skip the QEMU boots
    #[arg(long)]
    pub host_only: bool,
    /// Run only the suites whose name contains PATTERN (repeatable), e.g. --only roletest --only "kernel smp=4"
    #[arg(long, value_name = "PATTERN", action = clap::ArgAction::Append, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub only: Vec<String>,
    /// Print the suites' names and what each declares, run nothing
    #[arg(long)]
    pub list: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_summary_cuts_long_lines_and_counts_the_rest() {
        let lines: Vec<String> = vec!["a\nb".into(), "x".repeat(10), "c".into(), "d".into()];
        let s = failure_summary(&lines, 5, 3);
        assert_eq!(s, vec!["a b".to_string(), "xxxxx...".to_string(), "c".to_string(), "(and 1 more above)".to_string()]);
        assert!(failure_summary(&[], 5, 3).is_empty());
    }

    #[test]
    fn shell_stat_tables_and_halted_time() {
        let head = "core  role  syscalls  soft_faults  cow_faults  flushes  ipis_sent  ipis_recv  contexts  switches  lock_waits  lock_spin_us  sched_msgs  halts  halted_ms";
        let serial = format!("sh> {head}\n   0  XC    10  0  0  0  0  0  1  0  0  0  0  5  100\n   1  XC    0  0  0  0  0  0  0  0  0  0  0  3  200\nsh> \nsh> {head}\n   0  XC    12  0  0  0  0  0  1  0  0  0  0  9  1300\n   1  XC    0  0  0  0  0  0  0  0  0  0  0  4  1900\nsh> halt\n");
        let t = shell_stat_tables(&serial);
        assert_eq!(t, vec![vec![(5, 100), (3, 200)], vec![(9, 1300), (4, 1900)]]);
        assert!(cores_halted_between_last_stats(&serial, 1000).is_ok());
        // Core 1 halted 1700 ms, core 0 only 1200: a threshold of 1500 names core 0.
        let e = cores_halted_between_last_stats(&serial, 1500).unwrap_err();
        assert!(e.contains("core 0") && !e.contains("core 1"), "{e}");
        assert!(cores_halted_between_last_stats("sh> \n", 1).is_err());
    }

    #[test]
    fn tcpserv_halts_line_is_read() {
        let serial = "x\ntcpserv: halts idle=sleep core0=service:12/340 core1=kc:5/20 core2=other:0/0\n";
        let h = tcpserv_halts(serial);
        assert_eq!(h.len(), 3);
        assert_eq!(h[0], CoreHalts { core: 0, role: "service".into(), halts: 12, halted_ms: 340 });
        assert_eq!(h[1].role, "kc");
        assert_eq!(h[2].halts, 0);
        assert!(tcpserv_halts("tcpserv: done conns=1\n").is_empty());
    }

    const CLEAN: Ending = Ending { timed_out: false, exit_ok: true };
    const EXIT_FAILURE: Ending = Ending { timed_out: false, exit_ok: false };

    fn judge(serial: &str, end: Ending, expect: &Expect) -> TestTally {
        judge_run(serial, end, expect).tally
    }

    fn tally(passed: usize, failed: usize, skipped: usize) -> TestTally {
        TestTally { passed, failed, skipped }
    }

    #[test]
    fn cargo_summary_lines_are_summed() {
        let out = "running 3 tests\ntest result: ok. 3 passed; 0 failed; 1 ignored\n\ntest result: FAILED. 1 passed; 2 failed; 0 ignored";
        assert_eq!(parse_cargo_test_output(out), tally(4, 2, 1));
    }

    #[test]
    fn three_outcomes_are_counted_apart() {
        let serial = "[0] ktest mm::pages ... ok (3 ms)\n[1] ktest heap::slab ... FAILED: leaked 3\n[0] ktest numa::x ... skipped (needs 2 or more NUMA nodes, the boot has 1)\n[0] ktest: done 1 passed, 1 failed, 1 skipped\n";
        let o = parse_outcomes(serial);
        assert_eq!(o.passed, vec!["mm::pages"]);
        assert_eq!(o.failed, vec![("heap::slab".to_string(), "leaked 3".to_string())]);
        assert_eq!(o.skipped, vec![("numa::x".to_string(), "needs 2 or more NUMA nodes, the boot has 1".to_string())]);
        assert_eq!(o.closing, vec![(1, 1, Some(1))]);
        let declared = Expect { may_skip: &["numa::x"], must_pass: &[] };
        assert_eq!(judge(serial, EXIT_FAILURE, &declared), tally(1, 1, 1));
    }

    /// Catches: a skip counted as a pass (the bug that let a stubbed `apply_boot_policy` pass).
    #[test]
    fn an_undeclared_skip_fails() {
        let serial = "utest a ... ok\nutest b ... skipped (needs a kernel core)\nutest: done 1 passed, 0 failed, 1 skipped\n";
        let v = judge_run(serial, CLEAN, &Expect::ALL);
        assert_eq!(v.tally, tally(1, 1, 0));
        assert!(v.problems[0].contains("b skipped (needs a kernel core)"), "{:?}", v.problems);
        assert_eq!(judge(serial, CLEAN, &Expect { may_skip: &["b"], must_pass: &[] }), tally(1, 0, 1));
    }

    /// Catches: the old `... ok (skipped: why)` form read as a pass.
    #[test]
    fn ok_skipped_is_a_skip_not_a_pass() {
        let serial = "utest ac_forwarding ... ok (skipped: needs roles=kc:1,ac:2)\nutest other ... ok (free: [2], busy: [0])\nutest: done 2 passed, 0 failed\n";
        let o = parse_outcomes(serial);
        assert_eq!(o.passed, vec!["other"], "a note that is not a skip stays a pass");
        assert_eq!(o.skipped, vec![("ac_forwarding".to_string(), "needs roles=kc:1,ac:2".to_string())]);
        let v = judge_run(serial, CLEAN, &Expect::ALL);
        // The skip fails, and the old closing line (2 passed) disagrees with the lines.
        assert_eq!(v.tally.failed, 2, "{:?}", v.problems);
    }

    /// Catches: `ktest: done 0 passed, 0 failed` accepted.
    #[test]
    fn zero_tests_fail() {
        assert_eq!(judge("[0] ktest: done 0 passed, 0 failed\n", CLEAN, &Expect::ALL).failed, 1);
        assert_eq!(judge("ktest: done 0 passed, 0 failed, 0 skipped\n", EXIT_FAILURE, &Expect::ALL).failed, 1);
        // Everything skipped, even if declared, checked nothing.
        let all_skipped = "utest a ... skipped (x)\nutest: done 0 passed, 0 failed, 1 skipped\n";
        assert_eq!(judge(all_skipped, CLEAN, &Expect { may_skip: &["a"], must_pass: &[] }), tally(0, 1, 1));
    }

    /// Catches: a run that stopped after its last test line accepted.
    #[test]
    fn a_missing_closing_line_fails() {
        let v = judge_run("utest a ... ok\nutest b ... ok\n", CLEAN, &Expect::ALL);
        assert_eq!(v.tally, tally(2, 1, 0));
        assert!(v.problems[0].contains("no closing"));
    }

    /// Catches: a kernel crash in the middle of a run read from the lines before it.
    #[test]
    fn a_crash_fails() {
        let serial = "[0] ktest a ... ok (1 ms)\n[1] KERNEL PANIC: panicked at kernel/src/x.rs:1:1:\n  #0 kernel::x\n";
        let v = judge_run(serial, EXIT_FAILURE, &Expect::ALL);
        assert_eq!(v.tally.passed, 1);
        assert!(v.tally.failed >= 2, "no closing line and the panic: {:?}", v.problems);
        assert!(v.problems.iter().any(|p| p.contains("KERNEL PANIC")));
    }

    /// Catches: a hang whose lines so far look fine.
    #[test]
    fn a_timeout_fails() {
        let serial = "utest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\n";
        assert_eq!(judge(serial, CLEAN, &Expect::ALL), tally(1, 0, 0));
        let v = judge_run(serial, Ending { timed_out: true, exit_ok: false }, &Expect::ALL);
        assert_eq!(v.tally, tally(1, 1, 0));
        assert_eq!(v.problems, vec!["timed out"]);
    }

    /// Catches: a command-line option the kernel could not apply (the tests then skip or test
    /// the wrong thing) passing unnoticed.
    #[test]
    fn a_boot_error_line_fails() {
        let serial = "boot: error: roles=kc:4,ac:1-2 not applied: cores 4-4 are not all online (4 cores: 0-3); every core stays XC\nutest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\n";
        let v = judge_run(serial, CLEAN, &Expect::ALL);
        assert_eq!(v.tally, tally(1, 1, 0));
        assert!(v.problems[0].starts_with("boot: error: roles="));
    }

    /// Catches: a declared test that did not run at all (renamed, or the program stopped
    /// selecting it) passing as long as the others do.
    #[test]
    fn a_required_test_must_run() {
        let serial = "utest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\n";
        let v = judge_run(serial, CLEAN, &Expect { may_skip: &[], must_pass: &["a", "b"] });
        assert_eq!(v.tally, tally(1, 1, 0));
        assert!(v.problems[0].contains("b must pass"));
        // A required test that skipped is one failure, not two.
        let skipped = "utest a ... ok\nutest b ... skipped (x)\nutest: done 1 passed, 0 failed, 1 skipped\n";
        assert_eq!(judge(skipped, CLEAN, &Expect { may_skip: &[], must_pass: &["a", "b"] }), tally(1, 1, 0));
    }

    /// Catches: lines lost or the program's counts wrong.
    #[test]
    fn the_closing_line_must_agree_with_the_lines() {
        let serial = "utest a ... ok\nutest: done 2 passed, 0 failed, 0 skipped\n";
        assert_eq!(judge(serial, CLEAN, &Expect::ALL).failed, 1);
        // Two runs (ltest twice under the shell): the closing lines add up.
        let two = "utest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\nutest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\n";
        assert_eq!(judge(two, CLEAN, &Expect::ALL), tally(2, 0, 0));
    }

    /// Catches: a failure exit with every line fine (a leak, an option not applied).
    #[test]
    fn a_failure_exit_without_failed_tests_fails() {
        let serial = "utest a ... ok\nutest: done 1 passed, 0 failed, 0 skipped\n";
        assert_eq!(judge(serial, EXIT_FAILURE, &Expect::ALL), tally(1, 1, 0));
    }

    #[test]
    fn lines_that_are_not_test_lines_are_ignored() {
        let serial = "init: starting `utest` on core 0\nsh: ltest on core 1 exited with code 0\nktest: no test matches `x`\n";
        let o = parse_outcomes(serial);
        assert!(o.passed.is_empty() && o.failed.is_empty() && o.skipped.is_empty() && o.closing.is_empty());
    }

    /// Catches: counts in the docs that no run produced (a marker lost, a sentence edited by
    /// hand into another form), and a counts line or sentence that loses a figure.
    #[test]
    fn the_docs_quote_a_run_s_counts() {
        let c = RunCounts { tally: tally(1167, 0, 32), suites: 44, seconds: 512, date: "2026-11-29".into() };
        assert_eq!(RunCounts::parse(&c.line()).unwrap(), c);
        assert_eq!(c.sentence(), "1 199 tests (1 167 passed, 0 failed, 32 allowed skips) in 44 suites, 512 s of suites, on 2026-11-29");
        let doc = format!("before {COUNTS_OPEN}old text{COUNTS_CLOSE} after");
        let new = replace_counts(&doc, &c.sentence()).unwrap();
        assert_eq!(quoted_counts(&new), Some(c.sentence().as_str()));
        assert!(new.starts_with("before ") && new.ends_with(" after"));
        assert!(replace_counts("no markers", "x").is_err());
        assert!(replace_counts(&format!("{doc}{doc}"), "x").is_err());
        assert!(RunCounts::parse("passed=1 failed=0 suites=2 seconds=3 date=x").is_err(), "no skipped=");
        // Each doc quotes one sentence in the form a run writes (a run then replaces it).
        let root = crate::host::env::workspace_root();
        for d in COUNTS_DOCS {
            let text = std::fs::read_to_string(root.join(d)).unwrap();
            replace_counts(&text, "x").unwrap_or_else(|e| panic!("{d}: {e}"));
            let q = quoted_counts(&text).unwrap();
            let words: Vec<&str> = q.split_whitespace().collect();
            assert!(q.contains(" tests (") && q.contains(" allowed skips) in ") && q.contains(" suites, ") && words.last().is_some_and(|w| w.len() == 10), "{d}: {q:?}");
        }
        assert_eq!(grouped(7), "7");
        assert_eq!(grouped(1000), "1 000");
        assert_eq!(grouped(123456), "123 456");
        assert_eq!(crate::host::date::today().len(), 10);
    }

    #[test]
    fn suite_names() {
        assert_eq!(user_suite_name("roles=kc:1,ac:2,kc:3 init=roletest", 4), "roletest smp=4 roles=kc:1,ac:2,kc:3");
        assert_eq!(user_suite_name("init=ltest -- nomeasure", 2), "ltest smp=2 -- nomeasure");
    }
}
