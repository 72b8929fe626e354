//! `futex`: `FUTEX_WAIT`, `FUTEX_WAKE`, `FUTEX_WAIT_BITSET`, `FUTEX_WAKE_BITSET`,
//! `FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`, `FUTEX_WAKE_OP`, with `FUTEX_PRIVATE_FLAG` and
//! `FUTEX_CLOCK_REALTIME`; relative and absolute timeouts.
//!
//! The futex table is [`BUCKETS`]: 64 buckets, each on its own cache line, each a lock over
//! a bit set of the thread slots (`thread::SLOTS`) waiting on an address that hashes there.
//! A waiter's slot says which address and bitset it waits for and in which order it came
//! (`futex_seq`), so a wake takes the earliest waiters first. Cores share only the lines of
//! the buckets their addresses hash to, and the slots of the threads they wake; a futex
//! private to two threads costs nothing to the others' buckets.
//!
//! No lost wake-up: a waiter checks the word and joins the bucket's set under the bucket's
//! lock, and a waker (which changed the word before calling, as the C library does) takes
//! the same lock, so either the waiter sees the new word (`EAGAIN`) or the waker finds it in
//! the set. The waker takes it out of the set, sets its `woken` word and then wakes its core
//! if it has published one (`sleeper`); the waiter publishes its core and then looks at
//! `woken` once more before it halts (`abi::nr::WAIT`); both in one order (SeqCst), so either
//! the waiter sees `woken` or the waker sees the core (whose `wait` then returns at once: the
//! kernel keeps the wake pending). On a TC core that other threads share, the kernel's `wait`
//! returns at once while they are queued: the waiter gives its turn (`pcore_yield`) between
//! looks instead.
//!
//! Reading the word needs the program's memory map: `wait`, `CMP_REQUEUE` and `WAKE_OP` hold
//! the process lock while they touch it (lock order: process, then buckets by index); `WAKE`
//! and `REQUEUE` never touch user memory and take only bucket locks. No lock is held while a
//! waiter sleeps.

use core::sync::atomic::{AtomicU64, Ordering};

use linuxabi::errno::*;
use percore::pad::CachePadded;
use percore::spin::TicketLock;

use super::dispatch::lock_proc;
use super::signal::SignalSlot;
use super::thread::{self, Slot, SLOTS};
use super::upcall::Frame;

const FUTEX_WAIT: u64 = 0;
const FUTEX_WAKE: u64 = 1;
const FUTEX_REQUEUE: u64 = 3;
const FUTEX_CMP_REQUEUE: u64 = 4;
const FUTEX_WAKE_OP: u64 = 5;
const FUTEX_WAIT_BITSET: u64 = 9;
const FUTEX_WAKE_BITSET: u64 = 10;
const FUTEX_PRIVATE_FLAG: u64 = 128;
const FUTEX_CLOCK_REALTIME: u64 = 256;

const NBUCKETS: usize = 64;
const _: () = assert!(thread::MAX_THREADS <= 64, "a bucket's waiters are a 64-bit set of slots");

// Only the initializer of the array below (each element is its own lock).
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: CachePadded<TicketLock<u64>> = CachePadded::new(TicketLock::new(0));
/// The futex table: per bucket, the set of slots waiting on an address that hashes there.
static BUCKETS: [CachePadded<TicketLock<u64>>; NBUCKETS] = [EMPTY; NBUCKETS];
/// Queue order of waiters (a wake takes the earliest first).
static SEQ: AtomicU64 = AtomicU64::new(1);

fn bucket(addr: u64) -> usize {
    let h = (addr >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 58) as usize % NBUCKETS
}

/// Take up to `n` waiters on `addr` whose bitset meets `bits` out of `set` (earliest first);
/// returns how many and the slots taken.
fn take(set: &mut u64, addr: u64, bits: u32, n: u64) -> (u64, u64) {
    let mut taken = 0u64;
    let mut count = 0;
    while count < n {
        let mut best: Option<(u64, usize)> = None;
        let mut m = *set;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let s = &SLOTS[i];
            if s.futex_addr.load(Ordering::Relaxed) == addr && s.futex_bits.load(Ordering::Relaxed) as u32 & bits != 0 {
                let seq = s.futex_seq.load(Ordering::Relaxed);
                if best.is_none_or(|(b, _)| seq < b) {
                    best = Some((seq, i));
                }
            }
        }
        let Some((_, i)) = best else { break };
        *set &= !(1 << i);
        taken |= 1 << i;
        count += 1;
    }
    (count, taken)
}

