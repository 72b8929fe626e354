//! The sharing audit of a Linux program on this system (`cargo xtask exec --audit --smp N
//! [--file GUEST=HOST]... PROGRAM ARGS`, docs/linux-abi.md "Sharing audit"): the program runs
//! under the runtime with `--mark` (the region is the whole run: load, the program and every
//! process it forks, exit) and the `sharing` plugin in the exact mode, kernel accesses only;
//! the report lists every kernel cache line written by one vCPU and touched by another, by the
//! kernel symbol of its address (or, for heap and direct-map memory, the function that first
//! wrote it), and sums them by symbol.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::ExecRequest;
use crate::guest::measure::System;

/// One shared kernel line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub symbol: String,
    pub writer: String,
    pub readers: String,
    pub writers: String,
    pub transfers: u64,
}

/// The audit's result: every shared kernel line, and the program's exit status.
#[derive(Debug, Clone)]
pub struct Audit {
    pub status: i32,
    pub lines_kernel: u64,
    pub shared_kernel: u64,
    pub transfers_kernel: u64,
    pub lines: Vec<Line>,
}

/// Lines summed by symbol (heap lines by the function that first wrote them), most transfers
/// first: (symbol, lines, transfers).
pub fn by_symbol(lines: &[Line]) -> Vec<(String, u64, u64)> {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in lines {
        let key = if l.symbol.starts_with('[') { format!("[heap] written by {}", l.writer.split('+').next().unwrap_or("?")) } else { l.symbol.split('+').next().unwrap_or("?").to_string() };
        let e = m.entry(key).or_default();
        e.0 += 1;
        e.1 += l.transfers;
    }
    let mut v: Vec<(String, u64, u64)> = m.into_iter().map(|(k, (n, t))| (k, n, t)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    v
}

/// Run `req` on this system under the sharing plugin (kernel accesses only).
pub fn audit(req: &ExecRequest) -> Result<Audit, String> {
    let built = crate::guest::plugin::build()?;
    let runs = crate::guest::plugin::artifact_dir().join("runs");
    std::fs::create_dir_all(&runs).map_err(|e| format!("{}: {e}", runs.display()))?;
    let prog = req.program.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let out: PathBuf = runs.join(format!("sharing-exec-{prog}-{}.txt", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let arg = format!("{},kernel_only=on,out={}", built.plugin("sharing").display(), out.display());
    let run = super::ours::run_measured_extra(req, &arg, &super::ours::Extra { kernel: String::new(), runtime: "--mark".into() })?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("the sharing plugin wrote no report ({}: {e})", out.display()))?;
    let _ = std::fs::remove_file(&out);
    if !text.lines().any(|l| l == "end") {
        return Err("sharing: its report was cut short".into());
    }
    let report = crate::guest::plugin::parse_records(&text);
    let head = report.first().ok_or("sharing: empty report")?;
    if head.u("starts") == 0 {
        return Err("the runtime never executed the region marker (--mark)".into());
    }
    let syms = crate::guest::measure::symbols_for(System::Ours)?;
    let lines = report
        .iter()
        .filter(|r| r.kind == "line" && r.get("mode") != Some("u"))
        .map(|r| Line {
            symbol: syms.name(r.u("vaddr")).unwrap_or_else(|| "[heap/direct map]".into()),
            writer: syms.name(r.u("pc")).unwrap_or_else(|| "?".into()),
            readers: r.get("readers").unwrap_or("?").to_string(),
            writers: r.get("writers").unwrap_or("?").to_string(),
            transfers: r.u("transfers"),
        })
        .collect();
    Ok(Audit {
        status: run.status,
        lines_kernel: head.u("lines_kernel"),
        shared_kernel: head.u("shared_kernel"),
        transfers_kernel: head.u("transfers_kernel"),
        lines,
    })
}

/// `cargo xtask exec --audit ...`: print the report.
pub fn command(req: &ExecRequest) -> Result<(), String> {
    let a = audit(req)?;
    println!(
        "sharing audit (kernel lines, exact mode): {} {} on {} vCPUs: exit status {}; {} kernel lines touched, {} written by one vCPU and touched by another, {} transfers",
        req.program.display(),
        req.args.join(" "),
        req.smp,
        a.status,
        a.lines_kernel,
        a.shared_kernel,
        a.transfers_kernel
    );
    println!("\n{:<48} {:<44} {:>8} {:>8} {:>6}", "data (symbol of the address)", "first writer (code)", "readers", "writers", "xfers");
    for l in &a.lines {
        println!("{:<48} {:<44} {:>8} {:>8} {:>6}", l.symbol, l.writer, l.readers, l.writers, l.transfers);
    }
    println!("\nby symbol:");
    for (s, n, t) in by_symbol(&a.lines) {
        println!("  {s:<60} {n:>5} lines {t:>7} transfers");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_sum_by_symbol_and_heap_by_writer() {
        let l = |s: &str, w: &str, t| Line { symbol: s.into(), writer: w.into(), readers: "0x3".into(), writers: "0x1".into(), transfers: t };
        let v = by_symbol(&[l("FRAMES+0x40", "x", 3), l("FRAMES+0x80", "y", 2), l("[heap/direct map]", "kernel::a::b+0x10", 9)]);
        assert_eq!(v, vec![("[heap] written by kernel::a::b".to_string(), 1, 9), ("FRAMES".to_string(), 2, 5)]);
    }
}
