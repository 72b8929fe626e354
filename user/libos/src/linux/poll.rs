//! Readiness for Linux programs: `poll`, `ppoll`, `select`, `pselect6` over every kind of
//! descriptor the program has (sockets, pipes, eventfds, epolls, the console, files), and the
//! waiting that `epoll_wait` shares (`wait`).
//!
//! What is ready: the console's standard input always (its bytes, then end of file), standard
//! output and error always writable, a regular file, directory or device both (as on Linux);
//! sockets, pipes and eventfds as the library OS's `fd::poll` says; an epoll when one of its
//! interests would report.
//!
//! Waiting (`wait`): these calls are `dispatch::UNLOCKED` rows. Each round looks under the
//! process lock (the program's descriptors are the process's); if nothing is ready it arms
//! the wake-up of what it waits for (this core's bit in the waiters word of a pipe or
//! eventfd), looks once more, and only then drops the lock and halts, so a change between
//! the look and the halt ends the halt at once. A socket has no word (its stack moves only
//! when its core polls it), so while one is waited for the halt is the card's wait
//! (`net::host::idle_plan`/`idle_sleep`: `CONF_NET_WAIT`, which the card's interrupt, smoltcp's next timer
//! and a wake for this core all end) and the next look polls the stack. A round halts at most `ROUND_MS`, then looks again under the
//! lock (another thread may have changed an epoll's interests, or a signal come); a signal
//! with a handler ends the wait with `EINTR`, as Linux (none of these calls is restarted).
//! `ppoll`, `pselect6` and `epoll_pwait` swap their signal mask in for the wait
//! (`with_wait_mask`).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use linuxabi::errno::*;

use super::dispatch::{lock_proc, Process};
use super::files::{Files, Stream};
use super::upcall::Frame;
use crate::fd::{self, Fd, Kind, PollFd};

pub const POLLIN: u32 = 0x1;
pub const POLLPRI: u32 = 0x2;
pub const POLLOUT: u32 = 0x4;
pub const POLLERR: u32 = 0x8;
pub const POLLHUP: u32 = 0x10;
pub const POLLNVAL: u32 = 0x20;
pub const POLLRDNORM: u32 = 0x40;
pub const POLLWRNORM: u32 = 0x100;
pub const POLLRDHUP: u32 = 0x2000;

/// The longest one sleep of `wait` lasts before it looks again under the process lock.
const ROUND_MS: u64 = 100;

/// Sleeps of `wait` in this program: all of them, those a wake ended, and those that slept on
/// the network card's wait (a socket in the set).
static SLEEPS: AtomicU64 = AtomicU64::new(0);
static SLEEPS_WOKEN: AtomicU64 = AtomicU64::new(0);
static SLEEPS_ON_CARD: AtomicU64 = AtomicU64::new(0);

/// How many times `wait` slept, how many of those a wake ended, and how many slept on the
/// card's wait: `(sleeps, woken, on_card)`. For measurements: an idle server whose waits
/// polled shows about a thousand sleeps a second per waiting thread.
pub fn wait_counts() -> (u64, u64, u64) {
    (SLEEPS.load(Ordering::Relaxed), SLEEPS_WOKEN.load(Ordering::Relaxed), SLEEPS_ON_CARD.load(Ordering::Relaxed))
}

