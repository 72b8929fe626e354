//! Local stream sockets (Linux's `AF_UNIX` `SOCK_STREAM`) as two kinds of open file, built on
//! the pipe's ring (`pipe.rs`): a connection is two rings, one per direction, and a socket
//! that is not connected (made, bound, or listening) is a page holding its name and its queue
//! of connections not yet accepted.
//!
//! **A connection** (`Kind::Unix(pair | side << 48)`): one segment of `2 * PIPE_BYTES` in a
//! table's share. Ring 0 (bytes `0..PIPE_BYTES`) carries what side A writes and side B reads,
//! ring 1 the other way; each is a pipe ring (its lock, head, tail, data: `pipe::ring_put`,
//! `ring_take`). Ring 0's header also holds the pair's ends word (word 16: side A's open
//! files in the low half, side B's in the high half, as a pipe's read and write ends), the
//! waiters word of both directions (word 17: every read, write, shutdown and close notifies
//! it), the rendezvous share the pair is also in (word 18, 0: none) and the shutdown bits
//! (word 19). Ring 1's header holds the name of the listening socket it was accepted from
//! (word 16 its length, bytes 136.. the name), for `getsockname`/`getpeername`. The last
//! open file of either side going counts as that side closing: the other side reads end of
//! file and a write fails (`BrokenPipe`); the last open file of both frees the segment from
//! every share that holds it.
//!
//! **A socket that is not connected** (`Kind::UnixSock(page)`): one page. Word 0 the queue's
//! lock, word 16 its open-file count (a pipe ends word of one kind), word 17 its waiters
//! word (a connection queued notifies it), word 18 the rendezvous share, word 19 its state
//! (`FRESH`, `BOUND`, `LISTENING`, `CLOSED`), word 20 the backlog, words 21 and 22 the queue's
//! head and tail, words 23 the name's length, words 64..128 the queue (pair segments whose
//! side B waits for `accept`, each counted in its pair's ends word), bytes 1024.. the name.
//!
//! **Names**: a bound page is added to a *rendezvous share* the caller names (the Linux
//! personality gives the session's share, in every process of the program's share set), so
//! any process of the session can find it: `find` lists that share and looks at the pages
//! named `unix-sock` whose state is bound or listening and whose name is the one asked for.
//! A name is not a file of the file system: it goes when its socket's last open file closes
//! (as Linux's abstract names do; a path name on Linux stays as a file until `unlink`).
//!
//! Connecting: the connector makes the pair in its own table share and the rendezvous share,
//! opens side A for itself, and queues the pair (side B counted) on the listener's page;
//! `accept` takes it off the queue, adds the pair to its own table's share and opens side B.
//! A listener whose last open file goes drops side B of every pair still queued (their
//! connectors read end of file).

use abi::{Error, ObjName, ObjectId, MEMID_SELF, PAGE_SIZE};
use core::sync::atomic::{AtomicU64, Ordering};

use super::file::{made_up_stat, FileLike, Kind, Ready, Stat, WakeOn, S_IFSOCK};
use super::pipe::{add_end, head_tail, ring_put, ring_take, waiters_at, with_ends, PIPE_BUF, PIPE_BYTES};
use super::ready::{block_on, notify};
use super::window::{map, unmap_one};

/// The side bit of a `Kind::Unix` id (object ids fit in 48 bits).
pub const SIDE_B: u64 = 1 << 48;
const PAIR_BYTES: u64 = 2 * PIPE_BYTES;
/// Ring data bytes (a pipe ring's capacity).
const RING_CAP: u64 = PIPE_BYTES - 256;
const SIDE_A_UNIT: u64 = 1;
const SIDE_B_UNIT: u64 = 1 << 32;

// Words of ring 0's header.
const W_RENDEZVOUS: usize = 18;
const W_SHUT: usize = 19;
// Shutdown bits: side s (0 = A, 1 = B) shut its writing (bit s) or its reading (bit 2 + s).
const fn shut_wr(s: usize) -> u64 {
    1 << s
}
const fn shut_rd(s: usize) -> u64 {
    1 << (2 + s)
}
/// Where ring 1's header keeps the listener's name (a length word, then up to 112 bytes).
const PAIR_NAME_WORD: usize = 16;
const PAIR_NAME_OFF: u64 = PIPE_BYTES + 136;
/// The longest name (`sizeof(sun_path)`).
pub const NAME_MAX: usize = 108;