/// Mark the slots in `taken` woken and wake the cores of those that may be halted.
fn release(taken: u64) {
    let mut m = taken;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        SLOTS[i].woken.store(1, Ordering::SeqCst);
        thread::kick(&SLOTS[i]);
    }
}

/// Wake up to `n` waiters on `addr` whose bitset meets `bits`; returns how many.
pub fn wake(addr: u64, n: u64, bits: u32) -> i64 {
    let taken = {
        let mut set = BUCKETS[bucket(addr)].lock();
        take(&mut set, addr, bits, n)
    };
    release(taken.1);
    taken.0 as i64
}

/// Sleep (halting the core, or giving the turn on a shared TC) until `done()` or the
/// program ends (`exit_group`) or `deadline` (ns since boot) passes; returns whether `done()`.
/// `s` is the caller's slot: a maker of the condition wakes it with `thread::kick`.
pub fn sleep_until(s: &Slot, deadline: u64, done: impl FnMut() -> bool) -> bool {
    sleep_until_sig(s, None, deadline, done)
}

/// The longest single halt of a sleep (`sleep_until`, `sleep_until_sig`): nothing it waits
/// for relies on the periodic look (a process-directed signal wakes it through the process's
/// sleeper mask, everything else through the thread's slot), so a wake that went missing
/// costs up to a second and shows (conformance case `procrobust-futexsig`).
const SLEEP_MOST_US: u64 = 1_000_000;

/// `sleep_until`, for a sleep that a signal to the process must end: while it may halt, the
/// caller's core is also in `psig`'s sleeper mask, so a process-directed signal (`kill`
/// from any process, `signal::post`) wakes it at once. Two threads of the process that
/// sleep on one core share the bit: the first to leave clears it, and the other then sees a
/// signal at its next look, the only case that still waits for one (on a shared TC the
/// kernel's `wait` does not halt while another context is queued, so it is a rare one).
pub fn sleep_until_sig(s: &Slot, psig: Option<&SignalSlot>, deadline: u64, mut done: impl FnMut() -> bool) -> bool {
    let core = crate::ctx::ctx().core;
    let cbit = super::signal::core_bit(core);
    loop {
        if done() {
            return true;
        }
        if thread::must_leave() {
            return false;
        }
        let now = crate::time::now_ns();
        if now >= deadline {
            return false;
        }
        // Others queued on this core (a TC) run now; a no-op otherwise.
        let _ = crate::sys::pcore_yield();
        s.sleeper.store(core + 1, Ordering::SeqCst);
        if let Some(ps) = psig {
            ps.sleeper.fetch_or(cbit, Ordering::SeqCst);
        }
        if !done() && !thread::must_leave() {
            // Every maker of the condition wakes the core (a waker, `exit_group` or a
            // thread-directed signal through the slot, a process-directed one through the
            // mask): the bound is only a safety net, long enough that a missing wake shows.
            let us = ((deadline - now) / 1000).clamp(1, SLEEP_MOST_US);
            let _ = crate::sys::wait(0, us);
        }
        if let Some(ps) = psig {
            ps.sleeper.fetch_and(!cbit, Ordering::SeqCst);
        }
        s.sleeper.store(0, Ordering::SeqCst);
    }
}

/// A timeout argument: the deadline in ns since boot (`u64::MAX`: none). `absolute`: the
/// timespec is a time on the clock (every clock counts from boot here), else an interval.
fn deadline(p: &super::dispatch::Process, ts: u64, absolute: bool) -> Result<u64, i64> {
    if ts == 0 {
        return Ok(u64::MAX);
    }
    let b = p.image.space.read(ts, 16).ok_or(-EFAULT)?;
    let s = i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    let ns = i64::from_le_bytes(b[8..].try_into().unwrap_or([0; 8]));
    if s < 0 || !(0..1_000_000_000).contains(&ns) {
        return Err(-EINVAL);
    }
    let t = (s as u64).saturating_mul(1_000_000_000).saturating_add(ns as u64);
    Ok(if absolute { t } else { crate::time::now_ns().saturating_add(t) })
}

