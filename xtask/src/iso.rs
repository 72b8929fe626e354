//! `cargo xtask iso`: a GRUB Multiboot2 ISO that boots under SeaBIOS and OVMF.

use std::path::{Path, PathBuf};

/// Debian's ovmf package puts the UEFI firmware here.
pub const OVMF_CODE: &str = "/usr/share/ovmf/OVMF.fd";

pub fn default_iso_path() -> PathBuf {
    crate::env::target_dir().join("os.iso")
}

pub fn ensure_ovmf() -> Result<(), String> {
    if Path::new(OVMF_CODE).exists() {
        return Ok(());
    }
    crate::env::ensure_packages(&["ovmf"])
}

pub fn build_iso(_out: &Path) -> Result<(), String> {
    Err("iso: not built yet".into())
}

pub fn command(args: &[String]) -> Result<(), String> {
    let mut out = default_iso_path();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = PathBuf::from(it.next().ok_or("--out needs a path")?),
            other => return Err(format!("iso: unknown option `{other}`")),
        }
    }
    build_iso(&out)?;
    println!("{}", out.display());
    Ok(())
}
