//! `cargo xtask bench [--systems ours,linux] [--smp 1,2,4,8] [--only NAME,...] [--out DIR]`:
//! the benchmark suite (crate `bench`) on both systems, one guest boot per benchmark, vCPU
//! count and system; results as JSON, a table with the ours/Linux ratio, and one plot per
//! benchmark (docs/bench.md).

#[cfg(test)]
mod claims;
mod html;
mod net;
pub mod options;
pub(crate) mod paths;
pub(crate) mod report_check;
mod report;
mod stats;
mod webd;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use crate::guest::record::{self, Record, Status, System, SYSTEM_NAMES};
use crate::guest::{boot, linux_sys, ours};
use testdefs::bench_catalog::{self as catalog, BenchSpec};

#[derive(Debug, Clone)]
pub struct Options {
    pub systems: Vec<System>,
    pub smp: Vec<u32>,
    pub benches: Vec<&'static BenchSpec>,
    pub out: PathBuf,
    pub timeout: Duration,
    pub overrides: Vec<(String, u64)>,
    pub mem_mib: u64,
    pub insns: bool,
    pub reps: u64,
    /// Boots per cell (`--boots`).
    pub boots: u32,
    /// Seed of the shuffled order of cells (`--seed`).
    pub seed: u64,
    /// Host-driven benchmarks: a sharing audit per cell as well.
    pub audit: bool,
    pub list: bool,
    pub report: Option<PathBuf>,
}

fn split_list(v: &str) -> impl Iterator<Item = &str> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// `cargo xtask bench ARGS` (the matrix) as cli.rs declares it, with the checks below
/// (one-line errors).
#[cfg(test)]
pub fn parse_options(args: &[String]) -> Result<Options, String> {
    Options::from_args(crate::host::args::parse_args::<options::MatrixArgs>("bench", args)?)
}

impl Options {
    /// The matrix the options describe: the names checked against the catalog. cli.rs has
    /// checked every number's range.
    pub fn from_args(a: crate::bench::options::MatrixArgs) -> Result<Options, String> {
        let mut o = Options {
            systems: Vec::new(),
            smp: Vec::new(),
            benches: catalog::BENCHES.iter().filter(|b| !b.hidden).collect(),
            out: a.out.unwrap_or_else(|| crate::host::env::workspace_root().join("target").join("bench-results")),
            timeout: Duration::from_secs(a.timeout),
            overrides: Vec::new(),
            mem_mib: a.mem,
            insns: a.insns.is_on(),
            reps: a.reps,
            boots: a.boots,
            seed: a.seed,
            audit: a.audit.is_on(),
            list: a.list,
            report: a.report,
        };
        for s in split_list(&a.systems) {
            let sys = System::from_name(s).ok_or_else(|| format!("bench: --systems: unknown system `{s}` (known: {})", SYSTEM_NAMES.join(", ")))?;
            if !o.systems.contains(&sys) {
                o.systems.push(sys);
            }
        }
        if o.systems.is_empty() {
            return Err("bench: --systems names no system".into());
        }
        o.systems.sort();
        for &n in &a.smp.0 {
            if n as usize > catalog::MAX_CORES {
                return Err(format!("bench: --smp: {n} vCPUs is more than the {} the harness supports", catalog::MAX_CORES));
            }
            if !o.smp.contains(&n) {
                o.smp.push(n);
            }
        }
        o.smp.sort();
        if let Some(v) = &a.only {
            o.benches.clear();
            // `webd_filesum` names its nine rows (three modes by three file sizes).
            let expanded: Vec<&str> = split_list(v)
                .flat_map(|s| {
                    if s == "webd_filesum" {
                        catalog::BENCHES.iter().filter(|b| webd::is_webd(b)).map(|b| b.name).collect::<Vec<_>>()
                    } else {
                        vec![s]
                    }
                })
                .collect();
            for s in expanded {
                let b = catalog::find(s).ok_or_else(|| {
                    let known: Vec<&str> = catalog::BENCHES.iter().map(|b| b.name).collect();
                    format!("bench: --only: unknown benchmark `{s}` (known: {})", known.join(", "))
                })?;
                if !o.benches.iter().any(|x| x.name == b.name) {
                    o.benches.push(b);
                }
            }
            if o.benches.is_empty() {
                return Err("bench: --only names no benchmark".into());
            }
        }
        for v in &a.param {
            let (k, x) = v.split_once('=').ok_or_else(|| format!("bench: --param `{v}` is not KEY=VALUE"))?;
            let x: u64 = x.parse().map_err(|_| format!("bench: --param {k}: `{x}` is not a whole number"))?;
            if !catalog::BENCHES.iter().any(|b| b.defaults.iter().any(|(d, _)| *d == k)) {
                return Err(format!("bench: --param: no benchmark has a parameter `{k}`"));
            }
            o.overrides.push((k.to_string(), x));
        }
        Ok(o.completed())
    }

    fn completed(mut self) -> Options {
        let o = &mut self;
        // Corey's TCP service has two rows for ours (Dedicated, Polling): asking for one asks for both.
        if o.benches.iter().any(|b| b.name == "tcp_accept") && !o.benches.iter().any(|b| b.name == "tcp_accept_polling") {
            o.benches.push(catalog::find("tcp_accept_polling").expect("tcp_accept_polling is in the catalog"));
        }
        // The share-nothing calibration is part of every matrix: scaling ratios are divided by it.
        if !o.benches.iter().any(|b| b.name == catalog::CALIBRATION) {
            o.benches.push(catalog::find(catalog::CALIBRATION).expect("calibration is in the catalog"));
        }
        self
    }
}

/// The parameters one run gets: the catalog's defaults, with `--param` overrides applied.
pub fn effective_params(spec: &BenchSpec, overrides: &[(String, u64)]) -> Vec<(String, u64)> {
    spec.defaults
        .iter()
        .map(|(k, v)| {
            let v = overrides.iter().rev().find(|(o, _)| o == k).map(|(_, x)| *x).unwrap_or(*v);
            (k.to_string(), v)
        })
        .collect()
}

