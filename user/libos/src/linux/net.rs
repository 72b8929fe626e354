//! Sockets for Linux programs (docs/linux-abi.md, "Sockets and readiness"): `AF_INET`
//! `SOCK_STREAM` sockets over the runtime core's private smoltcp stack (`net::host`), as
//! socket descriptors of the library OS (`fd::Kind::Socket`; a socket's state is its core's,
//! docs/net.md).
//!
//! Linux separates `socket`, `bind` and `listen`/`connect`; the stack makes a smoltcp socket
//! when it listens or connects. So `socket` makes a descriptor-layer socket that is neither
//! yet (`fd::tcp_socket`), and `listen`/`connect` make it one or the other in place
//! (`fd::tcp_listen_on`, `fd::tcp_connect_from`). What Linux keeps beside it (the bound port,
//! options, `shutdown`'s state, `SO_ERROR`) is a `SockInfo` in the socket's open file
//! description (`files::Desc::sock`).
//!
//! Options: `SO_REUSEADDR`, `SO_REUSEPORT`, `SO_LINGER`, `SO_SNDBUF`, `SO_RCVBUF` are recorded
//! and read back but change nothing (the stack's buffers are `net::host::SOCKET_BUFFER` bytes
//! each; a port is bound by one socket of the program at a time whatever the flags);
//! `TCP_NODELAY` turns smoltcp's Nagle off, `SO_KEEPALIVE` its keep-alive on (75 s);
//! `SO_ERROR` reports a failed non-blocking connect once.
//!
//! A write to a connection that can send no more is `-EPIPE` with `SIGPIPE` (unless
//! `MSG_NOSIGNAL`), as a pipe's.
//!
//! `AF_UNIX` stream sockets are `unix.rs`'s: `socket`, each socket call and `recv`/`send`
//! hand a local socket to it first.
//!
//! NOT DONE: `SOCK_DGRAM` (the stack is built without UDP: `-EPROTONOSUPPORT`), `AF_INET6`
//! (`-EAFNOSUPPORT`), `MSG_PEEK`/`MSG_OOB`; a TCP socket descriptor carried into a forked
//! child.

use alloc::vec::Vec;

use abi::Error;
use linuxabi::errno::*;
use smoltcp::socket::tcp;
use smoltcp::wire::IpAddress;

use crate::fd::{self, Fd};

pub const AF_INET: u64 = 2;
pub const SOCK_STREAM: u64 = 1;
pub const SOCK_DGRAM: u64 = 2;
pub const SOCK_NONBLOCK: u64 = 0o4000;
pub const SOCK_CLOEXEC: u64 = 0o2000000;
const IPPROTO_TCP: u64 = 6;

pub(super) const SOL_SOCKET: u64 = 1;
pub(super) const SO_REUSEADDR: u64 = 2;
pub(super) const SO_TYPE: u64 = 3;
pub(super) const SO_ERROR: u64 = 4;
pub(super) const SO_SNDBUF: u64 = 7;
pub(super) const SO_RCVBUF: u64 = 8;
pub(super) const SO_KEEPALIVE: u64 = 9;
pub(super) const SO_LINGER: u64 = 13;
pub(super) const SO_REUSEPORT: u64 = 15;
const TCP_NODELAY: u64 = 1;

pub const MSG_DONTWAIT: u64 = 0x40;
pub const MSG_NOSIGNAL: u64 = 0x4000;
pub(super) const MSG_WAITALL: u64 = 0x100;

/// The first port `connect` (and `bind` to port 0) takes when the program names none.
const EPHEMERAL_FIRST: u16 = 49152;

/// The guest's address on QEMU's user network (what `getsockname` of a connection says).
pub const GUEST_IP: [u8; 4] = [10, 0, 2, 15];

/// Options a Linux program set, read back by `getsockopt`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opts {
    reuseaddr: u32,
    reuseport: u32,
    keepalive: u32,
    nodelay: u32,
    linger: [u32; 2],
    sndbuf: u32,
    rcvbuf: u32,
}

/// Where a socket is in its life (the descriptor layer's socket is unbound until `listen`
/// or `connect`: `fd::tcp_socket`).
#[derive(Debug)]
pub enum State {
    /// Made by `socket`; `port` once bound (0: not bound).
    Fresh { port: u16, addr: [u8; 4] },
    Listen { port: u16, addr: [u8; 4] },
    Conn { shut_rd: bool, shut_wr: bool },
    /// A connection whose handshake failed (`SO_ERROR` says why once).
    Failed,
}

