//! `cargo xtask model FIGURE`: Corey's figures 7, 8, 10 and 11 in **model time** at 1-16
//! cores (docs/model.md). Each point is one cachesim run with the amd16 multi-core model
//! (exact instruction counts and the misses of Corey's 4 × 4-core machine, per vCPU),
//! turned into cycles by [`cycles`]; the runs are cached under `target/model-cache/`
//! ([`runs`]). `validate` sets the model's ours/Linux ratios at 1 and 2 vCPUs beside the
//! measured medians of the benchmark matrix; `smoke` is the 2-core check of `cargo xtask test`.

pub mod cycles;
mod plot;
mod profile;
mod runs;
mod smoke;
mod validate;

use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::host::args::{core_list, CoreList};
use crate::host::outcome::{work, Failure};
use cycles::{card_limit, RunCounts, BASE_CPI};
use plot::Series;
use runs::{RunKey, Runs};

pub use smoke::ci_check;

/// `cargo xtask model`.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct ModelArgs {
    /// fig7 (mempass), fig8 (tcp_accept Dedicated/Polling), fig10 (metis wri by phase),
    /// fig11 (filesum Random/Locality), validate (model against the measured matrix at 1 and 2
    /// vCPUs), smoke (the 2-core check of `cargo xtask test`), profile (a benchmark's region
    /// instructions by function, both systems: --workload, --params, first --smp)
    #[arg(value_enum)]
    pub figure: FigureName,
    /// vCPU counts (one vCPU per amd16 core, so at most 16); validate and smoke use 1,2 and 2
    #[arg(long, value_parser = core_list, default_value = "1,2,4,8,16", value_name = "LIST")]
    pub smp: CoreList,
    /// Which system's lines to draw
    #[arg(long, value_enum, default_value = "both")]
    pub system: SystemChoice,
    /// Every cache latency times X (sensitivity: 0.5, 2); the runs are the same
    #[arg(long, default_value_t = 1.0, value_parser = latency_scale, value_name = "X")]
    pub latency_scale: f64,
    /// fig8: the network card's limit in packets per second (Corey's card: about 900 000)
    #[arg(long, default_value_t = 900_000, value_parser = clap::value_parser!(u64).range(1..), value_name = "PPS")]
    pub card_pps: u64,
    /// validate: only these benchmarks of the matrix (comma-separated)
    #[arg(long, value_name = "LIST")]
    pub only: Option<String>,
    /// Where the tables and plots go (default target/model/)
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Boot every point again instead of reading target/model-cache/
    #[arg(long)]
    pub fresh: bool,
    /// Boot nothing: draw from target/model-cache/ alone, a missing point reported as not run
    #[arg(long, conflicts_with = "fresh")]
    pub cached_only: bool,
    /// smoke: rewrite the committed expectation from this run
    #[arg(long)]
    pub bless: bool,
    /// profile: the benchmark (a name of `cargo xtask bench --list`)
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// profile: its parameters ("k=v ...", e.g. "phase=2 prep=0 size=1048576")
    #[arg(long, value_name = "\"k=v ...\"", default_value = "", allow_hyphen_values = true)]
    pub params: String,
    /// profile: functions to list
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,
    /// Plugin runs booted at a time (each starts once the one before has built and loaded its
    /// plugin); 1 boots them one after another
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4), value_name = "N")]
    pub jobs: u64,
    /// Seconds allowed per plugin run
    #[arg(long, default_value_t = 1800, value_parser = clap::value_parser!(u64).range(10..=7200), value_name = "SECS")]
    pub timeout: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureName {
    Fig7,
    Fig8,
    Fig10,
    Fig11,
    Validate,
    Smoke,
    Profile,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemChoice {
    Ours,
    Linux,
    Both,
}

impl SystemChoice {
    fn has(self, system: &str) -> bool {
        matches!((self, system), (SystemChoice::Both, _) | (SystemChoice::Ours, "ours") | (SystemChoice::Linux, "linux"))
    }
}

fn latency_scale(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 100.0 => Ok(x),
        _ => Err(format!("`{v}` is not a latency scale in (0, 100]")),
    }
}

