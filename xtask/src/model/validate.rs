//! `cargo xtask model validate`: the model's ours/Linux throughput ratio at 1 and 2 vCPUs
//! beside the measured calibrated medians of the benchmark matrix
//! (docs/plots/bench-table-boots5.txt, `cargo xtask bench --smp 1,2 --boots 5`), and ours' 2/1
//! per-core scaling beside the matrix's (raw medians). Nothing is fitted: the base CPI and the
//! latencies are the figures' own.

use std::fmt::Write;
use std::path::Path;

use super::cycles::{relative_error, RunCounts, BASE_CPI};
use super::runs::{RunKey, Runs};

/// The matrix the model is checked against (its header says how it was measured).
const MATRIX: &str = "docs/plots/bench-table-boots5.txt";

/// One benchmark at one vCPU count of the matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub bench: String,
    pub smp: u32,
    /// ours/Linux calibrated, median.
    pub ratio: Option<f64>,
    /// Ours' ops/s per core, median (for the 2/1 scaling).
    pub ours_per_core: Option<f64>,
    /// Instructions per operation (insncount, whole marked region): Linux, ours.
    pub insns_per_op: (Option<f64>, Option<f64>),
}

/// `1.23k` → 1230, `4.5M` → 4.5e6; `-` or `unavailable` → None.
fn si(v: &str) -> Option<f64> {
    let w = v.split_whitespace().next()?;
    let (num, mult) = match w.chars().last()? {
        'k' => (&w[..w.len() - 1], 1e3),
        'M' => (&w[..w.len() - 1], 1e6),
        'G' => (&w[..w.len() - 1], 1e9),
        _ => (w, 1.0),
    };
    num.parse::<f64>().ok().map(|x| x * mult)
}

/// The matrix's rows: `| benchmark | vCPUs | linux ops/s/core | linux insns/op | ours ops/s/core
/// | ours insns/op | ours/linux | ours/linux calibrated |`.
pub fn parse_matrix(text: &str) -> Vec<Measured> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("| ")) {
        let cols: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cols.len() < 8 {
            continue;
        }
        let Ok(smp) = cols[1].parse::<u32>() else { continue };
        out.push(Measured { bench: cols[0].to_string(), smp, ratio: si(cols[7]), ours_per_core: si(cols[4]), insns_per_op: (si(cols[3]), si(cols[5])) });
    }
    out
}

/// Why a benchmark of the matrix has no model point, if it has none.
fn not_modelled(bench: &str) -> Option<&'static str> {
    if bench == "calib" {
        Some("the calibration loop, not a benchmark")
    } else if bench.starts_with("webd_") {
        Some("webd is served over the network; the plugin tool runs it only as a custom guest (cargo xtask webd cachesim)")
    } else {
        None
    }
}

/// The model run of benchmark `b` of the matrix on `system` at `smp` vCPUs: the catalog's
/// default parameters (`workload` needs a 'static name: the matrix's names are the catalog's).
fn run_key(b: &str, system: &'static str, smp: u32) -> Option<RunKey> {
    let name = testdefs::bench_catalog::find(b).map(|s| s.name)?;
    // Linux has one TCP service; the matrix sets both of ours' modes beside it.
    let name = if system == "linux" && name == "tcp_accept_polling" { "tcp_accept" } else { name };
    Some(RunKey { system, workload: name, smp, params: String::new() })
}

/// Model throughput per vCPU: operations / (slowest core's model seconds × vCPUs).
fn per_core(r: &RunCounts, smp: u32, scale: f64) -> Option<f64> {
    let s = r.seconds(scale, BASE_CPI).ok()?;
    r.ops.filter(|&o| o > 0).map(|o| o as f64 / s / smp as f64)
}

