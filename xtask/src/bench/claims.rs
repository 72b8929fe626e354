//! The README's measured numbers come from a results file the tool wrote, not from a hand:
//! each one is followed by a marker naming the file and the value in it,
//!
//! ```text
//! 6.6×<!-- bench: docs/results/FILE.json pair linux-tuned dupclose@1 calibrated_ratio -->
//! ```
//!
//! and `cargo test -p xtask` reads that file through the same reader as `--report` (schema,
//! summaries recomputed and compared), computes the value and checks that the README shows it
//! rounded as written. Every ratio the README quotes (a number followed by `×`) must carry a
//! marker. Queries (`SYS` = ours, linux, linux-tuned; `B@N` = benchmark at N vCPUs):
//!
//! - `pair LINUX B@N ratio|calibrated_ratio`: the median of the paired ours/LINUX ratios;
//! - `cell SYS B@N per_core_throughput|calibrated_throughput`: a cell's median;
//! - `insns SYS B@N`: instructions per operation (exact);
//! - `insns_ratio LINUX B@N`: ours' instructions per operation over LINUX's.
//!
//! `LINUX` may be `faster`: the baseline least favourable to ours, the one a claim must hold
//! against (the smallest ours/Linux median ratio; the Linux with the fewest instructions).
//!
//! A marker may also name a sharing audit's report (the JSON `cargo xtask plugin audit`
//! writes, committed under docs/plots/): `sharing transfers_kernel_per_op` is its kernel line
//! transfers between vCPUs divided by its operations, `sharing transfers_per_op` kernel and
//! user together.

use std::path::Path;

use super::stats::{self, Results};

/// The value a marker's query names, from `r`.
pub fn value(r: &Results, query: &str) -> Result<f64, String> {
    let w: Vec<&str> = query.split_whitespace().collect();
    let at = |s: &str| -> Result<(String, u32), String> {
        let (b, n) = s.split_once('@').ok_or_else(|| format!("`{s}` is not BENCH@VCPUS"))?;
        Ok((b.to_string(), n.parse().map_err(|_| format!("`{n}` is not a vCPU count"))?))
    };
    let insns = |sys: &str, b: &str, n: u32| {
        r.records.iter().filter(|x| x.system == sys && x.benchmark == b && x.cores == n).find_map(|x| x.instructions_per_op()).ok_or_else(|| format!("no instruction count for {sys} {b}@{n}"))
    };
    match w.as_slice() {
        ["pair", "faster", _, _] | ["insns_ratio", "faster", _] => {
            // The same query against each baseline; the value least favourable to ours.
            let q = |l: &str| w.iter().map(|x| if *x == "faster" { l } else { x }).collect::<Vec<_>>().join(" ");
            let vals: Vec<f64> = crate::guest::record::LINUX_NAMES.iter().filter_map(|l| value(r, &q(l)).ok()).collect();
            let pick = if w[0] == "pair" { vals.iter().copied().min_by(f64::total_cmp) } else { vals.iter().copied().max_by(f64::total_cmp) };
            pick.ok_or_else(|| format!("no Linux baseline gives `{}`", q("LINUX")))
        }
        ["pair", linux, bn, what] => {
            let (b, n) = at(bn)?;
            let p = r.pairs.iter().find(|p| p.linux == *linux && p.benchmark == b && p.cores == n).ok_or_else(|| format!("no pair ours/{linux} {b}@{n}"))?;
            let s = match *what {
                "ratio" => p.ratio.as_ref(),
                "calibrated_ratio" => p.calibrated_ratio.as_ref(),
                other => return Err(format!("unknown pair value `{other}`")),
            };
            s.map(|s| s.median).ok_or_else(|| format!("pair ours/{linux} {b}@{n} has no {what}"))
        }
        ["cell", sys, bn, what] => {
            let (b, n) = at(bn)?;
            let c = r.cells.iter().find(|c| c.system == *sys && c.benchmark == b && c.cores == n).ok_or_else(|| format!("no cell {sys} {b}@{n}"))?;
            let s = match *what {
                "per_core_throughput" => c.per_core.as_ref(),
                "calibrated_throughput" => c.calibrated.as_ref(),
                other => return Err(format!("unknown cell value `{other}`")),
            };
            s.map(|s| s.median).ok_or_else(|| format!("cell {sys} {b}@{n} has no {what}"))
        }
        ["insns", sys, bn] => {
            let (b, n) = at(bn)?;
            insns(sys, &b, n)
        }
        ["insns_ratio", linux, bn] => {
            let (b, n) = at(bn)?;
            Ok(insns("ours", &b, n)? / insns(linux, &b, n)?)
        }
        _ => Err(format!("unknown query `{query}`")),
    }
}

