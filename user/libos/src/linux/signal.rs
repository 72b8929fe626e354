//! Linux signals inside a program (docs/linux-abi.md, "Signals"): the actions, the mask,
//! the alternate stack, `kill`/`tkill`/`tgkill` to itself, `alarm`/`setitimer`, `pause`,
//! `rt_sigsuspend`, and delivery: on the way back from every dispatched call, from a fault
//! of the program's own (the kernel reflects it, `abi::LINUX_EVENTS`) and from a timer tick
//! while an alarm is armed. A handler gets a Linux-layout `rt_sigframe`
//! (`linuxabi::signal`) on its stack or the alternate stack, with the x87/SSE state saved
//! by `fxsave`; its restorer's `rt_sigreturn` puts everything back.
//!
//! Pending signals live in a [`SignalSlot`]: two atomic words another process's runtime can
//! write (`post`), so `kill` from another process (and a thread's `tgkill`) needs no lock
//! of this one. Everything else (actions, mask, alternate stack, timer) is the process's
//! [`State`], private to the runtime that runs it.

use core::sync::atomic::{AtomicU64, Ordering};

use linuxabi::errno::*;
use linuxabi::signal::{self as ls, bit, Action, AltStack, Regs, UNBLOCKABLE};

use super::dispatch::{Process, PROC};
use super::thread;
use super::upcall::{self, Frame, FpState};

/// A process's pending signals: a bit per signal, and the cores on which a thread of the
/// process may be halted waiting for one (bit `core % 64`; 0: none). `repr(C)` and nothing
/// but atomics, so it can sit in a segment several processes map (the process table's
/// slots); `post` is all a sender does. Every sleeper of the process that a signal must
/// end (`pause`, `rt_sigsuspend`, `nanosleep`, a futex wait, `wait4`) sets its core's bit
/// while it sleeps (`futex::sleep_until_sig`), so a process-directed signal wakes it at once.
#[repr(C)]
pub struct SignalSlot {
    pub pending: AtomicU64,
    pub sleeper: AtomicU64,
}

/// The `SignalSlot::sleeper` bit of `core`.
pub fn core_bit(core: u64) -> u64 {
    1 << (core % 64)
}

/// Wake every core of a `SignalSlot::sleeper` mask.
pub fn wake_cores(mut mask: u64) {
    while mask != 0 {
        let c = u64::from(mask.trailing_zeros());
        mask &= mask - 1;
        let _ = crate::sys::wake(c);
    }
}

impl SignalSlot {
    pub const fn new() -> SignalSlot {
        SignalSlot { pending: AtomicU64::new(0), sleeper: AtomicU64::new(0) }
    }
}

impl core::default::Default for SignalSlot {
    fn default() -> Self {
        SignalSlot::new()
    }
}

/// The slot of the one process this runtime runs. A process table that maps slots shared
/// between runtimes gives each process its own instead (`State::slot`).
pub static OWN: SignalSlot = SignalSlot::new();

/// Make `sig` pending in `target` and wake the runtime if it sleeps waiting for one. From
/// any runtime, for any process or thread whose slot it can reach; lock-free.
/// `Err(-EINVAL)` for a number outside 1..=64.
pub fn post(target: &SignalSlot, sig: u32) -> Result<(), i64> {
    if sig == 0 || sig > ls::NSIG {
        return Err(-EINVAL);
    }
    target.pending.fetch_or(bit(sig), Ordering::SeqCst);
    wake_cores(target.sleeper.load(Ordering::SeqCst));
    Ok(())
}

/// `ITIMER_REAL`: when `SIGALRM` is due (ns since boot, 0: disarmed) and its reload.
#[derive(Debug, Clone, Copy, Default)]
struct Timer {
    deadline: u64,
    interval: u64,
}

/// Internal results of a call a signal interrupts: restart it after a handler with
/// `SA_RESTART` (or when no handler ran), else `-EINTR`; `NOHAND`: restart only when no
/// handler ran. Never seen by the program.
pub const ERESTARTSYS: i64 = 512;
pub const ERESTARTNOHAND: i64 = 514;

