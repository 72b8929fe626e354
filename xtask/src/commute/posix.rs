//! `cargo xtask commute --system ours|linux|both`: the POSIX calls (docs/commute.md, "POSIX
//! calls") on this system's library OS and on Linux, the same cases under the same audit.
//!
//! Both systems boot the way `cargo xtask bench` boots them (`guest::boot::Guest`: ours runs
//! `bench-ours`, Linux Debian's kernel with `bench-linux` as /init), 2 vCPUs, the benchmark's
//! ext2 disk image attached (`fsimage`, `snapshot=on`), the sharing plugin in the exact mode
//! with **kernel and user lines** (the library OS's file system is user code, Linux's is kernel
//! code: the audit must see both to compare them), one plugin epoch per case. The command-line
//! word `commute-posix` makes either program run `bench::commute_posix` instead of a benchmark.
//! The steps are the pipeline's (pipeline.rs); this file boots the systems for them and names
//! their lines.

use super::baseline;
use super::options::CommuteArgs;
use super::pipeline::{self as p, Boot, Outcome};
use super::posix_model::Posix;
use crate::guest::boot::Guest;
use crate::guest::plugin;
use crate::guest::symbols::{self, Symbols};
use crate::host::outcome::TestTally;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;
use testdefs::posix_cases::{self as pc, Op};

/// Boot `system` ("ours" or "linux") once and run the cases of `pick` (`I,J-K`).
pub fn run_system(system: &str, pick: &str, timeout: Duration) -> Result<Vec<Outcome<Op>>, String> {
    let mut parts = run_system_jobs(system, &[pick.to_string()], timeout)?;
    Ok(parts.pop().unwrap_or_default())
}

/// Boot `system` once per element of `picks`, all at once (`--jobs`), and return each boot's
/// outcomes in the order given. The guest, its disk image and the symbols are prepared once
/// before any boot (preparing writes shared files: Linux's initramfs); each boot has its own
/// plugin report and serial log, and its disk is `snapshot=on`, so the boots share no file
/// they write.
pub fn run_system_jobs(system: &str, picks: &[String], timeout: Duration) -> Result<Vec<Vec<Outcome<Op>>>, String> {
    let logs = crate::host::env::target_dir().join("commute").join("logs");
    let guest: Box<dyn Guest> = match system {
        "ours" => Box::new(crate::guest::ours::OursSystem::prepare(512, false, &logs)?),
        "linux" => Box::new(crate::guest::linux_sys::LinuxSystem::prepare(512, false, &logs)?),
        other => return Err(format!("commute: unknown system `{other}` (ours, linux, both)")),
    };
    let built = plugin::build()?;
    let image = crate::guest::fsimage::image()?;
    let mut boots = Vec::new();
    for (job, pick) in picks.iter().enumerate() {
        let out = p::report_file(&format!("commute-posix-{system}"), job)?;
        // `bench=fs_commute` makes the Linux side boot the initramfs with the disk's modules.
        let words = format!("bench=fs_commute {} pick={pick}", bench_word());
        let mut cfg = guest.vm(&words);
        cfg.smp = 2;
        cfg.mem_mib = 512;
        cfg.timeout = Some(timeout);
        cfg.extra.extend(crate::guest::fsimage::disk_args(&image));
        cfg.extra.extend(["-plugin".into(), p::sharing_arg(&built, &out, "", 2)]);
        boots.push(Boot { args: p::boot_args(&cfg), out });
    }
    let names = names(system)?;
    let _ = fs::create_dir_all(&logs);
    let n = boots.len();
    let tag = |job: usize| if n > 1 { format!("{system} job {job}") } else { system.to_string() };
    let log = |job: usize, run: &crate::host::qemu::RunOutput| {
        let file = if n > 1 { format!("commute-posix-{system}-job{job}.serial.txt") } else { format!("commute-posix-{system}.serial.txt") };
        let _ = fs::write(logs.join(file), &run.serial);
    };
    p::run_all::<Posix>(&boots, timeout, &tag, &|r| symbol_of(&names, r.u("vaddr"), r.u("pc")), &log)
}

/// The word that selects the checker in both guest programs.
fn bench_word() -> &'static str {
    "commute-posix"
}

/// The names of a system's lines: its kernel's symbols and (ours) the user program's, where
/// the library OS is.
struct Names {
    kernel: Symbols,
    user: Option<Symbols>,
}

