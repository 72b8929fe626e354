//! The commutativity checker's one pipeline, for any model of calls ([`Model`]: the kernel's
//! own calls, model.rs; the POSIX calls, posix_model.rs): enumerate the cases and decide each
//! on the model's fixture ([`decide_all`]), cut a selection into boots ([`split_parts`]), run
//! them in QEMU under the sharing audit ([`run_boots`]), read back each case's results and
//! shared lines ([`outcomes_of_run`]), merge the boots ([`merge_parts`]), compare with the
//! checked-in baseline ([`seen`], baseline.rs) and report: text ([`report`]), CSV and JSON
//! tables, heat maps (SVG and PNG). Which kernel or library OS boots, and how its lines are
//! named, is the caller's (kernel.rs, posix.rs).

use super::baseline;
use super::heatmap_png;
use crate::guest::plugin::{self, Record};
use crate::host::qemu::RunOutput;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{Debug, Write as _};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A model of a set of calls: its cases (pairs of calls with argument classes, from
/// `testdefs`), its fixture and how one call changes it. Two calls commute when both orders
/// give the same results and leave the same state ([`decide`]).
pub trait Model {
    type Op: Copy + Debug + PartialEq;
    type State: Clone + PartialEq;
    /// The word before ` i=N a=RES b=RES` on the guest's case lines.
    const CASE_WORD: &'static str;
    /// How this model's listings look (kept as each checker has always printed them).
    const STYLE: Style;
    /// The calls' names and argument-class counts, in table order.
    fn calls() -> Vec<(&'static str, usize)>;
    /// Every case, in index order.
    fn cases() -> Vec<Case<Self::Op>>;
    fn case(index: usize) -> Option<Case<Self::Op>>;
    fn fixture() -> Self::State;
    /// Run `op` as core `who` on `state`; its result as the guest prints it.
    fn apply(state: &mut Self::State, op: Self::Op, who: u8) -> String;
}

/// `impl Model for $name`: the cases of a `testdefs` case table (`$cases`: `CALLS` with each
/// call's `name` and `variants`, `for_each_case`, `case`, each case's index, calls and ops)
/// decided on the model's `State` (`fixture()`, `apply(op, who)`). Both models are written
/// this way, so their tables and states are all that differs.
macro_rules! model_of_case_table {
    ($name:ident, $cases:ident, $word:expr, $style:expr) => {
        impl $crate::commute::pipeline::Model for $name {
            type Op = $cases::Op;
            type State = State;
            const CASE_WORD: &'static str = $word;
            const STYLE: $crate::commute::pipeline::Style = $style;

            fn calls() -> Vec<(&'static str, usize)> {
                $cases::CALLS.iter().map(|c| (c.name, c.variants.len())).collect()
            }

            fn cases() -> Vec<$crate::commute::pipeline::Case<$cases::Op>> {
                let mut v = Vec::new();
                testdefs::pairs::for_each_case($cases::CALLS, |c| v.push(c));
                v
            }

            fn case(index: usize) -> Option<$crate::commute::pipeline::Case<$cases::Op>> {
                testdefs::pairs::case($cases::CALLS, index)
            }

            fn fixture() -> State {
                State::fixture()
            }

            fn apply(state: &mut State, op: $cases::Op, who: u8) -> String {
                state.apply(op, who)
            }
        }
    };
}
pub(crate) use model_of_case_table;

/// The layout of one model's listings.
pub struct Style {
    /// The call columns of the pair table: width and headings.
    pub call_width: usize,
    pub call_heads: (&'static str, &'static str),
    /// The width of a case index (`#N`) in listings.
    pub index_width: usize,
    /// The width of a call's name in `--list`.
    pub list_width: usize,
    /// Conflicting cases listed under a line per call pair (else one flat list).
    pub by_pair: bool,
    /// What gave a result the model does not allow: the report's word, the baseline check's.
    pub got_word: &'static str,
    pub results_word: &'static str,
}

/// One case: call A (core 0) with its arguments against call B (core 1), as both the host and
/// the guest enumerate them.
pub use testdefs::pairs::Case;

/// What running a pair in each order gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub commutes: bool,
    /// A's and B's results when A runs first, and when B runs first.
    pub ab: (String, String),
    pub ba: (String, String),
}

/// Do `a` (call A) and `b` (call B) commute on `start`?
pub fn decide<M: Model>(start: &M::State, a: M::Op, b: M::Op) -> Verdict {
    let mut s1 = start.clone();
    let ra1 = M::apply(&mut s1, a, 0);
    let rb1 = M::apply(&mut s1, b, 1);
    let mut s2 = start.clone();
    let rb2 = M::apply(&mut s2, b, 1);
    let ra2 = M::apply(&mut s2, a, 0);
    Verdict { commutes: ra1 == ra2 && rb1 == rb2 && s1 == s2, ab: (ra1, rb1), ba: (ra2, rb2) }
}

/// Did the system give results the model allows? For a commuting pair both orders give the
/// same results, so the system's must be those; otherwise either order's.
pub fn results_allowed(v: &Verdict, got: (&str, &str)) -> bool {
    (got.0 == v.ab.0 && got.1 == v.ab.1) || (got.0 == v.ba.0 && got.1 == v.ba.1)
}

/// Every case with the model's verdict.
pub fn decide_all<M: Model>() -> Vec<(Case<M::Op>, Verdict)> {
    let start = M::fixture();
    M::cases().into_iter().map(|c| (c, decide::<M>(&start, c.a, c.b))).collect()
}

/// Does `calls` (a comma list, or none) select this case? Both its calls must be named.
pub fn selected<Op>(calls: Option<&str>, c: &Case<Op>) -> bool {
    calls.is_none_or(|l| l.split(',').any(|n| n == c.call_a) && l.split(',').any(|n| n == c.call_b))
}

/// `--list`: each call and its argument classes, and the case count.
pub fn print_list<M: Model>() {
    let decided = decide_all::<M>();
    let w = M::STYLE.list_width;
    for (name, classes) in M::calls() {
        println!("{name:<w$} {classes} argument class(es)");
    }
    println!("{} cases, {} commute in the model", decided.len(), decided.iter().filter(|(_, v)| v.commutes).count());
}

/// `--model-only`: the model's decision on every selected case, without booting.
pub fn print_model_only<M: Model>(calls: Option<&str>) {
    let chosen: Vec<(Case<M::Op>, Verdict)> = decide_all::<M>().into_iter().filter(|(c, _)| selected(calls, c)).collect();
    let iw = M::STYLE.index_width;
    for (c, v) in &chosen {
        println!("#{:<iw$} {:<9} {}  A-first {:?}  B-first {:?}", c.index, if v.commutes { "commutes" } else { "no" }, case_label(c), v.ab, v.ba);
    }
    println!("{} cases, {} commute", chosen.len(), chosen.iter().filter(|(_, v)| v.commutes).count());
}

/// `A(args) | B(args)` for reports and the baseline.
pub fn case_label<Op: Debug>(c: &Case<Op>) -> String {
    format!("{:?} | {:?}", c.a, c.b)
}

/// `n` commuting cases drawn with a fixed seed (xorshift64*: a fixed sequence, no
/// dependency), ascending.
pub fn draw_sample(commuting: &[usize], n: usize, seed: u64) -> BTreeSet<usize> {
    let mut state = seed;
    let mut picked = BTreeSet::new();
    while picked.len() < n.min(commuting.len()) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        picked.insert(commuting[(r % commuting.len() as u64) as usize]);
    }
    picked
}

