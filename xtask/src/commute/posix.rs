//! `cargo xtask commute --system ours|linux|both`: the POSIX calls (docs/commute.md, "POSIX
//! calls") on this system's library OS and on Linux, the same cases under the same audit.
//!
//! Both systems boot the way `cargo xtask bench` boots them (`bench::guest::Guest`: ours runs
//! `bench-ours`, Linux Debian's kernel with `bench-linux` as /init), 2 vCPUs, the benchmark's
//! ext2 disk image attached (`fsimage`, `snapshot=on`), the sharing plugin in the exact mode
//! with **kernel and user lines** (the library OS's file system is user code, Linux's is kernel
//! code: the audit must see both to compare them), one plugin epoch per case. The command-line
//! word `commute-posix` makes either program run `bench::commute_posix` instead of a benchmark.

use super::posix_cases::{self as pc, Case};
use super::posix_model::{self as model, State, Verdict};
use super::{parse_epochs, Conflict};
use crate::guest::boot::Guest;
use crate::guest::plugin;
use crate::guest::symbols::{self, Symbols};
use crate::host::outcome::TestTally;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub verdict: Verdict,
    pub got: (String, String),
    pub conflicts: Vec<Conflict>,
}

impl Outcome {
    pub fn results_ok(&self) -> bool {
        super::model::results_allowed(&self.verdict, (&self.got.0, &self.got.1))
    }
}

pub fn case_label(c: &Case) -> String {
    format!("{:?} | {:?}", c.a, c.b)
}

/// Every case with the model's verdict.
pub fn decide_all() -> Vec<(Case, Verdict)> {
    let start = State::fixture();
    let mut v = Vec::new();
    pc::for_each_case(|c| v.push((c, model::decide(&start, c.a, c.b))));
    v
}

/// Does `calls` (a comma list, or none) select this case?
pub fn selected(calls: Option<&str>, c: &Case) -> bool {
    calls.is_none_or(|l| l.split(',').any(|n| n == c.call_a) && l.split(',').any(|n| n == c.call_b))
}

/// Boot `system` ("ours" or "linux") once and run the cases of `pick` (`I,J-K`).
pub fn run_system(system: &str, pick: &str, timeout: Duration) -> Result<Vec<Outcome>, String> {
    let mut parts = run_system_jobs(system, &[pick.to_string()], timeout)?;
    Ok(parts.pop().unwrap_or_default())
}

