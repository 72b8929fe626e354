//! User contexts: what a pcore runs: a root share, the share set, a root address range and
//! the pcore object. An XC or AC core runs one context (Corey's default); a TC time-shares
//! several (`sched`). A context starts when `pcore_run` hands it to a core and ends when it
//! halts or takes a fatal fault; then its references are dropped, which frees whatever
//! nothing else holds.

use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::Ordering;

use crate::arch::x86_64::idt::{GeneralRegs, TrapFrame};
use crate::arch::x86_64::{apic, cpu, paging, syscall};
use crate::sched::{self, Task};
use crate::kobj::{ar, ObjRef};
use crate::percpu::{self, PerCpu};
use percore::TicketLock;
use abi::{Error, EXIT_FAULT_BASE, PCORE_HALTED};

pub struct Context {
    pub root_share: ObjRef,
    /// Shares given at `pcore_run` (the root share is not in here).
    pub shares: Vec<ObjRef>,
    pub root_ar: ObjRef,
    pub pcore: ObjRef,
    pub rip: u64,
    pub rsp: u64,
    pub args: [u64; 3],
    /// The gate of the protected procedure call this context is in (the innermost one), if
    /// any. While it is set, `root_ar`, `root_share` and `shares` are the gate's; the
    /// context's own are kept in the gate (`kobj::gate`).
    pub ppc: Option<ObjRef>,
    /// How many calls `ppc` stands for (nested calls).
    pub ppc_depth: u32,
    /// Gates bound for `ppc_call(PPC_BOUND, slot, ..)` (`kobj::gate::bind`), each for the
    /// identity that bound it.
    pub bound: crate::kobj::gate::BoundSlots,
    /// The Linux personality this context registered, if any (`personality`).
    pub linux: Option<crate::personality::Personality>,
    /// A fault or tick reflected to the personality's runtime, not yet taken
    /// (`personality::reflect`, `LINUX_TAKE_EVENT`).
    pub linux_event: Option<abi::LinuxEvent>,
}

impl Context {
    /// A context that starts at `rip` with stack `rsp` and arguments `args`, in no call.
    pub fn new(root_share: ObjRef, shares: Vec<ObjRef>, root_ar: ObjRef, pcore: ObjRef, rip: u64, rsp: u64, args: [u64; 3]) -> Context {
        Context { root_share, shares, root_ar, pcore, rip, rsp, args, ppc: None, ppc_depth: 0, bound: crate::kobj::gate::NO_BOUND, linux: None, linux_event: None }
    }
}

/// A core's whole per-CPU area: the architecture's `PerCpu`, then this layer's room in it, at
/// a fixed offset from the area's start, so a system call reaches its context with the same
/// one gs-relative load as `PerCpu`'s own fields (`percpu::AreaLayout`).
#[repr(C)]
pub struct CoreArea {
    cpu: PerCpu,
    /// The user context this core runs, if any (owner core only).
    running: ContextSlot,
    /// A context handed to this core by `pcore_run`, waiting to start.
    pending: TicketLock<Option<Context>>,
    /// Contexts waiting to run on this core (a TC's time-sharing queue; owner core only).
    runq: sched::RunQueue,
}

/// Registered first thing at boot (`percpu::set_layout`): every core's area is a `CoreArea`.
pub static AREA_LAYOUT: percpu::AreaLayout = percpu::AreaLayout { size: core::mem::size_of::<CoreArea>(), make: make_area };

/// # Safety
/// As `percpu::make_area`: `p` is valid for writes of a `CoreArea` and suitably aligned.
unsafe fn make_area(p: *mut PerCpu, index: usize, apic_id: u32, node: u32) {
    let area = CoreArea { cpu: PerCpu::new(index, apic_id, node), running: ContextSlot::new(), pending: TicketLock::new(None), runq: sched::RunQueue::new() };
    // SAFETY: the caller's guarantee.
    unsafe { (p as *mut CoreArea).write(area) }
}

#[inline(always)]
fn whole(area: &PerCpu) -> &CoreArea {
    // SAFETY: every published area was made by `make_area` (`AREA_LAYOUT` is registered
    // before the first area is made, and `percpu::publish` refuses areas before that), so
    // `area` is the first field of a `CoreArea` (repr(C): at offset 0) that lives as long.
    unsafe { &*(area as *const PerCpu as *const CoreArea) }
}