/// The commuting cases' indices.
pub fn commuting<M: Model>() -> Vec<usize> {
    decide_all::<M>().into_iter().filter(|(_, v)| v.commutes).map(|(c, _)| c.index).collect()
}

// ---------------------------------------------------------------------------------------------
// Running the cases

/// One line of the audit that makes a case conflicting.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// The data's symbol, or `[heap] written by FUNCTION` for memory without one.
    pub symbol: String,
    pub pa: String,
    pub readers: u64,
    pub writers: u64,
}

#[derive(Debug, Clone)]
pub struct Outcome<Op> {
    pub case: Case<Op>,
    pub verdict: Verdict,
    /// The guest's results (A, B).
    pub got: (String, String),
    pub conflicts: Vec<Conflict>,
}

impl<Op> Outcome<Op> {
    pub fn results_ok(&self) -> bool {
        results_allowed(&self.verdict, (&self.got.0, &self.got.1))
    }

    /// The lines' symbols, sorted, each once.
    pub fn symbols(&self) -> Vec<String> {
        let mut syms: Vec<String> = self.conflicts.iter().map(|c| c.symbol.clone()).collect();
        syms.sort();
        syms.dedup();
        syms
    }
}

/// `I,J-K` for the guest's `pick=`.
pub fn pick_arg(idx: &[usize]) -> String {
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

/// The most `--jobs` allows: more boots than this only queue for the host's cores.
pub const MAX_JOBS: usize = 32;

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

/// One boot of the checker: QEMU's arguments and the plugin report it writes.
pub struct Boot {
    pub args: Vec<String>,
    pub out: PathBuf,
}

/// The sharing plugin's argument for one boot: its report file `out`, `extra` options
/// (`kernel_only=on`, or none), and the exact mode's vCPU quantum for `smp` vCPUs.
pub fn sharing_arg(built: &plugin::Built, out: &Path, extra: &str, smp: u32) -> String {
    let mut parg = format!("{},out={}{extra}", built.sharing.display(), out.display());
    for e in plugin::quantum_plugin_args(smp) {
        parg.push(',');
        parg.push_str(&e);
    }
    parg
}

/// QEMU's arguments for a checker boot of `cfg`: single-threaded TCG (the exact mode), the
/// serial console on stdout, no monitor, the exact mode's options.
pub fn boot_args(cfg: &crate::host::vm::VmConfig) -> Vec<String> {
    let mut args: Vec<String> = cfg.qemu_args().into_iter().map(|a| if a == "tcg,thread=multi" { "tcg,thread=single".to_string() } else { a }).collect();
    args.extend(["-serial", "stdio", "-monitor", "none"].iter().map(|x| x.to_string()));
    args.extend(plugin::exact_qemu_args());
    args
}

/// A fresh plugin report file for boot `job` of this process (`what` names the checker): a
/// CI run beside a full run, or two jobs, never share one.
pub fn report_file(what: &str, job: usize) -> Result<PathBuf, String> {
    let runs = plugin::artifact_dir().join("runs");
    fs::create_dir_all(&runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    let out = runs.join(format!("sharing-{what}-{}-job{job}.txt", std::process::id()));
    let _ = fs::remove_file(&out);
    Ok(out)
}

/// Run one QEMU per argument list, all at once, each with its own limit; the results in the
/// order given. (One host thread per boot waits for its QEMU process.)
pub fn run_boots(boots: Vec<Vec<String>>, timeout: Duration) -> Vec<Result<RunOutput, String>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = boots.iter().map(|args| s.spawn(move || crate::host::qemu::run_qemu(args, timeout))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a QEMU runner thread panicked".into()))).collect()
    })
}

