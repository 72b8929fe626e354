//! Waiting for readiness: how a caller sleeps until a descriptor's `poll` answer may have
//! changed, and how whoever changes it wakes the sleepers.
//!
//! A kind whose state other cores change (a pipe ring, an eventfd counter) keeps a *waiters
//! word* beside that state, in the same shared segment: a bitmap of the cores that sleep
//! until it changes (`FileLike::wake_on` returns `WakeOn::Word`). The protocol is Dekker's:
//!
//! - the waiter sets its core's bit (a sequentially consistent read-modify-write), then looks
//!   at the state (`poll`) once more, and only if nothing is ready halts (`nr::WAIT`, with a
//!   bounded nap);
//! - the changer changes the state, then (`notify`) fences and loads the word; if any bit is
//!   set it takes the word (`swap(0)`) and wakes each core in it (`nr::WAKE`).
//!
//! One of the two sees the other: either the waiter's second look sees the change, or the
//! changer's load sees the bit. A wake that reaches a core before it halts makes its next
//! halt return at once (the kernel keeps the wake), so no wake is lost between the look and
//! the halt. A core's bit stands for every context waiting on that core: a wake may wake a
//! context whose descriptor did not change, which then looks and sleeps again. A changer
//! with no sleeper pays a fence and one load of a line it already holds.
//!
//! `fd::poll_wait` (in `mod.rs`, the API) is the loop over many descriptors; this file holds
//! the primitives it and the blocking calls share.
//!
//! A kind whose state only the owning core moves (a socket, whose stack is polled by that
//! core) has no word: `WakeOn::Poll` says "look again every so often", and its `poll` moves
//! the stack forward itself. Files and the console are always ready (`WakeOn::Nothing`).

use core::sync::atomic::{fence, AtomicU64, Ordering};


/// How a waiter hears that a descriptor's `poll` answer may have changed.
#[derive(Clone, Copy)]
pub enum WakeOn {
    /// Only the caller's own calls change it (or it is always ready): no need to sleep on it.
    Nothing,
    /// A waiters word (see the module comment), in memory shared by every core that can
    /// change the state.
    Word(&'static AtomicU64),
    /// Nothing wakes a sleeper; look again at least every `POLL_NAP_US` (each look moves the
    /// object forward: a socket's `poll` polls its core's stack).
    Poll,
}

/// The longest a `poll_wait` holding a `WakeOn::Poll` descriptor sleeps between looks.
pub const POLL_NAP_US: u64 = 1_000;
/// The longest nap otherwise: a safety net only (a wake ends a nap at once).
pub(super) const WORD_NAP_US: u64 = 50_000;

/// The changer's side: after changing the state behind `word`, wake every core sleeping on
/// it. A fence and a load when nobody sleeps.
#[inline]
pub(super) fn notify(word: &AtomicU64) {
    fence(Ordering::SeqCst);
    if word.load(Ordering::Relaxed) != 0 {
        wake_all(word);
    }
}

#[cold]
fn wake_all(word: &AtomicU64) {
    let mut cores = word.swap(0, Ordering::SeqCst);
    while cores != 0 {
        let c = cores.trailing_zeros() as u64;
        cores &= cores - 1;
        let _ = crate::sys::wake(c);
    }
    NOTIFIED.fetch_add(1, Ordering::Relaxed);
}

/// This core's bit in a waiters word (cores 64 and up share bit 63: they are woken with it
/// and look again; correct, only less precise).
pub(super) fn my_bit() -> u64 {
    1 << crate::ctx::core_id().min(63)
}

/// Halts `poll_wait` and the blocking calls made (`naps`), and how many of them a wake ended
/// (`woken`), in this program; and wakes sent (`notified`). For tests: a wait that spun
/// instead of sleeping shows `naps` unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCounts {
    pub naps: u64,
    pub woken: u64,
    pub notified: u64,
}

static NAPS: AtomicU64 = AtomicU64::new(0);
static WOKEN: AtomicU64 = AtomicU64::new(0);
static NOTIFIED: AtomicU64 = AtomicU64::new(0);

/// This program's `WaitCounts` so far.
pub fn wait_counts() -> WaitCounts {
    WaitCounts { naps: NAPS.load(Ordering::Relaxed), woken: WOKEN.load(Ordering::Relaxed), notified: NOTIFIED.load(Ordering::Relaxed) }
}

/// Sleep at most `us` microseconds, or until a wake. Where the core cannot halt (an
/// application core, whose calls are forwarded), yield instead. `false` if it neither was
/// woken nor yielded: a timeout, or a halt the kernel refused at once.
pub(super) fn nap(us: u64) -> bool {
    NAPS.fetch_add(1, Ordering::Relaxed);
    match crate::sys::wait(0, us.clamp(1, abi::MAX_WAIT_US)) {
        Ok(r) if r & abi::WAIT_WOKEN != 0 => {
            WOKEN.fetch_add(1, Ordering::Relaxed);
            true
        }
        Ok(_) => false,
        Err(_) => {
            let _ = crate::sys::pcore_yield();
            true
        }
    }
}

/// How many times a blocking call looks before it sleeps: the other side already running on
/// another core (a pipe's reader answering a request) often acts within a few hundred
/// instructions, and a look is cheaper than a sleep and a wake (two system calls and an
/// interrupt on each side).
const LOOKS_BEFORE_SLEEP: u32 = 64;

/// Block until `ready()` says yes: the blocking read or write of a kind with a waiters word
/// (a pipe end, an eventfd). `ready` runs up to `LOOKS_BEFORE_SLEEP` times before the first
/// sleep and once after the bit is set before each.
pub(super) fn block_on<R>(word: &AtomicU64, mut ready: impl FnMut() -> Option<R>) -> R {
    for _ in 0..LOOKS_BEFORE_SLEEP {
        if let Some(r) = ready() {
            return r;
        }
        core::hint::spin_loop();
    }
    let bit = my_bit();
    loop {
        if let Some(r) = ready() {
            return r;
        }
        word.fetch_or(bit, Ordering::SeqCst);
        if let Some(r) = ready() {
            word.fetch_and(!bit, Ordering::Relaxed);
            return r;
        }
        if !nap(WORD_NAP_US) {
            // Not woken: a timeout, or a time-shared core that would not halt because other
            // contexts wait to run on it (the other side may be one of them): give them the
            // core now rather than at the next tick.
            let _ = crate::sys::pcore_yield();
        }
        // A nap that timed out leaves the bit: take it back (a wake took it already).
        word.fetch_and(!bit, Ordering::Relaxed);
    }
}
