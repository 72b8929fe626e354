//! Linux x86-64 signals, the pure part: numbers, `struct sigaction` as `rt_sigaction` passes
//! it, default actions, the `rt_sigframe` Linux builds on the stack for a handler (its
//! layout and where it goes), `siginfo_t` and `struct sigcontext` as bytes, and which signal
//! a processor exception becomes. The library OS's delivery (user/libos/src/linux/signal.rs)
//! uses these; the layouts are checked here against Linux's offsets (arch/x86/include/uapi/
//! asm/sigcontext.h, include/uapi/asm-generic/ucontext.h, signal.h).

pub const SIGHUP: u32 = 1;
pub const SIGINT: u32 = 2;
pub const SIGQUIT: u32 = 3;
pub const SIGILL: u32 = 4;
pub const SIGTRAP: u32 = 5;
pub const SIGABRT: u32 = 6;
pub const SIGBUS: u32 = 7;
pub const SIGFPE: u32 = 8;
pub const SIGKILL: u32 = 9;
pub const SIGUSR1: u32 = 10;
pub const SIGSEGV: u32 = 11;
pub const SIGUSR2: u32 = 12;
pub const SIGPIPE: u32 = 13;
pub const SIGALRM: u32 = 14;
pub const SIGTERM: u32 = 15;
pub const SIGSTKFLT: u32 = 16;
pub const SIGCHLD: u32 = 17;
pub const SIGCONT: u32 = 18;
pub const SIGSTOP: u32 = 19;
pub const SIGTSTP: u32 = 20;
pub const SIGTTIN: u32 = 21;
pub const SIGTTOU: u32 = 22;
pub const SIGURG: u32 = 23;
pub const SIGXCPU: u32 = 24;
pub const SIGXFSZ: u32 = 25;
pub const SIGVTALRM: u32 = 26;
pub const SIGPROF: u32 = 27;
pub const SIGWINCH: u32 = 28;
pub const SIGIO: u32 = 29;
pub const SIGPWR: u32 = 30;
pub const SIGSYS: u32 = 31;
/// Signals are 1..=NSIG.
pub const NSIG: u32 = 64;

/// The bit of `sig` in a 64-bit signal set.
pub const fn bit(sig: u32) -> u64 {
    1u64 << (sig - 1)
}

/// Signals no mask can block and no action can catch.
pub const UNBLOCKABLE: u64 = bit(SIGKILL) | bit(SIGSTOP);

pub const SIG_DFL: u64 = 0;
pub const SIG_IGN: u64 = 1;

pub const SA_SIGINFO: u64 = 0x4;
pub const SA_ONSTACK: u64 = 0x0800_0000;
pub const SA_RESTART: u64 = 0x1000_0000;
pub const SA_NODEFER: u64 = 0x4000_0000;
pub const SA_RESETHAND: u64 = 0x8000_0000;
pub const SA_RESTORER: u64 = 0x0400_0000;
pub const SA_NOCLDSTOP: u64 = 0x1;
pub const SA_NOCLDWAIT: u64 = 0x2;

pub const SS_ONSTACK: u32 = 1;
pub const SS_DISABLE: u32 = 2;
pub const SS_AUTODISARM: u32 = 1 << 31;
pub const MINSIGSTKSZ: u64 = 2048;

/// `si_code` values.
pub const SI_USER: i32 = 0;
pub const SI_KERNEL: i32 = 0x80;
pub const SI_TKILL: i32 = -6;
pub const SEGV_MAPERR: i32 = 1;
pub const SEGV_ACCERR: i32 = 2;
pub const FPE_INTDIV: i32 = 1;
pub const FPE_FLTINV: i32 = 7;
pub const ILL_ILLOPN: i32 = 2;
pub const BUS_ADRALN: i32 = 1;
pub const TRAP_BRKPT: i32 = 1;

/// `struct sigaction` as `rt_sigaction` reads and writes it (32 bytes): handler, flags,
/// restorer, mask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Action {
    pub handler: u64,
    pub flags: u64,
    pub restorer: u64,
    pub mask: u64,
}

