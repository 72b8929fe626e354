//! Time from `time_now` (time-stamp counter ticks) and `SysInfo::tsc_per_ms`.

/// TSC ticks now (0 if the call fails).
pub fn ticks() -> u64 {
    crate::sys::time_now().unwrap_or(0)
}

/// TSC ticks now, read in user mode (`rdtsc`; the kernel leaves the counter readable): the
/// same clock as `ticks` without a system call, for loops that poll (the network stacks).
pub fn tsc() -> u64 {
    // SAFETY: rdtsc reads the time-stamp counter; it has no other effect.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Nanoseconds since boot from `tsc` (no system call).
pub fn tsc_ns() -> u64 {
    ticks_to_ns(tsc())
}

/// Ticks per millisecond: from the start information, else from `sys_info` (never 0).
pub fn tsc_per_ms() -> u64 {
    let t = crate::launch::start_info().tsc_per_ms;
    if t != 0 {
        return t;
    }
    crate::sys::sys_info().map(|s| s.tsc_per_ms).unwrap_or(1).max(1)
}

/// Convert a tick count to nanoseconds.
pub fn ticks_to_ns(t: u64) -> u64 {
    (t as u128 * 1_000_000 / tsc_per_ms() as u128) as u64
}

/// Nanoseconds since boot (TSC start).
pub fn now_ns() -> u64 {
    ticks_to_ns(ticks())
}

/// Busy-wait for `ms` milliseconds.
pub fn spin_ms(ms: u64) {
    let end = ticks().saturating_add(ms.saturating_mul(tsc_per_ms()));
    while ticks() < end {
        core::hint::spin_loop();
    }
}

/// Sleep for about `ms` milliseconds with the core halted (`nr::WAIT`; woken early by other
/// interrupts, it halts again). Busy-waits where the core cannot halt for us (an AC).
pub fn sleep_ms(ms: u64) {
    let end = ticks().saturating_add(ms.saturating_mul(tsc_per_ms()));
    loop {
        let now = ticks();
        if now >= end {
            return;
        }
        let us = ((end - now) * 1000 / tsc_per_ms().max(1)).clamp(1, abi::MAX_WAIT_US);
        if crate::sys::wait(0, us).is_err() {
            while ticks() < end {
                core::hint::spin_loop();
            }
            return;
        }
    }
}

/// How long a wait looks without pause before it halts between looks: a condition that comes
/// true sooner is seen as soon as before.
const SPIN_BEFORE_HALT_NS: u64 = 2_000_000;
/// Its first halt, and the longest: each halt that ends by its timeout doubles the next, so a
/// long wait costs a halt per millisecond and sees its condition at most that late.
const HALT_FIRST_US: u64 = 50;
const HALT_MAX_US: u64 = 1_000;

/// Poll `done` until it returns true or `ms` milliseconds pass; returns whether it did. After
/// `SPIN_BEFORE_HALT_NS` of looking, the core halts between looks (`nr::WAIT`, 50 us doubling
/// up to 1 ms), where it can (not on an application core, whose calls go to a kernel core).
pub fn wait_until(ms: u64, done: impl FnMut() -> bool) -> bool {
    wait_until_woken(ms, None, done)
}

/// `wait_until`, for a condition whose maker can wake us: before each halt the waiter puts
/// its core (+ 1) into `sleeper` with a compare-and-swap from 0; the maker, once the
/// condition is (about to be) true, swaps `WAKER_DONE` in and calls `nr::WAKE` on the core it
/// found. A `WAKER_DONE` already there means "it is coming": the waiter polls instead of
/// halting. A wake ends the halt at once and starts another stretch of polling.
pub fn wait_until_woken(ms: u64, sleeper: Option<&core::sync::atomic::AtomicU64>, done: impl FnMut() -> bool) -> bool {
    match sleeper {
        Some(w) => wait_loop(ms, Sleeper::One(w), done),
        None => wait_loop(ms, Sleeper::Nobody, done),
    }
}

/// `wait_until`, for a condition that several cores may wait for at once and whose maker
/// wakes them all with `wake_set` (a barrier's last arrival). `sleepers` is a set of cores,
/// bit `c` for core `c`: before each halt the waiter sets its core's bit and looks at `done`
/// once more; the maker makes the condition true first and then wakes every core in the set
/// (`nr::WAKE`; one that has not halted yet finds the wake pending). A waiter on a core past
/// 63 has no bit and sees the condition by its halts' timeouts (at most 1 ms late). Two
/// waiters on one core share a bit: the first to wake clears it, and the other sees the
/// condition by its timeout.
pub fn wait_until_woken_set(ms: u64, sleepers: &core::sync::atomic::AtomicU64, done: impl FnMut() -> bool) -> bool {
    wait_loop(ms, Sleeper::Set(sleepers), done)
}

/// The maker's side of `wait_until_woken_set`, once the condition is true: empty the set and
/// wake each core that was in it. Nobody in it (every waiter still polling): one load.
pub fn wake_set(sleepers: &core::sync::atomic::AtomicU64) {
    use core::sync::atomic::Ordering;
    // A waiter sets its bit, then reads the condition; the maker wrote the condition, then
    // reads the set: with both in one order (SeqCst) either the waiter sees the condition or
    // the maker sees the bit.
    if sleepers.load(Ordering::SeqCst) == 0 {
        return;
    }
    let mut set = sleepers.swap(0, Ordering::SeqCst);
    while set != 0 {
        let c = set.trailing_zeros() as u64;
        set &= set - 1;
        let _ = crate::sys::wake(c);
    }
}

/// How a waiter tells its maker that it halts.
#[derive(Clone, Copy)]
enum Sleeper<'a> {
    /// Nobody wakes it: it halts until its timeouts.
    Nobody,
    /// One waiter: its core + 1 in the word (`wait_until_woken`).
    One(&'a core::sync::atomic::AtomicU64),
    /// Any number of waiters: a bit per core (`wait_until_woken_set`).
    Set(&'a core::sync::atomic::AtomicU64),
}

impl Sleeper<'_> {
    /// This core's mark in the word (0 for `Nobody`, or a core with no bit): only a waiter
    /// with a word asks which core it is on, so a bare context (no library OS state, e.g.
    /// `cores::Core`'s) can still wait.
    fn mark(self) -> u64 {
        match self {
            Sleeper::Nobody => 0,
            Sleeper::One(_) => crate::core_id() + 1,
            Sleeper::Set(_) => 1u64.checked_shl(crate::core_id() as u32).unwrap_or(0),
        }
    }

    /// Say this core is about to halt. False: do not halt now (the maker is done and the
    /// condition follows within microseconds).
    fn announce(self, mark: u64) -> bool {
        use core::sync::atomic::Ordering;
        match self {
            Sleeper::Nobody => true,
            Sleeper::One(w) => w.compare_exchange(0, mark, Ordering::SeqCst, Ordering::SeqCst).is_ok(),
            Sleeper::Set(w) => {
                w.fetch_or(mark, Ordering::SeqCst);
                true
            }
        }
    }

    /// Take back `announce` after the halt (the maker may have done so already).
    fn withdraw(self, mark: u64) {
        use core::sync::atomic::Ordering;
        match self {
            Sleeper::Nobody => {}
            Sleeper::One(w) => {
                let _ = w.compare_exchange(mark, 0, Ordering::SeqCst, Ordering::SeqCst);
            }
            Sleeper::Set(w) => {
                w.fetch_and(!mark, Ordering::SeqCst);
            }
        }
    }
}

/// The loop of `wait_until`, `wait_until_woken` and `wait_until_woken_set`.
fn wait_loop(ms: u64, sleeper: Sleeper, mut done: impl FnMut() -> bool) -> bool {
    use core::sync::atomic::Ordering;
    let per_ms = tsc_per_ms();
    let end = ticks().saturating_add(ms.saturating_mul(per_ms));
    let spin_ticks = SPIN_BEFORE_HALT_NS.saturating_mul(per_ms) / 1_000_000;
    let mut spin_from = ticks();
    let mut nap_us = HALT_FIRST_US;
    let mut can_halt = true;
    let mut mark = None;
    loop {
        if done() {
            return true;
        }
        let now = ticks();
        if now >= end {
            return done();
        }
        if !can_halt || now.saturating_sub(spin_from) < spin_ticks {
            for _ in 0..64 {
                core::hint::spin_loop();
            }
            continue;
        }
        let me = *mark.get_or_insert_with(|| sleeper.mark());
        if !sleeper.announce(me) {
            // The maker is done: poll.
            spin_from = now;
            continue;
        }
        // A set's maker wakes only the cores it finds in the set: look once more now that
        // this core is in it.
        if matches!(sleeper, Sleeper::Set(_)) && done() {
            sleeper.withdraw(me);
            return true;
        }
        let left_us = ((end - now) as u128 * 1000 / per_ms as u128).clamp(1, abi::MAX_WAIT_US as u128) as u64;
        match crate::sys::wait(0, nap_us.min(left_us)) {
            Ok(r) if r & abi::WAIT_WOKEN != 0 => {
                WOKEN_WAITS.fetch_add(1, Ordering::Relaxed);
                spin_from = ticks();
                nap_us = HALT_FIRST_US;
            }
            Ok(_) => nap_us = (nap_us * 2).min(HALT_MAX_US),
            // An application core cannot halt through a forwarded call: poll.
            Err(_) => can_halt = false,
        }
        sleeper.withdraw(me);
    }
}

/// Halts in `wait_until_woken` and `wait_until_woken_set` that a wake ended, in this program
/// (for tests).
static WOKEN_WAITS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// How many of this program's `wait_until_woken` and `wait_until_woken_set` halts a wake
/// ended so far.
pub fn woken_waits() -> u64 {
    WOKEN_WAITS.load(core::sync::atomic::Ordering::Relaxed)
}

/// `wait_until_woken`'s `sleeper`: the maker has finished (no waiter may sleep any more).
pub const WAKER_DONE: u64 = u64::MAX;

/// The maker's side of `wait_until_woken`: mark `sleeper` done and wake the core sleeping on
/// it, if any.
pub fn wake_sleeper(sleeper: &core::sync::atomic::AtomicU64) {
    let c = sleeper.swap(WAKER_DONE, core::sync::atomic::Ordering::SeqCst);
    if c != 0 && c != WAKER_DONE {
        let _ = crate::sys::wake(c - 1);
    }
}