/// A process's signal state (not the pending set: that is its slot's).
pub struct State {
    actions: [Action; 65],
    alt: AltStack,
    /// The mask `rt_sigsuspend` replaced, put back after the handler it waited for.
    suspend_mask: Option<u64>,
    /// For signals the process sent itself: `si_code` and the sender's pid.
    info: [(i32, u32); 65],
    timer: Timer,
    /// Whether the runtime asked for timer ticks, and the core's rate before.
    ticks: Option<u64>,
    /// The program's stack pointer at the call being dispatched.
    pub call_rsp: u64,
    /// Registers to resume with instead of returning from the call (`rt_sigreturn`).
    resume: Option<Regs>,
    /// Whether the way back from a call must look beyond the pending word: `resume` is set,
    /// the timer is armed, or the call may have been interrupted (`interrupted`).
    slow: bool,
    /// The signal that ended the program, if one did.
    pub killed_by: Option<u32>,
    pub slot: &'static SignalSlot,
}

impl State {
    pub fn new() -> State {
        OWN.pending.store(0, Ordering::SeqCst);
        State {
            actions: [Action::default(); 65],
            alt: AltStack::DISABLED,
            suspend_mask: None,
            info: [(ls::SI_USER, 0); 65],
            timer: Timer::default(),
            ticks: None,
            call_rsp: 0,
            resume: None,
            slow: false,
            killed_by: None,
            slot: &OWN,
        }
    }

    /// What `execve` keeps and resets (as Linux): caught signals go back to their default
    /// action (a handler's address means nothing in the new image), ignored ones stay
    /// ignored; the mask, the pending set and the alarm stay; the alternate stack goes.
    pub fn reset_on_exec(&mut self) {
        for a in self.actions.iter_mut() {
            if a.handler > 1 {
                *a = Action::default();
            }
        }
        self.alt = AltStack::DISABLED;
        self.suspend_mask = None;
        self.resume = None;
    }

    /// A forked child's copy (as Linux): no alarm (timers are not inherited), no ticks asked
    /// for, nothing waiting to resume; actions, mask and alternate stack are kept.
    pub fn after_fork(&mut self) {
        self.timer = Timer::default();
        self.ticks = None;
        self.resume = None;
        self.suspend_mask = None;
        self.slow = false;
    }

    /// Stop the timer ticks (the program ended).
    pub fn finish(&mut self) {
        self.timer = Timer::default();
        set_ticks(self, false);
    }
}

impl State {
    /// The calling thread's mask (`rt_sigprocmask` is per thread: its slot's word).
    #[inline]
    pub fn mask(&self) -> u64 {
        thread::me().sigmask.load(Ordering::Relaxed)
    }

    pub fn set_mask(&mut self, m: u64) {
        thread::me().sigmask.store(m, Ordering::Relaxed);
    }

    /// `ppoll`, `pselect6`, `epoll_pwait` with a mask: the calling thread's mask is `m` (less
    /// what cannot be blocked) for the wait, set under the process lock before its first look
    /// (so the swap and the wait are one step for a signal: one `m` unblocks ends the wait);
    /// the mask before is kept, as `rt_sigsuspend` keeps it, to come back by `end_wait_mask`
    /// or, when a signal ended the wait, after its handler (`deliver`).
    pub fn begin_wait_mask(&mut self, m: u64) {
        let old = self.mask();
        self.set_mask(m & !UNBLOCKABLE);
        self.suspend_mask = Some(old);
    }

    /// The wait ended without a signal: the mask before `begin_wait_mask` comes back now (a
    /// signal only `m` unblocked stays pending, as Linux's `restore_saved_sigmask_unless`).
    pub fn end_wait_mask(&mut self) {
        if let Some(m) = self.suspend_mask.take() {
            self.set_mask(m);
        }
    }
}

impl core::default::Default for State {
    fn default() -> Self {
        State::new()
    }
}

/// What to do once the lock is dropped.
pub enum Next {
    /// Go back to the program with these registers.
    Resume(Regs),
    /// End it with this status.
    Exit(u64),
}

fn now() -> u64 {
    crate::time::now_ns()
}

/// The registers as Linux leaves them after a `syscall` returning `f.ret`.
fn regs_after_call(f: &Frame) -> Regs {
    let rflags = f.nr_flags & 0xFFFF_FFFF;
    Regs {
        r8: f.r8,
        r9: f.r9,
        r10: f.r10,
        r11: rflags,
        r12: f.r12,
        r13: f.r13,
        r14: f.r14,
        r15: f.r15,
        rdi: f.rdi,
        rsi: f.rsi,
        rbp: f.rbp,
        rbx: f.rbx,
        rdx: f.rdx,
        rax: f.ret,
        rcx: f.rip,
        rsp: f.rsp,
        rip: f.rip,
        rflags,
    }
}

