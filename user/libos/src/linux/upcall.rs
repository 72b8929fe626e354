//! The user-mode end of the kernel's reflection (`abi::nr::LINUX_PERSONALITY`): entering the
//! Linux program, the upcall stub every reflected `syscall` lands in, and leaving the
//! program when it exits. One of the modules allowed `unsafe` (with `mem.rs`).
//!
//! At `__linux_upcall` the kernel has left rax = the program's rip after its `syscall`,
//! r11 = (number << 32) | its rflags, rcx = the stub's address, every other register (rsp
//! too) as the program had it. The stub switches to the runtime's upcall stack (never
//! touching the program's stack, whose red zone may be live), saves the registers as a
//! [`Frame`], calls `linux_dispatch`, and returns to the program as Linux does: every
//! register as it was except rax (the result), rcx (the return address) and r11 (rflags).
//! One upcall stack per thread: each context that runs Linux code (the runtime's own, and one
//! per Linux thread, `thread.rs`) keeps the top of its upcall stack in a word of its context
//! page (`ctx::arena()` + `W_TOP`, the page is private to each context's root range), and the
//! stub reads it through [`__linux_upcall_slot`] (that word's address, the same in every
//! context). The dispatcher's own system calls are native (made from inside the runtime's
//! image), so upcalls never nest on one thread.
//!
//! Faults and timer ticks (`abi::LINUX_EVENTS`): the kernel keeps the interrupted
//! registers and resumes at `__linux_event`, which calls `signal::linux_event` on the
//! running thread's upcall stack (an event comes only while the program, not the runtime,
//! runs). Signal delivery and `rt_sigreturn` leave through `resume`, which loads every
//! register (the program's rcx and r11 included) without touching the program's stack and
//! jumps through a word of the thread's own stack below the red zone, so threads resuming at
//! once share no word (linux/progs/sigthreads.c checks it at 4 vCPUs).

use core::sync::atomic::{AtomicU64, Ordering};

pub use linuxabi::signal::Regs;

/// The registers of a reflected call, as the stub pushes them (lowest address first).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub r9: u64,
    pub r8: u64,
    pub r10: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub rbp: u64,
    pub rbx: u64,
    /// What the program gets in rax.
    pub ret: u64,
    /// (number << 32) | rflags.
    pub nr_flags: u64,
    pub rip: u64,
    pub rsp: u64,
}

/// The address of the word holding the running thread's upcall stack top: `arena()` +
/// `W_TOP`, the same address in every context of the runtime (each maps its own context page
/// there). Set by `enter`, read by the stub.
#[no_mangle]
static __linux_upcall_slot: AtomicU64 = AtomicU64::new(0);

/// Per-context words at the end of the context page (past `ctx::Ctx`, which nothing else
/// uses): the upcall stack top, the stack pointer `leave` returns to, the thread's slot
/// (`thread::SLOTS`) plus one (0: none).
const W_TOP: u64 = abi::PAGE_SIZE - 8;
const W_SAVED: u64 = abi::PAGE_SIZE - 16;
const W_SLOT: u64 = abi::PAGE_SIZE - 24;
const _: () = assert!(core::mem::size_of::<crate::ctx::Ctx>() as u64 <= W_SLOT);

/// One of this context's words (`W_*`).
fn word(off: u64) -> &'static AtomicU64 {
    // SAFETY: every context of the runtime maps its own context page read-write at
    // `arena()` (`ctx::map_new`, for the first context and each thread), and the words past
    // `ctx::Ctx` in that page (checked above) are used by this module alone. The address is
    // 8-aligned (the page is page-aligned).
    unsafe { &*((crate::ctx::arena() + off) as *const AtomicU64) }
}

/// The running thread's slot in `thread::SLOTS` (0, the main thread's, if none was set).
pub fn my_slot() -> usize {
    word(W_SLOT).load(Ordering::Relaxed).saturating_sub(1) as usize
}

