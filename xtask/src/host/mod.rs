//! The host layer: what every command of `cargo xtask` stands on, and which knows none of
//! them. The build environment and its package installs (`env`), the user programs and their
//! archive (`user`, `cpio`), the GRUB ISO (`iso`), the kernel's symbols (`ksyms`), the
//! machine QEMU emulates (`vm`) and the one way to run QEMU and read its serial console
//! (`qemu`), the seeded generator (`rng`), progress lines (`progress`) and how a command ends
//! (`outcome`: its failure, and the test tallies).
//!
//! Nothing here imports a command module (docs/architecture.md, "The host tool", draws the layers).

pub mod args;
pub mod cpio;
pub mod date;
pub mod env;
pub mod ext2img;
pub mod gdb;
pub mod iso;
pub mod json;
pub mod ksyms;
pub mod memcload;
pub mod outcome;
pub mod progress;
pub mod qemu;
pub mod rng;
pub mod tcpload;
pub mod user;
pub mod vm;
