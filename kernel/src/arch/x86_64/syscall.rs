//! Ring 3: `syscall`/`sysret` entry, entering and leaving a user context, and copying to and
//! from user memory without ever faulting the kernel.
//!
//! Per-CPU fields used from assembly (offsets fixed in `percpu.rs`):
//! `gs:16` user rsp scratch, `gs:24` top of this core's user-entry stack (also TSS.rsp0),
//! `gs:32` exit-requested flag, `gs:40` kernel rsp to return to when the context ends.

use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, Ordering};

use super::cpu::{self, rdmsr, wrmsr, MSR_EFER};
use super::gdt::{KERNEL_CS, USER_BASE};
use super::idt::{GeneralRegs, TrapFrame};
use crate::percpu::{CpuStats, PerCpu, NOT_IN_CALL};

/// One past the highest system-call number: the size of the call tables (`FAST_HANDLERS`,
/// built by `crate::syscall`) that `syscall_entry` indexes. Higher numbers go to
/// `syscall_dispatch`, which answers `NoSuchCall`.
pub const CALLS: usize = 96;

// `syscall_entry` sets and clears `injectable` and `in_call` with one 16-bit store, and
// counts calls in `stats.syscalls` (a `CachePadded`, whose value is at its offset 0).
const _: () = {
    assert!(core::mem::offset_of!(PerCpu, in_call) == core::mem::offset_of!(PerCpu, injectable) + 1);
    assert!(core::mem::size_of::<core::sync::atomic::AtomicBool>() == 1);
    assert!(core::mem::size_of::<PerCpu>() < (1 << 31));
    // The fast path stores the call's number as `injectable`: every number it takes (below
    // `CALLS`) must fit in the byte and differ from `NOT_IN_CALL`.
    assert!(CALLS <= NOT_IN_CALL as usize);
};

const MSR_STAR: u32 = 0xC000_0081;
const MSR_LSTAR: u32 = 0xC000_0082;
const MSR_SFMASK: u32 = 0xC000_0084;

/// Whether SMAP is on (then user accesses are bracketed by stac/clac).
#[no_mangle]
static SMAP_ENABLED: AtomicBool = AtomicBool::new(false);
static SMEP_ENABLED: AtomicBool = AtomicBool::new(false);