/// What descriptor `fd` is ready for now (`POLL*` bits), and the descriptor-layer descriptor
/// a wait can sleep on. `None`: not open.
pub fn ready(f: &Files, fd: i32) -> Option<(u32, Option<Fd>)> {
    let lib = |l: Fd| -> u32 {
        match fd::poll(l) {
            Ok(r) => {
                let mut m = 0;
                if r.read {
                    m |= POLLIN | POLLRDNORM;
                }
                if r.write {
                    m |= POLLOUT | POLLWRNORM;
                }
                if r.hangup {
                    m |= POLLHUP;
                }
                if r.error {
                    m |= POLLERR;
                }
                m
            }
            Err(_) => POLLERR,
        }
    };
    let s = f.slot(fd)?;
    let d = f.desc(fd)?;
    const BOTH: u32 = POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM;
    if let Some(e) = &d.epoll {
        return Some((if e.any_ready(f) { POLLIN | POLLRDNORM } else { 0 }, None));
    }
    if d.dev.is_some() || d.is_dir {
        return Some((BOTH, None));
    }
    Some(match d.stream {
        Stream::In => (POLLIN | POLLRDNORM, None),
        Stream::Out(_) => (POLLOUT | POLLWRNORM, None),
        Stream::None => match fd::kind(s.fd) {
            Ok(Kind::Fs(_) | Kind::File(_)) => (BOTH, None),
            _ => {
                let mut m = lib(s.fd);
                if let Some(info) = &d.sock {
                    match info.state {
                        // A listener reports no hang-up (its descriptor-layer socket says
                        // nothing of one either); a connection hung up reports POLLRDHUP.
                        super::net::State::Conn { shut_rd, .. } => {
                            if shut_rd {
                                m |= POLLIN | POLLRDNORM | POLLRDHUP;
                            }
                            if m & POLLHUP != 0 || (m & POLLIN != 0 && peer_done(s.fd)) {
                                m |= POLLRDHUP;
                            }
                        }
                        super::net::State::Failed => m = POLLOUT | POLLWRNORM | POLLHUP | POLLERR,
                        // A local connection (always `Fresh` here) that reads no more.
                        super::net::State::Fresh { .. } if fd::unix_read_shut(s.fd) => m |= POLLRDHUP,
                        _ => {}
                    }
                }
                (m, Some(s.fd))
            }
        },
    })
}

/// Whether a connection's peer sent its FIN (reads end after what is waiting).
fn peer_done(l: Fd) -> bool {
    fd::with_tcp(l, |s| !s.may_recv()).unwrap_or(false)
}

/// One look of a `wait`: done with `T`, or what to sleep on before looking again.
pub enum Look<T> {
    Done(T),
    Sleep(Vec<PollFd>),
}

