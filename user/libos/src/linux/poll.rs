//! Readiness for Linux programs: `poll`, `ppoll`, `select`, `pselect6` over every kind of
//! descriptor the program has (sockets, eventfds, the console, files), and the waiting that
//! `epoll_wait` shares (`wait`).
//!
//! What is ready: the console's standard input always (its bytes, then end of file), standard
//! output and error always writable, a regular file or directory both (as on Linux); sockets
//! and eventfds as the library OS's `fd::poll` says. Waiting is `fd::poll_wait` over the
//! descriptors the library OS knows: it sleeps between looks (a socket's stack moves only
//! when its core polls it, so the core naps `fd::POLL_NAP_US` at a time and looks again; an
//! eventfd wakes it at once). With no such descriptor the call sleeps out its timeout.

use alloc::vec::Vec;

use linuxabi::errno::*;

use super::dispatch::Process;
use super::files::{self, Console, Desc, Files};
use crate::fd::{self, Fd, PollFd};

pub const POLLIN: u32 = 0x1;
pub const POLLPRI: u32 = 0x2;
pub const POLLOUT: u32 = 0x4;
pub const POLLERR: u32 = 0x8;
pub const POLLHUP: u32 = 0x10;
pub const POLLNVAL: u32 = 0x20;
pub const POLLRDNORM: u32 = 0x40;
pub const POLLWRNORM: u32 = 0x100;
pub const POLLRDHUP: u32 = 0x2000;

/// What descriptor `fd` is ready for now (`POLL*` bits), and the library OS descriptor a
/// wait can sleep on. `None`: not open.
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
                    m |= POLLHUP | POLLRDHUP;
                }
                if r.error {
                    m |= POLLERR;
                }
                m
            }
            Err(_) => POLLERR,
        }
    };
    Some(match files::desc(f, fd)? {
        Desc::Console(Console::In { .. }) => (POLLIN | POLLRDNORM, None),
        Desc::Console(_) => (POLLOUT | POLLWRNORM, None),
        Desc::File { .. } | Desc::Dir { .. } => (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM, None),
        Desc::Socket(s) => match s.lib_fd() {
            Some(l) => {
                let mut m = lib(l);
                if let super::net::State::Conn { shut_rd: true, .. } = s.state {
                    m |= POLLIN | POLLRDNORM | POLLRDHUP;
                }
                (m, Some(l))
            }
            // Not connected and not listening: Linux says writable and hung up.
            None => (POLLOUT | POLLWRNORM | POLLHUP, None),
        },
        Desc::Event(l) => (lib(*l), Some(*l)),
        Desc::Epoll(e) => (if e.any_ready(f) { POLLIN | POLLRDNORM } else { 0 }, None),
    })
}

