//! The project's own Linux test programs: each `linux/progs/NAME.c` is built with
//! `musl-gcc -static -O2` into `target/linux-progs/NAME` (rebuilt when the source is newer).
//! Debian's `musl-tools` provides `musl-gcc`; it is installed with apt if missing (said so).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host::env::workspace_root;

/// Where the C sources are.
pub fn source_dir() -> PathBuf {
    workspace_root().join("linux").join("progs")
}

/// Where the built programs go.
pub fn out_dir() -> PathBuf {
    workspace_root().join("target").join("linux-progs")
}

/// `musl-gcc`, installing Debian's `musl-tools` first if it is not there.
pub fn musl_gcc() -> Result<PathBuf, String> {
    let found = |p: &str| Path::new(p).exists().then(|| PathBuf::from(p));
    if let Some(p) = found("/usr/bin/musl-gcc") {
        return Ok(p);
    }
    eprintln!("xtask: musl-gcc is missing; installing Debian's musl-tools (apt-get install -y musl-tools)");
    let ok = Command::new("apt-get").args(["install", "-y", "-q", "musl-tools"]).status().map(|s| s.success()).unwrap_or(false);
    if !ok {
        // The package lists may be missing on a fresh machine.
        let _ = Command::new("apt-get").args(["update", "-q"]).status();
        let again = Command::new("apt-get").args(["install", "-y", "-q", "musl-tools"]).status().map_err(|e| format!("apt-get: {e}"))?;
        if !again.success() {
            return Err("could not install musl-tools (apt-get install musl-tools failed)".into());
        }
    }
    found("/usr/bin/musl-gcc").ok_or_else(|| "musl-tools installed but /usr/bin/musl-gcc is missing".into())
}

fn newer(src: &Path, out: &Path) -> bool {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (m(src), m(out)) {
        (Some(s), Some(o)) => s > o,
        _ => true,
    }
}

/// Build `linux/progs/NAME.c` (plus `-lpthread` etc. from `extra`) and return the binary.
pub fn build(name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let src = source_dir().join(format!("{name}.c"));
    if !src.exists() {
        return Err(format!("no such test program: {}", src.display()));
    }
    let out = out_dir().join(name);
    if !newer(&src, &out) {
        return Ok(out);
    }
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("{}: {e}", out_dir().display()))?;
    let cc = musl_gcc()?;
    let st = Command::new(&cc)
        .args(["-static", "-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .map_err(|e| format!("{}: {e}", cc.display()))?;
    if !st.success() {
        return Err(format!("musl-gcc failed on {}", src.display()));
    }
    Ok(out)
}
