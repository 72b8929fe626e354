//! The Linux side of the matrix: Debian's kernel booted with the same `VmConfig` as this
//! system (q35, `-cpu max`, TCG, same vCPUs and memory), an initramfs whose `/init` is the
//! static `bench-linux` program, and the insncount plugin counting guest instructions in the
//! region the benchmark marks.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::catalog::{self, BenchSpec};
use super::record::{Record, Status};
use crate::qemu::VmConfig;

const MUSL: &str = "x86_64-unknown-linux-musl";
const GNU: &str = "x86_64-unknown-linux-gnu";

pub struct LinuxSystem {
    kernel: PathBuf,
    initrd: PathBuf,
    /// The insncount plugin, or why there is none.
    insncount: Result<PathBuf, String>,
    mem_mib: u64,
    logs: PathBuf,
}

fn work_dir() -> PathBuf {
    crate::env::target_dir().join("bench")
}

/// Build `bench-linux` as a static program: musl if rustup has (or can add) the target,
/// otherwise glibc with a static C runtime.
pub fn build_guest_program() -> Result<PathBuf, String> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output().map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
    let musl = installed.lines().any(|l| l.trim() == MUSL)
        || Command::new("rustup").args(["target", "add", MUSL]).status().map(|s| s.success()).unwrap_or(false);
    let target = if musl { MUSL } else { GNU };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(crate::env::workspace_root())
        .args(["build", "--quiet", "--release", "-p", "bench", "--bin", "bench-linux", "--target", target])
        // A small /init: no debug info, symbols stripped (the initramfs is copied every boot).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    if !musl {
        let var = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS";
        cmd.env(var, "-C target-feature=+crt-static");
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building bench-linux for {target} failed"));
    }
    Ok(crate::env::target_dir().join(target).join("release").join("bench-linux"))
}

