//! The boot image's program archive: a cpio "newc" archive the boot loader hands over as a
//! module (QEMU `-initrd`, GRUB `module2`). Files are found by name; the bytes stay where
//! the loader put them (that memory is kept out of the page pools).

use core::sync::atomic::{AtomicU64, Ordering};

static START: AtomicU64 = AtomicU64::new(0);
static LEN: AtomicU64 = AtomicU64::new(0);

pub fn set(phys_start: u64, len: u64) {
    START.store(phys_start, Ordering::Relaxed);
    LEN.store(len, Ordering::Relaxed);
}

fn archive() -> &'static [u8] {
    let (start, len) = (START.load(Ordering::Relaxed), LEN.load(Ordering::Relaxed));
    if len == 0 {
        return &[];
    }
    // SAFETY: the module's physical range was reserved at boot (never handed to the page
    // pools) and lies in the physical window; it is never written.
    unsafe { core::slice::from_raw_parts(crate::mm::phys_to_virt(start) as *const u8, len as usize) }
}

fn hex(field: &[u8]) -> Option<usize> {
    let s = core::str::from_utf8(field).ok()?;
    usize::from_str_radix(s, 16).ok()
}

/// Every (name, contents) in a newc archive; stops at the trailer or at the first malformed
/// header.
pub fn entries(a: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let mut off = 0usize;
    core::iter::from_fn(move || {
        let h = a.get(off..off + 110)?;
        if &h[..6] != b"070701" {
            return None;
        }
        let filesize = hex(&h[54..62])?;
        let namesize = hex(&h[94..102])?;
        let name_start = off + 110;
        let name = a.get(name_start..name_start + namesize.checked_sub(1)?)?;
        let data_start = (name_start + namesize + 3) & !3;
        let data = a.get(data_start..data_start.checked_add(filesize)?)?;
        off = (data_start + filesize + 3) & !3;
        if name == b"TRAILER!!!" {
            return None;
        }
        Some((name, data))
    })
}

/// The contents of file `name` (a leading "./" in the archive is ignored).
pub fn find(name: &[u8]) -> Option<&'static [u8]> {
    entries(archive()).find(|(n, _)| n.strip_prefix(b"./").unwrap_or(n) == name).map(|(_, d)| d)
}

/// Names of all files, for listings.
pub fn names() -> impl Iterator<Item = &'static [u8]> {
    entries(archive()).map(|(n, _)| n.strip_prefix(b"./").unwrap_or(n))
}

pub fn present() -> bool {
    LEN.load(Ordering::Relaxed) > 0
}
