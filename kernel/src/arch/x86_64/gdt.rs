//! Per-core GDT and TSS. Each core has its own pair (the TSS holds that core's interrupt
//! stacks), so no core ever writes another's descriptor tables.

use core::arch::asm;

pub const KERNEL_CS: u16 = 0x08;
pub const KERNEL_DS: u16 = 0x10;
/// Base of the user selectors for SYSRET: user SS = base + 8, user CS = base + 16.
pub const USER_BASE: u16 = 0x18;
pub const USER_DS: u16 = 0x20 | 3;
pub const USER_CS: u16 = 0x28 | 3;
pub const TSS_SEL: u16 = 0x30;

/// IST slots (1-based in the IDT): double fault, NMI, machine check each get a clean stack.
pub const IST_DOUBLE_FAULT: u8 = 1;
pub const IST_NMI: u8 = 2;
pub const IST_MACHINE_CHECK: u8 = 3;
pub const IST_STACK_SIZE: usize = 16 * 1024;

/// The one I/O port user mode may write: the measurement plugins' region marker
/// (tools/qemu-plugins/marker.h). Nothing is attached to it, so the write itself is a no-op.
pub const MARKER_PORT: u16 = 0x501;
const IOMAP_BYTES: usize = MARKER_PORT as usize / 8 + 1;

#[repr(C, packed(4))]
pub struct Tss {
    _reserved0: u32,
    pub rsp: [u64; 3],
    _reserved1: u64,
    pub ist: [u64; 7],
    _reserved2: u64,
    _reserved3: u16,
    pub iomap_base: u16,
    /// I/O permission bitmap (1 = denied) up to the marker port, then the 0xFF terminator
    /// the CPU requires. Ports beyond the TSS limit are denied.
    iomap: [u8; IOMAP_BYTES],
    iomap_end: u8,
}

impl Default for Tss {
    fn default() -> Self {
        let mut iomap = [0xFF; IOMAP_BYTES];
        iomap[MARKER_PORT as usize / 8] &= !(1 << (MARKER_PORT % 8));
        Tss {
            _reserved0: 0,
            rsp: [0; 3],
            _reserved1: 0,
            ist: [0; 7],
            _reserved2: 0,
            _reserved3: 0,
            iomap_base: 0,
            iomap,
            iomap_end: 0xFF,
        }
    }
}

#[repr(C, align(16))]
pub struct Gdt {
    entries: [u64; 8],
}

impl Gdt {
    pub const fn empty() -> Self {
        Self { entries: [0; 8] }
    }
}

#[repr(C, packed(2))]
struct DescriptorPointer {
    limit: u16,
    base: u64,
}

/// Fill `gdt` with our segments and a TSS descriptor for `tss`, and load both.
pub fn load(gdt: &'static mut Gdt, tss: &'static mut Tss) {
    tss.iomap_base = core::mem::offset_of!(Tss, iomap) as u16;
    let tss_addr = tss as *const Tss as u64;
    let tss_limit = (core::mem::size_of::<Tss>() - 1) as u64;
    gdt.entries = [
        0,
        0x00AF_9A00_0000_FFFF, // 0x08 kernel code 64
        0x00CF_9200_0000_FFFF, // 0x10 kernel data
        0x00CF_FA00_0000_FFFF, // 0x18 user code 32 (unused, required by the SYSRET layout)
        0x00CF_F200_0000_FFFF, // 0x20 user data
        0x00AF_FA00_0000_FFFF, // 0x28 user code 64
        // 0x30 TSS (16 bytes): type 9 (available 64-bit TSS), present.
        (tss_limit & 0xFFFF)
            | ((tss_addr & 0xFF_FFFF) << 16)
            | (0x89 << 40)
            | (((tss_limit >> 16) & 0xF) << 48)
            | (((tss_addr >> 24) & 0xFF) << 56),
        tss_addr >> 32,
    ];
    let ptr = DescriptorPointer { limit: (core::mem::size_of::<Gdt>() - 1) as u16, base: gdt as *const Gdt as u64 };
    // SAFETY: the GDT and TSS are 'static and stay valid for as long as this core runs; the
    // reload keeps the same selector values the boot GDT used for code and data.
    unsafe {
        asm!(
            "lgdt [{ptr}]",
            "push {cs}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {ds:x}",
            "mov es, {ds:x}",
            "mov ss, {ds:x}",
            "ltr {tss:x}",
            ptr = in(reg) &ptr,
            cs = in(reg) KERNEL_CS as u64,
            ds = in(reg) KERNEL_DS as u64,
            tss = in(reg) TSS_SEL as u64,
            tmp = out(reg) _,
        );
    }
}
