//! The first instructions: PVH and Multiboot2 entry in 32-bit protected mode, the switch to
//! long mode with boot page tables, and the real-mode trampoline that application processors
//! start in.
//!
//! Boot page tables map the low 4 GiB three times: identity (needed while switching modes and
//! by the AP trampoline; removed once every core is up), the physical-memory window at
//! `PHYS_OFFSET`, and the kernel image at `KERNEL_VMA`. 3–4 GiB is the PCI hole on q35 and is
//! mapped uncached, which covers the local APIC, the I/O APIC and HPET.

use core::arch::global_asm;

/// Protocol codes the 32-bit entry passes to `kernel_entry`.
pub const BOOT_PVH: u32 = 1;
pub const BOOT_MULTIBOOT2: u32 = 2;

/// Physical address the AP trampoline is copied to (SIPI vector 0x08).
pub const TRAMPOLINE_PHYS: u64 = 0x8000;

global_asm!(
    r#"
    .set KERNEL_VMA, 0xFFFFFFFF80000000
    .set COM1, 0x3F8
    .set DEBUG_EXIT, 0xF4

/* ---------- Multiboot2 header (GRUB, for the ISO) ---------- */
    .section .multiboot2, "a"
    .balign 8
mb2_header:
    .long 0xE85250D6
    .long 0
    .long mb2_header_end - mb2_header
    .long 0x100000000 - (0xE85250D6 + (mb2_header_end - mb2_header))
    .balign 8
    /* entry address tag: start in mb2_start32 */
    .short 3
    .short 0
    .long 12
    .long mb2_start32
    .balign 8
    .short 0
    .short 0
    .long 8
mb2_header_end:

/* ---------- PVH ELF note (QEMU -kernel) ---------- */
    .section .note.pvh, "a", @note
    .balign 4
    /* QEMU reads the descriptor as 8 bytes at a 4-byte-aligned offset, as for Linux. */
    .long 4
    .long 8
    .long 18            /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .balign 4
    .quad pvh_start32
    .balign 4

/* ---------- 32-bit entry ---------- */
    .section .boot.text, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov $1, %edi              /* BOOT_PVH; ebx = hvm_start_info */
    mov %ebx, %esi
    jmp common32

    .global mb2_start32
mb2_start32:
    cli
    cld
    mov $2, %edi              /* BOOT_MULTIBOOT2; ebx = boot information */
    mov %ebx, %esi
    cmp $0x36D76289, %eax
    je common32
    mov $msg_bad_loader, %esi
    jmp fail32

common32:
    mov $boot_stack_top, %esp
    mov %edi, boot_protocol
    mov %esi, boot_info_phys

    /* Long mode present? (CPUID 0x80000001 EDX bit 29) */
    mov $0x80000000, %eax
    cpuid
    cmp $0x80000001, %eax
    jb no_long_mode
    mov $0x80000001, %eax
    cpuid
    test $(1 << 29), %edx
    jz no_long_mode
    xor %ebx, %ebx
    test $(1 << 20), %edx     /* NX available: set EFER.NXE */
    jz 1f
    mov $(1 << 11), %ebx
1:  mov %ebx, boot_efer_extra

    /* Zero the boot page tables (7 pages). */
    mov $boot_pml4, %edi
    mov $(7 * 4096 / 4), %ecx
    xor %eax, %eax
    rep stosl

    /* PML4: identity, physical window (entry 256) and kernel image (entry 511). */
    mov $boot_pdpt_low, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov %eax, boot_pml4 + 256 * 8
    mov $boot_pdpt_high, %eax
    or $3, %eax
    mov %eax, boot_pml4 + 511 * 8

    /* PDPT low: four page directories covering 0..4 GiB. */
    mov $boot_pd, %eax
    or $3, %eax
    mov %eax, boot_pdpt_low
    add $4096, %eax
    mov %eax, boot_pdpt_low + 8
    add $4096, %eax
    mov %eax, boot_pdpt_low + 16
    add $4096, %eax
    mov %eax, boot_pdpt_low + 24

    /* PDPT high: entry 510 (0xFFFFFFFF80000000) maps the first GiB. */
    mov $boot_pd, %eax
    or $3, %eax
    mov %eax, boot_pdpt_high + 510 * 8

    /* 2048 large-page entries: present, writable, 2 MiB; uncached in 3..4 GiB. */
    mov $boot_pd, %edi
    xor %ecx, %ecx
2:  mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    cmp $1536, %ecx
    jb 3f
    or $0x18, %eax
3:  mov %eax, (%edi, %ecx, 8)
    mov %ecx, %eax
    shr $11, %eax             /* high dword: (index << 21) >> 32 */
    mov %eax, 4(%edi, %ecx, 8)
    inc %ecx
    cmp $2048, %ecx
    jb 2b

    /* PAE on, CR3, EFER.LME (+NXE), paging and write-protect on. */
    mov %cr4, %eax
    or $(1 << 5), %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $(1 << 8), %eax
    or boot_efer_extra, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0
    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_low

no_long_mode:
    mov $msg_no_lm, %esi
fail32:
    /* Print the NUL-terminated string at esi on COM1, then stop with the failure code. */
4:  lodsb
    test %al, %al
    jz 6f
    mov %al, %bl
5:  mov $(COM1 + 5), %dx
    in %dx, %al
    test $0x20, %al
    jz 5b
    mov $COM1, %dx
    mov %bl, %al
    out %al, %dx
    jmp 4b
6:  mov $DEBUG_EXIT, %dx
    mov $0x11, %eax
    out %eax, %dx
7:  cli
    hlt
    jmp 7b

    .code64
long_mode_low:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    movabs $long_mode_high, %rax
    jmp *%rax

/* ---------- AP trampoline template, copied to TRAMPOLINE_PHYS ---------- */
    .set TR, 0x8000
    .balign 16
    .global ap_trampoline_start
ap_trampoline_start:
    .code16
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl TR + (tramp_gdt_ptr - ap_trampoline_start)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(TR + (tramp32 - ap_trampoline_start))
    .code32
tramp32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $(1 << 5), %eax
    mov %eax, %cr4
    mov TR + (tramp_cr3 - ap_trampoline_start), %eax
    mov %eax, %cr3
    mov $0xC0000080, %ecx
    rdmsr
    or $(1 << 8), %eax
    or TR + (tramp_efer_extra - ap_trampoline_start), %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0
    ljmp $0x18, $(TR + (tramp64 - ap_trampoline_start))
    .code64
tramp64:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov TR + (tramp_stack - ap_trampoline_start), %rsp
    mov TR + (tramp_cpu - ap_trampoline_start), %edi
    mov TR + (tramp_entry - ap_trampoline_start), %rax
    xor %ebp, %ebp
    jmp *%rax
    .balign 8
tramp_gdt:
    .quad 0
    .quad 0x00CF9A000000FFFF      /* 0x08: 32-bit code */
    .quad 0x00CF92000000FFFF      /* 0x10: data */
    .quad 0x00AF9A000000FFFF      /* 0x18: 64-bit code */
tramp_gdt_ptr:
    .short 4 * 8 - 1
    .long TR + (tramp_gdt - ap_trampoline_start)
    .balign 8
    .global ap_tramp_cr3
ap_tramp_cr3:
tramp_cr3:
    .quad 0
tramp_efer_extra:
    .quad 0
tramp_stack:
    .quad 0
tramp_entry:
    .quad 0
tramp_cpu:
    .quad 0
    .global ap_trampoline_end
ap_trampoline_end:

/* ---------- boot data ---------- */
    .section .boot.data, "aw"
    .balign 8
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF      /* 0x08: 64-bit code */
    .quad 0x00CF92000000FFFF      /* 0x10: data */
boot_gdt_ptr:
    .short 3 * 8 - 1
    .quad boot_gdt
    .global boot_protocol
boot_protocol:
    .long 0
    .global boot_info_phys
boot_info_phys:
    .long 0
    .global boot_efer_extra
boot_efer_extra:
    .long 0
msg_no_lm:
    .asciz "boot: failed: CPU lacks long mode (x86-64); this kernel needs a 64-bit CPU\r\n"
msg_bad_loader:
    .asciz "boot: failed: not started by a Multiboot2 or PVH loader\r\n"

    .section .boot.bss, "aw", @nobits
    .balign 4096
    .global boot_pml4
boot_pml4:
    .skip 4096
    .global boot_pdpt_low
boot_pdpt_low:
    .skip 4096
boot_pdpt_high:
    .skip 4096
boot_pd:
    .skip 4 * 4096
    .balign 16
    .skip 4096
boot_stack_top:

/* ---------- 64-bit higher-half entry ---------- */
    .section .text.boot64, "ax"
    .code64
long_mode_high:
    movabs $bsp_stack_top, %rsp
    xor %ebp, %ebp
    mov boot_protocol, %edi
    mov boot_info_phys, %esi
    call kernel_entry
8:  cli
    hlt
    jmp 8b

    .section .bss.bsp_stack, "aw", @nobits
    .balign 4096
    .skip 64 * 1024
bsp_stack_top:
"#,
    options(att_syntax)
);

extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
    static ap_tramp_cr3: u8;
    static boot_pml4: u8;
    static boot_pdpt_low: u8;
    static boot_efer_extra: u32;
}

/// Byte offsets of the trampoline's parameter slots, relative to `ap_tramp_cr3`.
pub const TRAMP_SLOT_CR3: usize = 0;
pub const TRAMP_SLOT_EFER: usize = 8;
pub const TRAMP_SLOT_STACK: usize = 16;
pub const TRAMP_SLOT_ENTRY: usize = 24;
pub const TRAMP_SLOT_CPU: usize = 32;

/// The trampoline template: (physical start, length, offset of the parameter slots).
pub fn trampoline_template() -> (u64, usize, usize) {
    // SAFETY: the symbols are defined in the assembly above; only their addresses are taken.
    unsafe {
        let start = &ap_trampoline_start as *const u8 as u64;
        let end = &ap_trampoline_end as *const u8 as u64;
        let slots = &ap_tramp_cr3 as *const u8 as u64;
        (start, (end - start) as usize, (slots - start) as usize)
    }
}

/// Physical address of the boot PML4 (every core runs on it for now).
pub fn boot_pml4_phys() -> u64 {
    // SAFETY: address of a linker-placed symbol; .boot is linked at its physical address.
    unsafe { &boot_pml4 as *const u8 as u64 }
}

