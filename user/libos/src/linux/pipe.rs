//! Linux pipes on the library OS's pipes (`fd::pipe`, docs/fd.md "Pipes"): a ring in a
//! segment, its ends open files of the session's table (`proc::Session::share`, a
//! kernel-object table every process of the program has in its share set). A Linux
//! descriptor of a pipe is `Desc::Pipe`; a forked child gets its own open file of every pipe
//! end its parent had (`dup_for_child`: a new counted end of the same ring), so each process
//! closes its own and the last writer's close is what gives the reader end of file, as on
//! Linux. Blocking: the pipe layer's reader and writer spin a little, then yield the core
//! (`pcore_yield`), so a writer queued behind the reader on a time-shared core runs.

use alloc::vec::Vec;

use abi::Error;
use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{Desc, Files};
use crate::fd::{self, Fd, Scope};

const O_NONBLOCK: u64 = 0o4000;
const O_DIRECT: u64 = 0o40000;
const O_CLOEXEC: u64 = 0o2000000;

fn errno(e: Error) -> i64 {
    match e {
        Error::BrokenPipe => -EPIPE,
        Error::NoMemory => -ENOMEM,
        Error::NotPermitted => -EBADF,
        Error::WouldBlock => -EAGAIN,
        _ => -EIO,
    }
}

pub fn sys_pipe(p: &mut Process, a: &[u64; 6]) -> i64 {
    pipe2(p, a[0], 0)
}

pub fn sys_pipe2(p: &mut Process, a: &[u64; 6]) -> i64 {
    pipe2(p, a[0], a[1])
}

/// `pipe2(fds, flags)`: `O_CLOEXEC` and `O_NONBLOCK` (and `O_DIRECT`, accepted: every write
/// of at most `PIPE_BUF` bytes is one record already); anything else `EINVAL`.
fn pipe2(p: &mut Process, fds: u64, flags: u64) -> i64 {
    if flags & !(O_NONBLOCK | O_DIRECT | O_CLOEXEC) != 0 {
        return -EINVAL;
    }
    if !p.image.space.ok(fds, 8, true) {
        return -EFAULT;
    }
    let Some(r) = super::files::free_slot(&p.files) else { return -EMFILE };
    // The second slot: the first free one after `r` (both found before anything is made).
    let Some(w) = p.files.slots.iter().enumerate().skip(r + 1).find(|(_, s)| s.is_none()).map(|(i, _)| i) else { return -EMFILE };
    let share = super::proc::session().share;
    if share == 0 {
        return -ENFILE;
    }
    let (rfd, wfd) = match fd::pipe(Scope::Table(share)) {
        Ok(x) => x,
        Err(Error::NoMemory) => return -ENOMEM,
        Err(_) => return -ENFILE,
    };
    let nonblock = flags & O_NONBLOCK != 0;
    p.files.slots[r] = Some(Desc::Pipe { fd: rfd, write: false, nonblock });
    p.files.slots[w] = Some(Desc::Pipe { fd: wfd, write: true, nonblock });
    if flags & O_CLOEXEC != 0 {
        p.files.cloexec |= (1 << r) | (1 << w);
    }
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(r as i32).to_le_bytes());
    b[4..].copy_from_slice(&(w as i32).to_le_bytes());
    p.image.space.put(fds, &b);
    0
}

pub fn close(fd: Fd) -> i64 {
    match fd::close(fd) {
        Ok(()) => 0,
        Err(_) => -EIO,
    }
}

pub fn read(fd: Fd, write_end: bool, nonblock: bool, dst: &mut [u8]) -> i64 {
    if write_end {
        return -EBADF;
    }
    if nonblock && !dst.is_empty() && !fd::poll(fd).is_ok_and(|r| r.read) {
        return -EAGAIN;
    }
    fd::read(fd, dst).map(|n| n as i64).unwrap_or_else(errno)
}

/// A write; with no read end open anywhere, `EPIPE` and `SIGPIPE` to the writer (its default
/// action ends it: `proc::take_pending` after the call).
pub fn write(fd: Fd, write_end: bool, nonblock: bool, src: &[u8]) -> i64 {
    if !write_end {
        return -EBADF;
    }
    if nonblock && !src.is_empty() {
        match fd::poll(fd) {
            Ok(r) if r.error => {}
            Ok(r) if !r.write => return -EAGAIN,
            _ => {}
        }
    }
    match fd::write(fd, src) {
        Ok(n) => n as i64,
        Err(Error::BrokenPipe) => {
            broken_pipe();
            -EPIPE
        }
        Err(e) => errno(e),
    }
}

/// `SIGPIPE` for the calling process (its pending word; the dispatcher's caller holds the
/// process lock, so the slot is read from the table without it).
fn broken_pipe() {
    if let Some(slot) = super::proc::my_slot() {
        super::proc::post_slot(slot, super::proc::SIGPIPE);
    }
}

/// For a fork: a new open file of every pipe end in `files`, in the session's table `share`,
/// for the child (`(descriptor, new open file)`). On failure nothing is left open.
pub fn dup_for_child(files: &Files, share: abi::ObjectId) -> Result<Vec<(usize, Fd)>, i64> {
    let mut out = Vec::new();
    for (i, s) in files.slots.iter().enumerate() {
        if let Some(Desc::Pipe { fd, .. }) = s {
            match fd::dup(*fd, Scope::Table(share)) {
                Ok(n) => out.push((i, n)),
                Err(e) => {
                    for (_, n) in out {
                        let _ = fd::close(n);
                    }
                    return Err(if e == Error::NoMemory { -ENOMEM } else { -EAGAIN });
                }
            }
        }
    }
    Ok(out)
}

/// In the child: its pipe descriptors become the open files made for it.
pub fn adopt(files: &mut Files, pipes: &[(usize, Fd)]) {
    for &(i, n) in pipes {
        if let Some(Some(Desc::Pipe { fd, .. })) = files.slots.get_mut(i) {
            *fd = n;
        }
    }
}