/// Record the running context's slot.
pub fn set_my_slot(slot: usize) {
    word(W_SLOT).store(slot as u64 + 1, Ordering::Relaxed);
}

/// The main thread's upcall stack: 256 KiB in the runtime's image (its .bss). Other threads
/// use the part of their library-OS thread stack below `__linux_enter_frame`'s frame.
const UPCALL_STACK: usize = 256 << 10;
#[repr(C, align(16))]
struct Stack(core::cell::UnsafeCell<[u8; UPCALL_STACK]>);
// SAFETY: Rust code only takes the stack's address; the upcall stub alone reads and writes
// it, for the main thread only (one upcall at a time).
unsafe impl Sync for Stack {}
static STACK: Stack = Stack(core::cell::UnsafeCell::new([0; UPCALL_STACK]));

core::arch::global_asm!(
    ".global __linux_upcall",
    "__linux_upcall:",
    "    mov rcx, rsp",
    "    mov rsp, [rip + __linux_upcall_slot]",
    "    mov rsp, [rsp]",
    "    push rcx",
    "    push rax",
    "    push r11",
    "    push 0",
    "    push rbx",
    "    push rbp",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    push rdi",
    "    push rsi",
    "    push rdx",
    "    push r10",
    "    push r8",
    "    push r9",
    "    cld",
    "    mov rdi, rsp",
    "    call {dispatch}",
    // The way back to the program: the registers from the frame at rsp.
    "__linux_upcall_return:",
    "    pop r9",
    "    pop r8",
    "    pop r10",
    "    pop rdx",
    "    pop rsi",
    "    pop rdi",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop rbp",
    "    pop rbx",
    "    pop rax",
    "    pop r11",
    "    mov r11d, r11d",
    "    push r11",
    "    popfq",
    "    pop rcx",
    "    pop rsp",
    "    jmp rcx",
    // __linux_enter(entry, rsp, saved: *mut u64): start the program; returns (through
    // __linux_leave) with its exit status.
    ".global __linux_enter",
    "__linux_enter:",
    push_callee_saved!(),
    "    mov [rdx], rsp",
    "    mov rsp, rsi",
    // Linux's start state: rdx = 0 (no exit handler), the other registers cleared.
    "    mov rax, rdi",
    "    xor ebx, ebx",
    "    xor ecx, ecx",
    "    xor edx, edx",
    "    xor esi, esi",
    "    xor edi, edi",
    "    xor ebp, ebp",
    "    xor r8d, r8d",
    "    xor r9d, r9d",
    "    xor r10d, r10d",
    "    xor r11d, r11d",
    "    xor r12d, r12d",
    "    xor r13d, r13d",
    "    xor r14d, r14d",
    "    xor r15d, r15d",
    "    jmp rax",
    // __linux_resume_child(frame, saved: *mut u64): continue a program at a saved `Frame` (a
    // forked child: the parent's registers, rax = 0); returns (through __linux_leave) with
    // its exit status, through the upcall stub's own way back.
    ".global __linux_resume_child",
    "__linux_resume_child:",
    push_callee_saved!(),
    "    mov [rsi], rsp",
    "    mov rsp, rdi",
    "    jmp __linux_upcall_return",
    // __linux_enter_frame(frame, saved: *mut u64, top: *mut u64): start a new thread with the
    // registers of `frame` (as the stub returns to the program); `saved` gets the stack
    // pointer `__linux_leave` returns through, `top` the 16-aligned top of this thread's upcall
    // stack (everything below this frame). Called 16-aligned, so after the six pushes rsp is
    // 8 mod 16 and rsp - 8 is aligned.
    ".global __linux_enter_frame",
    "__linux_enter_frame:",
    push_callee_saved!(),
    "    mov [rsi], rsp",
    "    lea rax, [rsp - 8]",
    "    mov [rdx], rax",
    "    mov rsp, rdi",
    "    jmp __linux_upcall_return",
    // __linux_leave(saved_rsp, status): back into __linux_enter's frame.
    ".global __linux_leave",
    "__linux_leave:",
    return_to_saved_frame!(),
    // __linux_event: where the kernel resumes the context after keeping a fault or tick of
    // the program (`abi::LINUX_EVENTS`); every register is in the kept event, so the stub
    // only takes the upcall stack (free: the program was running, not the runtime).
    ".global __linux_event",
    "__linux_event:",
    "    mov rsp, [rip + __linux_upcall_slot]",
    "    mov rsp, [rsp]",
    "    cld",
    "    call {event}",
    "    ud2",
    // __linux_resume(regs: *const Regs): load every register of `Regs` (linuxabi::signal,
    // repr(C): r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags at 8-byte steps)
    // and jump to its rip. The flags go through the upcall stack before rsp changes; the rip
    // through the word `RIP_BELOW` bytes below the program's rsp (`resume` wrote it there):
    // below the red zone, where a Linux signal frame would go, and the thread's own, so
    // threads resuming at once share nothing.
    ".global __linux_resume",
    "__linux_resume:",
    "    push qword ptr [rdi + 136]",
    "    mov r8, [rdi + 0]",
    "    mov r9, [rdi + 8]",
    "    mov r10, [rdi + 16]",
    "    mov r11, [rdi + 24]",
    "    mov r12, [rdi + 32]",
    "    mov r13, [rdi + 40]",
    "    mov r14, [rdi + 48]",
    "    mov r15, [rdi + 56]",
    "    mov rsi, [rdi + 72]",
    "    mov rbp, [rdi + 80]",
    "    mov rbx, [rdi + 88]",
    "    mov rdx, [rdi + 96]",
    "    mov rax, [rdi + 104]",
    "    mov rcx, [rdi + 112]",
    "    popfq",
    "    mov rsp, [rdi + 120]",
    "    mov rdi, [rdi + 64]",
    "    jmp qword ptr [rsp - {rip_below}]",
    dispatch = sym super::dispatch::linux_dispatch,
    event = sym super::signal::linux_event,
    rip_below = const RIP_BELOW,
);

