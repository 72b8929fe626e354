//! The build environment: workspace paths, missing system tools (installed from Debian's
//! packages, saying so), and the kernel build.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Make sure `program` exists; otherwise install the Debian `packages` that provide it.
pub fn ensure_tool(program: &str, packages: &[&str]) -> Result<(), String> {
    if have(program) {
        return Ok(());
    }
    ensure_packages(packages)?;
    if have(program) {
        Ok(())
    } else {
        Err(format!("`{program}` is still missing after installing {}", packages.join(" ")))
    }
}

/// Install Debian packages that are not installed yet (as root, or through sudo).
pub fn ensure_packages(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing missing Debian packages: {}", missing.join(" "));
    let is_root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    let mut prefix: Vec<&str> = Vec::new();
    if !is_root {
        prefix.push("sudo");
    }
    let run = |extra: &[&str]| -> Result<(), String> {
        let mut argv: Vec<&str> = prefix.clone();
        argv.extend_from_slice(extra);
        let status = Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {}: {e}", argv[0]))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{}` failed ({status})", argv.join(" ")))
        }
    };
    run(&["apt-get", "update", "-qq"])?;
    let mut install = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    install.extend_from_slice(&missing);
    run(&install)
}

pub fn ensure_qemu() -> Result<(), String> {
    ensure_tool("qemu-system-x86_64", &["qemu-system-x86"])
}

/// Build the kernel ELF (release profile: TCG is slow enough already) and return its path.
pub fn build_kernel() -> Result<PathBuf, String> {
    build_kernel_with(&[])
}

/// Code generation for the kernel: fixed higher-half link address (code model "kernel", not
/// a PIE), frame pointers for exception backtraces.
pub const KERNEL_RUSTFLAGS: &str = "-C relocation-model=static -C code-model=kernel -C force-frame-pointers=yes";

/// Target directory of kernel builds (separate from user programs: different flags).
pub fn kernel_target_dir() -> PathBuf {
    target_dir().join("kernel")
}

/// The bare-metal target the kernel and user programs build for. rust-toolchain.toml names
/// it, but rustup installs a file's targets only when it installs the toolchain itself, so a
/// machine that already had stable lacks it: add it here, once, and say so.
pub const BARE_TARGET: &str = "x86_64-unknown-none";

pub fn ensure_bare_target() -> Result<(), String> {
    static CHECKED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let installed = Command::new("rustup")
                .current_dir(workspace_root())
                .args(["target", "list", "--installed"])
                .output()
                .map_err(|e| format!("cannot run rustup (needed to add the {BARE_TARGET} target): {e}"))?;
            if String::from_utf8_lossy(&installed.stdout).lines().any(|l| l.trim() == BARE_TARGET) {
                return Ok(());
            }
            println!("xtask: installing the missing Rust target {BARE_TARGET} (rustup target add)");
            let status = Command::new("rustup")
                .current_dir(workspace_root())
                .args(["target", "add", BARE_TARGET])
                .status()
                .map_err(|e| format!("cannot run rustup: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("`rustup target add {BARE_TARGET}` failed ({status}); without it nothing of the guest can be built"))
            }
        })
        .clone()
}

pub fn build_kernel_with(features: &[&str]) -> Result<PathBuf, String> {
    ensure_bare_target()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_X86_64_UNKNOWN_NONE_RUSTFLAGS", KERNEL_RUSTFLAGS)
        .arg("build")
        .arg("--target-dir")
        .arg(kernel_target_dir())
        .args(["--quiet", "--release", "-p", "kernel", "--target", "x86_64-unknown-none"]);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let status = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("kernel build failed".into());
    }
    let linked = kernel_target_dir().join("x86_64-unknown-none/release/kernel");
    // A kernel built with features gets its own name, so it never stands in for the normal one.
    let bootable = if features.is_empty() {
        kernel_target_dir().join("x86_64-unknown-none/release/kernel.elf")
    } else {
        kernel_target_dir().join(format!("x86_64-unknown-none/release/kernel-{}.elf", features.join("-")))
    };
    crate::host::ksyms::write_symbolized(&linked, &bootable)?;
    Ok(bootable)
}