/// What Linux keeps of a socket beside the descriptor layer's socket (in the socket's open
/// file description, `files::Desc::sock`: shared by its `dup`s).
#[derive(Debug)]
pub struct SockInfo {
    pub state: State,
    pub opts: Opts,
    /// A pending error for `SO_ERROR` (a refused non-blocking connect).
    pending: i64,
    /// What the descriptor layer's socket was last told (`fd::set_nonblocking`): it is told
    /// again only when the description's `O_NONBLOCK` or a call's `MSG_DONTWAIT` differs.
    lib_nb: bool,
}

/// Check `socket(domain, type, protocol)`'s arguments: the Linux error, or `Ok`.
pub fn check_socket(domain: u64, ty: u64, protocol: u64) -> Result<(), i64> {
    if domain != AF_INET {
        return Err(-EAFNOSUPPORT);
    }
    let kind = ty & !(SOCK_NONBLOCK | SOCK_CLOEXEC);
    match kind {
        SOCK_STREAM if protocol == 0 || protocol == IPPROTO_TCP => Ok(()),
        SOCK_STREAM | SOCK_DGRAM => Err(-EPROTONOSUPPORT),
        _ => Err(-EINVAL),
    }
}

/// The Linux error for a library OS error of a socket call.
pub fn errno(e: Error) -> i64 {
    -match e {
        Error::WouldBlock => EAGAIN,
        Error::BrokenPipe => EPIPE,
        Error::InvalidArgument => EINVAL,
        Error::NoMemory | Error::OutOfRange => ENOMEM,
        Error::Busy => EBUSY,
        Error::NotFound | Error::NoSuchObject | Error::WrongType | Error::WrongCore | Error::NotPermitted => EBADF,
        Error::Unsupported => EOPNOTSUPP,
        Error::AlreadyExists => EADDRINUSE,
        _ => EIO,
    }
}

/// `struct sockaddr_in` (16 bytes) for `ip:port`.
pub fn sockaddr(ip: [u8; 4], port: u16) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..2].copy_from_slice(&(AF_INET as u16).to_le_bytes());
    b[2..4].copy_from_slice(&port.to_be_bytes());
    b[4..8].copy_from_slice(&ip);
    b
}

/// `ip:port` from a `struct sockaddr_in` the program gave (`len` bytes).
pub fn parse_sockaddr(b: &[u8]) -> Result<([u8; 4], u16), i64> {
    if b.len() < 16 {
        return Err(-EINVAL);
    }
    if u16::from_le_bytes([b[0], b[1]]) as u64 != AF_INET {
        return Err(-EAFNOSUPPORT);
    }
    Ok(([b[4], b[5], b[6], b[7]], u16::from_be_bytes([b[2], b[3]])))
}

fn v4(a: IpAddress) -> [u8; 4] {
    match a {
        IpAddress::Ipv4(v) => v.octets(),
    }
}

impl SockInfo {
    pub fn new() -> SockInfo {
        SockInfo { state: State::Fresh { port: 0, addr: [0; 4] }, opts: Opts::default(), pending: 0, lib_nb: false }
    }

    /// Tell the descriptor layer's socket `lib` whether to wait, if that changed.
    fn blocking(&mut self, lib: Fd, nonblocking: bool) {
        if self.lib_nb != nonblocking && fd::set_nonblocking(lib, nonblocking).is_ok() {
            self.lib_nb = nonblocking;
        }
    }

    /// `bind`: record the port (0: an ephemeral one); `in_use` says whether another socket of
    /// the program has the port.
    pub fn bind(&mut self, ip: [u8; 4], port: u16, in_use: impl Fn(u16) -> bool) -> i64 {
        let State::Fresh { port: p, addr } = &mut self.state else { return -EINVAL };
        if *p != 0 {
            return -EINVAL;
        }
        let port = if port == 0 { (EPHEMERAL_FIRST..=u16::MAX).find(|&q| !in_use(q)).unwrap_or(0) } else { port };
        if port == 0 || in_use(port) {
            return -EADDRINUSE;
        }
        *p = port;
        *addr = ip;
        0
    }

    /// The port it is bound to, listens on, or connects from (0: none yet).
    pub fn port(&self, lib: Fd) -> u16 {
        match &self.state {
            State::Fresh { port, .. } | State::Listen { port, .. } => *port,
            State::Conn { .. } => fd::with_tcp(lib, |s| s.local_endpoint().map(|e| e.port)).ok().flatten().unwrap_or(0),
            State::Failed => 0,
        }
    }

