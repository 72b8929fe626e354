//! `epoll` for Linux programs: an epoll descriptor holds an interest list (descriptor,
//! events, the program's 64-bit data), private to the program like the rest of its
//! descriptor table (in the epoll's open file description, `files::Desc::epoll`, beside a
//! console descriptor of the descriptor layer that stands for it). `epoll_wait` looks at each
//! interest's readiness (`poll::ready`) and sleeps as `poll` does (`poll::wait`: without the
//! process lock, re-looking after arming each descriptor's wake-up) until one fires.
//!
//! - level-triggered (the default): reported while ready;
//! - `EPOLLET`: reported when a readiness bit appears that was not reported since the
//!   descriptor was last seen not ready for it, or since a call on its description last
//!   answered `EAGAIN` (`files::Desc::drained`: the program drained it, as `EPOLLET`
//!   requires, so the next arrival is a new edge even if no `epoll_wait` saw it empty). Data
//!   arriving while the bit stays set and before the program drains is not a new edge here
//!   (Linux reports each arrival): a program that drains sees no difference;
//! - `EPOLLONESHOT`: disabled after one report until `EPOLL_CTL_MOD`.
//!
//! An interest names a descriptor number: closing the descriptor drops the interest at the
//! next wait (Linux drops it when the last reference to the open file goes; without `dup`
//! the two agree).

use alloc::vec::Vec;

use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{Extra, Files};
use super::poll::{self, Look, POLLERR, POLLHUP};
use super::upcall::Frame;

pub const EPOLLIN: u32 = 0x1;
pub const EPOLLOUT: u32 = 0x4;
pub const EPOLLRDHUP: u32 = 0x2000;
pub const EPOLLEXCLUSIVE: u32 = 1 << 28;
pub const EPOLLWAKEUP: u32 = 1 << 29;
pub const EPOLLONESHOT: u32 = 1 << 30;
pub const EPOLLET: u32 = 1 << 31;

const CTL_ADD: u64 = 1;
const CTL_DEL: u64 = 2;
const CTL_MOD: u64 = 3;

/// Interests one epoll holds at most.
pub const MAX_INTERESTS: usize = 4096;

#[derive(Debug, Clone)]
struct Interest {
    fd: i32,
    events: u32,
    data: u64,
    /// Bits reported and not seen clear since (`EPOLLET`).
    seen: u32,
    /// A `EPOLLONESHOT` interest that reported.
    disabled: bool,
    /// The descriptor's `Desc::drained` when `seen` was last set.
    drained: u32,
}

#[derive(Debug, Default)]
pub struct Epoll {
    interests: Vec<Interest>,
}

impl Epoll {
    /// Whether some interest is ready now (an epoll descriptor's own readiness).
    pub fn any_ready(&self, f: &Files) -> bool {
        self.interests.iter().any(|i| !i.disabled && poll::ready(f, i.fd).is_some_and(|(m, _)| m & (i.events | POLLERR | POLLHUP) & !i.seen != 0))
    }
}

/// A new epoll descriptor (`flags`: `O_CLOEXEC` or 0).
fn create(p: &mut Process, flags: u32) -> i64 {
    match crate::fd::open_console(p.files.scope()) {
        Ok(l) => p.files.install_with(l, flags, Extra::Epoll(alloc::boxed::Box::default())),
        Err(e) => super::files::errno_of(e),
    }
}

pub fn sys_epoll_create(p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[0] as i32 <= 0 {
        return -EINVAL;
    }
    create(p, 0)
}

pub fn sys_epoll_create1(p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[0] & !(super::files::O_CLOEXEC as u64) != 0 {
        return -EINVAL;
    }
    create(p, a[0] as u32)
}

/// The epoll of descriptor `epfd`, taken out of its description while a call works on it (so
/// the call can look at the other descriptors), and put back by `put_back`.
fn take(f: &mut Files, epfd: i32) -> Result<alloc::boxed::Box<Epoll>, i64> {
    let d = f.desc_of(epfd).ok_or(-EBADF)?;
    d.epoll.as_mut().map(core::mem::take).ok_or(-EINVAL)
}

fn put_back(f: &mut Files, epfd: i32, e: alloc::boxed::Box<Epoll>) {
    if let Some(slot) = f.desc_of(epfd).and_then(|d| d.epoll.as_mut()) {
        *slot = e;
    }
}

pub fn sys_epoll_ctl(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (epfd, op, fd, ev) = (a[0] as i32, a[1], a[2] as i32, a[3]);
    let ev = if op == CTL_DEL {
        None
    } else {
        match p.image.space.read(ev, 12) {
            Some(b) => Some((u32::from_le_bytes([b[0], b[1], b[2], b[3]]), u64::from_le_bytes(b[4..12].try_into().unwrap_or([0; 8])))),
            None => return -EFAULT,
        }
    };
    let mut e = match take(&mut p.files, epfd) {
        Ok(e) => e,
        Err(err) => return err,
    };
    let r = ctl(&p.files, &mut e, epfd, op, fd, ev);
    put_back(&mut p.files, epfd, e);
    r
}