/// After a dispatched call: anything to deliver (or `rt_sigreturn`'s registers) changes
/// where the program resumes; `None`: return from the call as usual. The common case costs
/// one load of the pending word and a few compares.
#[inline]
pub fn after_call(p: &mut Process, f: &Frame, nr: u32) -> Option<Next> {
    let s = &p.sig;
    let me = thread::me();
    if !s.slow && (s.slot.pending.load(Ordering::Relaxed) | me.pending.load(Ordering::Relaxed)) & !me.sigmask.load(Ordering::Relaxed) == 0 {
        return None;
    }
    after_call_slow(p, f, nr)
}

fn after_call_slow(p: &mut Process, f: &Frame, nr: u32) -> Option<Next> {
    let (regs, forced, restart) = match p.sig.resume.take() {
        Some(r) => (r, true, None),
        None => {
            let ret = f.ret as i64;
            let r = if ret == -ERESTARTSYS || ret == -ERESTARTNOHAND { Some((u64::from(nr), ret)) } else { None };
            (regs_after_call(f), false, r)
        }
    };
    check_timer(p);
    let next = deliver(p, regs, restart);
    p.sig.slow = p.sig.timer.deadline != 0 || p.sig.resume.is_some();
    match next {
        Next::Resume(r) if !forced && restart.is_none() && r == regs => None,
        n => Some(n),
    }
}

/// What a call a signal interrupted returns (`code`: `ERESTARTSYS` or `ERESTARTNOHAND`):
/// the way back then restarts it or makes it `-EINTR` (`deliver`). For the blocking calls
/// of other parts (`wait4`, `futex`, pipe reads) too.
pub fn interrupted(p: &mut Process, code: i64) -> i64 {
    p.sig.slow = true;
    -code
}

/// Post `SIGALRM` if the timer is due, and reload or disarm it.
fn check_timer(p: &mut Process) {
    let t = p.sig.timer;
    if t.deadline == 0 {
        return;
    }
    let n = now();
    if n < t.deadline {
        return;
    }
    p.sig.info[ls::SIGALRM as usize] = (ls::SI_KERNEL, 0);
    let _ = post(p.sig.slot, ls::SIGALRM);
    p.sig.timer.deadline = if t.interval > 0 { n + t.interval } else { 0 };
    if p.sig.timer.deadline == 0 {
        set_ticks(&mut p.sig, false);
    }
}

/// For a wait without the process lock (`nanosleep`): whether an unblocked signal that does
/// something is pending for the calling thread now (the alarm checked first), and until when
/// the wait may sleep at most (`end`, or the alarm's deadline if that is sooner).
pub fn wait_check(p: &mut Process, end: u64) -> (bool, u64) {
    check_timer(p);
    let d = if p.sig.timer.deadline != 0 { end.min(p.sig.timer.deadline) } else { end };
    (deliverable(p), d)
}

/// Timer ticks reflected to the runtime (`abi::LINUX_EV_TICKS`) at 100 Hz while an alarm is
/// armed, so a program computing without calls still gets its `SIGALRM`; the core's own
/// rate comes back afterwards.
fn set_ticks(s: &mut State, on: bool) {
    const HZ: u64 = 100;
    let me = crate::pcore();
    match (on, s.ticks) {
        (true, None) => {
            let before = crate::sys::pcore_stat(me).map(|st| st.interval_hz).unwrap_or(0);
            let _ = crate::sys::linux_personality(abi::LINUX_EVENTS, upcall::event_upcall(), abi::LINUX_EV_FAULTS | abi::LINUX_EV_TICKS, 0);
            if before == 0 || before < HZ {
                let _ = crate::sys::pcore_set_interval(me, HZ);
            }
            s.ticks = Some(before);
        }
        (false, Some(before)) => {
            let _ = crate::sys::linux_personality(abi::LINUX_EVENTS, upcall::event_upcall(), abi::LINUX_EV_FAULTS, 0);
            if before < HZ {
                let _ = crate::sys::pcore_set_interval(me, before);
            }
            s.ticks = None;
        }
        _ => {}
    }
}

