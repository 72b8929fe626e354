//! Statistics over the boots of a cell (`--boots N`): per system × benchmark × vCPU
//! count the median, minimum, maximum and IQR/median of total ops/s, per-core throughput and
//! calibrated throughput (each boot's throughput divided by the calibration measured in that
//! same boot, paired before any statistic); the ours/Linux ratio per interleaved pair of boots
//! (boot k of ours with boot k of Linux of the same cell) and its median; a `noisy` mark when
//! max/min of the calibrated value exceeds [`NOISY`]; and failed boots counted per cell.
//!
//! Quartiles interpolate linearly between order statistics (numpy's default): for sorted
//! values v[0..n], the q-quantile is at position q·(n−1).

use serde::{Deserialize, Serialize};

use crate::guest::record::LinuxConfig;

use crate::guest::record::{Record, Status};

/// A row is `noisy` when max/min of its calibrated value is above this: too wide to quote.
pub const NOISY: f64 = 1.5;

/// A cell (or a pair) is also `noisy` when the host's 1-minute load average differed between
/// the boots compared by more than this many times the host's CPUs: the competing load
/// changed by a whole machine's worth, which the in-boot calibration only partly divides out
/// (it runs after the benchmark, not beside it).
pub const NOISY_LOAD_PER_CPU: f64 = 1.0;

/// Whether the host's load over `records` (the boots of one cell or both sides of the pairs)
/// varied by more than [`NOISY_LOAD_PER_CPU`] per host CPU. Boots without a host sample
/// (older files) do not count.
pub fn load_noisy(records: &[&Record]) -> bool {
    let loads: Vec<(f64, u32)> = records.iter().filter(|r| r.status == Status::Ok).filter_map(|r| r.host.as_ref()).map(|h| (h.load1(), h.cpus)).collect();
    let (Some(lo), Some(hi)) = (loads.iter().map(|l| l.0).min_by(f64::total_cmp), loads.iter().map(|l| l.0).max_by(f64::total_cmp)) else { return false };
    let cpus = loads.iter().map(|l| l.1).max().unwrap_or(1).max(1) as f64;
    hi - lo > NOISY_LOAD_PER_CPU * cpus
}

/// Median, range and spread of one quantity over the good boots of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// How many values (good boots, or good pairs).
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Interquartile range over the median (0 for one value).
    pub iqr_over_median: f64,
}

impl Spread {
    /// max/min (infinite if min is 0).
    pub fn max_over_min(&self) -> f64 {
        if self.min > 0.0 {
            self.max / self.min
        } else {
            f64::INFINITY
        }
    }
}

/// The q-quantile (0..=1) of sorted values, linear interpolation.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// The median: the middle value of an odd count, the mean of the two middle ones of an even
/// (what [`spread`] reports; on its own only in the tests).
#[cfg(test)]
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// Median, min, max and IQR/median of the finite values, None if there are none.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let median = quantile(&v, 0.5)?;
    let iqr = quantile(&v, 0.75)? - quantile(&v, 0.25)?;
    Some(Spread { n: v.len(), median, min: v[0], max: v[v.len() - 1], iqr_over_median: if median != 0.0 { iqr / median } else { 0.0 } })
}

/// Whether a spread is too wide to support a claim.
pub fn is_noisy(s: Option<&Spread>) -> bool {
    s.is_some_and(|s| s.n > 1 && s.max_over_min() > NOISY)
}

/// One system × benchmark × vCPU count over its boots (in results.json an item with
/// `"kind":"summary"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSummary {
    pub system: String,
    pub benchmark: String,
    pub cores: u32,
    /// Boots recorded for the cell (good or not).
    pub boots: usize,
    pub ok: usize,
    /// Boots that errored or timed out: never dropped silently, counted here and listed.
    pub failed: usize,
    pub unavailable: usize,
    /// Total operations per second (all workers), per good boot.
    pub ops_per_s: Option<Spread>,
    #[serde(rename = "per_core_throughput")]
    pub per_core: Option<Spread>,
    /// Per-core throughput over the same boot's calibration.
    #[serde(rename = "calibrated_throughput")]
    pub calibrated: Option<Spread>,
    /// max/min of the calibrated value above [`NOISY`] (of the raw per-core value when no
    /// boot has a calibration), or the host's load varying between the boots by more than
    /// [`NOISY_LOAD_PER_CPU`] per host CPU ([`load_noisy`]).
    pub noisy: bool,
    /// The host's 1-minute load average over the good boots (the busier of each boot's start
    /// and end sample); absent when no boot recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_load1: Option<Spread>,
    /// CPU seconds the host gave each good boot's QEMU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu_cpu_s: Option<Spread>,
    /// Per worker where that differs from per vCPU (`Record::per_service_core_throughput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_service_core_throughput: Option<Spread>,
}

