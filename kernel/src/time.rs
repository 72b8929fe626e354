//! Time from the TSC, calibrated at boot against the PIT.

use crate::arch::x86_64::cpu::{inb, outb, rdtsc};
use core::sync::atomic::{AtomicU64, Ordering};

static TSC_PER_MS: AtomicU64 = AtomicU64::new(1_000_000);
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

pub fn record_boot_start() {
    BOOT_TSC.store(rdtsc(), Ordering::Relaxed);
}

/// Measure TSC ticks per millisecond against PIT channel 2: the smallest of three 10 ms
/// windows. Under emulation a window can only come out too long (the vCPU was descheduled
/// while the PIT ran out, so we noticed late), never too short, so the minimum is the best
/// estimate. Returns None if the PIT does not count (no PIT), leaving the default.
pub fn calibrate_tsc() -> Option<u64> {
    let best = (0..3).filter_map(|_| pit_window()).min()?;
    TSC_PER_MS.store(best, Ordering::Relaxed);
    Some(best)
}

fn pit_window() -> Option<u64> {
    const PIT_HZ: u64 = 1_193_182;
    const WINDOW_MS: u64 = 10;
    let count = (PIT_HZ * WINDOW_MS / 1000) as u16;
    // Gate channel 2 on, speaker off; mode 0 (interrupt on terminal count), binary.
    let port61 = inb(0x61);
    outb(0x61, (port61 & !0x02) | 0x01);
    outb(0x43, 0xB0);
    outb(0x42, count as u8);
    outb(0x42, (count >> 8) as u8);
    // Restart the count by toggling the gate.
    let v = inb(0x61) & !0x01;
    outb(0x61, v);
    outb(0x61, v | 0x01);
    let start = rdtsc();
    let mut spins: u64 = 0;
    while inb(0x61) & 0x20 == 0 {
        spins += 1;
        if spins > 200_000_000 {
            outb(0x61, port61);
            return None;
        }
    }
    let per_ms = (rdtsc() - start) / WINDOW_MS;
    outb(0x61, port61);
    (per_ms > 0).then_some(per_ms)
}

pub fn tsc_per_ms() -> u64 {
    TSC_PER_MS.load(Ordering::Relaxed)
}

/// Nanoseconds since `record_boot_start`.
pub fn uptime_ns() -> u64 {
    ticks_to_ns(rdtsc().saturating_sub(BOOT_TSC.load(Ordering::Relaxed)))
}

pub fn ticks_to_ns(ticks: u64) -> u64 {
    (ticks as u128 * 1_000_000 / tsc_per_ms() as u128) as u64
}

pub fn now_ticks() -> u64 {
    rdtsc()
}

/// Busy-wait for `us` microseconds.
pub fn spin_us(us: u64) {
    let end = rdtsc() + tsc_per_ms() * us / 1000;
    while rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// A deadline `ms` milliseconds from now, checked with `expired`.
pub struct Deadline(u64);

impl Deadline {
    pub fn after_ms(ms: u64) -> Self {
        Deadline(rdtsc() + tsc_per_ms() * ms)
    }
    pub fn expired(&self) -> bool {
        rdtsc() >= self.0
    }
}
