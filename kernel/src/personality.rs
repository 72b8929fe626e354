//! The Linux personality's kernel half: reflection of foreign `syscall`s to the library OS.
//!
//! A context registers (`nr::LINUX_PERSONALITY`, `LINUX_ON`) the address range of its own
//! native code and an upcall entry. While such a context runs on a core, that core's
//! `syscall` enters at `syscall_entry_linux` (arch/x86_64/syscall.rs): a call made from
//! inside the native range goes on as any call; one made from anywhere else (the Linux
//! program's code) returns to user mode at the upcall at once, with the caller's rip in
//! rax and the number in the top half of r11, every other register untouched. The library
//! OS's Linux dispatcher (user/libos/src/linux/) runs the call there and returns to the
//! program itself. So a Linux system call costs the kernel ten instructions and a
//! `syscall`/`sysret` pair, writes no memory, and contexts without a personality keep
//! the plain entry (nothing on their path changes). See docs/linux-abi.md.
//!
//! The record lives in the context (`Context::linux`) and is installed on the core whenever
//! the running context changes (`install`, from `ContextSlot::set`): LSTAR, the per-CPU
//! range and upcall, and the user FS base (`LINUX_SET_FS`: the Linux program's thread
//! pointer, which no native program uses).
//!
//! Faults and ticks (`LINUX_EVENTS`): a user-mode exception, or a timer tick the runtime
//! asked for, that interrupts the context outside its native range is reflected too
//! (`reflect`): the registers are kept in the context (`Context::linux_event`) and the
//! context resumes at the runtime's event upcall, which takes them (`LINUX_TAKE_EVENT`) and
//! turns them into a Linux signal. A fault inside the native range still ends the context.
//!
//! Limits: the call must come from the context's own core (a call forwarded from an
//! application core is `NotPermitted`: the MSRs belong to the caller's core), and not from
//! inside a protected procedure call (`NotPermitted`); x87/SSE state is not saved across
//! time-shared contexts on a TC (none of the kernel, the library OS or native programs use
//! it; two Linux programs time-sharing one core would see each other's).

use core::sync::atomic::Ordering;

use crate::arch::x86_64::idt::TrapFrame;
use crate::arch::x86_64::syscall::set_linux_entry;
use crate::percpu::PerCpu;
use abi::{Error, LinuxEvent, LINUX_EVENTS, LINUX_EVENT_FAULT, LINUX_EV_FAULTS, LINUX_EV_TICKS, LINUX_OFF, LINUX_ON, LINUX_SET_FS, USER_BASE, USER_END};

/// A context's Linux personality.
#[derive(Clone, Copy, Debug, Default)]
pub struct Personality {
    /// The context's native code: `syscall`s returning inside `[native_lo, native_hi)`.
    pub native_lo: u64,
    pub native_hi: u64,
    /// Where a reflected call resumes in user mode (inside the native range).
    pub upcall: u64,
    /// The user FS base while the context runs.
    pub fs_base: u64,
    /// Where a reflected fault or tick resumes (`LINUX_EVENTS`; 0: none), and which
    /// (`LINUX_EV_*`).
    pub event_upcall: u64,
    pub events: u64,
}

/// Make the core's entry match `p` (the personality of the context about to run here, or
/// none). Called with interrupts off whenever the running context changes; a core that had
/// no personality and gets none does nothing (one load and a branch).
pub fn install(area: &PerCpu, p: Option<Personality>) {
    let had = area.linux_upcall.load(Ordering::Relaxed) != 0;
    match p {
        Some(p) => {
            area.linux_native_lo.store(p.native_lo, Ordering::Relaxed);
            area.linux_native_hi.store(p.native_hi, Ordering::Relaxed);
            area.linux_upcall.store(p.upcall, Ordering::Relaxed);
            set_linux_entry(true, p.fs_base);
        }
        None if had => {
            area.linux_upcall.store(0, Ordering::Relaxed);
            set_linux_entry(false, 0);
        }
        None => {}
    }
}

