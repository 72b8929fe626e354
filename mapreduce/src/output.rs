//! The output format, exactly:
//!
//! - `wc`: one line per word, `word<TAB>count`, sorted by word bytewise;
//! - `wri`: one line per word, `word<TAB>off1,off2,...`, the byte offsets of the word's first
//!   letter, ascending, sorted by word bytewise.
//!
//! Lines end with `\n`. A [`Sink`] takes the bytes; [`Digest`] keeps only a checksum, the line
//! count and the byte count (for runs whose output is too big to print).

use crate::table::Entry;
use crate::App;

/// Where output bytes go.
pub trait Sink {
    fn write(&mut self, bytes: &[u8]);
}

impl Sink for alloc::vec::Vec<u8> {
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// FNV-1a 64 over the output bytes, with the line and byte counts. The host computes the same
/// over its reference output to compare a run it did not see in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub fnv: u64,
    pub lines: u64,
    pub bytes: u64,
}

impl Default for Digest {
    fn default() -> Self {
        Digest { fnv: crate::words::HASH_INIT, lines: 0, bytes: 0 }
    }
}

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        let mut d = Digest::default();
        d.write(bytes);
        d
    }
}

impl Sink for Digest {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.fnv = (self.fnv ^ b as u64).wrapping_mul(0x100_0000_01b3);
            self.lines += (b == b'\n') as u64;
        }
        self.bytes += bytes.len() as u64;
    }
}

impl core::fmt::Display for Digest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "fnv={:016x} lines={} bytes={}", self.fnv, self.lines, self.bytes)
    }
}

/// Decimal digits of `v` into `buf`; returns the used tail.
pub fn decimal(v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// Write one line for `e`.
///
/// # Safety
/// `e` must be a filled entry whose key (and, for `wri`, offsets) are in live memory.
pub unsafe fn write_entry(sink: &mut dyn Sink, app: App, e: &Entry) {
    let mut buf = [0u8; 20];
    // SAFETY: the caller's contract.
    sink.write(unsafe { e.key() });
    sink.write(b"\t");
    match app {
        App::Wc => sink.write(decimal(e.count, &mut buf)),
        App::Wri => {
            // Offsets in batches, so a word with millions of them is not one write per byte.
            let mut line = [0u8; 512];
            let mut at = 0;
            // SAFETY: the caller's contract.
            for (i, &v) in unsafe { e.vals() }.iter().enumerate() {
                if at + 21 > line.len() {
                    sink.write(&line[..at]);
                    at = 0;
                }
                if i > 0 {
                    line[at] = b',';
                    at += 1;
                }
                let d = decimal(v as u64, &mut buf);
                line[at..at + d.len()].copy_from_slice(d);
                at += d.len();
            }
            sink.write(&line[..at]);
        }
    }
    sink.write(b"\n");
}