pub use crate::host::rng::Rng;

/// The order of boots: `boots` rounds; in each, every cell (benchmark × vCPU count) once, in
/// an order shuffled afresh per round from `seed`, and within a cell every system back to
/// back (ours, then Linux). Boot k of ours and boot k of Linux of a cell are thus neighbours
/// in time (the pair whose ratio is taken), and a slow stretch of the host hits both sides.
/// Each item: (benchmark index, vCPU count, system, boot number 1..=boots).
pub fn boot_order(n_benches: usize, smp: &[u32], systems: &[System], boots: u32, seed: u64) -> Vec<(usize, u32, System, u32)> {
    let mut rng = Rng::new(seed);
    let mut order = Vec::new();
    for k in 1..=boots {
        let mut cells: Vec<(usize, u32)> = (0..n_benches).flat_map(|b| smp.iter().map(move |&n| (b, n))).collect();
        rng.shuffle(&mut cells);
        for (b, n) in cells {
            for &sys in systems {
                order.push((b, n, sys, k));
            }
        }
    }
    order
}

/// Run every benchmark × system × vCPU count `o.boots` times through `run_one` (one call per
/// boot, in [`boot_order`]) and return exactly one record per boot, sorted by benchmark (in
/// `o.benches`' order), system, vCPUs and boot. A system that cannot run at all
/// (`unavailable[system]` is the reason) gets an `unavailable` record per boot without a call.
pub fn run_matrix(
    o: &Options,
    unavailable: &dyn Fn(System) -> Option<String>,
    run_one: &mut dyn FnMut(System, &'static BenchSpec, &[(String, u64)], u32, u32) -> Record,
) -> Vec<Record> {
    let mut order = boot_order(o.benches.len(), &o.smp, &o.systems, o.boots, o.seed);
    // With several boots and instructions on, every cell first gets a counting boot (boot 0,
    // with the plugin; its timing is not kept) and its N timing boots run without the plugin
    // (`boot::Common::timing_only`): counts are exact in one boot, timings are not bent by the
    // plugin's per-block callback. The counting round comes first, in its own shuffled order.
    let counting = o.insns && o.boots > 1;
    if counting {
        let round: Vec<_> = boot_order(o.benches.len(), &o.smp, &o.systems, 1, o.seed.wrapping_add(0x9e37_79b9)).into_iter().map(|(b, n, s, _)| (b, n, s, 0)).collect();
        order.splice(0..0, round);
    }
    let total = order.len();
    let mut records = Vec::with_capacity(total);
    // `bench: [n/N] system benchmark on V vCPU(s)`, elapsed and an estimate (crate::progress).
    let progress = crate::host::progress::Progress::new("bench", total);
    for (i, &(b, cores, sys, boot)) in order.iter().enumerate() {
        let spec = o.benches[b];
        let mut params = effective_params(spec, &o.overrides);
        params.push(("reps".to_string(), o.reps));
        let mut rec = match unavailable(sys) {
            Some(why) => Record::without_result(sys.name(), spec, params.clone(), cores, Status::Unavailable, &why),
            None => {
                let which = match (o.boots > 1, boot) {
                    (true, 0) => ", counting boot (insncount)".to_string(),
                    (true, _) => format!(", boot {boot}/{}", o.boots),
                    _ => String::new(),
                };
                progress.start(i + 1, &format!("{} {} on {cores} vCPU(s){which}", sys.name(), spec.name));
                let before = HostSample::now();
                let mut r = run_one(sys, spec, &params, cores, boot);
                r.host = before.and_then(|b| b.until_now());
                // results.json keeps wall time to 10 ms; keep the record the same, so
                // it reads back equal to what was written.
                r.wall_s = (r.wall_s * 100.0).round() / 100.0;
                let how = match (r.status, r.per_core_throughput()) {
                    (Status::Ok, Some(t)) => format!("{} ops/s/vCPU", report::si(t)),
                    _ => format!("{}: {}", r.status.as_str(), r.reason.as_deref().unwrap_or("")),
                };
                let which = match (o.boots > 1, boot) {
                    (true, 0) => " counting boot".to_string(),
                    (true, _) => format!(" boot {boot}/{}", o.boots),
                    _ => String::new(),
                };
                progress.finish(&format!("bench: [{}/{total}] {} {} on {cores} vCPU(s){which}: {how} ({:.1} s)", i + 1, sys.name(), spec.name, r.wall_s));
                r
            }
        };
        rec.boot = boot;
        records.push((b, rec));
    }
    records.sort_by(|(b1, r1), (b2, r2)| (b1, &r1.system, r1.cores, r1.boot).cmp(&(b2, &r2.system, r2.cores, r2.boot)));
    let records: Vec<Record> = records.into_iter().map(|(_, r)| r).collect();
    if counting {
        fill_counted_instructions(records)
    } else {
        records
    }
}

/// The host's state at the start of a boot: its load average and the CPU time of this
/// process's waited-for children so far (QEMU runs as a child and is waited for before the
/// boot's record is made, so the difference at the end is the boot's QEMU time).
struct HostSample {
    load1: f64,
    children_ticks: u64,
}

impl HostSample {
    fn now() -> Option<HostSample> {
        Some(HostSample { load1: load1()?, children_ticks: children_cpu_ticks()? })
    }

    fn until_now(self) -> Option<record::HostLoad> {
        let end = HostSample::now()?;
        let cpus = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        Some(record::HostLoad {
            load1_start: self.load1,
            load1_end: end.load1,
            cpus,
            qemu_cpu_s: end.children_ticks.saturating_sub(self.children_ticks) as f64 / CLOCK_TICKS_PER_S,
        })
    }
}

/// `/proc/self/stat`'s unit (USER_HZ, 100 on every Linux this runs on: x86-64 fixes it).
const CLOCK_TICKS_PER_S: f64 = 100.0;

/// The host's 1-minute load average.
pub(crate) fn load1() -> Option<f64> {
    fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// `cutime + cstime` of this process (fields 16 and 17 of /proc/self/stat, counted after the
/// command name's closing parenthesis, which may itself hold spaces).
fn children_cpu_ticks() -> Option<u64> {
    parse_children_ticks(&fs::read_to_string("/proc/self/stat").ok()?)
}

fn parse_children_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so field N is f[N - 3].
    Some(f.get(13)?.parse::<u64>().ok()? + f.get(14)?.parse::<u64>().ok()?)
}

/// The counting boots (boot 0) give their instructions to the timing boots of the same cell
/// and are then dropped: every record left is a timing boot, so the statistics see only those.
/// A counting boot that did not finish leaves a note saying so in the cell's records.
pub fn fill_counted_instructions(records: Vec<Record>) -> Vec<Record> {
    let (counts, mut timing): (Vec<Record>, Vec<Record>) = records.into_iter().partition(|r| r.boot == 0);
    for r in &mut timing {
        let Some(c) = counts.iter().find(|c| c.system == r.system && c.benchmark == r.benchmark && c.cores == r.cores) else { continue };
        if r.instructions_kernel.is_some() || r.status != Status::Ok {
            continue;
        }
        if c.status == Status::Ok {
            r.instructions_kernel = c.instructions_kernel;
            r.instructions_vcpus = c.instructions_vcpus.clone();
            r.instructions_idle_vcpus = c.instructions_idle_vcpus.clone();
            // Whether the counting boot's kernel core split its passes goes with its counts.
            let kcmark = c.net.as_ref().and_then(|n| n.guest.get(report::KCMARK_WORD)).cloned();
            if let (Some(v), Some(n)) = (kcmark, r.net.as_mut()) {
                n.guest.insert(report::KCMARK_WORD.into(), v);
            }
            r.instructions_user = c.instructions_user;
            r.instructions_note = match (&c.instructions_note, c.instructions_kernel) {
                (Some(n), _) => Some(n.clone()),
                (None, Some(_)) => None,
                (None, None) => Some("the counting boot gave no instructions".into()),
            };
        } else {
            r.instructions_note = Some(format!("the counting boot (insncount) ended {}: {}", c.status.as_str(), c.reason.as_deref().unwrap_or("")));
        }
    }
    timing
}

/// `cargo xtask bench` (the matrix); `args` is the command line after `bench`, recorded in
/// results.json and report.html.
pub fn run(o: Options, args: &[String]) -> Result<(), String> {
    if o.list {
        for b in catalog::BENCHES {
            let d: Vec<String> = b.defaults.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("{:<18} {:<11} {:<9} {}{}  [{}]", b.name, b.group, format!("{:?}", b.placement), b.op, if b.hidden { " (self-test, --only)" } else { "" }, d.join(" "));
        }
        return Ok(());
    }
    if let Some(dir) = &o.report {
        return redraw(dir);
    }
    fs::create_dir_all(&o.out).map_err(|e| format!("bench: cannot create {}: {e}", o.out.display()))?;
    // What was run, where and when: results.json's `run` item and report.html's header.
    let run_info = stats::RunInfo { version: stats::RESULTS_VERSION, command: html::command_line(args), started: html::utc_now(), machine: stats::Machine::this_host(), boots: o.boots, seed: o.seed, linux: Vec::new() };
    // This system: the kernel and the user programs (with `bench-ours`). If they do not
    // build, every ours cell is `unavailable` with the build error as the reason.
    let (ours_sys, ours_why) = if o.systems.contains(&System::Ours) {
        match ours::OursSystem::prepare(o.mem_mib, o.insns, &o.out.join("logs")) {
            Ok(s) => (Some(s), None),
            Err(e) => {
                eprintln!("bench: {e}");
                (None, Some(e))
            }
        }
    } else {
        (None, None)
    };
    // Everything Linux needs is prepared before the first boot, so a missing kernel package
    // without network is one error line before any run.
    let prepare_linux = |sys: System| -> Result<Option<linux_sys::LinuxSystem>, String> {
        if o.systems.contains(&sys) {
            Ok(Some(linux_sys::LinuxSystem::prepare_baseline(o.mem_mib, o.insns, &o.out.join("logs"), sys == System::LinuxTuned)?))
        } else {
            Ok(None)
        }
    };
    let linux = prepare_linux(System::Linux)?;
    let linux_tuned = prepare_linux(System::LinuxTuned)?;
    let any_linux = linux.as_ref().or(linux_tuned.as_ref());
    // The host-driven benchmarks boot Linux with the measurement guest (tcpserv) and the NIC's
    // modules instead of bench-linux; if that initramfs cannot be made, those cells say why.
    let linux_net = (any_linux.is_some() && o.benches.iter().any(|b| b.host_driven))
        .then(|| crate::guest::linux::fetch_kernel().and_then(|k| crate::guest::linux_net::initramfs(&k)).map_err(|e| format!("linux: the tcpserv initramfs: {e}")));
    // The webd rows boot Linux with webd-linux as /init (its initramfs is made per file set).
    let linux_webd = (any_linux.is_some() && o.benches.iter().any(|b| webd::is_webd(b))).then(|| {
        linux_sys::build_static("bench", "webd-linux").map_err(|e| format!("linux: webd-linux: {e}")).map(|w| crate::webd::run::Artifacts::Linux { kernel: any_linux.map(|l| l.kernel.clone()).unwrap_or_default(), webd: w })
    });
    let unavailable = |s: System| match s {
        System::Ours => ours_why.clone(),
        System::Linux | System::LinuxTuned => None,
    };
    eprintln!(
        "bench: {} boot(s) per cell, cells in an order shuffled with --seed {} ({} back to back per cell){}",
        o.boots,
        o.seed,
        o.systems.iter().map(|s| s.name()).collect::<Vec<_>>().join(", "),
        if o.boots > 1 && o.insns { "; instruction counts are exact, so one boot is enough for them: each cell first gets a counting boot with the insncount plugin, and its timing boots run without it (the plugin slows code paths unequally)" } else { "" }
    );
    let records = run_matrix(&o, &unavailable, &mut |sys, spec, params, cores, boot| {
        let tag = if o.boots > 1 { format!("-boot{boot}") } else { String::new() };
        // Boot 0 counts instructions; boots 1..=N of a multi-boot run time without the plugin.
        let timing_only = o.insns && o.boots > 1 && boot > 0;
        for c in [ours_sys.as_ref().map(|s| &s.common), linux.as_ref().map(|l| &l.common), linux_tuned.as_ref().map(|l| &l.common)].into_iter().flatten() {
            c.timing_only.set(timing_only);
        }
        let lsys = match sys {
            System::Linux => linux.as_ref(),
            System::LinuxTuned => linux_tuned.as_ref(),
            System::Ours => None,
        };
        let g: Option<&dyn boot::Guest> = match sys {
            System::Linux | System::LinuxTuned => lsys.map(|l| l as _),
            System::Ours => ours_sys.as_ref().map(|s| s as _),
        };
        let not_prepared = || Record::without_result(sys.name(), spec, params.to_vec(), cores, Status::Error, "system not prepared");
        if webd::is_webd(spec) {
            let (common, art, tuned) = match sys {
                System::Linux | System::LinuxTuned => match (lsys, linux_webd.as_ref()) {
                    (Some(l), Some(Ok(art))) => (&l.common, art.clone(), l.tuned),
                    (_, Some(Err(e))) => return Record::without_result(sys.name(), spec, params.to_vec(), cores, Status::Error, e),
                    _ => return not_prepared(),
                },
                System::Ours => match ours_sys.as_ref() {
                    Some(s) => (&s.common, crate::webd::run::Artifacts::Ours { kernel: s.kernel.clone(), initrd: s.initrd.clone() }, false),
                    None => return not_prepared(),
                },
            };
            return webd::run_one(common, &art, spec, params, cores, o.timeout, &tag, tuned);
        }
        if spec.host_driven {
            let (common, boot) = match sys {
                System::Linux | System::LinuxTuned => match (lsys, linux_net.as_ref()) {
                    (Some(l), Some(Ok(initrd))) => (&l.common, net::Boot::Linux { kernel: &l.kernel, initrd, tuned: l.tuned }),
                    (_, Some(Err(e))) => return Record::without_result(sys.name(), spec, params.to_vec(), cores, Status::Error, e),
                    _ => return not_prepared(),
                },
                System::Ours => match ours_sys.as_ref() {
                    Some(s) => (&s.common, net::Boot::Ours { kernel: &s.kernel, initrd: &s.initrd }),
                    None => return not_prepared(),
                },
            };
            let mut rec = net::run_one(common, boot, spec, params, cores, o.timeout, &tag);
            if o.audit {
                net::add_audit(&mut rec, spec, cores, o.timeout);
            }
            return rec;
        }
        match g {
            Some(g) => boot::run_one(g, spec, params, cores, o.timeout, &tag),
            None => not_prepared(),
        }
    });
    // What each Linux baseline was (kernel, command line, and what its first good boot said
    // about its mitigations and security modules): results.json's `run` item.
    let mut run_info = run_info;
    for l in [linux.as_ref(), linux_tuned.as_ref()].into_iter().flatten() {
        run_info.linux.push(l.config(&records));
    }
    let results = o.out.join("results.json");
    let mut all = stats::Results::from_records(records);
    all.run = Some(run_info);
    fs::write(&results, all.to_json()).map_err(|e| format!("bench: cannot write {}: {e}", results.display()))?;
    // Read back what was written: the file others consume must parse and fit the schema.
    if read_results(&o.out)? != all {
        return Err("bench: results.json does not read back as the records written".into());
    }
    write_report(&all, &o.systems, &o.smp, &o.out)?;
    unfinished(&all.records)
}

/// The command's verdict: it fails (one line) if any run errored or timed out. `unavailable`
/// is not a failure: it is what a system honestly cannot run yet, with the reason recorded.
fn unfinished(records: &[Record]) -> Result<(), String> {
    let bad: Vec<String> = records
        .iter()
        .filter(|r| matches!(r.status, Status::Error | Status::Timeout))
        .map(|r| format!("{} {}@{} {}", r.system, r.benchmark, r.cores, r.status.as_str()))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("bench: {} run(s) did not finish: {}", bad.len(), bad.join(", ")))
    }
}

