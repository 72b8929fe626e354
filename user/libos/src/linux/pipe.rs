//! Linux pipes on the library OS's pipes (`fd::pipe`, docs/fd.md "Pipes"): a ring in a
//! segment, its two ends open files of the process's private descriptor table like every
//! other Linux descriptor (`files.rs`). What makes them Linux's is how they cross a `fork`
//! (`carry`/`adopt`): the parent makes one open file of each end in the session's table
//! (`proc::Session::share`, in every process's share set), a new counted end of the same
//! ring; the child turns it into an open file of its own private table and closes the
//! session's. So each process closes its own ends, and the reader sees end of file once the
//! last writer anywhere has closed, as on Linux. Blocking: the pipe layer's reader and writer
//! spin a little, then yield the core (`pcore_yield`), so a writer queued behind the reader
//! on a time-shared core runs. `O_NONBLOCK` asks the pipe's readiness first (`would_block`).

use alloc::string::String;
use alloc::vec::Vec;

use abi::Error;
use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{self, Files, Stream, O_CLOEXEC, O_NONBLOCK, O_RDONLY, O_WRONLY};
use crate::fd::{self, Fd, Kind, Scope};

const O_DIRECT: u64 = 0o40000;

pub fn sys_pipe(p: &mut Process, a: &[u64; 6]) -> i64 {
    pipe2(p, a[0], 0)
}

pub fn sys_pipe2(p: &mut Process, a: &[u64; 6]) -> i64 {
    pipe2(p, a[0], a[1])
}

/// `pipe2(fds, flags)`: `O_CLOEXEC` and `O_NONBLOCK` (and `O_DIRECT`, accepted: every write
/// of at most `PIPE_BUF` bytes is one record already); anything else `EINVAL`.
fn pipe2(p: &mut Process, fds: u64, flags: u64) -> i64 {
    if flags & !(u64::from(O_NONBLOCK | O_CLOEXEC) | O_DIRECT) != 0 {
        return -EINVAL;
    }
    if !p.image.space.ok(fds, 8, true) {
        return -EFAULT;
    }
    if p.files.open_fds().len() + 2 > files::MAX_FDS {
        return -EMFILE;
    }
    let (rfd, wfd) = match fd::pipe(p.files.scope()) {
        Ok(x) => x,
        Err(Error::NoMemory) => return -ENOMEM,
        Err(_) => return -ENFILE,
    };
    let extra = flags as u32 & (O_NONBLOCK | O_CLOEXEC);
    // Two free slots were there, so neither install fails.
    let r = p.files.install(rfd, O_RDONLY | extra, Stream::None, String::new(), false);
    let w = p.files.install(wfd, O_WRONLY | extra, Stream::None, String::new(), false);
    if r < 0 || w < 0 {
        for x in [r, w] {
            if x >= 0 {
                files::close(&mut p.files, x as i32);
            }
        }
        return -EMFILE;
    }
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(r as i32).to_le_bytes());
    b[4..].copy_from_slice(&(w as i32).to_le_bytes());
    p.image.space.put(fds, &b);
    0
}

/// Whether a non-blocking read (`len` bytes wanted) or write of `fd` would wait: only a pipe
/// end can; a write with no reader does not wait (it fails with `EPIPE`).
pub fn would_block(fd: Fd, len: usize) -> bool {
    if len == 0 {
        return false;
    }
    match fd::kind(fd) {
        Ok(Kind::PipeRead(_)) => fd::poll(fd).is_ok_and(|r| !r.read),
        Ok(Kind::PipeWrite(_)) => fd::poll(fd).is_ok_and(|r| !r.write && !r.error),
        _ => false,
    }
}

/// A write found no read end open: `SIGPIPE` for the writer (its pending word; the
/// dispatcher acts on it after the call: by default the process ends).
pub fn broken_pipe() {
    if let Some(slot) = super::proc::my_slot() {
        super::proc::post_slot(slot, super::proc::SIGPIPE);
    }
}

/// How one descriptor crosses a fork.
pub enum Carried {
    /// An open file of the session's table (a pipe end, a local socket), to be made private
    /// in the child.
    Shared(Fd),
    /// The console: the child opens its own.
    Console,
    /// A file or directory of the file system: the child opens its path again at this
    /// offset. A file's description carries a shared offset cell (`Desc::shared`, set up by
    /// `Files::share_offsets_for_child`), so parent and child go on with one offset; `cell`
    /// is the holder counted for the child at this descriptor, if any (let go of if the
    /// fork fails).
    Path { path: String, flags: u32, dir: bool, offset: u64, cell: Option<usize> },
    /// Not given to the child (sockets, eventfds, in-memory files).
    Dropped,
}

/// In the parent, before the `cfork`: how each descriptor goes to the child. On failure
/// nothing is left open.
pub fn carry(files: &mut Files, share: abi::ObjectId) -> Result<Vec<(usize, Carried)>, i64> {
    let cells = files.share_offsets_for_child();
    let mut out: Vec<(usize, Carried)> = Vec::new();
    for (i, ofd, d) in files.open_fds() {
        let c = match fd::kind(ofd) {
            // Local sockets cross as pipes do: a new open file of the same pair or page.
            Ok(Kind::PipeRead(_) | Kind::PipeWrite(_) | Kind::Unix(_) | Kind::UnixSock(_)) => match fd::dup(ofd, Scope::Table(share)) {
                Ok(n) => Carried::Shared(n),
                Err(e) => {
                    release(out);
                    for &(_, c) in cells.iter().filter(|&&(n, _)| n >= i) {
                        super::proc::offset_cell_unref(c);
                    }
                    return Err(if e == Error::NoMemory { -ENOMEM } else { -EAGAIN });
                }
            },
            Ok(Kind::Console) => Carried::Console,
            Ok(Kind::Fs(_)) if !d.path.is_empty() => {
                let offset = if d.is_dir { 0 } else { fd::lseek(ofd, 0, crate::fs::SEEK_CUR).unwrap_or(0) };
                let cell = cells.iter().find(|&&(n, _)| n == i).map(|&(_, c)| c);
                Carried::Path { path: d.path.clone(), flags: d.flags, dir: d.is_dir, offset, cell }
            }
            _ => Carried::Dropped,
        };
        out.push((i, c));
    }
    Ok(out)
}

/// The parent's side of a fork that failed: close what `carry` opened.
pub fn release(carried: Vec<(usize, Carried)>) {
    for (_, c) in carried {
        match c {
            Carried::Shared(n) => {
                let _ = fd::close(n);
            }
            Carried::Path { cell: Some(c), .. } => super::proc::offset_cell_unref(c),
            _ => {}
        }
    }
}

/// In the child: every descriptor becomes an open file of its own private table.
pub fn adopt(files: &mut Files, carried: &[(usize, Carried)]) {
    let scope = files.scope();
    for (i, c) in carried {
        let new = match c {
            Carried::Shared(n) => {
                let mine = fd::dup(*n, scope).ok();
                let _ = fd::close(*n);
                mine
            }
            Carried::Console => fd::open_console(scope).ok(),
            Carried::Path { path, flags, dir, offset, .. } => {
                let how = if *dir || flags & files::O_ACCMODE == 3 { crate::fs::O_RDONLY } else { flags & files::O_ACCMODE };
                match fd::open(scope, path, how) {
                    Ok(n) => {
                        if *offset != 0 {
                            let _ = fd::lseek(n, *offset as i64, crate::fs::SEEK_SET);
                        }
                        Some(n)
                    }
                    Err(_) => None,
                }
            }
            Carried::Dropped => None,
        };
        files.reseat(*i, new);
    }
}
