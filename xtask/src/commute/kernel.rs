//! `cargo xtask commute` without `--system`: the kernel's own calls, after sv6/Commuter
//! (SOSP'13). For each pair of modelled system calls and each argument class (`cases.rs`),
//! the model (`model.rs`) decides whether the two calls commute on the fixture; the guest
//! (`user/apps/src/bin/commute.rs`) runs every selected case as a two-core test under the
//! sharing audit in exact mode, kernel accesses only, one plugin epoch per case; a commuting
//! case is **conflict-free** when no kernel cache line was written by one core and read or
//! written by the other inside the two calls' regions. The steps are the pipeline's
//! (pipeline.rs); this file boots this kernel for them, names its lines, and holds the CI
//! sample, its baseline and the planted regression that shows the sample catches one.

use super::baseline;
use super::model::Kernel;
use super::options::CommuteArgs;
use super::pipeline::{self as p, Boot, Outcome};
use crate::guest::plugin::{self, Record};
use crate::guest::symbols::Symbols;
use crate::host::outcome::TestTally;
use std::fs;
use std::path::PathBuf;
use std::time::Duration;
use testdefs::commute_cases::{self as cases, Op};

/// The checked-in baseline of the CI sample: which sampled cases were conflict-free.
fn baseline_path() -> PathBuf {
    p::baseline_file("baseline.txt")
}

/// The CI sample: this many commuting cases, drawn with a fixed seed.
const CI_SAMPLE: usize = 48;
const CI_SEED: u64 = 19;

/// The case the planted regression (kernel feature `planted-conflict`, a global counter bumped
/// by every `segment_alloc`) makes conflicting: two allocations into different shares. Always
/// in the CI sample, so the sample is shown to catch it (`cargo xtask commute --planted`).
fn planted_target() -> usize {
    let mut idx = usize::MAX;
    testdefs::pairs::for_each_case(cases::CALLS, |c| {
        if c.a == Op::SegmentAlloc(cases::Sym::SA) && c.b == Op::SegmentAlloc(cases::Sym::SB) {
            idx = c.index;
        }
    });
    idx
}

/// The CI sample: `CI_SAMPLE` commuting cases drawn with a fixed seed, plus the planted
/// regression's target, ascending.
pub fn ci_sample() -> Vec<usize> {
    let mut picked = p::draw_sample(&p::commuting::<Kernel>(), CI_SAMPLE, CI_SEED);
    picked.insert(planted_target());
    picked.into_iter().collect()
}

/// Boot the guest with the sharing plugin and run `guest_args` (`calls=` / `pick=`); return
/// each case's results and conflicting lines.
pub fn run_cases(guest_args: &str, smp: u32, timeout: Duration) -> Result<Vec<Outcome<Op>>, String> {
    run_cases_on(crate::host::env::build_kernel()?, guest_args, smp, timeout)
}

/// `run_cases` on a given kernel (the planted regression's).
pub fn run_cases_on(kernel: PathBuf, guest_args: &str, smp: u32, timeout: Duration) -> Result<Vec<Outcome<Op>>, String> {
    let mut parts = run_cases_jobs(kernel, &[guest_args.to_string()], smp, timeout)?;
    Ok(parts.pop().unwrap_or_default())
}

/// Boot `kernel` once per element of `guest_args` (`calls=` / `pick=`), all at once (one
/// QEMU process each: `--jobs`), and return each boot's outcomes in the order given. Every
/// boot has its own plugin report file, so two boots never write one file.
pub fn run_cases_jobs(kernel: PathBuf, guest_args: &[String], smp: u32, timeout: Duration) -> Result<Vec<Vec<Outcome<Op>>>, String> {
    // Everything that builds or writes a shared file happens here, once, before any boot.
    let built = plugin::build()?;
    let initrd = crate::host::user::build_initrd()?;
    let syms = Symbols::from_elf_file(&kernel)?;
    let mut boots = Vec::new();
    for (job, ga) in guest_args.iter().enumerate() {
        let out = p::report_file(&format!("commute-{smp}"), job)?;
        let cmdline = format!("init=commute -- {ga}");
        let cfg = crate::host::vm::VmConfig {
            smp,
            medium: Some(crate::host::vm::BootMedium::Kernel(kernel.clone())),
            initrd: Some(initrd.clone()),
            cmdline: cmdline.trim().to_string(),
            extra: vec!["-plugin".into(), p::sharing_arg(&built, &out, ",kernel_only=on", smp)],
            ..Default::default()
        };
        cfg.validate()?;
        boots.push(Boot { args: p::boot_args(&cfg), out });
    }
    let n = boots.len();
    let tag = |job: usize| if n > 1 { format!("commute job {job}") } else { "commute".to_string() };
    p::run_all::<Kernel>(&boots, timeout, &tag, &|r| symbol_of(&syms, r), &|_, _| {})
}

