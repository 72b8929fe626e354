//! `AF_UNIX` stream sockets for Linux programs (docs/linux-abi.md, "Sockets and readiness";
//! docs/net.md, "Local sockets"): `socket(AF_UNIX, SOCK_STREAM)`, `socketpair`, `bind`,
//! `listen`, `accept4`, `connect`, `getsockname`, `getpeername`, `shutdown`, the socket
//! options Linux has for them, and reads and writes through the same `net::recv`/`send` as
//! TCP. The sockets are the descriptor layer's local sockets (`fd::unix_*`: a connection is
//! two pipe rings, a socket not connected is a page holding its name and accept queue); what
//! this file adds is Linux's addresses and errors.
//!
//! Names: a bound name lives in the library OS, not in the file system: the socket's page is
//! put in the session's share (`proc::session().share`, in every process of the program's
//! share set), where `connect` in any process of the session finds it. A path name is the
//! `sun_path` bytes as given (not resolved against the working directory); an abstract name
//! (`sun_path[0] == 0`) is its `addrlen - 2` bytes, as Linux. The name goes with the socket's
//! last close: a path is not left behind as a file (Linux keeps it until `unlink`), so a
//! second `bind` of a path after the first socket closed succeeds here and is `EADDRINUSE`
//! on Linux; `bind` to a path where the file system has a file is `EADDRINUSE` as on Linux.
//!
//! A socket descriptor carries a `net::SockInfo` (unused here but for what it is: a socket,
//! so `read`/`write`/`recv*`/`send*` reach `net.rs`, which hands local sockets to this file).
//! `connect` makes the descriptor another open file (the descriptor layer's connection
//! replaces its unconnected socket in every descriptor of the description).
//!
//! Limits: no `SCM_RIGHTS` or credentials (control data of `sendmsg` is ignored, `recvmsg`
//! returns none); no `MSG_PEEK`/`MSG_OOB` (`EOPNOTSUPP`); a blocking `connect` to a listener
//! whose queue is full is `EAGAIN` (Linux waits); `SOCK_DGRAM` and `SOCK_SEQPACKET` are
//! `EPROTONOSUPPORT`; each direction holds `fd::PIPE_BYTES` less a header (Linux's buffer
//! sizes differ).

use alloc::vec::Vec;

use abi::Error;
use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{Extra, Files, O_CLOEXEC, O_NONBLOCK};
use super::net::{
    SockInfo, MSG_DONTWAIT, MSG_NOSIGNAL, MSG_WAITALL, SOCK_CLOEXEC, SOCK_DGRAM, SOCK_NONBLOCK, SOCK_STREAM, SOL_SOCKET, SO_ERROR,
    SO_KEEPALIVE, SO_LINGER, SO_RCVBUF, SO_REUSEADDR, SO_REUSEPORT, SO_SNDBUF, SO_TYPE,
};
use crate::fd::{self, Fd, Kind, UnixState};

pub const AF_UNIX: u64 = 1;
const SOCK_RAW: u64 = 3;
const SOCK_SEQPACKET: u64 = 5;
const SOCK_PACKET: u64 = 10;
const MSG_CMSG_CLOEXEC: u64 = 0x4000_0000;

const SO_PASSCRED: u64 = 16;
const SO_ACCEPTCONN: u64 = 30;
const SO_DOMAIN: u64 = 39;

/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH: usize = 2;
/// `sizeof(struct sockaddr_un)`.
const SUN_LEN: usize = 110;

/// Whether descriptor `fd` is a local socket.
pub fn is_unix(f: &Files, fd: i32) -> bool {
    f.slot(fd).is_some_and(|s| matches!(fd::kind(s.fd), Ok(Kind::Unix(_) | Kind::UnixSock(_))))
}

/// The library OS error of a local socket call as Linux's.
fn errno(e: Error) -> i64 {
    -match e {
        Error::WouldBlock => EAGAIN,
        Error::BrokenPipe => EPIPE,
        Error::InvalidArgument => EINVAL,
        Error::AlreadyExists => EADDRINUSE,
        Error::NotPermitted => ECONNREFUSED,
        Error::NotFound => ECONNREFUSED,
        Error::Unsupported => ENOTCONN,
        Error::NoMemory | Error::OutOfRange => ENOMEM,
        Error::Busy => ENFILE,
        Error::NoSuchObject | Error::WrongType => EBADF,
        _ => EIO,
    }
}