/// Wait until `look` (run under the process lock) is `Done` or `timeout_ms` passes (`None`: no
/// limit; `Some(0)`: one look). `Ok(None)`: the time ran out; `Err(-EINTR)`: a signal with a
/// handler (or the program's end) came first; `Err(e)`: `look`'s own error.
///
/// No lost wake-up: under the lock, after a look that found nothing, this core's bit goes into
/// the waiters word of every descriptor slept on that has one (`fd::WakeOn::Word`: pipes,
/// eventfds) and `look` runs once more; only if that finds nothing too is the lock dropped and
/// the core halted (`nr::WAIT`). A change made after the second look sees the bit and wakes
/// the core (a wake that comes before the halt makes it return at once); one made before it
/// is seen by it. With a descriptor that has no word (a socket: `WakeOn::Poll`) in the set
/// the halt is the card's wait (`net::host::idle_plan`, planned under the lock), which a frame from the card, the
/// stack's next timer, or a wake for this core ends; each look moves the stack. Every descriptor-layer call is made
/// under the process lock: the threads of a program share a core's heap and socket stack.
pub fn wait<T>(timeout_ms: Option<u64>, mut look: impl FnMut(&mut Process) -> Result<Look<T>, i64>) -> Result<Option<T>, i64> {
    let start = crate::time::now_ns();
    let end = timeout_ms.map(|ms| start.saturating_add(ms.saturating_mul(1_000_000)));
    let bit = 1u64 << crate::ctx::core_id().min(63);
    let mut armed: Vec<Fd> = Vec::new();
    loop {
        let nap_us = {
            let mut g = lock_proc();
            let Some(p) = g.as_mut() else { return Err(-ENOSYS) };
            // Take back the bits of the last round (a wake took them already, a timeout not).
            for &l in &armed {
                if let Ok(fd::WakeOn::Word(w)) = fd::wake_on(l) {
                    w.fetch_and(!bit, Ordering::Relaxed);
                }
            }
            armed.clear();
            let sleep = match look(p)? {
                Look::Done(t) => return Ok(Some(t)),
                Look::Sleep(v) => v,
            };
            let now = crate::time::now_ns();
            if end.is_some_and(|e| now >= e) {
                return Ok(None);
            }
            let (interrupted, until) = super::signal::wait_check(p, end.unwrap_or(u64::MAX));
            if interrupted || super::thread::group_exit().is_some() || p.exit.is_some() {
                return Err(-EINTR);
            }
            let mut poll_only = false;
            for pf in &sleep {
                match fd::wake_on(pf.fd) {
                    Ok(fd::WakeOn::Word(w)) => {
                        w.fetch_or(bit, Ordering::SeqCst);
                        armed.push(pf.fd);
                    }
                    Ok(fd::WakeOn::Poll) => poll_only = true,
                    _ => {}
                }
            }
            // The look after arming (see above).
            match look(p) {
                Ok(Look::Sleep(_)) => {}
                r => {
                    for &l in &armed {
                        if let Ok(fd::WakeOn::Word(w)) = fd::wake_on(l) {
                            w.fetch_and(!bit, Ordering::Relaxed);
                        }
                    }
                    return match r? {
                        Look::Done(t) => Ok(Some(t)),
                        Look::Sleep(_) => Ok(None),
                    };
                }
            }
            // Until the timeout or the alarm's deadline, whichever is first.
            let left_us = if until == u64::MAX { u64::MAX } else { until.saturating_sub(now).div_ceil(1000) };
            let nap_us = left_us.min(ROUND_MS * 1000);
            // The card's wait is planned here, under the process lock like every other use of
            // the stack (a plan made without it could leave the stack held when a tick
            // preempts this thread, and another thread's socket call would find it `Busy`).
            let plan = if poll_only { crate::net::host::idle_plan(nap_us.clamp(1, abi::NET_MAX_WAIT_US)).ok() } else { None };
            (nap_us, poll_only, plan)
        };
        let (nap_us, on_card, plan) = nap_us;
        // The lock is dropped: halt until a wake, a signal's kick or the nap's end.
        SLEEPS.fetch_add(1, Ordering::Relaxed);
        // A socket in the set: the card's wait, which the card's interrupt, smoltcp's next
        // timer and a wake for this core (a pipe's or eventfd's changer, a signal) all end.
        // Without a stack to wait on (none attached, or another call of this core holds it)
        // the wait naps `fd::POLL_NAP_US` and looks again.
        if let Some(plan) = plan {
            crate::net::host::idle_sleep(plan);
            SLEEPS_ON_CARD.fetch_add(1, Ordering::Relaxed);
            // The card's wait returns at once while other contexts are queued on this core:
            // let them run.
            let _ = crate::sys::pcore_yield();
            continue;
        }
        let nap_us = if on_card { nap_us.min(fd::POLL_NAP_US) } else { nap_us };
        match crate::sys::wait(0, nap_us.clamp(1, abi::MAX_WAIT_US)) {
            Ok(r) if r & abi::WAIT_WOKEN != 0 => {
                SLEEPS_WOKEN.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) if nap_us > 0 => {
                // Not woken: the nap ended, or the core time-shares and would not halt with
                // another context queued (the other side may be it): give it the core.
                let _ = crate::sys::pcore_yield();
            }
            Ok(_) => {}
            Err(_) => {
                let _ = crate::sys::pcore_yield();
            }
        }
    }
}

/// The descriptor-layer descriptors of `items` (program descriptor, wants read, wants write)
/// to sleep on.
pub fn sleep_set(f: &Files, items: impl Iterator<Item = (i32, bool, bool)>) -> Vec<PollFd> {
    items.filter(|&(_, r, w)| r || w).filter_map(|(fd, r, w)| ready(f, fd).and_then(|(_, l)| l).map(|l| PollFd::new(l, r, w))).collect()
}

/// A timeout in milliseconds from a `struct timespec` (`None`: a null pointer, no limit).
fn timespec_ms(p: &Process, addr: u64) -> Result<Option<u64>, i64> {
    if addr == 0 {
        return Ok(None);
    }
    let b = p.image.space.read(addr, 16).ok_or(-EFAULT)?;
    let s = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let ns = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
    if s < 0 || !(0..1_000_000_000).contains(&ns) {
        return Err(-EINVAL);
    }
    Ok(Some((s as u64).saturating_mul(1000).saturating_add((ns as u64).div_ceil(1_000_000))))
}