/// The kernel symbol that owns a line (as `plugin audit` names it), demangled.
fn symbol_of(syms: &Symbols, r: &Record) -> String {
    match syms.name(r.u("vaddr")) {
        Some(n) => p::demangle(n.split('+').next().unwrap_or(&n)),
        None => format!("[heap] written by {}", syms.name(r.u("pc")).map(|c| p::demangle(c.split('+').next().unwrap_or(""))).unwrap_or("?".into())),
    }
}

/// The report: per pair, the total, each conflict's symbols, model mismatches.
pub fn report(outcomes: &[Outcome<Op>], all_decided: usize, all_commuting: usize) -> String {
    let (commuting, free, _) = p::totals(outcomes);
    let heading = format!("cases: {} run of {all_decided} ({all_commuting} commute in the model)", outcomes.len());
    let closing = format!("ours: {free}/{commuting} commutative cases conflict-free ({:.1}%)", p::percent(free, commuting));
    p::report::<Kernel>(outcomes, &heading, &closing)
}

const KERNEL_MAP_TITLE: &str = "Conflict-free share of commutative cases per call pair (ours, 2 cores, exact sharing audit)";

const UPDATE_KERNEL: &str = "cargo xtask commute --ci --update-baseline";

const KERNEL_BASELINE_HEADER: &str = "# The commutativity checker's CI sample (`cargo xtask commute --ci`): per sampled case, its\n# status: `free` (conflict-free when written), `conflict` (never recorded free) or `accepted`\n# (was free; conflicting since, listed with its reason in accepted-regressions.txt).\n# Regenerate with `cargo xtask commute --ci --update-baseline` after changing cases.rs or fixing\n# a conflict; a free case that now conflicts needs `--accept CASE` (docs/commute.md).\n";

/// A run's cases as the baseline check sees them.
fn seen(outcomes: &[Outcome<Op>]) -> Vec<baseline::Seen> {
    outcomes.iter().map(|o| p::seen::<Kernel>(o, format!("commute::case_{}_{}_{}", o.case.index, o.case.call_a, o.case.call_b))).collect()
}

/// Compare a CI run with the baseline and the accepted regressions (`baseline::check`): a
/// case that was conflict-free and now conflicts fails, with its calls, arguments and the
/// lines' symbols, unless accepted-regressions.txt lists it; so does a result the model does
/// not allow.
pub fn check_baseline(outcomes: &[Outcome<Op>], baseline: &str, accepted: &baseline::Accepted) -> Result<TestTally, String> {
    baseline::check("kernel", &seen(outcomes), baseline, accepted, UPDATE_KERNEL)
}

/// The CI suite: the seeded sample, checked against the baseline.
pub fn ci_tests() -> Result<TestTally, String> {
    let sample = ci_sample();
    let outcomes = run_cases(&format!("pick={}", p::pick_arg(&sample)), 2, Duration::from_secs(300))?;
    if outcomes.len() != sample.len() {
        return Err(format!("the guest ran {} of the {} sampled cases", outcomes.len(), sample.len()));
    }
    let t = check_baseline(&outcomes, &p::read(&baseline_path())?, &baseline::read_accepted()?)?;
    println!("{} passed, {} failed", t.passed, t.failed);
    Ok(t)
}