/// The EFER bits the BSP enabled beyond LME (NXE when the CPU has it).
pub fn efer_extra() -> u32 {
    // SAFETY: written once by the 32-bit entry before any Rust code ran. .boot is linked at its
    // physical address, and the identity map is gone after boot: read through the window.
    unsafe { core::ptr::read_volatile(crate::mm::phys_to_virt(&boot_efer_extra as *const u32 as u64) as *const u32) }
}

/// Drop the identity mapping of the low 4 GiB (PML4 entry 0) once every core runs in the
/// higher half, so null and low user addresses fault in the kernel. Callers flush TLBs.
pub fn remove_identity_map() {
    let pml4 = crate::mm::phys_to_virt(boot_pml4_phys()) as *mut u64;
    // SAFETY: entry 0 is the identity map; nothing runs at low addresses any more (the AP
    // trampoline has finished on every core that will start).
    unsafe { pml4.write_volatile(0) };
    super::cpu::flush_tlb_local();
}

/// Extend the physical window beyond the 4 GiB the boot tables map, with 2 MiB pages, so
/// RAM up to `end` (at most 512 GiB) is reachable. `take_page` supplies zeroed-or-not page
/// frames for page directories (they are cleared here). Single-threaded boot only.
pub fn extend_phys_window(end: u64, mut take_page: impl FnMut() -> Option<u64>) -> Result<u64, &'static str> {
    const GIB: u64 = 1 << 30;
    let end = end.min(512 * GIB);
    // SAFETY: address of a linker-placed symbol; .boot is linked at its physical address.
    let pdpt = crate::mm::phys_to_virt(unsafe { &boot_pdpt_low as *const u8 as u64 }) as *mut u64;
    let mut gib = 4;
    while gib * GIB < end {
        let pd = take_page().ok_or("no memory for page directories of the physical window")?;
        let pd_virt = crate::mm::phys_to_virt(pd) as *mut u64;
        for i in 0..512u64 {
            let pa = gib * GIB + i * (2 << 20);
            // SAFETY: pd is a page we own; writing its 512 entries maps [gib, gib+1) GiB with
            // present, writable, 2 MiB pages.
            unsafe { pd_virt.add(i as usize).write_volatile(pa | 0x83) };
        }
        // SAFETY: entry `gib` of the low PDPT is unused (the boot code fills entries 0..4).
        unsafe { pdpt.add(gib as usize).write_volatile(pd | 0x3) };
        gib += 1;
    }
    super::cpu::flush_tlb_local();
    Ok(end.max(4 * GIB))
}