/// `socket(AF_UNIX, type, protocol)`.
pub fn sys_socket(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (ty, protocol) = (a[1], a[2]);
    if let Err(e) = check_type(ty, protocol) {
        return e;
    }
    let lib = match fd::unix_socket(p.files.scope()) {
        Ok(l) => l,
        Err(e) => return errno(e),
    };
    p.files.install_with(lib, flags_of(ty), Extra::Sock(alloc::boxed::Box::new(SockInfo::new())))
}

/// The Linux answer for a type and protocol of `AF_UNIX`: stream only (`SOCK_DGRAM` and
/// `SOCK_SEQPACKET` exist on Linux and are not built here: `EPROTONOSUPPORT`).
fn check_type(ty: u64, protocol: u64) -> Result<(), i64> {
    // Linux's order: the flags and the type's range (`__sock_create`), the protocol, then
    // the type (`unix_create`, where `SOCK_RAW` means `SOCK_DGRAM`).
    if ty & !(SOCK_NONBLOCK | SOCK_CLOEXEC | 0xf) != 0 || ty & 0xf == 0 || ty & 0xf > SOCK_PACKET {
        return Err(-EINVAL);
    }
    if protocol != 0 && protocol != AF_UNIX {
        return Err(-EPROTONOSUPPORT);
    }
    match ty & 0xf {
        SOCK_STREAM => Ok(()),
        SOCK_DGRAM | SOCK_RAW | SOCK_SEQPACKET => Err(-EPROTONOSUPPORT),
        _ => Err(-ESOCKTNOSUPPORT),
    }
}

fn flags_of(ty: u64) -> u32 {
    (if ty & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 }) | if ty & SOCK_CLOEXEC != 0 { O_CLOEXEC } else { 0 }
}

/// `socketpair(domain, type, protocol, sv)`: two connected local sockets.
pub fn sys_socketpair(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (domain, ty, protocol, sv) = (a[0], a[1], a[2], a[3]);
    if domain != AF_UNIX {
        // Linux: AF_INET has no socketpair; an unknown family is EAFNOSUPPORT.
        return if domain == super::net::AF_INET || domain == 10 { -EOPNOTSUPP } else { -EAFNOSUPPORT };
    }
    if let Err(e) = check_type(ty, protocol) {
        return e;
    }
    if !p.image.space.ok(sv, 8, true) {
        return -EFAULT;
    }
    if p.files.open_fds().len() + 2 > super::files::MAX_FDS {
        return -EMFILE;
    }
    let (x, y) = match fd::unix_pair(p.files.scope()) {
        Ok(v) => v,
        Err(e) => return errno(e),
    };
    let fl = flags_of(ty);
    let r = p.files.install_with(x, fl, Extra::Sock(alloc::boxed::Box::new(SockInfo::new())));
    let w = p.files.install_with(y, fl, Extra::Sock(alloc::boxed::Box::new(SockInfo::new())));
    if r < 0 || w < 0 {
        for n in [r, w] {
            if n >= 0 {
                super::files::close(&mut p.files, n as i32);
            }
        }
        return -EMFILE;
    }
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(r as i32).to_le_bytes());
    b[4..].copy_from_slice(&(w as i32).to_le_bytes());
    p.image.space.put(sv, &b);
    0
}

/// A `struct sockaddr_un` argument of `len` bytes: its name (a path's bytes before its NUL,
/// or an abstract name with its leading 0). `Ok(None)`: only the family (`bind`'s autobind).
fn get_name(p: &Process, addr: u64, len: u64) -> Result<Option<Vec<u8>>, i64> {
    // Linux: a length outside 0..=sizeof(sockaddr_storage) first, then the copy, then the
    // family and the length for AF_UNIX.
    if (len as i32) < 0 || len > 128 {
        return Err(-EINVAL);
    }
    let b = if len == 0 { &[][..] } else { p.image.space.read(addr, len).ok_or(-EFAULT)? };
    if b.len() < SUN_PATH || u16::from_le_bytes([b[0], b[1]]) as u64 != AF_UNIX || b.len() > SUN_LEN {
        return Err(-EINVAL);
    }
    let path = &b[SUN_PATH..];
    if path.is_empty() {
        return Ok(None);
    }
    Ok(Some(if path[0] == 0 { path.to_vec() } else { path.iter().take_while(|&&c| c != 0).copied().collect() }))
}

