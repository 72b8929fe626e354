//! Where socket descriptors live: each core's TCP/IP stack and its table of sockets.
//!
//! A core that serves sockets *attaches* its stack here (`attach`: the `Stack` over its
//! channel of the virtual NIC, or a `LoopStack` for loopback); from then on the socket
//! descriptors made on that core (`fd::tcp_listen`, `fd::tcp_connect`, `fd::accept`) name a
//! slot of this core's socket table, and every read, write, poll and close of them works on
//! the smoltcp socket in this core's stack. Nothing of a socket is shared with another core:
//! its buffers, its TCP state and its slot are this core's (the flow's frames are steered to
//! this core's channel, `abi::net_steer`), so the data path stays share-nothing, as in Corey's
//! per-core lwIP. Another core using the descriptor gets `WrongCore`.
//!
//! The home of a core is reached through a per-core record with an `in use` flag: a call
//! that finds it taken (a socket call from inside `with_host`, or two contexts time-sharing
//! the core) gets `Busy` instead of a second mutable reference.

use abi::Error;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use percore::pad::CachePadded;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::IpEndpoint;

use super::stack::Stack;

/// What a socket descriptor needs of the stack that holds it.
pub trait SocketHost {
    /// The stack's sockets.
    fn sockets(&mut self) -> &mut SocketSet<'static>;
    /// Move packets (receive, run TCP, transmit); whether any socket may have changed.
    fn poll(&mut self) -> bool;
    /// Sleep until something may have arrived, or `max_us` passes.
    fn wait_idle(&mut self, max_us: u64);
    /// How to sleep until something may arrive, at most `max_us`, for a caller that sleeps
    /// after letting go of the stack (`wait_idle` below): other contexts of this core may use
    /// the stack while it sleeps.
    fn idle_wait(&mut self, max_us: u64) -> IdleWait;
    /// Start connecting socket `h` of `sockets()` from `local_port` to `remote` (smoltcp's
    /// `connect`, which needs the interface).
    fn connect(&mut self, h: SocketHandle, remote: IpEndpoint, local_port: u16) -> Result<(), Error>;
}

impl SocketHost for Stack {
    fn sockets(&mut self) -> &mut SocketSet<'static> {
        &mut self.sockets
    }
    fn poll(&mut self) -> bool {
        Stack::poll(self)
    }
    fn wait_idle(&mut self, max_us: u64) {
        Stack::wait_idle(self, max_us)
    }
    fn idle_wait(&mut self, max_us: u64) -> IdleWait {
        let (dev, conf) = Stack::idle_wait(self, max_us);
        IdleWait::Card(dev, conf)
    }
    fn connect(&mut self, h: SocketHandle, remote: IpEndpoint, local_port: u16) -> Result<(), Error> {
        self.sockets.get_mut::<tcp::Socket>(h).connect(self.iface.context(), remote, local_port).map_err(|_| Error::InvalidArgument)
    }
}

/// How a waiter sleeps on a stack (`SocketHost::idle_wait`).
pub enum IdleWait {
    /// The card's wait (`device_conf` of the device with this `CONF_NET_WAIT`).
    Card(abi::ObjName, abi::DeviceConf),
    /// A plain sleep of this many microseconds (`nr::WAIT`): nothing from outside wakes it.
    Nap(u64),
}

/// Cores with a home (a socket descriptor names its core in 8 bits).
pub const MAX_HOMES: usize = 64;
/// Slots of one core's socket table (descriptors name them in 24 bits).
pub const MAX_SOCKETS: usize = 1 << 16;
/// Each socket's receive and transmit buffer.
pub const SOCKET_BUFFER: usize = 4096;
/// Listening sockets an `fd::tcp_listen` keeps ready for connections (its backlog) at most.
pub const MAX_BACKLOG: usize = 64;

