//! `cargo xtask commute`: the commutativity checker (docs/commute.md), after
//! sv6/Commuter (SOSP'13). For each pair of modelled system calls and each argument class
//! (`cases.rs`), the model (`model.rs`) decides whether the two calls commute on the fixture;
//! the guest (`user/apps/src/bin/commute.rs`) runs every selected case as a two-core test
//! under the sharing audit in exact mode, kernel accesses only, one plugin epoch per case;
//! a commuting case is **conflict-free** when no kernel cache line was written by one core
//! and read or written by the other inside the two calls' regions.

pub mod baseline;
pub use testdefs::commute_cases as cases;
pub mod heatmap_png;
pub mod model;
pub mod options;
pub mod posix;
pub use testdefs::posix_cases;
pub mod posix_model;

use crate::guest::plugin::{self, Record};
use crate::guest::symbols::Symbols;
use crate::host::outcome::TestTally;
use cases::{Case, Op};
use model::{State, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;


/// The checked-in baseline of the CI sample: which sampled cases were conflict-free.
fn baseline_path() -> PathBuf {
    crate::host::env::workspace_root().join("xtask/src/commute/baseline.txt")
}

/// The CI sample: this many commuting cases, drawn with a fixed seed.
const CI_SAMPLE: usize = 48;
const CI_SEED: u64 = 19;

/// One line of the audit that makes a case conflicting.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// The data's kernel symbol, or `[heap] written by FUNCTION` for memory without one.
    pub symbol: String,
    pub pa: String,
    pub readers: u64,
    pub writers: u64,
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub verdict: Verdict,
    /// The guest's results (A, B).
    pub got: (String, String),
    pub conflicts: Vec<Conflict>,
}

impl Outcome {
    pub fn results_ok(&self) -> bool {
        model::results_allowed(&self.verdict, (&self.got.0, &self.got.1))
    }
}

/// `call(args)` for a report.
pub fn describe(op: Op) -> String {
    format!("{op:?}")
}

fn case_label(c: &Case) -> String {
    format!("{} | {}", describe(c.a), describe(c.b))
}

/// Every case with the model's verdict.
pub fn decide_all() -> Vec<(Case, Verdict)> {
    let start = State::fixture();
    let mut v = Vec::new();
    cases::for_each_case(|c| v.push((c, model::decide(&start, c.a, c.b))));
    v
}

/// `I,J-K` for the guest's `pick=`.
fn pick_arg(idx: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && idx[j + 1] == idx[j] + 1 {
            j += 1;
        }
        parts.push(if i == j { idx[i].to_string() } else { format!("{}-{}", idx[i], idx[j]) });
        i = j + 1;
    }
    parts.join(",")
}

/// The case the planted regression (kernel feature `planted-conflict`, a global counter bumped
/// by every `segment_alloc`) makes conflicting: two allocations into different shares. Always
/// in the CI sample, so the sample is shown to catch it (`cargo xtask commute --planted`).
fn planted_target() -> usize {
    let mut idx = usize::MAX;
    cases::for_each_case(|c| {
        if c.a == Op::SegmentAlloc(cases::Sym::SA) && c.b == Op::SegmentAlloc(cases::Sym::SB) {
            idx = c.index;
        }
    });
    idx
}

/// The CI sample: `CI_SAMPLE` commuting cases drawn with a fixed seed, plus the planted
/// regression's target, ascending.
pub fn ci_sample() -> Vec<usize> {
    let commuting: Vec<usize> = decide_all().into_iter().filter(|(_, v)| v.commutes).map(|(c, _)| c.index).collect();
    let mut state = CI_SEED;
    let mut picked = std::collections::BTreeSet::new();
    while picked.len() < CI_SAMPLE.min(commuting.len()) {
        // xorshift64*: a fixed sequence, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        picked.insert(commuting[(r % commuting.len() as u64) as usize]);
    }
    picked.insert(planted_target());
    picked.into_iter().collect()
}

/// Boot the guest with the sharing plugin and run `guest_args` (`calls=` / `pick=`); return
/// each case's results and conflicting lines.
pub fn run_cases(guest_args: &str, smp: u32, timeout: Duration) -> Result<Vec<Outcome>, String> {
    run_cases_on(crate::host::env::build_kernel()?, guest_args, smp, timeout)
}

/// `run_cases` on a given kernel (the planted regression's).
pub fn run_cases_on(kernel: PathBuf, guest_args: &str, smp: u32, timeout: Duration) -> Result<Vec<Outcome>, String> {
    let mut parts = run_cases_jobs(kernel, &[guest_args.to_string()], smp, timeout)?;
    Ok(parts.pop().unwrap_or_default())
}

/// One boot of the kernel checker: QEMU's arguments and the plugin report it writes.
struct KernelBoot {
    args: Vec<String>,
    out: PathBuf,
}