impl Action {
    pub fn from_bytes(b: &[u8; 32]) -> Action {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Action { handler: w(0), flags: w(1), restorer: w(2), mask: w(3) }
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, v) in [self.handler, self.flags, self.restorer, self.mask].iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// What `SIG_DFL` does with a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Default {
    Terminate,
    /// Terminate with a core dump (the status says so; no core file is written here).
    Core,
    Ignore,
    Stop,
    Continue,
}

/// Linux's default action for `sig` (signal(7)); real-time signals terminate.
pub fn default_action(sig: u32) -> Default {
    match sig {
        SIGCHLD | SIGURG | SIGWINCH => Default::Ignore,
        SIGCONT => Default::Continue,
        SIGSTOP | SIGTSTP | SIGTTIN | SIGTTOU => Default::Stop,
        SIGQUIT | SIGILL | SIGTRAP | SIGABRT | SIGBUS | SIGFPE | SIGSEGV | SIGXCPU | SIGXFSZ | SIGSYS => Default::Core,
        _ => Default::Terminate,
    }
}

/// Which signal, `si_code` and `si_addr` a processor exception (`vector`, its error code,
/// the faulting address `cr2` for a page fault, the instruction `rip`) becomes, as Linux's
/// trap handlers choose them.
pub fn fault_signal(vector: u64, error: u64, cr2: u64, rip: u64) -> (u32, i32, u64) {
    match vector {
        0 => (SIGFPE, FPE_INTDIV, rip),
        1 | 3 => (SIGTRAP, TRAP_BRKPT, 0),
        4 => (SIGSEGV, SI_KERNEL, 0), // overflow (into)
        6 => (SIGILL, ILL_ILLOPN, rip),
        7 => (SIGFPE, SI_KERNEL, rip), // device not available (no FPU state): not expected
        10 | 11 | 12 => (SIGBUS, SI_KERNEL, 0),
        14 => (SIGSEGV, if error & 1 != 0 { SEGV_ACCERR } else { SEGV_MAPERR }, cr2),
        16 | 19 => (SIGFPE, FPE_FLTINV, rip),
        17 => (SIGBUS, BUS_ADRALN, 0),
        // General protection (a non-canonical address, a privileged instruction) and the rest.
        _ => (SIGSEGV, SI_KERNEL, 0),
    }
}

/// The general registers as `struct sigcontext` orders them (r8..r15, rdi, rsi, rbp, rbx,
/// rdx, rax, rcx, rsp, rip, eflags). `repr(C)`: the runtime's resume stub reads it by offset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regs {
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rbp: u64,
    pub rbx: u64,
    pub rdx: u64,
    pub rax: u64,
    pub rcx: u64,
    pub rsp: u64,
    pub rip: u64,
    pub rflags: u64,
}

impl Regs {
    fn to_array(self) -> [u64; 18] {
        [self.r8, self.r9, self.r10, self.r11, self.r12, self.r13, self.r14, self.r15, self.rdi, self.rsi, self.rbp, self.rbx, self.rdx, self.rax, self.rcx, self.rsp, self.rip, self.rflags]
    }

    fn from_array(a: [u64; 18]) -> Regs {
        let [r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags] = a;
        Regs { r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags }
    }
}

/// The flags a program may set through `rt_sigreturn` (Linux's FIX_EFLAGS: AC, OF, DF, TF,
/// SF, ZF, AF, PF, CF, RF); the rest come from the running state (IF set, reserved bit 1).
pub const USER_FLAGS: u64 = (1 << 18) | (1 << 11) | (1 << 10) | (1 << 8) | (1 << 7) | (1 << 6) | (1 << 4) | (1 << 2) | 1 | (1 << 16);

/// The flags a handler starts with: the program's, without DF, TF and RF (as Linux clears them).
pub fn handler_flags(rflags: u64) -> u64 {
    (rflags & USER_FLAGS & !((1 << 10) | (1 << 8) | (1 << 16))) | 0x202
}

