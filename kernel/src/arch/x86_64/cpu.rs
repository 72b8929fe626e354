//! Thin wrappers over privileged instructions: port I/O, MSRs, control registers, CPUID,
//! TSC, interrupt flag.

use core::arch::asm;

#[inline]
pub fn outb(port: u16, value: u8) {
    // SAFETY: port I/O has no memory effects visible to Rust; callers choose ports whose
    // side effects they own (serial, PIT, debug-exit).
    unsafe { asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags)) }
}

#[inline]
pub fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: see outb.
    unsafe { asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack, preserves_flags)) }
    v
}

#[inline]
pub fn outl(port: u16, value: u32) {
    // SAFETY: see outb.
    unsafe { asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags)) }
}

#[inline]
pub fn rdmsr(msr: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: callers read architectural MSRs that exist on every x86-64 CPU we boot on, or
    // that they checked CPUID for.
    unsafe { asm!("rdmsr", in("ecx") msr, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) }
    ((hi as u64) << 32) | lo as u64
}

#[inline]
pub fn wrmsr(msr: u32, value: u64) {
    // SAFETY: as for rdmsr; the caller owns the state the MSR controls.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32, options(nostack, preserves_flags))
    }
}

pub const MSR_APIC_BASE: u32 = 0x1B;
pub const MSR_EFER: u32 = 0xC000_0080;
pub const MSR_GS_BASE: u32 = 0xC000_0101;
pub const MSR_KERNEL_GS_BASE: u32 = 0xC000_0102;

#[derive(Clone, Copy, Debug, Default)]
pub struct CpuidResult {
    pub eax: u32,
    pub ebx: u32,
    pub ecx: u32,
    pub edx: u32,
}

#[inline]
pub fn cpuid(leaf: u32, subleaf: u32) -> CpuidResult {
    // CPUID is available on every x86-64 CPU (safe since Rust 1.87).
    let r = core::arch::x86_64::__cpuid_count(leaf, subleaf);
    CpuidResult { eax: r.eax, ebx: r.ebx, ecx: r.ecx, edx: r.edx }
}

/// A user context's x87/SSE state: FXSAVE's 512-byte area. The kernel is built without SSE
/// and uses no x87 instruction, so between a context's user code and the next context's the
/// registers hold the first context's state; a time-sharing core saves and restores it at
/// every switch (`sched`), so two programs on one core do not see each other's.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct FpState(pub [u8; 512]);

impl FpState {
    /// The state a new context starts with: x87 as after FNINIT (control word 0x037F, every
    /// register empty), SSE's default MXCSR 0x1F80 (all exceptions masked), zeroed registers.
    pub const fn initial() -> FpState {
        let mut b = [0u8; 512];
        b[0] = 0x7f;
        b[1] = 0x03;
        b[24] = 0x80;
        b[25] = 0x1f;
        FpState(b)
    }
}

/// Save this core's x87/SSE registers into `area`.
#[inline]
pub fn fxsave(area: &mut FpState) {
    // SAFETY: FXSAVE64 writes 512 bytes at a 16-byte-aligned address: `area` is exactly that
    // (repr align 16), and CR4.OSFXSR is set at boot (syscall::init).
    unsafe { asm!("fxsave64 [{}]", in(reg) area.0.as_mut_ptr(), options(nostack, preserves_flags)) }
}

/// Load this core's x87/SSE registers from `area` (saved by `fxsave`, or `FpState::initial`).
#[inline]
pub fn fxrstor(area: &FpState) {
    // SAFETY: FXRSTOR64 reads 512 bytes at a 16-byte-aligned address; every `FpState` holds a
    // valid image (reserved MXCSR bits clear: `initial`, or what FXSAVE wrote).
    unsafe { asm!("fxrstor64 [{}]", in(reg) area.0.as_ptr(), options(nostack, readonly, preserves_flags)) }
}

