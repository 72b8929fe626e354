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
        out.push(Measured { bench: cols[0].to_string(), smp, ratio: si(cols[7]), ours_per_core: si(cols[4]) });
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

/// Model throughput per vCPU: operations / (slowest core's model seconds × vCPUs).
fn per_core(r: &RunCounts, smp: u32, scale: f64) -> Option<f64> {
    let s = r.seconds(scale, BASE_CPI).ok()?;
    r.ops.filter(|&o| o > 0).map(|o| o as f64 / s / smp as f64)
}

pub fn command(runs: &mut Runs, only: Option<&str>, scale: f64, out: &Path) -> Result<(), String> {
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
    let mut t = String::new();
    let _ = writeln!(t, "model against measurement (evidence: model (exact counts + amd16 cache model), base CPI {BASE_CPI}, latencies × {scale}; measured: {MATRIX}, TCG timing, calibrated medians of 5 boots)");
    let _ = writeln!(t, "{:<26} {:>5} {:>10} {:>10} {:>8} {:>6}", "benchmark", "vCPUs", "model o/L", "measured", "error", "±25%");
    let (mut within, mut compared) = (0, 0);
    let mut notes = Vec::new();
    let mut scaling = Vec::new();
    for b in benches {
        if let Some(why) = not_modelled(b) {
            notes.push(format!("{b}: not modelled: {why}"));
            continue;
        }
        let mut ours_pc = [None, None];
        for smp in [1u32, 2] {
            let Some(m) = rows.iter().find(|r| r.bench == b && r.smp == smp) else { continue };
            let get = |runs: &mut Runs, system: &'static str| -> Result<RunCounts, String> {
                // Catalog defaults; `workload` needs a 'static name: the matrix's names are the
                // catalog's.
                let name = testdefs::bench_catalog::find(b).map(|s| s.name).ok_or_else(|| format!("{b}: not in the benchmark catalog"))?;
                // Linux has one TCP service; the matrix sets both of ours' modes beside it.
                let name = if system == "linux" && name == "tcp_accept_polling" { "tcp_accept" } else { name };
                runs.get(&RunKey { system, workload: name, smp, params: String::new() })
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
            let err = model.zip(m.ratio).map(|(mo, me)| relative_error(mo, me));
            if let Some(e) = err {
                compared += 1;
                if e.abs() <= 0.25 {
                    within += 1;
                }
            }
            let _ = writeln!(
                t,
                "{b:<26} {smp:>5} {:>10} {:>10} {:>8} {:>6}",
                model.map(|x| format!("{x:.2}")).unwrap_or("-".into()),
                m.ratio.map(|x| format!("{x:.2}")).unwrap_or("-".into()),
                err.map(|e| format!("{:+.0}%", e * 100.0)).unwrap_or("-".into()),
                err.map(|e| if e.abs() <= 0.25 { "yes" } else { "NO" }).unwrap_or("-")
            );
        }
        if let [Some((m1, me1)), Some((m2, me2))] = ours_pc {
            scaling.push(format!("{b:<26} model {:.2} measured (raw) {:.2}", m2 / m1, me2 / me1));
        }
    }
    let _ = writeln!(t, "within ±25 %: {within} of {compared} compared ({:.0} %)", if compared > 0 { within as f64 * 100.0 / compared as f64 } else { 0.0 });
    if !scaling.is_empty() {
        let _ = writeln!(t, "\nours' per-core scaling 2/1 vCPUs:");
        for s in scaling {
            let _ = writeln!(t, "{s}");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_rows_parse() {
        let t = "| benchmark | vCPUs | a | b | c | d | e | f |\n| --- | ---: |\n\
                 | nullsyscall | 1 | 1.2M [1M–2M] | 394 | 5.04M [4M–6M] noisy | 58.0 | 4.1 [3–5] | 4.20 [3.9–4.5] noisy |\n\
                 | webd_x | 1 | unavailable | - | unavailable | - | - | - |\n";
        let m = parse_matrix(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0], Measured { bench: "nullsyscall".into(), smp: 1, ratio: Some(4.20), ours_per_core: Some(5.04e6) });
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
