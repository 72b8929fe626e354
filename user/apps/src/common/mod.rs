//! Helpers shared by the memory benchmarks (memclone, mempass): argument parsing, touching
//! pages, and packing a per-core result into an exit code.

use abi::PAGE_SIZE;

/// `[SIZE] [CORES] [WORDS...]`: bytes per core (default `default_size`), cores (default all
/// online), and the remaining words.
pub fn parse_args(args: &'static str, default_size: u64) -> Result<(u64, u64, impl Iterator<Item = &'static str>), &'static str> {
    let online = libos::sys::sys_info().map(|s| s.cores).unwrap_or(1);
    let mut words = args.split_whitespace();
    let size = match words.next() {
        Some(w) => libos::parse_u64(w).ok_or("SIZE must be a number (suffix k, m or g)")?,
        None => default_size,
    };
    let cores = match words.next() {
        Some(w) => libos::parse_u64(w).ok_or("CORES must be a number")?,
        None => online,
    };
    if size < PAGE_SIZE {
        return Err("SIZE must be at least one page");
    }
    if cores == 0 || cores > online {
        return Err("CORES must be between 1 and the number of online cores");
    }
    Ok((size.next_multiple_of(PAGE_SIZE), cores, words))
}

/// Write one word in each of `pages` pages from `base`.
#[allow(unsafe_code)]
#[inline(never)]
pub fn touch_pages(base: u64, pages: u64, value: u64) {
    for i in 0..pages {
        // SAFETY: callers pass a range they mapped writable, `pages` pages long.
        unsafe { core::ptr::write_volatile((base + i * PAGE_SIZE) as *mut u64, value + i) };
    }
}

/// What one core measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoreResult {
    pub ticks: u64,
    pub soft_faults: u64,
}

const OK_BIT: u64 = 1 << 63;
const TICK_BITS: u32 = 40;

impl CoreResult {
    /// Pack into an exit code (bit 63 set, so it cannot be mistaken for a fault exit).
    pub fn encode(self) -> u64 {
        OK_BIT | (self.soft_faults.min((1 << 23) - 1) << TICK_BITS) | self.ticks.min((1 << TICK_BITS) - 1)
    }

    pub fn decode(code: u64) -> Option<CoreResult> {
        (code & OK_BIT != 0).then_some(CoreResult {
            ticks: code & ((1 << TICK_BITS) - 1),
            soft_faults: (code & !OK_BIT) >> TICK_BITS,
        })
    }
}

/// Soft faults taken so far on `core` (0 if the call fails).
pub fn soft_faults(core: u64) -> u64 {
    libos::sys::core_stats(core).map(|s| s.soft_faults).unwrap_or(0)
}

/// Touch `pages` pages at `base` on core `core`, measuring time and soft faults.
pub fn measure_touch(core: u64, base: u64, pages: u64, value: u64) -> CoreResult {
    // Warm the code and the counter call first so they add no faults of their own.
    touch_pages(base, 0, 0);
    let _ = soft_faults(core);
    let f0 = soft_faults(core);
    let t0 = libos::time::ticks();
    touch_pages(base, pages, value);
    let t1 = libos::time::ticks();
    let f1 = soft_faults(core);
    CoreResult { ticks: t1 - t0, soft_faults: f1 - f0 }
}

/// Ticks per page and nanoseconds per page (x100 for two decimals).
pub fn per_page(ticks: u64, pages: u64) -> (u64, u64) {
    let pages = pages.max(1);
    (ticks / pages, libos::time::ticks_to_ns(ticks) * 100 / pages)
}
