//! Pipes: a ring in a segment of the table the pipe was made in, and its two kinds of open
//! file (`PipeEnd`: a read end or a write end) with POSIX's answers: a write with no read
//! end open is `BrokenPipe`, a read of an empty pipe is 0 (end of file) with no write end
//! open and waits while one is, and the last end to close frees the ring (docs/fd.md,
//! "Pipes"). Rings are mapped on demand into the context's descriptor window and read and
//! written there, without system calls.

use abi::{Error, ObjName, ObjectId, MEMID_SELF};
use core::sync::atomic::{AtomicU64, Ordering};

use super::file::{made_up_stat, FileLike, Kind, Ready, Stat, WakeOn, S_IFIFO};
use super::ready::{block_on, notify};
use super::window::{map, unmap_one};
use crate::layout::{MAPWIN_OFF, MAPWIN_SLOT};

/// Pipe ring size (one segment): 256 bytes of header, then data.
pub const PIPE_BYTES: u64 = 64 << 10;
/// Header: the lock, head and tail words in the first 128-byte line pair, the ends word in
/// the second (a close, which writes the ends word, shares no line with a read or write of a
/// pipe holding bytes: they do not commute-conflict), data from the third on.
const PIPE_HDR: u64 = 256;
/// Header word 16 (byte 128) of a ring: its open ends (open files of kind
/// `PipeRead`/`PipeWrite` in any table), read ends in the low half, write ends in the high
/// half. One word, so that the decrement that takes the ring to "no end open" is one atomic
/// step only one closer sees (see `drop_end`).
const ENDS_WORD: usize = 16;
/// Header word 17: the ring's waiters word (`ready.rs`): cores sleeping until a read end has
/// bytes or a hang-up, or a write end room or an error. Beside the ends word, on the line
/// only closes and sleepers write.
const WAITERS_WORD: usize = 17;
const READ_END: u64 = 1;
const WRITE_END: u64 = 1 << 32;
/// Writes of at most this many bytes to a pipe are atomic (POSIX `PIPE_BUF`, Linux's value).
pub const PIPE_BUF: usize = 4096;
/// A pipe end, the open file of kinds `PipeRead` and `PipeWrite`: the ring, and which end.
/// A new ring in table share `t`, its ends word counting one read end and one write end
/// (the two open files `fd::pipe` makes next; nobody else can name the ring yet).
pub(super) fn new_ring(t: ObjectId) -> Result<ObjectId, Error> {
    let ring = crate::sys::segment_alloc(t, "pipe-ring", MEMID_SELF, PIPE_BYTES)?;
    match with_ends(t, ring, |ends| ends.store(READ_END | WRITE_END, Ordering::Release)) {
        Ok(()) => Ok(ring),
        Err(e) => {
            let _ = crate::sys::share_delobj(ObjName::new(t, ring));
            Err(e)
        }
    }
}

pub(super) struct PipeEnd {
    pub(super) ring: ObjectId,
    pub(super) write: bool,
}

impl PipeEnd {
    /// This end's unit in the ring's ends word.
    pub(super) fn unit(&self) -> u64 {
        if self.write {
            WRITE_END
        } else {
            READ_END
        }
    }
}

impl FileLike for PipeEnd {
    /// What is waiting (up to `buf`'s length); if nothing is, 0 (end of file) when no write
    /// end is open anywhere, else it waits until bytes arrive or the last write end closes
    /// (POSIX blocking read). `NotPermitted` on a write end.
    fn read(&self, at: ObjectId, buf: &mut [u8]) -> Result<usize, Error> {
        if self.write {
            return Err(Error::NotPermitted);
        }
        let (va, _) = map(ObjName::new(at, self.ring))?;
        let n = ring_take(va, buf);
        if n != 0 || buf.is_empty() {
            // Bytes waiting (the common case): the ends word is not touched, so a read
            // shares no line with a close of another end. Room was made: a writer sleeping
            // in `poll_wait` is woken.
            notify(waiters_at(va));
            return Ok(n);
        }
        // Empty: sleep on the ring's waiters word until bytes come or the last write end
        // closes (a writer's `notify` after its put, or `drop_end`'s, wakes this core).
        let ends = ends_at(va);
        let n = block_on(waiters_at(va), || {
            // The count before the bytes: a writer's bytes are in the ring before its close
            // drops the count (release in `drop_end`), so "no writer" seen here and then an
            // empty ring means no byte will ever come.
            let writers = ends.load(Ordering::Acquire) >> 32;
            let n = ring_take(va, buf);
            (n != 0 || writers == 0).then_some(n)
        });
        notify(waiters_at(va));
        Ok(n)
    }

