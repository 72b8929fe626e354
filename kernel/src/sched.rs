//! Time-sharing on TC cores (NIX, seeds/003): a TC runs several user contexts, switching
//! between them round-robin at each timer tick that interrupts user mode.
//!
//! Each core has its own run queue (in its per-CPU area, `context::run_queue`) that only that core touches, always with
//! interrupts off, so it needs no lock. Another core hands a context to a TC through the TC's
//! active-message mailbox (`post`): the message runs on the TC and appends the context to the
//! queue there. Halting a queued context (`halt_queued`) is also a message; it only marks
//! the entry, and the owner frees it at its next safe point (an interrupt taken in user mode,
//! or between contexts in `context::run_context`), with interrupts on, because freeing a
//! context's objects can send TLB shootdowns and take locks.
//!
//! A switch happens only when the timer interrupts user mode: the interrupted registers are
//! saved in the outgoing context's queue entry and the incoming context's are written into
//! the interrupt frame, so the ordinary interrupt return enters it. No kernel stack is
//! switched (system calls are not preempted: a context in a system call is switched at the
//! next tick that finds it in user mode). The user x87/SSE registers (Linux programs use
//! SSE; the kernel, the library OS and native programs do not) are saved in the outgoing
//! context's entry and the incoming one's loaded at each switch (`cpu::fxsave`/`fxrstor`),
//! and a context starts with the initial state, so contexts time-sharing a core never see
//! each other's.
//!
//! XC and AC cores keep one context: `post` refuses a second one with `Busy` unless the core
//! is a TC.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicI64, Ordering};

use crate::arch::x86_64::idt::TrapFrame;
use crate::arch::x86_64::syscall::UserRegs;
use crate::arch::x86_64::{apic, cpu, paging};
use crate::context::{self, Context};
use crate::kobj::ObjRef;
use crate::percpu::{self, PerCpu};
use abi::{Error, PCORE_RUNNING, ROLE_AC, ROLE_KC, ROLE_TC};
use percore::TicketLock;

/// Contexts a TC holds besides the one running (`pcore_run` beyond that is `Busy`).
pub const MAX_QUEUED: usize = abi::TC_MAX_QUEUED;

/// A context that is not running: queued for the first time, or preempted.
pub struct Task {
    pub ctx: Context,
    /// Where it resumes (for a fresh context: its entry point and arguments).
    pub regs: UserRegs,
    /// It has run before (its start was counted on its pcore).
    pub started: bool,
    /// `pcore_halt` ended it while queued, with this code.
    pub halt: Option<u64>,
    /// Its x87/SSE registers (loaded when it runs again).
    pub fpu: cpu::FpState,
}

impl Task {
    pub fn new(ctx: Context) -> Task {
        let regs = UserRegs::fresh(ctx.rip, ctx.rsp, ctx.args);
        Task { ctx, regs, started: false, halt: None, fpu: cpu::FpState::initial() }
    }
}

struct Inner {
    ring: [Option<Task>; MAX_QUEUED],
    head: usize,
    len: usize,
    /// Some entry has `halt` set and waits to be freed.
    halts: bool,
    /// The running context called `pcore_yield`: switch at the next user-mode interrupt.
    yield_requested: bool,
}

impl Inner {
    /// Append `t`, or hand it back when the ring is full (never dropped here: see `with`).
    #[allow(clippy::result_large_err)]
    fn push(&mut self, t: Task) -> Result<(), Task> {
        if self.len == MAX_QUEUED {
            return Err(t);
        }
        let at = (self.head + self.len) % MAX_QUEUED;
        self.ring[at] = Some(t);
        self.len += 1;
        Ok(())
    }

    fn pop(&mut self) -> Option<Task> {
        if self.len == 0 {
            return None;
        }
        let t = self.ring[self.head].take();
        self.head = (self.head + 1) % MAX_QUEUED;
        self.len -= 1;
        t
    }