/// Run `f` on the process (under the lock) for an `UNLOCKED` row's argument checks.
fn with_proc<R>(f: impl FnOnce(&mut Process) -> Result<R, i64>) -> Result<R, i64> {
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return Err(-ENOSYS) };
    f(p)
}

/// `struct pollfd` entries at `fds`, waited on; returns how many have events.
fn do_poll(fds: u64, n: u64, timeout_ms: Option<u64>) -> i64 {
    let items = match with_proc(|p| {
        if n > super::files::MAX_FDS as u64 * 16 {
            return Err(-EINVAL);
        }
        let raw = p.image.space.read(fds, n * 8).map(|b| b.to_vec()).ok_or(-EFAULT)?;
        if !p.image.space.ok(fds, n * 8, true) {
            return Err(-EFAULT);
        }
        Ok(raw)
    }) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let want: Vec<(i32, u32)> = items.chunks(8).map(|c| (i32::from_le_bytes([c[0], c[1], c[2], c[3]]), u32::from(u16::from_le_bytes([c[4], c[5]])))).collect();
    let r = wait(timeout_ms, |p| {
        let rev: Vec<u32> = want
            .iter()
            .map(|&(fd, ev)| {
                if fd < 0 {
                    return 0;
                }
                match ready(&p.files, fd) {
                    None => POLLNVAL,
                    Some((m, _)) => m & (ev | POLLERR | POLLHUP | POLLNVAL),
                }
            })
            .collect();
        if rev.iter().any(|&r| r != 0) || timeout_ms == Some(0) {
            return Ok(Look::Done(rev));
        }
        Ok(Look::Sleep(sleep_set(&p.files, want.iter().filter(|w| w.0 >= 0).map(|&(fd, ev)| (fd, ev & (POLLIN | POLLRDNORM | POLLRDHUP) != 0, ev & (POLLOUT | POLLWRNORM) != 0)))))
    });
    let rev = match r {
        Ok(Some(rev)) => rev,
        Ok(None) => alloc::vec![0; want.len()],
        Err(e) => return e,
    };
    let mut out = items;
    for (i, r) in rev.iter().enumerate() {
        out[i * 8 + 6..i * 8 + 8].copy_from_slice(&(*r as u16).to_le_bytes());
    }
    match with_proc(|p| if p.image.space.put(fds, &out) { Ok(()) } else { Err(-EFAULT) }) {
        Ok(()) => rev.iter().filter(|&&r| r != 0).count() as i64,
        Err(e) => e,
    }
}

pub fn sys_poll(f: &mut Frame) -> i64 {
    let t = f.rdx as i32;
    do_poll(f.rdi, f.rsi, if t < 0 { None } else { Some(t as u64) })
}

pub fn sys_ppoll(f: &mut Frame) -> i64 {
    let (set, size) = (f.r10, f.r8);
    match with_proc(|p| timespec_ms(p, f.rdx)) {
        Ok(t) => with_wait_mask(set, size, || do_poll(f.rdi, f.rsi, t)),
        Err(e) => e,
    }
}

/// Run `wait` (a `ppoll`, `pselect6` or `epoll_pwait`) with the signal mask at `set`
/// (`size` bytes; none if `set` is null) in place for it (`signal::State::begin_wait_mask`):
/// swapped in under the process lock before the wait's first look, the old one back after,
/// unless a signal ended the wait with `EINTR` (its handler runs with the wait's mask, and
/// the old one comes back with the handler's return, as Linux). `EINVAL` for a size other
/// than 8, `EFAULT` for a mask that cannot be read, before anything waits.
pub fn with_wait_mask(set: u64, size: u64, wait: impl FnOnce() -> i64) -> i64 {
    if set == 0 {
        return wait();
    }
    if let Err(e) = with_proc(|p| {
        if size != 8 {
            return Err(-EINVAL);
        }
        let m = p.image.space.get_u64(set).ok_or(-EFAULT)?;
        p.sig.begin_wait_mask(m);
        Ok(())
    }) {
        return e;
    }
    let r = wait();
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return r };
    if r == -EINTR {
        // The way back delivers what ended the wait and then puts the mask back.
        super::signal::interrupted(p, EINTR)
    } else {
        p.sig.end_wait_mask();
        r
    }
}