global_asm!(
    r#"
    /* The pieces the ways into and out of user mode share. The entry saves, in this
       order, the user rsp, r11 (rflags) and rcx (rip) on the core's entry stack; a call
       that passes its arguments to Rust saves the argument registers below them. */

    /* Save the argument registers a3..a5, a1 and a2 (rdi, a0, is the caller's to save or
       not: the bound-gate path puts it back instead). */
    .macro push_call_args
    push %r9
    push %r8
    push %r10
    push %rdx
    push %rsi
    .endm

    /* Restore what `push_call_args` saved. */
    .macro pop_call_args
    pop %rsi
    pop %rdx
    pop %r10
    pop %r8
    pop %r9
    .endm

    /* Back to user mode: the user rip, rflags and rsp the entry saved, the user GS. */
    .macro sysret_to_user
    pop %rcx
    pop %r11
    pop %rsp
    swapgs
    sysretq
    .endm

    /* Entering a user context from the kernel: save the callee-saved registers and this
       stack (return_to_kernel comes back to it when the context ends), interrupts off, and
       start the iretq frame with the user stack segment. */
    .macro enter_user_prologue
    push %rbx
    push %rbp
    push %r12
    push %r13
    push %r14
    push %r15
    cli
    mov %rsp, %gs:40
    pushq $0x23
    .endm

    /* Open and close the kernel's window on user memory: with SMAP on, `stac`/`clac`
       around the accesses; without it, nothing. */
    .macro user_access_open
    cmpb $0, SMAP_ENABLED(%rip)
    je 98f
    stac
98:
    .endm

    .macro user_access_close
    cmpb $0, SMAP_ENABLED(%rip)
    je 99f
    clac
99:
    .endm

    .section .text.syscall_entry, "ax"
    .global syscall_entry
syscall_entry:
    swapgs
syscall_native:
    mov %rsp, %gs:16
    mov %gs:24, %rsp
    pushq %gs:16
    push %r11
    push %rcx
    /* Protected procedure calls (numbers PPC_CALL and PPC_RETURN) take their own paths,
       past the generic dispatch: they rewrite where sysretq returns to (kobj::gate), and
       save only what they must. Numbers above them come back to 1. */
    cmp ${ppc_call}, %rax
    jae 7f
1:  push %rax
    push_call_args
    push %rdi
    /* The common path: an XC core (no forwarding, no time-sharing yield on return) with no
       orphans waiting for their scan, and a number in the table. It does what
       `syscall_dispatch` does for such a call, without a Rust function in between: count
       it, mark the core inside a call (`injectable`, the call's number, and `in_call`, two
       adjacent bytes, in one store), call the number's `FAST_HANDLERS` entry with the argument array (its
       result comes back encoded in rax), clear the marks. Anything else goes to
       `syscall_dispatch`. */
    incq %gs:{syscalls}
    cmpq ${role_xc}, %gs:{role}
    jne 20f
    cmpb $0, %gs:{orphans}
    jne 20f
    cmp ${calls}, %rax
    jae 20f
    lea 0x100(%rax), %edi   /* injectable = the call's number (below 256), in_call = 1 */
    movw %di, %gs:{in_call_flags}
    mov %rsp, %rdi
    sti
    call *FAST_HANDLERS(, %rax, 8)
    cli
    movw ${not_in_call}, %gs:{in_call_flags}   /* injectable = NOT_IN_CALL, in_call = 0 */
    jmp 21f
20: mov %rsp, %rdi
    sti
    call syscall_dispatch
    cli
21: cmpq $0, %gs:32
    jne return_to_kernel
    pop %rdi
    pop_call_args
    lea 8(%rsp), %rsp       /* the call number; rax holds the result */
    sysret_to_user
7:  je 8f
    cmp ${ppc_return}, %rax
    jne 1b
    /* ppc_return(value): rdi is the value; the return slots are at rsp. The client (or,
       if no call ended, the caller) gets the argument registers cleared: none of the
       handler's values, nor the kernel's, leak through them. Interrupts stay off (nothing
       here waits for anything) except while a gate whose last reference the return
       dropped is freed (ppc_return_entry turns them on for that); the exit check covers
       a halt asked for then. */
    mov %rsp, %rsi
    call ppc_return_entry
    cmpq $0, %gs:32
    jne return_to_kernel
    xor %edi, %edi
    xor %esi, %esi
    xor %edx, %edx
    xor %r10d, %r10d
    xor %r8d, %r8d
    xor %r9d, %r9d
    sysret_to_user
    /* ppc_call(share, gate, a0..a3): the argument registers are saved for the handler (or
       the caller, if the call fails), the first two go to the entry as they are, with the
       return slots (above the saved registers) third. */
8:  cmp ${ppc_bound}, %rdi
    jne 11f
    /* A bound gate (ppc_call(PPC_BOUND, slot, ..)): the whole call runs with interrupts
       off. It takes no lock, allocates and frees nothing (the slot's reference outlives any
       reference it drops), and an interrupt that arrives meanwhile (a halt request, a tick)
       stays pending until sysretq sets IF and is taken in user mode, where the trap path
       ends or switches the context: so no exit check here either. rdi is PPC_BOUND, put
       back rather than saved. */
    push_call_args
    lea 40(%rsp), %rdx
    call ppc_call_bound_entry
    mov ${ppc_bound}, %rdi
    pop_call_args
    sysret_to_user
11: push_call_args
    push %rdi
    lea 48(%rsp), %rdx
    sti
    call ppc_call_entry
    cli
    cmpq $0, %gs:32
    jne return_to_kernel
    pop %rdi
    pop_call_args
    sysret_to_user

    /* The entry while the running context has a Linux personality (`personality`; LSTAR
       points here only then). A `syscall` from the context's native code (its return
       address, rcx, inside [linux_native_lo, linux_native_hi)) goes on as any call. Any
       other is reflected: straight back to user mode at linux_upcall with rax = the
       caller's rip, r11 = (number << 32) | the caller's rflags (sysretq loads only the flag
       bits), rcx = the upcall, and every other register, rsp included, as the caller left
       it. Nothing is written to memory and no interrupt is enabled. linux_upcall was
       checked to lie in the user half when it was registered. */
    .global syscall_entry_linux
syscall_entry_linux:
    swapgs
    cmp %gs:{linux_lo}, %rcx
    jb 1f
    cmp %gs:{linux_hi}, %rcx
    jb syscall_native
1:  shl $32, %rax
    or %rax, %r11
    mov %rcx, %rax
    mov %gs:{linux_upcall}, %rcx
    swapgs
    sysretq

    /* enter_user_mode(rip, rsp, a0, a1, a2): returns when the context ends. */
    .global enter_user_mode
enter_user_mode:
    enter_user_prologue
    push %rsi
    pushq $0x202
    pushq $0x2B
    push %rdi
    mov %rdx, %rdi
    mov %rcx, %rsi
    mov %r8, %rdx
    xor %eax, %eax
    xor %ebx, %ebx
    xor %ecx, %ecx
    xor %ebp, %ebp
    xor %r8d, %r8d
    xor %r9d, %r9d
    xor %r10d, %r10d
    xor %r11d, %r11d
    xor %r12d, %r12d
    xor %r13d, %r13d
    xor %r14d, %r14d
    xor %r15d, %r15d
    swapgs
    iretq

    /* enter_user_regs(regs: *const UserRegs): like enter_user_mode, but every general
       register, rip, rflags and rsp come from `regs` (a preempted context resuming on a
       time-shared core). Returns when the running context ends, like enter_user_mode. */
    .global enter_user_regs
enter_user_regs:
    enter_user_prologue
    pushq 136(%rdi)
    pushq 128(%rdi)
    pushq $0x2B
    pushq 120(%rdi)
    mov 0(%rdi), %r15
    mov 8(%rdi), %r14
    mov 16(%rdi), %r13
    mov 24(%rdi), %r12
    mov 32(%rdi), %r11
    mov 40(%rdi), %r10
    mov 48(%rdi), %r9
    mov 56(%rdi), %r8
    mov 64(%rdi), %rbp
    mov 80(%rdi), %rsi
    mov 88(%rdi), %rdx
    mov 96(%rdi), %rcx
    mov 104(%rdi), %rbx
    mov 112(%rdi), %rax
    mov 72(%rdi), %rdi
    swapgs
    iretq

    /* Abandon the user context: back to the stack saved by enter_user_mode. Interrupts
       off, kernel GS active. Everything on the entry stack is dead by now (the Rust
       frames that ran on it have returned). */
    .global return_to_kernel
return_to_kernel:
    cli
    movq $0, %gs:32
    mov %gs:40, %rsp
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbp
    pop %rbx
    ret

    /* uaccess_copy(dst, src, len) -> 0, or 1 if a user page could not be made present. */
    .global uaccess_copy
uaccess_copy:
    /* 64 bytes per loop step with plain moves, then eight bytes per step, then the rest:
       under TCG every step of a rep string instruction is a pass through the translated
       block, so long copies (a batch of system calls copies its entries in and out with
       this) run as an unrolled loop of ordinary loads and stores. Scratch: rax, r8-r11. */
    user_access_open
    mov %rdx, %rcx
    shr $6, %rcx
    jz 3f
    .global uaccess_copy_block_start
uaccess_copy_block_start:
5:  mov (%rsi), %rax
    mov 8(%rsi), %r8
    mov 16(%rsi), %r9
    mov 24(%rsi), %r10
    mov %rax, (%rdi)
    mov %r8, 8(%rdi)
    mov %r9, 16(%rdi)
    mov %r10, 24(%rdi)
    mov 32(%rsi), %rax
    mov 40(%rsi), %r8
    mov 48(%rsi), %r9
    mov 56(%rsi), %r10
    mov %rax, 32(%rdi)
    mov %r8, 40(%rdi)
    mov %r9, 48(%rdi)
    mov %r10, 56(%rdi)
    .global uaccess_copy_block_end
uaccess_copy_block_end:
    add $64, %rsi
    add $64, %rdi
    dec %rcx
    jnz 5b
3:
    mov %rdx, %rcx
    and $63, %rcx
    shr $3, %rcx
    .global uaccess_copy_insn
uaccess_copy_insn:
    rep movsq
    mov %rdx, %rcx
    and $7, %rcx
    .global uaccess_copy_tail_insn
uaccess_copy_tail_insn:
    rep movsb
    user_access_close
    xor %eax, %eax
    ret
    /* uaccess_probe_write(addr) -> 0 if the byte is writable (an atomic no-op write), else 1. */
    .global uaccess_probe_write
uaccess_probe_write:
    user_access_open
    .global uaccess_probe_insn
uaccess_probe_insn:
    lock orb $0, (%rdi)
    user_access_close
    xor %eax, %eax
    ret

    .global uaccess_fixup
uaccess_fixup:
    user_access_close
    mov $1, %eax
    ret
"#,
    ppc_call = const abi::nr::PPC_CALL,
    syscalls = const core::mem::offset_of!(PerCpu, stats) + core::mem::offset_of!(CpuStats, syscalls),
    role = const core::mem::offset_of!(PerCpu, role),
    role_xc = const abi::ROLE_XC,
    orphans = const core::mem::offset_of!(PerCpu, orphans_pending),
    in_call_flags = const core::mem::offset_of!(PerCpu, injectable),
    not_in_call = const NOT_IN_CALL as u16,
    calls = const CALLS,
    ppc_return = const abi::nr::PPC_RETURN,
    ppc_bound = const abi::PPC_BOUND as i64,
    linux_lo = const core::mem::offset_of!(PerCpu, linux_native_lo),
    linux_hi = const core::mem::offset_of!(PerCpu, linux_native_hi),
    linux_upcall = const core::mem::offset_of!(PerCpu, linux_upcall),
    options(att_syntax)
);

