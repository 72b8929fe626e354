//! Memory: the physical window, per-node page pools with per-core caches (`frame`), and the
//! kernel heap with per-core slabs (`heap`). This module and `arch/` are where raw pointers
//! into physical memory live.

pub mod frame;
pub mod heap;
pub mod inject;
pub mod nodevec;

use core::sync::atomic::{AtomicU64, Ordering};

/// All physical memory is mapped at this offset (PML4 entry 256).
pub const PHYS_OFFSET: u64 = 0xFFFF_8000_0000_0000;
pub const PAGE_SIZE: u64 = 4096;
pub const LARGE_PAGE_SIZE: u64 = 2 * 1024 * 1024;

/// End of the physical window mapped so far (the boot tables map 4 GiB).
static MAPPED_PHYS_END: AtomicU64 = AtomicU64::new(4 << 30);
/// End of usable RAM (for address checks).
static RAM_END: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn phys_to_virt(pa: u64) -> u64 {
    pa + PHYS_OFFSET
}

#[inline]
pub fn virt_to_phys(va: u64) -> u64 {
    if va >= KERNEL_VMA {
        va - KERNEL_VMA
    } else {
        va - PHYS_OFFSET
    }
}

pub const KERNEL_VMA: u64 = 0xFFFF_FFFF_8000_0000;

pub fn set_mapped_phys_end(end: u64) {
    MAPPED_PHYS_END.store(end, Ordering::Relaxed);
}

pub fn mapped_phys_end() -> u64 {
    MAPPED_PHYS_END.load(Ordering::Relaxed)
}

pub fn set_ram_end(end: u64) {
    RAM_END.store(end, Ordering::Relaxed);
}

/// Read a `T` from physical memory, if the address lies in the mapped window.
pub fn read_phys<T: Copy>(pa: u64) -> Option<T> {
    let end = pa.checked_add(core::mem::size_of::<T>() as u64)?;
    if end > MAPPED_PHYS_END.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: the range lies inside the physical window, which is mapped for the whole
    // lifetime of the kernel; read_unaligned copes with any alignment, and T: Copy means a
    // bitwise copy is a valid value for the plain-data firmware structures we read.
    Some(unsafe { core::ptr::read_unaligned(phys_to_virt(pa) as *const T) })
}

/// Copy `buf.len()` bytes from physical memory. Returns false if out of the window.
pub fn read_phys_bytes(pa: u64, buf: &mut [u8]) -> bool {
    let Some(end) = pa.checked_add(buf.len() as u64) else { return false };
    if end > MAPPED_PHYS_END.load(Ordering::Relaxed) {
        return false;
    }
    // SAFETY: as for read_phys; the destination is a distinct Rust buffer.
    unsafe { core::ptr::copy_nonoverlapping(phys_to_virt(pa) as *const u8, buf.as_mut_ptr(), buf.len()) };
    true
}

extern "C" {
    static __kernel_phys_start: u8;
    static __kernel_end: u8;
    static __text_start: u8;
    static __text_end: u8;
}

/// Boot-time allocations placed right after the image (page directories of the physical
/// window) extend the reserved range to here.
static RESERVED_AFTER_KERNEL: AtomicU64 = AtomicU64::new(0);

pub fn reserve_after_kernel(end: u64) {
    RESERVED_AFTER_KERNEL.fetch_max(end, Ordering::Relaxed);
}

/// Physical range [start, end) the kernel image (and boot-time data right after it) occupies.
pub fn kernel_image_phys() -> (u64, u64) {
    // SAFETY: linker-provided symbols; only addresses are taken.
    let (start, end) = unsafe { (&__kernel_phys_start as *const u8 as u64, virt_to_phys(&__kernel_end as *const u8 as u64)) };
    (start, end.max(RESERVED_AFTER_KERNEL.load(Ordering::Relaxed)))
}

pub fn kernel_text_range() -> (u64, u64) {
    // SAFETY: linker-provided symbols; only addresses are taken.
    unsafe { (&__text_start as *const u8 as u64, &__text_end as *const u8 as u64) }
}

/// True if `addr` is mapped kernel memory that can hold a stack: the image (the BSP stack is
/// in .bss) or RAM in the physical window (stacks allocated from frames).
pub fn is_kernel_stack_address(addr: u64) -> bool {
    let (_, img_end_phys) = kernel_image_phys();
    let img = KERNEL_VMA..KERNEL_VMA + img_end_phys;
    let ram_end = RAM_END.load(Ordering::Relaxed).min(MAPPED_PHYS_END.load(Ordering::Relaxed));
    img.contains(&addr) || (addr >= PHYS_OFFSET && addr.saturating_add(16) <= PHYS_OFFSET + ram_end)
}