/// The largest vCPU count the amd16 model gives a core of its own.
const MAX_SMP: u32 = 16;

pub fn main(a: ModelArgs) -> Result<(), Failure> {
    if let Some(bad) = a.smp.0.iter().find(|&&n| n > MAX_SMP) {
        return Err(Failure::Usage(format!("--smp {bad}: the amd16 model has {MAX_SMP} cores, one per vCPU")));
    }
    if a.only.is_some() && a.figure != FigureName::Validate {
        return Err(Failure::Usage("--only goes with `validate`".into()));
    }
    if a.bless && a.figure != FigureName::Smoke {
        return Err(Failure::Usage("--bless goes with `smoke`".into()));
    }
    if (a.workload.is_some() || !a.params.is_empty()) != (a.figure == FigureName::Profile) {
        return Err(Failure::Usage("`profile` needs --workload (and may take --params); no other command takes them".into()));
    }
    work(run(&a))
}

fn run(a: &ModelArgs) -> Result<(), String> {
    let out = a.out.clone().unwrap_or_else(|| crate::host::env::workspace_root().join("target").join("model"));
    let mut runs = Runs::new(Duration::from_secs(a.timeout), a.fresh);
    runs.cached_only = a.cached_only;
    let fig = match a.figure {
        FigureName::Smoke => return smoke::command(a.bless),
        FigureName::Profile => {
            let systems: Vec<&'static str> = ["ours", "linux"].into_iter().filter(|s| a.system.has(s)).collect();
            let smp = a.smp.0.first().copied().unwrap_or(1);
            return profile::command(&systems, a.workload.as_deref().unwrap_or_default(), smp, &a.params, a.top, Duration::from_secs(a.timeout), &out);
        }
        FigureName::Validate => return validate::command(&mut runs, a.only.as_deref(), a.latency_scale, &out, a.jobs as usize),
        f => f,
    };
    let def = figure(fig);
    let smp = &a.smp.0;
    let mut points: Vec<Point> = Vec::new();
    let mut failures = Vec::new();
    let keys: Vec<RunKey> = def
        .lines
        .iter()
        .filter(|l| a.system.has(l.system))
        .flat_map(|line| smp.iter().map(move |&n| RunKey { system: line.system, workload: line.workload, smp: n, params: (line.params)(n) }))
        .collect();
    runs.prefetch(&keys, a.jobs as usize)?;
    for line in def.lines.iter().filter(|l| a.system.has(l.system)) {
        for &n in smp {
            let key = RunKey { system: line.system, workload: line.workload, smp: n, params: (line.params)(n) };
            match runs.get(&key) {
                Ok(c) => points.push(Point { line: line.label, smp: n, counts: c }),
                Err(e) => {
                    println!("model: {e}");
                    failures.push(format!("{} at {n}: {e}", line.label));
                }
            }
        }
    }
    if points.is_empty() {
        return Err(format!("{}: no point could be run: {}", def.name, failures.join("; ")));
    }
    let ctx = Ctx { smp, scale: a.latency_scale, card_pps: a.card_pps as f64 };
    let (mut text, series, ylabel) = (def.render)(&ctx, &points)?;
    let mut head = format!(
        "{} in model time (evidence: model (exact counts + amd16 cache model)); base CPI {BASE_CPI} both systems, 2 GHz, latencies × {}\n{}\n",
        def.title,
        a.latency_scale,
        def.workload_note
    );
    if !failures.is_empty() {
        let _ = writeln!(head, "points not run: {}", failures.join("; "));
    }
    // Which conclusions hold at half, the same and double latencies (sensitivity).
    let _ = writeln!(text, "\nconclusions at latency scale 0.5 / 1 / 2:");
    for s in [0.5, 1.0, 2.0] {
        let c = Ctx { scale: s, ..ctx };
        for line in (def.conclusions)(&c, &points) {
            let _ = writeln!(text, "  × {s}: {line}");
        }
    }
    text.insert_str(0, &head);
    let _ = writeln!(text, "plugin runs: {} booted, {} from target/model-cache/", runs.booted, runs.cached);
    print!("{text}");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let stem = format!("{}{}", def.name, if a.latency_scale == 1.0 { String::new() } else { format!("-lat{}", a.latency_scale) });
    let tpath = out.join(format!("{stem}.txt"));
    std::fs::write(&tpath, &text).map_err(|e| format!("cannot write {}: {e}", tpath.display()))?;
    let svg = plot::lines(&format!("{} (model, latencies × {})", def.title, a.latency_scale), ylabel, smp, &series);
    let spath = out.join(format!("{stem}.svg"));
    std::fs::write(&spath, svg).map_err(|e| format!("cannot write {}: {e}", spath.display()))?;
    println!("wrote {} and {}", tpath.display(), spath.display());
    Ok(())
}