/// Sizes and offsets of the frame (`struct rt_sigframe`: the return address, the
/// `ucontext`, the `siginfo`), with the FP state (the 512-byte `fxsave` image) above it.
pub const UC_SIZE: u64 = 304;
pub const SIGINFO_SIZE: u64 = 128;
pub const FRAME_SIZE: u64 = 8 + UC_SIZE + SIGINFO_SIZE;
pub const FRAME_UC: u64 = 8;
pub const FRAME_INFO: u64 = 8 + UC_SIZE;
pub const FPSTATE_SIZE: u64 = 512;
/// Offsets inside the `ucontext`: uc_flags, uc_link, uc_stack (ss_sp, ss_flags, ss_size),
/// uc_mcontext (`struct sigcontext`, 256 bytes), uc_sigmask.
pub const UC_STACK: usize = 16;
pub const UC_MCONTEXT: usize = 40;
pub const UC_SIGMASK: usize = 296;
/// Offsets inside `struct sigcontext`: after the 18 registers, cs/gs/fs/ss, err, trapno,
/// oldmask, cr2, fpstate.
const SC_ERR: usize = 152;
const SC_TRAPNO: usize = 160;
const SC_OLDMASK: usize = 168;
const SC_CR2: usize = 176;
const SC_FPSTATE: usize = 184;
/// `uc_flags` as Linux sets them on x86-64 (UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS).
pub const UC_FLAGS: u64 = 0x6;
/// User code and stack selectors as a program sees them in `sigcontext`.
pub const USER_CS: u16 = 0x33;
pub const USER_SS: u16 = 0x2b;
/// Linux's red zone below the interrupted stack pointer, left alone.
pub const RED_ZONE: u64 = 128;

/// Where a frame goes: `fpstate` (64-byte aligned, `FPSTATE_SIZE`), `frame` (the handler's
/// stack pointer: 16-byte aligned minus 8, as after a call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub fpstate: u64,
    pub frame: u64,
}

/// The alternate stack (`sigaltstack`): base, size, flags (`SS_DISABLE`, `SS_AUTODISARM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AltStack {
    pub sp: u64,
    pub size: u64,
    pub flags: u32,
}

impl AltStack {
    pub const DISABLED: AltStack = AltStack { sp: 0, size: 0, flags: SS_DISABLE };

    pub fn enabled(&self) -> bool {
        self.flags & SS_DISABLE == 0 && self.size != 0
    }

    /// Whether `sp` is on it (Linux's `on_sig_stack`: `sp` in `(base, base + size]`).
    pub fn on(&self, sp: u64) -> bool {
        self.enabled() && sp > self.sp && sp - self.sp <= self.size
    }

    /// `stack_t` as 24 bytes: ss_sp, ss_flags (with `SS_ONSTACK` when `sp` is on it), ss_size.
    pub fn to_bytes(&self, sp: u64) -> [u8; 24] {
        let mut b = [0u8; 24];
        let flags = if !self.enabled() { SS_DISABLE } else if self.on(sp) { SS_ONSTACK } else { self.flags & SS_AUTODISARM };
        b[0..8].copy_from_slice(&self.sp.to_le_bytes());
        b[8..12].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b
    }
}

/// Where the frame for a handler goes: on the alternate stack if the action asks for it
/// (`SA_ONSTACK`), one is set and the program is not on it already; else below the red zone
/// of the interrupted stack. `None` when the numbers wrap (a stack pointer near 0).
pub fn place(sp: u64, flags: u64, alt: &AltStack) -> Option<Placement> {
    let top = if flags & SA_ONSTACK != 0 && alt.enabled() && !alt.on(sp) { alt.sp.checked_add(alt.size)? } else { sp.checked_sub(RED_ZONE)? };
    let fpstate = top.checked_sub(FPSTATE_SIZE)? & !63;
    let frame = (fpstate.checked_sub(FRAME_SIZE)? & !15).checked_sub(8)?;
    Some(Placement { fpstate, frame })
}

/// What a `ucontext` holds beyond the registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UcExtra {
    pub mask: u64,
    pub trapno: u64,
    pub err: u64,
    pub cr2: u64,
    pub fpstate: u64,
}