/// The ours/Linux ratio of one benchmark × vCPU count, taken per pair of boots (in
/// results.json an item with `"kind":"pair"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairSummary {
    /// Which Linux baseline the ratio is against (`linux` or `linux-tuned`; files before
    /// version 3 had one, `linux`).
    #[serde(default = "plain_linux")]
    pub linux: String,
    pub benchmark: String,
    pub cores: u32,
    /// Per-core throughput, ours/Linux, one value per pair where both boots were good.
    pub ratio: Option<Spread>,
    pub calibrated_ratio: Option<Spread>,
    /// Pairs with at least one failed or unavailable side (not in the ratios).
    pub broken_pairs: usize,
    pub noisy: bool,
}

fn plain_linux() -> String {
    "linux".into()
}

fn total_ops_per_s(r: &Record) -> Option<f64> {
    if r.status != Status::Ok {
        return None;
    }
    Some(r.ops? as f64 / (r.ns.filter(|&n| n > 0)? as f64 / 1e9))
}

/// Cells in the order they first appear in `records`.
fn cells(records: &[Record]) -> Vec<(String, String, u32)> {
    let mut out: Vec<(String, String, u32)> = Vec::new();
    for r in records {
        let c = (r.system.clone(), r.benchmark.clone(), r.cores);
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// One summary per system × benchmark × vCPU count present in `records`.
pub fn summarize(records: &[Record]) -> Vec<CellSummary> {
    cells(records)
        .into_iter()
        .map(|(system, benchmark, cores)| {
            let mine: Vec<&Record> = records.iter().filter(|r| r.system == system && r.benchmark == benchmark && r.cores == cores).collect();
            let count = |s: &[Status]| mine.iter().filter(|r| s.contains(&r.status)).count();
            let per_core = spread(&mine.iter().filter_map(|r| r.per_core_throughput()).collect::<Vec<_>>());
            let calibrated = spread(&mine.iter().filter_map(|r| r.calibrated_throughput()).collect::<Vec<_>>());
            let noisy = if calibrated.is_some() { is_noisy(calibrated.as_ref()) } else { is_noisy(per_core.as_ref()) } || load_noisy(&mine);
            let good_host = || mine.iter().filter(|r| r.status == Status::Ok).filter_map(|r| r.host.as_ref());
            CellSummary {
                host_load1: spread(&good_host().map(|h| h.load1()).collect::<Vec<_>>()),
                qemu_cpu_s: spread(&good_host().map(|h| h.qemu_cpu_s).collect::<Vec<_>>()),
                per_service_core_throughput: spread(&mine.iter().filter_map(|r| r.per_service_core_throughput()).collect::<Vec<_>>()),
                boots: mine.len(),
                ok: count(&[Status::Ok]),
                failed: count(&[Status::Error, Status::Timeout]),
                unavailable: count(&[Status::Unavailable]),
                ops_per_s: spread(&mine.iter().filter_map(|r| total_ops_per_s(r)).collect::<Vec<_>>()),
                per_core,
                calibrated,
                noisy,
                system,
                benchmark,
                cores,
            }
        })
        .collect()
}

/// The ours/Linux ratio per Linux baseline × benchmark × vCPU count where both systems have
/// boots: boot k of ours over boot k of that Linux, then the median of those ratios (never a
/// ratio of medians).
pub fn pairs(records: &[Record]) -> Vec<PairSummary> {
    let mut out: Vec<PairSummary> = Vec::new();
    for linux_name in crate::guest::record::LINUX_NAMES {
        for (system, benchmark, cores) in cells(records) {
            if system != "ours" || out.iter().any(|p| p.linux == linux_name && p.benchmark == benchmark && p.cores == cores) {
                continue;
            }
            let side = |sys: &str| -> Vec<&Record> { records.iter().filter(|r| r.system == sys && r.benchmark == benchmark && r.cores == cores).collect() };
            let (ours, linux) = (side("ours"), side(linux_name));
            if linux.is_empty() {
                continue;
            }
            let (mut raw, mut cal, mut broken, mut load_apart) = (Vec::new(), Vec::new(), 0, false);
            let mut boots: Vec<u32> = ours.iter().chain(&linux).map(|r| r.boot).collect();
            boots.sort();
            boots.dedup();
            for k in boots {
                let (o, l) = (ours.iter().find(|r| r.boot == k), linux.iter().find(|r| r.boot == k));
                let (Some(o), Some(l)) = (o, l) else {
                    broken += 1;
                    continue;
                };
                let div = |f: fn(&Record) -> Option<f64>| Some(f(o)? / f(l).filter(|&x| x > 0.0)?);
                match div(Record::per_core_throughput) {
                    Some(x) => raw.push(x),
                    None => broken += 1,
                }
                if let Some(x) = div(Record::calibrated_throughput) {
                    cal.push(x);
                }
                // The two boots of a pair ran under different host loads.
                load_apart |= load_noisy(&[*o, *l]);
            }
            let (ratio, calibrated_ratio) = (spread(&raw), spread(&cal));
            let noisy = if calibrated_ratio.is_some() { is_noisy(calibrated_ratio.as_ref()) } else { is_noisy(ratio.as_ref()) } || load_apart;
            out.push(PairSummary { linux: linux_name.to_string(), benchmark, cores, ratio, calibrated_ratio, broken_pairs: broken, noisy });
        }
    }
    out
}

/// `value`'s median at `n` vCPUs over its median at `base` (per-core scaling from medians).
pub fn scaling_of_medians(cells: &[CellSummary], sys: &str, bench: &str, base: u32, n: u32, value: fn(&CellSummary) -> Option<&Spread>) -> Option<f64> {
    let at = |c: u32| cells.iter().find(|s| s.system == sys && s.benchmark == bench && s.cores == c).and_then(value).map(|s| s.median);
    let (a, b) = (at(base)?, at(n)?);
    (a > 0.0).then(|| b / a)
}

// results.json: a `"kind":"run"` item first (the format's version, the command, the machine),
// every boot's record (no `kind`), then one summary record per cell (`"kind":"summary"`) and
// one per benchmark × vCPU count with both systems (`"kind":"pair"`). Written and read back
// here through serde; docs/bench.md has the schema.

/// The version of results.json this xtask writes. 1: boot records and summaries, no `run`
/// item (files written before the version existed; still read). 2: a `run` item first.
/// 3: per-core throughput per vCPU of the guest (before: per worker, which for tcp_accept
/// and webd was per service or front-end core), pairs per Linux baseline, the host's load
/// per boot, the Linux baselines' configuration in the `run` item. Summaries of an older file
/// are recomputed on reading (they were per worker).
pub const RESULTS_VERSION: u32 = 3;

/// The host a run was measured on (for the report; timings depend on it).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu: String,
    /// Host CPUs available to this process.
    pub host_cpus: u32,
    /// `uname -sr` equivalent (/proc/sys/kernel/{ostype,osrelease}).
    pub os: String,
    /// The first line of `qemu-system-x86_64 --version`.
    pub qemu: String,
}

impl Machine {
    /// This host, as far as it can be read; a part that cannot is `unknown`.
    pub fn this_host() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
        let cpu = read("/proc/cpuinfo")
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())))
            .unwrap_or_else(|| "unknown".into());
        let os = match (read("/proc/sys/kernel/ostype"), read("/proc/sys/kernel/osrelease")) {
            (Some(a), Some(b)) => format!("{a} {b}"),
            _ => "unknown".into(),
        };
        let qemu = std::process::Command::new("qemu-system-x86_64")
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
            .unwrap_or_else(|| "unknown".into());
        Machine { cpu, host_cpus: std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(0), os, qemu }
    }
}