    /// `listen`: the descriptor layer's socket `lib` listens on the bound port (an unbound
    /// socket gets an ephemeral one first).
    pub fn listen(&mut self, lib: Fd, backlog: i64, in_use: impl Fn(u16) -> bool) -> i64 {
        if matches!(self.state, State::Listen { .. }) {
            return 0;
        }
        let State::Fresh { port, addr } = self.state else { return -EINVAL };
        let port = if port == 0 {
            match (EPHEMERAL_FIRST..=u16::MAX).find(|&q| !in_use(q)) {
                Some(p) => p,
                None => return -EADDRINUSE,
            }
        } else {
            port
        };
        let backlog = backlog.clamp(1, crate::net::host::MAX_BACKLOG as i64) as usize;
        match fd::tcp_listen_on(lib, port, backlog) {
            Ok(()) => {
                self.state = State::Listen { port, addr };
                0
            }
            Err(e) => errno(e),
        }
    }

    /// `accept4`: the next connection as a new descriptor of the descriptor layer, its
    /// description's state, and its peer.
    pub fn accept(&mut self, lib: Fd, scope: fd::Scope, nonblocking: bool, flags: u64) -> Result<(Fd, SockInfo, [u8; 4], u16), i64> {
        if flags & !(SOCK_NONBLOCK | SOCK_CLOEXEC) != 0 {
            return Err(-EINVAL);
        }
        let State::Listen { .. } = &self.state else { return Err(-EINVAL) };
        self.blocking(lib, nonblocking);
        let c = fd::accept_in(lib, scope).map_err(errno)?;
        let peer = fd::with_tcp(c, |s| s.remote_endpoint()).ok().flatten();
        let (ip, port) = peer.map(|e| (v4(e.addr), e.port)).unwrap_or(([0; 4], 0));
        let info = SockInfo { state: State::Conn { shut_rd: false, shut_wr: false }, opts: self.opts, pending: 0, lib_nb: false };
        info.apply_opts(c);
        Ok((c, info, ip, port))
    }

    /// `connect`: start the handshake; a blocking socket waits for its end.
    pub fn connect(&mut self, lib: Fd, nonblocking: bool, ip: [u8; 4], port: u16, in_use: impl Fn(u16) -> bool) -> i64 {
        let local = match self.state {
            State::Fresh { port: 0, .. } => match (EPHEMERAL_FIRST..=u16::MAX).find(|&q| !in_use(q)) {
                Some(p) => p,
                None => return -EADDRNOTAVAIL,
            },
            State::Fresh { port, .. } => port,
            State::Conn { .. } => return -EISCONN,
            State::Listen { .. } | State::Failed => return -EINVAL,
        };
        if port == 0 {
            return -ECONNREFUSED;
        }
        if let Err(e) = fd::tcp_connect_from(lib, ip, port, local) {
            return errno(e);
        }
        self.apply_opts(lib);
        self.state = State::Conn { shut_rd: false, shut_wr: false };
        if nonblocking {
            return -EINPROGRESS;
        }
        // Blocking: until established or failed (poll says writable or hung up).
        let mut p = [fd::PollFd::new(lib, false, true)];
        loop {
            if fd::poll_wait(&mut p, None).is_err() {
                return -EIO;
            }
            match fd::with_tcp(lib, |s| s.state()) {
                Ok(tcp::State::Established) => return 0,
                Ok(tcp::State::SynSent) | Ok(tcp::State::SynReceived) => continue,
                _ => {
                    self.state = State::Failed;
                    return -ECONNREFUSED;
                }
            }
        }
    }

    /// `read`/`recvfrom`: `MSG_DONTWAIT` makes one call non-blocking.
    pub fn recv(&mut self, lib: Fd, nonblocking: bool, dst: &mut [u8], flags: u64) -> i64 {
        if flags & !(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_WAITALL) != 0 {
            return -EOPNOTSUPP;
        }
        match self.state {
            State::Conn { shut_rd: true, .. } => return 0,
            State::Conn { .. } => {}
            _ => return -ENOTCONN,
        }
        self.blocking(lib, nonblocking || flags & MSG_DONTWAIT != 0);
        fd::read(lib, dst).map(|n| n as i64).unwrap_or_else(|e| if e == Error::InvalidArgument { -ENOTCONN } else { errno(e) })
    }