extern "C" {
    fn syscall_entry();
    fn syscall_entry_linux();
    fn enter_user_mode(rip: u64, rsp: u64, a0: u64, a1: u64, a2: u64);
    fn enter_user_regs(regs: *const UserRegs);
    fn uaccess_copy(dst: *mut u8, src: *const u8, len: usize) -> u64;
    fn uaccess_copy_insn();
    fn uaccess_copy_tail_insn();
    fn uaccess_copy_block_start();
    fn uaccess_copy_block_end();
    fn uaccess_probe_write(addr: u64) -> u64;
    fn uaccess_probe_insn();
    fn uaccess_fixup();
}

/// Per-core: syscall MSRs, SMEP and SMAP where the CPU has them.
pub fn init_core() {
    wrmsr(MSR_EFER, rdmsr(MSR_EFER) | 1); // SCE
    wrmsr(MSR_STAR, ((USER_BASE as u64) << 48) | ((KERNEL_CS as u64) << 32));
    wrmsr(MSR_LSTAR, syscall_entry as *const () as u64);
    // Clear TF, IF, DF, NT and AC on entry.
    wrmsr(MSR_SFMASK, 0x100 | 0x200 | 0x400 | 0x4000 | 0x4_0000);
    let leaf7 = cpu::cpuid(7, 0);
    let mut cr4 = cpu::read_cr4();
    if leaf7.ebx & (1 << 7) != 0 {
        cr4 |= 1 << 20;
        SMEP_ENABLED.store(true, Ordering::Relaxed);
    }
    if leaf7.ebx & (1 << 20) != 0 {
        cr4 |= 1 << 21;
        SMAP_ENABLED.store(true, Ordering::Relaxed);
    }
    // SSE for user programs (the Linux personality's programs use it: OSFXSR and
    // OSXMMEXCPT). The kernel and the library OS are built without SSE.
    cr4 |= (1 << 9) | (1 << 10);
    cpu::write_cr4(cr4);
}

