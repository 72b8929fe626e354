//! This system's side of the matrix: the kernel booted with the program archive, the first
//! program `bench-ours` (user/apps/src/bin/bench-ours.rs, the suite over `bench::ours`),
//! the same `VmConfig` as the Linux runs (q35, `-cpu max`, TCG, same vCPUs and memory), the
//! insncount plugin, and the same `bench-result` line parsed by `linux_sys::record_from_serial`.
//!
//! Benchmarks whose operation the library OS cannot provide honestly are not booted: they
//! get an `unavailable` record with the reason (`unsupported`).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::catalog::BenchSpec;
use super::linux_sys::{parse_insncount, record_from_serial};
use super::record::{Record, Status};
use crate::qemu::{BootMedium, VmConfig};

/// Kept for the matrix test (a system that cannot run at all).
#[allow(dead_code)]
pub const WHY_NOT: &str = "ours: not available (the kernel or the user programs did not build)";

/// Why a benchmark cannot run on this system, or None if it can.
pub fn unsupported(spec: &BenchSpec) -> Option<&'static str> {
    match spec.name {
        "thread_mt" | "thread_mp" => Some(
            "ours: an empty thread needs an idle core of its own (one context per pcore, no time-sharing yet), and every core runs a worker",
        ),
        "selftest_hang" => None,
        _ => None,
    }
}

pub struct OursSystem {
    kernel: PathBuf,
    initrd: PathBuf,
    insncount: Result<PathBuf, String>,
    mem_mib: u64,
    logs: PathBuf,
}

impl OursSystem {
    /// Build the kernel, the user programs (with `bench-ours`) and the insncount plugin.
    pub fn prepare(mem_mib: u64, insns: bool, logs: &Path) -> Result<OursSystem, String> {
        let kernel = crate::env::build_kernel().map_err(|e| format!("ours: {e}"))?;
        let initrd = crate::user::build_initrd().map_err(|e| format!("ours: {e}"))?;
        let insncount = if insns {
            crate::plugins::build().map(|b| b.insncount).map_err(|e| format!("insncount plugin unavailable: {}", e.lines().next().unwrap_or("")))
        } else {
            Err("instruction counting turned off (--insns off)".into())
        };
        fs::create_dir_all(logs).map_err(|e| format!("cannot create {}: {e}", logs.display()))?;
        Ok(OursSystem { kernel, initrd, insncount, mem_mib, logs: logs.to_path_buf() })
    }

    /// Boot once for one benchmark at `cores` vCPUs and turn what happened into a record.
    pub fn run_one(&self, spec: &'static BenchSpec, params: &[(String, u64)], cores: u32, timeout: Duration) -> Record {
        let blank = |status, reason: String| Record::without_result("ours", spec, params.to_vec(), cores, status, &reason);
        if let Some(why) = unsupported(spec) {
            return blank(Status::Unavailable, why.to_string());
        }
        let plugin_out = self.logs.join(format!("ours-insncount-{}-{cores}.txt", spec.name));
        let _ = fs::remove_file(&plugin_out);
        let mut cmdline = format!("init=bench-ours -- bench={} workers={cores}", spec.name);
        for (k, v) in params {
            cmdline.push_str(&format!(" {k}={v}"));
        }
        let mut extra = Vec::new();
        if let Ok(so) = &self.insncount {
            extra.extend(["-plugin".into(), format!("{},out={}", so.display(), plugin_out.display())]);
        }
        let cfg = VmConfig {
            smp: cores,
            mem_mib: self.mem_mib,
            timeout: Some(timeout),
            cmdline,
            medium: Some(BootMedium::Kernel(self.kernel.clone())),
            initrd: Some(self.initrd.clone()),
            extra,
            ..VmConfig::default()
        };
        let mut args = cfg.qemu_args();
        args.extend(["-serial", "stdio", "-monitor", "none"].map(String::from));
        let run = match crate::linux::run_qemu(&args, timeout) {
            Ok(r) => r,
            Err(e) => return blank(Status::Error, e),
        };
        let _ = fs::write(self.logs.join(format!("ours-{}-{cores}.serial.txt", spec.name)), &run.serial);
        let mut rec = if run.timed_out {
            blank(Status::Timeout, format!("killed after the {} s timeout", timeout.as_secs()))
        } else {
            match record_from_serial("ours", spec, params, cores, &run.serial) {
                Err(why) if why.contains("not provided by this backend") => blank(Status::Unavailable, format!("ours: {why}")),
                Err(why) => blank(Status::Error, why),
                Ok(_) if run.serial.contains("init: LEAK") => blank(Status::Error, "the kernel found a leak after bench-ours exited".into()),
                Ok(r) => r,
            }
        };
        rec.wall_s = run.elapsed.as_secs_f64();
        if rec.status == Status::Ok {
            match (&self.insncount, fs::read_to_string(&plugin_out)) {
                (Err(e), _) => rec.instructions_note = Some(e.clone()),
                (Ok(_), Err(_)) => rec.instructions_note = Some("the insncount plugin wrote no report".into()),
                (Ok(_), Ok(text)) => match parse_insncount(&text) {
                    Ok((k, u)) => {
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