#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Tell the insncount plugin that what this core ran since its last pass marker was work
/// (`work`) or polling that found nothing (tools/qemu-plugins/marker.h, values 6 and 7). The
/// bytes are the plugin's marker sequence, emitted literally and 8-byte aligned so that they
/// never straddle a page (the plugin reads them from one page). Without the plugin the port
/// write goes nowhere (nothing is attached to the marker port, `gdt::MARKER_PORT`).
#[inline]
pub fn insn_pass_marker(work: bool) {
    if work {
        // SAFETY: a write to the unassigned marker port; no memory, stack or flags touched.
        unsafe { asm!(".p2align 3", "mov dx, 0x501", "mov al, 6", "out dx, al", out("dx") _, out("al") _, options(nomem, nostack, preserves_flags)) }
    } else {
        // SAFETY: as above.
        unsafe { asm!(".p2align 3", "mov dx, 0x501", "mov al, 7", "out dx, al", out("dx") _, out("al") _, options(nomem, nostack, preserves_flags)) }
    }
}

#[inline]
pub fn read_cr2() -> u64 {
    let v: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) }
    v
}

#[inline]
pub fn read_cr3() -> u64 {
    let v: u64;
    // SAFETY: reading CR3 has no side effects.
    unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) }
    v
}

/// Reload CR3 with the same value: flushes this core's non-global TLB entries.
#[inline]
pub fn flush_tlb_local() {
    // SAFETY: writing back the current CR3 keeps the same address space.
    unsafe { asm!("mov rax, cr3", "mov cr3, rax", out("rax") _, options(nostack, preserves_flags)) }
}

#[inline]
pub fn read_cr4() -> u64 {
    let v: u64;
    // SAFETY: reading CR4 has no side effects.
    unsafe { asm!("mov {}, cr4", out(reg) v, options(nomem, nostack, preserves_flags)) }
    v
}

#[inline]
pub fn write_cr4(v: u64) {
    // SAFETY: callers only set feature bits they checked CPUID for.
    unsafe { asm!("mov cr4, {}", in(reg) v, options(nostack, preserves_flags)) }
}

#[inline]
pub fn interrupts_enabled() -> bool {
    let flags: u64;
    // SAFETY: reading RFLAGS has no side effects.
    unsafe { asm!("pushfq", "pop {}", out(reg) flags, options(nomem, preserves_flags)) }
    flags & (1 << 9) != 0
}

#[inline]
pub fn disable_interrupts() {
    // SAFETY: masking interrupts on this core cannot break memory safety.
    unsafe { asm!("cli", options(nomem, nostack)) }
}

#[inline]
pub fn enable_interrupts() {
    // SAFETY: handlers are installed before any code enables interrupts.
    unsafe { asm!("sti", options(nomem, nostack)) }
}

/// Enable interrupts and halt until one arrives, atomically (no lost wake-up).
#[inline]
pub fn enable_and_halt() {
    // SAFETY: `sti; hlt` is the standard idle sequence; the interrupt shadow of sti makes
    // the pair atomic.
    unsafe { asm!("sti", "hlt", options(nomem, nostack)) }
}

/// Halt with interrupts off, forever.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: stopping the core is always allowed.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) }
    }
}

/// Save the interrupt flag and disable interrupts; returns the token for `irq_restore`.
pub fn irq_save() -> usize {
    let was = interrupts_enabled();
    disable_interrupts();
    was as usize
}

pub fn irq_restore(token: usize) {
    if token != 0 {
        enable_interrupts();
    }
}

/// Run `f` with interrupts disabled on this core.
#[inline]
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let t = irq_save();
    let r = f();
    irq_restore(t);
    r
}

/// Stop the virtual machine through QEMU's isa-debug-exit device (then halt, on hardware).
pub fn exit_qemu(success: bool) -> ! {
    outl(0xF4, if success { 0x10 } else { 0x11 });
    halt_forever()
}

/// Read the frame-pointer register (for backtraces).
#[inline(always)]
pub fn frame_pointer() -> u64 {
    let v: u64;
    // SAFETY: reading RBP has no side effects.
    unsafe { asm!("mov {}, rbp", out(reg) v, options(nomem, nostack, preserves_flags)) }
    v
}