/// `FUTEX_WAIT`/`FUTEX_WAIT_BITSET`: sleep while `*addr == val`.
fn wait(addr: u64, val: u32, ts: u64, absolute: bool, bits: u32) -> i64 {
    let me = thread::me();
    let i = super::upcall::my_slot();
    let b = bucket(addr);
    let (end, psig) = {
        let mut g = lock_proc();
        let Some(p) = g.as_mut() else { return -ENOSYS };
        let psig = p.sig.slot;
        // Linux's order: the timeout, then the address.
        let end = match deadline(p, ts, absolute) {
            Ok(e) => e,
            Err(e) => return e,
        };
        if !addr.is_multiple_of(4) {
            return -EINVAL;
        }
        let Some(word) = p.image.space.atomic_u32(addr, false) else { return -EFAULT };
        let mut set = BUCKETS[b].lock();
        if word.load(Ordering::SeqCst) != val {
            return -EAGAIN;
        }
        me.futex_addr.store(addr, Ordering::Relaxed);
        me.futex_bits.store(u64::from(bits), Ordering::Relaxed);
        me.futex_seq.store(SEQ.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        me.woken.store(0, Ordering::SeqCst);
        *set |= 1 << i;
        (end, psig)
    };
    // A signal for this thread (its own or the process's, unblocked) ends the wait too: a
    // thread-directed one kicks the slot, a process-directed one wakes the cores in the
    // process's sleeper mask.
    if sleep_until_sig(me, Some(psig), end, || me.woken.load(Ordering::SeqCst) != 0 || super::signal::pending_for_me(psig)) && me.woken.load(Ordering::SeqCst) != 0 {
        return 0;
    }
    // Timed out (or the program ends): leave the queue unless a waker took us meanwhile. A
    // requeue may have moved us: look in the bucket of the address we wait on now, under the
    // process lock (requeues hold it), so it does not change meanwhile.
    let mut g = lock_proc();
    let now_addr = me.futex_addr.load(Ordering::Relaxed);
    let mut set = BUCKETS[bucket(now_addr)].lock();
    if me.woken.load(Ordering::SeqCst) != 0 {
        return 0;
    }
    *set &= !(1 << i);
    drop(set);
    if thread::must_leave() {
        return -EINTR;
    }
    if super::signal::pending_for_me(psig) {
        // Interrupted: the way back delivers the signal, then restarts the wait (SA_RESTART,
        // or no handler ran) or returns EINTR, as Linux's -ERESTARTSYS.
        return match g.as_mut() {
            Some(p) => super::signal::interrupted(p, super::signal::ERESTARTSYS),
            None => -EINTR,
        };
    }
    -ETIMEDOUT
}

/// Lock the buckets of `a` and `b` in index order; run `f` with both sets (the same set
/// twice if they share a bucket: `f` gets it once, as `None` for the second).
fn with_two<R>(a: u64, b: u64, f: impl FnOnce(&mut u64, Option<&mut u64>) -> R) -> R {
    let (ba, bb) = (bucket(a), bucket(b));
    if ba == bb {
        let mut s = BUCKETS[ba].lock();
        return f(&mut s, None);
    }
    let (lo, hi) = (ba.min(bb), ba.max(bb));
    let mut l = BUCKETS[lo].lock();
    let mut h = BUCKETS[hi].lock();
    if ba == lo { f(&mut l, Some(&mut h)) } else { f(&mut h, Some(&mut l)) }
}

/// `FUTEX_REQUEUE`/`FUTEX_CMP_REQUEUE`: wake up to `nwake` waiters on `a`, move up to `nreq`
/// of the rest to `b`; with `cmp`, only if `*a == cmp` (else `EAGAIN`).
fn requeue(a: u64, b: u64, nwake: u64, nreq: u64, cmp: Option<u32>) -> i64 {
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    let word = match cmp {
        Some(_) => match p.image.space.atomic_u32(a, false) {
            Some(w) => Some(w),
            None => return -EFAULT,
        },
        None => None,
    };
    let (woken, taken) = with_two(a, b, |sa, sb| {
        if let (Some(w), Some(v)) = (word, cmp) {
            if w.load(Ordering::SeqCst) != v {
                return (-EAGAIN, 0);
            }
        }
        let (nw, taken) = take(sa, a, u32::MAX, nwake);
        let (nm, moved) = take(sa, a, u32::MAX, nreq);
        let mut m = moved;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            SLOTS[i].futex_addr.store(b, Ordering::Relaxed);
        }
        match sb {
            Some(sb) => *sb |= moved,
            None => *sa |= moved,
        }
        // Both return the woken plus the moved (Linux's futex_requeue).
        ((nw + nm) as i64, taken)
    });
    drop(g);
    release(taken);
    woken
}