/// One marker of a text: the number shown before it, its file and its query.
#[derive(Debug, PartialEq)]
pub struct Marker {
    pub shown: String,
    pub file: String,
    pub query: String,
}

const OPEN: &str = "<!-- bench: ";

/// Every marker in `text`, with the number that ends right before it (digits, a decimal
/// point, an SI suffix k or M, and `×`).
pub fn markers(text: &str) -> Result<Vec<Marker>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let before = &rest[..i];
        let after = &rest[i + OPEN.len()..];
        let end = after.find("-->").ok_or("a `<!-- bench:` marker is not closed")?;
        let body = after[..end].trim();
        let (file, query) = body.split_once(' ').ok_or_else(|| format!("marker `{body}` has no query"))?;
        let shown: String = before.chars().rev().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | '×' | 'k' | 'M')).collect::<Vec<_>>().into_iter().rev().collect();
        if !shown.chars().any(|c| c.is_ascii_digit()) {
            return Err(format!("marker `{body}` follows no number"));
        }
        out.push(Marker { shown, file: file.to_string(), query: query.trim().to_string() });
        rest = &after[end + 3..];
    }
    Ok(out)
}

/// Whether `shown` (as the README prints it: `6.6×`, `0.25`, `3.53k`) is `v` rounded to the
/// digits shown.
pub fn agrees(shown: &str, v: f64) -> Result<(), String> {
    let s = shown.trim_end_matches('×');
    let (num, scale) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    let x: f64 = num.parse().map_err(|_| format!("`{shown}` is not a number"))?;
    let decimals = num.split_once('.').map(|(_, d)| d.len()).unwrap_or(0) as i32;
    let want = (v / scale * 10f64.powi(decimals)).round() / 10f64.powi(decimals);
    if (want - x).abs() < 1e-9 {
        Ok(())
    } else {
        Err(format!("shows {shown}, the file gives {want}{}", &s[num.len()..]))
    }
}

/// Every ratio (`N×`) in `text` that no marker follows.
pub fn unmarked_ratios(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices('×') {
        let before = &text[..i];
        let digits: String = before.chars().rev().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        if digits.is_empty() {
            continue;
        }
        if !text[i + '×'.len_utf8()..].starts_with(OPEN) {
            let num: String = digits.chars().rev().collect();
            let line = text[..i].lines().count();
            out.push(format!("line {line}: {num}× has no `{}` marker", OPEN.trim()));
        }
    }
    out
}

/// Check every marker of `text` against its file under `root` (and that no ratio is
/// unmarked): the problems, one line each.
pub fn check(text: &str, root: &Path) -> Vec<String> {
    let mut problems = unmarked_ratios(text);
    let ms = match markers(text) {
        Ok(m) => m,
        Err(e) => return vec![e],
    };
    let mut files: Vec<(String, Result<Results, String>)> = Vec::new();
    for m in &ms {
        if let Some(what) = m.query.strip_prefix("sharing ") {
            let path = root.join(&m.file);
            let v = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display())).and_then(|t| sharing_value(&t, what.trim()));
            if let Err(e) = v.and_then(|v| agrees(&m.shown, v)) {
                problems.push(format!("`{}` ({} {}): {e}", m.shown, m.file, m.query));
            }
            continue;
        }
        if !files.iter().any(|(f, _)| *f == m.file) {
            let path = root.join(&m.file);
            let r = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display())).and_then(|t| read_checked(&t).map_err(|e| format!("{}: {e}", m.file)));
            files.push((m.file.clone(), r));
        }
        let Some((_, r)) = files.iter().find(|(f, _)| *f == m.file) else { continue };
        match r.as_ref().map_err(|e| e.clone()).and_then(|r| value(r, &m.query)) {
            Ok(v) => {
                if let Err(e) = agrees(&m.shown, v) {
                    problems.push(format!("`{}` ({} {}): {e}", m.shown, m.file, m.query));
                }
            }
            Err(e) => problems.push(format!("`{}` ({} {}): {e}", m.shown, m.file, m.query)),
        }
    }
    problems
}

/// The value `what` of a sharing audit's JSON report (`cargo xtask plugin audit`).
fn sharing_value(text: &str, what: &str) -> Result<f64, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if v["plugin"] != "sharing" {
        return Err("not a sharing audit's report (its `plugin` is not `sharing`)".into());
    }
    let ops = v["ops"].as_u64().filter(|&o| o > 0).ok_or("the report has no operations")?;
    let field = |k: &str| v["summary"][k].as_u64().ok_or_else(|| format!("the report's summary has no `{k}`"));
    let transfers = match what {
        "transfers_kernel_per_op" => field("transfers_kernel")?,
        "transfers_per_op" => field("transfers_kernel")? + field("transfers_user")?,
        other => return Err(format!("unknown sharing value `{other}`")),
    };
    Ok(transfers as f64 / ops as f64)
}

