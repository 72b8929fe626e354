//! The Linux programs the conformance suite runs: each `linux/progs/NAME.c` is built with
//! `musl-gcc -static -O2` into `target/linux-progs/NAME` (rebuilt when the source is newer),
//! and Debian's `busybox-static`, unmodified, is taken from its `.deb` (downloaded with
//! `apt-get download` into `target/linux-cache/`, unpacked with `dpkg-deb -x`; nothing is
//! installed on the host). Debian's `musl-tools` provides `musl-gcc`; it is installed with apt
//! if missing (said so). The Linux guest's init (linux/init/exec-init.c) is built the same way.

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

/// The C programs of linux/progs/ and the extra link arguments each needs.
pub const C_PROGRAMS: &[(&str, &[&str])] = &[
    ("hello", &[]),
    ("pthreads", &["-lpthread"]),
    ("signals", &[]),
    ("sigself", &[]),
    ("forkstorm", &[]),
    ("mmapfile", &[]),
    ("pipe2proc", &[]),
    ("fscalls", &[]),
    ("procs", &[]),
    ("fpswitch", &[]),
    ("threads", &["-lpthread"]),
    ("threads_bench", &["-lpthread"]),
];

/// The Linux guest's `/init` for `exec --system linux`, built into `target/linux-exec/`.
pub fn build_init() -> Result<PathBuf, String> {
    let src = workspace_root().join("linux").join("init").join("exec-init.c");
    let out = workspace_root().join("target").join("linux-exec").join("exec-init");
    compile(&src, &out, &[])
}

/// Build `linux/progs/NAME.c` (plus `-lpthread` etc. from `extra`) and return the binary.
pub fn build(name: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let src = source_dir().join(format!("{name}.c"));
    if !src.exists() {
        return Err(format!("no such test program: {}", src.display()));
    }
    compile(&src, &out_dir().join(name), extra)
}

fn compile(src: &Path, out: &Path, extra: &[&str]) -> Result<PathBuf, String> {
    if !newer(src, out) {
        return Ok(out.to_path_buf());
    }
    let dir = out.parent().expect("an output path has a parent");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cc = musl_gcc()?;
    let st = Command::new(&cc)
        .args(["-static", "-O2", "-Wall", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .status()
        .map_err(|e| format!("{}: {e}", cc.display()))?;
    if !st.success() {
        return Err(format!("musl-gcc failed on {}", src.display()));
    }
    Ok(out.to_path_buf())
}

/// Debian's `busybox-static` binary, unmodified: the `.deb` the archive serves is downloaded
/// once (`apt-get download busybox-static`) into `target/linux-cache/`, unpacked there with
/// `dpkg-deb -x`, and its `/bin/busybox` copied to `target/linux-progs/busybox`.
pub fn busybox_static() -> Result<PathBuf, String> {
    let out = out_dir().join("busybox");
    if out.exists() {
        return Ok(out);
    }
    let cache = crate::guest::linux::cache_dir();
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let find_deb = || -> Option<PathBuf> {
        std::fs::read_dir(&cache).ok()?.flatten().map(|e| e.path()).find(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            n.starts_with("busybox-static_") && n.ends_with(".deb")
        })
    };
    let deb = match find_deb() {
        Some(d) => d,
        None => {
            eprintln!("xtask: downloading Debian's busybox-static into {} (apt-get download)", cache.display());
            let ok = |st: std::io::Result<std::process::ExitStatus>| st.map(|s| s.success()).unwrap_or(false);
            if !ok(Command::new("apt-get").current_dir(&cache).args(["download", "-q", "busybox-static"]).status()) {
                let _ = Command::new("apt-get").args(["update", "-q"]).status();
                if !ok(Command::new("apt-get").current_dir(&cache).args(["download", "-q", "busybox-static"]).status()) {
                    return Err("apt-get download busybox-static failed (no Debian archive reachable?)".into());
                }
            }
            find_deb().ok_or("apt-get download busybox-static left no .deb")?
        }
    };
    let unpacked = cache.join("busybox-static");
    let st = Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked).status().map_err(|e| format!("dpkg-deb: {e}"))?;
    if !st.success() {
        return Err(format!("dpkg-deb -x {} failed", deb.display()));
    }
    let bin = unpacked.join("bin").join("busybox");
    let data = std::fs::read(&bin).map_err(|e| format!("{} holds no bin/busybox: {e}", deb.display()))?;
    super::inspect_elf(&data).map_err(|e| format!("{}: {e}", bin.display()))?;
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("{}: {e}", out_dir().display()))?;
    std::fs::copy(&bin, &out).map_err(|e| format!("cannot copy {} to {}: {e}", bin.display(), out.display()))?;
    Ok(out)
}

/// Every program: busybox and the C programs (`cargo xtask linux-progs`), as (name, path).
pub fn build_all() -> Result<Vec<(String, PathBuf)>, String> {
    let mut v = vec![("busybox".to_string(), busybox_static()?)];
    for &(name, extra) in C_PROGRAMS {
        v.push((name.to_string(), build(name, extra)?));
    }
    Ok(v)
}
