//! Kernel symbol table for backtraces. `cargo xtask build` writes the table into the
//! reserved `.ksyms` section after linking (addresses do not move), so an exception report
//! names functions without a debugger.
//!
//! Layout: b"KSYMTAB1", u32 count, u32 names_offset, then `count` entries of
//! (u64 address, u32 name offset, u32 name length) sorted by address, then the names.

const SPACE: usize = 768 * 1024;

#[repr(C, align(8))]
struct Space([u8; SPACE]);

const fn reserved() -> Space {
    let mut s = [0u8; SPACE];
    let magic = *b"KSYMNONE";
    let mut i = 0;
    while i < 8 {
        s[i] = magic[i];
        i += 1;
    }
    Space(s)
}

#[link_section = ".ksyms"]
#[used]
static KSYMS: Space = reserved();

fn table() -> &'static [u8] {
    // The contents are written after linking, so the compiler must not assume it knows them:
    // launder the address through black_box.
    let p = core::hint::black_box(&KSYMS as *const Space as *const u8);
    // SAFETY: p points at the SPACE bytes of the static, which live forever and are never
    // written at run time.
    unsafe { core::slice::from_raw_parts(p, SPACE) }
}

fn u32_at(t: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(t.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(t: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(t.get(off..off + 8)?.try_into().ok()?))
}

/// Number of symbols present (0 if the table was not written).
pub fn count() -> usize {
    let t = table();
    if &t[..8] != b"KSYMTAB1" {
        return 0;
    }
    u32_at(t, 8).unwrap_or(0) as usize
}

/// The symbol containing `addr`, with the offset into it.
pub fn lookup(addr: u64) -> Option<(&'static str, u64)> {
    let t = table();
    let n = count();
    if n == 0 {
        return None;
    }
    let names = u32_at(t, 12)? as usize;
    let entry = |i: usize| -> Option<(u64, usize, usize)> {
        let off = 16 + i * 16;
        Some((u64_at(t, off)?, u32_at(t, off + 8)? as usize, u32_at(t, off + 12)? as usize))
    };
    // Last entry with address <= addr.
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if entry(mid)?.0 <= addr {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == 0 {
        return None;
    }
    let (a, name_off, name_len) = entry(lo - 1)?;
    let (text_start, text_end) = crate::mm::kernel_text_range();
    if addr < text_start || addr >= text_end {
        return None;
    }
    let bytes = t.get(names + name_off..names + name_off + name_len)?;
    Some((core::str::from_utf8(bytes).ok()?, addr - a))
}

/// Display adapter: `name+0x12` or `?`.
pub struct Symbolized(pub u64);

impl core::fmt::Display for Symbolized {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match lookup(self.0) {
            Some((name, off)) => write!(f, "{name}+{off:#x}"),
            None => write!(f, "?"),
        }
    }
}
