//! `execve`: the process's image replaced in place (docs/linux-abi.md, "Processes"). Every
//! argument is copied in and checked first (`EFAULT`, `E2BIG`), then the file (`ENOENT`,
//! `EACCES` for a directory or a file nobody may execute, `ENOEXEC` for what the loader
//! refuses); only then is the old image unloaded and the new one loaded (`load::load`, the
//! same loader as the first program's: `AT_EXECFN` is the path as given). The descriptors
//! marked `FD_CLOEXEC` are closed, handled signals go back to their default action (ignored
//! ones stay ignored, the mask stays), and the upcall returns into the new program: its
//! frame is rewritten to the new entry and stack with every register cleared. The process's
//! other threads end first (each at its next call or wake-up, halted after a grace period if
//! it makes none); an `execve` from a thread other than the main one is completed by the main
//! thread, so the new program runs with the pid as its tid.

use alloc::string::String;
use alloc::vec::Vec;

use linuxabi::errno::*;

use super::dispatch::{lock_proc, Process};
use super::thread;
use super::upcall::Frame;

/// Longest path (Linux's `PATH_MAX` less the NUL).
const PATH_MAX: usize = 4095;

/// The strings of a NULL-terminated pointer array (`argv`, `envp`); `0` is an empty array.
fn strings(p: &Process, mut at: u64) -> Result<Vec<Vec<u8>>, i64> {
    let mut out = Vec::new();
    if at == 0 {
        return Ok(out);
    }
    let mut total = 0usize;
    loop {
        let ptr = p.image.space.get_u64(at).ok_or(-EFAULT)?;
        if ptr == 0 {
            return Ok(out);
        }
        let s = p.image.space.cstr(ptr, super::load::ARG_ROOM).map_err(|e| if e == -ENAMETOOLONG { -E2BIG } else { e })?;
        total += s.len() + 1 + 8;
        if total > super::load::ARG_ROOM || out.len() >= linuxabi::initstack::MAX_STRINGS {
            return Err(-E2BIG);
        }
        out.push(Vec::from(s));
        at = at.checked_add(8).ok_or(-EFAULT)?;
    }
}

/// An `execve` checked up to the point of no return: the file's bytes (its ELF plan
/// accepted), the path as given and made absolute, the arguments and environment.
pub struct Prepared {
    file: Vec<u8>,
    given: String,
    abs: String,
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
}

/// `execve(path, argv, envp)`. Everything that can fail with an error is checked first
/// (`prepare`, under the process lock); then the program's other threads end (Linux's
/// `de_thread`). From the main thread the image is replaced here; from another thread the
/// checked exec is handed to the main thread, which replaces the image and runs the new
/// program (with the pid as its tid, as Linux makes the caller the leader), and the caller
/// ends.
pub fn sys_execve(f: &mut Frame) -> i64 {
    let prepared = {
        let mut g = lock_proc();
        let Some(p) = g.as_mut() else { return -ENOSYS };
        match prepare(p, f.rdi, f.rsi, f.rdx) {
            Ok(x) => x,
            Err(e) => return e,
        }
    };
    let slot = super::upcall::my_slot();
    let others = lock_proc().as_ref().is_some_and(|p| p.threads.others() > 0);
    if slot != 0 || others {
        thread::end_others_for_exec(slot, EXEC_GRACE_MS);
    }
    if slot != 0 {
        *thread::EXEC_HANDOVER.lock() = Some(prepared);
        thread::kick(&thread::SLOTS[0]);
        // Ends this thread (never returns).
        let _ = thread::leave_for_exec();
        return -ENOSYS;
    }
    thread::exec_done();
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    match complete(p, prepared) {
        Ok((entry, rsp)) => {
            // The upcall returns into the new program as Linux starts one: rsp at argc,
            // rdx = 0 (no exit handler), the other registers cleared.
            *f = Frame { r9: 0, r8: 0, r10: 0, rdx: 0, rsi: 0, rdi: 0, r15: 0, r14: 0, r13: 0, r12: 0, rbp: 0, rbx: 0, ret: 0, nr_flags: 0x202, rip: entry, rsp };
            0
        }
        Err(e) => e,
    }
}

/// How long the other threads get to reach a system call before an `execve` halts them.
const EXEC_GRACE_MS: u64 = 200;

/// The main thread, handed a thread's `execve` (`thread::leave_for_exec`): replace the image
/// and run the new program; if the load fails, the process ends (as `complete` says).
pub fn run_handed_over(h: Prepared) -> ! {
    let next = {
        let mut g = lock_proc();
        match g.as_mut() {
            Some(p) => match complete(p, h) {
                Ok((entry, rsp)) => Ok((entry, rsp)),
                Err(_) => Err(p.exit.unwrap_or(128 + u64::from(super::proc::SIGKILL))),
            },
            None => Err(127),
        }
    };
    match next {
        Ok((rip, rsp)) => {
            let r = linuxabi::signal::Regs { rip, rsp, rflags: 0x202, ..Default::default() };
            super::upcall::resume(&r)
        }
        Err(status) => super::upcall::leave(status),
    }
}