    /// `write`/`sendto`: `-EPIPE` (and `SIGPIPE` unless `MSG_NOSIGNAL`) once the connection
    /// can send no more.
    pub fn send(&mut self, lib: Fd, nonblocking: bool, src: &[u8], flags: u64) -> i64 {
        if flags & !(MSG_DONTWAIT | MSG_NOSIGNAL) != 0 {
            return -EOPNOTSUPP;
        }
        let r = match self.state {
            State::Conn { shut_wr: true, .. } => -EPIPE,
            State::Conn { .. } => {
                self.blocking(lib, nonblocking || flags & MSG_DONTWAIT != 0);
                fd::write(lib, src).map(|n| n as i64).unwrap_or_else(errno)
            }
            // Linux's `tcp_sendmsg` on a socket that never connected (or listens): EPIPE,
            // with SIGPIPE.
            State::Fresh { .. } | State::Listen { .. } => -EPIPE,
            State::Failed => -ENOTCONN,
        };
        if r == -EPIPE && flags & MSG_NOSIGNAL == 0 {
            super::pipe::broken_pipe();
        }
        r
    }

    /// `shutdown(how)`: 0 reads, 1 writes (a FIN), 2 both.
    pub fn shutdown(&mut self, lib: Fd, how: u64) -> i64 {
        if how > 2 {
            return -EINVAL;
        }
        let State::Conn { shut_rd, shut_wr } = &mut self.state else { return -ENOTCONN };
        if how != 1 {
            *shut_rd = true;
        }
        if how != 0 && !*shut_wr {
            *shut_wr = true;
            let _ = fd::with_tcp(lib, |s| s.close());
        }
        0
    }

    /// `getsockname`.
    pub fn local(&self, lib: Fd) -> ([u8; 4], u16) {
        match &self.state {
            State::Fresh { port, addr } | State::Listen { port, addr } => (*addr, *port),
            State::Conn { .. } => fd::with_tcp(lib, |s| s.local_endpoint()).ok().flatten().map(|e| (v4(e.addr), e.port)).unwrap_or(([0; 4], 0)),
            State::Failed => ([0; 4], 0),
        }
    }

    /// `getpeername`.
    pub fn peer(&self, lib: Fd) -> Result<([u8; 4], u16), i64> {
        if !matches!(self.state, State::Conn { .. }) {
            return Err(-ENOTCONN);
        }
        fd::with_tcp(lib, |s| s.remote_endpoint()).ok().flatten().map(|e| (v4(e.addr), e.port)).ok_or(-ENOTCONN)
    }

    fn apply_opts(&self, c: Fd) {
        let (nodelay, keepalive) = (self.opts.nodelay != 0, self.opts.keepalive != 0);
        let _ = fd::with_tcp(c, |s| {
            s.set_nagle_enabled(!nodelay);
            s.set_keep_alive(keepalive.then(|| smoltcp::time::Duration::from_secs(75)));
        });
    }

    /// `setsockopt` with the option's bytes.
    pub fn setsockopt(&mut self, lib: Fd, level: u64, name: u64, val: &[u8]) -> i64 {
        if val.len() < 4 {
            return -EINVAL;
        }
        let v = u32::from_le_bytes([val[0], val[1], val[2], val[3]]);
        let flag = u32::from(v != 0);
        match (level, name) {
            (SOL_SOCKET, SO_REUSEADDR) => self.opts.reuseaddr = flag,
            (SOL_SOCKET, SO_REUSEPORT) => self.opts.reuseport = flag,
            (SOL_SOCKET, SO_KEEPALIVE) => self.opts.keepalive = flag,
            (SOL_SOCKET, SO_SNDBUF) => self.opts.sndbuf = v,
            (SOL_SOCKET, SO_RCVBUF) => self.opts.rcvbuf = v,
            (SOL_SOCKET, SO_LINGER) => {
                if val.len() < 8 {
                    return -EINVAL;
                }
                self.opts.linger = [flag, u32::from_le_bytes([val[4], val[5], val[6], val[7]])];
            }
            (IPPROTO_TCP, TCP_NODELAY) => self.opts.nodelay = flag,
            _ => return -ENOPROTOOPT,
        }
        if let State::Conn { .. } = self.state {
            self.apply_opts(lib);
        }
        0
    }

