//! The model's 2-core smoke run (`cargo xtask model smoke`, and a suite of `cargo xtask test`):
//! ours' Metis `wri` reduce phase on 2 vCPUs under cachesim amd16, booted twice. The two runs
//! must give identical counts (the exact mode), and the model's numbers must match the
//! committed expectation (xtask/src/model/smoke-expected.txt) within [`TOLERANCE`]: counts
//! move a little when the kernel or the library OS changes, and `--bless` rewrites the file
//! when such a move is meant.

use std::fmt::Write;
use std::time::Duration;

use super::cycles::{RunCounts, BASE_CPI};
use super::runs::{parse_cached, RunKey, Runs};
use crate::host::outcome::TestTally;

const EXPECTED: &str = "xtask/src/model/smoke-expected.txt";

/// How far a number may move from the expectation before the check fails.
pub const TOLERANCE: f64 = 0.02;

fn key() -> RunKey {
    RunKey { system: "ours", workload: "metis_wri", smp: 2, params: "size=524288 seed=1 prep=0 phase=2".into() }
}

/// The numbers the smoke run checks, by name, in a stable order.
pub fn numbers(r: &RunCounts) -> Result<Vec<(String, f64)>, String> {
    let mut v = Vec::new();
    for c in &r.cores {
        v.push((format!("vcpu{}_insns", c.vcpu), c.insns as f64));
        v.push((format!("vcpu{}_l2_miss", c.vcpu), c.l2_miss as f64));
        v.push((format!("vcpu{}_l3_miss", c.vcpu), c.l3_miss as f64));
        v.push((format!("vcpu{}_cycles", c.vcpu), c.cycles(&r.lat, BASE_CPI)?.round()));
    }
    v.push(("phase_cycles".into(), r.phase_cycles(1.0, BASE_CPI)?.round()));
    v.push(("phase_cycles_lat0.5".into(), r.phase_cycles(0.5, BASE_CPI)?.round()));
    v.push(("phase_cycles_lat2".into(), r.phase_cycles(2.0, BASE_CPI)?.round()));
    v.push(("ops".into(), r.ops.unwrap_or(0) as f64));
    Ok(v)
}

/// `name value` lines; `#` starts a comment.
pub fn parse_expected(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut v = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut w = l.split_whitespace();
        let (Some(k), Some(x), None) = (w.next(), w.next(), w.next()) else {
            return Err(format!("{EXPECTED}:{}: want `name value`", i + 1));
        };
        v.push((k.to_string(), x.parse::<f64>().map_err(|_| format!("{EXPECTED}:{}: `{x}` is not a number", i + 1))?));
    }
    Ok(v)
}

/// Each expected number against the measured one: (name, expected, measured, ok).
pub fn compare(expected: &[(String, f64)], got: &[(String, f64)]) -> Vec<(String, f64, Option<f64>, bool)> {
    let mut rows: Vec<(String, f64, Option<f64>, bool)> = expected
        .iter()
        .map(|(k, e)| {
            let g = got.iter().find(|(n, _)| n == k).map(|(_, x)| *x);
            let ok = g.is_some_and(|g| if *e == 0.0 { g == 0.0 } else { ((g - e) / e).abs() <= TOLERANCE });
            (k.clone(), *e, g, ok)
        })
        .collect();
    // A number the run has and the expectation lacks is a failure too (a new vCPU, say).
    for (k, g) in got.iter().filter(|(k, _)| !expected.iter().any(|(n, _)| n == k)) {
        rows.push((k.clone(), f64::NAN, Some(*g), false));
    }
    rows
}

/// Two boots and the model's numbers; the first error if the boots disagree.
fn measure() -> Result<(Vec<(String, f64)>, String), String> {
    let mut runs = Runs::new(Duration::from_secs(600), true);
    let k = key();
    let a = runs.boot(&k)?;
    let b = runs.boot(&k)?;
    let (ra, rb) = (parse_cached(&format!("ops {}\n{}", a.1.map(|o| o.to_string()).unwrap_or("none".into()), a.0))?, parse_cached(&format!("ops {}\n{}", b.1.map(|o| o.to_string()).unwrap_or("none".into()), b.0))?);
    let (na, nb) = (numbers(&ra)?, numbers(&rb)?);
    let mut note = String::new();
    if na != nb {
        let diff: Vec<String> = na.iter().zip(&nb).filter(|(x, y)| x != y).map(|(x, y)| format!("{} {} / {}", x.0, x.1, y.1)).collect();
        let _ = write!(note, "two boots gave different counts: {}", diff.join(", "));
    }
    Ok((na, note))
}