    /// Remove the first entry marked halted, keeping the others in order.
    fn take_halted(&mut self) -> Option<Task> {
        let mut found = None;
        for _ in 0..self.len {
            let Some(t) = self.pop() else { break };
            if found.is_none() && t.halt.is_some() {
                found = Some(t);
            } else if let Err(t) = self.push(t) {
                // Cannot fail: we just popped one. Never drop a context here (interrupts
                // are off); leaking it is the lesser harm.
                core::mem::forget(t);
            }
        }
        self.halts = (0..self.len).any(|i| self.ring[(self.head + i) % MAX_QUEUED].as_ref().is_some_and(|t| t.halt.is_some()));
        found
    }
}

/// A core's run queue (see the module comment). Owner core only, interrupts off.
pub struct RunQueue(UnsafeCell<Inner>);

// SAFETY: only the owning core touches the queue (`with` is reached through
// `percpu::this()` only), with interrupts disabled, so there is never a second reference.
unsafe impl Sync for RunQueue {}

impl RunQueue {
    pub const fn new() -> RunQueue {
        RunQueue(UnsafeCell::new(Inner { ring: [const { None }; MAX_QUEUED], head: 0, len: 0, halts: false, yield_requested: false }))
    }
}

impl Default for RunQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// Run `f` on the calling core's queue with interrupts off. `f` must not drop a context
/// (that may take locks and wait for other cores) and must not call `with` again.
fn with<R>(f: impl FnOnce(&mut Inner) -> R) -> R {
    let q = context::run_queue(percpu::this());
    cpu::without_interrupts(|| {
        // SAFETY: our own core's queue, interrupts off, and `f` does not re-enter `with`
        // (see the type's comment), so this is the only reference.
        let inner = unsafe { &mut *q.0.get() };
        f(inner)
    })
}

/// How many contexts wait in this core's queue.
pub fn queued() -> usize {
    with(|q| q.len)
}

/// Take the next context to run on this core, if any.
pub fn pop_next() -> Option<Task> {
    with(|q| q.pop())
}

/// Program this core's timer for a context of `pcore` about to run here, in this core's role.
pub fn set_timer_for(area: &PerCpu, pcore: &ObjRef) {
    let hz = pcore.as_pcore().map(|p| p.interval_hz.load(Ordering::Relaxed)).unwrap_or(0);
    apic::set_timer_hz(timer_hz_for(area.role.load(Ordering::Acquire), hz));
}

/// Timer period for a context starting on a core of `role` with interval `hz` (0 = none).
pub fn timer_hz_for(role: u64, hz: u64) -> u64 {
    match role {
        ROLE_AC => 0,
        ROLE_TC if hz == 0 => 100,
        _ => hz,
    }
}

/// Count a context's first start on its pcore (state before count, see `Pcore::stat`).
pub fn mark_started(area: &PerCpu, t: &mut Task) {
    if t.started {
        return;
    }
    t.started = true;
    area.stats.contexts_started.fetch_add(1, Ordering::Relaxed);
    if let Ok(p) = t.ctx.pcore.as_pcore() {
        p.state.store(PCORE_RUNNING, Ordering::Release);
        p.runs.fetch_add(1, Ordering::Release);
    }
}

/// Hand `ctx` to TC core `target` through its mailbox; it runs there after the contexts
/// queued before it. `NotPermitted` if the core became a KC, `Busy` if it is no longer a TC
/// and already has a context, or its queue is full; `NoSuchCore` if it is offline. On error
/// the context is dropped here, on the calling core.
pub fn post(target: usize, ctx: Context) -> Result<(), Error> {
    let cell = TicketLock::new(Some(ctx));
    let result = AtomicI64::new(abi::encode(Err(Error::NoSuchCore)));
    let me = percore::cpu_id();
    if percpu::get(target).is_none_or(|t| !t.online.load(Ordering::Acquire)) {
        return Err(Error::NoSuchCore);
    }
    crate::smp::run_on(
        &|_| {
            let r = accept(&cell);
            result.store(abi::encode(r.map(|_| 0)), Ordering::Release);
        },
        core::iter::once(target),
        target == me,
    );
    let left = cell.lock().take();
    drop(left);
    abi::decode(result.load(Ordering::Acquire)).map(|_| ())
}