    /// `getsockopt`: the option's bytes.
    pub fn getsockopt(&mut self, lib: Fd, level: u64, name: u64) -> Result<Vec<u8>, i64> {
        let buf = crate::net::host::SOCKET_BUFFER as u32;
        let v = match (level, name) {
            (SOL_SOCKET, SO_REUSEADDR) => self.opts.reuseaddr,
            (SOL_SOCKET, SO_REUSEPORT) => self.opts.reuseport,
            (SOL_SOCKET, SO_KEEPALIVE) => self.opts.keepalive,
            (SOL_SOCKET, SO_TYPE) => SOCK_STREAM as u32,
            (SOL_SOCKET, SO_SNDBUF) => if self.opts.sndbuf != 0 { self.opts.sndbuf } else { buf },
            (SOL_SOCKET, SO_RCVBUF) => if self.opts.rcvbuf != 0 { self.opts.rcvbuf } else { buf },
            (SOL_SOCKET, SO_ERROR) => {
                let refused = match &self.state {
                    State::Conn { .. } => fd::with_tcp(lib, |s| s.state() == tcp::State::Closed && s.remote_endpoint().is_none()).unwrap_or(false),
                    State::Failed => true,
                    _ => false,
                };
                let e = if self.pending != 0 { self.pending } else if refused { -ECONNREFUSED } else { 0 };
                self.pending = 0;
                (-e) as u32
            }
            (SOL_SOCKET, SO_LINGER) => {
                let mut b = Vec::with_capacity(8);
                b.extend_from_slice(&self.opts.linger[0].to_le_bytes());
                b.extend_from_slice(&self.opts.linger[1].to_le_bytes());
                return Ok(b);
            }
            (IPPROTO_TCP, TCP_NODELAY) => self.opts.nodelay,
            // A level neither the socket layer, TCP nor IP knows: Linux's `ip_getsockopt`
            // answers EOPNOTSUPP (its `setsockopt` ENOPROTOOPT).
            (l, _) if l != SOL_SOCKET && l != IPPROTO_TCP && l != 0 => return Err(-EOPNOTSUPP),
            _ => return Err(-ENOPROTOOPT),
        };
        Ok(v.to_le_bytes().to_vec())
    }
}

impl Default for SockInfo {
    fn default() -> SockInfo {
        SockInfo::new()
    }
}

/// The runtime core's network for `--net`: the card in Inline mode (this core polls it; no
/// kernel core), one channel, its stack attached as this core's socket home.
#[cfg(target_os = "none")]
pub struct Up {
    nic: crate::net::Nic,
}

/// The card while the program runs with `--net`: each of its threads maps the channel
/// segment into its own root (`map_in_thread`), since a thread on the runtime's core moves
/// that core's stack too.
static NIC: percore::spin::TicketLock<Option<crate::net::Nic>> = percore::spin::TicketLock::new(None);

/// Whether the program runs with the network (`--net`).
pub fn is_up() -> bool {
    NIC.lock().is_some()
}

/// Map the card's channel segment in the calling thread's root (nothing without `--net`).
pub fn map_in_thread() -> Result<(), Error> {
    match *NIC.lock() {
        Some(nic) => nic.map_here(),
        None => Ok(()),
    }
}

#[cfg(target_os = "none")]
pub fn bring_up() -> Result<Up, Error> {
    use crate::net::{stack::Stack, Mode, Nic};
    let nic = Nic::open(crate::process::proc_share(), 1, 256, Mode::Inline)?;
    let stack = Stack::new(nic.channel(0), 0x11c0_5eed ^ crate::time::ticks());
    stack.dev.announce();
    if let Err(e) = crate::net::host::attach(alloc::boxed::Box::new(stack)) {
        let _ = nic.unmap_here();
        let _ = nic.close();
        return Err(e);
    }
    *NIC.lock() = Some(nic);
    Ok(Up { nic })
}

#[cfg(target_os = "none")]
impl Up {
    /// Detach the stack, unmap the channel segment and close the card (a mapped segment would
    /// outlive the close: the leak check sees one kernel object more).
    pub fn down(self) {
        *NIC.lock() = None;
        drop(crate::net::host::detach());
        let _ = self.nic.unmap_here();
        let _ = self.nic.close();
    }
}

// ---------------------------------------------------------------------------------------
// The system calls (registered in `dispatch::HANDLERS`)

use super::dispatch::Process;
use super::files::{Extra, Files, O_NONBLOCK};

/// The socket behind descriptor `fd`: its descriptor-layer socket, whether its description
/// is non-blocking, and its state; `-EBADF` if none is open, `-ENOTSOCK` for another kind.
fn sock(f: &mut Files, fd: i32) -> Result<(Fd, bool, &mut SockInfo), i64> {
    let lib = f.slot(fd).ok_or(-EBADF)?.fd;
    let d = f.desc_of(fd).ok_or(-EBADF)?;
    let nb = d.flags & O_NONBLOCK != 0;
    match d.sock.as_deref_mut() {
        Some(s) => Ok((lib, nb, s)),
        None => Err(-ENOTSOCK),
    }
}

