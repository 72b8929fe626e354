//! `cargo xtask iso`: a GRUB Multiboot2 ISO that boots under SeaBIOS and OVMF (UEFI), the
//! path to real hardware. grub-mkrescue makes one hybrid image with both boot loaders.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's ovmf package puts the UEFI firmware here.
pub const OVMF_CODE: &str = "/usr/share/ovmf/OVMF.fd";

pub fn default_iso_path() -> PathBuf {
    crate::host::env::target_dir().join("os.iso")
}

pub fn ensure_ovmf() -> Result<(), String> {
    if Path::new(OVMF_CODE).exists() {
        return Ok(());
    }
    crate::host::env::ensure_packages(&["ovmf"])
}

fn grub_cfg(cmdline: &str) -> String {
    // GRUB's own menu stays on the screen; the kernel owns the serial console.
    format!(
        "set timeout=0\nset default=0\n\nmenuentry \"manycore\" {{\n    multiboot2 /boot/kernel.elf {}\n    module2 /boot/initrd.cpio\n    boot\n}}\n",
        cmdline.replace(['"', '\n', ';'], " ")
    )
}

/// Build the kernel and an ISO around it with the given kernel command line.
pub fn build_iso_with(out: &Path, cmdline: &str) -> Result<(), String> {
    crate::host::env::ensure_tool("grub-mkrescue", &["grub-common", "grub-pc-bin", "grub-efi-amd64-bin", "xorriso", "mtools"])?;
    crate::host::env::ensure_packages(&["grub-pc-bin", "grub-efi-amd64-bin", "xorriso", "mtools"])?;
    let kernel = crate::host::env::build_kernel()?;
    let stage = crate::host::env::target_dir().join("iso-stage");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(stage.join("boot/grub")).map_err(|e| format!("cannot create {}: {e}", stage.display()))?;
    std::fs::copy(&kernel, stage.join("boot/kernel.elf")).map_err(|e| format!("cannot copy the kernel: {e}"))?;
    let initrd = crate::host::user::build_initrd()?;
    std::fs::copy(&initrd, stage.join("boot/initrd.cpio")).map_err(|e| format!("cannot copy the program archive: {e}"))?;
    std::fs::write(stage.join("boot/grub/grub.cfg"), grub_cfg(cmdline)).map_err(|e| format!("cannot write grub.cfg: {e}"))?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let o = Command::new("grub-mkrescue")
        .arg("-o")
        .arg(out)
        .arg(&stage)
        .output()
        .map_err(|e| format!("cannot run grub-mkrescue: {e}"))?;
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!("grub-mkrescue failed: {}", err.lines().last().unwrap_or("").trim()));
    }
    Ok(())
}

/// `cargo xtask iso [--out PATH] [--cmdline "..."]` (cli.rs).
pub fn command(out: Option<PathBuf>, cmdline: String) -> Result<(), String> {
    let out = out.unwrap_or_else(default_iso_path);
    build_iso_with(&out, &cmdline)?;
    println!("{}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn grub_cfg_carries_a_sanitised_cmdline() {
        let c = super::grub_cfg("test; reboot\n\"x\"");
        assert!(c.contains("multiboot2 /boot/kernel.elf test  reboot  x "));
        assert_eq!(c.matches("boot\n").count(), 1);
    }
}
