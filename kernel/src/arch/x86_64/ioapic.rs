//! The I/O APIC: routes the legacy ISA interrupt lines (here only the serial port's receive
//! interrupt) to a local APIC. Found through the ACPI MADT (entry type 1); an interrupt source
//! override (type 2) can move an ISA line to another global system interrupt.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use percore::TicketLock;

/// Where QEMU (and most PCs) put the first I/O APIC; replaced by the MADT's address.
const DEFAULT_BASE: u64 = 0xFEC0_0000;
static BASE: AtomicU64 = AtomicU64::new(DEFAULT_BASE);
/// The first global system interrupt of that I/O APIC.
static GSI_BASE: AtomicU32 = AtomicU32::new(0);
/// The index/data register pair is one unit: one writer at a time.
static LOCK: TicketLock<()> = TicketLock::new(());

const REG_SEL: u64 = 0x00;
const REG_WIN: u64 = 0x10;
const REG_VER: u32 = 0x01;

/// Record the I/O APIC the MADT lists (the first one, which holds the ISA lines).
pub fn set_base(pa: u64, gsi_base: u32) {
    BASE.store(pa, Ordering::Relaxed);
    GSI_BASE.store(gsi_base, Ordering::Relaxed);
}

fn reg(off: u64) -> *mut u32 {
    (crate::mm::phys_to_virt(BASE.load(Ordering::Relaxed)) + off) as *mut u32
}

fn read(index: u32) -> u32 {
    // SAFETY: the I/O APIC's registers lie in 3-4 GiB, which the physical window maps
    // uncached; the caller holds LOCK so the select/window pair is not interleaved.
    unsafe {
        core::ptr::write_volatile(reg(REG_SEL), index);
        core::ptr::read_volatile(reg(REG_WIN))
    }
}

fn write(index: u32, value: u32) {
    // SAFETY: as for `read`.
    unsafe {
        core::ptr::write_volatile(reg(REG_SEL), index);
        core::ptr::write_volatile(reg(REG_WIN), value);
    }
}

/// How many redirection entries the I/O APIC has (0 if it does not answer sensibly).
pub fn entries() -> u32 {
    let _g = LOCK.lock_irqsave();
    let v = read(REG_VER);
    if v == u32::MAX {
        return 0;
    }
    ((v >> 16) & 0xFF) + 1
}

/// Route global system interrupt `gsi` to `vector` on the core with `apic_id`: fixed
/// delivery, physical destination, edge-triggered, active high (the ISA convention).
/// Returns false if the I/O APIC has no such input.
pub fn route(gsi: u32, vector: u8, apic_id: u32) -> bool {
    program(gsi, vector as u32, apic_id)
}

/// Route `gsi` to `vector` on `apic_id`, level-triggered, active high, unmasked: a PCI
/// device's INTx line as QEMU models it. The handler masks it (`mask`) before its EOI, so a
/// line still asserted does not interrupt again at once. False if there is no such input.
pub fn route_level(gsi: u32, vector: u8, apic_id: u32) -> bool {
    program(gsi, vector as u32 | 1 << 15, apic_id)
}

/// Write `gsi`'s redirection entry: `low` (vector and mode bits) to the core `apic_id`.
/// False if there is no such input.
fn program(gsi: u32, low_bits: u32, apic_id: u32) -> bool {
    let Some(pin) = gsi.checked_sub(GSI_BASE.load(Ordering::Relaxed)) else { return false };
    if pin >= entries() {
        return false;
    }
    let _g = LOCK.lock_irqsave();
    let low = 0x10 + 2 * pin;
    // Masked while the destination changes, so no half-written entry delivers.
    write(low, 1 << 16);
    write(low + 1, apic_id << 24);
    write(low, low_bits);
    true
}

/// Mask input `gsi` (nothing is delivered until it is routed again).
pub fn mask(gsi: u32) {
    let Some(pin) = gsi.checked_sub(GSI_BASE.load(Ordering::Relaxed)) else { return };
    if pin >= entries() {
        return;
    }
    let _g = LOCK.lock_irqsave();
    let low = 0x10 + 2 * pin;
    let v = read(low);
    write(low, v | 1 << 16);
}