/// Every boot at once; each one's serial output handed to `log` (by job), then its outcomes
/// read (`tag` names the boot in errors) with its lines named by `name`, its report removed.
pub fn run_all<M: Model>(boots: &[Boot], timeout: Duration, tag: &dyn Fn(usize) -> String, name: &dyn Fn(&Record) -> String, log: &dyn Fn(usize, &RunOutput)) -> Result<Vec<Vec<Outcome<M::Op>>>, String> {
    let runs = run_boots(boots.iter().map(|b| b.args.clone()).collect(), timeout);
    let mut parts = Vec::new();
    for (job, (boot, run)) in boots.iter().zip(runs).enumerate() {
        let run = run?;
        log(job, &run);
        parts.push(outcomes_of_run::<M>(&tag(job), &run, &boot.out, name, timeout)?);
        let _ = fs::remove_file(&boot.out);
    }
    Ok(parts)
}

/// One boot's outcomes from its serial output (the guest's `WORD i=N a=RES b=RES` lines) and
/// its plugin report (one epoch per case), each case decided on the model.
pub fn outcomes_of_run<M: Model>(tag: &str, run: &RunOutput, out: &Path, name: &dyn Fn(&Record) -> String, timeout: Duration) -> Result<Vec<Outcome<M::Op>>, String> {
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
    let results: Vec<(usize, String, String)> = run.serial.lines().filter_map(|l| parse_case_line(M::CASE_WORD, l)).collect();
    if epochs.len() != results.len() {
        return Err(format!("{tag}: {} cases printed but {} plugin epochs reported", results.len(), epochs.len()));
    }
    let start = M::fixture();
    let mut outcomes = Vec::new();
    for ((index, ra, rb), lines) in results.into_iter().zip(epochs) {
        let case = M::case(index).ok_or_else(|| format!("guest printed unknown case {index}"))?;
        let verdict = decide::<M>(&start, case.a, case.b);
        let conflicts = lines.iter().map(|r| Conflict { symbol: name(r), pa: r.get("pa").unwrap_or("?").to_string(), readers: r.u("readers"), writers: r.u("writers") }).collect();
        outcomes.push(Outcome { case, verdict, got: (ra, rb), conflicts });
    }
    Ok(outcomes)
}