/// The run queue of core `area` (`sched`).
#[inline(always)]
pub fn run_queue(area: &PerCpu) -> &sched::RunQueue {
    &whole(area).runq
}

/// The running-context slot of core `area`.
#[inline(always)]
pub fn running(area: &PerCpu) -> &ContextSlot {
    &whole(area).running
}

/// The running context of a core. Only its own core touches it, never from an interrupt
/// handler except through `exit_requested` (an atomic).
pub struct ContextSlot(UnsafeCell<Option<Context>>);

// SAFETY: owner-core-only access, as documented above.
unsafe impl Sync for ContextSlot {}

impl ContextSlot {
    pub const fn new() -> Self {
        ContextSlot(UnsafeCell::new(None))
    }

    pub fn is_running(&self) -> bool {
        self.get().is_some()
    }

    fn get(&self) -> Option<&Context> {
        // SAFETY: only the owning core calls this (through `percpu::acting()`), or the kernel
        // core serving it while the owner is blocked in `roles::forward`; no &mut to the slot
        // is alive while system calls run (it is set before entering user mode and taken
        // after leaving it).
        unsafe { (*self.0.get()).as_ref() }
    }

    /// The root range of the context, for the kernel core that serves this core's forwarded
    /// system calls (the owner is blocked waiting for the answer).
    pub fn root_for_server(&self) -> Option<ObjRef> {
        self.get().map(|c| c.root_ar.clone())
    }

    fn get_mut(&self) -> Option<&mut Context> {
        // SAFETY: as for get; callers keep the reference only within one system call step.
        unsafe { (*self.0.get()).as_mut() }
    }

    /// Replace the running context (this core only: starting, ending, or `sched` switching
    /// in an interrupt taken from user mode, when no system call holds a reference).
    pub(crate) fn set(&self, c: Option<Context>) -> Option<Context> {
        // The core's system-call entry follows the running context's Linux personality.
        // SAFETY: every slot is the `running` field of a `CoreArea` (`running` is the only
        // way to reach one), whose first field is that core's `PerCpu` (repr(C)).
        let area = unsafe { &*((self as *const Self as *const u8).sub(core::mem::offset_of!(CoreArea, running)) as *const PerCpu) };
        crate::personality::install(area, c.as_ref().and_then(|c| c.linux));
        // SAFETY: as for get; called only outside user mode, and never while a system call
        // of this core (or a kernel core serving it) holds a reference from `get`.
        unsafe { core::mem::replace(&mut *self.0.get(), c) }
    }
}

/// Run `f` on the calling core's context (system calls only).
#[inline]
pub fn with_current<R>(f: impl FnOnce(&Context) -> R) -> Result<R, Error> {
    running(percpu::acting()).get().map(f).ok_or(Error::NotPermitted)
}

/// This core's own running context, for a system call that came straight from it (not a
/// kernel core acting for another core): the protected procedure calls, which change the
/// context's identity in place. The reference must not outlive the system call.
#[inline(always)]
pub fn current_mut() -> Option<&'static mut Context> {
    current_mut_of(percpu::this())
}

/// `current_mut` with this core's area already at hand (`area` must be `percpu::this()`).
#[inline(always)]
pub fn current_mut_of(area: &'static percpu::PerCpu) -> Option<&'static mut Context> {
    running(area).get_mut()
}

/// Mutable access for the few calls that change the share set.
pub fn with_current_mut<R>(f: impl FnOnce(&mut Context) -> R) -> Result<R, Error> {
    running(percpu::acting()).get_mut().map(f).ok_or(Error::NotPermitted)
}

/// Run `f` with `ctx` as this core's context, then take it back: how a kernel core acts
/// for a syscall ring (roles.rs), whose requests run with the share set and address range
/// the ring was made with while the context that made it keeps running elsewhere. Only for
/// a core with no context of its own (kernel cores never run one); otherwise `Busy`.
pub fn serve_as<R>(ctx: Context, f: impl FnOnce() -> R) -> Result<(R, Context), Error> {
    let area = percpu::this();
    if running(area).is_running() || area.is_acting() {
        return Err(Error::Busy);
    }
    running(area).set(Some(ctx));
    let r = f();
    let ctx = running(area).set(None).ok_or(Error::Busy)?;
    Ok((r, ctx))
}

/// End the calling core's context (or, on a kernel core serving a forwarded call, the
/// client's) when it next returns to user mode.
pub fn request_exit(code: u64) {
    let area = percpu::acting();
    area.exit_code.store(code, Ordering::Relaxed);
    area.exit_requested.store(1, Ordering::Release);
}

/// Hand `ctx` to core `core`, which must be online and idle.
pub fn start_on(core: usize, ctx: Context) -> Result<(), Error> {
    let target = percpu::get(core).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    if target.role.load(Ordering::Acquire) == abi::ROLE_KC {
        return Err(Error::NotPermitted); // kernel cores never run user code
    }
    if target.busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Err(Error::Busy);
    }
    *whole(target).pending.lock_irqsave() = Some(ctx);
    if core != percore::cpu_id() {
        apic::send_ipi(target.apic_id, apic::VECTOR_WAKE);
    }
    Ok(())
}