/// One computed point: a line's run at one vCPU count.
pub struct Point {
    line: &'static str,
    smp: u32,
    counts: RunCounts,
}

#[derive(Clone, Copy)]
struct Ctx<'a> {
    smp: &'a [u32],
    scale: f64,
    card_pps: f64,
}

impl Ctx<'_> {
    fn find<'p>(&self, points: &'p [Point], line: &str, n: u32) -> Option<&'p RunCounts> {
        points.iter().find(|p| p.line == line && p.smp == n).map(|p| &p.counts)
    }
    fn secs(&self, points: &[Point], line: &str, n: u32) -> Option<f64> {
        self.find(points, line, n).and_then(|c| c.seconds(self.scale, BASE_CPI).ok())
    }
}

/// One line of a figure: a workload on a system, its parameters at n vCPUs.
struct Line {
    label: &'static str,
    system: &'static str,
    workload: &'static str,
    params: fn(u32) -> String,
}

type Render = fn(&Ctx, &[Point]) -> Result<(String, Vec<Series>, &'static str), String>;

struct FigureDef {
    name: &'static str,
    title: &'static str,
    workload_note: &'static str,
    lines: Vec<Line>,
    render: Render,
    conclusions: fn(&Ctx, &[Point]) -> Vec<String>,
}

fn fmt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}")).unwrap_or_else(|| "-".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y),
        _ => None,
    }
}