/// Whether SIG_DFL ignores `sig` here (stop and continue are ignored too: no job control).
fn ignored(a: &Action, sig: u32) -> bool {
    match a.handler {
        ls::SIG_IGN => true,
        ls::SIG_DFL => matches!(ls::default_action(sig), ls::Default::Ignore | ls::Default::Stop | ls::Default::Continue),
        _ => false,
    }
}

/// The calling thread's pending signals: its own (`tkill`/`tgkill` to it) and the process's.
fn pending(p: &Process) -> u64 {
    p.sig.slot.pending.load(Ordering::SeqCst) | thread::me().pending.load(Ordering::SeqCst)
}

/// Take `sig` off the pending sets: the thread's own first, else the process's.
fn take(p: &Process, sig: u32) {
    let me = thread::me();
    if me.pending.fetch_and(!bit(sig), Ordering::SeqCst) & bit(sig) == 0 {
        p.sig.slot.pending.fetch_and(!bit(sig), Ordering::SeqCst);
    }
}

/// Whether the calling thread has an unblocked signal pending (the process's or its own),
/// without the process lock: `slot` is the process's pending set. For waits that must end
/// for a signal (`futex`).
pub fn pending_for_me(slot: &SignalSlot) -> bool {
    let me = thread::me();
    (slot.pending.load(Ordering::SeqCst) | me.pending.load(Ordering::SeqCst)) & !me.sigmask.load(Ordering::SeqCst) != 0
}

/// Unblocked pending signals that would do something; ignored ones are dropped on the way
/// (Linux discards them when they are sent).
fn deliverable(p: &mut Process) -> bool {
    loop {
        let set = pending(p) & !p.sig.mask();
        if set == 0 {
            return false;
        }
        let sig = set.trailing_zeros() + 1;
        if !ignored(&p.sig.actions[sig as usize], sig) {
            return true;
        }
        take(p, sig);
    }
}

/// Deliver the lowest unblocked pending signal, if any, to the program interrupted with
/// `regs`; `restart` is the call and its internal result when a call was interrupted.
fn deliver(p: &mut Process, mut regs: Regs, restart: Option<(u64, i64)>) -> Next {
    loop {
        let set = pending(p) & !p.sig.mask();
        if set == 0 {
            break;
        }
        let sig = set.trailing_zeros() + 1;
        take(p, sig);
        let act = p.sig.actions[sig as usize];
        let (code, pid) = core::mem::replace(&mut p.sig.info[sig as usize], (ls::SI_USER, 0));
        if ignored(&act, sig) {
            continue;
        }
        if act.handler == ls::SIG_DFL {
            return kill(p, sig);
        }
        if let Some((_, ret)) = restart {
            let rax = if ret == -ERESTARTSYS && act.flags & ls::SA_RESTART != 0 { restart_regs(&mut regs, restart) } else { -EINTR as u64 };
            regs.rax = rax;
        }
        let info = ls::encode_siginfo(sig, code, u64::from(pid), 0);
        return match frame(p, sig, &act, &regs, &info, (0, 0, 0)) {
            Some(r) => Next::Resume(r),
            None => kill(p, ls::SIGSEGV),
        };
    }
    // Nothing delivered: an interrupted call starts again; rt_sigsuspend's mask goes back.
    if let Some(m) = p.sig.suspend_mask.take() {
        p.sig.set_mask(m);
    }
    if restart.is_some() {
        let rax = restart_regs(&mut regs, restart);
        regs.rax = rax;
    }
    Next::Resume(regs)
}

/// Point `regs` back at the `syscall` instruction with the call's number: it runs again.
fn restart_regs(regs: &mut Regs, restart: Option<(u64, i64)>) -> u64 {
    regs.rip -= 2;
    restart.map(|r| r.0).unwrap_or(0)
}

/// End the program as killed by `sig` (status 128 + sig, as a shell reports it).
fn kill(p: &mut Process, sig: u32) -> Next {
    p.sig.killed_by = Some(sig);
    p.sig.finish();
    Next::Exit(128 + u64::from(sig))
}