/// From the idle loop (interrupts off): start a context handed to this core (an XC's or
/// AC's single context, or a TC's queue), if any, and run it and whatever is queued behind
/// it to their ends. Returns true if one ran.
pub fn run_pending() -> bool {
    let area = percpu::this();
    let task = match whole(area).pending.lock_irqsave().take() {
        Some(ctx) => Some(Task::new(ctx)),
        None => sched::pop_next(),
    };
    let Some(task) = task else { return false };
    run_tasks(area, task, false);
    true
}

/// Run a context on this core until it ends, then release it (init's path). On a TC the
/// contexts queued here run alongside it; when it ends, those still queued are ended too
/// (as init's contexts on other cores are), so this returns. Returns the exit code of `ctx`.
pub fn run_context(area: &PerCpu, ctx: Context) -> u64 {
    let first = ctx.pcore.clone();
    run_tasks(area, Task::new(ctx), true);
    let code = first.as_pcore().map(|p| p.exit_code.load(Ordering::Acquire)).unwrap_or(EXIT_FAULT_BASE);
    drop(first);
    code
}

/// Run `first`, then whatever is queued on this core, until nothing is left. With
/// `stop_with_first`, the queued contexts are ended once `first` has ended.
fn run_tasks(area: &PerCpu, first: Task, stop_with_first: bool) {
    let first_key = first.ctx.pcore.key();
    let mut task = Some(first);
    while let Some(t) = task.take() {
        let ended = run_task(area, t);
        if stop_with_first && ended == Some(first_key) {
            sched::stop_all(EXIT_FAULT_BASE);
        }
        task = sched::pop_next();
        if task.as_ref().is_some_and(|t| t.halt.is_none()) {
            area.stats.context_switches.fetch_add(1, Ordering::Relaxed);
        }
    }
    crate::arch::x86_64::apic::set_timer_hz(0);
}

/// Enter `t` and return when the context running on this core ends (with time-sharing, not
/// necessarily `t`: the others are in the queue again). Returns the pcore key of the context
/// that ended.
fn run_task(area: &PerCpu, mut t: Task) -> Option<usize> {
    let me = area.index;
    let key = t.ctx.pcore.key();
    if let Some(code) = t.halt {
        finish(area, t.ctx, code, t.started);
        return Some(key);
    }
    let Ok(root) = t.ctx.root_ar.as_ar() else {
        finish(area, t.ctx, EXIT_FAULT_BASE, t.started);
        return Some(key);
    };
    // Join the root's running set (shootdown targets) before anyone can see us running.
    root.running.insert(me);
    paging::load_root(root.table);
    sched::mark_started(area, &mut t);
    sched::set_timer_for(area, &t.ctx.pcore);
    area.exit_code.store(0, Ordering::Relaxed);
    area.exit_requested.store(0, Ordering::Relaxed);
    let regs = t.regs;
    // Its x87/SSE registers: what it left when it was switched out, or the initial state.
    cpu::fxrstor(&t.fpu);
    running(area).set(Some(t.ctx));
    syscall::run_user_regs(&regs);
    // Back in the kernel, interrupts off, the running context has ended.
    paging::load_kernel_root();
    let ctx = running(area).set(None);
    let code = area.exit_code.load(Ordering::Relaxed);
    let ctx = ctx?;
    let key = ctx.pcore.key();
    if let Ok(root) = ctx.root_ar.as_ar() {
        root.running.remove(me);
    }
    finish(area, ctx, code, true);
    Some(key)
}

