//! Page-table pages and entries. Address ranges (kernel/src/kobj/ar.rs) own table pages and
//! use these helpers to read and write entries through the physical window.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::mm::{phys_to_virt, PAGE_SIZE};

pub const PTE_PRESENT: u64 = 1 << 0;
pub const PTE_WRITE: u64 = 1 << 1;
pub const PTE_USER: u64 = 1 << 2;
pub const PTE_ACCESSED: u64 = 1 << 5;
pub const PTE_DIRTY: u64 = 1 << 6;
pub const PTE_HUGE: u64 = 1 << 7;
pub const PTE_NX: u64 = 1 << 63;
pub const PTE_ADDR_MASK: u64 = 0x000F_FFFF_FFFF_F000;

/// Flags for a table entry pointing at a lower-level user table: permissions are enforced
/// at the leaf, so intermediate entries allow everything.
pub const TABLE_FLAGS: u64 = PTE_PRESENT | PTE_WRITE | PTE_USER;

/// Level of a table: 4 = PML4, 3 = PDPT, 2 = page directory, 1 = page table.
pub fn index(level: u32, rel: u64) -> usize {
    ((rel >> (12 + 9 * (level - 1))) & 511) as usize
}

/// Bytes covered by one entry of a table at `level`.
pub fn entry_span(level: u32) -> u64 {
    PAGE_SIZE << (9 * (level - 1))
}

fn table(pa: u64) -> *mut u64 {
    phys_to_virt(pa) as *mut u64
}

pub fn read_entry(table_pa: u64, idx: usize) -> u64 {
    debug_assert!(idx < 512);
    // SAFETY: table_pa is a page-table page owned by an address range (or the boot PML4); it
    // is mapped in the physical window and idx < 512 stays inside it.
    unsafe { table(table_pa).add(idx).read_volatile() }
}

/// The first index in `[from, end)` (`end <= 512`) whose entry is not zero, or `end`. Eight
/// entries are read and or-ed together per step: a teardown scans mostly empty tables
/// (`kobj::ar::free_below`), where an entry at a time cost about six instructions each. The
/// caller holds the table (no entry of it changes meanwhile).
pub fn next_nonzero(table_pa: u64, from: usize, end: usize) -> usize {
    debug_assert!(end <= 512);
    let mut i = from;
    while i < end && i % 8 != 0 {
        if read_entry(table_pa, i) != 0 {
            return i;
        }
        i += 1;
    }
    while i + 8 <= end {
        // SAFETY: as for read_entry: `i + 8 <= end <= 512`, inside the table, which is
        // 8-byte aligned (a page); the caller holds the table, so plain reads see its state.
        let w = unsafe { core::ptr::read(table(table_pa).add(i) as *const [u64; 8]) };
        if w.iter().fold(0, |a, &e| a | e) != 0 {
            break;
        }
        i += 8;
    }
    while i < end {
        if read_entry(table_pa, i) != 0 {
            return i;
        }
        i += 1;
    }
    end
}

pub fn write_entry(table_pa: u64, idx: usize, value: u64) {
    debug_assert!(idx < 512);
    // SAFETY: as for read_entry; the caller holds the owning range's lock.
    unsafe { table(table_pa).add(idx).write_volatile(value) }
}

/// Where page-table pages come from and go back to: the frame allocator registers its two
/// functions once, at boot (`set_table_frames`), so paging does not depend on it. Until then
/// `alloc_table` finds no memory.
static TABLE_ALLOC: AtomicUsize = AtomicUsize::new(0);
static TABLE_FREE: AtomicUsize = AtomicUsize::new(0);

/// Register the functions that allocate (a page near core `home`) and free page-table pages.
pub fn set_table_frames(alloc: fn(usize) -> Option<u64>, free: fn(u64)) {
    TABLE_FREE.store(free as usize, Ordering::Release);
    TABLE_ALLOC.store(alloc as usize, Ordering::Release);
}

/// A zeroed page-table page from the NUMA node of core `home`.
pub fn alloc_table(home: u32) -> Option<u64> {
    let f = TABLE_ALLOC.load(Ordering::Acquire);
    if f == 0 {
        return None;
    }
    // SAFETY: only `fn(usize) -> Option<u64>` values are stored in TABLE_ALLOC.
    let alloc: fn(usize) -> Option<u64> = unsafe { core::mem::transmute::<usize, fn(usize) -> Option<u64>>(f) };
    let pa = alloc(home as usize)?;
    // SAFETY: a page we just allocated.
    unsafe { core::ptr::write_bytes(table(pa), 0, 512) };
    Some(pa)
}

/// Give back a page from `alloc_table` (so its allocator was registered).
pub fn free_table(pa: u64) {
    let f = TABLE_FREE.load(Ordering::Acquire);
    debug_assert!(f != 0, "free_table before set_table_frames");
    if f != 0 {
        // SAFETY: only `fn(u64)` values are stored in TABLE_FREE.
        let free: fn(u64) = unsafe { core::mem::transmute::<usize, fn(u64)>(f) };
        free(pa);
    }
}

/// Copy the kernel half (entries 256..512) of the boot PML4 into a new root table.
pub fn copy_kernel_half(root_pa: u64) {
    let boot = super::boot::boot_pml4_phys();
    for i in 256..512 {
        write_entry(root_pa, i, read_entry(boot, i));
    }
}

#[inline]
pub fn invlpg(va: u64) {
    // SAFETY: invalidating a TLB entry has no memory-safety effect.
    unsafe { core::arch::asm!("invlpg [{}]", in(reg) va, options(nostack, preserves_flags)) }
}

/// Switch this core to the page tables rooted at `pml4_pa`.
pub fn load_root(pml4_pa: u64) {
    // SAFETY: the root's kernel half is a copy of the boot PML4, so the kernel stays mapped.
    unsafe { core::arch::asm!("mov cr3, {}", in(reg) pml4_pa, options(nostack, preserves_flags)) }
}

/// The kernel's own root (used by idle cores and while a context's root is torn down).
pub fn load_kernel_root() {
    load_root(super::boot::boot_pml4_phys());
}
