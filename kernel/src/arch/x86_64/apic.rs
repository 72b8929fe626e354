//! Local APIC in xAPIC (MMIO) or x2APIC (MSR) mode, its timer, and IPIs.

use super::cpu::{self, rdmsr, wrmsr, MSR_APIC_BASE};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::percpu::CoreSlots;
use percore::{CachePadded, MAX_CORES};

static X2APIC: AtomicBool = AtomicBool::new(false);
/// LAPIC timer ticks per millisecond at divide-by-16, measured at boot.
static TIMER_TICKS_PER_MS: AtomicU64 = AtomicU64::new(0);

const XAPIC_PHYS: u64 = 0xFEE0_0000;

const REG_ID: u32 = 0x20;
const REG_EOI: u32 = 0xB0;
const REG_SVR: u32 = 0xF0;
const REG_ESR: u32 = 0x280;
const REG_ICR_LOW: u32 = 0x300;
const REG_ICR_HIGH: u32 = 0x310;
const REG_LVT_TIMER: u32 = 0x320;
const REG_LVT_LINT0: u32 = 0x350;
const REG_LVT_LINT1: u32 = 0x360;
const REG_LVT_ERROR: u32 = 0x370;
const REG_TIMER_INIT: u32 = 0x380;
const REG_TIMER_CURRENT: u32 = 0x390;
const REG_TIMER_DIV: u32 = 0x3E0;

pub const VECTOR_TIMER: u8 = 0xEF;
pub const VECTOR_WAKE: u8 = 0xF0;
pub const VECTOR_ERROR: u8 = 0xFE;
pub const VECTOR_SPURIOUS: u8 = 0xFF;

fn xapic_reg(reg: u32) -> *mut u32 {
    (crate::mm::phys_to_virt(XAPIC_PHYS) + reg as u64) as *mut u32
}

fn read(reg: u32) -> u32 {
    if X2APIC.load(Ordering::Relaxed) {
        rdmsr(0x800 + (reg >> 4)) as u32
    } else {
        // SAFETY: the xAPIC page is mapped uncached in the physical window; reg is a valid
        // register offset.
        unsafe { core::ptr::read_volatile(xapic_reg(reg)) }
    }
}

fn write(reg: u32, value: u32) {
    if X2APIC.load(Ordering::Relaxed) {
        wrmsr(0x800 + (reg >> 4), value as u64)
    } else {
        // SAFETY: as for read.
        unsafe { core::ptr::write_volatile(xapic_reg(reg), value) }
    }
}

pub fn has_x2apic() -> bool {
    cpu::cpuid(1, 0).ecx & (1 << 21) != 0
}

pub fn is_x2apic() -> bool {
    X2APIC.load(Ordering::Relaxed)
}

/// Enable this core's local APIC (x2APIC mode when the CPU has it).
pub fn init_local() {
    let mut base = rdmsr(MSR_APIC_BASE);
    base |= 1 << 11; // global enable
    if has_x2apic() {
        base |= 1 << 10;
        X2APIC.store(true, Ordering::Relaxed);
    }
    wrmsr(MSR_APIC_BASE, base);
    // Mask the legacy lines, route errors, and software-enable with the spurious vector.
    write(REG_LVT_LINT0, 1 << 16);
    write(REG_LVT_LINT1, 1 << 16);
    write(REG_LVT_TIMER, 1 << 16);
    write(REG_LVT_ERROR, VECTOR_ERROR as u32);
    write(REG_ESR, 0);
    write(REG_SVR, 0x100 | VECTOR_SPURIOUS as u32);
    eoi();
}

/// This core's APIC id.
pub fn id() -> u32 {
    if X2APIC.load(Ordering::Relaxed) {
        read(REG_ID)
    } else {
        read(REG_ID) >> 24
    }
}

pub fn eoi() {
    write(REG_EOI, 0);
}

fn wait_icr_idle() {
    if X2APIC.load(Ordering::Relaxed) {
        return; // x2APIC ICR writes complete synchronously
    }
    for _ in 0..1_000_000 {
        if read(REG_ICR_LOW) & (1 << 12) == 0 {
            return;
        }
        core::hint::spin_loop();
    }
}