/// Boot `kernel` once per element of `guest_args` (`calls=` / `pick=`), all at once (one
/// QEMU process each: `--jobs`), and return each boot's outcomes in the order given. Every
/// boot has its own plugin report file, so two boots never write one file.
pub fn run_cases_jobs(kernel: PathBuf, guest_args: &[String], smp: u32, timeout: Duration) -> Result<Vec<Vec<Outcome>>, String> {
    // Everything that builds or writes a shared file happens here, once, before any boot.
    let built = plugin::build()?;
    let initrd = crate::host::user::build_initrd()?;
    let syms = {
        let data = fs::read(&kernel).map_err(|e| format!("cannot read {}: {e}", kernel.display()))?;
        Symbols::from_elf(&data).map_err(|e| format!("{}: {e}", kernel.display()))?
    };
    let runs = plugin::artifact_dir().join("runs");
    fs::create_dir_all(&runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    let mut boots = Vec::new();
    for (job, ga) in guest_args.iter().enumerate() {
        // Job 0 keeps the single run's file name; one file per process and job, so a CI
        // run beside a full run, or two jobs, never share one.
        let out = runs.join(format!("sharing-commute-{smp}-{}-job{job}.txt", std::process::id()));
        let _ = fs::remove_file(&out);
        let mut parg = format!("{},out={},kernel_only=on", built.sharing.display(), out.display());
        for e in plugin::quantum_plugin_args(smp) {
            parg.push(',');
            parg.push_str(&e);
        }
        let cmdline = format!("init=commute -- {ga}");
        let cfg = crate::host::vm::VmConfig {
            smp,
            medium: Some(crate::host::vm::BootMedium::Kernel(kernel.clone())),
            initrd: Some(initrd.clone()),
            cmdline: cmdline.trim().to_string(),
            extra: vec!["-plugin".into(), parg],
            ..Default::default()
        };
        cfg.validate()?;
        let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
        args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
        args.extend(plugin::exact_qemu_args());
        boots.push(KernelBoot { args, out });
    }
    let runs = run_boots(boots.iter().map(|b| b.args.clone()).collect(), timeout);
    let mut parts = Vec::new();
    for (job, (boot, run)) in boots.iter().zip(runs).enumerate() {
        let tag = if boots.len() > 1 { format!("job {job}: ") } else { String::new() };
        let outcomes = kernel_outcomes(&run?, &boot.out, &syms, timeout).map_err(|e| format!("{tag}{e}"))?;
        let _ = fs::remove_file(&boot.out);
        parts.push(outcomes);
    }
    Ok(parts)
}

/// Run one QEMU per argument list, all at once, each with its own limit; the results in the
/// order given. (One host thread per boot waits for its QEMU process.)
pub fn run_boots(boots: Vec<Vec<String>>, timeout: Duration) -> Vec<Result<crate::host::qemu::RunOutput, String>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = boots.iter().map(|args| s.spawn(move || crate::host::qemu::run_qemu(args, timeout))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a QEMU runner thread panicked".into()))).collect()
    })
}