/// What was run, where and when: results.json's first item (`"kind":"run"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// [`RESULTS_VERSION`] when written.
    pub version: u32,
    /// The exact command, as typed (`cargo xtask bench ...`).
    pub command: String,
    /// UTC start time, `YYYY-MM-DD HH:MM:SS`.
    pub started: String,
    pub machine: Machine,
    pub boots: u32,
    pub seed: u64,
    /// The Linux baselines of the run (from version 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linux: Vec<LinuxConfig>,
}

/// serde's form of one item with a `kind` tag.
#[derive(Serialize)]
struct Tagged<'a, T: Serialize> {
    kind: &'static str,
    #[serde(flatten)]
    item: &'a T,
}

fn tagged<T: Serialize>(kind: &'static str, item: &T) -> String {
    serde_json::to_string(&Tagged { kind, item }).expect("a summary always serializes")
}

impl CellSummary {
    pub fn to_json(&self) -> String {
        tagged("summary", self)
    }
}

impl PairSummary {
    pub fn to_json(&self) -> String {
        tagged("pair", self)
    }
}

/// What results.json holds: what was run, every boot's raw record, then the summaries.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Results {
    /// Absent in files written before version 2.
    pub run: Option<RunInfo>,
    pub records: Vec<Record>,
    pub cells: Vec<CellSummary>,
    pub pairs: Vec<PairSummary>,
}

