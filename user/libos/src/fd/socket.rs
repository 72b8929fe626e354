//! TCP sockets as a kind of open file: `read`, `write`, `poll`, `fstat`, `dup` and `close` of
//! a socket go through the same calls as files and pipes.
//!
//! The socket itself is a smoltcp socket in the stack of the core that made it, in a slot of
//! that core's socket table (`net::host`); the entry (`Kind::Socket`) names the core, the slot
//! and its generation. Everything happens on that core: another core using the descriptor
//! gets `WrongCore`, and socket descriptors go in private tables only (`Unsupported` in the
//! process-wide and core-set tables, whose descriptors other cores use; a last close there
//! could come from a core that cannot reach the stack). docs/net.md, "Sockets as descriptors".
//!
//! Blocking: a read with nothing waiting, a write with no room, an `accept` with no
//! connection move the stack themselves (`Home::drive`) and sleep in between
//! (`SocketHost::wait_idle`, at most `ready::POLL_NAP_US`), unless the socket is
//! non-blocking (`set_nonblocking`): then `WouldBlock`.

use abi::Error;
use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpEndpoint};

use super::file::{made_up_stat, FileLike, Kind, Ready, Stat, WakeOn, S_IFSOCK};
use super::ready::POLL_NAP_US;
use crate::net::host::{new_tcp, split_id, with_home, Home, Sock, MAX_BACKLOG};

/// The open file of kind `Socket`.
pub(super) struct SocketFile(pub(super) u64);

/// Run `f` on the home of socket `id` (its core's; `WrongCore` from another).
fn at_home<R>(id: u64, f: impl FnOnce(&mut Home) -> Result<R, Error>) -> Result<R, Error> {
    with_home(split_id(id).0, f)
}

/// The connection a slot holds (`InvalidArgument` for a listener: POSIX `ENOTCONN`).
fn conn(home: &mut Home, id: u64) -> Result<(smoltcp::iface::SocketHandle, bool), Error> {
    let s = home.slot(id)?;
    match s.sock {
        Sock::Conn(h) => Ok((h, s.nonblocking)),
        _ => Err(Error::InvalidArgument),
    }
}

/// Whether a connection is past its handshake, or failed it.
fn connecting(state: tcp::State) -> bool {
    matches!(state, tcp::State::SynSent | tcp::State::SynReceived | tcp::State::Listen)
}

/// Repeat `step` until it answers; between tries move the stack and sleep a little, unless
/// `nonblocking` (`WouldBlock`).
fn until(home: &mut Home, nonblocking: bool, mut step: impl FnMut(&mut Home) -> Option<Result<usize, Error>>) -> Result<usize, Error> {
    let mut drove = false;
    loop {
        if let Some(r) = step(home) {
            return r;
        }
        if !drove {
            // Something may be waiting in the rings that the stack has not seen yet.
            drove = true;
            home.drive();
            continue;
        }
        if nonblocking {
            return Err(Error::WouldBlock);
        }
        home.host.wait_idle(POLL_NAP_US);
        home.drive();
    }
}

impl FileLike for SocketFile {
    /// What is waiting (up to `buf`'s length); 0 once the peer closed and everything it sent
    /// was read (or the connection was reset).
    fn read(&self, _: abi::ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        at_home(self.0, |home| {
            let (h, nb) = conn(home, self.0)?;
            if buf.is_empty() {
                return Ok(0);
            }
            until(home, nb, |home| {
                let s = home.host.sockets().get_mut::<tcp::Socket>(h);
                if s.can_recv() {
                    return Some(s.recv_slice(buf).map_err(|_| Error::Io));
                }
                (!s.may_recv() && !connecting(s.state())).then_some(Ok(0))
            })
        })
    }

    /// Every byte (blocking), or what fits (non-blocking; `WouldBlock` if nothing does).
    /// `BrokenPipe` once the connection can send no more (closed, reset).
    fn write(&self, _: abi::ObjectId, data: &[u8]) -> Result<usize, Error> {
        at_home(self.0, |home| {
            let (h, nb) = conn(home, self.0)?;
            let mut done = 0;
            let r = until(home, nb, |home| {
                let s = home.host.sockets().get_mut::<tcp::Socket>(h);
                if !s.may_send() && !connecting(s.state()) {
                    return Some(if done == 0 { Err(Error::BrokenPipe) } else { Ok(done) });
                }
                if s.can_send() {
                    done += s.send_slice(&data[done..]).unwrap_or(0);
                }
                (done == data.len() || (nb && done != 0)).then_some(Ok(done))
            });
            // Send what was queued now, as a kernel would.
            home.drive();
            r
        })
    }