/// The `ucontext` Linux puts in the frame.
pub fn encode_ucontext(r: &Regs, x: &UcExtra, stack: &[u8; 24]) -> [u8; UC_SIZE as usize] {
    let mut b = [0u8; UC_SIZE as usize];
    b[0..8].copy_from_slice(&UC_FLAGS.to_le_bytes());
    b[UC_STACK..UC_STACK + 24].copy_from_slice(stack);
    let m = UC_MCONTEXT;
    for (i, v) in r.to_array().iter().enumerate() {
        b[m + i * 8..m + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    b[m + 144..m + 146].copy_from_slice(&USER_CS.to_le_bytes());
    b[m + 150..m + 152].copy_from_slice(&USER_SS.to_le_bytes());
    for (o, v) in [(SC_ERR, x.err), (SC_TRAPNO, x.trapno), (SC_OLDMASK, x.mask), (SC_CR2, x.cr2), (SC_FPSTATE, x.fpstate)] {
        b[m + o..m + o + 8].copy_from_slice(&v.to_le_bytes());
    }
    b[UC_SIGMASK..UC_SIGMASK + 8].copy_from_slice(&x.mask.to_le_bytes());
    b
}

/// What `rt_sigreturn` takes back from a `ucontext`: the registers, the signal mask, the FP
/// state's address (0: none) and the alternate stack it names.
pub fn decode_ucontext(b: &[u8]) -> Option<(Regs, u64, u64, AltStack)> {
    if b.len() < UC_SIZE as usize {
        return None;
    }
    let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let mut a = [0u64; 18];
    for (i, v) in a.iter_mut().enumerate() {
        *v = w(UC_MCONTEXT + i * 8);
    }
    let ss_flags = u32::from_le_bytes(b[UC_STACK + 8..UC_STACK + 12].try_into().unwrap_or([0; 4]));
    let alt = AltStack { sp: w(UC_STACK), size: w(UC_STACK + 16), flags: ss_flags & !SS_ONSTACK };
    Some((Regs::from_array(a), w(UC_SIGMASK), w(UC_MCONTEXT + SC_FPSTATE), alt))
}

/// `siginfo_t` (128 bytes): signo, errno 0, code; for a fault `si_addr` at 16; for a signal
/// a process sent, the sender's pid and uid at 16 and 20.
pub fn encode_siginfo(sig: u32, code: i32, addr_or_pid: u64, uid: u32) -> [u8; SIGINFO_SIZE as usize] {
    let mut b = [0u8; SIGINFO_SIZE as usize];
    b[0..4].copy_from_slice(&sig.to_le_bytes());
    b[8..12].copy_from_slice(&code.to_le_bytes());
    if is_fault(sig, code) {
        b[16..24].copy_from_slice(&addr_or_pid.to_le_bytes());
    } else {
        b[16..20].copy_from_slice(&(addr_or_pid as u32).to_le_bytes());
        b[20..24].copy_from_slice(&uid.to_le_bytes());
    }
    b
}

/// Whether `(sig, code)` is a fault's (its siginfo carries an address).
pub fn is_fault(sig: u32, code: i32) -> bool {
    matches!(sig, SIGSEGV | SIGBUS | SIGILL | SIGFPE | SIGTRAP) && code > 0 && code != SI_KERNEL
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Regs {
        Regs::from_array(core::array::from_fn(|i| 0x1000 + i as u64))
    }

    #[test]
    fn sigcontext_registers_sit_where_linux_and_musl_have_them() {
        let r = regs();
        let x = UcExtra { mask: 0x200, trapno: 14, err: 6, cr2: 0xdead, fpstate: 0x7000 };
        let b = encode_ucontext(&r, &x, &AltStack::DISABLED.to_bytes(0));
        let w = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        // musl's REG_* indices into gregs (uc_mcontext at 40): R8 0, RDI 8, RAX 13, RSP 15,
        // RIP 16, EFL 17, ERR 19, TRAPNO 20, OLDMASK 21, CR2 22; fpregs at 40 + 184.
        assert_eq!(w(40), r.r8);
        assert_eq!(w(40 + 8 * 8), r.rdi);
        assert_eq!(w(40 + 13 * 8), r.rax);
        assert_eq!(w(40 + 15 * 8), r.rsp);
        assert_eq!(w(40 + 16 * 8), r.rip);
        assert_eq!(w(40 + 17 * 8), r.rflags);
        assert_eq!(w(40 + 19 * 8), 6);
        assert_eq!(w(40 + 20 * 8), 14);
        assert_eq!(w(40 + 22 * 8), 0xdead);
        assert_eq!(w(40 + 184), 0x7000);
        assert_eq!(w(296), 0x200, "uc_sigmask after the 256-byte sigcontext");
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), SS_DISABLE);
        let (r2, mask, fp, alt) = decode_ucontext(&b).unwrap();
        assert_eq!((r2, mask, fp), (r, 0x200, 0x7000));
        assert!(!alt.enabled());
        assert!(decode_ucontext(&b[..300]).is_none());
    }

    #[test]
    fn frames_are_aligned_as_after_a_call_and_skip_the_red_zone() {
        let off = AltStack::DISABLED;
        for sp in [0x7fff_0000u64, 0x7fff_0008, 0x7fff_0fff, 0x7ffe_1233] {
            let p = place(sp, 0, &off).unwrap();
            assert_eq!((p.frame + 8) % 16, 0, "rsp + 8 is 16-aligned at a handler's entry");
            assert_eq!(p.fpstate % 64, 0);
            assert!(p.fpstate + FPSTATE_SIZE <= sp - RED_ZONE);
            assert!(p.frame + FRAME_SIZE <= p.fpstate);
        }
        assert_eq!(place(100, 0, &off), None);
    }

    #[test]
    fn the_alternate_stack_is_used_once_and_only_when_asked() {
        let alt = AltStack { sp: 0x10_0000, size: 0x4000, flags: 0 };
        let p = place(0x7fff_0000, SA_ONSTACK, &alt).unwrap();
        assert!(p.frame > alt.sp && p.fpstate + FPSTATE_SIZE <= alt.sp + alt.size);
        // Without SA_ONSTACK: the normal stack.
        assert!(place(0x7fff_0000, 0, &alt).unwrap().frame > 0x7000_0000);
        // Already on it (a nested signal): stays below the current sp, not at the top again.
        let nested = place(0x10_2000, SA_ONSTACK, &alt).unwrap();
        assert!(nested.frame < 0x10_2000 - RED_ZONE);
        assert!(alt.on(0x10_4000) && !alt.on(0x10_0000) && !alt.on(0x10_4001));
        assert_eq!(u32::from_le_bytes(alt.to_bytes(0x10_2000)[8..12].try_into().unwrap()), SS_ONSTACK);
    }

    #[test]
    fn actions_round_trip_and_defaults_match_signal_7() {
        let a = Action { handler: 0x401000, flags: SA_SIGINFO | SA_RESTORER, restorer: 0x402000, mask: bit(SIGUSR2) };
        assert_eq!(Action::from_bytes(&a.to_bytes()), a);
        assert_eq!(default_action(SIGSEGV), Default::Core);
        assert_eq!(default_action(SIGALRM), Default::Terminate);
        assert_eq!(default_action(SIGCHLD), Default::Ignore);
        assert_eq!(default_action(SIGTSTP), Default::Stop);
        assert_eq!(default_action(40), Default::Terminate);
        assert_eq!(bit(1), 1);
        assert_eq!(bit(64), 1 << 63);
    }

    #[test]
    fn faults_become_linux_signals() {
        assert_eq!(fault_signal(14, 6, 0x10, 0x400000), (SIGSEGV, SEGV_MAPERR, 0x10));
        assert_eq!(fault_signal(14, 7, 0x10, 0x400000), (SIGSEGV, SEGV_ACCERR, 0x10));
        assert_eq!(fault_signal(0, 0, 0, 0x401234), (SIGFPE, FPE_INTDIV, 0x401234));
        assert_eq!(fault_signal(6, 0, 0, 0x401234), (SIGILL, ILL_ILLOPN, 0x401234));
        assert_eq!(fault_signal(13, 0, 0, 0x401234), (SIGSEGV, SI_KERNEL, 0));
        let i = encode_siginfo(SIGSEGV, SEGV_MAPERR, 0x10, 0);
        assert_eq!(u64::from_le_bytes(i[16..24].try_into().unwrap()), 0x10);
        let k = encode_siginfo(SIGUSR1, SI_USER, 7, 0);
        assert_eq!(u32::from_le_bytes(k[16..20].try_into().unwrap()), 7);
        assert_eq!(i32::from_le_bytes(k[8..12].try_into().unwrap()), SI_USER);
    }

    #[test]
    fn handlers_start_without_direction_trap_or_resume_flags() {
        assert_eq!(handler_flags(0x202 | (1 << 10) | (1 << 8) | 1), 0x203);
        assert_eq!(handler_flags(0), 0x202);
        // IOPL and other system bits never pass through sigreturn.
        assert_eq!((0x3000 | 0x4000) & USER_FLAGS, 0);
    }
}
