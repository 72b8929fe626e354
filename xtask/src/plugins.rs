//! QEMU TCG measurement plugins (issue 7): `cargo xtask plugin ...`.

use crate::TestTally;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where built plugins, the guest program and run outputs go.
pub fn artifact_dir() -> PathBuf {
    crate::env::workspace_root().join("target").join("qemu-plugins")
}

fn src_dir() -> PathBuf {
    crate::env::workspace_root().join("tools").join("qemu-plugins")
}

fn cc(args: &[&str], what: &str) -> Result<(), String> {
    let out = Command::new("cc").args(args).output().map_err(|e| format!("cannot run cc: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("building {what} failed:\n{err}"));
    }
    Ok(())
}

fn ensure_compiler() -> Result<(), String> {
    crate::env::ensure_tool("cc", &["gcc"])?;
    // static glibc for the guest's /init
    crate::env::ensure_packages(&["libc6-dev"])
}

/// Build the static guest program (/init of the Linux measurement guest).
pub fn build_guest() -> Result<PathBuf, String> {
    ensure_compiler()?;
    let dir = artifact_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let out = dir.join("guest-init");
    let src = src_dir().join("guest").join("workload.c");
    cc(&["-static", "-O2", "-Wall", "-pthread", "-o", &out.display().to_string(), &src.display().to_string()], "guest/workload.c")?;
    Ok(out)
}

pub fn main(_args: &[String]) -> Result<(), String> {
    Err("plugin: not built yet (issue 7)".into())
}

/// Plugin tests run by `cargo xtask test`.
pub fn tests() -> Result<TestTally, String> {
    Ok(TestTally::default())
}

#[allow(dead_code)]
fn _unused(_: &Path) {}
