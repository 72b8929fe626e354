//! Core roles (NIX, seeds/003) and kernel cores (Corey section 3.2).
//!
//! - **XC** (default): runs one context, user and kernel code, no timer unless asked.
//! - **TC**: like XC but takes timer interrupts (100 Hz unless `pcore_set_interval` says
//!   otherwise), and time-shares several contexts round-robin (`sched`).
//! - **AC**: runs one context with no timer or device interrupts; every system call it makes
//!   is forwarded to a kernel core and runs there.
//! - **KC**: never runs user code; it polls the forwarding slots of the cores it serves and
//!   its own mailbox, and halts (woken by IPI) when there has been nothing to do for a while.
//!
//! Forwarding: each core has one request slot on its own cache lines (an AC makes one system
//! call at a time). The AC fills it, marks it PENDING and sends a wake IPI only if its kernel
//! core is not polling. A kernel core takes a PENDING request with a compare-and-swap, so
//! exactly one core runs it, even while roles change: a request whose server is no longer a
//! kernel core is adopted by any kernel core, so a role change never loses a request. The
//! kernel core runs the call on the AC's behalf: it switches to the AC's root address range
//! (joining its shootdown set) and acts with the AC's share set. If no kernel core answers
//! within the deadline the AC gets `Busy`, not a hang.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::arch::x86_64::{apic, cpu, paging};
use crate::dev::Armed;
use crate::kobj::device::{rings_of, set_rings_state, Ring, Taken, NOT_ATTACHED, TAKE_MAX};
use crate::kobj::kref::{KRef, KWeak};
use crate::percpu::{self, CoreSlots, PerCpu};
use crate::smp;
use abi::{nr, Error, RING_ATTACHED, RING_BROKEN, RING_STOPPED, ROLE_AC, ROLE_KC, ROLE_TC, ROLE_XC};
use percore::{CachePadded, MAX_CORES};

const EMPTY: u32 = 0;
const PENDING: u32 = 1;
const TAKEN: u32 = 2;
const DONE: u32 = 3;
const CANCELLED: u32 = 4;

pub const NO_CORE: usize = usize::MAX;

/// How long an AC waits for a kernel core before giving up (TCG can be slow to schedule a
/// vCPU on a loaded host, so this is generous).
const FORWARD_DEADLINE_MS: u64 = 5_000;
/// Empty polls before a kernel core halts until woken.
const POLLS_BEFORE_HALT: u32 = 20_000;
/// The waits on the hand-off (a kernel core's empty polls, an AC waiting for its result)
/// execute `pause` once per this many looks, not at every look. Under QEMU's multi-threaded
/// TCG `pause` leaves the translated code and the vCPU thread goes through its outer loop
/// (which takes QEMU's global lock) before it looks again, so a waiter pausing at every look
/// notices the other side late: measured, a forwarded null call took 1-6 µs with a pause per
/// look and 0.7-0.9 µs with one per 16 (docs/history/2026-11-22.md). On hardware a pause per
/// 16 short looks still keeps the spin polite.
const PAUSE_EVERY: u32 = 16;

/// One core's forwarding slot (see the module comment).
/// Each core's system-call forwarding slot (written by it as an AC, taken by a KC).
static FWD: CoreSlots<FwdSlot> = CoreSlots::new([const { CachePadded::new(FwdSlot::new()) }; MAX_CORES]);

pub struct FwdSlot {
    state: AtomicU32,
    server: AtomicUsize,
    nr: AtomicU64,
    args: [AtomicU64; 6],
    result: AtomicI64,
}

impl FwdSlot {
    pub const fn new() -> Self {
        FwdSlot {
            state: AtomicU32::new(EMPTY),
            server: AtomicUsize::new(NO_CORE),
            nr: AtomicU64::new(0),
            args: [const { AtomicU64::new(0) }; 6],
            result: AtomicI64::new(0),
        }
    }
}

pub fn role_of(core: usize) -> Option<u64> {
    percpu::get(core).map(|c| c.role.load(Ordering::Acquire))
}

fn is_kc(core: usize) -> bool {
    role_of(core) == Some(ROLE_KC)
}

