//! The Linux baseline: fetch Debian's kernel, build an initramfs, boot it under the same
//! QEMU configuration. Not built yet.

pub fn main(_args: &[String]) -> Result<(), String> {
    Err("linux: not built yet".into())
}