/// How far below the program's rsp `resume` keeps the address `__linux_resume` jumps to:
/// just past the 128-byte red zone the x86-64 ABI lets a function use below rsp. Linux
/// writes its signal frames from there down, so a program keeps nothing of its own there.
const RIP_BELOW: u64 = linuxabi::signal::RED_ZONE + 8;

// The stub's offsets are `Regs`'s.
const _: () = {
    assert!(core::mem::offset_of!(Regs, rdi) == 64 && core::mem::offset_of!(Regs, rcx) == 112);
    assert!(core::mem::offset_of!(Regs, rsp) == 120 && core::mem::offset_of!(Regs, rip) == 128 && core::mem::offset_of!(Regs, rflags) == 136);
};

/// Resume the program with exactly these registers (a handler's entry, `rt_sigreturn`, an
/// event with nothing to deliver). The trap flag is dropped: single-stepping would trap in
/// the runtime's own resume path. Only with no lock held, from the upcall stack.
///
/// The rip is written `RIP_BELOW` bytes below the program's rsp, a word of this thread's
/// stack (each thread resumes through its own). Where the program's rsp leaves no writable
/// word there (a stack pointer a handler made up), the program ends as killed by SIGSEGV,
/// as Linux ends one whose stack cannot be used.
pub fn resume(regs: &Regs) -> ! {
    let mut r = *regs;
    r.rflags = (r.rflags & !0x100) | 0x202;
    let below = r.rsp.wrapping_sub(RIP_BELOW);
    let placed = {
        let mut g = super::dispatch::lock_proc();
        match g.as_mut() {
            Some(p) if r.rsp >= RIP_BELOW && p.image.space.put(below, &r.rip.to_le_bytes()) => true,
            Some(p) => {
                p.sig.killed_by = Some(linuxabi::signal::SIGSEGV);
                p.sig.finish();
                false
            }
            None => false,
        }
    };
    if !placed {
        crate::println!("linux: no writable stack word below rsp {:#x} to resume at {:#x}; ending the program by SIGSEGV", r.rsp, r.rip);
        leave(128 + u64::from(linuxabi::signal::SIGSEGV));
    }
    // SAFETY: `__linux_resume` reads `r` (a live `Regs`) before it leaves the upcall stack
    // and never returns; it reads its jump target from the program's word checked writable
    // just above; nothing on the upcall stack needs dropping (the caller holds no lock or
    // allocation, as documented).
    unsafe { __linux_resume(&r) }
}