/// The counts behind one comparison (see the header printed above them).
fn detail_line(b: &str, smp: u32, o: &RunCounts, l: &RunCounts, m: &Measured, scale: f64) -> String {
    let per_op = |r: &RunCounts| r.ops.filter(|&x| x > 0).map(|x| r.total(|c| c.insns) as f64 / x as f64);
    let kshare = |r: &RunCounts| r.total(|c| c.kernel_insns) as f64 / r.total(|c| c.insns).max(1) as f64;
    let mshare = |r: &RunCounts| {
        let lat = r.lat.scaled(scale);
        let mem: f64 = r.cores.iter().filter_map(|c| c.memory_cycles(&lat).ok()).sum();
        mem / (mem + r.total(|c| c.insns) as f64 * BASE_CPI).max(1.0)
    };
    let drift = |matrix: Option<f64>, run: Option<f64>| matrix.zip(run).map(|(a, b)| format!("{:.2}", a / b)).unwrap_or("-".into());
    let (po, pl) = (per_op(o), per_op(l));
    format!(
        "{b:<26} {smp:>2}  insns/op {:>9} / {:<9} kernel {:>4} / {:<4}  misses {:>4} / {:<4}  matrix/run {} / {}",
        po.map(|x| format!("{x:.0}")).unwrap_or("-".into()),
        pl.map(|x| format!("{x:.0}")).unwrap_or("-".into()),
        format!("{:.0}%", kshare(o) * 100.0),
        format!("{:.0}%", kshare(l) * 100.0),
        format!("{:.0}%", mshare(o) * 100.0),
        format!("{:.0}%", mshare(l) * 100.0),
        drift(m.insns_per_op.1, po),
        drift(m.insns_per_op.0, pl)
    )
}