/// Every check an `execve` makes before anything changes: the path (`EFAULT`, `ENOENT`),
/// the arguments and environment (`EFAULT`, `E2BIG`), the file (`EACCES` for a directory or
/// a file without an execute bit, `ENOEXEC` for what the loader refuses).
fn prepare(p: &Process, path: u64, argv: u64, envp: u64) -> Result<Prepared, i64> {
    let raw = p.image.space.cstr(path, PATH_MAX)?;
    let given = core::str::from_utf8(raw).map_err(|_| -ENOENT)?;
    if given.is_empty() {
        return Err(-ENOENT);
    }
    let given = String::from(given);
    let argv = strings(p, argv)?;
    let envp = strings(p, envp)?;
    {
        let av: Vec<&[u8]> = argv.iter().map(|s| s.as_slice()).collect();
        let ev: Vec<&[u8]> = envp.iter().map(|s| s.as_slice()).collect();
        if linuxabi::initstack::needed(&av, &ev, given.as_bytes()) > super::load::ARG_ROOM {
            return Err(-E2BIG);
        }
    }
    let abs = if given.starts_with('/') { super::files::normalize(&given) } else { super::files::join(&p.cwd, &given) };
    // `/proc/self/exe` (there is no /proc): the program this process runs, which is how
    // busybox's shell runs its own applets.
    let abs = if abs == "/proc/self/exe" { p.procs.exe.clone() } else { abs };
    let st = super::files::stat(&abs, false)?;
    if st.mode & 0o170000 != 0o100000 || st.mode & 0o111 == 0 {
        // A directory, a device, or a file without an execute bit.
        return Err(-EACCES);
    }
    let file = crate::fs::read_all(&abs, 256 << 20).map_err(super::files::errno)?;
    let (limit, _) = super::upcall::native_range();
    match linuxabi::elf::plan(&file, super::load::PIE_BASE, super::load::MIN_ADDR, limit) {
        Ok(_) => {}
        // Linux opens the interpreter first: a missing one is ENOENT. One that exists is still
        // refused (no dynamic loading): ENOEXEC.
        Err(linuxabi::elf::ElfError::Interp(name)) => {
            let interp = core::str::from_utf8(name).unwrap_or("");
            let abs = if interp.starts_with('/') { super::files::normalize(interp) } else { super::files::join(&p.cwd, interp) };
            return Err(if interp.is_empty() || super::files::stat(&abs, true).is_err() { -ENOENT } else { -ENOEXEC });
        }
        Err(_) => return Err(-ENOEXEC),
    }
    Ok(Prepared { file, given, abs, argv, envp })
}

/// Past the point of no return (the caller is the process's only thread): the old image
/// goes, the new one is loaded; returns its entry and stack pointer.
fn complete(p: &mut Process, x: Prepared) -> Result<(u64, u64), i64> {
    let Prepared { file, given, abs, argv, envp } = x;
    let av: Vec<&[u8]> = argv.iter().map(|s| s.as_slice()).collect();
    let ev: Vec<&[u8]> = envp.iter().map(|s| s.as_slice()).collect();
    let (limit, _) = super::upcall::native_range();
    super::load::unload(&mut p.image);
    let mut seed = crate::time::tsc();
    let mut random = [0u8; 16];
    random[..8].copy_from_slice(&super::dispatch::random_u64(&mut seed).to_le_bytes());
    random[8..].copy_from_slice(&super::dispatch::random_u64(&mut seed).to_le_bytes());
    match super::load::load(&file, &given, &av, &ev, limit, random) {
        Ok(l) => {
            p.image = l;
            p.procs.exe = abs;
            // Threads the new program makes map its segments from its share.
            p.threads.set_prog_share(p.image.share);
        }
        Err(msg) => {
            // Nothing to return to: the process ends as Linux ends it (SIGKILL) past this point.
            crate::println!("linux: execve {given}: {msg}");
            p.procs.killed_by = Some(super::proc::SIGKILL);
            p.exit = Some(128 + u64::from(super::proc::SIGKILL));
            return Err(-ENOEXEC);
        }
    }
    p.files.close_on_exec();
    p.sig.reset_on_exec();
    super::thread::me().fs_base.store(0, core::sync::atomic::Ordering::Relaxed);
    Ok((p.image.entry, p.image.rsp))
}