fn names(system: &str) -> Result<Names, String> {
    match system {
        "ours" => {
            let k = Symbols::from_elf_file(&crate::host::env::build_kernel()?)?;
            let user = crate::host::user::user_target_dir().join("x86_64-unknown-none/release/bench-ours");
            Ok(Names { kernel: k, user: Symbols::from_elf_file(&user).ok() })
        }
        _ => {
            // nokaslr: the addresses of a /proc/kallsyms dumped once (cached) hold for every boot
            // (the package's System.map is a placeholder).
            Ok(Names { kernel: symbols::linux_symbols()?, user: None })
        }
    }
}

/// A line's name: its data symbol, else `[heap] written by FUNCTION` (kernel memory without a
/// symbol) or `[user] written by FUNCTION` (user memory without one: heap, stack).
fn symbol_of(names: &Names, vaddr: u64, pc: u64) -> String {
    let clean = |n: String| p::demangle(n.split('+').next().unwrap_or(&n));
    let user = |a: u64, max: u64| names.user.as_ref().and_then(|u| u.name_any(a, max));
    if vaddr >= 0xffff_ffff_c000_0000 {
        return "[module data]".into();
    }
    if let Some(n) = names.kernel.name(vaddr).or_else(|| if vaddr >> 63 == 0 && vaddr != 0 { user(vaddr, 1 << 16) } else { None }) {
        return clean(n);
    }
    let place = if vaddr >> 63 != 0 || pc >> 63 != 0 { "[heap]" } else { "[user]" };
    // Linux's modules (ext4, jbd2, mbcache, virtio_blk: loaded by the guest, so not in the
    // kallsyms dump of a guest without them) live from 0xffffffffc0000000.
    let module = |a: u64| (a >= 0xffff_ffff_c000_0000).then(|| "module code (ext4, jbd2, virtio_blk)".to_string());
    let by = names.kernel.name(pc).map(clean).or_else(|| user(pc, 1 << 20).map(clean)).or_else(|| module(pc)).unwrap_or("?".into());
    format!("{place} written by {by}")
}

/// The report of one system: per call pair, commuting and conflict-free cases; the
/// conflicting cases grouped by pair with their symbols; the symbols by case count; results
/// the model does not allow; the total.
pub fn report(system: &str, outcomes: &[Outcome<Op>]) -> String {
    let (commuting, _, _) = p::totals(outcomes);
    p::report::<Posix>(outcomes, &format!("== {system}: {} cases run ({commuting} commute in the model)", outcomes.len()), &summary(system, outcomes))
}

fn heat_map_title(system: &str) -> String {
    format!("Conflict-free share of commutative POSIX cases per call pair ({system}, 2 cores, exact sharing audit, kernel and user lines)")
}

/// `SYSTEM: X/Y commutative cases conflict-free (P%); N result(s) the model does not allow`.
pub fn summary(system: &str, outcomes: &[Outcome<Op>]) -> String {
    let (commuting, free, bad) = p::totals(outcomes);
    format!("{system}: {free}/{commuting} commutative cases conflict-free ({:.1}%); {bad} result(s) the model does not allow", p::percent(free, commuting))
}

/// `cargo xtask commute --system ...` (mod.rs sends it here).
pub fn main(system: &str, args: &CommuteArgs) -> Result<(), String> {
    let systems: &[&str] = match system {
        "both" => &["ours", "linux"],
        "ours" => &["ours"],
        _ => &["linux"],
    };
    let calls = args.calls.as_deref();
    if let Some(c) = calls {
        if let Some(bad) = c.split(',').find(|n| !pc::CALLS.iter().any(|k| k.name == *n)) {
            let names: Vec<&str> = pc::CALLS.iter().map(|k| k.name).collect();
            return Err(format!("commute --system: unknown POSIX call `{bad}` (modelled: {})", names.join(", ")));
        }
    }
    if args.planted {
        return Err("commute --system: --planted is for the kernel calls".into());
    }
    let timeout = Duration::from_secs(args.timeout);
    if args.ci {
        let t = ci_run(systems, args.update_baseline, &args.accept, timeout)?;
        return if t.failed > 0 { Err(format!("{} POSIX sampled case(s) regressed", t.failed)) } else { Ok(()) };
    }
    if args.list {
        p::print_list::<Posix>();
        return Ok(());
    }
    if args.model_only {
        p::print_model_only::<Posix>(calls);
        return Ok(());
    }
    let out = args.out.clone().unwrap_or_else(|| crate::host::env::target_dir().join("commute"));
    run(systems, calls, out, timeout, args.jobs)
}

