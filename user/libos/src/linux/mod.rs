//! The Linux personality (docs/linux-abi.md): unmodified static x86-64 Linux programs run
//! inside the runtime's own context. The kernel reflects every `syscall` the program makes
//! back to user mode at the upcall (`upcall.rs`, `abi::nr::LINUX_PERSONALITY`); the
//! dispatcher (`dispatch.rs`) runs it by its Linux number on the library OS: files on the
//! ext2 file system (`files.rs`), memory from the program's own segments (`load.rs`,
//! `vm.rs`, `mem.rs`), standard output and error to the host (`out.rs`).
//!
//! Sharing: the program is one process with one thread on the runtime's core; its
//! descriptor table, address space, signal state and working directory are this module's
//! private state (one `Process`), touched by no other core.
//!
//! NOT DONE: processes (`fork`, `clone`, `execve`, `wait4`), threads and `futex`, signal
//! delivery, pipes and sockets as descriptors (`fd::FileLike`), file mappings, `poll`, the
//! file calls that change names (`mkdirat`, `unlinkat`, `renameat2`, ...), `fcntl`, `dup*`;
//! standard input from a live terminal (it is a byte string given at start). The table of
//! what is there: `linuxabi::support`, docs/linux-abi.md.

pub mod dispatch;
pub mod epoll;
pub mod files;
pub mod load;
pub mod mem;
pub mod net;
pub mod out;
pub mod poll;
pub mod vm;
#[cfg(target_os = "none")]
pub mod upcall;

use alloc::string::String;
use alloc::vec::Vec;

/// How to run a program.
pub struct Options<'a> {
    /// The program's path in the file system (also `argv[0]` and `AT_EXECFN`).
    pub path: &'a str,
    pub argv: Vec<String>,
    pub envp: Vec<String>,
    /// Standard input's bytes.
    pub stdin: Vec<u8>,
    /// Standard output and error as framed records for the host (`out`).
    pub framed: bool,
    /// The working directory the program starts in (absolute; `/` if empty).
    pub cwd: String,
    /// Bring up the network card (Inline mode, this core's stack) for the program's sockets.
    pub net: bool,
}

/// What the run left.
pub struct Outcome {
    /// The exit status as a shell sees it.
    pub status: u64,
    /// System calls the program made.
    pub calls: u64,
}

/// Load and run the program; returns its status once it exits, with everything it had
/// (mappings, segments, files) released. A program the loader refuses is an `Err` with the
/// reason.
#[cfg(target_os = "none")]
pub fn run(o: &Options) -> Result<Outcome, String> {
    let file = crate::fs::read_all(o.path, 256 << 20).map_err(|e| alloc::format!("{}: cannot read: {e:?}", o.path))?;
    let (limit, _) = upcall::native_range();
    let argv: Vec<&[u8]> = o.argv.iter().map(|s| s.as_bytes()).collect();
    let envp: Vec<&[u8]> = o.envp.iter().map(|s| s.as_bytes()).collect();
    let mut seed = crate::time::tsc();
    let mut random = [0u8; 16];
    random[..8].copy_from_slice(&dispatch::random_u64(&mut seed).to_le_bytes());
    random[8..].copy_from_slice(&dispatch::random_u64(&mut seed).to_le_bytes());
    let loaded = load::load(&file, o.path, &argv, &envp, limit, random)?;
    let up = if o.net { Some(net::bring_up().map_err(|e| alloc::format!("cannot bring up the network card: {e:?} (boot with --net)"))?) } else { None };
    drop(file);
    let (entry, rsp) = (loaded.entry, loaded.rsp);
    let mut process = dispatch::Process::new(loaded, files::Files::new(o.stdin.clone()), o.framed);
    if o.cwd.starts_with('/') {
        process.cwd = files::normalize(&o.cwd);
    }
    *dispatch::PROC.lock() = Some(process);
    let r = upcall::enter(entry, rsp);
    let mut p = dispatch::PROC.lock().take().ok_or_else(|| String::from("the program's state is gone"))?;
    p.files.close_all();
    if let Some(up) = up {
        up.down();
    }
    load::unload(&mut p.image);
    let status = r.map_err(|e| alloc::format!("{}: the kernel refused the personality: {e:?}", o.path))?;
    Ok(Outcome { status, calls: p.calls })
}

