//! This system's side of the matrix: the kernel booted with the program archive and the first
//! program `bench-ours` (user/apps/src/bin/bench-ours.rs, the suite over `bench::ours`).
//! Booting, the plugin and reading the result are `guest`'s, the same as for Linux.
//!
//! Benchmarks whose operation the library OS cannot provide honestly are not booted: they
//! get an `unavailable` record with the reason ([`unsupported`]).

use std::path::{Path, PathBuf};

use testdefs::bench_catalog::BenchSpec;
use super::boot::{Common, Guest};
use super::record::{Record, Status};
use crate::host::vm::{BootMedium, VmConfig};

/// Why a benchmark cannot run on this system at `cores` vCPUs, or None if it can. Every
/// benchmark of the catalog runs here (thread_mt/thread_mp time-share each worker's core with
/// its threads, since TC cores exist); the kernel-core ones need a second core.
pub fn unsupported(spec: &BenchSpec, cores: u32) -> Option<&'static str> {
    (spec.kernel_core && cores < 2).then_some("needs 2 vCPUs or more: no second core to make a kernel core at 1 vCPU")
}

/// What the library OS backend says when it lacks an operation (`bench::Error::Unsupported`).
const NOT_PROVIDED: &str = "not provided by this backend";

pub struct OursSystem {
    pub(crate) kernel: PathBuf,
    pub(crate) initrd: PathBuf,
    pub(crate) common: Common,
}

impl OursSystem {
    /// Build the kernel, the user programs (with `bench-ours`) and the insncount plugin.
    pub fn prepare(mem_mib: u64, insns: bool, logs: &Path) -> Result<OursSystem, String> {
        let kernel = crate::host::env::build_kernel().map_err(|e| format!("ours: {e}"))?;
        let initrd = crate::host::user::build_initrd().map_err(|e| format!("ours: {e}"))?;
        Ok(OursSystem { kernel, initrd, common: Common::prepare("ours", mem_mib, insns, logs)? })
    }
}

impl Guest for OursSystem {
    fn common(&self) -> &Common {
        &self.common
    }

    /// The kernel starts `bench-ours` as its first program with `words` as its arguments.
    fn vm(&self, words: &str) -> VmConfig {
        VmConfig {
            cmdline: format!("init=bench-ours -- {words}"),
            medium: Some(BootMedium::Kernel(self.kernel.clone())),
            initrd: Some(self.initrd.clone()),
            ..VmConfig::default()
        }
    }

    fn unsupported(&self, spec: &BenchSpec, cores: u32) -> Option<&'static str> {
        unsupported(spec, cores)
    }

    /// A missing operation is `unavailable`, not an error; a result is only good if the
    /// kernel found nothing leaked after `bench-ours` exited.
    fn judge(&self, serial: &str, parsed: Result<Record, String>) -> Result<Record, (Status, String)> {
        judge(serial, parsed)
    }

    fn ended_cleanly(&self, serial: &str, qemu_exit: Option<i32>) -> Result<(), String> {
        ended_cleanly(serial, qemu_exit)
    }
}

/// `bench-ours` exited 0 (the kernel's `init:` line) and the kernel powered off with its
/// success status, which it gives only when the program exited 0, nothing leaked, every core
/// answered and every command-line option was applied (kernel/src/init.rs, main.rs).
fn ended_cleanly(serial: &str, qemu_exit: Option<i32>) -> Result<(), String> {
    program_ended_cleanly("bench-ours", serial, qemu_exit)
}

/// `ended_cleanly` for the first program `program` (`tcpserv` for the network cells).
pub(crate) fn program_ended_cleanly(program: &str, serial: &str, qemu_exit: Option<i32>) -> Result<(), String> {
    let exit = serial.lines().find(|l| l.contains(&format!("init: `{program}` exited with code"))).map(str::trim);
    match exit {
        None => return Err(format!("{program} did not exit (no `init: `{program}` exited` line)")),
        Some(l) if !l.ends_with("exited with code 0") => return Err(format!("{program} did not exit 0: {l}")),
        Some(_) => {}
    }
    if qemu_exit != Some(crate::host::vm::QEMU_EXIT_SUCCESS) {
        let why = serial.lines().find(|l| l.contains("boot: error:") || l.contains("init: LEAK") || l.contains("cores answered")).map(str::trim).unwrap_or("");
        return Err(format!("the kernel did not power off with its success status (QEMU exit {qemu_exit:?}) {why}").trim().to_string());
    }
    Ok(())
}

fn judge(serial: &str, parsed: Result<Record, String>) -> Result<Record, (Status, String)> {
    match parsed {
        Err(why) if why.contains(NOT_PROVIDED) => Err((Status::Unavailable, format!("ours: {why}"))),
        Err(why) => Err((Status::Error, why)),
        Ok(_) if serial.contains("init: LEAK") => Err((Status::Error, "the kernel found a leak after bench-ours exited".into())),
        Ok(r) => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use testdefs::bench_catalog as catalog;
    use super::super::boot::record_from_serial;
    use super::*;

    #[test]
    fn judging_output() {
        let spec = catalog::find("stat_mt").unwrap();
        let p = vec![("iters".to_string(), 10)];
        let rec = |serial: &str| judge(serial, record_from_serial("ours", spec, &p, 1, serial));
        let ok = "bench-result name=stat_mt system=ours cores=1 workers=1 ops=10 ticks=5 busy_ticks=5 tsc_hz=1 ns=100 busy_ns=100 markers=true reps=1 params=iters:10 check=ok\nbench-done\n";
        assert!(rec(ok).is_ok());
        assert_eq!(rec(&format!("{ok}init: LEAK 3 frames\n")).unwrap_err().0, Status::Error);
        let missing = "bench-error name=stat_mt msg=thread_create_join is not provided by this backend\nbench-done\n";
        assert_eq!(rec(missing).unwrap_err().0, Status::Unavailable);
        assert_eq!(rec("bench-error name=stat_mt msg=obj_stat failed (error 3)\n").unwrap_err().0, Status::Error);
        assert!(unsupported(catalog::find("thread_mt").unwrap(), 1).is_none());
        assert!(unsupported(spec, 2).is_none());
        let kc = catalog::find("nullsyscall_batched").unwrap();
        assert!(unsupported(kc, 1).is_some_and(|w| w.contains("kernel core")));
        assert!(unsupported(kc, 2).is_none());
    }

    /// Catches: a cell `ok` from its result line alone, with the program failing after it or
    /// the kernel reporting a leak or a failure exit.
    #[test]
    fn a_cell_needs_exit_0_and_the_kernels_success_status() {
        let good = "bench-result name=x\nbench-done\n[0] init: `bench-ours` exited with code 0\n[0] init: 2/2 cores answered an active message\n";
        let ok = Some(crate::host::vm::QEMU_EXIT_SUCCESS);
        assert!(ended_cleanly(good, ok).is_ok());
        assert!(ended_cleanly(&good.replace("code 0", "code 1"), ok).unwrap_err().contains("did not exit 0"));
        assert!(ended_cleanly(&good.replace("code 0", "code 10"), ok).is_err());
        assert!(ended_cleanly("bench-result name=x\nbench-done\n", ok).unwrap_err().contains("did not exit"));
        assert!(ended_cleanly(good, Some(crate::host::vm::QEMU_EXIT_FAILURE)).unwrap_err().contains("success status"));
        assert!(ended_cleanly(good, None).is_err());
    }
}
