//! COM1 console. A ticket lock keeps lines from different cores whole.

use super::cpu::{inb, outb};
use core::sync::atomic::{AtomicU32, Ordering};
use percore::TicketLock;

const COM1: u16 = 0x3F8;

pub struct Serial;

static LOCK: TicketLock<()> = TicketLock::new(());

pub fn init() {
    outb(COM1 + 1, 0x00); // no UART interrupts yet
    outb(COM1 + 3, 0x80); // DLAB
    outb(COM1, 0x01); // 115200 baud
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03); // 8N1
    // FIFO on, transmit FIFO cleared; the receive FIFO is kept, so input typed (or piped)
    // while the machine boots is not lost. Receive interrupt at the first byte (trigger
    // level 1), so a single key press wakes a waiting core at once.
    outb(COM1 + 2, 0x05);
    outb(COM1 + 4, 0x03); // DTR, RTS
}

/// The vector of the receive interrupt (routed through the I/O APIC to a waiting core).
pub const VECTOR_CONSOLE: u8 = 0xE0;
/// The global system interrupt COM1's line reaches (ISA IRQ 4 unless the MADT overrides it).
static GSI: AtomicU32 = AtomicU32::new(4);
/// The APIC id the receive interrupt is routed to, or `u32::MAX` before the first waiter.
static ROUTED_TO: AtomicU32 = AtomicU32::new(u32::MAX);

/// Let the UART raise its receive interrupt ("data available"; OUT2 gates the line on PCs).
/// The I/O APIC entry stays masked until a core waits for input (`route_rx_interrupt_to`).
pub fn enable_rx_interrupt(gsi: u32) {
    GSI.store(gsi, Ordering::Relaxed);
    outb(COM1 + 1, 0x01);
    outb(COM1 + 4, 0x0B); // DTR, RTS, OUT2
    super::idt::register_handler(VECTOR_CONSOLE, rx_interrupt);
}

/// Deliver the receive interrupt to the core with `apic_id` (the one about to wait for
/// input; the last core to wait gets it). Returns false if the I/O APIC has no such line.
pub fn route_rx_interrupt_to(apic_id: u32) -> bool {
    if ROUTED_TO.load(Ordering::Relaxed) == apic_id {
        return true;
    }
    let ok = super::ioapic::route(GSI.load(Ordering::Relaxed), VECTOR_CONSOLE, apic_id);
    if ok {
        ROUTED_TO.store(apic_id, Ordering::Relaxed);
    }
    ok
}

/// The receive interrupt only ends a halt: the woken core reads the port itself.
fn rx_interrupt(_f: &mut super::idt::TrapFrame) {
    super::apic::eoi();
}

/// Whether a received byte is waiting (nothing is consumed).
pub fn input_waiting() -> bool {
    inb(COM1 + 5) & 1 != 0
}

fn put(b: u8) {
    // Bounded wait: a missing UART must not hang the kernel.
    for _ in 0..100_000 {
        if inb(COM1 + 5) & 0x20 != 0 {
            break;
        }
        core::hint::spin_loop();
    }
    outb(COM1, b);
}

pub fn write_bytes(bytes: &[u8]) {
    for &b in bytes {
        if b == b'\n' {
            put(b'\r');
        }
        put(b);
    }
}

/// A received byte, if one is waiting.
pub fn try_read() -> Option<u8> {
    if inb(COM1 + 5) & 1 != 0 {
        Some(inb(COM1))
    } else {
        None
    }
}

/// Write bytes as one unit, translating `\n` to `\r\n`.
pub fn write_bytes_locked(bytes: &[u8]) {
    let _g = LOCK.lock_irqsave();
    write_bytes(bytes);
}

/// Write bytes as one unit, untranslated.
pub fn write_raw_locked(bytes: &[u8]) {
    let _g = LOCK.lock_irqsave();
    for &b in bytes {
        put(b);
    }
}

impl core::fmt::Write for Serial {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        write_bytes(s.as_bytes());
        Ok(())
    }
}

/// Write formatted text as one unit (interrupts off so a handler on this core cannot
/// deadlock on the console lock).
pub fn write_fmt_locked(args: core::fmt::Arguments) {
    let _g = LOCK.lock_irqsave();
    let _ = core::fmt::Write::write_fmt(&mut Serial, args);
}

/// Console output for the exception path: takes the lock only if it is free within a short
/// wait, so a fault while printing still reports.
pub fn write_fmt_emergency(args: core::fmt::Arguments) {
    for _ in 0..1_000_000 {
        if let Some(_g) = LOCK.try_lock() {
            let _ = core::fmt::Write::write_fmt(&mut Serial, args);
            return;
        }
        core::hint::spin_loop();
    }
    let _ = core::fmt::Write::write_fmt(&mut Serial, args);
}