/// A name's `struct sockaddr_un` bytes, as `getsockname` returns them (a path with its NUL;
/// an unnamed socket: the family only).
fn sockaddr_un(name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(SUN_PATH + name.len() + 1);
    v.extend_from_slice(&(AF_UNIX as u16).to_le_bytes());
    v.extend_from_slice(name);
    if name.first().is_some_and(|&c| c != 0) {
        v.push(0);
    }
    v
}

/// Write `sa` to a `(addr, addrlen)` pair (truncated to its length; the full length back).
fn put_addr(p: &mut Process, addr: u64, lenp: u64, sa: &[u8]) -> i64 {
    let Some(len) = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) else { return -EFAULT };
    if (len as i32) < 0 {
        return -EINVAL;
    }
    let n = (len as usize).min(sa.len());
    if !p.image.space.ok(addr, n as u64, true) || !p.image.space.ok(lenp, 4, true) {
        return -EFAULT;
    }
    p.image.space.put(addr, &sa[..n]);
    p.image.space.put(lenp, &(sa.len() as u32).to_le_bytes());
    0
}

fn lib_of(f: &Files, fd: i32) -> Result<Fd, i64> {
    f.slot(fd).map(|s| s.fd).ok_or(-EBADF)
}

fn info(lib: Fd) -> Result<(UnixState, Vec<u8>), i64> {
    let mut name = [0u8; fd::UNIX_NAME_MAX];
    let (st, n) = fd::unix_info(lib, &mut name).map_err(errno)?;
    Ok((st, name[..n].to_vec()))
}

/// The session's share, where bound names live (0 without a session: names of this process
/// only, in its own table's share).
fn rendezvous(f: &Files) -> Result<abi::ObjectId, i64> {
    match super::proc::session().share {
        0 => fd::table(f.scope()).map_err(errno),
        s => Ok(s),
    }
}

pub fn sys_bind(p: &mut Process, a: &[u64; 6]) -> i64 {
    let fd = a[0] as i32;
    let name = match get_name(p, a[1], a[2]) {
        Ok(Some(n)) => n,
        // Autobind: an abstract name of five hex digits, as Linux's.
        Ok(None) => {
            let mut st = crate::time::tsc();
            let v = super::dispatch::random_u64(&mut st) & 0xfffff;
            let mut n = alloc::vec![0u8];
            n.extend_from_slice(alloc::format!("{v:05x}").as_bytes());
            n
        }
        Err(e) => return e,
    };
    let lib = match lib_of(&p.files, fd) {
        Ok(l) => l,
        Err(e) => return e,
    };
    match info(lib) {
        Ok((UnixState::Sock(fd::UNIX_FRESH), _)) => {}
        Ok(_) => return -EINVAL,
        Err(e) => return e,
    }
    if name[0] != 0 {
        if let Ok(path) = core::str::from_utf8(&name) {
            let abs = super::files::join(&p.cwd, path);
            if super::files::stat(&abs, true).is_ok() {
                return -EADDRINUSE;
            }
        }
    }
    let rv = match rendezvous(&p.files) {
        Ok(r) => r,
        Err(e) => return e,
    };
    fd::unix_bind(lib, rv, &name).map(|_| 0).unwrap_or_else(errno)
}

pub fn sys_listen(p: &mut Process, a: &[u64; 6]) -> i64 {
    let lib = match lib_of(&p.files, a[0] as i32) {
        Ok(l) => l,
        Err(e) => return e,
    };
    let backlog = (a[1] as i32).max(0) as u64;
    match info(lib) {
        Ok((UnixState::Sock(_), _)) => fd::unix_listen(lib, backlog.min(fd::UNIX_MAX_BACKLOG)).map(|_| 0).unwrap_or_else(errno),
        Ok(_) => -EINVAL,
        Err(e) => e,
    }
}