/// Read `dir/results.json`, checking every record against the schema. Summary records, if
/// any, must be what the raw records give (they are recomputed from the raw records).
fn read_results(dir: &std::path::Path) -> Result<stats::Results, String> {
    let path = dir.join("results.json");
    let text = fs::read_to_string(&path).map_err(|e| format!("bench: cannot read {}: {e}", path.display()))?;
    let mut r = stats::Results::from_json(&text).map_err(|e| format!("bench: {}: {e}", path.display()))?;
    // Before version 3 the summaries were per worker, not per vCPU: recompute them.
    if r.run.as_ref().map(|i| i.version).unwrap_or(1) < 3 && !(r.cells.is_empty() && r.pairs.is_empty()) {
        let again = stats::Results::from_records(r.records.clone());
        (r.cells, r.pairs) = (again.cells, again.pairs);
    }
    if !(r.cells.is_empty() && r.pairs.is_empty()) {
        let again = stats::Results::from_records(r.records.clone());
        if again.cells != r.cells || again.pairs != r.pairs {
            return Err(format!("bench: {}: the summary records are not what its boot records give", path.display()));
        }
    }
    Ok(r)
}

/// Table on stdout and in `table.txt`, plots in `plots/`, `results.csv` (one row per boot)
/// and the self-contained `report.html`.
fn write_report(results: &stats::Results, systems: &[System], smp: &[u32], out: &std::path::Path) -> Result<(), String> {
    let records = &results.records;
    let text = report::table(records, smp);
    print!("{text}");
    let write = |name: &str, body: &str| fs::write(out.join(name), body).map_err(|e| format!("bench: cannot write {}: {e}", out.join(name).display()));
    write("table.txt", &text)?;
    write("results.csv", &record::to_csv(records))?;
    write("report.html", &html::page(records, systems, smp, results.run.as_ref(), &text))?;
    let plots = report::plots(records, systems, smp, &out.join("plots"))?;
    println!("\nresults: {} (and results.csv)\nreport: {}\nplots: {} SVG in {}{}", out.join("results.json").display(), out.join("report.html").display(), plots.svg, out.join("plots").display(), match &plots.png {
        Ok(n) => format!(", {n} PNG"),
        Err(e) => format!("; PNG not made: {e}"),
    });
    Ok(())
}