/// `read` of a socket descriptor (`files::read`).
pub fn recv(f: &mut Files, fd: i32, dst: &mut [u8], flags: u64) -> i64 {
    if super::unix::is_unix(f, fd) {
        return super::unix::recv(f, fd, dst, flags);
    }
    let r = match sock(f, fd) {
        Ok((lib, nb, s)) => s.recv(lib, nb, dst, flags),
        Err(e) => e,
    };
    if r == -EAGAIN {
        f.note_drained(fd);
    }
    r
}

/// `write` of a socket descriptor (`files::write`).
pub fn send(f: &mut Files, fd: i32, src: &[u8], flags: u64) -> i64 {
    if super::unix::is_unix(f, fd) {
        return super::unix::send(f, fd, src, flags);
    }
    let r = match sock(f, fd) {
        Ok((lib, nb, s)) => s.send(lib, nb, src, flags),
        Err(e) => e,
    };
    if r == -EAGAIN {
        f.note_drained(fd);
    }
    r
}

/// The ports the program's sockets other than the one of description `except` have.
fn ports_taken(f: &Files, except: i32) -> Vec<u16> {
    let mine = f.slot(except).map(|s| s.fd);
    f.open_fds()
        .into_iter()
        .filter(|(_, lib, _)| Some(*lib) != mine)
        .filter_map(|(_, lib, d)| d.sock.as_ref().map(|s| s.port(lib)))
        .filter(|&q| q != 0)
        .collect()
}

/// Write `ip:port` to a `(addr, addrlen)` pair the program gave (Linux truncates to its length
/// and writes back the full one). Nothing if `addr` is null.
fn put_addr(p: &mut Process, addr: u64, lenp: u64, ip: [u8; 4], port: u16) -> i64 {
    if addr == 0 {
        return 0;
    }
    let Some(len) = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) else { return -EFAULT };
    if (len as i32) < 0 {
        return -EINVAL;
    }
    let sa = sockaddr(ip, port);
    let n = (len as usize).min(sa.len());
    if !p.image.space.put(addr, &sa[..n]) || !p.image.space.put(lenp, &16u32.to_le_bytes()) {
        return -EFAULT;
    }
    0
}

/// Whether a `(addr, addrlen)` pair for `put_addr` can be written (null `addr`: yes).
fn addr_ok(p: &Process, addr: u64, lenp: u64) -> Result<(), i64> {
    if addr == 0 {
        return Ok(());
    }
    let len = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok_or(-EFAULT)?;
    if (len as i32) < 0 {
        return Err(-EINVAL);
    }
    if !p.image.space.ok(lenp, 4, true) || !p.image.space.ok(addr, u64::from(len.min(16)), true) {
        return Err(-EFAULT);
    }
    Ok(())
}

/// A `struct sockaddr_in` argument of `len` bytes.
fn get_addr(p: &Process, addr: u64, len: u64) -> Result<([u8; 4], u16), i64> {
    if (len as i32) < 0 || len > 128 {
        return Err(-EINVAL);
    }
    let b = p.image.space.read(addr, len).ok_or(-EFAULT)?;
    parse_sockaddr(b)
}

pub fn sys_socket(p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[0] == super::unix::AF_UNIX {
        return super::unix::sys_socket(p, a);
    }
    if let Err(e) = check_socket(a[0], a[1], a[2]) {
        return e;
    }
    let lib = match fd::tcp_socket(p.files.scope()) {
        Ok(l) => l,
        Err(e) => return errno(e),
    };
    let flags = if a[1] & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 } | if a[1] & SOCK_CLOEXEC != 0 { super::files::O_CLOEXEC } else { 0 };
    p.files.install_with(lib, flags, Extra::Sock(alloc::boxed::Box::new(SockInfo::new())))
}

pub fn sys_bind(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_bind(p, a);
    }
    let fd = a[0] as i32;
    let (ip, port) = match get_addr(p, a[1], a[2]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let taken = ports_taken(&p.files, fd);
    match sock(&mut p.files, fd) {
        Ok((_, _, s)) => s.bind(ip, port, |q| taken.contains(&q)),
        Err(e) => e,
    }
}

pub fn sys_listen(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_listen(p, a);
    }
    let fd = a[0] as i32;
    let taken = ports_taken(&p.files, fd);
    match sock(&mut p.files, fd) {
        Ok((lib, _, s)) => s.listen(lib, a[1] as i32 as i64, |q| taken.contains(&q)),
        Err(e) => e,
    }
}