pub fn sys_accept4(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, addr, lenp, flags) = (a[0] as i32, a[1], a[2], a[3]);
    if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
        return -EINVAL;
    }
    // Every pointer before a connection is taken (it would be lost on an EFAULT after).
    if addr != 0 {
        let Some(len) = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) else { return -EFAULT };
        if (len as i32) < 0 {
            return -EINVAL;
        }
        if !p.image.space.ok(lenp, 4, true) || !p.image.space.ok(addr, u64::from(len).min(SUN_LEN as u64), true) {
            return -EFAULT;
        }
    }
    let Some(s) = p.files.slot(fd) else { return -EBADF };
    let lib = s.fd;
    let nb = p.files.desc(fd).is_some_and(|d| d.flags & O_NONBLOCK != 0);
    match info(lib) {
        Ok((UnixState::Sock(fd::UNIX_LISTENING), _)) => {}
        Ok(_) => return -EINVAL,
        Err(e) => return e,
    }
    let c = match fd::unix_accept(lib, p.files.scope(), nb) {
        Ok(c) => c,
        Err(e) => {
            if e == Error::WouldBlock {
                p.files.note_drained(fd);
            }
            return errno(e);
        }
    };
    let n = p.files.install_with(c, flags_of(flags), Extra::Sock(alloc::boxed::Box::new(SockInfo::new())));
    if n >= 0 && addr != 0 {
        // The peer: the connecting socket, unnamed.
        let r = put_addr(p, addr, lenp, &sockaddr_un(&[]));
        if r < 0 {
            super::files::close(&mut p.files, n as i32);
            return r;
        }
    }
    n
}

pub fn sys_connect(p: &mut Process, a: &[u64; 6]) -> i64 {
    let fd = a[0] as i32;
    let name = match get_name(p, a[1], a[2]) {
        Ok(n) => n.unwrap_or_else(|| alloc::vec![0u8]),
        Err(e) => return e,
    };
    let lib = match lib_of(&p.files, fd) {
        Ok(l) => l,
        Err(e) => return e,
    };
    match info(lib) {
        Ok((UnixState::Sock(fd::UNIX_LISTENING), _)) => return -EINVAL,
        Ok((UnixState::Sock(_), _)) => {}
        Ok((UnixState::Conn { .. }, _)) => return -EISCONN,
        Err(e) => return e,
    }
    let rv = match rendezvous(&p.files) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let conn = match fd::unix_connect(p.files.scope(), rv, &name) {
        Ok(c) => c,
        Err(Error::NotFound) if name[0] != 0 => {
            // No socket has the path: Linux looks the path up in the file system first.
            let exists = core::str::from_utf8(&name).is_ok_and(|path| super::files::stat(&super::files::join(&p.cwd, path), false).is_ok());
            return if exists { -ECONNREFUSED } else { -ENOENT };
        }
        Err(e) => return errno(e),
    };
    for old in p.files.replace_open_file(fd, conn) {
        let _ = fd::close(old);
    }
    0
}

pub fn sys_getsockname(p: &mut Process, a: &[u64; 6]) -> i64 {
    let lib = match lib_of(&p.files, a[0] as i32) {
        Ok(l) => l,
        Err(e) => return e,
    };
    let name = match info(lib) {
        Ok((UnixState::Sock(_), n)) | Ok((UnixState::Conn { accepted: true }, n)) => n,
        Ok((UnixState::Conn { accepted: false }, _)) => Vec::new(),
        Err(e) => return e,
    };
    put_addr(p, a[1], a[2], &sockaddr_un(&name))
}

pub fn sys_getpeername(p: &mut Process, a: &[u64; 6]) -> i64 {
    let lib = match lib_of(&p.files, a[0] as i32) {
        Ok(l) => l,
        Err(e) => return e,
    };
    let name = match info(lib) {
        Ok((UnixState::Sock(_), _)) => return -ENOTCONN,
        Ok((UnixState::Conn { accepted: false }, n)) => n,
        Ok((UnixState::Conn { accepted: true }, _)) => Vec::new(),
        Err(e) => return e,
    };
    put_addr(p, a[1], a[2], &sockaddr_un(&name))
}

pub fn sys_shutdown(p: &mut Process, a: &[u64; 6]) -> i64 {
    let lib = match lib_of(&p.files, a[0] as i32) {
        Ok(l) => l,
        Err(e) => return e,
    };
    if a[1] > 2 {
        return -EINVAL;
    }
    match fd::unix_shutdown(lib, a[1] as u32) {
        Ok(()) => 0,
        // A socket that is not connected: Linux records the shutdown and answers 0.
        Err(Error::WrongType) => 0,
        Err(e) => errno(e),
    }
}

