//! What a run does on either system: one QEMU boot with the same machine description (q35,
//! `-cpu max`, TCG, the run's vCPUs and memory), the insncount plugin counting the region the
//! benchmark marks, the guest's serial line (`bench-result` / `bench-error`, the protocol in
//! bench/src/catalog.rs) turned into a record, a boot that overruns killed and recorded as
//! `timeout`. `linux_sys` and `ours` only say what they boot and how they judge their output.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use testdefs::bench_catalog::{self as catalog, BenchSpec};
use super::record::{Record, Status};
use crate::host::qemu::RunOutput;
use crate::host::vm::VmConfig;

/// What both systems' boots share: the plugin, the guest memory, where the logs go.
pub struct Common {
    /// "ours" or "linux", as in the records.
    pub(crate) system: &'static str,
    /// The insncount plugin, or why there is none (then instructions are null, with the why).
    pub(crate) insncount: Result<PathBuf, String>,
    pub(crate) mem_mib: u64,
    pub(crate) logs: PathBuf,
    /// Set for a timing boot of a `--boots N` run (N > 1): the plugin is left out, because its
    /// callback on every translation block slows code paths unequally (kernel code with short
    /// blocks more than a long user loop, one system more than the other) and so bends the
    /// timings; the cell's instructions come from its separate counting boot (`run_matrix`).
    pub(crate) timing_only: std::cell::Cell<bool>,
}

impl Common {
    /// Build the insncount plugin (optional: without it instructions are null) and make the
    /// log directory.
    pub fn prepare(system: &'static str, mem_mib: u64, insns: bool, logs: &Path) -> Result<Common, String> {
        let insncount = if insns {
            crate::guest::plugin::build().map(|b| b.insncount).map_err(|e| format!("insncount plugin unavailable: {}", e.lines().next().unwrap_or("")))
        } else {
            Err("instruction counting turned off (--insns off)".into())
        };
        if let Err(e) = &insncount {
            eprintln!("bench: {e}; instructions will be null");
        }
        fs::create_dir_all(logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        Ok(Common { system, insncount, mem_mib, logs: logs.to_path_buf(), timing_only: std::cell::Cell::new(false) })
    }

    /// The plugin to load in this boot, or why there is none.
    pub(crate) fn plugin(&self) -> Result<PathBuf, String> {
        if self.timing_only.get() {
            return Err(TIMING_BOOT_NOTE.into());
        }
        self.insncount.clone()
    }
}

/// The instructions note of a timing boot before its cell's counted instructions are filled in.
pub(crate) const TIMING_BOOT_NOTE: &str = "a timing boot, run without the insncount plugin";

/// One system as the matrix sees it.
pub trait Guest {
    fn common(&self) -> &Common;
    /// The machine for one run without vCPUs, memory and plugin (set by [`run_one`]): what to
    /// boot, and `words` (`bench=NAME workers=N key=value ...`) on its command line.
    fn vm(&self, words: &str) -> VmConfig;
    /// Why this system cannot run `spec` at `cores` vCPUs, if it cannot (then it is not booted).
    fn unsupported(&self, _spec: &BenchSpec, _cores: u32) -> Option<&'static str> {
        None
    }
    /// The record for a guest that ran to the end, from what its result line said. The
    /// default takes the line as it is; a system may look at the rest of the output too.
    fn judge(&self, _serial: &str, parsed: Result<Record, String>) -> Result<Record, (Status, String)> {
        parsed.map_err(|why| (Status::Error, why))
    }
    /// Whether the benchmark program exited 0 and the guest powered off normally, from the
    /// serial output and QEMU's exit code: a cell is `ok` only then, whatever its result line
    /// said (a program that printed a result and then failed, leaked or crashed the guest is
    /// an `error`).
    fn ended_cleanly(&self, serial: &str, qemu_exit: Option<i32>) -> Result<(), String>;
}

/// The guest's command-line words for one run: one worker per vCPU, or one for a benchmark
/// whose second core is a kernel core (`BenchSpec::kernel_core`).
pub fn words(spec: &BenchSpec, params: &[(String, u64)], cores: u32) -> String {
    let mut w = format!("bench={} workers={}", spec.name, spec.workers(cores as usize));
    for (k, v) in params {
        w.push_str(&format!(" {k}={v}"));
    }
    w
}