/// Wait until `look` finds something (returns `Some`) or `timeout_ms` passes (`None`: no
/// limit), sleeping on `sleep_on` (the library OS descriptors involved) between looks.
pub fn wait<T>(timeout_ms: Option<u64>, sleep_on: &[(Fd, bool, bool)], mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let start = crate::time::now_ns();
    loop {
        if let Some(t) = look() {
            return Some(t);
        }
        let left = match timeout_ms {
            Some(ms) => {
                let spent = (crate::time::now_ns() - start) / 1_000_000;
                if spent >= ms {
                    return None;
                }
                Some(ms - spent)
            }
            None => None,
        };
        if sleep_on.is_empty() {
            let us = left.map_or(abi::MAX_WAIT_US, |ms| (ms * 1000).clamp(1, abi::MAX_WAIT_US));
            if crate::sys::wait(0, us).is_err() {
                core::hint::spin_loop();
            }
        } else {
            let mut p: Vec<PollFd> = sleep_on.iter().map(|&(f, r, w)| PollFd::new(f, r, w)).collect();
            if fd::poll_wait(&mut p, left).is_err() {
                // A descriptor went bad under us: look once more (it reports POLLERR) and stop.
                return look();
            }
        }
    }
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

/// `struct pollfd` entries, waited on; returns how many have events.
fn do_poll(p: &mut Process, fds: u64, n: u64, timeout_ms: Option<u64>) -> i64 {
    if n > files::MAX_FDS as u64 * 16 {
        return -EINVAL;
    }
    let Some(raw) = p.image.space.read(fds, n * 8).map(|b| b.to_vec()) else { return -EFAULT };
    if !p.image.space.ok(fds, n * 8, true) {
        return -EFAULT;
    }
    let items: Vec<(i32, u32)> = raw.chunks(8).map(|c| (i32::from_le_bytes([c[0], c[1], c[2], c[3]]), u32::from(u16::from_le_bytes([c[4], c[5]])))).collect();
    let sleep_on: Vec<(Fd, bool, bool)> = items
        .iter()
        .filter_map(|&(fd, ev)| ready(&p.files, fd).and_then(|(_, l)| l).map(|l| (l, ev & (POLLIN | POLLRDNORM) != 0, ev & (POLLOUT | POLLWRNORM) != 0)))
        .collect();
    let files = &p.files;
    let look = || {
        let rev: Vec<u32> = items
            .iter()
            .map(|&(fd, ev)| {
                if fd < 0 {
                    return 0;
                }
                match ready(files, fd) {
                    None => POLLNVAL,
                    Some((m, _)) => m & (ev | POLLERR | POLLHUP),
                }
            })
            .collect();
        rev.iter().any(|&r| r != 0).then_some(rev)
    };
    let rev = if timeout_ms == Some(0) { look() } else { wait(timeout_ms, &sleep_on, look) };
    let rev = rev.unwrap_or_else(|| alloc::vec![0; items.len()]);
    let mut out = raw;
    for (i, r) in rev.iter().enumerate() {
        out[i * 8 + 6..i * 8 + 8].copy_from_slice(&(*r as u16).to_le_bytes());
    }
    if !p.image.space.put(fds, &out) {
        return -EFAULT;
    }
    rev.iter().filter(|&&r| r != 0).count() as i64
}

pub fn sys_poll(p: &mut Process, a: &[u64; 6]) -> i64 {
    let t = a[2] as i32;
    do_poll(p, a[0], a[1], if t < 0 { None } else { Some(t as u64) })
}

pub fn sys_ppoll(p: &mut Process, a: &[u64; 6]) -> i64 {
    // The signal mask (a[3]) changes nothing: no signals are delivered.
    match timespec_ms(p, a[2]) {
        Ok(t) => do_poll(p, a[0], a[1], t),
        Err(e) => e,
    }
}

/// `select` over three `fd_set`s of `nfds` bits.
fn do_select(p: &mut Process, nfds: u64, sets: [u64; 3], timeout_ms: Option<u64>) -> i64 {
    if nfds > 1024 {
        return -EINVAL;
    }
    let bytes = nfds.div_ceil(64) * 8;
    let mut ins: [Vec<u8>; 3] = Default::default();
    for (i, &addr) in sets.iter().enumerate() {
        if addr != 0 {
            match p.image.space.read(addr, bytes) {
                Some(b) if p.image.space.ok(addr, bytes, true) => ins[i] = b.to_vec(),
                _ => return -EFAULT,
            }
        }
    }
    let bit = |v: &Vec<u8>, fd: usize| v.get(fd / 8).is_some_and(|b| b & (1 << (fd % 8)) != 0);
    let mut items = Vec::new();
    for fd in 0..nfds as usize {
        let want = [bit(&ins[0], fd), bit(&ins[1], fd), bit(&ins[2], fd)];
        if want.iter().any(|&w| w) {
            if ready(&p.files, fd as i32).is_none() {
                return -EBADF;
            }
            items.push((fd, want));
        }
    }
    let sleep_on: Vec<(Fd, bool, bool)> = items.iter().filter_map(|&(fd, w)| ready(&p.files, fd as i32).and_then(|(_, l)| l).map(|l| (l, w[0], w[1]))).collect();
    let files = &p.files;
    let look = || {
        let mut outs: [Vec<u8>; 3] = [alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize]];
        let mut n = 0;
        for &(fd, w) in &items {
            let m = ready(files, fd as i32).map_or(POLLNVAL, |r| r.0);
            let got = [m & (POLLIN | POLLHUP | POLLERR) != 0, m & (POLLOUT | POLLERR) != 0, m & POLLPRI != 0];
            for k in 0..3 {
                if w[k] && got[k] {
                    outs[k][fd / 8] |= 1 << (fd % 8);
                    n += 1;
                }
            }
        }
        (n > 0).then_some((n, outs))
    };
    let r = if timeout_ms == Some(0) { look() } else { wait(timeout_ms, &sleep_on, look) };
    let (n, outs) = r.unwrap_or_else(|| (0, [alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize], alloc::vec![0u8; bytes as usize]]));
    for (i, &addr) in sets.iter().enumerate() {
        if addr != 0 && !p.image.space.put(addr, &outs[i]) {
            return -EFAULT;
        }
    }
    n
}

pub fn sys_select(p: &mut Process, a: &[u64; 6]) -> i64 {
    // struct timeval: seconds, microseconds.
    let t = if a[4] == 0 {
        None
    } else {
        let Some(b) = p.image.space.read(a[4], 16) else { return -EFAULT };
        let s = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
        let us = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
        if s < 0 || !(0..1_000_000).contains(&us) {
            return -EINVAL;
        }
        Some((s as u64) * 1000 + (us as u64).div_ceil(1000))
    };
    do_select(p, a[0], [a[1], a[2], a[3]], t)
}

pub fn sys_pselect6(p: &mut Process, a: &[u64; 6]) -> i64 {
    match timespec_ms(p, a[4]) {
        Ok(t) => do_select(p, a[0], [a[1], a[2], a[3]], t),
        Err(e) => e,
    }
}