/// Release an ended context and report it on its pcore. `started`: it ran (its start was
/// counted); a context ended before it started still counts as a run, so joiners see it end.
pub(crate) fn finish(area: &PerCpu, ctx: Context, code: u64, started: bool) {
    let pcore = ctx.pcore.clone();
    // Dropping the context may free ranges, segments and shares: allow interrupts meanwhile
    // so TLB shootdowns from other cores are not held up.
    let token = cpu::irq_save();
    cpu::enable_interrupts();
    // A context ending in the middle of protected procedure calls gives their gates back
    // (and with them its own root share, which `owner` below must name).
    let mut ctx = ctx;
    let gates = crate::kobj::gate::unwind(&mut ctx);
    drop(gates);
    let owner = ctx.root_share.id;
    drop(ctx);
    // Cores the core scheduler granted to this context go back to its pool.
    crate::coresched::owner_gone(owner);
    cpu::disable_interrupts();
    // Free the core before reporting HALTED, so whoever sees HALTED can run it again at
    // once. This core picks up a new context only after returning to its idle loop, so the
    // HALTED store below cannot overwrite a newer RUNNING. A TC stays busy while contexts
    // remain queued or one runs.
    if !running(area).is_running() && sched::queued() == 0 {
        area.busy.store(false, Ordering::Release);
    }
    if let Ok(p) = pcore.as_pcore() {
        p.exit_code.store(code, Ordering::Release);
        p.state.store(PCORE_HALTED, Ordering::Release);
        if !started {
            p.runs.fetch_add(1, Ordering::Release);
        }
    }
    drop(pcore);
    cpu::irq_restore(token);
}

/// Ask core `core` to end its context if it is running pcore `pcore_key` (or still has it
/// pending). Waits until the request has been delivered, not until the context is gone.
pub fn halt_remote(core: usize, pcore_key: usize, code: u64) {
    crate::smp::run_on(
        &|_| {
            let area = percpu::this();
            if running(area).get().is_some_and(|c| c.pcore.key() == pcore_key) {
                request_exit(code);
                return;
            }
            if crate::sched::halt_queued(pcore_key, code) {
                return; // freed by this core at its next safe point
            }
            let mut pending = whole(area).pending.lock_irqsave();
            if pending.as_ref().is_some_and(|c| c.pcore.key() == pcore_key) {
                let ctx = pending.take();
                drop(pending);
                if let Some(ctx) = ctx {
                    let pcore = ctx.pcore.clone();
                    drop(ctx);
                    area.busy.store(false, Ordering::Release);
                    if let Ok(p) = pcore.as_pcore() {
                        // Ended before it started: still a run, so joiners see it end.
                        p.exit_code.store(code, Ordering::Release);
                        p.state.store(PCORE_HALTED, Ordering::Release);
                        p.runs.fetch_add(1, Ordering::Release);
                    }
                }
            }
        },
        core::iter::once(core),
        core == percore::cpu_id(),
    );
}