    fn stat(&self, _: abi::ObjectId) -> Result<Stat, Error> {
        at_home(self.0, |home| home.slot(self.0).map(|_| made_up_stat(S_IFSOCK | 0o777, 0)))
    }

    /// Moves the stack first (its state changes only when this core polls it). A connection:
    /// readable with bytes waiting or the peer gone, writable with room, hung up once closed
    /// both ways. A listener: readable when a connection waits for `accept`.
    fn poll(&self, _: abi::ObjectId) -> Result<Ready, Error> {
        at_home(self.0, |home| {
            home.drive();
            let slot = home.slot(self.0)?;
            let backlog = match &slot.sock {
                Sock::Listen { backlog, .. } => Some(backlog.clone()),
                _ => None,
            };
            if matches!(slot.sock, Sock::Unbound) {
                // Neither listening nor connected: as Linux, writable and hung up.
                return Ok(Ready { write: true, hangup: true, ..Ready::default() });
            }
            if let Some(backlog) = backlog {
                let set = home.host.sockets();
                let waiting = backlog.iter().any(|&h| established(set.get::<tcp::Socket>(h).state()));
                return Ok(Ready { read: waiting, ..Ready::default() });
            }
            let (h, _) = conn(home, self.0)?;
            let s = home.host.sockets().get::<tcp::Socket>(h);
            let st = s.state();
            let gone = matches!(st, tcp::State::Closed | tcp::State::TimeWait);
            Ok(Ready {
                read: s.can_recv() || (!s.may_recv() && !connecting(st)),
                write: s.can_send() || (!s.may_send() && !connecting(st)),
                hangup: gone,
                error: false,
            })
        })
    }

    /// Nothing wakes a sleeper: the stack moves when this core polls it.
    fn wake_on(&self, _: abi::ObjectId) -> Result<WakeOn, Error> {
        Ok(WakeOn::Poll)
    }

    fn opened(&self, _: abi::ObjectId) -> Result<Option<Kind>, Error> {
        at_home(self.0, |home| {
            home.slot(self.0)?.opens += 1;
            Ok(None)
        })
    }

    /// The last open file of the socket went: free its slot (a connection says goodbye
    /// first, in the background: `Home::drive` removes it when done).
    fn last_close(&self, _: abi::ObjectId) -> Result<bool, Error> {
        at_home(self.0, |home| {
            let s = home.slot(self.0)?;
            s.opens -= 1;
            if s.opens == 0 {
                home.free_slot(self.0)?;
            }
            Ok(false)
        })
    }
}

fn established(st: tcp::State) -> bool {
    !connecting(st) && st != tcp::State::Closed
}

/// A new slot of this core's socket table holding a listener on `port` with `backlog`
/// (1..=`MAX_BACKLOG`) listening smoltcp sockets; its socket id.
pub(super) fn listen(port: u16, backlog: usize) -> Result<u64, Error> {
    if port == 0 || backlog == 0 || backlog > MAX_BACKLOG {
        return Err(Error::InvalidArgument);
    }
    with_home(crate::ctx::core_id() as u64, |home| {
        let hs = listeners(home, port, backlog)?;
        home.new_slot(Sock::Listen { port, backlog: hs.clone() }).inspect_err(|_| {
            for h in hs {
                home.host.sockets().remove(h);
            }
        })
    })
}

/// A new slot holding a connection from `local_port` to `ip:port`, started (SYN on the next
/// poll); its socket id.
pub(super) fn connect(ip: [u8; 4], port: u16, local_port: u16) -> Result<u64, Error> {
    with_home(crate::ctx::core_id() as u64, |home| {
        let h = start_connect(home, ip, port, local_port)?;
        home.new_slot(Sock::Conn(h)).inspect_err(|_| {
            home.host.sockets().remove(h);
        })
    })
}

/// A smoltcp socket connecting from `local_port` to `ip:port` (SYN on the next poll).
fn start_connect(home: &mut Home, ip: [u8; 4], port: u16, local_port: u16) -> Result<smoltcp::iface::SocketHandle, Error> {
    if port == 0 || local_port == 0 {
        return Err(Error::InvalidArgument);
    }
    let h = home.host.sockets().add(new_tcp());
    let remote = IpEndpoint::new(IpAddress::v4(ip[0], ip[1], ip[2], ip[3]), port);
    if let Err(e) = home.host.connect(h, remote, local_port) {
        home.host.sockets().remove(h);
        return Err(e);
    }
    Ok(h)
}

/// A new slot of this core's socket table that neither listens nor connects yet; its id.
pub(super) fn unbound() -> Result<u64, Error> {
    with_home(crate::ctx::core_id() as u64, |home| home.new_slot(Sock::Unbound))
}