    /// Every byte, waiting while the ring is full, unless the last read end goes: then the
    /// bytes written before that, or `BrokenPipe` if none were (POSIX blocking write, as
    /// Linux). `NotPermitted` on a read end.
    fn write(&self, at: ObjectId, data: &[u8]) -> Result<usize, Error> {
        if !self.write {
            return Err(Error::NotPermitted);
        }
        let (va, _) = map(ObjName::new(at, self.ring))?;
        let ends = ends_at(va);
        if ends.load(Ordering::Acquire) & (WRITE_END - 1) == 0 {
            // No read end open anywhere: nobody will ever read these bytes (POSIX EPIPE;
            // there are no signals, so no SIGPIPE).
            return Err(Error::BrokenPipe);
        }
        // At most `PIPE_BUF` bytes go in at once, never interleaved with another
        // writer's (POSIX): such a write waits until the ring has room for all of it.
        let whole = data.len() <= PIPE_BUF;
        let mut done = ring_put(va, data, whole);
        if done != 0 {
            notify(waiters_at(va));
        }
        // A full ring: sleep on the ring's waiters word until a reader makes room (its
        // `notify` after the take wakes this core; POSIX blocking write: every byte is
        // written before it returns), unless the last read end goes meanwhile (`drop_end`
        // notifies too); then what was written so far, or `BrokenPipe` if nothing was (as
        // Linux).
        while done < data.len() {
            let n = block_on(waiters_at(va), || {
                if ends.load(Ordering::Acquire) & (WRITE_END - 1) == 0 {
                    return Some(None);
                }
                let n = ring_put(va, &data[done..], whole);
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

    /// A FIFO whose size is the bytes waiting.
    fn stat(&self, at: ObjectId) -> Result<Stat, Error> {
        let (va, _) = map(ObjName::new(at, self.ring))?;
        let (h, t) = head_tail(va);
        Ok(made_up_stat(S_IFIFO | 0o600, h.wrapping_sub(t)))
    }

    /// A read end: readable with bytes waiting, hung up (and readable: the read returns 0 at
    /// once) with no write end open. A write end: writable with room in the ring, in error (a
    /// write fails at once) with no read end open. Loads only: nothing is written.
    fn poll(&self, at: ObjectId) -> Result<Ready, Error> {
        let (va, _) = map(ObjName::new(at, self.ring))?;
        // The count before the ring, as `read`: "no writer" then "empty" means end of file.
        let ends = ends_at(va).load(Ordering::Acquire);
        let (h, t) = head_tail(va);
        let waiting = h.wrapping_sub(t);
        Ok(if self.write {
            let no_reader = ends & (WRITE_END - 1) == 0;
            Ready { read: false, write: no_reader || waiting < PIPE_BYTES - PIPE_HDR, hangup: false, error: no_reader }
        } else {
            let no_writer = ends >> 32 == 0;
            Ready { read: waiting != 0 || no_writer, write: false, hangup: no_writer, error: false }
        })
    }

    /// The ring's waiters word: every read, write and close notifies it.
    fn wake_on(&self, at: ObjectId) -> Result<WakeOn, Error> {
        let (va, _) = map(ObjName::new(at, self.ring))?;
        Ok(WakeOn::Word(waiters_at(va)))
    }

    /// A new end of the ring (a `dup` into another table): counted, unless the ring's last
    /// end went meanwhile (`NoSuchObject`).
    fn opened(&self, at: ObjectId) -> Result<Option<Kind>, Error> {
        add_end(at, self.ring, self.unit()).map(|_| None)
    }

    /// The open file was one end of its ring: the last end anywhere frees the ring (from
    /// every table holding it).
    fn last_close(&self, at: ObjectId) -> Result<bool, Error> {
        drop_end(at, self.ring, self.unit())
    }
}

/// The head (bytes ever put) and tail (bytes ever taken) of the ring mapped at `va`.
pub(super) fn head_tail(va: u64) -> (u64, u64) {
    // SAFETY: the ring's header words are mapped at `va` (by `map`, read-write, at least one
    // page); words 1 and 2 are the head and tail, only ever accessed atomically.
    unsafe { ((*(va as *const AtomicU64).add(1)).load(Ordering::Acquire), (*(va as *const AtomicU64).add(2)).load(Ordering::Acquire)) }
}

// ---------------------------------------------------------------------------------------
// Pipe ends: counted in the ring, the last one frees it
//
// An *end* is an open file of kind `PipeRead`/`PipeWrite` in any table (a private open file,
// a record of the process-wide table, a core-set table's kernel object): `dup` inside a table
// shares the open file and counts nothing, `dup` into another table opens a new open file
// and counts a new end, the last close of an open file drops its end. (A `cfork` child
// copies no private table: it gets a new context page; a process-wide table is either
// forgotten in the child, so the child holds none of its ends, or shared, so both processes
// hold the same records. Neither makes ends to count.)
//
// Freeing exactly once: both counts are halves of one word, changed only by atomic
// read-modify-writes. `drop_end` is a `fetch_sub`, and the word's modification order is
// total, so exactly one `fetch_sub` returns the value that leaves the word at 0 (two cores
// closing the last read end and the last write end at once: one of the two sees the other's
// half already 0 in the value it replaced, the other does not). New ends are added only by
// `add_end`, which refuses a word that is 0 (an open file that can be dup'ed holds an end,
// so the word is not 0 while it exists; a stale `dup` racing the last close gets
// `NoSuchObject`), and `pipe` stores the first value before any descriptor names the ring.
// So once the word is 0 it stays 0, the one caller that took it there frees the ring, and
// nothing is freed while any end is open (each open end is ≥ 1 in the word).

/// Run `f` on the ends word of ring `ring` in table share `t`. A ring this context had not
/// mapped is mapped for the call only: a context that opens or closes ends of many pipes it
/// never reads or writes (another context frees them) does not fill its window.
pub(super) fn with_ends<R>(t: ObjectId, ring: ObjectId, f: impl FnOnce(&AtomicU64) -> R) -> Result<R, Error> {
    // Already mapped (the usual case for a context that used the pipe): no system call.
    if let Some(i) = crate::ctx::ctx().mapped.iter().position(|&m| m == ring) {
        return Ok(f(ends_at(crate::ctx::arena() + MAPWIN_OFF + i as u64 * MAPWIN_SLOT)));
    }
    let (va, _) = map(ObjName::new(t, ring))?;
    let r = f(ends_at(va));
    unmap_one(ring);
    Ok(r)
}

/// The waiters word of the ring (or eventfd page) mapped at `va` (by `map`).
pub(super) fn waiters_at(va: u64) -> &'static AtomicU64 {
    // SAFETY: as in `ends_at`: word 17 of the mapped header, touched atomically only. The
    // reference is used while the mapping stays (a descriptor window slot is unmapped only by
    // this context's own closes and `unmap_all`, never during a `poll_wait` or a read).
    unsafe { &*(va as *const AtomicU64).add(WAITERS_WORD) }
}

/// The ends word of the ring mapped at `va` (by `map`).
pub(super) fn ends_at(va: u64) -> &'static AtomicU64 {
    // SAFETY: `va` is where `map` mapped the ring read-write, in this call or earlier (its
    // window slot, found in `ctx.mapped`); at least one page, and the word is at byte 128. Callers use the reference only while that mapping stays: inside
    // `with_ends`' closure (unmapped after it), or inside `read`/`write`, which unmap nothing
    // before they return. Every user of the ring touches this word atomically only.
    unsafe { &*(va as *const AtomicU64).add(ENDS_WORD) }
}

/// Count a new end (`unit`: `READ_END` or `WRITE_END`) of ring `ring` (in table share
/// `t`), unless the ring's last end is gone.
pub(super) fn add_end(t: ObjectId, ring: ObjectId, unit: u64) -> Result<(), Error> {
    with_ends(t, ring, |ends| {
        let mut cur = ends.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return Err(Error::NoSuchObject);
            }
            match ends.compare_exchange_weak(cur, cur + unit, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    })?
}

/// Drop an end (`unit`) of ring `ring` (in table share `t`); the last end frees the ring. `Ok(true)`:
/// this call freed it. The release half orders this end's writes before a reader's
/// acquire load that sees the count fall (a reader seeing no writer then sees every byte).
pub(super) fn drop_end(t: ObjectId, ring: ObjectId, unit: u64) -> Result<bool, Error> {
    let before = with_ends(t, ring, |ends| {
        let before = ends.fetch_sub(unit, Ordering::AcqRel);
        // A reader may now see end of file, a writer `BrokenPipe`: wake their `poll_wait`s.
        // SAFETY: the waiters word is the next word of the same mapped header.
        notify(unsafe { &*(ends as *const AtomicU64).add(WAITERS_WORD - ENDS_WORD) });
        before
    })?;
    // Each end is counted once when it opens and dropped once when its open file goes.
    debug_assert!(before / unit % (1 << 32) != 0, "pipe end dropped twice: {before:#x}");
    if before != unit {
        return Ok(false);
    }
    RINGS_FREED.fetch_add(1, Ordering::Relaxed);
    free_ring(t, ring);
    Ok(true)
}

/// Rings this process freed (`drop_end` took their ends word to 0), for tests: each ring
/// must be freed exactly once.
static RINGS_FREED: AtomicU64 = AtomicU64::new(0);

/// Rings this process has freed (see `RINGS_FREED`).
pub fn rings_freed() -> u64 {
    RINGS_FREED.load(Ordering::Relaxed)
}

/// No end of `ring` is open: take it out of every table that may hold it (the closer's, the
/// process-wide one, the core-set ones; a private share holds a ring only while one of its
/// open files names it, and the last of those is the closer) and out of this context's window.
/// Another context that mapped the ring keeps its memory until it unmaps (`unmap_all`).
#[cold]
fn free_ring(t: ObjectId, ring: ObjectId) {
    unmap_one(ring);
    let _ = crate::sys::share_delobj(ObjName::new(t, ring));
    let others = super::shared::all_table_shares();
    for other in others.filter(|&o| o != 0 && o != t) {
        // `NoSuchObject` where the ring was never added: nothing to do.
        let _ = crate::sys::share_delobj(ObjName::new(other, ring));
    }
}

fn ring_lock(hdr: *const AtomicU64) {
    // SAFETY: `hdr` points at the ring's first word, mapped read-write.
    let l = unsafe { &*hdr };
    while l.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        core::hint::spin_loop();
    }
}

fn ring_unlock(hdr: *const AtomicU64) {
    // SAFETY: as in `ring_lock`.
    unsafe { &*hdr }.store(0, Ordering::Release);
}

/// The ring mapped at `va` under its lock: `f` gets its data bytes (`PIPE_BYTES - PIPE_HDR`
/// of them, used circularly), the head (bytes ever put) and the tail (bytes ever taken), and
/// returns the new head and tail.
fn with_ring<R>(va: u64, f: impl FnOnce(&mut [u8], u64, u64) -> (u64, u64, R)) -> R {
    let cap = (PIPE_BYTES - PIPE_HDR) as usize;
    let hdr = va as *const AtomicU64;
    ring_lock(hdr);
    // SAFETY: the ring is mapped read-write at `va` (`map`): header words 1 and 2 are the head
    // and tail, `cap` data bytes follow the header. The ring lock, held until below, keeps
    // every other context's `with_ring` out of them, so this is the only reference to them.
    let (head, tail, bytes) = unsafe { (&*(va as *const AtomicU64).add(1), &*(va as *const AtomicU64).add(2), core::slice::from_raw_parts_mut((va + PIPE_HDR) as *mut u8, cap)) };
    let (h, t) = (head.load(Ordering::Acquire), tail.load(Ordering::Acquire));
    let (h2, t2, r) = f(bytes, h, t);
    head.store(h2, Ordering::Release);
    tail.store(t2, Ordering::Release);
    ring_unlock(hdr);
    r
}

/// Put as many bytes of `data` as fit into the ring mapped at `va` (with `whole`, all of
/// them or none); returns how many.
pub(super) fn ring_put(va: u64, data: &[u8], whole: bool) -> usize {
    with_ring(va, |bytes, h, t| {
        let cap = bytes.len() as u64;
        let room = cap - (h - t);
        let n = if whole && room < data.len() as u64 { 0 } else { room.min(data.len() as u64) };
        for i in 0..n {
            bytes[((h + i) % cap) as usize] = data[i as usize];
        }
        (h + n, t, n as usize)
    })
}

/// Take up to `buf.len()` waiting bytes out of the ring mapped at `va`.
pub(super) fn ring_take(va: u64, buf: &mut [u8]) -> usize {
    with_ring(va, |bytes, h, t| {
        let cap = bytes.len() as u64;
        let n = (h - t).min(buf.len() as u64);
        for i in 0..n {
            buf[i as usize] = bytes[((t + i) % cap) as usize];
        }
        (h, t + n, n as usize)
    })
}