const MSR_FS_BASE: u32 = 0xC000_0100;

/// Point this core's `syscall` at the Linux personality's entry (`syscall_entry_linux`,
/// which reflects calls from outside the native range read from the per-CPU area) or back
/// at the plain one; and set the user FS base (the Linux program's thread pointer; 0 for a
/// native context). `fs_base` must be canonical: the caller checks it lies in the user half.
pub fn set_linux_entry(on: bool, fs_base: u64) {
    let entry = if on { syscall_entry_linux as *const () as u64 } else { syscall_entry as *const () as u64 };
    wrmsr(MSR_LSTAR, entry);
    wrmsr(MSR_FS_BASE, fs_base);
}

pub fn smep_smap() -> (bool, bool) {
    (SMEP_ENABLED.load(Ordering::Relaxed), SMAP_ENABLED.load(Ordering::Relaxed))
}

/// Registers saved by `syscall_entry` for the generic dispatch, lowest address first (the
/// protected procedure calls push only `ret`, and for `ppc_call` the six arguments below it).
#[repr(C)]
#[derive(Debug)]
pub struct SyscallFrame {
    /// The six arguments in ABI order (rdi, rsi, rdx, r10, r8, r9), pushed so that they lie
    /// in memory as one array: dispatch reads them in place.
    pub args: [u64; 6],
    /// The call number (the result goes back in `rax` from `syscall_dispatch`'s return value).
    pub rax: u64,
    /// Where `sysret` goes back to (pushed first: the protected procedure calls' paths
    /// rewrite it, `syscall::ppc_call_entry`, `ppc_return_entry`).
    pub ret: UserReturn,
}