/// `select` over three `fd_set`s of `nfds` bits.
fn do_select(nfds: u64, sets: [u64; 3], timeout_ms: Option<u64>) -> i64 {
    if nfds > 1024 {
        return -EINVAL;
    }
    let bytes = nfds.div_ceil(64) * 8;
    let ins = match with_proc(|p| {
        let mut ins: [Vec<u8>; 3] = Default::default();
        for (i, &addr) in sets.iter().enumerate() {
            if addr != 0 {
                match p.image.space.read(addr, bytes) {
                    Some(b) if p.image.space.ok(addr, bytes, true) => ins[i] = b.to_vec(),
                    _ => return Err(-EFAULT),
                }
            }
        }
        Ok(ins)
    }) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let bit = |v: &Vec<u8>, fd: usize| v.get(fd / 8).is_some_and(|b| b & (1 << (fd % 8)) != 0);
    let mut items = Vec::new();
    for fd in 0..nfds as usize {
        let want = [bit(&ins[0], fd), bit(&ins[1], fd), bit(&ins[2], fd)];
        if want.iter().any(|&w| w) {
            items.push((fd, want));
        }
    }
    let empty = || [alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize]];
    let r = wait(timeout_ms, |p| {
        let mut outs = empty();
        let mut n = 0;
        for &(fd, w) in &items {
            let Some((m, _)) = ready(&p.files, fd as i32) else { return Err(-EBADF) };
            let got = [m & (POLLIN | POLLHUP | POLLERR) != 0, m & (POLLOUT | POLLERR) != 0, m & POLLPRI != 0];
            for k in 0..3 {
                if w[k] && got[k] {
                    outs[k][fd / 8] |= 1 << (fd % 8);
                    n += 1;
                }
            }
        }
        if n > 0 || timeout_ms == Some(0) {
            return Ok(Look::Done((n, outs)));
        }
        Ok(Look::Sleep(sleep_set(&p.files, items.iter().map(|&(fd, w)| (fd as i32, w[0], w[1])))))
    });
    let (n, outs) = match r {
        Ok(Some(x)) => x,
        Ok(None) => (0, empty()),
        Err(e) => return e,
    };
    let put = with_proc(|p| {
        for (i, &addr) in sets.iter().enumerate() {
            if addr != 0 && !p.image.space.put(addr, &outs[i]) {
                return Err(-EFAULT);
            }
        }
        Ok(())
    });
    match put {
        Ok(()) => n,
        Err(e) => e,
    }
}

pub fn sys_select(f: &mut Frame) -> i64 {
    // struct timeval: seconds, microseconds.
    let tv = f.r8;
    let t = if tv == 0 {
        Ok(None)
    } else {
        with_proc(|p| {
            let b = p.image.space.read(tv, 16).ok_or(-EFAULT)?;
            let s = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
            let us = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
            if s < 0 || !(0..1_000_000).contains(&us) {
                return Err(-EINVAL);
            }
            Ok(Some((s as u64) * 1000 + (us as u64).div_ceil(1000)))
        })
    };
    match t {
        Ok(t) => do_select(f.rdi, [f.rsi, f.rdx, f.r10], t),
        Err(e) => e,
    }
}

/// `pselect6(nfds, in, out, ex, timeout, sig)`: `sig` points at `{ const sigset_t *ss;
/// size_t ss_len; }` (null: no mask).
pub fn sys_pselect6(f: &mut Frame) -> i64 {
    let r = with_proc(|p| {
        let (set, size) = if f.r9 == 0 {
            (0, 0)
        } else {
            let b = p.image.space.read(f.r9, 16).ok_or(-EFAULT)?;
            (u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])), u64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8])))
        };
        Ok((timespec_ms(p, f.r8)?, set, size))
    });
    match r {
        Ok((t, set, size)) => with_wait_mask(set, size, || do_select(f.rdi, [f.rsi, f.rdx, f.r10], t)),
        Err(e) => e,
    }
}