/// Build the frame for `act`'s handler of `sig` and return the handler's registers; `None`
/// if the frame does not fit in the program's memory (Linux then kills with SIGSEGV).
fn frame(p: &mut Process, sig: u32, act: &Action, regs: &Regs, info: &[u8; 128], fault: (u64, u64, u64)) -> Option<Regs> {
    if act.flags & ls::SA_RESTORER == 0 {
        return None; // x86-64 Linux has no default restorer
    }
    let place = ls::place(regs.rsp, act.flags, &p.sig.alt)?;
    let mut fx = FpState([0; 512]);
    upcall::fxsave(&mut fx);
    let space = &p.image.space;
    if !space.ok(place.frame, place.fpstate + ls::FPSTATE_SIZE - place.frame, true) {
        return None;
    }
    let oldmask = p.sig.suspend_mask.take().unwrap_or(p.sig.mask());
    let (trapno, err, cr2) = fault;
    let uc = ls::encode_ucontext(regs, &ls::UcExtra { mask: oldmask, trapno, err, cr2, fpstate: place.fpstate }, &p.sig.alt.to_bytes(regs.rsp));
    let ok = space.put(place.fpstate, &fx.0) && space.put(place.frame, &act.restorer.to_le_bytes()) && space.put(place.frame + ls::FRAME_UC, &uc) && space.put(place.frame + ls::FRAME_INFO, info);
    if !ok {
        return None;
    }
    if act.flags & ls::SA_ONSTACK != 0 && p.sig.alt.flags & ls::SS_AUTODISARM != 0 && p.sig.alt.enabled() {
        p.sig.alt = AltStack::DISABLED;
    }
    let mut m = oldmask | act.mask;
    if act.flags & ls::SA_NODEFER == 0 {
        m |= bit(sig);
    }
    p.sig.set_mask(m & !UNBLOCKABLE);
    if act.flags & ls::SA_RESETHAND != 0 {
        p.sig.actions[sig as usize] = Action::default();
    }
    let mut r = *regs;
    r.rip = act.handler;
    r.rsp = place.frame;
    r.rdi = u64::from(sig);
    r.rsi = place.frame + ls::FRAME_INFO;
    r.rdx = place.frame + ls::FRAME_UC;
    r.rax = 0;
    r.rflags = ls::handler_flags(regs.rflags);
    Some(r)
}

/// A fault of the program (`abi::LINUX_EVENT_FAULT`): its signal goes to a handler that is
/// set and not blocked; otherwise (as Linux's forced signals) it ends the program.
fn on_fault(p: &mut Process, ev: &abi::LinuxEvent, regs: Regs) -> Next {
    let (sig, code, addr) = ls::fault_signal(ev.vector, ev.error, ev.addr, ev.rip);
    let act = p.sig.actions[sig as usize];
    if act.handler <= ls::SIG_IGN || p.sig.mask() & bit(sig) != 0 {
        return kill(p, sig);
    }
    let info = ls::encode_siginfo(sig, code, addr, 0);
    match frame(p, sig, &act, &regs, &info, (ev.vector, ev.error, ev.addr)) {
        Some(r) => Next::Resume(r),
        None => kill(p, ls::SIGSEGV),
    }
}

/// The kernel resumed the runtime with a fault or tick of the program (`upcall.rs`'s
/// `__linux_event`, on the upcall stack).
pub extern "C" fn linux_event() {
    let mut ev = abi::LinuxEvent::default();
    let next = match crate::sys::linux_take_event(&mut ev) {
        Ok(true) => {
            let regs = Regs {
                r8: ev.r8,
                r9: ev.r9,
                r10: ev.r10,
                r11: ev.r11,
                r12: ev.r12,
                r13: ev.r13,
                r14: ev.r14,
                r15: ev.r15,
                rdi: ev.rdi,
                rsi: ev.rsi,
                rbp: ev.rbp,
                rbx: ev.rbx,
                rdx: ev.rdx,
                rax: ev.rax,
                rcx: ev.rcx,
                rsp: ev.rsp,
                rip: ev.rip,
                rflags: ev.rflags,
            };
            let mut g = PROC.lock();
            match g.as_mut() {
                Some(p) if ev.kind == abi::LINUX_EVENT_FAULT => {
                    on_fault(p, &ev, regs)
                }
                Some(p) => {
                    check_timer(p);
                    deliver(p, regs, None)
                }
                None => Next::Exit(127),
            }
        }
        _ => {
            crate::println!("linux: resumed for an event the kernel does not have; ending the program");
            Next::Exit(127)
        }
    };
    match next {
        Next::Resume(r) => upcall::resume(&r),
        Next::Exit(status) => upcall::leave(status),
    }
}