/// Apply `linux_personality(op, a0, a1, a2)` (see `abi::nr::LINUX_PERSONALITY`) to a
/// context's record `cur`; the caller installs the result on its core.
pub fn apply(cur: &mut Option<Personality>, a: &[u64; 6]) -> Result<(), Error> {
    let user = |v: u64| (USER_BASE..USER_END).contains(&v);
    match a[0] {
        LINUX_ON => {
            let (upcall, lo, hi) = (a[1], a[2], a[3]);
            if lo >= hi || !(lo..hi).contains(&upcall) {
                return Err(Error::InvalidArgument);
            }
            if !user(lo) || hi > USER_END {
                return Err(Error::BadAddress);
            }
            let fs_base = cur.map(|p| p.fs_base).unwrap_or(0);
            *cur = Some(Personality { native_lo: lo, native_hi: hi, upcall, fs_base, event_upcall: 0, events: 0 });
        }
        LINUX_OFF => *cur = None,
        LINUX_SET_FS => {
            let base = a[1];
            if base != 0 && !user(base) {
                return Err(Error::BadAddress);
            }
            cur.as_mut().ok_or(Error::NotPermitted)?.fs_base = base;
        }
        LINUX_EVENTS => {
            let p = cur.as_mut().ok_or(Error::NotPermitted)?;
            let (upcall, flags) = (a[1], a[2]);
            if flags & !(LINUX_EV_FAULTS | LINUX_EV_TICKS) != 0 || (flags != 0 && !(p.native_lo..p.native_hi).contains(&upcall)) {
                return Err(Error::InvalidArgument);
            }
            p.event_upcall = if flags != 0 { upcall } else { 0 };
            p.events = flags;
        }
        _ => return Err(Error::InvalidArgument),
    }
    Ok(())
}

/// Reflect a user-mode fault (`LINUX_EVENT_FAULT`, with its vector, error code and address)
/// or timer tick (`LINUX_EVENT_TICK`) of the running context, interrupted at `f`, to its
/// runtime. `p` is the context's personality, `in_call` whether it is in a protected
/// procedure call, `kept` its event record (`Context::linux_event`). When the context asked
/// for that kind (`LINUX_EVENTS`), was interrupted outside its native range (the Linux
/// program's code, never the runtime's own), is in no protected procedure call and has no
/// event kept already, its registers go to `kept` and `f` resumes at the event upcall with
/// interrupts on and the direction, trap and alignment flags clear. Returns false (nothing
/// changed) otherwise: a fault then ends the context as before, a tick is not seen.
pub fn reflect(p: &Option<Personality>, in_call: bool, kept: &mut Option<LinuxEvent>, f: &mut TrapFrame, kind: u64, addr: u64) -> bool {
    let Some(p) = p else { return false };
    let flag = if kind == LINUX_EVENT_FAULT { LINUX_EV_FAULTS } else { LINUX_EV_TICKS };
    if p.events & flag == 0 || (p.native_lo..p.native_hi).contains(&f.rip) || in_call || kept.is_some() {
        return false;
    }
    let (vector, error) = if kind == LINUX_EVENT_FAULT { (f.vector, f.error) } else { (0, 0) };
    *kept = Some(LinuxEvent {
        kind,
        vector,
        error,
        addr,
        rax: f.regs.rax,
        rbx: f.regs.rbx,
        rcx: f.regs.rcx,
        rdx: f.regs.rdx,
        rsi: f.regs.rsi,
        rdi: f.regs.rdi,
        rbp: f.regs.rbp,
        rsp: f.rsp,
        r8: f.regs.r8,
        r9: f.regs.r9,
        r10: f.regs.r10,
        r11: f.regs.r11,
        r12: f.regs.r12,
        r13: f.regs.r13,
        r14: f.regs.r14,
        r15: f.regs.r15,
        rip: f.rip,
        rflags: f.rflags,
    });
    f.rip = p.event_upcall;
    f.rflags = 0x202;
    true
}

/// `LINUX_TAKE_EVENT` for a context with personality `p` and event record `kept`: the kept
/// event, forgotten once copied out.
pub fn take_event(p: &Option<Personality>, kept: &mut Option<LinuxEvent>, buf: u64) -> Result<u64, Error> {
    if p.is_none() {
        return Err(Error::NotPermitted);
    }
    let Some(ev) = *kept else { return Ok(0) };
    crate::arch::x86_64::syscall::write_user(buf, &ev)?;
    *kept = None;
    Ok(1)
}