fn figure(f: FigureName) -> FigureDef {
    match f {
        FigureName::Fig7 => FigureDef {
            name: "fig7",
            title: "Figure 7(b): mempass",
            workload_note: "workload: mempass_threads / mempass_procs, pages=2048 (8 MiB), one worker per vCPU, reps=1; ours: mempass_procs (address ranges shared between processes)",
            lines: vec![
                Line { label: "ours (shared ranges)", system: "ours", workload: "mempass_procs", params: |_| "pages=2048".into() },
                Line { label: "Linux threads", system: "linux", workload: "mempass_threads", params: |_| "pages=2048".into() },
                Line { label: "Linux processes", system: "linux", workload: "mempass_procs", params: |_| "pages=2048".into() },
            ],
            render: render_per_op,
            conclusions: |c, p| {
                let mut v = Vec::new();
                for &n in c.smp {
                    let o = c.secs(p, "ours (shared ranges)", n).zip(c.find(p, "ours (shared ranges)", n).and_then(|r| r.ops)).map(|(s, ops)| s / ops as f64);
                    let t = c.secs(p, "Linux threads", n).zip(c.find(p, "Linux threads", n).and_then(|r| r.ops)).map(|(s, ops)| s / ops as f64);
                    let pr = c.secs(p, "Linux processes", n).zip(c.find(p, "Linux processes", n).and_then(|r| r.ops)).map(|(s, ops)| s / ops as f64);
                    v.push(format!("{n} cores: time per op Linux threads / ours {}, Linux processes / ours {}", fmt(ratio(t, o), 2), fmt(ratio(pr, o), 2)));
                }
                v
            },
        },
        FigureName::Fig8 => FigureDef {
            name: "fig8",
            title: "Figure 8: TCP accept service",
            workload_note: "workload: tcp_accept (ours: Dedicated) and tcp_accept_polling (ours: Polling), conns=100 after one warm-up, from the host's load generator (packets arrive in host time: these runs are not exact; the cache keeps the first); each connection's work is marked on the vCPU that does it, so a core's cycles are its work, and the service's rate is connections / the busiest core's model time, capped by the card (8 packets a connection)",
            lines: vec![
                Line { label: "ours Dedicated", system: "ours", workload: "tcp_accept", params: |_| "conns=100".into() },
                Line { label: "ours Polling", system: "ours", workload: "tcp_accept_polling", params: |_| "conns=100".into() },
                Line { label: "Linux", system: "linux", workload: "tcp_accept", params: |_| "conns=100".into() },
            ],
            render: render_fig8,
            conclusions: fig8_conclusions,
        },
        FigureName::Fig10 => FigureDef {
            name: "fig10",
            title: "Figure 10: Metis wri by phase",
            workload_note: "workload: metis_wri, 1 MiB of generated text (size=1048576 seed=1), prep=0 (reduce writes fresh pages, as in Corey's measurement), one worker per vCPU, 8 partitions per worker; each phase is its own run (phase=1 map, 2 reduce, 3 merge: the markers bound that phase alone)",
            // Reduce first: the points are booted in this order, and the figure's targets are
            // about the reduce phase (a run stopped early still has them).
            lines: vec![
                Line { label: "ours reduce", system: "ours", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "2") },
                Line { label: "Linux reduce", system: "linux", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "2") },
                Line { label: "ours map", system: "ours", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "1") },
                Line { label: "Linux map", system: "linux", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "1") },
                Line { label: "ours merge", system: "ours", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "3") },
                Line { label: "Linux merge", system: "linux", workload: "metis_wri", params: |_| METIS_PARAMS.replace("PHASE", "3") },
            ],
            render: render_fig10,
            conclusions: fig10_conclusions,
        },
        FigureName::Fig11 => FigureDef {
            name: "fig11",
            title: "Figure 11: filesum, Random against Locality",
            workload_note: "workload: the Linux guest's filesum (one 256 KiB buffer per vCPU, 4 passes, one load per 64-byte line; Random rotates buffers between vCPUs each pass, Locality keeps each on its vCPU); a chip's four buffers (1 MiB) fit its caches (4 × 512 KiB L2 + 2 MiB L3). Ours has filesum only inside webd, served over the network (host-driven, not exact): not drawn",
            lines: vec![
                Line { label: "Linux Random", system: "linux", workload: "filesum", params: |_| "size=262144 passes=4 stride=64 mode=random".into() },
                Line { label: "Linux Locality", system: "linux", workload: "filesum", params: |_| "size=262144 passes=4 stride=64 mode=locality".into() },
            ],
            render: render_per_op,
            conclusions: |c, p| {
                let mut v = Vec::new();
                for &n in c.smp {
                    let r = ratio(c.secs(p, "Linux Random", n), c.secs(p, "Linux Locality", n));
                    v.push(format!("{n} cores: Locality's speed-up over Random {} (target at 16 cores: ≥ 2×){}", fmt(r, 2), if n == 16 { verdict(r.map(|x| x >= 2.0)) } else { "" }));
                }
                v
            },
        },
        FigureName::Validate | FigureName::Smoke | FigureName::Profile => unreachable!("not a figure"),
    }
}

/// fig10's run parameters; PHASE is the marked phase.
const METIS_PARAMS: &str = "size=1048576 seed=1 prep=0 phase=PHASE";

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => ": reached",
        Some(false) => ": NOT reached",
        None => ": no point",
    }
}