/// The x87/SSE state as `fxsave` writes it (512 bytes, 16-byte aligned; Linux's
/// `struct _fpstate` without the xsave extension).
#[repr(C, align(64))]
pub struct FpState(pub [u8; 512]);

/// The program's x87/SSE registers now (the runtime itself never uses them: its target has
/// no SSE, so they are the program's).
pub fn fxsave(s: &mut FpState) {
    // SAFETY: `fxsave64` writes 512 bytes to a 16-byte aligned address: `FpState` is both.
    unsafe { core::arch::asm!("fxsave64 [{}]", in(reg) s.0.as_mut_ptr(), options(nostack)) }
}

/// Load the program's x87/SSE registers from `s`. MXCSR's reserved bits (which would make
/// `fxrstor` fault in the runtime) are cleared first, against the mask the CPU reports.
pub fn fxrstor(s: &mut FpState) {
    let mut now = FpState([0; 512]);
    fxsave(&mut now);
    let mut mask = u32::from_le_bytes([now.0[28], now.0[29], now.0[30], now.0[31]]);
    if mask == 0 {
        mask = 0xFFBF;
    }
    let mxcsr = u32::from_le_bytes([s.0[24], s.0[25], s.0[26], s.0[27]]) & mask;
    s.0[24..28].copy_from_slice(&mxcsr.to_le_bytes());
    // SAFETY: 512 readable, 16-byte aligned bytes whose MXCSR has no reserved bit set.
    unsafe { core::arch::asm!("fxrstor64 [{}]", in(reg) s.0.as_ptr(), options(nostack, readonly)) }
}

extern "C" {
    fn __linux_upcall();
    fn __linux_event();
    fn __linux_resume(regs: *const Regs) -> !;
    fn __linux_enter(entry: u64, rsp: u64, saved: *mut u64) -> u64;
    fn __linux_enter_frame(frame: *const Frame, saved: *mut u64, top: *mut u64) -> u64;
    fn __linux_leave(rsp: u64, status: u64) -> !;
    fn __linux_resume_child(frame: *mut Frame, saved: *mut u64) -> u64;
    static __image_start: u8;
    static __image_end: u8;
}

/// Where the kernel resumes the runtime with a reflected fault or tick.
pub fn event_upcall() -> u64 {
    __linux_event as *const () as u64
}

/// The runtime's own image: the native range.
pub fn native_range() -> (u64, u64) {
    (core::ptr::addr_of!(__image_start) as u64, core::ptr::addr_of!(__image_end) as u64)
}