/// Where a return to user mode resumes: `rcx`, `r11` and `rsp` of a `syscall` (popped by
/// `syscall_entry` before `sysretq`), or the same three of an interrupt frame.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UserReturn {
    pub rip: u64,
    pub rflags: u64,
    pub rsp: u64,
}

const _: () = {
    assert!(core::mem::size_of::<SyscallFrame>() == 10 * 8);
    assert!(core::mem::offset_of!(SyscallFrame, args) == 0);
    assert!(core::mem::offset_of!(SyscallFrame, ret) == 7 * 8);
};

/// Run user code at `rip` with stack `rsp` and `rdi, rsi, rdx = args` on this core until the
/// context ends (`request_exit` followed by a return to user mode).
pub fn run_user(rip: u64, rsp: u64, args: [u64; 3]) {
    // SAFETY: the caller installed a root address range with the user mapping and set this
    // core's entry stack; enter_user_mode saves our callee-saved registers and comes back
    // here through return_to_kernel.
    unsafe { enter_user_mode(rip, rsp, args[0], args[1], args[2]) }
}

/// A user context's registers while it is not running (time-shared cores): `TrapFrame`'s
/// general registers, then rip, rflags, rsp; `enter_user_regs` depends on these offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UserRegs {
    pub regs: GeneralRegs,
    pub rip: u64,
    pub rflags: u64,
    pub rsp: u64,
}

const _: () = {
    assert!(core::mem::offset_of!(UserRegs, regs) + core::mem::offset_of!(GeneralRegs, rdi) == 72);
    assert!(core::mem::offset_of!(UserRegs, regs) + core::mem::offset_of!(GeneralRegs, rax) == 112);
    assert!(core::mem::offset_of!(UserRegs, rip) == 120);
    assert!(core::mem::offset_of!(UserRegs, rflags) == 128);
    assert!(core::mem::offset_of!(UserRegs, rsp) == 136);
};

/// Flags a user context may keep across a switch: the arithmetic flags, TF, DF, OF, AC and
/// ID; IF is always set and IOPL always 0 when it resumes.
const USER_RFLAGS: u64 = 0x0000_0CD5 | (1 << 8) | (1 << 18) | (1 << 21);

impl UserRegs {
    /// The registers a fresh context starts with (what `enter_user_mode` sets).
    pub fn fresh(rip: u64, rsp: u64, args: [u64; 3]) -> UserRegs {
        let regs = GeneralRegs { rdi: args[0], rsi: args[1], rdx: args[2], ..Default::default() };
        UserRegs { regs, rip, rsp, rflags: 0x202 }
    }

    /// Save the user registers of an interrupt taken in user mode.
    pub fn from_frame(f: &TrapFrame) -> UserRegs {
        UserRegs { regs: f.regs, rip: f.rip, rflags: f.rflags, rsp: f.rsp }
    }

    /// Make the interrupt taken in user mode return into these registers instead.
    pub fn to_frame(&self, f: &mut TrapFrame) {
        f.regs = self.regs;
        f.rip = self.rip;
        f.rflags = (self.rflags & USER_RFLAGS) | 0x202;
        f.rsp = self.rsp;
    }
}