/// On the target core (a mailbox job): queue the context in `cell`.
fn accept(cell: &TicketLock<Option<Context>>) -> Result<(), Error> {
    let area = percpu::this();
    let role = area.role.load(Ordering::Acquire);
    if role == ROLE_KC {
        return Err(Error::NotPermitted);
    }
    with(|q| {
        if role != ROLE_TC && area.busy.load(Ordering::Acquire) {
            return Err(Error::Busy); // XC and AC cores run one context
        }
        if q.len == MAX_QUEUED {
            return Err(Error::Busy);
        }
        let ctx = cell.lock().take().ok_or(Error::InvalidArgument)?;
        if q.push(Task::new(ctx)).is_err() {
            return Err(Error::Busy); // checked above; kept for clarity of the invariant
        }
        area.busy.store(true, Ordering::Release);
        // A context that started while this core was an XC may run without a timer: start
        // one so the queue gets its turns.
        if role == ROLE_TC && apic::timer_hz() == 0 && context::running(area).is_running() {
            apic::set_timer_hz(timer_hz_for(ROLE_TC, 0));
        }
        Ok(())
    })
}

/// On the owning core (a mailbox job): mark the queued context of pcore `pcore_key` halted
/// with `code`. Returns true if one was queued here.
pub fn halt_queued(pcore_key: usize, code: u64) -> bool {
    with(|q| {
        let mut found = false;
        for i in 0..q.len {
            let at = (q.head + i) % MAX_QUEUED;
            if let Some(t) = q.ring[at].as_mut() {
                if t.ctx.pcore.key() == pcore_key && t.halt.is_none() {
                    t.halt = Some(code);
                    found = true;
                }
            }
        }
        q.halts |= found;
        found
    })
}

/// On the owning core (a mailbox job): end every context of this core with `code` — the
/// running one at its next return to user mode, the queued ones at the next safe point.
pub fn stop_all(code: u64) {
    let area = percpu::this();
    if context::running(area).is_running() {
        context::request_exit(code);
    }
    with(|q| {
        for i in 0..q.len {
            let at = (q.head + i) % MAX_QUEUED;
            if let Some(t) = q.ring[at].as_mut() {
                if t.halt.is_none() {
                    t.halt = Some(code);
                    q.halts = true;
                }
            }
        }
    });
}

/// Free every queued context marked halted. Interrupts are on while each one is dropped.
fn reap_halted(area: &PerCpu) {
    loop {
        let t = with(|q| if q.halts { q.take_halted() } else { None });
        let Some(t) = t else { break };
        let code = t.halt.unwrap_or(abi::EXIT_FAULT_BASE);
        context::finish(area, t.ctx, code, t.started);
    }
}

/// Called by the timer (`tick`) and wake-IPI handlers, after EOI, when they interrupted user
/// mode: free halted queued contexts, and on a TC's tick switch to the next queued context.
pub fn on_user_interrupt(f: &mut TrapFrame, tick: bool) {
    let area = percpu::this();
    if area.exit_requested.load(Ordering::Acquire) != 0 {
        return; // this context ends on the way out; run_context picks the next one
    }
    let (len, halts) = with(|q| (q.len, q.halts));
    if len == 0 {
        return;
    }
    if halts {
        reap_halted(area);
    }
    let yielded = with(|q| core::mem::take(&mut q.yield_requested));
    if !(tick || yielded) || area.role.load(Ordering::Acquire) != ROLE_TC {
        return;
    }
    let Some(mut next) = with(|q| q.pop()) else { return };
    if next.ctx.root_ar.as_ar().is_err() {
        // Cannot happen (pcore_run takes only root ranges); end it rather than run it on
        // the wrong address space.
        next.halt = Some(abi::EXIT_FAULT_BASE);
        requeue(next);
        with(|q| q.halts = true);
        return;
    }
    let Some(cur) = context::running(area).set(None) else {
        requeue(next); // not possible from user mode: a context is running
        return;
    };
    switch_root(area.index, &cur, &next.ctx);
    let mut saved = Task { ctx: cur, regs: UserRegs::from_frame(f), started: true, halt: None, fpu: cpu::FpState::initial() };
    cpu::fxsave(&mut saved.fpu);
    cpu::fxrstor(&next.fpu);
    next.regs.to_frame(f);
    mark_started(area, &mut next);
    set_timer_for(area, &next.ctx.pcore);
    context::running(area).set(Some(next.ctx));
    requeue(saved);
    area.stats.context_switches.fetch_add(1, Ordering::Relaxed);
}