/// Register the personality for this context: reflected calls to the upcall stub, the
/// program's own faults back as signals (`signal::linux_event`), the FS base `fs` (if
/// given). `main`: this context runs the main thread, whose upcall stack is `STACK` (a new
/// thread's is set by `__linux_enter_frame`). On an error the personality is off again.
fn personality_on(main: bool, fs: Option<u64>) -> Result<(), abi::Error> {
    if main {
        __linux_upcall_slot.store(crate::ctx::arena() + W_TOP, Ordering::Relaxed);
        word(W_TOP).store(STACK.0.get() as u64 + UPCALL_STACK as u64, Ordering::Relaxed);
    }
    let (lo, hi) = native_range();
    crate::sys::linux_personality(abi::LINUX_ON, __linux_upcall as *const () as u64, lo, hi)?;
    let rest = crate::sys::linux_personality(abi::LINUX_EVENTS, event_upcall(), abi::LINUX_EV_FAULTS, 0).and_then(|_| fs.map_or(Ok(0), |fs| crate::sys::linux_personality(abi::LINUX_SET_FS, fs, 0, 0)));
    if let Err(e) = rest {
        personality_off();
        return Err(e);
    }
    Ok(())
}

fn personality_off() {
    let _ = crate::sys::linux_personality(abi::LINUX_OFF, 0, 0, 0);
}

/// Register the personality and run the program at `entry` with stack `rsp` until it exits;
/// returns the status `leave` was given. The personality is off again afterwards.
pub fn enter(entry: u64, rsp: u64) -> Result<u64, abi::Error> {
    personality_on(true, None)?;
    // SAFETY: the program runs on its own stack in this address space and comes back only
    // through `leave` (its exit), which restores this frame's callee-saved registers and
    // stack from what `__linux_enter` stored in this context's `W_SAVED` word.
    let status = unsafe { __linux_enter(entry, rsp, word(W_SAVED).as_ptr()) };
    personality_off();
    Ok(status)
}

/// Register the personality and continue the program at `frame` (a forked child: a copy of
/// its parent's registers at the `fork`, with `ret` = 0) until it exits; returns the status
/// `leave` was given. `fs_base`: the program's FS base (the kernel keeps it per context, so
/// the child's context needs it set again).
pub fn resume_child(frame: &Frame, fs_base: u64) -> Result<u64, abi::Error> {
    personality_on(true, (fs_base != 0).then_some(fs_base))?;
    // The stub's tail pops the registers from the frame and pushes the flags back into it:
    // it needs a copy it may write.
    let mut f = alloc::boxed::Box::new(*frame);
    // SAFETY: as in `enter`: the program runs on its own stack in this address space and
    // comes back only through `leave`, which restores this frame's callee-saved registers
    // and stack from what `__linux_resume_child` stored in this context's `W_SAVED` word.
    // `f` outlives the call.
    let status = unsafe { __linux_resume_child(&mut *f, word(W_SAVED).as_ptr()) };
    personality_off();
    Ok(status)
}

/// Run a new Linux thread in this context (a library-OS thread of the runtime): register the
/// personality with FS base `fs`, then return to the program with `frame`'s registers (the
/// parent's at its `clone`, with the child's rax, rsp and rip). Returns the status `leave`
/// was given when the thread ends.
pub fn enter_thread(frame: &Frame, fs: u64) -> Result<u64, abi::Error> {
    personality_on(false, Some(fs))?;
    let copy = *frame;
    // SAFETY: `copy` lives in this frame until `__linux_enter_frame` has loaded every
    // register from it; the thread then runs on its own stack and comes back only through
    // `leave`, which restores this frame from the context's `W_SAVED` word. Its upcalls use
    // the stack below this frame (`W_TOP`), which nothing else uses while it runs.
    let status = unsafe { __linux_enter_frame(&copy, word(W_SAVED).as_ptr(), word(W_TOP).as_ptr()) };
    personality_off();
    Ok(status)
}

/// End the running thread (the main thread: the program): back into `enter` (or
/// `enter_thread`) with `status`. Only from the dispatcher, on the upcall stack, holding no
/// lock, while that call runs the thread.
pub fn leave(status: u64) -> ! {
    // SAFETY: the word is what `__linux_enter`/`__linux_enter_frame` stored for this
    // context's call that is still live (the thread runs inside it); nothing on the upcall
    // stack needs dropping.
    unsafe { __linux_leave(word(W_SAVED).load(Ordering::Relaxed), status) }
}