/// Wait until an unblocked signal that does something is pending for the calling thread
/// (true), or the program ends (false). Sleeps without the process lock (the program's
/// other threads go on), taking it only to look (the alarm is checked there, and ignored
/// signals dropped); a poster wakes it through the process's sleeper mask or the thread's
/// slot (`tgkill`), the alarm's deadline bounds each sleep.
fn wait_for_signal(psig: &'static SignalSlot) -> bool {
    let me = thread::me();
    loop {
        let until = {
            let mut g = super::dispatch::lock_proc();
            let Some(p) = g.as_mut() else { return false };
            let (hit, until) = wait_check(p, u64::MAX);
            if hit {
                return true;
            }
            until
        };
        if thread::must_leave() {
            return false;
        }
        super::futex::sleep_until_sig(me, Some(psig), until, || pending_for_me(psig));
    }
}

// ---------------------------------------------------------------------------------------
// The calls

pub fn sys_rt_sigaction(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (sig, act, old, size) = (a[0], a[1], a[2], a[3]);
    if size != 8 {
        return -EINVAL;
    }
    let new = if act != 0 {
        match p.image.space.read(act, 32) {
            Some(b) => Some(Action::from_bytes(&<[u8; 32]>::try_from(b).unwrap_or([0; 32]))),
            None => return -EFAULT,
        }
    } else {
        None
    };
    if sig == 0 || sig > u64::from(ls::NSIG) || (new.is_some() && bit(sig as u32) & UNBLOCKABLE != 0) {
        return -EINVAL;
    }
    let sig = sig as u32;
    if old != 0 && !p.image.space.ok(old, 32, true) {
        return -EFAULT;
    }
    let prev = p.sig.actions[sig as usize];
    if let Some(mut n) = new {
        n.mask &= !UNBLOCKABLE;
        p.sig.actions[sig as usize] = n;
        if ignored(&n, sig) {
            p.sig.slot.pending.fetch_and(!bit(sig), Ordering::SeqCst);
            for t in thread::SLOTS.iter() {
                t.pending.fetch_and(!bit(sig), Ordering::SeqCst);
            }
        }
    }
    if old != 0 {
        p.image.space.put(old, &prev.to_bytes());
    }
    0
}

pub fn sys_rt_sigprocmask(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (how, set, old, size) = (a[0], a[1], a[2], a[3]);
    if size != 8 {
        return -EINVAL;
    }
    let prev = p.sig.mask();
    if set != 0 {
        let Some(v) = p.image.space.get_u64(set) else { return -EFAULT };
        let m = match how {
            0 => prev | v,
            1 => prev & !v,
            2 => v,
            _ => return -EINVAL,
        };
        if old != 0 && !p.image.space.ok(old, 8, true) {
            return -EFAULT;
        }
        p.sig.set_mask(m & !UNBLOCKABLE);
    }
    if old != 0 && !p.image.space.put(old, &prev.to_le_bytes()) {
        return -EFAULT;
    }
    0
}

pub fn sys_rt_sigpending(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (set, size) = (a[0], a[1]);
    if size > 8 {
        return -EINVAL;
    }
    let v = pending(p) & p.sig.mask();
    if !p.image.space.put(set, &v.to_le_bytes()[..size as usize]) {
        return -EFAULT;
    }
    0
}

pub fn sys_rt_sigreturn(p: &mut Process, _a: &[u64; 6]) -> i64 {
    // The restorer's `ret` popped the frame's return address: the ucontext is at rsp.
    let at = p.sig.call_rsp;
    let Some(b) = p.image.space.read(at, ls::UC_SIZE) else { return bad_frame(p) };
    let Some((mut regs, mask, fpstate, alt)) = ls::decode_ucontext(b) else { return bad_frame(p) };
    if fpstate != 0 {
        let Some(fb) = p.image.space.read(fpstate, ls::FPSTATE_SIZE) else { return bad_frame(p) };
        let mut fx = FpState([0; 512]);
        fx.0.copy_from_slice(fb);
        upcall::fxrstor(&mut fx);
    }
    if regs.rip >= abi::USER_END || regs.rsp >= abi::USER_END {
        return bad_frame(p);
    }
    p.sig.set_mask(mask & !UNBLOCKABLE);
    // The alternate stack the frame names, where it is valid (as sigaltstack takes it).
    if !alt.enabled() || alt.size >= ls::MINSIGSTKSZ {
        if !p.sig.alt.on(regs.rsp) {
            p.sig.alt = if alt.enabled() { alt } else { AltStack::DISABLED };
        }
    }
    regs.rflags = (regs.rflags & ls::USER_FLAGS) | 0x202;
    let rax = regs.rax;
    p.sig.resume = Some(regs);
    p.sig.slow = true;
    rax as i64
}