/// Lines drawn as model time per operation (µs), with each line's ratio to the first Linux
/// line.
fn render_per_op(c: &Ctx, points: &[Point]) -> Result<(String, Vec<Series>, &'static str), String> {
    let mut labels: Vec<&str> = Vec::new();
    for p in points {
        if !labels.contains(&p.line) {
            labels.push(p.line);
        }
    }
    let per_op = |l: &str, n: u32| -> Option<f64> {
        let r = c.find(points, l, n)?;
        let s = r.seconds(c.scale, BASE_CPI).ok()?;
        r.ops.filter(|&o| o > 0).map(|o| s / o as f64 * 1e6 * n as f64)
    };
    let mut t = String::new();
    let _ = writeln!(t, "model time per operation per core (µs; the slowest core's time × cores / operations), L3 misses per operation");
    let _ = write!(t, "{:>5}", "cores");
    for l in &labels {
        let _ = write!(t, " {:>22} {:>9}", format!("{l} µs"), "L3/op");
    }
    t.push('\n');
    for &n in c.smp {
        let _ = write!(t, "{n:>5}");
        for l in &labels {
            let l3 = c.find(points, l, n).and_then(|r| r.ops.filter(|&o| o > 0).map(|o| r.total(|x| x.l3_miss) as f64 / o as f64));
            let _ = write!(t, " {:>22} {:>9}", fmt(per_op(l, n), 3), fmt(l3, 2));
        }
        t.push('\n');
    }
    let series = labels.iter().map(|l| Series { name: l.to_string(), points: c.smp.iter().filter_map(|&n| per_op(l, n).map(|v| (n, v))).collect() }).collect();
    Ok((t, series, "µs per operation per core (model)"))
}

fn fig8_rates(c: &Ctx, points: &[Point], line: &str, n: u32) -> Option<(f64, f64, f64)> {
    let r = c.find(points, line, n)?;
    let uncapped = r.throughput(c.scale, BASE_CPI).ok()?;
    let capped = uncapped.min(card_limit(c.card_pps, 8.0));
    let l3 = r.total(|x| x.l3_miss) as f64 / r.ops? as f64;
    Some((uncapped, capped, l3))
}

fn render_fig8(c: &Ctx, points: &[Point]) -> Result<(String, Vec<Series>, &'static str), String> {
    let lines = ["ours Dedicated", "ours Polling", "Linux"];
    let mut t = String::new();
    let _ = writeln!(t, "connections/s (model; capped at the card's {:.0} connections/s), per core before the cap, and L3 misses per connection", card_limit(c.card_pps, 8.0));
    let _ = write!(t, "{:>5}", "cores");
    for l in lines {
        let _ = write!(t, " {:>24} {:>10} {:>8}", format!("{l} conns/s"), "per core", "L3/conn");
    }
    let _ = writeln!(t, " {:>12}", "Ded/Linux");
    for &n in c.smp {
        let _ = write!(t, "{n:>5}");
        for l in lines {
            let r = fig8_rates(c, points, l, n);
            let _ = write!(t, " {:>24} {:>10} {:>8}", fmt(r.map(|x| x.1), 0), fmt(r.map(|x| x.0 / n as f64), 0), fmt(r.map(|x| x.2), 1));
        }
        let d = fig8_rates(c, points, "ours Dedicated", n).map(|x| x.1);
        let li = fig8_rates(c, points, "Linux", n).map(|x| x.1);
        let _ = writeln!(t, " {:>12}", fmt(ratio(d, li), 2));
    }
    let series = lines.iter().map(|l| Series { name: l.to_string(), points: c.smp.iter().filter_map(|&n| fig8_rates(c, points, l, n).map(|x| (n, x.1))).collect() }).collect();
    Ok((t, series, "connections per second (model)"))
}

/// The fewest cores at which a line reaches the card's limit (its uncapped per-core rate × n),
/// extrapolating linearly from its point at `n0` cores.
fn cores_to_limit(c: &Ctx, points: &[Point], line: &str, n0: u32) -> Option<f64> {
    let (un, _, _) = fig8_rates(c, points, line, n0)?;
    Some((card_limit(c.card_pps, 8.0) / (un / n0 as f64)).ceil())
}