/// The kernel core nearest to `core` (by locality, then index), if any.
fn nearest_kc(core: usize, except: usize) -> Option<usize> {
    let n = percpu::online_count();
    (0..n)
        .filter(|&k| k != except && is_kc(k))
        .min_by_key(|&k| (crate::topology::locality_get(core, k).map(|(l, d)| (l as u8, d)).unwrap_or((9, 255)), k))
}

/// Forward the calling AC's system call to a kernel core and wait for its result.
pub fn forward(nr: u64, args: [u64; 6]) -> Result<u64, Error> {
    let me = percpu::this();
    let slot = FWD.of(me);
    // A previous call that timed out may still be running on a slow kernel core.
    let free = crate::time::Deadline::after_ms(FORWARD_DEADLINE_MS);
    loop {
        match slot.state.load(Ordering::Acquire) {
            EMPTY | CANCELLED | DONE => break,
            _ if free.expired() => return Err(Error::Busy),
            _ => core::hint::spin_loop(),
        }
    }
    let mut server = slot.server.load(Ordering::Relaxed);
    if server == NO_CORE || !is_kc(server) {
        server = nearest_kc(me.index, NO_CORE).ok_or(Error::NoSuchCore)?;
        slot.server.store(server, Ordering::Relaxed);
    }
    slot.nr.store(nr, Ordering::Relaxed);
    for (s, a) in slot.args.iter().zip(args) {
        s.store(a, Ordering::Relaxed);
    }
    // SeqCst (an `xchg` on x86): the store must be visible before `polling` is read below, or
    // the kernel core could announce it stops polling, look at this slot before the store
    // leaves our store buffer, and halt while we read the stale `polling` and send no IPI
    // (its side is a SeqCst store of `polling`, then the look).
    slot.state.store(PENDING, Ordering::SeqCst);
    me.stats.syscalls_forwarded.fetch_add(1, Ordering::Relaxed);
    if let Some(kc) = percpu::get(server) {
        if !kc.polling.load(Ordering::Acquire) {
            apic::send_ipi(kc.apic_id, apic::VECTOR_WAKE);
        }
    }
    let deadline = crate::time::Deadline::after_ms(FORWARD_DEADLINE_MS);
    let mut spins = 0u32;
    loop {
        match slot.state.load(Ordering::Acquire) {
            DONE => {
                let r = slot.result.load(Ordering::Relaxed);
                slot.state.store(EMPTY, Ordering::Release);
                return abi::decode(r);
            }
            state => {
                // Shootdowns and other messages aimed at us are served while we wait.
                crate::smp::run_mailbox(me);
                spins += 1;
                if spins % PAUSE_EVERY != 0 {
                    continue;
                }
                // The clock once per PAUSE_EVERY looks: under TCG every `rdtsc` takes a lock
                // all vCPUs share, and an AC reading it at every look slowed the kernel core
                // serving it.
                if deadline.expired() {
                    if state == PENDING {
                        if slot.state.compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                            return Err(Error::Busy);
                        }
                        continue; // taken meanwhile: wait for it as for any taken request
                    }
                    if state == TAKEN {
                        return Err(Error::Busy);
                    }
                }
                core::hint::spin_loop();
            }
        }
    }
}

/// Announce that this core polls again (here and in every ring's header): the end of a
/// stop announced before a look that found work, or before a sleep.
fn poll_again(me: &'static PerCpu) {
    me.polling.store(true, Ordering::SeqCst);
    set_rings_state(me.index, None, 1);
}

