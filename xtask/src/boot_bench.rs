//! `cargo xtask bench boot`: time from QEMU start to the kernel's summary line.

pub fn run(_args: &[String]) -> Result<(), String> {
    Err("bench boot: not built yet".into())
}
