//! The Linux side of the matrix: Debian's kernel and an initramfs whose `/init` is the static
//! `bench-linux` program. Booting, the plugin and reading the result are `guest`'s, the same
//! as for this system.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::guest::{Common, Guest};
use crate::qemu::VmConfig;

const MUSL: &str = "x86_64-unknown-linux-musl";
const GNU: &str = "x86_64-unknown-linux-gnu";

pub struct LinuxSystem {
    kernel: PathBuf,
    initrd: PathBuf,
    common: Common,
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
    /// its initramfs, and the insncount plugin.
    pub fn prepare(mem_mib: u64, insns: bool, logs: &Path) -> Result<LinuxSystem, String> {
        let kernel = crate::linux::fetch_kernel().map_err(|e| format!("linux: cannot get Debian's kernel package: {e}"))?;
        let program = build_guest_program()?;
        let initrd = work_dir().join("linux-initramfs.cpio");
        crate::linux::build_initramfs(&program, &initrd)?;
        Ok(LinuxSystem { kernel: kernel.bzimage, initrd, common: Common::prepare(mem_mib, insns, logs)? })
    }
}

impl Guest for LinuxSystem {
    fn system(&self) -> &'static str {
        "linux"
    }

    fn common(&self) -> &Common {
        &self.common
    }

    /// Debian's kernel with `bench-linux` as `/init`, which reads `words` from /proc/cmdline.
    fn vm(&self, words: &str) -> VmConfig {
        let cmdline = format!("console=ttyS0 quiet nokaslr panic=-1 tsc=reliable {words}");
        let extra = vec!["-kernel".into(), self.kernel.display().to_string(), "-initrd".into(), self.initrd.display().to_string(), "-append".into(), cmdline];
        VmConfig { extra, ..VmConfig::default() }
    }
}