/// A results file as `--report` reads it: the schema, and its summaries what its boots give.
fn read_checked(text: &str) -> Result<Results, String> {
    let r = Results::from_json(text)?;
    let again = Results::from_records(r.records.clone());
    if r.run.as_ref().map(|i| i.version).unwrap_or(1) >= 3 && (again.cells != r.cells || again.pairs != r.pairs) {
        return Err("its summary records are not what its boot records give (edited by hand?)".into());
    }
    if r.run.as_ref().map(|i| i.version).unwrap_or(1) < stats::RESULTS_VERSION {
        return Err("written before per-vCPU throughput (version 3): rerun it".into());
    }
    Ok(again_with_run(r, again))
}

fn again_with_run(r: Results, again: Results) -> Results {
    Results { run: r.run, ..again }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README as committed: every marker agrees with its file, every ratio has one.
    #[test]
    fn readme_numbers_come_from_results_files() {
        let root = crate::host::env::workspace_root();
        let text = std::fs::read_to_string(root.join("README.md")).unwrap();
        let problems = check(&text, &root);
        assert!(problems.is_empty(), "README.md:\n{}", problems.join("\n"));
        assert!(!markers(&text).unwrap().is_empty(), "the README quotes measured numbers: they carry markers");
    }

    /// Catches: a marker that is never compared, a number typed by hand beside a marker, a
    /// ratio without a marker, rounding read wrongly.
    #[test]
    fn a_hand_typed_or_unmarked_number_is_caught() {
        assert!(agrees("6.6×", 6.64).is_ok());
        assert!(agrees("6.6×", 6.66).is_err());
        assert!(agrees("0.25", 0.249).is_ok());
        assert!(agrees("3.53k", 3534.0).is_ok());
        assert!(agrees("3.5k", 3534.0).is_ok() && agrees("3.6k", 3534.0).is_err());
        let m = markers("rate 6.6×<!-- bench: a.json pair linux x@1 ratio --> and 0.25<!-- bench: a.json insns ours x@1 -->").unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].shown.as_str(), m[0].file.as_str(), m[0].query.as_str()), ("6.6×", "a.json", "pair linux x@1 ratio"));
        assert_eq!(m[1].shown, "0.25");
        assert_eq!(unmarked_ratios("a 2.5× b 3×<!-- bench: f q --> c"), ["line 1: 2.5× has no `<!-- bench:` marker"]);
        assert!(markers("text <!-- bench: f q -->").is_err(), "a marker must follow a number");
        // Against a real results file: the committed one, its values and a wrong one.
        let root = crate::host::env::workspace_root();
        let text = std::fs::read_to_string(root.join("README.md")).unwrap();
        let first = markers(&text).unwrap().into_iter().next().expect("a marker in the README");
        let wrong = format!("9999.5×{OPEN}{} {} -->", first.file, first.query);
        let p = check(&wrong, &root);
        assert!(p.len() == 1 && p[0].contains("the file gives"), "{p:?}");
        assert!(!check(&format!("1×{OPEN}{} nosuch query -->", first.file), &root).is_empty());
        assert!(!check(&format!("1×{OPEN}docs/nosuch.json pair linux x@1 ratio -->"), &root).is_empty());
    }

    /// Catches: a sharing audit's number typed by hand or rounded wrongly, a report of another
    /// plugin taken for a sharing audit, an unknown value accepted.
    #[test]
    fn a_sharing_audit_number_comes_from_its_report() {
        let report = r#"{"plugin":"sharing","ops":100,"summary":{"transfers_kernel":2777,"transfers_user":109}}"#;
        assert_eq!(sharing_value(report, "transfers_kernel_per_op"), Ok(27.77));
        assert_eq!(sharing_value(report, "transfers_per_op"), Ok(28.86));
        assert!(sharing_value(report, "lines").is_err());
        assert!(sharing_value(&report.replace("sharing", "cachesim"), "transfers_per_op").is_err());
        assert!(sharing_value(&report.replace("100", "0"), "transfers_per_op").is_err());
        let dir = std::env::temp_dir().join(format!("claims-sharing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.json"), report).unwrap();
        assert!(check(&format!("27.8{OPEN}a.json sharing transfers_kernel_per_op -->"), &dir).is_empty());
        let p = check(&format!("27.7{OPEN}a.json sharing transfers_kernel_per_op -->"), &dir);
        assert!(p.len() == 1 && p[0].contains("the file gives 27.8"), "{p:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
