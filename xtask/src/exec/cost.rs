//! The same-binary cost comparison: one static Linux program, unmodified, run on this system
//! (the library OS's personality) and on the Linux guest under the insncount plugin in the
//! exact mode (docs/plugins.md), counting the guest instructions between the program's region
//! markers (port 0x501, tools/qemu-plugins/marker.h). `cargo xtask exec --insncount [--system
//! ours|linux|both] PROGRAM ARGS`. The program says how many operations the region held on a
//! line `workload name=NAME ops=N` of its standard output; the per-operation counts divide by
//! it.

use std::path::PathBuf;

use super::command::System;
use super::ExecRequest;

/// One system's count.
#[derive(Debug, Clone, PartialEq)]
pub struct Count {
    pub system: System,
    pub kernel: u64,
    pub user: u64,
    /// From the program's `workload ... ops=N` line.
    pub ops: Option<u64>,
    pub name: Option<String>,
}

impl Count {
    pub fn per_op(&self) -> Option<(f64, f64)> {
        self.ops.filter(|n| *n > 0).map(|n| (self.kernel as f64 / n as f64, self.user as f64 / n as f64))
    }
}

/// The `workload name=NAME ops=N` line of a program's output.
pub fn workload_line(stdout: &str) -> (Option<String>, Option<u64>) {
    for l in stdout.lines().filter(|l| l.starts_with("workload ")) {
        let recs = crate::guest::plugin::parse_records(l);
        if let Some(r) = recs.first() {
            return (r.get("name").map(|s| s.to_string()), r.get("ops").and_then(|v| v.parse().ok()));
        }
    }
    (None, None)
}

/// Run `req` on `system` under insncount; the program must exit 0 and execute its markers.
pub fn count(system: System, req: &ExecRequest) -> Result<Count, String> {
    if req.smp != 1 {
        return Err("--insncount: 1 vCPU only (the exact mode's counts per vCPU are summed over one)".into());
    }
    let built = crate::guest::plugin::build()?;
    let runs = crate::guest::plugin::artifact_dir().join("runs");
    std::fs::create_dir_all(&runs).map_err(|e| format!("{}: {e}", runs.display()))?;
    let prog = req.program.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let out: PathBuf = runs.join(format!("insncount-exec-{}-{prog}-{}.txt", system.name(), std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut arg = format!("{},out={}", built.plugin("insncount").display(), out.display());
    // A flat profile of the region (the plugin's `profile=`: instructions per translation
    // block start address; docs/plugins.md), for a breakdown by symbol with `nm -n`.
    if let Some(dir) = std::env::var_os("EXEC_INSNCOUNT_PROFILE") {
        let p = PathBuf::from(dir).join(format!("profile-{}-{prog}.txt", system.name()));
        arg.push_str(&format!(",profile={}", p.display()));
    }
    let run = match system {
        System::Ours => super::ours::run_measured(req, &arg)?,
        System::Linux => super::linux::run_measured(req, &arg)?,
    };
    if run.status != 0 {
        return Err(format!("{} on {}: exit status {}; stderr: {}", prog, system.name(), run.status, String::from_utf8_lossy(&run.stderr)));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("insncount wrote no report ({}: {e})", out.display()))?;
    let _ = std::fs::remove_file(&out);
    let report = crate::guest::plugin::parse_records(&text);
    if !text.lines().any(|l| l == "end") {
        return Err("insncount: its report was cut short".into());
    }
    if report.first().map(|r| r.u("starts")).unwrap_or(0) == 0 {
        return Err(format!("{prog} on {}: the program never executed the region marker (port 0x501)", system.name()));
    }
    let (kernel, user) = report.iter().filter(|r| r.kind == "vcpu").fold((0, 0), |(k, u), r| (k + r.u("kernel"), u + r.u("user")));
    let (name, ops) = workload_line(&String::from_utf8_lossy(&run.stdout));
    Ok(Count { system, kernel, user, ops, name })
}

/// `exec --insncount`: count on each system and print the table (and the ratio with both).
pub fn command(systems: &[System], req: &ExecRequest) -> Result<(), String> {
    let mut counts = Vec::new();
    for &s in systems {
        let c = count(s, req)?;
        println!(
            "insncount {} {}: kernel {} user {} in the region, ops={}{}",
            s.name(),
            req.program.display(),
            c.kernel,
            c.user,
            c.ops.map(|n| n.to_string()).unwrap_or("?".into()),
            c.per_op().map(|(k, u)| format!("; per op {:.1} ({k:.1} kernel + {u:.1} user)", k + u)).unwrap_or_default()
        );
        counts.push(c);
    }
    if let [a, b] = &counts[..] {
        if let (Some((ak, au)), Some((bk, bu))) = (a.per_op(), b.per_op()) {
            println!("{} / {} per op: {:.3}", a.system.name(), b.system.name(), (ak + au) / (bk + bu));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_line_gives_the_operations() {
        assert_eq!(workload_line("hi\nworkload name=getpid ops=20000\n"), (Some("getpid".into()), Some(20000)));
        assert_eq!(workload_line("no line\n"), (None, None));
        let c = Count { system: System::Ours, kernel: 100, user: 300, ops: Some(4), name: None };
        assert_eq!(c.per_op(), Some((25.0, 75.0)));
        assert_eq!(Count { ops: Some(0), ..c.clone() }.per_op(), None);
    }
}