// Words of a socket page.
const P_STATE: usize = 19;
const P_BACKLOG: usize = 20;
const P_HEAD: usize = 21;
const P_TAIL: usize = 22;
const P_NAMELEN: usize = 23;
const P_QUEUE: usize = 64;
/// The longest accept queue.
pub const MAX_BACKLOG: u64 = 64;
const P_NAME_OFF: u64 = 1024;

/// States of a socket page.
pub const FRESH: u64 = 0;
pub const BOUND: u64 = 1;
pub const LISTENING: u64 = 2;
const CLOSED: u64 = 3;

/// The kernel-object name of a socket page (what `find` looks for).
const PAGE_NAME: &str = "unix-sock";

fn words(va: u64) -> &'static [AtomicU64] {
    // SAFETY: `va` is where `map` mapped a pair or page read-write (at least one page: 512
    // words); every word used here is touched atomically only, by every context mapping it.
    // Callers use the slice only while the mapping stays (inside the call that mapped it or
    // a `FileLike` call of an open file that holds it: a window slot is unmapped only by
    // this context's own last close or `unmap_all`).
    unsafe { core::slice::from_raw_parts(va as *const AtomicU64, (PAGE_SIZE / 8) as usize) }
}

fn copy_out(va: u64, len: usize, out: &mut [u8]) -> usize {
    let n = len.min(out.len()).min(NAME_MAX);
    // SAFETY: `[va, va + n)` lies inside the mapped pair or page (the name areas are below
    // its first page's or ring 1's header end); only written before the name is published.
    unsafe { core::ptr::copy_nonoverlapping(va as *const u8, out.as_mut_ptr(), n) };
    n
}

fn copy_in(va: u64, name: &[u8]) {
    // SAFETY: as in `copy_out`; the page or pair is not yet visible to any other context
    // (a page is added to the rendezvous share after its name is written, a pair queued
    // after).
    unsafe { core::ptr::copy_nonoverlapping(name.as_ptr(), va as *mut u8, name.len().min(NAME_MAX)) };
}

fn lock(w: &AtomicU64) {
    while w.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        core::hint::spin_loop();
    }
}

fn unlock(w: &AtomicU64) {
    w.store(0, Ordering::Release);
}

/// Drop `unit` from the ends word of `seg` (a pair or page, in table share `t`); the last
/// unit frees it from every share holding it (`t`, its rendezvous share, the shared tables).
/// `Ok(true)`: this freed it.
fn drop_unit(t: ObjectId, seg: ObjectId, unit: u64) -> Result<bool, Error> {
    let (before, rv) = with_ends(t, seg, |ends| {
        let before = ends.fetch_sub(unit, Ordering::AcqRel);
        // SAFETY: words 17 and 18 of the same mapped header.
        let (waiters, rv) = unsafe { (&*(ends as *const AtomicU64).add(1), &*(ends as *const AtomicU64).add(2)) };
        notify(waiters);
        (before, rv.load(Ordering::Relaxed))
    })?;
    if before != unit {
        return Ok(false);
    }
    unmap_one(seg);
    let _ = crate::sys::share_delobj(ObjName::new(t, seg));
    if rv != 0 && rv != t {
        let _ = crate::sys::share_delobj(ObjName::new(rv, seg));
    }
    for other in super::shared::all_table_shares().filter(|&o| o != 0 && o != t && o != rv) {
        let _ = crate::sys::share_delobj(ObjName::new(other, seg));
    }
    Ok(true)
}

// ---------------------------------------------------------------------------------------
// Connections

/// One side of a connection: the pair segment and which side (0 = A, 1 = B).
pub(super) struct UnixEnd {
    pub(super) pair: ObjectId,
    pub(super) side: usize,
}