/// `--report DIR`: the report again from a finished run's records. A results.json that is
/// missing, does not parse, breaks the schema or is of an unknown version is bad input: one
/// line and exit status 2, and nothing is written.
fn redraw(dir: &std::path::Path) -> Result<(), String> {
    let results = match read_results(dir) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("xtask: {e}");
            std::process::exit(2);
        }
    };
    let records = &results.records;
    let mut systems: Vec<System> = Vec::new();
    let mut smp: Vec<u32> = Vec::new();
    for r in records {
        let s = System::from_name(&r.system).unwrap_or(System::Linux);
        if !systems.contains(&s) {
            systems.push(s);
        }
        if !smp.contains(&r.cores) {
            smp.push(r.cores);
        }
    }
    systems.sort();
    smp.sort();
    write_report(&results, &systems, &smp, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn bad_input_is_one_clear_error() {
        for (a, needle) in [
            ("--only nosuch", "unknown benchmark `nosuch`"),
            ("--systems ours,bsd", "unknown system `bsd`"),
            ("--smp 0", "not in 1..=255"),
            ("--smp 1,256", "not in 1..=255"),
            ("--smp two", "not a number"),
            ("--timeout 0", "--timeout"),
            ("--param nope=1", "no benchmark has"),
            ("--frobnicate", "unexpected argument '--frobnicate'"),
            ("--smp", "a value is required for '--smp <LIST>'"),
            ("--boots 0", "--boots"),
            ("--boots many", "--boots"),
            ("--boots 101", "--boots"),
            ("--boots -1", "--boots"),
            ("--seed x", "--seed"),
        ] {
            let e = parse_options(&args(a)).unwrap_err();
            assert!(e.contains(needle), "{a}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// `--boots N`: every cell N times, ours and Linux back to back per cell, each round in a
    /// shuffled order that the seed fixes; boot k of ours is next to boot k of Linux.
    #[test]
    fn boots_are_interleaved_in_a_seeded_order() {
        let o = parse_options(&args("--only stat_mt,dupclose --smp 1,2 --boots 3 --seed 7 --systems ours,linux")).unwrap();
        assert_eq!((o.boots, o.seed), (3, 7));
        assert_eq!(parse_options(&args("")).map(|o| (o.boots, o.seed)).unwrap(), (1, 1));
        let sys = [System::Ours, System::Linux];
        let order = boot_order(3, &o.smp, &sys, 3, 7);
        assert_eq!(order.len(), 3 * 2 * 2 * 3, "3 benchmarks x 2 counts x 2 systems x 3 boots");
        assert_eq!(order, boot_order(3, &o.smp, &sys, 3, 7), "the seed fixes the order");
        assert_ne!(order, boot_order(3, &o.smp, &sys, 3, 8), "another seed, another order");
        for pair in order.chunks(2) {
            let ((b1, n1, s1, k1), (b2, n2, s2, k2)) = (pair[0], pair[1]);
            assert_eq!((b1, n1, k1, s1, s2), (b2, n2, k2, System::Ours, System::Linux), "one cell's boots back to back");
        }
        // Round k holds every cell once, boot k of each.
        for k in 1..=3 {
            let mut cells: Vec<(usize, u32)> = order.iter().filter(|x| x.3 == k && x.2 == System::Ours).map(|x| (x.0, x.1)).collect();
            cells.sort();
            assert_eq!(cells, [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)]);
        }
        let rounds: Vec<Vec<(usize, u32)>> = (1..=3).map(|k| order.iter().filter(|x| x.3 == k && x.2 == System::Ours).map(|x| (x.0, x.1)).collect()).collect();
        assert!(rounds[0] != rounds[1] || rounds[1] != rounds[2], "each round shuffled afresh");
        let mut calls = Vec::new();
        let records = run_matrix(&o, &|_| None, &mut |s, b, p, c, k| {
            calls.push((s, b.name, c, k));
            fake(s, b, p, c)
        });
        // 3 timing boots per cell and system, after one counting boot each (instructions on).
        assert_eq!(calls.len(), 36 + 12);
        assert!(calls[..12].iter().all(|c| c.3 == 0) && calls[12..].iter().all(|c| c.3 > 0), "the counting round comes first");
        assert_eq!(records.len(), 36, "counting boots are not records");
        let boots: Vec<u32> = records.iter().filter(|r| r.system == "linux" && r.benchmark == "dupclose" && r.cores == 2).map(|r| r.boot).collect();
        assert_eq!(boots, [1, 2, 3]);
        let mut o1 = o.clone();
        o1.insns = false;
        let mut n = 0;
        run_matrix(&o1, &|_| None, &mut |s, b, p, c, k| {
            assert!(k > 0, "no counting boot without instructions");
            n += 1;
            fake(s, b, p, c)
        });
        assert_eq!(n, 36);
    }

    /// Timing boots run without the plugin and get the counting boot's instructions; a counting
    /// boot that failed leaves a note instead of numbers.
    #[test]
    fn timing_boots_take_the_counting_boots_instructions() {
        let o = parse_options(&args("--only dupclose,nullsyscall --smp 1 --systems ours --boots 2")).unwrap();
        let records = run_matrix(&o, &|_| None, &mut |s, b, p, c, k| {
            let mut r = fake(s, b, p, c);
            if k == 0 {
                r.instructions_kernel = Some(7000 + c as u64);
                if b.name == "nullsyscall" {
                    r = Record::without_result(s.name(), b, p.to_vec(), c, Status::Timeout, "killed after the 1 s timeout");
                }
            } else {
                r.instructions_kernel = None;
                r.instructions_user = None;
                r.instructions_note = Some(guest_timing_note().into());
            }
            r
        });
        assert_eq!(records.len(), 2 * 2 + 2, "2 benchmarks and calib, 2 timing boots each");
        for r in records.iter().filter(|r| r.benchmark == "dupclose") {
            assert_eq!((r.instructions_kernel, r.instructions_user, r.instructions_note.as_deref()), (Some(7001), Some(100), None), "boot {}", r.boot);
        }
        for r in records.iter().filter(|r| r.benchmark == "nullsyscall") {
            assert_eq!(r.instructions_kernel, None);
            let note = r.instructions_note.as_deref().unwrap();
            assert!(note.starts_with("the counting boot (insncount) ended timeout"), "{note}");
        }
    }

    fn guest_timing_note() -> &'static str {
        crate::guest::boot::TIMING_BOOT_NOTE
    }

    /// Several boots: the table shows `median [min–max]`, counts failed boots, marks noisy
    /// rows; results.json holds every boot and the summaries and reads back; the plots draw
    /// the range.
    #[test]
    fn many_boots_give_medians_ranges_and_noise_marks() {
        let o = parse_options(&args("--only dupclose,stat_mt --smp 1,2 --boots 3 --systems ours,linux")).unwrap();
        let records = run_matrix(&o, &|_| None, &mut |s, b, p, c, k| {
            let mut r = fake(s, b, p, c);
            if r.status == Status::Ok {
                // Linux's dupclose at 1 vCPU: 1000, 2000, 3000 ops (noisy: 3x); ours steady.
                if s == System::Linux && b.name == "dupclose" && c == 1 {
                    r.ops = Some(1000 * k as u64);
                }
                // One of ours' calib boots at 2 vCPUs fails.
                if s == System::Ours && b.name == "calib" && c == 2 && k == 2 {
                    r = Record::without_result(s.name(), b, p.to_vec(), c, Status::Error, "guest: no result line");
                }
            }
            r
        });
        assert_eq!(records.len(), 3 * 2 * 2 * 3);
        let t = report::table(&records, &o.smp);
        let row = t.lines().find(|l| l.starts_with("| dupclose | 1 |")).unwrap();
        assert!(row.contains("| 2.00M [1.00M–3.00M] noisy |"), "{row}");
        // ours/linux per pair: 1, 1/2, 1/3; median 0.5.
        assert!(row.contains("| 0.50 [0.33–1.00] |"), "{row}");
        let row = t.lines().find(|l| l.starts_with("| calib | 2 |")).unwrap();
        assert!(row.contains("(1/3 failed)"), "{row}");
        assert!(t.lines().any(|l| l.starts_with("- dupclose on linux at 1 vCPU(s): calibrated")), "{t}");
        assert!(t.contains("- stat_mt on linux: timeout"));
        // Scaling of dupclose on Linux: medians 2M at 1 vCPU, 250k at 2; per round 1/4, 1/8, 1/12.
        let row = t.lines().find(|l| l.starts_with("| dupclose |") && l.contains("rounds")).unwrap();
        assert!(row.starts_with("| dupclose | 0.12 (rounds 0.12 [0.08–0.25]) |"), "{row}");
        let row = t.lines().find(|l| l.starts_with("| stat_mt | 2 |")).unwrap();
        assert!(row.contains("| timeout (3/3 failed) |"), "{row}");
        let mut all = stats::Results::from_records(records.clone());
        all.run = Some(stats::RunInfo { version: stats::RESULTS_VERSION, command: "test".into(), started: "2026-12-07 00:00:00".into(), machine: stats::Machine::default(), boots: 3, seed: 1, linux: Vec::new() });
        let dir = std::env::temp_dir().join(format!("xtask-bench-boots-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("results.json"), all.to_json()).unwrap();
        let back = read_results(&dir).unwrap();
        assert_eq!(back, all);
        assert_eq!(back.records.iter().filter(|r| r.benchmark == "dupclose" && r.system == "ours" && r.cores == 1).count(), 3, "every boot kept");
        assert_eq!(back.cells.len(), 3 * 2 * 2);
        // A summary that does not match its boots is refused.
        fs::write(dir.join("results.json"), all.to_json().replacen("\"noisy\":true", "\"noisy\":false", 1)).unwrap();
        assert!(read_results(&dir).unwrap_err().contains("summary records"));
        report::plots_svg_only(&records, &o.systems, &o.smp, &dir.join("plots")).unwrap();
        let svg = fs::read_to_string(dir.join("plots").join("dupclose.svg")).unwrap();
        assert!(svg.contains("class=\"range\"") && svg.contains("median of 3 boots"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn calibration_always_runs() {
        let o = parse_options(&args("--only dupclose --smp 2,1,2")).unwrap();
        let names: Vec<&str> = o.benches.iter().map(|b| b.name).collect();
        assert_eq!(names, ["dupclose", "calib"]);
        assert_eq!(o.smp, [1, 2]);
    }

    #[test]
    fn overrides_apply_only_where_the_key_exists() {
        let o = parse_options(&args("--param iters=7")).unwrap();
        assert_eq!(effective_params(catalog::find("stat_mt").unwrap(), &o.overrides), [("iters".to_string(), 7)]);
        assert_eq!(effective_params(catalog::find("memclone_procs").unwrap(), &o.overrides), [("pages".to_string(), 8192)]);
    }

    /// A fake guest: ok, error or timeout depending on the benchmark, with a made-up
    /// measurement; what is checked is the bookkeeping, not the numbers.
    fn fake(sys: System, spec: &'static BenchSpec, params: &[(String, u64)], cores: u32) -> Record {
        let mut r = Record::without_result(sys.name(), spec, params.to_vec(), cores, Status::Ok, "");
        match spec.name {
            "stat_mt" => {
                r.status = Status::Timeout;
                r.reason = Some("killed after the 1 s timeout".into());
            }
            "thread_mp" => {
                r.status = Status::Error;
                r.reason = Some("guest: fork failed (error 12)".into());
            }
            _ => {
                r.reason = None;
                r.workers = Some(cores as u64);
                r.ops = Some(1000);
                r.ns = Some(1_000_000 * cores as u64);
                r.busy_ns = Some(1_000_000 * cores as u64);
                r.instructions_kernel = Some(5000);
                r.instructions_user = Some(100);
                // The in-boot calibration: 2000 steps per ms per core.
                r.calib_ops = Some(2000 * cores as u64);
                r.calib_ns = Some(1_000_000);
            }
        }
        r
    }

    #[test]
    fn matrix_has_a_record_for_every_cell_and_every_record_fits_the_schema() {
        let o = parse_options(&args("--smp 1,2,4")).unwrap();
        const WHY_NOT: &str = "ours: not available (the kernel or the user programs did not build)";
        let why = |s: System| (s == System::Ours).then(|| WHY_NOT.to_string());
        let mut calls = 0;
        let records = run_matrix(&o, &why, &mut |s, b, p, c, _| {
            calls += 1;
            fake(s, b, p, c)
        });
        // Every benchmark (all but the self-test) × both systems × 3 core counts.
        let benches: Vec<&str> = catalog::BENCHES.iter().filter(|b| !b.hidden).map(|b| b.name).collect();
        // The default systems: ours and both Linux baselines.
        assert_eq!(records.len(), benches.len() * 3 * 3);
        assert_eq!(calls, benches.len() * 2 * 3, "ours is never booted while unavailable");
        for b in &benches {
            for sys in ["ours", "linux", "linux-tuned"] {
                for cores in [1, 2, 4] {
                    let n = records.iter().filter(|r| r.benchmark == *b && r.system == sys && r.cores == cores).count();
                    assert_eq!(n, 1, "{b} {sys} {cores}");
                }
            }
        }
        assert!(records.iter().filter(|r| r.system == "ours").all(|r| r.status == Status::Unavailable && r.reason.as_deref() == Some(WHY_NOT)));
        assert!(records.iter().any(|r| r.status == Status::Timeout));
        // results.json parses, holds the same number of records, and each passes the schema.
        let text = record::to_json_array(&records);
        let items: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(items.len(), records.len());
        for (v, r) in items.iter().zip(&records) {
            record::check_schema(v).unwrap_or_else(|e| panic!("{} {} {}: {e}", r.system, r.benchmark, r.cores));
            assert_eq!(&Record::from_value(v.clone()).unwrap(), r, "records read back as written");
        }
        // The report copes with holes (timeouts, errors, a missing system).
        let t = report::table(&records, &o.smp);
        assert!(t.contains("stat_mt") && t.contains("timeout"));
        // Linux: 1000 ops in `cores` ms on `cores` workers, over 2000 calibration steps per
        // ms per core.
        let dupclose: Vec<f64> = records.iter().filter(|r| r.benchmark == "dupclose" && r.system == "linux").filter_map(|r| r.calibrated_throughput()).collect();
        assert_eq!(dupclose, [0.5, 0.5 / 4.0, 0.5 / 16.0]);
        let dir = std::env::temp_dir().join(format!("xtask-bench-test-{}", std::process::id()));
        let plots = report::plots_svg_only(&records, &o.systems, &o.smp, &dir).unwrap();
        assert_eq!(plots, benches.len());
        let svg = fs::read_to_string(dir.join("dupclose.svg")).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("polyline") && svg.contains("not available"));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A benchmark one system cannot run yet is an explicit outcome: an `unavailable` record
    /// with the reason, never booted, that passes the schema, says `unavailable` on its table
    /// row with the reason under the table, and does not make the command fail.
    #[test]
    fn unavailable_benchmarks_are_recorded_and_reported() {
        let o = parse_options(&args("--smp 1,2 --only thread_mt,dupclose --systems ours,linux")).unwrap();
        let mut booted = Vec::new();
        // This system runs every benchmark today, so the test stands in a backend that lacks
        // one (as ours lacked thread_mt before time-sharing), the way `ours::unsupported` would.
        let lacks = |b: &BenchSpec| (b.name == "thread_mt").then_some("ours: an empty thread needs time-sharing (test backend)");
        let records = run_matrix(&o, &|_| None, &mut |s, b, p, c, _| {
            if s == System::Ours {
                if let Some(why) = lacks(b).or(ours::unsupported(b, c)) {
                    return Record::without_result("ours", b, p.to_vec(), c, Status::Unavailable, why);
                }
            }
            booted.push((s, b.name, c));
            fake(s, b, p, c)
        });
        assert_eq!(records.len(), 3 * 2 * 2, "thread_mt, dupclose, calib × 2 systems × 2 counts");
        assert!(!booted.contains(&(System::Ours, "thread_mt", 1)) && !booted.contains(&(System::Ours, "thread_mt", 2)));
        let unavailable: Vec<&Record> = records.iter().filter(|r| r.status == Status::Unavailable).collect();
        assert_eq!(unavailable.len(), 2);
        for r in &unavailable {
            assert_eq!((r.system.as_str(), r.benchmark.as_str()), ("ours", "thread_mt"));
            assert!(r.reason.as_deref().is_some_and(|w| w.contains("time-sharing")));
            let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
            record::check_schema(&v).unwrap();
            assert!(matches!(v.get("per_core_throughput"), Some(serde_json::Value::Null)));
        }
        let t = report::table(&records, &o.smp);
        let row = t.lines().find(|l| l.starts_with("| thread_mt | 1 |")).unwrap();
        // ours' throughput, then its instructions and the ratios: none for an unavailable cell.
        assert!(row.contains("| unavailable | - | - | - |"), "{row}");
        assert!(t.lines().any(|l| l.starts_with("- thread_mt on ours: unavailable (") && l.contains("time-sharing")), "{t}");
        assert!(unfinished(&records).is_ok(), "unavailable is not a failure");
    }

    /// A hung or failed run does not stop the matrix; the command fails at the end, naming it.
    #[test]
    fn timeouts_do_not_stop_the_matrix_but_fail_the_command() {
        let o = parse_options(&args("--smp 1,2 --only stat_mt,dupclose --systems linux")).unwrap();
        let mut order = Vec::new();
        let records = run_matrix(&o, &|_| None, &mut |s, b, p, c, _| {
            order.push((b.name, c));
            fake(s, b, p, c)
        });
        // Booted in a shuffled order; the records come back sorted.
        order.sort();
        assert_eq!(order, [("calib", 1), ("calib", 2), ("dupclose", 1), ("dupclose", 2), ("stat_mt", 1), ("stat_mt", 2)]);
        let sorted: Vec<(&str, u32)> = records.iter().map(|r| (r.benchmark.as_str(), r.cores)).collect();
        assert_eq!(sorted, [("stat_mt", 1), ("stat_mt", 2), ("dupclose", 1), ("dupclose", 2), ("calib", 1), ("calib", 2)]);
        assert_eq!(records.iter().filter(|r| r.status == Status::Timeout).count(), 2);
        let e = unfinished(&records).unwrap_err();
        assert_eq!(e, "bench: 2 run(s) did not finish: linux stat_mt@1 timeout, linux stat_mt@2 timeout");
    }

    #[test]
    fn schema_rejects_broken_records() {
        let spec = catalog::find("dupclose").unwrap();
        let good = fake(System::Linux, spec, &[("iters".into(), 1)], 2);
        let v: serde_json::Value = serde_json::from_str(&good.to_json()).unwrap();
        record::check_schema(&v).unwrap();
        let mutate = |f: &dyn Fn(&mut Record)| {
            let mut r = good.clone();
            f(&mut r);
            record::check_schema(&serde_json::from_str(&r.to_json()).unwrap())
        };
        assert!(mutate(&|r| r.ops = None).is_err(), "ok needs ops");
        assert!(mutate(&|r| {
            r.instructions_kernel = None;
        })
        .is_err(), "null instructions need a note");
        assert!(mutate(&|r| {
            r.instructions_kernel = None;
            r.instructions_note = Some("plugin missing".into());
        })
        .is_ok());
        assert!(mutate(&|r| r.cores = 0).is_err());
        assert!(mutate(&|r| r.system = "bsd".into()).is_err());
        assert!(mutate(&|r| {
            r.status = Status::Timeout;
        })
        .is_err(), "timeout needs a reason and no throughput");
        let missing = r#"{"system":"linux","benchmark":"dupclose"}"#;
        assert!(record::check_schema(&serde_json::from_str(missing).unwrap()).is_err());
    }

    /// results.json across versions: a file from before version 2 (a real 5-boot tcp_accept
    /// run written by the old hand-written writer) still reads, summaries and all, and makes a
    /// whole report.html; a version 2 file round-trips with its `run` item; a newer version,
    /// a misplaced `run` item and a hand-edited record are refused with one line naming it.
    #[test]
    fn results_json_versions_old_new_and_refused() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-versions-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let old = include_str!("bench/testdata/results-v1-net-boots5.json");
        fs::write(dir.join("results.json"), old).unwrap();
        let r = read_results(&dir).unwrap();
        assert_eq!((r.run.as_ref(), r.records.len()), (None, 30));
        assert!(!r.cells.is_empty() && !r.pairs.is_empty());
        let page = html::page(&r.records, &[System::Ours, System::Linux], &[2], None, &report::table(&r.records, &[2]));
        html::check_page(&page, &["tcp_accept", "tcp_accept_polling", "calib"]).unwrap();
        // Written again as version 2: the same records and summaries, and the run item.
        let mut v2 = r.clone();
        v2.run = Some(stats::RunInfo { version: stats::RESULTS_VERSION, command: "cargo xtask bench --only tcp_accept --boots 5".into(), started: "2026-11-25 16:00:00".into(), machine: stats::Machine::default(), boots: 5, seed: 1, linux: Vec::new() });
        let text = v2.to_json();
        assert!(text.starts_with("[\n  {\"kind\":\"run\",\"version\":3,"), "{}", &text[..80]);
        fs::write(dir.join("results.json"), &text).unwrap();
        assert_eq!(read_results(&dir).unwrap(), v2);
        let refused = |t: &str| {
            fs::write(dir.join("results.json"), t).unwrap();
            let e = read_results(&dir).unwrap_err();
            assert!(!e.contains('\n'), "one line: {e}");
            e
        };
        assert!(refused(&text.replacen("\"version\":3", "\"version\":4", 1)).contains("version 4"));
        // The run item after a record.
        let lines: Vec<&str> = text.lines().collect();
        let moved = format!("[\n{},\n{}\n{}", lines[2].trim_end_matches(','), lines[1].trim_end_matches(','), lines[3..].join("\n").replacen("  {", "  ,{", 1));
        assert!(refused(&moved).contains("must come first"), "{moved:.300}");
        assert!(refused(&text.replacen("\"cores\":2", "\"cores\":2.5", 1)).contains("item 1"));
        assert!(refused(&text.replacen("\"status\":\"ok\"", "\"status\":\"fine\"", 1)).contains("fine"));
        assert!(refused(&text.replacen("\"ops\":300,", "", 1)).contains("missing field `ops`"));
        assert!(refused("{}").contains("not a JSON array"));
        let _ = fs::remove_dir_all(&dir);
    }
}