fn fig8_conclusions(c: &Ctx, points: &[Point]) -> Vec<String> {
    let mut v = Vec::new();
    // Per core before the card's cap: what each core can do (at 2 cores Corey's lines are
    // below the card's limit).
    let per_core = |l: &str, n: u32| fig8_rates(c, points, l, n).map(|x| x.0 / n as f64);
    let r2 = ratio(per_core("ours Dedicated", 2), per_core("ours Polling", 2));
    v.push(format!("Dedicated's connections per core at 2 cores / Polling's: {} (target ≥ 1.7){}", fmt(r2, 2), verdict(r2.map(|x| x >= 1.7))));
    let (d, p) = (cores_to_limit(c, points, "ours Dedicated", 2), cores_to_limit(c, points, "ours Polling", 2));
    let ok = d.zip(p).map(|(d, p)| d <= p / 2.0);
    v.push(format!(
        "cores to reach the card's limit, from each configuration's per-core rate at 2 cores: Dedicated {}, Polling {} (target: at most half){}",
        fmt(d, 0),
        fmt(p, 0),
        verdict(ok)
    ));
    v
}

fn render_fig10(c: &Ctx, points: &[Point]) -> Result<(String, Vec<Series>, &'static str), String> {
    let ms = |l: &str, n: u32| c.secs(points, l, n).map(|s| s * 1e3);
    let total = |sys: &str, n: u32| -> Option<f64> { Some(ms(&format!("{sys} map"), n)? + ms(&format!("{sys} reduce"), n)? + ms(&format!("{sys} merge"), n)?) };
    let mut t = String::new();
    let _ = writeln!(t, "model time per phase (ms; each phase its slowest core) and ours / Linux");
    let _ = writeln!(
        t,
        "{:>5} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>13} {:>12}",
        "cores", "ours map", "reduce", "merge", "total", "Linux map", "reduce", "merge", "total", "reduce o/L", "total o/L"
    );
    for &n in c.smp {
        let _ = writeln!(
            t,
            "{n:>5} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>13} {:>12}",
            fmt(ms("ours map", n), 3),
            fmt(ms("ours reduce", n), 3),
            fmt(ms("ours merge", n), 3),
            fmt(total("ours", n), 3),
            fmt(ms("Linux map", n), 3),
            fmt(ms("Linux reduce", n), 3),
            fmt(ms("Linux merge", n), 3),
            fmt(total("Linux", n), 3),
            fmt(ratio(ms("ours reduce", n), ms("Linux reduce", n)), 3),
            fmt(ratio(total("ours", n), total("Linux", n)), 3)
        );
    }
    let _ = writeln!(t, "per core in each phase (instructions, L3 misses, of which served by another core), the slowest core:");
    for p in points {
        if let Some(w) = p.counts.cores.iter().max_by(|a, b| a.cycles(&p.counts.lat.scaled(c.scale), BASE_CPI).unwrap_or(0.0).total_cmp(&b.cycles(&p.counts.lat.scaled(c.scale), BASE_CPI).unwrap_or(0.0))) {
            let _ = writeln!(t, "  {:<14} {:>2} cores: vCPU {} {} insns, {} L3 misses ({} from other cores)", p.line, p.smp, w.vcpu, w.insns, w.l3_miss, w.transfers());
        }
    }
    let mut series = Vec::new();
    for sys in ["ours", "Linux"] {
        series.push(Series { name: format!("{sys} reduce"), points: c.smp.iter().filter_map(|&n| ms(&format!("{sys} reduce"), n).map(|v| (n, v))).collect() });
        series.push(Series { name: format!("{sys} total"), points: c.smp.iter().filter_map(|&n| total(sys, n).map(|v| (n, v))).collect() });
    }
    Ok((t, series, "ms (model)"))
}

fn fig10_conclusions(c: &Ctx, points: &[Point]) -> Vec<String> {
    let r = |n: u32| ratio(c.secs(points, "ours reduce", n), c.secs(points, "Linux reduce", n));
    let max = c.smp.iter().copied().max().unwrap_or(1);
    let mut v = vec![format!("reduce at 2 cores, ours / Linux: {} (target within 10 %){}", fmt(r(2), 3), verdict(r(2).map(|x| (x - 1.0).abs() <= 0.10)))];
    if max > 2 {
        v.push(format!("reduce at {max} cores, ours / Linux: {} (target at 16 cores ≤ 0.3; Corey 0.18){}", fmt(r(max), 3), if max == 16 { verdict(r(16).map(|x| x <= 0.3)) } else { "" }));
    }
    v
}