/// What a slot of the socket table holds.
pub(crate) enum Sock {
    Free,
    /// A socket made before it listens or connects (a Linux program's `socket` before `bind`
    /// and `listen` or `connect`: `fd::tcp_socket`); no smoltcp socket yet.
    Unbound,
    /// A listening descriptor: `backlog` smoltcp sockets listening on `port`; a connection
    /// that completes its handshake on one of them waits there for `accept`.
    Listen { port: u16, backlog: Vec<SocketHandle> },
    /// A connection (accepted, or made with `tcp_connect`).
    Conn(SocketHandle),
}

pub(crate) struct Slot {
    pub(crate) generation: u32,
    /// Open files naming this socket (a `dup` into another private table counts one).
    pub(crate) opens: u32,
    pub(crate) nonblocking: bool,
    pub(crate) sock: Sock,
}

/// One core's stack and socket table.
pub(crate) struct Home {
    pub(crate) host: Box<dyn SocketHost>,
    pub(crate) slots: Vec<Slot>,
    free: Vec<u32>,
    /// Connections closed by their last descriptor that still say goodbye (FIN, its ACK):
    /// removed from the stack once closed (`reap`).
    closing: Vec<SocketHandle>,
}

struct Place {
    busy: AtomicBool,
    home: UnsafeCell<Option<Home>>,
}

// SAFETY: a `Place` is used only by its own core, and `busy` keeps two users of one core (two
// time-shared contexts, or a nested call) from holding `home` at once.
unsafe impl Sync for Place {}

static PLACES: [CachePadded<Place>; MAX_HOMES] = [const { CachePadded::new(Place { busy: AtomicBool::new(false), home: UnsafeCell::new(None) }) }; MAX_HOMES];

/// Run `f` on this core's home record (`None` before `attach`). `Busy` while another call
/// of this core holds it.
fn with_place<R>(f: impl FnOnce(&mut Option<Home>) -> R) -> Result<R, Error> {
    let core = crate::ctx::core_id();
    let p = PLACES.get(core).ok_or(Error::NoSuchCore)?;
    if p.busy.swap(true, Ordering::Acquire) {
        return Err(Error::Busy);
    }
    // SAFETY: `busy` was false and is now ours: no other reference to `home` exists until we
    // clear it below (only this core's calls reach this place).
    let r = f(unsafe { &mut *p.home.get() });
    p.busy.store(false, Ordering::Release);
    Ok(r)
}

/// Make `host` this core's socket stack. `AlreadyExists` if the core has one.
pub fn attach(host: Box<dyn SocketHost>) -> Result<(), Error> {
    with_place(|h| {
        if h.is_some() {
            return Err(Error::AlreadyExists);
        }
        *h = Some(Home { host, slots: Vec::new(), free: Vec::new(), closing: Vec::new() });
        Ok(())
    })?
}

/// Take this core's stack back (to drop it, or use it directly). `Busy` while a socket
/// descriptor of it is open; `NotFound` without one.
pub fn detach() -> Result<Box<dyn SocketHost>, Error> {
    with_place(|h| {
        let home = h.as_ref().ok_or(Error::NotFound)?;
        if home.slots.iter().any(|s| !matches!(s.sock, Sock::Free)) {
            return Err(Error::Busy);
        }
        Ok(h.take().map(|home| home.host).ok_or(Error::NotFound)?)
    })?
}

/// Run `f` on this core's stack (to poll it from an event loop, or look at it). No socket
/// call may be made inside `f` (`Busy`). `NotFound` without a stack.
pub fn with_host<R>(f: impl FnOnce(&mut dyn SocketHost) -> R) -> Result<R, Error> {
    with_place(|h| h.as_mut().map(|home| f(&mut *home.host)).ok_or(Error::NotFound))?
}

/// How to sleep until this core's stack may have something to do: a frame or completion from
/// the card (its interrupt, in Inline mode), smoltcp's next timer, a wake (`nr::WAKE`) for
/// this core, or `max_us` passes (`SocketHost::idle_wait`); `idle_sleep` sleeps it. One halt
/// that both the card and a descriptor's waiters word can end: a waiter that also sleeps on
/// pipes or eventfds sets this core's bit in their words first, and their changers' wake
/// ends this sleep. Planned while the stack is held, slept after letting go of it: the caller
/// plans under the same lock as its other socket calls (a Linux program's process lock), so
/// a context time-sharing this core never finds the stack `Busy` because of a sleeper.
/// `NotFound` without a stack; `Busy` while another call of this core holds it.
pub fn idle_plan(max_us: u64) -> Result<IdleWait, Error> {
    with_host(|h| h.idle_wait(max_us))
}