impl UnixEnd {
    pub(super) fn of(id: u64) -> UnixEnd {
        UnixEnd { pair: id & (SIDE_B - 1), side: usize::from(id & SIDE_B != 0) }
    }
    fn unit(&self) -> u64 {
        if self.side == 0 {
            SIDE_A_UNIT
        } else {
            SIDE_B_UNIT
        }
    }
    /// The ring this side reads and the one it writes.
    fn rings(&self, va: u64) -> (u64, u64) {
        let (r0, r1) = (va, va + PIPE_BYTES);
        if self.side == 0 {
            (r1, r0)
        } else {
            (r0, r1)
        }
    }
    /// Whether this side reads no more (its own `SHUT_RD`, the peer's `SHUT_WR`, the peer
    /// gone) and whether it writes no more (its own `SHUT_WR`, the peer's `SHUT_RD`, the peer
    /// gone), from ring 0's header.
    fn shut(&self, va: u64) -> (bool, bool) {
        let w = words(va);
        let ends = w[16].load(Ordering::Acquire);
        let peer_open = if self.side == 0 { ends >> 32 != 0 } else { ends & (SIDE_B_UNIT - 1) != 0 };
        let sh = w[W_SHUT].load(Ordering::Acquire);
        let (me, peer) = (self.side, 1 - self.side);
        let rcv = !peer_open || sh & (shut_wr(peer) | shut_rd(me)) != 0;
        let snd = !peer_open || sh & (shut_wr(me) | shut_rd(peer)) != 0;
        (rcv, snd)
    }
}

impl FileLike for UnixEnd {
    /// What is waiting (up to `buf`'s length); with nothing waiting, 0 once this side reads no
    /// more (see `shut`), else it waits for bytes.
    fn read(&self, at: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        let (va, _) = map(ObjName::new(at, self.pair))?;
        let (rx, _) = self.rings(va);
        let n = ring_take(rx, buf);
        if n != 0 || buf.is_empty() {
            notify(waiters_at(va));
            return Ok(n);
        }
        let n = block_on(waiters_at(va), || {
            // The shutdown state before the bytes: a peer's bytes are in the ring before its
            // close or `SHUT_WR` is visible.
            let (rcv, _) = self.shut(va);
            let n = ring_take(rx, buf);
            (n != 0 || rcv).then_some(n)
        });
        notify(waiters_at(va));
        Ok(n)
    }

    /// Every byte, waiting while the peer's ring is full; `BrokenPipe` once this side writes
    /// no more (what was written before it, if any).
    fn write(&self, at: ObjectId, data: &[u8]) -> Result<usize, Error> {
        let (va, _) = map(ObjName::new(at, self.pair))?;
        let (_, tx) = self.rings(va);
        if self.shut(va).1 {
            return Err(Error::BrokenPipe);
        }
        let whole = data.len() <= PIPE_BUF;
        let mut done = ring_put(tx, data, whole);
        if done != 0 {
            notify(waiters_at(va));
        }
        while done < data.len() {
            let n = block_on(waiters_at(va), || {
                if self.shut(va).1 {
                    return Some(None);
                }
                let n = ring_put(tx, &data[done..], whole);
                (n != 0).then_some(Some(n))
            });
            let Some(n) = n else {
                return if done == 0 { Err(Error::BrokenPipe) } else { Ok(done) };
            };
            notify(waiters_at(va));
            done += n;
        }
        Ok(done)
    }

    /// A socket whose size is the bytes waiting to be read.
    fn stat(&self, at: ObjectId) -> Result<Stat, Error> {
        let (va, _) = map(ObjName::new(at, self.pair))?;
        let (h, t) = head_tail(self.rings(va).0);
        Ok(made_up_stat(S_IFSOCK | 0o777, h.wrapping_sub(t)))
    }

    /// Readable with bytes waiting or once it reads no more; writable with room in the
    /// peer's ring or once it writes no more (the write then fails at once); hung up when
    /// both directions are shut (Linux's `unix_poll`: the peer's close shuts both).
    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let (va, _) = map(ObjName::new(at, self.pair))?;
        let (rcv, snd) = self.shut(va);
        let (rx, tx) = self.rings(va);
        let (h, t) = head_tail(rx);
        let (h2, t2) = head_tail(tx);
        Ok(Ready { read: h != t || rcv, write: snd || h2.wrapping_sub(t2) < RING_CAP, hangup: rcv && snd, error: false })
    }

    fn wake_on(&self, at: ObjectId) -> Result<WakeOn, Error> {
        let (va, _) = map(ObjName::new(at, self.pair))?;
        Ok(WakeOn::Word(waiters_at(va)))
    }

    fn opened(&self, at: ObjectId) -> Result<Option<Kind>, Error> {
        add_end(at, self.pair, self.unit()).map(|_| None)
    }

    fn last_close(&self, at: ObjectId) -> Result<bool, Error> {
        drop_unit(at, self.pair, self.unit())
    }
}