impl Results {
    /// The summaries computed from the raw records.
    pub fn from_records(records: Vec<Record>) -> Results {
        Results { run: None, cells: summarize(&records), pairs: pairs(&records), records }
    }

    /// results.json: a JSON array, one item per line.
    pub fn to_json(&self) -> String {
        let lines: Vec<String> = self
            .run
            .iter()
            .map(|r| tagged("run", r))
            .chain(self.records.iter().map(|r| r.to_json()))
            .chain(self.cells.iter().map(CellSummary::to_json))
            .chain(self.pairs.iter().map(PairSummary::to_json))
            .map(|l| format!("  {l}"))
            .collect();
        format!("[\n{}\n]\n", lines.join(",\n"))
    }

    /// Read results.json back: raw records through their schema check, summaries by `kind`.
    /// A file without summaries (written before `--boots`) reads as its records; one without
    /// a `run` item (before version 2) reads with `run` None; a newer version is refused.
    pub fn from_json(text: &str) -> Result<Results, String> {
        let items: Vec<serde_json::Value> = serde_json::from_str(text).map_err(|e| format!("not a JSON array of records: {e}"))?;
        let mut out = Results::default();
        for (i, item) in items.into_iter().enumerate() {
            let at = |e: String| format!("item {i}: {e}");
            let kind = match item.get("kind") {
                None => None,
                Some(serde_json::Value::String(k)) => Some(k.clone()),
                Some(other) => return Err(at(format!("`kind` must be a string, not {other}"))),
            };
            let typed = |e: serde_json::Error| at(e.to_string());
            match kind.as_deref() {
                None => out.records.push(Record::from_value(item).map_err(at)?),
                Some("summary") => out.cells.push(serde_json::from_value(item).map_err(typed)?),
                Some("pair") => out.pairs.push(serde_json::from_value(item).map_err(typed)?),
                Some("run") => {
                    if i != 0 {
                        return Err(at("the `run` item must come first".into()));
                    }
                    // The version before the rest: a newer file's fields may differ.
                    match item.get("version").and_then(serde_json::Value::as_u64) {
                        Some(v) if (2..=RESULTS_VERSION as u64).contains(&v) => {}
                        Some(v) => return Err(at(format!("results.json version {v} is not one this xtask reads (1..={RESULTS_VERSION})"))),
                        None => return Err(at("the `run` item needs a whole-number `version`".into())),
                    }
                    out.run = Some(serde_json::from_value(item).map_err(typed)?);
                }
                Some(other) => return Err(at(format!("unknown `kind` {other:?}"))),
            }
        }
        Ok(out)
    }
}