/// Sleep as `plan` says (see `idle_plan`).
pub fn idle_sleep(plan: IdleWait) {
    match plan {
        IdleWait::Card(dev, conf) => {
            if conf.value >> 8 != 0 {
                let _ = crate::sys::device_conf(dev, &conf);
            }
        }
        IdleWait::Nap(us) => {
            if us > 0 {
                let _ = crate::sys::wait(0, us.clamp(1, abi::MAX_WAIT_US));
            }
        }
    }
}

/// Poll this core's stack and free the sockets whose goodbye is over; whether a socket may
/// have changed. An event loop over socket descriptors calls this (or `fd::poll_wait`, which
/// does it).
pub fn poll() -> Result<bool, Error> {
    with_home(crate::ctx::core_id() as u64, |home| Ok(home.drive()))
}

/// Counts of this core's socket table: `(open socket descriptors' slots, sockets in the
/// stack)` (for tests: a closed socket must leave neither behind).
pub fn counts() -> Result<(usize, usize), Error> {
    with_home(crate::ctx::core_id() as u64, |home| {
        let used = home.slots.iter().filter(|s| !matches!(s.sock, Sock::Free)).count();
        Ok((used, home.host.sockets().iter().count()))
    })
}

/// Run `f` on the home of `core`, which must be this core (`WrongCore` otherwise: a socket's
/// state is its core's alone).
pub(crate) fn with_home<R>(core: u64, f: impl FnOnce(&mut Home) -> Result<R, Error>) -> Result<R, Error> {
    if core != crate::ctx::core_id() as u64 {
        return Err(Error::WrongCore);
    }
    with_place(|h| h.as_mut().map_or(Err(Error::NotFound), f))?
}

/// A socket descriptor's id (`fd::Kind::Socket`): `core << 48 | generation << 24 | slot`.
pub(crate) fn socket_id(core: u64, generation: u32, slot: u32) -> u64 {
    core << 48 | ((generation as u64) & 0xff_ffff) << 24 | slot as u64
}

/// `(core, generation, slot)` of a socket id.
pub(crate) fn split_id(id: u64) -> (u64, u32, u32) {
    (id >> 48, ((id >> 24) & 0xff_ffff) as u32, (id & 0xff_ffff) as u32)
}

/// A new smoltcp TCP socket with this module's buffers.
pub(crate) fn new_tcp() -> tcp::Socket<'static> {
    let rx = tcp::SocketBuffer::new(alloc::vec![0u8; SOCKET_BUFFER]);
    let tx = tcp::SocketBuffer::new(alloc::vec![0u8; SOCKET_BUFFER]);
    tcp::Socket::new(rx, tx)
}

impl Home {
    /// A new slot holding `sock`, opened once; its id.
    pub(crate) fn new_slot(&mut self, sock: Sock) -> Result<u64, Error> {
        let core = crate::ctx::core_id() as u64;
        let i = match self.free.pop() {
            Some(i) => i,
            None if self.slots.len() < MAX_SOCKETS => {
                self.slots.push(Slot { generation: 0, opens: 0, nonblocking: false, sock: Sock::Free });
                (self.slots.len() - 1) as u32
            }
            None => return Err(Error::Busy),
        };
        let s = &mut self.slots[i as usize];
        s.opens = 1;
        s.nonblocking = false;
        s.sock = sock;
        Ok(socket_id(core, s.generation, i))
    }

    /// The slot a socket id names, if it is open (same generation).
    pub(crate) fn slot(&mut self, id: u64) -> Result<&mut Slot, Error> {
        let (_, generation, i) = split_id(id);
        match self.slots.get_mut(i as usize) {
            Some(s) if s.generation & 0xff_ffff == generation && !matches!(s.sock, Sock::Free) => Ok(s),
            _ => Err(Error::NoSuchObject),
        }
    }