/// A frame `rt_sigreturn` cannot use: Linux forces SIGSEGV.
fn bad_frame(p: &mut Process) -> i64 {
    p.sig.actions[ls::SIGSEGV as usize] = Action::default();
    let m = p.sig.mask() & !bit(ls::SIGSEGV);
    p.sig.set_mask(m);
    let _ = post(p.sig.slot, ls::SIGSEGV);
    0
}

pub fn sys_sigaltstack(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (ss, old) = (a[0], a[1]);
    let sp = p.sig.call_rsp;
    let prev = p.sig.alt.to_bytes(sp);
    if ss != 0 {
        let Some(b) = p.image.space.read(ss, 24) else { return -EFAULT };
        let base = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
        let flags = u32::from_le_bytes(b[8..12].try_into().unwrap_or([0; 4]));
        let size = u64::from_le_bytes(b[16..24].try_into().unwrap_or([0; 8]));
        if p.sig.alt.on(sp) {
            return -EPERM;
        }
        let mode = flags & !ls::SS_AUTODISARM;
        if mode != 0 && mode != ls::SS_DISABLE && mode != ls::SS_ONSTACK {
            return -EINVAL;
        }
        let new = if mode == ls::SS_DISABLE {
            AltStack::DISABLED
        } else {
            if size < ls::MINSIGSTKSZ {
                return -ENOMEM;
            }
            AltStack { sp: base, size, flags: flags & ls::SS_AUTODISARM }
        };
        if old != 0 && !p.image.space.ok(old, 24, true) {
            return -EFAULT;
        }
        p.sig.alt = new;
    }
    if old != 0 && !p.image.space.put(old, &prev) {
        return -EFAULT;
    }
    0
}