/// A new pair segment in table share `t` (and in rendezvous share `rv` if not 0), both sides
/// counted once, `name` in ring 1's header.
fn new_pair(t: ObjectId, rv: ObjectId, name: &[u8]) -> Result<ObjectId, Error> {
    let pair = crate::sys::segment_alloc(t, "unix-pair", MEMID_SELF, PAIR_BYTES)?;
    let r = (|| {
        let (va, _) = map(ObjName::new(t, pair))?;
        let w = words(va);
        w[W_RENDEZVOUS].store(rv, Ordering::Relaxed);
        w[W_SHUT].store(0, Ordering::Relaxed);
        let w1 = words(va + PIPE_BYTES);
        w1[PAIR_NAME_WORD].store(name.len().min(NAME_MAX) as u64, Ordering::Relaxed);
        copy_in(va + PAIR_NAME_OFF, name);
        w[16].store(SIDE_A_UNIT | SIDE_B_UNIT, Ordering::Release);
        if rv != 0 && rv != t {
            crate::sys::share_addobj(rv, ObjName::new(t, pair))?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(pair),
        Err(e) => {
            unmap_one(pair);
            let _ = crate::sys::share_delobj(ObjName::new(t, pair));
            Err(e)
        }
    }
}

/// A connected pair of sockets (`socketpair`): the two open files, in table share `t`
/// (`open` makes an open file of a kind whose count is already taken).
pub(super) fn pair(t: ObjectId, open: impl Fn(Kind) -> Result<super::Fd, Error>) -> Result<(super::Fd, super::Fd), Error> {
    let pair = new_pair(t, 0, &[])?;
    let a = open(Kind::Unix(pair));
    let b = open(Kind::Unix(pair | SIDE_B));
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (a, b) => {
            let err = a.and(b).err().unwrap_or(Error::NoMemory);
            // The side that did not open drops its count; the one that did closes (its last
            // close drops the other count and frees the pair).
            for (res, unit) in [(a, SIDE_A_UNIT), (b, SIDE_B_UNIT)] {
                if res.is_err() {
                    let _ = drop_unit(t, pair, unit);
                }
            }
            for fd in [a.ok(), b.ok()].into_iter().flatten() {
                let _ = super::close(fd);
            }
            Err(err)
        }
    }
}

/// A write that does not wait: what fits in the peer's ring now (`WouldBlock`: nothing
/// does); `BrokenPipe` once this side writes no more.
pub(super) fn write_now(at: ObjectId, id: u64, data: &[u8]) -> Result<usize, Error> {
    let e = UnixEnd::of(id);
    let (va, _) = map(ObjName::new(at, e.pair))?;
    if e.shut(va).1 {
        return Err(Error::BrokenPipe);
    }
    let n = ring_put(e.rings(va).1, data, false);
    if n == 0 && !data.is_empty() {
        return Err(Error::WouldBlock);
    }
    notify(waiters_at(va));
    Ok(n)
}

/// `shutdown(how)` of a connection: 0 reads, 1 writes, 2 both.
pub(super) fn shutdown(at: ObjectId, id: u64, how: u32) -> Result<(), Error> {
    let e = UnixEnd::of(id);
    let (va, _) = map(ObjName::new(at, e.pair))?;
    let mut bits = 0;
    if how != 1 {
        bits |= shut_rd(e.side);
    }
    if how != 0 {
        bits |= shut_wr(e.side);
    }
    words(va)[W_SHUT].fetch_or(bits, Ordering::AcqRel);
    notify(waiters_at(va));
    Ok(())
}

/// Whether the connection reads no more (for `POLLRDHUP`).
pub(super) fn read_shut(at: ObjectId, id: u64) -> Result<bool, Error> {
    let e = UnixEnd::of(id);
    let (va, _) = map(ObjName::new(at, e.pair))?;
    Ok(e.shut(va).0)
}

/// The listener's name a connection was accepted from (side B: its own name; side A: its
/// peer's), into `out`; its length (0: unnamed, a `socketpair`'s).
pub(super) fn pair_name(at: ObjectId, id: u64, out: &mut [u8]) -> Result<usize, Error> {
    let e = UnixEnd::of(id);
    let (va, _) = map(ObjName::new(at, e.pair))?;
    let len = words(va + PIPE_BYTES)[PAIR_NAME_WORD].load(Ordering::Relaxed) as usize;
    Ok(copy_out(va + PAIR_NAME_OFF, len, out))
}

// ---------------------------------------------------------------------------------------
// Sockets not connected: made, bound, listening

pub(super) struct UnixSock(pub(super) ObjectId);

/// A new socket page in table share `t`, fresh, one open file counted.
pub(super) fn new_sock(t: ObjectId) -> Result<ObjectId, Error> {
    let page = crate::sys::segment_alloc(t, PAGE_NAME, MEMID_SELF, PAGE_SIZE)?;
    match with_ends(t, page, |ends| ends.store(1, Ordering::Release)) {
        Ok(()) => Ok(page),
        Err(e) => {
            let _ = crate::sys::share_delobj(ObjName::new(t, page));
            Err(e)
        }
    }
}

/// The state of a socket page and its name (into `out`; its length).
pub(super) fn sock_state(at: ObjectId, page: ObjectId, out: &mut [u8]) -> Result<(u64, usize), Error> {
    let (va, _) = map(ObjName::new(at, page))?;
    let w = words(va);
    let len = w[P_NAMELEN].load(Ordering::Acquire) as usize;
    Ok((w[P_STATE].load(Ordering::Acquire), copy_out(va + P_NAME_OFF, len, out)))
}

/// The bound or listening socket page of `name` in rendezvous share `rv`, with its state.
fn find(rv: ObjectId, name: &[u8]) -> Result<Option<(ObjectId, u64)>, Error> {
    let mut ids = [0 as ObjectId; 256];
    let n = (crate::sys::share_list(rv, &mut ids)? as usize).min(ids.len());
    let mut nm = [0u8; abi::MAX_NAME];
    for &id in &ids[..n] {
        let Ok(k) = crate::sys::obj_get_name(ObjName::new(rv, id), &mut nm) else { continue };
        if &nm[..(k as usize).min(nm.len())] != PAGE_NAME.as_bytes() {
            continue;
        }
        let mapped_before = crate::ctx::ctx().mapped.contains(&id);
        let Ok((va, _)) = map(ObjName::new(rv, id)) else { continue };
        let w = words(va);
        let st = w[P_STATE].load(Ordering::Acquire);
        let len = w[P_NAMELEN].load(Ordering::Acquire) as usize;
        let mut have = [0u8; NAME_MAX];
        let k = copy_out(va + P_NAME_OFF, len, &mut have);
        if !mapped_before {
            unmap_one(id);
        }
        if (st == BOUND || st == LISTENING) && &have[..k] == name {
            return Ok(Some((id, st)));
        }
    }
    Ok(None)
}

/// `bind`: the fresh socket page takes `name`, unless a socket of rendezvous share `rv`
/// has it (`AlreadyExists`); `InvalidArgument` if it is bound already.
pub(super) fn bind(at: ObjectId, page: ObjectId, rv: ObjectId, name: &[u8]) -> Result<(), Error> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::InvalidArgument);
    }
    let (va, _) = map(ObjName::new(at, page))?;
    let w = words(va);
    if w[P_STATE].load(Ordering::Acquire) != FRESH {
        return Err(Error::InvalidArgument);
    }
    if find(rv, name)?.is_some() {
        return Err(Error::AlreadyExists);
    }
    copy_in(va + P_NAME_OFF, name);
    w[P_NAMELEN].store(name.len() as u64, Ordering::Relaxed);
    w[W_RENDEZVOUS].store(rv, Ordering::Relaxed);
    if rv != at {
        match crate::sys::share_addobj(rv, ObjName::new(at, page)) {
            Ok(_) | Err(Error::AlreadyExists) => {}
            Err(e) => {
                w[P_NAMELEN].store(0, Ordering::Relaxed);
                w[W_RENDEZVOUS].store(0, Ordering::Relaxed);
                return Err(e);
            }
        }
    }
    w[P_STATE].store(BOUND, Ordering::Release);
    Ok(())
}