/// One boot's outcomes from its serial output and plugin report.
fn kernel_outcomes(run: &crate::host::qemu::RunOutput, out: &Path, syms: &Symbols, timeout: Duration) -> Result<Vec<Outcome>, String> {
    if let Some(l) = run.serial.lines().find(|l| l.contains("commute-error")) {
        return Err(format!("guest: {}", l.trim()));
    }
    if run.timed_out {
        return Err(format!("commute guest timed out after {}s", timeout.as_secs()));
    }
    if !run.serial.lines().any(|l| l.contains("commute-done")) {
        let tail: Vec<&str> = run.serial.lines().rev().take(15).collect();
        return Err(format!("commute guest ended early (exit {:?}); last serial lines:\n{}", run.exit_code, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
    }
    let text = fs::read_to_string(out).map_err(|e| format!("no plugin report {}: {e}", out.display()))?;
    let epochs = parse_epochs(&text);
    let results: Vec<(usize, String, String)> = run.serial.lines().filter_map(parse_case_line).collect();
    if epochs.len() != results.len() {
        return Err(format!("{} cases printed but {} plugin epochs reported", results.len(), epochs.len()));
    }
    let start = State::fixture();
    let mut outcomes = Vec::new();
    for ((index, ra, rb), lines) in results.into_iter().zip(epochs) {
        let case = cases::case(index).ok_or_else(|| format!("guest printed unknown case {index}"))?;
        let verdict = model::decide(&start, case.a, case.b);
        let conflicts = lines.iter().map(|r| Conflict { symbol: symbol_of(syms, r), pa: r.get("pa").unwrap_or("?").to_string(), readers: r.u("readers"), writers: r.u("writers") }).collect();
        outcomes.push(Outcome { case, verdict, got: (ra, rb), conflicts });
    }
    Ok(outcomes)
}

/// The most `--jobs` allows: more boots than this only queue for the host's cores.
pub const MAX_JOBS: usize = 32;

/// `--jobs N`: a whole number from 1 to [`MAX_JOBS`], or a clear error.
pub fn jobs_arg(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(0) => Err("0 jobs would run no case: give 1 or more (1 = one boot, as without --jobs)".into()),
        Ok(n) if n > MAX_JOBS => Err(format!("{n} jobs: at most {MAX_JOBS} (each job is one QEMU boot on one host core)")),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{v}` is not a number of jobs (a whole number from 1 to {MAX_JOBS})")),
    }
}

/// `--jobs`: `cases` (ascending) cut into at most `jobs` contiguous parts of near-equal size
/// (the first parts take one more case when it does not divide). No part is empty: fewer
/// cases than jobs give one part per case.
pub fn split_parts(cases: &[usize], jobs: usize) -> Vec<Vec<usize>> {
    let n = jobs.max(1).min(cases.len().max(1));
    let (base, extra) = (cases.len() / n, cases.len() % n);
    let mut parts = Vec::new();
    let mut at = 0;
    for k in 0..n {
        let len = base + usize::from(k < extra);
        parts.push(cases[at..at + len].to_vec());
        at += len;
    }
    parts
}

/// `--jobs`: the parts' outcomes as ONE list, checked: part `k` must hold exactly the cases
/// `expected[k]` in that order (a boot that skipped, repeated or reordered a case is an
/// error, not a report with a hole), so the merged list is what one boot of all the cases
/// gives, case for case.
pub fn merge_parts<T>(parts: Vec<Vec<T>>, expected: &[Vec<usize>], index: impl Fn(&T) -> usize) -> Result<Vec<T>, String> {
    if parts.len() != expected.len() {
        return Err(format!("{} job(s) reported for {} part(s)", parts.len(), expected.len()));
    }
    let mut all = Vec::new();
    for (k, (part, want)) in parts.into_iter().zip(expected).enumerate() {
        let got: Vec<usize> = part.iter().map(&index).collect();
        if got != *want {
            let missing: Vec<usize> = want.iter().filter(|i| !got.contains(i)).copied().take(5).collect();
            return Err(format!("job {k} ran {} case(s) where {} were given (first missing: {missing:?}; or out of order)", got.len(), want.len()));
        }
        all.extend(part);
    }
    Ok(all)
}

/// The kernel symbol that owns a line (as `plugin audit` names it), demangled.
fn symbol_of(syms: &Symbols, r: &Record) -> String {
    match syms.name(r.u("vaddr")) {
        Some(n) => demangle(n.split('+').next().unwrap_or(&n)),
        None => format!("[heap] written by {}", syms.name(r.u("pc")).map(|c| demangle(c.split('+').next().unwrap_or(""))).unwrap_or("?".into())),
    }
}

/// Rust's legacy mangling (`_ZN` + length-prefixed parts + `E`) to `a::b::c`, without the
/// trailing hash; anything else unchanged.
pub fn demangle(sym: &str) -> String {
    let Some(mut rest) = sym.strip_prefix("_ZN") else { return sym.to_string() };
    let mut parts: Vec<String> = Vec::new();
    while let Some(c) = rest.chars().next() {
        if c == 'E' || !c.is_ascii_digit() {
            break;
        }
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        let Ok(n) = rest[..digits].parse::<usize>() else { return sym.to_string() };
        let Some(part) = rest.get(digits..digits + n) else { return sym.to_string() };
        let part = part.strip_prefix("_$").map(|p| format!("${p}")).unwrap_or_else(|| part.to_string());
        parts.push(part.replace("$LT$", "<").replace("$GT$", ">").replace("$u20$", " ").replace("$C$", ",").replace("..", "::"));
        rest = &rest[digits + n..];
    }
    if parts.last().is_some_and(|p| p.len() == 17 && p.starts_with('h') && p[1..].chars().all(|c| c.is_ascii_hexdigit())) {
        parts.pop();
    }
    if parts.is_empty() {
        sym.to_string()
    } else {
        parts.join("::")
    }
}

/// `commute-case i=N a=RES b=RES` (results have no spaces).
fn parse_case_line(l: &str) -> Option<(usize, String, String)> {
    let rest = &l[l.find("commute-case ")? + "commute-case ".len()..];
    let mut w = rest.split_whitespace();
    let i = w.next()?.strip_prefix("i=")?.parse().ok()?;
    let a = w.next()?.strip_prefix("a=")?.to_string();
    let b = w.next()?.strip_prefix("b=")?.to_string();
    Some((i, a, b))
}

/// The plugin's per-epoch records: each `epoch` record and the `line` records after it.
fn parse_epochs(text: &str) -> Vec<Vec<Record>> {
    let mut out: Vec<Vec<Record>> = Vec::new();
    let mut in_epoch = false;
    for r in plugin::parse_records(text) {
        match r.kind.as_str() {
            "epoch" => {
                out.push(Vec::new());
                in_epoch = true;
            }
            "line" if in_epoch => out.last_mut().expect("epoch").push(r),
            _ => in_epoch = false,
        }
    }
    out
}

/// Per pair: (commuting cases, conflict-free).
fn by_pair(outcomes: &[Outcome]) -> BTreeMap<(usize, &'static str, &'static str), (usize, usize)> {
    let pos = |n: &str| cases::CALLS.iter().position(|c| c.name == n).unwrap_or(0);
    let mut m = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.verdict.commutes) {
        let e = m.entry((pos(o.case.call_a) * 100 + pos(o.case.call_b), o.case.call_a, o.case.call_b)).or_insert((0, 0));
        e.0 += 1;
        e.1 += o.conflicts.is_empty() as usize;
    }
    m
}


/// The report: per pair, the total, each conflict's symbols, model mismatches.
pub fn report(outcomes: &[Outcome], all_decided: usize, all_commuting: usize) -> String {
    let mut t = String::new();
    let commuting: Vec<&Outcome> = outcomes.iter().filter(|o| o.verdict.commutes).collect();
    let free = commuting.iter().filter(|o| o.conflicts.is_empty()).count();
    let _ = writeln!(t, "cases: {} run of {all_decided} ({all_commuting} commute in the model)", outcomes.len());
    let _ = writeln!(t, "\n{:<22} {:<22} {:>10} {:>14}", "call A (core 0)", "call B (core 1)", "commuting", "conflict-free");
    for ((_, a, b), (n, f)) in by_pair(outcomes) {
        let _ = writeln!(t, "{a:<22} {b:<22} {n:>10} {f:>14}{}", if f < n { "  <-" } else { "" });
    }
    let mut by_sym: BTreeMap<String, usize> = BTreeMap::new();
    let _ = writeln!(t, "\nconflicting commutative cases:");
    for o in commuting.iter().filter(|o| !o.conflicts.is_empty()) {
        let mut syms: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
        syms.sort();
        syms.dedup();
        for s in &syms {
            *by_sym.entry(s.clone()).or_default() += 1;
        }
        let _ = writeln!(t, "  #{:<4} {}: {} line(s): {}", o.case.index, case_label(&o.case), o.conflicts.len(), syms.join(", "));
    }
    let _ = writeln!(t, "\nby symbol (cases):");
    let mut v: Vec<_> = by_sym.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1));
    for (s, n) in v {
        let _ = writeln!(t, "  {n:>5}  {s}");
    }
    let bad: Vec<&Outcome> = outcomes.iter().filter(|o| !o.results_ok()).collect();
    if !bad.is_empty() {
        let _ = writeln!(t, "\nresults the model does not allow ({}):", bad.len());
        for o in &bad {
            let _ = writeln!(t, "  #{} {}: kernel a={} b={}; model A-first a={} b={}, B-first a={} b={}", o.case.index, case_label(&o.case), o.got.0, o.got.1, o.verdict.ab.0, o.verdict.ab.1, o.verdict.ba.0, o.verdict.ba.1);
        }
    }
    let pct = if commuting.is_empty() { 0.0 } else { 100.0 * free as f64 / commuting.len() as f64 };
    let _ = writeln!(t, "\nours: {free}/{} commutative cases conflict-free ({pct:.1}%)", commuting.len());
    t
}

fn write_tables(dir: &Path, name: &str, outcomes: &[Outcome]) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut csv = String::from("index,call_a,call_b,args_a,args_b,commutes,conflict_free,result_a,result_b,results_ok,symbols\n");
    let mut json = Vec::new();
    for o in outcomes {
        let mut syms: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
        syms.sort();
        syms.dedup();
        let _ = writeln!(
            csv,
            "{},{},{},\"{}\",\"{}\",{},{},{},{},{},\"{}\"",
            o.case.index,
            o.case.call_a,
            o.case.call_b,
            describe(o.case.a),
            describe(o.case.b),
            o.verdict.commutes,
            o.conflicts.is_empty(),
            o.got.0,
            o.got.1,
            o.results_ok(),
            syms.join(";")
        );
        // Lines by symbol, then physical address: a heap line's address depends on what the
        // boot ran before the case (`--jobs` boots start at different cases), its symbol and
        // sharing do not, so the order does not move with the address.
        let mut sorted: Vec<&Conflict> = o.conflicts.iter().collect();
        sorted.sort_by(|a, b| (&a.symbol, a.readers, a.writers, &a.pa).cmp(&(&b.symbol, b.readers, b.writers, &b.pa)));
        let lines: Vec<String> = sorted.iter().map(|c| format!("{{\"symbol\":{},\"pa\":{},\"readers\":{},\"writers\":{}}}", crate::guest::plugin::jstr(&c.symbol), crate::guest::plugin::jstr(&c.pa), c.readers, c.writers)).collect();
        json.push(format!(
            "{{\"index\":{},\"call_a\":{},\"call_b\":{},\"a\":{},\"b\":{},\"commutes\":{},\"conflict_free\":{},\"result_a\":{},\"result_b\":{},\"results_ok\":{},\"conflicts\":[{}]}}",
            o.case.index,
            crate::guest::plugin::jstr(o.case.call_a),
            crate::guest::plugin::jstr(o.case.call_b),
            crate::guest::plugin::jstr(&describe(o.case.a)),
            crate::guest::plugin::jstr(&describe(o.case.b)),
            o.verdict.commutes,
            o.conflicts.is_empty(),
            crate::guest::plugin::jstr(&o.got.0),
            crate::guest::plugin::jstr(&o.got.1),
            o.results_ok(),
            lines.join(",")
        ));
    }
    let commuting = outcomes.iter().filter(|o| o.verdict.commutes).count();
    let free = outcomes.iter().filter(|o| o.verdict.commutes && o.conflicts.is_empty()).count();
    let body = format!(
        "{{\"evidence\":\"exact sharing audit (single-threaded TCG, icount, vCPU quantum {}), kernel lines only, one plugin epoch per case\",\"system\":\"ours\",\"commutative\":{commuting},\"conflict_free\":{free},\"cases\":[\n{}\n]}}\n",
        plugin::EXACT_QUANTUM,
        json.join(",\n")
    );
    for (ext, text) in [("csv", &csv), ("json", &body)] {
        let p = dir.join(format!("{name}.{ext}"));
        fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// The heat map: call × call, each cell the share of that pair's commuting cases that are
/// conflict-free (green 100%, red 0%, grey: no commuting case run). Symmetric: a pair is
/// drawn in both cells.
pub fn heat_map_svg(outcomes: &[Outcome]) -> String {
    let names: Vec<&str> = cases::CALLS.iter().map(|c| c.name).collect();
    let pairs: Vec<(&str, &str, usize, usize)> = by_pair(outcomes).into_iter().map(|((_, a, b), (n, f))| (a, b, n, f)).collect();
    heat_map_of(&names, &pairs, KERNEL_MAP_TITLE)
}

const KERNEL_MAP_TITLE: &str = "Conflict-free share of commutative cases per call pair (ours, 2 cores, exact sharing audit)";

/// The same heat map as PNG (`heatmap_png`), from the same cells.
pub fn heat_map_png(outcomes: &[Outcome]) -> Result<Vec<u8>, String> {
    let names: Vec<&str> = cases::CALLS.iter().map(|c| c.name).collect();
    let pairs: Vec<(&str, &str, usize, usize)> = by_pair(outcomes).into_iter().map(|((_, a, b), (n, f))| (a, b, n, f)).collect();
    heatmap_png::heat_map_png(&names, &pairs, KERNEL_MAP_TITLE)
}

/// Write a heat map as `svg` and, beside it, the same name with `.png`.
pub fn write_heat_maps(svg: &Path, svg_text: &str, png: Result<Vec<u8>, String>) -> Result<(), String> {
    fs::write(svg, svg_text).map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    println!("wrote {}", svg.display());
    let png_path = svg.with_extension("png");
    fs::write(&png_path, png?).map_err(|e| format!("cannot write {}: {e}", png_path.display()))?;
    println!("wrote {}", png_path.display());
    Ok(())
}

/// Draw a heat map of `names` × `names` from `pairs` (call A, call B, commuting cases,
/// conflict-free cases) under `title`: the kernel calls' map above, and the POSIX calls' map
/// of each system (`posix.rs`). A name not in `names` is drawn in the first row (a caller's
/// bug, visible rather than dropped).
pub fn heat_map_of(names: &[&str], pairs: &[(&str, &str, usize, usize)], title: &str) -> String {
    let n = names.len();
    let mut cell: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
    for &(a, b, total, free) in pairs {
        let (i, j) = (names.iter().position(|x| *x == a).unwrap_or(0), names.iter().position(|x| *x == b).unwrap_or(0));
        cell.insert((i, j), (total, free));
        cell.insert((j, i), (total, free));
    }
    let (left, top, size) = (150usize, 150usize, 28usize);
    let (w, h) = (left + n * size + 20, top + n * size + 40);
    let mut svg = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"10\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    let _ = writeln!(svg, "<text x=\"10\" y=\"18\" font-size=\"13\">{title}</text>");
    for (i, name) in names.iter().enumerate() {
        let y = top + i * size + size / 2 + 3;
        let _ = writeln!(svg, "<text x=\"{}\" y=\"{y}\" text-anchor=\"end\">{name}</text>", left - 4);
        let x = left + i * size + size / 2;
        let _ = writeln!(svg, "<text transform=\"translate({x},{}) rotate(-60)\">{name}</text>", top - 4);
    }
    for i in 0..n {
        for j in 0..n {
            let (x, y) = (left + j * size, top + i * size);
            let (total, free) = cell.get(&(i, j)).copied().unwrap_or((0, 0));
            let [r, g, b] = heatmap_png::cell_colour(total, free);
            let fill = format!("rgb({r},{g},{b})");
            let label = if total > 0 { format!("{free}/{total}") } else { String::new() };
            let _ = writeln!(svg, "<rect x=\"{x}\" y=\"{y}\" width=\"{size}\" height=\"{size}\" fill=\"{fill}\" stroke=\"white\"><title>{} × {}: {label}</title></rect>", names[i], names[j]);
            if !label.is_empty() {
                let _ = writeln!(svg, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"7\" fill=\"white\">{label}</text>", x + size / 2, y + size / 2 + 3);
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// A run's case as the baseline check sees it (`baseline.rs`).
fn seen(o: &Outcome) -> baseline::Seen {
    let mut symbols: Vec<String> = o.conflicts.iter().map(|c| c.symbol.clone()).collect();
    symbols.sort();
    symbols.dedup();
    baseline::Seen {
        index: o.case.index,
        label: case_label(&o.case),
        name: format!("commute::case_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b),
        symbols,
        lines: o.conflicts.len(),
        results_error: (!o.results_ok()).then(|| format!("kernel results a={} b={}, the model allows {:?} or {:?}", o.got.0, o.got.1, o.verdict.ab, o.verdict.ba)),
    }
}

const UPDATE_KERNEL: &str = "cargo xtask commute --ci --update-baseline";

const KERNEL_BASELINE_HEADER: &str = "# The commutativity checker's CI sample (`cargo xtask commute --ci`): per sampled case, its\n# status: `free` (conflict-free when written), `conflict` (never recorded free) or `accepted`\n# (was free; conflicting since, listed with its reason in accepted-regressions.txt).\n# Regenerate with `cargo xtask commute --ci --update-baseline` after changing cases.rs or fixing\n# a conflict; a free case that now conflicts needs `--accept CASE` (docs/commute.md).\n";

/// Compare a CI run with the baseline and the accepted regressions (`baseline::check`): a
/// case that was conflict-free and now conflicts fails, with its calls, arguments and the
/// lines' symbols, unless accepted-regressions.txt lists it; so does a result the model does
/// not allow.
pub fn check_baseline(outcomes: &[Outcome], baseline: &str, accepted: &baseline::Accepted) -> Result<TestTally, String> {
    let seen: Vec<baseline::Seen> = outcomes.iter().map(seen).collect();
    baseline::check("kernel", &seen, baseline, accepted, UPDATE_KERNEL)
}

/// The CI suite: the seeded sample, checked against the baseline.
pub fn ci_tests() -> Result<TestTally, String> {
    let sample = ci_sample();
    let outcomes = run_cases(&format!("pick={}", pick_arg(&sample)), 2, Duration::from_secs(300))?;
    if outcomes.len() != sample.len() {
        return Err(format!("the guest ran {} of the {} sampled cases", outcomes.len(), sample.len()));
    }
    let baseline = fs::read_to_string(baseline_path()).map_err(|e| format!("cannot read {}: {e}", baseline_path().display()))?;
    let t = check_baseline(&outcomes, &baseline, &baseline::read_accepted()?)?;
    println!("{} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// Suite `commute-planted` of `cargo xtask test`: the CI sample's check, shown to catch a
/// planted regression on every run. Builds the kernel with `planted-conflict` (every
/// `segment_alloc` bumps one global counter), runs the planted target case alone under the
/// audit and passes only if the baseline check fails it on `PLANTED_SEGMENT_ALLOCS` (the
/// check's own output is indented and labelled as the expected failure). A second test: the
/// same case on the normal kernel (the `commute` suite's run of the sample) is conflict-free
/// in the baseline, so the failure comes from the planted line alone.
pub fn planted_ci_test() -> Result<TestTally, String> {
    let target = planted_target();
    let baseline = fs::read_to_string(baseline_path()).map_err(|e| format!("cannot read {}: {e}", baseline_path().display()))?;
    let mut t = TestTally::default();
    let free_in_baseline = baseline.lines().any(|l| l.split(' ').take(2).eq([target.to_string().as_str(), "free"]));
    if free_in_baseline {
        println!("commute::planted_target_{target}_is_conflict_free_in_the_baseline ... ok");
        t.add(TestTally::PASS);
    } else {
        println!("commute::planted_target_{target}_is_conflict_free_in_the_baseline ... FAILED (the baseline does not list case {target} as free)");
        t.add(TestTally::FAIL);
    }
    let kernel = crate::host::env::build_kernel_with(&["planted-conflict"])?;
    let outcomes = run_cases_on(kernel, &format!("pick={target}"), 2, Duration::from_secs(300))?;
    println!("   the baseline check on the planted kernel (a failure is expected here):");
    let checked = check_baseline(&outcomes, &baseline, &baseline::read_accepted()?)?;
    let caught = outcomes.iter().any(|o| o.case.index == target && o.conflicts.iter().any(|c| c.symbol.contains("PLANTED_SEGMENT_ALLOCS")));
    if caught && checked.failed == 1 {
        println!("commute::planted_regression_is_caught ... ok (case {target} fails the baseline check on PLANTED_SEGMENT_ALLOCS)");
        t.add(TestTally::PASS);
    } else {
        println!("commute::planted_regression_is_caught ... FAILED (case {target}: {} of {} checks failed, PLANTED_SEGMENT_ALLOCS seen: {caught})", checked.failed, outcomes.len());
        t.add(TestTally::FAIL);
    }
    println!("{} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// `--calls`: kernel calls (`cases.rs`) or, with `--system`, POSIX calls (`posix_cases.rs`);
/// `main` checks which set applies.
pub fn calls_arg(v: &str) -> Result<String, String> {
    let known = |n: &str| cases::CALLS.iter().any(|k| k.name == n) || posix_cases::CALLS.iter().any(|k| k.name == n);
    if let Some(bad) = v.split(',').find(|n| !known(n)) {
        let names: Vec<&str> = cases::CALLS.iter().map(|k| k.name).collect();
        let pnames: Vec<&str> = posix_cases::CALLS.iter().map(|k| k.name).collect();
        return Err(format!("unknown call `{bad}` (kernel: {}; POSIX, with --system: {})", names.join(", "), pnames.join(", ")));
    }
    Ok(v.to_string())
}

/// The longest `pick=` list given to the kernel (its command line holds 512 bytes).
const PICK_MAX: usize = 400;

/// The guest's arguments for one part of the run (`--jobs`): its case list if it fits, else
/// the part's index range `first-last` with the `calls=` filter, which selects exactly the
/// part when the run is every selected case (the caller's `run_set`; `merge_parts` checks).
fn part_guest_args(part: &[usize], calls: Option<&str>) -> String {
    let pick = pick_arg(part);
    if pick.len() <= PICK_MAX {
        return format!("pick={pick}");
    }
    let range = format!("pick={}-{}", part.first().copied().unwrap_or(0), part.last().copied().unwrap_or(0));
    match calls {
        Some(c) => format!("calls={c} {range}"),
        None => range,
    }
}

/// `cargo xtask commute` (cli.rs declares the options).
pub fn main(args: &crate::commute::options::CommuteArgs) -> Result<(), String> {
    let calls = args.calls.clone();
    let (smp, timeout) = (args.smp, Duration::from_secs(args.timeout));
    let out = args.out.clone().unwrap_or_else(|| crate::host::env::target_dir().join("commute"));
    let (ci, update, model_only, list, planted) = (args.ci, args.update_baseline, args.model_only, args.list, args.planted);
    if args.jobs > 1 && (ci || planted) {
        // The CI sample is one short boot; its suites run it as one.
        return Err("commute: --jobs is for a full run (not with --ci or --planted)".into());
    }
    // --system: the POSIX calls on the library OS and/or Linux (posix.rs); without it the
    // kernel's own calls, which only this system has.
    if let Some(system) = args.system.as_deref() {
        let systems: &[&str] = match system {
            "both" => &["ours", "linux"],
            "ours" => &["ours"],
            _ => &["linux"],
        };
        if let Some(c) = &calls {
            if let Some(bad) = c.split(',').find(|n| !posix_cases::CALLS.iter().any(|k| k.name == *n)) {
                let names: Vec<&str> = posix_cases::CALLS.iter().map(|k| k.name).collect();
                return Err(format!("commute --system: unknown POSIX call `{bad}` (modelled: {})", names.join(", ")));
            }
        }
        if planted {
            return Err("commute --system: --planted is for the kernel calls".into());
        }
        if ci {
            let t = posix::ci_run(systems, update, &args.accept, timeout)?;
            return if t.failed > 0 { Err(format!("{} POSIX sampled case(s) regressed", t.failed)) } else { Ok(()) };
        }
        return posix::main(systems, calls.as_deref(), out, timeout, model_only, list, args.jobs);
    }
    if smp < 2 {
        return Err("commute: --smp must be at least 2 (the calls run on cores 0 and 1)".into());
    }
    if update && !ci {
        return Err("commute: --update-baseline goes with --ci".into());
    }
    if !args.accept.is_empty() && !update {
        return Err("commute: --accept goes with --ci --update-baseline".into());
    }
    if let Some(c) = &calls {
        if let Some(bad) = c.split(',').find(|n| !cases::CALLS.iter().any(|k| k.name == *n)) {
            let names: Vec<&str> = cases::CALLS.iter().map(|k| k.name).collect();
            return Err(format!("commute: unknown call `{bad}` (modelled: {})", names.join(", ")));
        }
    }
    let decided = decide_all();
    let selected = |c: &Case| calls.as_ref().is_none_or(|l| l.split(',').any(|n| n == c.call_a) && l.split(',').any(|n| n == c.call_b));
    let n_all = decided.iter().filter(|(c, _)| selected(c)).count();
    let n_comm = decided.iter().filter(|(c, v)| selected(c) && v.commutes).count();
    if list {
        for c in cases::CALLS {
            println!("{:<20} {} argument class(es)", c.name, c.variants.len());
        }
        println!("{} cases, {} commute in the model", decided.len(), decided.iter().filter(|(_, v)| v.commutes).count());
        return Ok(());
    }
    if model_only {
        for (c, v) in decided.iter().filter(|(c, _)| selected(c)) {
            println!("#{:<4} {:<9} {}  A-first {:?}  B-first {:?}", c.index, if v.commutes { "commutes" } else { "no" }, case_label(c), v.ab, v.ba);
        }
        println!("{n_all} cases, {n_comm} commute");
        return Ok(());
    }
    if planted {
        let kernel = crate::host::env::build_kernel_with(&["planted-conflict"])?;
        let sample = ci_sample();
        let outcomes = run_cases_on(kernel, &format!("pick={}", pick_arg(&sample)), smp, timeout)?;
        let baseline = fs::read_to_string(baseline_path()).map_err(|e| format!("cannot read {}: {e}", baseline_path().display()))?;
        let t = check_baseline(&outcomes, &baseline, &baseline::read_accepted()?)?;
        let target = planted_target();
        let caught = outcomes.iter().any(|o| o.case.index == target && o.conflicts.iter().any(|c| c.symbol.contains("PLANTED_SEGMENT_ALLOCS")));
        println!("planted regression: {} of {} sampled cases fail; case {target} conflicts on PLANTED_SEGMENT_ALLOCS: {caught}", t.failed, outcomes.len());
        return if caught && t.failed > 0 { Ok(()) } else { Err("the CI sample did not catch the planted regression".into()) };
    }
    if ci {
        let sample = ci_sample();
        let outcomes = run_cases(&format!("pick={}", pick_arg(&sample)), smp, timeout)?;
        if update {
            // A free case that now conflicts is written only as `accepted`, with `--accept`
            // and a reviewed reason (baseline.rs); otherwise nothing is written.
            let old = fs::read_to_string(baseline_path()).map_err(|e| format!("cannot read {}: {e}", baseline_path().display()))?;
            let seen: Vec<baseline::Seen> = outcomes.iter().map(seen).collect();
            let (body, notes) = baseline::update("kernel", &seen, &old, &baseline::read_accepted()?, &args.accept, KERNEL_BASELINE_HEADER)?;
            for n in notes {
                println!("note: {n}");
            }
            fs::write(baseline_path(), body).map_err(|e| format!("cannot write {}: {e}", baseline_path().display()))?;
            println!("wrote {}", baseline_path().display());
            print!("{}", report(&outcomes, outcomes.len(), outcomes.len()));
            return Ok(());
        }
        let baseline = fs::read_to_string(baseline_path()).map_err(|e| format!("cannot read {}: {e}", baseline_path().display()))?;
        let t = check_baseline(&outcomes, &baseline, &baseline::read_accepted()?)?;
        println!("{} passed, {} failed", t.passed, t.failed);
        return if t.failed > 0 { Err(format!("{} sampled case(s) regressed", t.failed)) } else { Ok(()) };
    }
    // Run only the commuting cases (the others are not scored), if their list fits on the
    // kernel's command line; else every selected case.
    let idx: Vec<usize> = decided.iter().filter(|(c, v)| selected(c) && v.commutes).map(|(c, _)| c.index).collect();
    let pick = pick_arg(&idx);
    let run_set: Vec<usize> = if pick.len() <= PICK_MAX { idx } else { decided.iter().filter(|(c, _)| selected(c)).map(|(c, _)| c.index).collect() };
    let parts = split_parts(&run_set, args.jobs);
    let guest_args: Vec<String> = parts.iter().map(|p| part_guest_args(p, calls.as_deref())).collect();
    let t0 = std::time::Instant::now();
    let outcomes = merge_parts(run_cases_jobs(crate::host::env::build_kernel()?, &guest_args, smp, timeout)?, &parts, |o| o.case.index)?;
    let text = report(&outcomes, n_all, n_comm);
    print!("{text}");
    println!("(guest run {:.0} s with {} job(s), one run on a shared host)", t0.elapsed().as_secs_f64(), parts.len());
    fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    fs::write(out.join("commute-ours.txt"), &text).map_err(|e| format!("cannot write report: {e}"))?;
    let svg = out.join("commute-ours-heatmap.svg");
    write_heat_maps(&svg, &heat_map_svg(&outcomes), heat_map_png(&outcomes))?;
    write_tables(&out, "commute-ours", &outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches a heat map that drops pairs: every pair run gets a cell in both halves.
    #[test]
    fn heat_map_has_a_cell_per_pair() {
        let c = cases::case(0).unwrap();
        let v = model::decide(&State::fixture(), c.a, c.b);
        let o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let svg = heat_map_svg(&[o]);
        assert!(svg.contains("null × null: 1/1"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    // Catches unreadable symbols in the report.
    #[test]
    fn demangles_legacy_symbols() {
        assert_eq!(demangle("_ZN6kernel7syscall6lookup17h71cee5c303ad1303E"), "kernel::syscall::lookup");
        assert_eq!(demangle("_ZN72_$LT$kernel..kobj..ar..AddressRange$u20$as$u20$core..ops..drop..Drop$GT$4drop17h48a71d2c0793e262E"), "<kernel::kobj::ar::AddressRange as core::ops::drop::Drop>::drop");
        assert_eq!(demangle("OBJECT_IDS"), "OBJECT_IDS");
    }

    // Catches a pick list the guest would read differently: ranges compress runs only.
    #[test]
    fn pick_arg_compresses_runs() {
        assert_eq!(pick_arg(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
        assert_eq!(pick_arg(&[]), "");
    }

    // Catches a split that loses, repeats or reorders cases, and a merge that accepts a job
    // that ran other cases than it was given: a synthetic run of the kernel's cases cut into
    // 1, 2, 3 and 7 parts merges back to exactly the one-part run.
    #[test]
    fn jobs_merge_equals_one_job() {
        let start = State::fixture();
        let all: Vec<Outcome> = (0..cases::count())
            .filter(|i| i % 3 != 1)
            .map(|i| {
                let c = cases::case(i).unwrap();
                let v = model::decide(&start, c.a, c.b);
                let conflicts = if i % 5 == 0 { vec![Conflict { symbol: format!("S{i}"), pa: "0x40".into(), readers: 3, writers: 3 }] } else { Vec::new() };
                Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts }
            })
            .collect();
        let idx: Vec<usize> = all.iter().map(|o| o.case.index).collect();
        let one = report(&all, all.len(), all.len());
        for jobs in [1, 2, 3, 7] {
            let parts = split_parts(&idx, jobs);
            assert_eq!(parts.len(), jobs);
            assert!(parts.iter().all(|p| !p.is_empty()));
            assert!(parts.iter().map(|p| p.len()).max().unwrap() - parts.iter().map(|p| p.len()).min().unwrap() <= 1, "near-equal parts");
            // Each "boot" returns its part's outcomes, as the guest prints them.
            let ran: Vec<Vec<Outcome>> = parts.iter().map(|p| all.iter().filter(|o| p.contains(&o.case.index)).cloned().collect()).collect();
            let merged = merge_parts(ran, &parts, |o| o.case.index).unwrap();
            assert_eq!(merged.iter().map(|o| o.case.index).collect::<Vec<_>>(), idx, "{jobs} jobs");
            assert_eq!(report(&merged, merged.len(), merged.len()), one, "{jobs} jobs: the same report");
        }
        // Fewer cases than jobs: one part per case.
        assert_eq!(split_parts(&[4, 9], 5), vec![vec![4], vec![9]]);
        assert_eq!(split_parts(&[], 3), vec![Vec::<usize>::new()]);
        // A job that lost a case, or ran them out of order, is refused.
        let parts = split_parts(&[1, 2, 3, 4], 2);
        assert!(merge_parts(vec![vec![1, 2], vec![3]], &parts, |i| *i).unwrap_err().contains("job 1 ran 1 case(s) where 2 were given"));
        assert!(merge_parts(vec![vec![2, 1], vec![3, 4]], &parts, |i| *i).is_err());
        assert!(merge_parts(vec![vec![1, 2]], &parts, |i| *i).is_err());
    }

    // Catches a part whose guest arguments select other cases than the part: a short part is
    // its own list; a long one (over the command line's room) is its index range, filtered
    // by --calls.
    #[test]
    fn part_guest_args_select_the_part() {
        assert_eq!(part_guest_args(&[3, 4, 5, 9], None), "pick=3-5,9");
        let long: Vec<usize> = (0..400).map(|i| i * 2).collect();
        assert_eq!(part_guest_args(&long, None), "pick=0-798");
        assert_eq!(part_guest_args(&long, Some("null,obj_stat")), "calls=null,obj_stat pick=0-798");
    }

    // Catches --jobs values that would run nothing or are not numbers.
    #[test]
    fn jobs_arg_refuses_bad_values() {
        assert_eq!(jobs_arg("2"), Ok(2));
        assert!(jobs_arg("0").unwrap_err().contains("1 or more"));
        assert!(jobs_arg("x").unwrap_err().contains("not a number"));
        assert!(jobs_arg("-2").unwrap_err().contains("not a number"));
        assert!(jobs_arg("33").unwrap_err().contains("at most 32"));
    }

    // Catches a CI sample that changes from run to run (the baseline would not match).
    #[test]
    fn ci_sample_is_fixed_and_commuting() {
        let a = ci_sample();
        assert_eq!(a, ci_sample());
        assert!(a.len() == CI_SAMPLE || a.len() == CI_SAMPLE + 1);
        assert!(a.contains(&planted_target()));
        let d = decide_all();
        assert!(a.iter().all(|i| d[*i].1.commutes));
    }

    // Catches a plugin report split wrongly into cases: lines belong to the epoch before them.
    #[test]
    fn epochs_split_the_report() {
        let text = "epoch seq=0 lines=3 shared=0\nepoch seq=1 lines=9 shared=1\nline pa=0x40 vaddr=0x1 pc=0x2 mode=k readers=0x3 writers=0x1 reads=1 writes=1 transfers=1\nsharing version=1 starts=4\nline pa=0x80 vaddr=0 pc=0 mode=k readers=0x3 writers=0x3 reads=1 writes=1 transfers=1\nend\n";
        let e = parse_epochs(text);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].len(), 0);
        assert_eq!(e[1].len(), 1);
        assert_eq!(parse_case_line("[1] commute-case i=7 a=0 b=E:Busy"), Some((7, "0".into(), "E:Busy".into())));
    }

    // Catches a baseline check that cannot fail: a case conflict-free in the baseline that now
    // has a shared line fails, with its symbol in the message.
    #[test]
    fn baseline_regression_fails() {
        let c = cases::case(0).unwrap();
        let v = model::decide(&State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let base = format!("{} free {}\n", o.case.index, case_label(&o.case));
        let none = baseline::Accepted::new();
        let tally = |o: &Outcome| {
            let t = check_baseline(&[o.clone()], &base, &none).unwrap();
            (t.passed, t.failed)
        };
        // The case, and the (empty) accepted-regressions file.
        assert_eq!(tally(&o), (2, 0));
        o.conflicts.push(Conflict { symbol: "OBJECT_IDS".into(), pa: "0x40".into(), readers: 3, writers: 3 });
        assert_eq!(tally(&o), (1, 1));
        // A result the model does not allow fails too.
        o.conflicts.clear();
        o.got.0 = "E:Busy".into();
        assert_eq!(tally(&o), (1, 1));
    }
}