/// `kill`/`tkill`/`tgkill` at this process (`proc::sys_kill` sends to the others).
fn send_self(p: &mut Process, sig: u64, code: i32) -> i64 {
    if sig > u64::from(ls::NSIG) {
        return -EINVAL;
    }
    if sig == 0 {
        return 0;
    }
    p.sig.info[sig as usize] = (code, p.procs.pid);
    match post(p.sig.slot, sig as u32) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `kill` to the calling process itself (its pid): the sender's pid and `SI_USER` in the
/// siginfo. `proc::sys_kill` calls it for that case and posts to the table for the others.
pub fn kill_self(p: &mut Process, sig: u64) -> i64 {
    send_self(p, sig, ls::SI_USER)
}

pub fn sys_tkill(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (tid, sig) = (a[0] as i32, a[1]);
    if tid <= 0 || sig > u64::from(ls::NSIG) {
        return -EINVAL;
    }
    send_thread(p, i64::from(tid), sig)
}

pub fn sys_tgkill(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (tgid, tid, sig) = (a[0] as i32, a[1] as i32, a[2]);
    if tgid <= 0 || tid <= 0 || sig > u64::from(ls::NSIG) {
        return -EINVAL;
    }
    if tgid as u32 != p.procs.pid {
        return -ESRCH;
    }
    send_thread(p, i64::from(tid), sig)
}

/// `tkill`/`tgkill` to thread `tid` of this process: pending for that thread alone (its
/// slot's word), which it takes on its way back from its next call; a thread asleep in a
/// futex wait or a signal wait is woken. `ESRCH` for a tid that is none of this process's.
fn send_thread(p: &mut Process, tid: i64, sig: u64) -> i64 {
    let Some(t) = thread::find_tid(tid) else { return -ESRCH };
    if sig == 0 {
        return 0;
    }
    p.sig.info[sig as usize] = (ls::SI_TKILL, p.procs.pid);
    t.pending.fetch_or(bit(sig as u32), Ordering::SeqCst);
    thread::kick(t);
    0
}

/// `pause`: sleeps (without the process lock) until a signal that does something comes;
/// always `EINTR` once a handler ran (`ERESTARTNOHAND`).
pub fn sys_pause(_f: &mut Frame) -> i64 {
    let psig = match super::dispatch::lock_proc().as_ref() {
        Some(p) => p.sig.slot,
        None => return -ENOSYS,
    };
    wait_for_signal(psig);
    match super::dispatch::lock_proc().as_mut() {
        Some(p) => interrupted(p, ERESTARTNOHAND),
        None => -EINTR,
    }
}

/// `rt_sigsuspend(set, size)`: the calling thread's mask is `set` until a signal that does
/// something comes (sleeping without the process lock); the handler runs with it and the
/// mask before comes back after (`suspend_mask`, put back by `deliver`).
pub fn sys_rt_sigsuspend(f: &mut Frame) -> i64 {
    let (set, size) = (f.rdi, f.rsi);
    let psig = {
        let mut g = super::dispatch::lock_proc();
        let Some(p) = g.as_mut() else { return -ENOSYS };
        if size != 8 {
            return -EINVAL;
        }
        let Some(m) = p.image.space.get_u64(set) else { return -EFAULT };
        let old = p.sig.mask();
        p.sig.set_mask(m & !UNBLOCKABLE);
        p.sig.suspend_mask = Some(old);
        p.sig.slot
    };
    wait_for_signal(psig);
    match super::dispatch::lock_proc().as_mut() {
        Some(p) => interrupted(p, ERESTARTNOHAND),
        None => -EINTR,
    }
}

/// `struct timeval` pairs as `setitimer` passes them: (interval, value) in ns, or `EINVAL`.
fn itimerval(b: &[u8]) -> Result<(u64, u64), i64> {
    let w = |o: usize| i64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let tv = |s: i64, us: i64| if s < 0 || !(0..1_000_000).contains(&us) { Err(-EINVAL) } else { Ok((s as u64).saturating_mul(1_000_000_000).saturating_add(us as u64 * 1000)) };
    Ok((tv(w(0), w(8))?, tv(w(16), w(24))?))
}

fn itimerval_bytes(interval: u64, value: u64) -> [u8; 32] {
    let mut b = [0u8; 32];
    let put = |b: &mut [u8; 32], o: usize, ns: u64| {
        b[o..o + 8].copy_from_slice(&(ns / 1_000_000_000).to_le_bytes());
        b[o + 8..o + 16].copy_from_slice(&((ns % 1_000_000_000) / 1000).to_le_bytes());
    };
    put(&mut b, 0, interval);
    put(&mut b, 16, value);
    b
}

/// What is left of the timer now (ns), and its interval.
fn timer_now(p: &Process) -> (u64, u64) {
    let t = p.sig.timer;
    let left = if t.deadline == 0 { 0 } else { t.deadline.saturating_sub(now()).max(1000) };
    (t.interval, left)
}

fn arm(p: &mut Process, interval: u64, value: u64) {
    p.sig.timer = Timer { deadline: if value == 0 { 0 } else { now() + value }, interval };
    p.sig.slow |= value != 0;
    set_ticks(&mut p.sig, value != 0);
}

const ITIMER_REAL: u64 = 0;

pub fn sys_setitimer(p: &mut Process, a: &[u64; 6]) -> i64 {
    let (which, new, old) = (a[0], a[1], a[2]);
    let (interval, value) = if new != 0 {
        let Some(b) = p.image.space.read(new, 32) else { return -EFAULT };
        match itimerval(b) {
            Ok(v) => v,
            Err(e) => return e,
        }
    } else {
        (0, 0)
    };
    if which != ITIMER_REAL {
        return -EINVAL; // ITIMER_VIRTUAL and ITIMER_PROF are not built
    }
    if old != 0 && !p.image.space.ok(old, 32, true) {
        return -EFAULT;
    }
    let (pi, pv) = timer_now(p);
    arm(p, interval, value);
    if old != 0 {
        p.image.space.put(old, &itimerval_bytes(pi, pv));
    }
    0
}

pub fn sys_getitimer(p: &mut Process, a: &[u64; 6]) -> i64 {
    if a[0] != ITIMER_REAL {
        return -EINVAL;
    }
    let (i, v) = timer_now(p);
    if p.image.space.put(a[1], &itimerval_bytes(i, v)) { 0 } else { -EFAULT }
}

pub fn sys_alarm(p: &mut Process, a: &[u64; 6]) -> i64 {
    let secs = a[0] as u32;
    let (_, left) = timer_now(p);
    arm(p, 0, u64::from(secs) * 1_000_000_000);
    // Seconds left of the previous alarm, rounded to the nearest (at least 1 if one was set).
    let s = (left + 500_000_000) / 1_000_000_000;
    if left > 0 && s == 0 { 1 } else { s as i64 }
}