/// Boot `system` once per element of `picks`, all at once (`--jobs`), and return each boot's
/// outcomes in the order given. The guest, its disk image and the symbols are prepared once
/// before any boot (preparing writes shared files: Linux's initramfs); each boot has its own
/// plugin report and serial log, and its disk is `snapshot=on`, so the boots share no file
/// they write.
pub fn run_system_jobs(system: &str, picks: &[String], timeout: Duration) -> Result<Vec<Vec<Outcome>>, String> {
    let logs = crate::host::env::target_dir().join("commute").join("logs");
    let guest: Box<dyn Guest> = match system {
        "ours" => Box::new(crate::guest::ours::OursSystem::prepare(512, false, &logs)?),
        "linux" => Box::new(crate::guest::linux_sys::LinuxSystem::prepare(512, false, &logs)?),
        other => return Err(format!("commute: unknown system `{other}` (ours, linux, both)")),
    };
    let built = plugin::build()?;
    let image = crate::guest::fsimage::image()?;
    let runs = plugin::artifact_dir().join("runs");
    fs::create_dir_all(&runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    let mut boots = Vec::new();
    for (job, pick) in picks.iter().enumerate() {
        // One file per xtask process and job: a CI run and a full run may run side by side,
        // and so do the jobs of one run.
        let out = runs.join(format!("sharing-commute-posix-{system}-{}-job{job}.txt", std::process::id()));
        let _ = fs::remove_file(&out);
        let mut parg = format!("{},out={}", built.sharing.display(), out.display());
        for e in plugin::quantum_plugin_args(2) {
            parg.push(',');
            parg.push_str(&e);
        }
        // `bench=fs_commute` makes the Linux side boot the initramfs with the disk's modules.
        let words = format!("bench=fs_commute {} pick={pick}", bench_word());
        let mut cfg = guest.vm(&words);
        cfg.smp = 2;
        cfg.mem_mib = 512;
        cfg.timeout = Some(timeout);
        cfg.extra.extend(crate::guest::fsimage::disk_args(&image));
        cfg.extra.extend(["-plugin".into(), parg]);
        let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
        args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
        args.extend(plugin::exact_qemu_args());
        boots.push((args, out));
    }
    let syms = symbols(system)?;
    let runs = super::run_boots(boots.iter().map(|(a, _)| a.clone()).collect(), timeout);
    let _ = fs::create_dir_all(&logs);
    let mut parts = Vec::new();
    for (job, ((_, out), run)) in boots.iter().zip(runs).enumerate() {
        let run = run?;
        let log = if boots.len() > 1 { format!("commute-posix-{system}-job{job}.serial.txt") } else { format!("commute-posix-{system}.serial.txt") };
        let _ = fs::write(logs.join(log), &run.serial);
        let tag = if boots.len() > 1 { format!("{system} job {job}") } else { system.to_string() };
        parts.push(posix_outcomes(&tag, &run, out, &syms, timeout)?);
        let _ = fs::remove_file(out);
    }
    Ok(parts)
}

/// One boot's outcomes from its serial output and plugin report.
fn posix_outcomes(tag: &str, run: &crate::host::qemu::RunOutput, out: &std::path::Path, syms: &Names, timeout: Duration) -> Result<Vec<Outcome>, String> {
    if let Some(l) = run.serial.lines().find(|l| l.contains("commute-error")) {
        return Err(format!("{tag} guest: {}", l.trim()));
    }
    if run.timed_out {
        return Err(format!("{tag} guest timed out after {}s", timeout.as_secs()));
    }
    if !run.serial.lines().any(|l| l.contains("commute-done")) {
        let tail: Vec<&str> = run.serial.lines().rev().take(15).collect();
        return Err(format!("{tag} guest ended early (exit {:?}); last serial lines:\n{}", run.exit_code, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
    }
    let text = fs::read_to_string(out).map_err(|e| format!("no plugin report {}: {e}", out.display()))?;
    let epochs = parse_epochs(&text);
    let results: Vec<(usize, String, String)> = run.serial.lines().filter_map(parse_case_line).collect();
    if epochs.len() != results.len() {
        return Err(format!("{tag}: {} cases printed but {} plugin epochs reported", results.len(), epochs.len()));
    }
    let start = State::fixture();
    let mut outcomes = Vec::new();
    for ((index, ra, rb), lines) in results.into_iter().zip(epochs) {
        let case = pc::case(index).ok_or_else(|| format!("guest printed unknown case {index}"))?;
        let verdict = model::decide(&start, case.a, case.b);
        let conflicts = lines
            .iter()
            .map(|r| Conflict { symbol: symbol_of(syms, r.u("vaddr"), r.u("pc")), pa: r.get("pa").unwrap_or("?").to_string(), readers: r.u("readers"), writers: r.u("writers") })
            .collect();
        outcomes.push(Outcome { case, verdict, got: (ra, rb), conflicts });
    }
    Ok(outcomes)
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

fn symbols(system: &str) -> Result<Names, String> {
    match system {
        "ours" => {
            let kernel = crate::host::env::build_kernel()?;
            let data = fs::read(&kernel).map_err(|e| format!("cannot read {}: {e}", kernel.display()))?;
            let k = Symbols::from_elf(&data).map_err(|e| format!("{}: {e}", kernel.display()))?;
            let user = crate::host::user::user_target_dir().join("x86_64-unknown-none/release/bench-ours");
            let u = fs::read(&user).ok().and_then(|d| Symbols::from_elf(&d).ok());
            Ok(Names { kernel: k, user: u })
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
    let clean = |n: String| super::demangle(n.split('+').next().unwrap_or(&n));
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

/// `commute-posix i=N a=RES b=RES` (results have no spaces).
fn parse_case_line(l: &str) -> Option<(usize, String, String)> {
    let rest = &l[l.find("commute-posix i=")? + "commute-posix ".len()..];
    let mut w = rest.split_whitespace();
    let i = w.next()?.strip_prefix("i=")?.parse().ok()?;
    let a = w.next()?.strip_prefix("a=")?.to_string();
    let b = w.next()?.strip_prefix("b=")?.to_string();
    Some((i, a, b))
}

/// The report of one system: per call pair, commuting and conflict-free cases; the
/// conflicting cases grouped by pair with their symbols; the symbols by case count; results
/// the model does not allow; the total.
pub fn report(system: &str, outcomes: &[Outcome]) -> String {
    let mut t = String::new();
    let commuting: Vec<&Outcome> = outcomes.iter().filter(|o| o.verdict.commutes).collect();
    let _ = writeln!(t, "== {system}: {} cases run ({} commute in the model)", outcomes.len(), commuting.len());
    let pos = |n: &str| pc::CALLS.iter().position(|c| c.name == n).unwrap_or(0);
    let mut pairs: BTreeMap<(usize, &str, &str), (usize, usize)> = BTreeMap::new();
    for o in &commuting {
        let e = pairs.entry((pos(o.case.call_a) * 100 + pos(o.case.call_b), o.case.call_a, o.case.call_b)).or_default();
        e.0 += 1;
        e.1 += o.conflicts.is_empty() as usize;
    }
    let _ = writeln!(t, "\n{:<10} {:<10} {:>10} {:>14}", "call A", "call B", "commuting", "conflict-free");
    for ((_, a, b), (n, f)) in &pairs {
        let _ = writeln!(t, "{a:<10} {b:<10} {n:>10} {f:>14}{}", if f < n { "  <-" } else { "" });
    }
    let _ = writeln!(t, "\nconflicting commutative cases, by call pair:");
    let mut by_sym: BTreeMap<String, usize> = BTreeMap::new();
    for ((_, a, b), (n, f)) in &pairs {
        if f == n {
            continue;
        }
        let _ = writeln!(t, "  {a} x {b}: {} of {n}", n - f);
        for o in commuting.iter().filter(|o| o.case.call_a == *a && o.case.call_b == *b && !o.conflicts.is_empty()) {
            let mut syms: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
            syms.sort();
            syms.dedup();
            for s in &syms {
                *by_sym.entry(s.clone()).or_default() += 1;
            }
            let _ = writeln!(t, "    #{:<5} {}: {} line(s): {}", o.case.index, case_label(&o.case), o.conflicts.len(), syms.join(", "));
        }
    }
    let _ = writeln!(t, "\nby symbol (cases):");
    let mut v: Vec<_> = by_sym.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (s, n) in v {
        let _ = writeln!(t, "  {n:>5}  {s}");
    }
    let bad: Vec<&Outcome> = outcomes.iter().filter(|o| !o.results_ok()).collect();
    if !bad.is_empty() {
        let _ = writeln!(t, "\nresults the model does not allow ({}):", bad.len());
        for o in &bad {
            let _ = writeln!(t, "  #{} {}: got a={} b={}; model A-first a={} b={}, B-first a={} b={}", o.case.index, case_label(&o.case), o.got.0, o.got.1, o.verdict.ab.0, o.verdict.ab.1, o.verdict.ba.0, o.verdict.ba.1);
        }
    }
    let _ = writeln!(t, "\n{}", summary(system, outcomes));
    t
}

/// `SYSTEM: X/Y commutative cases conflict-free (P%)`.
/// The heat map of one system's POSIX run: call × call, each cell the share of that pair's
/// commuting cases that are conflict-free (`super::heat_map_of`).
pub fn heat_map(system: &str, outcomes: &[Outcome]) -> String {
    let names: Vec<&str> = pc::CALLS.iter().map(|c| c.name).collect();
    super::heat_map_of(&names, &heat_map_cells(outcomes), &heat_map_title(system))
}

/// Per call pair: (call A, call B, commuting cases, conflict-free ones), for both drawings.
fn heat_map_cells(outcomes: &[Outcome]) -> Vec<(&'static str, &'static str, usize, usize)> {
    let mut pairs: BTreeMap<(&'static str, &'static str), (usize, usize)> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.verdict.commutes) {
        let e = pairs.entry((o.case.call_a, o.case.call_b)).or_default();
        e.0 += 1;
        e.1 += o.conflicts.is_empty() as usize;
    }
    pairs.into_iter().map(|((a, b), (n, f))| (a, b, n, f)).collect()
}

fn heat_map_title(system: &str) -> String {
    format!("Conflict-free share of commutative POSIX cases per call pair ({system}, 2 cores, exact sharing audit, kernel and user lines)")
}

/// The same heat map as PNG, from the same cells.
pub fn heat_map_png(system: &str, outcomes: &[Outcome]) -> Result<Vec<u8>, String> {
    let names: Vec<&str> = pc::CALLS.iter().map(|c| c.name).collect();
    super::heatmap_png::heat_map_png(&names, &heat_map_cells(outcomes), &heat_map_title(system))
}

pub fn summary(system: &str, outcomes: &[Outcome]) -> String {
    let commuting = outcomes.iter().filter(|o| o.verdict.commutes).count();
    let free = outcomes.iter().filter(|o| o.verdict.commutes && o.conflicts.is_empty()).count();
    let pct = if commuting == 0 { 0.0 } else { 100.0 * free as f64 / commuting as f64 };
    let bad = outcomes.iter().filter(|o| !o.results_ok()).count();
    format!("{system}: {free}/{commuting} commutative cases conflict-free ({pct:.1}%); {bad} result(s) the model does not allow")
}

fn pick_arg(idx: &[usize]) -> String {
    super::pick_arg(idx)
}

/// `cargo xtask commute --system ...`.
pub fn main(systems: &[&str], calls: Option<&str>, out: PathBuf, timeout: Duration, model_only: bool, list: bool, jobs: usize) -> Result<(), String> {
    let decided = decide_all();
    if list {
        for c in pc::CALLS {
            println!("{:<10} {} argument class(es)", c.name, c.variants.len());
        }
        println!("{} cases, {} commute in the model", decided.len(), decided.iter().filter(|(_, v)| v.commutes).count());
        return Ok(());
    }
    let chosen: Vec<&(Case, Verdict)> = decided.iter().filter(|(c, _)| selected(calls, c)).collect();
    if model_only {
        for (c, v) in &chosen {
            println!("#{:<5} {:<9} {}  A-first {:?}  B-first {:?}", c.index, if v.commutes { "commutes" } else { "no" }, case_label(c), v.ab, v.ba);
        }
        println!("{} cases, {} commute", chosen.len(), chosen.iter().filter(|(_, v)| v.commutes).count());
        return Ok(());
    }
    // Every selected case runs (the non-commuting ones check the results against the model).
    let idx: Vec<usize> = chosen.iter().map(|(c, _)| c.index).collect();
    // `--jobs`: contiguous parts, one boot each, merged back case for case.
    let parts = super::split_parts(&idx, jobs);
    let picks: Vec<String> = parts.iter().map(|p| pick_arg(p)).collect();
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
        let outcomes = super::merge_parts(run_system_jobs(system, &picks, timeout)?, &parts, |o| o.case.index)?;
        let text = report(system, &outcomes);
        print!("{text}");
        println!("({system} guest run {:.0} s with {} job(s), one run on a shared host)\n", t0.elapsed().as_secs_f64(), parts.len());
        let path = out.join(format!("commute-posix-{system}.txt"));
        fs::write(&path, &text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        write_csv(&out.join(format!("commute-posix-{system}.csv")), &outcomes)?;
        let svg = out.join(format!("commute-posix-{system}-heatmap.svg"));
        super::write_heat_maps(&svg, &heat_map(system, &outcomes), heat_map_png(system, &outcomes))?;
        summaries.push(summary(system, &outcomes));
    }
    println!("evidence: exact sharing audit (single-threaded TCG, icount, 2 vCPUs), kernel and user lines, one plugin epoch per case");
    for s in summaries {
        println!("{s}");
    }
    Ok(())
}

fn write_csv(path: &std::path::Path, outcomes: &[Outcome]) -> Result<(), String> {
    let mut csv = String::from("index,call_a,call_b,args_a,args_b,commutes,conflict_free,result_a,result_b,results_ok,symbols\n");
    for o in outcomes {
        let mut syms: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
        syms.sort();
        syms.dedup();
        let _ = writeln!(csv, "{},{},{},\"{:?}\",\"{:?}\",{},{},{},{},{},\"{}\"", o.case.index, o.case.call_a, o.case.call_b, o.case.a, o.case.b, o.verdict.commutes, o.conflicts.is_empty(), o.got.0, o.got.1, o.results_ok(), syms.join(";"));
    }
    fs::write(path, csv).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The CI sample: this many commuting POSIX cases, drawn with a fixed seed.
const CI_SAMPLE: usize = 40;
const CI_SEED: u64 = 1919;

/// The sampled cases, ascending (the same xorshift draw as the kernel calls' sample).
pub fn ci_sample() -> Vec<usize> {
    let commuting: Vec<usize> = decide_all().into_iter().filter(|(_, v)| v.commutes).map(|(c, _)| c.index).collect();
    let mut state = CI_SEED;
    let mut picked = std::collections::BTreeSet::new();
    while picked.len() < CI_SAMPLE.min(commuting.len()) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        picked.insert(commuting[(r % commuting.len() as u64) as usize]);
    }
    picked.into_iter().collect()
}

/// The checked-in baseline of one system's CI sample.
pub fn baseline_path(system: &str) -> PathBuf {
    crate::host::env::workspace_root().join(format!("xtask/src/commute/baseline-posix-{system}.txt"))
}

/// A run's case as the baseline check sees it (`baseline.rs`).
fn seen(system: &str, o: &Outcome) -> super::baseline::Seen {
    let mut symbols: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
    symbols.sort();
    symbols.dedup();
    super::baseline::Seen {
        index: o.case.index,
        label: case_label(&o.case),
        name: format!("commute::posix_{system}_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b),
        symbols,
        lines: o.conflicts.len(),
        results_error: (!o.results_ok()).then(|| format!("results a={} b={}, the model allows {:?} or {:?}", o.got.0, o.got.1, o.verdict.ab, o.verdict.ba)),
    }
}

/// The accepted-regressions set of a system's baseline.
fn baseline_set(system: &str) -> String {
    format!("posix-{system}")
}

/// Compare a CI run with its baseline and the accepted regressions (`baseline::check`): a
/// case that was conflict-free and now conflicts fails (with its symbols) unless
/// accepted-regressions.txt lists it; so does a result the model does not allow and a case
/// the baseline does not name as it is now.
pub fn check_baseline(system: &str, outcomes: &[Outcome], baseline: &str, accepted: &super::baseline::Accepted) -> Result<TestTally, String> {
    let seen: Vec<super::baseline::Seen> = outcomes.iter().map(|o| seen(system, o)).collect();
    super::baseline::check(&baseline_set(system), &seen, baseline, accepted, &format!("cargo xtask commute --system {system} --ci --update-baseline"))
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
        let outcomes = run_system(system, &pick_arg(&sample), timeout)?;
        if outcomes.len() != sample.len() {
            return Err(format!("{system}: the guest ran {} of the {} sampled cases", outcomes.len(), sample.len()));
        }
        let path = baseline_path(system);
        if update {
            // As for the kernel calls' baseline: a free case that now conflicts is written only
            // as `accepted`, with `--accept` and a reviewed reason (baseline.rs).
            let header = format!("# The POSIX commutativity checker's CI sample on {system} (`cargo xtask commute --system {system} --ci`):\n# per sampled case, its status: `free` (conflict-free when written), `conflict` (never recorded\n# free) or `accepted` (was free; conflicting since, listed with its reason in\n# accepted-regressions.txt). Regenerate with `cargo xtask commute --system {system} --ci --update-baseline`\n# after changing posix_cases.rs or fixing a conflict; a free case that now conflicts needs\n# `--accept CASE` (docs/commute.md).\n");
            let old = fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let seen: Vec<super::baseline::Seen> = outcomes.iter().map(|o| seen(system, o)).collect();
            let (body, notes) = super::baseline::update(&baseline_set(system), &seen, &old, &super::baseline::read_accepted()?, accept, &header)?;
            for n in notes {
                println!("note: {n}");
            }
            fs::write(&path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("wrote {}", path.display());
            print!("{}", report(system, &outcomes));
            continue;
        }
        let baseline = fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let t = check_baseline(system, &outcomes, &baseline, &super::baseline::read_accepted()?)?;
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
pub fn check_results_only(system: &str, outcomes: &[Outcome]) -> TestTally {
    let mut t = TestTally::default();
    for o in outcomes {
        let name = format!("commute::posix_{system}_results_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b);
        if o.results_ok() {
            println!("{name} ... ok{}", if o.conflicts.is_empty() { "" } else { " (shares lines here: not judged)" });
            t.add(TestTally::PASS);
        } else {
            println!("{name} ... FAILED ({}: results a={} b={}, the model allows {:?} or {:?})", case_label(&o.case), o.got.0, o.got.1, o.verdict.ab, o.verdict.ba);
            t.add(TestTally::FAIL);
        }
    }
    t
}

/// The CI suite `commute-posix linux`: the sample on Linux, results against the model.
pub fn ci_tests_linux_results() -> Result<TestTally, String> {
    let sample = ci_sample();
    let outcomes = run_system("linux", &pick_arg(&sample), Duration::from_secs(600))?;
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

    // Catches a case line the host reads differently from how the guest prints it.
    #[test]
    fn parses_case_lines() {
        assert_eq!(parse_case_line("commute-posix i=12 a=f:a:1:8192 b=E:NotFound"), Some((12, "f:a:1:8192".into(), "E:NotFound".into())));
        assert_eq!(parse_case_line("commute-posix-done"), None);
    }

    // Catches a results-only check that cannot fail: a result the model does not allow fails,
    // a shared line alone does not.
    #[test]
    fn linux_results_check_fails_on_a_wrong_result_only() {
        let c = pc::case(0).unwrap();
        let v = model::decide(&State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        o.conflicts.push(Conflict { symbol: "tk_core".into(), pa: "0x40".into(), readers: 2, writers: 2 });
        assert_eq!(check_results_only("linux", &[o.clone()]), TestTally::PASS);
        o.got = ("E:Planted".into(), "E:Planted".into());
        assert_eq!(check_results_only("linux", &[o]), TestTally::FAIL);
    }

    // Catches a POSIX heat map that drops a pair or counts a conflicting case as free.
    #[test]
    fn posix_heat_map_counts_conflicts_per_pair() {
        let d = decide_all();
        let (c, v) = d.iter().find(|(_, v)| v.commutes).cloned().unwrap();
        let free = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let mut shared = free.clone();
        shared.conflicts.push(Conflict { symbol: "libos::fs::FS".into(), pa: "0x40".into(), readers: 2, writers: 2 });
        let svg = heat_map("ours", &[free.clone(), shared]);
        assert!(svg.contains(&format!("{} × {}: 1/2", c.call_a, c.call_b)), "one of two cases conflict-free");
        let svg = heat_map("linux", &[free]);
        assert!(svg.contains(&format!("{} × {}: 1/1", c.call_b, c.call_a)), "drawn in both halves");
        assert!(svg.contains("(linux, 2 cores"));
    }

    // Catches a CI sample that changes between runs or holds a non-commuting case.
    #[test]
    fn ci_sample_is_fixed_and_commuting() {
        let a = ci_sample();
        assert_eq!(a, ci_sample());
        assert_eq!(a.len(), CI_SAMPLE);
        let d = decide_all();
        assert!(a.iter().all(|i| d[*i].1.commutes));
    }

    // Catches a baseline check that cannot fail: a conflict-free case that now shares a line
    // fails, so does a result the model does not allow.
    #[test]
    fn posix_baseline_regression_fails() {
        let c = pc::case(0).unwrap();
        let v = model::decide(&State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let base = format!("{} free {}\n", o.case.index, case_label(&o.case));
        let none = super::super::baseline::Accepted::new();
        let tally = |o: &Outcome, acc: &super::super::baseline::Accepted| {
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
        for (i, a, b) in text.lines().filter_map(parse_case_line) {
            let c = pc::case(i).unwrap();
            let v = model::decide(&start, c.a, c.b);
            n += 1;
            if !super::super::model::results_allowed(&v, (&a, &b)) {
                bad.push(format!("#{i} {}: got a={a} b={b}; model {:?} / {:?}", case_label(&c), v.ab, v.ba));
            }
        }
        assert!(n > 0);
        assert!(bad.is_empty(), "{} of {n}:\n{}", bad.len(), bad.join("\n"));
    }
}