/// Run one pending request from a core this kernel core serves. Returns true if one ran.
fn serve_one(me: &'static PerCpu, root: &mut LoadedRoot) -> bool {
    let n = percpu::online_count();
    for c in 0..n {
        let Some(client) = percpu::get(c) else { continue };
        let slot = FWD.of(client);
        if slot.state.load(Ordering::Acquire) != PENDING {
            continue;
        }
        let server = slot.server.load(Ordering::Relaxed);
        // Ours, or orphaned by a role change: adopt it.
        if server != me.index && server != NO_CORE && is_kc(server) {
            continue;
        }
        if slot.state.compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err() {
            continue;
        }
        slot.server.store(me.index, Ordering::Relaxed);
        let nr = slot.nr.load(Ordering::Relaxed);
        let args: [u64; 6] = core::array::from_fn(|i| slot.args[i].load(Ordering::Relaxed));
        let r = run_for(me, root, client, nr, args);
        slot.result.store(abi::encode(r), Ordering::Relaxed);
        slot.state.store(DONE, Ordering::Release);
        me.stats.syscalls_served.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    false
}

/// How a kernel core runs a system call it serves (a forwarded call, a ring request): the
/// system-call layer's `dispatch`, registered once at boot (`set_dispatch`), so this file,
/// which the system calls use, does not name them.
static DISPATCH: AtomicUsize = AtomicUsize::new(0);

/// Register the function that runs system call `nr` with its arguments on this core.
pub fn set_dispatch(dispatch: fn(u64, [u64; 6]) -> Result<u64, Error>) {
    DISPATCH.store(dispatch as usize, Ordering::Release);
}

/// Run system call `nr` through the registered dispatch (`NoSuchCall` before there is one).
#[inline]
fn run_call(nr: u64, args: [u64; 6]) -> Result<u64, Error> {
    let f = DISPATCH.load(Ordering::Acquire);
    if f == 0 {
        return Err(Error::NoSuchCall);
    }
    // SAFETY: only `fn(u64, [u64; 6]) -> Result<u64, Error>` values are stored in DISPATCH.
    let f: fn(u64, [u64; 6]) -> Result<u64, Error> = unsafe { core::mem::transmute::<usize, fn(u64, [u64; 6]) -> Result<u64, Error>>(f) };
    f(nr, args)
}

/// Run a system call in `client`'s context on this core: its root range, its shares.
#[inline(never)]
fn run_for(me: &'static PerCpu, root: &mut LoadedRoot, client: &'static PerCpu, nr: u64, args: [u64; 6]) -> Result<u64, Error> {
    // The client is blocked in `forward` until we mark the slot DONE, so its context stays
    // put; we read it through the acting-core indirection only.
    let Some(ar) = crate::context::running(client).root_for_server() else { return Err(Error::NotPermitted) };
    root.enter(me, &ar)?;
    me.act_for(client);
    cpu::enable_interrupts();
    me.injectable.store(nr as u8, Ordering::Relaxed);
    let r = run_call(nr, args);
    me.injectable.store(crate::percpu::NOT_IN_CALL, Ordering::Relaxed);
    cpu::disable_interrupts();
    me.stop_acting();
    r
}

/// The user root range a kernel core keeps loaded between requests. Loading a root (a CR3
/// write) is the dearest part of a hand-off under TCG, where it flushes the vCPU's whole
/// software TLB and its jump cache, so a kernel core serving the same range again and again
/// loads it once and stays in the range's `running` set, so TLB shootdowns for it reach the
/// core (which serves its mailbox while it polls). It holds no reference: the range's
/// lifetime is what its users make it. A range being freed sends an active message to the
/// cores in its `running` set (`evict_loaded_root`), and a kernel core leaves its loaded range
/// before it runs any active message, so the page tables never go while loaded. It also
/// leaves when it serves another range, before it halts, and when it stops being a kernel
/// core. Requests hold a reference to their range while they run.
struct LoadedRoot(Option<KWeak<crate::kobj::KObject>>);

impl LoadedRoot {
    /// Load `ar`'s root on this core unless it is loaded already.
    fn enter(&mut self, me: &'static PerCpu, ar: &crate::kobj::ObjRef) -> Result<(), Error> {
        if self.0.as_ref().is_some_and(|l| l.ptr_eq_strong(ar)) {
            return Ok(());
        }
        let range = ar.as_ar().map_err(|_| Error::NotPermitted)?;
        self.leave(me);
        range.running.insert(me.index);
        paging::load_root(range.table);
        self.0 = Some(KRef::downgrade(ar));
        Ok(())
    }

    /// Back to the kernel's root.
    fn leave(&mut self, me: &'static PerCpu) {
        let Some(old) = self.0.take() else { return };
        paging::load_kernel_root();
        // A range being freed (no reference left) is waiting for us to answer its message,
        // and its `running` set goes with it.
        if let Some(ar) = old.upgrade() {
            if let Ok(range) = ar.as_ar() {
                range.running.remove(me.index);
            }
            // The last reference frees the range: with interrupts on, as a context's end.
            let on = cpu::interrupts_enabled();
            cpu::enable_interrupts();
            drop(ar);
            if !on {
                cpu::disable_interrupts();
            }
        }
    }
}

/// Whether kernel cores tell the insncount plugin, after each pass of their loop, whether the
/// pass found work (`kcmark` on the kernel's command line; the benchmark matrix's counting
/// boots pass it). Off, the loop reads this once per entry and emits nothing; on, each pass
/// ends in one port write, so a kernel core's instructions split into work and empty polls
/// the way a service core's busy stretches do (docs/roles.md, "Counting a kernel core's work").
static MARK_PASSES: AtomicBool = AtomicBool::new(false);

/// Turn on the kernel cores' pass markers (`kcmark`).
pub fn mark_kernel_core_passes() {
    MARK_PASSES.store(true, Ordering::Relaxed);
}

/// The loop of a kernel core; returns when the core's role changes.
pub fn kernel_core_loop() {
    let me = percpu::this();
    let mut root = LoadedRoot(None);
    let mut buf = RingBuffers { taken: [Taken::default(); TAKE_MAX], results: [0; TAKE_MAX], shares: Vec::new() };
    // Before the first look at the role (both SeqCst, as in `set_role`): either `set_role`
    // sees this flag and waits for the loop to end, or the loop sees the new role.
    me.in_kernel_loop.store(true, Ordering::SeqCst);
    me.polling.store(true, Ordering::Release);
    set_rings_state(me.index, Some(RING_ATTACHED), 1);
    crate::dev::kernel_core_running(me.index, true);
    let mut idle = 0u32;
    // With devices: the stretch of empty polls before sleeping, in TSC cycles, cut short
    // when the host deschedules this core while it polls (percore::poll).
    let mut window = percore::poll::PollWindow::new(0, crate::time::tsc_per_ms());
    // `kcmark`: the previous pass found work (set where a pass finds some); each pass starts
    // by reporting the one before it, so every instruction is in the pass it belongs to.
    let mark = MARK_PASSES.load(Ordering::Relaxed);
    let mut worked = false;
    while me.role.load(Ordering::SeqCst) == ROLE_KC {
        if mark {
            cpu::insn_pass_marker(core::mem::take(&mut worked));
        }
        cpu::disable_interrupts();
        // The loaded range goes before a message is answered (`evict_loaded_root` counts on
        // it). Messages are rare here (shootdowns, halts, checks); the next request loads the
        // range again. The look and the run are one step: a message posted between a look
        // that found nothing and a later `run_mailbox` would be answered with the range
        // still loaded, and the range's page tables freed under this core (the intermittent
        // stop of roletest, docs/testing.md).
        let answered = crate::smp::mailbox_pending(me) && {
            root.leave(me);
            buf.release();
            crate::smp::run_mailbox(me)
        };
        let devices = crate::dev::poll_attached(me.index);
        if answered | serve_one(me, &mut root) | serve_rings(me, &mut root, &mut buf) | (devices == Some(true)) {
            idle = 0;
            window.worked();
            worked = true;
            continue;
        }
        // With devices: adaptive polling. Poll every attached driver without pause while work
        // keeps coming; once all have been idle for the shortest of their stretches
        // (`Driver::sleep_after_us`: a NIC's `CONF_NET_KC_IDLE`, a disk's `blk::KC_IDLE_US`),
        // arm every driver's interrupt and halt (a one-shot timer bounds each halt, the
        // devices' interrupts and wake IPIs end it early), looking at the devices once per
        // wake-up until one has work again. A driver that asks for pure polling (a NIC set to
        // 0) keeps the core polling without pause (Corey's kernel cores poll their devices and
        // take no interrupts).
        let mut device_sleep = false;
        if devices.is_some() {
            let Some(after_us) = crate::dev::sleep_after_us(me.index) else { continue };
            idle = idle.wrapping_add(1);
            if idle % PAUSE_EVERY != 0 {
                continue;
            }
            core::hint::spin_loop();
            window.set_poll(after_us.saturating_mul(crate::time::tsc_per_ms()) / 1000);
            if !window.empty(cpu::rdtsc()) {
                continue;
            }
            device_sleep = true;
        } else {
            idle += 1;
            if idle < POLLS_BEFORE_HALT {
                if idle % PAUSE_EVERY == 0 {
                    core::hint::spin_loop();
                }
                continue;
            }
        }
        // Nothing runs in a user range while we sleep: leave it (no shootdowns to answer).
        // Before the announcement: leaving may take interrupts, and a wake IPI taken after
        // it would be lost to the halt below.
        root.leave(me);
        buf.release();
        // Announce that we stop polling (here and in every ring's header), then look once
        // more before sleeping: a request posted in between either is seen here or comes
        // with a wake IPI (a ring's doorbell).
        me.polling.store(false, Ordering::SeqCst);
        set_rings_state(me.index, None, 0);
        if serve_one(me, &mut root) | serve_rings(me, &mut root, &mut buf) {
            poll_again(me);
            idle = 0;
            window.worked();
            worked = true;
            continue;
        }
        if root.0.is_some() {
            // The last look loaded a range (and found nothing): poll on.
            poll_again(me);
            idle = 0;
            continue;
        }
        // The role once more, with interrupts off until the halt: `set_role` stores the new role
        // and then sends a wake IPI, and an IPI taken while interrupts were on since the
        // loop's top (leaving a range enables them) would otherwise be spent before this halt,
        // which then lasts until some other interrupt (`role_change_under_load` hung so).
        if me.role.load(Ordering::SeqCst) != ROLE_KC {
            poll_again(me);
            continue;
        }
        // The devices' interrupts end the sleep when a frame comes or a request completes
        // (armed now, after the last look; a completion in between is found here and the core
        // polls on). Programs putting frames on a NIC's TX ring (Dedicated) ring the doorbell
        // once they see the announcement; a frame put before it is found by the look that
        // follows.
        if device_sleep {
            crate::dev::set_asleep_attached(me.index, true);
        }
        let armed = if !device_sleep {
            Armed::NoLine
        } else if crate::dev::poll_attached(me.index) == Some(true) {
            Armed::Work
        } else {
            crate::dev::arm_attached(me.index, me.apic_id)
        };
        if armed == Armed::Work {
            // Some drivers may have been armed before one found work.
            crate::dev::disarm_attached(me.index);
            crate::dev::set_asleep_attached(me.index, false);
            poll_again(me);
            idle = 0;
            window.worked();
            worked = true;
            continue;
        }
        let periodic = device_sleep && crate::arch::x86_64::apic::timer_hz() != 0;
        if device_sleep && !periodic {
            apic::timer_oneshot_us(crate::dev::sleep_bound_us(me.index, armed));
        }
        crate::smp::halt(me);
        if device_sleep {
            cpu::disable_interrupts();
            crate::dev::set_asleep_attached(me.index, false);
            // Every line armed (with `NoLine`, the drivers that have one may be armed).
            crate::dev::disarm_attached(me.index);
            if !periodic {
                apic::timer_periodic_us(0);
            }
        }
        poll_again(me);
        // Asleep with devices, the next empty poll sleeps again at once (the window's
        // stretch goes on); work found starts a new one.
        window.woke();
        idle = 0;
    }
    if window.preemptions() > 0 {
        // Evidence for docs/net.md ("A busy host"): how often the host took this core away
        // in the middle of a polling stretch.
        crate::kprintln!("roles: kernel core {}: the host descheduled it {} times while it polled (it then slept at once for 100 ms)", me.index, window.preemptions());
    }
    if mark {
        cpu::insn_pass_marker(worked);
    }
    root.leave(me);
    buf.release();
    me.polling.store(false, Ordering::Release);
    // Requests not taken stay in the rings; their submitters see the status and cancel.
    set_rings_state(me.index, Some(RING_STOPPED), 0);
    crate::dev::kernel_core_running(me.index, false);
    me.in_kernel_loop.store(false, Ordering::Release);
}

// ---- Syscall rings (Corey's syscall pseudo-device, kobj/device.rs)

/// Serve every ring attached to this kernel core once. Returns true if any request ran.
/// An empty poll looks at each ring's head slot under the list lock and takes nothing else:
/// no reference, no `serving` flag, no buffers.
fn serve_rings(me: &'static PerCpu, root: &mut LoadedRoot, buf: &mut RingBuffers) -> bool {
    let mut did = false;
    let mut from = 0;
    loop {
        let ring = {
            let list = rings_of(me.index).lock();
            let Some(i) = (from..list.len()).find(|&i| list[i].has_request()) else { break };
            from = i + 1;
            list[i].clone()
        };
        did |= serve_ring(me, root, buf, &ring);
    }
    did
}

/// Calls a ring request may not make: they act on a core (its pcores, its share set, its
/// private shares), and a ring's requests run for no core (see `abi::RingSlot`).
fn ring_refuses(nr: u64, args: &[u64; 6]) -> Option<Error> {
    match nr {
        nr::PCORE_ALLOC | nr::PCORE_CURRENT | nr::PCORE_RUN | nr::PCORE_SET_INTERVAL | nr::PCORE_HALT | nr::PCORE_SET_ROLE | nr::SELF_DROP | nr::SELF_SHARES | nr::PPC_BIND | nr::PPC_UNBIND | nr::WAIT => {
            Some(Error::NotPermitted)
        }
        nr::SHARE_ALLOC if args[4] & abi::SHARE_PRIVATE != 0 => Some(Error::NotPermitted),
        // A batch would run its entries without these checks; the ring is a batch already.
        nr::SYSCALL_BATCH => Some(Error::InvalidArgument),
        _ => None,
    }
}

/// Take a batch of requests from one ring and run them in the ring's context.
#[inline(never)]
fn serve_ring(me: &'static PerCpu, root: &mut LoadedRoot, buf: &mut RingBuffers, ring: &KRef<Ring>) -> bool {
    if ring.dead.load(Ordering::Acquire) || ring.status.load(Ordering::Acquire) == RING_BROKEN {
        return false;
    }
    if ring.serving.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        return false; // another kernel core has it (it was just moved)
    }
    let did = serve_ring_locked(me, root, buf, ring);
    ring.serving.store(false, Ordering::Release);
    did
}