impl LinuxSystem {
    /// Fetch the kernel package (a clear error without network), build the guest program and
    /// its initramfs, and the insncount plugin (optional: without it instructions are null).
    pub fn prepare(mem_mib: u64, insns: bool, logs: &Path) -> Result<LinuxSystem, String> {
        let kernel = crate::linux::fetch_kernel().map_err(|e| format!("linux: cannot get Debian's kernel package: {e}"))?;
        let program = build_guest_program()?;
        let initrd = work_dir().join("linux-initramfs.cpio");
        crate::linux::build_initramfs(&program, &initrd)?;
        let insncount = if insns {
            crate::plugins::build().map(|b| b.insncount).map_err(|e| format!("insncount plugin unavailable: {}", e.lines().next().unwrap_or("")))
        } else {
            Err("instruction counting turned off (--insns off)".into())
        };
        if let Err(e) = &insncount {
            eprintln!("bench: {e}; instructions will be null");
        }
        fs::create_dir_all(logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        Ok(LinuxSystem { kernel: kernel.bzimage, initrd, insncount, mem_mib, logs: logs.to_path_buf() })
    }

    /// Boot once for one benchmark at `cores` vCPUs and turn what happened into a record.
    pub fn run_one(&self, spec: &BenchSpec, params: &[(String, u64)], cores: u32, timeout: Duration) -> Record {
        let plugin_out = self.logs.join(format!("insncount-{}-{cores}.txt", spec.name));
        let _ = fs::remove_file(&plugin_out);
        let mut cmdline = format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable bench={} workers={cores}", spec.name);
        for (k, v) in params {
            cmdline.push_str(&format!(" {k}={v}"));
        }
        let mut extra = vec!["-kernel".into(), self.kernel.display().to_string(), "-initrd".into(), self.initrd.display().to_string(), "-append".into(), cmdline];
        if let Ok(so) = &self.insncount {
            extra.extend(["-plugin".into(), format!("{},out={}", so.display(), plugin_out.display())]);
        }
        // The same machine description as this system's boots (crate::qemu), so the two
        // systems differ only in what they boot.
        let cfg = VmConfig { smp: cores, mem_mib: self.mem_mib, timeout: Some(timeout), extra, ..VmConfig::default() };
        let mut args = cfg.qemu_args();
        args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
        let blank = |status, reason: String| Record::without_result("linux", spec, params.to_vec(), cores, status, &reason);
        let run = match crate::linux::run_qemu(&args, timeout) {
            Ok(r) => r,
            Err(e) => return blank(Status::Error, e),
        };
        let _ = fs::write(self.logs.join(format!("linux-{}-{cores}.serial.txt", spec.name)), &run.serial);
        let mut rec = if run.timed_out {
            blank(Status::Timeout, format!("killed after the {} s timeout", timeout.as_secs()))
        } else {
            record_from_serial("linux", spec, params, cores, &run.serial).unwrap_or_else(|why| {
                let qemu = run.stderr.lines().find(|l| !l.trim().is_empty()).map(|l| format!("; QEMU: {}", l.trim())).unwrap_or_default();
                blank(Status::Error, format!("{why}{qemu}"))
            })
        };
        rec.wall_s = run.elapsed.as_secs_f64();
        if rec.status == Status::Ok {
            match (&self.insncount, fs::read_to_string(&plugin_out)) {
                (Err(e), _) => rec.instructions_note = Some(e.clone()),
                (Ok(_), Err(_)) => rec.instructions_note = Some("the insncount plugin wrote no report".into()),
                (Ok(_), Ok(text)) => match parse_insncount(&text) {
                    Ok((k, u)) => {
                        // The plugin sums every repetition's region; a record describes one.
                        let reps = params.iter().find(|(k, _)| k == "reps").map(|(_, v)| *v).unwrap_or(1).max(1);
                        rec.instructions_kernel = Some(k / reps);
                        rec.instructions_user = Some(u / reps);
                    }
                    Err(e) => rec.instructions_note = Some(e),
                },
            }
        }
        rec
    }
}

fn kv(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.split_whitespace().filter_map(|w| w.split_once('='))
}

/// The guest's `bench-result` / `bench-error` line as a record (shared with the library-OS
/// side, which prints the same line).
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
    if rec.ops.is_none() || rec.ns.is_none() || rec.workers.is_none() {
        return Err(format!("malformed result line: {line}"));
    }
    if rec.workers != Some(cores as u64) {
        return Err(format!("the guest ran {} workers on {cores} vCPUs", rec.workers.unwrap_or(0)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_guest_lines() {
        let spec = catalog::find("dupclose").unwrap();
        let p = vec![("iters".to_string(), 10)];
        let ok = "noise\nbench-result name=dupclose system=linux cores=2 workers=2 ops=20 ticks=5 busy_ticks=9 tsc_hz=1 ns=1000 busy_ns=1900 markers=true params=iters:10 check=ok\nbench-done\n";
        let r = record_from_serial("linux", spec, &p, 2, ok).unwrap();
        assert_eq!((r.ops, r.ns, r.workers), (Some(20), Some(1000), Some(2)));
        assert!(record_from_serial("linux", spec, &p, 2, "bench-error name=dupclose msg=dup failed (error 24)\n").unwrap_err().contains("dup failed"));
        assert!(record_from_serial("linux", spec, &p, 2, "Kernel panic\n").unwrap_err().contains("Kernel panic"));
        assert!(record_from_serial("linux", spec, &p, 4, ok).is_err(), "worker count must match the vCPUs");
        let other = ok.replace("name=dupclose", "name=stat_mt");
        assert!(record_from_serial("linux", spec, &p, 2, &other).is_err());
    }

    #[test]
    fn parses_insncount() {
        let t = "insncount version=1 starts=2 stops=2 vcpus=2\nvcpu index=0 kernel=100 user=5 blocks=3\nvcpu index=1 kernel=50 user=7 blocks=2\nend\n";
        assert_eq!(parse_insncount(t).unwrap(), (150, 12));
        assert!(parse_insncount("insncount version=1 starts=0 stops=0 vcpus=1\nend\n").is_err());
        assert!(parse_insncount("insncount version=1 starts=1 stops=0 vcpus=1\nvcpu index=0 kernel=1 user=1 blocks=1\n").is_err());
    }
}