pub fn sys_accept4(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_accept4(p, a);
    }
    let (fd, addr, lenp, flags) = (a[0] as i32, a[1], a[2], a[3]);
    // Every pointer before a connection is taken (it would be lost on an EFAULT after).
    if let Err(e) = addr_ok(p, addr, lenp) {
        return e;
    }
    let scope = p.files.scope();
    let (c, info, ip, port) = match sock(&mut p.files, fd).and_then(|(lib, nb, s)| s.accept(lib, scope, nb, flags)) {
        Ok(x) => x,
        Err(e) => {
            if e == -EAGAIN {
                p.files.note_drained(fd);
            }
            return e;
        }
    };
    let fl = if flags & SOCK_NONBLOCK != 0 { O_NONBLOCK } else { 0 } | if flags & SOCK_CLOEXEC != 0 { super::files::O_CLOEXEC } else { 0 };
    let n = p.files.install_with(c, fl, Extra::Sock(alloc::boxed::Box::new(info)));
    if n >= 0 {
        let r = put_addr(p, addr, lenp, ip, port);
        if r < 0 {
            super::files::close(&mut p.files, n as i32);
            return r;
        }
    }
    n
}

pub fn sys_accept(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_accept4(p, &[a[0], a[1], a[2], 0, 0, 0])
}

pub fn sys_connect(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_connect(p, a);
    }
    let fd = a[0] as i32;
    let (ip, port) = match get_addr(p, a[1], a[2]) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let taken = ports_taken(&p.files, fd);
    match sock(&mut p.files, fd) {
        Ok((lib, nb, s)) => s.connect(lib, nb, ip, port, |q| taken.contains(&q)),
        Err(e) => e,
    }
}

pub fn sys_getsockname(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_getsockname(p, a);
    }
    let (ip, port) = match sock(&mut p.files, a[0] as i32) {
        Ok((lib, _, s)) => s.local(lib),
        Err(e) => return e,
    };
    if a[1] == 0 {
        return -EFAULT;
    }
    put_addr(p, a[1], a[2], ip, port)
}

pub fn sys_getpeername(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_getpeername(p, a);
    }
    let (ip, port) = match sock(&mut p.files, a[0] as i32).and_then(|(lib, _, s)| s.peer(lib)) {
        Ok(x) => x,
        Err(e) => return e,
    };
    if a[1] == 0 {
        return -EFAULT;
    }
    put_addr(p, a[1], a[2], ip, port)
}

pub fn sys_setsockopt(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_setsockopt(p, a);
    }
    let (fd, level, name, val, len) = (a[0] as i32, a[1], a[2], a[3], a[4]);
    if (len as i32) < 0 || len > 256 {
        return -EINVAL;
    }
    let Some(v) = p.image.space.read(val, len).map(|b| b.to_vec()) else { return -EFAULT };
    match sock(&mut p.files, fd) {
        Ok((lib, _, s)) => s.setsockopt(lib, level, name, &v),
        Err(e) => e,
    }
}

pub fn sys_getsockopt(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_getsockopt(p, a);
    }
    let (fd, level, name, val, lenp) = (a[0] as i32, a[1], a[2], a[3], a[4]);
    let Some(len) = p.image.space.read(lenp, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])) else { return -EFAULT };
    if (len as i32) < 0 {
        return -EINVAL;
    }
    let v = match sock(&mut p.files, fd).and_then(|(lib, _, s)| s.getsockopt(lib, level, name)) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let n = (len as usize).min(v.len());
    if !p.image.space.put(val, &v[..n]) || !p.image.space.put(lenp, &(n as u32).to_le_bytes()) {
        return -EFAULT;
    }
    0
}

pub fn sys_sendto(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len, flags) = (a[0] as i32, a[1], a[2], a[3]);
    // A destination on a connected stream socket is ignored, as Linux does.
    let Some(src) = p.image.space.read(buf, len).map(|b| b.to_vec()) else { return -EFAULT };
    send(&mut p.files, fd, &src, flags)
}

pub fn sys_recvfrom(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, buf, len, flags, addr, lenp) = (a[0] as i32, a[1], a[2], a[3], a[4], a[5]);
    if !p.image.space.ok(buf, len, true) {
        return -EFAULT;
    }
    if let Err(e) = addr_ok(p, addr, lenp) {
        return e;
    }
    let mut tmp = alloc::vec![0u8; len.min(1 << 20) as usize];
    let n = recv(&mut p.files, fd, &mut tmp, flags);
    let peer = sock(&mut p.files, fd).ok().and_then(|(lib, _, s)| s.peer(lib).ok());
    if n > 0 {
        p.image.space.put(buf, &tmp[..n as usize]);
    }
    if n >= 0 {
        if let Some((ip, port)) = peer {
            let r = put_addr(p, addr, lenp, ip, port);
            if r < 0 {
                return r;
            }
        }
    }
    n
}