/// Did the planted kernel's run of `target` conflict on the planted counter?
fn planted_caught(outcomes: &[Outcome<Op>], target: usize) -> bool {
    outcomes.iter().any(|o| o.case.index == target && o.conflicts.iter().any(|c| c.symbol.contains("PLANTED_SEGMENT_ALLOCS")))
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
    let baseline = p::read(&baseline_path())?;
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
    let caught = planted_caught(&outcomes, target);
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

/// The longest `pick=` list given to the kernel (its command line holds 512 bytes).
const PICK_MAX: usize = 400;

/// The guest's arguments for one part of the run (`--jobs`): its case list if it fits, else
/// the part's index range `first-last` with the `calls=` filter, which selects exactly the
/// part when the run is every selected case (the caller's `run_set`; `merge_parts` checks).
fn part_guest_args(part: &[usize], calls: Option<&str>) -> String {
    let pick = p::pick_arg(part);
    if pick.len() <= PICK_MAX {
        return format!("pick={pick}");
    }
    let range = format!("pick={}-{}", part.first().copied().unwrap_or(0), part.last().copied().unwrap_or(0));
    match calls {
        Some(c) => format!("calls={c} {range}"),
        None => range,
    }
}

/// `cargo xtask commute` on the kernel's calls (mod.rs sends `--system` runs to posix.rs).
pub fn main(args: &CommuteArgs) -> Result<(), String> {
    let calls = args.calls.as_deref();
    let (smp, timeout) = (args.smp, Duration::from_secs(args.timeout));
    let out = args.out.clone().unwrap_or_else(|| crate::host::env::target_dir().join("commute"));
    if smp < 2 {
        return Err("commute: --smp must be at least 2 (the calls run on cores 0 and 1)".into());
    }
    if args.update_baseline && !args.ci {
        return Err("commute: --update-baseline goes with --ci".into());
    }
    if !args.accept.is_empty() && !args.update_baseline {
        return Err("commute: --accept goes with --ci --update-baseline".into());
    }
    if let Some(c) = calls {
        if let Some(bad) = c.split(',').find(|n| !cases::CALLS.iter().any(|k| k.name == *n)) {
            let names: Vec<&str> = cases::CALLS.iter().map(|k| k.name).collect();
            return Err(format!("commute: unknown call `{bad}` (modelled: {})", names.join(", ")));
        }
    }
    if args.list {
        p::print_list::<Kernel>();
        return Ok(());
    }
    if args.model_only {
        p::print_model_only::<Kernel>(calls);
        return Ok(());
    }
    if args.planted {
        let kernel = crate::host::env::build_kernel_with(&["planted-conflict"])?;
        let sample = ci_sample();
        let outcomes = run_cases_on(kernel, &format!("pick={}", p::pick_arg(&sample)), smp, timeout)?;
        let t = check_baseline(&outcomes, &p::read(&baseline_path())?, &baseline::read_accepted()?)?;
        let target = planted_target();
        let caught = planted_caught(&outcomes, target);
        println!("planted regression: {} of {} sampled cases fail; case {target} conflicts on PLANTED_SEGMENT_ALLOCS: {caught}", t.failed, outcomes.len());
        return if caught && t.failed > 0 { Ok(()) } else { Err("the CI sample did not catch the planted regression".into()) };
    }
    if args.ci {
        let sample = ci_sample();
        let outcomes = run_cases(&format!("pick={}", p::pick_arg(&sample)), smp, timeout)?;
        if args.update_baseline {
            p::update_baseline(&baseline_path(), "kernel", &seen(&outcomes), &args.accept, KERNEL_BASELINE_HEADER)?;
            print!("{}", report(&outcomes, outcomes.len(), outcomes.len()));
            return Ok(());
        }
        let t = check_baseline(&outcomes, &p::read(&baseline_path())?, &baseline::read_accepted()?)?;
        println!("{} passed, {} failed", t.passed, t.failed);
        return if t.failed > 0 { Err(format!("{} sampled case(s) regressed", t.failed)) } else { Ok(()) };
    }
    let decided = p::decide_all::<Kernel>();
    let n_all = decided.iter().filter(|(c, _)| p::selected(calls, c)).count();
    let n_comm = decided.iter().filter(|(c, v)| p::selected(calls, c) && v.commutes).count();
    // Run only the commuting cases (the others are not scored), if their list fits on the
    // kernel's command line; else every selected case.
    let idx: Vec<usize> = decided.iter().filter(|(c, v)| p::selected(calls, c) && v.commutes).map(|(c, _)| c.index).collect();
    let run_set: Vec<usize> = if p::pick_arg(&idx).len() <= PICK_MAX { idx } else { decided.iter().filter(|(c, _)| p::selected(calls, c)).map(|(c, _)| c.index).collect() };
    let parts = p::split_parts(&run_set, args.jobs);
    let guest_args: Vec<String> = parts.iter().map(|part| part_guest_args(part, calls)).collect();
    let t0 = std::time::Instant::now();
    let outcomes = p::merge_parts(run_cases_jobs(crate::host::env::build_kernel()?, &guest_args, smp, timeout)?, &parts, |o| o.case.index)?;
    let text = report(&outcomes, n_all, n_comm);
    print!("{text}");
    println!("(guest run {:.0} s with {} job(s), one run on a shared host)", t0.elapsed().as_secs_f64(), parts.len());
    fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    fs::write(out.join("commute-ours.txt"), &text).map_err(|e| format!("cannot write report: {e}"))?;
    p::write_heat_maps::<Kernel>(&out.join("commute-ours-heatmap.svg"), &outcomes, KERNEL_MAP_TITLE)?;
    p::write_csv(&out.join("commute-ours.csv"), &outcomes)?;
    let evidence = format!("exact sharing audit (single-threaded TCG, icount, vCPU quantum {}), kernel lines only, one plugin epoch per case", plugin::EXACT_QUANTUM);
    p::write_json(&out.join("commute-ours.json"), &outcomes, &evidence, "ours")
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::super::model;
    use super::super::options::jobs_arg;
    use super::super::pipeline::{case_label, decide_all, merge_parts, parse_case_line, parse_epochs, split_parts, Conflict, Model};

    // Catches a heat map that drops pairs: every pair run gets a cell in both halves.
    #[test]
    fn heat_map_has_a_cell_per_pair() {
        let c = Kernel::case(0).unwrap();
        let v = p::decide::<Kernel>(&model::State::fixture(), c.a, c.b);
        let o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let svg = p::heat_map_svg::<Kernel>(&[o], KERNEL_MAP_TITLE);
        assert!(svg.contains("null × null: 1/1"));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    // Catches unreadable symbols in the report.
    #[test]
    fn demangles_legacy_symbols() {
        assert_eq!(p::demangle("_ZN6kernel7syscall6lookup17h71cee5c303ad1303E"), "kernel::syscall::lookup");
        assert_eq!(p::demangle("_ZN72_$LT$kernel..kobj..ar..AddressRange$u20$as$u20$core..ops..drop..Drop$GT$4drop17h48a71d2c0793e262E"), "<kernel::kobj::ar::AddressRange as core::ops::drop::Drop>::drop");
        assert_eq!(p::demangle("OBJECT_IDS"), "OBJECT_IDS");
    }

    // Catches a pick list the guest would read differently: ranges compress runs only.
    #[test]
    fn pick_arg_compresses_runs() {
        assert_eq!(p::pick_arg(&[1, 2, 3, 5, 7, 8]), "1-3,5,7-8");
        assert_eq!(p::pick_arg(&[]), "");
    }

    // Catches a split that loses, repeats or reorders cases, and a merge that accepts a job
    // that ran other cases than it was given: a synthetic run of the kernel's cases cut into
    // 1, 2, 3 and 7 parts merges back to exactly the one-part run.
    #[test]
    fn jobs_merge_equals_one_job() {
        let start = model::State::fixture();
        let all: Vec<Outcome<Op>> = (0..testdefs::pairs::count(cases::CALLS))
            .filter(|i| i % 3 != 1)
            .map(|i| {
                let c = Kernel::case(i).unwrap();
                let v = p::decide::<Kernel>(&start, c.a, c.b);
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
            let ran: Vec<Vec<Outcome<Op>>> = parts.iter().map(|p| all.iter().filter(|o| p.contains(&o.case.index)).cloned().collect()).collect();
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
        let d = decide_all::<Kernel>();
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
        assert_eq!(parse_case_line("commute-case", "[1] commute-case i=7 a=0 b=E:Busy"), Some((7, "0".into(), "E:Busy".into())));
    }

    // Catches a baseline check that cannot fail: a case conflict-free in the baseline that now
    // has a shared line fails, with its symbol in the message.
    #[test]
    fn baseline_regression_fails() {
        let c = Kernel::case(0).unwrap();
        let v = p::decide::<Kernel>(&model::State::fixture(), c.a, c.b);
        let mut o = Outcome { case: c, verdict: v.clone(), got: v.ab.clone(), conflicts: Vec::new() };
        let base = format!("{} free {}\n", o.case.index, case_label(&o.case));
        let none = baseline::Accepted::new();
        let tally = |o: &Outcome<Op>| {
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
