//! `epoll` for Linux programs: an epoll descriptor holds an interest list (descriptor,
//! events, the program's 64-bit data), private to the program like the rest of its
//! descriptor table. `epoll_wait` looks at each interest's readiness (`poll::ready`) and
//! sleeps as `poll` does (`poll::wait`) until one fires.
//!
//! - level-triggered (the default): reported while ready;
//! - `EPOLLET`: reported when a readiness bit appears that was not reported since the
//!   descriptor was last seen not ready for it (a program drains to `EAGAIN`, the bit clears,
//!   the next arrival reports again). Data arriving while the bit stays set is not a new edge
//!   here (Linux reports each arrival): a program that drains, as `EPOLLET` requires, sees
//!   no difference;
//! - `EPOLLONESHOT`: disabled after one report until `EPOLL_CTL_MOD`.
//!
//! An interest names a descriptor number: closing the descriptor drops the interest at the
//! next wait (Linux drops it when the last reference to the open file goes; without `dup`
//! the two agree).

use alloc::vec::Vec;

use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{self, Desc, Files};
use super::poll::{self, POLLERR, POLLHUP};
use crate::fd::Fd;

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

pub fn sys_epoll_create(p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[0] as i32 <= 0 {
        return -EINVAL;
    }
    files::install(&mut p.files, Desc::Epoll(alloc::boxed::Box::default()))
}

pub fn sys_epoll_create1(p: &mut Process, a: &[u64; 6]) -> i64 {
    // EPOLL_CLOEXEC is accepted: the program never execs.
    if a[0] & !0o2000000 != 0 {
        return -EINVAL;
    }
    files::install(&mut p.files, Desc::Epoll(alloc::boxed::Box::default()))
}

/// The epoll of descriptor `epfd`, taken out of the table while a call works on it (so the
/// call can look at the other descriptors), and put back by `put_back`.
fn take(f: &mut Files, epfd: i32) -> Result<alloc::boxed::Box<Epoll>, i64> {
    match files::desc_mut(f, epfd) {
        Some(Desc::Epoll(e)) => Ok(core::mem::take(e)),
        Some(_) => Err(-EINVAL),
        None => Err(-EBADF),
    }
}

fn put_back(f: &mut Files, epfd: i32, e: alloc::boxed::Box<Epoll>) {
    if let Some(Desc::Epoll(slot)) = files::desc_mut(f, epfd) {
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
    let Some(d) = files::desc(f, fd) else { return -EBADF };
    if fd == epfd {
        return -EINVAL;
    }
    // Linux refuses regular files and directories (always ready: nothing to wait for).
    if matches!(d, Desc::File { .. } | Desc::Dir { .. }) {
        return -EPERM;
    }
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
            e.interests.push(Interest { fd, events, data, seen: 0, disabled: false });
            0
        }
        (CTL_MOD, Some(i), Some((events, data))) => {
            if events & EPOLLEXCLUSIVE != 0 {
                return -EINVAL;
            }
            e.interests[i] = Interest { fd, events, data, seen: 0, disabled: false };
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
    e.interests.retain(|i| files::desc(f, i.fd).is_some());
    let mut out = Vec::new();
    for i in e.interests.iter_mut() {
        if out.len() >= max {
            break;
        }
        if i.disabled {
            continue;
        }
        let now = poll::ready(f, i.fd).map_or(0, |r| r.0) & (i.events | POLLERR | POLLHUP) & 0xffff;
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

pub fn sys_epoll_wait(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (epfd, events, max, timeout) = (a[0] as i32, a[1], a[2] as i32, a[3] as i32);
    if max <= 0 || max as usize > 1 << 20 {
        return -EINVAL;
    }
    if !p.image.space.ok(events, max as u64 * 12, true) {
        return -EFAULT;
    }
    let mut e = match take(&mut p.files, epfd) {
        Ok(e) => e,
        Err(err) => return err,
    };
    let timeout_ms = if timeout < 0 { None } else { Some(timeout as u64) };
    let files = &p.files;
    let first = collect(files, &mut e, max as usize);
    let got = if !first.is_empty() || timeout_ms == Some(0) {
        Some(first)
    } else {
        // What to sleep on, after that first look updated the edge-triggered state: an
        // `EPOLLET` bit already reported and still set is no new edge (sleeping on it would
        // wake at once, forever); one seen clear is watched again.
        let sleep_on: Vec<(Fd, bool, bool)> = e
            .interests
            .iter()
            .filter(|i| !i.disabled)
            .filter_map(|i| {
                let seen = if i.events & EPOLLET != 0 { i.seen } else { 0 };
                let (r, w) = (i.events & EPOLLIN != 0 && seen & EPOLLIN == 0, i.events & EPOLLOUT != 0 && seen & EPOLLOUT == 0);
                if !r && !w && seen & POLLHUP != 0 {
                    return None;
                }
                poll::ready(files, i.fd).and_then(|(_, l)| l).map(|l| (l, r, w))
            })
            .collect();
        let e = &mut *e;
        poll::wait(timeout_ms, &sleep_on, || {
            let v = collect(files, e, max as usize);
            (!v.is_empty()).then_some(v)
        })
    };
    put_back(&mut p.files, epfd, e);
    let got = got.unwrap_or_default();
    let mut b = Vec::with_capacity(got.len() * 12);
    for (ev, data) in &got {
        b.extend_from_slice(&ev.to_le_bytes());
        b.extend_from_slice(&data.to_le_bytes());
    }
    if !b.is_empty() && !p.image.space.put(events, &b) {
        return -EFAULT;
    }
    got.len() as i64
}

pub fn sys_epoll_pwait(p: &mut Process, a: &[u64; 6]) -> i64 {
    // The signal mask (a[4]) changes nothing: no signals are delivered.
    sys_epoll_wait(p, a)
}
