//! The Linux personality (docs/linux-abi.md): unmodified static x86-64 Linux programs run
//! inside the runtime's own context. The kernel reflects every `syscall` the program makes
//! back to user mode at the upcall (`upcall.rs`, `abi::nr::LINUX_PERSONALITY`); the
//! dispatcher (`dispatch.rs`) runs it by its Linux number on the library OS: descriptors
//! over the library OS's descriptor model (`files.rs`, `crate::fd`), the calls that make and
//! change names on the ext2 file system (`fscalls.rs`), memory and file mappings from the
//! program's own segments (`load.rs`, `vm.rs`, `mem.rs`), standard output and error to the
//! host (`out.rs`), signals and the program's own faults (`signal.rs`).
//!
//! Sharing: the program is one process; its first thread runs in the runtime's own context,
//! each other thread (`thread.rs`) in a library-OS thread of the runtime, on a core of its
//! own while there are enough (else time-shared on a TC). The descriptor table, address
//! space, signal actions and working directory are one `Process` behind the process lock;
//! each thread's own state is its slot (`thread::SLOTS`); futex waiters are in `futex.rs`'s
//! buckets.
//!
//! Processes (`fork`, `execve`, `wait4`, the process table) are `proc.rs` and `exec.rs`,
//! pipes `pipe.rs`: each process is a context of its own, a `cfork` of its parent's (of the
//! calling thread only, as Linux: the child has one thread).
//!
//! Sockets, `epoll`, `poll`/`select` and eventfds are `net.rs`, `epoll.rs`, `poll.rs`
//! (docs/linux-abi.md, "Sockets and readiness").
//!
//! NOT DONE: standard input from a live terminal (it is a
//! byte string given at start). The table of what is there: `linuxabi::support`,
//! docs/linux-abi.md.

pub mod dispatch;
pub mod epoll;
pub mod exec;
pub mod files;
pub mod fscalls;
pub mod futex;
pub mod load;
pub mod mem;
pub mod net;
pub mod out;
pub mod pipe;
pub mod poll;
pub mod proc;
pub mod signal;
pub mod thread;
pub mod unix;
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
    /// Standard input is the console (`stdin` unused): what is typed on the serial line.
    pub console_in: bool,
    /// Standard output and error as framed records for the host (`out`).
    pub framed: bool,
    /// The working directory the program starts in (absolute; `/` if empty).
    pub cwd: String,
    /// Arm the kernel's configured allocation fault injection (`inject=` with
    /// `inject_from=program`) just before the program's first instruction, so every injected
    /// failure meets a call the program made (the Linux fuzzer, docs/fuzz.md), not the load.
    pub arm_injection: bool,
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
    let up = match o.net.then(net::bring_up).transpose() {
        Ok(up) => up,
        Err(e) => {
            let mut image = loaded;
            load::unload(&mut image);
            return Err(alloc::format!("cannot bring up the network card: {e:?} (boot with --net)"));
        }
    };
    drop(file);
    let (entry, rsp) = (loaded.entry, loaded.rsp);
    let files = match files::Files::new(o.stdin.clone()) {
        Ok(f) => f,
        Err(e) => {
            let mut image = loaded;
            load::unload(&mut image);
            if let Some(up) = up {
                up.down();
            }
            return Err(alloc::format!("{}: cannot open the console descriptors: {e:?}", o.path));
        }
    };
    let mut files = files;
    files.console_in = o.console_in;
    let mut process = dispatch::Process::new(loaded, files, o.framed);
    if o.cwd.starts_with('/') {
        process.cwd = files::normalize(&o.cwd);
    }
    process.procs = match proc::start_session() {
        Ok(s) => proc::ProcState { exe: files::normalize(o.path), ..s },
        Err(e) => {
            process.files.close_all();
            load::unload(&mut process.image);
            if let Some(up) = up {
                up.down();
            }
            return Err(alloc::format!("{}: no process table: {e:?}", o.path));
        }
    };
    proc::use_table_slot(&mut process);
    *dispatch::PROC.lock() = Some(process);
    if o.arm_injection {
        if let Err(e) = crate::sys::inject_arm() {
            crate::println!("linux: cannot arm fault injection: {e:?}");
        }
    }
    let r = upcall::enter(entry, rsp);
    // Every other thread ends (and is freed) before the process goes: they run in its memory.
    let mut threads = match dispatch::lock_proc().as_mut() {
        Some(p) => core::mem::replace(&mut p.threads, thread::Threads::empty()),
        None => return Err(String::from("the program's state is gone")),
    };
    threads.finish(100);
    let mut p = dispatch::PROC.lock().take().ok_or_else(|| String::from("the program's state is gone"))?;
    p.sig.finish();
    if let Some(sig) = p.sig.killed_by {
        crate::println!("linux: {} killed by signal {sig}", o.path);
    }
    // Children first (they are halted), then the program's own files and memory, then the
    // session (the process table and every pipe still open in it).
    p.procs.children.clear();
    p.files.close_all();
    if let Some(up) = up {
        up.down();
    }
    load::unload(&mut p.image);
    proc::end_session(&mut p);
    let status = r.map_err(|e| alloc::format!("{}: the kernel refused the personality: {e:?}", o.path))?;
    Ok(Outcome { status, calls: dispatch::CALLS.load(core::sync::atomic::Ordering::Relaxed) })
}

