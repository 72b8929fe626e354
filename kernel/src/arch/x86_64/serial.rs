//! COM1 console. A ticket lock keeps lines from different cores whole.

use super::cpu::{inb, outb};
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
    // while the machine boots is not lost.
    outb(COM1 + 2, 0xC5);
    outb(COM1 + 4, 0x03); // DTR, RTS
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