/// `WORD i=N a=RES b=RES` (results have no spaces).
pub fn parse_case_line(word: &str, l: &str) -> Option<(usize, String, String)> {
    let rest = &l[l.find(&format!("{word} i="))? + word.len() + 1..];
    let mut w = rest.split_whitespace();
    let i = w.next()?.strip_prefix("i=")?.parse().ok()?;
    let a = w.next()?.strip_prefix("a=")?.to_string();
    let b = w.next()?.strip_prefix("b=")?.to_string();
    Some((i, a, b))
}

/// The plugin's per-epoch records: each `epoch` record and the `line` records after it.
pub fn parse_epochs(text: &str) -> Vec<Vec<Record>> {
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

// ---------------------------------------------------------------------------------------------
// Reports

/// Per call pair, in call-table order: (commuting cases, conflict-free ones).
pub fn by_pair<M: Model>(outcomes: &[Outcome<M::Op>]) -> BTreeMap<(usize, &'static str, &'static str), (usize, usize)> {
    let calls = M::calls();
    let pos = |n: &str| calls.iter().position(|c| c.0 == n).unwrap_or(0);
    let mut m = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.verdict.commutes) {
        let e = m.entry((pos(o.case.call_a) * 100 + pos(o.case.call_b), o.case.call_a, o.case.call_b)).or_insert((0, 0));
        e.0 += 1;
        e.1 += o.conflicts.is_empty() as usize;
    }
    m
}

/// The report: `heading`; per call pair, commuting and conflict-free cases; the conflicting
/// cases with their symbols; the symbols by case count; results the model does not allow;
/// `closing`.
pub fn report<M: Model>(outcomes: &[Outcome<M::Op>], heading: &str, closing: &str) -> String {
    let style = M::STYLE;
    let (w, iw) = (style.call_width, style.index_width);
    let mut t = String::new();
    let commuting: Vec<&Outcome<M::Op>> = outcomes.iter().filter(|o| o.verdict.commutes).collect();
    let _ = writeln!(t, "{heading}");
    let _ = writeln!(t, "\n{:<w$} {:<w$} {:>10} {:>14}", style.call_heads.0, style.call_heads.1, "commuting", "conflict-free");
    let pairs = by_pair::<M>(outcomes);
    for ((_, a, b), (n, f)) in &pairs {
        let _ = writeln!(t, "{a:<w$} {b:<w$} {n:>10} {f:>14}{}", if f < n { "  <-" } else { "" });
    }
    let mut by_sym: BTreeMap<String, usize> = BTreeMap::new();
    let mut case_line = |t: &mut String, indent: &str, o: &Outcome<M::Op>| {
        let syms = o.symbols();
        for s in &syms {
            *by_sym.entry(s.clone()).or_default() += 1;
        }
        let _ = writeln!(t, "{indent}#{:<iw$} {}: {} line(s): {}", o.case.index, case_label(&o.case), o.conflicts.len(), syms.join(", "));
    };
    if style.by_pair {
        let _ = writeln!(t, "\nconflicting commutative cases, by call pair:");
        for ((_, a, b), (n, f)) in &pairs {
            if f == n {
                continue;
            }
            let _ = writeln!(t, "  {a} x {b}: {} of {n}", n - f);
            for o in commuting.iter().filter(|o| o.case.call_a == *a && o.case.call_b == *b && !o.conflicts.is_empty()) {
                case_line(&mut t, "    ", o);
            }
        }
    } else {
        let _ = writeln!(t, "\nconflicting commutative cases:");
        for o in commuting.iter().filter(|o| !o.conflicts.is_empty()) {
            case_line(&mut t, "  ", o);
        }
    }
    let _ = writeln!(t, "\nby symbol (cases):");
    let mut v: Vec<_> = by_sym.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for (s, n) in v {
        let _ = writeln!(t, "  {n:>5}  {s}");
    }
    let bad: Vec<&Outcome<M::Op>> = outcomes.iter().filter(|o| !o.results_ok()).collect();
    if !bad.is_empty() {
        let _ = writeln!(t, "\nresults the model does not allow ({}):", bad.len());
        for o in &bad {
            let _ = writeln!(t, "  #{} {}: {} a={} b={}; model A-first a={} b={}, B-first a={} b={}", o.case.index, case_label(&o.case), style.got_word, o.got.0, o.got.1, o.verdict.ab.0, o.verdict.ab.1, o.verdict.ba.0, o.verdict.ba.1);
        }
    }
    let _ = writeln!(t, "\n{closing}");
    t
}