/// `FUTEX_WAKE_OP`: `old = *b; *b = op(old, oparg)`; wake up to `n1` on `a` and, if
/// `cmp(old, cmparg)`, up to `n2` on `b`.
fn wake_op(a: u64, b: u64, n1: u64, n2: u64, enc: u32) -> i64 {
    let (op, cmp) = ((enc >> 28) & 0xf, (enc >> 24) & 0xf);
    let mut oparg = (enc << 8) as i32 >> 20;
    let cmparg = (enc << 20) as i32 >> 20;
    if op & 8 != 0 {
        // FUTEX_OP_OPARG_SHIFT: Linux takes the shift modulo 32.
        oparg = 1 << (oparg & 31);
    }
    if op & 7 > 4 || cmp > 5 {
        return -ENOSYS;
    }
    let mut g = lock_proc();
    let Some(p) = g.as_mut() else { return -ENOSYS };
    let Some(word) = p.image.space.atomic_u32(b, true) else { return -EFAULT };
    let (n, taken) = with_two(a, b, |sa, sb| {
        let oa = oparg as u32;
        let old = match op & 7 {
            0 => word.swap(oa, Ordering::SeqCst),
            1 => word.fetch_add(oa, Ordering::SeqCst),
            2 => word.fetch_or(oa, Ordering::SeqCst),
            3 => word.fetch_and(!oa, Ordering::SeqCst),
            _ => word.fetch_xor(oa, Ordering::SeqCst),
        } as i32;
        let hit = match cmp {
            0 => old == cmparg,
            1 => old != cmparg,
            2 => old < cmparg,
            3 => old <= cmparg,
            4 => old > cmparg,
            _ => old >= cmparg,
        };
        let (c1, t1) = take(sa, a, u32::MAX, n1);
        let (c2, t2) = if hit {
            match sb {
                Some(sb) => take(sb, b, u32::MAX, n2),
                None => take(sa, b, u32::MAX, n2),
            }
        } else {
            (0, 0)
        };
        ((c1 + c2) as i64, t1 | t2)
    });
    drop(g);
    release(taken);
    n
}

/// `futex(uaddr, op, val, timeout or val2, uaddr2, val3)`. Runs without the process lock
/// held across the sleep.
pub fn sys_futex(f: &mut Frame) -> i64 {
    let (addr, op, val, ts, addr2, val3) = (f.rdi, f.rsi, f.rdx, f.r10, f.r8, f.r9);
    let cmd = op & !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
    if op & FUTEX_CLOCK_REALTIME != 0 && cmd != FUTEX_WAIT_BITSET && cmd != FUTEX_WAIT {
        return -ENOSYS;
    }
    let val = val as u32;
    match cmd {
        // FUTEX_WAIT's timeout is an interval on either clock.
        FUTEX_WAIT => wait(addr, val, ts, false, u32::MAX),
        FUTEX_WAIT_BITSET => {
            if val3 as u32 == 0 {
                return -EINVAL;
            }
            wait(addr, val, ts, true, val3 as u32)
        }
        FUTEX_WAKE | FUTEX_WAKE_BITSET => {
            let bits = if cmd == FUTEX_WAKE { u32::MAX } else { val3 as u32 };
            if bits == 0 || addr % 4 != 0 {
                return -EINVAL;
            }
            wake(addr, u64::from(val), bits)
        }
        FUTEX_REQUEUE | FUTEX_CMP_REQUEUE => {
            // The fourth argument is the number to move (val2), not a timeout.
            let nreq = ts as u32 as i32;
            if (val as i32) < 0 || nreq < 0 || addr % 4 != 0 || addr2 % 4 != 0 {
                return -EINVAL;
            }
            requeue(addr, addr2, u64::from(val), nreq as u64, (cmd == FUTEX_CMP_REQUEUE).then_some(val3 as u32))
        }
        FUTEX_WAKE_OP => {
            if addr % 4 != 0 || addr2 % 4 != 0 {
                return -EINVAL;
            }
            wake_op(addr, addr2, u64::from(val), ts as u32 as u64, val3 as u32)
        }
        _ => -ENOSYS,
    }
}