/// Boot `g` once for one benchmark at `cores` vCPUs and turn what happened into a record.
/// `tag` is appended to the log files' names (`-bootK` when a cell is booted more than once).
pub fn run_one(g: &dyn Guest, spec: &'static BenchSpec, params: &[(String, u64)], cores: u32, timeout: Duration, tag: &str) -> Record {
    let c = g.common();
    let system = c.system;
    let blank = |status, reason: String| Record::without_result(system, spec, params.to_vec(), cores, status, &reason);
    if let Some(why) = g.unsupported(spec, cores) {
        return blank(Status::Unavailable, why.to_string());
    }
    let stem = format!("{system}-{}-{cores}{tag}", spec.name);
    let plugin_out = c.logs.join(format!("{stem}.insncount.txt"));
    let _ = fs::remove_file(&plugin_out);
    let mut cfg = g.vm(&words(spec, params, cores));
    cfg.smp = cores;
    cfg.mem_mib = c.mem_mib;
    cfg.timeout = Some(timeout);
    // The file rows' disk: the benchmark image, the same for both systems (fsimage.rs).
    match super::fsimage::disk_for(spec.name) {
        Some(Ok(disk)) => cfg.extra.extend(disk),
        Some(Err(why)) => return blank(Status::Unavailable, why),
        None => {}
    }
    if let Ok(so) = &c.plugin() {
        cfg.extra.extend(["-plugin".into(), format!("{},out={}", so.display(), plugin_out.display())]);
    }
    let mut args = cfg.qemu_args();
    args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
    let run = match crate::host::qemu::run_qemu(&args, timeout) {
        Ok(r) => r,
        Err(e) => return blank(Status::Error, e),
    };
    let _ = fs::write(c.logs.join(format!("{stem}.serial.txt")), &run.serial);
    let mut rec = if run.timed_out {
        blank(Status::Timeout, format!("killed after the {} s timeout", timeout.as_secs()))
    } else {
        match g.judge(&run.serial, record_from_serial(system, spec, params, cores, &run.serial)) {
            Ok(r) => match g.ended_cleanly(&run.serial, run.exit_code) {
                Ok(()) => r,
                Err(why) => blank(Status::Error, format!("{why}{}", qemu_said(&run))),
            },
            Err((status, why)) => blank(status, format!("{why}{}", qemu_said(&run))),
        }
    };
    rec.wall_s = run.elapsed.as_secs_f64();
    if rec.status == Status::Ok {
        add_instructions(&mut rec, &c.plugin(), &plugin_out, params);
    }
    rec
}

/// QEMU's first complaint, if any (a guest that never started says nothing on its serial line).
fn qemu_said(run: &RunOutput) -> String {
    run.stderr.lines().find(|l| !l.trim().is_empty()).map(|l| format!("; QEMU: {}", l.trim())).unwrap_or_default()
}

/// Instructions from the plugin's report, or a note saying why there are none.
pub(crate) fn add_instructions(rec: &mut Record, plugin: &Result<PathBuf, String>, report: &Path, params: &[(String, u64)]) {
    match (plugin, fs::read_to_string(report)) {
        (Err(e), _) => rec.instructions_note = Some(e.clone()),
        (Ok(_), Err(_)) => rec.instructions_note = Some("the insncount plugin wrote no report".into()),
        (Ok(_), Ok(text)) => match parse_insncount(&text) {
            Ok((k, u)) => {
                // The plugin sums every repetition's region; a record describes one.
                let reps = params.iter().find(|(k, _)| k == "reps").map(|(_, v)| *v).unwrap_or(1).max(1);
                rec.instructions_kernel = Some(k / reps);
                rec.instructions_user = Some(u / reps);
                rec.instructions_vcpus = insncount_per_vcpu(&text).into_iter().map(|n| n / reps).collect();
                rec.instructions_idle_vcpus = insncount_idle_per_vcpu(&text).into_iter().map(|n| n / reps).collect();
            }
            Err(e) => rec.instructions_note = Some(e),
        },
    }
}

fn kv(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.split_whitespace().filter_map(|w| w.split_once('='))
}