/// `listen`: a bound page listens with `backlog` (1..=`MAX_BACKLOG`); a listening one takes
/// the new backlog. `InvalidArgument` for a page that is not bound.
pub(super) fn listen(at: ObjectId, page: ObjectId, backlog: u64) -> Result<(), Error> {
    let (va, _) = map(ObjName::new(at, page))?;
    let w = words(va);
    lock(&w[0]);
    let r = match w[P_STATE].load(Ordering::Acquire) {
        BOUND | LISTENING => {
            w[P_BACKLOG].store(backlog.clamp(1, MAX_BACKLOG), Ordering::Relaxed);
            w[P_STATE].store(LISTENING, Ordering::Release);
            Ok(())
        }
        _ => Err(Error::InvalidArgument),
    };
    unlock(&w[0]);
    r
}

/// `connect` to `name` of rendezvous share `rv`: side A of a new connection, opened by
/// `open` in table share `t`. `NotFound`: no socket has the name; `NotPermitted`: it does not
/// listen (Linux's `ECONNREFUSED`); `WouldBlock`: its queue is full.
pub(super) fn connect(t: ObjectId, rv: ObjectId, name: &[u8], open: impl Fn(Kind) -> Result<super::Fd, Error>) -> Result<super::Fd, Error> {
    let Some((page, st)) = find(rv, name)? else { return Err(Error::NotFound) };
    if st != LISTENING {
        return Err(Error::NotPermitted);
    }
    let pair = new_pair(t, rv, name)?;
    let a = match open(Kind::Unix(pair)) {
        Ok(a) => a,
        Err(e) => {
            let _ = drop_unit(t, pair, SIDE_B_UNIT);
            let _ = drop_unit(t, pair, SIDE_A_UNIT);
            return Err(e);
        }
    };
    let queued = (|| {
        let (va, _) = map(ObjName::new(rv, page))?;
        let w = words(va);
        lock(&w[0]);
        let (h, tl) = (w[P_HEAD].load(Ordering::Relaxed), w[P_TAIL].load(Ordering::Relaxed));
        let r = if w[P_STATE].load(Ordering::Acquire) != LISTENING {
            Err(Error::NotPermitted)
        } else if tl - h >= w[P_BACKLOG].load(Ordering::Relaxed) {
            Err(Error::WouldBlock)
        } else {
            w[P_QUEUE + (tl % MAX_BACKLOG) as usize].store(pair, Ordering::Relaxed);
            w[P_TAIL].store(tl + 1, Ordering::Release);
            Ok(())
        };
        unlock(&w[0]);
        if r.is_ok() {
            notify(&w[17]);
        }
        r
    })();
    match queued {
        Ok(()) => Ok(a),
        Err(e) => {
            // Side B was never handed on: drop it; the close of side A frees the pair.
            let _ = drop_unit(t, pair, SIDE_B_UNIT);
            let _ = super::close(a);
            Err(e)
        }
    }
}