/// Run user code with registers `regs` on this core until the running context ends (the
/// core may switch to other contexts meanwhile; see `sched`).
pub fn run_user_regs(regs: &UserRegs) {
    let mut r = *regs;
    r.rflags = (r.rflags & USER_RFLAGS) | 0x202;
    // SAFETY: as for run_user; `r` outlives the call (enter_user_regs reads it before iretq),
    // and its rflags cannot raise IOPL or clear IF.
    unsafe { enter_user_regs(&r) }
}

fn user_range_ok(addr: u64, len: usize) -> bool {
    match addr.checked_add(len as u64) {
        Some(end) => addr >= abi::USER_BASE && end <= abi::USER_END,
        None => false,
    }
}

/// Copy `dst.len()` bytes from user address `src`. Pages are faulted in as the context's
/// mappings allow; anything else is `BadAddress`, never a kernel fault.
pub fn copy_from_user(dst: &mut [u8], src: u64) -> Result<(), abi::Error> {
    if dst.is_empty() {
        return Ok(());
    }
    if !user_range_ok(src, dst.len()) {
        return Err(abi::Error::BadAddress);
    }
    // SAFETY: dst is a valid kernel buffer; src was checked to lie in the user half, and any
    // fault on it is resolved or turned into a return of 1 by the page-fault handler.
    match unsafe { uaccess_copy(dst.as_mut_ptr(), src as *const u8, dst.len()) } {
        0 => Ok(()),
        _ => Err(abi::Error::BadAddress),
    }
}

/// Copy `src` to user address `dst` (see `copy_from_user`).
pub fn copy_to_user(dst: u64, src: &[u8]) -> Result<(), abi::Error> {
    if src.is_empty() {
        return Ok(());
    }
    if !user_range_ok(dst, src.len()) {
        return Err(abi::Error::BadAddress);
    }
    // SAFETY: as for copy_from_user, with the roles swapped.
    match unsafe { uaccess_copy(dst as *mut u8, src.as_ptr(), src.len()) } {
        0 => Ok(()),
        _ => Err(abi::Error::BadAddress),
    }
}

/// Read a plain-data value from user memory.
pub fn read_user<T: Copy + Default>(addr: u64) -> Result<T, abi::Error> {
    let mut v = T::default();
    // SAFETY: T is plain data (Copy + Default, only repr(C) ABI structs and integers are used
    // here); viewing it as bytes to fill it is sound for such types.
    let bytes = unsafe { core::slice::from_raw_parts_mut(&mut v as *mut T as *mut u8, core::mem::size_of::<T>()) };
    copy_from_user(bytes, addr)?;
    Ok(v)
}

/// Write a plain-data value to user memory.
pub fn write_user<T: Copy>(addr: u64, v: &T) -> Result<(), abi::Error> {
    // SAFETY: reading the bytes of a Copy repr(C) value.
    let bytes = unsafe { core::slice::from_raw_parts(v as *const T as *const u8, core::mem::size_of::<T>()) };
    copy_to_user(addr, bytes)
}

/// If a kernel-mode fault happened inside `uaccess_copy`, the address where the copy
/// resumes with the failure result.
pub fn uaccess_fixup_for(rip: u64) -> Option<u64> {
    let in_block = (uaccess_copy_block_start as *const () as u64..uaccess_copy_block_end as *const () as u64).contains(&rip);
    (in_block
        || rip == uaccess_copy_insn as *const () as u64
        || rip == uaccess_copy_tail_insn as *const () as u64
        || rip == uaccess_probe_insn as *const () as u64)
        .then_some(uaccess_fixup as *const () as u64)
}

/// Check that every page of `[addr, addr + len)` is user memory this context may write
/// (faulting pages in as needed), without changing any byte.
pub fn probe_writable(addr: u64, len: usize) -> Result<(), abi::Error> {
    if len == 0 {
        return Ok(());
    }
    if !user_range_ok(addr, len) {
        return Err(abi::Error::BadAddress);
    }
    let mut page = addr & !0xFFF;
    while page < addr + len as u64 {
        let probe = page.max(addr);
        // SAFETY: probe lies in the user half; a fault is resolved or turned into 1.
        if unsafe { uaccess_probe_write(probe) } != 0 {
            return Err(abi::Error::BadAddress);
        }
        page += 0x1000;
    }
    Ok(())
}
