//! The eventfd: Linux's counter descriptor (`eventfd(2)`), as a kind of open file.
//!
//! One page in the table's share (like a pipe ring, mapped through the descriptor window, so
//! a read or write is memory accesses, no system call): word 0 the counter, word 1 the flags
//! given at creation, word 16 the count of open files naming it (the pipe's ends word, with
//! the same "last close frees it from every table" rule: `pipe::add_end`/`drop_end`), word 17
//! its waiters word (`ready.rs`). Semantics, as Linux's:
//!
//! - `read` (a buffer of at least 8 bytes, else `InvalidArgument`): with the counter non-zero,
//!   returns it (8 bytes, native endian) and resets it to 0; with `EFD_SEMAPHORE`, returns 1
//!   and decrements it. With the counter 0 it waits, or fails with `WouldBlock` (`EAGAIN`)
//!   under `EFD_NONBLOCK`.
//! - `write` (exactly 8 bytes' worth is read from at least 8, else `InvalidArgument`) adds the
//!   value; `u64::MAX` is `InvalidArgument`. A sum that would pass `u64::MAX - 1` waits for a
//!   read, or fails with `WouldBlock`.
//! - `poll`: readable with the counter above 0, writable while at least 1 can be added.
//!
//! `EFD_NONBLOCK` is the eventfd's, not each open file's (Linux keeps `O_NONBLOCK` per open
//! file description; `fcntl(F_SETFL)` has no counterpart here yet).

use abi::{Error, ObjName, ObjectId, MEMID_SELF};
use core::sync::atomic::{AtomicU64, Ordering};

use super::file::{made_up_stat, FileLike, Kind, Ready, Stat, WakeOn};
use super::pipe::{add_end, drop_end, waiters_at, with_ends};
use super::ready::{block_on, notify};
use super::window::map;

/// `read` returns 1 and decrements, instead of returning the count and resetting it.
pub const EFD_SEMAPHORE: u32 = 1;
/// A call that would wait fails with `WouldBlock` (Linux's value, `O_NONBLOCK`).
pub const EFD_NONBLOCK: u32 = 0o4000;
/// Accepted and ignored (there is no `exec` that keeps descriptors).
pub const EFD_CLOEXEC: u32 = 0o2000000;
/// The largest value the counter holds.
const MAX: u64 = u64::MAX - 1;
const PAGE: u64 = abi::PAGE_SIZE;

/// A new eventfd page in table share `t`: counter `init`, `flags`, one open file counted.
pub(super) fn new_event(t: ObjectId, init: u32, flags: u32) -> Result<ObjectId, Error> {
    if flags & !(EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC) != 0 {
        return Err(Error::InvalidArgument);
    }
    let seg = crate::sys::segment_alloc(t, "eventfd", MEMID_SELF, PAGE)?;
    let init = with_ends(t, seg, |ends| {
        // SAFETY: the page is mapped (inside `with_ends`); words 0 and 1 precede the ends word.
        let (count, fl) = unsafe { (&*(ends as *const AtomicU64).sub(16), &*(ends as *const AtomicU64).sub(15)) };
        count.store(init as u64, Ordering::Relaxed);
        fl.store(flags as u64, Ordering::Relaxed);
        ends.store(1, Ordering::Release);
    });
    match init {
        Ok(()) => Ok(seg),
        Err(e) => {
            let _ = crate::sys::share_delobj(ObjName::new(t, seg));
            Err(e)
        }
    }
}

/// The open file of kind `Event`.
pub(super) struct EventFd(pub(super) ObjectId);

impl EventFd {
    /// The counter and the flags of the eventfd, mapped in this context's window.
    fn words(&self, at: ObjectId) -> Result<(&'static AtomicU64, u32, &'static AtomicU64), Error> {
        let (va, _) = map(ObjName::new(at, self.0))?;
        // SAFETY: `map` mapped the page read-write at `va` (the window slot stays until this
        // context closes its last open file of it or calls `unmap_all`); words 0 and 1 are the
        // counter and the flags, touched atomically only.
        let (count, flags) = unsafe { (&*(va as *const AtomicU64), (*(va as *const AtomicU64).add(1)).load(Ordering::Relaxed) as u32) };
        Ok((count, flags, waiters_at(va)))
    }
}

impl FileLike for EventFd {
    fn read(&self, at: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        if buf.len() < 8 {
            return Err(Error::InvalidArgument);
        }
        let (count, flags, waiters) = self.words(at)?;
        let take = || {
            let mut cur = count.load(Ordering::Acquire);
            loop {
                if cur == 0 {
                    return None;
                }
                let (new, got) = if flags & EFD_SEMAPHORE != 0 { (cur - 1, 1) } else { (0, cur) };
                match count.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some(got),
                    Err(now) => cur = now,
                }
            }
        };
        let got = match take() {
            Some(v) => v,
            None if flags & EFD_NONBLOCK != 0 => return Err(Error::WouldBlock),
            None => block_on(waiters, take),
        };
        // Room was made: a writer waiting for it may go on.
        notify(waiters);
        buf[..8].copy_from_slice(&got.to_ne_bytes());
        Ok(8)
    }

    fn write(&self, at: ObjectId, data: &[u8]) -> Result<usize, Error> {
        let Some(bytes) = data.get(..8) else { return Err(Error::InvalidArgument) };
        let add = u64::from_ne_bytes(bytes.try_into().map_err(|_| Error::InvalidArgument)?);
        if add == u64::MAX {
            return Err(Error::InvalidArgument);
        }
        let (count, flags, waiters) = self.words(at)?;
        let put = || {
            let mut cur = count.load(Ordering::Acquire);
            loop {
                if cur > MAX - add {
                    return None;
                }
                match count.compare_exchange_weak(cur, cur + add, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some(()),
                    Err(now) => cur = now,
                }
            }
        };
        match put() {
            Some(()) => {}
            None if flags & EFD_NONBLOCK != 0 => return Err(Error::WouldBlock),
            None => block_on(waiters, put),
        }
        if add != 0 {
            notify(waiters);
        }
        Ok(8)
    }

    /// Linux shows an eventfd as an anonymous inode: no type bits, size 0.
    fn stat(&self, at: ObjectId) -> Result<Stat, Error> {
        self.words(at)?;
        Ok(made_up_stat(0o600, 0))
    }

    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let v = self.words(at)?.0.load(Ordering::Acquire);
        Ok(Ready { read: v > 0, write: v < MAX, hangup: false, error: false })
    }

    fn wake_on(&self, at: ObjectId) -> Result<WakeOn, Error> {
        Ok(WakeOn::Word(self.words(at)?.2))
    }

    /// A new open file of the same eventfd (a `dup` into another table): counted, unless the
    /// last one went meanwhile (`NoSuchObject`).
    fn opened(&self, at: ObjectId) -> Result<Option<Kind>, Error> {
        add_end(at, self.0, 1).map(|_| None)
    }

    /// The last open file anywhere frees the page (from every table holding it).
    fn last_close(&self, at: ObjectId) -> Result<bool, Error> {
        drop_end(at, self.0, 1)
    }
}