pub fn command(runs: &mut Runs, only: Option<&str>, scale: f64, out: &Path, jobs: usize) -> Result<(), String> {
    let path = crate::host::env::workspace_root().join(MATRIX);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let rows: Vec<Measured> = parse_matrix(&text).into_iter().filter(|m| m.smp <= 2).collect();
    let wanted: Option<Vec<&str>> = only.map(|o| o.split(',').map(str::trim).filter(|s| !s.is_empty()).collect());
    if let Some(w) = &wanted {
        if let Some(bad) = w.iter().find(|b| !rows.iter().any(|r| r.bench == **b)) {
            return Err(format!("--only: `{bad}` is not a benchmark of {MATRIX}"));
        }
    }
    let mut benches: Vec<&str> = Vec::new();
    for r in &rows {
        if !benches.contains(&r.bench.as_str()) && wanted.as_ref().is_none_or(|w| w.contains(&r.bench.as_str())) {
            benches.push(&r.bench);
        }
    }
    // Every point first, so that `--jobs` can boot them side by side.
    let mut keys = Vec::new();
    for &b in benches.iter().filter(|b| not_modelled(b).is_none()) {
        for smp in [1u32, 2].into_iter().filter(|&n| rows.iter().any(|r| r.bench == b && r.smp == n)) {
            for system in ["ours", "linux"] {
                if let Some(k) = run_key(b, system, smp) {
                    keys.push(k);
                }
            }
        }
    }
    runs.prefetch(&keys, jobs)?;
    let mut t = String::new();
    let _ = writeln!(t, "model against measurement (evidence: model (exact counts + amd16 cache model), base CPI {BASE_CPI}, latencies × {scale}; measured: {MATRIX}, TCG timing, calibrated medians of 5 boots)");
    let _ = writeln!(t, "insn-only: the same model with every latency 0 (instructions alone, as if every instruction cost the same: what TCG timing would give if QEMU's cost per guest instruction were one figure); insn err: insn-only against the measurement; why (outside ±25 %): `misses` when the larger gap is between the model and insn-only (the misses the model charges and TCG does not), `per-insn` when it is between insn-only and the measurement (TCG's cost per guest instruction differs between the two systems)");
    let _ = writeln!(t, "{:<26} {:>5} {:>9} {:>9} {:>9} {:>7} {:>5} {:>9} {:>8}", "benchmark", "vCPUs", "model o/L", "insn-only", "measured", "error", "±25%", "insn err", "why");
    let (mut within, mut compared) = (0, 0);
    let mut notes = Vec::new();
    let mut scaling = Vec::new();
    let mut detail = Vec::new();
    let mut pairs: Vec<(String, f64, f64)> = Vec::new();
    for b in benches {
        if let Some(why) = not_modelled(b) {
            notes.push(format!("{b}: not modelled: {why}"));
            continue;
        }
        let mut ours_pc = [None, None];
        for smp in [1u32, 2] {
            let Some(m) = rows.iter().find(|r| r.bench == b && r.smp == smp) else { continue };
            let get = |runs: &mut Runs, system: &'static str| -> Result<RunCounts, String> {
                runs.get(&run_key(b, system, smp).ok_or_else(|| format!("{b}: not in the benchmark catalog"))?)
            };
            let o = get(runs, "ours");
            let l = get(runs, "linux");
            let (o, l) = match (o, l) {
                (Ok(o), Ok(l)) => (o, l),
                (Err(e), _) | (_, Err(e)) => {
                    notes.push(format!("{b} at {smp}: no model point: {e}"));
                    continue;
                }
            };
            let po = per_core(&o, smp, scale);
            ours_pc[smp as usize - 1] = po.zip(m.ours_per_core);
            let model = po.zip(per_core(&l, smp, scale)).map(|(a, b)| a / b);
            let insn_only = per_core(&o, smp, 0.0).zip(per_core(&l, smp, 0.0)).map(|(a, b)| a / b);
            let err = model.zip(m.ratio).map(|(mo, me)| relative_error(mo, me));
            let ierr = insn_only.zip(m.ratio).map(|(mo, me)| relative_error(mo, me));
            if let (Some(io), Some(me)) = (insn_only, m.ratio) {
                pairs.push((format!("{b} {smp}"), io, me));
            }
            if let Some(e) = err {
                compared += 1;
                if e.abs() <= 0.25 {
                    within += 1;
                }
            }
            // Which of the two gaps is larger: the misses the model charges (model against
            // insn-only) or TCG's cost per instruction (insn-only against the measurement).
            let why = match (err, model, insn_only, m.ratio) {
                (Some(e), _, _, _) if e.abs() <= 0.25 => "-",
                (Some(_), Some(mo), Some(io), Some(me)) => {
                    if (mo / io).ln().abs() >= (io / me).ln().abs() {
                        "misses"
                    } else {
                        "per-insn"
                    }
                }
                _ => "-",
            };
            let f2 = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("-".into());
            let pc = |x: Option<f64>| x.map(|e| format!("{:+.0}%", e * 100.0)).unwrap_or("-".into());
            let _ = writeln!(
                t,
                "{b:<26} {smp:>5} {:>9} {:>9} {:>9} {:>7} {:>5} {:>9} {:>8}",
                f2(model),
                f2(insn_only),
                f2(m.ratio),
                pc(err),
                err.map(|e| if e.abs() <= 0.25 { "yes" } else { "NO" }).unwrap_or("-"),
                pc(ierr),
                why
            );
            detail.push(detail_line(b, smp, &o, &l, m, scale));
        }
        if let [Some((m1, me1)), Some((m2, me2))] = ours_pc {
            scaling.push(format!("{b:<26} model {:.2} measured (raw) {:.2}", m2 / m1, me2 / me1));
        }
    }
    let _ = writeln!(t, "within ±25 %: {within} of {compared} compared ({:.0} %)", if compared > 0 { within as f64 * 100.0 / compared as f64 } else { 0.0 });
    if let Some((f, fit_within)) = one_factor(&pairs) {
        let _ = writeln!(
            t,
            "\nTCG-equivalent check (not a validation: one factor fitted across all {} rows, none per benchmark): if TCG's cost per guest instruction differed between the systems by one figure, measured = insn-only × f for every row; the median of measured / insn-only is f = {f:.2}, and with it {fit_within} of {} rows are within ±25 %:",
            pairs.len(),
            pairs.len()
        );
        for (name, io, me) in &pairs {
            let _ = writeln!(t, "  {name:<28} insn-only × f {:>7.2} measured {me:>7.2} error {:+.0}%", io * f, relative_error(io * f, *me) * 100.0);
        }
    }
    if !scaling.is_empty() {
        let _ = writeln!(t, "\nours' per-core scaling 2/1 vCPUs:");
        for s in scaling {
            let _ = writeln!(t, "{s}");
        }
    }
    if !detail.is_empty() {
        let _ = writeln!(t, "\nper run (exact counts of the model runs; per op = all vCPUs' instructions / operations): instructions per op ours / Linux; of them in the kernel ours / Linux; share of the model's cycles that are misses ours / Linux; the matrix's insns/op (2026-11-29) over the model run's, ours / Linux (1.00 = the matrix measured the same code)");
        for d in detail {
            let _ = writeln!(t, "{d}");
        }
    }
    for n in notes {
        let _ = writeln!(t, "{n}");
    }
    let _ = writeln!(t, "plugin runs: {} booted, {} from target/model-cache/", runs.booted, runs.cached);
    print!("{t}");
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let p = out.join(if scale == 1.0 { "validate.txt".to_string() } else { format!("validate-lat{scale}.txt") });
    std::fs::write(&p, t).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    println!("wrote {}", p.display());
    Ok(())
}