/// Put a task back at the tail, in an interrupt handler that has just taken one out (so
/// there is room; interrupts stayed off in between).
#[allow(clippy::result_large_err)]
fn requeue(t: Task) {
    if let Err(t) = with(|q| q.push(t)) {
        // Cannot fail (see above). Never drop a context with interrupts off.
        core::mem::forget(t);
    }
}

/// `pcore_yield`: on a TC with contexts queued, ask for a switch as the call returns. A
/// kernel core running a forwarded call, and every other core, ignore it.
pub fn request_yield() -> Result<u64, Error> {
    let me = percpu::this();
    if me.is_acting() || me.role.load(Ordering::Acquire) != ROLE_TC {
        return Ok(0);
    }
    with(|q| q.yield_requested = q.len > 0);
    Ok(0)
}

/// At the end of a system call: if it asked to yield, raise a wake IPI to this core with
/// interrupts off. It is taken as soon as `sysret` re-enables interrupts, so its frame is in
/// user mode and the handler switches there (switches happen only from user-mode frames).
/// Takes and gives back the call's encoded result `ret`, so the caller holds nothing across
/// the (rare) out-of-line part.
#[inline]
pub fn yield_on_return(me: &percpu::PerCpu, ret: i64) -> i64 {
    // On every system call's path: two loads for every core that is not a TC.
    if me.role.load(Ordering::Relaxed) == ROLE_TC && !me.is_acting() {
        return yield_if_requested(me, ret);
    }
    ret
}

/// `yield_on_return` on a TC (out of line: the common path keeps no registers for it).
#[inline(never)]
fn yield_if_requested(me: &percpu::PerCpu, ret: i64) -> i64 {
    if with(|q| q.yield_requested) {
        cpu::disable_interrupts();
        apic::send_ipi(me.apic_id, apic::VECTOR_WAKE);
    }
    ret
}

/// Move this core from `from`'s root range to `to`'s: join the new range's shootdown set
/// before loading it, leave the old one after (the CR3 load flushed its entries).
fn switch_root(me: usize, from: &Context, to: &Context) {
    if crate::kobj::kref::KRef::ptr_eq(&from.root_ar, &to.root_ar) {
        return;
    }
    let (Ok(old), Ok(new)) = (from.root_ar.as_ar(), to.root_ar.as_ar()) else { return };
    new.running.insert(me);
    paging::load_root(new.table);
    old.running.remove(me);
}

fn wake_handler(f: &mut crate::arch::x86_64::idt::TrapFrame) {
    let area = percpu::this();
    area.stats.ipis_received.fetch_add(1, Ordering::Relaxed);
    apic::eoi();
    crate::smp::run_mailbox(area);
    if f.cs & 3 == 3 {
        // A halt posted to a context queued here is freed now, not at the next tick.
        on_user_interrupt(f, false);
    }
}

/// The LAPIC timer: counts ticks (TC cores, `pcore_set_interval`); on a TC that interrupted
/// user mode, switches to the next queued context (`sched`).
fn timer_handler(f: &mut crate::arch::x86_64::idt::TrapFrame) {
    percpu::this().stats.timer_ticks.fetch_add(1, Ordering::Relaxed);
    apic::eoi();
    if f.cs & 3 == 3 {
        on_user_interrupt(f, true);
        // A Linux program's runtime may ask for ticks (its alarm timers).
        crate::context::linux_tick(f);
    }
}

/// The wake IPI and the LAPIC timer: their handlers end in the scheduler when they
/// interrupted user mode.
pub fn register_handlers() {
    crate::arch::x86_64::idt::register_handler(apic::VECTOR_WAKE, wake_handler);
    crate::arch::x86_64::idt::register_handler(apic::VECTOR_TIMER, timer_handler);
}