pub fn sys_setsockopt(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, level, name, val, len) = (a[0] as i32, a[1], a[2], a[3], a[4]);
    if let Err(e) = lib_of(&p.files, fd) {
        return e;
    }
    if level != SOL_SOCKET {
        // Local sockets have no options of their own (Linux's sock_no_setsockopt).
        return -EOPNOTSUPP;
    }
    if (len as i32) < 0 || len < 4 {
        return -EINVAL;
    }
    if p.image.space.read(val, len.min(256)).is_none() {
        return -EFAULT;
    }
    match name {
        // Accepted without effect: the rings are a fixed size, names are not ports.
        SO_REUSEADDR | SO_REUSEPORT | SO_KEEPALIVE | SO_SNDBUF | SO_RCVBUF | SO_PASSCRED => 0,
        SO_LINGER if len >= 8 => 0,
        SO_LINGER => -EINVAL,
        _ => -ENOPROTOOPT,
    }
}

pub fn sys_getsockopt(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, level, name, val, lenp) = (a[0] as i32, a[1], a[2], a[3], a[4]);
    let lib = match lib_of(&p.files, fd) {
        Ok(l) => l,
        Err(e) => return e,
    };
    if level != SOL_SOCKET {
        return -EOPNOTSUPP;
    }
    let Some(len) = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) else { return -EFAULT };
    if (len as i32) < 0 {
        return -EINVAL;
    }
    let listening = matches!(info(lib), Ok((UnixState::Sock(fd::UNIX_LISTENING), _)));
    let v: u32 = match name {
        SO_TYPE => SOCK_STREAM as u32,
        SO_DOMAIN => AF_UNIX as u32,
        SO_ERROR => 0,
        SO_ACCEPTCONN => u32::from(listening),
        _ => return -ENOPROTOOPT,
    };
    let n = (len as usize).min(4);
    if !p.image.space.ok(val, n as u64, true) || !p.image.space.ok(lenp, 4, true) {
        return -EFAULT;
    }
    p.image.space.put(val, &v.to_le_bytes()[..n]);
    p.image.space.put(lenp, &(n as u32).to_le_bytes());
    0
}

/// `read`/`recv*` of a local socket (`net::recv`): `MSG_DONTWAIT` for one call.
pub fn recv(f: &mut Files, fd: i32, dst: &mut [u8], flags: u64) -> i64 {
    if flags & !(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_WAITALL | MSG_CMSG_CLOEXEC) != 0 {
        return -EOPNOTSUPP;
    }
    let Some(s) = f.slot(fd) else { return -EBADF };
    let lib = s.fd;
    let nb = flags & MSG_DONTWAIT != 0 || f.desc(fd).is_some_and(|d| d.flags & O_NONBLOCK != 0);
    if matches!(fd::kind(lib), Ok(Kind::UnixSock(_))) {
        return -EINVAL;
    }
    if nb && !dst.is_empty() && fd::poll(lib).is_ok_and(|r| !r.read) {
        f.note_drained(fd);
        return -EAGAIN;
    }
    fd::read(lib, dst).map(|n| n as i64).unwrap_or_else(errno)
}

/// `write`/`send*` of a local socket (`net::send`): `EPIPE` and `SIGPIPE` (unless
/// `MSG_NOSIGNAL`) once it writes no more.
pub fn send(f: &mut Files, fd: i32, src: &[u8], flags: u64) -> i64 {
    if flags & !(MSG_DONTWAIT | MSG_NOSIGNAL) != 0 {
        return -EOPNOTSUPP;
    }
    let Some(s) = f.slot(fd) else { return -EBADF };
    let lib = s.fd;
    let nb = flags & MSG_DONTWAIT != 0 || f.desc(fd).is_some_and(|d| d.flags & O_NONBLOCK != 0);
    if matches!(fd::kind(lib), Ok(Kind::UnixSock(_))) {
        return -ENOTCONN;
    }
    if nb && !src.is_empty() && fd::poll(lib).is_ok_and(|r| !r.write) {
        f.note_drained(fd);
        return -EAGAIN;
    }
    // Non-blocking: what fits now (a blocking write waits for room for all of it).
    let r = if nb { fd::unix_write_now(lib, src) } else { fd::write(lib, src) };
    let r = r.map(|n| n as i64).unwrap_or_else(errno);
    if r == -EPIPE && flags & MSG_NOSIGNAL == 0 {
        super::pipe::broken_pipe();
    }
    r
}