/// The same scaling taken per round: boot k at `n` vCPUs over boot k at `base` (the same
/// round of the shuffled order), over the rounds where both boots were good. It shows how far
/// one round's scaling can stray; the headline figure stays the ratio of the medians.
pub fn scaling_per_round(records: &[Record], sys: &str, bench: &str, base: u32, n: u32, value: fn(&Record) -> Option<f64>) -> Option<Spread> {
    let at = |c: u32, k: u32| records.iter().find(|r| r.system == sys && r.benchmark == bench && r.cores == c && r.boot == k).and_then(value);
    let mut boots: Vec<u32> = records.iter().filter(|r| r.system == sys && r.benchmark == bench).map(|r| r.boot).collect();
    boots.sort();
    boots.dedup();
    spread(&boots.iter().filter_map(|&k| Some(at(n, k)? / at(base, k).filter(|&x| x > 0.0)?)).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use testdefs::bench_catalog as catalog;
    use super::*;

    #[test]
    fn medians_quartiles_and_ranges() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[4.0]), Some(4.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0), "odd count: the middle value");
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5), "even count: the mean of the middle two");
        assert_eq!(median(&[1.0, f64::NAN, 3.0]), Some(2.0), "non-finite values are ignored");
        let s = spread(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (5, 3.0, 1.0, 5.0));
        // Quartiles at positions 1 and 3 of 0..4: 2 and 4; IQR 2 over median 3.
        assert!((s.iqr_over_median - 2.0 / 3.0).abs() < 1e-12);
        let s = spread(&[10.0, 20.0, 30.0, 40.0]).unwrap();
        // Positions 0.75 and 2.25: 17.5 and 32.5.
        assert_eq!((s.median, s.iqr_over_median), (25.0, 15.0 / 25.0));
        let one = spread(&[7.0]).unwrap();
        assert_eq!((one.median, one.min, one.max, one.iqr_over_median), (7.0, 7.0, 7.0, 0.0));
        assert!(!is_noisy(Some(&one)), "one value is never noisy");
        assert_eq!(spread(&[]), None);
    }

    /// A good boot: `ops` in 1 ms on one worker, and a calibration of `calib` steps in 1 ms.
    fn boot(sys: &str, bench: &str, cores: u32, k: u32, ops: u64, calib: u64) -> Record {
        let spec = catalog::find(bench).unwrap();
        let mut r = Record::without_result(sys, spec, vec![], cores, Status::Ok, "");
        r.reason = None;
        r.boot = k;
        r.workers = Some(cores as u64);
        r.ops = Some(ops);
        r.ns = Some(1_000_000);
        r.busy_ns = Some(1_000_000);
        r.calib_ops = Some(calib);
        r.calib_ns = Some(1_000_000);
        r.instructions_note = Some("test".into());
        r
    }

    fn failed(sys: &str, bench: &str, cores: u32, k: u32, status: Status) -> Record {
        let mut r = Record::without_result(sys, catalog::find(bench).unwrap(), vec![], cores, status, "killed after the 1 s timeout");
        r.boot = k;
        r
    }

    #[test]
    fn cells_pairs_noise_and_failures() {
        let recs = vec![
            // ours: 3 good boots, calibrated 0.5, 0.5, 0.6 (steady), raw 1000, 2000, 3000 /ms.
            boot("ours", "dupclose", 1, 1, 1000, 2000),
            boot("ours", "dupclose", 1, 2, 2000, 4000),
            boot("ours", "dupclose", 1, 3, 3000, 5000),
            // linux: boot 2 timed out; calibrated 0.25 and 0.5 (max/min 2: noisy).
            boot("linux", "dupclose", 1, 1, 500, 2000),
            failed("linux", "dupclose", 1, 2, Status::Timeout),
            boot("linux", "dupclose", 1, 3, 1500, 3000),
        ];
        let cells = summarize(&recs);
        assert_eq!(cells.len(), 2);
        let ours = &cells[0];
        assert_eq!((ours.system.as_str(), ours.boots, ours.ok, ours.failed), ("ours", 3, 3, 0));
        let pc = ours.per_core.as_ref().unwrap();
        assert_eq!((pc.median, pc.min, pc.max), (2e6, 1e6, 3e6));
        assert_eq!(ours.ops_per_s.as_ref().unwrap().median, 2e6, "one worker: total = per core");
        let cal = ours.calibrated.as_ref().unwrap();
        assert_eq!((cal.median, cal.min, cal.max), (0.5, 0.5, 0.6));
        assert!(!ours.noisy, "0.6/0.5 = 1.2 is within 1.5");
        let linux = &cells[1];
        assert_eq!((linux.boots, linux.ok, linux.failed, linux.unavailable), (3, 2, 1, 0), "the timed-out boot is counted");
        assert_eq!(linux.calibrated.as_ref().unwrap().n, 2);
        assert_eq!(linux.calibrated.as_ref().unwrap().median, 0.375, "even count");
        assert!(linux.noisy, "0.5/0.25 = 2 is above 1.5");
        // Pairs: boot 1 (1000/500 = 2, calibrated 0.5/0.25 = 2) and boot 3 (3000/1500 = 2,
        // 0.6/0.5 = 1.2); boot 2 has no Linux result and is a broken pair, not a ratio.
        let p = pairs(&recs);
        assert_eq!(p.len(), 1);
        let r = p[0].ratio.as_ref().unwrap();
        assert_eq!((r.n, r.median, r.min, r.max), (2, 2.0, 2.0, 2.0));
        let c = p[0].calibrated_ratio.as_ref().unwrap();
        assert_eq!((c.n, c.min, c.max), (2, 1.2, 2.0));
        assert!((c.median - 1.6).abs() < 1e-12);
        assert_eq!(p[0].broken_pairs, 1);
        assert!(p[0].noisy, "2.0/1.2 > 1.5");
        // The paired median is not the ratio of medians (2e6 / 1e6 = 2 raw here, but
        // calibrated 0.5 / 0.375 = 1.33 against the paired 1.6).
        assert!((cal.median / linux.calibrated.as_ref().unwrap().median - c.median).abs() > 0.2);
    }

    #[test]
    fn pairing_is_by_boot_number_not_by_position() {
        // Linux's boots arrive out of order; boot k pairs with boot k.
        let recs = vec![
            boot("ours", "stat_mt", 2, 1, 100, 1000),
            boot("ours", "stat_mt", 2, 2, 400, 1000),
            boot("linux", "stat_mt", 2, 2, 200, 1000),
            boot("linux", "stat_mt", 2, 1, 100, 1000),
        ];
        let p = pairs(&recs);
        let r = p[0].ratio.as_ref().unwrap();
        assert_eq!((r.min, r.max), (1.0, 2.0));
        assert_eq!(p[0].broken_pairs, 0);
        // No Linux side at all: no pair summary.
        assert!(pairs(&recs[..2]).is_empty());
    }

    #[test]
    fn unavailable_and_all_failed_cells_have_counts_and_no_numbers() {
        let recs = vec![
            failed("ours", "thread_mt", 1, 1, Status::Unavailable),
            failed("ours", "thread_mt", 1, 2, Status::Unavailable),
            failed("linux", "thread_mt", 1, 1, Status::Error),
            failed("linux", "thread_mt", 1, 2, Status::Timeout),
        ];
        let cells = summarize(&recs);
        assert_eq!((cells[0].unavailable, cells[0].failed, cells[0].ok), (2, 0, 0));
        assert_eq!((cells[1].unavailable, cells[1].failed, cells[1].ok), (0, 2, 0));
        assert!(cells.iter().all(|c| c.per_core.is_none() && c.calibrated.is_none() && !c.noisy));
        let p = pairs(&recs);
        assert_eq!((p[0].ratio.as_ref(), p[0].broken_pairs), (None, 2));
    }

    #[test]
    fn summaries_round_trip_through_json() {
        let recs = vec![
            boot("ours", "dupclose", 1, 1, 1000, 2000),
            boot("ours", "dupclose", 1, 2, 2000, 4000),
            boot("linux", "dupclose", 1, 1, 500, 2000),
            failed("linux", "dupclose", 1, 2, Status::Timeout),
        ];
        let res = Results::from_records(recs);
        assert_eq!((res.cells.len(), res.pairs.len()), (2, 1));
        let text = res.to_json();
        let back = Results::from_json(&text).unwrap();
        assert_eq!(back, res);
        // An old file (records only) reads as records with no summaries.
        let old = format!("[{}]", res.records[0].to_json().replace(",\"boot\":1", ""));
        let back = Results::from_json(&old).unwrap();
        assert_eq!((back.records.len(), back.records[0].boot, back.cells.len()), (1, 1, 0));
        assert!(Results::from_json(r#"[{"kind":"other"}]"#).is_err());
    }

    #[test]
    fn scaling_from_medians() {
        let recs = vec![
            boot("linux", "calib", 1, 1, 1000, 1000),
            boot("linux", "calib", 1, 2, 3000, 1000),
            boot("linux", "calib", 1, 3, 2000, 1000),
            boot("linux", "calib", 2, 1, 1800, 1000),
            boot("linux", "calib", 2, 2, 1900, 1000),
        ];
        let cells = summarize(&recs);
        // Medians 2000 and 1850 per ms, over 1 and 2 vCPUs.
        let s = scaling_of_medians(&cells, "linux", "calib", 1, 2, |c| c.per_core.as_ref()).unwrap();
        assert!((s - 0.4625).abs() < 1e-12);
        assert_eq!(scaling_of_medians(&cells, "ours", "calib", 1, 2, |c| c.per_core.as_ref()), None);
        // Per round: boot 1 1800/1000, boot 2 1900/3000; boot 3 has no 2-vCPU boot.
        let r = scaling_per_round(&recs, "linux", "calib", 1, 2, Record::per_core_throughput).unwrap();
        assert_eq!(r.n, 2);
        assert!((r.max - 0.9).abs() < 1e-9 && (r.min - 950.0 / 3000.0).abs() < 1e-9);
    }

    /// Catches: a divisor that differs between the systems (ours per worker, Linux per vCPU),
    /// the per-service-core view missing where workers differ, pairs taken against one Linux
    /// only, and the host's load left out of `noisy`.
    #[test]
    fn one_divisor_both_baselines_and_the_host_load() {
        use crate::guest::record::HostLoad;
        let host = |load: f64| Some(HostLoad { load1_start: load, load1_end: load, cpus: 2, qemu_cpu_s: 1.0 });
        // ours: 1 worker (a service core) on 2 vCPUs; Linux: 2 workers on 2 vCPUs; same ops and time.
        let mut ours = boot("ours", "tcp_accept", 2, 1, 2000, 1000);
        ours.workers = Some(1);
        let linux = boot("linux", "tcp_accept", 2, 1, 2000, 1000);
        let tuned = boot("linux-tuned", "tcp_accept", 2, 1, 4000, 1000);
        assert_eq!(ours.per_core_throughput(), linux.per_core_throughput(), "the same work per vCPU is the same figure");
        assert_eq!(ours.per_core_throughput(), Some(1_000_000.0));
        assert_eq!(ours.per_service_core_throughput(), Some(2_000_000.0));
        assert_eq!(linux.per_service_core_throughput(), None, "only where workers differ from vCPUs");
        let recs = vec![ours.clone(), linux.clone(), tuned.clone()];
        let p = pairs(&recs);
        let r = |l: &str| p.iter().find(|x| x.linux == l).and_then(|x| x.ratio.as_ref()).map(|s| s.median);
        assert_eq!((r("linux"), r("linux-tuned")), (Some(1.0), Some(0.5)));
        assert!(!p.iter().any(|x| x.noisy));
        // The same boots with the host's load apart by more than its 2 CPUs: noisy.
        let (mut o2, mut l2) = (ours, linux);
        (o2.host, l2.host) = (host(3.0), host(6.0));
        let p = pairs(&[o2.clone(), l2.clone()]);
        assert!(p[0].noisy, "a pair booted under loads 3 and 6 on 2 CPUs");
        l2.host = host(4.5);
        assert!(!pairs(&[o2.clone(), l2.clone()])[0].noisy, "1.5 apart is within 2 CPUs");
        let mut o3 = o2.clone();
        (o3.boot, o3.host) = (2, host(9.0));
        let c = summarize(&[o2, o3]);
        assert!(c[0].noisy && c[0].host_load1.as_ref().unwrap().max == 9.0, "a cell whose boots ran at loads 3 and 9");
    }
}