/// The next queued connection of a listening page (in table share `at`), its side B opened
/// by `open` in table share `t`: waits for one unless `nonblocking` (`WouldBlock`).
/// `InvalidArgument` for a page that does not listen.
pub(super) fn accept(at: ObjectId, page: ObjectId, t: ObjectId, nonblocking: bool, open: impl Fn(Kind) -> Result<super::Fd, Error>) -> Result<super::Fd, Error> {
    let (va, _) = map(ObjName::new(at, page))?;
    let w = words(va);
    if w[P_STATE].load(Ordering::Acquire) != LISTENING {
        return Err(Error::InvalidArgument);
    }
    let take = || -> Option<ObjectId> {
        lock(&w[0]);
        let (h, tl) = (w[P_HEAD].load(Ordering::Relaxed), w[P_TAIL].load(Ordering::Relaxed));
        let r = (h != tl).then(|| {
            let p = w[P_QUEUE + (h % MAX_BACKLOG) as usize].load(Ordering::Relaxed);
            w[P_HEAD].store(h + 1, Ordering::Release);
            p
        });
        unlock(&w[0]);
        r
    };
    let pair = match take() {
        Some(p) => p,
        None if nonblocking => return Err(Error::WouldBlock),
        None => block_on(&w[17], take),
    };
    let rv = w[W_RENDEZVOUS].load(Ordering::Relaxed);
    let added = match crate::sys::share_addobj(t, ObjName::new(rv, pair)) {
        Ok(_) => true,
        Err(Error::AlreadyExists) => false,
        Err(e) => {
            let _ = drop_unit(rv, pair, SIDE_B_UNIT);
            return Err(e);
        }
    };
    open(Kind::Unix(pair | SIDE_B)).inspect_err(|_| {
        let _ = drop_unit(t, pair, SIDE_B_UNIT);
        if added {
            let _ = crate::sys::share_delobj(ObjName::new(t, pair));
        }
    })
}