/// A `struct msghdr`'s name, name length and iovecs.
fn msghdr(p: &Process, m: u64) -> Result<(u64, u64, Vec<(u64, u64)>), i64> {
    let b = p.image.space.read(m, 56).ok_or(-EFAULT)?;
    let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (name, namelen, iov, iovlen) = (u(0), u(8) & 0xffff_ffff, u(16), u(24));
    if iovlen > 1024 {
        return Err(-EMSGSIZE);
    }
    let raw = p.image.space.read(iov, iovlen * 16).ok_or(-EFAULT)?;
    let v = raw.chunks(16).map(|c| (u64::from_le_bytes(c[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(c[8..].try_into().unwrap_or([0; 8])))).collect();
    Ok((name, namelen, v))
}

pub fn sys_sendmsg(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, m, flags) = (a[0] as i32, a[1], a[2]);
    let (_, _, iov) = match msghdr(p, m) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut all = Vec::new();
    for (b, l) in iov {
        match p.image.space.read(b, l) {
            Some(s) => all.extend_from_slice(s),
            None => return -EFAULT,
        }
    }
    send(&mut p.files, fd, &all, flags)
}

pub fn sys_recvmsg(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (fd, m, flags) = (a[0] as i32, a[1], a[2]);
    let (name, namelen, iov) = match msghdr(p, m) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let total: u64 = iov.iter().map(|v| v.1).sum::<u64>().min(1 << 20);
    for &(b, l) in &iov {
        if !p.image.space.ok(b, l, true) {
            return -EFAULT;
        }
    }
    if !p.image.space.ok(m, 56, true) || (name != 0 && namelen > 0 && !p.image.space.ok(name, namelen.min(16), true)) {
        return -EFAULT;
    }
    let mut tmp = alloc::vec![0u8; total as usize];
    let n = recv(&mut p.files, fd, &mut tmp, flags);
    if n < 0 {
        return n;
    }
    let peer = sock(&mut p.files, fd).ok().and_then(|(lib, _, s)| s.peer(lib).ok());
    let mut at = 0usize;
    for (b, l) in iov {
        let k = (l as usize).min(n as usize - at);
        if k == 0 {
            break;
        }
        p.image.space.put(b, &tmp[at..at + k]);
        at += k;
    }
    // The name (the peer), its length, no control data, no flags.
    let mut namelen_out = 0u32;
    if name != 0 && namelen > 0 {
        if let Some((ip, port)) = peer {
            let sa = sockaddr(ip, port);
            p.image.space.put(name, &sa[..(namelen as usize).min(16)]);
            namelen_out = 16;
        }
    }
    if !p.image.space.put(m + 8, &namelen_out.to_le_bytes()) || !p.image.space.put(m + 40, &0u64.to_le_bytes()) || !p.image.space.put(m + 48, &0u32.to_le_bytes()) {
        return -EFAULT;
    }
    n
}

pub fn sys_shutdown(p: &mut Process, a: &[u64; 6]) -> i64 {
    if super::unix::is_unix(&p.files, a[0] as i32) {
        return super::unix::sys_shutdown(p, a);
    }
    match sock(&mut p.files, a[0] as i32) {
        Ok((lib, _, s)) => s.shutdown(lib, a[1]),
        Err(e) => e,
    }
}

pub fn sys_eventfd2(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (init, flags) = (a[0] as u32, a[1] as u32);
    if flags & !(fd::EFD_SEMAPHORE | fd::EFD_NONBLOCK | fd::EFD_CLOEXEC) != 0 {
        return -EINVAL;
    }
    match fd::eventfd(p.files.scope(), init, flags) {
        Ok(l) => {
            let fl = if flags & fd::EFD_NONBLOCK != 0 { O_NONBLOCK } else { 0 } | if flags & fd::EFD_CLOEXEC != 0 { super::files::O_CLOEXEC } else { 0 };
            p.files.install(l, super::files::O_RDWR | fl, super::files::Stream::None, alloc::string::String::new(), false)
        }
        Err(e) => errno(e),
    }
}

pub fn sys_eventfd(p: &mut Process, a: &[u64; 6]) -> i64 {
    sys_eventfd2(p, &[a[0], 0, 0, 0, 0, 0])
}