/// A full run: every selected case on each system, reported, tabled and drawn.
fn run(systems: &[&str], calls: Option<&str>, out: PathBuf, timeout: Duration, jobs: usize) -> Result<(), String> {
    // Every selected case runs (the non-commuting ones check the results against the model).
    let idx: Vec<usize> = p::decide_all::<Posix>().iter().filter(|(c, _)| p::selected(calls, c)).map(|(c, _)| c.index).collect();
    // `--jobs`: contiguous parts, one boot each, merged back case for case.
    let parts = p::split_parts(&idx, jobs);
    let picks: Vec<String> = parts.iter().map(|part| p::pick_arg(part)).collect();
    if jobs > 1 && systems.contains(&"ours") {
        // docs/history/2026-11-29.md, "`cargo xtask commute --jobs N`, ...": one boot's run
        // is reproducible case for case, a split one is not quite (history-dependent false
        // sharing).
        println!("note: with --jobs the library OS's shared lines can differ from a one-boot run in a few cases (a case's lines depend on what its boot ran before it); results and the model's checks do not");
    }
    fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let mut summaries = Vec::new();
    for system in systems {
        let t0 = std::time::Instant::now();
        let outcomes = p::merge_parts(run_system_jobs(system, &picks, timeout)?, &parts, |o| o.case.index)?;
        let text = report(system, &outcomes);
        print!("{text}");
        println!("({system} guest run {:.0} s with {} job(s), one run on a shared host)\n", t0.elapsed().as_secs_f64(), parts.len());
        let path = out.join(format!("commute-posix-{system}.txt"));
        fs::write(&path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        p::write_csv(&out.join(format!("commute-posix-{system}.csv")), &outcomes)?;
        p::write_heat_maps::<Posix>(&out.join(format!("commute-posix-{system}-heatmap.svg")), &outcomes, &heat_map_title(system))?;
        summaries.push(summary(system, &outcomes));
    }
    println!("evidence: exact sharing audit (single-threaded TCG, icount, 2 vCPUs), kernel and user lines, one plugin epoch per case");
    for s in summaries {
        println!("{s}");
    }
    Ok(())
}

/// The CI sample: this many commuting POSIX cases, drawn with a fixed seed.
const CI_SAMPLE: usize = 40;
const CI_SEED: u64 = 1919;

/// The sampled cases, ascending (the same draw as the kernel calls' sample).
pub fn ci_sample() -> Vec<usize> {
    p::draw_sample(&p::commuting::<Posix>(), CI_SAMPLE, CI_SEED).into_iter().collect()
}

/// The checked-in baseline of one system's CI sample.
pub fn baseline_path(system: &str) -> PathBuf {
    p::baseline_file(&format!("baseline-posix-{system}.txt"))
}

/// A run's cases as the baseline check sees them.
fn seen(system: &str, outcomes: &[Outcome<Op>]) -> Vec<baseline::Seen> {
    outcomes.iter().map(|o| p::seen::<Posix>(o, format!("commute::posix_{system}_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b))).collect()
}

/// The accepted-regressions set of a system's baseline.
fn baseline_set(system: &str) -> String {
    format!("posix-{system}")
}

/// Compare a CI run with its baseline and the accepted regressions (`baseline::check`): a
/// case that was conflict-free and now conflicts fails (with its symbols) unless
/// accepted-regressions.txt lists it; so does a result the model does not allow and a case
/// the baseline does not name as it is now.
pub fn check_baseline(system: &str, outcomes: &[Outcome<Op>], baseline: &str, accepted: &baseline::Accepted) -> Result<TestTally, String> {
    baseline::check(&baseline_set(system), &seen(system, outcomes), baseline, accepted, &format!("cargo xtask commute --system {system} --ci --update-baseline"))
}

/// The CI sample on `systems`, against their baselines (`update`: rewrite them instead).
pub fn ci_run(systems: &[&str], update: bool, accept: &[usize], timeout: Duration) -> Result<TestTally, String> {
    let sample = ci_sample();
    let mut total = TestTally::default();
    for system in systems {
        if *system == "linux" {
            // No conflict baseline for Linux: its shared lines vary between runs
            // (`check_results_only`).
            if update {
                return Err("commute: Linux has no conflict baseline (its shared lines vary from run to run); `--system linux --ci` checks its results against the model".into());
            }
            total.add(ci_tests_linux_results()?);
            continue;
        }
        let outcomes = run_system(system, &p::pick_arg(&sample), timeout)?;
        if outcomes.len() != sample.len() {
            return Err(format!("{system}: the guest ran {} of the {} sampled cases", outcomes.len(), sample.len()));
        }
        let path = baseline_path(system);
        if update {
            let header = format!("# The POSIX commutativity checker's CI sample on {system} (`cargo xtask commute --system {system} --ci`):\n# per sampled case, its status: `free` (conflict-free when written), `conflict` (never recorded\n# free) or `accepted` (was free; conflicting since, listed with its reason in\n# accepted-regressions.txt). Regenerate with `cargo xtask commute --system {system} --ci --update-baseline`\n# after changing posix_cases.rs or fixing a conflict; a free case that now conflicts needs\n# `--accept CASE` (docs/commute.md).\n");
            p::update_baseline(&path, &baseline_set(system), &seen(system, &outcomes), accept, &header)?;
            print!("{}", report(system, &outcomes));
            continue;
        }
        let t = check_baseline(system, &outcomes, &p::read(&path)?, &baseline::read_accepted()?)?;
        println!("{system}: {} passed, {} failed", t.passed, t.failed);
        total.add(t);
    }
    Ok(total)
}

/// The CI suite (`cargo xtask test --only commute`): the sample on this system's library OS.
pub fn ci_tests(systems: &[&str]) -> Result<TestTally, String> {
    ci_run(systems, false, &[], Duration::from_secs(600))
}

/// Judge a Linux run of the sample on its results only: each case passes when Linux's two
/// results are ones the model allows (so the model of POSIX the library OS is held to is
/// checked against a real POSIX kernel in every test run). Its shared lines are printed, not
/// judged: on Linux they vary from run to run (a timer tick's `tk_core`/`resched_curr`, the
/// buffer-head LRU of `__find_get_block` land in some cases' windows and not in others:
/// three runs of the same 40 cases on one tree gave 17, 16 and 15 conflict-free),
/// so a Linux conflict baseline would fail by chance.
pub fn check_results_only(system: &str, outcomes: &[Outcome<Op>]) -> TestTally {
    let mut t = TestTally::default();
    for o in outcomes {
        let name = format!("commute::posix_{system}_results_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b);
        if o.results_ok() {
            println!("{name} ... ok{}", if o.conflicts.is_empty() { "" } else { " (shares lines here: not judged)" });
            t.add(TestTally::PASS);
        } else {
            println!("{name} ... FAILED ({}: results a={} b={}, the model allows {:?} or {:?})", p::case_label(&o.case), o.got.0, o.got.1, o.verdict.ab, o.verdict.ba);
            t.add(TestTally::FAIL);
        }
    }
    t
}

/// The CI suite `commute-posix linux`: the sample on Linux, results against the model.
pub fn ci_tests_linux_results() -> Result<TestTally, String> {
    let sample = ci_sample();
    let outcomes = run_system("linux", &p::pick_arg(&sample), Duration::from_secs(600))?;
    if outcomes.len() != sample.len() {
        return Err(format!("linux: the guest ran {} of the {} sampled cases", outcomes.len(), sample.len()));
    }
    let t = check_results_only("linux", &outcomes);
    println!("{}", summary("linux", &outcomes));
    println!("linux: {} passed, {} failed (results against the model; shared lines not judged)", t.passed, t.failed);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::pipeline::{case_label, decide_all, parse_case_line, Conflict, Model};
    use super::super::posix_model::State;

    // Catches a case line the host reads differently from how the guest prints it.
    #[test]
    fn parses_case_lines() {
        assert_eq!(parse_case_line("commute-posix", "commute-posix i=12 a=f:a:1:8192 b=E:NotFound"), Some((12, "f:a:1:8192".into(), "E:NotFound".into())));
        assert_eq!(parse_case_line("commute-posix", "commute-posix-done"), None);
    }

    // Catches a results-only check that cannot fail: a result the model does not allow fails,
    // a shared line alone does not.
    #[test]
    fn linux_results_check_fails_on_a_wrong_result_only() {
        let c = Posix::case(0).unwrap();
        let v = p::decide::<Posix>(&State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        o.conflicts.push(Conflict { symbol: "tk_core".into(), pa: "0x40".into(), readers: 2, writers: 2 });
        assert_eq!(check_results_only("linux", &[o.clone()]), TestTally::PASS);
        o.got = ("E:Planted".into(), "E:Planted".into());
        assert_eq!(check_results_only("linux", &[o]), TestTally::FAIL);
    }

    // Catches a POSIX heat map that drops a pair or counts a conflicting case as free.
    #[test]
    fn posix_heat_map_counts_conflicts_per_pair() {
        let d = decide_all::<Posix>();
        let (c, v) = d.iter().find(|(_, v)| v.commutes).cloned().unwrap();
        let free = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let mut shared = free.clone();
        shared.conflicts.push(Conflict { symbol: "libos::fs::FS".into(), pa: "0x40".into(), readers: 2, writers: 2 });
        let svg = p::heat_map_svg::<Posix>(&[free.clone(), shared], &heat_map_title("ours"));
        assert!(svg.contains(&format!("{} × {}: 1/2", c.call_a, c.call_b)), "one of two cases conflict-free");
        let svg = p::heat_map_svg::<Posix>(&[free], &heat_map_title("linux"));
        assert!(svg.contains(&format!("{} × {}: 1/1", c.call_b, c.call_a)), "drawn in both halves");
        assert!(svg.contains("(linux, 2 cores"));
    }

    // Catches a CI sample that changes between runs or holds a non-commuting case.
    #[test]
    fn ci_sample_is_fixed_and_commuting() {
        let a = ci_sample();
        assert_eq!(a, ci_sample());
        assert_eq!(a.len(), CI_SAMPLE);
        let d = decide_all::<Posix>();
        assert!(a.iter().all(|i| d[*i].1.commutes));
    }

    // Catches a baseline check that cannot fail: a conflict-free case that now shares a line
    // fails, so does a result the model does not allow.
    #[test]
    fn posix_baseline_regression_fails() {
        let c = Posix::case(0).unwrap();
        let v = p::decide::<Posix>(&State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let base = format!("{} free {}\n", o.case.index, case_label(&o.case));
        let none = super::super::baseline::Accepted::new();
        let tally = |o: &Outcome<Op>, acc: &super::super::baseline::Accepted| {
            let t = check_baseline("ours", &[o.clone()], &base, acc).unwrap();
            (t.passed, t.failed)
        };
        // The case, and the (empty) accepted-regressions file.
        assert_eq!(tally(&o, &none), (2, 0));
        o.conflicts.push(Conflict { symbol: "libos::fs::NAMES".into(), pa: "0x40".into(), readers: 3, writers: 3 });
        assert_eq!(tally(&o, &none), (1, 1));
        // Listed with a reason under this set: accepted; under the kernel's set: not.
        let listed = super::super::baseline::parse_accepted(&format!("posix-ours {} reviewed\n", o.case.index)).unwrap();
        assert_eq!(tally(&o, &listed), (2, 0));
        let kernel = super::super::baseline::parse_accepted(&format!("kernel {} reviewed\n", o.case.index)).unwrap();
        assert_eq!(tally(&o, &kernel), (1, 1));
        o.conflicts.clear();
        o.got.0 = "E:Exists".into();
        assert_eq!(tally(&o, &none), (1, 1));
    }

    /// The model against a native run of the guest program on the host's Linux
    /// (`bench-linux commute-posix > FILE`; markers off, so no audit): every case's results
    /// must be ones the model allows. Run with `COMMUTE_POSIX_NATIVE=FILE cargo test -p xtask
    /// native_linux_agrees -- --ignored`.
    #[test]
    #[ignore]
    fn native_linux_agrees() {
        let path = std::env::var("COMMUTE_POSIX_NATIVE").expect("COMMUTE_POSIX_NATIVE=FILE");
        let text = fs::read_to_string(path).unwrap();
        let start = State::fixture();
        let mut bad = Vec::new();
        let mut n = 0;
        for (i, a, b) in text.lines().filter_map(|l| parse_case_line("commute-posix", l)) {
            let c = Posix::case(i).unwrap();
            let v = p::decide::<Posix>(&start, c.a, c.b);
            n += 1;
            if !p::results_allowed(&v, (&a, &b)) {
                bad.push(format!("#{i} {}: got a={a} b={b}; model {:?} / {:?}", case_label(&c), v.ab, v.ba));
            }
        }
        assert!(n > 0);
        assert!(bad.is_empty(), "{} of {n}:\n{}", bad.len(), bad.join("\n"));
    }
}