fn ctl(f: &Files, e: &mut Epoll, epfd: i32, op: u64, fd: i32, ev: Option<(u32, u64)>) -> i64 {
    let (Some(s), Some(d)) = (f.slot(fd), f.desc(fd)) else { return -EBADF };
    if fd == epfd {
        return -EINVAL;
    }
    // Linux refuses regular files and directories (always ready: nothing to wait for).
    if d.is_dir || (d.dev.is_none() && d.epoll.is_none() && matches!(crate::fd::kind(s.fd), Ok(crate::fd::Kind::Fs(_) | crate::fd::Kind::File(_)))) {
        return -EPERM;
    }
    let drained = d.drained;
    let at = e.interests.iter().position(|i| i.fd == fd);
    match (op, at, ev) {
        (CTL_ADD, Some(_), _) => -EEXIST,
        (CTL_ADD, None, Some((events, data))) => {
            if events & EPOLLEXCLUSIVE != 0 && events & EPOLLONESHOT != 0 {
                return -EINVAL;
            }
            if e.interests.len() >= MAX_INTERESTS {
                return -ENOSPC;
            }
            e.interests.push(Interest { fd, events, data, seen: 0, disabled: false, drained });
            0
        }
        (CTL_MOD, Some(i), Some((events, data))) => {
            if events & EPOLLEXCLUSIVE != 0 {
                return -EINVAL;
            }
            e.interests[i] = Interest { fd, events, data, seen: 0, disabled: false, drained };
            0
        }
        (CTL_DEL, Some(i), _) => {
            e.interests.remove(i);
            0
        }
        (CTL_MOD | CTL_DEL, None, _) => -ENOENT,
        _ => -EINVAL,
    }
}

/// The ready interests now, at most `max` (and what each reported), updating their
/// edge-triggered and one-shot state.
fn collect(f: &Files, e: &mut Epoll, max: usize) -> Vec<(u32, u64)> {
    e.interests.retain(|i| f.desc(i.fd).is_some());
    let mut out = Vec::new();
    for i in e.interests.iter_mut() {
        if out.len() >= max {
            break;
        }
        if i.disabled {
            continue;
        }
        let now = poll::ready(f, i.fd).map_or(0, |r| r.0) & (i.events | POLLERR | POLLHUP) & 0xffff;
        let drained = f.desc(i.fd).map_or(0, |d| d.drained);
        if drained != i.drained {
            // The program drained it to EAGAIN since the last report: what is there now is
            // a new edge.
            i.drained = drained;
            i.seen = 0;
        }
        let fire = if i.events & EPOLLET != 0 {
            i.seen &= now;
            let new = now & !i.seen;
            i.seen |= new;
            new
        } else {
            now
        };
        if fire != 0 {
            out.push((fire, i.data));
            if i.events & EPOLLONESHOT != 0 {
                i.disabled = true;
            }
        }
    }
    out
}

/// `epoll_wait(epfd, events, max, timeout)` with the process lock taken per look (`poll::wait`).
fn epoll_wait(epfd: i32, events: u64, max: i32, timeout: i32) -> i64 {
    if max <= 0 || max as usize > 1 << 20 {
        return -EINVAL;
    }
    let timeout_ms = if timeout < 0 { None } else { Some(timeout as u64) };
    let first = poll::wait(Some(0), |p: &mut Process| {
        if !p.image.space.ok(events, max as u64 * 12, true) {
            return Err(-EFAULT);
        }
        take(&mut p.files, epfd).map(|e| {
            put_back(&mut p.files, epfd, e);
            Look::Done(())
        })
    });
    if let Err(e) = first {
        return e;
    }
    let got = poll::wait(timeout_ms, |p: &mut Process| {
        let mut e = take(&mut p.files, epfd)?;
        let v = collect(&p.files, &mut e, max as usize);
        let r = if !v.is_empty() || timeout_ms == Some(0) {
            Look::Done(v)
        } else {
            // What to sleep on, after this look updated the edge-triggered state: an
            // `EPOLLET` bit already reported and still set is no new edge (sleeping on it
            // would wake at once, forever); one seen clear or drained since is watched again.
            // A hang-up already reported and nothing else wanted: nothing to wait for.
            let items = e.interests.iter().filter(|i| !i.disabled).filter_map(|i| {
                let seen = if i.events & EPOLLET != 0 { i.seen } else { 0 };
                let (r, w) = (i.events & (EPOLLIN | EPOLLRDHUP) != 0 && seen & EPOLLIN == 0, i.events & EPOLLOUT != 0 && seen & EPOLLOUT == 0);
                let hup_left = seen & POLLHUP == 0;
                (r || w || hup_left).then_some((i.fd, r || (!w && hup_left), w))
            });
            Look::Sleep(poll::sleep_set(&p.files, items))
        };
        put_back(&mut p.files, epfd, e);
        Ok(r)
    });
    let got = match got {
        Ok(g) => g.unwrap_or_default(),
        Err(e) => return e,
    };
    let mut b = Vec::with_capacity(got.len() * 12);
    for (ev, data) in &got {
        b.extend_from_slice(&ev.to_le_bytes());
        b.extend_from_slice(&data.to_le_bytes());
    }
    let mut g = super::dispatch::lock_proc();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    if !b.is_empty() && !p.image.space.put(events, &b) {
        return -EFAULT;
    }
    got.len() as i64
}

pub fn sys_epoll_wait(f: &mut Frame) -> i64 {
    epoll_wait(f.rdi as i32, f.rsi, f.rdx as i32, f.r10 as i32)
}

pub fn sys_epoll_pwait(f: &mut Frame) -> i64 {
    // The signal mask (r8, r9 bytes) is the thread's for the wait (`poll::with_wait_mask`).
    let (epfd, events, max, timeout) = (f.rdi as i32, f.rsi, f.rdx as i32, f.r10 as i32);
    poll::with_wait_mask(f.r8, f.r9, || epoll_wait(epfd, events, max, timeout))
}
