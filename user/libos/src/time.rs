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

/// Poll `done` until it returns true or `ms` milliseconds pass; returns whether it did.
pub fn wait_until(ms: u64, mut done: impl FnMut() -> bool) -> bool {
    let end = ticks().saturating_add(ms.saturating_mul(tsc_per_ms()));
    loop {
        if done() {
            return true;
        }
        if ticks() >= end {
            return done();
        }
        for _ in 0..64 {
            core::hint::spin_loop();
        }
    }
}