/// `cargo xtask model smoke [--bless]`.
pub fn command(bless: bool) -> Result<(), String> {
    let (got, note) = measure()?;
    if !note.is_empty() {
        return Err(note);
    }
    let path = crate::host::env::workspace_root().join(EXPECTED);
    if bless {
        let k = key();
        let mut t = format!(
            "# cargo xtask model smoke: {} {} at {} vCPUs ({}), cachesim amd16, base CPI {BASE_CPI}.\n# Checked within {} % by `cargo xtask test` (suite model-smoke); rewrite with `cargo xtask model smoke --bless`.\n",
            k.system,
            k.workload,
            k.smp,
            k.params,
            TOLERANCE * 100.0
        );
        for (n, x) in &got {
            let _ = writeln!(t, "{n} {x}");
        }
        std::fs::write(&path, t).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("wrote {}", path.display());
        return Ok(());
    }
    let t = check(&got)?;
    if t.failed > 0 {
        return Err(format!("model smoke: {} of {} numbers outside {} % of {EXPECTED}", t.failed, t.failed + t.passed, TOLERANCE * 100.0));
    }
    Ok(())
}

fn check(got: &[(String, f64)]) -> Result<TestTally, String> {
    let path = crate::host::env::workspace_root().join(EXPECTED);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let expected = parse_expected(&text)?;
    if expected.is_empty() {
        return Err(format!("{EXPECTED}: no numbers"));
    }
    let mut t = TestTally::default();
    for (k, e, g, ok) in compare(&expected, got) {
        println!("   model smoke {k:<22} expected {e:>14} got {:>14} {}", g.map(|x| x.to_string()).unwrap_or("-".into()), if ok { "ok" } else { "FAILED" });
        t.add(if ok { TestTally::PASS } else { TestTally::FAIL });
    }
    Ok(t)
}

/// The suite of `cargo xtask test`: the two boots must agree (one check) and every number
/// must be within the tolerance of the expectation (one check each).
pub fn ci_check() -> Result<TestTally, String> {
    println!("== model smoke (ours metis_wri reduce, 2 vCPUs, cachesim amd16, two boots)");
    let (got, note) = measure()?;
    let mut t = TestTally::default();
    if note.is_empty() {
        println!("   model smoke deterministic: two boots identical ok");
        t.add(TestTally::PASS);
    } else {
        println!("   model smoke deterministic FAILED: {note}");
        t.add(TestTally::FAIL);
    }
    t.add(check(&got)?);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectation_parses_and_compares() {
        let e = parse_expected("# c\nphase_cycles 1000\nops 5\n").unwrap();
        assert_eq!(e, vec![("phase_cycles".to_string(), 1000.0), ("ops".to_string(), 5.0)]);
        assert!(parse_expected("x\n").is_err());
        assert!(parse_expected("x y\n").is_err());
        let got = vec![("phase_cycles".to_string(), 1019.0), ("ops".to_string(), 5.0)];
        assert!(compare(&e, &got).iter().all(|r| r.3), "1.9 % is inside");
        let got = vec![("phase_cycles".to_string(), 1021.0), ("ops".to_string(), 5.0)];
        assert!(!compare(&e, &got)[0].3, "2.1 % is outside");
        let got = vec![("ops".to_string(), 5.0), ("new".to_string(), 1.0)];
        let rows = compare(&e, &got);
        assert!(!rows[0].3, "a missing number fails");
        assert!(!rows.last().unwrap().3, "an unexpected number fails");
    }

    #[test]
    fn the_committed_expectation_is_well_formed() {
        let t = std::fs::read_to_string(crate::host::env::workspace_root().join(EXPECTED)).unwrap();
        let e = parse_expected(&t).unwrap();
        for k in ["vcpu0_cycles", "vcpu1_cycles", "phase_cycles", "ops"] {
            assert!(e.iter().any(|(n, x)| n == k && *x > 0.0), "{k}");
        }
    }
}