/// A kernel core's room for one batch of ring requests and their results, made once: an
/// array of `TAKE_MAX` requests is 4 KiB, and filling it on every poll cost more than the
/// requests it carried.
pub struct RingBuffers {
    taken: [Taken; TAKE_MAX],
    results: [i64; TAKE_MAX],
    /// The share list of the identity a batch runs with, kept (empty) between batches so a
    /// batch allocates nothing. Let go with the loaded root (`release`): a program's exit
    /// check counts heap objects after asking every core for an answer.
    shares: Vec<crate::kobj::ObjRef>,
}

impl RingBuffers {
    fn release(&mut self) {
        self.shares = Vec::new();
    }
}

fn serve_ring_locked(me: &'static PerCpu, root: &mut LoadedRoot, buf: &mut RingBuffers, ring: &KRef<Ring>) -> bool {
    let RingBuffers { taken, results, shares } = buf;
    // One take stops at the end of a page or of the ring; a batch goes on across them (a
    // batch of 32 in a 64-slot ring straddles the first page's end), so it is one batch.
    let mut parts = [(0u64, 0usize); 4]; // (first sequence number, count) of each take
    let (mut nparts, mut n, mut failed) = (0, 0, false);
    while nparts < parts.len() && n < TAKE_MAX {
        let first = ring.head.load(Ordering::Relaxed);
        match ring.take(&mut taken[n..]) {
            Ok(0) => break,
            Ok(k) => {
                parts[nparts] = (first, k);
                nparts += 1;
                n += k;
                if k < ring.run_length(first) {
                    break; // stopped at a slot not submitted: nothing more now
                }
            }
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    if n > 0 {
        let r = run_ring_batch(me, root, shares, ring, &taken[..n], &mut results[..n]);
        if let Err(e) = r {
            results[..n].fill(abi::encode(Err(e)));
        }
        let mut at = 0;
        for &(first, k) in &parts[..nparts] {
            failed |= ring.complete(first, &results[at..at + k]).is_err();
            at += k;
        }
        me.stats.syscalls_served.fetch_add(n as u64, Ordering::Relaxed);
    }
    if failed {
        broken(ring);
    }
    n > 0
}

fn broken(ring: &KRef<Ring>) {
    let core = ring.attached.load(Ordering::Acquire);
    let _list = (core != NOT_ATTACHED).then(|| rings_of(core as usize).lock());
    ring.status.store(RING_BROKEN, Ordering::Release);
    let _ = ring.publish();
}

/// Run taken requests with the ring's identity: its address range and shares, on this core.
/// `Err` (for every request) if the ring's address range is gone.
#[inline(never)]
fn run_ring_batch(
    me: &'static PerCpu,
    root: &mut LoadedRoot,
    spare: &mut Vec<crate::kobj::ObjRef>,
    ring: &Ring,
    taken: &[Taken],
    results: &mut [i64],
) -> Result<(), Error> {
    let root_ar = ring.root_ar.upgrade().ok_or(Error::NotPermitted)?;
    let mut shares = core::mem::take(spare);
    shares.try_reserve_exact(ring.shares.len()).map_err(|_| Error::NoMemory)?;
    shares.extend(ring.shares.iter().filter_map(|w| w.upgrade()));
    root_ar.as_ar()?;
    // The ring has no root share or pcore of its own: its segment stands in for both (it is
    // neither a share nor a pcore, so naming it as one fails).
    let ctx = crate::context::Context::new(ring.seg.clone(), shares, root_ar.clone(), ring.seg.clone(), 0, 0, [0; 3]);
    root.enter(me, &root_ar)?;
    cpu::enable_interrupts();
    let served = crate::context::serve_as(ctx, || {
        // Allocation failures may be injected into the calls (nothing else here allocates).
        for (t, r) in taken.iter().zip(results.iter_mut()) {
            let res = match t.nr {
                None => Err(Error::InvalidArgument),
                Some(nr) => match ring_refuses(nr, &t.args) {
                    Some(e) => Err(e),
                    None => {
                        me.injectable.store(nr as u8, Ordering::Relaxed);
                        let r = run_call(nr, t.args);
                        me.injectable.store(crate::percpu::NOT_IN_CALL, Ordering::Relaxed);
                        r
                    }
                },
            };
            *r = abi::encode(res);
        }
    });
    // Dropping the identity may free objects: with interrupts on, as a context's end does.
    let r = served.map(|(_, mut ctx)| {
        let mut list = core::mem::take(&mut ctx.shares);
        drop(ctx);
        list.clear();
        *spare = list;
    });
    cpu::disable_interrupts();
    r
}

/// Change the role of `core`, which must be idle. Safe while other cores run: requests to a
/// kernel core that stops being one are adopted by another. A kernel core that leaves its
/// role has left its polling loop when this returns: its devices and rings are no longer
/// polled, so a caller may queue work that it expects nobody to take (before, the loop could
/// finish its current turn after the return and send a frame queued just then: the
/// intermittent `net_kernel_core_leaves_and_returns` failure).
pub fn set_role(core: usize, role: u64) -> Result<(), Error> {
    if !matches!(role, ROLE_XC | ROLE_AC | ROLE_KC | ROLE_TC) {
        return Err(Error::InvalidArgument);
    }
    let target = percpu::get(core).filter(|c| c.online.load(Ordering::Acquire)).ok_or(Error::NoSuchCore)?;
    if core == 0 && role == ROLE_KC {
        return Err(Error::NotPermitted); // core 0 runs init and the boot-time work
    }
    // A busy core's role changes only at its own request (its context switching between
    // XC, TC and AC for its following system calls); other cores must wait until it is idle.
    let own = core == percpu::acting().index;
    if target.busy.load(Ordering::Acquire) && role != target.role.load(Ordering::Acquire) && (!own || role == ROLE_KC) {
        return Err(Error::Busy);
    }
    let old = target.role.load(Ordering::Acquire);
    if old == ROLE_KC && role != ROLE_KC {
        // The last kernel core may not leave while an AC runs.
        let acs_running = (0..percpu::online_count()).any(|c| role_of(c) == Some(ROLE_AC) && percpu::get(c).is_some_and(|p| p.busy.load(Ordering::Acquire)));
        if acs_running && nearest_kc(core, core).is_none() {
            return Err(Error::Busy);
        }
    }
    if role == ROLE_AC && nearest_kc(core, core).is_none() {
        return Err(Error::NoSuchCore);
    }
    target.role.store(role, Ordering::SeqCst);
    if core != percore::cpu_id() {
        // Wake it so its idle loop notices (a kernel core leaves its polling loop, an idle
        // core enters it).
        apic::send_ipi(target.apic_id, apic::VECTOR_WAKE);
        if old == ROLE_KC && role != ROLE_KC {
            // Wait for the loop's last turn to end. Answer our own messages meanwhile: that
            // turn may be waiting on us (a shootdown). Stop waiting if the core is made a
            // kernel core again by someone else.
            let me = percpu::this();
            while target.in_kernel_loop.load(Ordering::SeqCst) && target.role.load(Ordering::Acquire) != ROLE_KC {
                crate::smp::run_mailbox(me);
                core::hint::spin_loop();
            }
        }
    }
    Ok(())
}

/// Apply `roles=kc:1,ac:2-3,tc:4` from the command line, all or nothing: the whole spec is
/// parsed and checked first (known roles, cores online, no core named twice), then kernel
/// cores are made first (so application-core entries find one); if any core refuses its role,
/// the cores already changed go back to XC. Returns the one-line reason when nothing was
/// applied (main prints it as the boot's error line).
pub fn apply_boot_policy(spec: &str) -> Result<(), alloc::string::String> {
    let online = percpu::online_count();
    let mut entries: alloc::vec::Vec<(u64, usize)> = alloc::vec::Vec::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (name, range) = item.split_once(':').ok_or_else(|| alloc::format!("`{item}` is not ROLE:CORES"))?;
        let role = match name {
            "xc" => ROLE_XC,
            "ac" => ROLE_AC,
            "kc" => ROLE_KC,
            "tc" => ROLE_TC,
            _ => return Err(alloc::format!("unknown role `{name}` (xc, tc, ac, kc)")),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a, b),
            None => (range, range),
        };
        let a: usize = a.parse().map_err(|_| alloc::format!("bad core `{a}` in `{item}`"))?;
        let b: usize = b.parse().map_err(|_| alloc::format!("bad core `{b}` in `{item}`"))?;
        if a > b || b >= online {
            return Err(alloc::format!("cores {a}-{b} are not all online ({online} cores: 0-{})", online.saturating_sub(1)));
        }
        for c in a..=b {
            if entries.iter().any(|&(_, e)| e == c) {
                return Err(alloc::format!("core {c} is named twice"));
            }
            entries.push((role, c));
        }
    }
    if entries.is_empty() {
        return Err("no ROLE:CORES entry".into());
    }
    entries.sort_by_key(|&(r, c)| (if r == ROLE_KC { 0 } else { 1 }, c));
    for (i, &(role, c)) in entries.iter().enumerate() {
        if let Err(e) = set_role(c, role) {
            // Undo in reverse (application cores before the kernel cores they need).
            for &(_, done) in entries[..i].iter().rev() {
                let _ = set_role(done, ROLE_XC);
            }
            return Err(alloc::format!("core {c} cannot be {}: {}", abi::role_name(role), e.as_str()));
        }
    }
    Ok(())
}

/// The idle loop of every core without a user context: run posted jobs, start a context
/// when one is handed to this core, otherwise sleep until an interrupt.
pub fn idle_loop() -> ! {
    let area = percpu::this();
    loop {
        // Free what this core retired from shared shares (with interrupts on: a freed object
        // may wait for other cores).
        crate::kobj::share::reclaim_poll();
        cpu::disable_interrupts();
        if smp::run_mailbox(area) {
            continue;
        }
        if area.role.load(Ordering::Acquire) == abi::ROLE_KC {
            kernel_core_loop();
            continue;
        }
        if crate::context::run_pending() {
            continue;
        }
        // Atomic with respect to the wake IPI: a job posted after the checks above raises an
        // interrupt that ends the halt immediately.
        smp::halt(area);
    }
}