/// Make unbound socket `id` a listener on `port` with `backlog` listening smoltcp sockets
/// (`InvalidArgument` if it is not unbound, or the port cannot be listened on).
pub(super) fn listen_unbound(id: u64, port: u16, backlog: usize) -> Result<(), Error> {
    if port == 0 || backlog == 0 || backlog > MAX_BACKLOG {
        return Err(Error::InvalidArgument);
    }
    at_home(id, |home| {
        if !matches!(home.slot(id)?.sock, Sock::Unbound) {
            return Err(Error::InvalidArgument);
        }
        let hs = listeners(home, port, backlog)?;
        home.slot(id)?.sock = Sock::Listen { port, backlog: hs };
        Ok(())
    })
}

/// Make unbound socket `id` a connection from `local_port` to `ip:port`, started.
pub(super) fn connect_unbound(id: u64, ip: [u8; 4], port: u16, local_port: u16) -> Result<(), Error> {
    at_home(id, |home| {
        if !matches!(home.slot(id)?.sock, Sock::Unbound) {
            return Err(Error::InvalidArgument);
        }
        let h = start_connect(home, ip, port, local_port)?;
        home.slot(id)?.sock = Sock::Conn(h);
        home.drive();
        Ok(())
    })
}

/// `backlog` smoltcp sockets listening on `port` (none left behind on an error).
fn listeners(home: &mut Home, port: u16, backlog: usize) -> Result<alloc::vec::Vec<smoltcp::iface::SocketHandle>, Error> {
    let mut hs = alloc::vec::Vec::with_capacity(backlog);
    for _ in 0..backlog {
        let mut s = new_tcp();
        if s.listen(port).is_err() {
            break;
        }
        hs.push(home.host.sockets().add(s));
    }
    if hs.len() != backlog {
        for h in hs {
            home.host.sockets().remove(h);
        }
        return Err(Error::InvalidArgument);
    }
    Ok(hs)
}

/// The next connection of listener `id`, in a new slot; its socket id. Waits for one (a
/// non-blocking listener: `WouldBlock`); the listener gets a fresh listening socket in its
/// place. `InvalidArgument` for a connection.
pub(super) fn accept(id: u64) -> Result<u64, Error> {
    at_home(id, |home| {
        let nb = home.slot(id)?.nonblocking;
        let mut got = None;
        until(home, nb, |home| {
            let Ok(slot) = home.slot(id) else { return Some(Err(Error::NoSuchObject)) };
            let Sock::Listen { port, backlog } = &mut slot.sock else { return Some(Err(Error::InvalidArgument)) };
            let port = *port;
            let mut backlog = core::mem::take(backlog);
            let set = home.host.sockets();
            let mut found = None;
            for (i, &h) in backlog.iter().enumerate() {
                let s = set.get_mut::<tcp::Socket>(h);
                if s.state() == tcp::State::Closed {
                    // Its handshake failed or timed out: listen again.
                    let _ = s.listen(port);
                } else if found.is_none() && established(s.state()) {
                    found = Some(i);
                }
            }
            let r = found.map(|i| {
                let mut fresh = new_tcp();
                let _ = fresh.listen(port);
                let h = core::mem::replace(&mut backlog[i], set.add(fresh));
                got = Some(h);
                Ok(0)
            });
            if let Ok(slot) = home.slot(id) {
                if let Sock::Listen { backlog: b, .. } = &mut slot.sock {
                    *b = backlog;
                }
            }
            r
        })?;
        let h = got.ok_or(Error::NoSuchObject)?;
        home.new_slot(Sock::Conn(h)).inspect_err(|_| {
            home.host.sockets().remove(h);
        })
    })
}

/// Run `f` on connection `id`'s smoltcp socket, then move the stack (what `f` queued goes
/// out): its endpoints, shutting its sending side, its Nagle and keep-alive settings, for the
/// Linux socket calls. `InvalidArgument` for a listener.
pub(super) fn with_tcp<R>(id: u64, f: impl FnOnce(&mut tcp::Socket<'static>) -> R) -> Result<R, Error> {
    at_home(id, |home| {
        let (h, _) = conn(home, id)?;
        let r = f(home.host.sockets().get_mut::<tcp::Socket>(h));
        home.drive();
        Ok(r)
    })
}

/// Make socket `id`'s calls fail with `WouldBlock` instead of waiting (or wait again).
pub(super) fn set_nonblocking(id: u64, on: bool) -> Result<(), Error> {
    at_home(id, |home| {
        home.slot(id)?.nonblocking = on;
        Ok(())
    })
}