/// Start of the kernel's MMIO window: PML4 entry 257, right after the physical window. Device
/// registers above 4 GiB (64-bit PCI BARs, which firmware places high) are mapped here,
/// uncached, by [`map_mmio`].
pub const MMIO_WINDOW: u64 = 0xFFFF_8080_0000_0000;
const MMIO_WINDOW_BYTES: u64 = 512 << 30;

/// Mapped MMIO ranges `(physical start, virtual start, bytes)`, 2 MiB-aligned; filled at boot
/// only (one core runs), read afterwards.
static MMIO_MAPS: percore::TicketLock<[(u64, u64, u64); 32]> = percore::TicketLock::new([(0, 0, 0); 32]);
static MMIO_NEXT: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(MMIO_WINDOW);

/// Where `[pa, pa + len)` of device memory is mapped in the kernel, if it is: the low 4 GiB
/// through the physical window (3–4 GiB uncached), anything else through [`map_mmio`].
pub fn mmio_virt(pa: u64, len: u64) -> Option<u64> {
    let end = pa.checked_add(len)?;
    if end <= 4 << 30 {
        return Some(crate::mm::phys_to_virt(pa));
    }
    let maps = MMIO_MAPS.lock();
    maps.iter().find(|&&(p, _, l)| l > 0 && p <= pa && end <= p + l).map(|&(p, v, _)| v + (pa - p))
}

/// Map device memory `[pa, pa + len)` uncached into the MMIO window (boot only: the window's
/// tables are linked into the boot PML4, whose kernel half every address range copies when it
/// is made, so this must run before the first user range exists). Page-table pages come from
/// the frame allocator and are never freed. Returns the virtual address of `pa`.
pub fn map_mmio(pa: u64, len: u64) -> Result<u64, &'static str> {
    if let Some(v) = mmio_virt(pa, len) {
        return Ok(v);
    }
    const TWO_MIB: u64 = 2 << 20;
    let start = pa & !(TWO_MIB - 1);
    let end = pa.checked_add(len).ok_or("mmio: range overflows")?.next_multiple_of(TWO_MIB);
    let bytes = end - start;
    let mut maps = MMIO_MAPS.lock();
    let slot = maps.iter().position(|m| m.2 == 0).ok_or("mmio: too many device ranges")?;
    let va = MMIO_NEXT.load(core::sync::atomic::Ordering::Relaxed);
    if va + bytes > MMIO_WINDOW + MMIO_WINDOW_BYTES {
        return Err("mmio: window full");
    }
    let pml4 = boot_pml4_phys();
    let alloc_table = || super::paging::alloc_table(0).ok_or("mmio: no memory for page tables");
    let pml4_idx = super::paging::index(4, MMIO_WINDOW);
    let mut pdpt = super::paging::read_entry(pml4, pml4_idx) & super::paging::PTE_ADDR_MASK;
    if pdpt == 0 {
        pdpt = alloc_table()?;
        super::paging::write_entry(pml4, pml4_idx, pdpt | 0x3);
    }
    let mut off = 0;
    while off < bytes {
        let v = va + off;
        let pdpt_idx = super::paging::index(3, v);
        let mut pd = super::paging::read_entry(pdpt, pdpt_idx) & super::paging::PTE_ADDR_MASK;
        if pd == 0 {
            pd = alloc_table()?;
            super::paging::write_entry(pdpt, pdpt_idx, pd | 0x3);
        }
        // Present, writable, 2 MiB, cache disabled and write-through (device registers).
        super::paging::write_entry(pd, super::paging::index(2, v), (start + off) | 0x83 | 0x18);
        off += TWO_MIB;
    }
    maps[slot] = (start, va, bytes);
    MMIO_NEXT.store(va + bytes, core::sync::atomic::Ordering::Relaxed);
    super::cpu::flush_tlb_local();
    Ok(va + (pa - start))
}