    /// Free slot `id` (its last open file went): a listener's sockets are aborted and removed
    /// at once; a connection is closed (FIN) and removed once its goodbye is over, or at once
    /// if nothing is left to say.
    pub(crate) fn free_slot(&mut self, id: u64) -> Result<(), Error> {
        let i = split_id(id).2;
        let s = self.slot(id)?;
        let sock = core::mem::replace(&mut s.sock, Sock::Free);
        s.generation = s.generation.wrapping_add(1) & 0xff_ffff;
        self.free.push(i);
        let set = self.host.sockets();
        match sock {
            Sock::Free | Sock::Unbound => {}
            Sock::Listen { backlog, .. } => {
                for h in backlog {
                    set.get_mut::<tcp::Socket>(h).abort();
                    set.remove(h);
                }
            }
            Sock::Conn(h) => {
                let s = set.get_mut::<tcp::Socket>(h);
                s.close();
                if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    set.remove(h);
                } else {
                    self.closing.push(h);
                }
            }
        }
        Ok(())
    }

    /// Poll the stack, then remove the closed connections whose goodbye is over.
    pub(crate) fn drive(&mut self) -> bool {
        let changed = self.host.poll();
        let set = self.host.sockets();
        self.closing.retain(|&h| {
            let done = matches!(set.get_mut::<tcp::Socket>(h).state(), tcp::State::Closed | tcp::State::TimeWait);
            if done {
                set.remove(h);
            }
            !done
        });
        changed
    }
}

/// A stack over smoltcp's loopback device, address 127.0.0.1: connections between sockets of
/// the same core, with no network card (tests, and programs that talk to themselves).
pub struct LoopStack {
    dev: smoltcp::phy::Loopback,
    iface: smoltcp::iface::Interface,
    sockets: SocketSet<'static>,
}

impl LoopStack {
    pub fn new() -> LoopStack {
        use smoltcp::wire::{IpAddress, IpCidr};
        let mut dev = smoltcp::phy::Loopback::new(smoltcp::phy::Medium::Ip);
        let config = smoltcp::iface::Config::new(smoltcp::wire::HardwareAddress::Ip);
        let mut iface = smoltcp::iface::Interface::new(config, &mut dev, super::stack::now());
        iface.update_ip_addrs(|a| {
            let _ = a.push(IpCidr::new(IpAddress::v4(127, 0, 0, 1), 8));
        });
        LoopStack { dev, iface, sockets: SocketSet::new(Vec::new()) }
    }
}

impl Default for LoopStack {
    fn default() -> Self {
        Self::new()
    }
}

impl SocketHost for LoopStack {
    fn sockets(&mut self) -> &mut SocketSet<'static> {
        &mut self.sockets
    }
    fn poll(&mut self) -> bool {
        // Until nothing moves: a frame sent on loopback is received by the next round.
        let mut changed = false;
        for _ in 0..8 {
            if self.iface.poll(super::stack::now(), &mut self.dev, &mut self.sockets) != smoltcp::iface::PollResult::SocketStateChanged {
                break;
            }
            changed = true;
        }
        changed
    }
    fn wait_idle(&mut self, max_us: u64) {
        if let IdleWait::Nap(us) = self.idle_wait(max_us) {
            if us > 0 {
                let _ = crate::sys::wait(0, us.clamp(1, abi::MAX_WAIT_US));
            }
        }
    }
    fn idle_wait(&mut self, max_us: u64) -> IdleWait {
        // Nothing arrives from outside: sleep until smoltcp's next timer, at most `max_us`.
        let due = self.iface.poll_delay(super::stack::now(), &self.sockets).map_or(max_us, |d| d.total_micros());
        IdleWait::Nap(due.min(max_us))
    }
    fn connect(&mut self, h: SocketHandle, remote: IpEndpoint, local_port: u16) -> Result<(), Error> {
        self.sockets.get_mut::<tcp::Socket>(h).connect(self.iface.context(), remote, local_port).map_err(|_| Error::InvalidArgument)
    }
}