/// One factor for all rows (the median of measured / instruction-only: TCG's cost per guest
/// instruction on Linux over ours', if it were one figure per system) and how many rows it
/// brings within ±25 %. None without rows.
pub fn one_factor(pairs: &[(String, f64, f64)]) -> Option<(f64, usize)> {
    let mut q: Vec<f64> = pairs.iter().filter(|(_, io, _)| *io > 0.0).map(|(_, io, me)| me / io).collect();
    if q.is_empty() {
        return None;
    }
    q.sort_by(f64::total_cmp);
    let f = if q.len() % 2 == 1 { q[q.len() / 2] } else { (q[q.len() / 2 - 1] + q[q.len() / 2]) / 2.0 };
    let within = pairs.iter().filter(|(_, io, me)| relative_error(io * f, *me).abs() <= 0.25).count();
    Some((f, within))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_factor_is_the_median_quotient() {
        let p = |io: f64, me: f64| (String::new(), io, me);
        assert_eq!(one_factor(&[]), None);
        // Quotients 0.5, 1, 2: f = 1; rows within ±25 % of insn-only × 1: only the middle one.
        assert_eq!(one_factor(&[p(2.0, 1.0), p(3.0, 3.0), p(1.0, 2.0)]), Some((1.0, 1)));
        // Even count: the mean of the middle two (0.85 and 1.15); with f = 1 the rows at 0.85
        // and 1.15 are within ±25 % (+18 %, −13 %), those at 3 and 0.1 are not.
        let (f, n) = one_factor(&[p(1.0, 0.85), p(1.0, 1.15), p(1.0, 3.0), p(1.0, 0.1)]).unwrap();
        assert!((f - 1.0).abs() < 1e-12);
        assert_eq!(n, 2);
    }

    #[test]
    fn matrix_rows_parse() {
        let t = "| benchmark | vCPUs | a | b | c | d | e | f |\n| --- | ---: |\n\
                 | nullsyscall | 1 | 1.2M [1M–2M] | 394 | 5.04M [4M–6M] noisy | 58.0 | 4.1 [3–5] | 4.20 [3.9–4.5] noisy |\n\
                 | webd_x | 1 | unavailable | - | unavailable | - | - | - |\n";
        let m = parse_matrix(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], Measured { bench: "nullsyscall".into(), smp: 1, ratio: Some(4.20), ours_per_core: Some(5.04e6), insns_per_op: (Some(394.0), Some(58.0)) });
        assert_eq!((m[1].ratio, m[1].ours_per_core), (None, None));
        assert_eq!(si("36.1k [32.8k–68.5k]"), Some(36100.0));
        assert_eq!(si("-"), None);
    }

    #[test]
    fn the_committed_matrix_has_the_figures_benchmarks() {
        let t = std::fs::read_to_string(crate::host::env::workspace_root().join(MATRIX)).unwrap();
        let m = parse_matrix(&t);
        for b in ["metis_wri", "tcp_accept", "mempass_procs", "nullsyscall"] {
            assert!(m.iter().any(|r| r.bench == b && r.smp == 2 && r.ratio.is_some()), "{b}");
        }
        assert!(not_modelled("webd_filesum_random_64k").is_some() && not_modelled("metis_wri").is_none());
    }
}