impl FileLike for UnixSock {
    /// Not connected: Linux's `EINVAL`.
    fn read(&self, _: ObjectId, _: &mut [u8]) -> Result<usize, Error> {
        Err(Error::InvalidArgument)
    }
    /// Not connected: Linux's `ENOTCONN` (the caller maps `Unsupported`).
    fn write(&self, _: ObjectId, _: &[u8]) -> Result<usize, Error> {
        Err(Error::Unsupported)
    }
    fn stat(&self, _: ObjectId) -> Result<Stat, Error> {
        Ok(made_up_stat(S_IFSOCK | 0o777, 0))
    }
    /// A listener: readable with a connection queued. Otherwise writable and hung up (Linux's
    /// answer for a stream socket that is not connected).
    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let (va, _) = map(ObjName::new(at, self.0))?;
        let w = words(va);
        Ok(if w[P_STATE].load(Ordering::Acquire) == LISTENING {
            Ready { read: w[P_HEAD].load(Ordering::Acquire) != w[P_TAIL].load(Ordering::Acquire), write: false, hangup: false, error: false }
        } else {
            Ready { read: false, write: true, hangup: true, error: false }
        })
    }
    fn wake_on(&self, at: ObjectId) -> Result<WakeOn, Error> {
        let (va, _) = map(ObjName::new(at, self.0))?;
        Ok(WakeOn::Word(waiters_at(va)))
    }
    fn opened(&self, at: ObjectId) -> Result<Option<Kind>, Error> {
        add_end(at, self.0, 1).map(|_| None)
    }
    /// The last open file: the name goes, and every connection still queued loses its side B.
    fn last_close(&self, at: ObjectId) -> Result<bool, Error> {
        let (last, rv, queued) = with_ends(at, self.0, |ends| {
            if ends.load(Ordering::Acquire) != 1 {
                return (false, 0, [0; MAX_BACKLOG as usize]);
            }
            // SAFETY: `ends` is word 16 of the mapped page: words 0..512 are the page.
            let w = unsafe { core::slice::from_raw_parts((ends as *const AtomicU64).sub(16), (PAGE_SIZE / 8) as usize) };
            lock(&w[0]);
            w[P_STATE].store(CLOSED, Ordering::Release);
            let mut q = [0; MAX_BACKLOG as usize];
            let (h, tl) = (w[P_HEAD].load(Ordering::Relaxed), w[P_TAIL].load(Ordering::Relaxed));
            for (i, x) in (h..tl).enumerate() {
                q[i] = w[P_QUEUE + (x % MAX_BACKLOG) as usize].load(Ordering::Relaxed);
            }
            w[P_HEAD].store(tl, Ordering::Relaxed);
            unlock(&w[0]);
            (true, w[W_RENDEZVOUS].load(Ordering::Relaxed), q)
        })?;
        if last {
            for &pair in queued.iter().filter(|&&p| p != 0) {
                let _ = drop_unit(rv, pair, SIDE_B_UNIT);
            }
        }
        drop_unit(at, self.0, 1)
    }
}