/// Exceptions that belong to a user context: faults in user mode, and page faults taken by
/// the kernel while copying user memory. Returns true if handled (resolved, redirected to
/// the copy's failure path, or the context was told to end).
pub fn handle_exception(f: &mut TrapFrame) -> bool {
    let from_user = f.cs & 3 == 3;
    let uaccess_fixup = syscall::uaccess_fixup_for(f.rip);
    if !from_user && !(f.vector == 14 && uaccess_fixup.is_some()) {
        return false;
    }
    if f.vector == 14 {
        let addr = cpu::read_cr2();
        let write = f.error & 2 != 0;
        let exec = f.error & 16 != 0;
        let resolved = if addr >= abi::USER_BASE && addr < abi::USER_END {
            // Borrowed, not cloned: the running context's reference keeps the root alive
            // for the whole fault (the context is replaced only outside this handler), and a
            // clone would write the root's count line on every fault.
            let root = running(percpu::acting()).get().map(|c| &*c.root_ar);
            match root {
                Some(root) => {
                    // Resolving may wait for a range lock held by a core that is waiting for
                    // our TLB shootdown acknowledgement: take interrupts meanwhile.
                    let reenable = f.rflags & (1 << 9) != 0;
                    if reenable {
                        cpu::enable_interrupts();
                    }
                    // Faults are not injection points (see mm::inject), even inside a call.
                    let area = percpu::this();
                    let was = area.injectable.swap(crate::percpu::NOT_IN_CALL, Ordering::Relaxed);
                    let r = ar::fault::resolve_fault(root, addr & !0xFFF, write, exec);
                    area.injectable.store(was, Ordering::Relaxed);
                    cpu::disable_interrupts();
                    r
                }
                None => Err(ar::FaultError::NotMapped),
            }
        } else {
            Err(ar::FaultError::NotMapped)
        };
        match resolved {
            Ok(_) => {
                paging::invlpg(addr);
                return true;
            }
            Err(why) => {
                if let Some(fixup) = uaccess_fixup {
                    f.rip = fixup;
                    return true;
                }
                if from_user && reflect_fault(f, addr) {
                    return true;
                }
                let rip = f.rip;
                if abort_call(f) {
                    crate::log::kprintln!("user fault: page fault at {addr:#x} ({why:?}) in a protected procedure call's handler, rip {rip:#x}; the call ends");
                    return true;
                }
                crate::log::kprintln!(
                    "user fault: page fault at {addr:#x} ({why:?}, {} {}), rip {:#x}; ending the context",
                    if write { "write" } else { "read" },
                    if exec { "fetch" } else { "" },
                    f.rip
                );
                request_exit(EXIT_FAULT_BASE + 14);
                return true;
            }
        }
    }
    if reflect_fault(f, 0) {
        return true;
    }
    let (vector, error, rip) = (f.vector, f.error, f.rip);
    if abort_call(f) {
        crate::log::kprintln!(
            "user fault: {} (vector {vector}, error {error:#x}) at rip {rip:#x} in a protected procedure call's handler; the call ends",
            crate::arch::x86_64::idt::exception_name(vector),
        );
        return true;
    }
    crate::log::kprintln!(
        "user fault: {} (vector {}, error {:#x}) at rip {:#x}; ending the context",
        crate::arch::x86_64::idt::exception_name(f.vector),
        f.vector,
        f.error,
        f.rip
    );
    request_exit(EXIT_FAULT_BASE + f.vector);
    true
}

/// A user-mode fault of a Linux program goes to its runtime (`personality::reflect`) instead
/// of ending the context, when the runtime asked for that.
fn reflect_fault(f: &mut TrapFrame, addr: u64) -> bool {
    match running(percpu::this()).get_mut() {
        Some(c) => crate::personality::reflect(&c.linux, c.ppc.is_some(), &mut c.linux_event, f, abi::LINUX_EVENT_FAULT, addr),
        None => false,
    }
}

/// A timer tick that interrupted user mode on this core: reflected to the running context's
/// runtime if it asked for ticks (`personality::reflect`; its Linux program's alarms).
pub fn linux_tick(f: &mut TrapFrame) {
    let area = percpu::this();
    if area.linux_upcall.load(Ordering::Relaxed) == 0 {
        return; // no personality installed here: one load and a branch
    }
    if let Some(c) = running(area).get_mut() {
        crate::personality::reflect(&c.linux, c.ppc.is_some(), &mut c.linux_event, f, abi::LINUX_EVENT_TICK, 0);
    }
}

/// A fatal user-mode fault inside a protected procedure call ends the call, not the context:
/// the caller resumes after its `ppc_call` with `CallAborted` and the handler's registers
/// cleared (nothing of the server's leaks to it). Returns false if the context is in no call
/// (the fault is the context's own).
fn abort_call(f: &mut TrapFrame) -> bool {
    let area = percpu::this();
    let Some(c) = running(area).get_mut() else { return false };
    let mut caller = crate::arch::x86_64::syscall::UserReturn::default();
    let Some(gate) = crate::kobj::gate::leave(c, &mut caller) else { return false };
    f.regs = GeneralRegs { rax: abi::encode(Err(Error::CallAborted)) as u64, ..GeneralRegs::default() };
    f.rip = caller.rip;
    f.rsp = caller.rsp;
    f.rflags = caller.rflags;
    // The caller's root range is loaded: the gate may go now (its last reference may be
    // this one), with interrupts on as for any free.
    let reenable = f.rflags & (1 << 9) != 0;
    if reenable {
        cpu::enable_interrupts();
    }
    drop(gate);
    cpu::disable_interrupts();
    area.stats.ppc_aborts.fetch_add(1, Ordering::Relaxed);
    true
}