fn send_icr(dest: u32, low: u32) {
    cpu::without_interrupts(|| {
        if X2APIC.load(Ordering::Relaxed) {
            wrmsr(0x830, ((dest as u64) << 32) | low as u64);
        } else {
            wait_icr_idle();
            write(REG_ICR_HIGH, dest << 24);
            write(REG_ICR_LOW, low);
            wait_icr_idle();
        }
    })
}

/// A fixed-vector IPI to one core.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send_icr(apic_id, vector as u32 | (1 << 14));
}

pub fn send_init(apic_id: u32) {
    send_icr(apic_id, 0x0000_4500); // INIT, assert, level
}

pub fn send_init_deassert(apic_id: u32) {
    send_icr(apic_id, 0x0000_8500); // INIT, de-assert, level
}

pub fn send_sipi(apic_id: u32, page: u8) {
    send_icr(apic_id, 0x0000_4600 | page as u32);
}

/// Measure the timer frequency against the TSC (which was calibrated against the PIT).
pub fn calibrate_timer() -> u64 {
    write(REG_TIMER_DIV, 0x3); // divide by 16
    write(REG_LVT_TIMER, 1 << 16); // masked, one-shot
    write(REG_TIMER_INIT, u32::MAX);
    crate::time::spin_us(10_000);
    let elapsed = u32::MAX - read(REG_TIMER_CURRENT);
    write(REG_TIMER_INIT, 0);
    let per_ms = (elapsed as u64) / 10;
    TIMER_TICKS_PER_MS.store(per_ms.max(1), Ordering::Relaxed);
    per_ms
}

pub fn timer_ticks_per_ms() -> u64 {
    TIMER_TICKS_PER_MS.load(Ordering::Relaxed)
}

/// Arm a one-shot timer interrupt on this core after `us` microseconds.
pub fn timer_oneshot_us(us: u64) {
    let ticks = (timer_ticks_per_ms() * us / 1000).clamp(1, u32::MAX as u64);
    write(REG_TIMER_DIV, 0x3);
    write(REG_LVT_TIMER, VECTOR_TIMER as u32);
    write(REG_TIMER_INIT, ticks as u32);
}

/// Each core's periodic timer rate in Hz (0: none), as `set_timer_hz` last programmed it: the
/// scheduler sets it as contexts start and stop, and code that sleeps on a core (a device
/// wait, a kernel core going idle) reads it to know whether a tick will end the sleep.
static TIMER_HZ: CoreSlots<AtomicU64> = CoreSlots::new([const { CachePadded::new(AtomicU64::new(0)) }; MAX_CORES]);

/// This core's periodic timer rate (0: no periodic tick).
pub fn timer_hz() -> u64 {
    TIMER_HZ.this().load(Ordering::Relaxed)
}

/// Program this core's periodic timer at `hz` (0 stops it), unless it already runs at that
/// rate.
pub fn set_timer_hz(hz: u64) {
    // Interrupts off: the record and the timer change together on this core.
    let irq = cpu::irq_save();
    let slot = TIMER_HZ.this();
    if slot.load(Ordering::Relaxed) != hz {
        timer_periodic_us(1_000_000u64.checked_div(hz).unwrap_or(0));
        slot.store(hz, Ordering::Relaxed);
    }
    cpu::irq_restore(irq);
}

/// Arm a periodic timer interrupt every `us` microseconds (0 stops it).
pub fn timer_periodic_us(us: u64) {
    if us == 0 {
        write(REG_LVT_TIMER, 1 << 16);
        write(REG_TIMER_INIT, 0);
        return;
    }
    let ticks = (timer_ticks_per_ms() * us / 1000).clamp(1, u32::MAX as u64);
    write(REG_TIMER_DIV, 0x3);
    write(REG_LVT_TIMER, VECTOR_TIMER as u32 | (1 << 17));
    write(REG_TIMER_INIT, ticks as u32);
}
