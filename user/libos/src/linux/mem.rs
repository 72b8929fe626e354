//! The Linux program's memory as the dispatcher sees it: which addresses it may hand us
//! (its image, its `brk` heap, its stack, and its `mmap`s, `vm`), and
//! copies to and from them. A pointer outside them, or to read-only memory for an output, is
//! `-EFAULT` before anything is touched: the runtime shares the address space, and a fault
//! in it would end the runtime with the program. One of the modules allowed `unsafe` (with
//! `upcall.rs`).

use alloc::vec::Vec;

/// Most regions of the image (page-rounded runs, `elf::Plan::mappings`).
pub const MAX_REGIONS: usize = linuxabi::elf::MAX_LOADS + 2;

#[derive(Clone, Copy, Debug, Default)]
pub struct Region {
    pub lo: u64,
    pub hi: u64,
    pub write: bool,
}

/// The program's fixed regions (the image, the stack) and its `brk` heap.
#[derive(Debug, Default)]
pub struct Space {
    pub regions: Vec<Region>,
    pub brk_lo: u64,
    /// The current break (the heap is `[brk_lo, brk)`, mapped to the page above).
    pub brk: u64,
    /// Its anonymous mappings.
    pub mmaps: super::vm::Mmaps,
}

impl Space {
    /// Whether `[addr, addr + len)` is the program's memory, writable if `write`.
    pub fn ok(&self, addr: u64, len: u64, write: bool) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = addr.checked_add(len) else { return false };
        let in_fixed = self.regions.iter().any(|r| r.lo <= addr && end <= r.hi && (r.write || !write));
        let in_brk = self.brk_lo <= addr && end <= self.brk.next_multiple_of(abi::PAGE_SIZE);
        in_fixed || in_brk || self.mmaps.accessible(addr, len, write)
    }

    /// The program's bytes `[addr, addr + len)`, if readable.
    pub fn read(&self, addr: u64, len: u64) -> Option<&[u8]> {
        if !self.ok(addr, len, false) {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: `ok` found the whole range mapped readable in this address space, and the
        // program's mappings change only under the process lock, which the caller holds
        // (`dispatch::lock_proc`). The bytes may alias program data (other threads may
        // write them meanwhile); they are only read.
        Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
    }

    /// The program's bytes `[addr, addr + len)`, if writable.
    pub fn write(&self, addr: u64, len: u64) -> Option<&mut [u8]> {
        if !self.ok(addr, len, true) {
            return None;
        }
        if len == 0 {
            return Some(&mut []);
        }
        // SAFETY: as in `read`, mapped writable; no other reference to program memory is
        // live while a handler holds this one (handlers copy through one at a time).
        Some(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len as usize) })
    }

    /// Copy `bytes` to the program at `addr`.
    pub fn put(&self, addr: u64, bytes: &[u8]) -> bool {
        match self.write(addr, bytes.len() as u64) {
            Some(d) => {
                d.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// The program's 32-bit word at `addr` as an atomic (futex words: other threads of the
    /// program change it meanwhile), if it is 4-aligned and readable (writable if `write`).
    pub fn atomic_u32(&self, addr: u64, write: bool) -> Option<&core::sync::atomic::AtomicU32> {
        if !addr.is_multiple_of(4) || !self.ok(addr, 4, write) {
            return None;
        }
        // SAFETY: `ok` found the 4 bytes mapped (writable if asked) in this address space and
        // the address is 4-aligned; the caller holds the process lock, so no other thread
        // unmaps them while the reference is used. Every access is atomic.
        Some(unsafe { &*(addr as *const core::sync::atomic::AtomicU32) })
    }

    pub fn get_u64(&self, addr: u64) -> Option<u64> {
        self.read(addr, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    /// A NUL-terminated string of at most `max` bytes (without the NUL).
    pub fn cstr(&self, addr: u64, max: usize) -> Result<&[u8], i64> {
        let mut n = 0u64;
        loop {
            // Page by page: the string may end just before an unmapped page.
            let page_end = (addr + n + 1).next_multiple_of(abi::PAGE_SIZE);
            let chunk = page_end - (addr + n);
            let bytes = self.read(addr + n, chunk).ok_or(-linuxabi::errno::EFAULT)?;
            if let Some(i) = bytes.iter().position(|&b| b == 0) {
                let total = n + i as u64;
                if total as usize > max {
                    return Err(-linuxabi::errno::ENAMETOOLONG);
                }
                return self.read(addr, total).ok_or(-linuxabi::errno::EFAULT);
            }
            n += chunk;
            if n as usize > max {
                return Err(-linuxabi::errno::ENAMETOOLONG);
            }
        }
    }
}

/// The bytes `[va, va + len)` that the loader, or `vm` (filling a file mapping, zeroing or
/// writing back a writable one), has mapped read-write itself.
pub(super) fn mapped_slice(va: u64, len: u64) -> &'static mut [u8] {
    // SAFETY: only called on a range the caller mapped read-write in this address space
    // (the loader's image, `vm`'s fill mapping, or a writable mapping of the window `vm`
    // records), with no other reference to those bytes alive while it uses them; the program
    // is stopped in a system call meanwhile.
    unsafe { core::slice::from_raw_parts_mut(va as *mut u8, len as usize) }
}

/// The words `[va, va + 8 * n)` of a segment mapped read-write in this address space for as
/// long as the caller uses them (the process table, `proc.rs`), as atomics: other processes
/// map the same segment and change them concurrently.
pub(super) fn mapped_words(va: u64, n: usize) -> &'static [core::sync::atomic::AtomicU64] {
    // SAFETY: the caller mapped `[va, va + 8 * n)` read-write (8-byte aligned, page-aligned
    // base) before the first call and unmaps it only after the last reference is dropped
    // (the session's end); every access goes through the atomics, so concurrent writers in
    // other address spaces mapping the same pages are fine.
    unsafe { core::slice::from_raw_parts(va as *const core::sync::atomic::AtomicU64, n) }
}

/// The two words at `va` (in a segment mapped as `mapped_words` requires) as a
/// `signal::SignalSlot`: the process table's slots hold each process's pending signals in
/// that layout, so delivery and remote posting use one structure.
pub(super) fn mapped_signal_slot(va: u64) -> &'static super::signal::SignalSlot {
    // SAFETY: as `mapped_words` (mapped read-write for as long as the reference is used:
    // the session's end puts the process back on `signal::OWN` first); `SignalSlot` is
    // `repr(C)` and two `AtomicU64`s, so any 8-byte-aligned pair of words is a valid one.
    unsafe { &*(va as *const super::signal::SignalSlot) }
}