/// The guest's `bench-result` / `bench-error` line as a record (both systems print the same
/// line: bench/src/report.rs).
pub fn record_from_serial(system: &str, spec: &BenchSpec, params: &[(String, u64)], cores: u32, serial: &str) -> Result<Record, String> {
    let mut rec = Record::without_result(system, spec, params.to_vec(), cores, Status::Ok, "");
    rec.reason = None;
    if let Some(line) = serial.lines().find(|l| l.starts_with(catalog::ERROR_PREFIX)) {
        let msg = line.split_once("msg=").map(|(_, m)| m.trim()).unwrap_or(line);
        return Err(format!("guest: {msg}"));
    }
    let line = serial.lines().find(|l| l.starts_with(catalog::RESULT_PREFIX)).ok_or_else(|| {
        let last = serial.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)");
        format!("the guest printed no result line (last line: {})", last.trim())
    })?;
    let num = |k: &str| kv(line).find(|(kk, _)| *kk == k).and_then(|(_, v)| v.parse::<u64>().ok());
    if kv(line).find(|(k, _)| *k == "name").map(|(_, v)| v) != Some(spec.name) {
        return Err(format!("result line is for another benchmark: {line}"));
    }
    rec.workers = num("workers");
    rec.ops = num("ops");
    rec.ns = num("ns");
    rec.busy_ns = num("busy_ns");
    rec.calib_ops = num("calib_ops");
    rec.calib_ns = num("calib_ns");
    // A phased benchmark's `phase_NAME_ns=... phase_NAME_faults=...` words, in line order.
    for (k, v) in kv(line) {
        if let Some(name) = k.strip_prefix("phase_").and_then(|k| k.strip_suffix("_ns")) {
            let faults = num(&format!("phase_{name}_faults"));
            match (v.parse::<u64>().ok(), faults) {
                (Some(ns), Some(faults)) => rec.phases.push(super::record::PhaseRecord { name: name.into(), ns, faults }),
                _ => return Err(format!("malformed phase `{name}` in the result line: {line}")),
            }
        }
    }
    if rec.ops.is_none() || rec.ns.is_none() || rec.workers.is_none() {
        return Err(format!("malformed result line: {line}"));
    }
    let want = spec.workers(cores as usize) as u64;
    if rec.workers != Some(want) {
        return Err(format!("the guest ran {} workers on {cores} vCPUs, want {want}", rec.workers.unwrap_or(0)));
    }
    Ok(rec)
}

/// (kernel, user) instructions summed over vCPUs from the insncount report.
pub fn parse_insncount(text: &str) -> Result<(u64, u64), String> {
    let mut lines = text.lines();
    let head = lines.next().filter(|l| l.starts_with("insncount ")).ok_or("insncount: report has no header")?;
    let starts = kv(head).find(|(k, _)| *k == "starts").and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0);
    if starts == 0 {
        return Err("the guest never executed the region marker (no ioperm?)".into());
    }
    if !text.lines().any(|l| l == "end") {
        return Err("insncount: report is truncated".into());
    }
    let (mut k, mut u) = (0, 0);
    for l in lines.filter(|l| l.starts_with("vcpu ")) {
        let get = |key: &str| kv(l).find(|(kk, _)| *kk == key).and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0);
        k += get("kernel");
        u += get("user");
    }
    Ok((k, u))
}

/// Kernel + user instructions of each vCPU (index order) from the insncount report.
pub fn insncount_per_vcpu(text: &str) -> Vec<u64> {
    insncount_vcpu_field(text, &["kernel", "user"])
}

/// Each vCPU's idle instructions (index order; `idle=`, insncount's count of a vCPU that
/// stopped itself inside a run started on every vCPU): empty from a report without them.
pub fn insncount_idle_per_vcpu(text: &str) -> Vec<u64> {
    if !text.lines().any(|l| l.starts_with("vcpu ") && l.contains(" idle=")) {
        return Vec::new();
    }
    insncount_vcpu_field(text, &["idle"])
}

