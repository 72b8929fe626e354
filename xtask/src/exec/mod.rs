//! Running one unmodified static Linux program (`cargo xtask exec`): on this system, through
//! the library OS's Linux personality (`ours`), or on the Linux guest (`linux`), with its
//! standard output and error copied to the terminal and its exit status returned, like
//! `qemu-x86_64` does. The conformance suite runs the same program on both and compares.
//!
//! `progs` builds the project's own C test programs (linux/progs/*.c) with `musl-gcc -static`.
//!
//! NOT FINISHED: this is the shared frame the two halves are built into; `ours::run` and
//! `linux::run` say what each does.

pub mod abi_doc;
pub mod abi_suite;
pub mod linux;
pub mod ours;
pub mod progs;

use std::path::PathBuf;
use std::time::Duration;

/// One program to run, the same request for both systems.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The program on the host (a static x86-64 ELF).
    pub program: PathBuf,
    /// `argv[1..]` (`argv[0]` is the program's path inside the guest).
    pub args: Vec<String>,
    /// Extra files to put beside it: (path inside the guest, host file).
    pub files: Vec<(String, PathBuf)>,
    /// Standard input (empty: end of file at once).
    pub stdin: Vec<u8>,
    /// Guest vCPUs.
    pub smp: u32,
    /// Root file system image (ext2); `None`: a fresh root holding the program and `/tmp`.
    pub disk: Option<PathBuf>,
    /// Give up after this long (the run then fails; nothing is left running).
    pub timeout: Duration,
}

/// What a program did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The exit status as `wait4` reports it to a shell: the code, or 128 + signal number.
    pub status: i32,
    /// What else the guest printed (kernel console, "unimplemented system call" reports).
    pub console: String,
}