/// (commuting cases, conflict-free ones, results the model does not allow).
pub fn totals<Op>(outcomes: &[Outcome<Op>]) -> (usize, usize, usize) {
    let commuting = outcomes.iter().filter(|o| o.verdict.commutes).count();
    let free = outcomes.iter().filter(|o| o.verdict.commutes && o.conflicts.is_empty()).count();
    (commuting, free, outcomes.iter().filter(|o| !o.results_ok()).count())
}

/// `free` of `commuting` as a percentage (0 of 0: 0).
pub fn percent(free: usize, commuting: usize) -> f64 {
    if commuting == 0 {
        0.0
    } else {
        100.0 * free as f64 / commuting as f64
    }
}

/// The cases as CSV, one row each.
pub fn write_csv<Op: Debug>(path: &Path, outcomes: &[Outcome<Op>]) -> Result<(), String> {
    let mut csv = String::from("index,call_a,call_b,args_a,args_b,commutes,conflict_free,result_a,result_b,results_ok,symbols\n");
    for o in outcomes {
        let _ = writeln!(csv, "{},{},{},\"{:?}\",\"{:?}\",{},{},{},{},{},\"{}\"", o.case.index, o.case.call_a, o.case.call_b, o.case.a, o.case.b, o.verdict.commutes, o.conflicts.is_empty(), o.got.0, o.got.1, o.results_ok(), o.symbols().join(";"));
    }
    fs::write(path, csv).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The cases as JSON with every shared line, under `evidence` and `system`.
pub fn write_json<Op: Debug>(path: &Path, outcomes: &[Outcome<Op>], evidence: &str, system: &str) -> Result<(), String> {
    let jstr = plugin::jstr;
    let mut json = Vec::new();
    for o in outcomes {
        // Lines by symbol, then physical address: a heap line's address depends on what the
        // boot ran before the case (`--jobs` boots start at different cases), its symbol and
        // sharing do not, so the order does not move with the address.
        let mut sorted: Vec<&Conflict> = o.conflicts.iter().collect();
        sorted.sort_by(|a, b| (&a.symbol, a.readers, a.writers, &a.pa).cmp(&(&b.symbol, b.readers, b.writers, &b.pa)));
        let lines: Vec<String> = sorted.iter().map(|c| format!("{{\"symbol\":{},\"pa\":{},\"readers\":{},\"writers\":{}}}", jstr(&c.symbol), jstr(&c.pa), c.readers, c.writers)).collect();
        json.push(format!(
            "{{\"index\":{},\"call_a\":{},\"call_b\":{},\"a\":{},\"b\":{},\"commutes\":{},\"conflict_free\":{},\"result_a\":{},\"result_b\":{},\"results_ok\":{},\"conflicts\":[{}]}}",
            o.case.index,
            jstr(o.case.call_a),
            jstr(o.case.call_b),
            jstr(&format!("{:?}", o.case.a)),
            jstr(&format!("{:?}", o.case.b)),
            o.verdict.commutes,
            o.conflicts.is_empty(),
            jstr(&o.got.0),
            jstr(&o.got.1),
            o.results_ok(),
            lines.join(",")
        ));
    }
    let (commuting, free, _) = totals(outcomes);
    let body = format!("{{\"evidence\":{},\"system\":{},\"commutative\":{commuting},\"conflict_free\":{free},\"cases\":[\n{}\n]}}\n", jstr(evidence), jstr(system), json.join(",\n"));
    fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The heat map's cells: per call pair, (call A, call B, commuting cases, conflict-free ones).
pub fn heat_map_cells<M: Model>(outcomes: &[Outcome<M::Op>]) -> Vec<(&'static str, &'static str, usize, usize)> {
    by_pair::<M>(outcomes).into_iter().map(|((_, a, b), (n, f))| (a, b, n, f)).collect()
}

/// The heat map as SVG: call × call, each cell the share of that pair's commuting cases that
/// are conflict-free (green 100%, red 0%, grey: no commuting case run). Symmetric: a pair is
/// drawn in both cells.
pub fn heat_map_svg<M: Model>(outcomes: &[Outcome<M::Op>], title: &str) -> String {
    let names: Vec<&str> = M::calls().into_iter().map(|c| c.0).collect();
    heat_map_of(&names, &heat_map_cells::<M>(outcomes), title)
}

/// The same heat map as PNG (`heatmap_png`), from the same cells.
pub fn heat_map_png<M: Model>(outcomes: &[Outcome<M::Op>], title: &str) -> Result<Vec<u8>, String> {
    let names: Vec<&str> = M::calls().into_iter().map(|c| c.0).collect();
    heatmap_png::heat_map_png(&names, &heat_map_cells::<M>(outcomes), title)
}

/// Write the heat map as `svg` and, beside it, the same name with `.png`.
pub fn write_heat_maps<M: Model>(svg: &Path, outcomes: &[Outcome<M::Op>], title: &str) -> Result<(), String> {
    fs::write(svg, heat_map_svg::<M>(outcomes, title)).map_err(|e| format!("cannot write {}: {e}", svg.display()))?;
    println!("wrote {}", svg.display());
    let png_path = svg.with_extension("png");
    fs::write(&png_path, heat_map_png::<M>(outcomes, title)?).map_err(|e| format!("cannot write {}: {e}", png_path.display()))?;
    println!("wrote {}", png_path.display());
    Ok(())
}

/// Draw a heat map of `names` × `names` from `pairs` (call A, call B, commuting cases,
/// conflict-free cases) under `title`. A name not in `names` is drawn in the first row (a
/// caller's bug, visible rather than dropped).
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

// ---------------------------------------------------------------------------------------------
// The baseline

/// A run's case as the baseline check sees it (baseline.rs), under the test name `name`.
pub fn seen<M: Model>(o: &Outcome<M::Op>, name: String) -> baseline::Seen {
    baseline::Seen {
        index: o.case.index,
        label: case_label(&o.case),
        name,
        symbols: o.symbols(),
        lines: o.conflicts.len(),
        results_error: (!o.results_ok()).then(|| format!("{} a={} b={}, the model allows {:?} or {:?}", M::STYLE.results_word, o.got.0, o.got.1, o.verdict.ab, o.verdict.ba)),
    }
}

/// The checked-in baseline file `name` (beside this file).
pub fn baseline_file(name: &str) -> PathBuf {
    crate::host::env::workspace_root().join("xtask/src/commute").join(name)
}

/// A checked-in file's text, or a clear error.
pub fn read(path: &Path) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// `--update-baseline`: rewrite `path` from this run's `seen` cases (set `set` of
/// accepted-regressions.txt; a free case that now conflicts is written only as `accepted`,
/// with `--accept` and a reviewed reason: baseline.rs), then print the notes.
pub fn update_baseline(path: &Path, set: &str, seen: &[baseline::Seen], accept: &[usize], header: &str) -> Result<(), String> {
    let old = read(path)?;
    let (body, notes) = baseline::update(set, seen, &old, &baseline::read_accepted()?, accept, header)?;
    for n in notes {
        println!("note: {n}");
    }
    fs::write(path, body).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}