/// The sum of `keys` on each `vcpu` line of the insncount report, in index order.
fn insncount_vcpu_field(text: &str, keys: &[&str]) -> Vec<u64> {
    let mut v: Vec<(u64, u64)> = text
        .lines()
        .filter(|l| l.starts_with("vcpu "))
        .map(|l| {
            let get = |key: &str| kv(l).find(|(kk, _)| *kk == key).and_then(|(_, v)| v.parse::<u64>().ok()).unwrap_or(0);
            (get("index"), keys.iter().map(|k| get(k)).sum())
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a metis row's phases dropped on the way from the result line to the record
    /// and its JSON, a phase with no fault count taken as zero.
    #[test]
    fn phases_of_a_metis_row_reach_the_record_and_its_json() {
        let spec = catalog::find("metis_wri").unwrap();
        let p = vec![("size".to_string(), 4096)];
        let line = "bench-result name=metis_wri system=ours cores=2 workers=2 ops=4096 ticks=5 busy_ticks=9 tsc_hz=1 ns=1000 busy_ns=1900 markers=false params=size:4096 calib_ops=400 calib_ns=2000 phase_map_ns=700 phase_map_faults=12 phase_reduce_ns=250 phase_reduce_faults=3 phase_merge_ns=50 phase_merge_faults=0 check=ok\n";
        let mut r = record_from_serial("ours", spec, &p, 2, line).unwrap();
        r.instructions_note = Some("not counted".into());
        let names: Vec<(&str, u64, u64)> = r.phases.iter().map(|x| (x.name.as_str(), x.ns, x.faults)).collect();
        assert_eq!(names, [("map", 700, 12), ("reduce", 250, 3), ("merge", 50, 0)]);
        let back = super::super::record::Record::from_json(&r.to_json()).unwrap();
        assert_eq!(back.phases, r.phases);
        assert!(record_from_serial("ours", spec, &p, 2, &line.replace(" phase_reduce_faults=3", "")).is_err());
        assert!(record_from_serial("ours", catalog::find("dupclose").unwrap(), &p, 2, &line.replace("metis_wri", "dupclose").replace(
            " phase_map_ns=700 phase_map_faults=12 phase_reduce_ns=250 phase_reduce_faults=3 phase_merge_ns=50 phase_merge_faults=0", "")).unwrap().phases.is_empty());
    }

    #[test]
    fn parses_guest_lines() {
        let spec = catalog::find("dupclose").unwrap();
        let p = vec![("iters".to_string(), 10)];
        let ok = "noise\nbench-result name=dupclose system=linux cores=2 workers=2 ops=20 ticks=5 busy_ticks=9 tsc_hz=1 ns=1000 busy_ns=1900 markers=true params=iters:10 calib_ops=400 calib_ns=2000 check=ok\nbench-done\n";
        let r = record_from_serial("linux", spec, &p, 2, ok).unwrap();
        assert_eq!((r.ops, r.ns, r.workers), (Some(20), Some(1000), Some(2)));
        // 10 M ops/s/core against a calibration of 100 M steps/s/core.
        assert_eq!((r.calib_ops, r.calib_ns), (Some(400), Some(2000)));
        assert_eq!(r.calibrated_throughput(), Some(0.1));
        let old = record_from_serial("linux", spec, &p, 2, &ok.replace(" calib_ops=400 calib_ns=2000", "")).unwrap();
        assert_eq!(old.calibrated_throughput(), None, "a guest without the calibration gives none");
        assert!(record_from_serial("linux", spec, &p, 2, "bench-error name=dupclose msg=dup failed (error 24)\n").unwrap_err().contains("dup failed"));
        assert!(record_from_serial("linux", spec, &p, 2, "Kernel panic\n").unwrap_err().contains("Kernel panic"));
        assert!(record_from_serial("linux", spec, &p, 4, ok).is_err(), "worker count must match the vCPUs");
        let kc = catalog::find("nullsyscall_forwarded").unwrap();
        let one = ok.replace("name=dupclose", "name=nullsyscall_forwarded").replace("workers=2", "workers=1");
        assert_eq!(record_from_serial("ours", kc, &p, 2, &one).unwrap().workers, Some(1), "one worker, the other vCPU is the kernel core");
        assert!(record_from_serial("ours", kc, &p, 2, &ok.replace("name=dupclose", "name=nullsyscall_forwarded")).is_err());
        let other = ok.replace("name=dupclose", "name=stat_mt");
        assert!(record_from_serial("linux", spec, &p, 2, &other).is_err());
    }

    #[test]
    fn parses_insncount() {
        let t = "insncount version=1 starts=2 stops=2 vcpus=2\nvcpu index=0 kernel=100 user=5 blocks=3\nvcpu index=1 kernel=50 user=7 blocks=2\nend\n";
        assert_eq!(parse_insncount(t).unwrap(), (150, 12));
        assert_eq!(insncount_per_vcpu(t), [105, 57]);
        // Idle counts apart, and none from a report that has none.
        assert!(insncount_idle_per_vcpu(t).is_empty());
        let t2 = "insncount version=1 starts=1 stops=1 vcpus=2\nvcpu index=1 kernel=50 user=7 blocks=2 idle=40\nvcpu index=0 kernel=100 user=5 blocks=3 idle=0\nend\n";
        assert_eq!(insncount_per_vcpu(t2), [105, 57]);
        assert_eq!(insncount_idle_per_vcpu(t2), [0, 40]);
        assert!(parse_insncount("insncount version=1 starts=0 stops=0 vcpus=1\nend\n").is_err());
        assert!(parse_insncount("insncount version=1 starts=1 stops=0 vcpus=1\nvcpu index=0 kernel=1 user=1 blocks=1\n").is_err());
    }

    #[test]
    fn command_line_words() {
        let spec = catalog::find("counter_sloppy").unwrap();
        let p = vec![("iters".to_string(), 5), ("batch".to_string(), 8), ("reps".to_string(), 3)];
        assert_eq!(words(spec, &p, 2), "bench=counter_sloppy workers=2 iters=5 batch=8 reps=3");
        // A kernel-core benchmark has one worker; the other vCPU becomes the kernel core.
        let kc = catalog::find("nullsyscall_batched").unwrap();
        assert_eq!(words(kc, &[("iters".to_string(), 128)], 2), "bench=nullsyscall_batched workers=1 iters=128");
    }
}
