//! `print!`/`println!` over `console_write`. A line is formatted into a stack buffer and
//! written with one system call, so lines from different cores do not interleave mid-line
//! (up to `LINE_BUF` bytes; longer output is written in pieces).

use core::fmt::{self, Write};

const LINE_BUF: usize = 512;

/// A `fmt::Write` sink that batches bytes and writes them with `console_write`.
pub struct Console {
    buf: [u8; LINE_BUF],
    len: usize,
}

impl Console {
    pub const fn new() -> Self {
        Self { buf: [0; LINE_BUF], len: 0 }
    }

    pub fn flush(&mut self) {
        if self.len > 0 {
            write_all(&self.buf[..self.len]);
            self.len = 0;
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Console {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len == LINE_BUF {
                self.flush();
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
        Ok(())
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Write all of `bytes` (retrying short writes; errors are dropped: there is nowhere else to
/// report them).
pub fn write_all(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match crate::sys::console_write(bytes) {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes = &bytes[(n as usize).min(bytes.len())..],
        }
    }
}

#[doc(hidden)]
pub fn _print(args: fmt::Arguments, newline: bool) {
    let mut c = Console::new();
    let _ = c.write_fmt(args);
    if newline {
        let _ = c.write_str("\n");
    }
    c.flush();
}

#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::console::_print(format_args!($($arg)*), false) };
}

#[macro_export]
macro_rules! println {
    () => { $crate::console::_print(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::console::_print(format_args!($($arg)*), true) };
}

/// Read console input, blocking: the core halts until the serial port's receive interrupt
/// (or `timeout_ms`, 0 for no limit) instead of polling. Returns the bytes read, 0 on timeout.
/// Where the core cannot sleep (an application core, whose calls run on a kernel core) it
/// falls back to polling with a short pause.
pub fn read_blocking(buf: &mut [u8], timeout_ms: u64) -> usize {
    let end = (timeout_ms > 0).then(|| crate::time::ticks().saturating_add(timeout_ms.saturating_mul(crate::time::tsc_per_ms())));
    loop {
        let n = crate::sys::console_read(buf).unwrap_or(0) as usize;
        if n > 0 {
            return n;
        }
        let left_us = match end {
            Some(e) => {
                let now = crate::time::ticks();
                if now >= e {
                    return 0;
                }
                ((e - now) * 1000 / crate::time::tsc_per_ms().max(1)).clamp(1, abi::MAX_WAIT_US)
            }
            None => abi::MAX_WAIT_US,
        };
        if crate::sys::wait(abi::WAIT_CONSOLE, left_us).is_err() {
            crate::time::spin_ms(2);
        }
    }
}
